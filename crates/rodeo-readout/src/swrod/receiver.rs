//! One receiving thread: the block walker and the per-thread aggregation.
//!
//! # The hot path
//!
//! Per block: the 4-byte header names the E-link; one table lookup maps it to this thread's
//! local index (2048 entries, no hashing). The trailers are read backwards from the block end,
//! in one pass: a whole packet (BOTH, no flag) goes straight to [`Aggregator::packet`] as soon
//! as its trailer is read, so the packets of one block arrive last first; every other subchunk
//! (pieces of split packets, flagged, out-of-band) is kept in a reused list and then handed,
//! forwards, to the E-link's [`ElinkReassembler`], which rebuilds split packets in its reused
//! buffer and applies the FELIX rules. So whole packets never wait for, and never disturb, the
//! reassembly of split ones; a whole packet that a malformed stream places inside an open split
//! packet is still delivered whole (the reassembler would have cut the open one there: here the
//! open one continues, fails the decoder's length check and is counted as corrupt). The order
//! inside a block does not matter for the fragments: each packet of a block has its own L1ID,
//! and the window is at least as large as a block's packet count (checked at configuration).
//!
//! Per packet (the inline fast path): the decoder gives the L1ID; its raw difference from the
//! oldest open event's extended L1ID gives the event number whenever no L1ID wrap or ECR lies in
//! between (`fast_span`, recomputed once per event; anything else goes to the out-of-line
//! `seq_slow`), and its low bits the window slot (no hashing, no division). One bit per (slot,
//! E-link) says whether the packet already arrived (duplicates); the number of E-links arrived
//! is the bits' population count, taken once per block and per event rather than counted per
//! packet. The packet is copied once, with fixed-size moves, behind its 2-word packet header,
//! into the thread's memory block for that L1ID. Rare outcomes (overflow, flagged packets,
//! window moves, late packets) are `#[cold]` functions.
//!
//! # Events, in order
//!
//! A thread closes ("finalizes") its part of events strictly in event order, at `base`: when
//! every one of its E-links has delivered (the normal case, checked after each block), when the
//! base event is older than
//! the timeout, when a packet arrives a whole window ahead (the window moves past the base), or
//! at the end of the run.
//!
//! # Ownership
//!
//! Everything here belongs to one thread: the window's local slots and their blocks, the
//! arrival bits, the reassemblers, the pool cache and the counters (plain `u64`s, published to
//! the builder's shared mirror once per superpage). The shared state a thread touches: its own
//! ring cell in [`Shared`] once per event (read by the assembler later), its completion mark and
//! the other marks once per superpage, the assembly claim when there is something to assemble,
//! and the pool when its cache runs empty. Nothing shared is written per packet.

use rodeo_format::felix::{ChunkFlags, ElinkReassembler, Subchunk, SubchunkType, TrailerSize};
use rodeo_format::fragment::{RodBuilder, Status, StatusPosition, FORMAT_VERSION, ROB_MARKER};
use rodeo_memory::{Chunk, PoolCache};

use super::decoder::PacketDecoder;
use super::fragment::{Flow, Fragment, FragmentSink, HEADER_WORDS, MAX_THREADS, ROB_HEADER_WORDS};
use super::shared::{Part, Parts, Shared, GROUP};
use super::{Plan, SwRodCounters};

const NO_SEQUENCE: u8 = 0xFF;
/// A thread publishes its mark (and assembles its share) at least every this many events, so
/// that fragments are assembled while their blocks are still in the caches.
const PUBLISH_EVERY: u64 = 16;
/// How many blocks ahead of the walker the input is prefetched.
const PREFETCH_BLOCKS: usize = 4;

