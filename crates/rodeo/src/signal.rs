//! SIGINT/SIGTERM as a flag: long-running commands (`rodeo ros`, `rodeo run`) poll
//! [`interrupted`] and stop cleanly (answer what is pending, close files, print their balance
//! sheet) instead of dying mid-reply. After [`abort_on_second`], a second signal ends the
//! process at once (exit 130), for an operator whose orderly stop takes too long; one within
//! half a second of the first is the same request delivered twice (`timeout` signals the
//! process and its process group) and is not.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static ABORT_ON_SECOND: AtomicBool = AtomicBool::new(false);
/// `--json`: the abort writes one JSON object to stdout ([`json_on_abort`]), with this run
/// number (`u64::MAX`: none).
static JSON_ON_ABORT: AtomicBool = AtomicBool::new(false);
static ABORT_RUN: AtomicU64 = AtomicU64::new(u64::MAX);
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
        if JSON_ON_ABORT.load(Ordering::SeqCst) {
            let mut buf = [0u8; 256];
            let n = abort_json(&mut buf, ABORT_RUN.load(Ordering::SeqCst));
            // SAFETY: `write` is async-signal-safe; `buf[..n]` is initialised and in bounds
            // (`abort_json` returns at most `buf.len()`). A short write is not retried.
            unsafe { libc::write(1, buf.as_ptr().cast(), n) };
        }
        // SAFETY: `_exit` is async-signal-safe and ends the process without running anything.
        unsafe { libc::_exit(130) };
    }
}

/// Writes `rodeo run --json`'s object for an aborted run into `buf` (no allocation, no lock:
/// it runs in the signal handler); returns its length. `run` is `u64::MAX` when the run has
/// no number yet.
fn abort_json(buf: &mut [u8; 256], run: u64) -> usize {
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        let n = bytes.len().min(buf.len() - at);
        buf[at..at + n].copy_from_slice(&bytes[..n]);
        at += n;
    };
    put(b"{\"made\":true,\"run_number\":");
    if run == u64::MAX {
        put(b"null");
    } else {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut v = run;
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        put(&digits[i..]);
    }
    put(
        b",\"verdict\":\"aborted\",\"exit_status\":130,\"error\":\"interrupted twice: the run \
          was abandoned without its balance sheet (its files and summary are incomplete)\"}\n",
    );
    at
}

/// Makes the abort (a second signal) write `rodeo run --json`'s object for an aborted run,
/// with `run_number`, to stdout before the process ends: a script reading `--json` gets an
/// object on every path (it got nothing).
pub(crate) fn json_on_abort(run_number: u32) {
    ABORT_RUN.store(u64::from(run_number), Ordering::SeqCst);
    JSON_ON_ABORT.store(true, Ordering::SeqCst);
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

/// Installs the handler for SIGHUP too (`rodeo app`): a hang-up is its controller's end. The
/// kernel sends SIGHUP and SIGCONT to an application stopped (SIGSTOP) when its controller
/// ends, its process group orphaned: its default action ended the application without its
/// walk-down, its shared memory left behind (a QA pass: a frozen logger, then the run aborted
/// by a second interrupt).
pub(crate) fn install_hangup() {
    // SAFETY: as in `install`: the handler only touches atomics and async-signal-safe calls.
    unsafe {
        libc::signal(libc::SIGHUP, on_signal as *const () as libc::sighandler_t);
    }
}

/// True once SIGINT or SIGTERM (or, after `install_hangup`, SIGHUP) arrived.
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

    /// SIGHUP after `install_hangup` sets the flag (without the handler it ends the process,
    /// this test's with it).
    #[test]
    fn a_hang_up_is_an_interrupt_once_installed() {
        super::install();
        super::install_hangup();
        // SAFETY: raising SIGHUP in this process runs the handler installed above.
        unsafe {
            libc::raise(libc::SIGHUP);
        }
        assert!(super::interrupted());
    }

    /// The abort's object is one line of JSON with the run number (or null) and the verdict.
    #[test]
    fn the_abort_object_is_json_with_the_run_number() {
        let mut buf = [0u8; 256];
        for (run, want) in [
            (42u64, serde_json::json!(42)),
            (u64::MAX, serde_json::Value::Null),
        ] {
            let n = super::abort_json(&mut buf, run);
            assert_eq!(buf[n - 1], b'\n');
            let v: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap();
            assert_eq!(v["run_number"], want);
            assert_eq!(v["verdict"], "aborted");
            assert_eq!(v["exit_status"], 130);
        }
        let n = super::abort_json(&mut buf, u64::from(u32::MAX));
        assert!(serde_json::from_slice::<serde_json::Value>(&buf[..n]).is_ok());
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
