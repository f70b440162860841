//! The controller as [`RunControl`] (status, commands, configuration, metrics) and as
//! [`Partition`] (what the run's driver asks), and the run's balance sheet it assembles from
//! the applications' summaries at disconnect.

use std::time::Instant;

use crate::application::Role;
use crate::lifecycle::{Command, State, TransitionError};
use crate::metrics::AppMetrics;
use crate::partition::Layout;
use crate::partition_metrics::{write_partition_metrics, PartitionExtras};
use crate::prometheus::MetricsWriter;
use crate::run_control::{AppStatus, Partition, PartitionStatus, RunControl};
use crate::summary::{AppSummary, NodeSummary, RunSummary};

use super::restart;
use super::state::{App, Table};
use super::Controller;

impl RunControl for Controller {
    fn status(&self) -> PartitionStatus {
        let t = self.state.table();
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
            // The current or last run's (reset when a run starts): a failed run's sheet takes
            // it from here after the teardown (it read 0 after three restarts, the last one's
            // death failing the run, when only RUNNING showed it).
            restarts: t.restarts,
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
            inputs: crate::metrics::inputs_of(t.apps.iter().filter_map(|a| a.metrics.as_ref())),
            words: self.config.run.words(),
        }
    }

    fn command(&self, command: Command) -> Result<State, TransitionError> {
        // A legal stop, asked before the commands' lock: a restart holding it gives up its
        // wait (a refused one changes nothing: the run goes on with its restarts).
        let legal = self.state.table().lifecycle.check(command).is_ok();
        if command == Command::Stop && legal {
            Partition::stop_wanted(self);
        }
        let _serial = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        let from = {
            let mut t = self.state.table();
            t.lifecycle.check(command)?;
            if command == Command::Start {
                // A service runs many runs in one partition: restarts are counted per run.
                t.restart_attempts = 0;
                t.restarts = 0;
                t.stop_wanted = false;
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
        let mut t = self.state.table();
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

    /// The applications' metrics are copied under the table's lock and written after it: the
    /// heartbeats that update the table wait for a copy, not for the text of every family.
    fn write_metrics(&self, out: &mut MetricsWriter) {
        let st = self.status();
        let t = self.state.table();
        let copied: Vec<(String, Option<AppMetrics>)> = t
            .apps
            .iter()
            .map(|a| (a.name.clone(), a.metrics.clone()))
            .collect();
        let extras = PartitionExtras {
            bad_control_messages: t.bad_messages,
            shm_backpressure: t.apps.iter().map(|a| a.shm_backpressure).sum(),
            shm_undelivered: t.apps.iter().map(|a| a.shm_undelivered).sum(),
            oversized_messages: t.apps.iter().map(|a| a.oversized_messages).sum::<u64>()
                + rodeo_transport::socket::oversized_count(),
            // The controller's own (control channel) refusals and every application's.
            auth_refused: rodeo_transport::curve::refused_count()
                + t.apps.iter().map(|a| a.auth_refused).sum::<u64>(),
        };
        drop(t);
        let apps: Vec<(&str, Option<&AppMetrics>)> = copied
            .iter()
            .map(|(name, m)| (name.as_str(), m.as_ref()))
            .collect();
        write_partition_metrics(out, &st, &apps, extras);
    }
}

impl Partition for Controller {
    fn partition_state(&self) -> State {
        self.state.table().lifecycle.state()
    }

    fn run_ended(&self) -> bool {
        self.run_finished()
    }

    fn progress(&self) -> (u64, f64) {
        let t = self.state.table();
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
        let last = self
            .last_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // A death while the run ran (no command failed) put the partition in ERROR: its
        // reason names the application and why (a restart that failed, no restart left).
        last.or_else(|| {
            let t = self.state.table();
            let why = t.lifecycle.error()?.to_string();
            Some(TransitionError::Lost {
                who: "partition".into(),
                from: State::Running,
                reason: why,
            })
        })
    }

    fn run_limit_seconds(&self) -> f64 {
        self.config.run.seconds
    }

    fn stop_wanted(&self) {
        self.state.table().stop_wanted = true;
        self.state.changed.notify_all();
    }

    fn maintain(&self) {
        self.restart_due();
    }

    fn last_metrics(&self) -> Vec<(String, AppMetrics)> {
        let t = self.state.table();
        t.apps
            .iter()
            .filter_map(|a| Some((a.name.clone(), a.metrics.clone()?)))
            .collect()
    }
}

impl Controller {
    /// The balance sheet from the applications' summaries (at disconnect): a logger or
    /// readout node without one is a problem; a DCM without one died and its events were
    /// reassigned.
    fn assemble(&self, t: &Table) -> RunSummary {
        let summaries: Vec<(String, AppSummary)> = t
            .apps
            .iter()
            .filter_map(|a| {
                let mut s = a.summary.clone().or_else(|| died_at_stop(a))?;
                if let AppSummary::Ros(n) = &mut s {
                    n.restarted = a.restarted;
                    n.earlier_lives = a.earlier_lives.clone();
                }
                Some((a.name.clone(), s))
            })
            .collect();
        let missing: Vec<String> = t
            .apps
            .iter()
            .filter(|a| a.summary.is_none() && matches!(a.role, Role::Logger | Role::Ros))
            .filter(|a| died_at_stop(a).is_none())
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
        s.restarted_apps = t
            .apps
            .iter()
            .filter(|a| a.restarted)
            .map(|a| a.name.clone())
            .collect();
        s.dcms_lost = t
            .apps
            .iter()
            .filter(|a| a.role == Role::Dcm && a.dead)
            .map(|a| (a.name.clone(), a.error.clone().unwrap_or_default()))
            .collect();
        if let Some(why) = &t.ended_by {
            // Without the supervisor's counts the rest of rule 6 cannot hold: say why instead,
            // with its decisions as its last heartbeat had them.
            s.ended_by = Some(why.clone());
            s.problems = vec![restart::in_flight_note(why, &s)];
            s.missing.push("supervisor".into());
            let last = t.apps.iter().find_map(|a| match &a.metrics {
                Some(AppMetrics::Supervisor(m)) => Some(m),
                _ => None,
            });
            if let Some(m) = last {
                s.l1_accepts = m.l1_accepts;
                s.accepted = m.accepted;
                s.rejected = m.rejected;
                s.forced_accepts = m.forced_accepts;
            }
            // Its last heartbeat may predate the DCMs' work (or never have come): what the
            // DCMs decided, and held at the stop, were L1 accepts all the same (lower bounds).
            s.l1_accepts = s.l1_accepts.max(s.dcm_decided + s.unfinished);
            s.accepted = s.accepted.max(s.dcm_logged);
        }
        s
    }
}

/// The summary of a readout node that died too late in the run to be restarted (its restart
/// was still due when the run stopped: it died during the stop, or in the back-off before it),
/// from its last heartbeat; `None` for anything else. Its events are counted by the
/// supervisor, the DCMs and the loggers, so the run may still balance; its clears are not
/// checked against the run's.
pub(super) fn died_at_stop(a: &App) -> Option<AppSummary> {
    if a.role != Role::Ros || !a.dead || a.restart_at.is_none() || a.summary.is_some() {
        return None;
    }
    let m = match &a.metrics {
        Some(AppMetrics::Ros(m)) => Some(m),
        _ => None,
    };
    Some(AppSummary::Ros(NodeSummary {
        name: a.name.clone(),
        requests: m.map_or(0, |m| m.requests),
        cleared: m.map_or(0, |m| m.cleared_l1ids),
        clear_gaps: m.map_or(0, |m| m.clear_gaps),
        stored: m.map_or(0, |m| m.input_fragments),
        inputs: m.map_or_else(Vec::new, |m| m.inputs.clone()),
        died_at_stop: true,
        ..NodeSummary::default()
    }))
}
