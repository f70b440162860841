//! The ROSTester (ROS paper, section 7.1.2): emulated L1 accepts driving a readout node with
//! the HLT's request mix, measuring the delete (L1) rate it sustains.
//!
//! **Role in the flow.** A client of the ROS protocol, standing where the trigger farm's DCMs
//! stand: it sends DataRequest and Clear to a readout node (`rodeo-ros`) and measures what comes
//! back. It **owns** one thread and its link; it **must not depend on** the dataflow
//! applications or the control layer (the studies and the binary call it, not the reverse).
//!
//! # The mix
//!
//! Per event: with probability `l2_fraction` an L2 (RoI) request for `roi_size` distinct ROBs
//! drawn uniformly; with probability `eb_fraction` an event-building request for every ROB not
//! requested yet (sent after the L2 reply, as the HLT asks for the rest only after its
//! decision). Once every request of an event is answered its L1ID joins the clear group; a full
//! group (`clear_group`, default 100) goes out as one Clear. The number of requests in flight is
//! bounded (`max_outstanding`); the event rate may be capped (`max_rate`). Instance `I` of `K`
//! generates events `I, I + K, I + 2K, ...`, so several testers share one node without asking
//! for the same L1ID. A reply with FRAGMENT_PENDING fragments is asked again for those ROBs, up
//! to `retries` times (protocol rule 3); then the fragments are counted as missing.
//!
//! # Links
//!
//! The tester talks to the node through a [`TesterLink`]: a ZeroMQ DEALER socket ([`run`],
//! any endpoint, the protocol's encoding) or the direct in-process link
//! ([`rodeo_ros::server::DirectClient`], [`run_direct`]): typed requests and replies whose present
//! fragments are page references read where they lie. The mix, the checks and the report are
//! the same code for both.
//!
//! # Threads and state
//!
//! One thread, one link. Transactions index a fixed table of request slots (slot
//! index in the low 16 bits, a generation above), events in flight sit in a ring, latencies go
//! to a fixed [`Histogram`]: the loop allocates nothing per event.
//!
//! # Shutdown
//!
//! At the event limit, the time limit or the stop flag, the tester stops generating, waits (up
//! to `drain_timeout`) for the replies in flight, sends the partial clear group, and reports.
//! A partial group is also sent when no clear went out for `clear_flush` (protocol rule 5).

mod histogram;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rodeo_format::fragment::{Status, ROB_MARKER};
use rodeo_transport::message::{decode, encode_clear, encode_data_request, Message};
use rodeo_transport::socket::{Frame, Received, Socket, TransportError};

pub use histogram::Histogram;
use rodeo_cards::generator::{L1idCounter, Rng};
use rodeo_ros::server::{DirectClient, DirectError, DirectReply};

/// Why a tester run stopped early.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TesterError {
    /// The ZeroMQ socket failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The direct link failed.
    #[error(transparent)]
    Direct(#[from] DirectError),
}

/// What a reply says about itself: the header fields the tester checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHead {
    /// Transaction id echoed.
    pub transaction: u32,
    /// The event's L1ID.
    pub l1id: u32,
    /// Payload bytes declared.
    pub payload_bytes: u32,
}

/// Words 0, 4 and 6 (marker, source id, status) of a reply's fragment; `None` when the
/// fragment is too short to have them.
pub type FragmentHead = Option<[u32; 3]>;

