//! The core thread's loop. See the parent module for the design.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rodeo_format::fragment::Status;
use rodeo_memory::{Backoff, BackoffSpec};
use rodeo_transport::message::{header_bytes, MessageType};

use super::channels::{ChannelStats, PUBLISH_TURNS};
use super::descriptor::Descriptors;
use super::peers::PeerDrops;
use super::source::{Ids, Incoming, ReplyRefused, RequestSource};

/// How long an idle loop waits for a message before polling the input again.
const IDLE_WAIT: std::time::Duration = std::time::Duration::from_millis(1);
use super::input::{END_LINKS_IDLE, END_LINKS_LIMIT};
use super::{bump, Input, ServerConfig, ServerStats, Stopped};
use crate::store::{empty_rob, EventStore, HeldSegment, Lookup, PageRef};

/// The core thread's state; requests come from (and replies go to) `S`.
pub(super) struct Core<S: RequestSource> {
    source: S,
    config: ServerConfig,
    store: EventStore,
    input: Box<dyn Input>,
    stop: Arc<AtomicBool>,
    stats: Arc<ServerStats>,
    /// Replies dropped per peer (written on the drop path only).
    drops: Arc<PeerDrops>,
    /// Per-channel figures for monitors (published, see [`super::channels`]).
    channels: Arc<ChannelStats>,
    /// The source's endpoint, for the drop warnings.
    endpoint: String,
    descriptors: Descriptors,
    /// The most requests that may wait in the pending queue: the configured descriptors (the
    /// pool has [`SPARE_DESCRIPTORS`] more).
    park_limit: usize,
    /// Per channel, the request stamp that last named it: a ROB id repeated within one
    /// request is seen without a search.
    seen: Vec<u32>,
    /// The current request's stamp (never 0 while in use; `seen` starts at 0).
    stamp: u32,
    last_clear: Option<u32>,
    /// A rejoined node's next L1ID to release without a clear (`rejoin`).
    sweep_from: Option<u32>,
    /// A rejoined node's run front, moved on by each clear (`inputs::follow`).
    run_front: Option<crate::inputs::follow::RunFront>,
    /// Reply scratch: header, L1ID, count and the empty fragments, as bytes.
    head: Vec<u8>,
    /// Reply scratch: the present fragments' page segments.
    segments: Vec<PageRef>,
    /// Reply scratch for a source that takes held segments.
    held: Vec<HeldSegment>,
}

/// The figures the core thread publishes, shared with its monitors: the server's counters,
/// the replies dropped per peer, the per-channel figures.
pub(super) struct CoreFigures {
    /// The server's counters.
    pub stats: Arc<ServerStats>,
    /// Replies dropped per peer.
    pub drops: Arc<PeerDrops>,
    /// Per-channel figures.
    pub channels: Arc<ChannelStats>,
}

/// Descriptors beyond the configured ones that never wait in the pending queue: with every
/// configured descriptor parked, the core thread still reads (clears, the other clients'
/// requests), and a request that would wait then is answered at once, what may still arrive
/// flagged PENDING (`pending_overflow`; the client asks again, protocol rule 3). Without it, a
/// peer asking far ahead of the input (or for what never comes) would hold every descriptor
/// until the pending timeout, and the node would read nothing meanwhile, clears included.
const SPARE_DESCRIPTORS: usize = 1;

/// How [`Core::answer`] treats a fragment that may still arrive.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// Send nothing and return false: the request waits (it is parked or stays parked).
    Wait,
    /// Answer it now, the fragment flagged PENDING (timeout, the server stops, or the pending
    /// queue is full).
    GiveUp,
}

impl<S: RequestSource> Core<S> {
    pub(super) fn new(
        source: S,
        config: ServerConfig,
        store: EventStore,
        input: Box<dyn Input>,
        stop: Arc<AtomicBool>,
        figures: CoreFigures,
    ) -> Core<S> {
        let CoreFigures {
            stats,
            drops,
            channels,
        } = figures;
        let config_rejoin = config.rejoin_from;
        let run_front = config.run_front.clone();
        let mut store = store;
        store.set_rejoining(config_rejoin.is_some());
        let descriptors = Descriptors::new(
            config.descriptors.max(1) + SPARE_DESCRIPTORS,
            store.channels(),
        );
        Core {
            park_limit: config.descriptors.max(1),
            endpoint: source.endpoint(),
            seen: vec![0; store.channels()],
            stamp: 0,
            drops,
            channels,
            source,
            config,
            segments: Vec::with_capacity(store.channels() * 2),
            held: Vec::with_capacity(store.channels() * 2),
            head: Vec::with_capacity(64 + store.channels() * 4 * crate::store::EMPTY_ROB_WORDS),
            store,
            input,
            stop,
            stats,
            descriptors,
            last_clear: None,
            sweep_from: config_rejoin,
            run_front,
        }
    }

