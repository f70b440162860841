//! One application of a partition under lifecycle control: what a `rodeo app ROLE` process
//! runs ([`AppControl`]), and its side of the control channel ([`serve`]).
//!
//! # What each transition does, per role
//!
//! | command     | logger                 | ros                    | dcm                  | supervisor                    |
//! |-------------|------------------------|------------------------|----------------------|-------------------------------|
//! | configure   | takes the configuration, finds itself in the layout; the logger creates its output directory | | | |
//! | connect     | binds, starts writing  | binds, input starts    | connects its sockets | —                             |
//! | start       | —                      | —                      | —                    | binds, starts the L1 source   |
//! | stop        | —                      | waits for the last clears | —                 | stops L1, drains, summary     |
//! | disconnect  | closes files, summary  | stops serving, summary | stops, summary       | —                             |
//! | unconfigure | forgets the layout     | same                   | same                 | same                          |
//!
//! The controller stops the supervisor first, so by the time the others get `stop` every
//! event is decided and the dataflow has drained; they keep their sockets until `disconnect`.
//!
//! # State and ownership
//!
//! [`AppControl`] owns the application's threads (through their handles) behind one mutex:
//! commands are serialised, and [`AppControl::heartbeat`] reads the live atomic counters.
//! The process starts in INITIAL (the process exists; `initialize` is implied). A thread that
//! ends on its own with an error puts the application in ERROR (seen at the next heartbeat).
//!
//! # Shutdown
//!
//! [`serve`] returns after a `shutdown` command (replied first) or when `quit` says so (signal,
//! or the controller's pipe closed); then it walks the application down itself.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rodeo_dataflow::dcm::{self, DcmCounters, DcmSummary};
use rodeo_dataflow::logger::{self, LoggerCounters, LoggerSummary};
use rodeo_dataflow::supervisor::{self, SupervisorCounters, SupervisorSummary};
use rodeo_dataflow::AppHandle;
use rodeo_ros::node::ReadoutNode;
use rodeo_ros::server::SwRodInputCounters;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{Frame, Received, SocketKind, Transport, TransportError};
use serde_json::json;

use crate::channel::{self, Heartbeat, ToApp, ToController};
use crate::config::PartitionConfig;
use crate::control::{AppStatus, PartitionStatus, RunControl};
use crate::lifecycle::{Command, Lifecycle, State, TransitionError};
use crate::partition::Layout;
use crate::prometheus::MetricsWriter;

/// An application's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A logger (SFO).
    Logger,
    /// A readout node (ROS).
    Ros,
    /// A data-collection node (DCM).
    Dcm,
    /// The supervisor with its L1 source.
    Supervisor,
}

impl Role {
    /// The role's name (`logger`, `ros`, `dcm`, `supervisor`).
    pub fn name(self) -> &'static str {
        match self {
            Role::Logger => "logger",
            Role::Ros => "ros",
            Role::Dcm => "dcm",
            Role::Supervisor => "supervisor",
        }
    }

    /// The role of an application name (`logger-1`, `ros-2`, `dcm-3`, `supervisor`).
    pub fn of_name(name: &str) -> Option<Role> {
        if name == "supervisor" {
            return Some(Role::Supervisor);
        }
        let (prefix, n) = name.rsplit_once('-')?;
        n.parse::<u32>().ok()?;
        prefix.parse().ok()
    }

    /// The counter that is this role's main rate.
    pub fn rate_counter(self) -> &'static str {
        match self {
            Role::Logger => "events_written",
            Role::Ros => "requests",
            Role::Dcm => "events",
            Role::Supervisor => "l1_accepts",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "logger" => Ok(Role::Logger),
            "ros" => Ok(Role::Ros),
            "dcm" => Ok(Role::Dcm),
            "supervisor" => Ok(Role::Supervisor),
            _ => Err(format!(
                "unknown role {s:?}: expected logger, ros, dcm or supervisor"
            )),
        }
    }
}

/// What the application runs now.
enum Running {
    Nothing,
    Logger(AppHandle<LoggerSummary>, Arc<LoggerCounters>),
    Ros(Box<ReadoutNode>),
    Dcm(AppHandle<DcmSummary>, Arc<DcmCounters>),
    Supervisor(AppHandle<SupervisorSummary>),
}

