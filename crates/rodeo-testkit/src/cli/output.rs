//! [`Output`]: what a process that ended printed, with assertions that name the command and
//! show both streams when they fail.

use std::process::ExitStatus;

/// How much of each stream a failure message shows: its end.
const SHOWN: usize = 16 * 1024;

/// A process that ended: its command line, exit status, stdout and stderr (as text, invalid
/// UTF-8 replaced).
#[derive(Debug, Clone)]
pub struct Output {
    /// The command line, for messages (`rodeo run --json ...`).
    pub command: String,
    /// How it ended.
    pub status: ExitStatus,
    /// Everything it wrote on stdout.
    pub stdout: String,
    /// Everything it wrote on stderr.
    pub stderr: String,
    /// It was stopped at its deadline ([`Running::wait_or_stop`](super::Running::wait_or_stop)
    /// only: the other waits fail the test instead).
    pub stopped_at_deadline: bool,
}

impl Output {
    /// stdout followed by stderr: all a user would have seen on a terminal.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// Asserts that the process exited with success; the message names the command, its
    /// status and both streams.
    #[track_caller]
    pub fn assert_success(&self) -> &Output {
        assert!(self.status.success(), "{}", self.report("failed"));
        self
    }

    /// Asserts that the process exited without success (a refused command line or
    /// configuration); the message names the command and both streams.
    #[track_caller]
    pub fn assert_failure(&self) -> &Output {
        assert!(!self.status.success(), "{}", self.report("succeeded"));
        self
    }

    /// "`COMMAND` HOW (STATUS)" and both streams.
    fn report(&self, how: &str) -> String {
        format!(
            "`{}` {how} ({})\n{}",
            self.command,
            self.status,
            streams(&self.stdout, &self.stderr)
        )
    }
}

/// Both streams for a failure message (the end of each when long).
pub(super) fn streams(stdout: &str, stderr: &str) -> String {
    format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        tail(stdout),
        tail(stderr)
    )
}

/// The last [`SHOWN`] bytes of `s` (at a character boundary), saying how much was left out.
fn tail(s: &str) -> String {
    if s.len() <= SHOWN {
        return s.to_string();
    }
    let mut at = s.len() - SHOWN;
    while !s.is_char_boundary(at) {
        at += 1;
    }
    format!("[... {at} bytes before]\n{}", &s[at..])
}
