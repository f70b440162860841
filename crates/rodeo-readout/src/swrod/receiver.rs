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
//! Per packet: the decoder gives the L1ID; its distance from the oldest open event gives the
//! event number, and its low bits the window slot (no hashing). One bit per (slot, E-link) says
//! whether the packet already arrived (duplicates). The packet is copied once, behind its 2-word
//! packet header, into the thread's memory block for that L1ID.
//!
//! # Events, in order
//!
//! A thread closes ("finalizes") its part of events strictly in event order, at `base`: when
//! every one of its E-links has delivered (the normal case), when the base event is older than
//! the timeout, when a packet arrives a whole window ahead (the window moves past the base), or
//! at the end of the run.
//!
//! # Ownership
//!
//! Everything here belongs to one thread: the window's local slots and their blocks, the
//! arrival bits, the reassemblers, the pool cache and the counters (plain `u64`s, published to
//! the builder's shared mirror once per superpage). The only shared state a thread touches is
//! its slot in the [`Shared`] window, once per event, and the pool when its cache runs empty.
//! Nothing shared is written per packet.

use rodeo_format::felix::{ChunkFlags, ElinkReassembler, Subchunk, SubchunkType, TrailerSize};
use rodeo_format::fragment::{RodBuilder, Status, StatusPosition, FORMAT_VERSION, ROB_MARKER};
use rodeo_memory::{Chunk, PoolCache};

use super::decoder::PacketDecoder;
use super::fragment::{Flow, Fragment, FragmentSink, HEADER_WORDS, MAX_THREADS, ROB_HEADER_WORDS};
use super::shared::{Part, Parts, Shared};
use super::{Plan, SwRodCounters};

const NO_SEQUENCE: u8 = 0xFF;
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

