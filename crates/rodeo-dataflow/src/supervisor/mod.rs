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
//! # Start
//!
//! Every DCM announces its free slots in its first `Update`, and only increments after that.
//! If no DCM has offered a slot `start_timeout` after the supervisor started (none connected,
//! or their first Updates lost), nothing can ever be assigned: the supervisor fails the run
//! ([`DataflowError::NoSlots`], naming the DCMs it heard) rather than wait at 0 L1 accepts
//! until someone stops it by hand.
//!
//! # Stop
//!
//! On stop (or when the L1 source has produced its events) no new event is assigned; the
//! supervisor waits until every assigned event is decided (bounded by `drain_timeout`),
//!
//! # Layout
//!
//! - this module: the configuration, [`spawn`], the supervisor's state and its main loop
//!   (receive, watch, assign, clear, drain at stop);
//! - `l1_input`: where the L1 accepts come from (the emulator, the RoIB, the readout's progress,
//!   an external trigger unit), started from the configuration;
//! - `dcms`: the DCMs as the supervisor knows them: their `Update`s (credits and decisions) and
//!   the ones that die;
//! - `assignment`: events assigned against credits, reassigned after a timeout or a dead DCM
//!   (forced accepts), and the timeouts;
//! - `clears`: the clear group sent to every readout node, and the KeepAlives, each node's
//!   backlog of what its inbox could not take yet (a clear is never dropped for a slow node);
//! - `counters`: [`SupervisorCounters`] (live) and [`SupervisorSummary`] (the run's counts,
//!   which must balance).

mod assignment;
mod clears;
mod counters;
mod dcms;
mod l1_input;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{Received, Socket, SocketKind, Transport};
use rustc_hash::FxHashMap;

use crate::error::DataflowError;
use crate::handle::AppHandle;
use crate::l1source::{L1Accept, L1SourceConfig, ReadoutFeed};
use crate::roib::RoibConfig;

pub use counters::{SupervisorCounters, SupervisorSummary, ABANDON_GRACE};

use assignment::Assigned;
use dcms::Dcm;
use l1_input::L1Input;

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
    /// A run in which no DCM has offered a processing slot this long after the supervisor
    /// started fails ([`DataflowError::NoSlots`]) instead of waiting at 0 L1 accepts forever
    /// (DCMs that never connected, or their credits lost; default 60 s).
    pub start_timeout: Duration,
    /// ZeroMQ high-water mark of its sockets (default [`crate::DEFAULT_HIGH_WATER_MARK`]).
    pub high_water_mark: u32,
    /// Largest incoming message of its sockets, in bytes (ZMQ_MAXMSGSIZE, or the shared-memory
    /// inbox's limit): larger ones are refused before they are buffered (`None`, the default:
    /// no limit). A partition sets it from `[transport] max_message_bytes`.
    pub max_message_bytes: Option<usize>,
    /// Most DCM identities kept (default 4096): past it a new identity takes the place of one
    /// declared dead, or is refused (counted bad) while none is.
    pub max_dcms: usize,
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
            start_timeout: Duration::from_secs(60),
            high_water_mark: crate::DEFAULT_HIGH_WATER_MARK,
            max_message_bytes: None,
            max_dcms: crate::MAX_PEER_IDENTITIES,
        }
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
    // The loop receives on the router on every turn (which flushes): the assignments of one
    // turn go out together (the stream transport). The readout nodes' clear sockets are only
    // sent on, so they send at once (without waiting: `clears`, the backlog).
    router.set_batching(true);
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
    let l1 = L1Input::start(&config)?;
    AppHandle::spawn(&app, move |stop| {
        Supervisor::new(config, counters, l1).run(router, readout, &stop)
    })
}

