//! The supervisor (the seeds' HLTSV / L2SV / DFM): assigns events, watches nodes, groups clears.
//!
//! # Sockets
//!
//! - a ROUTER bound at `endpoint`: DCMs send `Update` (credits and decisions), the supervisor
//!   sends `Process` and `Build`;
//! - one DEALER per readout node, connected to its request endpoint: `Clear` and `KeepAlive`.
//!
//! # State (owned by the one supervisor thread)
//!
//! - `credits`: a queue with one entry per free processing slot, naming its DCM. An event is
//!   assigned only against a credit (protocol rule 1), round-robin over the DCMs as their
//!   credits arrive.
//! - `assigned`: global id -> the accept, the DCM holding it, and an assignment number; a
//!   queue of (deadline, global id, assignment number) in assignment order finds expired events
//!   without scanning (every event gets the same timeout, so deadlines are in order).
//! - `reassign`: events taken back from a DCM (timeout, or the DCM silent for `dcm_timeout`),
//!   sent again as `Build` (forced accept) ahead of new events (rule 2), to another DCM when
//!   there is one.
//! - the clear group: L1IDs of finished events, sent to every readout node in groups of
//!   `clear_group` with consecutive sequence numbers, flushed when idle and at stop (rule 5).
//!
//! # Nodes that die
//!
//! A DCM sends an `Update` at least every heartbeat (the DCM module's `HEARTBEAT`). One silent
//! for `dcm_timeout` is declared dead: its credits are dropped and its events reassigned. A
//! decision that arrives for an event no longer assigned to its sender (reassigned meanwhile)
//! is counted as late and ignored: the event is decided once.
//!
//! # Stop
//!
//! On stop (or when the L1 source has produced its events) no new event is assigned; the
//! supervisor waits until every assigned event is decided (bounded by `drain_timeout`),
//! flushes the clear group and returns the run's counts, which must balance (rule 6).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_memory::LogHistogram;

use crate::trace::{Stage as TraceStage, TraceLog};

use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{
    decode, encode_assignment, encode_clear, encode_keepalive, Message, Verdict,
};
use rodeo_transport::socket::{Frame, Received, Socket, SocketKind, Transport};

use crate::external::ExternalTrigger;
use crate::l1source::{L1Accept, L1Source, L1SourceConfig, Pacer, ReadoutFeed};
use crate::roib::{Roib, RoibConfig};
use crate::{AppHandle, DataflowError};

/// Longest a send may block on a readout node before it counts as failed.
const SEND_TIMEOUT_MS: i32 = 1000;

/// Configuration of the supervisor.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// Application name.
    pub name: String,
    /// Endpoint to bind for DCMs.
    pub endpoint: String,
    /// Request endpoints of the readout nodes (clears go to each).
    pub readout_endpoints: Vec<String>,
    /// The L1 source.
    pub l1: L1SourceConfig,
    /// RoIB mode: accepts assembled from several Level-1 inputs (`None`: the L1 emulator).
    pub roib: Option<RoibConfig>,
    /// Data-driven mode: accepts for the L1IDs the readout nodes have complete, unpaced
    /// ([`ReadoutFeed`]; `l1.rate_hz` is ignored). A feed without nodes is refused at spawn.
    pub readout: Option<ReadoutFeed>,
    /// External mode: L1 accepts from a trigger unit connecting to this TCP address
    /// ([`crate::external`]; `l1.rate_hz` is ignored).
    pub external: Option<String>,
    /// An assigned event not decided within this time is reassigned (rule 2; default 10 s).
    pub event_timeout: Duration,
    /// A DCM silent for this long is dead (default 3 s).
    pub dcm_timeout: Duration,
    /// L1IDs per clear message (default 100).
    pub clear_group: usize,
    /// A partial clear group is sent after this idle time (default 20 ms).
    pub clear_flush: Duration,
    /// A KeepAlive goes to the readout nodes after this long without a clear (default 1 s).
    pub keepalive: Duration,
    /// At stop, wait at most this long for assigned events to be decided (default 30 s).
    pub drain_timeout: Duration,
    /// ZeroMQ high-water mark of its sockets (default [`crate::DEFAULT_HIGH_WATER_MARK`]).
    pub high_water_mark: u32,
    /// Largest incoming message of its sockets, in bytes (ZMQ_MAXMSGSIZE, or the shared-memory
    /// inbox's limit): larger ones are refused before they are buffered (`None`, the default:
    /// no limit). A partition sets it from `[transport] max_message_bytes`.
    pub max_message_bytes: Option<usize>,
}

