//! The SW ROD fragment builder: E-link packets from FELIX blocks into one ROB fragment per L1ID.
//!
//! **Role in the flow.** card (`rodeo-cards`, FELIX mode) -> **fragment builder** -> event store
//! (`rodeo-ros`, through a [`FragmentSink`]). It reads superpages through the
//! `rodeo_cards::dma::DmaChannel` trait and hands each built fragment to a sink.
//!
//! **Owns**: its receiving threads (scoped inside [`FragmentBuilder::run`]), their window slots
//! and rings, and the pool blocks of the fragments until the sink drops them.
//!
//! **Must not depend on** the event store, a transport or anything above: the store plugs in as
//! a [`FragmentSink`]; the emulated cards appear only in its tests and benches.
//!
//! # The algorithm (ATLAS SW ROD, HL-LHC talk)
//!
//! N **receiving threads**, each owning a disjoint set of E-links and the DMA channels that carry
//! them, read the card's superpages. Each thread aggregates, per L1ID, the packets of its own
//! E-links into its **own memory block** from the pool (a [`rodeo_memory::Chunk`], through a
//! per-thread [`rodeo_memory::PoolCache`]: warmed memory, no shared cache line per allocation).
//! When a thread has closed its part of an L1ID, it leaves the block in its own ring of parts
//! and, every 16 events and once per superpage, publishes how far it has got in a completion
//! mark on a cache line of its own. An L1ID is complete when every thread's mark has passed it;
//! complete L1IDs are assembled in groups of 64, group `g` by thread `g % N` (so the threads
//! share the assembly evenly), when it next publishes: it writes each one's ROB and ROD headers
//! and trailer in place and hands the N blocks, joined by reference, to the [`FragmentSink`] as
//! one [`Fragment`] (see [`Fragment`] for the layout). A whole packet is copied once, from the
//! superpage into the block; a packet split over FELIX blocks is first joined from its pieces
//! (the usual FIRST + LAST pair in a small per-E-link buffer, anything else in its E-link's
//! reassembler). No block is ever copied to join it to the others.
//!
//! The per-thread hot path (block walk, packet placement, window slots) is in `walker.rs` and
//! `receiver.rs`; the state the threads share is in `shared.rs`.
//!
//! The rejected alternative is one aggregating thread fed by the receivers through queues: it
//! pays a queue hop per packet (or per block) and caps the whole builder at one core, which at
//! 100 MHz of packets leaves about 10 cycles per packet. With per-thread blocks and rings the
//! threads share no cache line per packet and no read-modify-write per L1ID: per batch, one
//! store of a mark and of an assembly cursor, and reads of the other threads' marks and cursors;
//! the assembler reads the other threads' part summaries (a few words per L1ID) from their
//! rings.
//!
//! # Configuration and the L1ID window
//!
//! [`SwRodConfig`] names each thread's E-links, the window (L1IDs in flight, a power of two), the
//! timeout, the L1ID wrap (the ECR counter in bits 31..24 of the extended L1ID increments when
//! the L1ID reaches it, as the emulators do) and the extended L1ID of the first event. Events
//! are numbered from the first one; the window slot of an event is its number's low bits.
//!
//! # Faults
//!
//! - A missing packet: the fragment is built when the thread's oldest open event is older than
//!   the timeout (for a thread that has no packet at all of an event another thread has
//!   published, from when it first saw that mark), or when a packet arrives a whole window
//!   later, or at the end of the run; it is flagged TIMEOUT + FRAGMENT_LOST and the ROD status
//!   block lists the missing E-links.
//! - A duplicate (second packet of an E-link for an open L1ID) or late packet (its L1ID already
//!   built): dropped and counted.
//! - BCID disagreement within a fragment: BCID_CHECK_FAIL.
//! - A corrupt block (bad marker, impossible trailer, sequence gap) or packet (decoder error)
//!   is counted and dropped; the reassembly state of its E-link is flushed, and other E-links
//!   never notice. Packets delivered with FELIX error flags keep them in their packet status.
//!
//! # Back-pressure and shutdown
//!
//! A thread that finds the pool empty waits (counted `pool_waits`): the consumer holds too
//! many fragments (or other threads' caches hold its blocks: it flags its pool, and they give
//! them back when they next publish). A thread a whole window ahead of the assembly waits for the slower threads
//! (`slot_waits`), publishing its mark and assembling what is complete meanwhile. While a
//! thread waits it reads no superpages, so its channels stall and the card applies XOFF.
//! [`FragmentBuilder::run`] returns when every channel of every thread has ended (link down and
//! nothing ready) or when the caller's stop flag (or a sink's [`Flow::Stop`]) is set: the threads
//! then build every event any of them has seen, incomplete ones flagged, so that every packet
//! read lands in exactly one fragment.

