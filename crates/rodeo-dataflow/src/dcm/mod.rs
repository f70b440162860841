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
//! (rule 3's bound), in order. The room the replies of one turn free is filled once the turn
//! has read them all, so the requests it lets through leave together (one shared-memory
//! batch, not a sample per request: sent reply by reply, they reached the default partition's
//! readout node as 0.95 samples per L1 accept, now 0.07). The slot count bounds the events
//! in flight; the supervisor never assigns more than the credits announced (rule 1).
//!
//! # Heartbeat and shutdown
//!
//! An `Update` goes out at least every [`HEARTBEAT`], so the supervisor knows the node lives.
//! One the supervisor does not take (not started yet, restarting, not reading) is tried again
//! after [`UPDATE_RETRY`], the loop asleep in its poll meanwhile, its decisions and credits
//! kept (each failed try counted in `send_failures`). On stop the node finishes nothing more:
//! events in its slots are the supervisor's to reassign (what a crash would also leave
//! behind).
//!
//! # Layout
//!
//! - this module: the configuration, [`spawn`], the slot state and the DCM's main loop (poll,
//!   heartbeat `Update`s, assignments from the supervisor);
//! - `requests`: asking the readout nodes for fragments (per-node bound and queue), their
//!   replies, re-asks of pending fragments and the timers;
//! - `decision`: the trigger call-out, the emulated hold and the recorded decision;
//! - `assembly`: filing reply fragments into a slot, building the event and shipping it to a
//!   logger, and the logger's acknowledgements;
//! - `counters`: [`DcmCounters`] (live) and [`DcmSummary`] (the run's totals);
//! - [`faults`]: a readout node that does not answer (request timeout, the node down, events
//!   built without its ROBs until it answers again) and a logger that does not acknowledge
//!   (the event sent again).

mod assembly;
mod counters;
mod decision;
pub mod faults;
mod requests;
mod sampler;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::trace::Stage as TraceStage;

use rodeo_format::checksum::{bytes_as_words, ChecksumType};
use rodeo_format::compress::EventCompressor;
use rodeo_format::fragment::RobFragment;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{decode, encode_update, Decision, Message};
use rodeo_transport::socket::{
    poll_readable, timeout_ms, Frame, Received, Socket, SocketKind, Transport,
};

use crate::error::DataflowError;
use crate::handle::AppHandle;
use crate::trigger::{TriggerAlgorithm, Verdict};

pub use counters::{DcmCounters, DcmSummary};
pub use sampler::SampleConfig;

/// Longest interval between two `Update`s of a DCM (its heartbeat).
pub const HEARTBEAT: Duration = Duration::from_millis(250);

/// After an `Update` the supervisor did not take (not started yet, restarting, or not
/// reading), the next try waits this long: the loop sleeps in its poll instead of trying again
/// on every turn (it spun at 100% of a core while the supervisor's process started).
pub const UPDATE_RETRY: Duration = Duration::from_millis(1);

/// Longest wait of the DCM's loop in its poll: it looks at its stop flag at least this often,
/// so a disconnect waits at most about this long for it (at 50 ms, each DCM's stop took 20-50
/// ms of every run's disconnect). An idle DCM wakes 100 times a second.
pub const STOP_CHECK: Duration = Duration::from_millis(10);

/// Readout nodes and loggers one DCM talks to, at most: it polls a socket for each, besides
/// its supervisor and control sockets (64 in all).
pub const MAX_PEERS: usize = 62;

/// Processing slots of one DCM, at most: a DCM announces no more credits than this in one
/// `Update`, and the supervisor holds no more than twice this for one DCM (a DCM restarted
/// before it was found dead announces its slots again beside its old credits).
pub const MAX_SLOTS: usize = 4096;

/// Longest a send may block on a peer (gone, or not keeping up) before it counts as failed.
const SEND_TIMEOUT_MS: i32 = 1000;

/// How often the slots are looked over for a request or acknowledgement past its timeout
/// ([`faults::REQUEST_TIMEOUT`], [`faults::ACK_TIMEOUT`]: seconds, so found at most this much
/// later), and on every turn while a readout node is down.
const FAULT_SCAN_EVERY: Duration = Duration::from_millis(10);

