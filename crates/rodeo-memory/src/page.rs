//! [`PagePool`] and [`SuperpagePool`]: the readout's buffers, shared via `Arc`, with handles that
//! travel between threads and give their memory back when dropped.
//!
//! # Superpages: a separate pool, not runs of pages
//!
//! A DMA-style producer wants a contiguous run of pages. Carving runs out of the page pool would
//! need a search for free neighbours (a bitmap scan under contention, or a lock) and would
//! fragment the page pool. rodeo instead gives superpages their own pool of fixed-size
//! contiguous buffers carved from their own region: the same lock-free core as pages, no lock
//! anywhere, no fragmentation, and the size is a configuration choice per DMA channel (the ALICE
//! readout card works the same way: superpages of one size per channel). The cost is that page
//! and superpage memory are budgeted separately.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{AllocError, Error};
use crate::raw::{RawPool, Shape};
use crate::region::{RegionOptions, WarmupReport};
use crate::stats::PoolStats;
use crate::sync::Ordering;

/// How a [`PagePool`] is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagePoolConfig {
    /// Size of a page in bytes (a non-zero multiple of 8; default 4096).
    pub page_bytes: usize,
    /// Pages in the pool; all are mapped (and warmed) when the pool is created.
    pub pages: usize,
    /// How the region is mapped and warmed.
    pub region: RegionOptions,
}

impl Default for PagePoolConfig {
    fn default() -> Self {
        PagePoolConfig {
            page_bytes: 4096,
            pages: 16384,
            region: RegionOptions::default(),
        }
    }
}

/// A fixed pool of pages in one pre-allocated region. Cloning shares the pool.
#[derive(Clone)]
pub struct PagePool {
    raw: Arc<RawPool>,
}

impl fmt::Debug for PagePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.raw.fmt(f)
    }
}

impl PagePool {
    /// Maps (and warms) the whole pool.
    pub fn new(config: PagePoolConfig) -> Result<PagePool, Error> {
        let shape = Shape::new(config.page_bytes, config.pages, 1, 1, config.region)?;
        Ok(PagePool {
            raw: Arc::new(RawPool::new(shape)?),
        })
    }

    /// Takes a page, or [`AllocError::Exhausted`] when all are in use (apply back-pressure).
    ///
    /// Lock-free: a CAS on the free list (or the bump index) and an `Arc` reference-count
    /// increment, so that a page outlives every clone of the pool.
    #[inline]
    pub fn alloc(&self) -> Result<PageHandle, AllocError> {
        alloc_block(&self.raw).map(PageHandle)
    }

    /// Size of a page.
    pub fn page_bytes(&self) -> usize {
        self.raw.chunk_bytes()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PoolStats {
        self.raw.stats()
    }

    /// What mapping and warming the region cost.
    pub fn warmup_report(&self) -> WarmupReport {
        self.raw.warmup_report()
    }
}

/// How a [`SuperpagePool`] is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuperpagePoolConfig {
    /// Size of a superpage in bytes (e.g. 1 MiB; a non-zero multiple of 8, best a multiple of
    /// the page size).
    pub superpage_bytes: usize,
    /// Superpages in the pool; all are mapped (and warmed) when the pool is created.
    pub superpages: usize,
    /// How the region is mapped (huge pages suit superpages well).
    pub region: RegionOptions,
}

/// A fixed pool of contiguous superpages of one size, for DMA-style producers. Cloning shares
/// the pool. See the module docs for why this is a separate pool.
#[derive(Clone)]
pub struct SuperpagePool {
    raw: Arc<RawPool>,
}

impl fmt::Debug for SuperpagePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.raw.fmt(f)
    }
}

impl SuperpagePool {
    /// Maps (and warms) the whole pool.
    pub fn new(config: SuperpagePoolConfig) -> Result<SuperpagePool, Error> {
        let shape = Shape::new(
            config.superpage_bytes,
            config.superpages,
            1,
            1,
            config.region,
        )?;
        Ok(SuperpagePool {
            raw: Arc::new(RawPool::new(shape)?),
        })
    }

    /// Takes a superpage, or [`AllocError::Exhausted`] when all are in use.
    #[inline]
    pub fn alloc(&self) -> Result<Superpage, AllocError> {
        alloc_block(&self.raw).map(Superpage)
    }

    /// Size of a superpage.
    pub fn superpage_bytes(&self) -> usize {
        self.raw.chunk_bytes()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PoolStats {
        self.raw.stats()
    }

    /// What mapping and warming the region cost.
    pub fn warmup_report(&self) -> WarmupReport {
        self.raw.warmup_report()
    }
}

fn alloc_block(raw: &Arc<RawPool>) -> Result<Block, AllocError> {
    let idx = raw.alloc()?;
    raw.counters().allocations.fetch_add(1, Ordering::Relaxed);
    let ptr = raw.addr(idx);
    Ok(Block {
        pool: Arc::clone(raw),
        idx,
        // SAFETY: addr() of an index handed out by this pool lies inside a mapped region,
        // never at address 0.
        ptr: unsafe { NonNull::new_unchecked(ptr) },
    })
}

/// Exclusive ownership of one chunk of a shared raw pool; returns it on drop.
struct Block {
    pool: Arc<RawPool>,
    idx: u32,
    ptr: NonNull<u8>,
}

// SAFETY: a Block is the unique owner of its bytes until it is dropped, and it keeps the pool
// (hence the mapping) alive through the Arc; RawPool is Sync.
unsafe impl Send for Block {}
// SAFETY: &Block only gives shared reads of the bytes.
unsafe impl Sync for Block {}

impl Block {
    fn bytes(&self) -> &[u8] {
        // SAFETY: the block's chunk_bytes bytes stay mapped while the Arc keeps the pool alive,
        // and no other handle holds this index.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.pool.chunk_bytes()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.pool.chunk_bytes()) }
    }