struct Inner {
    lifecycle: Lifecycle,
    config: Option<PartitionConfig>,
    layout: Option<Layout>,
    running: Running,
    /// The supervisor's counters live across runs of its thread.
    sup_counters: Arc<SupervisorCounters>,
    /// Final counters of the last thread that ended (kept for heartbeats and status).
    last_counters: BTreeMap<String, u64>,
    finished: bool,
    run_start: Option<Instant>,
}

/// One application under lifecycle control; also a [`RunControl`] of its own (a partition of
/// one application), so an HTTP server can serve it per process.
pub struct AppControl {
    name: String,
    role: Role,
    transport: Transport,
    inner: Mutex<Inner>,
}

impl fmt::Debug for AppControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppControl")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish()
    }
}

type Outcome = Result<Option<serde_json::Value>, String>;

impl AppControl {
    /// An application in INITIAL. `config`, if given, is what `configure` takes when the
    /// command does not bring one.
    pub fn new(
        role: Role,
        name: &str,
        transport: Transport,
        config: Option<PartitionConfig>,
    ) -> AppControl {
        let mut lifecycle = Lifecycle::new(name);
        // The process exists: initialize is implied.
        let _ = lifecycle.apply(Command::Initialize, || Ok::<(), String>(()));
        AppControl {
            name: name.to_string(),
            role,
            transport,
            inner: Mutex::new(Inner {
                lifecycle,
                config,
                layout: None,
                running: Running::Nothing,
                sup_counters: Arc::new(SupervisorCounters::default()),
                last_counters: BTreeMap::new(),
                finished: false,
                run_start: None,
            }),
        }
    }

