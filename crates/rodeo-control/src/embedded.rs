//! The embedded partition under run control: [`EmbeddedPartition`] holds every application of
//! a configuration as threads in this process and moves them through the lifecycle
//! ([`crate::lifecycle`]) on command, from `rodeo run`'s own driver or from the HTTP API.
//!
//! # Transitions, in dependency order
//!
//! | command | what happens |
//! |---|---|
//! | initialize | the ZeroMQ context; the applications are named (from the [`Layout`]) |
//! | configure | the layout and the run's output directory (the loggers' resource) |
//! | connect | loggers, readout nodes, DCMs started (sockets bound and connected) |
//! | start | the supervisor with its L1 source: data flows; the run clock starts |
//! | stop | the supervisor drains: no new events, every assigned event decided, the last clears sent, then joined |
//! | disconnect | DCMs, loggers (files closed), readout nodes stopped; the balance sheet made |
//! | unconfigure | the layout dropped |
//! | shutdown | the context dropped; from ERROR, every application still there is stopped |
//!
//! Up goes loggers -> readout -> DCMs -> supervisor/L1 so nothing sends to an application that
//! is not there; down is the reverse, so the dataflow drains before anything stops.
//!
//! A transition whose action fails puts the partition and the application that failed in
//! ERROR; the [`TransitionError::Failed`] names that application. An application thread that
//! ends by itself while RUNNING (it failed) is found by [`EmbeddedPartition::check_apps`] and
//! put in ERROR with its error.
//!
//! # State and locking
//!
//! Commands are rare: one mutex (`apps`) serialises them and owns the application handles.
//! What the status, metrics and web page read is separate and never waits for a command: the
//! lifecycle view (a short-held mutex) and the applications' shared atomic counters
//! ([`LiveCounters`]), which the data path updates without locks. A `stop` that drains for
//! seconds therefore does not block `GET /api/status`.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rodeo_dataflow::dcm::{self, DcmCounters, DcmSummary};
use rodeo_dataflow::logger::{self, LoggerCounters, LoggerSummary};
use rodeo_dataflow::supervisor::{self, SupervisorSummary};
use rodeo_dataflow::trace::TraceRecord;
use rodeo_dataflow::trigger::TriggerAlgorithm;
use rodeo_dataflow::AppHandle;
use rodeo_memory::{LogHistogram, PagePool};
use rodeo_ros::node::{ReadoutNode, SwRodMonitor};
use rodeo_ros::server::ServerStats;
use rodeo_transport::socket::Transport;

use crate::config::PartitionConfig;
use crate::control::{AppStatus, PartitionStatus, RunControl};
use crate::lifecycle::{Command, Lifecycle, State, TransitionError};
use crate::partition::{check_balance, Layout, LiveCounters, NodeSummary, RunSummary};
use crate::prometheus::MetricsWriter;

/// Recent errors kept for the status (oldest dropped first).
const RECENT_ERRORS: usize = 20;
/// Trace records kept per application until drained.
const TRACE_CAPACITY: usize = 1 << 16;

/// One application as the controller sees it.
#[derive(Debug)]
struct AppView {
    role: &'static str,
    lifecycle: Lifecycle,
    last_count: u64,
    rate_hz: f64,
}

/// What status and metrics read (short-held lock).
#[derive(Debug)]
struct View {
    lifecycle: Lifecycle,
    apps: Vec<AppView>,
    run_start: Option<Instant>,
    run_seconds: f64,
    recent_errors: VecDeque<String>,
    /// Last rate sample: time, L1 accepts, decided, written; and the rates.
    sample: (Instant, u64, u64, u64),
    rates: (f64, f64, f64),
}

impl View {
    fn error(&mut self, e: String) {
        tracing::error!("{e}");
        if self.recent_errors.len() == RECENT_ERRORS {
            self.recent_errors.pop_front();
        }
        self.recent_errors.push_back(e);
    }

    fn app(&mut self, name: &str) -> Option<&mut AppView> {
        self.apps.iter_mut().find(|a| a.lifecycle.who() == name)
    }
}

/// The live handles of the applications (owned by the command lock).
#[derive(Default)]
struct Apps {
    transport: Option<Transport>,
    layout: Option<Layout>,
    loggers: Vec<AppHandle<LoggerSummary>>,
    nodes: Vec<(String, ReadoutNode)>,
    dcms: Vec<AppHandle<DcmSummary>>,
    supervisor: Option<AppHandle<SupervisorSummary>>,
    sup_summary: Option<SupervisorSummary>,
}