/// A readout node as a DCM sees it (its peer): the request endpoint it asks and the ROBs it
/// holds. Not the node itself (`rodeo_ros::node::ReadoutNode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadoutPeer {
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
    pub readout: Vec<ReadoutPeer>,
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
    /// Longest an event waits for PENDING fragments, from its assignment, before it is built
    /// without them (flagged partial), whatever `max_retries` allows. Bounds what a readout
    /// node far behind the run costs (one restarted into a run whose L1 raced ahead answers
    /// PENDING for every current event): well below the supervisor's event timeout, so the
    /// DCM decides the event before the supervisor reassigns it. Default 2 s.
    pub max_pending_time: Duration,
    /// Checksum of the built events.
    pub checksum: ChecksumType,
    /// Run number written into events.
    pub run_number: u32,
    /// Stream names by index (for stream tags).
    pub streams: Vec<String>,
    /// Source id of built events.
    pub source_id: u32,
    /// Compress each built event's payload with zstd (compression type 1) before shipping it:
    /// the partition's `[logger] compression = "zstd"`, done where the cores are (every DCM in
    /// parallel) instead of in the logger's one thread. Default false.
    pub compress: bool,
    /// The zstd level of `compress` (default `rodeo_format::compress::DEFAULT_ZSTD_LEVEL`).
    pub compress_level: i32,
    /// Event sampling for monitoring (`None`: none, at no cost).
    pub sample: Option<SampleConfig>,
    /// ZeroMQ high-water mark of its sockets (default [`crate::DEFAULT_HIGH_WATER_MARK`]).
    pub high_water_mark: u32,
    /// Largest incoming message of its sockets, in bytes (ZMQ_MAXMSGSIZE, or the shared-memory
    /// inbox's limit): larger ones are refused before they are buffered (`None`, the default:
    /// no limit). A partition sets it from `[transport] max_message_bytes`.
    pub max_message_bytes: Option<usize>,
}

impl DcmConfig {
    /// A DCM `name` with `slots` slots, 64 requests per node, 1 ms retry delay, 1000 retries,
    /// Adler-32, one stream `physics_Main`.
    pub fn new(
        name: &str,
        supervisor: &str,
        readout: Vec<ReadoutPeer>,
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
            max_pending_time: Duration::from_secs(2),
            checksum: ChecksumType::Adler32,
            run_number: 1,
            streams: vec!["physics_Main".into()],
            source_id: 0x007C_0000,
            compress: false,
            compress_level: rodeo_format::compress::DEFAULT_ZSTD_LEVEL,
            sample: None,
            high_water_mark: crate::DEFAULT_HIGH_WATER_MARK,
            max_message_bytes: None,
        }
    }
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
    if config.slots > MAX_SLOTS {
        return Err(DataflowError::Config {
            app,
            reason: format!("a DCM has at most {MAX_SLOTS} slots, not {}", config.slots),
        });
    }
    if config.readout.len() + config.loggers.len() > MAX_PEERS {
        return Err(DataflowError::Config {
            app,
            reason: format!("a DCM talks to at most {MAX_PEERS} readout nodes and loggers"),
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
        s.set_high_water_marks(config.high_water_mark)
            .map_err(terr("set high-water marks".into()))?;
        s.set_identity(app.as_bytes())
            .map_err(terr("set identity".into()))?;
        if let Some(n) = config.max_message_bytes {
            s.set_max_message_size(i64::try_from(n).unwrap_or(i64::MAX))
                .map_err(terr("set max message size".into()))?;
        }
        s.set_send_timeout(SEND_TIMEOUT_MS)
            .map_err(terr("set send timeout".into()))?;
        // The loop polls every socket on every turn (which flushes): the requests and
        // decisions of one turn go out together (the stream transport).
        s.set_batching(true);
        s.connect(&ep)
            .map_err(terr(format!("connect {endpoint}")))?;
        Ok(s)
    };
    let compressor = if config.compress {
        let c = EventCompressor::new(config.compress_level).map_err(|e| DataflowError::Config {
            app: app.clone(),
            reason: format!(
                "zstd level {}: {e}; use a level from 1 to 22 (or negative)",
                config.compress_level
            ),
        })?;
        Some(c)
    } else {
        None
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
    let sampler = config
        .sample
        .as_ref()
        .map(|c| sampler::Sampler::connect(c, transport, &app, config.run_number))
        .transpose()?;
    AppHandle::spawn(&app, move |stop| {
        let mut dcm = Dcm::new(config, algorithm, counters, compressor);
        dcm.sampler = sampler;
        dcm.run(supervisor, readout, loggers, &stop)
    })
}

/// What a slot is fetching fragments for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Fetching the RoI (or extra) fragments for the algorithm.
    Decide,
    /// Fetching the rest of an accepted (or forced) event.
    Rest,
}

/// Where a slot's event is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Free,
    Fetching(Stage),
    /// The algorithm decided; the emulated processing time runs until `until`.
    Holding(Instant),
    /// Sent to a logger; waiting for its acknowledgement.
    Logging,
}

