//! The core thread's loop. See the parent module for the design.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rodeo_format::fragment::Status;
use rodeo_transport::message::{header_bytes, MessageType};

use super::descriptor::Descriptors;
use super::source::{Ids, Incoming, RequestSource};

/// How long an idle loop waits for a message before polling the input again.
const IDLE_WAIT: std::time::Duration = std::time::Duration::from_millis(1);
use super::{Input, ServerConfig, ServerStats, Stopped};
use crate::store::{empty_rob, EventStore, Lookup, PageRef};

/// The core thread's state; requests come from (and replies go to) `S`.
pub(super) struct Core<S: RequestSource> {
    source: S,
    config: ServerConfig,
    store: EventStore,
    input: Box<dyn Input>,
    stop: Arc<AtomicBool>,
    stats: Arc<ServerStats>,
    descriptors: Descriptors,
    last_clear: Option<u32>,
    /// Reply scratch: header, L1ID, count and the empty fragments, as bytes.
    head: Vec<u8>,
    /// Reply scratch: the present fragments' page segments.
    segments: Vec<PageRef>,
}

/// Whether a request can be answered now.
enum Ready {
    Yes,
    No,
}

impl<S: RequestSource> Core<S> {
    pub(super) fn new(
        source: S,
        config: ServerConfig,
        store: EventStore,
        input: Box<dyn Input>,
        stop: Arc<AtomicBool>,
        stats: Arc<ServerStats>,
    ) -> Core<S> {
        let descriptors = Descriptors::new(config.descriptors, store.channels());
        Core {
            source,
            config,
            segments: Vec::with_capacity(store.channels() * 2),
            head: Vec::with_capacity(64 + store.channels() * 4 * crate::store::EMPTY_ROB_WORDS),
            store,
            input,
            stop,
            stats,
            descriptors,
            last_clear: None,
        }
    }

