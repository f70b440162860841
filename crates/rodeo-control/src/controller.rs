//! The controller: a partition run as `rodeo app` processes, on this host (spawned from the
//! current executable) or on other hosts (over ssh), driven through the lifecycle in
//! dependency order and watched by heartbeat. It implements [`RunControl`].
//!
//! # Order
//!
//! Up (`configure`, `connect`, `start`): loggers, readout nodes, DCMs, the supervisor (which
//! owns the L1 source, so data only flows once everything downstream is there). Down (`stop`,
//! `disconnect`, `unconfigure`, `shutdown`): the reverse, so the supervisor stops the L1
//! source and drains every event before the DCMs, loggers and readout nodes stop.
//!
//! `initialize` spawns every process and waits for each one's hello (it is then INITIAL);
//! `shutdown` walks every live application down to NONE, closes its stdin (a controlled
//! application leaves when its stdin closes: that also ends remote ones when ssh goes) and
//! kills what is still there after a grace period.
//!
//! # Failures and the dead-application policy
//!
//! An illegal command is refused naming the partition's state. A command that fails in an
//! application puts the partition in ERROR naming that application and its reason; the
//! remaining applications are not sent the command. An application is dead when its local
//! process (or its ssh client) exits unasked, or when it sends no heartbeat for
//! `control.dead_after_ms` while no command is pending with it. A dead DCM is survivable
//! while another DCM lives — the supervisor reassigns its events — so it is marked ERROR,
//! reported in status and the recent errors, and skipped by later commands; any other dead
//! application (or the last DCM) puts the partition in ERROR naming it.
//!
//! # Threads and ownership
//!
//! One monitor thread receives everything on the controller's ROUTER (hellos, heartbeats,
//! replies) into a table behind a mutex, checks liveness every 50 ms and sends every
//! application that said hello a [`ToApp::Ping`] every heartbeat period (the controller's own
//! liveness: an application that hears nothing for `control.dead_after_ms` walks itself down,
//! so a frozen controller leaves no application running); commands are
//! serialised by their own mutex, send under the socket's mutex (never while holding the
//! table's) and wait on a condition variable for their reply, so status and metrics never wait
//! for a command. Dropping the controller shuts everything down.

use std::collections::VecDeque;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rodeo_transport::curve::PartitionKeys;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{Frame, Received, Socket, SocketKind, Transport, TransportError};

use crate::application::{Role, RunEnd};
use crate::channel::{self, ToApp, ToController};
use crate::config::PartitionConfig;
use crate::control::{AppStatus, Partition, PartitionStatus, RunControl};
use crate::lifecycle::{Command, Lifecycle, State, TransitionError};
use crate::metrics::{write_partition_metrics, AppMetrics, PartitionExtras};
use crate::partition::Layout;
use crate::prometheus::MetricsWriter;
use crate::summary::{AppSummary, RunSummary};

mod restart;

/// How many recent errors the status keeps.
const RECENT_ERRORS: usize = 32;