    /// The application's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its role.
    pub fn role(&self) -> Role {
        self.role
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state now.
    pub fn state(&self) -> State {
        self.lock().lifecycle.state()
    }

    /// Runs `command`; `config` (TOML) replaces the configuration on `configure`, and
    /// `expect_cleared` bounds a readout node's wait for the last clears on `stop`. Returns
    /// the new state and, when the command ended the application's part of the run, its
    /// summary.
    pub fn handle(
        &self,
        command: Command,
        config: Option<&str>,
        expect_cleared: Option<u64>,
    ) -> Result<(State, Option<serde_json::Value>), TransitionError> {
        let mut inner = self.lock();
        let mut summary = None;
        let inner = &mut *inner;
        let Inner {
            lifecycle,
            config: cfg,
            layout,
            running,
            sup_counters,
            last_counters,
            finished,
            run_start,
        } = inner;
        let state = lifecycle.apply(command, || -> Result<(), String> {
            let out: Outcome = match command {
                Command::Configure => {
                    if let Some(text) = config {
                        *cfg = Some(
                            PartitionConfig::from_toml(text, "the controller's configuration")
                                .map_err(|e| e.to_string())?,
                        );
                    }
                    let c = cfg
                        .as_ref()
                        .ok_or("no configuration was given to configure with")?;
                    let l = Layout::new(c);
                    self.find_in(&l)?;
                    if self.role == Role::Logger {
                        std::fs::create_dir_all(&l.output).map_err(|e| {
                            format!("cannot create output directory {}: {e}", l.output.display())
                        })?;
                    }
                    *layout = Some(l);
                    Ok(None)
                }
                Command::Connect => {
                    let l = layout.as_ref().ok_or("not configured")?;
                    *running = self.connect(l)?;
                    last_counters.clear();
                    Ok(None)
                }
                Command::Start => {
                    *run_start = Some(Instant::now());
                    *finished = false;
                    if self.role == Role::Supervisor {
                        let l = layout.as_ref().ok_or("not configured")?;
                        *sup_counters = Arc::new(SupervisorCounters::default());
                        let h = supervisor::spawn(
                            l.supervisor.clone(),
                            &self.transport,
                            Arc::clone(sup_counters),
                        )
                        .map_err(|e| e.to_string())?;
                        *running = Running::Supervisor(h);
                    }
                    Ok(None)
                }
                Command::Stop => self.stop(running, expect_cleared),
                Command::Disconnect => {
                    let r = std::mem::replace(running, Running::Nothing);
                    let (s, counters) = self.disconnect(r, sup_counters)?;
                    *last_counters = counters;
                    Ok(s)
                }
                Command::Unconfigure => {
                    *layout = None;
                    Ok(None)
                }
                Command::Initialize | Command::Shutdown => {
                    *running = Running::Nothing;
                    Ok(None)
                }
            };
            summary = out?;
            Ok(())
        })?;
        Ok((state, summary))
    }

    /// Checks that this application is in the layout.
    fn find_in(&self, l: &Layout) -> Result<(), String> {
        let found = match self.role {
            Role::Logger => l.loggers.iter().any(|x| x.name == self.name),
            Role::Ros => l.nodes.iter().any(|(n, ..)| *n == self.name),
            Role::Dcm => l.dcms.iter().any(|d| d.name == self.name),
            Role::Supervisor => self.name == "supervisor",
        };
        if found {
            Ok(())
        } else {
            Err(format!(
                "no {} named {:?} in the configuration",
                self.role, self.name
            ))
        }
    }

    fn connect(&self, l: &Layout) -> Result<Running, String> {
        Ok(match self.role {
            Role::Logger => {
                let lc = l
                    .loggers
                    .iter()
                    .find(|x| x.name == self.name)
                    .ok_or("not in the layout")?;
                let counters = Arc::new(LoggerCounters::default());
                let h = logger::spawn(lc.clone(), &self.transport, Arc::clone(&counters))
                    .map_err(|e| e.to_string())?;
                Running::Logger(h, counters)
            }
            Role::Ros => {
                let (_, ep, nc) = l
                    .nodes
                    .iter()
                    .find(|(n, ..)| *n == self.name)
                    .ok_or("not in the layout")?;
                let node =
                    ReadoutNode::start(&self.transport, nc, ep).map_err(|e| e.to_string())?;
                Running::Ros(Box::new(node))
            }
            Role::Dcm => {
                let dc = l
                    .dcms
                    .iter()
                    .find(|d| d.name == self.name)
                    .ok_or("not in the layout")?;
                let counters = Arc::new(DcmCounters::default());
                let h = dcm::spawn(
                    dc.clone(),
                    &self.transport,
                    Box::new(l.trigger.clone()),
                    Arc::clone(&counters),
                )
                .map_err(|e| e.to_string())?;
                Running::Dcm(h, counters)
            }
            // The supervisor binds when it starts: its L1 source runs from then on.
            Role::Supervisor => Running::Nothing,
        })
    }

    fn stop(&self, running: &mut Running, expect_cleared: Option<u64>) -> Outcome {
        match std::mem::replace(running, Running::Nothing) {
            Running::Supervisor(h) => {
                let s = h.stop().map_err(|e| e.to_string())?;
                Ok(Some(json!({
                    "role": "supervisor", "name": self.name,
                    "l1_accepts": s.l1_accepts, "accepted": s.accepted, "rejected": s.rejected,
                    "forced_accepts": s.forced_accepts, "undecided": s.undecided,
                    "reassignments": s.reassignments, "dead_dcms": s.dead_dcms,
                    "late_decisions": s.late_decisions, "cleared": s.cleared,
                })))
            }
            Running::Ros(node) => {
                // The supervisor's last clears are on their way: wait for them (bounded).
                if let Some(n) = expect_cleared {
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while node.stats().cleared_l1ids < n && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                *running = Running::Ros(node);
                Ok(None)
            }
            other => {
                *running = other;
                Ok(None)
            }
        }
    }

    fn disconnect(
        &self,
        r: Running,
        sup_counters: &Arc<SupervisorCounters>,
    ) -> Result<(Option<serde_json::Value>, BTreeMap<String, u64>), String> {
        let name = &self.name;
        let counters = counters_of(&r, sup_counters);
        let summary = match r {
            Running::Nothing => None,
            Running::Supervisor(h) => {
                h.stop().map_err(|e| e.to_string())?;
                None
            }
            Running::Logger(h, _) => {
                let s = h.stop().map_err(|e| e.to_string())?;
                Some(json!({
                    "role": "logger", "name": name,
                    "events_written": s.events_written, "bytes_written": s.bytes_written,
                    "duplicates": s.duplicates, "bad_messages": s.bad_messages, "files": s.files,
                }))
            }
            Running::Ros(node) => {
                let s = node.stop();
                let k = s.store.total_counters();
                let mut v = json!({
                    "role": "ros", "name": name,
                    "requests": s.counters.requests, "cleared": s.counters.cleared_l1ids,
                    "clear_gaps": s.counters.clear_gaps, "stored": k.fragments,
                    "stored_now": k.stored,
                });
                // The SW ROD input's final counters and its first error (a problem of the run).
                if let serde_json::Value::Object(m) = &mut v {
                    if let Some(sw) = &s.swrod {
                        for (k, n) in swrod_counters(sw) {
                            m.insert(k, n.into());
                        }
                    }
                    if let Some(e) = s.swrod_error {
                        m.insert("swrod_error".into(), e.into());
                    }
                }
                Some(v)
            }
            Running::Dcm(h, _) => {
                let s = h.stop().map_err(|e| e.to_string())?;
                Some(json!({
                    "role": "dcm", "name": name,
                    "assigned": s.assigned, "builds": s.builds, "accepted": s.accepted,
                    "rejected": s.rejected, "forced": s.forced, "partial": s.partial,
                    "unfinished": s.unfinished,
                }))
            }
        };
        Ok((summary, counters))
    }

    /// The heartbeat now: state, counters, and whether the supervisor's run ended by itself.
    /// A dataflow thread that ended on its own with an error puts the application in ERROR.
    pub fn heartbeat(&self) -> Heartbeat {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let ended = match &inner.running {
            Running::Logger(h, _) => h.is_finished(),
            Running::Dcm(h, _) => h.is_finished(),
            _ => false,
        };
        if ended {
            // A logger or DCM thread only ends by itself when it failed.
            let why = match std::mem::replace(&mut inner.running, Running::Nothing) {
                Running::Logger(h, _) => h.join().err().map(|e| e.to_string()),
                Running::Dcm(h, _) => h.join().err().map(|e| e.to_string()),
                _ => None,
            };
            inner.lifecycle.fail(format!(
                "{} thread ended: {}",
                self.role,
                why.unwrap_or_else(|| "without an error".into())
            ));
        }
        if let Running::Supervisor(h) = &inner.running {
            inner.finished = h.is_finished();
        }
        let mut counters = counters_of(&inner.running, &inner.sup_counters);
        if counters.is_empty() {
            counters = inner.last_counters.clone();
        }
        Heartbeat {
            state: inner.lifecycle.state(),
            error: inner.lifecycle.error().map(str::to_string),
            finished: inner.finished,
            counters,
        }
    }
}

/// The live counters of what runs.
fn counters_of(r: &Running, sup: &SupervisorCounters) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: u64| {
        m.insert(k.to_string(), v);
    };
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    match r {
        Running::Nothing => {}
        Running::Supervisor(_) => {
            put("l1_accepts", ld(&sup.l1_accepts));
            put("accepted", ld(&sup.accepted));
            put("rejected", ld(&sup.rejected));
            put("forced_accepts", ld(&sup.forced_accepts));
            put("in_flight", ld(&sup.in_flight));
            put("credits", ld(&sup.credits));
        }
        Running::Logger(_, c) => {
            put("events_written", ld(&c.events_written));
            put("bytes_written", ld(&c.bytes_written));
        }
        Running::Dcm(_, c) => {
            put("events", ld(&c.events));
            put("accepted", ld(&c.accepted));
            put("requests", ld(&c.requests));
            put("bytes_received", ld(&c.bytes_received));
            put("busy_slots", ld(&c.busy_slots));
        }
        Running::Ros(node) => {
            let s = node.stats();
            put("requests", s.requests);
            put("fragments_sent", s.fragments_sent);
            put("bytes_sent", s.bytes_sent);
            put("pending_now", s.pending_now);
            put("cleared_l1ids", s.cleared_l1ids);
            put("input_fragments", s.input_fragments);
            if let Some(sw) = node.swrod_stats() {
                for (k, v) in swrod_counters(&sw) {
                    put(&k, v);
                }
            }
        }
    }
    m
}

/// A SW ROD input's counters as `(name, value)`: the builders' as `swrod_<counter>`, the
/// links' as `swrod_link_<counter>`, and the blocks left unread at the stop.
pub fn swrod_counters(sw: &SwRodInputCounters) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = sw
        .builder
        .fields()
        .iter()
        .map(|(k, v)| (format!("swrod_{k}"), *v))
        .collect();
    out.extend(
        sw.link
            .fields()
            .iter()
            .map(|(k, v)| (format!("swrod_link_{k}"), *v)),
    );
    // The blocks left unread are known only once the node has stopped (`Stopped::swrod`):
    // not a live counter.
    out
}

