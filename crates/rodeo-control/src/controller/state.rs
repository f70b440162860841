//! What the controller knows: every application ([`App`]) and the partition ([`Table`]:
//! lifecycle, recent errors, the run's restarts and the restart [`Policy`]) behind one mutex,
//! and [`ControllerState`], what the controller shares with its monitor thread (the table, the
//! control socket, the condition variable commands wait on).

use std::collections::VecDeque;
use std::process::{Child, ChildStdin};
use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rodeo_transport::socket::{Frame, Socket};

use crate::application::Role;
use crate::config::ControlSection;
use crate::lifecycle::{Command, Lifecycle, State};
use crate::metrics::AppMetrics;
use crate::summary::{AppSummary, EarlierLives};

/// How many recent errors the status keeps.
const RECENT_ERRORS: usize = 32;
/// After a hold-up of the controller, deaths within `dead_after` and this much are its own.
const HELD_UP_MARGIN: Duration = Duration::from_secs(5);

/// What the controller knows of one application.
#[derive(Debug)]
pub(super) struct App {
    pub(super) name: String,
    pub(super) role: Role,
    pub(super) host: Option<String>,
    pub(super) child: Option<Child>,
    pub(super) stdin: Option<ChildStdin>,
    pub(super) pid: Option<u32>,
    pub(super) state: State,
    pub(super) error: Option<String>,
    pub(super) hello: bool,
    pub(super) last_heard: Option<Instant>,
    pub(super) metrics: Option<AppMetrics>,
    pub(super) shm_backpressure: u64,
    pub(super) shm_undelivered: u64,
    pub(super) oversized_messages: u64,
    /// Handshakes its CURVE servers refused (its heartbeat's count).
    pub(super) auth_refused: u64,
    pub(super) rate_base: Option<(Instant, u64)>,
    pub(super) rate_hz: f64,
    pub(super) finished: bool,
    /// The command in flight with this application (its seq).
    pub(super) waiting: Option<u64>,
    /// Which command that is (set with `waiting`).
    pub(super) waiting_for: Option<Command>,
    /// Since when its local process has been stopped (SIGSTOP) before its hello (`None`: it
    /// is not, or it said hello: then its heartbeats tell).
    pub(super) stopped_since: Option<Instant>,
    pub(super) reply: Option<(u64, State, Option<String>)>,
    pub(super) summary: Option<AppSummary>,
    pub(super) dead: bool,
    /// Asked to leave: its exit is expected.
    pub(super) leaving: bool,
    /// Dead, to be restarted into the run at this time (`restart`).
    pub(super) restart_at: Option<Instant>,
    /// Restarted into the run (it saw part of it only).
    pub(super) restarted: bool,
    /// Restarts after a death since the partition came up (`rodeo_app_restarts_total`).
    pub(super) restarts: u64,
    /// With its next `configure`: the event it rejoins the run at.
    pub(super) rejoin_at: Option<u64>,
    /// A readout node's lives in this run before its current one ([`App::end_life`]).
    pub(super) earlier_lives: Option<EarlierLives>,
}

impl App {
    /// Application `name` (`role`, on `host` or here) as it is before it is spawned: NONE,
    /// never heard from.
    pub(super) fn new(name: String, role: Role, host: Option<String>) -> App {
        App {
            host,
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
            shm_undelivered: 0,
            oversized_messages: 0,
            auth_refused: 0,
            rate_base: None,
            rate_hz: 0.0,
            finished: false,
            waiting: None,
            waiting_for: None,
            stopped_since: None,
            reply: None,
            summary: None,
            dead: false,
            leaving: false,
            restart_at: None,
            restarted: false,
            restarts: 0,
            rejoin_at: None,
            earlier_lives: None,
        }
    }

    /// Before a restart into the run: a readout node's dead life, with its last heartbeat's
    /// counters, goes into `earlier_lives` (its next life counts from 0, and the balance sheet
    /// gives both); the heartbeat's counters are then cleared.
    pub(super) fn end_life(&mut self) {
        if self.role == Role::Ros {
            let e = self.earlier_lives.get_or_insert_with(EarlierLives::default);
            e.lives += 1;
            match &self.metrics {
                Some(AppMetrics::Ros(m)) => {
                    e.requests += m.requests;
                    e.cleared += m.cleared_l1ids;
                    e.stored += m.input_fragments;
                    e.lost_fragments += m.lost_fragments;
                }
                _ => e.unheard += 1,
            }
        }
        self.metrics = None;
    }
}

