//! A data-collection node (the seeds' DCM / L2PU + SFI): processing slots that fetch data,
//! run the trigger, build accepted events and ship them to a logger.
//!
//! # Sockets (all owned by the one DCM thread, waited on together)
//!
//! - a DEALER to the supervisor: `Update` out (credits, decisions, heartbeats), `Process` and
//!   `Build` in;
//! - a DEALER per readout node: `DataRequest` out, `DataReply` in;
//! - a DEALER per logger: `Event` out, `EventAck` in.
//!
//! # One event, one slot
//!
//! 1. `Process`: the RoI ROBs are requested from the readout nodes that hold them (one
//!    request per node). `Build` (a reassigned event) skips the trigger and fetches everything.
//! 2. Replies are matched by transaction id (slot and event generation; a stale or unknown reply
//!    is counted and dropped). A fragment flagged FRAGMENT_PENDING is asked for again after
//!    `retry_delay`, up to `max_retries` times; then the event goes on without it, flagged
//!    PARTIAL_EVENT (rule 3). A fragment flagged FRAGMENT_LOST also makes the event partial.
//! 3. The trigger algorithm decides on the RoI fragments; it may ask for more ROBs first. An
//!    emulated processing time holds the slot without holding the thread.
//! 4. Accept: the ROBs not fetched yet are requested from every node; the full event is built
//!    (configured checksum, stream tag, FORCED_ACCEPT / PARTIAL_EVENT status) and sent to a
//!    logger (chosen by global id).
//! 5. The slot frees when the logger acknowledges the event (accepted) or at once (rejected);
//!    the decision and the freed credit go to the supervisor in the next `Update` (rule 5).
//!
//! # Bounds and back-pressure
//!
//! At most `max_outstanding` requests per readout node are in flight; more wait in a queue
//! (rule 3's bound). The slot count bounds the events in flight; the supervisor never assigns
//! more than the credits announced (rule 1).
//!
//! # Heartbeat and shutdown
//!
//! An `Update` goes out at least every [`HEARTBEAT`], so the supervisor knows the node lives.
//! On stop the node finishes nothing more: events in its slots are the supervisor's to
//! reassign (what a crash would also leave behind).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_memory::LogHistogram;

use crate::trace::{Stage as TraceStage, TraceLog};

use rodeo_format::checksum::{bytes_as_words, words_as_bytes, ChecksumType};
use rodeo_format::fragment::{EventBuilder, RobFragment, SourceId, Status, StreamTag};
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{
    decode, encode_data_request, encode_update, header_bytes, Decision, Message, MessageType,
    Verdict as WireVerdict,
};
use rodeo_transport::socket::{poll_readable, Frame, Received, Socket, SocketKind, Transport};

use crate::trigger::{EventInfo, TriggerAlgorithm, Verdict};
use crate::{AppHandle, DataflowError};

/// Longest interval between two `Update`s of a DCM (its heartbeat).
pub const HEARTBEAT: Duration = Duration::from_millis(250);

/// Longest a send may block on a peer (gone, or not keeping up) before it counts as failed.
const SEND_TIMEOUT_MS: i32 = 1000;

/// Most rounds of "more ROBs" one event may ask for.
const MAX_MORE_ROUNDS: u32 = 4;

/// A readout node as a DCM sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadoutNode {
    /// Its request endpoint.
    pub endpoint: String,
    /// The ROB ids it holds.
    pub robs: Vec<u32>,
}

/// Configuration of a DCM.
#[derive(Debug, Clone)]
pub struct DcmConfig {
    /// Application name (also its identity at the supervisor).
    pub name: String,
    /// The supervisor's endpoint.
    pub supervisor: String,
    /// The readout nodes.
    pub readout: Vec<ReadoutNode>,
    /// Logger endpoints (an event goes to `loggers[global_id % n]`).
    pub loggers: Vec<String>,
    /// Processing slots (events in flight).
    pub slots: usize,
    /// Most requests in flight per readout node.
    pub max_outstanding: usize,
    /// Delay before asking again for a pending fragment.
    pub retry_delay: Duration,
    /// Re-asks per event before it is built without its pending fragments.
    pub max_retries: u32,
    /// Checksum of the built events.
    pub checksum: ChecksumType,
    /// Run number written into events.
    pub run_number: u32,
    /// Stream names by index (for stream tags).
    pub streams: Vec<String>,
    /// Source id of built events.
    pub source_id: u32,
}