/// A processing slot: one event in flight and its fragments.
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
    /// Fragments copied in (from a reply whose words were not aligned), back to back.
    arena: Vec<u32>,
    /// Replies kept whole: their fragments are filed where they lie (no copy).
    replies: Vec<Received>,
    /// Every fragment filed, in the order received.
    frags: Vec<Filed>,
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
    /// Bit n: a request of this slot to readout node n is in flight (`faults`).
    asked: u64,
    /// When the event was last sent to its logger (`faults`: resent without an ack).
    shipped_at: Instant,
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
            replies: Vec::new(),
            frags: Vec::new(),
            waiting: 0,
            wanted: vec![Vec::new(); nodes],
            pending: Vec::new(),
            retries: 0,
            retry_at: None,
            more_rounds: 0,
            assigned_at: Instant::now(),
            sent_at: vec![Instant::now(); nodes],
            asked: 0,
            shipped_at: Instant::now(),
        }
    }

    fn has(&self, rob: u32) -> bool {
        self.frags.iter().any(|f| f.rob == rob)
    }

    /// The words of fragment `f` of this slot (empty if they are gone, which a slot's own
    /// bookkeeping never lets happen: a kept reply does not move or change until the slot is
    /// emptied).
    fn fragment(&self, f: &Filed) -> &[u32] {
        if f.reply == IN_ARENA {
            return self.arena.get(f.start..f.start + f.len).unwrap_or(&[]);
        }
        self.replies
            .get(f.reply as usize)
            .and_then(|r| r.data().get(f.start..f.start + 4 * f.len))
            .and_then(bytes_as_words)
            .unwrap_or(&[])
    }

    /// Empties the slot's fragments; the kept replies go to `spare` for the next receives.
    fn drop_fragments(&mut self, spare: &mut Vec<Received>) {
        self.arena.clear();
        self.frags.clear();
        spare.append(&mut self.replies);
    }
}

/// [`Filed::reply`] of a fragment copied into the slot's arena.
const IN_ARENA: u32 = u32::MAX;

/// Where one filed ROB fragment lies: in a reply the slot keeps, or in its arena.
#[derive(Debug, Clone, Copy)]
struct Filed {
    /// Its ROB id.
    rob: u32,
    /// Index into [`Slot::replies`], or [`IN_ARENA`].
    reply: u32,
    /// In a reply: the byte offset of its first word in the reply's data; in the arena: the
    /// word offset.
    start: usize,
    /// Its length in words.
    len: usize,
}

/// A readout node's request bookkeeping.
struct Node {
    outstanding: usize,
    /// Slots (with their generation) waiting to send a request to this node.
    queue: VecDeque<(usize, u16)>,
    /// Down (`faults`): requests are not sent, except one probe every `PROBE_EVERY`.
    down: bool,
    /// When the next probe may go to a down node.
    probe_at: Instant,
}

