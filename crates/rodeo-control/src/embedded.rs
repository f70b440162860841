//! The embedded partition under run control: [`EmbeddedPartition`] holds every application of
//! a configuration as an [`AppDriver`] in this process (threads, inproc endpoints unless the
//! configuration says otherwise) and moves them through the lifecycle ([`crate::lifecycle`]) on
//! command, from [`crate::run_control::run_to_end`] or from the HTTP API.
//!
//! # Transitions, in dependency order
//!
//! The applications are ordered loggers, readout nodes, DCMs, supervisor ([`Layout::app_order`]).
//! An upward command (initialize, configure, connect, start) goes through them in that order, a
//! downward one (stop, disconnect, unconfigure, shutdown) in the reverse order, so nothing sends
//! to an application that is not there yet and the dataflow drains before anything stops: the
//! supervisor's `stop` drains every assigned event and sends the last clears, then the readout
//! nodes wait for those clears, then `disconnect` stops the DCMs, the readout nodes and the
//! loggers (closing their files) and the balance sheet is made from their summaries
//! ([`RunSummary::assemble`]). What each application does in each transition is in
//! [`crate::application`].
//!
//! A transition whose action fails puts the partition and the application that failed in
//! ERROR; the [`TransitionError::Failed`] names that application, and the remaining
//! applications are not sent the command. An application thread that ends by itself while
//! RUNNING (it failed) is found by [`crate::run_control::Partition::run_ended`] and put in ERROR
//! with its error, and with it the partition.
//!
//! # State and locking
//!
//! Commands are rare: one mutex (`apps`) serialises them and owns the drivers. What the
//! status, metrics and web page read is separate and never waits for a command: the lifecycle
//! view (a short-held mutex) and the applications' probes (lock-free readers of the atomic
//! counters the data path updates). A `stop` that drains for seconds therefore does not block
//! `GET /api/status`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use rodeo_dataflow::trace::TraceRecord;
use rodeo_transport::socket::Transport;

use crate::application::{self, AppContext, Probe, Role, RunEnd, TriggerFactory};
use crate::config::PartitionConfig;
use crate::driver::{AppDriver, CommandInput};
use crate::lifecycle::{Command, Lifecycle, State, TransitionError};
use crate::metrics::AppMetrics;
use crate::partition::{partition_cpu_plan, Layout};
use crate::partition_metrics::{write_partition_metrics, PartitionExtras};
use crate::prometheus::MetricsWriter;
use crate::rates::Rates;
use crate::run_control::{AppStatus, Partition, PartitionStatus, RunControl};
use crate::summary::{AppSummary, RunSummary};

/// Recent errors kept for the status (oldest dropped first).
const RECENT_ERRORS: usize = 20;

/// One application as status and metrics see it (short-held lock).
#[derive(Debug)]
struct AppView {
    role: Role,
    lifecycle: Lifecycle,
}

/// What status and metrics read (short-held lock).
#[derive(Debug)]
struct View {
    lifecycle: Lifecycle,
    apps: Vec<AppView>,
    run_start: Option<Instant>,
    run_seconds: f64,
    recent_errors: VecDeque<String>,
    rates: Rates,
}

impl View {
    fn error(&mut self, e: String) {
        tracing::error!("{e}");
        if self.recent_errors.len() == RECENT_ERRORS {
            self.recent_errors.pop_front();
        }
        self.recent_errors.push_back(e);
    }
}

/// Each application's name and counter reader.
type Probes = Arc<Vec<(String, Option<Probe>)>>;

/// The drivers and what a run collects (owned by the command lock).
struct Apps {
    transport: Option<Transport>,
    layout: Option<Layout>,
    drivers: Vec<AppDriver>,
    summaries: Vec<(String, AppSummary)>,
}