mod counters;
mod decoder;
mod fragment;
mod pool;
mod receiver;
mod shared;
mod walker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rodeo_format::felix::{is_valid_block_size, DEFAULT_BLOCK_SIZE, ELINK_COUNT, MAX_ELINK};
use rodeo_format::fragment::SourceId;
use rodeo_memory::ChunkPool;

pub use counters::SwRodCounters;
pub use decoder::{DefaultFormat, PacketDecoder, PacketError, PacketInfo};
pub use fragment::{
    CountingSink, Flow, Fragment, FragmentSink, SinkCounts, HEADER_WORDS, MAX_THREADS,
    PACKET_HEADER_WORDS, ROB_HEADER_WORDS,
};
pub use pool::{BuilderPool, RobRun};

use counters::SharedCounters;
use receiver::{receiver_backoff, Aggregator};
use rodeo_cards::dma::{DmaChannel, SuperpageBuffer};
use shared::Shared;
use walker::Receiver;

/// Configuration of a [`FragmentBuilder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwRodConfig {
    /// Source identifier of the built ROB fragments.
    pub source_id: SourceId,
    /// Run number (ROD header).
    pub run_number: u32,
    /// The E-links of each receiving thread (one entry per thread; disjoint). A fragment's data
    /// holds thread 0's E-links in this order, then thread 1's, and so on.
    pub thread_elinks: Vec<Vec<u16>>,
    /// FELIX block size in bytes.
    pub felix_block_bytes: usize,
    /// L1IDs in flight per thread and in the shared window (a power of two, at least half the
    /// FELIX block size).
    pub window: usize,
    /// A thread's oldest open L1ID is built incomplete after this long.
    pub timeout: Duration,
    /// The L1ID wraps at this value and the ECR byte increments (1..=2^24).
    pub l1id_wrap: u32,
    /// Extended L1ID of the run's first event.
    pub first_l1id: u32,
    /// Largest packet (bytes); longer ones are cut by the reassembler and flagged.
    pub max_packet_bytes: usize,
    /// Pin receiving thread `i` to CPU `cpus[i % cpus.len()]` (none when empty).
    pub cpus: Vec<usize>,
}

impl Default for SwRodConfig {
    fn default() -> SwRodConfig {
        SwRodConfig {
            source_id: SourceId(0x0071_0000),
            run_number: 0,
            thread_elinks: vec![(0..8).collect()],
            felix_block_bytes: DEFAULT_BLOCK_SIZE,
            window: 4096,
            timeout: Duration::from_millis(500),
            l1id_wrap: 1 << 24,
            first_l1id: 0,
            max_packet_bytes: 16 * 1024,
            cpus: Vec::new(),
        }
    }
}

impl SwRodConfig {
    /// Words every thread block reserves after its data for the trailer (status word, every
    /// E-link listed missing, ROD trailer).
    pub fn trailer_reserve_words(&self) -> usize {
        1 + self.thread_elinks.iter().map(Vec::len).sum::<usize>() + 3
    }

