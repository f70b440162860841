//! [`ChunkPool`]: fixed-size chunks with a lazy free list, growing by whole regions up to a limit.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::error::{AllocError, Error};
use crate::raw::{RawPool, Shape, BATCH};
use crate::region::{RegionOptions, WarmupReport};
use crate::stats::PoolStats;
use crate::sync::Ordering;

/// How a [`ChunkPool`] is laid out and prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Size of one chunk in bytes (a non-zero multiple of 8).
    pub chunk_bytes: usize,
    /// Chunks carved from one region.
    pub chunks_per_region: usize,
    /// Regions the pool may map at most; the limit is `chunks_per_region * max_regions` chunks.
    pub max_regions: usize,
    /// Regions mapped (and warmed, with `region.prefault`) by [`ChunkPool::new`].
    pub initial_regions: usize,
    /// How regions are mapped and warmed.
    pub region: RegionOptions,
}

impl PoolConfig {
    /// A pool of `chunk_bytes` chunks in 64 MiB regions, limited to `limit_bytes` (rounded up to
    /// whole regions), all of it mapped and warmed up front.
    pub fn new(chunk_bytes: usize, limit_bytes: usize) -> PoolConfig {
        let chunks_per_region = ((64 << 20) / chunk_bytes.max(1)).max(1);
        let region_bytes = chunks_per_region * chunk_bytes.max(1);
        let max_regions = limit_bytes.div_ceil(region_bytes).max(1);
        PoolConfig {
            chunk_bytes,
            chunks_per_region,
            max_regions,
            initial_regions: max_regions,
            region: RegionOptions::default(),
        }
    }
}

/// A pool of fixed-size chunks, shareable between threads (`&ChunkPool` is `Send`).
///
/// See the crate documentation for the design, the atomic state and its rules.
pub struct ChunkPool {
    raw: RawPool,
}

impl fmt::Debug for ChunkPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.raw.fmt(f)
    }
}

impl ChunkPool {
    /// Creates the pool and maps (and warms) its initial regions.
    pub fn new(config: PoolConfig) -> Result<ChunkPool, Error> {
        let shape = Shape::new(
            config.chunk_bytes,
            config.chunks_per_region,
            config.max_regions,
            config.initial_regions,
            config.region,
        )?;
        Ok(ChunkPool {
            raw: RawPool::new(shape)?,
        })
    }

    /// Takes a chunk; it goes back to the pool when dropped.
    ///
    /// Lock-free except while another thread maps a region: then this call yields and retries
    /// until the region is published. At the limit it returns [`AllocError::Exhausted`].
    #[inline]
    pub fn alloc(&self) -> Result<Chunk<'_>, AllocError> {
        let idx = self.raw.alloc()?;
        self.raw
            .counters()
            .allocations
            .fetch_add(1, Ordering::Relaxed);
        Ok(self.chunk(idx))
    }

    /// A per-thread magazine in front of this pool (see [`PoolCache`]).
    pub fn cache(&self) -> PoolCache<'_> {
        PoolCache {
            pool: self,
            magazine: [0; MAGAZINE],
            len: 0,
            allocations: 0,
            frees: 0,
        }
    }

    /// Maps and warms regions now until the pool holds `regions` (capped at its limit), so that
    /// the run does not pay for growth.
    pub fn reserve(&self, regions: usize) -> Result<(), Error> {
        self.raw.reserve(regions)
    }

    /// Size of one chunk.
    pub fn chunk_bytes(&self) -> usize {
        self.raw.chunk_bytes()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PoolStats {
        self.raw.stats()
    }

    /// What mapping and warming the regions cost so far.
    pub fn warmup_report(&self) -> WarmupReport {
        self.raw.warmup_report()
    }

    /// Chunk indices on the free list plus those never handed out, when no thread uses the pool:
    /// `(free_list, never_used)`. For tests and leak checks.
    pub fn quiescent_free(&self) -> (Vec<u32>, u64) {
        (self.raw.free_list(), self.raw.never_used())
    }

    #[inline]
    fn chunk(&self, idx: u32) -> Chunk<'_> {
        let ptr = self.raw.addr(idx);
        Chunk {
            pool: self,
            idx,
            // SAFETY: addr() of an index handed out by this pool lies inside a mapped region,
            // never at address 0.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
        }
    }
}

/// A chunk taken from a [`ChunkPool`]; derefs to its bytes and goes back to the pool on drop.
///
/// The chunk is exclusively owned: it can be sent to and dropped on another thread.
pub struct Chunk<'p> {
    pool: &'p ChunkPool,
    idx: u32,
    ptr: NonNull<u8>,
}