/// What the controller knows of the partition: its lifecycle, every application, the recent
/// errors and the run's restarts, behind [`ControllerState::table`].
#[derive(Debug)]
pub(super) struct Table {
    pub(super) lifecycle: Lifecycle,
    pub(super) apps: Vec<App>,
    pub(super) recent_errors: VecDeque<String>,
    pub(super) bad_messages: u64,
    pub(super) run_start: Option<Instant>,
    pub(super) run_seconds: f64,
    pub(super) next_seq: u64,
    /// The restart policy (`control.restart`, ...) and this run's restarts (`restart`).
    pub(super) policy: Policy,
    /// Restarts attempted in this run, and those that brought the application back.
    pub(super) restart_attempts: u32,
    pub(super) restarts: u64,
    /// Why the run ends early: the supervisor died while it ran (module docs).
    pub(super) ended_by: Option<String>,
    /// The end of the monitor's last stall: no silence before it counts (`check_liveness`).
    pub(super) listening_since: Option<Instant>,
    /// A logger died while the supervisor's `stop` ran: the monitor tells the supervisor's
    /// drain to give up (`send_abandon`).
    pub(super) abandon_due: bool,
    /// A `stop` is asked for (from when it is asked, before it has the commands' lock, or an
    /// interrupt came, until the next `start`): a restart waiting for its process's hello gives up, so
    /// the stop does not wait behind it (it waited up to `control.spawn_timeout_ms`, Ctrl-C
    /// unheard).
    pub(super) stop_wanted: bool,
    /// The controller itself was held up past `dead_after` (noticed then, for how long): its
    /// applications leave on their own after that silence, so the deaths that follow are its
    /// own (`held_up`).
    pub(super) held_up: Option<(Instant, Duration)>,
}

impl Table {
    /// The monitor noticed it was held up for `late`, at least `dead_after`: the applications
    /// will have walked down on their own ("no message from the controller"), so the deaths it
    /// sees within `dead_after` and a margin from now are said to be the controller's (the
    /// sheet blamed "dcm-2 is dead: its process exited" and restarts were scheduled for
    /// applications that had left on purpose: a QA pass, 2026-12-08), and none is restarted.
    pub(super) fn held_up(&mut self, late: Duration, dead_after: Duration) {
        // A warning only: applications held up as long (the whole machine frozen) count
        // their own stall and stay.
        tracing::warn!(
            "the controller was held up for {} ms, past control.dead_after_ms ({} ms) after \
             which its applications leave on their own unless they were held up as well",
            late.as_millis(),
            dead_after.as_millis()
        );
        self.held_up = Some((Instant::now() + dead_after + HELD_UP_MARGIN, late));
    }

    /// How long the controller was held up, when the deaths seen now are its own.
    fn held_up_now(&self) -> Option<Duration> {
        self.held_up
            .filter(|(until, _)| Instant::now() < *until)
            .map(|(_, late)| late)
    }

    /// Whether a `stop` is in flight with the supervisor (its drain runs).
    pub(super) fn supervisor_stopping(&self) -> bool {
        self.apps.iter().any(|a| {
            a.role == Role::Supervisor
                && a.waiting.is_some()
                && a.waiting_for == Some(Command::Stop)
        })
    }

    /// The table of a partition in NONE with applications `apps` and the restart `policy`.
    pub(super) fn new(apps: Vec<App>, policy: Policy) -> Table {
        Table {
            lifecycle: Lifecycle::new("partition"),
            apps,
            recent_errors: VecDeque::new(),
            bad_messages: 0,
            run_start: None,
            run_seconds: 0.0,
            next_seq: 1,
            policy,
            restart_attempts: 0,
            restarts: 0,
            ended_by: None,
            listening_since: None,
            abandon_due: false,
            stop_wanted: false,
            held_up: None,
        }
    }

    /// Keeps `e` among the recent errors (the last [`RECENT_ERRORS`]) and logs it, so that the
    /// log names every death, restart and failure of the run as it happens.
    pub(super) fn record(&mut self, e: String) {
        tracing::warn!("{e}");
        if self.recent_errors.len() == RECENT_ERRORS {
            self.recent_errors.pop_front();
        }
        self.recent_errors.push_back(e);
    }

