//! `rodeo bench pool`: the SW ROD talk's memory-pool table, measured in one run.
//!
//! # Workload
//!
//! Every allocator gets the same job, with 1 and with 2 threads allocating concurrently from one
//! shared allocator: each thread keeps a growing live set of 4 KiB chunks (allocate 2, free the
//! oldest 1) until the live total reaches `--live-mib` (1 GiB; 256 MiB with `--quick`) divided by
//! the threads, writing one word of every chunk as a user would, then frees everything. Every
//! allocation is timed with the tick counter (`rdtsc` calibrated against `Instant`) into a fixed
//! histogram; rows give avg, p99 and max per allocation in nanoseconds.
//!
//! # Allocators (`allocator` column)
//!
//! - `rodeo`: [`ChunkPool`] limited to the live total plus one region, mapped and warmed before
//!   the run as a real run does; each thread allocates through its own [`PoolCache`](rodeo_memory::PoolCache).
//! - `rodeo_nocache`: the same pool, every allocation a CAS on the shared free list or bump index.
//! - `malloc`: the system allocator (`std::alloc` with a 4 KiB layout, glibc `malloc`).
//! - `eager`: the rejected design, boost::pool's: a free list behind a mutex (as boost's
//!   `singleton_pool`) that, when empty, allocates a block twice the size of the previous one
//!   (starting at 32 chunks) and threads *every* chunk of the block onto the free list before
//!   returning, touching all of them.
//! - `first_touch_cold` / `first_touch_warm`: not allocators; the time to write one byte to a
//!   page of a fresh mapping (page fault) and to the same page again, per page (`allocations`
//!   is the number of pages).

use std::alloc::Layout;
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use anyhow::Context;
use rodeo_memory::{ChunkPool, HugePages, PoolConfig, Region, RegionOptions};
use serde::Serialize;
use serde_json::Value;

use super::timing::{ticks, Calibration, Histogram, CLOCK};
use crate::report::Report;
use crate::study::rounds::summarize;

const CHUNK: usize = 4096;

/// Arguments of `rodeo bench pool`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A smaller workload (256 MiB live, 16 MiB of first-touch pages) for smoke tests.
    #[arg(long)]
    pub quick: bool,
    /// Live total in MiB that the workload grows to (overrides the default of 1024, or 256 with
    /// `--quick`).
    #[arg(long, value_name = "MIB")]
    pub live_mib: Option<usize>,
    /// MiB of fresh pages for the first-touch rows (default 256, or 16 with `--quick`).
    #[arg(long, value_name = "MIB")]
    pub touch_mib: Option<usize>,
    /// Repetitions of the whole table; each statistic of a row is the median over them, which
    /// damps one-off scheduler preemptions equally for every allocator.
    #[arg(long, default_value_t = 3, value_name = "N",
          value_parser = rodeo_ros::cli_values::count(1..=1000))]
    pub repeat: usize,
    /// Pages backing the rodeo pool's regions.
    #[arg(long, value_enum, default_value_t = Huge::None)]
    pub huge_pages: Huge,
}

/// The pages backing the pool's regions.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Huge {
    /// Ordinary 4 KiB pages.
    None,
    /// Transparent huge pages (madvise).
    Transparent,
    /// Explicit huge pages (hugetlbfs; fails when none are reserved).
    Explicit,
}

#[derive(Debug, Serialize)]
struct Row {
    allocator: &'static str,
    threads: usize,
    avg_ns: f64,
    p99_ns: f64,
    max_ns: f64,
    allocations: u64,
    /// Involuntary context switches of the bench threads during the workload (median over
    /// repetitions): a preemption inside a timed allocation sets `max_ns` to a scheduler slice.
    preemptions: u64,
    wall_ms: f64,
    /// (max - min) / median over the repetitions of `avg_ns`, `p99_ns` and `max_ns`.
    avg_spread: f64,
    p99_spread: f64,
    max_spread: f64,
}

