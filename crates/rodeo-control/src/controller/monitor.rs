//! The controller's monitor thread: everything on the control socket (hellos, heartbeats,
//! replies) into the table, liveness checked every 50 ms, and a ping to every application
//! every heartbeat period (module docs of `controller`, "Threads and ownership").

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rodeo_transport::socket::{poll_readable, Frame, Received, Socket, Transport};

use crate::application::Role;
use crate::channel::{self, ToApp, ToController};
use crate::lifecycle::State;
use crate::metrics::AppMetrics;

use super::commands::SEND_FAILED;
use super::state::ControllerState;

/// How long the monitor waits for a message at most before it looks at liveness and pings.
const WAIT_MS: i64 = 20;

/// The monitor thread's loop, until `s.stop`. It alone owns the control socket (`control`,
/// the applications' ROUTER) and the ROUTER end of the outbox's bell (`door`), and waits on
/// both at once: a posted command goes out as soon as it is posted, not after the wait (a
/// socket shared under a mutex held through the wait held each command back by up to the
/// wait, and a transition of five applications by a quarter of a second). It keeps
/// `transport` (the ZeroMQ context of both sockets) alive.
pub(super) fn run(
    s: &ControllerState,
    transport: Transport,
    mut control: Socket,
    mut door: Socket,
) {
    let _transport = transport;
    let mut msg = Received::default();
    let mut last_check = Instant::now();
    let mut last_ping = Instant::now();
    while !s.stop.load(Ordering::Acquire) {
        let ready = match poll_readable(&[&control, &door], WAIT_MS) {
            Ok(r) => r,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(WAIT_MS as u64));
                0
            }
        };
        if ready & 2 != 0 {
            while matches!(door.try_recv(&mut msg), Ok(true)) {}
        }
        s.send_posted(&mut control);
        if ready & 1 != 0 {
            // Drain what is queued before judging anyone's silence: after a stall of this
            // thread the heartbeats are here, only unread.
            while matches!(control.try_recv(&mut msg), Ok(true)) {
                s.on_message(&msg);
            }
        }
        let since_check = last_check.elapsed();
        if since_check >= Duration::from_millis(50) {
            s.check_liveness(since_check);
            s.send_abandon(&mut control);
            last_check = Instant::now();
        }
        if last_ping.elapsed() >= s.ping_every {
            s.ping_all(&mut control);
            last_ping = Instant::now();
        }
    }
}