/// How the tester reaches a node. See the module docs.
pub trait TesterLink {
    /// Where a received reply is kept until the next receive.
    type Reply: Default;
    /// The most DataRequests the link takes unanswered, if it bounds them.
    fn max_in_flight(&self) -> Option<usize> {
        None
    }
    /// Sends a DataRequest.
    fn send_request(
        &mut self,
        transaction: u32,
        l1id: u32,
        robs: &[u32],
    ) -> Result<(), TesterError>;
    /// Sends a Clear.
    fn send_clear(&mut self, sequence: u32, l1ids: &[u32]) -> Result<(), TesterError>;
    /// Receives a reply if one is ready.
    fn try_recv(&mut self, reply: &mut Self::Reply) -> Result<bool, TesterError>;
    /// Receives a reply, waiting up to `timeout`.
    fn recv(&mut self, reply: &mut Self::Reply, timeout: Duration) -> Result<bool, TesterError>;
    /// Reads a received reply: its header (`None` if it is not a well-formed DataReply) and the
    /// head words of each fragment into `heads`.
    fn read(reply: &Self::Reply, heads: &mut Vec<FragmentHead>) -> Option<ReplyHead>;
}

/// The ZeroMQ link: a DEALER connected to the node, protocol messages.
pub struct ZmqLink<'s> {
    socket: &'s mut Socket,
    buf: Vec<u8>,
}

impl<'s> ZmqLink<'s> {
    /// Wraps a DEALER socket connected to the node.
    pub fn new(socket: &'s mut Socket) -> ZmqLink<'s> {
        ZmqLink {
            socket,
            buf: Vec::with_capacity(4096),
        }
    }
}

impl std::fmt::Debug for ZmqLink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZmqLink").finish_non_exhaustive()
    }
}

impl TesterLink for ZmqLink<'_> {
    type Reply = Received;

    fn send_request(
        &mut self,
        transaction: u32,
        l1id: u32,
        robs: &[u32],
    ) -> Result<(), TesterError> {
        self.buf.clear();
        encode_data_request(&mut self.buf, transaction, l1id, robs);
        Ok(self.socket.send([Frame::Copy(&self.buf)])?)
    }

    fn send_clear(&mut self, sequence: u32, l1ids: &[u32]) -> Result<(), TesterError> {
        self.buf.clear();
        encode_clear(&mut self.buf, sequence, l1ids);
        Ok(self.socket.send([Frame::Copy(&self.buf)])?)
    }

    fn try_recv(&mut self, reply: &mut Received) -> Result<bool, TesterError> {
        Ok(self.socket.try_recv(reply)?)
    }

    fn recv(&mut self, reply: &mut Received, timeout: Duration) -> Result<bool, TesterError> {
        let ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        Ok(self.socket.recv(reply, ms)?)
    }

    fn read(reply: &Received, heads: &mut Vec<FragmentHead>) -> Option<ReplyHead> {
        let d = decode(&reply.bytes).ok()?;
        let Message::DataReply { l1id, fragments } = d.message else {
            return None;
        };
        for f in fragments.iter() {
            let w = |i: usize| {
                f.get(4 * i..4 * i + 4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            };
            heads.push(match (w(0), w(4), w(6)) {
                (Some(a), Some(b), Some(c)) => Some([a, b, c]),
                _ => None,
            });
        }
        Some(ReplyHead {
            transaction: d.header.transaction,
            l1id,
            payload_bytes: d.header.payload_bytes,
        })
    }
}

impl TesterLink for DirectClient {
    type Reply = Option<Box<DirectReply>>;

    fn max_in_flight(&self) -> Option<usize> {
        Some(self.capacity())
    }

    fn send_request(
        &mut self,
        transaction: u32,
        l1id: u32,
        robs: &[u32],
    ) -> Result<(), TesterError> {
        Ok(DirectClient::send_request(self, transaction, l1id, robs)?)
    }

    fn send_clear(&mut self, sequence: u32, l1ids: &[u32]) -> Result<(), TesterError> {
        Ok(DirectClient::send_clear(self, sequence, l1ids)?)
    }

    fn try_recv(&mut self, reply: &mut Self::Reply) -> Result<bool, TesterError> {
        Ok(DirectClient::try_recv(self, reply))
    }

    fn recv(&mut self, reply: &mut Self::Reply, timeout: Duration) -> Result<bool, TesterError> {
        Ok(self.recv_timeout(reply, timeout))
    }

