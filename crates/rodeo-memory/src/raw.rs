//! The lock-free core shared by every pool: a tagged Treiber stack of free chunk indices, a bump
//! index over the newest region, and a grow flag. The state and its rules are documented in the
//! crate docs (section "The atomic state").

use crate::error::{AllocError, Error};
use crate::region::{Region, RegionOptions, WarmupReport};
use crate::stats::{Counters, PoolStats};
use crate::sync::{lock, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering, Padded};

/// The index that means "no chunk" in the head word and in the links.
pub(crate) const NIL: u32 = u32::MAX;

/// Chunks moved between a per-thread cache and the shared pool at once; a full batch goes to
/// the depot as one node.
pub(crate) const BATCH: usize = 32;

#[inline]
fn pack(idx: u32, tag: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(idx)
}

#[inline]
fn unpack(word: u64) -> (u32, u32) {
    (word as u32, (word >> 32) as u32)
}

/// Shape of a raw pool, validated.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub(crate) chunk_bytes: usize,
    pub(crate) chunks_per_region: u32,
    pub(crate) max_regions: u32,
    pub(crate) initial_regions: u32,
    pub(crate) options: RegionOptions,
}

impl Shape {
    pub(crate) fn new(
        chunk_bytes: usize,
        chunks_per_region: usize,
        max_regions: usize,
        initial_regions: usize,
        options: RegionOptions,
    ) -> Result<Shape, Error> {
        if chunk_bytes < 8 || chunk_bytes % 8 != 0 {
            return Err(Error::Config(format!(
                "chunk size {chunk_bytes} must be a non-zero multiple of 8 bytes"
            )));
        }
        if chunks_per_region == 0 || max_regions == 0 {
            return Err(Error::Config(format!(
                "a pool needs at least one chunk per region and one region \
                 (got {chunks_per_region} chunks per region, {max_regions} regions)"
            )));
        }
        if initial_regions > max_regions {
            return Err(Error::Config(format!(
                "{initial_regions} initial regions exceed the limit of {max_regions}"
            )));
        }
        let total = (chunks_per_region as u128) * (max_regions as u128);
        if total >= u128::from(NIL) {
            return Err(Error::Config(format!(
                "{total} chunks exceed the 2^32 - 1 chunk indices of a pool"
            )));
        }
        chunk_bytes.checked_mul(chunks_per_region).ok_or_else(|| {
            Error::Config(format!(
                "a region of {chunks_per_region} chunks of {chunk_bytes} bytes overflows"
            ))
        })?;
        Ok(Shape {
            chunk_bytes,
            chunks_per_region: chunks_per_region as u32,
            max_regions: max_regions as u32,
            initial_regions: initial_regions as u32,
            options,
        })
    }

    fn max_chunks(&self) -> usize {
        self.chunks_per_region as usize * self.max_regions as usize
    }
}

/// Outcome of one attempt to grow.
enum Grow {
    /// There is room now (this thread mapped a region, or another one did meanwhile).
    Grew,
    /// Another thread is mapping a region.
    Busy,
    /// The pool is at its limit.
    Full,
}

/// The lock-free pool core. Chunks are named by a global index
/// `region * chunks_per_region + offset`.
pub(crate) struct RawPool {
    /// Free-list head: `tag << 32 | index` (rule 1).
    head: Padded<AtomicU64>,
    /// Depot head: a stack of full batches, same format; a batch is named by its first chunk,
    /// whose memory holds the other `BATCH - 1` indices (rule 7).
    depot: Padded<AtomicU64>,
    /// Next never-used chunk index (rule 2).
    bump: Padded<AtomicU64>,
    /// Chunks in published regions (rule 3).
    committed: AtomicU64,
    /// Set while one thread maps a region (rule 4).
    growing: AtomicBool,
    /// `next[i]`: the chunk below `i` on the free list; meaningful only while `i` is free.
    next: Box<[AtomicU32]>,
    /// Base address of each region, written once before `committed` covers it.
    bases: Box<[AtomicUsize]>,
    counters: Padded<Counters>,
    shape: Shape,
    /// The owners of the mappings (slow path only: grow and drop).
    regions: Mutex<Vec<Region>>,
    warmup: Mutex<WarmupReport>,
}

impl std::fmt::Debug for RawPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawPool")
            .field("shape", &self.shape)
            .field("stats", &self.stats())
            .finish()
    }
}