/// Involuntary context switches of the calling thread so far.
fn involuntary_switches() -> u64 {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we pass and reads nothing else.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    if rc == 0 {
        u64::try_from(usage.ru_nivcsw).unwrap_or(0)
    } else {
        0
    }
}

/// One allocator as seen by one thread of the workload.
trait ThreadAlloc {
    type Item;
    fn alloc(&mut self) -> anyhow::Result<Self::Item>;
    fn touch(item: &mut Self::Item, value: u64);
    fn free(&mut self, item: Self::Item);
}

/// Runs the workload on one thread; returns the histogram of allocation times in ticks.
/// All threads hold their full live sets at `peak` before anyone frees, so the live total
/// really reaches the target.
fn workload<A: ThreadAlloc>(
    a: &mut A,
    live_target: usize,
    peak: &Barrier,
    hist: &mut Histogram,
) -> anyhow::Result<()> {
    let mut live: VecDeque<A::Item> = VecDeque::with_capacity(live_target + 2);
    let mut serial = 0u64;
    while live.len() < live_target {
        for _ in 0..2 {
            let t0 = ticks();
            let item = a.alloc();
            let t1 = ticks();
            hist.record(t1.wrapping_sub(t0));
            let mut item = match item {
                Ok(item) => item,
                Err(e) => {
                    peak.wait();
                    return Err(e);
                }
            };
            A::touch(&mut item, serial);
            serial += 1;
            live.push_back(item);
        }
        if let Some(old) = live.pop_front() {
            a.free(old);
        }
    }
    peak.wait();
    for item in live.drain(..) {
        a.free(item);
    }
    Ok(())
}

/// Runs `make`'s per-thread allocators on `threads` threads started together.
fn measure<A, F>(
    threads: usize,
    live_total: usize,
    make: F,
) -> anyhow::Result<(Histogram, f64, u64)>
where
    A: ThreadAlloc,
    F: Fn() -> A + Sync,
{
    let per_thread = live_total / threads;
    let barrier = Barrier::new(threads);
    let peak = Barrier::new(threads);
    let start = Instant::now();
    let results: Vec<anyhow::Result<(Histogram, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (make, barrier, peak) = (&make, &barrier, &peak);
                s.spawn(move || {
                    let mut hist = Histogram::new();
                    let mut a = make();
                    barrier.wait();
                    let switches = involuntary_switches();
                    workload(&mut a, per_thread, peak, &mut hist)?;
                    Ok((hist, involuntary_switches() - switches))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a bench thread panicked")))
            })
            .collect()
    });
    let wall_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut total = Histogram::new();
    let mut switches = 0;
    for r in results {
        let (h, n) = r?;
        total.merge(&h);
        switches += n;
    }
    Ok((total, wall_ms, switches))
}

// --- rodeo ---------------------------------------------------------------------------------

struct RodeoCached<'p>(rodeo_memory::PoolCache<'p>);

impl<'p> ThreadAlloc for RodeoCached<'p> {
    type Item = rodeo_memory::Chunk<'p>;
    #[inline]
    fn alloc(&mut self) -> anyhow::Result<Self::Item> {
        Ok(self.0.alloc()?)
    }
    #[inline]
    fn touch(item: &mut Self::Item, value: u64) {
        item[..8].copy_from_slice(&value.to_ne_bytes());
    }
    #[inline]
    fn free(&mut self, item: Self::Item) {
        self.0.free(item);
    }
}

struct RodeoShared<'p>(&'p ChunkPool);

impl<'p> ThreadAlloc for RodeoShared<'p> {
    type Item = rodeo_memory::Chunk<'p>;
    #[inline]
    fn alloc(&mut self) -> anyhow::Result<Self::Item> {
        Ok(self.0.alloc()?)
    }
    #[inline]
    fn touch(item: &mut Self::Item, value: u64) {
        item[..8].copy_from_slice(&value.to_ne_bytes());
    }
    #[inline]
    fn free(&mut self, item: Self::Item) {
        drop(item);
    }
}