    /// The smallest pool chunk (thread block) for packets of `packet_bytes` on every E-link of
    /// the busiest thread, rounded up to a multiple of 64 bytes.
    pub fn block_bytes_for(&self, packet_bytes: usize) -> usize {
        let per_thread = self.thread_elinks.iter().map(Vec::len).max().unwrap_or(0);
        let words = HEADER_WORDS
            + per_thread * (PACKET_HEADER_WORDS + packet_bytes.div_ceil(4))
            + self.trailer_reserve_words();
        (words * 4).next_multiple_of(64)
    }
}

/// Why a builder could not be built or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SwRodError {
    /// The configuration is inconsistent.
    #[error("bad fragment builder configuration: {0}")]
    Config(String),
    /// `run` got a different number of channel lists than there are threads.
    #[error("{found} channel lists for {threads} receiving threads")]
    Inputs {
        /// Threads configured.
        threads: usize,
        /// Channel lists given.
        found: usize,
    },
    /// A receiving thread could not be started.
    #[error("starting a receiving thread: {0}")]
    Spawn(#[from] std::io::Error),
    /// A receiving thread panicked.
    #[error("receiving thread {0} panicked")]
    Panicked(usize),
}

/// The configuration turned into what the threads use.
#[derive(Debug)]
pub(crate) struct Plan {
    thread_elinks: Vec<Vec<u16>>,
    /// E-link -> `thread << 16 | local index`, or `u32::MAX`.
    table: Box<[u32]>,
    wrap: u64,
    modulus: u64,
    window: u64,
    first_mod: u64,
    timeout_ns: u64,
    felix_block_bytes: usize,
    max_packet_bytes: usize,
    chunk_bytes: usize,
    data_limit_bytes: usize,
    total_elinks: usize,
    source_id: SourceId,
    run_number: u32,
}

impl Plan {
    #[inline]
    fn local_of(&self, elink: u16) -> Option<(usize, usize)> {
        let e = *self.table.get(usize::from(elink))?;
        (e != u32::MAX).then_some(((e >> 16) as usize, (e & 0xFFFF) as usize))
    }

    fn threads(&self) -> usize {
        self.thread_elinks.len()
    }

    fn extended_l1id(&self, seq: u64) -> u32 {
        let m = (self.first_mod + seq % self.modulus) % self.modulus;
        (((m / self.wrap) as u32 & 0xFF) << 24) | (m % self.wrap) as u32
    }
}

/// The SW ROD fragment builder. See the module docs.
pub struct FragmentBuilder<'p, D> {
    plan: Plan,
    cpus: Vec<usize>,
    pools: &'p [ChunkPool],
    decoder: D,
    counters: Vec<SharedCounters>,
}

impl<D> std::fmt::Debug for FragmentBuilder<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FragmentBuilder")
            .field("plan", &self.plan)
            .finish()
    }
}

