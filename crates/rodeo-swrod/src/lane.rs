//! One receiving thread's work between turns: a [`Lane`] (its walker and aggregator and its
//! channels) read one superpage per channel per turn, the end of input (every event any
//! thread has seen built), and the thread's CPU time. A builder's own thread turns one lane;
//! a [`BuilderPool`](crate::BuilderPool) thread turns many, one per ROB.

use std::sync::atomic::Ordering;

use rodeo_cards::dma::{DmaChannel, SuperpageBuffer};

use crate::counters::{SharedCounters, SwRodCounters};
use crate::decoder::PacketDecoder;
use crate::error::SwRodError;
use crate::exchange::PartExchange;
use crate::fragment::FragmentSink;
use crate::receiver::receiver_backoff;
use crate::walker::Receiver;

/// What one turn of a receiving thread did.
pub(crate) enum Turn {
    /// Read at least one superpage.
    Got,
    /// Nothing to read (timeouts checked, counters published).
    Idle,
    /// Every channel has ended.
    Ended,
}

/// One receiving thread's state between turns: its walker and aggregator and its channels.
/// A builder's own thread turns one lane; a [`BuilderPool`](crate::BuilderPool) thread turns many, one per ROB.
pub(crate) struct Lane<'b, 'p, 'c, D, K, C: ?Sized> {
    pub(crate) rx: Receiver<'b, 'p, D, K>,
    pub(crate) sink: &'b K,
    pub(crate) channels: &'c [&'c C],
    pub(crate) ended: Vec<bool>,
    pub(crate) shared: &'b PartExchange<'p>,
    pub(crate) published: &'b SharedCounters,
    /// The channels' writing in this lane's pops so far (the sum of their
    /// [`DmaChannel::reader_write_ns`]) when the pool last shared it out, in nanoseconds
    /// ([`BuilderPool`](crate::BuilderPool); see `SwRodCounters::input_cpu_ns`).
    pub(crate) written_ns: u64,
    /// The pool's scratch: this lane's writing in the share being made, in nanoseconds.
    pub(crate) written_delta: u64,
}

impl<'b, 'p, D: PacketDecoder, K: FragmentSink<'p>, C: ?Sized> Lane<'b, 'p, '_, D, K, C> {
    /// Reads one superpage of each channel that has one. With nothing to read and
    /// `maintain`, checks the links and the timeouts and publishes the counters (a pool thread
    /// does that about every millisecond per ROB, not on every idle turn); without
    /// `maintain`, an idle turn returns at once.
    pub(crate) fn turn<S: SuperpageBuffer>(&mut self, maintain: bool) -> Turn
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

    /// Wall time the lane's channels spent writing in its pops since the last call (lazy
    /// cards, [`DmaChannel::reader_write_ns`]; 0 for others), in nanoseconds.
    pub(crate) fn take_written<S: SuperpageBuffer>(&mut self) -> u64
    where
        C: DmaChannel<S>,
    {
        let now: u64 = self.channels.iter().map(|c| c.reader_write_ns()).sum();
        let delta = now.saturating_sub(self.written_ns);
        self.written_ns = now;
        delta
    }

    /// End of input: builds everything any of the builder's `threads` threads has seen,
    /// helping slower threads meanwhile; returns this thread's counters (not yet published).
    pub(crate) fn end(mut self, threads: usize) -> Result<SwRodCounters, SwRodError> {
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

/// CPU time of the calling thread in nanoseconds (0 where the clock is unavailable), from
/// [`rodeo_memory::cpu::thread_cpu_time`], the one reader of the thread CPU clock.
pub(crate) fn thread_cpu_ns() -> u64 {
    u64::try_from(rodeo_memory::cpu::thread_cpu_time().as_nanos()).unwrap_or(u64::MAX)
}