// --- malloc --------------------------------------------------------------------------------

struct Malloc;

const LAYOUT: Layout = match Layout::from_size_align(CHUNK, 8) {
    Ok(l) => l,
    Err(_) => panic!("4 KiB, 8-aligned is a valid layout"),
};

impl ThreadAlloc for Malloc {
    type Item = NonNull<u8>;
    #[inline]
    fn alloc(&mut self) -> anyhow::Result<Self::Item> {
        // SAFETY: LAYOUT has a non-zero size.
        let p = unsafe { std::alloc::alloc(LAYOUT) };
        NonNull::new(p).context("malloc returned null")
    }
    #[inline]
    fn touch(item: &mut Self::Item, value: u64) {
        // SAFETY: the block is CHUNK bytes, 8-aligned, and ours until freed.
        unsafe { item.as_ptr().cast::<u64>().write(value) };
    }
    #[inline]
    fn free(&mut self, item: Self::Item) {
        // SAFETY: item came from std::alloc::alloc with LAYOUT and is freed once.
        unsafe { std::alloc::dealloc(item.as_ptr(), LAYOUT) };
    }
}

// --- eager (boost::pool-like) --------------------------------------------------------------

/// The baseline: a mutex-protected intrusive free list that grows by doubling blocks and
/// threads every chunk of a new block onto the list before returning.
struct EagerPool {
    inner: Mutex<EagerInner>,
}

struct EagerInner {
    /// First free chunk; each free chunk's first word points to the next (null ends the list).
    free: *mut u8,
    next_chunks: usize,
    blocks: Vec<(NonNull<u8>, Layout)>,
}

// SAFETY: the raw pointers refer to blocks owned by the pool; all access goes through the mutex.
unsafe impl Send for EagerInner {}

