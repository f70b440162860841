//! The controller's answer to a death during a run (process mode): restart and rejoin, or an
//! orderly end.
//!
//! # Restart (`[control] restart`, `max_restarts_per_run`, `restart_backoff_ms`)
//!
//! A readout node or logger that dies while the partition runs is not a failure of the
//! partition: it is scheduled for a restart after the back-off, reported in the status and the
//! recent errors. The run's driver ([`run_to_end`](crate::run_control::run_to_end), through
//! [`Partition::maintain`](crate::run_control::Partition::maintain)) performs due restarts under
//! the command lock: the old process (if still there) is killed, a new one spawned, and once
//! it said hello it is configured, connected and started, so it joins at RUNNING. A readout
//! node is configured with `rejoin_at`, the run's L1 accepts so far plus what the L1 issues in
//! [`REJOIN_AHEAD`] at its last measured rate (the heartbeat's age): its emulated inputs start
//! there, at the current L1ID. The L1 runs on while the node starts (faster while the DCMs
//! skip it), so its first fragments may be of events already decided, whose clears went to
//! nobody: the node releases those itself (`rodeo_ros::server::rejoin`), or they would fill
//! its store and every later event would be partial. A logger recovers the files its previous life left open
//! (`rodeo_files::recover`). Meanwhile the DCMs build events without the node's ROBs
//! (PARTIAL_EVENT) or keep the logger's unacknowledged events and send them again
//! (`rodeo_dataflow::dcm::faults`).
//!
//! Each attempt counts against `max_restarts_per_run`; an attempt that fails is retried after
//! the back-off while the budget lasts. With the budget spent (or `restart = false`) a death
//! fails the partition as before. A DCM is not restarted: the supervisor reassigns its events
//! and the run goes on with the others (the last DCM's death fails the partition).
//!
//! # The supervisor's death
//!
//! Without the supervisor no event is assigned, decided or cleared: the run cannot go on, and
//! restarting it would lose the count of what was assigned. Its death ends the run in order
//! instead: the run's driver sees the end ([`Controller::run_finished`]), stops and
//! disconnects every other application (files closed, summaries handed back), and the balance
//! sheet says why the run ended and how many events were in flight in the DCMs (they stay
//! undecided: the run does not balance and exits non-zero).

use std::time::{Duration, Instant};

use crate::application::{Role, RunEnd};
use crate::lifecycle::{Command, State};
use crate::summary::RunSummary;

use super::state::Table;
use super::Controller;

/// Why a restart gave up waiting for its process: a stop was asked for.
const STOPPING: &str = "the run is stopping: the restart gives up";

/// A restarted readout node starts this far ahead of the L1 (at the L1 rate last measured).
const REJOIN_AHEAD: Duration = Duration::from_millis(250);
/// ... and at least this many events ahead.
const REJOIN_AHEAD_MIN_EVENTS: u64 = 256;

impl Table {
    /// The policy for application `i`, just dead (`why`): `true` when it is handled here (a
    /// restart scheduled, or the run ending for the supervisor), `false` to apply the
    /// partition's dead-application rule.
    pub(super) fn restart_or_end(&mut self, i: usize, why: &str) -> bool {
        if self.lifecycle.state() != State::Running {
            return false;
        }
        let (name, role) = (self.apps[i].name.clone(), self.apps[i].role);
        match role {
            Role::Supervisor => {
                let reason = format!("the supervisor died ({why}): the run was ended in order");
                self.record(reason.clone());
                self.ended_by = Some(reason);
                true
            }
            Role::Ros | Role::Logger => self.schedule_restart(i, &name),
            Role::Dcm => false,
        }
    }

    /// Schedules a restart of `i` (named `name`) if the policy allows one more.
    fn schedule_restart(&mut self, i: usize, name: &str) -> bool {
        let p = self.policy;
        if !p.enabled || self.restart_attempts >= p.max {
            if p.enabled {
                self.record(format!(
                    "{name}: no restart left (control.max_restarts_per_run = {})",
                    p.max
                ));
            }
            return false;
        }
        self.restart_attempts += 1;
        self.apps[i].restart_at = Some(Instant::now() + p.backoff);
        self.record(format!(
            "{name} will be restarted in {} ms (attempt {} of at most {} in this run)",
            p.backoff.as_millis(),
            self.restart_attempts,
            p.max
        ));
        true
    }