impl<'p, D: PacketDecoder> FragmentBuilder<'p, D> {
    /// Checks `config` and prepares a builder whose thread blocks come from `pools`: one pool
    /// shared by every thread, or one per thread (thread `t` uses `pools[t % pools.len()]`).
    /// Chunks must hold [`SwRodConfig::block_bytes_for`] the largest expected packets, and all
    /// pools must have the same chunk size.
    ///
    /// One pool per thread is faster: a block then only ever cycles through its own thread's
    /// cache lines, whichever thread completes (and frees) the fragment.
    pub fn new(
        config: &SwRodConfig,
        pools: &'p [ChunkPool],
        decoder: D,
    ) -> Result<FragmentBuilder<'p, D>, SwRodError> {
        let bad = |s: String| Err(SwRodError::Config(s));
        let n = config.thread_elinks.len();
        if n == 0 || n > MAX_THREADS {
            return bad(format!("{n} receiving threads (1..={MAX_THREADS})"));
        }
        let mut table = vec![u32::MAX; ELINK_COUNT].into_boxed_slice();
        for (t, elinks) in config.thread_elinks.iter().enumerate() {
            if elinks.is_empty() {
                return bad(format!("thread {t} has no E-link"));
            }
            for (local, &e) in elinks.iter().enumerate() {
                if e > MAX_ELINK {
                    return bad(format!("E-link {e:#x} above {MAX_ELINK:#x}"));
                }
                if table[usize::from(e)] != u32::MAX {
                    return bad(format!("E-link {e:#x} listed twice"));
                }
                table[usize::from(e)] = (t as u32) << 16 | local as u32;
            }
        }
        if !config.window.is_power_of_two() || config.window < 2 || config.window > 1 << 20 {
            return bad(format!(
                "window {} (a power of two, 2..=2^20)",
                config.window
            ));
        }
        if config.l1id_wrap == 0 || config.l1id_wrap > 1 << 24 {
            return bad(format!("L1ID wrap {} (1..=2^24)", config.l1id_wrap));
        }
        let wrap = u64::from(config.l1id_wrap);
        let modulus = 256 * wrap;
        if config.window as u64 > modulus / 4 {
            return bad(format!(
                "window {} too large for the L1ID cycle of {modulus}",
                config.window
            ));
        }
        let first_l1 = u64::from(config.first_l1id & 0x00FF_FFFF);
        if first_l1 >= wrap {
            return bad(format!(
                "first L1ID {:#x} beyond the wrap",
                config.first_l1id
            ));
        }
        if !is_valid_block_size(config.felix_block_bytes) {
            return bad(format!("FELIX block size {}", config.felix_block_bytes));
        }
        // A block's whole packets are placed last first: the window must hold them all (a
        // packet takes at least 2 bytes with its trailer).
        if config.window < config.felix_block_bytes / 2 {
            return bad(format!(
                "window {} smaller than the {} packets a {}-byte block can hold",
                config.window,
                config.felix_block_bytes / 2,
                config.felix_block_bytes
            ));
        }
        let Some(first_pool) = pools.first() else {
            return bad("no block pool".to_string());
        };
        let chunk_bytes = first_pool.chunk_bytes();
        if pools.iter().any(|p| p.chunk_bytes() != chunk_bytes) {
            return bad("block pools of different chunk sizes".to_string());
        }
        let reserve = config.trailer_reserve_words() * 4;
        let min = HEADER_WORDS * 4 + reserve + 16;
        if chunk_bytes < min {
            return bad(format!(
                "pool chunks of {chunk_bytes} bytes, at least {min} needed"
            ));
        }
        let total_elinks = config.thread_elinks.iter().map(Vec::len).sum();
        Ok(FragmentBuilder {
            plan: Plan {
                thread_elinks: config.thread_elinks.clone(),
                table,
                wrap,
                modulus,
                window: config.window as u64,
                first_mod: u64::from(config.first_l1id >> 24) * wrap + first_l1,
                timeout_ns: config.timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
                felix_block_bytes: config.felix_block_bytes,
                max_packet_bytes: config.max_packet_bytes,
                chunk_bytes,
                data_limit_bytes: chunk_bytes - reserve,
                total_elinks,
                source_id: config.source_id,
                run_number: config.run_number,
            },
            cpus: config.cpus.clone(),
            pools,
            decoder,
            counters: (0..n).map(|_| SharedCounters::new()).collect(),
        })
    }

    /// Number of receiving threads.
    pub fn threads(&self) -> usize {
        self.plan.threads()
    }

    /// A live snapshot of the counters, summed over threads (published once per superpage).
    pub fn counters(&self) -> SwRodCounters {
        let mut total = SwRodCounters::default();
        for c in &self.counters {
            total.add(&c.load());
        }
        total
    }

    /// Runs the receiving threads until their input ends or `stop` is set; every fragment goes
    /// to `sink`. `inputs[t]` lists the DMA channels thread `t` reads (they must carry only its
    /// E-links; blocks of other E-links are counted as `foreign_blocks` and dropped). Each read
    /// superpage is pushed back to its channel.
    pub fn run<S, C, K>(
        &self,
        inputs: &[Vec<&C>],
        sink: &K,
        stop: &AtomicBool,
    ) -> Result<SwRodCounters, SwRodError>
    where
        S: SuperpageBuffer,
        C: DmaChannel<S> + ?Sized,
        K: FragmentSink<'p>,
    {
        let n = self.threads();
        if inputs.len() != n {
            return Err(SwRodError::Inputs {
                threads: n,
                found: inputs.len(),
            });
        }
        let shared = Shared::new(self.plan.window as usize, n, self.pools.len().min(n));
        sink.begin(n);
        let results: Vec<Result<SwRodCounters, SwRodError>> = std::thread::scope(|scope| {
            let mut handles = Vec::with_capacity(n);
            for (t, channels) in inputs.iter().enumerate() {
                let shared = &shared;
                let spawned = std::thread::Builder::new()
                    .name(format!("swrod-rx{t}"))
                    .spawn_scoped(scope, move || self.receive(t, channels, shared, sink, stop));
                match spawned {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        shared.abort.store(true, Ordering::Relaxed);
                        handles.push(scope.spawn(move || Err(SwRodError::Spawn(e))));
                    }
                }
            }
            handles
                .into_iter()
                .enumerate()
                .map(|(t, h)| h.join().unwrap_or(Err(SwRodError::Panicked(t))))
                .collect()
        });
        let mut total = SwRodCounters::default();
        for r in results {
            total.add(&r?);
        }
        sink.finish(&total);
        Ok(total)
    }

    /// Thread `t`'s state: its walker and aggregator over `shared`, and its channels.
    fn lane<'b, 'c, S, C, K>(
        &'b self,
        t: usize,
        channels: &'c [&'c C],
        shared: &'b Shared<'p>,
        sink: &'b K,
    ) -> Lane<'b, 'p, 'c, D, K, C>
    where
        S: SuperpageBuffer,
        C: DmaChannel<S> + ?Sized,
        K: FragmentSink<'p>,
    {
        let agg = Aggregator::new(t, &self.plan, shared, &self.decoder, sink, self.pools);
        Lane {
            rx: Receiver::new(agg),
            sink,
            channels,
            ended: vec![false; channels.len()],
            shared,
            published: &self.counters[t],
        }
    }

    fn receive<S, C, K>(
        &self,
        t: usize,
        channels: &[&C],
        shared: &Shared<'p>,
        sink: &K,
        stop: &AtomicBool,
    ) -> Result<SwRodCounters, SwRodError>
    where
        S: SuperpageBuffer,
        C: DmaChannel<S> + ?Sized,
        K: FragmentSink<'p>,
    {
        let _guard = AbortOnPanic(&shared.abort);
        let cpu_start = thread_cpu_ns();
        let mut pin_failed = false;
        if !self.cpus.is_empty() {
            pin_failed = !rodeo_memory::cpu::pin_to_cpu(self.cpus[t % self.cpus.len()]);
        }
        let mut lane = self.lane(t, channels, shared, sink);
        let mut backoff = receiver_backoff();
        loop {
            if stop.load(Ordering::Relaxed) || shared.stop.load(Ordering::Relaxed) {
                break;
            }
            if shared.abort.load(Ordering::Relaxed) {
                return Err(SwRodError::Panicked(usize::MAX));
            }
            match lane.turn(true) {
                Turn::Got => backoff.reset(),
                Turn::Idle => backoff.wait(),
                Turn::Ended => break,
            }
        }
        let published = lane.published;
        let mut c = lane.end(self.threads())?;
        c.pin_failures += u64::from(pin_failed);
        c.cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
        published.publish(&c);
        Ok(c)
    }
}

