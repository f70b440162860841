//! The kernel's per-thread counters, read from `/proc`: each thread's CPU time and its context
//! switches (wake-ups), for `rodeo bench partition` ([`crate::profile`]).
//!
//! A thread's CPU time is the first field of `/proc/<pid>/task/<tid>/schedstat` (nanoseconds
//! the scheduler ran it) when the kernel has schedstats, else `utime + stime` of
//! `/proc/<pid>/task/<tid>/stat` in clock ticks (`sysconf(_SC_CLK_TCK)`, 10 ms at 100 Hz). Its
//! wake-ups are `voluntary_ctxt_switches + nonvoluntary_ctxt_switches` of its `status`.
//! Threads that end between the listing and the reading are skipped, not errors.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// What could not be read or understood in `/proc`.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// A file or directory could not be read.
    #[error("cannot read {path}: {source} (is /proc mounted and readable?)")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file did not have the shape the kernel gives it.
    #[error("{path}: {what} (not the kernel's format: is this Linux's /proc?)")]
    Parse {
        /// The file (or the text's name).
        path: String,
        /// What was wrong.
        what: String,
    },
}

fn parse_error(path: &str, what: impl Into<String>) -> ProcError {
    ProcError::Parse {
        path: path.to_string(),
        what: what.into(),
    }
}

/// The fields of a thread's `stat` this module uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// The thread's name (`comm`: at most 15 bytes, may hold spaces and parentheses).
    pub comm: String,
    /// CPU time in user mode, in clock ticks.
    pub utime_ticks: u64,
    /// CPU time in kernel mode, in clock ticks.
    pub stime_ticks: u64,
}

/// Parses a `stat` line (`path` names it in errors): `pid (comm) state ppid ... utime stime
/// ...`. The name runs from the first `(` to the last `)`, so a name with spaces or
/// parentheses parses.
pub fn parse_stat(text: &str, path: &str) -> Result<Stat, ProcError> {
    let open = text
        .find('(')
        .ok_or_else(|| parse_error(path, "no '(' before the thread's name"))?;
    let close = text
        .rfind(')')
        .filter(|&c| c > open)
        .ok_or_else(|| parse_error(path, "no ')' after the thread's name"))?;
    let comm = text[open + 1..close].to_string();
    // After the name: field 3 (state) onwards; utime and stime are fields 14 and 15.
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Result<u64, ProcError> {
        let word = rest.get(n - 3).ok_or_else(|| {
            parse_error(
                path,
                format!("{} fields, field {n} missing", rest.len() + 2),
            )
        })?;
        word.parse()
            .map_err(|_| parse_error(path, format!("field {n} is {word:?}, not a count")))
    };
    Ok(Stat {
        comm,
        utime_ticks: field(14)?,
        stime_ticks: field(15)?,
    })
}

/// Parses a `schedstat` line (`path` names it in errors): nanoseconds on the CPU, nanoseconds
/// waiting to run, time slices. Returns the first.
pub fn parse_schedstat(text: &str, path: &str) -> Result<u64, ProcError> {
    let word = text
        .split_whitespace()
        .next()
        .ok_or_else(|| parse_error(path, "empty"))?;
    word.parse()
        .map_err(|_| parse_error(path, format!("the CPU time is {word:?}, not nanoseconds")))
}

/// Parses a `status` file (`path` names it in errors) for `(voluntary_ctxt_switches,
/// nonvoluntary_ctxt_switches)`.
pub fn parse_switches(text: &str, path: &str) -> Result<(u64, u64), ProcError> {
    let find = |key: &str| -> Result<u64, ProcError> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .ok_or_else(|| parse_error(path, format!("no {key} line")))?;
        line.trim()
            .parse()
            .map_err(|_| parse_error(path, format!("{key} is {:?}, not a count", line.trim())))
    };
    Ok((
        find("voluntary_ctxt_switches")?,
        find("nonvoluntary_ctxt_switches")?,
    ))
}

/// Clock ticks per second, the unit of `stat`'s times.
pub fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions; it only reads a constant of the system.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100 // what Linux has on every architecture when asked
    }
}

/// One thread's counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSample {
    /// The process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// The thread's name.
    pub comm: String,
    /// CPU time so far, in nanoseconds.
    pub cpu_ns: u64,
    /// Whether `cpu_ns` comes from `schedstat` (ns) rather than `stat` (clock ticks).
    pub from_schedstat: bool,
    /// Voluntary context switches (the thread blocked: a wait, a read).
    pub voluntary_switches: u64,
    /// Involuntary context switches (the scheduler took the CPU away).
    pub nonvoluntary_switches: u64,
}

impl ThreadSample {
    /// Voluntary plus involuntary context switches.
    pub fn wakeups(&self) -> u64 {
        self.voluntary_switches + self.nonvoluntary_switches
    }
}

