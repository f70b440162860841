//! The receiver's bounded spin before it waits on its event (the wake-up strategy of the parent
//! module), and its counters.
//!
//! A receiver whose queue is empty looks at it again, without a system call, for up to
//! [`spin`] (default [`DEFAULT_SPIN`], [`set_spin`] or the environment variable [`SPIN_ENV`]
//! in microseconds; 0 turns it off) before it waits on the event's file descriptor. What this
//! buys: while the receiver spins it has not consumed its last notification, so iceoryx2's
//! notifiers skip the datagram (the sender's `sendto`), and a message that comes within the spin
//! costs the receiver no sleep and wake-up (a `recvmsg` that blocks, a context switch, the
//! emptying `recvmsg`). What it costs: at most one spin of CPU per wait that follows it
//! ([`SpinCounts::missed`]), counted in [`SpinCounts::spin_ns`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The spin a receiver makes when nothing else is set: about what one sleep and wake-up cost
/// the two processes together on the reference machine (docs/benchmarks.md, "Transport").
pub const DEFAULT_SPIN: Duration = Duration::from_micros(5);
/// The environment variable that sets the spin, in microseconds (read once, on first use;
/// [`set_spin`] overrides it).
pub const SPIN_ENV: &str = "RODEO_SHM_SPIN_US";

/// The spin in nanoseconds; `UNSET` until read from the environment or set.
static SPIN_NS: AtomicU64 = AtomicU64::new(UNSET);
const UNSET: u64 = u64::MAX;
/// Spins longer than this are cut to it (a spin is a short bet, never a busy loop).
const MAX_SPIN: Duration = Duration::from_millis(1);

static CAUGHT: AtomicU64 = AtomicU64::new(0);
static MISSED: AtomicU64 = AtomicU64::new(0);
static SPUN_NS: AtomicU64 = AtomicU64::new(0);
static WAITS: AtomicU64 = AtomicU64::new(0);

/// Sets how long every shared-memory receiver of this process spins before it waits (at most
/// 1 ms; zero: never spin).
pub fn set_spin(d: Duration) {
    SPIN_NS.store(d.min(MAX_SPIN).as_nanos() as u64, Ordering::Relaxed);
}

/// The spin in force: [`set_spin`]'s, else [`SPIN_ENV`]'s, else [`DEFAULT_SPIN`].
pub fn spin() -> Duration {
    let ns = SPIN_NS.load(Ordering::Relaxed);
    if ns != UNSET {
        return Duration::from_nanos(ns);
    }
    let d = match std::env::var(SPIN_ENV) {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(us) => Duration::from_micros(us),
            Err(_) => {
                eprintln!(
                    "rodeo: {SPIN_ENV}={v:?} is not a number of microseconds; spinning the \
                     default {} us",
                    DEFAULT_SPIN.as_micros()
                );
                DEFAULT_SPIN
            }
        },
        Err(_) => DEFAULT_SPIN,
    };
    let d = d.min(MAX_SPIN);
    // Another thread may have set it meanwhile: theirs stays.
    let _ = SPIN_NS.compare_exchange(
        UNSET,
        d.as_nanos() as u64,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    Duration::from_nanos(SPIN_NS.load(Ordering::Relaxed))
}

/// What this process's shared-memory receivers did when their queue was empty.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpinCounts {
    /// Spins that saw a message come (no wait, no system call on either side).
    pub caught: u64,
    /// Spins that ran out (each followed by a wait on the event).
    pub missed: u64,
    /// Nanoseconds spent spinning, both kinds together: the CPU the strategy costs.
    pub spin_ns: u64,
    /// Waits on the event (a system call each; a pending notification returns at once).
    pub waits: u64,
}

/// The counts of this process so far.
pub fn spin_counts() -> SpinCounts {
    SpinCounts {
        caught: CAUGHT.load(Ordering::Relaxed),
        missed: MISSED.load(Ordering::Relaxed),
        spin_ns: SPUN_NS.load(Ordering::Relaxed),
        waits: WAITS.load(Ordering::Relaxed),
    }
}

/// Counts one wait on an event.
pub(crate) fn count_wait() {
    WAITS.fetch_add(1, Ordering::Relaxed);
}

/// Spins until `ready` says yes (true), the spin runs out or `deadline` passes (false).
pub(crate) fn until_ready(deadline: Option<Instant>, mut ready: impl FnMut() -> bool) -> bool {
    let limit = spin();
    if limit.is_zero() {
        return false;
    }
    let start = Instant::now();
    let end = deadline.map_or(start + limit, |d| d.min(start + limit));
    let caught = 'spin: loop {
        // The clock (a vDSO call, ~20 ns) once per four looks.
        for _ in 0..4 {
            if ready() {
                break 'spin true;
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= end {
            break false;
        }
    };
    SPUN_NS.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    if caught {
        CAUGHT.fetch_add(1, Ordering::Relaxed);
    } else {
        MISSED.fetch_add(1, Ordering::Relaxed);
    }
    caught
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spin_ends_at_its_bound_or_when_ready_and_is_counted() {
        set_spin(Duration::from_micros(200));
        assert_eq!(spin(), Duration::from_micros(200));
        let before = spin_counts();
        let t = Instant::now();
        assert!(!until_ready(None, || false));
        let took = t.elapsed();
        assert!(took >= Duration::from_micros(200), "{took:?}");
        let mut calls = 0;
        assert!(until_ready(None, || {
            calls += 1;
            calls == 3
        }));
        let after = spin_counts();
        assert!(after.missed > before.missed && after.caught > before.caught);
        assert!(after.spin_ns - before.spin_ns >= 200_000);
        // A deadline in the past ends the spin at once; a spin above the cap is cut to it.
        assert!(!until_ready(Some(Instant::now()), || false));
        set_spin(Duration::from_secs(5));
        assert_eq!(spin(), MAX_SPIN);
        set_spin(Duration::ZERO);
        assert!(!until_ready(None, || true), "no spin: not even one look");
        set_spin(DEFAULT_SPIN);
    }
}