/// Why a controller could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The configuration is not valid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The control socket could not be set up.
    #[error("control socket: {0}")]
    Transport(#[from] TransportError),
    /// The control address does not make an endpoint.
    #[error("control.address: {0}")]
    Endpoint(#[from] rodeo_transport::endpoint::EndpointError),
    /// The monitor thread could not start.
    #[error("cannot start the monitor thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// What the controller knows of one application.
#[derive(Debug)]
struct App {
    name: String,
    role: Role,
    host: Option<String>,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    pid: Option<u32>,
    state: State,
    error: Option<String>,
    hello: bool,
    last_heard: Option<Instant>,
    metrics: Option<AppMetrics>,
    shm_backpressure: u64,
    oversized_messages: u64,
    /// Handshakes its CURVE servers refused (its heartbeat's count).
    auth_refused: u64,
    rate_base: Option<(Instant, u64)>,
    rate_hz: f64,
    finished: bool,
    /// The command in flight with this application (its seq).
    waiting: Option<u64>,
    reply: Option<(u64, State, Option<String>)>,
    summary: Option<AppSummary>,
    dead: bool,
    /// Asked to leave: its exit is expected.
    leaving: bool,
    /// Dead, to be restarted into the run at this time (`restart`).
    restart_at: Option<Instant>,
    /// Restarted into the run (it saw part of it only).
    restarted: bool,
    /// Restarts after a death since the partition came up (`rodeo_app_restarts_total`).
    restarts: u64,
    /// With its next `configure`: the event it rejoins the run at.
    rejoin_at: Option<u64>,
}

#[derive(Debug)]
struct Table {
    lifecycle: Lifecycle,
    apps: Vec<App>,
    recent_errors: VecDeque<String>,
    bad_messages: u64,
    run_start: Option<Instant>,
    run_seconds: f64,
    next_seq: u64,
    /// The restart policy (`control.restart`, ...) and this run's restarts (`restart`).
    policy: restart::Policy,
    /// Restarts attempted in this run, and those that brought the application back.
    restart_attempts: u32,
    restarts: u64,
    /// Why the run ends early: the supervisor died while it ran (module docs).
    ended_by: Option<String>,
}

impl Table {
    fn record(&mut self, e: String) {
        if self.recent_errors.len() == RECENT_ERRORS {
            self.recent_errors.pop_front();
        }
        self.recent_errors.push_back(e);
    }

    /// Marks application `i` dead and applies the policy (module docs).
    fn dead(&mut self, i: usize, why: String) {
        let a = &mut self.apps[i];
        if a.dead {
            return;
        }
        a.dead = true;
        a.state = State::Error;
        a.error = Some(why.clone());
        let (name, role) = (a.name.clone(), a.role);
        self.record(format!("{name} ({role}) is dead: {why}"));
        if self.restart_or_end(i, &why) {
            return;
        }
        let dcms_alive = self
            .apps
            .iter()
            .filter(|a| a.role == Role::Dcm && !a.dead)
            .count();
        let survivable = role == Role::Dcm && dcms_alive > 0;
        let ps = self.lifecycle.state();
        if !survivable && ps != State::None && ps != State::Error {
            self.lifecycle.fail(format!("{name} is dead: {why}"));
        }
    }
}

struct Shared {
    table: Mutex<Table>,
    changed: Condvar,
    socket: Mutex<Socket>,
    stop: AtomicBool,
    dead_after: Duration,
    /// How often every application gets a ping.
    ping_every: Duration,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn socket(&self) -> MutexGuard<'_, Socket> {
        self.socket.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn on_message(&self, msg: &Received) {
        let mut t = self.table();
        let Some(i) = t.apps.iter().position(|a| a.name.as_bytes() == msg.peer) else {
            t.bad_messages += 1;
            return;
        };
        let m = match channel::decode::<ToController>(&msg.bytes) {
            Ok(m) => m,
            Err(_) => {
                t.bad_messages += 1;
                return;
            }
        };
        let now = Instant::now();
        let a = &mut t.apps[i];
        a.last_heard = Some(now);
        let mut failed = None;
        match m {
            ToController::Hello { pid, state, .. } => {
                a.hello = true;
                a.pid = Some(pid);
                if !a.dead {
                    a.state = state;
                }
            }
            ToController::Heartbeat(hb) => {
                if !a.dead {
                    if hb.state == State::Error && a.state != State::Error && a.waiting.is_none() {
                        failed = hb.error.clone();
                    }
                    a.state = hb.state;
                    a.error = hb.error;
                }
                a.finished = hb.finished;
                a.shm_backpressure = hb.shm_backpressure;
                a.oversized_messages = hb.oversized_messages;
                a.auth_refused = hb.auth_refused;
                let main = hb.metrics.as_ref().map_or(0, AppMetrics::main_count);
                match a.rate_base {
                    Some((t0, v0)) if now.duration_since(t0) >= Duration::from_millis(200) => {
                        let dt = now.duration_since(t0).as_secs_f64();
                        a.rate_hz = main.saturating_sub(v0) as f64 / dt;
                        a.rate_base = Some((now, main));
                    }
                    Some(_) => {}
                    None => a.rate_base = Some((now, main)),
                }
                if hb.metrics.is_some() {
                    a.metrics = hb.metrics;
                }
            }
            ToController::Reply {
                seq,
                state,
                error,
                summary,
            } => {
                if a.waiting == Some(seq) {
                    a.waiting = None;
                    a.state = state;
                    if summary.is_some() {
                        a.summary = summary;
                    }
                    a.reply = Some((seq, state, error));
                }
            }
        }
        if let Some(why) = failed {
            // A failure outside a transition (a thread ended): like a death, by policy.
            t.dead(i, format!("failed: {why}"));
        }
        drop(t);
        self.changed.notify_all();
    }

    /// Sends a ping to every application that said hello and is neither dead nor leaving
    /// (never waiting: one that does not read loses its ping, nobody else is delayed).
    fn ping_all(&self) {
        let names: Vec<String> = {
            let t = self.table();
            t.apps
                .iter()
                .filter(|a| a.hello && !a.dead && !a.leaving)
                .map(|a| a.name.clone())
                .collect()
        };
        if names.is_empty() {
            return;
        }
        let ping = channel::encode(&ToApp::Ping {
            dead_after_ms: self.dead_after.as_millis() as u64,
        });
        let mut sock = self.socket();
        for n in &names {
            let _ = sock.try_send_to(n.as_bytes(), [Frame::Copy(&ping)]);
        }
    }

    fn check_liveness(&self) {
        let mut t = self.table();
        let mut deaths = Vec::new();
        for (i, a) in t.apps.iter_mut().enumerate() {
            if a.dead {
                continue;
            }
            if let Some(c) = a.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    a.child = None;
                    a.stdin = None;
                    if !a.leaving {
                        let how = match a.host.as_deref() {
                            Some(h) => format!("its ssh to {h} ended ({status})"),
                            None => format!("its process exited ({status})"),
                        };
                        deaths.push((i, how));
                        continue;
                    }
                }
            }
            if a.hello && !a.leaving && a.waiting.is_none() {
                if let Some(h) = a.last_heard {
                    let age = h.elapsed();
                    if age > self.dead_after {
                        deaths.push((i, format!("no heartbeat for {} ms", age.as_millis())));
                    }
                }
            }
        }
        let any = !deaths.is_empty();
        for (i, why) in deaths {
            t.dead(i, why);
        }
        drop(t);
        if any {
            self.changed.notify_all();
        }
    }
}

