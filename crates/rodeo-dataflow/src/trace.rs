//! Per-event time stamps at each stage of the dataflow, sampled, for a Chrome/Perfetto trace
//! (what the DataCollection papers did with NetLogger).
//!
//! # State and ownership
//!
//! A [`TraceLog`] lives in an application's shared counters (`Arc`). It is off until
//! [`TraceLog::enable`] is called before the run; then the application's thread calls
//! [`TraceLog::record`] at each stage, which keeps an event only when its global id is a
//! multiple of the sampling interval and pushes a fixed-size [`TraceRecord`] onto a bounded
//! lock-free queue (no lock, no allocation on record).
//!
//! # Back-pressure
//!
//! None: tracing must never slow the dataflow. A record that finds the queue full is dropped
//! and counted ([`TraceLog::dropped`]); the reader drains the queue at the end of the run (or
//! periodically), so size the capacity for the sampled events of a run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use rodeo_memory::{BoundedQueue, FullPolicy, Pushed};

/// The stages an event goes through, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Stage {
    /// The L1 source produced the accept (supervisor).
    L1Accept,
    /// The supervisor assigned the event to a DCM (recorded by the DCM on arrival).
    Assigned,
    /// A data request was sent to a readout node (DCM).
    RequestSent,
    /// A data request was answered (DCM).
    RequestAnswered,
    /// The trigger algorithm decided (DCM).
    Decided,
    /// The logger acknowledged the event: it is on disk (DCM).
    Logged,
    /// The supervisor received the decision (the event is done).
    Done,
}

impl Stage {
    /// The stage's name in the trace.
    pub fn name(self) -> &'static str {
        match self {
            Stage::L1Accept => "l1_accept",
            Stage::Assigned => "assigned",
            Stage::RequestSent => "request_sent",
            Stage::RequestAnswered => "request_answered",
            Stage::Decided => "decided",
            Stage::Logged => "logged",
            Stage::Done => "done",
        }
    }
}

/// One time stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRecord {
    /// The event.
    pub global_id: u64,
    /// Nanoseconds since [`epoch`].
    pub t_ns: u64,
    /// The stage.
    pub stage: Stage,
    /// Stage detail (the readout node index for requests, else 0).
    pub detail: u32,
}

/// The process-wide time origin of every trace record.
pub fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// A sampled, bounded, lock-free log of [`TraceRecord`]s; see the module docs.
#[derive(Debug, Default)]
pub struct TraceLog {
    every: AtomicU64,
    /// `drop_newest`: a record that finds the queue full is dropped, counted by the queue.
    queue: OnceLock<BoundedQueue<TraceRecord>>,
}

impl TraceLog {
    /// Turns tracing on: keep the events whose global id is a multiple of `every` (>= 1), at
    /// most `capacity` records until drained. Call before the run; a second call changes the
    /// interval only.
    pub fn enable(&self, every: u64, capacity: usize) {
        let _ = epoch();
        let _ = self
            .queue
            .get_or_init(|| BoundedQueue::new("dataflow.trace", capacity, FullPolicy::DropNewest));
        self.every.store(every.max(1), Ordering::Relaxed);
    }

    /// Whether `global_id` is sampled.
    #[inline]
    pub fn sampled(&self, global_id: u64) -> bool {
        let every = self.every.load(Ordering::Relaxed);
        every != 0 && global_id % every == 0
    }

    /// Records `stage` of `global_id` now, if tracing is on and the event sampled.
    #[inline]
    pub fn record(&self, global_id: u64, stage: Stage, detail: u32) {
        if !self.sampled(global_id) {
            return;
        }
        let Some(q) = self.queue.get() else {
            return;
        };
        let t_ns = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX);
        // drop_newest never refuses: the result says queued or dropped (counted by the queue).
        let _: Result<Pushed, _> = q.push(TraceRecord {
            global_id,
            t_ns,
            stage,
            detail,
        });
    }

    /// Takes every record queued so far.
    pub fn drain(&self, out: &mut Vec<TraceRecord>) {
        if let Some(q) = self.queue.get() {
            while let Some(r) = q.pop() {
                out.push(r);
            }
        }
    }

    /// Records dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.queue.get().map_or(0, BoundedQueue::dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_then_sampled_and_bounded() {
        let t = TraceLog::default();
        t.record(0, Stage::L1Accept, 0);
        let mut v = Vec::new();
        t.drain(&mut v);
        assert!(v.is_empty());
        t.enable(10, 3);
        for gid in 0..100 {
            t.record(gid, Stage::Decided, 0);
        }
        t.drain(&mut v);
        assert_eq!(
            v.iter().map(|r| r.global_id).collect::<Vec<_>>(),
            vec![0, 10, 20]
        );
        assert_eq!(t.dropped(), 7);
        assert!(v.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
    }
}
