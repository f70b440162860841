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
//! process (or its ssh client) exits unasked, or when it is silent for `control.dead_after_ms`
//! (an application sends a heartbeat every period, and `Busy` while a command runs, so a
//! process frozen during a command is dead too, its command's wait ended), or when its local
//! process is stopped for as long before its hello. A dead DCM is survivable
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
//! so a frozen controller leaves no application running). It alone owns the control
//! socket: commands are serialised by their own mutex, posted to the monitor's outbox (which
//! rings an inproc bell the monitor waits on beside the control socket, so a command goes out
//! at once) and wait on a condition variable for their reply, so status and metrics never wait
//! for a command. Dropping the controller shuts everything down.
//!
//! # Files
//!
//! Here: [`Controller`], made with its monitor thread, and its queries. `state`: what the
//! controller knows of each application and of the partition (the table) and what it shares
//! with the monitor thread (`ControllerState`); `monitor`: that thread (messages in,
//! liveness, pings); `processes`: spawning the applications here or over ssh, and their
//! teardown; `commands`: one command to one application, and a step through all of them;
//! `run_control`: [`RunControl`] and [`Partition`] for the controller, and the run's balance
//! sheet; `restart`: the answer to a death during a run.
//!
//! [`RunControl`]: crate::run_control::RunControl
//! [`Partition`]: crate::run_control::Partition
//! [`ToApp::Ping`]: crate::channel::ToApp::Ping

use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rodeo_transport::curve::PartitionKeys;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{SocketKind, Transport, TransportError};

use crate::application::Role;
use crate::config::PartitionConfig;
use crate::lifecycle::{State, TransitionError};
use crate::summary::{AppSummary, RunSummary};

mod as_partition;
mod commands;
mod monitor;
mod processes;
mod restart;
mod state;

use state::{App, ControllerState, Outbox, Policy, Table};

/// Numbers the controllers' inproc bell endpoints (one per controller in this process).
static BELLS: AtomicU64 = AtomicU64::new(0);

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

