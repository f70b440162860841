//! One application of a partition in its own process: what a `rodeo app ROLE` process runs
//! ([`AppControl`]: one [`AppDriver`] over the role's [`Application`](crate::application)), and
//! its side of the control channel ([`serve`]). What each transition does per role is in
//! [`crate::application`]; the driver is the same one the embedded partition uses.
//!
//! # State and ownership
//!
//! [`AppControl`] owns the driver behind one mutex: commands are serialised, and
//! [`AppControl::heartbeat`] reads the live counters through the application's probe. A
//! command may hold that mutex for long (a `stop` waits for the drain, up to the command
//! timeout), so what the HTTP server asks for (status, metrics, configuration) never waits
//! for it: when a command runs, the answer is built from the `Seen` copy the last command
//! or heartbeat left (state, error, run number and start, configuration) and the probe's live
//! counters, with the command in progress named (the oldest that asked for the mutex; each
//! takes its mark away as it ends, also by a panic). The
//! process starts in INITIAL (the process exists; `initialize` is implied). A thread that ends
//! on its own with an error puts the application in ERROR (seen at the next heartbeat).
//!
//! # Shutdown
//!
//! [`serve`] returns after a `shutdown` command (replied first), when `quit` says so (signal,
//! or the controller's pipe closed), or when the controller falls silent: an application that
//! hears nothing from the controller for `dead_after_ms` (the value it was started with,
//! `rodeo app --dead-after-ms`, then what each [`ToApp::Ping`] says; not counting its own
//! commands, nor a stall of its own loop, and only after its queue is read dry) judges the
//! controller dead — frozen (SIGSTOP), its host or network
//! gone, which closes no pipe — and, like on `quit`, walks the application down itself (files
//! closed) and leaves.

use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{Frame, Received, SocketKind, Transport, TransportError};

pub use crate::application::Role;
use crate::application::{self, AppContext, RunEnd};
use crate::channel::{self, stall_limit, Heartbeat, ToApp, ToController};
use crate::config::{PartitionConfig, RunWords, TransportKind};
use crate::driver::{AppDriver, CommandInput};
use crate::lifecycle::{Command, State, TransitionError};
use crate::partition::Layout;
use crate::partition_metrics::{write_partition_metrics, PartitionExtras};
use crate::prometheus::MetricsWriter;
use crate::run_control::{AppStatus, PartitionStatus, RunControl};
use crate::summary::AppSummary;

struct Inner {
    driver: AppDriver,
    config: Option<PartitionConfig>,
    run_start: Option<Instant>,
}

/// What the HTTP server answers from while a command holds [`Inner`] (module docs): copied
/// under `Inner`'s lock after every command and heartbeat, read under its own short lock.
#[derive(Clone)]
struct Seen {
    state: State,
    /// The error or the halt reason, as the heartbeat reports it.
    error: Option<String>,
    run_number: u32,
    run_start: Option<Instant>,
    /// The configuration as `config_toml` shows it (secrets hidden).
    config_toml: String,
    probe: Option<crate::application::Probe>,
    /// What makes its drain give up (the supervisor's), for a message that comes while a
    /// `stop` holds `Inner`.
    abandoner: Option<crate::application::Abandoner>,
    /// The commands that asked for `Inner`, oldest first (the first holds it, or is about to;
    /// the rest wait), each with its mark's number and since when.
    commands: Vec<(u64, Command, Instant)>,
}

impl Seen {
    /// What `inner` shows, with `config_toml` as given (made again only when a command may
    /// have changed the configuration).
    fn of(inner: &Inner, config_toml: String) -> Seen {
        Seen {
            state: inner.driver.state(),
            error: shown_error(inner),
            run_number: inner.config.as_ref().map_or(0, |c| c.run.number),
            run_start: inner.run_start,
            config_toml,
            probe: inner.driver.probe(),
            abandoner: inner.driver.abandoner(),
            commands: Vec::new(),
        }
    }
}

/// One application under lifecycle control; also a [`RunControl`] of its own (a partition of
/// one application), so an HTTP server can serve it per process.
pub struct AppControl {
    name: String,
    role: Role,
    transport: Transport,
    inner: Mutex<Inner>,
    seen: Mutex<Seen>,
    /// The next command mark's number.
    marks: std::sync::atomic::AtomicU64,
}