/// What one turn of a receiving thread did.
enum Turn {
    /// Read at least one superpage.
    Got,
    /// Nothing to read (timeouts checked, counters published).
    Idle,
    /// Every channel has ended.
    Ended,
}

/// One receiving thread's state between turns: its walker and aggregator and its channels.
/// A builder's own thread turns one lane; a [`BuilderPool`] thread turns many, one per ROB.
struct Lane<'b, 'p, 'c, D, K, C: ?Sized> {
    rx: Receiver<'b, 'p, D, K>,
    sink: &'b K,
    channels: &'c [&'c C],
    ended: Vec<bool>,
    shared: &'b Shared<'p>,
    published: &'b SharedCounters,
}

impl<'b, 'p, D: PacketDecoder, K: FragmentSink<'p>, C: ?Sized> Lane<'b, 'p, '_, D, K, C> {
    /// Reads one superpage of each channel that has one. With nothing to read and
    /// `maintain`, checks the links and the timeouts and publishes the counters (a pool thread
    /// does that about every millisecond per ROB, not on every idle turn); without
    /// `maintain`, an idle turn returns at once.
    fn turn<S: SuperpageBuffer>(&mut self, maintain: bool) -> Turn
    where
        C: DmaChannel<S>,
    {
        let rx = &mut self.rx;
        let mut got = false;
        // A sink without room holds back this ROB's reading (its cards stall), not the thread.
        let room = self.sink.has_room();
        for (i, ch) in self.channels.iter().enumerate() {
            if self.ended[i] || !room {
                continue;
            }
            match ch.pop_superpage() {
                Some(filled) => {
                    got = true;
                    rx.agg.now = self.shared.now();
                    rx.superpage(filled.data());
                    // A channel takes back what it handed out; if it refuses, the
                    // superpage goes back to its pool when dropped here.
                    let _ = ch.push_superpage(filled.superpage);
                    rx.agg.check_timeouts();
                    rx.agg.publish_horizon();
                    rx.agg.publish();
                    self.sink.flush();
                    rx.sync_counters();
                    self.published.publish(&rx.agg.c);
                }
                None if maintain => {
                    let st = ch.status();
                    if !st.link_up && st.ready_queue_len == 0 && ch.pop_superpage().is_none() {
                        self.ended[i] = true;
                    }
                }
                None => {}
            }
        }
        if got {
            return Turn::Got;
        }
        if !maintain {
            return Turn::Idle;
        }
        if self.ended.iter().all(|&e| e) {
            return Turn::Ended;
        }
        rx.agg.now = self.shared.now();
        rx.agg.check_timeouts();
        rx.agg.publish();
        self.sink.flush();
        self.published.publish(&rx.agg.c);
        Turn::Idle
    }