    fn read(reply: &Self::Reply, heads: &mut Vec<FragmentHead>) -> Option<ReplyHead> {
        let r = reply.as_deref()?;
        let head = ReplyHead {
            transaction: r.transaction()?,
            l1id: r.l1id()?,
            payload_bytes: r.payload_bytes()?,
        };
        r.for_each_fragment(|h| heads.push(h));
        Some(head)
    }
}

/// Configuration of a tester instance.
#[derive(Debug, Clone)]
pub struct TesterConfig {
    /// The node's ROB ids.
    pub robs: Vec<u32>,
    /// Probability of an L2 request per event.
    pub l2_fraction: f64,
    /// ROBs per L2 request.
    pub roi_size: usize,
    /// Probability of an EB request per event.
    pub eb_fraction: f64,
    /// L1IDs per Clear message.
    pub clear_group: usize,
    /// Requests in flight at most.
    pub max_outstanding: usize,
    /// Events per second at most (`None`: as fast as the node answers).
    pub max_rate: Option<f64>,
    /// Number of tester instances sharing the node.
    pub instances: u32,
    /// This instance, `0..instances`.
    pub instance: u32,
    /// Stop after this many events of this instance.
    pub events: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// The L1ID wrap value of the node's inputs.
    pub l1id_wrap: u32,
    /// PRNG seed (mixed with the instance).
    pub seed: u64,
    /// Re-asks for PENDING fragments.
    pub retries: u32,
    /// How long to wait for replies in flight at the end.
    pub drain_timeout: Duration,
    /// A partial clear group is sent after this long without a clear (protocol rule 5).
    pub clear_flush: Duration,
}

impl Default for TesterConfig {
    fn default() -> TesterConfig {
        TesterConfig {
            robs: Vec::new(),
            l2_fraction: 0.7,
            roi_size: 4,
            eb_fraction: 0.2,
            clear_group: 100,
            max_outstanding: 256,
            max_rate: None,
            instances: 1,
            instance: 0,
            events: None,
            duration: Some(Duration::from_secs(5)),
            l1id_wrap: 1 << 24,
            seed: 1,
            retries: 3,
            drain_timeout: Duration::from_secs(5),
            clear_flush: Duration::from_millis(20),
        }
    }
}

/// What a tester run measured.
#[derive(Debug, Clone, Default)]
pub struct TesterReport {
    /// Events fully handled and cleared.
    pub events: u64,
    /// Seconds from the first event to the last clear.
    pub seconds: f64,
    /// L2 requests sent (retries included).
    pub l2_requests: u64,
    /// EB requests sent.
    pub eb_requests: u64,
    /// Replies received.
    pub replies: u64,
    /// Fragments received (present ones).
    pub fragments: u64,
    /// Reply payload bytes received.
    pub bytes: u64,
    /// Fragments answered FRAGMENT_PENDING after every retry.
    pub pending_fragments: u64,
    /// Fragments answered FRAGMENT_LOST.
    pub lost_fragments: u64,
    /// Replies that did not decode, did not match a request, or held wrong fragments.
    pub bad_replies: u64,
    /// Requests still unanswered at the end.
    pub unanswered: u64,
    /// Clear messages sent.
    pub clears: u64,
    /// Request latency (send to reply), nanoseconds.
    pub latency: Histogram,
    /// CPU time the tester thread(s) used (waiting included).
    pub cpu: Duration,
    /// Events handled in each [`INTERVAL`] of the run, in order (the last one partial): the
    /// rate over time, to tell a steady run from one whose machine changed under it.
    pub intervals: Vec<u64>,
}

/// The length of one of [`TesterReport::intervals`].
pub const INTERVAL: Duration = Duration::from_millis(250);

impl TesterReport {
    /// Delete (L1) rate in Hz.
    pub fn l1_rate_hz(&self) -> f64 {
        rate(self.events, self.seconds)
    }

    /// Requests per second.
    pub fn requests_per_s(&self) -> f64 {
        rate(self.l2_requests + self.eb_requests, self.seconds)
    }

