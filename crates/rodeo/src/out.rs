//! Standard output that a closed pipe cannot turn into a panic: `rodeo runs | head -1` ends
//! with exit 0, and a long `rodeo run ... | head` keeps running without its printout.
//!
//! `println!` panics when the reader has gone (EPIPE: Rust ignores SIGPIPE); `outln!` and
//! `out!` write the same text, and once standard output fails they drop what follows.

use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether standard output failed (its reader went away): nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Prints a line to standard output, quietly dropped once it is closed.
macro_rules! outln {
    () => { $crate::out::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Prints to standard output, quietly dropped once it is closed.
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*)) };
}

/// Writes `args` to standard output (flushed, as `println!` on a terminal), or nothing once a
/// write failed.
pub(crate) fn write(args: fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_fmt(args)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        CLOSED.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn macros_format_like_println() {
        // Written to the test harness's captured stdout: only that it formats and returns.
        outln!("{} {:>3}", "a", 1);
        out!("{}", 2);
        outln!();
        assert!(!super::CLOSED.load(std::sync::atomic::Ordering::Relaxed));
    }
}
