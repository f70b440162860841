//! One SW ROD per readout node: the builders of many ROBs on a fixed pool of builder threads.
//!
//! A readout node serves tens of ROBs. A [`FragmentBuilder`] per ROB with threads of its own
//! would put tens of receiving threads on a few cores, each spinning or sleeping while it has
//! nothing to read. A [`BuilderPool`] runs them on a fixed number of threads instead (the
//! cores'), as the SW ROD of the seed serves many ROBs from one server: each ROB is a
//! single-thread builder (all its E-links in one thread's list), and each pool thread owns a
//! disjoint set of whole ROBs (ROB `r` on thread `r % threads`), so a ROB's fragment is
//! completed on the thread where all its packets land, with no cross-thread assembly. A pool
//! thread turns its ROBs in order: each reads what its channels have ready (one superpage per
//! channel per turn, then checks its timeouts and publishes its counters); a ROB with nothing
//! to read costs a queue pop per channel, its links, timeouts and counters are looked after
//! about every millisecond; only when none of its ROBs had anything does the thread back off. Each ROB keeps its own window, ring, timeouts
//! and counters, exactly as when it runs on its own thread, so bad input (missing and
//! duplicate packets, timeouts, BCID mismatches) is handled and counted per ROB as before.
//! The ROBs' builders may share one block pool (they then each hold a per-ROB cache of it).
//!
//! A ROB whose channels have all ended is finished at once (its last events built, its sink's
//! `finish` called); the pool returns when every ROB has, or when the caller's stop flag is set
//! (then every ROB builds every event it has seen, incomplete ones flagged).

use std::sync::atomic::{AtomicBool, Ordering};

use rodeo_cards::dma::{DmaChannel, SuperpageBuffer};

use crate::builder::FragmentBuilder;
use crate::counters::SwRodCounters;
use crate::decoder::PacketDecoder;
use crate::error::SwRodError;
use crate::exchange::PartExchange;
use crate::fragment::FragmentSink;
use crate::lane::{thread_cpu_ns, Turn};
use crate::receiver::receiver_backoff;

/// How often a pool thread checks its idle ROBs' links and timeouts and publishes their
/// counters.
const MAINTAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

/// One ROB run by a [`BuilderPool`]: its builder (configured with one receiving thread), the
/// DMA channels carrying its E-links, and the sink of its fragments.
pub struct RobRun<'a, 'p, D, C: ?Sized, K> {
    /// The ROB's builder; its configuration has exactly one thread's list of E-links.
    pub builder: &'a FragmentBuilder<'p, D>,
    /// The channels carrying the ROB's E-links.
    pub channels: Vec<&'a C>,
    /// Where the ROB's fragments go.
    pub sink: &'a K,
}

/// A fixed number of builder threads serving many ROBs. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuilderPool {
    threads: usize,
    cpus: Vec<usize>,
}

impl BuilderPool {
    /// A pool of `threads` builder threads (0: [`BuilderPool::default_threads`]), thread `i`
    /// pinned to `cpus[i % cpus.len()]` (not pinned when empty).
    pub fn new(threads: usize, cpus: Vec<usize>) -> BuilderPool {
        let threads = if threads == 0 {
            Self::default_threads()
        } else {
            threads
        };
        BuilderPool { threads, cpus }
    }

    /// The default: one builder thread per core this process may run on.
    pub fn default_threads() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    /// Builder threads (at most one per ROB is started).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The pool thread that serves ROB `rob` of `robs`.
    pub fn thread_of(&self, rob: usize, robs: usize) -> usize {
        rob % self.threads.min(robs).max(1)
    }

    /// Runs every ROB of `robs` until its input ends or `stop` is set; returns each ROB's
    /// counters (or error) in the order of `robs`. Each ROB's CPU time (`cpu_ns`) is its
    /// thread's, shared evenly among the thread's ROBs.
    pub fn run<'p, S, C, D, K>(
        &self,
        robs: &[RobRun<'_, 'p, D, C, K>],
        stop: &AtomicBool,
    ) -> Result<Vec<Result<SwRodCounters, SwRodError>>, SwRodError>
    where
        S: SuperpageBuffer,
        C: DmaChannel<S> + ?Sized,
        D: PacketDecoder,
        K: FragmentSink<'p>,
    {
        for (r, rob) in robs.iter().enumerate() {
            if rob.builder.threads() != 1 {
                return Err(SwRodError::Config(format!(
                    "ROB {r} ({}) has {} receiving threads; a pooled ROB has one",
                    rob.builder.plan.source_id,
                    rob.builder.threads()
                )));
            }
        }
        let threads = self.threads.min(robs.len()).max(1);
        let mut results: Vec<Option<Result<SwRodCounters, SwRodError>>> =
            (0..robs.len()).map(|_| None).collect();
        let per_thread = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|w| {
                    let cpu = (!self.cpus.is_empty()).then(|| self.cpus[w % self.cpus.len()]);
                    std::thread::Builder::new()
                        .name(format!("swrod-pool{w}"))
                        .spawn_scoped(scope, move || serve(w, threads, robs, cpu, stop))
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(w, h)| match h {
                    Ok(h) => h.join().map_err(|_| SwRodError::Panicked(w)),
                    Err(e) => Err(SwRodError::Spawn(e)),
                })
                .collect::<Vec<_>>()
        });
        for (w, r) in per_thread.into_iter().enumerate() {
            match r {
                Ok(list) => {
                    for (i, c) in list {
                        results[i] = Some(c);
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    for i in (w..robs.len()).step_by(threads) {
                        results[i] = Some(Err(SwRodError::Config(format!(
                            "ROB {i}: its builder thread failed: {msg}"
                        ))));
                    }
                }
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or(Err(SwRodError::Panicked(usize::MAX))))
            .collect())
    }
}

