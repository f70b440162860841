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

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe passes slots from one thread to the other (the rate is not asserted: a loaded
    /// machine may give anything above zero).
    #[test]
    fn the_ring_moves() {
        assert!(shared_ring_rate(Duration::from_millis(50), None) > 0.0);
    }
}