/// The DCM's state, owned by its thread.
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
    /// No `Update` is tried before this after one failed ([`UPDATE_RETRY`]).
    update_retry: Option<Instant>,
    summary: DcmSummary,
    buf: Vec<u8>,
    /// The built event, or (without compression) its words before the ROB fragments.
    event: Vec<u32>,
    /// The built event's words after the ROB fragments (its checksum word), when gathered.
    event_tail: Vec<u32>,
    /// The compressed event (with `compress`).
    packed: Vec<u32>,
    /// The encoder (with `compress`).
    compressor: Option<EventCompressor>,
    /// Capacity reused for the ROB views handed to the algorithm (empty between events).
    rob_views: Vec<RobFragment<'static>>,
    /// Capacity reused for the pieces of the event being built (empty between events).
    piece_views: Vec<&'static [u32]>,
    /// Receive buffers of replies no slot keeps any more, for the next receives.
    spare_replies: Vec<Received>,
    /// Event sampling for monitoring (`[monitoring]`), if configured.
    sampler: Option<sampler::Sampler>,
    /// The earliest slot timer (retry or hold) that may be due: set by [`Dcm::arm`] wherever
    /// a slot's timer is set, recomputed by the timer pass. `None`: no slot has one. The timer
    /// pass and the poll's timeout look at the slots only from then, not on every loop turn
    /// (a turn per message, each a pass over every slot, was a quarter of the DCM's CPU).
    timer_due: Option<Instant>,
    /// When the request and acknowledgement timeouts are next looked for ([`FAULT_SCAN_EVERY`]).
    fault_scan_at: Instant,
    /// The loop turn's clock: read after each poll and before the timer pass, and what a
    /// slot's stamps (assigned, request sent, shipped) and latencies use, so that an event
    /// costs no clock reads of its own (five an event were a tenth of the DCM's CPU). A latency
    /// is short by at most the turn's work before it.
    turn_time: Instant,
}

/// The transaction id of a request: slot index and the slot's event generation.
fn transaction(slot: usize, generation: u16) -> u32 {
    ((slot as u32) << 16) | u32::from(generation)
}

