//! Regions: large anonymous mappings that pools carve into chunks.
//!
//! A region is mapped once, optionally backed by huge pages, optionally locked in RAM, and
//! optionally *warmed up*: every page is written once, by several threads in parallel, before the
//! run starts. The first write to an anonymous page makes the kernel allocate it and build its
//! page-table entry under the process' memory-map lock, which costs microseconds (hundreds on a
//! busy server, says the SW ROD talk); a warmed region never pays it on the data path.
//!
//! Every option that the system may refuse (huge pages, `mlock`) falls back or fails with a
//! reason written into the [`WarmupReport`], so an operator sees why a run is slower than planned.

use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use crate::error::Error;

/// Size of a base page on the platforms rodeo supports.
pub const BASE_PAGE: usize = 4096;
/// Size of a (PMD-level) huge page on x86-64 and aarch64 with 4 KiB base pages.
pub const HUGE_PAGE: usize = 2 << 20;

/// Which pages back a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Base pages (4 KiB).
    #[default]
    None,
    /// Transparent huge pages: a 2 MiB-aligned mapping with `madvise(MADV_HUGEPAGE)`; the kernel
    /// may still use base pages when it has no free huge page.
    Transparent,
    /// Explicit huge pages from the `vm.nr_hugepages` pool (`MAP_HUGETLB`); falls back to base
    /// pages with a reason when the pool is empty.
    Explicit,
}

/// Whether a region is locked in RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mlock {
    /// Do not lock.
    #[default]
    Off,
    /// Try to lock; a failure is written into the report and the region is used unlocked.
    BestEffort,
    /// Lock or fail with [`Error::Mlock`].
    Required,
}

/// How regions are mapped and prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionOptions {
    /// Write every page once when the region is mapped (warm-up).
    pub prefault: bool,
    /// Threads that warm a region in parallel (at least 1).
    pub warmup_threads: usize,
    /// Page size backing the region.
    pub huge_pages: HugePages,
    /// Lock the region in RAM.
    pub mlock: Mlock,
}

impl Default for RegionOptions {
    fn default() -> Self {
        RegionOptions {
            prefault: true,
            warmup_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            huge_pages: HugePages::None,
            mlock: Mlock::Off,
        }
    }
}

/// What preparing regions cost and which options took effect; summed over the regions of a pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WarmupReport {
    /// Regions mapped.
    pub regions: u64,
    /// Bytes mapped.
    pub bytes: u64,
    /// Base pages written by the warm-up (0 without `prefault`).
    pub pages_touched: u64,
    /// Threads that did the warm-up (the largest used for any region).
    pub threads: usize,
    /// Wall-clock time of the warm-ups (mapping + touching + locking).
    pub elapsed: Duration,
    /// Huge pages were asked for and the mapping got them (explicit) or was advised (transparent).
    pub huge_pages: bool,
    /// Why huge pages were not used although asked for.
    pub huge_pages_fallback: Option<String>,
    /// Bytes locked in RAM.
    pub mlocked_bytes: u64,
    /// Why `mlock` failed (with [`Mlock::BestEffort`]).
    pub mlock_error: Option<String>,
}

impl WarmupReport {
    /// Adds the report of one more region.
    pub fn merge(&mut self, other: &WarmupReport) {
        self.regions += other.regions;
        self.bytes += other.bytes;
        self.pages_touched += other.pages_touched;
        self.threads = self.threads.max(other.threads);
        self.elapsed += other.elapsed;
        self.huge_pages |= other.huge_pages;
        if other.huge_pages_fallback.is_some() {
            self.huge_pages_fallback
                .clone_from(&other.huge_pages_fallback);
        }
        self.mlocked_bytes += other.mlocked_bytes;
        if other.mlock_error.is_some() {
            self.mlock_error.clone_from(&other.mlock_error);
        }
    }

    /// Warm-up speed in nanoseconds per touched page (0 when nothing was touched).
    pub fn ns_per_page(&self) -> f64 {
        if self.pages_touched == 0 {
            0.0
        } else {
            self.elapsed.as_nanos() as f64 / self.pages_touched as f64
        }
    }
}

