//! The emulated DMA engine's side of a channel ([`Lane`]): taking empty superpages, filling
//! them through the generator within the channel's limits, handing them over (partly filled
//! at their deadline), stalls, the end of the link ([`DmaChannel::end_link`](super::DmaChannel::end_link))
//! and the stop; and the card thread's loop over its channels ([`engine_loop`]). See the
//! parent module's docs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_memory::{Backoff, BackoffSpec};

use super::limits::Limits;
use super::{
    ChannelState, EmulatedConfig, EngineState, Fill, FillClock, Filled, Generator, SuperpageBuffer,
    FLUSH_INTERVAL,
};

/// One channel as its card's engine sees it.
pub(super) struct Lane<S, G> {
    pub(super) shared: Arc<ChannelState<S>>,
    pub(super) generator: G,
    pub(super) limits: Option<Limits>,
    pub(super) sequence: u64,
    /// The superpage being filled and what it holds so far.
    pub(super) current: Option<(S, Fill)>,
    /// When the current superpage must be handed over (set with its first unit; module docs).
    pub(super) flush_by: Option<Instant>,
    /// A filled superpage the full ready queue did not take yet.
    pub(super) ready: Option<Filled<S>>,
    /// The ready queue was full at the last attempt (its full event is counted).
    pub(super) ready_full: bool,
    /// When the channel started to wait for an empty superpage or ready-queue room.
    pub(super) stalled_since: Option<Instant>,
    /// Stopped, finished or unfit: the engine no longer serves it.
    pub(super) done: bool,
    /// A lazy channel's engine state and clock: each `fill`'s time is added to it (an engine
    /// thread measures its own instead).
    pub(super) fill_clock: Option<(Arc<EngineState>, FillClock)>,
}

impl<S: SuperpageBuffer, G: Generator> Lane<S, G> {
    pub(super) fn new(config: EmulatedConfig, generator: G) -> Lane<S, G> {
        Lane {
            shared: Arc::new(ChannelState::new(config.queue_depth.max(1))),
            generator,
            limits: Limits::new(&config),
            sequence: 0,
            current: None,
            flush_by: None,
            ready: None,
            ready_full: false,
            stalled_since: None,
            done: false,
            fill_clock: None,
        }
    }

    /// `generator.fill`, its time added to the lazy channel's state when `fill_clock` is set:
    /// CPU time, or wall time for the reader to scale.
    fn fill(
        generator: &mut G,
        fill_clock: &Option<(Arc<EngineState>, FillClock)>,
        buf: &mut [u8],
        max_units: u64,
        flush_by: &mut Option<Instant>,
    ) -> Fill {
        match fill_clock {
            None => generator.fill_until(buf, max_units, flush_by),
            Some((state, FillClock::ThreadCpu)) => {
                let t0 = rodeo_memory::cpu::thread_cpu_time();
                let f = generator.fill_until(buf, max_units, flush_by);
                let ns = rodeo_memory::cpu::thread_cpu_time()
                    .saturating_sub(t0)
                    .as_nanos() as u64;
                state.cpu_ns.fetch_add(ns, Ordering::Relaxed);
                f
            }
            Some((state, FillClock::Wall)) => {
                let t0 = Instant::now();
                let f = generator.fill_until(buf, max_units, flush_by);
                let ns = t0.elapsed().as_nanos() as u64;
                state.write_ns.fetch_add(ns, Ordering::Relaxed);
                f
            }
        }
    }

    fn stall(&mut self) {
        if self.stalled_since.is_none() {
            self.shared.stalls.fetch_add(1, Ordering::Relaxed);
            self.stalled_since = Some(Instant::now());
        }
    }

