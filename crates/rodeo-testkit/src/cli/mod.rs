//! Running the `rodeo` binary (or any program) from a test, never longer than a deadline.
//!
//! [`Rodeo`] builds the command line (`rodeo!()` starts one for the `rodeo` binary of the
//! test's own crate; [`rodeo_bin!`](crate::rodeo_bin) is its path). [`Rodeo::output`] runs it
//! to the end and gives an [`Output`] (status, stdout and stderr as text); past the deadline
//! (120 s unless [`Rodeo::deadline`] says otherwise) the process is stopped and the test fails
//! naming the command and what it printed so far. [`Rodeo::spawn`] starts a long-lived process
//! (`rodeo serve`, `rodeo ros`, `rodeo run --http`) as a [`Running`] guard: the test reads what
//! it prints while it runs, signals it, and waits for its end with a deadline; dropped, the
//! guard stops the process (SIGTERM, then SIGKILL after a grace period) and reaps it.
//!
//! stdout and stderr are always read on threads of their own, so a child that prints much
//! never blocks on a full pipe; stdin is `/dev/null` unless set.
//!
//! - `command`: the builder [`Rodeo`] and the macros `rodeo!` and `rodeo_bin!`.
//! - `running`: the guard [`Running`] of a started process.
//! - `output`: [`Output`], what a process that ended printed.
//! - `capture`: the threads that read a child's stdout and stderr.

mod capture;
mod command;
mod output;
mod running;

pub use command::{Rodeo, DEFAULT_DEADLINE};
pub use output::Output;
pub use running::{Running, GRACE};

#[cfg(test)]
mod tests;