    fn words(&self) -> &[u32] {
        // SAFETY: blocks are 8-byte aligned (page-aligned region, size a multiple of 8),
        // chunk_bytes / 4 words long, and every bit pattern is a valid u32.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), self.pool.chunk_bytes() / 4) }
    }

    fn words_mut(&mut self) -> &mut [u32] {
        // SAFETY: as in `words`, and &mut self guarantees exclusive access.
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast(), self.pool.chunk_bytes() / 4)
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        self.pool.free(self.idx);
        self.pool.counters().frees.fetch_add(1, Ordering::Relaxed);
    }
}

macro_rules! block_handle {
    ($name:ident, $what:literal) => {
        impl $name {
            #[doc = concat!("The ", $what, " as 32-bit words.")]
            pub fn words(&self) -> &[u32] {
                self.0.words()
            }

            #[doc = concat!("The ", $what, " as mutable 32-bit words.")]
            pub fn words_mut(&mut self) -> &mut [u32] {
                self.0.words_mut()
            }

            #[doc = concat!("The ", $what, "'s index in its pool.")]
            pub fn index(&self) -> u32 {
                self.0.idx
            }
        }

        impl Deref for $name {
            type Target = [u8];
            fn deref(&self) -> &[u8] {
                self.0.bytes()
            }
        }

        impl DerefMut for $name {
            fn deref_mut(&mut self) -> &mut [u8] {
                self.0.bytes_mut()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("index", &self.0.idx)
                    .field("bytes", &self.0.pool.chunk_bytes())
                    .finish()
            }
        }
    };
}

/// A page of a [`PagePool`]: derefs to `[u8]`, gives the page back when dropped; `Send`, so a
/// producer thread can fill it and a consumer thread drop it.
pub struct PageHandle(Block);
block_handle!(PageHandle, "page");

/// A contiguous superpage of a [`SuperpagePool`]: derefs to `[u8]`, gives the superpage back
/// when dropped; `Send`.
pub struct Superpage(Block);
block_handle!(Superpage, "superpage");

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn opts() -> RegionOptions {
        RegionOptions {
            prefault: true,
            warmup_threads: 2,
            ..RegionOptions::default()
        }
    }

    #[test]
    fn pages_cross_threads_and_come_back() {
        let pool = PagePool::new(PagePoolConfig {
            page_bytes: 4096,
            pages: 8,
            region: opts(),
        })
        .unwrap();
        assert_eq!(pool.warmup_report().pages_touched, 8);
        let (tx, rx) = std::sync::mpsc::sync_channel::<PageHandle>(8);
        let producer = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for i in 0..100u32 {
                    let mut page = loop {
                        match pool.alloc() {
                            Ok(p) => break p,
                            Err(AllocError::Exhausted { .. }) => std::thread::yield_now(),
                            Err(e) => panic!("{e}"),
                        }
                    };
                    page.words_mut().fill(i);
                    page[0] = 0;
                    tx.send(page).unwrap();
                }
            })
        };
        for i in 0..100u32 {
            let page = rx.recv().unwrap();
            assert_eq!(page.len(), 4096);
            assert_eq!(page.words()[1], i);
            assert_eq!(page.words()[1023], i);
        }
        producer.join().unwrap();
        let s = pool.stats();
        assert_eq!((s.allocations, s.frees, s.in_use), (100, 100, 0));
        assert!(s.high_water <= 8);
    }

    #[test]
    fn superpages_are_contiguous_and_exhaust() {
        let pool = SuperpagePool::new(SuperpagePoolConfig {
            superpage_bytes: 64 << 10,
            superpages: 3,
            region: opts(),
        })
        .unwrap();
        let a = pool.alloc().unwrap();
        let b = pool.alloc().unwrap();
        let c = pool.alloc().unwrap();
        assert!(matches!(pool.alloc(), Err(AllocError::Exhausted { .. })));
        let mut starts: Vec<usize> = [&a, &b, &c].iter().map(|s| s.as_ptr() as usize).collect();
        starts.sort_unstable();
        assert!(starts.windows(2).all(|w| w[1] - w[0] >= 64 << 10));
        let handle = std::thread::spawn(move || {
            let mut a = a;
            a.fill(7);
            a
        });
        let a = handle.join().unwrap();
        assert!(a.iter().all(|&x| x == 7));
        drop((a, b, c));
        assert_eq!(pool.stats().in_use, 0);
        assert!(pool.alloc().is_ok());
    }
}