    /// Marks application `i` dead and applies the policy (module docs of `controller`; a
    /// restart or the end of the run by `restart`).
    pub(super) fn dead(&mut self, i: usize, why: String) {
        let a = &mut self.apps[i];
        if a.dead {
            return;
        }
        a.dead = true;
        a.state = State::Error;
        a.error = Some(why.clone());
        let (name, role) = (a.name.clone(), a.role);
        self.record(format!("{name} ({role}) is dead: {why}"));
        // The events the supervisor's drain waits for may need this logger: they cannot be
        // written now (the drain waited its whole timeout, 30 s, for a logger killed or
        // frozen during the stop).
        if role == Role::Logger && self.supervisor_stopping() {
            self.abandon_due = true;
        }
        if role == Role::Ros && self.stop_wanted && self.lifecycle.state() != State::Running {
            // Once the run has stopped (its disconnect, which hands the summaries back) a
            // readout node is too late for a restart, as one whose restart was still due at
            // the stop: its row is made from its last heartbeat (`died_at_stop`). It failed
            // the run with "ended without its summary" while the counts all stood (a QA
            // pass: a kill 4.10-4.15 s into a 4 s run).
            self.apps[i]
                .restart_at
                .get_or_insert_with(std::time::Instant::now);
        }
        if let Some(late) = self.held_up_now() {
            // It left because the controller was silent: no restart, and the reason is the
            // controller's.
            let ps = self.lifecycle.state();
            if ps != State::None && ps != State::Error {
                self.lifecycle.fail(format!(
                    "the controller was held up for {} ms (a frozen or overloaded machine?), \
                     longer than its applications wait for it: they left ({name}: {why})",
                    late.as_millis()
                ));
            }
            return;
        }
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

/// The restart policy of a partition (`[control]`), applied by `restart`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Policy {
    /// `control.restart`.
    pub(super) enabled: bool,
    /// `control.max_restarts_per_run`.
    pub(super) max: u32,
    /// `control.restart_backoff_ms`.
    pub(super) backoff: Duration,
}

impl Policy {
    /// The policy of `c`.
    pub(super) fn of(c: &ControlSection) -> Policy {
        Policy {
            enabled: c.restart,
            max: c.max_restarts_per_run,
            backoff: Duration::from_millis(c.restart_backoff_ms),
        }
    }
}

/// A message for one application, posted by a commanding thread for the monitor thread to
/// send (it alone owns the control socket).
pub(super) struct Outgoing {
    /// The application's index in the table and its name (the ROUTER's peer identity).
    pub(super) app: usize,
    pub(super) peer: String,
    /// The command's sequence number and the command: a send that fails is its reply.
    pub(super) seq: u64,
    pub(super) command: Command,
    pub(super) bytes: Vec<u8>,
}

/// Messages posted for the monitor thread to send, and the bell that wakes it: a DEALER on an
/// inproc endpoint whose ROUTER end the monitor waits on beside the control socket.
pub(super) struct Outbox {
    pub(super) queue: Vec<Outgoing>,
    pub(super) bell: Socket,
}

/// What the controller and its monitor thread share: the table, the outbox, the condition
/// variable commands wait on for replies, and the monitor's settings.
pub(super) struct ControllerState {
    pub(super) table: Mutex<Table>,
    pub(super) changed: Condvar,
    pub(super) outbox: Mutex<Outbox>,
    pub(super) stop: AtomicBool,
    pub(super) dead_after: Duration,
    /// How often every application gets a ping.
    pub(super) ping_every: Duration,
}

impl ControllerState {
    /// The table (a poisoned lock is taken over: the table stays consistent per message).
    pub(super) fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits with the table `t` for a change (a reply, a hello, a death) until `deadline`:
    /// `Ok` with the table again after a wait (notified or timed out), `Err` with it as it was
    /// when the deadline had already passed, for the caller to say what did not come.
    pub(super) fn wait_changed<'a>(
        &self,
        t: MutexGuard<'a, Table>,
        deadline: Instant,
    ) -> Result<MutexGuard<'a, Table>, MutexGuard<'a, Table>> {
        let now = Instant::now();
        if now >= deadline {
            return Err(t);
        }
        Ok(self
            .changed
            .wait_timeout(t, deadline - now)
            .unwrap_or_else(|p| p.into_inner())
            .0)
    }

    /// Queues `out` for the monitor thread and rings its bell. A ring that cannot go (the
    /// bell's queue full: the monitor is behind) loses nothing: the monitor looks at the
    /// queue on every turn, at the latest after its wait.
    pub(super) fn post(&self, out: Outgoing) {
        let mut o = self.outbox.lock().unwrap_or_else(|p| p.into_inner());
        o.queue.push(out);
        let _ = o.bell.try_send([Frame::Copy(&[1])]);
    }

    /// The messages posted since the last call (the monitor thread's, to send).
    pub(super) fn take_posted(&self) -> Vec<Outgoing> {
        let mut o = self.outbox.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut o.queue)
    }
}
