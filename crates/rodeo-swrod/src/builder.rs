//! The fragment builder: [`FragmentBuilder`], its configuration checked into a plan, its
//! receiving threads started (scoped) and joined, and the end-of-run protocol around them
//! (see the crate docs).

use std::sync::atomic::{AtomicBool, Ordering};

use rodeo_cards::dma::{DmaChannel, SuperpageBuffer};
use rodeo_format::felix::{is_valid_block_size, ELINK_COUNT, MAX_ELINK};
use rodeo_memory::ChunkPool;

use crate::config::{Plan, SwRodConfig};
use crate::counters::{SharedCounters, SwRodCounters};
use crate::decoder::PacketDecoder;
use crate::error::SwRodError;
use crate::exchange::PartExchange;
use crate::fragment::{FragmentSink, HEADER_WORDS, MAX_THREADS};
use crate::lane::{thread_cpu_ns, Lane, Turn};
use crate::receiver::{receiver_backoff, Aggregator};
use crate::walker::Receiver;

/// The SW ROD fragment builder. See the module docs.
pub struct FragmentBuilder<'p, D> {
    pub(crate) plan: Plan,
    cpus: Vec<usize>,
    pub(crate) pools: &'p [ChunkPool],
    decoder: D,
    pub(crate) counters: Vec<SharedCounters>,
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
        let shared = PartExchange::new(self.plan.window as usize, n, self.pools.len().min(n));
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
    pub(crate) fn lane<'b, 'c, S, C, K>(
        &'b self,
        t: usize,
        channels: &'c [&'c C],
        shared: &'b PartExchange<'p>,
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
            written_ns: 0,
            written_delta: 0,
        }
    }

    fn receive<S, C, K>(
        &self,
        t: usize,
        channels: &[&C],
        shared: &PartExchange<'p>,
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

/// Sets the abort flag if the thread unwinds, so that no other thread waits for it forever.
struct AbortOnPanic<'a>(&'a rodeo_memory::sync::AtomicBool);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}
