//! [`Running`]: the guard of a started process. The test reads what the process prints while
//! it runs, signals it, and waits for its end with a deadline; dropped, the guard stops the
//! process (SIGTERM, then SIGKILL after [`GRACE`]) and reaps it, so a failing test leaves no
//! process behind.

use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use super::capture::Capture;
use super::output::{streams, Output};
use crate::holds_within;

/// How long a process stopped by the guard has between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(5);

/// How long the reading threads get to drain the pipes of a process stopped at its deadline.
const DRAIN: Duration = Duration::from_secs(1);

/// A started process: its stdout and stderr are read as it runs; dropping the guard stops and
/// reaps the process if it still runs. The methods named like [`std::process::Child`]'s do
/// what those do.
#[derive(Debug)]
pub struct Running {
    child: Child,
    command: String,
    stdout: Arc<Capture>,
    stderr: Arc<Capture>,
}

/// How a wait for the end came out.
enum End {
    /// The process exited and closed both streams.
    Done,
    /// The process exited, but its stdout or stderr is still open (a process it started
    /// holds it).
    PipesOpen,
    /// The deadline passed with the process running: it was stopped.
    Stopped,
}

impl Running {
    /// Starts `cmd` (shown as `command` in messages) with stdout and stderr piped and read on
    /// threads; with `echo`, stderr's lines are printed on the test's stderr after it.
    #[track_caller]
    pub(super) fn start(cmd: &mut Command, command: String, echo: Option<String>) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{command}`: {e}"));
        let stdout = Capture::start(child.stdout.take().expect("piped stdout"), None);
        let stderr = Capture::start(child.stderr.take().expect("piped stderr"), echo);
        Running {
            child,
            command,
            stdout,
            stderr,
        }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The command line, for messages.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// Sends `signal` (`libc::SIGTERM`, ...) to the process; panics if it has already ended
    /// (its pid may belong to another process by now) or kill(2) fails.
    #[track_caller]
    pub fn signal(&mut self, signal: i32) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "`{}` already ended ({status}): no signal {signal} sent",
                self.command
            );
        }
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) has no memory effects; the pid is our own child's, not yet reaped,
        // so it still names that process.
        let r = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            r,
            0,
            "kill({pid}, {signal}) of `{}`: {}",
            self.command,
            std::io::Error::last_os_error()
        );
    }

    /// The exit status if the process has ended (it is reaped then), `None` while it runs.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Everything the process wrote on stdout so far.
    pub fn stdout_so_far(&self) -> String {
        self.stdout.text()
    }

    /// Everything the process wrote on stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.stderr.text()
    }

    /// Waits until `f`, given the complete lines the process wrote on stdout so far, returns
    /// a value, and returns it. Fails the test, naming `what` and showing both streams, if
    /// that does not happen within `limit` or stdout ends first.
    #[track_caller]
    pub fn wait_for_stdout<T>(
        &self,
        what: &str,
        limit: Duration,
        f: impl FnMut(&str) -> Option<T>,
    ) -> T {
        self.wait_for_stream(&self.stdout, "stdout", what, limit, f)
    }

    /// [`Running::wait_for_stdout`] on stderr (where rodeo logs).
    #[track_caller]
    pub fn wait_for_stderr<T>(
        &self,
        what: &str,
        limit: Duration,
        f: impl FnMut(&str) -> Option<T>,
    ) -> T {
        self.wait_for_stream(&self.stderr, "stderr", what, limit, f)
    }

    /// The address a `rodeo run`/`serve --http` serves its HTTP API on, read from its
    /// "rodeo: HTTP API on http://ADDR/" (or `https://`) line on stderr (waited for up to
    /// `limit`).
    #[track_caller]
    pub fn http_address(&self, limit: Duration) -> SocketAddr {
        self.wait_for_stderr("the \"HTTP API on\" line", limit, |text| {
            text.lines().find_map(|l| {
                let rest = l.strip_prefix("rodeo: HTTP API on ")?;
                rest.strip_prefix("http://")
                    .or_else(|| rest.strip_prefix("https://"))?
                    .trim_end_matches('/')
                    .parse()
                    .ok()
            })
        })
    }

    #[track_caller]
    fn wait_for_stream<T>(
        &self,
        stream: &Capture,
        name: &str,
        what: &str,
        limit: Duration,
        mut f: impl FnMut(&str) -> Option<T>,
    ) -> T {
        let mut found = None;
        let mut ended = false;
        holds_within(limit, || {
            let (text, end) = stream.lines();
            ended = end;
            found = f(&text);
            found.is_some() || ended
        });
        match found {
            Some(v) => v,
            None if ended => panic!(
                "`{}` closed its {name} before {what}\n{}",
                self.command,
                self.streams()
            ),
            None => panic!(
                "timed out after {limit:?} waiting for {what} from `{}`\n{}",
                self.command,
                self.streams()
            ),
        }
    }