    /// Reply bytes per second.
    pub fn bytes_per_s(&self) -> f64 {
        rate(self.bytes, self.seconds)
    }

    /// The delete (L1) rate of each whole interval, in Hz (the last, partial one left out
    /// unless it is the only one: a run shorter than an interval gives its own rate).
    pub fn interval_rates_hz(&self) -> Vec<f64> {
        let secs = INTERVAL.as_secs_f64();
        if let [n] = self.intervals[..] {
            let over = if self.seconds > 0.0 && self.seconds < secs {
                self.seconds
            } else {
                secs
            };
            return vec![n as f64 / over];
        }
        let whole = self.intervals.len().saturating_sub(1);
        self.intervals[..whole]
            .iter()
            .map(|&n| n as f64 / secs)
            .collect()
    }

    /// The `q`-quantile (0: slowest, 0.5: median, 1: fastest) of [`Self::interval_rates_hz`]
    /// (nearest rank); 0 without intervals.
    pub fn interval_rate_hz(&self, q: f64) -> f64 {
        let mut r = self.interval_rates_hz();
        r.sort_by(f64::total_cmp);
        let at = ((r.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize;
        r.get(at).copied().unwrap_or(0.0)
    }

    /// Adds another instance's report (rates then refer to the longest run).
    pub fn merge(&mut self, o: &TesterReport) {
        if self.intervals.len() < o.intervals.len() {
            self.intervals.resize(o.intervals.len(), 0);
        }
        for (a, b) in self.intervals.iter_mut().zip(&o.intervals) {
            *a += b;
        }
        self.events += o.events;
        self.seconds = self.seconds.max(o.seconds);
        self.l2_requests += o.l2_requests;
        self.eb_requests += o.eb_requests;
        self.replies += o.replies;
        self.fragments += o.fragments;
        self.bytes += o.bytes;
        self.pending_fragments += o.pending_fragments;
        self.lost_fragments += o.lost_fragments;
        self.bad_replies += o.bad_replies;
        self.unanswered += o.unanswered;
        self.clears += o.clears;
        self.latency.merge(&o.latency);
        self.cpu += o.cpu;
    }
}

fn rate(n: u64, s: f64) -> f64 {
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

/// Most ROBs a tester handles (the requested-set bitmap).
pub const MAX_ROBS: usize = 256;

#[derive(Debug, Clone, Copy, Default)]
struct RobSet([u64; MAX_ROBS / 64]);

impl RobSet {
    fn insert(&mut self, i: usize) -> bool {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let new = self.0[w] & b == 0;
        self.0[w] |= b;
        new
    }
    fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1u64 << (i % 64)) != 0
    }
}

#[derive(Debug, Clone, Copy)]
struct Event {
    l1id: u32,
    /// Requests in flight for this event.
    outstanding: u32,
    /// Whether the EB request is still to be sent after the L2 reply.
    eb_due: bool,
    requested: RobSet,
    done: bool,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    generation: u16,
    event: u64,
    sent: Instant,
    eb: bool,
    tries: u32,
    in_use: bool,
}

struct State<'c, L: TesterLink> {
    config: &'c TesterConfig,
    link: &'c mut L,
    rng: Rng,
    slots: Vec<Slot>,
    free: Vec<u16>,
    /// Events in flight, from `first_event` on.
    events: VecDeque<Event>,
    first_event: u64,
    next_event: u64,
    clear_group: Vec<u32>,
    clear_seq: u32,
    last_clear: Instant,
    heads: Vec<FragmentHead>,
    robs_buf: Vec<u32>,
    report: TesterReport,
}

/// Runs one tester instance on `socket` (a DEALER connected to the node) until the event or
/// time limit, or `stop`. See the module docs.
pub fn run(
    socket: &mut Socket,
    config: &TesterConfig,
    stop: &AtomicBool,
) -> Result<TesterReport, TesterError> {
    run_on(&mut ZmqLink::new(socket), config, stop)
}

