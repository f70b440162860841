//! The CPUs a thread runs on: pinning a thread to one CPU ([`pin_to_cpu`]) or a set
//! ([`set_thread_cpus`]), the CPUs the process was given ([`process_cpus`]), and the CPU time
//! of the calling thread ([`thread_cpu_time`]) and of the whole process
//! ([`process_cpu_time`]), for benchmarks that must say what a thread or a process costs per
//! unit of work independently of how many other processes share the cores (wall-clock rates
//! on a loaded machine measure the neighbours as much as the code).

use std::sync::OnceLock;
use std::time::Duration;

/// The CPUs the calling thread may run on, in increasing order (empty if unknown).
pub fn thread_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: cpu_set_t is a plain bit array for which all-zero is valid; sched_getaffinity
        // writes at most size_of::<cpu_set_t>() bytes into it; CPU_ISSET reads bits below
        // CPU_SETSIZE inside it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Vec::new();
            }
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Vec::new()
    }
}

/// The CPUs this process may run on, as the calling thread saw them the first time this was
/// called (call it before any thread of the process narrows its set, so that every process of
/// a partition started alike plans with the same CPUs).
pub fn process_cpus() -> &'static [usize] {
    static CPUS: OnceLock<Vec<usize>> = OnceLock::new();
    CPUS.get_or_init(thread_cpus)
}

/// The calling thread narrowed to a set of CPUs until this is dropped, when it gets back the
/// set it had ([`narrow_thread`]): threads it starts meanwhile keep the narrowed set.
#[must_use = "the thread's set is restored when this is dropped"]
pub struct Narrowed {
    before: Vec<usize>,
}

impl Drop for Narrowed {
    fn drop(&mut self) {
        let _ = set_thread_cpus(&self.before);
    }
}

/// Narrows the calling thread to `cpus` until the guard is dropped; `None` (nothing changed)
/// when its set is unknown or the kernel refused `cpus`.
pub fn narrow_thread(cpus: &[usize]) -> Option<Narrowed> {
    let before = thread_cpus();
    if before.is_empty() || !set_thread_cpus(cpus) {
        return None;
    }
    Some(Narrowed { before })
}

/// Lets every thread of this process run on `cpus` only (threads started afterwards inherit
/// their starter's set); returns how many threads took it.
pub fn narrow_process_threads(cpus: &[usize]) -> usize {
    #[cfg(target_os = "linux")]
    {
        let Some(set) = cpu_set(cpus) else {
            return 0;
        };
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return 0;
        };
        tasks
            .flatten()
            .filter_map(|t| t.file_name().to_str()?.parse::<libc::pid_t>().ok())
            .filter(|&tid| set_affinity(tid, &set))
            .count()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpus;
        0
    }
}

/// Lets the calling thread run on `cpus` only (threads it starts afterwards inherit the set);
/// false if the set is empty or the kernel refused.
pub fn set_thread_cpus(cpus: &[usize]) -> bool {
    #[cfg(target_os = "linux")]
    {
        // pid 0: the calling thread.
        cpu_set(cpus).is_some_and(|set| set_affinity(0, &set))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpus;
        false
    }
}

/// Pins the calling thread to `cpu`; false if the kernel refused.
pub fn pin_to_cpu(cpu: usize) -> bool {
    set_thread_cpus(&[cpu])
}

/// The kernel's CPU set of `cpus`; `None` when empty or a CPU is beyond `CPU_SETSIZE`.
#[cfg(target_os = "linux")]
fn cpu_set(cpus: &[usize]) -> Option<libc::cpu_set_t> {
    if cpus.is_empty() || cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return None;
    }
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is valid; CPU_ZERO and CPU_SET
    // write inside it (every cpu < CPU_SETSIZE, checked above).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        Some(set)
    }
}

/// Sets thread `tid`'s (0: the calling thread's) CPUs to `set`; false if the kernel refused (a
/// thread that ended meanwhile: ESRCH).
#[cfg(target_os = "linux")]
fn set_affinity(tid: libc::pid_t, set: &libc::cpu_set_t) -> bool {
    // SAFETY: sched_setaffinity reads size_of::<cpu_set_t>() bytes from a valid reference.
    unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), set) == 0 }
}