/// Copies a packet: fixed-size moves for packets up to 64 bytes (the common case at 100 MHz),
/// `copy_from_slice` above. `dst` and `src` have the same length.
#[inline(always)]
fn copy_packet(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n != dst.len() {
        return;
    }
    if (16..=64).contains(&n) {
        // Overlapping 16-byte moves, unrolled (a loop here is turned back into a memcpy call).
        dst[..16].copy_from_slice(&src[..16]);
        if n > 32 {
            dst[16..32].copy_from_slice(&src[16..32]);
        }
        if n > 48 {
            dst[32..48].copy_from_slice(&src[32..48]);
        }
        dst[n - 16..].copy_from_slice(&src[n - 16..]);
    } else if (8..16).contains(&n) {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else {
        dst.copy_from_slice(src);
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
    /// E-links arrived.
    count: u32,
    /// Of those, packets that did not fit the block.
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
            count: 0,
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
    slots: Vec<LocalSlot<'p>>,
    arrived: Vec<u64>,
    open_events: usize,
    waiting_since: u64,
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
        Aggregator {
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
            slots: (0..window).map(|_| LocalSlot::closed()).collect(),
            arrived: vec![0; window * words_per_slot],
            open_events: 0,
            waiting_since: 0,
            now: 0,
            end_seen: 0,
            c: SwRodCounters::default(),
            missing: Vec::with_capacity(plan.total_elinks),
            order: Vec::with_capacity(elinks.len()),
            scratch: vec![0; plan.chunk_bytes],
        }
    }

    fn aborted(&self) -> bool {
        self.shared.abort.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Places one packet of local E-link `local`.
    #[inline(always)]
    pub(crate) fn packet(&mut self, local: usize, data: &[u8], flags: u16) {
        let elink = self.elinks[local];
        let Ok(info) = self.decoder.decode(elink, data) else {
            self.c.corrupt_packets += 1;
            return;
        };
        let (wrap, modulus, window) = (self.wrap, self.modulus, self.window);
        let l1 = u64::from(info.l1id & 0x00FF_FFFF);
        if l1 >= wrap {
            self.c.corrupt_packets += 1;
            return;
        }
        let e = u64::from(info.l1id >> 24) * wrap + l1;
        let d = if e >= self.base_mod {
            e - self.base_mod
        } else {
            e + modulus - self.base_mod
        };
        if d >= modulus / 2 {
            self.c.late_packets += 1;
            return;
        }
        let seq = self.base + d;
        if d >= window {
            let target = seq - window + 1;
            while self.base < target {
                self.c.window_moves += 1;
                if !self.finalize_base() {
                    return;
                }
            }
            self.waiting_since = self.now;
        }
        let si = (seq & (window - 1)) as usize;
        if !self.slots[si].open && !self.open_slot(si, seq, info.bcid) {
            return;
        }
        let word = &mut self.arrived[si * self.words_per_slot + local / 64];
        let bit = 1u64 << (local % 64);
        if *word & bit != 0 {
            self.c.duplicate_packets += 1;
            return;
        }
        *word |= bit;
        let s = &mut self.slots[si];
        s.count += 1;
        if info.bcid != s.bcid {
            s.status |= Status::BCID_CHECK_FAIL;
            self.c.bcid_mismatches += 1;
        }
        if (local as u32) < s.last_local {
            s.unordered = true;
        }
        s.last_local = local as u32;
        let len = data.len();
        let padded = (len + 3) & !3;
        let need = 8 + padded;
        let pos = s.pos as usize;
        let Some(chunk) = s.chunk.as_mut() else {
            return;
        };
        if pos + need > self.limit || need > 0xFFFF {
            s.status |= Status::INTERNAL_OVERFLOW | Status::ROB_FRAGMENT_SIZE;
            s.dropped += 1;
            self.c.overflow_packets += 1;
            return;
        }
        let buf: &mut [u8] = &mut chunk[pos..pos + need];
        buf[..4].copy_from_slice(&(need as u32 | u32::from(flags) << 16).to_le_bytes());
        buf[4..8].copy_from_slice(&u32::from(elink).to_le_bytes());
        copy_packet(&mut buf[8..8 + len], data);
        if padded != len {
            buf[8 + len..].fill(0);
        }
        s.pos += need as u32;
        if flags != 0 {
            self.c.flagged_packets += 1;
            s.status |= flag_status(flags);
        }
        if s.count == self.nlocal && seq == self.base {
            self.drain();
        }
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
            count: 0,
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
    fn drain(&mut self) {
        loop {
            let s = &self.slots[(self.base & (self.plan.window - 1)) as usize];
            if !(s.open && s.count == self.nlocal) {
                return;
            }
            if !self.finalize_base() {
                return;
            }
            self.waiting_since = self.now;
        }
    }

    /// Closes this thread's part of the base event, hands it to the shared window, and builds
    /// the fragment if it was the last part. False when the run is aborting.
    fn finalize_base(&mut self) -> bool {
        let seq = self.base;
        let si = (seq & (self.plan.window - 1)) as usize;
        let s = std::mem::replace(&mut self.slots[si], LocalSlot::closed());
        let bits = si * self.words_per_slot..(si + 1) * self.words_per_slot;
        let part = if s.open {
            self.open_events -= 1;
            // Counted here, once per event, rather than once per packet.
            let placed = s.count - s.dropped;
            self.c.packets += u64::from(placed);
            self.c.packet_bytes += (s.pos as usize - HEADER_WORDS * 4 - 8 * placed as usize) as u64;
            let mut chunk = s.chunk;
            let mut end = s.pos as usize / 4;
            let mut missing = 0;
            if let Some(c) = chunk.as_mut() {
                if s.unordered {
                    self.reorder(c, s.pos as usize);
                }
                if s.count < self.nlocal {
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
        if !self.shared.accepts(seq) {
            self.c.slot_waits += 1;
            self.shared.horizon.fetch_max(
                self.end_seen.max(seq + 1),
                std::sync::atomic::Ordering::AcqRel,
            );
            // The slower thread is usually only a little behind (or was preempted): spin and
            // yield for a while before sleeping.
            let mut tries = 0u32;
            while !self.shared.accepts(seq) {
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
        // SAFETY: this is thread `self.t` (one Aggregator per thread index), the slot accepts
        // `seq` (checked just above) and `base` moves past `seq` right after, so `put` is called
        // once per event.
        let parts = unsafe { self.shared.put(self.t, seq, part, self.now) };
        self.base += 1;
        self.base_mod += 1;
        if self.base_mod == self.plan.modulus {
            self.base_mod = 0;
        }
        if let Some(parts) = parts {
            self.assemble(seq, parts);
        }
        true
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
            } else {
                match self.shared.first_part_at(self.base) {
                    Some(t) => t,
                    None => return,
                }
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
            let s = &self.slots[(self.base & (self.plan.window - 1)) as usize];
            if !(s.open && s.count == self.nlocal) {
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
        let t = size.bytes();
        let flag_bits = match size {
            TrailerSize::Bits32 => 0x1E00_0000,
            TrailerSize::Bits16 => 0x1C00,
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
            let word = read_trailer(block, at, size);
            let (kind, len) = kind_len(word, size);
            if kind == 0 {
                end = at;
                continue;
            }
            if kind == 7 {
                trailers.push(u64::from(word) << 32 | at as u64);
                end = at;
                continue;
            }
            let padded = (len + t - 1) & !(t - 1);
            if padded > at - 4 {
                damaged = true;
                break;
            }
            let start = at - padded;
            if kind == 3 && word & flag_bits == 0 {
                agg.packet(local, &block[start..start + len], 0);
            } else {
                trailers.push(u64::from(word) << 32 | at as u64);
            }
            end = start;
        }
        let r = &mut reasm[local];
        if gap || damaged {
            if damaged {
                agg.c.damaged_blocks += 1;
            }
            // The open packet lost its end (or the block between): deliver it as truncated.
            r.flush(|ch| agg.packet(local, ch.data, ch.flags.bits()));
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
            r.push_subchunk(&sub, |ch| agg.packet(local, ch.data, ch.flags.bits()));
        }
    }
}

#[inline(always)]
fn read_trailer(block: &[u8], at: usize, size: TrailerSize) -> u32 {
    match size {
        TrailerSize::Bits32 => match block.get(at..at + 4) {
            Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
            _ => 0,
        },
        TrailerSize::Bits16 => match block.get(at..at + 2) {
            Some(&[a, b]) => u32::from(u16::from_le_bytes([a, b])),
            _ => 0,
        },
    }
}

#[inline(always)]
fn kind_len(word: u32, size: TrailerSize) -> (u32, usize) {
    match size {
        TrailerSize::Bits32 => (word >> 29, (word & 0xFFFF) as usize),
        TrailerSize::Bits16 => ((word >> 13) & 7, (word & 0x3FF) as usize),
    }
}