impl SupervisorConfig {
    /// A supervisor `name` binding `endpoint`, with the protocol's default timings.
    pub fn new(name: &str, endpoint: &str, readout_endpoints: Vec<String>) -> SupervisorConfig {
        SupervisorConfig {
            name: name.to_string(),
            endpoint: endpoint.to_string(),
            readout_endpoints,
            l1: L1SourceConfig::default(),
            roib: None,
            readout: None,
            external: None,
            event_timeout: Duration::from_secs(10),
            dcm_timeout: Duration::from_secs(3),
            clear_group: 100,
            clear_flush: Duration::from_millis(20),
            keepalive: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(30),
            high_water_mark: crate::DEFAULT_HIGH_WATER_MARK,
            max_message_bytes: None,
        }
    }
}

/// How long a drain that is told to give up ([`SupervisorCounters::abandon_drain`]) still
/// waits for the events that can be decided.
pub const ABANDON_GRACE: Duration = Duration::from_secs(1);

/// Live counters of the supervisor (64-bit, readable while it runs).
#[derive(Debug, Default)]
pub struct SupervisorCounters {
    /// Set by the controller before the stop when the run stops because an application
    /// cannot go on (a logger whose disks are full): the drain ends after [`ABANDON_GRACE`]
    /// instead of waiting `drain_timeout` for events that can no longer be decided (they are
    /// counted as undecided).
    pub abandon_drain: std::sync::atomic::AtomicBool,
    /// L1 accepts produced.
    pub l1_accepts: AtomicU64,
    /// Events accepted by a DCM.
    pub accepted: AtomicU64,
    /// Events rejected.
    pub rejected: AtomicU64,
    /// Events force-accepted after a reassignment.
    pub forced_accepts: AtomicU64,
    /// Events assigned and not yet decided.
    pub in_flight: AtomicU64,
    /// Free slots known (credits).
    pub credits: AtomicU64,
    /// Decision latency: assignment sent to decision received.
    pub decision_latency: LogHistogram,
    /// Sampled per-event time stamps (L1 accept, done).
    pub trace: TraceLog,
    /// Messages that did not decode or were not expected (ignored), live.
    pub bad_messages: AtomicU64,
}

/// The counts of a run: these must balance (rule 6).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SupervisorSummary {
    /// L1 accepts produced.
    pub l1_accepts: u64,
    /// Accepted.
    pub accepted: u64,
    /// Rejected.
    pub rejected: u64,
    /// Forced accepts (reassigned events).
    pub forced_accepts: u64,
    /// Events still undecided when the drain timed out (0 in a good run).
    pub undecided: u64,
    /// Reassignments (an event may be reassigned more than once).
    pub reassignments: u64,
    /// Of those, after the event timeout.
    pub timeouts: u64,
    /// DCMs declared dead.
    pub dead_dcms: u64,
    /// Decisions for events no longer assigned to their sender (ignored).
    pub late_decisions: u64,
    /// Messages that did not decode or were not expected (ignored).
    pub bad_messages: u64,
    /// L1IDs sent in clears (to each readout node).
    pub cleared: u64,
    /// Clear messages sent (to each readout node).
    pub clear_messages: u64,
    /// KeepAlive messages sent (to each readout node).
    pub keepalives: u64,
    /// DCMs seen.
    pub dcms: u64,
    /// Sends to readout nodes that failed (node gone or stuck past the send timeout).
    pub send_failures: u64,
    /// Assignments not sent because the DCM's queue was full (it does not read): never
    /// waited for; the event is reassigned at its timeout or the DCM's death.
    #[serde(default)]
    pub assignments_dropped: u64,
    /// Nanoseconds from the first L1 accept to the last, on the supervisor's clock (0 with
    /// fewer than two): the run's L1 rate is `(l1_accepts - 1) / l1_span_ns`, free of the
    /// start-up and drain around the accepts and of the controller's poll period.
    #[serde(default)]
    pub l1_span_ns: u64,
}