/// CPU time the calling thread has used so far (user and system), from
/// `CLOCK_THREAD_CPUTIME_ID`; zero if the clock is unavailable.
pub fn thread_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time every thread of this process has used so far, ended ones included (user and
/// system), from `CLOCK_PROCESS_CPUTIME_ID`; zero if the clock is unavailable. What an
/// in-process node, its emulated cards and its clients cost together over a measured window
/// (the difference of two readings).
pub fn process_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The CPU-time clock `clock` now; zero if it is unavailable.
fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the valid, exclusively borrowed pointer
    // and has no other effect.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::{
        narrow_thread, pin_to_cpu, process_cpu_time, process_cpus, set_thread_cpus,
        thread_cpu_time, thread_cpus,
    };
    use std::sync::{Mutex, MutexGuard};

    /// The tests that set CPUs take turns: `narrow_process_threads` sets every thread of the
    /// test process, those of the tests running beside it too (a narrowed thread's child then
    /// inherited both CPUs instead of one, CI 2026-12-05).
    static PLACING: Mutex<()> = Mutex::new(());

    fn placing() -> MutexGuard<'static, ()> {
        PLACING.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A thread narrowed to one of its CPUs sees that set, a thread it starts inherits it, and
    /// the process's CPUs stay what they were at the first look; an empty or impossible set is
    /// refused.
    #[test]
    fn a_thread_narrowed_to_a_set_runs_there_and_passes_it_on() {
        let _turn = placing();
        let all = process_cpus().to_vec();
        assert!(!all.is_empty(), "no CPU known");
        std::thread::spawn(move || {
            let first = [all[0]];
            assert!(set_thread_cpus(&first));
            assert_eq!(thread_cpus(), first);
            let inherited = std::thread::spawn(thread_cpus).join().unwrap();
            assert_eq!(inherited, first);
            assert_eq!(process_cpus(), &all[..], "the process's CPUs as first seen");
            assert!(!set_thread_cpus(&[]));
            assert!(!set_thread_cpus(&[libc::CPU_SETSIZE as usize]));
            assert!(set_thread_cpus(&all));
            assert_eq!(thread_cpus(), all);
            // A guard narrows and gives the set back.
            {
                let _g = narrow_thread(&first).expect("narrowed");
                assert_eq!(thread_cpus(), first);
            }
            assert_eq!(thread_cpus(), all);
        })
        .join()
        .unwrap();
    }

    /// Every thread of the process takes the set (here the whole set, so that the other tests
    /// running beside are not narrowed), a thread started afterwards included.
    #[test]
    fn every_thread_of_the_process_takes_a_set() {
        let _turn = placing();
        let all = process_cpus().to_vec();
        let placed = super::narrow_process_threads(&all);
        assert!(placed >= 1, "not even this thread");
        assert_eq!(thread_cpus(), all);
        assert_eq!(super::narrow_process_threads(&[]), 0);
    }

    #[test]
    fn a_thread_pinned_to_a_cpu_runs_there_and_an_impossible_cpu_is_refused() {
        let _turn = placing();
        std::thread::spawn(|| {
            assert!(pin_to_cpu(0), "the kernel refused CPU 0");
            // SAFETY: sched_getcpu has no preconditions; it returns the CPU of this thread.
            let now = unsafe { libc::sched_getcpu() };
            assert_eq!(now, 0);
            assert!(!pin_to_cpu(libc::CPU_SETSIZE as usize));
            assert!(!pin_to_cpu(usize::MAX));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn thread_cpu_time_grows_with_work_and_not_with_sleep() {
        let t0 = thread_cpu_time();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let t1 = thread_cpu_time();
        assert!(t1 > t0, "busy work used no CPU time");
        // The sleep is what is measured (a sleeping thread uses no CPU), not a synchronisation.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let t2 = thread_cpu_time();
        // Sleeping costs (almost) no CPU: far less than the 50 ms slept.
        assert!(t2 - t1 < std::time::Duration::from_millis(40));
    }

    /// The process clock counts another thread's work, after that thread has ended: at least
    /// the CPU time the thread measured on its own clock.
    #[test]
    fn process_cpu_time_counts_an_ended_threads_work() {
        let p0 = process_cpu_time();
        let worked = std::thread::spawn(|| {
            let t0 = thread_cpu_time();
            let mut x = 0u64;
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_millis(30) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            thread_cpu_time() - t0
        })
        .join()
        .unwrap();
        let p1 = process_cpu_time();
        assert!(
            worked > std::time::Duration::ZERO,
            "busy work used no CPU time"
        );
        assert!(
            p1 - p0 >= worked,
            "process clock grew {:?}, the ended thread alone used {worked:?}",
            p1 - p0
        );
    }
}