/// A command's mark in [`Seen::commands`], taken away when dropped.
struct Mark<'a> {
    app: &'a AppControl,
    id: u64,
}

impl Drop for Mark<'_> {
    fn drop(&mut self) {
        self.app.seen().commands.retain(|c| c.0 != self.id);
    }
}

impl fmt::Debug for AppControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppControl")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish()
    }
}

impl AppControl {
    /// An application in INITIAL. `config`, if given, is what `configure` takes when the
    /// command does not bring one.
    pub fn new(
        role: Role,
        name: &str,
        transport: Transport,
        config: Option<PartitionConfig>,
    ) -> AppControl {
        let ctx = AppContext {
            transport: transport.clone(),
            trace_every: None,
            trigger: None,
            readout: Default::default(),
        };
        let mut driver = AppDriver::new(application::build(role, name, &ctx));
        // The process exists: initialize is implied.
        let _ = driver.command(Command::Initialize, CommandInput::default());
        let inner = Inner {
            driver,
            config,
            run_start: None,
        };
        AppControl {
            name: name.to_string(),
            role,
            transport,
            seen: Mutex::new(Seen::of(&inner, public_toml(&inner))),
            marks: std::sync::atomic::AtomicU64::new(0),
            inner: Mutex::new(inner),
        }
    }

    /// The runtime directory of the run's ipc endpoints (socket files), of the configuration
    /// last taken, when its transport is ipc; `None` for the other transports.
    pub fn ipc_runtime_dir(&self) -> Option<std::path::PathBuf> {
        let inner = self.lock();
        let config = inner.config.as_ref()?;
        (config.transport.kind == TransportKind::Ipc).then(|| Layout::new(config).runtime)
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

    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Copies what `inner` shows into [`Seen`], the commands' marks kept (each [`Mark`]
    /// takes its own away). After a command (`after_command`) the configuration's text is
    /// made again.
    fn publish(&self, inner: &Inner, after_command: bool) {
        let toml = after_command.then(|| public_toml(inner));
        let mut seen = self.seen();
        let commands = std::mem::take(&mut seen.commands);
        let toml = toml.unwrap_or_else(|| std::mem::take(&mut seen.config_toml));
        *seen = Seen {
            commands,
            ..Seen::of(inner, toml)
        };
    }

    /// Marks `command` as asking for `Inner` until the mark drops (also when the command
    /// panics: an HTTP command runs under `catch_unwind`).
    fn mark(&self, command: Command) -> Mark<'_> {
        let id = self
            .marks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.seen().commands.push((id, command, Instant::now()));
        Mark { app: self, id }
    }

    /// `Inner` when no command holds it; `None` (at once) while one runs.
    fn try_lock(&self) -> Option<MutexGuard<'_, Inner>> {
        match self.inner.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Looks whether a thread of the application ended by itself, and copies what `inner`
    /// shows into [`Seen`] (what a heartbeat does first).
    fn refresh(&self, inner: &mut Inner) {
        inner.driver.poll();
        self.publish(inner, false);
    }

    /// What the HTTP server answers from (module docs): refreshed first when no command holds
    /// `Inner`, else the copy the last command or heartbeat left; with the probe's live
    /// counters, read after the lock is gone.
    fn seen_now(&self) -> (Seen, Option<crate::metrics::AppMetrics>) {
        if let Some(mut inner) = self.try_lock() {
            self.refresh(&mut inner);
        }
        let seen = self.seen().clone();
        let metrics = seen.probe.as_ref().map(|p| p());
        (seen, metrics)
    }