    /// Waits up to `limit` for the process to exit and returns its status, without waiting
    /// for its stdout and stderr to close (a process it started may still hold them).
    /// Past the deadline the process is stopped and the test fails.
    #[track_caller]
    pub fn status_with_deadline(&mut self, limit: Duration) -> ExitStatus {
        let mut status = None;
        holds_within(limit, || {
            status = self.child.try_wait().ok().flatten();
            status.is_some()
        });
        match status {
            Some(s) => s,
            None => {
                self.stop();
                panic!(
                    "`{}` did not exit within {limit:?}: stopped (SIGTERM, then SIGKILL after \
                     {GRACE:?})\n{}",
                    self.command,
                    self.drained_streams()
                )
            }
        }
    }

    /// Waits up to `limit` for the process to exit and close its stdout and stderr; returns
    /// what it printed. Past the deadline the process is stopped (SIGTERM, then SIGKILL) and
    /// the test fails, naming the command and showing what it printed so far; it fails too if
    /// the process exited but its streams stayed open (held by a process it started).
    #[track_caller]
    pub fn wait_with_deadline(mut self, limit: Duration) -> Output {
        match self.wait_for_end(limit) {
            End::Done => self.output(false),
            End::PipesOpen => {
                let status = self.exit_status();
                panic!(
                    "`{}` exited ({status}) but its stdout or stderr stayed open for {limit:?} \
                     (held by a process it started?)\n{}",
                    self.command,
                    self.streams()
                )
            }
            End::Stopped => panic!(
                "`{}` did not finish within {limit:?}: stopped (SIGTERM, then SIGKILL after \
                 {GRACE:?})\n{}",
                self.command,
                self.drained_streams()
            ),
        }
    }

    /// Like [`Running::wait_with_deadline`], but past the deadline the process is stopped and
    /// what it printed is returned (with [`Output::stopped_at_deadline`] set) instead of
    /// failing the test; a process that exited with its streams held open by another gives
    /// what it printed so far.
    pub fn wait_or_stop(mut self, limit: Duration) -> Output {
        let stopped = match self.wait_for_end(limit) {
            End::Done | End::PipesOpen => false,
            End::Stopped => {
                self.drain();
                true
            }
        };
        self.output(stopped)
    }

    /// Waits up to `limit` for the exit and the end of both streams; stops the process if it
    /// still runs then.
    fn wait_for_end(&mut self, limit: Duration) -> End {
        let mut exited = false;
        let done = holds_within(limit, || {
            exited = exited || matches!(self.child.try_wait(), Ok(Some(_)));
            exited && self.stdout.ended() && self.stderr.ended()
        });
        if done {
            End::Done
        } else if exited {
            End::PipesOpen
        } else {
            self.stop();
            End::Stopped
        }
    }

    /// The status of the ended process (it has been reaped: this does not block).
    fn exit_status(&mut self) -> ExitStatus {
        self.child
            .wait()
            .unwrap_or_else(|e| panic!("`{}`: wait: {e}", self.command))
    }

    /// What the ended process printed.
    fn output(&mut self, stopped_at_deadline: bool) -> Output {
        Output {
            command: self.command.clone(),
            status: self.exit_status(),
            stdout: self.stdout.text(),
            stderr: self.stderr.text(),
            stopped_at_deadline,
        }
    }

    /// Both streams so far, for a failure message.
    fn streams(&self) -> String {
        streams(&self.stdout.text(), &self.stderr.text())
    }

    /// Both streams of a stopped process, once the reading threads had a moment to drain
    /// them.
    fn drained_streams(&self) -> String {
        self.drain();
        self.streams()
    }

    /// Gives the reading threads up to [`DRAIN`] to reach the end of both streams.
    fn drain(&self) {
        holds_within(DRAIN, || self.stdout.ended() && self.stderr.ended());
    }

    /// Stops the process if it still runs: SIGTERM (and SIGCONT, for a stopped one), then
    /// SIGKILL if it has not exited after [`GRACE`]; reaps it.
    fn stop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) has no memory effects; the pid is our own child's, not yet reaped,
        // so it still names that process.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
            libc::kill(pid, libc::SIGCONT);
        }
        if !holds_within(GRACE, || !matches!(self.child.try_wait(), Ok(None))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}