    /// End of input: builds everything any of the builder's `threads` threads has seen,
    /// helping slower threads meanwhile; returns this thread's counters (not yet published).
    fn end(mut self, threads: usize) -> Result<SwRodCounters, SwRodError> {
        let (rx, shared) = (&mut self.rx, self.shared);
        rx.agg.publish_horizon();
        shared.finished.fetch_add(1, Ordering::AcqRel);
        let mut backoff = receiver_backoff();
        while shared.finished.load(Ordering::Acquire) < threads {
            if shared.abort.load(Ordering::Relaxed) {
                return Err(SwRodError::Panicked(usize::MAX));
            }
            let h = shared.horizon.load(Ordering::Acquire);
            if rx.agg.base() < h {
                rx.agg.now = shared.now();
                rx.agg.flush_until(h);
                rx.agg.publish();
                backoff.reset();
            } else {
                rx.agg.publish();
                backoff.wait();
            }
            self.sink.flush();
        }
        let h = shared.horizon.load(Ordering::Acquire);
        rx.agg.flush_until(h);
        // Every thread's final mark is `h`: assemble this thread's share of what is left.
        if !rx.agg.complete_until(h) {
            return Err(SwRodError::Panicked(usize::MAX));
        }
        self.sink.flush();
        rx.sync_counters();
        Ok(rx.agg.c)
    }
}

/// Sets the abort flag if the thread unwinds, so that no other thread waits for it forever.
struct AbortOnPanic<'a>(&'a rodeo_memory::sync::AtomicBool);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// CPU time of the calling thread in nanoseconds (0 where the clock is unavailable).
fn thread_cpu_ns() -> u64 {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through a valid, exclusive pointer.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc != 0 {
            return 0;
        }
        (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64)
    }
    #[cfg(not(unix))]
    {
        0
    }
}