/// Asks the CPU to bring `bytes` into the cache (a hint: no effect on results).
#[inline(always)]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = bytes.as_ptr();
        let mut off = 0;
        while off < bytes.len() {
            // SAFETY: a prefetch is a hint that never faults and has no effect on memory; the
            // address lies inside a live slice, and SSE is part of the x86-64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast()) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Copies a packet with fixed-size moves: two overlapping 32-byte moves for 33 to 64 bytes
/// (the common case at 100 MHz), two 16-byte moves for 16 to 32, two 8-byte moves for 8 to 15;
/// `copy_from_slice` otherwise. Both loads come before both stores, so the overlap is exact.
/// `dst` and `src` have the same length.
#[inline(always)]
fn copy_packet(dst: &mut [u8], src: &[u8]) {
    #[inline(always)]
    fn two<const N: usize>(dst: &mut [u8], src: &[u8]) {
        if let (Some(a), Some(b)) = (src.first_chunk::<N>(), src.last_chunk::<N>()) {
            let (a, b) = (*a, *b);
            if let Some(d) = dst.first_chunk_mut::<N>() {
                *d = a;
            }
            if let Some(d) = dst.last_chunk_mut::<N>() {
                *d = b;
            }
        }
    }
    let n = src.len();
    if n != dst.len() {
        return;
    }
    match n {
        33..=64 => two::<32>(dst, src),
        16..=32 => two::<16>(dst, src),
        8..=15 => two::<8>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

/// Waits with a short spin, then yields, then sleeps.
pub(crate) struct Backoff(u32);

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff(0)
    }

    pub(crate) fn wait(&mut self) {
        if self.0 < 32 {
            std::hint::spin_loop();
        } else if self.0 < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        self.0 = self.0.saturating_add(1);
    }

    pub(crate) fn reset(&mut self) {
        self.0 = 0;
    }
}

/// This thread's state for one L1ID of the window.
struct LocalSlot<'p> {
    chunk: Option<Chunk<'p>>,
    /// Write position in bytes.
    pos: u32,
    /// Packets whose BCID differs from the first one's.
    mismatches: u32,
    /// Of the E-links arrived (the slot's arrival bits), those, packets that did not fit the block.
    dropped: u32,
    last_local: u32,
    bcid: u16,
    status: Status,
    opened_at: u64,
    open: bool,
    unordered: bool,
}

impl LocalSlot<'_> {
    fn closed() -> Self {
        LocalSlot {
            chunk: None,
            pos: 0,
            mismatches: 0,
            dropped: 0,
            last_local: 0,
            bcid: 0,
            status: Status::OK,
            opened_at: 0,
            open: false,
            unordered: false,
        }
    }
}

/// Everything a packet touches (split from the reassemblers so both can be borrowed at once).
pub(crate) struct Aggregator<'b, 'p, D, K> {
    t: usize,
    plan: &'b Plan,
    shared: &'b Shared<'p>,
    decoder: &'b D,
    sink: &'b K,
    cache: PoolCache<'p>,
    elinks: &'b [u16],
    nlocal: u32,
    words_per_slot: usize,
    // Copies of the plan's numbers the packet path uses (no pointer chase per packet).
    wrap: u64,
    modulus: u64,
    window: u64,
    limit: usize,
    /// Oldest open event (run-local number) and its number modulo the L1ID cycle.
    base: u64,
    base_mod: u64,
    /// The base event's raw extended L1ID, and how many events from the base on share its ECR
    /// without an L1ID wrap (at most the window): the packet path's fast span.
    base_raw: u32,
    base_l1: u64,
    fast_span: u32,
    slots: Vec<LocalSlot<'p>>,
    arrived: Vec<u64>,
    open_events: usize,
    waiting_since: u64,
    /// The base event with no packet here that another thread has published, and when that
    /// was first seen (the timeout of such an event runs from then).
    behind: (u64, u64),
    /// The last `released` read: ring cells below it plus the window are free.
    released_seen: u64,
    /// Every event of this thread's assembly groups below this is assembled.
    cursor: u64,
    /// Inside `publish`'s assembly (a nested publish only stores the mark).
    assembling: bool,
    /// The last mark published.
    published: u64,
    pub(crate) now: u64,
    /// One past the newest event seen.
    end_seen: u64,
    pub(crate) c: SwRodCounters,
    missing: Vec<u32>,
    order: Vec<(u32, u32, u32)>,
    scratch: Vec<u8>,
}