    fn unstall(&mut self) {
        if let Some(t) = self.stalled_since.take() {
            self.shared
                .stall_ns
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }

    pub(super) fn finish(&mut self) {
        self.unstall();
        self.done = true;
        self.shared.running.store(false, Ordering::Release);
    }

    /// One turn of [`DmaChannel::end_link`]: the superpage kept back goes first (false while
    /// the ready queue has no room: the reader makes some), then the partly filled one, then
    /// the link goes down.
    fn end_link(&mut self) -> bool {
        if !self.push_ready() {
            return false;
        }
        if self.current.as_ref().is_some_and(|c| c.1.units > 0) {
            self.hand_over();
            if self.ready.is_some() {
                // Kept back (the ready queue is full): pushed on a later turn.
                return true;
            }
        }
        self.finish();
        true
    }

    /// Hands the current superpage over (to the ready queue, or kept until it has room).
    fn hand_over(&mut self) {
        self.flush_by = None;
        let Some((superpage, fill)) = self.current.take() else {
            return;
        };
        self.shared
            .bytes
            .fetch_add(fill.bytes as u64, Ordering::Relaxed);
        self.shared.units.fetch_add(fill.units, Ordering::Relaxed);
        self.ready = Some(Filled {
            superpage,
            bytes_used: fill.bytes,
            units: fill.units,
            sequence: self.sequence,
            unit_bytes: fill.unit_bytes,
        });
        self.sequence += 1;
        self.push_ready();
    }

    /// Pushes the kept filled superpage; true when it went (or there was none).
    fn push_ready(&mut self) -> bool {
        let Some(filled) = self.ready.take() else {
            return true;
        };
        // The first attempt applies the queue's policy and counts a full event; retries on the
        // following turns of the same stall do not count again.
        let pushed = if self.ready_full {
            self.shared.ready.retry_push(filled)
        } else {
            self.shared.ready.push(filled).map(drop).map_err(|r| r.item)
        };
        match pushed {
            Ok(()) => {
                self.ready_full = false;
                self.unstall();
                self.shared.superpages.fetch_add(1, Ordering::Relaxed);
                if self.generator.is_finished() {
                    self.finish();
                }
                true
            }
            Err(filled) => {
                self.ready = Some(filled);
                self.ready_full = true;
                self.stall();
                false
            }
        }
    }

    /// One turn: returns true when the channel moved (a superpage taken, units written or a
    /// superpage handed over).
    pub(super) fn turn(&mut self) -> bool {
        if self.shared.stop.load(Ordering::Acquire) {
            // What was written is handed over if the ready queue has room; then down.
            if self.current.as_ref().is_some_and(|c| c.1.units > 0) {
                self.hand_over();
            }
            self.finish();
            return true;
        }
        if self.shared.ending.load(Ordering::Acquire) {
            return self.end_link();
        }
        if self.ready.is_some() {
            return self.push_ready();
        }
        let mut moved = false;
        if self.current.is_none() {
            match self.shared.transfer.pop() {
                Some(s) => {
                    self.unstall();
                    self.current = Some((s, Fill::default()));
                    moved = true;
                }
                None => {
                    self.stall();
                    return false;
                }
            }
        }
        let max_units = match &mut self.limits {
            None => u64::MAX,
            Some(l) => match l.grant() {
                0 => {
                    // Paced out for now: what waits in the superpage goes at its deadline.
                    let now = l.last;
                    if self.flush_by.is_some_and(|d| now >= d) {
                        self.hand_over();
                        return true;
                    }
                    return moved;
                }
                n => n,
            },
        };
        let waits = self.generator.waits_for_input();
        let Some((superpage, fill)) = self.current.as_mut() else {
            return moved;
        };
        let buf = superpage.as_bytes_mut();
        let f = if fill.bytes < buf.len() && !self.generator.is_finished() {
            Self::fill(
                &mut self.generator,
                &self.fill_clock,
                &mut buf[fill.bytes..],
                max_units,
                &mut self.flush_by,
            )
        } else {
            Fill::default()
        };
        if let Some(l) = &mut self.limits {
            l.charge(f);
        }
        fill.append(f);
        let total = *fill;
        let finished = self.generator.is_finished();
        if f.units > 0 {
            // Unlimited sources fill a superpage in one call; the others go on next turn
            // until a call writes nothing (full, or an outside source paused), or until the
            // superpage's deadline (one clock read per turn, never per unit).
            if (self.limits.is_none() && !waits) || finished {
                self.hand_over();
                return true;
            }
            let now = Instant::now();
            match self.flush_by {
                None => self.flush_by = Some(now + FLUSH_INTERVAL),
                Some(d) if now >= d => self.hand_over(),
                Some(_) => {}
            }
            return true;
        }
        if total.units > 0 || finished {
            self.hand_over();
            return true;
        }
        if waits {
            return moved; // nothing arrived yet: keep waiting with an empty superpage
        }
        // Not even one unit fits an empty superpage: a configuration error; the link goes down.
        self.current = None;
        self.finish();
        true
    }
}

pub(super) fn engine_loop<S: SuperpageBuffer, G: Generator>(
    mut lanes: Vec<Lane<S, G>>,
    engine: &EngineState,
) {
    // Only when no channel of the card could do anything: an idle or stalled card costs little
    // CPU yet resumes within about 100 us.
    let mut backoff = Backoff::new(BackoffSpec::IDLE);
    let mut last_cpu = Instant::now();
    let publish = || {
        let ns = rodeo_memory::cpu::thread_cpu_time().as_nanos() as u64;
        engine.cpu_ns.store(ns, Ordering::Relaxed);
    };
    loop {
        let mut moved = false;
        let mut live = 0usize;
        for lane in lanes.iter_mut().filter(|l| !l.done) {
            moved |= lane.turn();
            live += usize::from(!lane.done);
        }
        if live == 0 {
            break;
        }
        if engine.stop.load(Ordering::Acquire) {
            break;
        }
        if last_cpu.elapsed() >= Duration::from_millis(1) {
            last_cpu = Instant::now();
            publish();
        }
        if moved {
            backoff.reset();
        } else {
            backoff.wait();
        }
    }
    for lane in lanes.iter_mut().filter(|l| !l.done) {
        lane.finish();
    }
    publish();
}