    pub(super) fn run(mut self) -> Stopped {
        let cpu0 = crate::cputime::thread_cpu_time();
        let mut msg = S::Buffer::default();
        let batch = self.config.batch.max(1);
        while !self.stop.load(Ordering::Acquire) {
            let mut work = self.store.reclaim() as u64;
            let ingested = self.input.poll(&mut self.store);
            if ingested > 0 {
                self.stats
                    .input_fragments
                    .fetch_add(ingested, Ordering::Relaxed);
            }
            work += ingested;
            let mut changed = ingested > 0;
            for _ in 0..batch {
                if self.descriptors.available() == 0 {
                    self.stats
                        .descriptors_exhausted
                        .fetch_add(1, Ordering::Relaxed);
                    break;
                }
                if !self.source.try_recv(&mut msg) {
                    break;
                }
                work += 1;
                changed |= self.handle(S::view(&msg));
            }
            // The clock is read only when something waits (most turns nothing does).
            if self.descriptors.pending() > 0 {
                let now = Instant::now();
                let expired = self.descriptors.first_deadline().is_some_and(|d| d <= now);
                if changed || expired {
                    self.recheck(now, false);
                }
            }
            if work == 0 {
                // Idle: wait for a message (or input) for up to a millisecond.
                if self.descriptors.available() > 0 {
                    if self.source.recv_timeout(&mut msg, IDLE_WAIT)
                        && self.handle(S::view(&msg))
                        && self.descriptors.pending() > 0
                    {
                        self.recheck(Instant::now(), false);
                    }
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            }
        }
        // Answer everything still pending, flagged.
        self.recheck(Instant::now(), true);
        self.store.reclaim();
        Stopped {
            counters: self.stats.snapshot(),
            slink: self.input.slink_counters(),
            input_stalls: self.input.stalls(),
            core_cpu: crate::cputime::thread_cpu_time().saturating_sub(cpu0),
            store: self.store,
        }
    }

    /// Handles one message; true when it may let pending requests complete (a clear).
    fn handle(&mut self, msg: Incoming<'_>) -> bool {
        match msg {
            Incoming::Bad => {
                self.stats.bad_messages.fetch_add(1, Ordering::Relaxed);
                false
            }
            Incoming::DataRequest {
                peer,
                transaction,
                l1id,
                robs,
            } => {
                self.stats.requests.fetch_add(1, Ordering::Relaxed);
                let Some(d) = self.descriptors.take() else {
                    // The loop reads only while descriptors are free.
                    return false;
                };
                let all = robs.is_empty();
                let desc = self.descriptors.get_mut(d);
                desc.peer.clear();
                desc.peer.extend_from_slice(peer);
                desc.transaction = transaction;
                desc.l1id = l1id;
                desc.robs.clear();
                if all {
                    for c in 0..self.store.channels() {
                        desc.robs.push(self.store.source_id(c).unwrap_or(0));
                    }
                } else {
                    match robs {
                        Ids::Wire(l) => desc.robs.extend(l.iter()),
                        Ids::Slice(s) => desc.robs.extend_from_slice(s),
                    }
                }
                match self.ready(d) {
                    Ready::Yes => self.answer(d, false),
                    Ready::No => {
                        // The deadline matters only to a parked request.
                        self.descriptors.get_mut(d).deadline =
                            Instant::now() + self.config.pending_timeout;
                        self.stats.parked.fetch_add(1, Ordering::Relaxed);
                        self.descriptors.park(d);
                        self.stats
                            .pending_now
                            .store(self.descriptors.pending() as u64, Ordering::Relaxed);
                    }
                }
                false
            }
            Incoming::Clear { sequence, l1ids } => {
                let seq = sequence;
                self.stats.clears.fetch_add(1, Ordering::Relaxed);
                if let Some(last) = self.last_clear {
                    if seq != last.wrapping_add(1) {
                        self.stats.clear_gaps.fetch_add(1, Ordering::Relaxed);
                    }
                }
                self.last_clear = Some(seq);
                self.stats
                    .cleared_l1ids
                    .fetch_add(l1ids.len() as u64, Ordering::Relaxed);
                match l1ids {
                    Ids::Wire(l) => self.store.clear(l.iter()),
                    Ids::Slice(s) => self.store.clear(s.iter().copied()),
                };
                true
            }
            Incoming::KeepAlive => {
                self.stats.keepalives.fetch_add(1, Ordering::Relaxed);
                false
            }
            Incoming::Unexpected => {
                self.stats
                    .unexpected_messages
                    .fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// True when every requested fragment is present or lost.
    fn ready(&self, d: u32) -> Ready {
        let desc = self.descriptors.get(d);
        for &rob in &desc.robs {
            if let Some(c) = self.store.channel_of(rob) {
                if self.store.lookup(c, desc.l1id) == Lookup::Pending {
                    return Ready::No;
                }
            }
        }
        Ready::Yes
    }

    /// Re-checks every pending request once, in order; answers those ready, expired, or all
    /// of them with `flush`.
    fn recheck(&mut self, now: Instant, flush: bool) {
        for _ in 0..self.descriptors.pending() {
            let Some(d) = self.descriptors.unpark() else {
                break;
            };
            let expired = self.descriptors.get(d).deadline <= now;
            match self.ready(d) {
                Ready::Yes => self.answer(d, false),
                Ready::No if expired || flush => {
                    if expired {
                        self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                    }
                    self.answer(d, true);
                }
                Ready::No => self.descriptors.park(d),
            }
        }
        self.stats
            .pending_now
            .store(self.descriptors.pending() as u64, Ordering::Relaxed);
    }

    /// Sends the reply of descriptor `d` and frees it. Missing fragments are empty ROB
    /// fragments flagged LOST or (only when `give_up`) PENDING.
    fn answer(&mut self, d: u32, give_up: bool) {
        let desc = self.descriptors.get(d);
        let l1id = desc.l1id;
        self.head.clear();
        self.head.extend_from_slice(&[0u8; 12]);
        self.head.extend_from_slice(&l1id.to_le_bytes());
        self.head
            .extend_from_slice(&(desc.robs.len() as u32).to_le_bytes());
        self.segments.clear();
        let (mut lost, mut pending, mut present) = (0u64, 0u64, 0u64);
        for &rob in &desc.robs {
            let status = match self.store.channel_of(rob) {
                None => {
                    self.stats.unknown_robs.fetch_add(1, Ordering::Relaxed);
                    Status::ROB_FRAGMENT_LOST
                }
                Some(c) => {
                    let segs = &mut self.segments;
                    if self.store.with_segments(c, l1id, |r| segs.push(r)) {
                        present += 1;
                        continue;
                    }
                    match self.store.lookup(c, l1id) {
                        Lookup::Pending if give_up => Status::ROB_FRAGMENT_PENDING,
                        Lookup::Pending => {
                            debug_assert!(false, "answered a request that is not ready");
                            Status::ROB_FRAGMENT_PENDING
                        }
                        _ => Status::ROB_FRAGMENT_LOST,
                    }
                }
            };
            if status == Status::ROB_FRAGMENT_LOST {
                lost += 1;
            } else {
                pending += 1;
            }
            for w in empty_rob(rob, l1id, status) {
                self.head.extend_from_slice(&w.to_le_bytes());
            }
        }
        let seg_bytes: usize = self.segments.iter().map(|r| r.words().len() * 4).sum();
        let payload = (self.head.len() - 12 + seg_bytes) as u32;
        self.head[..12].copy_from_slice(&header_bytes(
            MessageType::DataReply,
            desc.transaction,
            payload,
        ));
        let sent = self
            .source
            .reply(&desc.peer, &self.head, &mut self.segments);
        let s = &self.stats;
        match sent {
            Ok(()) => {
                s.replies.fetch_add(1, Ordering::Relaxed);
                s.fragments_sent.fetch_add(present, Ordering::Relaxed);
                s.bytes_sent
                    .fetch_add(u64::from(payload), Ordering::Relaxed);
                s.lost_fragments.fetch_add(lost, Ordering::Relaxed);
                s.pending_fragments.fetch_add(pending, Ordering::Relaxed);
            }
            Err(_) => {
                s.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.segments.clear();
        self.descriptors.put(d);
    }
}