impl SupervisorSummary {
    /// Whether every L1 accept was decided exactly once and cleared.
    pub fn balanced(&self) -> bool {
        self.undecided == 0
            && self.l1_accepts == self.accepted + self.rejected + self.forced_accepts
            && self.cleared == self.l1_accepts
    }
}

/// Starts the supervisor thread; its sockets are bound/connected before this returns.
pub fn spawn(
    config: SupervisorConfig,
    transport: &Transport,
    counters: Arc<SupervisorCounters>,
) -> Result<AppHandle<SupervisorSummary>, DataflowError> {
    let app = config.name.clone();
    let terr = |what: String| {
        let app = app.clone();
        move |source| DataflowError::Transport { app, what, source }
    };
    let ep = |s: &str| {
        Endpoint::parse(s).map_err(|source| DataflowError::Endpoint {
            app: app.clone(),
            source,
        })
    };
    let router = transport
        .socket(SocketKind::Router)
        .map_err(terr("create socket".into()))?;
    router
        .set_high_water_marks(config.high_water_mark)
        .map_err(terr("set high-water marks".into()))?;
    if let Some(n) = config.max_message_bytes {
        router
            .set_max_message_size(i64::try_from(n).unwrap_or(i64::MAX))
            .map_err(terr("set max message size".into()))?;
    }
    router
        .bind(&ep(&config.endpoint)?)
        .map_err(terr(format!("bind {}", config.endpoint)))?;
    let mut readout = Vec::new();
    for r in &config.readout_endpoints {
        let s = transport
            .socket(SocketKind::Dealer)
            .map_err(terr("create socket".into()))?;
        s.set_high_water_marks(config.high_water_mark)
            .map_err(terr("set high-water marks".into()))?;
        s.set_send_timeout(SEND_TIMEOUT_MS)
            .map_err(terr("set send timeout".into()))?;
        if let Some(n) = config.max_message_bytes {
            s.set_max_message_size(i64::try_from(n).unwrap_or(i64::MAX))
                .map_err(terr("set max message size".into()))?;
        }
        s.connect(&ep(r)?).map_err(terr(format!("connect {r}")))?;
        readout.push(s);
    }
    let l1 = match (&config.roib, &config.readout) {
        _ if config.external.is_some() => {
            let address = config.external.clone().unwrap_or_default();
            let ext = ExternalTrigger::start(&address).map_err(|e| DataflowError::Thread {
                app: app.clone(),
                what: format!(
                    "cannot listen for the trigger unit on {address} (l1.external_listen): \
                         {e}"
                ),
            })?;
            tracing::info!(
                "external L1: waiting for the trigger unit on {}",
                ext.local_addr()
            );
            L1Input::External(L1Source::new(config.l1.clone()), Box::new(ext))
        }
        (_, Some(feed)) => {
            if feed.nodes.is_empty() {
                return Err(DataflowError::Thread {
                    app: app.clone(),
                    what: "the data-driven L1 (l1.mode = \"readout\") reads the readout \
                           nodes' progress in this process, and none is here: run the \
                           partition in one process (without --processes)"
                        .into(),
                });
            }
            L1Input::Readout {
                source: L1Source::new(config.l1.clone()),
                feed: feed.clone(),
                complete: 0,
                ended: false,
            }
        }
        (None, None) => L1Input::Emulator(
            L1Source::new(config.l1.clone()),
            Pacer::new(config.l1.rate_hz),
        ),
        (Some(rc), None) => L1Input::Roib(Box::new(Roib::start(rc.clone(), &config.l1).map_err(
            |_| DataflowError::Thread {
                app: app.clone(),
                what: "could not start the RoIB inputs".into(),
            },
        )?)),
    };
    AppHandle::spawn(&app, move |stop| {
        Supervisor::new(config, counters, l1).run(router, readout, &stop)
    })
}

#[derive(Debug)]
struct Dcm {
    id: Vec<u8>,
    last_seen: Instant,
    alive: bool,
    credits: u64,
}

#[derive(Debug, Clone, Copy)]
struct Assigned {
    accept: L1Accept,
    dcm: usize,
    number: u64,
    forced: bool,
    /// When it was assigned.
    at: Instant,
}