impl RawPool {
    pub(crate) fn new(shape: Shape) -> Result<RawPool, Error> {
        let pool = RawPool {
            head: Padded(AtomicU64::new(pack(NIL, 0))),
            depot: Padded(AtomicU64::new(pack(NIL, 0))),
            bump: Padded(AtomicU64::new(0)),
            committed: AtomicU64::new(0),
            growing: AtomicBool::new(false),
            next: zeroed_links(shape.max_chunks()),
            bases: (0..shape.max_regions)
                .map(|_| AtomicUsize::new(0))
                .collect(),
            counters: Padded(Counters::new()),
            regions: Mutex::new(Vec::new()),
            warmup: Mutex::new(WarmupReport::default()),
            shape,
        };
        pool.reserve(pool.shape.initial_regions as usize)?;
        Ok(pool)
    }

    /// Maps regions until the pool has `regions` of them (or its limit), before a run starts.
    pub(crate) fn reserve(&self, regions: usize) -> Result<(), Error> {
        let want = (regions.min(self.shape.max_regions as usize) as u64)
            * u64::from(self.shape.chunks_per_region);
        let mut backoff = crate::queue::Backoff::new(crate::queue::BackoffSpec::MAPPING);
        while self.committed.load(Ordering::Acquire) < want {
            match self.grow(true)? {
                Grow::Grew => backoff.reset(),
                Grow::Busy => backoff.wait(),
                Grow::Full => break,
            }
        }
        Ok(())
    }

