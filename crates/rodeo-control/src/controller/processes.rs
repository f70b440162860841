//! The applications' processes: spawned from the current executable or over ssh (with the
//! partition's CURVE keys on stdin), `initialize` waiting for every hello, and `teardown`
//! walking every live application down, closing its stdin and killing what is left.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::application::RunEnd;
use crate::lifecycle::{Command, State};

use super::state::App;
use super::Controller;

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
    /// Spawns application `a` (here or over ssh). With CURVE keys, its first line of stdin
    /// is the keys (`--keys-stdin`): never on the command line, where `ps` would show them.
    pub(super) fn spawn_one(&self, a: &App) -> std::io::Result<Child> {
        let hb = self.config.control.heartbeat_ms.to_string();
        let dead = self.config.control.dead_after_ms.to_string();
        let mut args = vec![
            "app",
            a.role.name(),
            "--name",
            &a.name,
            "--control",
            &self.endpoint,
            "--heartbeat-ms",
            &hb,
            // From the start, not only from the first ping: a controller frozen before its
            // first ping reached the application is judged dead all the same.
            "--dead-after-ms",
            &dead,
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
    pub(super) fn initialize(&self) -> Result<(), (String, String)> {
        let n = self.state.table().apps.len();
        for i in 0..n {
            let mut t = self.state.table();
            t.restart_attempts = 0;
            t.restarts = 0;
            t.ended_by = None;
            let a = &mut t.apps[i];
            a.dead = false;
            a.leaving = false;
            a.restart_at = None;
            a.restarted = false;
            a.rejoin_at = None;
            a.earlier_lives = None;
            a.hello = false;
            a.error = None;
            a.summary = None;
            a.finished = false;
            a.last_heard = None;
            a.stopped_since = None;
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
        let asked = Instant::now();
        let deadline = asked + Duration::from_millis(self.config.control.spawn_timeout_ms);
        let mut t = self.state.table();
        loop {
            if let Some(a) = t.apps.iter().find(|a| a.dead) {
                return Err((a.name.clone(), a.error.clone().unwrap_or_default()));
            }
            if t.apps.iter().all(|a| a.hello) {
                let took = asked.elapsed();
                if took >= super::commands::SLOW_ANSWER {
                    tracing::warn!(
                        "the applications said hello {} ms after they were started",
                        took.as_millis()
                    );
                }
                return Ok(());
            }
            t = match self.state.wait_changed(t, deadline) {
                Ok(t) => t,
                Err(t) => {
                    let a = t.apps.iter().find(|a| !a.hello).map(|a| a.name.clone());
                    return Err((
                        a.unwrap_or_default(),
                        format!(
                            "no hello within {} ms of being started",
                            self.config.control.spawn_timeout_ms
                        ),
                    ));
                }
            };
        }
    }

    /// `shutdown` (and the teardown on drop): every live application walked down to NONE,
    /// then its stdin closed, then whatever is left killed.
    pub(super) fn teardown(&self) {
        let (n, in_error) = {
            let t = self.state.table();
            (t.apps.len(), t.lifecycle.state() == State::Error)
        };
        let timeout = Duration::from_millis(self.config.control.command_timeout_ms.min(10_000));
        // From ERROR nobody takes a balance sheet: the supervisor's drain waits its grace for
        // the events that can still be decided, not for those a dead application holds (it
        // waited out the 10 s command timeout, in silence, after a logger's death).
        let run = RunEnd {
            l1_accepts: None,
            abandon_drain: in_error,
        };
        for i in (0..n).rev() {
            let (alive, from) = {
                let t = self.state.table();
                let a = &t.apps[i];
                (!a.dead && a.hello && a.child.is_some(), a.state)
            };
            if alive {
                let path = Command::path(from, State::None).unwrap_or(vec![Command::Shutdown]);
                for c in path {
                    if c == Command::Shutdown {
                        self.state.table().apps[i].leaving = true;
                    }
                    if self.send_command(i, c, run, timeout).is_err() {
                        break;
                    }
                }
            }
            let mut t = self.state.table();
            let a = &mut t.apps[i];
            a.leaving = true;
            if let Some(mut s) = a.stdin.take() {
                let _ = s.flush();
            }
        }
        // Grace period, then kill; a local process stopped (SIGSTOP, a debugger) at once: it
        // cannot act on its closed stdin or a SIGTERM before it runs again, and waited out the
        // whole grace (a node frozen at the stop ended its run 5 s after it was found dead).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut t = self.state.table();
            let mut left = 0;
            let mut overdue = Vec::new();
            for a in t.apps.iter_mut() {
                if let Some(c) = a.child.as_mut() {
                    match c.try_wait() {
                        Ok(Some(_)) | Err(_) => a.child = None,
                        Ok(None)
                            if Instant::now() >= deadline
                                || (a.host.is_none()
                                    && super::monitor::process_stopped(c.id())) =>
                        {
                            overdue.extend(a.child.take())
                        }
                        Ok(None) => left += 1,
                    }
                }
            }
            drop(t);
            // Killed and reaped without the table's lock (a process in uninterruptible I/O is
            // reaped only when it ends; the monitor goes on meanwhile).
            for mut c in overdue {
                let _ = c.kill();
                let _ = c.wait();
            }
            if left == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut t = self.state.table();
        for a in t.apps.iter_mut() {
            if !a.dead {
                a.state = State::None;
            }
            a.hello = false;
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
}
