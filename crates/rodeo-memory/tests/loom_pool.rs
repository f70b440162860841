//! Model checks of the lock-free pool core with loom. Run with
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p rodeo-memory --release --test loom_pool
//! ```
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use rodeo_memory::{AllocError, ChunkPool, PoolConfig, RegionOptions};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

fn pool(chunks_per_region: usize, max_regions: usize, initial: usize) -> ChunkPool {
    pool_of(8, chunks_per_region, max_regions, initial)
}

fn pool_of(
    chunk_bytes: usize,
    chunks_per_region: usize,
    max_regions: usize,
    initial: usize,
) -> ChunkPool {
    ChunkPool::new(PoolConfig {
        chunk_bytes,
        chunks_per_region,
        max_regions,
        initial_regions: initial,
        region: RegionOptions {
            prefault: false,
            warmup_threads: 1,
            ..RegionOptions::default()
        },
    })
    .unwrap()
}

/// Live chunks as bits; claiming a live chunk again is a double hand-out.
struct Live(AtomicU64);

impl Live {
    fn claim(&self, idx: u32) {
        let old = self.0.fetch_or(1 << idx, Ordering::Relaxed);
        assert_eq!(old & (1 << idx), 0, "chunk {idx} handed out twice");
    }
    fn release(&self, idx: u32) {
        self.0.fetch_and(!(1 << idx), Ordering::Relaxed);
    }
}

#[test]
fn loom_two_threads_alloc_free() {
    model(|| {
        let p = Arc::new(pool(2, 1, 1));
        let live = Arc::new(Live(AtomicU64::new(0)));
        // Put both chunks on the free list so pops race, not just bumps.
        drop((p.alloc().unwrap(), p.alloc().unwrap()));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (p, live) = (p.clone(), live.clone());
                thread::spawn(move || {
                    let c = p.alloc().unwrap();
                    live.claim(c.index());
                    live.release(c.index());
                    drop(c);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let s = p.stats();
        assert_eq!(s.in_use, 0);
        let (free, never) = p.quiescent_free();
        assert_eq!((free.len(), never), (2, 0));
    });
}

/// The ABA case: thread A reads head = X (next Y) and is preempted; thread B pops X and Y and
/// pushes X back (head = X again, next of X now NIL-or-other). Without the tag A's CAS would
/// install Y, which B still holds.
#[test]
fn loom_aba_pop_pop_push() {
    model(|| {
        let p = Arc::new(pool(3, 1, 1));
        let live = Arc::new(Live(AtomicU64::new(0)));
        {
            let (a, b, c) = (p.alloc().unwrap(), p.alloc().unwrap(), p.alloc().unwrap());
            drop(c);
            drop(b);
            drop(a); // free list: 0 -> 1 -> 2
        }
        let a = {
            let (p, live) = (p.clone(), live.clone());
            thread::spawn(move || {
                let c = p.alloc().unwrap();
                live.claim(c.index());
                live.release(c.index());
                drop(c);
            })
        };
        let b = {
            let (p, live) = (p.clone(), live.clone());
            thread::spawn(move || {
                let x = p.alloc().unwrap();
                live.claim(x.index());
                let y = p.alloc().unwrap();
                live.claim(y.index());
                live.release(x.index());
                drop(x);
                // y is still held: nobody may get it now.
                let z = p.alloc();
                if let Ok(z) = &z {
                    live.claim(z.index());
                    live.release(z.index());
                }
                drop(z);
                live.release(y.index());
                drop(y);
            })
        };
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(p.stats().in_use, 0);
        let (mut free, never) = p.quiescent_free();
        free.sort_unstable();
        assert_eq!((free, never), (vec![0, 1, 2], 0));
    });
}

/// Two threads find the pool empty and race to grow it; a third allocation finds it at its limit.
#[test]
fn loom_grow_race_then_exhaustion() {
    model(|| {
        let p = Arc::new(pool(1, 2, 0));
        let live = Arc::new(Live(AtomicU64::new(0)));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (p, live) = (p.clone(), live.clone());
                thread::spawn(move || {
                    let c = p.alloc().unwrap();
                    live.claim(c.index());
                    let idx = c.index();
                    // Keep the chunk out of the pool (a leak is safe) so the pool stays full.
                    std::mem::forget(c);
                    idx
                })
            })
            .collect();
        let mut got: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        assert_eq!(p.stats().regions, 2);
        assert!(matches!(p.alloc(), Err(AllocError::Exhausted { .. })));
    });
}

/// A cache flushes a batch (one CAS for a chain) while another thread pops directly.
#[test]
fn loom_cache_flush_vs_pop() {
    model(|| {
        let p = Arc::new(pool(3, 1, 1));
        let live = Arc::new(Live(AtomicU64::new(0)));
        let t = {
            let (p, live) = (p.clone(), live.clone());
            thread::spawn(move || {
                let mut cache = p.cache();
                let a = cache.alloc().unwrap();
                let b = cache.alloc().unwrap();
                live.claim(a.index());
                live.claim(b.index());
                live.release(a.index());
                live.release(b.index());
                cache.free(a);
                cache.free(b);
                cache.flush();
            })
        };
        if let Ok(c) = p.alloc() {
            live.claim(c.index());
            live.release(c.index());
            drop(c);
        }
        t.join().unwrap();
        let s = p.stats();
        assert_eq!(s.in_use, 0);
        let (free, never) = p.quiescent_free();
        assert_eq!(free.len() as u64 + never, 3);
    });
}

/// A cache flushes a full batch to the depot while another thread, finding the free list and the
/// bump index empty, breaks a depot batch up or reports exhaustion; no chunk is lost.
#[test]
fn loom_depot_flush_vs_direct_alloc() {
    model(|| {
        let p = Arc::new(pool_of(128, 32, 1, 1));
        let t = {
            let p = p.clone();
            thread::spawn(move || {
                let mut cache = p.cache();
                // The other thread may hold one chunk meanwhile: take what is there.
                let held: Vec<_> = (0..32).filter_map(|_| cache.alloc().ok()).collect();
                for c in held {
                    cache.free(c);
                }
                cache.flush();
            })
        };
        let got = p.alloc();
        let idx = got.as_ref().ok().map(|c| c.index());
        drop(got);
        t.join().unwrap();
        let s = p.stats();
        assert_eq!(s.in_use, 0, "{s:?} {idx:?}");
        let (mut free, never) = p.quiescent_free();
        free.sort_unstable();
        free.dedup();
        assert_eq!(free.len() as u64 + never, 32);
    });
}