impl Dcm {
    fn new(
        config: DcmConfig,
        algorithm: Box<dyn TriggerAlgorithm>,
        counters: Arc<DcmCounters>,
        compressor: Option<EventCompressor>,
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
                    down: false,
                    probe_at: Instant::now(),
                })
                .collect(),
            rob_node,
            decisions: Vec::new(),
            credits: config.slots as u32,
            last_update: Instant::now() - HEARTBEAT,
            update_retry: None,
            summary: DcmSummary::default(),
            buf: Vec::with_capacity(4096),
            event: Vec::new(),
            event_tail: Vec::new(),
            packed: Vec::new(),
            compressor,
            rob_views: Vec::new(),
            piece_views: Vec::new(),
            spare_replies: Vec::new(),
            sampler: None,
            timer_due: None,
            fault_scan_at: Instant::now(),
            turn_time: Instant::now(),
            config,
            algorithm,
            counters,
        }
    }

    /// The error of a failed socket call of this application ([`crate::error::transport_err`]).
    fn terr(
        &self,
        what: &'static str,
    ) -> impl FnOnce(rodeo_transport::socket::TransportError) -> DataflowError + '_ {
        crate::error::transport_err(&self.config.name, what)
    }

    /// The readout node the configuration gives ROB `rob` to (`None`: not configured).
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
        let mut last_turn = Instant::now();
        while !stop.load(Ordering::Acquire) {
            let timeout = self.next_timer_ms();
            let ready = {
                // On the stack, not allocated each turn: at most 64 sockets (the mask's bits).
                let mut all: [&Socket; 64] = [&supervisor; 64];
                let mut n = 1;
                for s in readout.iter().chain(loggers.iter()).take(63) {
                    all[n] = s;
                    n += 1;
                }
                poll_readable(&all[..n], timeout).map_err(self.terr("poll"))?
            };
            let now = Instant::now();
            self.turn_time = now;
            let waited = Duration::from_millis(timeout.max(0) as u64);
            self.after_own_stall(
                now.saturating_duration_since(last_turn)
                    .saturating_sub(waited),
            );
            last_turn = now;
            if ready & 1 != 0 {
                while supervisor
                    .try_recv_in_place(&mut msg)
                    .map_err(self.terr("receive"))?
                {
                    self.on_supervisor(&msg, &mut readout)?;
                }
            }
            for k in 0..readout.len() {
                if ready & (1 << (1 + k)) != 0 {
                    while readout[k]
                        .try_recv_in_place(&mut msg)
                        .map_err(self.terr("receive"))?
                    {
                        self.on_reply(k, &mut msg, &mut readout, &mut loggers)?;
                    }
                    // The room the replies freed: the queued requests go out together.
                    self.send_queued(k, &mut readout)?;
                }
            }
            let first_logger = 1 + readout.len();
            for (k, logger) in loggers.iter_mut().enumerate() {
                if ready & (1 << (first_logger + k)) != 0 {
                    while logger
                        .try_recv_in_place(&mut msg)
                        .map_err(self.terr("receive"))?
                    {
                        self.on_ack(&msg);
                    }
                }
            }
            let now = Instant::now();
            self.turn_time = now;
            self.run_timers(now, &mut readout, &mut loggers)?;
            self.send_update(&mut supervisor, false, now)?;
        }
        self.summary.unfinished =
            self.slots.iter().filter(|s| s.phase != Phase::Free).count() as u64;
        // Report what is finished; the rest is the supervisor's to reassign.
        if !self.decisions.is_empty() {
            self.send_update(&mut supervisor, true, Instant::now())?;
        }
        // What waits to go out together goes now.
        for s in std::iter::once(&mut supervisor)
            .chain(readout.iter_mut())
            .chain(loggers.iter_mut())
        {
            s.flush();
        }
        Ok(self.summary)
    }

    /// Milliseconds until the next timer (retry or hold) or heartbeat, from the turn's clock.
    fn next_timer_ms(&self) -> i64 {
        let now = self.turn_time;
        let mut next = self.last_update + HEARTBEAT;
        if !self.decisions.is_empty() || self.credits > 0 {
            next = self.update_retry.map_or(now, |t| t.max(now));
        }
        if let Some(t) = self.timer_due {
            next = next.min(t);
        }
        timeout_ms(next.saturating_duration_since(now).min(STOP_CHECK))
    }

    /// Notes that a slot's timer (`retry_at`, or the end of a hold) is set for `t`.
    fn arm(&mut self, t: Instant) {
        self.timer_due = Some(self.timer_due.map_or(t, |d| d.min(t)));
    }

    /// Sends an `Update` when there are decisions or credits to report, or the heartbeat is due
    /// at `now` (the loop turn's time).
    fn send_update(
        &mut self,
        supervisor: &mut Socket,
        force: bool,
        now: Instant,
    ) -> Result<(), DataflowError> {
        let due = now.duration_since(self.last_update) >= HEARTBEAT;
        if self.decisions.is_empty() && self.credits == 0 && !due && !force {
            return Ok(());
        }
        if !force && !due && self.update_retry.is_some_and(|t| now < t) {
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
            self.last_update = now;
            self.update_retry = Some(now + UPDATE_RETRY);
            return Ok(());
        }
        self.decisions.clear();
        self.credits = 0;
        self.last_update = now;
        self.update_retry = None;
        Ok(())
    }

    fn on_supervisor(
        &mut self,
        msg: &Received,
        readout: &mut [Socket],
    ) -> Result<(), DataflowError> {
        let Ok(decoded) = decode(msg.data()) else {
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
        s.drop_fragments(&mut self.spare_replies);
        s.waiting = 0;
        s.pending.clear();
        s.retries = 0;
        s.retry_at = None;
        s.more_rounds = 0;
        s.assigned_at = self.turn_time;
        s.asked = 0;
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trigger::{AcceptFraction, TimeDistribution};

    /// A DCM with nothing to report and no timer set, its heartbeat a whole period away,
    /// waits no longer than [`STOP_CHECK`] before it looks at its stop flag again.
    #[test]
    fn an_idle_dcm_waits_at_most_the_stop_check() {
        let config = DcmConfig::new(
            "dcm-1",
            "inproc://supervisor",
            Vec::new(),
            vec!["inproc://logger".into()],
            1,
        );
        let trigger = AcceptFraction {
            fraction: 0.0,
            stream: 0,
            shares: Vec::new(),
            time: TimeDistribution::Zero,
        };
        let mut d = Dcm::new(
            config,
            Box::new(trigger),
            Arc::new(DcmCounters::default()),
            None,
        );
        d.credits = 0;
        d.turn_time = Instant::now();
        d.last_update = d.turn_time;
        assert!(d.decisions.is_empty() && d.timer_due.is_none());
        assert_eq!(d.next_timer_ms(), STOP_CHECK.as_millis() as i64);
    }
}
