//! A busy core beside the test: [`BusyCore`] keeps one CPU busy (a thread that spins) while it
//! lives, for the fault tests that must hold "under load" (a DAQ node shares its cores with the
//! trigger's processing), not only on a quiet machine.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A thread spinning on one core until the guard is dropped.
#[derive(Debug)]
pub struct BusyCore {
    stop: Arc<AtomicBool>,
    spins: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl BusyCore {
    /// Starts the spinning thread (it never sleeps nor yields: the scheduler shares its core).
    pub fn start() -> BusyCore {
        let stop = Arc::new(AtomicBool::new(false));
        let spins = Arc::new(AtomicU64::new(0));
        let (s, n) = (Arc::clone(&stop), Arc::clone(&spins));
        let thread = std::thread::Builder::new()
            .name("busy-core".into())
            .spawn(move || {
                let mut x = 0u64;
                while !s.load(Ordering::Relaxed) {
                    for _ in 0..100_000 {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                    n.fetch_add(1, Ordering::Relaxed);
                }
            })
            .expect("cannot start the busy-core thread");
        BusyCore {
            stop,
            spins,
            thread: Some(thread),
        }
    }

    /// Rounds of work done so far (it grows while the core is busy).
    pub fn spins(&self) -> u64 {
        self.spins.load(Ordering::Relaxed)
    }
}

impl Drop for BusyCore {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn spins_while_it_lives_and_stops_when_dropped() {
        let hog = BusyCore::start();
        crate::wait_until("the busy core working", Duration::from_secs(10), || {
            hog.spins() >= 3
        });
        let stop = Arc::clone(&hog.stop);
        drop(hog);
        assert!(stop.load(Ordering::Relaxed));
    }
}
