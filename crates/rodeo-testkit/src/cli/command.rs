//! [`Rodeo`]: a command line to run with a deadline, and the macros that start one for the
//! `rodeo` binary of the test's crate.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::output::Output;
use super::running::Running;

/// How long [`Rodeo::output`] lets a process run unless the test says otherwise.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(120);

/// The path of the `rodeo` binary, in a test of the crate that builds it (Cargo sets
/// `CARGO_BIN_EXE_rodeo` there; the macro expands in the caller, which is why it is a macro).
#[macro_export]
macro_rules! rodeo_bin {
    () => {
        env!("CARGO_BIN_EXE_rodeo")
    };
}

/// A [`Rodeo`](crate::cli::Rodeo) command for the `rodeo` binary of the test's crate:
/// `rodeo!().args(["run", "--json"]).output()`.
#[macro_export]
macro_rules! rodeo {
    () => {
        $crate::cli::Rodeo::new($crate::rodeo_bin!())
    };
}

/// A command line to run with a deadline (the methods mirror [`std::process::Command`]'s).
/// stdout and stderr are always captured; stdin is `/dev/null` unless [`Rodeo::stdin`] says
/// otherwise.
#[derive(Debug)]
pub struct Rodeo {
    cmd: Command,
    deadline: Duration,
    echo_stderr: bool,
}

impl Rodeo {
    /// A command running `program` (in practice the `rodeo` binary: see `rodeo!()`).
    pub fn new(program: impl AsRef<OsStr>) -> Rodeo {
        let mut cmd = Command::new(program);
        cmd.stdin(Stdio::null());
        Rodeo {
            cmd,
            deadline: DEFAULT_DEADLINE,
            echo_stderr: false,
        }
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Rodeo {
        self.cmd.arg(arg);
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Rodeo
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// Sets an environment variable of the process.
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Rodeo {
        self.cmd.env(key, value);
        self
    }

    /// Removes an environment variable the process would inherit.
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Rodeo {
        self.cmd.env_remove(key);
        self
    }

    /// Runs the process in `dir`.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Rodeo {
        self.cmd.current_dir(dir);
        self
    }

    /// The process's stdin (default: `/dev/null`).
    pub fn stdin(&mut self, stdin: impl Into<Stdio>) -> &mut Rodeo {
        self.cmd.stdin(stdin);
        self
    }

    /// How long [`Rodeo::output`] lets the process run (default [`DEFAULT_DEADLINE`]).
    pub fn deadline(&mut self, limit: Duration) -> &mut Rodeo {
        self.deadline = limit;
        self
    }

    /// Also prints each line of the process's stderr on the test's stderr, prefixed with the
    /// program's name in brackets (`[rodeo] ...`): a server's log beside the test's own
    /// failure.
    pub fn echo_stderr(&mut self) -> &mut Rodeo {
        self.echo_stderr = true;
        self
    }

    /// The command line, for messages: the program's file name and the arguments.
    pub fn command_line(&self) -> String {
        let program = Path::new(self.cmd.get_program());
        let name = program.file_name().unwrap_or(program.as_os_str());
        std::iter::once(name)
            .chain(self.cmd.get_args())
            .map(|a| {
                let a = a.to_string_lossy();
                if a.is_empty() || a.contains(char::is_whitespace) {
                    format!("{a:?}")
                } else {
                    a.into_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs the process to its end and returns what it printed. Past the deadline the
    /// process is stopped (SIGTERM, then SIGKILL) and the test fails, naming the command and
    /// showing what it printed so far. Panics too if the program cannot be started.
    #[track_caller]
    pub fn output(&mut self) -> Output {
        self.spawn().wait_with_deadline(self.deadline)
    }

    /// Starts the process and returns its guard (which stops it when dropped). Panics if the
    /// program cannot be started.
    #[track_caller]
    pub fn spawn(&mut self) -> Running {
        let line = self.command_line();
        let echo = self.echo_stderr.then(|| {
            let program = Path::new(self.cmd.get_program());
            let name = program.file_name().unwrap_or(program.as_os_str());
            format!("[{}] ", name.to_string_lossy())
        });
        Running::start(&mut self.cmd, line, echo)
    }
}