// SAFETY: a Chunk is the unique owner of its bytes (the pool hands each index out once until it
// is freed), and the pool it refers to is Sync.
unsafe impl Send for Chunk<'_> {}
// SAFETY: &Chunk only gives &[u8]; shared reads from several threads are fine.
unsafe impl Sync for Chunk<'_> {}

impl Chunk<'_> {
    /// The chunk's index in its pool (stable for the chunk's life; useful in tests and logs).
    pub fn index(&self) -> u32 {
        self.idx
    }

    /// The chunk's bytes as 32-bit words (chunks are 8-byte aligned and a multiple of 8 long).
    pub fn words(&self) -> &[u32] {
        // SAFETY: the chunk is 8-byte aligned, chunk_bytes / 4 words long, exclusively ours,
        // and every bit pattern is a valid u32.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), self.pool.chunk_bytes() / 4) }
    }

    /// The chunk's bytes as mutable 32-bit words.
    pub fn words_mut(&mut self) -> &mut [u32] {
        // SAFETY: as in `words`, and &mut self guarantees exclusive access.
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast(), self.pool.chunk_bytes() / 4)
        }
    }
}

impl Deref for Chunk<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: the chunk's chunk_bytes bytes are mapped while the pool lives ('p), and
        // nobody else holds this index.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.pool.chunk_bytes()) }
    }
}

impl DerefMut for Chunk<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.pool.chunk_bytes()) }
    }
}

impl fmt::Debug for Chunk<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("index", &self.idx)
            .field("ptr", &self.ptr)
            .finish()
    }
}

impl Drop for Chunk<'_> {
    #[inline]
    fn drop(&mut self) {
        self.pool.raw.free(self.idx);
        self.pool
            .raw
            .counters()
            .frees
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Chunks one [`PoolCache`] holds at most.
const MAGAZINE: usize = 2 * BATCH;

/// A small per-thread magazine of free chunks in front of a shared [`ChunkPool`].
///
/// A thread creates one (`pool.cache()`) and keeps it; [`alloc`](PoolCache::alloc) and
/// [`free`](PoolCache::free) then touch no shared cache line except when the magazine runs
/// empty (refill: a batch of 32 chunks from the depot with one CAS, else up to 32 from the free
/// list or the bump index) or full (flush: 32 chunks pushed to the depot as one batch). It is a
/// plain value owned by the thread (`Send`, not `Sync`), not thread-local magic, so its
/// lifetime is explicit and dropping it returns its chunks.
///
/// Chunks from a cache are ordinary [`Chunk`]s: dropping one returns it to the shared pool;
/// handing it to [`free`](PoolCache::free) of any cache of the same pool keeps it local.
pub struct PoolCache<'p> {
    pool: &'p ChunkPool,
    magazine: [u32; MAGAZINE],
    len: usize,
    allocations: u64,
    frees: u64,
}

impl fmt::Debug for PoolCache<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolCache").field("len", &self.len).finish()
    }
}

impl<'p> PoolCache<'p> {
    /// Takes a chunk from the magazine, refilling it from the shared pool when empty.
    #[inline]
    pub fn alloc(&mut self) -> Result<Chunk<'p>, AllocError> {
        if self.len == 0 {
            self.refill()?;
        }
        self.len -= 1;
        self.allocations += 1;
        Ok(self.pool.chunk(self.magazine[self.len]))
    }

    /// Keeps `chunk` in the magazine, flushing half of it to the shared pool when full.
    /// A chunk of another pool is simply dropped (returned to its own pool).
    #[inline]
    pub fn free(&mut self, chunk: Chunk<'p>) {
        if !std::ptr::eq(chunk.pool, self.pool) {
            drop(chunk);
            return;
        }
        if self.len == MAGAZINE {
            self.flush_batch(BATCH);
        }
        self.magazine[self.len] = chunk.idx;
        self.len += 1;
        self.frees += 1;
        std::mem::forget(chunk);
    }

    /// Whether `chunk` belongs to this cache's pool (so that [`free`](PoolCache::free) keeps it).
    #[inline]
    pub fn owns(&self, chunk: &Chunk<'_>) -> bool {
        std::ptr::eq(chunk.pool, self.pool)
    }

    /// Returns every cached chunk to the shared pool and publishes the cache's counters.
    pub fn flush(&mut self) {
        while self.len >= BATCH {
            self.flush_batch(BATCH);
        }
        self.flush_batch(self.len);
        self.publish_counters();
    }

    #[cold]
    fn refill(&mut self) -> Result<(), AllocError> {
        self.publish_counters();
        let mut batch = [0; BATCH];
        let n = self.pool.raw.alloc_batch(&mut batch)?;
        self.magazine[..n].copy_from_slice(&batch[..n]);
        self.len = n;
        Ok(())
    }

    #[cold]
    fn flush_batch(&mut self, n: usize) {
        let start = self.len - n;
        self.pool.raw.free_batch(&self.magazine[start..self.len]);
        self.len = start;
        self.publish_counters();
    }

    fn publish_counters(&mut self) {
        let c = self.pool.raw.counters();
        if self.allocations > 0 {
            c.allocations.fetch_add(self.allocations, Ordering::Relaxed);
            self.allocations = 0;
        }
        if self.frees > 0 {
            c.frees.fetch_add(self.frees, Ordering::Relaxed);
            self.frees = 0;
        }
    }
}