    /// The status of `seen` with the counters `metrics`.
    fn status_of(
        &self,
        seen: &Seen,
        metrics: Option<&crate::metrics::AppMetrics>,
    ) -> PartitionStatus {
        let run_seconds = match (seen.run_start, seen.state) {
            (Some(t), State::Running) => t.elapsed().as_secs_f64(),
            _ => 0.0,
        };
        let totals = crate::rates::Totals::of(metrics.into_iter());
        let mut recent_errors: Vec<String> = seen.error.clone().into_iter().collect();
        if let Some(&(_, command, since)) = seen.commands.first() {
            recent_errors.push(format!(
                "{command} in progress for {} ms: the state shown is the one before it",
                since.elapsed().as_millis()
            ));
        }
        PartitionStatus {
            partition: self.name.clone(),
            state: seen.state,
            error: seen.error.clone(),
            run_number: seen.run_number,
            run_seconds,
            l1_rate_hz: 0.0,
            event_rate_hz: 0.0,
            write_rate_hz: 0.0,
            l1_accepts: totals.l1_accepts,
            events_written: totals.written,
            restarts: 0,
            apps: vec![AppStatus {
                name: self.name.clone(),
                role: self.role.name().into(),
                state: seen.state,
                error: seen.error.clone(),
                host: None,
                pid: Some(std::process::id()),
                heartbeat_age_ms: None,
                rate_hz: 0.0,
                restarts: 0,
            }],
            recent_errors,
            inputs: crate::metrics::inputs_of(metrics),
            words: RunWords::default(),
        }
    }

    /// The state now.
    pub fn state(&self) -> State {
        self.lock().driver.state()
    }

    /// Runs `command`; `config` (TOML) replaces the configuration on `configure`, and
    /// `expect_cleared` bounds a readout node's wait for the last clears on `stop`, and
    /// `rejoin_at` (with `configure`, after a restart into a running run) is the event a
    /// readout node's emulated inputs start at ([`Layout::rejoin_at`]). Returns
    /// the new state and, when the command ended the application's part of the run, its
    /// summary.
    pub fn handle(
        &self,
        command: Command,
        config: Option<&str>,
        expect_cleared: Option<u64>,
        rejoin_at: Option<u64>,
    ) -> Result<(State, Option<AppSummary>), TransitionError> {
        let run = RunEnd {
            l1_accepts: expect_cleared,
            ..RunEnd::default()
        };
        self.handle_run(command, config, run, rejoin_at)
    }

    /// [`AppControl::handle`] with everything `stop` may be told about the ending run.
    pub fn handle_run(
        &self,
        command: Command,
        config: Option<&str>,
        run: RunEnd,
        rejoin_at: Option<u64>,
    ) -> Result<(State, Option<AppSummary>), TransitionError> {
        let _mark = self.mark(command);
        let mut guard = self.lock();
        let result = self.handle_locked(&mut guard, command, config, run, rejoin_at);
        self.publish(&guard, true);
        result
    }

    fn handle_locked(
        &self,
        inner: &mut Inner,
        command: Command,
        config: Option<&str>,
        run: RunEnd,
        rejoin_at: Option<u64>,
    ) -> Result<(State, Option<AppSummary>), TransitionError> {
        let mut layout = None;
        if command == Command::Configure {
            // A configuration that does not parse fails the transition like any other cause.
            let parsed = match config {
                Some(text) => PartitionConfig::from_toml(text, "the controller's configuration")
                    .map(Some)
                    .map_err(|e| e.to_string()),
                None => Ok(inner.config.clone()),
            };
            match parsed {
                Ok(Some(c)) => {
                    let mut l = Layout::new(&c);
                    // `run.cpu_plan`: every thread of this process (its transport's, started
                    // before) and every thread started from now on runs on the shared CPUs; a
                    // readout node's core thread pins itself to its own. Without a plan (a
                    // configuration changed between runs) they get every CPU back.
                    let cpus = l
                        .shared_cpus
                        .as_deref()
                        .unwrap_or(rodeo_memory::cpu::process_cpus());
                    if !cpus.is_empty() && rodeo_memory::cpu::narrow_process_threads(cpus) == 0 {
                        tracing::warn!(
                            "run.cpu_plan: the kernel refused CPUs {cpus:?}; threads unplaced"
                        );
                    }
                    if let Some(n) = rejoin_at {
                        l.rejoin_at(n);
                    }
                    layout = Some(l);
                    inner.config = Some(c);
                }
                Ok(None) => {}
                Err(e) => {
                    inner.driver.lifecycle().check(command)?;
                    inner.driver.fail(e.clone());
                    return Err(TransitionError::Failed {
                        who: self.name.clone(),
                        command,
                        from: State::Initial,
                        reason: e,
                    });
                }
            }
        }
        if command == Command::Configure {
            if let Some(c) = &inner.config {
                // Before any shared-memory socket: every process of the partition agrees.
                rodeo_transport::shm::set_limits(shm_limits(c));
            }
        }
        if command == Command::Start {
            inner.run_start = Some(Instant::now());
        }
        let input = CommandInput {
            layout: layout.as_ref(),
            run,
        };
        inner.driver.command(command, input)
    }