    pub(super) fn run(mut self) -> Stopped {
        let core_pinned = self
            .config
            .core_cpu
            .is_some_and(rodeo_memory::cpu::pin_to_cpu);
        if let (Some(cpu), false) = (self.config.core_cpu, core_pinned) {
            tracing::warn!(
                endpoint = %self.endpoint,
                "the core thread could not be pinned to CPU {cpu} (the kernel refused it): it \
                 runs where the kernel puts it"
            );
        }
        let cpu0 = rodeo_memory::cpu::thread_cpu_time();
        let mut idle_cpu = std::time::Duration::ZERO;
        let mut msg = S::Buffer::default();
        let batch = self.config.batch.max(1);
        let mut busy_turns = 0u64;
        // Fragments stored since parked requests were last re-checked (see below).
        let mut unchecked = 0u64;
        while !self.stop.load(Ordering::Acquire) {
            self.source.maintain(&mut self.store);
            let mut work = self.store.reclaim() as u64;
            let ingested = self.input.poll(&mut self.store);
            if ingested > 0 {
                bump(&self.stats.input_fragments, ingested);
            }
            work += ingested;
            unchecked += ingested;
            let mut changed = false;
            for _ in 0..batch {
                if self.descriptors.available() == 0 {
                    bump(&self.stats.descriptors_exhausted, 1);
                    break;
                }
                if !self.source.try_recv(&mut msg) {
                    break;
                }
                work += 1;
                changed |= self.handle(S::view(&msg));
            }
            // The clock is read only when something waits (most turns nothing does). A re-check
            // costs a look-up per parked request, so new fragments alone trigger one only when
            // as many have come as requests wait (amortised: at most one look-up per fragment
            // stored) or when the input pauses; a clear, or a deadline, always does.
            let pending = self.descriptors.pending() as u64;
            if pending > 0 {
                let now = Instant::now();
                let expired = self.descriptors.first_deadline().is_some_and(|d| d <= now);
                let paused = ingested == 0 && unchecked > 0;
                if changed || expired || unchecked >= pending || paused {
                    self.recheck(now, false);
                    unchecked = 0;
                }
            } else {
                unchecked = 0;
            }
            if work > 0 {
                busy_turns += 1;
                if busy_turns % PUBLISH_TURNS == 0 {
                    self.channels.publish(&self.store);
                }
            } else {
                self.channels.publish(&self.store);
                // Idle: wait for a message (or input) for up to a millisecond. The CPU the wait
                // itself costs (going to sleep, being woken) is counted apart: a saturated node
                // never pays it.
                let wait0 = rodeo_memory::cpu::thread_cpu_time();
                // Idle turns only: the input's stall count is read from its channels.
                self.stats
                    .input_stalls
                    .store(self.input.stalls(), Ordering::Relaxed);
                if self.descriptors.available() > 0 {
                    let got = self.source.recv_timeout(&mut msg, IDLE_WAIT);
                    idle_cpu += rodeo_memory::cpu::thread_cpu_time().saturating_sub(wait0);
                    if got && self.handle(S::view(&msg)) && self.descriptors.pending() > 0 {
                        self.recheck(Instant::now(), false);
                    }
                } else {
                    // Every reply descriptor is in flight: wait for the transport to release
                    // one (the one back-off type, 50 us sleeps).
                    Backoff::new(BackoffSpec::PACED).wait();
                    idle_cpu += rodeo_memory::cpu::thread_cpu_time().saturating_sub(wait0);
                }
            }
        }
        let input_from_outside = self.input.end_links();
        let input_units_left = if input_from_outside {
            self.read_links_in()
        } else {
            0
        };
        // Answer everything still pending, flagged.
        self.recheck(Instant::now(), true);
        self.source.maintain(&mut self.store);
        self.input.release(&mut self.store);
        self.store.reclaim();
        self.channels.publish(&self.store);
        // The store leaves this thread: its streaming stores land first.
        rodeo_memory::stream::fence();
        Stopped {
            counters: self.stats.snapshot(),
            slink: self.input.slink_counters(),
            input_stalls: self.input.stalls(),
            core_cpu: rodeo_memory::cpu::thread_cpu_time().saturating_sub(cpu0),
            core_idle_cpu: idle_cpu,
            core_pinned,
            peer_drops: self.drops.snapshot(),
            swrod: None,
            swrod_error: None,
            input_units_left,
            input_from_outside,
            store: self.store,
        }
    }