    pub(crate) fn chunk_bytes(&self) -> usize {
        self.shape.chunk_bytes
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Address of chunk `idx`, which the caller obtained from this pool.
    #[inline]
    pub(crate) fn addr(&self, idx: u32) -> *mut u8 {
        let cpr = self.shape.chunks_per_region;
        let region = (idx / cpr) as usize;
        let offset = (idx % cpr) as usize;
        // Relaxed is enough: whoever got `idx` synchronised with the thread that published the
        // region (acquire on `committed` for fresh chunks, on `head` for recycled ones).
        let base = self.bases[region].load(Ordering::Relaxed);
        (base + offset * self.shape.chunk_bytes) as *mut u8
    }

    /// Takes one chunk: free list, then bump, then grow; waits only while another thread maps
    /// a region.
    #[inline]
    pub(crate) fn alloc(&self) -> Result<u32, AllocError> {
        if let Some(idx) = self.pop(&self.head).or_else(|| self.bump_one()) {
            self.counters.take(1);
            return Ok(idx);
        }
        self.alloc_slow()
    }

    #[cold]
    fn alloc_slow(&self) -> Result<u32, AllocError> {
        let mut backoff = crate::queue::Backoff::new(crate::queue::BackoffSpec::MAPPING);
        loop {
            if let Some(idx) = self
                .pop(&self.head)
                .or_else(|| self.bump_one())
                .or_else(|| self.take_one_from_depot())
            {
                self.counters.take(1);
                return Ok(idx);
            }
            match self.grow(false)? {
                Grow::Grew => backoff.reset(),
                Grow::Busy => backoff.wait(),
                Grow::Full => {
                    if let Some(idx) = self.pop(&self.head).or_else(|| self.take_one_from_depot()) {
                        self.counters.take(1);
                        return Ok(idx);
                    }
                    self.counters.exhaustions.fetch_add(1, Ordering::Relaxed);
                    return Err(AllocError::Exhausted {
                        chunks: self.shape.max_chunks() as u64,
                        chunk_bytes: self.shape.chunk_bytes,
                    });
                }
            }
        }
    }

    /// Fills `out` with up to `out.len()` chunks (at least one on success): a run of the free
    /// list taken with one CAS, else one bump of the whole batch.
    pub(crate) fn alloc_batch(&self, out: &mut [u32; BATCH]) -> Result<usize, AllocError> {
        if self.pop_batch(out) {
            self.counters.take(BATCH as u64);
            return Ok(BATCH);
        }
        let mut n = self.pop_many(out);
        if n == 0 {
            if let Some((first, count)) = self.bump_many(out.len() as u64) {
                for (k, slot) in out.iter_mut().take(count as usize).enumerate() {
                    *slot = first + k as u32;
                }
                n = count as usize;
            }
        }
        if n > 0 {
            self.counters.take(n as u64);
            return Ok(n);
        }
        out[0] = self.alloc_slow()?;
        Ok(1)
    }

    /// Gives chunk `idx` back.
    #[inline]
    pub(crate) fn free(&self, idx: u32) {
        self.counters.give_back(1);
        self.push_chain(&self.head, idx, idx);
    }

    /// Gives chunks back with one successful CAS: links them through `next`, then pushes the
    /// chain.
    pub(crate) fn free_batch(&self, idxs: &[u32]) {
        let (Some(&first), Some(&last)) = (idxs.first(), idxs.last()) else {
            return;
        };
        if idxs.len() == BATCH && self.shape.chunk_bytes >= 4 * BATCH {
            self.counters.give_back(BATCH as u64);
            let slots = self.addr(first).cast::<u32>();
            for (k, &idx) in idxs[1..].iter().enumerate() {
                // SAFETY: chunk `first` is ours (rule 5, rule 7), 8-byte aligned, and at least
                // 4 * BATCH bytes long, so slots k < BATCH - 1 are inside it.
                unsafe { slots.add(k).write(idx) };
            }
            self.push_chain(&self.depot, first, first);
            return;
        }
        for pair in idxs.windows(2) {
            // The chunks are ours until the push below publishes them (rule 5).
            self.next[pair[0] as usize].store(pair[1], Ordering::Relaxed);
        }
        self.counters.give_back(idxs.len() as u64);
        self.push_chain(&self.head, first, last);
    }

    /// Takes a whole batch from the depot: one CAS and one read of the batch's first chunk.
    fn pop_batch(&self, out: &mut [u32; BATCH]) -> bool {
        let Some(first) = self.pop(&self.depot) else {
            return false;
        };
        out[0] = first;
        let slots = self.addr(first).cast::<u32>().cast_const();
        for (k, slot) in out[1..].iter_mut().enumerate() {
            // SAFETY: the successful pop made batch `first` ours, and the acquire in it made
            // the indices written before its push visible (rule 7); slots k < BATCH - 1 lie
            // inside the chunk (free_batch only builds batches of chunks >= 4 * BATCH bytes).
            *slot = unsafe { slots.add(k).read() };
        }
        true
    }

    /// Takes one chunk out of a depot batch and moves the rest to the free list (slow path of a
    /// direct allocation, so that chunks parked in the depot are never out of reach).
    fn take_one_from_depot(&self) -> Option<u32> {
        let mut batch = [0; BATCH];
        if !self.pop_batch(&mut batch) {
            return None;
        }
        for pair in batch[1..].windows(2) {
            self.next[pair[0] as usize].store(pair[1], Ordering::Relaxed);
        }
        self.push_chain(&self.head, batch[1], batch[BATCH - 1]);
        Some(batch[0])
    }

    /// Pops the top of the stack at `head` (the free list or the depot; rule 1).
    #[inline]
    fn pop(&self, stack: &AtomicU64) -> Option<u32> {
        let mut head = stack.load(Ordering::Acquire);
        loop {
            let (idx, tag) = unpack(head);
            if idx == NIL {
                return None;
            }
            // May read a link that a concurrent pop + push of `idx` is rewriting; then the tag
            // has moved on and the CAS below fails (the ABA case).
            let below = self.next[idx as usize].load(Ordering::Relaxed);
            match stack.compare_exchange_weak(
                head,
                pack(below, tag.wrapping_add(1)),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(idx),
                Err(now) => head = now,
            }
        }
    }

    /// Pops up to `out.len()` chunks from the top of the free list with one successful CAS
    /// (rule 1): walks the links from the head it read, then swings the head past the run. A
    /// successful CAS means the head word (tag included) did not change since it was read, so no
    /// pop or push happened and the walked links were the list's; otherwise the walk may have
    /// read links that were being rewritten, and it starts again.
    fn pop_many(&self, out: &mut [u32]) -> usize {
        let mut head = self.head.load(Ordering::Acquire);
        'retry: loop {
            let (top, tag) = unpack(head);
            let mut idx = top;
            let mut n = 0;
            while idx != NIL && n < out.len() {
                let Some(link) = self.next.get(idx as usize) else {
                    // A torn walk (the list changed under us); the CAS would fail anyway.
                    head = self.head.load(Ordering::Acquire);
                    continue 'retry;
                };
                out[n] = idx;
                n += 1;
                idx = link.load(Ordering::Relaxed);
            }
            if n == 0 {
                return 0;
            }
            match self.head.compare_exchange_weak(
                head,
                pack(idx, tag.wrapping_add(1)),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return n,
                Err(now) => head = now,
            }
        }
    }

