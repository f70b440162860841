//! The per-thread aggregation: window slots, packet placement, and closing events.
//!
//! # The packet path
//!
//! [`Aggregator::packet`] is inlined into the block walker (`walker.rs`). The decoder gives the
//! L1ID; its raw difference from the oldest open event's extended L1ID gives the event number
//! whenever no L1ID wrap or ECR lies in between (`fast_span`, recomputed once per event;
//! anything else goes to the out-of-line `seq_slow`), and its low bits the window slot (no
//! hashing, no division). A packet then touches one [`HotSlot`] (32 bytes, two per cache line):
//! the arrival bit of its E-link (duplicates), the order check, the BCID check, and the write
//! pointer and room left in the slot's memory block, where the packet is copied once, with
//! fixed-size moves, behind its 2-word packet header. Whatever the fast path does not cover
//! (the first packet of an event, which opens the slot and takes a block; a duplicate; a full
//! block; a flagged packet; L1ID wrap, late packets and window moves) is a `#[cold]` function.
//! The per-block constants of the E-link (its local index, arrival bit) come in a [`Lane`].
//!
//! Arrival bits: bit `i` of `HotSlot::bits` for local E-links `i < 63`, so that a thread of up
//! to 63 E-links (120 E-links over two threads) keeps all of a slot's state in the hot slot;
//! local E-links from 63 on have their bits in a side array (`hi_bits`, a few words per slot)
//! and set bit 63 of `bits`. The packets of a slot are in E-link order as long as no packet
//! finds a higher bit already set (`bits > bit`: the mark counts as higher than every low
//! E-link) and, among the E-links from 63 on, each is above the last one placed (`last_hi`).
//! An event is complete when its bits equal the full mask, a comparison (no population count:
//! this x86-64 baseline has no `popcnt`), tested after each block.
//!
//! # Events, in order
//!
//! A thread closes ("finalizes") its part of events strictly in event order, at `base`: when
//! every one of its E-links has delivered (the normal case, checked after each block), when the
//! base event is older than the timeout, when a packet arrives a whole window ahead (the window
//! moves past the base), or at the end of the run.
//!
//! # Ownership
//!
//! Everything here belongs to one thread: the window's slots and their blocks, the arrival
//! bits, one pool cache per block pool and the counters (plain `u64`s, published to the
//! builder's shared mirror once per superpage). The shared state a thread touches: its own ring
//! cell in [`Shared`] once per event (read by the assembler later), its completion mark and the
//! other marks every [`PUBLISH_EVERY`] events, the other threads' ring cells of the events it
//! assembles, the pools when a cache runs empty or full (a batch of 32 blocks at a time), and
//! the pools' starvation flags when it publishes. Nothing shared is written per packet. The
//! write pointer of an open slot points into the slot's own block, which the slot owns until
//! the event is closed.
//!
//! # Returning blocks
//!
//! When the sink does not keep a fragment ([`FragmentSink::inspect`]), the assembling thread
//! puts each of its blocks into its own cache of that block's pool: its own blocks are reused
//! from there without touching the pool, and another thread's blocks go back to their pool in
//! batches of 32 (one CAS), which the owner takes back with one CAS and one cache line, rather
//! than one shared free per block and a walk of links written by another core. A thread that
//! waits for a block flags its pool (`Shared::set_starved`), and every thread flushes its cache
//! of that pool when it next publishes (it publishes while it waits, too).

use rodeo_format::felix::ChunkFlags;
use rodeo_format::fragment::{RodBuilder, Status, StatusPosition, FORMAT_VERSION, ROB_MARKER};
use rodeo_memory::{Chunk, ChunkPool, PoolCache};

use super::decoder::PacketDecoder;
use super::fragment::{Flow, Fragment, FragmentSink, HEADER_WORDS, MAX_THREADS, ROB_HEADER_WORDS};
use super::shared::{Part, Shared, GROUP};
use super::{Plan, SwRodCounters};

/// A thread publishes its mark (and assembles its share) at least every this many events, so
/// that fragments are assembled while their blocks are still in the caches.
pub(crate) const PUBLISH_EVERY: u64 = 16;
/// Local E-links whose arrival bit lives in the hot slot.
const LOW_ELINKS: usize = 63;
/// Bit 63 of [`HotSlot::bits`]: a packet of a local E-link from [`LOW_ELINKS`] on arrived.
const HI_MARK: u64 = 1 << 63;
/// Bytes of the packet header in a block (length and status word, E-link word).
const PACKET_HEADER_BYTES: usize = 8;
/// The longest packet (with its header) a packet header can describe.
const MAX_NEED: usize = 0xFFFF;