impl<'b, 'p, D: PacketDecoder, K: FragmentSink<'p>> Aggregator<'b, 'p, D, K> {
    pub(crate) fn new(
        t: usize,
        plan: &'b Plan,
        shared: &'b Shared<'p>,
        decoder: &'b D,
        sink: &'b K,
        cache: PoolCache<'p>,
    ) -> Self {
        let elinks = &plan.thread_elinks[t][..];
        let words_per_slot = elinks.len().div_ceil(64);
        let window = plan.window as usize;
        let mut agg = Aggregator {
            t,
            plan,
            shared,
            decoder,
            sink,
            cache,
            elinks,
            nlocal: elinks.len() as u32,
            words_per_slot,
            wrap: plan.wrap,
            modulus: plan.modulus,
            window: plan.window,
            limit: plan.data_limit_bytes,
            base: 0,
            base_mod: plan.first_mod,
            base_raw: 0,
            base_l1: 0,
            fast_span: 0,
            slots: (0..window).map(|_| LocalSlot::closed()).collect(),
            arrived: vec![0; window * words_per_slot],
            open_events: 0,
            waiting_since: 0,
            behind: (u64::MAX, 0),
            released_seen: 0,
            cursor: 0,
            assembling: false,
            published: 0,
            now: 0,
            end_seen: 0,
            c: SwRodCounters::default(),
            missing: Vec::with_capacity(plan.total_elinks),
            order: Vec::with_capacity(elinks.len()),
            scratch: vec![0; plan.chunk_bytes],
        };
        agg.base_l1 = plan.first_mod % plan.wrap;
        agg.base_raw = ((plan.first_mod / plan.wrap) as u32 & 0xFF) << 24 | agg.base_l1 as u32;
        agg.set_fast_span();
        agg
    }

    fn set_fast_span(&mut self) {
        self.fast_span = (self.wrap - self.base_l1).min(self.window) as u32;
    }

    fn aborted(&self) -> bool {
        self.shared.abort.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Places one packet of local E-link `local` (E-link number `elink`).
    ///
    /// The common case is inline and straight: decode, one subtraction to the event number,
    /// the arrival bit, and the copy. Everything rare (L1ID wrap or ECR ahead, late packets,
    /// window moves, a closed slot, a full block, flagged packets) is out of line.
    #[inline(always)]
    pub(crate) fn packet(&mut self, local: usize, elink: u16, data: &[u8], flags: u16) {
        let Ok(info) = self.decoder.decode(elink, data) else {
            self.c.corrupt_packets += 1;
            return;
        };
        // Fast path: within `fast_span` events of the base no L1ID wrap or ECR intervenes, so
        // the event distance is the difference of the raw extended L1IDs.
        let d = info.l1id.wrapping_sub(self.base_raw);
        let seq = if d < self.fast_span {
            self.base + u64::from(d)
        } else {
            match self.seq_slow(info.l1id) {
                Some(seq) => seq,
                None => return,
            }
        };
        let si = (seq & (self.window - 1)) as usize;
        if !self.slots[si].open && !self.open_slot(si, seq, info.bcid) {
            return;
        }
        let Some(word) = self
            .arrived
            .get_mut(si * self.words_per_slot + (local >> 6))
        else {
            return;
        };
        let bit = 1u64 << (local & 63);
        if *word & bit != 0 {
            self.c.duplicate_packets += 1;
            return;
        }
        *word |= bit;
        let s = &mut self.slots[si];
        s.mismatches += u32::from(info.bcid != s.bcid);
        s.unordered |= (local as u32) < s.last_local;
        s.last_local = local as u32;
        let len = data.len();
        let padded = (len + 3) & !3;
        let need = 8 + padded;
        let pos = s.pos as usize;
        let limit = self.limit;
        let buf = match s.chunk.as_mut() {
            Some(chunk) if pos + need <= limit && need <= 0xFFFF => chunk.get_mut(pos..pos + need),
            _ => None,
        };
        let Some(buf) = buf else {
            self.overflow(si);
            return;
        };
        buf[..4].copy_from_slice(&(need as u32 | u32::from(flags) << 16).to_le_bytes());
        buf[4..8].copy_from_slice(&u32::from(elink).to_le_bytes());
        copy_packet(&mut buf[8..8 + len], data);
        if padded != len {
            buf[8 + len..].fill(0);
        }
        s.pos += need as u32;
        if flags != 0 {
            self.flagged(si, flags);
        }
    }

    /// The event number of a packet outside the fast span: L1ID wrap or ECR between the base
    /// and the packet, a late packet, or one a window ahead (the window moves). `None` when the
    /// packet is dropped (counted) or the run is aborting.
    #[cold]
    #[inline(never)]
    fn seq_slow(&mut self, l1id: u32) -> Option<u64> {
        let (wrap, modulus, window) = (self.wrap, self.modulus, self.window);
        let l1 = u64::from(l1id & 0x00FF_FFFF);
        if l1 >= wrap {
            self.c.corrupt_packets += 1;
            return None;
        }
        let e = u64::from(l1id >> 24) * wrap + l1;
        let d = if e >= self.base_mod {
            e - self.base_mod
        } else {
            e + modulus - self.base_mod
        };
        if d >= modulus / 2 {
            self.c.late_packets += 1;
            return None;
        }
        let seq = self.base + d;
        if d >= window {
            // Events completed in this block are closed first (completion is checked once per
            // block), so that only incomplete ones count as window moves.
            self.drain();
            let target = seq - window + 1;
            while self.base < target {
                self.c.window_moves += 1;
                if !self.finalize_base() {
                    return None;
                }
            }
            self.waiting_since = self.now;
        }
        Some(seq)
    }

    /// A packet that does not fit its block: dropped and flagged.
    #[cold]
    #[inline(never)]
    fn overflow(&mut self, si: usize) {
        let s = &mut self.slots[si];
        s.status |= Status::INTERNAL_OVERFLOW | Status::ROB_FRAGMENT_SIZE;
        s.dropped += 1;
        self.c.overflow_packets += 1;
    }

    /// A packet delivered with FELIX error flags.
    #[cold]
    #[inline(never)]
    fn flagged(&mut self, si: usize, flags: u16) {
        self.c.flagged_packets += 1;
        self.slots[si].status |= flag_status(flags);
    }

    /// E-links of slot `si` that delivered a packet.
    fn arrived_count(&self, si: usize) -> u32 {
        let w = self.words_per_slot;
        self.arrived[si * w..(si + 1) * w]
            .iter()
            .map(|b| b.count_ones())
            .sum()
    }

    /// Whether the slot `si` is open and has every E-link's packet.
    fn complete(&self, si: usize) -> bool {
        self.slots[si].open && self.arrived_count(si) == self.nlocal
    }

    /// Takes a memory block from the pool, waiting (counted) while it is empty; `None` when the
    /// run is aborted meanwhile.
    fn alloc_block(&mut self) -> Option<Chunk<'p>> {
        let mut backoff = Backoff::new();
        loop {
            match self.cache.alloc() {
                Ok(c) => return Some(c),
                Err(_) => {
                    self.c.pool_waits += 1;
                    if self.aborted() {
                        return None;
                    }
                    // Blocks may be held by parts written but not yet published.
                    self.publish();
                    backoff.wait();
                }
            }
        }
    }

    /// Opens slot `si` for event `seq`: takes a memory block (waiting while the pool is empty).
    #[cold]
    fn open_slot(&mut self, si: usize, seq: u64, bcid: u16) -> bool {
        let Some(chunk) = self.alloc_block() else {
            return false;
        };
        if self.open_events == 0 {
            self.waiting_since = self.now;
        }
        self.open_events += 1;
        self.end_seen = self.end_seen.max(seq + 1);
        self.slots[si] = LocalSlot {
            chunk: Some(chunk),
            pos: (HEADER_WORDS * 4) as u32,
            mismatches: 0,
            dropped: 0,
            last_local: 0,
            bcid,
            status: Status::OK,
            opened_at: self.now,
            open: true,
            unordered: false,
        };
        true
    }

    /// Finalizes complete events at the base.
    #[inline(never)]
    fn drain(&mut self) {
        loop {
            if !self.complete((self.base & (self.window - 1)) as usize) {
                return;
            }
            if !self.finalize_base() {
                return;
            }
            self.waiting_since = self.now;
        }
    }

    /// Closes this thread's part of the base event and writes it into this thread's ring (the
    /// fragment is assembled once every thread has published its part). False when the run is
    /// aborting.
    fn finalize_base(&mut self) -> bool {
        let seq = self.base;
        let si = (seq & (self.plan.window - 1)) as usize;
        let count = self.arrived_count(si);
        let mut s = std::mem::replace(&mut self.slots[si], LocalSlot::closed());
        let bits = si * self.words_per_slot..(si + 1) * self.words_per_slot;
        let part = if s.open {
            self.open_events -= 1;
            // Counted here, once per event, rather than once per packet.
            let placed = count - s.dropped;
            if s.mismatches > 0 {
                s.status |= Status::BCID_CHECK_FAIL;
                self.c.bcid_mismatches += u64::from(s.mismatches);
            }
            self.c.packets += u64::from(placed);
            self.c.packet_bytes += (s.pos as usize - HEADER_WORDS * 4 - 8 * placed as usize) as u64;
            let mut chunk = s.chunk;
            let mut end = s.pos as usize / 4;
            let mut missing = 0;
            if let Some(c) = chunk.as_mut() {
                if s.unordered {
                    self.reorder(c, s.pos as usize);
                }
                if count < self.nlocal {
                    let arrived = &self.arrived[bits.clone()];
                    let words = c.words_mut();
                    for (local, &elink) in self.elinks.iter().enumerate() {
                        if arrived[local / 64] & (1 << (local % 64)) == 0 {
                            if let Some(w) = words.get_mut(end + missing) {
                                *w = u32::from(elink);
                                missing += 1;
                            }
                        }
                    }
                }
            } else {
                end = HEADER_WORDS;
            }
            Part {
                chunk,
                end: end as u32,
                missing: missing as u32,
                status: s.status,
                bcid: Some(s.bcid),
                packets: placed,
            }
        } else {
            Part {
                chunk: None,
                end: HEADER_WORDS as u32,
                missing: self.nlocal,
                status: Status::OK,
                bcid: None,
                packets: 0,
            }
        };
        self.arrived[bits].fill(0);
        if seq >= self.released_seen + self.window {
            self.released_seen = self.shared.released();
            if seq >= self.released_seen + self.window && !self.wait_for_ring(seq) {
                return false;
            }
        }
        // SAFETY: this is thread `self.t` (one Aggregator per thread index); `seq` is below the
        // `released` we read plus the window (checked just above), and it is this thread's next
        // event: `base` moves past it right after, and marks publish `base`.
        unsafe { self.shared.write(self.t, seq, part) };
        self.base += 1;
        self.base_mod += 1;
        if self.base_mod == self.plan.modulus {
            self.base_mod = 0;
        }
        self.base_l1 += 1;
        if self.base_l1 == self.wrap {
            // L1ID wrap: the ECR byte increments.
            self.base_l1 = 0;
            self.base_raw = ((self.base_raw >> 24).wrapping_add(1) & 0xFF) << 24;
        } else {
            self.base_raw = self.base_raw.wrapping_add(1);
        }
        self.set_fast_span();
        true
    }

    /// Waits until the ring cell of `seq` is free (this thread is a window ahead of the
    /// assembly), publishing and assembling meanwhile. False when the run is aborting.
    #[cold]
    #[inline(never)]
    fn wait_for_ring(&mut self, seq: u64) -> bool {
        self.c.slot_waits += 1;
        self.shared.horizon.fetch_max(
            self.end_seen.max(seq + 1),
            std::sync::atomic::Ordering::AcqRel,
        );
        // The slower thread is usually only a little behind (or was preempted): spin and yield
        // for a while before sleeping.
        let mut tries = 0u32;
        loop {
            self.publish();
            self.released_seen = self.shared.released();
            if seq < self.released_seen + self.window {
                return true;
            }
            if self.aborted() {
                return false;
            }
            tries = tries.saturating_add(1);
            if tries < 64 {
                std::hint::spin_loop();
            } else if tries < 20_000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        }
    }

    /// Publishes this thread's mark (its parts of every event below `base` are written) and
    /// assembles the complete events of this thread's groups.
    #[inline(never)]
    pub(crate) fn publish(&mut self) {
        self.shared.publish(self.t, self.base);
        self.published = self.base;
        if self.assembling {
            // Called again from inside an assembly (a pool wait): the mark is enough.
            return;
        }
        let end = self.shared.complete_end();
        if end <= self.cursor {
            return;
        }
        self.assembling = true;
        let mut seq = self.cursor;
        while seq < end {
            let group_end = ((seq / GROUP + 1) * GROUP).min(end);
            if self.shared.assembler_of(seq) == self.t as u64 {
                for s in seq..group_end {
                    // SAFETY: `s` is in one of our groups, below the `complete_end` we read,
                    // taken once (our cursor moves past it below), and the cursor is stored
                    // after.
                    let parts = unsafe { self.shared.take(s) };
                    self.assemble(s, parts);
                }
            }
            seq = group_end;
        }
        self.cursor = end;
        self.shared.set_cursor(self.t, end);
        self.assembling = false;
    }

    /// Publishes and assembles until every event below `end` is complete (end of run: every
    /// thread's final mark is `end`). False when the run is aborting.
    pub(crate) fn complete_until(&mut self, end: u64) -> bool {
        let mut backoff = Backoff::new();
        loop {
            self.publish();
            if self.shared.complete_end() >= end {
                self.publish();
                return true;
            }
            if self.aborted() {
                return false;
            }
            backoff.wait();
        }
    }

    /// Puts the packets of a part into E-link order (rare: only when they arrived out of order).
    #[cold]
    fn reorder(&mut self, chunk: &mut Chunk<'p>, end: usize) {
        self.c.reordered_parts += 1;
        self.order.clear();
        let start = HEADER_WORDS * 4;
        let bytes: &mut [u8] = chunk;
        let mut at = start;
        while at + 8 <= end {
            let w0 = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
            let elink = u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]);
            let len = (w0 & 0xFFFF) as usize;
            if len < 8 || at + len > end {
                return;
            }
            let local = self
                .plan
                .local_of(elink)
                .map_or(u32::MAX, |(_, l)| l as u32);
            self.order.push((local, at as u32, len as u32));
            at += len;
        }
        self.order.sort_unstable_by_key(|&(local, ..)| local);
        let mut out = 0;
        for &(_, from, len) in &self.order {
            let (from, len) = (from as usize, len as usize);
            self.scratch[out..out + len].copy_from_slice(&bytes[from..from + len]);
            out += len;
        }
        bytes[start..start + out].copy_from_slice(&self.scratch[..out]);
    }

    /// Builds the fragment of `seq` from every thread's part and hands it to the sink.
    fn assemble(&mut self, seq: u64, mut parts: Parts<'p>) {
        let plan = self.plan;
        let mut status = Status::OK;
        let mut bcid: Option<u16> = None;
        let mut packets = 0;
        self.missing.clear();
        let mut frag = Fragment {
            blocks: Default::default(),
            ends: [HEADER_WORDS as u32; MAX_THREADS],
            first: usize::MAX,
            last: 0,
            trailer_words: 0,
            data_words: 0,
            l1id: plan.extended_l1id(seq),
            bcid: 0,
            status: Status::OK,
            packets: 0,
            missing: 0,
            thread: self.t,
        };
        for (t, part) in parts.iter_mut().enumerate().take(plan.threads()) {
            let Some(part) = part.take() else { continue };
            status |= part.status;
            packets += part.packets;
            if let Some(b) = part.bcid {
                match bcid {
                    None => bcid = Some(b),
                    Some(x) if x != b => {
                        status |= Status::BCID_CHECK_FAIL;
                        self.c.bcid_mismatches += 1;
                    }
                    Some(_) => {}
                }
            }
            match &part.chunk {
                Some(c) => {
                    let end = part.end as usize;
                    let list = c
                        .words()
                        .get(end..end + part.missing as usize)
                        .unwrap_or(&[]);
                    self.missing.extend_from_slice(list);
                }
                None => self
                    .missing
                    .extend(plan.thread_elinks[t].iter().map(|&e| u32::from(e))),
            }
            if let Some(c) = part.chunk {
                if frag.first == usize::MAX {
                    frag.first = t;
                }
                frag.last = t;
                frag.ends[t] = part.end;
                frag.data_words += part.end as usize - HEADER_WORDS;
                frag.blocks[t] = Some(c);
            }
        }
        if frag.blocks[self.t].is_some() {
            // Header and trailer go into this thread's own block: the other threads' blocks
            // are only read, never written, by the thread that completes the fragment.
            frag.first = self.t;
            frag.last = self.t;
        }
        if frag.first == usize::MAX {
            // No thread had a packet: one empty block carries header and trailer.
            let Some(chunk) = self.alloc_block() else {
                return;
            };
            frag.first = 0;
            frag.last = 0;
            frag.blocks[0] = Some(chunk);
        }
        if !self.missing.is_empty() {
            status |= Status::TIMEOUT | Status::ROB_FRAGMENT_LOST;
            self.c.incomplete_fragments += 1;
            self.c.missing_packets += self.missing.len() as u64;
        }
        let bcid = bcid.unwrap_or(0);
        let nmissing = self.missing.len();
        let trailer_words = 1 + nmissing + 3;
        let size = HEADER_WORDS + frag.data_words + trailer_words;
        let rod = RodBuilder {
            source_id: plan.source_id,
            run_number: plan.run_number,
            extended_l1id: frag.l1id,
            bcid,
            status_position: StatusPosition::AfterData,
            ..RodBuilder::default()
        };
        let rob = [
            ROB_MARKER,
            size as u32,
            ROB_HEADER_WORDS as u32,
            FORMAT_VERSION,
            plan.source_id.word(),
            1,
            status.word(),
            rodeo_format::checksum::ChecksumType::None.to_word(),
        ];
        if let Some(c) = frag.blocks[frag.first].as_mut() {
            let w = c.words_mut();
            w[..ROB_HEADER_WORDS].copy_from_slice(&rob);
            w[ROB_HEADER_WORDS..HEADER_WORDS].copy_from_slice(&rod.header_words());
        }
        let end = frag.ends[frag.last] as usize;
        if let Some(c) = frag.blocks[frag.last].as_mut() {
            // Every block reserves room for the longest trailer (all E-links missing).
            if let Some(w) = c.words_mut().get_mut(end..end + trailer_words) {
                w[0] = status.word();
                w[1..1 + nmissing].copy_from_slice(&self.missing);
                w[1 + nmissing] = 1 + nmissing as u32;
                w[2 + nmissing] = frag.data_words as u32;
                w[3 + nmissing] = StatusPosition::AfterData.to_word();
            }
        }
        frag.trailer_words = trailer_words;
        frag.bcid = bcid;
        frag.status = status;
        frag.packets = packets;
        frag.missing = nmissing as u32;
        self.c.fragments += 1;
        if self.sink.fragment(frag) == Flow::Stop {
            self.shared
                .stop
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Closes base events older than the timeout (and the complete ones behind them).
    pub(crate) fn check_timeouts(&mut self) {
        let window = self.plan.window;
        loop {
            let s = &self.slots[(self.base & (window - 1)) as usize];
            let since = if s.open {
                s.opened_at
            } else if self.open_events > 0 {
                self.waiting_since
            } else if self.shared.others_past(self.t, self.base) {
                // Another thread has its part of our base event, for which we have no packet:
                // the timeout runs from when we first saw that.
                if self.behind.0 != self.base {
                    self.behind = (self.base, self.now);
                }
                self.behind.1
            } else {
                return;
            };
            if self.now.saturating_sub(since) < self.plan.timeout_ns {
                return;
            }
            self.c.timeouts += 1;
            if !self.finalize_base() {
                return;
            }
            self.drain();
        }
    }

    /// Publishes how far this thread has seen.
    pub(crate) fn publish_horizon(&self) {
        self.shared
            .horizon
            .fetch_max(self.end_seen, std::sync::atomic::Ordering::AcqRel);
    }

    /// Closes every event before `end` (end of run: no more data will come for them).
    pub(crate) fn flush_until(&mut self, end: u64) {
        while self.base < end {
            if !self.complete((self.base & (self.window - 1)) as usize) {
                self.c.end_of_run_parts += 1;
            }
            if !self.finalize_base() {
                return;
            }
        }
    }

    pub(crate) fn base(&self) -> u64 {
        self.base
    }
}

/// Maps packet (chunk) flags to status bits.
fn flag_status(flags: u16) -> Status {
    let f = ChunkFlags::from_bits(flags);
    let mut s = Status::DATA_CORRUPTION;
    if f.contains(ChunkFlags::TRUNCATED) {
        s |= Status::ROB_TRUNCATION;
    }
    if f.contains(ChunkFlags::CRC_ERROR) {
        s |= Status::ROB_TRANSMISSION;
    }
    s
}

/// A receiving thread: the block walker, the reassemblers, and the aggregator.
pub(crate) struct Receiver<'b, 'p, D, K> {
    pub(crate) agg: Aggregator<'b, 'p, D, K>,
    reasm: Vec<ElinkReassembler>,
    last_seq: Vec<u8>,
    /// Trailers found by the backward pass: `word << 32 | offset`.
    trailers: Vec<u64>,
}

impl<'b, 'p, D: PacketDecoder, K: FragmentSink<'p>> Receiver<'b, 'p, D, K> {
    pub(crate) fn new(agg: Aggregator<'b, 'p, D, K>) -> Self {
        let plan = agg.plan;
        let elinks = agg.elinks;
        Receiver {
            reasm: elinks
                .iter()
                .map(|&e| ElinkReassembler::new(e, plan.max_packet_bytes))
                .collect(),
            last_seq: vec![NO_SEQUENCE; elinks.len()],
            trailers: Vec::with_capacity(plan.felix_block_bytes / 2),
            agg,
        }
    }

    /// Handles the blocks of one filled superpage.
    pub(crate) fn superpage(&mut self, data: &[u8]) {
        let bs = self.agg.plan.felix_block_bytes;
        self.agg.c.superpages += 1;
        let mut blocks = data.chunks_exact(bs);
        // The walker jumps to the end of each block and reads backwards, which the hardware
        // prefetcher does not anticipate: ask for the block PREFETCH_BLOCKS ahead explicitly.
        let ahead = PREFETCH_BLOCKS * bs;
        let mut at = 0;
        for block in &mut blocks {
            if let Some(next) = data.get(at + ahead..at + ahead + bs) {
                prefetch(next);
            }
            at += bs;
            self.block(block);
        }
        self.agg.c.bad_bytes += blocks.remainder().len() as u64;
    }

    /// Sums the reassemblers' sequence errors into the counters.
    pub(crate) fn sync_counters(&mut self) {
        self.agg.c.sequence_errors = self
            .reasm
            .iter()
            .map(|r| r.counters().sequence_errors)
            .sum();
    }

    #[inline]
    fn block(&mut self, block: &[u8]) {
        let c = &mut self.agg.c;
        c.blocks += 1;
        let (Some(&[h0, h1, m0, m1]), true) = (block.first_chunk::<4>(), block.len() >= 8) else {
            c.bad_blocks += 1;
            return;
        };
        let w0 = u16::from_le_bytes([h0, h1]);
        let size = match u16::from_le_bytes([m0, m1]) {
            rodeo_format::felix::MARKER_TRAILER32 => TrailerSize::Bits32,
            rodeo_format::felix::MARKER_TRAILER16 => TrailerSize::Bits16,
            _ => {
                c.bad_blocks += 1;
                return;
            }
        };
        let elink = w0 & rodeo_format::felix::MAX_ELINK;
        let local = match self.agg.plan.local_of(elink) {
            Some((t, local)) if t == self.agg.t => local,
            _ => {
                c.foreign_blocks += 1;
                return;
            }
        };
        let sequence = (w0 >> 11) as u8;
        let last = self.last_seq[local];
        let mut gap = false;
        if last != NO_SEQUENCE && sequence != (last + 1) % 32 {
            c.block_gaps += 1;
            c.lost_blocks += u64::from((sequence + 32 - (last + 1) % 32) % 32);
            gap = true;
        }
        self.last_seq[local] = sequence;
        match size {
            TrailerSize::Bits32 => self.walk::<true>(block, local, elink, gap),
            TrailerSize::Bits16 => self.walk::<false>(block, local, elink, gap),
        }
        // Completion is checked once per block rather than once per packet.
        self.agg.drain();
        if self.agg.base >= self.agg.published + PUBLISH_EVERY {
            self.agg.publish();
        }
    }

    /// Walks one block's subchunks (`W32`: 32-bit trailers, else 16-bit).
    #[inline(always)]
    fn walk<const W32: bool>(&mut self, block: &[u8], local: usize, elink: u16, gap: bool) {
        let size = if W32 {
            TrailerSize::Bits32
        } else {
            TrailerSize::Bits16
        };
        let t = size.bytes();
        // Type bits and error flags of the trailer; a whole packet without flags (type BOTH = 3,
        // flags 0) is the one value `whole` under that mask.
        let (mask, whole, len_mask) = if W32 {
            (0xFE00_0000u32, 0x6000_0000u32, 0xFFFFu32)
        } else {
            (0xFC00, 0x6000, 0x3FF)
        };
        let Receiver {
            agg,
            reasm,
            trailers,
            ..
        } = self;
        // Backwards from the block end. A whole packet without flags (BOTH) is placed at once;
        // pieces of split packets (and flagged or out-of-band subchunks) are kept for the
        // reassembler, which takes them forwards, in time order.
        trailers.clear();
        let mut end = block.len();
        let mut damaged = false;
        while end >= 4 + t {
            let at = end - t;
            let word = read_trailer::<W32>(block, at);
            let len = (word & len_mask) as usize;
            let padded = (len + t - 1) & !(t - 1);
            if word & mask == whole {
                if padded > at - 4 {
                    damaged = true;
                    break;
                }
                let start = at - padded;
                // `start..at` is the padded packet: one check against the block, then one of
                // the length against the padding.
                if let Some(data) = block.get(start..at).and_then(|p| p.get(..len)) {
                    agg.packet(local, elink, data, 0);
                }
                end = start;
                continue;
            }
            let (kind, _) = kind_len(word, size);
            if kind == 0 {
                end = at;
                continue;
            }
            if kind == 7 {
                trailers.push(u64::from(word) << 32 | at as u64);
                end = at;
                continue;
            }
            if padded > at - 4 {
                damaged = true;
                break;
            }
            trailers.push(u64::from(word) << 32 | at as u64);
            end = at - padded;
        }
        if !gap && !damaged && trailers.is_empty() {
            return;
        }
        let r = &mut reasm[local];
        if gap || damaged {
            if damaged {
                agg.c.damaged_blocks += 1;
            }
            // The open packet lost its end (or the block between): deliver it as truncated.
            r.flush(|ch| agg.packet(local, elink, ch.data, ch.flags.bits()));
        }
        // Forwards: the pieces in time order.
        for &tw in trailers.iter().rev() {
            let at = tw as u32 as usize;
            let word = (tw >> 32) as u32;
            let (kind, len) = kind_len(word, size);
            let padded = (len + t - 1) & !(t - 1);
            let start = at - padded;
            let payload = if kind == 7 {
                &[][..]
            } else {
                &block[start..start + len]
            };
            let trailer = size.decode(word);
            let sub = Subchunk {
                kind: SubchunkType::from_bits(kind as u8),
                flags: trailer.flags,
                payload,
                offset: at,
            };
            r.push_subchunk(&sub, |ch| {
                agg.packet(local, elink, ch.data, ch.flags.bits())
            });
        }
    }
}

#[inline(always)]
fn read_trailer<const W32: bool>(block: &[u8], at: usize) -> u32 {
    if W32 {
        match block.get(at..at + 4) {
            Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
            _ => 0,
        }
    } else {
        match block.get(at..at + 2) {
            Some(&[a, b]) => u32::from(u16::from_le_bytes([a, b])),
            _ => 0,
        }
    }
}

#[inline(always)]
fn kind_len(word: u32, size: TrailerSize) -> (u32, usize) {
    match size {
        TrailerSize::Bits32 => (word >> 29, (word & 0xFFFF) as usize),
        TrailerSize::Bits16 => ((word >> 13) & 7, (word & 0x3FF) as usize),
    }
}