impl EagerPool {
    fn new() -> EagerPool {
        EagerPool {
            inner: Mutex::new(EagerInner {
                free: std::ptr::null_mut(),
                next_chunks: 32,
                blocks: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EagerInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn alloc(&self) -> anyhow::Result<NonNull<u8>> {
        let mut g = self.lock();
        if g.free.is_null() {
            g.grow()?;
        }
        let p = g.free;
        // SAFETY: p is a free chunk of one of our blocks; its first word holds the next link.
        g.free = unsafe { p.cast::<*mut u8>().read() };
        NonNull::new(p).context("eager pool free list corrupt")
    }

    fn free(&self, p: NonNull<u8>) {
        let mut g = self.lock();
        // SAFETY: p is a chunk of one of our blocks that its user gave back; it is ours again.
        unsafe { p.as_ptr().cast::<*mut u8>().write(g.free) };
        g.free = p.as_ptr();
    }
}

impl EagerInner {
    fn grow(&mut self) -> anyhow::Result<()> {
        let n = self.next_chunks;
        let layout = Layout::from_size_align(n * CHUNK, 4096)?;
        // SAFETY: the layout has a non-zero size.
        let block = NonNull::new(unsafe { std::alloc::alloc(layout) })
            .context("eager pool: block allocation failed")?;
        let base = block.as_ptr();
        for i in 0..n {
            let next = if i + 1 < n {
                // SAFETY: chunk i + 1 is inside the block.
                unsafe { base.add((i + 1) * CHUNK) }
            } else {
                self.free
            };
            // SAFETY: chunk i is inside the block, 4 KiB-aligned, and not yet handed out.
            unsafe { base.add(i * CHUNK).cast::<*mut u8>().write(next) };
        }
        self.free = base;
        self.blocks.push((block, layout));
        self.next_chunks = n * 2;
        Ok(())
    }
}

impl Drop for EagerPool {
    fn drop(&mut self) {
        let g = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        for (block, layout) in g.blocks.drain(..) {
            // SAFETY: each block was allocated with this layout and is freed once.
            unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
        }
    }
}

struct Eager<'p>(&'p EagerPool);

impl ThreadAlloc for Eager<'_> {
    type Item = NonNull<u8>;
    #[inline]
    fn alloc(&mut self) -> anyhow::Result<Self::Item> {
        self.0.alloc()
    }
    #[inline]
    fn touch(item: &mut Self::Item, value: u64) {
        // SAFETY: the chunk is CHUNK bytes, 4 KiB-aligned, and ours until freed.
        unsafe { item.as_ptr().cast::<u64>().add(1).write(value) };
    }
    #[inline]
    fn free(&mut self, item: Self::Item) {
        self.0.free(item);
    }
}

// --- first touch ---------------------------------------------------------------------------

/// Times writing one byte to each page of a fresh mapping (cold), then again (warm).
fn first_touch(bytes: usize) -> anyhow::Result<(Histogram, Histogram)> {
    let opts = RegionOptions {
        prefault: false,
        ..RegionOptions::default()
    };
    let (region, _) = Region::map(bytes, &opts).context("mapping the first-touch region")?;
    let pages = region.len() / rodeo_memory::BASE_PAGE;
    let base = region.as_ptr();
    let mut hists = (Histogram::new(), Histogram::new());
    for hist in [&mut hists.0, &mut hists.1] {
        for page in 0..pages {
            // SAFETY: the page is inside the region, which we own and nobody else uses.
            let p = unsafe { base.add(page * rodeo_memory::BASE_PAGE) };
            let t0 = ticks();
            // SAFETY: as above; a volatile write so that the touch is not optimised away.
            unsafe { std::ptr::write_volatile(p, 1) };
            let t1 = ticks();
            hist.record(t1.wrapping_sub(t0));
        }
    }
    Ok(hists)
}

// --- the command ---------------------------------------------------------------------------

/// Runs the measurement and returns its report (also used by `rodeo study pool`).
pub fn measure_report(args: Args) -> anyhow::Result<Report> {
    let live_mib = args.live_mib.unwrap_or(if args.quick { 256 } else { 1024 });
    let touch_mib = args.touch_mib.unwrap_or(if args.quick { 16 } else { 256 });
    anyhow::ensure!(live_mib >= 1, "--live-mib must be at least 1");
    anyhow::ensure!(touch_mib >= 1, "--touch-mib must be at least 1");
    // The workload holds --live-mib, each allocator's in turn, and touches --touch-mib more:
    // past what the machine has, it ran it out of memory (60000 on a 24 GiB machine).
    if let Some(avail) = rodeo_memory::machine::MemInfo::read().available_bytes {
        let need = (live_mib as u64)
            .saturating_add(touch_mib as u64)
            .saturating_mul(1 << 20);
        anyhow::ensure!(
            need <= avail / 2,
            "--live-mib {live_mib} and --touch-mib {touch_mib} need {} MiB, more than half of the \
             {} MiB this machine has available: choose smaller ones",
            need >> 20,
            avail >> 20
        );
    }
    let live_chunks = (live_mib << 20) / CHUNK;
    anyhow::ensure!(args.repeat >= 1, "--repeat must be at least 1");
    let calib = Calibration::start();
    let mut measured: Vec<Measured> = Vec::new();

    // The rodeo pool: sized to the live set plus one region of slack for the caches, mapped and
    // warmed before the run, and kept across repetitions as a real pool is kept across runs.
    // 64 MiB regions (smaller for small workloads, so that smoke tests warm little memory).
    let region_bytes = ((live_mib << 20) / 8).clamp(1 << 20, 64 << 20);
    let chunks_per_region = region_bytes / CHUNK;
    let max_regions = (live_mib << 20).div_ceil(region_bytes) + 1;
    let mut config = PoolConfig {
        chunks_per_region,
        max_regions,
        initial_regions: max_regions,
        ..PoolConfig::new(CHUNK, live_mib << 20)
    };
    config.region.huge_pages = match args.huge_pages {
        Huge::None => HugePages::None,
        Huge::Transparent => HugePages::Transparent,
        Huge::Explicit => HugePages::Explicit,
    };
    let pool = ChunkPool::new(config).context("creating the rodeo pool")?;
    let warm = pool.warmup_report();
    for _ in 0..args.repeat {
        for threads in [1, 2] {
            let (h, ms, sw) = measure(threads, live_chunks, || RodeoCached(pool.cache()))?;
            record(&mut measured, "rodeo", threads, &h, ms, sw);
            let (h, ms, sw) = measure(threads, live_chunks, || RodeoShared(&pool))?;
            record(&mut measured, "rodeo_nocache", threads, &h, ms, sw);
        }
        for threads in [1, 2] {
            let (h, ms, sw) = measure(threads, live_chunks, || Malloc)?;
            record(&mut measured, "malloc", threads, &h, ms, sw);
        }
        for threads in [1, 2] {
            let eager = EagerPool::new();
            let (h, ms, sw) = measure(threads, live_chunks, || Eager(&eager))?;
            record(&mut measured, "eager", threads, &h, ms, sw);
        }
        let t = Instant::now();
        let switches = involuntary_switches();
        let (cold, warm_touch) = first_touch(touch_mib << 20)?;
        let sw = involuntary_switches() - switches;
        let touch_ms = t.elapsed().as_secs_f64() * 1e3;
        record(&mut measured, "first_touch_cold", 1, &cold, touch_ms, sw);
        record(
            &mut measured,
            "first_touch_warm",
            1,
            &warm_touch,
            touch_ms,
            sw,
        );
    }
    let pool_stats = pool.stats();
    drop(pool);

    let ns_per_tick = calib.ns_per_tick();
    let mut report = Report::new("pool");
    let f = &mut report.fields;
    f.insert("chunk_bytes".into(), CHUNK.into());
    f.insert("live_bytes".into(), (live_mib << 20).into());
    f.insert("clock".into(), CLOCK.into());
    f.insert("repeat".into(), args.repeat.into());
    f.insert("statistic".into(), "median over repetitions".into());
    f.insert("clock_ghz".into(), num(1.0 / ns_per_tick));
    f.insert(
        "rodeo_warmup_ms".into(),
        num(warm.elapsed.as_secs_f64() * 1e3),
    );
    f.insert("rodeo_warmup_pages".into(), warm.pages_touched.into());
    f.insert("rodeo_warmup_threads".into(), warm.threads.into());
    f.insert("rodeo_warmup_ns_per_page".into(), num(warm.ns_per_page()));
    f.insert("rodeo_huge_pages".into(), warm.huge_pages.into());
    if let Some(reason) = &warm.huge_pages_fallback {
        f.insert("rodeo_huge_pages_fallback".into(), reason.clone().into());
    }
    f.insert("rodeo_regions".into(), pool_stats.regions.into());
    f.insert(
        "rodeo_high_water_chunks".into(),
        pool_stats.high_water.into(),
    );
    f.insert("rodeo_exhaustions".into(), pool_stats.exhaustions.into());

    let mut rows = Vec::new();
    for m in &measured {
        rows.push(Row {
            allocator: m.allocator,
            threads: m.threads,
            avg_ns: round1(median(&m.avg) * ns_per_tick),
            p99_ns: round1(median(&m.p99) * ns_per_tick),
            max_ns: round1(median(&m.max) * ns_per_tick),
            allocations: m.allocations,
            preemptions: median(&m.preemptions) as u64,
            wall_ms: round1(median(&m.wall_ms)),
            avg_spread: spread(&m.avg),
            p99_spread: spread(&m.p99),
            max_spread: spread(&m.max),
        });
    }
    let find = |name: &str, threads: usize| {
        rows.iter()
            .find(|r| r.allocator == name && r.threads == threads)
            .map(|r| (r.avg_ns, r.max_ns))
            .unwrap_or((0.0, 0.0))
    };
    let ratio = |a: f64, b: f64| if b > 0.0 { round1(a / b) } else { 0.0 };
    let mut targets_met = true;
    for threads in [1, 2] {
        let (r_avg, r_max) = find("rodeo", threads);
        let (_, e_max) = find("eager", threads);
        let (m_avg, m_max) = find("malloc", threads);
        let (eager_ratio, malloc_ratio) = (ratio(e_max, r_max), ratio(m_max, r_max));
        let f = &mut report.fields;
        f.insert(
            format!("max_ratio_eager_over_rodeo_{threads}t"),
            num(eager_ratio),
        );
        f.insert(
            format!("max_ratio_malloc_over_rodeo_{threads}t"),
            num(malloc_ratio),
        );
        f.insert(
            format!("avg_ratio_malloc_over_rodeo_{threads}t"),
            num(ratio(m_avg, r_avg)),
        );
        targets_met &= r_avg <= 50.0 && eager_ratio >= 100.0 && malloc_ratio >= 10.0;
        report.add_target(
            &format!("rodeo pool average allocation, {threads} thread(s)"),
            format!("{r_avg:.1} ns"),
            "<= 50 ns".into(),
            r_avg <= 50.0,
        );
        report.add_target(
            &format!("worst case of an eager pool over rodeo's, {threads} thread(s)"),
            format!("{eager_ratio:.1}x"),
            ">= 100x".into(),
            eager_ratio >= 100.0,
        );
        report.add_target(
            &format!("worst case of malloc over rodeo's, {threads} thread(s)"),
            format!("{malloc_ratio:.1}x"),
            ">= 10x".into(),
            malloc_ratio >= 10.0,
        );
    }
    let (cold_avg, _) = find("first_touch_cold", 1);
    let (warm_avg, _) = find("first_touch_warm", 1);
    report.fields.insert(
        "avg_ratio_first_touch_cold_over_warm".into(),
        num(ratio(cold_avg, warm_avg)),
    );
    report
        .fields
        .insert("targets_met".into(), targets_met.into());
    for row in &rows {
        report.push_row(row)?;
    }
    Ok(report)
}

/// One row's statistics (in ticks) from every repetition.
struct Measured {
    allocator: &'static str,
    threads: usize,
    allocations: u64,
    avg: Vec<f64>,
    p99: Vec<f64>,
    max: Vec<f64>,
    preemptions: Vec<f64>,
    wall_ms: Vec<f64>,
}

fn record(
    measured: &mut Vec<Measured>,
    allocator: &'static str,
    threads: usize,
    h: &Histogram,
    wall_ms: f64,
    preemptions: u64,
) {
    let pos = match measured
        .iter()
        .position(|m| m.allocator == allocator && m.threads == threads)
    {
        Some(pos) => pos,
        None => {
            measured.push(Measured {
                allocator,
                threads,
                allocations: h.count(),
                avg: Vec::new(),
                p99: Vec::new(),
                max: Vec::new(),
                preemptions: Vec::new(),
                wall_ms: Vec::new(),
            });
            measured.len() - 1
        }
    };
    let m = &mut measured[pos];
    m.avg.push(h.mean());
    m.p99.push(h.quantile(0.99));
    m.max.push(h.max() as f64);
    m.preemptions.push(preemptions as f64);
    m.wall_ms.push(wall_ms);
}

/// The median (the mean of the middle two for an even count).
fn median(v: &[f64]) -> f64 {
    summarize(v).median
}

/// (max - min) / median, to two decimals.
fn spread(v: &[f64]) -> f64 {
    (summarize(v).spread * 100.0).round() / 100.0
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn num(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}