/// An anonymous private mapping, unmapped on drop.
pub struct Region {
    /// Start of the usable part (aligned as asked).
    base: NonNull<u8>,
    /// Usable length.
    len: usize,
    /// Start and length of the whole mapping, for `munmap`.
    map_base: NonNull<u8>,
    map_len: usize,
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("base", &self.base)
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: a Region is an owned range of memory, like a Box<[u8]>; it holds no thread-bound state.
unsafe impl Send for Region {}
// SAFETY: &Region only hands out the base address and length; writes through it are the pools'
// business and are synchronised there.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `len` bytes (rounded up to whole pages) and prepares them as `opts` say.
    pub fn map(len: usize, opts: &RegionOptions) -> Result<(Region, WarmupReport), Error> {
        if len == 0 {
            return Err(Error::Config("a region cannot be empty".into()));
        }
        let start = Instant::now();
        let mut report = WarmupReport {
            regions: 1,
            ..WarmupReport::default()
        };
        let region = match opts.huge_pages {
            HugePages::None => Region::map_plain(round_up(len, BASE_PAGE), BASE_PAGE)?,
            HugePages::Explicit => {
                let hlen = round_up(len, HUGE_PAGE);
                match map_anon(hlen, libc::MAP_HUGETLB) {
                    Ok(p) => {
                        report.huge_pages = true;
                        Region {
                            base: p,
                            len: hlen,
                            map_base: p,
                            map_len: hlen,
                        }
                    }
                    Err(e) => {
                        report.huge_pages_fallback = Some(format!(
                            "MAP_HUGETLB failed ({e}); the explicit huge-page pool is probably \
                             empty (HugePages_Total in /proc/meminfo, sysctl vm.nr_hugepages); \
                             using 4 KiB pages"
                        ));
                        Region::map_plain(round_up(len, BASE_PAGE), BASE_PAGE)?
                    }
                }
            }
            HugePages::Transparent => {
                let r = Region::map_plain(round_up(len, HUGE_PAGE), HUGE_PAGE)?;
                // SAFETY: the range is exactly the usable part of a mapping we own.
                let rc =
                    unsafe { libc::madvise(r.base.as_ptr().cast(), r.len, libc::MADV_HUGEPAGE) };
                if rc == 0 {
                    report.huge_pages = true;
                    if let Some(reason) = thp_disabled_reason() {
                        report.huge_pages = false;
                        report.huge_pages_fallback = Some(reason);
                    }
                } else {
                    report.huge_pages_fallback = Some(format!(
                        "madvise(MADV_HUGEPAGE) failed ({}); transparent huge pages are not \
                         available in this kernel; using 4 KiB pages",
                        io::Error::last_os_error()
                    ));
                }
                r
            }
        };
        report.bytes = region.len as u64;
        if opts.prefault {
            let threads = opts.warmup_threads.max(1);
            report.pages_touched = region.touch_pages(threads);
            report.threads = threads;
        }
        match opts.mlock {
            Mlock::Off => {}
            Mlock::BestEffort | Mlock::Required => {
                // SAFETY: the range is the usable part of a mapping we own.
                let rc = unsafe { libc::mlock(region.base.as_ptr().cast(), region.len) };
                if rc == 0 {
                    report.mlocked_bytes = region.len as u64;
                } else {
                    let source = io::Error::last_os_error();
                    let limit = memlock_limit();
                    if opts.mlock == Mlock::Required {
                        return Err(Error::Mlock {
                            bytes: region.len,
                            limit,
                            source,
                        });
                    }
                    report.mlock_error = Some(format!(
                        "mlock of {} bytes failed ({source}); RLIMIT_MEMLOCK soft limit: {limit}",
                        region.len
                    ));
                }
            }
        }
        report.elapsed = start.elapsed();
        Ok((region, report))
    }

    /// Maps `len` bytes (a multiple of `align`) starting at an `align`-aligned address.
    fn map_plain(len: usize, align: usize) -> Result<Region, Error> {
        if align <= BASE_PAGE {
            let p = map_anon(len, 0).map_err(|source| Error::Map { bytes: len, source })?;
            return Ok(Region {
                base: p,
                len,
                map_base: p,
                map_len: len,
            });
        }
        // Over-map by `align` and use the aligned middle; the slack stays mapped but never
        // touched, so it costs address space only.
        let map_len = len + align;
        let p = map_anon(map_len, 0).map_err(|source| Error::Map {
            bytes: map_len,
            source,
        })?;
        let addr = p.as_ptr() as usize;
        let offset = round_up(addr, align) - addr;
        // SAFETY: offset < align, so base + len stays inside the mapping of len + align bytes.
        let base = unsafe { p.as_ptr().add(offset) };
        Ok(Region {
            // SAFETY: base is inside a successful mapping, hence not null.
            base: unsafe { NonNull::new_unchecked(base) },
            len,
            map_base: p,
            map_len,
        })
    }