/// Reads a file of a thread; `Ok(None)` when the thread (or process) has ended.
fn read_gone_ok(path: &Path) -> Result<Option<String>, ProcError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e)
            if matches!(e.kind(), ErrorKind::NotFound) || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            Ok(None)
        }
        Err(source) => Err(ProcError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// One thread's counters now; `Ok(None)` when it has ended.
pub fn read_thread(pid: u32, tid: u32) -> Result<Option<ThreadSample>, ProcError> {
    let dir = PathBuf::from(format!("/proc/{pid}/task/{tid}"));
    let stat_path = dir.join("stat");
    let Some(stat_text) = read_gone_ok(&stat_path)? else {
        return Ok(None);
    };
    let stat = parse_stat(&stat_text, &stat_path.display().to_string())?;
    let sched_path = dir.join("schedstat");
    let sched = match std::fs::read_to_string(&sched_path) {
        Ok(t) => Some(parse_schedstat(&t, &sched_path.display().to_string())?),
        Err(_) => None, // a kernel without schedstats (or the thread just ended): stat's ticks
    };
    let status_path = dir.join("status");
    let Some(status) = read_gone_ok(&status_path)? else {
        return Ok(None);
    };
    let (voluntary, nonvoluntary) = parse_switches(&status, &status_path.display().to_string())?;
    let (cpu_ns, from_schedstat) = match sched {
        Some(ns) => (ns, true),
        None => (
            (stat.utime_ticks + stat.stime_ticks) * (1_000_000_000 / clock_ticks_per_s()),
            false,
        ),
    };
    Ok(Some(ThreadSample {
        pid,
        tid,
        comm: stat.comm,
        cpu_ns,
        from_schedstat,
        voluntary_switches: voluntary,
        nonvoluntary_switches: nonvoluntary,
    }))
}

/// Every live thread of process `pid` now (none when the process has ended).
pub fn sample_process(pid: u32) -> Result<Vec<ThreadSample>, ProcError> {
    let task = PathBuf::from(format!("/proc/{pid}/task"));
    let entries = match std::fs::read_dir(&task) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(ProcError::Io { path: task, source }),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some(s) = read_thread(pid, tid)? {
            out.push(s);
        }
    }
    Ok(out)
}

/// CPU time (user + system, ns) of this process (every thread, ended ones too) and of its
/// children that ended and were waited for, from `getrusage`.
pub fn rusage_cpu_ns() -> (u64, u64) {
    let get = |who| {
        // SAFETY: an all-zero rusage is a valid value of the plain C struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage for the call to fill; `who` is one of the
        // two constants getrusage takes.
        if unsafe { libc::getrusage(who, &mut ru) } != 0 {
            return 0;
        }
        let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
        ns(ru.ru_utime) + ns(ru.ru_stime)
    };
    (get(libc::RUSAGE_SELF), get(libc::RUSAGE_CHILDREN))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "1234 (rodeo (x) y) S 1 1234 1234 0 -1 4194560 310 0 0 0 17 5 0 0 20 0 \
                        9 0 4711 123456789 900 18446744073709551615 1 1 0 0 0 0 0 4096 17664 \
                        0 0 0 17 1 0 0 0 0 0\n";

    #[test]
    fn stat_with_spaces_and_parentheses_in_the_name() {
        let s = parse_stat(STAT, "fixed").unwrap();
        assert_eq!(s.comm, "rodeo (x) y");
        assert_eq!(s.utime_ticks, 17);
        assert_eq!(s.stime_ticks, 5);
    }

    #[test]
    fn broken_stat_lines_are_typed_errors() {
        for bad in [
            "",
            "1234 rodeo S 1",
            "1234 (rodeo S 1 2 3",
            "1234 (rodeo) S 1 2 3",
            "1234 (rodeo) S 1 1 1 0 -1 0 0 0 0 0 x 5 0",
        ] {
            let e = parse_stat(bad, "fixed").unwrap_err();
            assert!(matches!(e, ProcError::Parse { .. }), "{bad:?}: {e}");
            assert!(e.to_string().contains("fixed"), "{e}");
        }
    }

    #[test]
    fn schedstat_and_status() {
        assert_eq!(
            parse_schedstat("123456789 2000 7\n", "f").unwrap(),
            123_456_789
        );
        assert!(parse_schedstat("", "f").is_err());
        assert!(parse_schedstat("-3 1 1", "f").is_err());
        let status = "Name:\trodeo\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t150\n\
                      nonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(parse_switches(status, "f").unwrap(), (150, 3));
        assert!(parse_switches("Name:\tx\nvoluntary_ctxt_switches:\t1\n", "f").is_err());
        assert!(parse_switches("voluntary_ctxt_switches:\tmany\n", "f").is_err());
    }

    /// CPU time of the calling thread, busy-looping until it has grown by `ns`.
    fn burn(tid: u32, ns: u64) -> (ThreadSample, ThreadSample) {
        let pid = std::process::id();
        let before = read_thread(pid, tid).unwrap().expect("this thread exists");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut x = 1u64;
        loop {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
            let now = read_thread(pid, tid).unwrap().expect("this thread exists");
            if now.cpu_ns >= before.cpu_ns + ns {
                return (before, now);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "a busy thread's CPU clock did not grow by {ns} ns in 30 s: {before:?} {now:?}"
            );
        }
    }

    #[test]
    fn a_busy_thread_of_this_process_has_its_cpu_time_grow() {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let (before, after) = burn(tid, 30_000_000);
        assert!(after.cpu_ns > before.cpu_ns);
        assert_eq!(before.comm, after.comm);
        let all = sample_process(std::process::id()).unwrap();
        assert!(all.iter().any(|t| t.tid == tid), "{all:?}");
        let (self_ns, _) = rusage_cpu_ns();
        assert!(self_ns >= after.cpu_ns - before.cpu_ns);
        assert!(read_thread(std::process::id(), u32::MAX - 1)
            .unwrap()
            .is_none());
        assert!(clock_ticks_per_s() > 0);
    }
}
