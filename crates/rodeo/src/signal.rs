//! SIGINT/SIGTERM as a flag: long-running commands (`rodeo ros`, `rodeo run`) poll
//! [`interrupted`] and stop cleanly (answer what is pending, close files, print their balance
//! sheet) instead of dying mid-reply. After [`abort_on_second`], a second signal ends the
//! process at once (exit 130), for an operator whose orderly stop takes too long; one within
//! half a second of the first is the same request delivered twice (`timeout` signals the
//! process and its process group) and is not.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static ABORT_ON_SECOND: AtomicBool = AtomicBool::new(false);
/// When the first signal came (CLOCK_MONOTONIC, ns).
static FIRST_NS: AtomicU64 = AtomicU64::new(0);

/// A second signal this soon after the first is the same request delivered twice, not an
/// operator asking again: `timeout` sends its SIGTERM to the process and then to its process
/// group, and when both were delivered the run aborted with no sheet (1 run in 9).
const SAME_REQUEST_NS: u64 = 500_000_000;

extern "C" fn on_signal(_sig: libc::c_int) {
    // Only atomic loads and stores, `clock_gettime` and `_exit`: async-signal-safe.
    let now = monotonic_ns();
    if !INTERRUPTED.swap(true, Ordering::SeqCst) {
        FIRST_NS.store(now, Ordering::SeqCst);
        return;
    }
    if ABORT_ON_SECOND.load(Ordering::SeqCst) && asks_again(FIRST_NS.load(Ordering::SeqCst), now) {
        // SAFETY: `_exit` is async-signal-safe and ends the process without running anything.
        unsafe { libc::_exit(130) };
    }
}

/// Whether a signal at `now_ns` after a first one at `first_ns` is a second request.
fn asks_again(first_ns: u64, now_ns: u64) -> bool {
    now_ns.saturating_sub(first_ns) >= SAME_REQUEST_NS
}

/// CLOCK_MONOTONIC in nanoseconds (async-signal-safe).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; `clock_gettime` is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
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

    /// One request delivered twice within half a second does not abort; a second one later
    /// does; the clock moves forward.
    #[test]
    fn a_second_signal_aborts_only_when_it_comes_later() {
        assert!(!super::asks_again(1_000_000_000, 1_100_000_000));
        assert!(super::asks_again(1_000_000_000, 1_600_000_000));
        let a = super::monotonic_ns();
        let b = super::monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