    /// The heartbeat now: state, counters, and whether the supervisor's run ended by itself.
    /// A dataflow thread that ended on its own with an error puts the application in ERROR.
    pub fn heartbeat(&self) -> Heartbeat {
        let mut inner = self.lock();
        self.heartbeat_locked(&mut inner)
    }

    /// Whether the run ended by itself (the supervisor's L1 source is done, a logger halted),
    /// looked at now: the application loop says so at once rather than at the next heartbeat.
    pub fn finished_now(&self) -> bool {
        let mut inner = self.lock();
        self.refresh(&mut inner);
        inner.driver.finished()
    }

    fn heartbeat_locked(&self, inner: &mut Inner) -> Heartbeat {
        self.refresh(inner);
        Heartbeat {
            state: inner.driver.state(),
            error: shown_error(inner),
            finished: inner.driver.finished(),
            metrics: inner.driver.metrics(),
            shm_backpressure: rodeo_transport::shm::backpressure_count(),
            shm_undelivered: rodeo_transport::shm::undelivered_count(),
            oversized_messages: rodeo_transport::socket::oversized_count(),
            auth_refused: rodeo_transport::curve::refused_count(),
        }
    }

    /// The control channel's limit on incoming messages: 1 MiB, or a smaller
    /// `transport.max_message_bytes` of the configuration this process was started with.
    fn control_message_limit(&self) -> usize {
        let limit = crate::channel::MAX_MESSAGE_BYTES;
        self.lock()
            .config
            .as_ref()
            .map_or(limit, |c| c.control_message_limit(limit))
    }

    /// Whether this application's partition exchanges data through shared memory.
    fn on_shared_memory(&self) -> bool {
        self.lock()
            .config
            .as_ref()
            .is_some_and(|c| c.transport.kind == TransportKind::Shm)
    }
}

/// The error a heartbeat and the status show: the application's, or why it halted (a halted
/// application is not in ERROR; its reason shows as its error).
fn shown_error(inner: &Inner) -> Option<String> {
    inner
        .driver
        .error()
        .or(inner.driver.halted())
        .map(str::to_string)
}

/// The configuration of `inner` as the HTTP server shows it (secrets hidden).
fn public_toml(inner: &Inner) -> String {
    inner
        .config
        .as_ref()
        .map(PartitionConfig::to_toml_public)
        .unwrap_or_default()
}

/// The shared-memory limits of `config`'s partition (`rodeo_transport::shm::ShmLimits`): its
/// applications, and its restart budget when restarts are on.
pub fn shm_limits(config: &PartitionConfig) -> rodeo_transport::shm::ShmLimits {
    rodeo_transport::shm::ShmLimits {
        apps: config.app_names().len(),
        restarts: if config.control.restart {
            config.control.max_restarts_per_run as usize
        } else {
            0
        },
    }
}

impl RunControl for AppControl {
    /// Never waits for a command in progress: then the state is the one before it, and the
    /// command is named in the errors shown (`recent_errors`).
    fn status(&self) -> PartitionStatus {
        let (seen, metrics) = self.seen_now();
        self.status_of(&seen, metrics.as_ref())
    }

    fn command(&self, command: Command) -> Result<State, TransitionError> {
        self.handle(command, None, None, None).map(|(s, _)| s)
    }

    /// The configuration of the last command (never waits for one in progress).
    fn config_toml(&self) -> String {
        self.seen().config_toml.clone()
    }