/// Copies `n` bytes with fixed-size moves: two overlapping moves of the largest power of two
/// not above `n` (up to 64), both loads before both stores, so the overlap is exact; a
/// `memcpy` call for longer or tiny packets.
///
/// # Safety
///
/// `src` is valid for reading and `dst` for writing `n` bytes, and the ranges do not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_bytes(dst: *mut u8, src: *const u8, n: usize) {
    #[inline(always)]
    unsafe fn two<const N: usize>(dst: *mut u8, src: *const u8, n: usize) {
        // SAFETY: N <= n, so both N-byte ranges lie inside the caller's n bytes.
        unsafe {
            let a = src.cast::<[u8; N]>().read_unaligned();
            let b = src.add(n - N).cast::<[u8; N]>().read_unaligned();
            dst.cast::<[u8; N]>().write_unaligned(a);
            dst.add(n - N).cast::<[u8; N]>().write_unaligned(b);
        }
    }
    // SAFETY: each arm's size is at most n; the caller guarantees the rest.
    unsafe {
        match n {
            33..=64 => two::<32>(dst, src, n),
            65..=128 => two::<64>(dst, src, n),
            16..=32 => two::<16>(dst, src, n),
            8..=15 => two::<8>(dst, src, n),
            4..=7 => two::<4>(dst, src, n),
            _ => std::ptr::copy_nonoverlapping(src, dst, n),
        }
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

/// What every packet of a window slot touches (see the module docs): 32 bytes.
#[repr(C, align(32))]
struct HotSlot {
    /// Where the next packet goes in the slot's block; null while the slot is closed.
    wp: *mut u8,
    /// Arrival bits of local E-links below 63; bit 63 ([`HI_MARK`]) once any other arrived.
    bits: u64,
    /// Bytes left for packets before the block's trailer reserve; 0 while closed, so that the
    /// first packet of an event always takes the slow path, which opens the slot.
    room: u32,
    /// Packets whose BCID differs from the first one's.
    mismatches: u32,
    /// BCID of the slot's first packet.
    bcid: u16,
    /// The last local E-link from 63 on that was placed (0: none yet).
    last_hi: u16,
    /// A packet arrived after one of a higher local E-link.
    unordered: bool,
    open: bool,
}

impl HotSlot {
    const CLOSED: HotSlot = HotSlot {
        wp: std::ptr::null_mut(),
        bits: 0,
        room: 0,
        mismatches: 0,
        bcid: 0,
        last_hi: 0,
        unordered: false,
        open: false,
    };

    /// Copies one packet behind its packet header at the write position and advances it.
    ///
    /// # Safety
    ///
    /// The slot is open and `need = 8 + data.len()` rounded up to 4 is at most `room`.
    #[inline(always)]
    unsafe fn put(&mut self, need: usize, flags: u16, elink: u16, data: &[u8]) {
        let wp = self.wp;
        let padded = need - PACKET_HEADER_BYTES;
        // SAFETY: an open slot's `wp .. wp + room` lies inside its block (open_slot sets both
        // from the block, every write advances both by the same amount), and the caller checked
        // `need <= room`. The block is 8-byte aligned and every `need` a multiple of 4, so `wp`
        // is 4-byte aligned. The zero word (padding of the last data word; the E-link word, when
        // the packet is empty) is written first, then overwritten where data and header go.
        unsafe {
            wp.add(4 + padded).cast::<u32>().write(0);
            wp.cast::<u32>().write(need as u32 | u32::from(flags) << 16);
            wp.add(4).cast::<u32>().write(u32::from(elink));
            copy_bytes(wp.add(PACKET_HEADER_BYTES), data.as_ptr(), data.len());
            self.wp = wp.add(need);
        }
        self.room -= need as u32;
    }
}

/// The rest of a window slot: the block it owns and the rarely touched fields.
struct ColdSlot<'p> {
    chunk: Option<Chunk<'p>>,
    status: Status,
    /// Of the E-links arrived (the slot's arrival bits), those whose packet did not fit.
    dropped: u32,
    opened_at: u64,
}

impl ColdSlot<'_> {
    fn closed() -> Self {
        ColdSlot {
            chunk: None,
            status: Status::OK,
            dropped: 0,
            opened_at: 0,
        }
    }
}