/// Shared monitoring handles of a connected partition.
#[derive(Default)]
struct Monitors {
    live: Arc<LiveCounters>,
    nodes: Vec<(String, Arc<ServerStats>, PagePool)>,
    /// The SW ROD inputs' counters of the nodes that have one (`[ros] input = "swrod"`).
    swrod: Vec<(String, SwRodMonitor)>,
}

/// Makes the trigger algorithm of the DCM named by the argument (one per DCM, on connect).
pub type TriggerFactory = Arc<dyn Fn(&str) -> Box<dyn TriggerAlgorithm> + Send + Sync>;

/// The embedded partition; see the module docs.
pub struct EmbeddedPartition {
    config: PartitionConfig,
    trace_every: Option<u64>,
    trigger: Option<TriggerFactory>,
    apps: Mutex<Apps>,
    view: Mutex<View>,
    monitors: Mutex<Arc<Monitors>>,
    summary: Mutex<Option<RunSummary>>,
    traces: Mutex<Vec<(String, TraceRecord)>>,
    last_failure: Mutex<Option<TransitionError>>,
}

impl std::fmt::Debug for EmbeddedPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedPartition")
            .field("state", &self.state())
            .finish()
    }
}

type Failure = (String, String);

fn fail(who: &str, e: impl std::fmt::Display) -> Failure {
    (who.to_string(), e.to_string())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl EmbeddedPartition {
    /// A partition of `config` in state NONE. `trace_every`: keep the stage time stamps of one
    /// event in that many (`None`: no tracing).
    pub fn new(config: PartitionConfig, trace_every: Option<u64>) -> EmbeddedPartition {
        let layout = Layout::new(&config);
        let mut apps = Vec::new();
        let mut add = |name: &str, role: &'static str| {
            apps.push(AppView {
                role,
                lifecycle: Lifecycle::new(name),
                last_count: 0,
                rate_hz: 0.0,
            })
        };
        for l in &layout.loggers {
            add(&l.name, "logger");
        }
        for (name, ..) in &layout.nodes {
            add(name, "ros");
        }
        for d in &layout.dcms {
            add(&d.name, "dcm");
        }
        add(&layout.supervisor.name, "supervisor");
        EmbeddedPartition {
            trace_every,
            trigger: None,
            apps: Mutex::new(Apps::default()),
            view: Mutex::new(View {
                lifecycle: Lifecycle::new("partition"),
                apps,
                run_start: None,
                run_seconds: 0.0,
                recent_errors: VecDeque::new(),
                sample: (Instant::now(), 0, 0, 0),
                rates: (0.0, 0.0, 0.0),
            }),
            monitors: Mutex::new(Arc::new(Monitors::default())),
            summary: Mutex::new(None),
            traces: Mutex::new(Vec::new()),
            last_failure: Mutex::new(None),
            config,
        }
    }

    /// Uses `factory` for the DCMs' trigger algorithms instead of the configuration's
    /// emulated one (`[trigger]`), e.g. a Python callable (rodeo-pytrigger).
    pub fn with_trigger(mut self, factory: TriggerFactory) -> EmbeddedPartition {
        self.trigger = Some(factory);
        self
    }

    /// The partition's state.
    pub fn state(&self) -> State {
        lock(&self.view).lifecycle.state()
    }

    /// The configuration.
    pub fn config(&self) -> &PartitionConfig {
        &self.config
    }

    /// The live counters of the connected applications (empty before connect).
    pub fn live(&self) -> Arc<LiveCounters> {
        Arc::clone(&lock(&self.monitors).live)
    }

    /// Seconds since start (frozen at stop).
    pub fn run_seconds(&self) -> f64 {
        let v = lock(&self.view);
        v.run_start
            .map_or(v.run_seconds, |t| t.elapsed().as_secs_f64())
    }

    /// Whether the supervisor ended by itself (its event count reached) while RUNNING.
    pub fn supervisor_finished(&self) -> bool {
        match self.apps.try_lock() {
            Ok(a) => a.supervisor.as_ref().is_some_and(|s| s.is_finished()),
            Err(_) => false,
        }
    }

    /// Whether a DCM or logger thread ended by itself (it failed) while the partition runs.
    /// The caller should then stop the run; the failure surfaces in the stop.
    pub fn check_apps(&self) -> bool {
        match self.apps.try_lock() {
            Ok(a) => {
                a.dcms.iter().any(|d| d.is_finished()) || a.loggers.iter().any(|l| l.is_finished())
            }
            Err(_) => false,
        }
    }

    /// The run's summary, once disconnected (taken: a second call returns `None`).
    pub fn take_summary(&self) -> Option<RunSummary> {
        lock(&self.summary).take()
    }

    /// The trace records collected at stop (application name, record), taken.
    pub fn take_traces(&self) -> Vec<(String, TraceRecord)> {
        std::mem::take(&mut *lock(&self.traces))
    }

    fn set_apps(&self, state: State, roles: &[&str]) {
        let mut v = lock(&self.view);
        for a in &mut v.apps {
            if roles.contains(&a.role) && a.lifecycle.state() != State::Error {
                let cmd = Command::path(a.lifecycle.state(), state).and_then(|p| p.last().copied());
                if let Some(c) = cmd {
                    // Legal by construction: each app follows the partition one step behind.
                    let _ = a.lifecycle.apply(c, || Ok::<(), String>(()));
                }
            }
        }
    }

    fn action(&self, apps: &mut Apps, command: Command) -> Result<(), Failure> {
        const ALL: [&str; 4] = ["logger", "ros", "dcm", "supervisor"];
        match command {
            Command::Initialize => {
                let t = Transport::new(self.config.transport.io_threads)
                    .map_err(|e| fail("partition", e))?;
                apps.transport = Some(t);
                self.set_apps(State::Initial, &ALL);
            }
            Command::Configure => {
                let layout = Layout::new(&self.config);
                let first_logger = layout
                    .loggers
                    .first()
                    .map_or("logger", |l| l.name.as_str())
                    .to_string();
                std::fs::create_dir_all(&layout.output).map_err(|e| {
                    fail(
                        &first_logger,
                        format!("output directory {}: {e}", layout.output.display()),
                    )
                })?;
                apps.layout = Some(layout);
                self.set_apps(State::Configured, &ALL);
            }
            Command::Connect => self.connect(apps)?,
            Command::Start => {
                let (Some(t), Some(layout)) = (&apps.transport, &apps.layout) else {
                    return Err(fail("partition", "not configured"));
                };
                let live = self.live();
                let name = layout.supervisor.name.clone();
                let s =
                    supervisor::spawn(layout.supervisor.clone(), t, Arc::clone(&live.supervisor))
                        .map_err(|e| fail(&name, e))?;
                apps.supervisor = Some(s);
                {
                    let mut v = lock(&self.view);
                    v.run_start = Some(Instant::now());
                    v.sample = (Instant::now(), 0, 0, 0);
                }
                self.set_apps(State::Running, &ALL);
                tracing::info!(run = self.config.run.number, "run started");
            }
            Command::Stop => {
                if let Some(s) = apps.supervisor.take() {
                    let r = s.stop();
                    {
                        let mut v = lock(&self.view);
                        if let Some(t) = v.run_start.take() {
                            v.run_seconds = t.elapsed().as_secs_f64();
                        }
                    }
                    apps.sup_summary = Some(r.map_err(|e| fail("supervisor", e))?);
                }
                // An application that ended during the run failed: say which.
                if let Some(i) = apps.dcms.iter().position(|d| d.is_finished()) {
                    let d = apps.dcms.swap_remove(i);
                    let name = d.name().to_string();
                    d.join().map_err(|e| fail(&name, e))?;
                }
                if let Some(i) = apps.loggers.iter().position(|d| d.is_finished()) {
                    let l = apps.loggers.swap_remove(i);
                    let name = l.name().to_string();
                    l.join().map_err(|e| fail(&name, e))?;
                }
                self.collect_traces();
                self.set_apps(State::Connected, &ALL);
                tracing::info!(run = self.config.run.number, "run stopped");
            }
            Command::Disconnect => self.disconnect(apps)?,
            Command::Unconfigure => {
                apps.layout = None;
                self.set_apps(State::Initial, &ALL);
            }
            Command::Shutdown => {
                // From ERROR: stop whatever is still there (drops stop the threads).
                if let Some(s) = apps.supervisor.take() {
                    let _ = s.stop();
                }
                for d in apps.dcms.drain(..) {
                    let _ = d.stop();
                }
                for l in apps.loggers.drain(..) {
                    let _ = l.stop();
                }
                for (_, n) in apps.nodes.drain(..) {
                    let _ = n.stop();
                }
                apps.layout = None;
                apps.transport = None;
                let mut v = lock(&self.view);
                for a in &mut v.apps {
                    a.lifecycle = Lifecycle::new(a.lifecycle.who());
                }
            }
        }
        Ok(())
    }

    fn connect(&self, apps: &mut Apps) -> Result<(), Failure> {
        let (Some(t), Some(layout)) = (&apps.transport, &apps.layout) else {
            return Err(fail("partition", "not configured"));
        };
        let mut live = LiveCounters::default();
        let mut mon_nodes = Vec::new();
        let mut mon_swrod = Vec::new();
        let enable = |t: &rodeo_dataflow::trace::TraceLog| {
            if let Some(every) = self.trace_every {
                t.enable(every, TRACE_CAPACITY);
            }
        };
        enable(&live.supervisor.trace);
        for lc in &layout.loggers {
            let counters = Arc::new(LoggerCounters::default());
            live.loggers.push(Arc::clone(&counters));
            apps.loggers
                .push(logger::spawn(lc.clone(), t, counters).map_err(|e| fail(&lc.name, e))?);
        }
        self.set_apps(State::Connected, &["logger"]);
        for (name, ep, nc) in &layout.nodes {
            let node = ReadoutNode::start(t, nc, ep).map_err(|e| fail(name, e))?;
            mon_nodes.push((name.clone(), node.shared_stats(), node.page_pool()));
            if let Some(m) = node.swrod_monitor() {
                mon_swrod.push((name.clone(), m));
            }
            apps.nodes.push((name.clone(), node));
        }
        self.set_apps(State::Connected, &["ros"]);
        for dc in &layout.dcms {
            let counters = Arc::new(DcmCounters::default());
            enable(&counters.trace);
            live.dcms.push(Arc::clone(&counters));
            let algorithm: Box<dyn TriggerAlgorithm> = match &self.trigger {
                Some(make) => make(&dc.name),
                None => Box::new(layout.trigger.clone()),
            };
            apps.dcms.push(
                dcm::spawn(dc.clone(), t, algorithm, counters).map_err(|e| fail(&dc.name, e))?,
            );
        }
        *lock(&self.monitors) = Arc::new(Monitors {
            live: Arc::new(live),
            nodes: mon_nodes,
            swrod: mon_swrod,
        });
        self.set_apps(State::Connected, &["dcm", "supervisor"]);
        Ok(())
    }

    fn disconnect(&self, apps: &mut Apps) -> Result<(), Failure> {
        let sup = apps.sup_summary.take().unwrap_or_default();
        let seconds = lock(&self.view).run_seconds;
        let output = apps
            .layout
            .as_ref()
            .map(|l| l.output.clone())
            .unwrap_or_default();
        let mut summary = RunSummary {
            run: self.config.run.number,
            l1_accepts: sup.l1_accepts,
            accepted: sup.accepted,
            rejected: sup.rejected,
            forced_accepts: sup.forced_accepts,
            seconds,
            l1_rate_hz: sup.l1_accepts as f64 / seconds.max(1e-9),
            output,
            ..RunSummary::default()
        };
        for d in apps.dcms.drain(..) {
            let name = d.name().to_string();
            let s = d.stop().map_err(|e| fail(&name, e))?;
            summary.partial_events += s.partial;
        }
        self.set_apps(State::Configured, &["dcm", "supervisor"]);
        for l in apps.loggers.drain(..) {
            let name = l.name().to_string();
            let s = l.stop().map_err(|e| fail(&name, e))?;
            summary.events_written += s.events_written;
            summary.duplicates += s.duplicates;
            summary.bytes_written += s.bytes_written;
            summary.files.extend(s.files);
        }
        self.set_apps(State::Configured, &["logger"]);
        // The last clears are on their way: give each node a moment to read them.
        let deadline = Instant::now() + Duration::from_secs(2);
        for (_, node) in &apps.nodes {
            while node.stats().cleared_l1ids < summary.l1_accepts && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        for (name, node) in apps.nodes.drain(..) {
            let s = node.stop();
            let k = s.store.total_counters();
            summary.nodes.push(NodeSummary {
                name,
                requests: s.counters.requests,
                cleared: s.counters.cleared_l1ids,
                clear_gaps: s.counters.clear_gaps,
                stored: k.fragments,
                stored_now: k.stored,
                swrod_built: s.swrod.map_or(0, |c| c.builder.fragments),
                swrod_error: s.swrod_error,
            });
        }
        self.set_apps(State::Configured, &["ros"]);
        check_balance(&mut summary, sup.undecided);
        {
            let mut v = lock(&self.view);
            for p in &summary.problems {
                v.error(format!("balance: {p}"));
            }
        }
        *lock(&self.summary) = Some(summary);
        Ok(())
    }

    fn collect_traces(&self) {
        if self.trace_every.is_none() {
            return;
        }
        let live = self.live();
        let mut out = lock(&self.traces);
        let mut buf = Vec::new();
        live.supervisor.trace.drain(&mut buf);
        out.extend(buf.drain(..).map(|r| ("supervisor".to_string(), r)));
        for (i, d) in live.dcms.iter().enumerate() {
            d.trace.drain(&mut buf);
            let name = format!("dcm-{}", i + 1);
            out.extend(buf.drain(..).map(|r| (name.clone(), r)));
        }
    }

    /// Brings the partition up to RUNNING, runs until the supervisor's event count, the
    /// configured seconds, an application failure or a `stop` from elsewhere (HTTP), then down
    /// to NONE; returns the balance sheet. `tick` is called about every 200 ms.
    pub fn run(
        &self,
        mut tick: impl FnMut(&LiveCounters, f64),
    ) -> Result<RunSummary, TransitionError> {
        for c in [
            Command::Initialize,
            Command::Configure,
            Command::Connect,
            Command::Start,
        ] {
            if let Err(e) = self.command(c) {
                let _ = self.command(Command::Shutdown);
                return Err(e);
            }
        }
        let limit = (self.config.run.seconds > 0.0)
            .then(|| Duration::from_secs_f64(self.config.run.seconds));
        while self.state() == State::Running {
            std::thread::sleep(Duration::from_millis(200));
            let seconds = self.run_seconds();
            tick(&self.live(), seconds);
            if limit.is_some_and(|l| seconds >= l.as_secs_f64())
                || self.supervisor_finished()
                || self.check_apps()
            {
                break;
            }
        }
        // Down, whoever drives: a stop from HTTP may be under way (it holds the command lock)
        // or done, so each step starts from the state found then.
        loop {
            let state = self.state();
            let next = match state {
                State::None => break,
                State::Error => {
                    let e = lock(&self.last_failure).clone();
                    let _ = self.command(Command::Shutdown);
                    return Err(e.unwrap_or_else(|| TransitionError::Failed {
                        who: "partition".into(),
                        command: Command::Stop,
                        from: State::Error,
                        reason: "the partition is in ERROR".into(),
                    }));
                }
                s => Command::path(s, State::None)
                    .and_then(|p| p.first().copied())
                    .unwrap_or(Command::Shutdown),
            };
            match self.command(next) {
                Ok(_) | Err(TransitionError::Illegal { .. }) => {}
                Err(e) => {
                    let _ = self.command(Command::Shutdown);
                    return Err(e);
                }
            }
        }
        tick(&self.live(), self.run_seconds());
        self.take_summary().ok_or_else(|| TransitionError::Failed {
            who: "partition".into(),
            command: Command::Disconnect,
            from: State::Connected,
            reason: "no balance sheet: the run was not disconnected".into(),
        })
    }
}

impl RunControl for EmbeddedPartition {
    fn status(&self) -> PartitionStatus {
        let mon = Arc::clone(&lock(&self.monitors));
        let live = &mon.live;
        let l1 = live.supervisor.l1_accepts.load(Ordering::Relaxed);
        let sup = &live.supervisor;
        let decided = sup.accepted.load(Ordering::Relaxed)
            + sup.rejected.load(Ordering::Relaxed)
            + sup.forced_accepts.load(Ordering::Relaxed);
        let written = live.events_written();
        // Per-application counts, in the view's order (loggers, ros, dcms, supervisor).
        let mut counts = Vec::new();
        counts.extend(
            live.loggers
                .iter()
                .map(|l| l.events_written.load(Ordering::Relaxed)),
        );
        counts.extend(
            mon.nodes
                .iter()
                .map(|(_, s, _)| s.requests.load(Ordering::Relaxed)),
        );
        counts.extend(live.dcms.iter().map(|d| d.events.load(Ordering::Relaxed)));
        counts.push(l1);
        let mut v = lock(&self.view);
        let now = Instant::now();
        let dt = now.duration_since(v.sample.0).as_secs_f64();
        let running = v.lifecycle.state() == State::Running;
        if dt >= 0.5 || !running {
            let rate = |new: u64, old: u64| {
                if running && dt > 0.0 {
                    new.saturating_sub(old) as f64 / dt
                } else {
                    0.0
                }
            };
            v.rates = (
                rate(l1, v.sample.1),
                rate(decided, v.sample.2),
                rate(written, v.sample.3),
            );
            v.sample = (now, l1, decided, written);
            let have = counts.len() == v.apps.len();
            for (i, a) in v.apps.iter_mut().enumerate() {
                let c = if have { counts[i] } else { 0 };
                a.rate_hz = rate(c, a.last_count);
                a.last_count = c;
            }
        }
        let run_seconds = v
            .run_start
            .map_or(v.run_seconds, |t| t.elapsed().as_secs_f64());
        PartitionStatus {
            partition: "embedded".into(),
            state: v.lifecycle.state(),
            error: v.lifecycle.error().map(str::to_string),
            run_number: if v.lifecycle.state() == State::None && l1 == 0 {
                0
            } else {
                self.config.run.number
            },
            run_seconds,
            l1_rate_hz: v.rates.0,
            event_rate_hz: v.rates.1,
            write_rate_hz: v.rates.2,
            l1_accepts: l1,
            events_written: written,
            apps: v
                .apps
                .iter()
                .map(|a| AppStatus {
                    name: a.lifecycle.who().to_string(),
                    role: a.role.to_string(),
                    state: a.lifecycle.state(),
                    error: a.lifecycle.error().map(str::to_string),
                    host: None,
                    pid: None,
                    heartbeat_age_ms: None,
                    rate_hz: a.rate_hz,
                })
                .collect(),
            recent_errors: v.recent_errors.iter().cloned().collect(),
        }
    }

    fn command(&self, command: Command) -> Result<State, TransitionError> {
        let mut apps = lock(&self.apps);
        let from = {
            let v = lock(&self.view);
            v.lifecycle.check(command)?;
            v.lifecycle.state()
        };
        tracing::info!(
            command = command.name(),
            from = from.name(),
            "partition command"
        );
        match self.action(&mut apps, command) {
            Ok(()) => {
                let mut v = lock(&self.view);
                let r = v.lifecycle.apply(command, || Ok::<(), String>(()));
                if command == Command::Shutdown {
                    v.recent_errors.clear();
                }
                r
            }
            Err((who, reason)) => {
                let e = TransitionError::Failed {
                    who: who.clone(),
                    command,
                    from,
                    reason: reason.clone(),
                };
                let mut v = lock(&self.view);
                v.lifecycle.fail(format!("{who}: {reason}"));
                if let Some(a) = v.app(&who) {
                    a.lifecycle.fail(reason);
                }
                v.error(e.to_string());
                *lock(&self.last_failure) = Some(e.clone());
                Err(e)
            }
        }
    }

    fn config_toml(&self) -> String {
        self.config.to_toml_public()
    }

    fn write_metrics(&self, w: &mut MetricsWriter) {
        let mon = Arc::clone(&lock(&self.monitors));
        let live = &mon.live;
        let status = self.status();
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);

        w.family(
            "rodeo_partition_state",
            "gauge",
            "1 for the partition's lifecycle state, 0 for the others.",
        );
        for s in State::ALL {
            let v = if s == status.state { 1.0 } else { 0.0 };
            w.sample("rodeo_partition_state", &[("state", s.name())], v);
        }
        w.family(
            "rodeo_app_state",
            "gauge",
            "1 for each application's lifecycle state.",
        );
        for a in &status.apps {
            w.sample(
                "rodeo_app_state",
                &[
                    ("app", &a.name),
                    ("role", &a.role),
                    ("state", a.state.name()),
                ],
                1.0,
            );
        }
        w.gauge(
            "rodeo_run_number",
            "The run number.",
            &[(&[], f64::from(status.run_number))],
        );
        w.gauge(
            "rodeo_run_seconds",
            "Seconds since the run started.",
            &[(&[], status.run_seconds)],
        );

        let sup = &live.supervisor;
        let app = [("app", "supervisor")];
        w.counter(
            "rodeo_l1_accepts_total",
            "L1 accepts produced by the L1 source.",
            &[(&app, ld(&sup.l1_accepts))],
        );
        w.counter(
            "rodeo_events_decided_total",
            "Events decided, by verdict.",
            &[
                (
                    &[("app", "supervisor"), ("verdict", "accept")],
                    ld(&sup.accepted),
                ),
                (
                    &[("app", "supervisor"), ("verdict", "reject")],
                    ld(&sup.rejected),
                ),
                (
                    &[("app", "supervisor"), ("verdict", "forced_accept")],
                    ld(&sup.forced_accepts),
                ),
            ],
        );
        w.gauge(
            "rodeo_supervisor_events_in_flight",
            "Events assigned and not yet decided.",
            &[(&app, ld(&sup.in_flight) as f64)],
        );
        w.gauge(
            "rodeo_supervisor_credits",
            "Free DCM slots known to the supervisor (credits).",
            &[(&app, ld(&sup.credits) as f64)],
        );
        write_histogram(
            w,
            "rodeo_decision_latency_seconds",
            "Assignment to decision, at the supervisor.",
            &[("supervisor", &sup.decision_latency)],
        );

        let names: Vec<String> = (1..=live.dcms.len()).map(|i| format!("dcm-{i}")).collect();
        let per_dcm = |f: &dyn Fn(&DcmCounters) -> u64| -> Vec<(Vec<(&str, &str)>, u64)> {
            live.dcms
                .iter()
                .zip(&names)
                .map(|(d, n)| (vec![("app", n.as_str())], f(d)))
                .collect()
        };
        let counter =
            |w: &mut MetricsWriter, name: &str, help: &str, v: Vec<(Vec<(&str, &str)>, u64)>| {
                let s: Vec<(&[(&str, &str)], u64)> =
                    v.iter().map(|(l, x)| (l.as_slice(), *x)).collect();
                w.counter(name, help, &s);
            };
        let gauge =
            |w: &mut MetricsWriter, name: &str, help: &str, v: Vec<(Vec<(&str, &str)>, u64)>| {
                let s: Vec<(&[(&str, &str)], f64)> =
                    v.iter().map(|(l, x)| (l.as_slice(), *x as f64)).collect();
                w.gauge(name, help, &s);
            };
        counter(
            w,
            "rodeo_dcm_events_total",
            "Events finished by the DCM.",
            per_dcm(&|d| ld(&d.events)),
        );
        counter(
            w,
            "rodeo_dcm_accepted_total",
            "Events accepted (and logged) by the DCM.",
            per_dcm(&|d| ld(&d.accepted)),
        );
        counter(
            w,
            "rodeo_dcm_requests_total",
            "Data requests sent to readout nodes.",
            per_dcm(&|d| ld(&d.requests)),
        );
        counter(
            w,
            "rodeo_dcm_received_bytes_total",
            "Bytes of ROB fragments received.",
            per_dcm(&|d| ld(&d.bytes_received)),
        );
        gauge(
            w,
            "rodeo_dcm_busy_slots",
            "Processing slots busy (events in the DCM).",
            per_dcm(&|d| ld(&d.busy_slots)),
        );
        w.gauge(
            "rodeo_dcm_slots",
            "Processing slots configured per DCM.",
            &[(&[], self.config.dcm.slots as f64)],
        );
        gauge(
            w,
            "rodeo_dcm_outstanding_requests",
            "Data requests in flight (pending answers).",
            per_dcm(&|d| ld(&d.outstanding_requests)),
        );
        gauge(
            w,
            "rodeo_dcm_queued_requests",
            "Data requests queued behind the per-node limit of requests in flight (queue depth).",
            per_dcm(&|d| ld(&d.queued_requests)),
        );
        let hist: Vec<(&str, &LogHistogram)> = live
            .dcms
            .iter()
            .zip(&names)
            .map(|(d, n)| (n.as_str(), &d.request_latency))
            .collect();
        write_histogram(
            w,
            "rodeo_dcm_request_latency_seconds",
            "Data request sent to its answer read, per request.",
            &hist,
        );
        let hist: Vec<(&str, &LogHistogram)> = live
            .dcms
            .iter()
            .zip(&names)
            .map(|(d, n)| (n.as_str(), &d.decision_latency))
            .collect();
        write_histogram(
            w,
            "rodeo_dcm_decision_latency_seconds",
            "Assignment read to the trigger's verdict, in the DCM.",
            &hist,
        );
        let hist: Vec<(&str, &LogHistogram)> = live
            .dcms
            .iter()
            .zip(&names)
            .map(|(d, n)| (n.as_str(), &d.build_latency))
            .collect();
        write_histogram(
            w,
            "rodeo_event_build_latency_seconds",
            "Assignment read to the event done (logged if accepted), in the DCM.",
            &hist,
        );

        let lnames: Vec<String> = (1..=live.loggers.len())
            .map(|i| format!("logger-{i}"))
            .collect();
        let per_logger = |f: &dyn Fn(&LoggerCounters) -> u64| -> Vec<(Vec<(&str, &str)>, u64)> {
            live.loggers
                .iter()
                .zip(&lnames)
                .map(|(d, n)| (vec![("app", n.as_str())], f(d)))
                .collect()
        };
        counter(
            w,
            "rodeo_logger_events_written_total",
            "Events written to files.",
            per_logger(&|l| ld(&l.events_written)),
        );
        counter(
            w,
            "rodeo_file_bytes_written_total",
            "Bytes of event records written to files.",
            per_logger(&|l| ld(&l.bytes_written)),
        );

        let per_node = |f: &dyn Fn(&ServerStats) -> u64| -> Vec<(Vec<(&str, &str)>, u64)> {
            mon.nodes
                .iter()
                .map(|(n, s, _)| (vec![("app", n.as_str())], f(s)))
                .collect()
        };
        counter(
            w,
            "rodeo_ros_requests_total",
            "Data requests served by the readout node.",
            per_node(&|s| ld(&s.requests)),
        );
        counter(
            w,
            "rodeo_ros_fragments_sent_total",
            "ROB fragments sent.",
            per_node(&|s| ld(&s.fragments_sent)),
        );
        counter(
            w,
            "rodeo_ros_sent_bytes_total",
            "Payload bytes of replies.",
            per_node(&|s| ld(&s.bytes_sent)),
        );
        counter(
            w,
            "rodeo_ros_cleared_total",
            "L1IDs cleared.",
            per_node(&|s| ld(&s.cleared_l1ids)),
        );
        gauge(
            w,
            "rodeo_ros_pending_requests",
            "Requests waiting for fragments now.",
            per_node(&|s| ld(&s.pending_now)),
        );
        let occ: Vec<(Vec<(&str, &str)>, f64)> = mon
            .nodes
            .iter()
            .map(|(n, _, pool)| {
                let st = pool.stats();
                let frac = if st.capacity_chunks > 0 {
                    st.in_use as f64 / st.capacity_chunks as f64
                } else {
                    0.0
                };
                (vec![("app", n.as_str())], frac)
            })
            .collect();
        let s: Vec<(&[(&str, &str)], f64)> = occ.iter().map(|(l, x)| (l.as_slice(), *x)).collect();
        w.gauge(
            "rodeo_ros_buffer_occupancy_ratio",
            "Fraction of the readout node's page pool in use.",
            &s,
        );

        // The SW ROD inputs: the builders' counters (`rodeo_ros_swrod_<counter>_total`) and
        // their links' (`rodeo_ros_swrod_link_<counter>_total`), summed over each node's ROBs.
        let sw: Vec<(&str, rodeo_ros::server::SwRodInputCounters)> = mon
            .swrod
            .iter()
            .map(|(n, m)| (n.as_str(), m.counters()))
            .collect();
        if let Some((_, first)) = sw.first() {
            for (i, (field, _)) in first.builder.fields().iter().enumerate() {
                counter(
                    w,
                    &format!("rodeo_ros_swrod_{field}_total"),
                    &format!("SW ROD fragment builders' {field}, summed over the node's ROBs."),
                    sw.iter()
                        .map(|(n, c)| (vec![("app", *n)], c.builder.fields()[i].1))
                        .collect(),
                );
            }
            for (i, (field, _)) in first.link.fields().iter().enumerate() {
                counter(
                    w,
                    &format!("rodeo_ros_swrod_link_{field}_total"),
                    &format!(
                        "SW ROD builder-to-store links' {field}, summed over the node's ROBs."
                    ),
                    sw.iter()
                        .map(|(n, c)| (vec![("app", *n)], c.link.fields()[i].1))
                        .collect(),
                );
            }
        }

        // Errors by kind, every application in one family.
        let mut errs: Vec<(Vec<(&str, &str)>, u64)> = Vec::new();
        for (n, s, _) in &mon.nodes {
            for (kind, v) in [
                ("lost_fragment", ld(&s.lost_fragments)),
                ("pending_fragment", ld(&s.pending_fragments)),
                ("request_timeout", ld(&s.timeouts)),
                ("clear_gap", ld(&s.clear_gaps)),
            ] {
                errs.push((vec![("app", n.as_str()), ("kind", kind)], v));
            }
        }
        for (d, n) in live.dcms.iter().zip(&names) {
            for (kind, v) in [
                ("bad_message", ld(&d.bad_messages)),
                ("stale_reply", ld(&d.stale_replies)),
                ("send_failure", ld(&d.send_failures)),
            ] {
                errs.push((vec![("app", n.as_str()), ("kind", kind)], v));
            }
        }
        counter(
            w,
            "rodeo_errors_total",
            "Errors and discarded messages, by application and kind.",
            errs,
        );
    }
}

fn write_histogram(w: &mut MetricsWriter, name: &str, help: &str, hists: &[(&str, &LogHistogram)]) {
    w.family(name, "histogram", help);
    let bounds = LogHistogram::bounds_seconds();
    for (app, h) in hists {
        let s = h.snapshot();
        w.histogram(
            name,
            &[("app", app)],
            &bounds,
            &s.counts,
            s.sum_ns as f64 * 1e-9,
        );
    }
}