    /// Writes one byte to every base page, in `threads` parallel threads; returns the pages touched.
    fn touch_pages(&self, threads: usize) -> u64 {
        let pages = self.len / BASE_PAGE;
        let per = pages.div_ceil(threads);
        let base = self.base.as_ptr() as usize;
        std::thread::scope(|s| {
            for t in 0..threads {
                let first = t * per;
                let last = ((t + 1) * per).min(pages);
                if first >= last {
                    continue;
                }
                let touch = move || {
                    for page in first..last {
                        let p = (base + page * BASE_PAGE) as *mut u8;
                        // SAFETY: p is inside this region (page < len / BASE_PAGE), which stays
                        // mapped while the scope runs; nobody else uses the region yet, and
                        // each thread writes its own pages only.
                        unsafe { std::ptr::write_volatile(p, 0) };
                    }
                };
                // If no thread can be started, the caller's thread does the work.
                if std::thread::Builder::new()
                    .name("rodeo-warmup".into())
                    .spawn_scoped(s, touch)
                    .is_err()
                {
                    touch();
                }
            }
        });
        pages as u64
    }

    /// Start of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: map_base/map_len describe exactly the mapping made in `map`; the pool that owns
        // this region drops it only when no chunk handle can reach it any more.
        unsafe {
            libc::munmap(self.map_base.as_ptr().cast(), self.map_len);
        }
    }
}

/// Maps `len` bytes of anonymous, private, read-write memory with extra `flags`.
fn map_anon(len: usize, flags: libc::c_int) -> io::Result<NonNull<u8>> {
    // SAFETY: an anonymous mapping at an address of the kernel's choosing aliases nothing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned a null pointer"))
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// A reason when the kernel ignores `MADV_HUGEPAGE` (THP set to `never`).
fn thp_disabled_reason() -> Option<String> {
    let setting = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    setting.contains("[never]").then(|| {
        "transparent huge pages are disabled (/sys/kernel/mm/transparent_hugepage/enabled is \
         [never]); using 4 KiB pages"
            .to_string()
    })
}

/// The soft `RLIMIT_MEMLOCK`, as text.
fn memlock_limit() -> String {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and reads nothing else.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if rc != 0 {
        "unknown".into()
    } else if lim.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        format!("{} bytes", lim.rlim_cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_touch_and_unmap() {
        let opts = RegionOptions {
            prefault: true,
            warmup_threads: 2,
            ..RegionOptions::default()
        };
        let (r, rep) = Region::map(10 * BASE_PAGE + 1, &opts).unwrap();
        assert_eq!(r.len(), 11 * BASE_PAGE);
        assert_eq!(rep.pages_touched, 11);
        assert_eq!(r.as_ptr() as usize % BASE_PAGE, 0);
    }

    #[test]
    fn transparent_is_aligned_or_explains() {
        let opts = RegionOptions {
            prefault: false,
            huge_pages: HugePages::Transparent,
            ..RegionOptions::default()
        };
        let (r, rep) = Region::map(HUGE_PAGE, &opts).unwrap();
        assert_eq!(r.as_ptr() as usize % HUGE_PAGE, 0);
        assert!(rep.huge_pages || rep.huge_pages_fallback.is_some());
    }

    #[test]
    fn explicit_falls_back_with_reason() {
        let opts = RegionOptions {
            prefault: true,
            warmup_threads: 1,
            huge_pages: HugePages::Explicit,
            ..RegionOptions::default()
        };
        let (r, rep) = Region::map(HUGE_PAGE, &opts).unwrap();
        assert!(r.len() >= HUGE_PAGE);
        assert!(rep.huge_pages || rep.huge_pages_fallback.is_some());
    }

    #[test]
    fn mlock_best_effort_reports() {
        let opts = RegionOptions {
            prefault: false,
            mlock: Mlock::BestEffort,
            ..RegionOptions::default()
        };
        let (_r, rep) = Region::map(BASE_PAGE, &opts).unwrap();
        assert!(rep.mlocked_bytes == BASE_PAGE as u64 || rep.mlock_error.is_some());
        // Far above any default RLIMIT_MEMLOCK for an unprivileged user: must fail with context
        // unless we run as root with an unlimited limit.
        let big = RegionOptions {
            mlock: Mlock::Required,
            ..opts
        };
        match Region::map(64 << 20, &big) {
            Ok((_r, rep)) => assert_eq!(rep.mlocked_bytes, 64 << 20),
            Err(e) => assert!(e.to_string().contains("RLIMIT_MEMLOCK"), "{e}"),
        }
    }
}