/// Pool thread `w` of `threads`: turns its ROBs until their input ends or `stop` is set.
fn serve<'p, S, C, D, K>(
    w: usize,
    threads: usize,
    robs: &[RobRun<'_, 'p, D, C, K>],
    cpu: Option<usize>,
    stop: &AtomicBool,
) -> Vec<(usize, Result<SwRodCounters, SwRodError>)>
where
    S: SuperpageBuffer,
    C: DmaChannel<S> + ?Sized,
    D: PacketDecoder,
    K: FragmentSink<'p>,
{
    let cpu_start = thread_cpu_ns();
    let pin_failed = cpu.is_some_and(|c| !rodeo_memory::cpu::pin_to_cpu(c));
    let mine: Vec<usize> = (w..robs.len()).step_by(threads).collect();
    let shareds: Vec<PartExchange<'p>> = mine
        .iter()
        .map(|&r| {
            let b = robs[r].builder;
            PartExchange::new(b.plan.window as usize, 1, b.pools.len().min(1))
        })
        .collect();
    for &r in &mine {
        robs[r].sink.begin(1);
    }
    let mut lanes: Vec<_> = mine
        .iter()
        .zip(&shareds)
        .map(|(&r, shared)| {
            let rob = &robs[r];
            Some(rob.builder.lane(0, &rob.channels, shared, rob.sink))
        })
        .collect();
    // Per ROB of this thread: its result once its input ended.
    let mut ended: Vec<Option<Result<SwRodCounters, SwRodError>>> =
        (0..mine.len()).map(|_| None).collect();
    let mut backoff = receiver_backoff();
    let mut last_maintain = std::time::Instant::now();
    // The thread's CPU clock when the ROBs' writing was last shared out (`input_cpu_ns`).
    let mut cpu_mark = thread_cpu_ns();
    // Per ROB of this thread: its input ended this turn (ended after the turn's share, so the
    // writing of its last pops is counted).
    let mut ending = vec![false; mine.len()];
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        // Links, timeouts and counters of idle ROBs: about every millisecond.
        let maintain = last_maintain.elapsed() >= MAINTAIN_EVERY;
        if maintain {
            last_maintain = std::time::Instant::now();
        }
        let (mut got, mut any_ending) = (false, false);
        let mut live = 0usize;
        for k in 0..lanes.len() {
            let Some(lane) = lanes[k].as_mut() else {
                continue;
            };
            let turn = if stopping || lane.shared.stop.load(Ordering::Relaxed) {
                Turn::Ended
            } else {
                lane.turn(maintain)
            };
            match turn {
                Turn::Got => {
                    got = true;
                    live += 1;
                }
                Turn::Idle => live += 1,
                Turn::Ended => {
                    ending[k] = true;
                    any_ending = true;
                }
            }
        }
        if got || maintain || any_ending {
            // Each ROB's `input_cpu_ns` grows by the wall time its lazy cards spent writing in
            // its pops since the last share (vDSO reads in the cards, no system call), all of
            // them together never more than the thread's CPU time since then: one read of the
            // thread's CPU clock (a system call) per busy turn over all the thread's ROBs, or
            // per maintenance, not two per superpage. Exact unless the thread was preempted
            // while writing (the wall time is then scaled down to the CPU time if above it).
            let written: u64 = lanes
                .iter_mut()
                .flatten()
                .map(|lane| {
                    let w = lane.take_written();
                    lane.written_delta = w;
                    w
                })
                .sum();
            let cpu = if written > 0 { thread_cpu_ns() } else { 0 };
            // 0: no writing, or the clock unavailable (nothing shared; the mark stays).
            if cpu > 0 {
                let cpu_ns = cpu.saturating_sub(cpu_mark);
                let (total, cap) = (u128::from(written), u128::from(written.min(cpu_ns)));
                for lane in lanes.iter_mut().flatten() {
                    let w = std::mem::take(&mut lane.written_delta);
                    lane.rx.agg.c.input_cpu_ns += (u128::from(w) * cap / total) as u64;
                }
                cpu_mark = cpu;
            }
        }
        if any_ending {
            for k in 0..lanes.len() {
                if std::mem::take(&mut ending[k]) {
                    if let Some(lane) = lanes[k].take() {
                        ended[k] = Some(lane.end(1));
                    }
                }
            }
        }
        if live == 0 {
            break;
        }
        if got {
            backoff.reset();
        } else {
            backoff.wait();
        }
    }
    // The thread's CPU time, shared evenly among its ROBs.
    let share = thread_cpu_ns().saturating_sub(cpu_start) / mine.len().max(1) as u64;
    mine.iter()
        .zip(ended)
        .map(|(&r, result)| {
            let rob = &robs[r];
            let result = result.unwrap_or(Err(SwRodError::Panicked(w))).map(|mut c| {
                c.pin_failures += u64::from(pin_failed);
                c.cpu_ns = share;
                rob.builder.counters[0].publish(&c);
                rob.sink.finish(&c);
                c
            });
            (r, result)
        })
        .collect()
}