/// Runs one tester instance on the direct in-process link of a node started with
/// [`rodeo_ros::server::RequestServer::start_direct`]. Requests in flight are bounded by the
/// link's capacity as well as `max_outstanding`.
pub fn run_direct(
    client: &mut DirectClient,
    config: &TesterConfig,
    stop: &AtomicBool,
) -> Result<TesterReport, TesterError> {
    run_on(client, config, stop)
}

/// Runs one tester instance on any link.
pub fn run_on<L: TesterLink>(
    link: &mut L,
    config: &TesterConfig,
    stop: &AtomicBool,
) -> Result<TesterReport, TesterError> {
    let n_out = config
        .max_outstanding
        .min(link.max_in_flight().unwrap_or(usize::MAX))
        .clamp(1, usize::from(u16::MAX));
    let mut st = State {
        config,
        link,
        rng: Rng::new(config.seed ^ (u64::from(config.instance) << 32) ^ 0x7E57),
        slots: vec![
            Slot {
                generation: 0,
                event: 0,
                sent: Instant::now(),
                eb: false,
                tries: 0,
                in_use: false,
            };
            n_out
        ],
        free: (0..n_out as u16).rev().collect(),
        events: VecDeque::with_capacity(n_out * 2),
        first_event: 0,
        next_event: 0,
        clear_group: Vec::with_capacity(config.clear_group.max(1)),
        clear_seq: 0,
        last_clear: Instant::now(),
        heads: Vec::with_capacity(MAX_ROBS),
        robs_buf: Vec::with_capacity(config.robs.len()),
        report: TesterReport::default(),
    };
    let robs = config.robs.len().min(MAX_ROBS);
    let cpu0 = rodeo_memory::cpu::thread_cpu_time();
    let start = Instant::now();
    let mut msg = L::Reply::default();
    let mut last_activity = Instant::now();
    // The interval series: room for the whole run, so the loop does not allocate.
    let expected = config.duration.map_or(64, |d| {
        (d.as_secs_f64() / INTERVAL.as_secs_f64()) as usize + 2
    });
    st.report.intervals.reserve(expected);
    let mut interval_end = INTERVAL;
    let mut events_before = 0u64;
    loop {
        let elapsed = start.elapsed();
        while elapsed >= interval_end {
            st.report.intervals.push(st.report.events - events_before);
            events_before = st.report.events;
            interval_end += INTERVAL;
        }
        let generating = !stop.load(Ordering::Relaxed)
            && config.events.is_none_or(|n| st.next_event < n)
            && config.duration.is_none_or(|d| elapsed < d);
        if !generating && st.free.len() == st.slots.len() {
            break;
        }
        if !generating && last_activity.elapsed() > config.drain_timeout {
            break;
        }
        // New events while there is room for their requests, within the rate cap, and while
        // the ring of events in flight stays bounded.
        let mut sent_any = false;
        while generating
            && st.free.len() >= 2
            && st.events.len() < st.slots.len() * 4
            && config.events.is_none_or(|n| st.next_event < n)
            && config
                .max_rate
                .is_none_or(|r| (st.next_event as f64) < r * start.elapsed().as_secs_f64() + 1.0)
        {
            st.new_event(robs)?;
            sent_any = true;
        }
        // A partial group goes out after an idle interval, so a node whose buffer is smaller
        // than a group does not wait for it.
        if !st.clear_group.is_empty() && st.last_clear.elapsed() >= config.clear_flush {
            st.send_clear()?;
        }
        // Replies.
        let got = if sent_any {
            st.link.try_recv(&mut msg)?
        } else {
            st.link.recv(&mut msg, Duration::from_millis(1))?
        };
        if got {
            last_activity = Instant::now();
            st.on_reply(&msg, robs)?;
            while st.link.try_recv(&mut msg)? {
                st.on_reply(&msg, robs)?;
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    st.report.intervals.push(st.report.events - events_before);
    // Events still in flight are not cleared by this run's clears: they were never answered.
    st.report.unanswered = (st.slots.len() - st.free.len()) as u64;
    if !st.clear_group.is_empty() {
        st.send_clear()?;
    }
    st.report.seconds = seconds;
    st.report.cpu = rodeo_memory::cpu::thread_cpu_time().saturating_sub(cpu0);
    Ok(st.report)
}

impl<L: TesterLink> State<'_, L> {
    fn new_event(&mut self, robs: usize) -> Result<(), TesterError> {
        let c = self.config;
        let n = u64::from(c.instance) + u64::from(c.instances.max(1)) * self.next_event;
        self.next_event += 1;
        let l1id = L1idCounter::expected(c.l1id_wrap, n);
        let l2 = self.chance(c.l2_fraction);
        let eb = self.chance(c.eb_fraction);
        let mut ev = Event {
            l1id,
            outstanding: 0,
            eb_due: false,
            requested: RobSet::default(),
            done: false,
        };
        let index = self.first_event + self.events.len() as u64;
        if l2 && robs > 0 {
            self.robs_buf.clear();
            let want = c.roi_size.min(robs);
            while self.robs_buf.len() < want {
                let i = (((self.rng.next_u64() >> 32) * robs as u64) >> 32) as usize;
                if ev.requested.insert(i) {
                    self.robs_buf.push(c.robs[i]);
                }
            }
            ev.outstanding = 1;
            ev.eb_due = eb;
            self.events.push_back(ev);
            self.send_request(index, false, 0)?;
        } else if eb && robs > 0 {
            ev.outstanding = 1;
            self.events.push_back(ev);
            self.fill_eb(index, robs);
            self.send_request(index, true, 0)?;
        } else {
            self.events.push_back(ev);
            self.finish(self.events.len() - 1)?;
        }
        Ok(())
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// Puts the ROBs event `index` has not requested yet into `robs_buf`, marking them.
    fn fill_eb(&mut self, index: u64, robs: usize) {
        self.robs_buf.clear();
        let ev = &mut self.events[(index - self.first_event) as usize];
        for i in 0..robs {
            if ev.requested.insert(i) {
                self.robs_buf.push(self.config.robs[i]);
            }
        }
    }

    fn send_request(&mut self, event: u64, eb: bool, tries: u32) -> Result<(), TesterError> {
        let s = self.free.pop().expect("callers check for a free slot");
        let slot = &mut self.slots[usize::from(s)];
        slot.generation = slot.generation.wrapping_add(1);
        slot.event = event;
        slot.sent = Instant::now();
        slot.eb = eb;
        slot.tries = tries;
        slot.in_use = true;
        let txn = u32::from(s) | (u32::from(slot.generation) << 16);
        let l1id = self.events[(event - self.first_event) as usize].l1id;
        self.link.send_request(txn, l1id, &self.robs_buf)?;
        if eb {
            self.report.eb_requests += 1;
        } else {
            self.report.l2_requests += 1;
        }
        Ok(())
    }

    fn on_reply(&mut self, msg: &L::Reply, robs: usize) -> Result<(), TesterError> {
        self.heads.clear();
        let Some(head) = L::read(msg, &mut self.heads) else {
            self.report.bad_replies += 1;
            return Ok(());
        };
        let (l1id, txn) = (head.l1id, head.transaction);
        let s = (txn & 0xFFFF) as usize;
        let ok_slot = self
            .slots
            .get(s)
            .is_some_and(|sl| sl.in_use && u32::from(sl.generation) == txn >> 16);
        if !ok_slot {
            self.report.bad_replies += 1;
            return Ok(());
        }
        let slot = self.slots[s];
        self.slots[s].in_use = false;
        self.free.push(s as u16);
        self.report.replies += 1;
        self.report
            .latency
            .record(slot.sent.elapsed().as_nanos() as u64);
        let pos = (slot.event - self.first_event) as usize;
        let ev_l1id = self.events[pos].l1id;
        // Check each fragment's header: marker, source id of a requested ROB, status.
        self.robs_buf.clear();
        let mut bad = l1id != ev_l1id;
        for &h in &self.heads {
            let Some([marker, source, status]) = h else {
                bad = true;
                continue;
            };
            let known = self.config.robs[..robs]
                .iter()
                .position(|&r| r == source)
                .is_some_and(|i| self.events[pos].requested.contains(i));
            bad |= marker != ROB_MARKER || !known;
            let status = Status(status);
            if status.contains(Status::ROB_FRAGMENT_PENDING) {
                if slot.tries < self.config.retries {
                    self.robs_buf.push(source);
                } else {
                    self.report.pending_fragments += 1;
                }
            } else if status.contains(Status::ROB_FRAGMENT_LOST) {
                self.report.lost_fragments += 1;
            } else {
                self.report.fragments += 1;
            }
        }
        if bad {
            self.report.bad_replies += 1;
        }
        self.report.bytes += u64::from(head.payload_bytes);
        let ev = &mut self.events[pos];
        ev.outstanding -= 1;
        if !self.robs_buf.is_empty() {
            // Ask again for what was pending (rule 3).
            ev.outstanding += 1;
            self.send_request(slot.event, slot.eb, slot.tries + 1)?;
        } else if ev.eb_due {
            ev.eb_due = false;
            ev.outstanding += 1;
            self.fill_eb(slot.event, robs);
            if self.robs_buf.is_empty() {
                self.events[pos].outstanding -= 1;
            } else {
                self.send_request(slot.event, true, 0)?;
            }
        }
        if self.events[pos].outstanding == 0 {
            self.finish(pos)?;
        }
        Ok(())
    }

    /// Event at ring position `pos` is finished: its L1ID joins the clear group (clears need
    /// no order), and the ring front advances past finished events.
    fn finish(&mut self, pos: usize) -> Result<(), TesterError> {
        let ev = &mut self.events[pos];
        ev.done = true;
        let l1id = ev.l1id;
        self.clear_group.push(l1id);
        self.report.events += 1;
        if self.clear_group.len() >= self.config.clear_group.max(1) {
            self.send_clear()?;
        }
        while self.events.front().is_some_and(|e| e.done) {
            self.events.pop_front();
            self.first_event += 1;
        }
        Ok(())
    }

    fn send_clear(&mut self) -> Result<(), TesterError> {
        self.link.send_clear(self.clear_seq, &self.clear_group)?;
        self.clear_seq = self.clear_seq.wrapping_add(1);
        self.clear_group.clear();
        self.report.clears += 1;
        self.last_clear = Instant::now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Interval rates leave out the last, partial interval; their quantiles are nearest-rank;
    /// merged reports add their series interval by interval.
    #[test]
    fn interval_rates_and_their_quantiles() {
        let mut r = TesterReport {
            intervals: vec![10, 30, 20, 5],
            ..TesterReport::default()
        };
        assert_eq!(r.interval_rates_hz(), vec![40.0, 120.0, 80.0]);
        assert_eq!(r.interval_rate_hz(0.0), 40.0);
        assert_eq!(r.interval_rate_hz(0.5), 80.0);
        assert_eq!(r.interval_rate_hz(1.0), 120.0);
        r.merge(&TesterReport {
            intervals: vec![1, 1, 1, 1, 1],
            ..TesterReport::default()
        });
        assert_eq!(r.intervals, vec![11, 31, 21, 6, 1]);
        let empty = TesterReport::default();
        assert!(empty.interval_rates_hz().is_empty());
        assert_eq!(empty.interval_rate_hz(0.5), 0.0);
        // A run shorter than one interval: its one partial interval is kept.
        let short = TesterReport {
            intervals: vec![3],
            seconds: 0.1,
            ..TesterReport::default()
        };
        assert!((short.interval_rates_hz()[0] - 30.0).abs() < 1e-9);
    }
}