/// The embedded partition; see the module docs.
pub struct EmbeddedPartition {
    config: PartitionConfig,
    trace_every: Option<u64>,
    trigger: Option<TriggerFactory>,
    apps: Mutex<Apps>,
    view: Mutex<View>,
    /// Each application's name and counter reader, in the view's order (after connect).
    probes: Mutex<Probes>,
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl EmbeddedPartition {
    /// A partition of `config` in state NONE. `trace_every`: keep the stage time stamps of one
    /// event in that many (`None`: no tracing).
    pub fn new(config: PartitionConfig, trace_every: Option<u64>) -> EmbeddedPartition {
        let layout = Layout::new(&config);
        let apps = layout
            .app_order()
            .into_iter()
            .map(|(name, role)| AppView {
                role,
                lifecycle: Lifecycle::new(name),
            })
            .collect();
        EmbeddedPartition {
            trace_every,
            trigger: None,
            apps: Mutex::new(Apps {
                transport: None,
                layout: None,
                drivers: Vec::new(),
                summaries: Vec::new(),
            }),
            view: Mutex::new(View {
                lifecycle: Lifecycle::new("partition"),
                apps,
                run_start: None,
                run_seconds: 0.0,
                recent_errors: VecDeque::new(),
                rates: Rates::default(),
            }),
            probes: Mutex::new(Arc::new(Vec::new())),
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

    /// Seconds since start (frozen at stop).
    pub fn run_seconds(&self) -> f64 {
        let v = lock(&self.view);
        v.run_start
            .map_or(v.run_seconds, |t| t.elapsed().as_secs_f64())
    }

    /// The run's summary, once disconnected (taken: a second call returns `None`).
    pub fn take_summary(&self) -> Option<RunSummary> {
        lock(&self.summary).take()
    }

    /// The trace records collected at stop (application name, record), taken.
    pub fn take_traces(&self) -> Vec<(String, TraceRecord)> {
        std::mem::take(&mut *lock(&self.traces))
    }

    /// Brings the partition up to RUNNING, runs it to its end (see
    /// [`crate::run_control::run_to_end`]) and down to NONE; returns the balance sheet. `tick` is
    /// called about every 200 ms with the L1 accepts so far and the seconds since start.
    pub fn run(&self, tick: impl FnMut(u64, f64)) -> Result<RunSummary, TransitionError> {
        crate::run_control::run_to_end(self, &|| false, tick)
    }

    /// Bytes the loggers have written in this run so far (event records).
    pub fn bytes_written(&self) -> u64 {
        self.app_metrics()
            .iter()
            .filter_map(|(_, m)| match m {
                Some(AppMetrics::Logger(l)) => Some(l.bytes_written),
                _ => None,
            })
            .sum()
    }

    /// Every application's counters now (name, counters), in the view's order.
    fn app_metrics(&self) -> Vec<(String, Option<AppMetrics>)> {
        let probes = Arc::clone(&lock(&self.probes));
        probes
            .iter()
            .map(|(n, p)| (n.clone(), p.as_ref().map(|p| p())))
            .collect()
    }

    /// Copies the drivers' states into the view, and their probes into the monitors.
    fn publish(&self, apps: &Apps) {
        let mut v = lock(&self.view);
        for (view, d) in v.apps.iter_mut().zip(&apps.drivers) {
            view.lifecycle = d.lifecycle().clone();
        }
        drop(v);
        if !apps.drivers.is_empty() {
            let probes: Vec<(String, Option<Probe>)> = apps
                .drivers
                .iter()
                .map(|d| (d.name().to_string(), d.probe()))
                .collect();
            *lock(&self.probes) = Arc::new(probes);
        }
    }

    /// Runs `command` through every driver in dependency order; the first failure names its
    /// application.
    fn step(&self, apps: &mut Apps, command: Command) -> Result<(), (String, String)> {
        let n = apps.drivers.len();
        let order: Vec<usize> = if command.is_downward() {
            (0..n).rev().collect()
        } else {
            (0..n).collect()
        };
        let mut run = RunEnd {
            abandon_drain: command == Command::Stop
                && apps.drivers.iter().any(|d| d.halted().is_some()),
            ..RunEnd::default()
        };
        for i in order {
            let Apps {
                layout,
                drivers,
                summaries,
                ..
            } = &mut *apps;
            let input = CommandInput {
                layout: layout.as_ref(),
                run,
            };
            let d = &mut drivers[i];
            let name = d.name().to_string();
            let r = d.command(command, input);
            match r {
                Ok((_, Some(s))) => {
                    if let AppSummary::Supervisor(sup) = &s {
                        // Undecided events (a drain given up) are never cleared.
                        run.l1_accepts = Some(sup.l1_accepts.saturating_sub(sup.undecided));
                    }
                    summaries.push((name, s));
                }
                Ok((_, None)) => {}
                Err(e) => {
                    self.publish(apps);
                    return Err((name, failure_reason(&e)));
                }
            }
            self.publish(apps);
        }
        Ok(())
    }

    fn action(&self, apps: &mut Apps, command: Command) -> Result<(), (String, String)> {
        // `run.cpu_plan`: the threads the applications start in this step (the transport's at
        // Initialize, theirs at Configure, Connect, Start) run on the plan's shared CPUs; a
        // readout node's core thread pins itself to its own. This thread gets its set back.
        let _placed = match command {
            Command::Initialize | Command::Configure | Command::Connect | Command::Start => {
                partition_cpu_plan(&self.config)
                    .and_then(|(_, shared)| rodeo_memory::cpu::narrow_thread(&shared))
            }
            _ => None,
        };
        match command {
            Command::Initialize => {
                // With CURVE (`transport.curve`) this partition's keys are made here: every
                // tcp socket of its applications authenticates with them (and, with an
                // encrypted stream, every stream connection is TLS with its own CA).
                let io_threads = self.config.transport.io_threads;
                let t = match self.config.transport.partition_keys() {
                    Ok(Some(k)) => Transport::with_curve(io_threads, k),
                    Ok(None) => Transport::new(io_threads),
                    Err(e) => Err(e),
                }
                .map_err(|e| ("partition".to_string(), e.to_string()))?;
                let ctx = AppContext {
                    transport: t.clone(),
                    trace_every: self.trace_every,
                    trigger: self.trigger.clone(),
                    readout: Default::default(),
                };
                let layout = Layout::new(&self.config);
                apps.drivers = layout
                    .app_order()
                    .into_iter()
                    .map(|(name, role)| AppDriver::new(application::build(role, &name, &ctx)))
                    .collect();
                apps.transport = Some(t);
                self.step(apps, command)?;
            }
            Command::Configure => {
                apps.layout = Some(Layout::new(&self.config));
                self.step(apps, command)?;
            }
            Command::Connect => {
                apps.summaries.clear();
                self.step(apps, command)?;
            }
            Command::Start => {
                {
                    let mut v = lock(&self.view);
                    v.run_start = Some(Instant::now());
                    v.rates = Rates::default();
                }
                self.step(apps, command)?;
                tracing::info!(run = self.config.run.number, "run started");
            }
            Command::Stop => {
                let r = self.step(apps, command);
                {
                    let mut v = lock(&self.view);
                    if let Some(t) = v.run_start.take() {
                        v.run_seconds = t.elapsed().as_secs_f64();
                    }
                }
                self.collect_traces(apps);
                r?;
                tracing::info!(run = self.config.run.number, "run stopped");
            }
            Command::Disconnect => {
                self.step(apps, command)?;
                // A partition brought down without a run (a served run prepared, then a
                // configuration change or a shutdown) has no balance sheet: none is made, and
                // no "ended without its summary" error is logged for it.
                if lock(&self.view).run_seconds > 0.0 {
                    self.make_summary(apps);
                }
            }
            Command::Unconfigure => {
                self.step(apps, command)?;
                if let Some(layout) = apps.layout.take() {
                    if let Err(e) = layout.remove_runtime_dir() {
                        tracing::warn!(dir = %layout.runtime.display(), "cannot remove the runtime directory: {e}");
                    }
                }
            }
            Command::Shutdown => {
                // From INITIAL each application goes down in order; from ERROR whatever is
                // still there is stopped.
                for d in apps.drivers.iter_mut().rev() {
                    if d.command(Command::Shutdown, CommandInput::default())
                        .is_err()
                    {
                        d.reset();
                    }
                }
                self.publish(apps);
                if let Some(layout) = apps.layout.take() {
                    // Ignored: the directory may never have been made (not ipc, or down early).
                    let _ = layout.remove_runtime_dir();
                }
                apps.transport = None;
                apps.drivers.clear();
                let mut v = lock(&self.view);
                for a in &mut v.apps {
                    a.lifecycle = Lifecycle::new(a.lifecycle.who());
                }
            }
        }
        Ok(())
    }

    fn make_summary(&self, apps: &mut Apps) {
        let seconds = lock(&self.view).run_seconds;
        let output = apps
            .layout
            .as_ref()
            .map(|l| l.output.clone())
            .unwrap_or_default();
        let summary = RunSummary::assemble(
            self.config.run.number,
            output,
            seconds,
            &std::mem::take(&mut apps.summaries),
            &[],
        );
        {
            let mut v = lock(&self.view);
            for p in &summary.problems {
                v.error(format!("balance: {p}"));
            }
        }
        *lock(&self.summary) = Some(summary);
    }

    fn collect_traces(&self, apps: &Apps) {
        if self.trace_every.is_none() {
            return;
        }
        let mut out = lock(&self.traces);
        let mut buf = Vec::new();
        for d in &apps.drivers {
            d.drain_traces(&mut buf);
            let name = d.name().to_string();
            out.extend(buf.drain(..).map(|r| (name.clone(), r)));
        }
    }

    /// Puts the partition in ERROR for `who`'s `reason`, recording the failure.
    fn failed(
        &self,
        who: String,
        command: Command,
        from: State,
        reason: String,
    ) -> TransitionError {
        let e = TransitionError::Failed {
            who: who.clone(),
            command,
            from,
            reason: reason.clone(),
        };
        let mut v = lock(&self.view);
        v.lifecycle.fail(format!("{who}: {reason}"));
        if let Some(a) = v.apps.iter_mut().find(|a| a.lifecycle.who() == who) {
            if a.lifecycle.state() != State::Error {
                a.lifecycle.fail(reason);
            }
        }
        v.error(e.to_string());
        *lock(&self.last_failure) = Some(e.clone());
        e
    }
}

/// The reason of a failed transition (without the application's name, which goes separately).
fn failure_reason(e: &TransitionError) -> String {
    match e {
        TransitionError::Failed { reason, .. } | TransitionError::Lost { reason, .. } => {
            reason.clone()
        }
        other => other.to_string(),
    }
}

impl Partition for EmbeddedPartition {
    fn partition_state(&self) -> State {
        self.state()
    }

    fn run_limit_seconds(&self) -> f64 {
        self.config.run.seconds
    }

    fn run_ended(&self) -> bool {
        let Ok(mut apps) = self.apps.try_lock() else {
            return false;
        };
        let mut ended = false;
        let mut failed = None;
        for d in apps.drivers.iter_mut() {
            let halted_before = d.halted().is_some();
            if let Some(why) = d.poll() {
                failed.get_or_insert((d.name().to_string(), why));
            }
            if let (false, Some(why)) = (halted_before, d.halted()) {
                lock(&self.view).error(why.to_string());
            }
            ended |= d.finished();
        }
        if let Some((who, why)) = failed {
            self.publish(&apps);
            let from = self.state();
            self.failed(who, Command::Stop, from, why);
            return true;
        }
        ended
    }

    fn progress(&self) -> (u64, f64) {
        let l1 = self
            .app_metrics()
            .iter()
            .find_map(|(_, m)| match m {
                Some(AppMetrics::Supervisor(s)) => Some(s.l1_accepts),
                _ => None,
            })
            .unwrap_or(0);
        (l1, self.run_seconds())
    }

    fn take_summary(&self) -> Option<RunSummary> {
        EmbeddedPartition::take_summary(self)
    }

    fn last_failure(&self) -> Option<TransitionError> {
        lock(&self.last_failure).clone()
    }

    fn last_metrics(&self) -> Vec<(String, AppMetrics)> {
        self.app_metrics()
            .into_iter()
            .filter_map(|(n, m)| Some((n, m?)))
            .collect()
    }
}

impl RunControl for EmbeddedPartition {
    fn status(&self) -> PartitionStatus {
        let metrics = self.app_metrics();
        let mut v = lock(&self.view);
        let running = v.lifecycle.state() == State::Running;
        let now = Instant::now();
        let counts: Vec<u64> = v
            .apps
            .iter()
            .enumerate()
            .map(|(i, _)| {
                metrics
                    .get(i)
                    .and_then(|(_, m)| m.as_ref())
                    .map_or(0, AppMetrics::main_count)
            })
            .collect();
        let totals = crate::rates::Totals::of(metrics.iter().filter_map(|(_, m)| m.as_ref()));
        v.rates.sample(now, running, totals, &counts);
        let run_seconds = v
            .run_start
            .map_or(v.run_seconds, |t| t.elapsed().as_secs_f64());
        PartitionStatus {
            partition: "embedded".into(),
            state: v.lifecycle.state(),
            error: v.lifecycle.error().map(str::to_string),
            run_number: if v.lifecycle.state() == State::None && totals.l1_accepts == 0 {
                0
            } else {
                self.config.run.number
            },
            run_seconds,
            l1_rate_hz: v.rates.l1_hz,
            event_rate_hz: v.rates.decided_hz,
            write_rate_hz: v.rates.written_hz,
            l1_accepts: totals.l1_accepts,
            events_written: totals.written,
            restarts: 0,
            apps: v
                .apps
                .iter()
                .enumerate()
                .map(|(i, a)| AppStatus {
                    name: a.lifecycle.who().to_string(),
                    role: a.role.name().to_string(),
                    state: a.lifecycle.state(),
                    error: a.lifecycle.error().map(str::to_string),
                    host: None,
                    pid: None,
                    heartbeat_age_ms: None,
                    rate_hz: v.rates.app_hz.get(i).copied().unwrap_or(0.0),
                    restarts: 0,
                })
                .collect(),
            recent_errors: v.recent_errors.iter().cloned().collect(),
            inputs: crate::metrics::inputs_of(metrics.iter().filter_map(|(_, m)| m.as_ref())),
            words: self.config.run.words(),
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
            Err((who, reason)) => Err(self.failed(who, command, from, reason)),
        }
    }

    fn config_toml(&self) -> String {
        self.config.to_toml_public()
    }

    fn write_metrics(&self, w: &mut MetricsWriter) {
        let status = self.status();
        let metrics = self.app_metrics();
        let apps: Vec<(&str, Option<&AppMetrics>)> = metrics
            .iter()
            .map(|(n, m)| (n.as_str(), m.as_ref()))
            .collect();
        write_partition_metrics(
            w,
            &status,
            &apps,
            PartitionExtras {
                bad_control_messages: 0,
                shm_backpressure: rodeo_transport::shm::backpressure_count(),
                shm_undelivered: rodeo_transport::shm::undelivered_count(),
                oversized_messages: rodeo_transport::socket::oversized_count(),
                auth_refused: rodeo_transport::curve::refused_count(),
            },
        );
    }
}
