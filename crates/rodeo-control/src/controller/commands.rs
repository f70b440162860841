//! Commands to the applications: one command to one application and the wait for its reply,
//! and a step of the lifecycle through every live application in dependency order.

use std::time::{Duration, Instant};

use crate::application::{Role, RunEnd};
use crate::channel::{self, ToApp};
use crate::lifecycle::{Command, State};
use crate::summary::AppSummary;

use super::state::Outgoing;
use super::Controller;

/// A command answered later than this is logged with the application's name: the one place
/// that says which application made a transition slow.
pub(super) const SLOW_ANSWER: Duration = Duration::from_secs(5);

/// How the reply of a command that could not be sent begins (`cannot send stop: ...`): the
/// control socket found no connection to the application.
pub(super) const SEND_FAILED: &str = "cannot send";

/// Logs `name`'s answer to `what` when it took [`SLOW_ANSWER`] or more.
fn slow(name: &str, what: &str, took: Duration) {
    if took >= SLOW_ANSWER {
        tracing::warn!(
            app = name,
            "{name} answered {what} after {} ms",
            took.as_millis()
        );
    }
}

impl Controller {
    /// Sends `command` to application `i` and waits for its reply.
    pub(super) fn send_command(
        &self,
        i: usize,
        command: Command,
        run: RunEnd,
        timeout: Duration,
    ) -> Result<State, String> {
        let asked = self.post_command(i, command, run);
        self.await_reply(i, &asked, timeout)
    }

    /// Sends `command` to application `i` without waiting (its reply is awaited with
    /// [`Controller::await_reply`]).
    fn post_command(&self, i: usize, command: Command, run: RunEnd) -> Asked {
        let (name, seq, rejoin_at) = {
            let mut t = self.state.table();
            let seq = t.next_seq;
            t.next_seq += 1;
            let a = &mut t.apps[i];
            a.waiting = Some(seq);
            a.waiting_for = Some(command);
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
        // The monitor thread sends it (it owns the control socket); a send that fails comes
        // back as this command's reply.
        self.state.post(Outgoing {
            app: i,
            peer: name.clone(),
            seq,
            command,
            bytes: channel::encode(&msg),
        });
        Asked {
            name,
            seq,
            command,
            at: Instant::now(),
        }
    }

    /// Waits for application `i`'s reply to the command `asked`, at most `timeout` from when
    /// it was sent.
    fn await_reply(&self, i: usize, asked: &Asked, timeout: Duration) -> Result<State, String> {
        let command = asked.command;
        let deadline = asked.at + timeout;
        let mut t = self.state.table();
        loop {
            let a = &mut t.apps[i];
            if let Some((s, state, error)) = a.reply.take() {
                if s == asked.seq {
                    slow(&asked.name, command.name(), asked.at.elapsed());
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
            t = match self.state.wait_changed(t, deadline) {
                Ok(t) => t,
                Err(mut t) => {
                    t.apps[i].waiting = None;
                    return Err(format!(
                        "no reply to {command} within {} ms",
                        timeout.as_millis()
                    ));
                }
            };
        }
    }

    /// True when application `i` is dead, or when `error` says its command could not be sent
    /// and the monitor sees it dead within twice the heartbeat's `dead_after`: a killed
    /// application's control connection goes before the monitor sees its process end, so a
    /// command sent in between finds no peer ([`SEND_FAILED`]). Any other failure is not waited
    /// on.
    pub(super) fn dead_or_gone(&self, i: usize, error: &str) -> bool {
        let mut t = self.state.table();
        if t.apps[i].dead || !error.starts_with(SEND_FAILED) {
            return t.apps[i].dead;
        }
        let deadline = Instant::now() + 2 * self.state.dead_after;
        while !t.apps[i].dead {
            match self.state.wait_changed(t, deadline) {
                Ok(next) => t = next,
                Err(_) => return false,
            }
        }
        true
    }

    /// An up or down command through every live application, in dependency order: one role
    /// after the other (loggers, readout nodes, DCMs, supervisor, upward; the reverse
    /// downward), the applications of one role at once. Nothing within a role depends on
    /// another of it, and one after the other a stop of many readout nodes, each waiting for
    /// its last clears, or a connect of 64 DCMs took the sum of their times. The first
    /// failure of a role is returned once every application of the role has answered.
    pub(super) fn step(&self, command: Command) -> Result<(), (String, String)> {
        let n = self.state.table().apps.len();
        let order: Vec<usize> = if command.is_downward() {
            (0..n).rev().collect()
        } else {
            (0..n).collect()
        };
        let timeout = Duration::from_millis(self.config.control.command_timeout_ms);
        let mut l1_accepts = None;
        let mut at = 0;
        while at < order.len() {
            let role = self.state.table().apps[order[at]].role;
            let group: Vec<usize> = order[at..]
                .iter()
                .copied()
                .take_while(|&i| self.state.table().apps[i].role == role)
                .collect();
            at += group.len();
            let mut asked = Vec::with_capacity(group.len());
            for &i in &group {
                let (dead, restarted) = {
                    let t = self.state.table();
                    (t.apps[i].dead, t.apps[i].restarted)
                };
                if dead {
                    continue;
                }
                let run = RunEnd {
                    // A restarted node never sees the clears of the events before its rejoin.
                    l1_accepts: (command == Command::Stop && role == Role::Ros && !restarted)
                        .then_some(l1_accepts)
                        .flatten(),
                    // A logger halted (its disks are full) or dead: events it cannot write
                    // cannot be decided, the supervisor's drain does not wait for them.
                    abandon_drain: command == Command::Stop
                        && role == Role::Supervisor
                        && self.run_halted(),
                };
                asked.push((i, self.post_command(i, command, run)));
            }
            let mut failed = None;
            for (i, a) in &asked {
                let Err(e) = self.await_reply(*i, a, timeout) else {
                    continue;
                };
                // One that died during a downward command is skipped as one dead before it:
                // its death had its policy applied when it was seen (`Table::dead`).
                if command.is_downward() && self.dead_or_gone(*i, &e) {
                    continue;
                }
                failed.get_or_insert((a.name.clone(), e));
            }
            if let Some(f) = failed {
                return Err(f);
            }
            if command == Command::Stop && role == Role::Supervisor {
                let t = self.state.table();
                for &i in &group {
                    if let Some(AppSummary::Supervisor(s)) = &t.apps[i].summary {
                        // Undecided events (a drain given up) are never cleared.
                        l1_accepts = Some(s.l1_accepts.saturating_sub(s.undecided));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A command sent to one application, its reply awaited.
struct Asked {
    name: String,
    seq: u64,
    command: Command,
    at: Instant,
}
