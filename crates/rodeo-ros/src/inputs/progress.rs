//! The node's readout progress ([`ReadoutProgress`]): the L1IDs complete on every channel and
//! whether the input ended, published by a wrapper around the node's input
//! (`ProgressInput`) for a data-driven L1.
//!
//! # Progress
//!
//!
//! [`ReadoutProgress`] is what the node publishes after each poll that moved data: `complete`,
//! the number of L1IDs, counted from the first (L1ID 0) in the readout's wrap order, that every
//! channel has reached (a channel's count is its newest L1ID's position plus one, unwrapped
//! through ECR wraps), and `ended`, set once `complete` is final: a channel at the lowest count
//! has its link down and everything it delivered read (a file played to its end, a TCP sender
//! that closed), so no L1ID past `complete` can ever be complete. That is when every channel
//! has ended, or when one has that the others passed: the others' later fragments are never
//! built (a link file of 5,000 fragments beside one of 7,000 whose tail did not fit the store
//! held the run forever, its sender blocked by back-pressure, before 2026-12-07). A channel
//! that skipped an L1ID still counts past it: the event is built without that fragment (LOST).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rodeo_format::slink::SlinkCounters;

use crate::server::input::Input;
use crate::store::EventStore;

/// What a node publishes of its input's progress; see the module docs.
#[derive(Debug, Default)]
pub struct ReadoutProgress {
    complete: AtomicU64,
    ended: AtomicBool,
}

impl ReadoutProgress {
    /// L1IDs, counted from the first, that every channel has reached.
    pub fn complete(&self) -> u64 {
        self.complete.load(Ordering::Acquire)
    }

    /// `complete` is final: a channel at the lowest count has ended and was read to its end
    /// (module docs). Read before [`ReadoutProgress::complete`]: `complete` is final once this
    /// is true.
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

/// Wraps a node's input and publishes its [`ReadoutProgress`] after each poll.
pub(crate) struct ProgressInput {
    inner: Box<dyn Input>,
    progress: Arc<ReadoutProgress>,
    /// L1IDs per ECR cycle, and the extended sequence's period (256 cycles).
    wrap: u64,
    /// Per channel: the newest L1ID seen and its unwrapped count (position + 1).
    lanes: Vec<(Option<u32>, u64)>,
    /// Polls so far (the busy polls' finality check).
    polls: u64,
}

/// A busy input's count is checked for finality every this many polls (an idle one's at each).
const FINAL_CHECK_EVERY: u64 = 64;

impl ProgressInput {
    pub(crate) fn new(inner: Box<dyn Input>, channels: usize, wrap: u32) -> ProgressInput {
        ProgressInput {
            inner,
            progress: Arc::default(),
            wrap: u64::from(wrap.max(1)),
            lanes: vec![(None, 0); channels],
            polls: 0,
        }
    }

    pub(crate) fn progress(&self) -> Arc<ReadoutProgress> {
        Arc::clone(&self.progress)
    }

    /// Whether the count every channel has reached is final (module docs): the input has
    /// finished, or a channel at the lowest count has ended. Asked on idle polls and every
    /// [`FINAL_CHECK_EVERY`]-th busy one, after the counts took in everything stored.
    fn is_final(&self) -> bool {
        if self.inner.finished() {
            return true;
        }
        let Some(min) = self.lanes.iter().map(|l| l.1).min() else {
            return false;
        };
        self.lanes
            .iter()
            .enumerate()
            .any(|(c, l)| l.1 == min && self.inner.channel_ended(c))
    }

    /// Position of extended L1ID `l1id` in the sequence 0, 1, ... (ECR in bits 31..24).
    fn position(&self, l1id: u32) -> u64 {
        u64::from(l1id >> 24) * self.wrap + u64::from(l1id & 0x00FF_FFFF)
    }

    fn update(&mut self, store: &EventStore) {
        let period = 256 * self.wrap;
        let mut min = u64::MAX;
        for c in 0..self.lanes.len() {
            let newest = store.last_l1id(c);
            let (prev, count) = self.lanes[c];
            if newest != prev {
                if let Some(n) = newest {
                    let now = self.position(n);
                    let count = match prev {
                        None => now + 1,
                        Some(p) => count + (now + period - self.position(p)) % period,
                    };
                    self.lanes[c] = (newest, count);
                }
            }
            min = min.min(self.lanes[c].1);
        }
        if min != u64::MAX && min > self.progress.complete.load(Ordering::Relaxed) {
            self.progress.complete.store(min, Ordering::Release);
        }
    }
}

impl Input for ProgressInput {
    fn poll(&mut self, store: &mut EventStore) -> u64 {
        let n = self.inner.poll(store);
        if n > 0 {
            self.update(store);
        }
        // On idle polls, and now and then on busy ones: a channel that ended while another
        // still streams makes the count final too (module docs).
        self.polls = self.polls.wrapping_add(1);
        if (n == 0 || self.polls % FINAL_CHECK_EVERY == 0)
            && !self.progress.ended.load(Ordering::Relaxed)
            && self.is_final()
        {
            self.update(store);
            self.progress.ended.store(true, Ordering::Release);
        }
        n
    }

    fn channel_ended(&self, c: usize) -> bool {
        self.inner.channel_ended(c)
    }

    fn slink_counters(&self) -> SlinkCounters {
        self.inner.slink_counters()
    }

    fn stalls(&self) -> u64 {
        self.inner.stalls()
    }

    fn finished(&self) -> bool {
        self.inner.finished()
    }

    fn end_links(&mut self) -> bool {
        self.inner.end_links()
    }

    fn units_left(&mut self) -> u64 {
        self.inner.units_left()
    }

    fn release(&mut self, store: &mut EventStore) {
        self.inner.release(store);
    }
}