impl ControllerState {
    /// Takes in one message from application `msg.peer`: a hello, a heartbeat or a reply.
    pub(super) fn on_message(&self, msg: &Received) {
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
                a.shm_undelivered = hb.shm_undelivered;
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
            // Alive and working on a command: `last_heard` above is all it says.
            ToController::Busy { .. } => {}
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

    /// Sends what the commanding threads posted; a send that fails is the command's reply
    /// (`cannot send ...`), so its sender does not wait out its timeout.
    pub(super) fn send_posted(&self, control: &mut Socket) {
        for o in self.take_posted() {
            let Err(e) = control.try_send_to(o.peer.as_bytes(), [Frame::Copy(&o.bytes)]) else {
                continue;
            };
            let mut t = self.table();
            if let Some(a) = t.apps.get_mut(o.app) {
                if a.waiting == Some(o.seq) {
                    a.waiting = None;
                    let state = a.state;
                    a.reply = Some((
                        o.seq,
                        state,
                        Some(format!("{SEND_FAILED} {}: {e}", o.command)),
                    ));
                }
            }
            drop(t);
            self.changed.notify_all();
        }
    }

    /// Tells the supervisor's drain to give up when a logger died during its `stop`
    /// ([`ToApp::AbandonDrain`], never waiting).
    pub(super) fn send_abandon(&self, control: &mut Socket) {
        let names: Vec<String> = {
            let mut t = self.table();
            if !std::mem::take(&mut t.abandon_due) || !t.supervisor_stopping() {
                return;
            }
            t.record(
                "a logger died during the run's stop: the supervisor's drain gives up after its \
                 grace (the events it would wait for cannot be written)"
                    .into(),
            );
            t.apps
                .iter()
                .filter(|a| a.role == Role::Supervisor && a.waiting.is_some())
                .map(|a| a.name.clone())
                .collect()
        };
        let abandon = channel::encode(&ToApp::AbandonDrain);
        for n in &names {
            let _ = control.try_send_to(n.as_bytes(), [Frame::Copy(&abandon)]);
        }
    }

    /// Sends a ping to every application that said hello and is neither dead nor leaving
    /// (never waiting: one that does not read loses its ping, nobody else is delayed).
    pub(super) fn ping_all(&self, control: &mut Socket) {
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
        for n in &names {
            let _ = control.try_send_to(n.as_bytes(), [Frame::Copy(&ping)]);
        }
    }

    /// Marks dead every application whose process exited unasked, that has been silent for
    /// `dead_after` (also while a command is pending with it: it says `busy` then), or whose
    /// local process has been stopped for `dead_after` before its hello (module docs of
    /// `controller`).
    ///
    /// Silence is counted only while this monitor was listening: when the check comes late
    /// (`since_check`, plus the wait for the table) by a quarter of `dead_after` (at least
    /// 250 ms) or more, the monitor itself was held up (a loaded machine, a long holder of the
    /// table) and the heartbeats of that time may still be queued unread; every application's
    /// silence then counts from now, and only exited processes are judged at once.
    pub(super) fn check_liveness(&self, since_check: Duration) {
        let asked = Instant::now();
        let mut t = self.table();
        let now = Instant::now();
        let late = since_check + now.duration_since(asked);
        if late >= self.dead_after {
            t.held_up(late, self.dead_after);
        }
        if late >= channel::stall_limit(self.dead_after) {
            t.listening_since = Some(now);
            if late >= Duration::from_secs(1) {
                tracing::warn!(
                    "the controller's monitor was held up for {} ms (a loaded machine?): \
                     applications' silences are counted from now",
                    late.as_millis()
                );
            }
        }
        let listening_since = t.listening_since;
        let mut deaths = Vec::new();
        for (i, a) in t.apps.iter_mut().enumerate() {
            if a.dead {
                continue;
            }
            if let Some(c) = a.child.as_mut() {
                // Before its hello no heartbeat can tell: a local process stopped (SIGSTOP, a
                // debugger) for `dead_after` is dead all the same (it waited out the 20 s
                // `control.spawn_timeout_ms`, a restart and the stop behind it).
                let stopped = !a.hello && a.host.is_none() && process_stopped(c.id());
                match (stopped, a.stopped_since) {
                    (false, _) => a.stopped_since = None,
                    (true, None) => a.stopped_since = Some(now),
                    (true, Some(since)) if now.duration_since(since) > self.dead_after => {
                        let ms = now.duration_since(since).as_millis();
                        deaths.push((i, format!("stopped before its hello for {ms} ms")));
                        continue;
                    }
                    (true, Some(_)) => {}
                }
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
            // Also while a command runs: the application says `Busy` every heartbeat period
            // then, so a process frozen during the run's stop is dead after `dead_after` (it
            // held the stop for the command's whole timeout, 60 s, Ctrl-C unheard, before
            // 2026-12-07).
            if a.hello && !a.leaving {
                if let Some(h) = a.last_heard {
                    let age = silence(h, listening_since, now);
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

/// Whether process `pid` is stopped (state `T` or `t` in `/proc/PID/stat`: SIGSTOP, a
/// debugger); `false` when it cannot be read.
pub(super) fn process_stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command name in parentheses, which may hold anything.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    matches!(state, Some("T" | "t"))
}

/// How long an application last heard at `heard` has been silent at `now`, counted only since
/// the monitor listened again after its last stall (`listening_since`).
fn silence(heard: Instant, listening_since: Option<Instant>, now: Instant) -> Duration {
    now.saturating_duration_since(listening_since.map_or(heard, |l| heard.max(l)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child stopped with SIGSTOP reads as stopped, and as running again after SIGCONT.
    #[test]
    fn a_stopped_process_is_seen_stopped() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(!process_stopped(pid));
        let signal = |sig| {
            // SAFETY: kill(2) on our own child's pid with a valid signal number.
            assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
        };
        signal(libc::SIGSTOP);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !process_stopped(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(process_stopped(pid));
        signal(libc::SIGCONT);
        let deadline = Instant::now() + Duration::from_secs(5);
        while process_stopped(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!process_stopped(pid));
        let _ = child.kill();
        let _ = child.wait();
        assert!(!process_stopped(u32::MAX), "no such process");
    }

    #[test]
    fn silence_counts_only_while_the_monitor_listened() {
        let now = Instant::now();
        let heard = now - Duration::from_secs(10);
        assert_eq!(silence(heard, None, now), Duration::from_secs(10));
        // A stall that ended 1 s ago: the 9 s before it are not the application's silence.
        let resumed = now - Duration::from_secs(1);
        assert_eq!(silence(heard, Some(resumed), now), Duration::from_secs(1));
        // Heard after the stall: its own silence.
        let later = now - Duration::from_millis(200);
        assert_eq!(
            silence(later, Some(resumed), now),
            Duration::from_millis(200)
        );
    }
}