impl RunControl for AppControl {
    fn status(&self) -> PartitionStatus {
        let hb = self.heartbeat();
        let (run_number, run_seconds) = {
            let inner = self.lock();
            (
                inner.config.as_ref().map_or(0, |c| c.run.number),
                match (inner.run_start, hb.state) {
                    (Some(t), State::Running) => t.elapsed().as_secs_f64(),
                    _ => 0.0,
                },
            )
        };
        let c = |k: &str| hb.counters.get(k).copied().unwrap_or(0);
        PartitionStatus {
            partition: self.name.clone(),
            state: hb.state,
            error: hb.error.clone(),
            run_number,
            run_seconds,
            l1_rate_hz: 0.0,
            event_rate_hz: 0.0,
            write_rate_hz: 0.0,
            l1_accepts: c("l1_accepts"),
            events_written: c("events_written"),
            apps: vec![AppStatus {
                name: self.name.clone(),
                role: self.role.name().into(),
                state: hb.state,
                error: hb.error.clone(),
                host: None,
                pid: Some(std::process::id()),
                heartbeat_age_ms: None,
                rate_hz: 0.0,
            }],
            recent_errors: hb.error.into_iter().collect(),
        }
    }

    fn command(&self, command: Command) -> Result<State, TransitionError> {
        self.handle(command, None, None).map(|(s, _)| s)
    }