impl DcmConfig {
    /// A DCM `name` with `slots` slots, 64 requests per node, 1 ms retry delay, 1000 retries,
    /// Adler-32, one stream `physics_Main`.
    pub fn new(
        name: &str,
        supervisor: &str,
        readout: Vec<ReadoutNode>,
        loggers: Vec<String>,
        slots: usize,
    ) -> DcmConfig {
        DcmConfig {
            name: name.to_string(),
            supervisor: supervisor.to_string(),
            readout,
            loggers,
            slots,
            max_outstanding: 64,
            retry_delay: Duration::from_millis(1),
            max_retries: 1000,
            checksum: ChecksumType::Adler32,
            run_number: 1,
            streams: vec!["physics_Main".into()],
            source_id: 0x007C_0000,
        }
    }
}

/// Live counters of a DCM.
#[derive(Debug, Default)]
pub struct DcmCounters {
    /// Events finished (decided and, if accepted, acknowledged).
    pub events: AtomicU64,
    /// Events accepted (including forced).
    pub accepted: AtomicU64,
    /// Data requests sent.
    pub requests: AtomicU64,
    /// Bytes of ROB fragments received.
    pub bytes_received: AtomicU64,
    /// Slots busy.
    pub busy_slots: AtomicU64,
    /// Data requests in flight to the readout nodes (gauge).
    pub outstanding_requests: AtomicU64,
    /// Data requests queued behind the per-node limit of requests in flight (gauge).
    pub queued_requests: AtomicU64,
    /// Messages that did not decode or were not expected.
    pub bad_messages: AtomicU64,
    /// Replies and acknowledgements for events no longer here.
    pub stale_replies: AtomicU64,
    /// Sends that failed (peer gone or stuck).
    pub send_failures: AtomicU64,
    /// Data request latency: request sent to reply read, per request.
    pub request_latency: LogHistogram,
    /// Decision latency: assignment read to the trigger's verdict.
    pub decision_latency: LogHistogram,
    /// Event build latency: assignment read to the event done (acknowledged by the logger).
    pub build_latency: LogHistogram,
    /// Sampled per-event time stamps.
    pub trace: TraceLog,
}

/// What a DCM did in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DcmSummary {
    /// Events assigned (Process + Build).
    pub assigned: u64,
    /// Of those, Build (forced accept).
    pub builds: u64,
    /// Rejected.
    pub rejected: u64,
    /// Accepted by the algorithm.
    pub accepted: u64,
    /// Forced accepts built.
    pub forced: u64,
    /// Built without some fragments (PARTIAL_EVENT).
    pub partial: u64,
    /// Data requests sent (re-asks included).
    pub requests: u64,
    /// Re-asks for pending fragments.
    pub retries: u64,
    /// ROB fragments received.
    pub fragments: u64,
    /// Replies for unknown or finished transactions (dropped).
    pub stale_replies: u64,
    /// Messages that did not decode, or assignments without a free slot.
    pub bad_messages: u64,
    /// Events sent to loggers.
    pub events_sent: u64,
    /// Events unfinished at stop (left to the supervisor).
    pub unfinished: u64,
    /// Sends that failed (peer gone or stuck past the send timeout).
    pub send_failures: u64,
}