    /// At the stop, an input of data from outside that ended its links ([`Input::end_links`])
    /// is read until it has handed over everything it received, at most [`END_LINKS_LIMIT`],
    /// and no longer than [`END_LINKS_IDLE`] without a fragment: fragments a receiver counted
    /// are stored (the balance sheet's unbuilt or cut ones), not left in its queues. Returns
    /// the units the links still held when it gave up ([`Input::units_left`]).
    fn read_links_in(&mut self) -> u64 {
        let start = Instant::now();
        let mut moved = start;
        let mut backoff = Backoff::new(BackoffSpec::IDLE);
        while !self.input.finished() {
            let now = Instant::now();
            if now - start >= END_LINKS_LIMIT || now - moved >= END_LINKS_IDLE {
                tracing::warn!(
                    endpoint = %self.endpoint,
                    "the input's links still held fragments they received {} ms after the stop \
                     (the store full?): those are not stored, counted as received_not_stored",
                    (now - start).as_millis()
                );
                return self.input.units_left();
            }
            self.store.reclaim();
            let n = self.input.poll(&mut self.store);
            if n > 0 {
                bump(&self.stats.input_fragments, n);
                moved = Instant::now();
                backoff.reset();
            } else {
                backoff.wait();
            }
        }
        0
    }

    /// Handles one message; true when it may let pending requests complete (a clear).
    fn handle(&mut self, msg: Incoming<'_>) -> bool {
        match msg {
            Incoming::Bad => {
                bump(&self.stats.bad_messages, 1);
                false
            }
            Incoming::DataRequest {
                peer,
                transaction,
                l1id,
                robs,
            } => {
                bump(&self.stats.requests, 1);
                // The L1 front (the store's occupancy: what is fill, what is lent ahead).
                self.store.note_l1(l1id);
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
                    // Each ROB once, at most one per channel: the reply stays bounded whatever
                    // the request lists.
                    self.stamp = self.stamp.wrapping_add(1);
                    if self.stamp == 0 {
                        self.seen.fill(0);
                        self.stamp = 1;
                    }
                    let (stamp, limit) = (self.stamp, self.store.channels());
                    let (store, seen) = (&self.store, &mut self.seen);
                    let (mut repeats, mut over) = (0u64, false);
                    robs.for_each(|rob| {
                        let first = match store.channel_of(rob) {
                            Some(c) => std::mem::replace(&mut seen[c], stamp) != stamp,
                            // Unknown ids are rare: a search among those listed.
                            None => !desc.robs.contains(&rob),
                        };
                        if !first {
                            repeats += 1;
                        } else if desc.robs.len() < limit {
                            desc.robs.push(rob);
                        } else {
                            over = true;
                        }
                    });
                    if repeats > 0 {
                        bump(&self.stats.duplicate_robs, repeats);
                    }
                    if over {
                        // More distinct ROBs than the node has: no client that follows the
                        // protocol sends it, and there is no error reply. Dropped, counted.
                        bump(&self.stats.rejected_requests, 1);
                        self.descriptors.put(d);
                        return false;
                    }
                }
                // One pass: answered now unless a fragment may still arrive.
                if !self.answer(d, Missing::Wait) {
                    if self.descriptors.pending() >= self.park_limit {
                        // The pending queue is full: one request is answered now, what may
                        // still arrive flagged PENDING (its client asks again), so that a
                        // descriptor stays free for reading clears and the other clients'
                        // requests. That is the newest of a peer holding more of the queue
                        // (its fair share, `descriptor`), else this one.
                        bump(&self.stats.pending_overflow, 1);
                        match self.descriptors.evict_for(d) {
                            Some(victim) => {
                                self.answer(victim, Missing::GiveUp);
                            }
                            None => {
                                self.answer(d, Missing::GiveUp);
                                return false;
                            }
                        }
                    }
                    // The deadline matters only to a parked request.
                    self.descriptors.get_mut(d).deadline =
                        Instant::now() + self.config.pending_timeout;
                    bump(&self.stats.parked, 1);
                    self.descriptors.park(d);
                    self.stats
                        .pending_now
                        .store(self.descriptors.pending() as u64, Ordering::Relaxed);
                }
                false
            }
            Incoming::Clear { sequence, l1ids } => {
                let seq = sequence;
                bump(&self.stats.clears, 1);
                if let Some(last) = self.last_clear {
                    if seq != last.wrapping_add(1) {
                        bump(&self.stats.clear_gaps, 1);
                    }
                }
                self.last_clear = Some(seq);
                bump(&self.stats.cleared_l1ids, l1ids.len() as u64);
                let first = match l1ids {
                    Ids::Wire(l) => {
                        self.store.clear(l.iter());
                        l.iter().next()
                    }
                    Ids::Slice(s) => {
                        self.store.clear(s.iter().copied());
                        s.first().copied()
                    }
                };
                if let Some(first) = first {
                    super::rejoin::sweep_stale(&mut self.store, &mut self.sweep_from, first);
                    if let Some(front) = &self.run_front {
                        front.cleared(first);
                    }
                }
                true
            }
            Incoming::KeepAlive => {
                bump(&self.stats.keepalives, 1);
                false
            }
            Incoming::Unexpected => {
                bump(&self.stats.unexpected_messages, 1);
                false
            }
        }
    }

    /// Re-checks every pending request once, in order; answers those ready, expired, or all
    /// of them with `flush`.
    fn recheck(&mut self, now: Instant, flush: bool) {
        for _ in 0..self.descriptors.pending() {
            let Some(d) = self.descriptors.unpark() else {
                break;
            };
            let expired = self.descriptors.get(d).deadline <= now;
            // A plain scan first: a request that still waits costs no page references.
            if self.ready(d) && self.answer(d, Missing::Wait) {
                continue;
            }
            if expired || flush {
                if expired {
                    bump(&self.stats.timeouts, 1);
                }
                self.answer(d, Missing::GiveUp);
            } else {
                self.descriptors.park(d);
            }
        }
        self.stats
            .pending_now
            .store(self.descriptors.pending() as u64, Ordering::Relaxed);
    }

    /// True when no requested fragment of descriptor `d` may still arrive (each is present or
    /// lost). For parked requests, re-checked on every turn that brought data or clears.
    fn ready(&self, d: u32) -> bool {
        let desc = self.descriptors.get(d);
        desc.robs.iter().all(|&rob| {
            self.store
                .channel_of(rob)
                .is_none_or(|c| self.store.lookup(c, desc.l1id) != Lookup::Pending)
        })
    }

    /// Sends the reply of descriptor `d` and frees it; true when sent. Missing fragments are
    /// empty ROB fragments flagged LOST, or PENDING with [`Missing::GiveUp`]; with
    /// [`Missing::Wait`] a fragment that may still arrive stops the reply (false: nothing sent,
    /// the descriptor kept). Each requested fragment is looked up once when it is present.
    fn answer(&mut self, d: u32, missing: Missing) -> bool {
        let desc = self.descriptors.get(d);
        let l1id = desc.l1id;
        self.head.clear();
        self.head.extend_from_slice(&[0u8; 12]);
        self.head.extend_from_slice(&l1id.to_le_bytes());
        self.head
            .extend_from_slice(&(desc.robs.len() as u32).to_le_bytes());
        self.segments.clear();
        self.held.clear();
        let held = self.source.holds_segments();
        let (mut lost, mut pending, mut present, mut unknown) = (0u64, 0u64, 0u64, 0u64);
        for &rob in &desc.robs {
            let status = match self.store.channel_of(rob) {
                None => {
                    // Counted when the reply goes out (a waiting request is looked at again).
                    unknown += 1;
                    Status::ROB_FRAGMENT_LOST
                }
                Some(c) => {
                    let found = if held {
                        self.store.hold_segments(c, l1id, &mut self.held)
                    } else {
                        let segs = &mut self.segments;
                        self.store.with_segments(c, l1id, |r| segs.push(r))
                    };
                    if found {
                        present += 1;
                        continue;
                    }
                    match self.store.lookup(c, l1id) {
                        Lookup::Pending if missing == Missing::GiveUp => {
                            Status::ROB_FRAGMENT_PENDING
                        }
                        Lookup::Pending => {
                            // Not ready: give back what was gathered.
                            self.segments.clear();
                            self.store.release_held(self.held.drain(..));
                            return false;
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
        let seg_bytes: usize = self
            .segments
            .iter()
            .map(|r| r.words().len() * 4)
            .sum::<usize>()
            + self
                .held
                .iter()
                .map(|h| h.words as usize * 4)
                .sum::<usize>();
        let payload = (self.head.len() - 12 + seg_bytes) as u32;
        self.head[..12].copy_from_slice(&header_bytes(
            MessageType::DataReply,
            desc.transaction,
            payload,
        ));
        let sent = if held {
            let sent =
                self.source
                    .reply_held(&desc.peer, &self.head, &mut self.held, &mut self.store);
            // Refused: nothing took the holds.
            self.store.release_held(self.held.drain(..));
            sent
        } else {
            self.source
                .reply(&desc.peer, &self.head, &mut self.segments)
        };
        let s = &self.stats;
        match sent {
            Ok(()) => {
                bump(&s.unknown_robs, unknown);
                bump(&s.replies, 1);
                bump(&s.fragments_sent, present);
                bump(&s.bytes_sent, u64::from(payload));
                bump(&s.lost_fragments, lost);
                bump(&s.pending_fragments, pending);
            }
            Err(ReplyRefused::PeerFull) => {
                // The peer does not read: this reply is dropped (its pages are released), as
                // if lost on the way; the client asks again after its timeout.
                bump(&s.send_dropped, 1);
                self.drops.record(&desc.peer, &self.endpoint);
            }
            Err(ReplyRefused::Gone) => {
                bump(&s.send_errors, 1);
            }
        }
        self.segments.clear();
        self.descriptors.put(d);
        true
    }
}
