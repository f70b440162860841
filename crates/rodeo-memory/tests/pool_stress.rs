//! Many threads allocate and free from one small, growing pool; every chunk must be handed out
//! at most once at a time, keep its contents while owned, and be back in the pool at the end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

use rodeo_memory::{AllocError, Chunk, ChunkPool, PoolConfig, RegionOptions};

const CHUNKS_PER_REGION: usize = 128;
const MAX_REGIONS: usize = 8;
const TOTAL: usize = CHUNKS_PER_REGION * MAX_REGIONS;
const THREADS: usize = 6;
const ROUNDS: usize = 200_000;

struct Live {
    bits: Vec<AtomicU64>,
}

impl Live {
    fn new() -> Live {
        Live {
            bits: (0..TOTAL.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn claim(&self, idx: u32) {
        let (w, b) = (idx as usize / 64, idx % 64);
        let old = self.bits[w].fetch_or(1 << b, Ordering::AcqRel);
        assert_eq!(old & (1 << b), 0, "chunk {idx} handed out twice");
    }

    fn release(&self, idx: u32) {
        let (w, b) = (idx as usize / 64, idx % 64);
        let old = self.bits[w].fetch_and(!(1 << b), Ordering::AcqRel);
        assert_ne!(old & (1 << b), 0, "chunk {idx} freed while not live");
    }
}

fn stamp(chunk: &mut Chunk<'_>, thread: usize, serial: u32) {
    let w = chunk.words_mut();
    w[0] = thread as u32;
    w[1] = serial;
    let last = w.len() - 1;
    w[last] = serial ^ 0xa5a5_a5a5;
}

fn check(chunk: &Chunk<'_>, thread: usize, serial: u32) {
    let w = chunk.words();
    assert_eq!(w[0], thread as u32, "chunk {} overwritten", chunk.index());
    assert_eq!(w[1], serial);
    assert_eq!(w[w.len() - 1], serial ^ 0xa5a5_a5a5);
}

#[test]
fn pool_stress_no_double_hand_out_no_loss() {
    let pool = ChunkPool::new(PoolConfig {
        chunk_bytes: 128, // >= 128: cache flushes go through the depot
        chunks_per_region: CHUNKS_PER_REGION,
        max_regions: MAX_REGIONS,
        initial_regions: 0, // growth races are part of the test
        region: RegionOptions {
            prefault: true,
            warmup_threads: 1,
            ..RegionOptions::default()
        },
    })
    .unwrap();
    let live = Live::new();
    let barrier = Barrier::new(THREADS);
    let exhausted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (pool, live, barrier, exhausted) = (&pool, &live, &barrier, &exhausted);
            s.spawn(move || {
                let use_cache = t % 2 == 0;
                let mut cache = pool.cache();
                let mut held: Vec<(Chunk<'_>, u32)> = Vec::new();
                let mut rng = 0x9e37_79b9_u32.wrapping_mul(t as u32 + 1);
                barrier.wait();
                for serial in 0..ROUNDS as u32 {
                    rng ^= rng << 13;
                    rng ^= rng >> 17;
                    rng ^= rng << 5;
                    // Grow each live set to TOTAL / 3 (6 threads want 2x the pool) so exhaustion also happens.
                    let want_alloc = held.len() < 8 || rng % 100 < 55;
                    if want_alloc {
                        let got = if use_cache {
                            cache.alloc()
                        } else {
                            pool.alloc()
                        };
                        match got {
                            Ok(mut c) => {
                                live.claim(c.index());
                                stamp(&mut c, t, serial);
                                held.push((c, serial));
                            }
                            Err(AllocError::Exhausted { .. }) => {
                                exhausted.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    if !want_alloc || held.len() > TOTAL / 3 {
                        let k = rng as usize % held.len().max(1);
                        if k < held.len() {
                            let (c, sn) = held.swap_remove(k);
                            check(&c, t, sn);
                            live.release(c.index());
                            // Cross-thread style: every third free bypasses the cache.
                            if use_cache && serial % 3 != 0 {
                                cache.free(c);
                            } else {
                                drop(c);
                            }
                        }
                    }
                }
                for (c, sn) in held.drain(..) {
                    check(&c, t, sn);
                    live.release(c.index());
                    cache.free(c);
                }
            });
        }
    });
    let stats = pool.stats();
    assert_eq!(stats.in_use, 0, "{stats:?}");
    assert_eq!(stats.allocations, stats.frees, "{stats:?}");
    assert!(stats.high_water <= TOTAL as u64);
    assert!(live.bits.iter().all(|b| b.load(Ordering::Relaxed) == 0));
    // Every chunk of the mapped regions is either on the free list (once) or never used.
    let (free, never_used) = pool.quiescent_free();
    let mut seen = vec![false; TOTAL];
    for &i in &free {
        assert!(!seen[i as usize], "chunk {i} twice on the free list");
        seen[i as usize] = true;
    }
    let committed = stats.regions as usize * CHUNKS_PER_REGION;
    assert_eq!(free.len() as u64 + never_used, committed as u64);
    assert!(seen[..committed - never_used as usize].iter().all(|&s| s));
    eprintln!(
        "stress: {stats:?}, exhausted attempts: {}",
        exhausted.load(Ordering::Relaxed)
    );
}
