//! The packet path: a packet's event number (the fast span, or `seq_slow` across an L1ID wrap,
//! an ECR, a late packet or a window move), its window slot, and its copy into the slot's
//! block; the cold paths (opening a slot, taking a block, duplicates, overflows, flagged
//! packets) are out of line. See the parent module's docs.

use rodeo_format::felix::ChunkFlags;
use rodeo_format::fragment::Status;
use rodeo_memory::Chunk;

use super::slot::{ColdSlot, HotSlot};
use super::{
    receiver_backoff, Aggregator, Lane, HI_MARK, MAX_NEED, MAX_WINDOW_MOVE, PACKET_HEADER_BYTES,
};
use crate::decoder::PacketDecoder;
use crate::fragment::{FragmentSink, HEADER_WORDS};

impl<'b, 'p, D: PacketDecoder, K: FragmentSink<'p>> Aggregator<'b, 'p, D, K> {
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
            if d - window + 1 > MAX_WINDOW_MOVE {
                // Further than any loss of data: a damaged L1ID (see the parent module's docs).
                self.c.corrupt_packets += 1;
                return None;
            }
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

    /// Takes a memory block from the pool, waiting (counted) while it is empty; `None` when the
    /// run is aborted meanwhile.
    #[inline]
    pub(super) fn alloc_block(&mut self) -> Option<Chunk<'p>> {
        match self.caches[self.own].alloc() {
            Ok(c) => Some(c),
            Err(_) => self.alloc_block_wait(),
        }
    }

    #[cold]
    #[inline(never)]
    fn alloc_block_wait(&mut self) -> Option<Chunk<'p>> {
        let mut backoff = receiver_backoff();
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