/// Starts a DCM thread with its trigger algorithm; sockets connect before this returns.
pub fn spawn(
    config: DcmConfig,
    transport: &Transport,
    algorithm: Box<dyn TriggerAlgorithm>,
    counters: Arc<DcmCounters>,
) -> Result<AppHandle<DcmSummary>, DataflowError> {
    let app = config.name.clone();
    if config.slots == 0 || config.loggers.is_empty() {
        return Err(DataflowError::Config {
            app,
            reason: "a DCM needs at least one slot and one logger".into(),
        });
    }
    if 2 + config.readout.len() + config.loggers.len() > 64 {
        return Err(DataflowError::Config {
            app,
            reason: "a DCM talks to at most 62 readout nodes and loggers".into(),
        });
    }
    let terr = |what: String| {
        let app = app.clone();
        move |source| DataflowError::Transport { app, what, source }
    };
    let dealer = |endpoint: &str| -> Result<Socket, DataflowError> {
        let ep = Endpoint::parse(endpoint).map_err(|source| DataflowError::Endpoint {
            app: app.clone(),
            source,
        })?;
        let s = transport
            .socket(SocketKind::Dealer)
            .map_err(terr("create socket".into()))?;
        s.set_high_water_marks(100_000)
            .map_err(terr("set high-water marks".into()))?;
        s.set_identity(app.as_bytes())
            .map_err(terr("set identity".into()))?;
        s.set_send_timeout(SEND_TIMEOUT_MS)
            .map_err(terr("set send timeout".into()))?;
        s.connect(&ep)
            .map_err(terr(format!("connect {endpoint}")))?;
        Ok(s)
    };
    let supervisor = dealer(&config.supervisor)?;
    let readout = config
        .readout
        .iter()
        .map(|r| dealer(&r.endpoint))
        .collect::<Result<Vec<_>, _>>()?;
    let loggers = config
        .loggers
        .iter()
        .map(|l| dealer(l))
        .collect::<Result<Vec<_>, _>>()?;
    AppHandle::spawn(&app, move |stop| {
        Dcm::new(config, algorithm, counters).run(supervisor, readout, loggers, &stop)
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Fetching the RoI (or extra) fragments for the algorithm.
    Decide,
    /// Fetching the rest of an accepted (or forced) event.
    Rest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Free,
    Fetching(Stage),
    /// The algorithm decided; the emulated processing time runs until `until`.
    Holding(Instant),
    /// Sent to a logger; waiting for its acknowledgement.
    Logging,
}

#[derive(Debug)]
struct Slot {
    phase: Phase,
    generation: u16,
    global_id: u64,
    l1id: u32,
    bcid: u32,
    trigger_type: u32,
    rois: Vec<u32>,
    forced: bool,
    partial: bool,
    /// Accepted into this stream (after the algorithm).
    stream: Option<u32>,
    /// The verdict waiting for the hold to end.
    held: Option<Verdict>,
    /// Fragments received: words back to back, and (rob id, start, len) for each.
    arena: Vec<u32>,
    frags: Vec<(u32, usize, usize)>,
    /// Requests in flight for this slot.
    waiting: u32,
    /// ROB ids to request, per readout node (reused).
    wanted: Vec<Vec<u32>>,
    /// ROB ids answered PENDING, to ask again.
    pending: Vec<u32>,
    retries: u32,
    retry_at: Option<Instant>,
    more_rounds: u32,
    /// When the assignment was read.
    assigned_at: Instant,
    /// When the last request to each readout node was sent.
    sent_at: Vec<Instant>,
}

impl Slot {
    fn new(nodes: usize) -> Slot {
        Slot {
            phase: Phase::Free,
            generation: 0,
            global_id: 0,
            l1id: 0,
            bcid: 0,
            trigger_type: 0,
            rois: Vec::new(),
            forced: false,
            partial: false,
            stream: None,
            held: None,
            arena: Vec::new(),
            frags: Vec::new(),
            waiting: 0,
            wanted: vec![Vec::new(); nodes],
            pending: Vec::new(),
            retries: 0,
            retry_at: None,
            more_rounds: 0,
            assigned_at: Instant::now(),
            sent_at: vec![Instant::now(); nodes],
        }
    }

    fn has(&self, rob: u32) -> bool {
        self.frags.iter().any(|&(r, ..)| r == rob)
    }
}

struct Node {
    outstanding: usize,
    /// Slots (with their generation) waiting to send a request to this node.
    queue: VecDeque<(usize, u16)>,
}

struct Dcm {
    config: DcmConfig,
    algorithm: Box<dyn TriggerAlgorithm>,
    counters: Arc<DcmCounters>,
    slots: Vec<Slot>,
    nodes: Vec<Node>,
    /// ROB id -> readout node index, sorted by ROB id.
    rob_node: Vec<(u32, usize)>,
    decisions: Vec<Decision>,
    credits: u32,
    last_update: Instant,
    summary: DcmSummary,
    buf: Vec<u8>,
    event: Vec<u32>,
    /// Capacity reused for the ROB views handed to the algorithm (empty between events).
    rob_views: Vec<RobFragment<'static>>,
    /// Capacity reused for the pieces of the event being built (empty between events).
    piece_views: Vec<&'static [u32]>,
}

/// An empty vector with `v`'s allocation, for elements of another lifetime: the standard
/// library collects a `vec::IntoIter` in place when the layouts agree, so once the capacity
/// suffices the per-event views cost no allocation.
fn relabel<T: Relabel<U>, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
}

/// Types that differ only by a lifetime (same layout), for [`relabel`].
trait Relabel<U> {}
impl Relabel<RobFragment<'_>> for RobFragment<'_> {}
impl Relabel<&[u32]> for &[u32] {}

fn transaction(slot: usize, generation: u16) -> u32 {
    ((slot as u32) << 16) | u32::from(generation)
}

impl Dcm {
    fn new(
        config: DcmConfig,
        algorithm: Box<dyn TriggerAlgorithm>,
        counters: Arc<DcmCounters>,
    ) -> Dcm {
        let n = config.readout.len();
        let mut rob_node: Vec<(u32, usize)> = config
            .readout
            .iter()
            .enumerate()
            .flat_map(|(i, r)| r.robs.iter().map(move |&rob| (rob, i)))
            .collect();
        rob_node.sort_unstable();
        Dcm {
            slots: (0..config.slots).map(|_| Slot::new(n)).collect(),
            nodes: (0..n)
                .map(|_| Node {
                    outstanding: 0,
                    queue: VecDeque::new(),
                })
                .collect(),
            rob_node,
            decisions: Vec::new(),
            credits: config.slots as u32,
            last_update: Instant::now() - HEARTBEAT,
            summary: DcmSummary::default(),
            buf: Vec::with_capacity(4096),
            event: Vec::new(),
            rob_views: Vec::new(),
            piece_views: Vec::new(),
            config,
            algorithm,
            counters,
        }
    }

    fn terr(
        &self,
        what: &str,
    ) -> impl FnOnce(rodeo_transport::socket::TransportError) -> DataflowError {
        let app = self.config.name.clone();
        let what = what.to_string();
        move |source| DataflowError::Transport { app, what, source }
    }

    fn node_of(&self, rob: u32) -> Option<usize> {
        self.rob_node
            .binary_search_by_key(&rob, |&(r, _)| r)
            .ok()
            .map(|i| self.rob_node[i].1)
    }

    fn run(
        mut self,
        mut supervisor: Socket,
        mut readout: Vec<Socket>,
        mut loggers: Vec<Socket>,
        stop: &AtomicBool,
    ) -> Result<DcmSummary, DataflowError> {
        let mut msg = Received::default();
        while !stop.load(Ordering::Acquire) {
            let timeout = self.next_timer_ms();
            let ready = {
                let mut all: Vec<&Socket> = Vec::with_capacity(1 + readout.len() + loggers.len());
                all.push(&supervisor);
                all.extend(readout.iter());
                all.extend(loggers.iter());
                poll_readable(&all, timeout).map_err(self.terr("poll"))?
            };
            if ready & 1 != 0 {
                while supervisor
                    .try_recv(&mut msg)
                    .map_err(self.terr("receive"))?
                {
                    self.on_supervisor(&msg, &mut readout)?;
                }
            }
            for k in 0..readout.len() {
                if ready & (1 << (1 + k)) != 0 {
                    while readout[k]
                        .try_recv(&mut msg)
                        .map_err(self.terr("receive"))?
                    {
                        self.on_reply(k, &msg, &mut readout, &mut loggers)?;
                    }
                }
            }
            let first_logger = 1 + readout.len();
            for (k, logger) in loggers.iter_mut().enumerate() {
                if ready & (1 << (first_logger + k)) != 0 {
                    while logger.try_recv(&mut msg).map_err(self.terr("receive"))? {
                        self.on_ack(&msg);
                    }
                }
            }
            self.run_timers(&mut readout, &mut loggers)?;
            self.send_update(&mut supervisor, false)?;
        }
        self.summary.unfinished =
            self.slots.iter().filter(|s| s.phase != Phase::Free).count() as u64;
        // Report what is finished; the rest is the supervisor's to reassign.
        if !self.decisions.is_empty() {
            self.send_update(&mut supervisor, true)?;
        }
        Ok(self.summary)
    }

    /// Milliseconds until the next timer (retry or hold) or heartbeat.
    fn next_timer_ms(&self) -> i64 {
        let now = Instant::now();
        let mut next = self.last_update + HEARTBEAT;
        if !self.decisions.is_empty() || self.credits > 0 {
            next = now;
        }
        for s in &self.slots {
            if let Some(t) = s.retry_at {
                next = next.min(t);
            }
            if let Phase::Holding(t) = s.phase {
                next = next.min(t);
            }
        }
        let ms = next
            .saturating_duration_since(now)
            .as_micros()
            .div_ceil(1000);
        (ms as i64).min(50)
    }

    fn send_update(&mut self, supervisor: &mut Socket, force: bool) -> Result<(), DataflowError> {
        let due = Instant::now().duration_since(self.last_update) >= HEARTBEAT;
        if self.decisions.is_empty() && self.credits == 0 && !due && !force {
            return Ok(());
        }
        self.buf.clear();
        encode_update(&mut self.buf, 0, self.credits, &self.decisions);
        if supervisor.send([Frame::Copy(&self.buf)]).is_err() {
            // The supervisor is gone or not reading: keep the decisions and credits for the
            // next try (a restarted supervisor gets them; at stop they are the run's loss to
            // report, not to hide).
            self.summary.send_failures += 1;
            self.counters.send_failures.fetch_add(1, Ordering::Relaxed);
            self.last_update = Instant::now();
            return Ok(());
        }
        self.decisions.clear();
        self.credits = 0;
        self.last_update = Instant::now();
        Ok(())
    }

    fn on_supervisor(
        &mut self,
        msg: &Received,
        readout: &mut [Socket],
    ) -> Result<(), DataflowError> {
        let Ok(decoded) = decode(&msg.bytes) else {
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        let (a, build) = match decoded.message {
            Message::Process(a) => (a, false),
            Message::Build(a) => (a, true),
            _ => {
                self.summary.bad_messages += 1;
                self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        };
        let Some(i) = self.slots.iter().position(|s| s.phase == Phase::Free) else {
            // Assigned without a credit: a protocol violation; the event times out at the
            // supervisor and is reassigned.
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        self.summary.assigned += 1;
        if build {
            self.summary.builds += 1;
        }
        let s = &mut self.slots[i];
        s.generation = s.generation.wrapping_add(1);
        s.global_id = a.global_id;
        s.l1id = a.l1id;
        s.bcid = a.bcid;
        s.trigger_type = a.trigger_type;
        s.rois.clear();
        s.rois.extend(a.rois.iter());
        s.forced = build;
        s.partial = false;
        s.stream = None;
        s.held = None;
        s.arena.clear();
        s.frags.clear();
        s.waiting = 0;
        s.pending.clear();
        s.retries = 0;
        s.retry_at = None;
        s.more_rounds = 0;
        s.assigned_at = Instant::now();
        self.counters.busy_slots.fetch_add(1, Ordering::Relaxed);
        self.counters
            .trace
            .record(a.global_id, TraceStage::Assigned, 0);
        if build {
            self.fetch_rest(i, readout)?;
        } else {
            let rois = std::mem::take(&mut self.slots[i].rois);
            self.fetch(i, Stage::Decide, &rois, readout)?;
            self.slots[i].rois = rois;
        }
        Ok(())
    }

    /// Requests `robs` (those not fetched yet) for slot `i`, grouped by node.
    fn fetch(
        &mut self,
        i: usize,
        stage: Stage,
        robs: &[u32],
        readout: &mut [Socket],
    ) -> Result<(), DataflowError> {
        for w in &mut self.slots[i].wanted {
            w.clear();
        }
        for &rob in robs {
            if self.slots[i].has(rob) {
                continue;
            }
            if let Some(n) = self.node_of(rob) {
                if !self.slots[i].wanted[n].contains(&rob) {
                    self.slots[i].wanted[n].push(rob);
                }
            }
        }
        self.slots[i].phase = Phase::Fetching(stage);
        self.dispatch_wanted(i, readout)?;
        if self.slots[i].waiting == 0 {
            self.stage_complete(i, readout)?;
        }
        Ok(())
    }

    /// Requests every ROB not fetched yet from every node (n = 0 when nothing came from it).
    fn fetch_rest(&mut self, i: usize, readout: &mut [Socket]) -> Result<(), DataflowError> {
        for n in 0..self.nodes.len() {
            // The slot's own list, refilled in place (no allocation once it has grown).
            let mut missing = std::mem::take(&mut self.slots[i].wanted[n]);
            missing.clear();
            let s = &self.slots[i];
            missing.extend(
                self.config.readout[n]
                    .robs
                    .iter()
                    .copied()
                    .filter(|&r| !s.has(r)),
            );
            self.slots[i].wanted[n] = missing;
        }
        self.slots[i].phase = Phase::Fetching(Stage::Rest);
        self.dispatch_wanted(i, readout)?;
        if self.slots[i].waiting == 0 {
            self.stage_complete(i, readout)?;
        }
        Ok(())
    }

    /// Sends (or queues, over the per-node bound) the slot's wanted requests.
    fn dispatch_wanted(&mut self, i: usize, readout: &mut [Socket]) -> Result<(), DataflowError> {
        for n in 0..self.nodes.len() {
            let rest_all = self.slots[i].phase == Phase::Fetching(Stage::Rest)
                && self.config.readout[n].robs.is_empty();
            if self.slots[i].wanted[n].is_empty() && !rest_all {
                continue;
            }
            self.slots[i].waiting += 1;
            if self.nodes[n].outstanding < self.config.max_outstanding.max(1) {
                self.send_request(i, n, readout)?;
            } else {
                let g = self.slots[i].generation;
                self.nodes[n].queue.push_back((i, g));
                self.counters
                    .queued_requests
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn send_request(
        &mut self,
        i: usize,
        n: usize,
        readout: &mut [Socket],
    ) -> Result<(), DataflowError> {
        let s = &self.slots[i];
        self.buf.clear();
        encode_data_request(
            &mut self.buf,
            transaction(i, s.generation),
            s.l1id,
            &s.wanted[n],
        );
        if readout[n].send([Frame::Copy(&self.buf)]).is_err() {
            // The node is gone or stuck: ask again after the retry delay, like a PENDING
            // answer (and, past the retry limit, build without it).
            self.summary.send_failures += 1;
            self.counters.send_failures.fetch_add(1, Ordering::Relaxed);
            let s = &mut self.slots[i];
            let wanted = std::mem::take(&mut s.wanted[n]);
            s.pending.extend_from_slice(&wanted);
            s.wanted[n] = wanted;
            s.waiting = s.waiting.saturating_sub(1);
            if s.waiting == 0 {
                s.retry_at = Some(Instant::now() + self.config.retry_delay);
            }
            return Ok(());
        }
        self.nodes[n].outstanding += 1;
        self.summary.requests += 1;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters
            .outstanding_requests
            .fetch_add(1, Ordering::Relaxed);
        let s = &mut self.slots[i];
        s.sent_at[n] = Instant::now();
        self.counters
            .trace
            .record(s.global_id, TraceStage::RequestSent, n as u32);
        Ok(())
    }

    fn on_reply(
        &mut self,
        n: usize,
        msg: &Received,
        readout: &mut [Socket],
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        let Ok(decoded) = decode(&msg.bytes) else {
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        let Message::DataReply { fragments, .. } = decoded.message else {
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        if self.nodes[n].outstanding > 0 {
            self.counters
                .outstanding_requests
                .fetch_sub(1, Ordering::Relaxed);
        }
        self.nodes[n].outstanding = self.nodes[n].outstanding.saturating_sub(1);
        // A freed request slot on this node: send the next queued request.
        while self.nodes[n].outstanding < self.config.max_outstanding.max(1) {
            let Some((q, g)) = self.nodes[n].queue.pop_front() else {
                break;
            };
            self.counters
                .queued_requests
                .fetch_sub(1, Ordering::Relaxed);
            if self.slots[q].generation == g && matches!(self.slots[q].phase, Phase::Fetching(_)) {
                self.send_request(q, n, readout)?;
            }
        }
        let tx = decoded.header.transaction;
        let i = (tx >> 16) as usize;
        let g = tx as u16;
        let live = self
            .slots
            .get(i)
            .is_some_and(|s| s.generation == g && matches!(s.phase, Phase::Fetching(_)));
        if !live {
            self.summary.stale_replies += 1;
            self.counters.stale_replies.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let s = &self.slots[i];
        self.counters
            .request_latency
            .record(s.sent_at.get(n).map_or(Duration::ZERO, |t| t.elapsed()));
        self.counters
            .trace
            .record(s.global_id, TraceStage::RequestAnswered, n as u32);
        let mut scratch = Vec::new();
        let raw = fragments.as_bytes();
        let words: &[u32] = match bytes_as_words(raw) {
            Some(w) => w,
            None => {
                scratch.extend(
                    raw.chunks_exact(4)
                        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
                &scratch
            }
        };
        self.counters
            .bytes_received
            .fetch_add(4 * words.len() as u64, Ordering::Relaxed);
        let mut at = 0;
        while at < words.len() {
            let Some(&size) = words.get(at + 1) else {
                break;
            };
            let size = size as usize;
            let Some(frag) = words.get(at..at + size).filter(|_| size > 0) else {
                self.summary.bad_messages += 1;
                self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                break;
            };
            at += size;
            let Ok(rob) = RobFragment::parse(frag) else {
                self.summary.bad_messages += 1;
                self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            self.summary.fragments += 1;
            let status = rob.status();
            let id = rob.source_id().word();
            let s = &mut self.slots[i];
            if status.contains(Status::ROB_FRAGMENT_PENDING) {
                if !s.pending.contains(&id) {
                    s.pending.push(id);
                }
                continue;
            }
            if status.contains(Status::ROB_FRAGMENT_LOST) {
                s.partial = true;
            }
            if !s.has(id) {
                let start = s.arena.len();
                s.arena.extend_from_slice(frag);
                s.frags.push((id, start, frag.len()));
            }
        }
        let s = &mut self.slots[i];
        s.waiting = s.waiting.saturating_sub(1);
        if s.waiting == 0 {
            self.stage_complete_or_retry(i, readout, loggers)?;
        }
        Ok(())
    }

    fn stage_complete_or_retry(
        &mut self,
        i: usize,
        readout: &mut [Socket],
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        let s = &mut self.slots[i];
        if !s.pending.is_empty() {
            if s.retries < self.config.max_retries {
                s.retry_at = Some(Instant::now() + self.config.retry_delay);
                return Ok(());
            }
            s.partial = true;
            s.pending.clear();
        }
        self.stage_complete_with(i, readout, loggers)
    }

    fn stage_complete(&mut self, i: usize, readout: &mut [Socket]) -> Result<(), DataflowError> {
        // Called when no request was needed: nothing can be pending, loggers are not needed
        // before the Rest stage completes, which goes through the retry path with loggers.
        let mut none: [Socket; 0] = [];
        self.stage_complete_with(i, readout, &mut none)
    }

    fn stage_complete_with(
        &mut self,
        i: usize,
        readout: &mut [Socket],
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        match self.slots[i].phase {
            Phase::Fetching(Stage::Decide) => self.decide(i, readout),
            Phase::Fetching(Stage::Rest) => {
                if loggers.is_empty() {
                    // Reached without any request (every ROB already fetched): ship on the
                    // next timer pass, which has the loggers.
                    self.slots[i].retry_at = Some(Instant::now());
                    return Ok(());
                }
                self.ship(i, loggers)
            }
            _ => Ok(()),
        }
    }

    fn decide(&mut self, i: usize, readout: &mut [Socket]) -> Result<(), DataflowError> {
        let mut robs: Vec<RobFragment<'_>> = relabel(std::mem::take(&mut self.rob_views));
        let s = &self.slots[i];
        robs.extend(
            s.frags.iter().filter_map(|&(_, start, len)| {
                RobFragment::parse(&s.arena[start..start + len]).ok()
            }),
        );
        let info = EventInfo {
            global_id: s.global_id,
            l1id: s.l1id,
            bcid: s.bcid,
            trigger_type: s.trigger_type,
            rois: &s.rois,
        };
        let outcome = self.algorithm.decide(&info, &robs);
        self.rob_views = relabel(robs);
        let s = &self.slots[i];
        self.counters
            .decision_latency
            .record(s.assigned_at.elapsed());
        self.counters
            .trace
            .record(s.global_id, TraceStage::Decided, 0);
        if outcome.hold.is_zero() {
            self.act(i, outcome.verdict, readout)
        } else {
            let s = &mut self.slots[i];
            s.phase = Phase::Holding(Instant::now() + outcome.hold);
            s.held = Some(outcome.verdict);
            Ok(())
        }
    }

    fn act(
        &mut self,
        i: usize,
        verdict: Verdict,
        readout: &mut [Socket],
    ) -> Result<(), DataflowError> {
        match verdict {
            Verdict::Reject => {
                self.summary.rejected += 1;
                self.finish(i, WireVerdict::Reject);
                Ok(())
            }
            Verdict::Accept { stream } => {
                self.slots[i].stream = Some(stream);
                self.fetch_rest(i, readout)
            }
            Verdict::NeedRobs(robs) => {
                let s = &mut self.slots[i];
                s.more_rounds += 1;
                if s.more_rounds > MAX_MORE_ROUNDS {
                    self.summary.rejected += 1;
                    self.finish(i, WireVerdict::Reject);
                    return Ok(());
                }
                self.fetch(i, Stage::Decide, &robs, readout)
            }
        }
    }

    /// Builds the full event and sends it to its logger.
    fn ship(&mut self, i: usize, loggers: &mut [Socket]) -> Result<(), DataflowError> {
        let s = &self.slots[i];
        let mut status = Status::OK;
        if s.forced {
            status.insert(Status::EVENT_FORCED_ACCEPT);
        }
        if s.partial {
            status.insert(Status::EVENT_PARTIAL);
        }
        let stream = s.stream.unwrap_or(0);
        let name = self
            .config
            .streams
            .get(stream as usize)
            .map_or("debug_unknown", String::as_str);
        let tags = [StreamTag {
            name,
            stream_type: if s.forced { "debug" } else { "physics" },
        }];
        let mut pieces: Vec<&[u32]> = relabel(std::mem::take(&mut self.piece_views));
        pieces.extend(
            s.frags
                .iter()
                .map(|&(_, start, len)| &s.arena[start..start + len]),
        );
        let status_words = [status.word()];
        let builder = EventBuilder {
            source_id: SourceId(self.config.source_id),
            status: &status_words,
            checksum: self.config.checksum,
            global_id: s.global_id,
            run_number: self.config.run_number,
            extended_l1id: s.l1id,
            bcid: s.bcid,
            l1_trigger_type: s.trigger_type,
            stream_tags: &tags,
            robs: &pieces,
            ..EventBuilder::default()
        };
        self.event.clear();
        let written = builder.write_vec(&mut self.event);
        self.piece_views = relabel(pieces);
        if written.is_err() {
            // Only a >4 GiB event or a bad stream name can fail: count and reject.
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            self.finish(i, WireVerdict::Reject);
            return Ok(());
        }
        let global_id = s.global_id;
        let payload = 4 + 4 * self.event.len();
        let header = header_bytes(MessageType::Event, i as u32, payload as u32);
        let stream_word = stream.to_le_bytes();
        let k = (global_id % loggers.len() as u64) as usize;
        let sent = loggers[k].send([
            Frame::Copy(&header),
            Frame::Copy(&stream_word),
            Frame::Copy(words_as_bytes(&self.event)),
        ]);
        if sent.is_err() {
            // The logger is gone or stuck: try shipping again shortly.
            self.summary.send_failures += 1;
            self.counters.send_failures.fetch_add(1, Ordering::Relaxed);
            self.slots[i].retry_at =
                Some(Instant::now() + self.config.retry_delay.max(Duration::from_millis(10)));
            return Ok(());
        }
        self.summary.events_sent += 1;
        self.slots[i].phase = Phase::Logging;
        Ok(())
    }

    fn on_ack(&mut self, msg: &Received) {
        let Ok(decoded) = decode(&msg.bytes) else {
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Message::EventAck { global_ids } = decoded.message else {
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            return;
        };
        for gid in global_ids.iter() {
            let Some(i) = self
                .slots
                .iter()
                .position(|s| s.phase == Phase::Logging && s.global_id == gid)
            else {
                self.summary.stale_replies += 1;
                continue;
            };
            self.counters.trace.record(gid, TraceStage::Logged, 0);
            if self.slots[i].forced {
                self.summary.forced += 1;
                self.finish(i, WireVerdict::ForcedAccept);
            } else {
                self.summary.accepted += 1;
                self.finish(i, WireVerdict::Accept);
            }
            self.counters.accepted.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn finish(&mut self, i: usize, verdict: WireVerdict) {
        let s = &mut self.slots[i];
        if s.partial {
            self.summary.partial += 1;
        }
        self.decisions.push(Decision {
            global_id: s.global_id,
            l1id: s.l1id,
            verdict,
        });
        self.counters.build_latency.record(s.assigned_at.elapsed());
        s.phase = Phase::Free;
        s.retry_at = None;
        s.generation = s.generation.wrapping_add(1);
        self.credits += 1;
        self.counters.events.fetch_add(1, Ordering::Relaxed);
        self.counters.busy_slots.fetch_sub(1, Ordering::Relaxed);
    }

    fn run_timers(
        &mut self,
        readout: &mut [Socket],
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            if let Phase::Holding(t) = self.slots[i].phase {
                if t <= now {
                    let v = self.slots[i].held.take().unwrap_or(Verdict::Reject);
                    self.act(i, v, readout)?;
                }
                continue;
            }
            let Some(t) = self.slots[i].retry_at else {
                continue;
            };
            if t > now {
                continue;
            }
            self.slots[i].retry_at = None;
            if self.slots[i].pending.is_empty() {
                // A Rest stage that completed without requests: ship it now.
                if self.slots[i].phase == Phase::Fetching(Stage::Rest) {
                    self.ship(i, loggers)?;
                }
                continue;
            }
            let s = &mut self.slots[i];
            s.retries += 1;
            self.summary.retries += 1;
            let pending = std::mem::take(&mut s.pending);
            let stage = match s.phase {
                Phase::Fetching(st) => st,
                _ => Stage::Decide,
            };
            for w in &mut s.wanted {
                w.clear();
            }
            for &rob in &pending {
                if let Some(n) = self
                    .rob_node
                    .binary_search_by_key(&rob, |&(r, _)| r)
                    .ok()
                    .map(|k| self.rob_node[k].1)
                {
                    self.slots[i].wanted[n].push(rob);
                }
            }
            self.slots[i].phase = Phase::Fetching(stage);
            self.dispatch_wanted(i, readout)?;
            if self.slots[i].waiting == 0 {
                self.stage_complete_with(i, readout, loggers)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod relabel_tests {
    use super::*;

    #[test]
    fn relabel_keeps_the_allocation_and_empties_the_vector() {
        let words = [1u32, 2, 3];
        let mut v: Vec<&[u32]> = Vec::with_capacity(32);
        v.push(&words);
        let w: Vec<&'static [u32]> = relabel(v);
        assert!(w.is_empty());
        assert!(w.capacity() >= 32, "capacity {}", w.capacity());
        let mut again: Vec<&[u32]> = relabel(w);
        again.push(&words[1..]);
        assert_eq!(again, vec![&words[1..]]);
    }
}
