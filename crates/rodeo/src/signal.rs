//! SIGINT/SIGTERM as a flag: long-running commands (`rodeo ros`, `rodeo run`) poll
//! [`interrupted`] and stop cleanly (answer what is pending, close files, print their balance
//! sheet) instead of dying mid-reply. After [`abort_on_second`], a second signal ends the
//! process at once (exit 130), for an operator whose orderly stop takes too long.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static ABORT_ON_SECOND: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    // Only atomic loads and stores and `_exit`: async-signal-safe.
    if INTERRUPTED.swap(true, Ordering::SeqCst) && ABORT_ON_SECOND.load(Ordering::SeqCst) {
        // SAFETY: `_exit` is async-signal-safe and ends the process without running anything.
        unsafe { libc::_exit(130) };
    }
}

/// Makes a second SIGINT/SIGTERM end the process at once (exit code 130).
pub(crate) fn abort_on_second() {
    ABORT_ON_SECOND.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGINT and SIGTERM.
pub(crate) fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that only stores to a static atomic,
        // which is async-signal-safe; `signal` has no other precondition.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// True once SIGINT or SIGTERM arrived.
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_raised_signal_sets_the_flag() {
        super::install();
        // SAFETY: raising SIGTERM in this process runs the handler installed above.
        unsafe {
            libc::raise(libc::SIGTERM);
        }
        assert!(super::interrupted());
    }
}