/// Where accepts come from: the emulator (paced here), the RoIB (paced by its inputs) or the
/// readout (data-driven: the L1IDs every node has complete).
enum L1Input {
    Emulator(L1Source, Pacer),
    Roib(Box<Roib>),
    Readout {
        source: L1Source,
        feed: ReadoutFeed,
        /// The feed's last reading: L1IDs complete on every node, and whether all ended.
        complete: u64,
        ended: bool,
    },
    External(L1Source, Box<ExternalTrigger>),
}

impl L1Input {
    fn is_done(&self) -> bool {
        match self {
            L1Input::Emulator(s, _) => s.is_done(),
            L1Input::Roib(r) => r.is_done(),
            L1Input::Readout {
                source,
                complete,
                ended,
                ..
            } => source.is_done() || (*ended && source.produced() >= *complete),
            L1Input::External(s, ext) => s.is_done() || (ext.ended() && ext.waiting() == 0),
        }
    }

    fn produced(&self) -> u64 {
        match self {
            L1Input::Emulator(s, _) => s.produced(),
            L1Input::Roib(r) => r.produced(),
            L1Input::Readout { source, .. } => source.produced(),
            L1Input::External(s, _) => s.produced(),
        }
    }

    /// Accepts that may be taken now.
    fn available(&mut self) -> u64 {
        match self {
            L1Input::Emulator(_, p) => p.available(),
            L1Input::Roib(_) => u64::MAX,
            L1Input::Readout {
                source,
                feed,
                complete,
                ended,
            } => {
                (*complete, *ended) = feed.read();
                complete.saturating_sub(source.produced())
            }
            L1Input::External(_, ext) => ext.waiting() as u64,
        }
    }

    fn next_accept(&mut self) -> Option<L1Accept> {
        match self {
            L1Input::Emulator(s, p) => {
                let a = s.next_accept()?;
                p.take(1);
                Some(a)
            }
            L1Input::Roib(r) => r.next_accept(),
            L1Input::Readout { source, .. } => source.next_accept(),
            L1Input::External(s, ext) => {
                let (l1id, trigger_type) = ext.pop()?;
                s.accept_for(l1id, trigger_type)
            }
        }
    }

    /// Seconds until the next accept may be due.
    fn wait_s(&self) -> f64 {
        match self {
            L1Input::Emulator(_, p) => p.wait_s(),
            L1Input::Roib(_) => 0.0005,
            L1Input::Readout { .. } => 0.001,
            L1Input::External(..) => 0.0005,
        }
    }
}

struct Supervisor {
    config: SupervisorConfig,
    counters: Arc<SupervisorCounters>,
    l1: L1Input,
    dcms: Vec<Dcm>,
    by_id: HashMap<Vec<u8>, usize>,
    credits: VecDeque<usize>,
    assigned: HashMap<u64, Assigned>,
    deadlines: VecDeque<(Instant, u64, u64)>,
    reassign: VecDeque<(L1Accept, usize)>,
    next_number: u64,
    clear: Vec<u32>,
    clear_sequence: u32,
    last_clear: Instant,
    oldest_pending_clear: Option<Instant>,
    /// Time of the first and of the latest new L1 accept assigned.
    l1_first: Option<Instant>,
    l1_last: Option<Instant>,
    summary: SupervisorSummary,
    buf: Vec<u8>,
}

impl Supervisor {
    /// Counts a message that did not decode or was not expected, in the summary and live.
    fn bad_message(&mut self) {
        self.summary.bad_messages += 1;
        self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
    }