    /// Pushes the chain `first ..= last` (already linked) on the stack at `stack` (rule 1,
    /// rule 5).
    #[inline]
    fn push_chain(&self, stack: &AtomicU64, first: u32, last: u32) {
        let mut head = stack.load(Ordering::Relaxed);
        loop {
            let (top, tag) = unpack(head);
            self.next[last as usize].store(top, Ordering::Relaxed);
            match stack.compare_exchange_weak(
                head,
                pack(first, tag.wrapping_add(1)),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// Hands out one never-used chunk of the published regions (rule 2).
    #[inline]
    fn bump_one(&self) -> Option<u32> {
        self.bump_many(1).map(|(first, _)| first)
    }

    /// Hands out up to `want` consecutive never-used chunks: `(first, count)`.
    fn bump_many(&self, want: u64) -> Option<(u32, u32)> {
        let mut at = self.bump.load(Ordering::Relaxed);
        loop {
            let end = self.committed.load(Ordering::Acquire);
            if at >= end {
                return None;
            }
            let count = want.min(end - at);
            match self.bump.compare_exchange_weak(
                at,
                at + count,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some((at as u32, count as u32)),
                Err(now) => at = now,
            }
        }
    }

    /// Maps one more region unless another thread is doing it or the limit is reached (rule 4).
    /// `force`: grow even if unused fresh chunks remain (used by `reserve`).
    fn grow(&self, force: bool) -> Result<Grow, Error> {
        if self
            .growing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Ok(Grow::Busy);
        }
        /// Clears the grow flag however `grow_exclusive` ends, a panic included, so that other
        /// allocators never wait for a grower that is gone (rule 4).
        struct Clear<'a>(&'a AtomicBool);
        impl Drop for Clear<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _clear = Clear(&self.growing);
        self.grow_exclusive(force)
    }

    fn grow_exclusive(&self, force: bool) -> Result<Grow, Error> {
        let committed = self.committed.load(Ordering::Acquire);
        if !force && self.bump.load(Ordering::Relaxed) < committed {
            return Ok(Grow::Grew);
        }
        let cpr = u64::from(self.shape.chunks_per_region);
        let region = committed / cpr;
        if region >= u64::from(self.shape.max_regions) {
            return Ok(Grow::Full);
        }
        let bytes = self.shape.chunk_bytes * self.shape.chunks_per_region as usize;
        let (mapping, report) = Region::map(bytes, &self.shape.options)?;
        self.bases[region as usize].store(mapping.as_ptr() as usize, Ordering::Release);
        lock(&self.regions).push(mapping);
        lock(&self.warmup).merge(&report);
        // Publishing: bump may now hand out chunks of the new region (rule 3).
        self.committed.store(committed + cpr, Ordering::Release);
        Ok(Grow::Grew)
    }

    pub(crate) fn warmup_report(&self) -> WarmupReport {
        lock(&self.warmup).clone()
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let c = &self.counters;
        let regions =
            self.committed.load(Ordering::Acquire) / u64::from(self.shape.chunks_per_region);
        PoolStats {
            allocations: c.allocations.load(Ordering::Relaxed),
            frees: c.frees.load(Ordering::Relaxed),
            in_use: c.in_use(),
            high_water: c.high_water.load(Ordering::Relaxed),
            exhaustions: c.exhaustions.load(Ordering::Relaxed),
            regions,
            bytes_reserved: regions
                * u64::from(self.shape.chunks_per_region)
                * self.shape.chunk_bytes as u64,
            capacity_chunks: self.shape.max_chunks() as u64,
        }
    }

    /// Every chunk index on the free list and in the depot (quiescent pools only; tests).
    pub(crate) fn free_list(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let (mut idx, _) = unpack(self.head.load(Ordering::Acquire));
        while idx != NIL && out.len() <= self.shape.max_chunks() {
            out.push(idx);
            idx = self.next[idx as usize].load(Ordering::Relaxed);
        }
        let (mut batch, _) = unpack(self.depot.load(Ordering::Acquire));
        while batch != NIL && out.len() <= self.shape.max_chunks() {
            out.push(batch);
            let slots = self.addr(batch).cast::<u32>().cast_const();
            for k in 0..BATCH - 1 {
                // SAFETY: the pool is quiescent (caller's promise), so the depot's batches are
                // stable and their first chunks hold BATCH - 1 indices (rule 7).
                out.push(unsafe { slots.add(k).read() });
            }
            batch = self.next[batch as usize].load(Ordering::Relaxed);
        }
        out
    }

    /// Chunks of the published regions never handed out yet (tests).
    pub(crate) fn never_used(&self) -> u64 {
        self.committed.load(Ordering::Acquire) - self.bump.load(Ordering::Relaxed)
    }
}

/// The link array, zero-filled lazily by the kernel: no pass over it at construction, in the
/// spirit of the lazy free list (4 bytes per chunk of the configured limit).
#[cfg(not(loom))]
fn zeroed_links(n: usize) -> Box<[AtomicU32]> {
    if n == 0 {
        return Box::new([]);
    }
    let layout = match std::alloc::Layout::array::<AtomicU32>(n) {
        Ok(l) => l,
        Err(_) => std::alloc::handle_alloc_error(std::alloc::Layout::new::<AtomicU32>()),
    };
    // SAFETY: the layout has a non-zero size (n > 0).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<AtomicU32>();
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: p points to n zeroed AtomicU32 (an all-zero AtomicU32 is a valid 0), allocated by
    // the global allocator with the layout of [AtomicU32; n], which is what Box<[AtomicU32]>
    // frees with.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) }
}

#[cfg(loom)]
fn zeroed_links(n: usize) -> Box<[AtomicU32]> {
    (0..n).map(|_| AtomicU32::new(0)).collect()
}