struct Supervisor {
    config: SupervisorConfig,
    counters: Arc<SupervisorCounters>,
    l1: L1Input,
    dcms: Vec<Dcm>,
    /// DCMs by their peer identity (keyed hash: the bytes come from outside).
    by_id: HashMap<Vec<u8>, usize>,
    credits: VecDeque<usize>,
    /// Events out with a DCM by global id: the supervisor's own sequential numbers, so a fast
    /// unkeyed hash (three lookups per L1 accept).
    assigned: FxHashMap<u64, Assigned>,
    deadlines: VecDeque<(Instant, u64, u64)>,
    reassign: VecDeque<(L1Accept, usize)>,
    next_number: u64,
    clear: Vec<u32>,
    clear_sequence: u32,
    /// Per readout node (in `readout` order), the clears its inbox could not take yet
    /// (`clears`, module docs).
    backlogs: Vec<clears::Backlog>,
    last_clear: Instant,
    oldest_pending_clear: Option<Instant>,
    /// When the supervisor started, moved on by its own stalls (for `start_timeout`).
    started: Instant,
    /// Some DCM offered a processing slot (a credit) since the start.
    offered: bool,
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
            assigned: FxHashMap::default(),
            deadlines: VecDeque::new(),
            reassign: VecDeque::new(),
            next_number: 0,
            clear_sequence: 0,
            backlogs: Vec::new(),
            last_clear: Instant::now(),
            oldest_pending_clear: None,
            started: Instant::now(),
            offered: false,
            l1_first: None,
            l1_last: None,
            summary: SupervisorSummary::default(),
            buf: Vec::with_capacity(256),
        }
    }

    /// The error of a failed socket call of this application ([`crate::error::transport_err`]).
    fn terr(
        &self,
        what: &'static str,
    ) -> impl FnOnce(rodeo_transport::socket::TransportError) -> DataflowError + '_ {
        crate::error::transport_err(&self.config.name, what)
    }

    fn run(
        mut self,
        mut router: Socket,
        mut readout: Vec<Socket>,
        stop: &AtomicBool,
    ) -> Result<SupervisorSummary, DataflowError> {
        let mut msg = Received::default();
        let mut draining_since: Option<Instant> = None;
        let mut last_turn = Instant::now();
        self.hello_readout(&mut readout);
        loop {
            // Everything that arrived, without waiting.
            let mut got_any = false;
            while router
                .try_recv_in_place(&mut msg)
                .map_err(self.terr("receive"))?
            {
                got_any = true;
                self.handle(&msg);
            }
            let now = Instant::now();
            self.after_own_stall(now.saturating_duration_since(last_turn), now);
            last_turn = now;
            self.check_dcms(now);
            self.check_timeouts(now);
            let stopping = stop.load(Ordering::Acquire) || self.l1.is_done();
            if !self.offered && !stopping {
                self.check_start(now)?;
            }
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
        // What waits to go out together goes before the last clears.
        router.flush();
        self.summary.undecided = (self.assigned.len() + self.reassign.len()) as u64;
        self.maybe_flush_clears(&mut readout, Instant::now(), true)?;
        self.flush_backlogs(&mut readout);
        self.summary.l1_accepts = self.l1.produced();
        if let (Some(first), Some(last)) = (self.l1_first, self.l1_last) {
            self.summary.l1_span_ns =
                u64::try_from(last.duration_since(first).as_nanos()).unwrap_or(u64::MAX);
        }
        if let L1Input::Emulator(_, pacer) = &self.l1 {
            self.summary.l1_missed = pacer.missed();
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
        if let L1Input::Emulator(_, pacer) = &self.l1 {
            c.l1_missed.store(pacer.missed(), Ordering::Relaxed);
        }
        c.accepted.store(self.summary.accepted, Ordering::Relaxed);
        c.rejected.store(self.summary.rejected, Ordering::Relaxed);
        c.forced_accepts
            .store(self.summary.forced_accepts, Ordering::Relaxed);
        c.in_flight
            .store(self.assigned.len() as u64, Ordering::Relaxed);
        c.credits
            .store(self.credits.len() as u64, Ordering::Relaxed);
    }
}