    fn config_toml(&self) -> String {
        self.lock()
            .config
            .as_ref()
            .map(PartitionConfig::to_toml_public)
            .unwrap_or_default()
    }

    fn write_metrics(&self, out: &mut MetricsWriter) {
        let hb = self.heartbeat();
        write_app_metrics(
            out,
            &[AppMetrics {
                name: &self.name,
                role: self.role.name(),
                state: hb.state,
                counters: &hb.counters,
            }],
        );
    }
}

/// The counters of the heartbeat that are gauges (levels, not totals).
pub const GAUGE_COUNTERS: [&str; 4] = ["in_flight", "credits", "busy_slots", "pending_now"];

/// What [`write_app_metrics`] writes of one application.
#[derive(Debug, Clone, Copy)]
pub struct AppMetrics<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its role.
    pub role: &'a str,
    /// Its state.
    pub state: State,
    /// Its heartbeat counters.
    pub counters: &'a BTreeMap<String, u64>,
}

/// Writes the applications' states (`rodeo_app_state{app,role,state}`) and heartbeat counters
/// (`rodeo_app_<counter>_total` counters, or `rodeo_app_<gauge>` for [`GAUGE_COUNTERS`]), one
/// family per name with a sample per application that has it.
pub fn write_app_metrics(out: &mut MetricsWriter, apps: &[AppMetrics<'_>]) {
    out.family("rodeo_app_state", "gauge", "1 for each application's state");
    for a in apps {
        for s in State::ALL {
            out.sample(
                "rodeo_app_state",
                &[("app", a.name), ("role", a.role), ("state", s.name())],
                if s == a.state { 1.0 } else { 0.0 },
            );
        }
    }
    let mut names: Vec<&str> = apps
        .iter()
        .flat_map(|a| a.counters.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    for k in names {
        let gauge = GAUGE_COUNTERS.contains(&k);
        let family = if gauge {
            format!("rodeo_app_{k}")
        } else {
            format!("rodeo_app_{k}_total")
        };
        out.family(
            &family,
            if gauge { "gauge" } else { "counter" },
            "application heartbeat counter (docs/run-control.md)",
        );
        for a in apps {
            if let Some(v) = a.counters.get(k) {
                out.sample(&family, &[("app", a.name), ("role", a.role)], *v as f64);
            }
        }
    }
}

/// Why [`serve`] ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The control endpoint is malformed.
    #[error("control endpoint: {0}")]
    Endpoint(#[from] rodeo_transport::endpoint::EndpointError),
    /// The socket could not be set up or used.
    #[error("control channel: {0}")]
    Transport(#[from] TransportError),
}

/// Serves `app` on the control channel at `endpoint` (the controller's ROUTER): says hello,
/// runs the commands it receives, sends a heartbeat every `heartbeat`. Returns after a
/// `shutdown` command, or when `quit()` turns true (then it walks the application down by
/// itself). Returns the number of control frames dropped because they did not decode.
pub fn serve(
    app: &AppControl,
    endpoint: &str,
    heartbeat: Duration,
    quit: impl Fn() -> bool,
) -> Result<u64, ServeError> {
    let ep = Endpoint::parse(endpoint)?;
    let mut sock = app.transport.socket(SocketKind::Dealer)?;
    sock.set_max_message_size(crate::channel::MAX_MESSAGE_BYTES as i64)?;
    sock.set_identity(app.name.as_bytes())?;
    // A controller that is gone must not block us for long.
    sock.set_send_timeout(2000)?;
    sock.connect(&ep)?;
    let hello = ToController::Hello {
        name: app.name.clone(),
        role: app.role.name().into(),
        pid: std::process::id(),
        state: app.state(),
    };
    let send = |sock: &mut rodeo_transport::socket::Socket, m: &ToController| {
        // A failed send (controller gone past the timeout) is retried by the next heartbeat;
        // the controller's absence ends us through `quit`.
        let _ = sock.send([Frame::Copy(&channel::encode(m))]);
    };
    send(&mut sock, &hello);
    let mut msg = Received::default();
    let mut bad = 0u64;
    let mut next_beat = Instant::now();
    loop {
        if quit() {
            // Walk down by ourselves (best effort), then leave.
            let from = app.state();
            for c in Command::path(from, State::None).unwrap_or_else(|| vec![Command::Shutdown]) {
                if app.handle(c, None, None).is_err() {
                    break;
                }
            }
            let hb = app.heartbeat();
            send(&mut sock, &ToController::Heartbeat(hb));
            return Ok(bad);
        }
        let now = Instant::now();
        if now >= next_beat {
            send(&mut sock, &ToController::Heartbeat(app.heartbeat()));
            next_beat = now + heartbeat;
        }
        let wait = next_beat
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(50));
        if !sock.recv(&mut msg, wait.as_millis() as i64)? {
            continue;
        }
        let Ok(ToApp::Command {
            seq,
            command,
            config,
            expect_cleared,
        }) = channel::decode::<ToApp>(&msg.bytes)
        else {
            bad += 1;
            continue;
        };
        let reply = match app.handle(command, config.as_deref(), expect_cleared) {
            Ok((state, summary)) => ToController::Reply {
                seq,
                state,
                error: None,
                summary,
            },
            Err(e) => ToController::Reply {
                seq,
                state: app.state(),
                error: Some(e.to_string()),
                summary: None,
            },
        };
        send(&mut sock, &reply);
        // Tell the controller the new state at once.
        send(&mut sock, &ToController::Heartbeat(app.heartbeat()));
        next_beat = Instant::now() + heartbeat;
        if command == Command::Shutdown && app.state() == State::None {
            return Ok(bad);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_of_names() {
        assert_eq!(Role::of_name("dcm-12"), Some(Role::Dcm));
        assert_eq!(Role::of_name("supervisor"), Some(Role::Supervisor));
        assert_eq!(Role::of_name("logger-x"), None);
        assert_eq!(Role::of_name("nobody-1"), None);
        assert_eq!("ros".parse::<Role>().unwrap(), Role::Ros);
    }

    #[test]
    fn a_logger_that_cannot_make_its_directory_fails_configure_and_refuses_start() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let mut config = PartitionConfig::default();
        config.run.output = file.join("below").display().to_string();
        let t = Transport::new(1).unwrap();
        let app = AppControl::new(Role::Logger, "logger-1", t, Some(config));
        assert_eq!(app.state(), State::Initial);
        let e = app.command(Command::Start).unwrap_err();
        assert!(
            matches!(
                e,
                TransitionError::Illegal {
                    state: State::Initial,
                    ..
                }
            ),
            "{e}"
        );
        let e = app.command(Command::Configure).unwrap_err();
        assert!(
            e.to_string().contains("cannot create output directory"),
            "{e}"
        );
        assert_eq!(app.state(), State::Error);
        let st = app.status();
        assert_eq!(st.apps[0].state, State::Error);
        assert!(st.error.unwrap().contains("cannot create"));
        assert_eq!(app.command(Command::Shutdown).unwrap(), State::None);
    }

    #[test]
    fn a_dcm_goes_up_and_down_with_a_summary_on_disconnect() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = PartitionConfig::default();
        config.run.output = dir.path().display().to_string();
        let t = Transport::new(1).unwrap();
        let app = AppControl::new(Role::Dcm, "dcm-1", t, Some(config));
        for c in [
            Command::Configure,
            Command::Connect,
            Command::Start,
            Command::Stop,
        ] {
            let (_, s) = app.handle(c, None, None).unwrap();
            assert!(s.is_none());
        }
        let (state, s) = app.handle(Command::Disconnect, None, None).unwrap();
        assert_eq!(state, State::Configured);
        assert_eq!(s.unwrap()["assigned"], 0);
        let mut m = MetricsWriter::new();
        app.write_metrics(&mut m);
        assert!(app.config_toml().contains("[dcm]"));
    }
}