impl Drop for PoolCache<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn tiny(chunks_per_region: usize, max_regions: usize, initial: usize) -> ChunkPool {
        ChunkPool::new(PoolConfig {
            chunk_bytes: 64,
            chunks_per_region,
            max_regions,
            initial_regions: initial,
            region: RegionOptions {
                prefault: false,
                ..RegionOptions::default()
            },
        })
        .unwrap()
    }

    #[test]
    fn grows_lazily_then_exhausts() {
        let pool = tiny(4, 2, 0);
        assert_eq!(pool.stats().regions, 0);
        let mut held = Vec::new();
        for i in 0..8 {
            let mut c = pool.alloc().unwrap();
            c[0] = i;
            held.push(c);
        }
        assert_eq!(pool.stats().regions, 2);
        assert!(matches!(pool.alloc(), Err(AllocError::Exhausted { .. })));
        assert_eq!(pool.stats().exhaustions, 1);
        assert_eq!(pool.stats().in_use, 8);
        held.pop();
        assert!(pool.alloc().is_ok());
        drop(held);
        let s = pool.stats();
        assert_eq!((s.in_use, s.high_water), (0, 8));
        assert_eq!(s.allocations, s.frees);
    }

    #[test]
    fn free_list_is_lifo_and_fresh_chunks_come_by_bump() {
        let pool = tiny(8, 1, 1);
        let a = pool.alloc().unwrap();
        let b = pool.alloc().unwrap();
        assert_eq!((a.index(), b.index()), (0, 1));
        let ia = a.index();
        drop(a);
        let c = pool.alloc().unwrap();
        assert_eq!(c.index(), ia, "a freed chunk is reused before a fresh one");
        let (free, never) = pool.quiescent_free();
        assert!(free.is_empty());
        assert_eq!(never, 6);
    }

    #[test]
    fn cache_round_trip_and_flush() {
        let pool = tiny(16, 4, 1);
        let mut cache = pool.cache();
        let mut held: Vec<_> = (0..40).map(|_| cache.alloc().unwrap()).collect();
        for c in &mut held {
            c.words_mut()[0] = 0xdead_beef;
        }
        assert!(held.iter().all(|c| c.words()[0] == 0xdead_beef));
        for c in held.drain(..) {
            cache.free(c);
        }
        drop(cache);
        let s = pool.stats();
        assert_eq!(s.in_use, 0);
        assert_eq!(s.allocations, 40);
        assert_eq!(s.frees, 40);
    }

    #[test]
    fn a_cache_knows_its_pool_and_keeps_chunks_freed_by_another_thread() {
        let a = tiny(64, 1, 1);
        let b = tiny(64, 1, 1);
        let mut ca = a.cache();
        let mut cb = b.cache();
        let chunk = cb.alloc().unwrap();
        assert!(cb.owns(&chunk) && !ca.owns(&chunk));
        // Another thread's cache of the same pool keeps the chunk; a cache of another pool
        // gives it back to its own pool.
        let other = std::thread::scope(|s| {
            s.spawn(|| {
                let mut c2 = b.cache();
                c2.free(chunk);
                let again = c2.alloc().unwrap();
                ca.free(again);
                c2
            })
            .join()
            .unwrap()
        });
        drop(other);
        drop(cb);
        drop(ca);
        assert_eq!(a.stats().in_use, 0);
        assert_eq!(b.stats().in_use, 0);
        assert_eq!(b.stats().frees, b.stats().allocations);
    }

    #[test]
    fn config_errors_are_typed() {
        let bad = PoolConfig {
            chunk_bytes: 12,
            ..PoolConfig::new(64, 1 << 20)
        };
        assert!(matches!(ChunkPool::new(bad), Err(Error::Config(_))));
        let too_many = PoolConfig {
            chunk_bytes: 8,
            chunks_per_region: 1 << 20,
            max_regions: 1 << 13,
            initial_regions: 0,
            region: RegionOptions::default(),
        };
        assert!(matches!(ChunkPool::new(too_many), Err(Error::Config(_))));
    }
}