/// A partition of `rodeo app` processes under lifecycle control (module docs).
pub struct Controller {
    state: Arc<ControllerState>,
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

impl Controller {
    /// A controller for `config` in NONE, listening for its applications on
    /// `tcp://<control.address>:*`. `program` is the local rodeo executable. With
    /// `transport.curve`, the partition's CURVE keys are made here: the control channel and
    /// every tcp socket of the applications authenticate with them; with an encrypted stream
    /// ([`TransportConfig::stream_tls`](crate::config::TransportConfig::stream_tls)) its TLS
    /// keys too.
    pub fn new(config: PartitionConfig, program: PathBuf) -> Result<Controller, ControllerError> {
        config.validate()?;
        // What runs whose processes are gone left (their controller was killed).
        crate::leftovers::remove_stale_runtime_dirs();
        let keys = config.transport.partition_keys()?;
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
                let host = config.hosts.get(&name).cloned();
                Some(App::new(name, role, host))
            })
            .collect();
        // The outbox's bell: commands are posted to the monitor thread, which owns the
        // control socket (`monitor::run`).
        let door = transport.socket(SocketKind::Router)?;
        let bell_at = door.bind(&Endpoint::parse(&format!(
            "inproc://rodeo-controller-bell-{}",
            BELLS.fetch_add(1, Ordering::Relaxed)
        ))?)?;
        let bell = transport.socket(SocketKind::Dealer)?;
        bell.connect(&Endpoint::parse(&bell_at)?)?;
        let state = Arc::new(ControllerState {
            table: Mutex::new(Table::new(apps, Policy::of(&config.control))),
            changed: Condvar::new(),
            outbox: Mutex::new(Outbox {
                queue: Vec::new(),
                bell,
            }),
            stop: AtomicBool::new(false),
            dead_after: Duration::from_millis(config.control.dead_after_ms),
            ping_every: Duration::from_millis(config.control.heartbeat_ms),
        });
        let s = Arc::clone(&state);
        let monitor = std::thread::Builder::new()
            .name("controller".into())
            .spawn(move || monitor::run(&s, transport, socket, door))?;
        Ok(Controller {
            state,
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
        let t = self.state.table();
        t.ended_by.is_some()
            || t.apps
                .iter()
                .any(|a| matches!(a.role, Role::Supervisor | Role::Logger) && a.finished)
    }

    /// Whether a logger halted (every output directory full; its heartbeat said so) or is
    /// dead at the stop (its restart, if one was due, is given up for the stop): the events
    /// its DCMs hold for it cannot be written, the supervisor's drain does not wait for them.
    /// A logger killed, then a stop during its restart's back-off, waited out the whole
    /// 30 s drain (a QA pass).
    fn run_halted(&self) -> bool {
        let t = self.state.table();
        t.apps
            .iter()
            .any(|a| a.role == Role::Logger && (a.finished || a.dead))
    }

    /// Every application's last summary (`None`: it gave none, e.g. it died), in
    /// dependency order: `(name, role, summary)`.
    pub fn summaries(&self) -> Vec<(String, Role, Option<AppSummary>)> {
        let t = self.state.table();
        t.apps
            .iter()
            .map(|a| (a.name.clone(), a.role, a.summary.clone()))
            .collect()
    }

    /// The names of the applications that died, with why.
    pub fn dead_apps(&self) -> Vec<(String, String)> {
        let t = self.state.table();
        t.apps
            .iter()
            .filter(|a| a.dead)
            .map(|a| (a.name.clone(), a.error.clone().unwrap_or_default()))
            .collect()
    }

    /// Seconds from the start of the run to its stop (or to now while it runs).
    pub fn run_seconds(&self) -> f64 {
        let t = self.state.table();
        match (t.run_start, t.lifecycle.state()) {
            (Some(s), State::Running) => s.elapsed().as_secs_f64(),
            _ => t.run_seconds,
        }
    }

    /// The process of application `name` on this host (its ssh client for a remote one).
    pub fn local_pid(&self, name: &str) -> Option<u32> {
        let t = self.state.table();
        t.apps
            .iter()
            .find(|a| a.name == name)
            .and_then(|a| a.child.as_ref().map(Child::id))
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let state = self.state.table().lifecycle.state();
        if state != State::None {
            self.teardown();
        }
        self.state.stop.store(true, Ordering::Release);
        if let Some(m) = self.monitor.take() {
            let _ = m.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::Command;
    use crate::run_control::RunControl;

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

    /// A command that found no connection to its application (a killed one's goes before its
    /// process's end is seen) waits for the application's death to be seen, at most twice the
    /// heartbeat's dead time, before it counts as a failure; any other failure does not wait.
    #[test]
    fn a_command_that_finds_no_peer_waits_for_the_death_to_be_seen() {
        use crate::application::RunEnd;
        let mut config = PartitionConfig::default();
        config.control.heartbeat_ms = 100;
        config.control.dead_after_ms = 1000;
        let c = Controller::new(config, PathBuf::from("/nonexistent")).unwrap();
        let e = c
            .send_command(0, Command::Stop, RunEnd::default(), Duration::from_secs(5))
            .unwrap_err();
        assert!(e.starts_with(commands::SEND_FAILED), "{e}");
        // Nobody sees it die: a failure, after the wait.
        let asked = std::time::Instant::now();
        assert!(!c.dead_or_gone(0, &e));
        let waited = asked.elapsed();
        assert!(waited >= Duration::from_millis(2000), "{waited:?}");
        // Another failure is not waited on.
        let asked = std::time::Instant::now();
        assert!(!c.dead_or_gone(0, "no reply to stop within 5 ms"));
        assert!(asked.elapsed() < Duration::from_millis(100));
        // Its death seen while the command waits: skipped as dead.
        let state = Arc::clone(&c.state);
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            state
                .table()
                .dead(0, "its process exited (signal 9)".into());
            state.changed.notify_all();
        });
        assert!(c.dead_or_gone(0, &e));
        killer.join().unwrap();
    }

    /// A command goes through the monitor's outbox to its application and the reply comes
    /// back; one to an application that is not connected fails at once naming the send, not
    /// after the command's timeout.
    #[test]
    fn commands_go_out_through_the_monitor_and_unsendable_ones_fail_at_once() {
        use crate::application::RunEnd;
        use crate::channel::{self, ToApp, ToController};
        use rodeo_transport::socket::{Frame, Received};

        let c = Controller::new(PartitionConfig::default(), PathBuf::from("/nonexistent")).unwrap();
        let timeout = Duration::from_secs(30);
        let asked = std::time::Instant::now();
        let e = c
            .send_command(0, Command::Configure, RunEnd::default(), timeout)
            .unwrap_err();
        assert!(e.contains("cannot send configure"), "{e}");
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "{:?}",
            asked.elapsed()
        );

        // An application of our own: a DEALER named as the first application.
        let (name, _transport, mut app) = fake_app(&c);
        let answer = std::thread::spawn(move || {
            let mut msg = Received::default();
            // The router learns our name from our first message.
            let hello = ToController::Hello {
                name: name.clone(),
                role: "logger".into(),
                pid: 1,
                state: State::Initial,
            };
            app.try_send([Frame::Copy(&channel::encode(&hello))])
                .unwrap();
            loop {
                assert!(app.recv(&mut msg, 20_000).unwrap(), "no command came");
                if let Ok(ToApp::Command { seq, command, .. }) =
                    channel::decode::<ToApp>(&msg.bytes)
                {
                    assert_eq!(command, Command::Configure);
                    let reply = ToController::Reply {
                        seq,
                        state: State::Configured,
                        error: None,
                        summary: None,
                    };
                    app.try_send([Frame::Copy(&channel::encode(&reply))])
                        .unwrap();
                    return;
                }
            }
        });
        // Until the hello is in, the send may still find no such peer.
        let state = loop {
            match c.send_command(0, Command::Configure, RunEnd::default(), timeout) {
                Ok(s) => break s,
                Err(e) if e.contains("cannot send") && asked.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(state, State::Configured);
        answer.join().unwrap();
    }

    /// An application that falls silent during a command (frozen) is dead after `dead_after`
    /// and the command's wait ends then, not at its timeout; one that says `Busy` lives on
    /// while its command takes longer than `dead_after`.
    #[test]
    fn a_silent_application_dies_during_a_command_and_a_busy_one_lives() {
        use crate::application::RunEnd;
        use crate::channel::{self, ToApp, ToController};
        use rodeo_transport::socket::{Frame, Received};

        let mut config = PartitionConfig::default();
        config.control.heartbeat_ms = 100;
        config.control.dead_after_ms = 1000;
        config.control.restart = false;
        let c = Controller::new(config, PathBuf::from("/nonexistent")).unwrap();
        let (name, _transport, mut app) = fake_app(&c);
        let (release, released) = std::sync::mpsc::channel::<()>();
        let fake = std::thread::spawn(move || {
            let send = |app: &mut rodeo_transport::socket::Socket, m: &ToController| {
                let _ = app.try_send([Frame::Copy(&channel::encode(m))]);
            };
            let hello = ToController::Hello {
                name,
                role: "logger".into(),
                pid: 1,
                state: State::Initial,
            };
            send(&mut app, &hello);
            let mut msg = Received::default();
            loop {
                if !app.recv(&mut msg, 20_000).unwrap() {
                    return;
                }
                let Ok(ToApp::Command { seq, command, .. }) = channel::decode(&msg.bytes) else {
                    continue;
                };
                if command != Command::Configure {
                    // Frozen: no beat, no reply, the connection open until released.
                    let _ = released.recv_timeout(Duration::from_secs(60));
                    return;
                }
                // Busy for 1.5 s, longer than `dead_after`, then the reply.
                for _ in 0..15 {
                    send(&mut app, &ToController::Busy { seq });
                    std::thread::sleep(Duration::from_millis(100));
                }
                let reply = ToController::Reply {
                    seq,
                    state: State::Configured,
                    error: None,
                    summary: None,
                };
                send(&mut app, &reply);
            }
        });
        let timeout = Duration::from_secs(30);
        let state = loop {
            match c.send_command(0, Command::Configure, RunEnd::default(), timeout) {
                Ok(s) => break s,
                Err(e) if e.contains("cannot send") => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(state, State::Configured);
        let asked = std::time::Instant::now();
        let e = c
            .send_command(0, Command::Connect, RunEnd::default(), timeout)
            .unwrap_err();
        let waited = asked.elapsed();
        assert!(e.starts_with("died during connect"), "{e}");
        assert!(waited < Duration::from_secs(10), "{waited:?}: {e}");
        let _ = release.send(());
        fake.join().unwrap();
    }

    /// A DEALER connected to `c`'s control socket under the name of its first application
    /// (the name, the transport that must outlive it, the socket).
    fn fake_app(c: &Controller) -> (String, Transport, rodeo_transport::socket::Socket) {
        let name = c.state.table().apps[0].name.clone();
        let transport = Transport::new(1).unwrap();
        let app = transport.socket(SocketKind::Dealer).unwrap();
        app.set_identity(name.as_bytes()).unwrap();
        app.connect(&Endpoint::parse(c.endpoint()).unwrap())
            .unwrap();
        (name, transport, app)
    }
}
