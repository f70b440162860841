//! Test helpers shared by rodeo's test suites (a dev-dependency only).
//!
//! **Must not depend on** any rodeo crate: the suites of every crate use it, and it tests them
//! from outside (the binary through its command line, servers through their sockets).
//!
//! Tests never use a fixed sleep as synchronisation ("give the run 1.5 s to get going"): on a
//! loaded 2-core machine any fixed time is sometimes too short. They wait on the condition they
//! need, with a deadline that turns a hang into a failure naming what did not happen. This
//! crate holds the only `sleep` of the test suites: the poll interval of those waits.
//!
//! Modules:
//! - waits (here): [`wait_until`], [`wait_for`], [`holds_within`]; [`files_under`];
//!   [`shm_entries`] (what iceoryx2 holds on this host, compared before and after a run);
//!   [`threads_named`] (this process's threads of a name, from `/proc`).
//! - `cli`: running the `rodeo` binary with a deadline (`rodeo!()`, [`cli::Rodeo`],
//!   [`cli::Running`]): the one way the tests start it.
//! - `process`: the applications of a `--processes` partition, found from `/proc`.
//! - `http`: a plain HTTP/1.1 client for the HTTP API.
//!
//! Depends on std and libc only: no rodeo crate (every rodeo crate may use it in its tests).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

pub mod cli;
pub mod hog;
pub mod http;
pub mod net;
pub mod process;
pub mod tls;

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(5);

/// Waits until `cond` holds; panics naming `what` if it does not within `limit`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    wait_for(what, limit, || cond().then_some(()));
}

/// Waits until `f` gives a value and returns it; panics naming `what` if it gives none within
/// `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            t0.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(POLL.min(limit / 10).max(Duration::from_micros(100)));
    }
}

/// Waits until `cond` holds or `limit` passes; returns whether it held (for a condition whose
/// absence is the expected outcome, e.g. "no process of the partition is left").
pub fn holds_within(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t0.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// The `/proc/self/task/TID` directories of this process's threads named `name` (none where
/// `/proc` cannot be read): a thread names itself once it runs, so wait for one with
/// [`wait_for`].
pub fn threads_named(name: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .map(|t| t.path())
        .filter(|t| std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.trim_end() == name))
        .collect()
}

/// Every file under `dir`, at any depth (none if it does not exist): what a run left in its
/// output directory.
pub fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Where iceoryx2 keeps what a process leaves: shared-memory objects (`/dev/shm/iox2_*`) and the
/// node and service records, under rodeo's root (`/dev/shm/iceoryx2/`, `shm::ROOT_DIR`) and
/// iceoryx2's default root (`/tmp/iceoryx2/`, which the `iceoryx2_raw` bench uses).
const SHM_DIRS: [&str; 5] = [
    "/dev/shm",
    "/dev/shm/iceoryx2/nodes",
    "/dev/shm/iceoryx2/services",
    "/tmp/iceoryx2/nodes",
    "/tmp/iceoryx2/services",
];

/// Every iceoryx2 file on this host now (paths): compare before and after a run to find what
/// it left. iceoryx2's one global management object is left out (it stays by design: 16 bytes,
/// made once).
pub fn shm_entries() -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for dir in SHM_DIRS {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".global_mgmt") {
                continue;
            }
            if dir != "/dev/shm" || name.starts_with("iox2_") {
                set.insert(format!("{dir}/{name}"));
            }
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_until_the_condition_and_returns_the_value() {
        let mut n = 0;
        let v = wait_for("n to reach 3", Duration::from_secs(5), || {
            n += 1;
            (n >= 3).then_some(n)
        });
        assert_eq!(v, 3);
        assert!(holds_within(Duration::from_millis(50), || true));
        assert!(!holds_within(Duration::from_millis(20), || false));
    }

    #[test]
    #[should_panic(expected = "waiting for never")]
    fn a_condition_that_never_holds_fails_naming_it() {
        wait_until("never", Duration::from_millis(20), || false);
    }
}
