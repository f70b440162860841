//! SIGINT/SIGTERM as a flag: long-running commands (`rodeo ros`) poll [`interrupted`] and stop
//! cleanly (answer what is pending, print their counters) instead of dying mid-reply.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
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