    fn write_metrics(&self, out: &mut MetricsWriter) {
        let (seen, metrics) = self.seen_now();
        let status = self.status_of(&seen, metrics.as_ref());
        write_partition_metrics(
            out,
            &status,
            &[(self.name.as_str(), metrics.as_ref())],
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

/// How [`serve`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// Control frames dropped because they did not decode.
    pub bad_frames: u64,
    /// The application walked itself down because the controller fell silent (frozen or gone),
    /// not on a `shutdown` or `quit()`.
    pub controller_silent: bool,
}

/// Serves `app` on the control channel at `endpoint` (the controller's ROUTER): says hello,
/// runs the commands it receives, sends a heartbeat every `heartbeat`. Returns after a
/// `shutdown` command, or when `quit()` turns true or the controller fell silent (module docs:
/// then it walks the application down by itself), saying which ([`Served`]).
///
/// `dead_after`: the controller's silence after which it is judged dead until its first ping
/// says (`None`: only once a ping said; a controller frozen before its first ping reached us
/// would then be waited for until `quit`).
pub fn serve(
    app: &AppControl,
    endpoint: &str,
    heartbeat: Duration,
    dead_after: Option<Duration>,
    quit: impl Fn() -> bool,
) -> Result<Served, ServeError> {
    let ep = Endpoint::parse(endpoint)?;
    let mut sock = app.transport.socket(SocketKind::Dealer)?;
    sock.set_max_message_size(i64::try_from(app.control_message_limit()).unwrap_or(i64::MAX))?;
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
    // Heartbeats never wait: with the controller gone (no peer) a blocking send would hold
    // the walk-down for the send timeout each time; a heartbeat lost is replaced by the next.
    let beat = |sock: &mut rodeo_transport::socket::Socket, m: &ToController| {
        let _ = sock.try_send([Frame::Copy(&channel::encode(m))]);
    };
    send(&mut sock, &hello);
    let mut msg = Received::default();
    // Messages that came while a command ran (`beat::while_beating`), to take in order.
    let mut held: std::collections::VecDeque<Vec<u8>> = std::collections::VecDeque::new();
    let mut bad = 0u64;
    let mut next_beat = Instant::now();
    // What the last heartbeat said of the run's end.
    let mut said_finished = false;
    // The controller's liveness: when it was last heard, and after how long of silence it is
    // dead (given at the start, then from each ping).
    let mut silence = Silence::new(Instant::now());
    let mut dead_after = dead_after.map(|d| d.max(Duration::from_millis(1)));
    let mut controller_dead = false;
    loop {
        if quit() || controller_dead {
            // Walk down by ourselves (best effort), then leave.
            // Nobody will take a summary: the supervisor's drain does not wait for events
            // that can no longer be decided (its grace only).
            let from = app.state();
            let run = RunEnd {
                l1_accepts: None,
                abandon_drain: true,
            };
            for c in Command::path(from, State::None).unwrap_or_else(|| vec![Command::Shutdown]) {
                if app.handle_run(c, None, run, None).is_err() {
                    break;
                }
            }
            if app.on_shared_memory() {
                // The controller removes what dead applications left in shared memory at the
                // run's end; gone (killed, or aborted by a second interrupt), it will not: a
                // logger killed before it stayed in /dev/shm (a QA pass). Every application
                // that walks itself down does it instead (one pass at a time, bounded).
                if let Err(e) = rodeo_transport::shm::cleanup_dead_nodes() {
                    tracing::warn!("shared-memory clean-up: {e}");
                }
            }
            let hb = app.heartbeat();
            beat(&mut sock, &ToController::Heartbeat(hb));
            return Ok(Served {
                bad_frames: bad,
                controller_silent: controller_dead,
            });
        }
        let now = Instant::now();
        // The run's end goes out at once (within a turn of this loop, 50 ms at most), not up
        // to a heartbeat period later: the controller stops the run on it.
        if now >= next_beat || (!said_finished && app.finished_now()) {
            let hb = app.heartbeat();
            said_finished = hb.finished;
            beat(&mut sock, &ToController::Heartbeat(hb));
            next_beat = now + heartbeat;
        }
        let wait = next_beat
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(50));
        // Messages the beats kept during the last command come first, in order.
        let got = match held.pop_front() {
            Some(bytes) => {
                msg.bytes = bytes;
                true
            }
            None => sock.recv(&mut msg, rodeo_transport::socket::timeout_ms(wait))?,
        };
        if let Some(limit) = dead_after {
            // This turn took far longer than its wait: we were held up, not the controller.
            if let Some(gap) = silence.turn(Instant::now(), stall_limit(limit)) {
                if gap >= Duration::from_secs(1) {
                    eprintln!(
                        "{}: this process was held up for {} ms (a loaded or frozen \
                         machine?): the controller's silence is counted from now",
                        app.name,
                        gap.as_millis()
                    );
                }
            }
        }
        if !got {
            // Nothing queued: a silence this long is the controller's, not ours.
            if let Some(limit) = dead_after {
                let silent = silence.silent(Instant::now());
                if silent > limit {
                    eprintln!(
                        "{}: no message from the controller for {} ms (control.dead_after_ms \
                         = {}): the controller is frozen or gone; walking down and leaving",
                        app.name,
                        silent.as_millis(),
                        limit.as_millis()
                    );
                    controller_dead = true;
                }
            }
            continue;
        }
        let decoded = channel::decode::<ToApp>(&msg.bytes);
        if let Ok(ToApp::Ping { dead_after_ms }) = decoded {
            silence.heard(Instant::now());
            dead_after = Some(Duration::from_millis(dead_after_ms.max(1)));
            continue;
        }
        let Ok(ToApp::Command {
            seq,
            command,
            config,
            expect_cleared,
            abandon_drain,
            rejoin_at,
        }) = decoded
        else {
            bad += 1;
            continue;
        };
        let run = RunEnd {
            l1_accepts: expect_cleared,
            abandon_drain,
        };
        let abandoner = app.seen().abandoner.clone();
        let (outcome, kept) =
            crate::beat::while_beating(&mut sock, heartbeat, seq, abandoner, || {
                app.handle_run(command, config.as_deref(), run, rejoin_at)
            });
        held.extend(kept);
        let reply = match outcome {
            Ok((state, summary)) => ToController::Reply {
                seq,
                state,
                error: None,
                summary,
            },
            Err(e) => ToController::Reply {
                seq,
                state: app.state(),
                error: Some(reply_error(e)),
                summary: None,
            },
        };
        send(&mut sock, &reply);
        // Our own command's time is not the controller's silence.
        silence.heard(Instant::now());
        // Tell the controller the new state at once.
        let hb = app.heartbeat();
        said_finished = hb.finished;
        beat(&mut sock, &ToController::Heartbeat(hb));
        next_beat = Instant::now() + heartbeat;
        if command == Command::Shutdown && app.state() == State::None {
            return Ok(Served {
                bad_frames: bad,
                controller_silent: false,
            });
        }
    }
}

/// The controller's silence as this process can judge it: since the last message heard, but
/// never across a stall of this process's own loop (a loaded machine, or one frozen for
/// seconds), during which the controller's pings were unsent or are still unread. The
/// controller's monitor counts the applications' silence the same way.
struct Silence {
    heard: Instant,
    last_turn: Instant,
}

impl Silence {
    /// Nothing heard yet: silence counts from `now`.
    fn new(now: Instant) -> Silence {
        Silence {
            heard: now,
            last_turn: now,
        }
    }