    /// A restart of `i` (named `name`) that failed (`why`). A death the monitor saw during it
    /// (the new process exited or fell silent) was judged by the policy then, a further
    /// attempt scheduled (`restart_at`, cleared when this one began) or the partition failed:
    /// it is not counted again (one death during a restart's configure took two attempts).
    /// Any other failure (no spawn, no hello, a refused command) is judged here likewise.
    pub(super) fn restart_failed(&mut self, i: usize, name: &str, why: &str) {
        self.record(format!("{name}: restart failed: {why}"));
        if self.stop_wanted {
            // Too late: the run stops. Dead, its restart still due when the stop came (a
            // readout node's row is then made from its last heartbeat: `died_at_stop`).
            let a = &mut self.apps[i];
            a.dead = true;
            a.state = State::Error;
            a.error
                .get_or_insert_with(|| format!("restart given up: {why}"));
            a.restart_at.get_or_insert_with(Instant::now);
            return;
        }
        if self.apps[i].restart_at.is_some() || self.lifecycle.state() != State::Running {
            return;
        }
        let a = &mut self.apps[i];
        a.dead = true;
        a.state = State::Error;
        a.error = Some(format!("restart failed: {why}"));
        if !self.schedule_restart(i, name) && self.lifecycle.state() == State::Running {
            self.lifecycle
                .fail(format!("{name} is dead and could not be restarted: {why}"));
        }
    }
}

/// The first problem of a run its supervisor's death ended: why, and what became of the
/// events in flight.
pub(super) fn in_flight_note(why: &str, s: &RunSummary) -> String {
    format!(
        "{why}; the DCMs decided {} events in the run, by their own counts (the supervisor's \
         died with it; {} accepted and written: the {} events written by the loggers are in \
         the files, which are closed); {} events were in flight in the DCMs at the stop and \
         stay undecided (no supervisor to reassign them)",
        s.dcm_decided, s.dcm_logged, s.events_written, s.unfinished
    )
}

impl Controller {
    /// Performs the restarts that are due (module docs).
    pub(super) fn restart_due(&self) {
        let now = Instant::now();
        let due: Vec<usize> = {
            let t = self.state.table();
            t.apps
                .iter()
                .enumerate()
                .filter(|(_, a)| a.restart_at.is_some_and(|r| r <= now))
                .map(|(i, _)| i)
                .collect()
        };
        for i in due {
            let _serial = self.commands.lock().unwrap_or_else(|p| p.into_inner());
            {
                let mut t = self.state.table();
                if t.stop_wanted {
                    // The run stops: too late (its restart stays due, for the sheet).
                    continue;
                }
                t.apps[i].restart_at = None;
                if t.lifecycle.state() != State::Running {
                    continue;
                }
            }
            let result = self.restart_one(i);
            let mut t = self.state.table();
            let name = t.apps[i].name.clone();
            match result {
                Ok(at) => {
                    t.restarts += 1;
                    t.apps[i].restarted = true;
                    t.apps[i].restarts += 1;
                    let k = t.restarts;
                    t.record(format!(
                        "{name} restarted and rejoined the run at event {at} (restart {k} in \
                         this run)"
                    ));
                }
                Err(why) => t.restart_failed(i, &name, &why),
            }
            drop(t);
            self.state.changed.notify_all();
        }
    }