    fn new(config: SupervisorConfig, counters: Arc<SupervisorCounters>, l1: L1Input) -> Supervisor {
        Supervisor {
            clear: Vec::with_capacity(config.clear_group.max(1)),
            config,
            counters,
            l1,
            dcms: Vec::new(),
            by_id: HashMap::new(),
            credits: VecDeque::new(),
            assigned: HashMap::new(),
            deadlines: VecDeque::new(),
            reassign: VecDeque::new(),
            next_number: 0,
            clear_sequence: 0,
            last_clear: Instant::now(),
            oldest_pending_clear: None,
            l1_first: None,
            l1_last: None,
            summary: SupervisorSummary::default(),
            buf: Vec::with_capacity(256),
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

    fn run(
        mut self,
        mut router: Socket,
        mut readout: Vec<Socket>,
        stop: &AtomicBool,
    ) -> Result<SupervisorSummary, DataflowError> {
        let mut msg = Received::default();
        let mut draining_since: Option<Instant> = None;
        loop {
            // Everything that arrived, without waiting.
            let mut got_any = false;
            while router.try_recv(&mut msg).map_err(self.terr("receive"))? {
                got_any = true;
                self.handle(&msg);
            }
            let now = Instant::now();
            self.check_dcms(now);
            self.check_timeouts(now);
            let stopping = stop.load(Ordering::Acquire) || self.l1.is_done();
            let assigned_any = self.assign(&mut router, stopping)?;
            if let L1Input::External(_, ext) = &self.l1 {
                // Busy while no DCM slot is free (the trigger unit holds its triggers).
                ext.set_no_slots(self.credits.is_empty());
            }
            self.maybe_flush_clears(&mut readout, now, false)?;
            self.publish();
            if stopping && self.assigned.is_empty() && self.reassign.is_empty() {
                break;
            }
            if stopping {
                let since = *draining_since.get_or_insert(now);
                if now.duration_since(since) > self.config.drain_timeout {
                    break;
                }
                if now.duration_since(since) > ABANDON_GRACE
                    && self.counters.abandon_drain.load(Ordering::Acquire)
                {
                    break;
                }
                // Every DCM that ever spoke is dead: nobody is left to decide what remains
                // (the partition is going away, e.g. its controller died). Counted undecided.
                if !self.dcms.is_empty() && self.dcms.iter().all(|d| !d.alive) {
                    break;
                }
            }
            if !got_any && !assigned_any {
                // Idle: wait for a message, bounded so timers and the L1 rate are served.
                let wait_ms = if self.credits.is_empty() || stopping {
                    5
                } else {
                    (self.l1.wait_s() * 1000.0).ceil().clamp(0.0, 5.0) as i64
                };
                if router
                    .recv(&mut msg, wait_ms)
                    .map_err(self.terr("receive"))?
                {
                    self.handle(&msg);
                }
            }
        }
        self.summary.undecided = (self.assigned.len() + self.reassign.len()) as u64;
        self.maybe_flush_clears(&mut readout, Instant::now(), true)?;
        self.summary.l1_accepts = self.l1.produced();
        if let (Some(first), Some(last)) = (self.l1_first, self.l1_last) {
            self.summary.l1_span_ns =
                u64::try_from(last.duration_since(first).as_nanos()).unwrap_or(u64::MAX);
        }
        if let L1Input::Emulator(_, pacer) = &self.l1 {
            if pacer.missed() > 0 {
                tracing::warn!(
                    missed = pacer.missed(),
                    "the partition could not take the configured L1 rate: {} accepts fell \
                     behind the schedule by more than {} ms and were not sent",
                    pacer.missed(),
                    (crate::l1source::CATCH_UP_S * 1e3) as u64
                );
            }
        }
        self.summary.dcms = self.dcms.len() as u64;
        self.publish();
        Ok(self.summary)
    }

    fn publish(&self) {
        let c = &self.counters;
        c.l1_accepts.store(self.l1.produced(), Ordering::Relaxed);
        c.accepted.store(self.summary.accepted, Ordering::Relaxed);
        c.rejected.store(self.summary.rejected, Ordering::Relaxed);
        c.forced_accepts
            .store(self.summary.forced_accepts, Ordering::Relaxed);
        c.in_flight
            .store(self.assigned.len() as u64, Ordering::Relaxed);
        c.credits
            .store(self.credits.len() as u64, Ordering::Relaxed);
    }

    fn handle(&mut self, msg: &Received) {
        let Ok(decoded) = decode(&msg.bytes) else {
            self.bad_message();
            return;
        };
        let Message::Update { credits, decisions } = decoded.message else {
            self.bad_message();
            return;
        };
        let now = Instant::now();
        let dcm = match self.by_id.get(msg.peer.as_slice()) {
            Some(&i) => i,
            None => {
                self.dcms.push(Dcm {
                    id: msg.peer.clone(),
                    last_seen: now,
                    alive: true,
                    credits: 0,
                });
                self.by_id.insert(msg.peer.clone(), self.dcms.len() - 1);
                self.dcms.len() - 1
            }
        };
        let d = &mut self.dcms[dcm];
        d.last_seen = now;
        if !d.alive {
            // A DCM declared dead spoke again: its old credits were dropped, its events
            // reassigned; it starts afresh with the credits it announces now.
            d.alive = true;
        }
        for dec in decisions.iter() {
            match self.assigned.get(&dec.global_id) {
                Some(a) if a.dcm == dcm => {
                    self.counters
                        .decision_latency
                        .record(now.saturating_duration_since(a.at));
                    self.counters
                        .trace
                        .record(dec.global_id, TraceStage::Done, 0);
                    let forced = a.forced;
                    let l1id = a.accept.l1id;
                    self.assigned.remove(&dec.global_id);
                    match (dec.verdict, forced) {
                        (_, true) | (Verdict::ForcedAccept, _) => self.summary.forced_accepts += 1,
                        (Verdict::Accept, false) => self.summary.accepted += 1,
                        (Verdict::Reject, false) => self.summary.rejected += 1,
                    }
                    self.add_clear(l1id, now);
                }
                _ => self.summary.late_decisions += 1,
            }
        }
        for _ in 0..credits {
            self.credits.push_back(dcm);
        }
        self.dcms[dcm].credits += u64::from(credits);
    }

    fn add_clear(&mut self, l1id: u32, now: Instant) {
        if self.clear.is_empty() {
            self.oldest_pending_clear = Some(now);
        }
        self.clear.push(l1id);
    }

    /// Declares silent DCMs dead and takes their events back.
    fn check_dcms(&mut self, now: Instant) {
        for i in 0..self.dcms.len() {
            let d = &self.dcms[i];
            if d.alive && now.duration_since(d.last_seen) > self.config.dcm_timeout {
                self.dcms[i].alive = false;
                self.dcms[i].credits = 0;
                self.summary.dead_dcms += 1;
                self.credits.retain(|&c| c != i);
                let mut taken: Vec<u64> = self
                    .assigned
                    .iter()
                    .filter(|(_, a)| a.dcm == i)
                    .map(|(&g, _)| g)
                    .collect();
                taken.sort_unstable();
                for g in taken {
                    if let Some(a) = self.assigned.remove(&g) {
                        self.summary.reassignments += 1;
                        self.reassign.push_back((a.accept, i));
                    }
                }
            }
        }
    }

    /// Takes back events whose deadline passed.
    /// Entries of events already decided are dropped from the front as soon as they get
    /// there, not at their deadline: the queue holds about the events in flight, not every
    /// event of the last `event_timeout` (memory flat whatever the rate).
    fn check_timeouts(&mut self, now: Instant) {
        while let Some(&(deadline, gid, number)) = self.deadlines.front() {
            let live = self.assigned.get(&gid).is_some_and(|a| a.number == number);
            if live && deadline > now {
                break;
            }
            self.deadlines.pop_front();
            if let Some(a) = self.assigned.get(&gid) {
                if a.number == number {
                    let a = *a;
                    self.assigned.remove(&gid);
                    self.summary.timeouts += 1;
                    self.summary.reassignments += 1;
                    self.reassign.push_back((a.accept, a.dcm));
                }
            }
        }
    }

    /// Takes a credit, preferring a DCM other than `avoid`; `None` without credits.
    fn take_credit(&mut self, avoid: Option<usize>) -> Option<usize> {
        while let Some(&dcm) = self.credits.front() {
            if self.dcms[dcm].alive {
                break;
            }
            self.credits.pop_front();
        }
        let pos = match avoid {
            Some(a) => self
                .credits
                .iter()
                .position(|&c| c != a && self.dcms[c].alive)
                .or_else(|| (!self.credits.is_empty()).then_some(0)),
            None => (!self.credits.is_empty()).then_some(0),
        }?;
        let dcm = self.credits.remove(pos)?;
        self.dcms[dcm].credits = self.dcms[dcm].credits.saturating_sub(1);
        Some(dcm)
    }

    /// Assigns reassigned events (as Build) first, then new ones while credits and the L1 rate
    /// allow. Returns whether anything was sent.
    fn assign(&mut self, router: &mut Socket, stopping: bool) -> Result<bool, DataflowError> {
        let mut sent = false;
        while let Some(&(accept, from)) = self.reassign.front() {
            let Some(dcm) = self.take_credit(Some(from)) else {
                return Ok(sent);
            };
            self.reassign.pop_front();
            self.send_assignment(router, dcm, accept, true)?;
            sent = true;
        }
        if stopping {
            return Ok(sent);
        }
        let mut budget = self.l1.available();
        while budget > 0 && !self.credits.is_empty() && !self.l1.is_done() {
            let Some(dcm) = self.take_credit(None) else {
                break;
            };
            let Some(accept) = self.l1.next_accept() else {
                self.credits.push_front(dcm);
                break;
            };
            budget -= 1;
            let now = Instant::now();
            self.l1_first.get_or_insert(now);
            self.l1_last = Some(now);
            self.counters
                .trace
                .record(accept.global_id, TraceStage::L1Accept, 0);
            self.send_assignment(router, dcm, accept, false)?;
            sent = true;
        }
        Ok(sent)
    }

    fn send_assignment(
        &mut self,
        router: &mut Socket,
        dcm: usize,
        accept: L1Accept,
        forced: bool,
    ) -> Result<(), DataflowError> {
        self.buf.clear();
        encode_assignment(
            &mut self.buf,
            forced,
            0,
            accept.global_id,
            accept.l1id,
            accept.bcid,
            accept.trigger_type,
            accept.rois(),
        );
        let number = self.next_number;
        self.next_number += 1;
        self.assigned.insert(
            accept.global_id,
            Assigned {
                accept,
                dcm,
                number,
                forced,
                at: Instant::now(),
            },
        );
        self.deadlines.push_back((
            Instant::now() + self.config.event_timeout,
            accept.global_id,
            number,
        ));
        // Never waits for one DCM (the thread serves them all and the L1 source).
        match router.try_send_to(&self.dcms[dcm].id, [Frame::Copy(&self.buf)]) {
            Ok(()) => {}
            Err(e) if e.is_would_block() => {
                // The DCM does not read: as if it were gone, the event waits for its timeout
                // or the DCM's death, then goes elsewhere. Nothing is lost.
                if self.summary.assignments_dropped == 0 {
                    tracing::warn!(
                        "supervisor: DCM {} does not read its assignments (queue full); \
                         dropped, reassigned at their timeout",
                        String::from_utf8_lossy(&self.dcms[dcm].id)
                    );
                }
                self.summary.assignments_dropped += 1;
            }
            Err(_) => {
                // The DCM is gone: the event waits for its timeout or the DCM's death, then
                // goes elsewhere. Nothing is lost.
                self.bad_message();
            }
        }
        Ok(())
    }

    fn maybe_flush_clears(
        &mut self,
        readout: &mut [Socket],
        now: Instant,
        force: bool,
    ) -> Result<(), DataflowError> {
        let group = self.config.clear_group.max(1);
        while self.clear.len() >= group {
            let rest = self.clear.split_off(group);
            self.send_clear(readout, now)?;
            self.clear = rest;
            if !self.clear.is_empty() {
                self.oldest_pending_clear = Some(now);
            }
        }
        let idle = self
            .oldest_pending_clear
            .is_some_and(|t| now.duration_since(t) >= self.config.clear_flush);
        if !self.clear.is_empty() && (force || idle) {
            self.send_clear(readout, now)?;
        }
        if now.duration_since(self.last_clear) >= self.config.keepalive {
            self.buf.clear();
            encode_keepalive(&mut self.buf, self.clear_sequence);
            for s in readout.iter_mut() {
                if s.send([Frame::Copy(&self.buf)]).is_err() {
                    self.summary.send_failures += 1;
                }
            }
            self.summary.keepalives += 1;
            self.last_clear = now;
        }
        Ok(())
    }

    fn send_clear(&mut self, readout: &mut [Socket], now: Instant) -> Result<(), DataflowError> {
        self.buf.clear();
        encode_clear(&mut self.buf, self.clear_sequence, &self.clear);
        self.clear_sequence = self.clear_sequence.wrapping_add(1);
        for s in readout.iter_mut() {
            // A node that does not take the clear is counted (its clear sequence shows the gap).
            if s.send([Frame::Copy(&self.buf)]).is_err() {
                self.summary.send_failures += 1;
            }
        }
        self.summary.cleared += self.clear.len() as u64;
        self.summary.clear_messages += 1;
        self.clear.clear();
        self.oldest_pending_clear = None;
        self.last_clear = now;
        Ok(())
    }
}