    /// A message from the controller (or the end of our own command) at `now`.
    fn heard(&mut self, now: Instant) {
        self.heard = now;
        self.last_turn = now;
    }

    /// One turn of the loop at `now`. A gap of `stall` or more since the last turn is our own
    /// stall: the silence counts again from `now`, and the gap is returned.
    fn turn(&mut self, now: Instant, stall: Duration) -> Option<Duration> {
        let gap = now.saturating_duration_since(self.last_turn);
        self.last_turn = now;
        if gap >= stall {
            self.heard = self.heard.max(now);
            return Some(gap);
        }
        None
    }

    /// How long the controller has been silent at `now`.
    fn silent(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.heard)
    }
}

/// What a failed command's reply says: the failure's own reason, as the controller names the
/// command, the application and its state itself (`"connect failed in ros-1 (was
/// CONFIGURED): connect failed in ros-1 (was CONFIGURED): ..."` was said twice); any other
/// error whole.
fn reply_error(e: TransitionError) -> String {
    match e {
        TransitionError::Failed { reason, .. } => reason,
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    /// A failure's reply is its reason alone; an illegal command's says it all.
    #[test]
    fn an_application_s_failure_is_said_once() {
        use crate::lifecycle::{Command, State, TransitionError};
        let failed = TransitionError::Failed {
            who: "ros-1".into(),
            command: Command::Connect,
            from: State::Configured,
            reason: "cannot bind tcp://127.0.0.1:1".into(),
        };
        assert_eq!(super::reply_error(failed), "cannot bind tcp://127.0.0.1:1");
        let illegal = TransitionError::Illegal {
            who: "ros-1".into(),
            command: Command::Start,
            state: State::Configured,
        };
        assert_eq!(super::reply_error(illegal.clone()), illegal.to_string());
    }

    use super::*;

    #[test]
    fn a_stall_of_our_own_loop_is_not_the_controllers_silence() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Silence::new(t0);
        let stall = stall_limit(ms(3000));
        assert_eq!(stall, ms(750));
        // Turns 50 ms apart: the silence grows.
        for k in 1..=40 {
            assert_eq!(s.turn(t0 + ms(50 * k), stall), None);
        }
        assert_eq!(s.silent(t0 + ms(2000)), ms(2000));
        // The machine froze for 14 s: the loop comes back late; that time is not counted.
        let back = t0 + ms(16_000);
        assert_eq!(s.turn(back, stall), Some(ms(14_000)));
        assert_eq!(s.silent(back + ms(100)), ms(100));
        // A ping resets it; then a real silence counts again.
        s.heard(back + ms(200));
        for k in 1..=80 {
            assert_eq!(s.turn(back + ms(200 + 50 * k), stall), None);
        }
        assert_eq!(s.silent(back + ms(4200)), ms(4000));
        // A tiny dead_after never makes every turn a stall.
        assert_eq!(stall_limit(ms(100)), ms(250));
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

    /// A command holding the application (a `stop` waiting for its drain) does not hold up
    /// the HTTP server's status, metrics or configuration: they answer from what the last
    /// heartbeat saw, the command named.
    #[test]
    fn the_status_answers_while_a_command_holds_the_application() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = PartitionConfig::default();
        config.run.output = dir.path().display().to_string();
        config.run.number = 77;
        let t = Transport::new(1).unwrap();
        let app = std::sync::Arc::new(AppControl::new(Role::Dcm, "dcm-1", t, Some(config)));
        for c in [Command::Configure, Command::Connect, Command::Start] {
            app.handle(c, None, None, None).unwrap();
        }
        let (held, release) = std::sync::mpsc::channel::<()>();
        let holder = {
            let app = std::sync::Arc::clone(&app);
            std::thread::spawn(move || {
                // As `handle_run` does for a command, which then holds `inner` throughout.
                let _mark = app.mark(Command::Stop);
                let inner = app.lock();
                held.send(()).unwrap();
                std::thread::sleep(Duration::from_secs(3));
                app.publish(&inner, true);
            })
        };
        release.recv().unwrap();
        let (answers, answered) = std::sync::mpsc::channel();
        {
            let app = std::sync::Arc::clone(&app);
            std::thread::spawn(move || {
                let status = app.status();
                let mut m = MetricsWriter::new();
                app.write_metrics(&mut m);
                let _ = answers.send((status, m.finish(), app.config_toml()));
            });
        }
        let (status, metrics, toml) = answered
            .recv_timeout(Duration::from_secs(1))
            .expect("the status waited for the command");
        assert_eq!(status.state, State::Running);
        assert_eq!(status.run_number, 77);
        assert!(
            status
                .recent_errors
                .iter()
                .any(|e| e.contains("stop in progress")),
            "{:?}",
            status.recent_errors
        );
        assert!(metrics.contains("rodeo_"), "{metrics}");
        assert!(toml.contains("[dcm]"));
        holder.join().unwrap();
        // Free again: a fresh heartbeat, no command named.
        assert!(app.status().recent_errors.is_empty());
        // A command that panics (an HTTP command runs under catch_unwind) takes its mark away.
        let panicking = std::sync::Arc::clone(&app);
        let _ = std::thread::spawn(move || {
            let _mark = panicking.mark(Command::Start);
            panic!("a command's panic, on purpose");
        })
        .join();
        assert!(app.status().recent_errors.is_empty());
        assert_eq!(app.command(Command::Stop).unwrap(), State::Connected);
        assert_eq!(app.status().state, State::Connected);
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
            let (_, s) = app.handle(c, None, None, None).unwrap();
            assert!(s.is_none());
        }
        let (state, s) = app.handle(Command::Disconnect, None, None, None).unwrap();
        assert_eq!(state, State::Configured);
        assert!(
            matches!(&s, Some(AppSummary::Dcm(d)) if d.assigned == 0),
            "{s:?}"
        );
        let mut m = MetricsWriter::new();
        app.write_metrics(&mut m);
        assert!(app.config_toml().contains("[dcm]"));
    }
}
