//! A reference workload for the machine itself, run next to a benchmark so that its figures can
//! be read against what the machine gave at that moment.
//!
//! Shared 2-CPU virtual machines change under a run: the host moves the virtual CPUs (onto two
//! hardware threads of one core, or away from a busy neighbour), and a workload whose two
//! threads share memory then runs 2-5x slower for seconds, then recovers. The probe is the
//! readout node's pattern stripped of everything rodeo does: a producer thread writes a few
//! words at the head and the tail of 1,600-byte slots in a 13 MB ring (the store's footprint),
//! a consumer thread on the other CPU reads each slot's first word, and they exchange their
//! positions every 32 slots. Its rate moves with the machine, not with rodeo's code; a drop of
//! both the probe and the benchmark is the machine's.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Slots in the ring.
const SLOTS: usize = 8192;
/// Words (u64) per slot: 1,600 bytes.
const SLOT_WORDS: usize = 200;
/// Slots between two position updates.
const BATCH: u64 = 32;

/// Runs the probe for `time`, its producer and consumer threads on CPUs `cpus` (producer,
/// consumer; `None`: wherever the kernel puts them); returns the slots passed per second, or 0
/// when a thread could not be started.
pub fn shared_ring_rate(time: Duration, cpus: Option<(usize, usize)>) -> f64 {
    let ring: Vec<AtomicU64> = (0..SLOTS * SLOT_WORDS).map(|_| AtomicU64::new(0)).collect();
    let head = AtomicU64::new(0);
    let tail = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let (ring, head, tail, done) = (&ring, &head, &tail, &done);
    // The producer stops by itself a little after the consumer's time, should the consumer
    // never set `done` (it failed to start).
    let producer_deadline = Instant::now() + time + Duration::from_secs(1);
    std::thread::scope(|s| {
        let producer = std::thread::Builder::new().spawn_scoped(s, move || {
            if let Some((p, _)) = cpus {
                rodeo_memory::cpu::pin_to_cpu(p);
            }
            let mut h = 0u64;
            while !done.load(Ordering::Relaxed) && Instant::now() < producer_deadline {
                let t = tail.load(Ordering::Acquire);
                while h - t < (SLOTS as u64 - BATCH) {
                    let base = (h as usize % SLOTS) * SLOT_WORDS;
                    ring[base].store(h, Ordering::Relaxed);
                    ring[base + 1].store(h.wrapping_mul(3), Ordering::Relaxed);
                    ring[base + SLOT_WORDS - 8].store(h, Ordering::Relaxed);
                    h += 1;
                    if h % BATCH == 0 {
                        head.store(h, Ordering::Release);
                        break;
                    }
                }
                head.store(h, Ordering::Release);
                std::hint::spin_loop();
            }
        });
        if producer.is_err() {
            return 0.0;
        }
        let consumer = std::thread::Builder::new().spawn_scoped(s, move || {
            if let Some((_, c)) = cpus {
                rodeo_memory::cpu::pin_to_cpu(c);
            }
            let start = Instant::now();
            let (mut t, mut sum) = (0u64, 0u64);
            while start.elapsed() < time {
                let h = head.load(Ordering::Acquire);
                while t < h {
                    let first = ring[(t as usize % SLOTS) * SLOT_WORDS].load(Ordering::Relaxed);
                    sum = sum.wrapping_add(first);
                    t += 1;
                    if t % BATCH == 0 {
                        tail.store(t, Ordering::Release);
                    }
                }
                tail.store(t, Ordering::Release);
                std::hint::spin_loop();
            }
            let secs = start.elapsed().as_secs_f64();
            done.store(true, Ordering::Relaxed);
            std::hint::black_box(sum);
            t as f64 / secs
        });
        match consumer {
            // The consumer cannot panic (no indexing past the ring, no unwrap): 0 if it did.
            Ok(c) => c.join().unwrap_or(0.0),
            Err(_) => {
                done.store(true, Ordering::Relaxed);
                0.0
            }
        }
    })
}

/// The host's CPU time and this process's at one moment, to tell how much of the machine
/// other processes used between two moments ([`HostLoad::others_share_since`]): measured
/// alongside a run, not before or after it.
#[derive(Debug, Clone, Copy)]
pub struct HostLoad {
    /// Non-idle CPU seconds of the whole host (all CPUs, steal included), from `/proc/stat`.
    busy_s: f64,
    /// CPU seconds this process has used.
    own_s: f64,
    at: Instant,
}

impl HostLoad {
    /// The host's and this process's CPU time now (`None` where `/proc/stat` is unreadable).
    pub fn now() -> Option<HostLoad> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
        let jiffies: Vec<u64> = cpu
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is inside user).
        let busy: u64 = jiffies
            .iter()
            .take(8)
            .enumerate()
            .filter(|&(i, _)| i != 3 && i != 4)
            .map(|(_, &j)| j)
            .sum();
        // SAFETY: sysconf has no preconditions.
        let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let tick = if tick > 0 { tick as f64 } else { 100.0 };
        Some(HostLoad {
            busy_s: busy as f64 / tick,
            own_s: process_cpu_seconds(),
            at: Instant::now(),
        })
    }

    /// The share of the host's CPUs (0 .. 1) that other processes used between `earlier` and
    /// this moment: host busy time less this process's CPU time, over wall time x CPUs.
    pub fn others_share_since(&self, earlier: &HostLoad) -> f64 {
        let wall = self.at.duration_since(earlier.at).as_secs_f64();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        if wall <= 0.0 {
            return 0.0;
        }
        let others = (self.busy_s - earlier.busy_s) - (self.own_s - earlier.own_s);
        (others / (wall * cpus)).clamp(0.0, 1.0)
    }
}

/// CPU seconds (user + system) used by this process so far.
pub fn process_cpu_seconds() -> f64 {
    // SAFETY: rusage is a C struct of integers, for which all-zero bytes are a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe passes slots from one thread to the other (the rate is not asserted: a loaded
    /// machine may give anything above zero).
    #[test]
    fn the_ring_moves() {
        assert!(shared_ring_rate(Duration::from_millis(50), None) > 0.0);
    }

    /// The host's load is read and gives a share between 0 and 1 (its value is the host's).
    #[test]
    fn host_load_is_a_share() {
        let a = HostLoad::now().expect("/proc/stat");
        // The interval the load is measured over, not a synchronisation.
        std::thread::sleep(Duration::from_millis(30));
        let b = HostLoad::now().expect("/proc/stat");
        let share = b.others_share_since(&a);
        assert!((0.0..=1.0).contains(&share), "{share}");
        assert!(process_cpu_seconds() > 0.0);
    }
}