/// A partition of `rodeo app` processes under lifecycle control (module docs).
pub struct Controller {
    shared: Arc<Shared>,
    commands: Mutex<()>,
    monitor: Option<JoinHandle<()>>,
    config: PartitionConfig,
    program: PathBuf,
    endpoint: String,
    local_config: Option<PathBuf>,
    /// The partition's CURVE keys (`transport.curve`): handed to every application on its
    /// stdin when it is spawned.
    keys: Option<PartitionKeys>,
    /// The balance sheet of the last run (made at disconnect).
    summary: Mutex<Option<RunSummary>>,
    /// The failure that last put the partition in ERROR.
    last_failure: Mutex<Option<TransitionError>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// Quotes one word for a POSIX shell (what ssh hands the remote command to).
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Controller {
    /// A controller for `config` in NONE, listening for its applications on
    /// `tcp://<control.address>:*`. `program` is the local rodeo executable. With
    /// `transport.curve`, the partition's CURVE keys are made here: the control channel and
    /// every tcp socket of the applications authenticate with them.
    pub fn new(config: PartitionConfig, program: PathBuf) -> Result<Controller, ControllerError> {
        config.validate()?;
        let keys = if config.transport.curve_enabled() {
            Some(PartitionKeys::generate()?)
        } else {
            None
        };
        let transport = match &keys {
            Some(k) => Transport::with_curve(1, k.clone())?,
            None => Transport::new(1)?,
        };
        let socket = transport.socket(SocketKind::Router)?;
        // A frame larger than any control message is refused before it is buffered.
        let limit = config.control_message_limit(crate::channel::MAX_MESSAGE_BYTES);
        socket.set_max_message_size(i64::try_from(limit).unwrap_or(i64::MAX))?;
        let want = Endpoint::parse(&format!("tcp://{}:*", config.control.address))?;
        let endpoint = socket.bind(&want)?;
        let apps = config
            .app_names()
            .into_iter()
            .filter_map(|name| {
                let role = Role::of_name(&name)?;
                Some(App {
                    host: config.hosts.get(&name).cloned(),
                    name,
                    role,
                    child: None,
                    stdin: None,
                    pid: None,
                    state: State::None,
                    error: None,
                    hello: false,
                    last_heard: None,
                    metrics: None,
                    shm_backpressure: 0,
                    oversized_messages: 0,
                    auth_refused: 0,
                    rate_base: None,
                    rate_hz: 0.0,
                    finished: false,
                    waiting: None,
                    reply: None,
                    summary: None,
                    dead: false,
                    leaving: false,
                    restart_at: None,
                    restarted: false,
                    restarts: 0,
                    rejoin_at: None,
                })
            })
            .collect();
        let shared = Arc::new(Shared {
            table: Mutex::new(Table {
                lifecycle: Lifecycle::new("partition"),
                apps,
                recent_errors: VecDeque::new(),
                bad_messages: 0,
                run_start: None,
                run_seconds: 0.0,
                next_seq: 1,
                policy: restart::Policy::of(&config.control),
                restart_attempts: 0,
                restarts: 0,
                ended_by: None,
            }),
            changed: Condvar::new(),
            socket: Mutex::new(socket),
            stop: AtomicBool::new(false),
            dead_after: Duration::from_millis(config.control.dead_after_ms),
            ping_every: Duration::from_millis(config.control.heartbeat_ms),
        });
        let s = Arc::clone(&shared);
        let monitor = std::thread::Builder::new()
            .name("controller".into())
            .spawn(move || {
                // Keep the transport (ZeroMQ context) alive as long as the socket.
                let _transport = transport;
                let mut msg = Received::default();
                let mut last_check = Instant::now();
                let mut last_ping = Instant::now();
                while !s.stop.load(Ordering::Acquire) {
                    let got = s.socket().recv(&mut msg, 20);
                    match got {
                        Ok(true) => {
                            s.on_message(&msg);
                            // Drain what is queued before judging anyone's silence: after a
                            // stall of this thread the heartbeats are here, only unread.
                            while matches!(s.socket().try_recv(&mut msg), Ok(true)) {
                                s.on_message(&msg);
                            }
                        }
                        Ok(false) => {}
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                    if last_check.elapsed() >= Duration::from_millis(50) {
                        s.check_liveness();
                        last_check = Instant::now();
                    }
                    if last_ping.elapsed() >= s.ping_every {
                        s.ping_all();
                        last_ping = Instant::now();
                    }
                }
            })?;
        Ok(Controller {
            shared,
            commands: Mutex::new(()),
            monitor: Some(monitor),
            config,
            program,
            endpoint,
            local_config: None,
            keys,
            summary: Mutex::new(None),
            last_failure: Mutex::new(None),
        })
    }

    /// Names `path` (the same configuration, written out) on the command line of every local
    /// application (`--config`): what it configures with if a command brings none, and a way
    /// to tell which partition a process belongs to.
    pub fn set_local_config_file(&mut self, path: PathBuf) {
        self.local_config = Some(path);
    }

    /// The control endpoint the applications connect to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Whether the supervisor reported that its L1 source reached the end of the run, or a
    /// logger halted (every output directory full: its heartbeat's error says why).
    pub fn run_finished(&self) -> bool {
        let t = self.shared.table();
        t.ended_by.is_some()
            || t.apps
                .iter()
                .any(|a| matches!(a.role, Role::Supervisor | Role::Logger) && a.finished)
    }

    /// Whether a logger halted (every output directory full; its heartbeat said so).
    fn run_halted(&self) -> bool {
        let t = self.shared.table();
        t.apps.iter().any(|a| a.role == Role::Logger && a.finished)
    }

    /// Every application's last summary (`None`: it gave none, e.g. it died), in
    /// dependency order: `(name, role, summary)`.
    pub fn summaries(&self) -> Vec<(String, Role, Option<AppSummary>)> {
        let t = self.shared.table();
        t.apps
            .iter()
            .map(|a| (a.name.clone(), a.role, a.summary.clone()))
            .collect()
    }

    /// The names of the applications that died, with why.
    pub fn dead_apps(&self) -> Vec<(String, String)> {
        let t = self.shared.table();
        t.apps
            .iter()
            .filter(|a| a.dead)
            .map(|a| (a.name.clone(), a.error.clone().unwrap_or_default()))
            .collect()
    }

    /// Seconds from the start of the run to its stop (or to now while it runs).
    pub fn run_seconds(&self) -> f64 {
        let t = self.shared.table();
        match (t.run_start, t.lifecycle.state()) {
            (Some(s), State::Running) => s.elapsed().as_secs_f64(),
            _ => t.run_seconds,
        }
    }

    /// The balance sheet from the applications' summaries (at disconnect): a logger or
    /// readout node without one is a problem; a DCM without one died and its events were
    /// reassigned.
    fn assemble(&self, t: &Table) -> RunSummary {
        let summaries: Vec<(String, AppSummary)> = t
            .apps
            .iter()
            .filter_map(|a| {
                let mut s = a.summary.clone()?;
                if let AppSummary::Ros(n) = &mut s {
                    n.restarted = a.restarted;
                }
                Some((a.name.clone(), s))
            })
            .collect();
        let missing: Vec<String> = t
            .apps
            .iter()
            .filter(|a| a.summary.is_none() && matches!(a.role, Role::Logger | Role::Ros))
            .map(|a| a.name.clone())
            .collect();
        let seconds = match (t.run_start, t.lifecycle.state()) {
            (Some(s), State::Running) => s.elapsed().as_secs_f64(),
            _ => t.run_seconds,
        };
        let mut s = RunSummary::assemble(
            self.config.run.number,
            Layout::new(&self.config).output,
            seconds,
            &summaries,
            &missing,
        );
        s.restarts = t.restarts;
        if let Some(why) = &t.ended_by {
            // Without the supervisor's counts the rest of rule 6 cannot hold: say why instead.
            s.ended_by = Some(why.clone());
            s.problems = vec![restart::in_flight_note(why, &s)];
        }
        s
    }

    /// The process of application `name` on this host (its ssh client for a remote one).
    pub fn local_pid(&self, name: &str) -> Option<u32> {
        let t = self.shared.table();
        t.apps
            .iter()
            .find(|a| a.name == name)
            .and_then(|a| a.child.as_ref().map(Child::id))
    }

    /// Spawns application `a` (here or over ssh). With CURVE keys, its first line of stdin
    /// is the keys (`--keys-stdin`): never on the command line, where `ps` would show them.
    fn spawn_one(&self, a: &App) -> std::io::Result<Child> {
        let hb = self.config.control.heartbeat_ms.to_string();
        let mut args = vec![
            "app",
            a.role.name(),
            "--name",
            &a.name,
            "--control",
            &self.endpoint,
            "--heartbeat-ms",
            &hb,
            "--exit-on-stdin-eof",
        ];
        if self.keys.is_some() {
            args.push("--keys-stdin");
        }
        let mut cmd = match &a.host {
            None => {
                let mut c = std::process::Command::new(&self.program);
                c.args(&args);
                if let Some(p) = &self.local_config {
                    c.arg("--config").arg(p);
                }
                c
            }
            Some(host) => {
                let ssh = &self.config.control.ssh;
                let mut c = std::process::Command::new(&ssh[0]);
                c.args(&ssh[1..]).arg(host);
                let mut remote = shell_quote(&self.config.control.remote_rodeo);
                for w in &args {
                    remote.push(' ');
                    remote.push_str(&shell_quote(w));
                }
                c.arg(remote);
                c
            }
        };
        // Own process group: a Ctrl-C at the terminal reaches the controller only, which
        // brings the partition down in order.
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()?;
        if let (Some(keys), Some(stdin)) = (&self.keys, child.stdin.as_mut()) {
            // A pipe holds far more than one line: this does not wait for the child.
            if let Err(e) = writeln!(stdin, "{}", keys.to_line()) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("cannot hand {} its CURVE keys on stdin: {e}", a.name),
                ));
            }
        }
        Ok(child)
    }

    /// `initialize`: spawns every application and waits for each one's hello.
    fn initialize(&self) -> Result<(), (String, String)> {
        let n = self.shared.table().apps.len();
        for i in 0..n {
            let mut t = self.shared.table();
            t.restart_attempts = 0;
            t.restarts = 0;
            t.ended_by = None;
            let a = &mut t.apps[i];
            a.dead = false;
            a.leaving = false;
            a.restart_at = None;
            a.restarted = false;
            a.rejoin_at = None;
            a.hello = false;
            a.error = None;
            a.summary = None;
            a.finished = false;
            a.last_heard = None;
            a.rate_base = None;
            a.metrics = None;
            match self.spawn_one(a) {
                Ok(mut c) => {
                    a.stdin = c.stdin.take();
                    a.child = Some(c);
                }
                Err(e) => {
                    let name = a.name.clone();
                    let how = match &a.host {
                        Some(h) => format!("cannot run ssh to {h}: {e}"),
                        None => format!("cannot spawn {}: {e}", self.program.display()),
                    };
                    a.state = State::Error;
                    a.error = Some(how.clone());
                    return Err((name, how));
                }
            }
        }
        let deadline = Instant::now() + Duration::from_millis(self.config.control.spawn_timeout_ms);
        let mut t = self.shared.table();
        loop {
            if let Some(a) = t.apps.iter().find(|a| a.dead) {
                return Err((a.name.clone(), a.error.clone().unwrap_or_default()));
            }
            if t.apps.iter().all(|a| a.hello) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                let a = t.apps.iter().find(|a| !a.hello).map(|a| a.name.clone());
                return Err((
                    a.unwrap_or_default(),
                    format!(
                        "no hello within {} ms of being started",
                        self.config.control.spawn_timeout_ms
                    ),
                ));
            }
            t = self
                .shared
                .changed
                .wait_timeout(t, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Sends `command` to application `i` and waits for its reply.
    fn send_command(
        &self,
        i: usize,
        command: Command,
        run: RunEnd,
        timeout: Duration,
    ) -> Result<State, String> {
        let (name, seq, rejoin_at) = {
            let mut t = self.shared.table();
            let seq = t.next_seq;
            t.next_seq += 1;
            let a = &mut t.apps[i];
            a.waiting = Some(seq);
            a.reply = None;
            let rejoin = if command == Command::Configure {
                a.rejoin_at.take()
            } else {
                None
            };
            (a.name.clone(), seq, rejoin)
        };
        let msg = ToApp::Command {
            seq,
            command,
            config: (command == Command::Configure).then(|| self.config.to_toml()),
            expect_cleared: run.l1_accepts,
            abandon_drain: run.abandon_drain,
            rejoin_at,
        };
        let sent = self
            .shared
            .socket()
            .try_send_to(name.as_bytes(), [Frame::Copy(&channel::encode(&msg))]);
        let deadline = Instant::now() + timeout;
        let mut t = self.shared.table();
        if let Err(e) = sent {
            t.apps[i].waiting = None;
            return Err(format!("cannot send {command}: {e}"));
        }
        loop {
            let a = &mut t.apps[i];
            if let Some((s, state, error)) = a.reply.take() {
                if s == seq {
                    return match error {
                        None => Ok(state),
                        Some(e) => Err(e),
                    };
                }
            }
            if a.dead {
                a.waiting = None;
                return Err(format!(
                    "died during {command}: {}",
                    a.error.clone().unwrap_or_default()
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                a.waiting = None;
                return Err(format!(
                    "no reply to {command} within {} ms",
                    timeout.as_millis()
                ));
            }
            t = self
                .shared
                .changed
                .wait_timeout(t, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// An up or down command through every live application, in dependency order.
    fn step(&self, command: Command) -> Result<(), (String, String)> {
        let n = self.shared.table().apps.len();
        let order: Vec<usize> = if command.is_downward() {
            (0..n).rev().collect()
        } else {
            (0..n).collect()
        };
        let timeout = Duration::from_millis(self.config.control.command_timeout_ms);
        let mut l1_accepts = None;
        for i in order {
            let (dead, role, name, restarted) = {
                let t = self.shared.table();
                let a = &t.apps[i];
                (a.dead, a.role, a.name.clone(), a.restarted)
            };
            if dead {
                continue;
            }
            let run = RunEnd {
                // A restarted node never sees the clears of the events before its rejoin.
                l1_accepts: (command == Command::Stop && role == Role::Ros && !restarted)
                    .then_some(l1_accepts)
                    .flatten(),
                // A logger halted (its disks are full): events it cannot write cannot be
                // decided, the supervisor's drain does not wait for them.
                abandon_drain: command == Command::Stop
                    && role == Role::Supervisor
                    && self.run_halted(),
            };
            self.send_command(i, command, run, timeout)
                .map_err(|e| (name.clone(), e))?;
            if command == Command::Stop && role == Role::Supervisor {
                let t = self.shared.table();
                if let Some(AppSummary::Supervisor(s)) = &t.apps[i].summary {
                    // Undecided events (a drain given up) are never cleared.
                    l1_accepts = Some(s.l1_accepts.saturating_sub(s.undecided));
                }
            }
        }
        Ok(())
    }

    /// `shutdown` (and the teardown on drop): every live application walked down to NONE,
    /// then its stdin closed, then whatever is left killed.
    fn teardown(&self) {
        let n = self.shared.table().apps.len();
        let timeout = Duration::from_millis(self.config.control.command_timeout_ms.min(10_000));
        for i in (0..n).rev() {
            let (alive, from) = {
                let t = self.shared.table();
                let a = &t.apps[i];
                (!a.dead && a.hello && a.child.is_some(), a.state)
            };
            if alive {
                let path = Command::path(from, State::None).unwrap_or(vec![Command::Shutdown]);
                for c in path {
                    if c == Command::Shutdown {
                        self.shared.table().apps[i].leaving = true;
                    }
                    if self.send_command(i, c, RunEnd::default(), timeout).is_err() {
                        break;
                    }
                }
            }
            let mut t = self.shared.table();
            let a = &mut t.apps[i];
            a.leaving = true;
            if let Some(mut s) = a.stdin.take() {
                let _ = s.flush();
            }
        }
        // Grace period, then kill.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut t = self.shared.table();
            let mut left = 0;
            for a in t.apps.iter_mut() {
                if let Some(c) = a.child.as_mut() {
                    match c.try_wait() {
                        Ok(Some(_)) | Err(_) => a.child = None,
                        Ok(None) if Instant::now() >= deadline => {
                            let _ = c.kill();
                            let _ = c.wait();
                            a.child = None;
                        }
                        Ok(None) => left += 1,
                    }
                }
            }
            if left == 0 {
                break;
            }
            drop(t);
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut t = self.shared.table();
        for a in t.apps.iter_mut() {
            if !a.dead {
                a.state = State::None;
            }
            a.hello = false;
        }
    }
}

impl RunControl for Controller {
    fn status(&self) -> PartitionStatus {
        let t = self.shared.table();
        let totals = crate::rates::Totals::of(t.apps.iter().filter_map(|a| a.metrics.as_ref()));
        let rate = |role: Role| -> f64 {
            t.apps
                .iter()
                .filter(|a| a.role == role && !a.dead)
                .map(|a| a.rate_hz)
                .sum()
        };
        let state = t.lifecycle.state();
        PartitionStatus {
            partition: t.lifecycle.who().to_string(),
            state,
            error: t.lifecycle.error().map(str::to_string),
            run_number: self.config.run.number,
            run_seconds: match (t.run_start, state) {
                (Some(s), State::Running) => s.elapsed().as_secs_f64(),
                _ => 0.0,
            },
            l1_rate_hz: rate(Role::Supervisor),
            event_rate_hz: rate(Role::Dcm),
            write_rate_hz: rate(Role::Logger),
            l1_accepts: totals.l1_accepts,
            events_written: totals.written,
            restarts: if state == State::Running {
                t.restarts
            } else {
                0
            },
            apps: t
                .apps
                .iter()
                .map(|a| AppStatus {
                    name: a.name.clone(),
                    role: a.role.name().into(),
                    state: a.state,
                    error: a.error.clone(),
                    host: a.host.clone(),
                    pid: a.pid,
                    heartbeat_age_ms: a.last_heard.map(|h| h.elapsed().as_millis() as u64),
                    rate_hz: a.rate_hz,
                    restarts: a.restarts,
                })
                .collect(),
            recent_errors: t.recent_errors.iter().cloned().collect(),
        }
    }

    fn command(&self, command: Command) -> Result<State, TransitionError> {
        let _serial = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        let from = {
            let mut t = self.shared.table();
            t.lifecycle.check(command)?;
            if command == Command::Start {
                // A service runs many runs in one partition: restarts are counted per run.
                t.restart_attempts = 0;
                t.restarts = 0;
            }
            t.lifecycle.state()
        };
        let result = match command {
            Command::Initialize => self.initialize(),
            Command::Shutdown => {
                self.teardown();
                Ok(())
            }
            c => self.step(c),
        };
        let mut t = self.shared.table();
        match result {
            Ok(()) => {
                if command == Command::Start {
                    t.run_start = Some(Instant::now());
                }
                if command == Command::Stop {
                    t.run_seconds = t.run_start.map_or(0.0, |s| s.elapsed().as_secs_f64());
                }
                if command == Command::Disconnect {
                    let s = self.assemble(&t);
                    *self.summary.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
                }
                // An application may have died meanwhile: the partition may be in ERROR.
                let r = t.lifecycle.apply(command, || Ok::<(), String>(()));
                if t.lifecycle.state() == State::Error {
                    let why = t.lifecycle.error().unwrap_or_default().to_string();
                    *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(TransitionError::Failed {
                            who: "partition".into(),
                            command,
                            from,
                            reason: why,
                        });
                }
                r
            }
            Err((who, reason)) => {
                t.lifecycle
                    .fail(format!("{command} failed in {who}: {reason}"));
                t.record(format!("{command} failed in {who}: {reason}"));
                let e = TransitionError::Failed {
                    who,
                    command,
                    from,
                    reason,
                };
                *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                Err(e)
            }
        }
    }

    fn config_toml(&self) -> String {
        self.config.to_toml_public()
    }

    fn write_metrics(&self, out: &mut MetricsWriter) {
        let st = self.status();
        let t = self.shared.table();
        let apps: Vec<(&str, Option<&AppMetrics>)> = t
            .apps
            .iter()
            .map(|a| (a.name.as_str(), a.metrics.as_ref()))
            .collect();
        write_partition_metrics(
            out,
            &st,
            &apps,
            PartitionExtras {
                bad_control_messages: t.bad_messages,
                shm_backpressure: t.apps.iter().map(|a| a.shm_backpressure).sum(),
                oversized_messages: t.apps.iter().map(|a| a.oversized_messages).sum::<u64>()
                    + rodeo_transport::socket::oversized_count(),
                // The controller's own (control channel) refusals and every application's.
                auth_refused: rodeo_transport::curve::refused_count()
                    + t.apps.iter().map(|a| a.auth_refused).sum::<u64>(),
            },
        );
    }
}

impl Partition for Controller {
    fn partition_state(&self) -> State {
        self.shared.table().lifecycle.state()
    }

    fn run_ended(&self) -> bool {
        self.run_finished()
    }

    fn progress(&self) -> (u64, f64) {
        let t = self.shared.table();
        let l1 =
            crate::rates::Totals::of(t.apps.iter().filter_map(|a| a.metrics.as_ref())).l1_accepts;
        drop(t);
        (l1, self.run_seconds())
    }

    fn take_summary(&self) -> Option<RunSummary> {
        self.summary
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    fn last_failure(&self) -> Option<TransitionError> {
        self.last_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn run_limit_seconds(&self) -> f64 {
        self.config.run.seconds
    }

    fn maintain(&self) {
        self.restart_due();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let state = self.shared.table().lifecycle.state();
        if state != State::None {
            self.teardown();
        }
        self.shared.stop.store(true, Ordering::Release);
        if let Some(m) = self.monitor.take() {
            let _ = m.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("/usr/bin/rodeo"), "/usr/bin/rodeo");
        assert_eq!(shell_quote("tcp://10.0.0.1:4000"), "tcp://10.0.0.1:4000");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn a_controller_refuses_illegal_commands_naming_its_state() {
        let c = Controller::new(PartitionConfig::default(), PathBuf::from("/nonexistent")).unwrap();
        assert!(c.endpoint().starts_with("tcp://127.0.0.1:"));
        let e = c.command(Command::Start).unwrap_err();
        assert!(e.to_string().contains("NONE"), "{e}");
        assert_eq!(c.status().state, State::None);
        // Spawning a program that does not exist fails naming the first application.
        let e = c.command(Command::Initialize).unwrap_err();
        assert_eq!(e.who(), "logger-1");
        assert_eq!(c.status().state, State::Error);
        assert!(c.status().error.unwrap().contains("logger-1"));
        assert_eq!(c.command(Command::Shutdown).unwrap(), State::None);
    }
}