    /// Spawns application `i` again and brings it to RUNNING; returns the event it rejoined
    /// the run at.
    fn restart_one(&self, i: usize) -> Result<u64, String> {
        // The old process (if still there: dead by silence) is killed and reaped without the
        // table's lock: a process in uninterruptible I/O (a logger in `fdatasync`) is reaped
        // only when that I/O ends, and meanwhile the monitor must go on reading heartbeats.
        let old = self.state.table().apps[i].child.take();
        if let Some(mut c) = old {
            let _ = c.kill();
            let _ = c.wait();
        }
        {
            let mut t = self.state.table();
            let a = &mut t.apps[i];
            a.stdin = None;
            a.hello = false;
            a.error = None;
            a.summary = None;
            a.finished = false;
            a.last_heard = None;
            a.stopped_since = None;
            a.rate_base = None;
            a.end_life();
            a.waiting = None;
            a.reply = None;
            a.pid = None;
            a.leaving = false;
            a.state = State::None;
            let mut c = self
                .spawn_one(a)
                .map_err(|e| format!("cannot spawn {}: {e}", self.program.display()))?;
            a.stdin = c.stdin.take();
            a.child = Some(c);
            a.dead = false;
        }
        let timeout = Duration::from_millis(self.config.control.spawn_timeout_ms);
        let deadline = Instant::now() + timeout;
        let mut t = self.state.table();
        loop {
            let a = &t.apps[i];
            if a.dead {
                return Err(format!(
                    "died before its hello: {}",
                    a.error.clone().unwrap_or_default()
                ));
            }
            if a.hello {
                break;
            }
            if t.stop_wanted {
                return Err(STOPPING.into());
            }
            t = match self.state.wait_changed(t, deadline) {
                Ok(t) => t,
                Err(_) => {
                    return Err(format!(
                        "no hello within {} ms of being started",
                        timeout.as_millis()
                    ))
                }
            };
        }
        // Ahead of the L1 by what it issues in REJOIN_AHEAD: the node must start past every
        // event decided before it can receive clears, or those fragments would never be
        // cleared and fill its store (module docs).
        let l1 =
            crate::rates::Totals::of(t.apps.iter().filter_map(|a| a.metrics.as_ref())).l1_accepts;
        let rate: f64 = t
            .apps
            .iter()
            .filter(|a| a.role == Role::Supervisor)
            .map(|a| a.rate_hz)
            .sum();
        let ahead = (rate * REJOIN_AHEAD.as_secs_f64()).max(REJOIN_AHEAD_MIN_EVENTS as f64);
        let at = l1 + ahead as u64;
        t.apps[i].rejoin_at = Some(at);
        drop(t);
        let timeout = Duration::from_millis(self.config.control.command_timeout_ms);
        for c in [Command::Configure, Command::Connect, Command::Start] {
            self.send_command(i, c, RunEnd::default(), timeout)
                .map_err(|e| format!("{c}: {e}"))?;
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::PartitionConfig;

    /// Takes `t`'s partition up to CONNECTED, then through `more`; returns the readout
    /// node's index.
    fn walk_to(t: &mut Table, more: &[Command]) -> usize {
        for &cmd in [Command::Initialize, Command::Configure, Command::Connect]
            .iter()
            .chain(more)
        {
            t.lifecycle.apply(cmd, || Ok::<(), String>(())).unwrap();
        }
        t.apps.iter().position(|a| a.role == Role::Ros).unwrap()
    }

    /// A controller of the default partition with restarts on, three a run.
    fn restarting_controller() -> Controller {
        let mut config = PartitionConfig::default();
        config.control.restart = true;
        config.control.max_restarts_per_run = 3;
        Controller::new(config, PathBuf::from("/nonexistent")).unwrap()
    }

    /// One death during a restart is one attempt: the monitor's judgement of the death, not
    /// again when the restart then fails; a failure without a death seen is one attempt too.
    #[test]
    fn a_death_during_a_restart_counts_one_attempt() {
        let c = restarting_controller();
        let mut t = c.state.table();
        let i = walk_to(&mut t, &[Command::Start]);
        let name = t.apps[i].name.clone();
        // Dies in the run: attempt 1 scheduled.
        t.dead(i, "its process exited".into());
        assert_eq!(t.restart_attempts, 1);
        // The restart begins (its time cleared), its process dies during its configure (the
        // monitor: attempt 2), then the restart fails: still 2.
        t.apps[i].restart_at = None;
        t.apps[i].dead = false;
        t.dead(i, "its process exited".into());
        t.restart_failed(i, &name, "configure: died during configure");
        assert_eq!(t.restart_attempts, 2);
        // A failure with no death seen (no hello): attempt 3; a failure to spawn (the old
        // death's mark still on it): none left, the partition fails.
        t.apps[i].restart_at = None;
        t.apps[i].dead = false;
        t.restart_failed(i, &name, "no hello within 10000 ms of being started");
        assert_eq!(t.restart_attempts, 3);
        assert_eq!(t.lifecycle.state(), State::Running);
        t.apps[i].restart_at = None;
        t.restart_failed(i, &name, "cannot spawn");
        assert_eq!(t.restart_attempts, 3);
        assert_eq!(t.lifecycle.state(), State::Error);
    }

    /// A readout node that dies once the run has stopped (during the disconnect that hands
    /// its summary back) has its row made from its last heartbeat (`died_at_stop`), as one
    /// whose restart was due at the stop: it was "ended without its summary", a failed run.
    #[test]
    fn a_readout_node_dead_after_the_stop_is_died_at_stop() {
        let c = Controller::new(PartitionConfig::default(), PathBuf::from("/nonexistent")).unwrap();
        let mut t = c.state.table();
        let i = walk_to(&mut t, &[Command::Start, Command::Stop]);
        // Before the stop was asked (a death outside a run): no row of its own.
        t.dead(i, "its process exited".into());
        assert!(super::super::as_partition::died_at_stop(&t.apps[i]).is_none());
        t.apps[i].dead = false;
        t.stop_wanted = true;
        t.dead(i, "its process exited".into());
        let row = super::super::as_partition::died_at_stop(&t.apps[i]);
        assert!(
            matches!(row, Some(crate::summary::AppSummary::Ros(ref n)) if n.died_at_stop),
            "{row:?}"
        );
    }

    /// A readout node's dead lives are kept for the sheet at each restart: the last
    /// heartbeat's counts of one that sent one, and a count of those that died before any.
    #[test]
    fn a_restart_keeps_the_dead_lifes_counts_for_the_sheet() {
        let c = Controller::new(PartitionConfig::default(), PathBuf::from("/nonexistent")).unwrap();
        let mut t = c.state.table();
        let i = walk_to(&mut t, &[Command::Start]);
        let m = crate::metrics::RosMetrics {
            requests: 70,
            cleared_l1ids: 500,
            input_fragments: 2000,
            lost_fragments: 3,
            ..Default::default()
        };
        t.apps[i].metrics = Some(crate::metrics::AppMetrics::Ros(Box::new(m)));
        t.apps[i].end_life();
        assert!(t.apps[i].metrics.is_none());
        // The next life died before its first heartbeat.
        t.apps[i].end_life();
        let e = t.apps[i].earlier_lives.clone().unwrap();
        assert_eq!((e.lives, e.unheard), (2, 1), "{e:?}");
        assert_eq!(
            (e.stored, e.requests, e.cleared, e.lost_fragments),
            (2000, 70, 500, 3)
        );
        // Other roles keep none (a logger's files say what its lives wrote).
        let l = t.apps.iter().position(|a| a.role == Role::Logger).unwrap();
        t.apps[l].end_life();
        assert!(t.apps[l].earlier_lives.is_none());
    }

    /// After the controller itself was held up past `dead_after`, the applications that then
    /// leave are not restarted and the partition's failure says why (it blamed the first
    /// application to exit, and scheduled restarts for those that had left on purpose).
    #[test]
    fn deaths_after_the_controller_was_held_up_are_its_own() {
        let c = restarting_controller();
        let mut t = c.state.table();
        let i = walk_to(&mut t, &[Command::Start]);
        t.held_up(Duration::from_millis(5013), Duration::from_millis(3000));
        t.dead(i, "its process exited (exit status: 0)".into());
        assert_eq!(t.restart_attempts, 0);
        assert!(t.apps[i].restart_at.is_none());
        assert_eq!(t.lifecycle.state(), State::Error);
        let why = t.lifecycle.error().unwrap_or_default().to_string();
        assert!(
            why.contains("the controller was held up for 5013 ms"),
            "{why}"
        );
    }
}
