//! Pool statistics: 64-bit counters updated with relaxed atomic adds.

use crate::sync::{AtomicU64, Ordering};

/// A snapshot of a pool's counters.
///
/// `allocations` and `frees` count what callers did; operations through a
/// [`PoolCache`](crate::PoolCache) are counted in the cache and added here when the cache
/// refills, flushes or drops, so they may lag by up to one magazine. `in_use` counts chunks out
/// of the shared pool: held by callers or parked in caches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Chunks handed to callers.
    pub allocations: u64,
    /// Chunks given back by callers.
    pub frees: u64,
    /// Chunks out of the shared pool (with callers or in caches).
    pub in_use: u64,
    /// Largest `in_use` seen.
    pub high_water: u64,
    /// Allocations refused because the pool was at its limit.
    pub exhaustions: u64,
    /// Regions mapped.
    pub regions: u64,
    /// Bytes mapped for chunks.
    pub bytes_reserved: u64,
    /// Chunks the pool can hold at its limit.
    pub capacity_chunks: u64,
}

/// The live counters, one cache line apart from the free-list head.
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) allocations: AtomicU64,
    pub(crate) frees: AtomicU64,
    /// Chunks out of the shared pool. Incremented after a chunk is taken and decremented before
    /// it is pushed back, so it never exceeds the true number and the high-water mark is never
    /// overstated; it is one atomic, so its running value is exact once threads are quiet.
    pub(crate) out: AtomicU64,
    pub(crate) high_water: AtomicU64,
    pub(crate) exhaustions: AtomicU64,
}

impl Counters {
    pub(crate) fn new() -> Counters {
        Counters {
            allocations: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            out: AtomicU64::new(0),
            high_water: AtomicU64::new(0),
            exhaustions: AtomicU64::new(0),
        }
    }

    /// `n` chunks left the shared pool; keeps the high-water mark.
    #[inline]
    pub(crate) fn take(&self, n: u64) {
        let in_use = self.out.fetch_add(n, Ordering::Relaxed).wrapping_add(n);
        if in_use > self.high_water.load(Ordering::Relaxed) {
            self.high_water.fetch_max(in_use, Ordering::Relaxed);
        }
    }

    /// `n` chunks are about to go back to the shared pool.
    #[inline]
    pub(crate) fn give_back(&self, n: u64) {
        self.out.fetch_sub(n, Ordering::Relaxed);
    }

    pub(crate) fn in_use(&self) -> u64 {
        // A decrement never precedes its chunk's increment, so `out` does not wrap; guard anyway.
        let out = self.out.load(Ordering::Relaxed);
        if out > u64::MAX / 2 {
            0
        } else {
            out
        }
    }
}