/// The per-block constants of the E-link whose packets the walker places.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lane {
    /// Local index of the E-link in this thread.
    pub(crate) local: usize,
    /// The E-link number.
    pub(crate) elink: u16,
    /// Its arrival bit in [`HotSlot::bits`] ([`HI_MARK`] from local E-link 63 on).
    bit: u64,
    /// From local E-link 63 on: its word in a slot's `hi_bits` and its bit there.
    hi_word: usize,
    hi_bit: u64,
}

impl Lane {
    /// Whether the arrival bit is in the hot slot (local E-links below 63).
    pub(crate) fn low(&self) -> bool {
        self.local < LOW_ELINKS
    }
}

/// Everything a packet touches (split from the reassemblers so both can be borrowed at once).
pub(crate) struct Aggregator<'b, 'p, D, K> {
    pub(crate) t: usize,
    pub(crate) plan: &'b Plan,
    shared: &'b Shared<'p>,
    decoder: &'b D,
    sink: &'b K,
    /// One cache per block pool in use (pool `t % pools` serves thread `t`): allocations come
    /// from `caches[own]`; blocks of fragments the sink hands back go to their own pool's
    /// cache, which returns them to that pool in batches.
    caches: Vec<PoolCache<'p>>,
    own: usize,
    pub(crate) elinks: &'b [u16],
    nlocal: u32,
    // Copies of the plan's numbers the packet path uses (no pointer chase per packet).
    wrap: u64,
    modulus: u64,
    window: u64,
    /// `window - 1`: the slot of event `seq` is `seq & mask`.
    mask: usize,
    limit: usize,
    /// Oldest open event (run-local number) and its number modulo the L1ID cycle.
    base: u64,
    base_mod: u64,
    /// The base event's raw extended L1ID, and how many events from the base on share its ECR
    /// without an L1ID wrap (at most the window): the packet path's fast span.
    base_raw: u32,
    base_l1: u64,
    fast_span: u32,
    hot: Vec<HotSlot>,
    cold: Vec<ColdSlot<'p>>,
    /// Arrival bits of local E-links from 63 on: `hi_words` per slot.
    hi_bits: Vec<u64>,
    hi_words: usize,
    /// `HotSlot::bits` of a slot whose every E-link arrived, and the same for each `hi_bits`
    /// word.
    low_full: u64,
    hi_full: Vec<u64>,
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
    pub(crate) published: u64,
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
        pools: &'p [ChunkPool],
    ) -> Self {
        let elinks = &plan.thread_elinks[t][..];
        let nlocal = elinks.len();
        let hi = nlocal.saturating_sub(LOW_ELINKS);
        let hi_words = hi.div_ceil(64);
        let low_full = if hi > 0 {
            u64::MAX
        } else {
            (1u64 << nlocal) - 1
        };
        let hi_full = (0..hi_words)
            .map(|w| {
                let n = (hi - 64 * w).min(64);
                if n == 64 {
                    u64::MAX
                } else {
                    (1u64 << n) - 1
                }
            })
            .collect();
        let window = plan.window as usize;
        let mut agg = Aggregator {
            t,
            plan,
            shared,
            decoder,
            sink,
            caches: pools
                .iter()
                .take(plan.threads())
                .map(ChunkPool::cache)
                .collect(),
            own: t % pools.len().clamp(1, plan.threads()),
            elinks,
            nlocal: nlocal as u32,
            wrap: plan.wrap,
            modulus: plan.modulus,
            window: plan.window,
            mask: window - 1,
            limit: plan.data_limit_bytes,
            base: 0,
            base_mod: plan.first_mod,
            base_raw: 0,
            base_l1: 0,
            fast_span: 0,
            hot: (0..window).map(|_| HotSlot::CLOSED).collect(),
            cold: (0..window).map(|_| ColdSlot::closed()).collect(),
            hi_bits: vec![0; window * hi_words],
            hi_words,
            low_full,
            hi_full,
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
            order: Vec::with_capacity(nlocal),
            scratch: vec![0; plan.chunk_bytes],
        };
        agg.base_l1 = plan.first_mod % plan.wrap;
        agg.base_raw = ((plan.first_mod / plan.wrap) as u32 & 0xFF) << 24 | agg.base_l1 as u32;
        agg.set_fast_span();
        agg
    }

    /// The per-block constants of local E-link `local`.
    pub(crate) fn lane(&self, local: usize, elink: u16) -> Lane {
        if local < LOW_ELINKS {
            Lane {
                local,
                elink,
                bit: 1 << local,
                hi_word: 0,
                hi_bit: 0,
            }
        } else {
            let h = local - LOW_ELINKS;
            Lane {
                local,
                elink,
                bit: HI_MARK,
                hi_word: h / 64,
                hi_bit: 1 << (h % 64),
            }
        }
    }

    fn set_fast_span(&mut self) {
        self.fast_span = (self.wrap - self.base_l1).min(self.window) as u32;
    }

    fn aborted(&self) -> bool {
        self.shared.abort.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Places one packet of the lane's E-link.
    ///
    /// The common case is inline and straight: decode, one subtraction to the event number,
    /// the arrival bit, the order and BCID checks, and the copy. Everything rare is out of line.
    ///
    /// `LOW`: the lane is one of the first 63 local E-links (`lane.local < 63`, the walker
    /// checks it once per block), whose arrival bit is in the hot slot.
    #[inline(always)]
    pub(crate) fn packet<const LOW: bool>(&mut self, lane: &Lane, data: &[u8], flags: u16) {
        let Ok(info) = self.decoder.decode(lane.elink, data) else {
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
        let si = seq as usize & self.mask;
        let need = PACKET_HEADER_BYTES + ((data.len() + 3) & !3);
        // SAFETY: `mask` is `hot.len() - 1` and `hot.len()` a power of two (the window).
        let s = unsafe { self.hot.get_unchecked_mut(si) };
        if flags == 0 && need <= s.room as usize && need <= MAX_NEED {
            let bits = s.bits;
            if LOW {
                if bits & lane.bit == 0 {
                    s.bits = bits | lane.bit;
                    s.unordered |= bits > lane.bit;
                    s.mismatches += u32::from(info.bcid != s.bcid);
                    // SAFETY: the slot is open (room > 0) and need <= room.
                    unsafe { s.put(need, 0, lane.elink, data) };
                    return;
                }
            } else if let Some(w) = self.hi_bits.get_mut(si * self.hi_words + lane.hi_word) {
                if *w & lane.hi_bit == 0 {
                    *w |= lane.hi_bit;
                    s.bits = bits | HI_MARK;
                    s.unordered |= lane.local < usize::from(s.last_hi);
                    s.last_hi = lane.local as u16;
                    s.mismatches += u32::from(info.bcid != s.bcid);
                    // SAFETY: as above.
                    unsafe { s.put(need, 0, lane.elink, data) };
                    return;
                }
            }
        }
        self.place_slow(seq, si, lane, info.bcid, data, flags);
    }

    /// Everything the inline path does not cover: a closed slot (opened here), a duplicate, a
    /// packet that does not fit its block, a flagged packet.
    #[cold]
    #[inline(never)]
    fn place_slow(&mut self, seq: u64, si: usize, lane: &Lane, bcid: u16, data: &[u8], flags: u16) {
        if !self.hot[si].open && !self.open_slot(si, seq, bcid) {
            return;
        }
        let hi_at = si * self.hi_words + lane.hi_word;
        let arrived = if lane.low() {
            self.hot[si].bits & lane.bit != 0
        } else {
            self.hi_bits.get(hi_at).is_none_or(|w| w & lane.hi_bit != 0)
        };
        if arrived {
            self.c.duplicate_packets += 1;
            return;
        }
        let s = &mut self.hot[si];
        let bits = s.bits;
        if lane.low() {
            s.bits = bits | lane.bit;
            s.unordered |= bits > lane.bit;
        } else {
            if let Some(w) = self.hi_bits.get_mut(hi_at) {
                *w |= lane.hi_bit;
            }
            s.bits = bits | HI_MARK;
            s.unordered |= lane.local < usize::from(s.last_hi);
            s.last_hi = lane.local as u16;
        }
        s.mismatches += u32::from(bcid != s.bcid);
        let need = PACKET_HEADER_BYTES + ((data.len() + 3) & !3);
        if need > s.room as usize || need > MAX_NEED {
            let c = &mut self.cold[si];
            c.status |= Status::INTERNAL_OVERFLOW | Status::ROB_FRAGMENT_SIZE;
            c.dropped += 1;
            self.c.overflow_packets += 1;
            return;
        }
        // SAFETY: the slot is open and need <= room.
        unsafe { s.put(need, flags, lane.elink, data) };
        if flags != 0 {
            self.c.flagged_packets += 1;
            self.cold[si].status |= flag_status(flags);
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

    /// E-links of slot `si` that delivered a packet (counted once per event: no `popcnt` in
    /// the x86-64 baseline).
    fn arrived_count(&self, si: usize) -> u32 {
        let w = self.hi_words;
        (self.hot[si].bits & !HI_MARK).count_ones()
            + self.hi_bits[si * w..(si + 1) * w]
                .iter()
                .map(|b| b.count_ones())
                .sum::<u32>()
    }

    /// Whether local E-link `local` delivered a packet to slot `si`, whose hot bits are `bits`.
    fn has_arrived(&self, bits: u64, si: usize, local: usize) -> bool {
        if local < LOW_ELINKS {
            bits & (1 << local) != 0
        } else {
            let h = local - LOW_ELINKS;
            self.hi_bits
                .get(si * self.hi_words + h / 64)
                .is_some_and(|w| w & (1 << (h % 64)) != 0)
        }
    }

    /// Whether the slot `si` is open and has every E-link's packet.
    fn complete(&self, si: usize) -> bool {
        let w = self.hi_words;
        let s = &self.hot[si];
        s.open
            && s.bits == self.low_full
            && self.hi_bits[si * w..(si + 1) * w]
                .iter()
                .zip(&self.hi_full)
                .all(|(b, f)| b == f)
    }

    /// Whether the base event may be complete: the cheap test the walker makes after each
    /// block before calling [`drain`](Self::drain).
    #[inline(always)]
    pub(crate) fn base_may_be_complete(&self) -> bool {
        // SAFETY: `mask` is `hot.len() - 1`.
        let s = unsafe { self.hot.get_unchecked(self.base as usize & self.mask) };
        s.bits == self.low_full
    }

    /// Takes a memory block from the pool, waiting (counted) while it is empty; `None` when the
    /// run is aborted meanwhile.
    #[inline]
    fn alloc_block(&mut self) -> Option<Chunk<'p>> {
        match self.caches[self.own].alloc() {
            Ok(c) => Some(c),
            Err(_) => self.alloc_block_wait(),
        }
    }

    #[cold]
    #[inline(never)]
    fn alloc_block_wait(&mut self) -> Option<Chunk<'p>> {
        let mut backoff = Backoff::new();
        loop {
            match self.caches[self.own].alloc() {
                Ok(c) => {
                    self.shared.set_starved(self.own, false);
                    return Some(c);
                }
                Err(_) => {
                    // Other threads' caches may hold blocks of our pool: they give them back
                    // when they see this (in `publish`).
                    self.shared.set_starved(self.own, true);
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
        let Some(mut chunk) = self.alloc_block() else {
            return false;
        };
        if self.open_events == 0 {
            self.waiting_since = self.now;
        }
        self.open_events += 1;
        self.end_seen = self.end_seen.max(seq + 1);
        let start = HEADER_WORDS * 4;
        let bytes: &mut [u8] = &mut chunk;
        // The limit leaves the trailer reserve; `new` checked that the chunk holds the header
        // and the reserve.
        let room = self.limit.min(bytes.len()).saturating_sub(start);
        let wp = bytes[start..].as_mut_ptr();
        self.hot[si] = HotSlot {
            wp,
            bits: 0,
            room: room.min(u32::MAX as usize) as u32,
            mismatches: 0,
            bcid,
            last_hi: 0,
            unordered: false,
            open: true,
        };
        self.cold[si] = ColdSlot {
            chunk: Some(chunk),
            status: Status::OK,
            dropped: 0,
            opened_at: self.now,
        };
        true
    }

    /// Finalizes complete events at the base.
    #[inline(never)]
    pub(crate) fn drain(&mut self) {
        loop {
            if !self.complete(self.base as usize & self.mask) {
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
        let si = seq as usize & self.mask;
        // Usually every E-link arrived: no population count then.
        let count = if self.complete(si) {
            self.nlocal
        } else {
            self.arrived_count(si)
        };
        let hot = std::mem::replace(&mut self.hot[si], HotSlot::CLOSED);
        let mut cold = std::mem::replace(&mut self.cold[si], ColdSlot::closed());
        let part = if hot.open {
            self.open_events -= 1;
            // Counted here, once per event, rather than once per packet.
            let placed = count - cold.dropped;
            if hot.mismatches > 0 {
                cold.status |= Status::BCID_CHECK_FAIL;
                self.c.bcid_mismatches += u64::from(hot.mismatches);
            }
            let mut chunk = cold.chunk;
            let mut end = HEADER_WORDS;
            let mut missing = 0;
            self.c.packets += u64::from(placed);
            if let Some(c) = chunk.as_mut() {
                let pos = (hot.wp as usize).wrapping_sub(c.as_ptr() as usize);
                self.c.packet_bytes += (pos - HEADER_WORDS * 4 - 8 * placed as usize) as u64;
                if hot.unordered {
                    self.reorder(c, pos);
                }
                end = pos / 4;
                if count < self.nlocal {
                    for local in 0..self.elinks.len() {
                        if !self.has_arrived(hot.bits, si, local) {
                            if let Some(w) = c.words_mut().get_mut(end + missing) {
                                *w = u32::from(self.elinks[local]);
                                missing += 1;
                            }
                        }
                    }
                }
            }
            Part {
                chunk,
                end: end as u32,
                missing: missing as u32,
                status: cold.status,
                bcid: Some(hot.bcid),
                packets: placed,
                l1id: self.base_raw,
            }
        } else {
            Part {
                chunk: None,
                end: HEADER_WORDS as u32,
                missing: self.nlocal,
                status: Status::OK,
                bcid: None,
                packets: 0,
                l1id: self.base_raw,
            }
        };
        let w = self.hi_words;
        if w > 0 {
            self.hi_bits[si * w..(si + 1) * w].fill(0);
        }
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
        for (p, cache) in self.caches.iter_mut().enumerate() {
            if self.shared.starved(p) {
                cache.flush();
            }
        }
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
                    unsafe { self.assemble(s) };
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
    ///
    /// # Safety
    ///
    /// As [`Shared::take`] for `seq`: this thread assembles `seq`, every mark is past it, and
    /// it is assembled once.
    unsafe fn assemble(&mut self, seq: u64) {
        let plan = self.plan;
        let mut status = Status::OK;
        let mut bcid: Option<u16> = None;
        let mut packets = 0;
        let mut l1id = None;
        self.missing.clear();
        let mut frag = Fragment {
            blocks: Default::default(),
            ends: [HEADER_WORDS as u32; MAX_THREADS],
            first: usize::MAX,
            last: 0,
            trailer_words: 0,
            data_words: 0,
            l1id: 0,
            bcid: 0,
            status: Status::OK,
            packets: 0,
            missing: 0,
            thread: self.t,
        };
        for t in 0..plan.threads().min(MAX_THREADS) {
            // SAFETY: the caller's guarantee, for each thread's cell of `seq` once.
            let Some(part) = (unsafe { self.shared.take(t, seq) }) else {
                continue;
            };
            l1id.get_or_insert(part.l1id);
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
            match part.chunk {
                Some(c) => {
                    if part.missing > 0 {
                        let end = part.end as usize;
                        let list = c
                            .words()
                            .get(end..end + part.missing as usize)
                            .unwrap_or(&[]);
                        self.missing.extend_from_slice(list);
                    }
                    if frag.first == usize::MAX {
                        frag.first = t;
                    }
                    frag.last = t;
                    frag.ends[t] = part.end;
                    frag.data_words += part.end as usize - HEADER_WORDS;
                    frag.blocks[t] = Some(c);
                }
                None => self
                    .missing
                    .extend(plan.thread_elinks[t].iter().map(|&e| u32::from(e))),
            }
        }
        frag.l1id = l1id.unwrap_or_else(|| plan.extended_l1id(seq));
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
        let flow = match self.sink.inspect(&frag) {
            Some(flow) => {
                self.recycle(frag);
                flow
            }
            None => self.sink.fragment(frag),
        };
        if flow == Flow::Stop {
            self.shared
                .stop
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Gives the blocks of a fragment the sink did not keep to this thread's caches, each to a
    /// cache of its own pool: no shared atomic per block, and a block of another thread goes
    /// back to its pool in a batch of 32 that its owner takes with one CAS.
    #[inline]
    fn recycle(&mut self, f: Fragment<'p>) {
        // Only the first `threads` entries can hold a block (thread `t` fills entry `t`; a
        // fragment with no packet at all uses entry 0).
        let n = self.plan.threads().min(MAX_THREADS);
        let Fragment { mut blocks, .. } = f;
        for block in &mut blocks[..n] {
            if let Some(c) = block.take() {
                match self.caches.iter_mut().find(|k| k.owns(&c)) {
                    Some(k) => k.free(c),
                    None => drop(c),
                }
            }
        }
    }

    /// Closes base events older than the timeout (and the complete ones behind them).
    pub(crate) fn check_timeouts(&mut self) {
        loop {
            let si = self.base as usize & self.mask;
            let since = if self.hot[si].open {
                self.cold[si].opened_at
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
            if !self.complete(self.base as usize & self.mask) {
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
