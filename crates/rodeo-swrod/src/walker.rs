//! One receiving thread's block walker: FELIX blocks to packets, handed to the [`Aggregator`].
//!
//! # The hot path
//!
//! Per block: the 4-byte header names the E-link; one table lookup maps it to this thread's
//! local index (2048 entries, no hashing), from which the block's [`Lane`] (arrival bit) is
//! made once. The trailers are read backwards from the block end, in one pass: a whole packet
//! (BOTH, no flag) goes straight to [`Aggregator::packet`] as soon as its trailer is read, so
//! the packets of one block arrive last first; every other subchunk (pieces of split packets,
//! flagged, out-of-band) is kept in a reused list and then handled forwards, in time order. So
//! whole packets never wait for, and never disturb, the reassembly of split ones; a whole packet
//! that a malformed stream places inside an open split packet is still delivered whole. The
//! order inside a block does not matter for the fragments: each packet of a block has its own
//! L1ID, and the window is at least as large as a block's packet count (checked at
//! configuration). After each block, one comparison tells whether the base event may be
//! complete; only then is [`Aggregator::drain`] called.
//!
//! # Split packets
//!
//! About one packet per block is cut at the block end: its FIRST piece ends one block of the
//! E-link and its LAST piece starts the next one. That common case does not go through the
//! general reassembler: a clean (no flag) FIRST piece of up to [`HEAD_BYTES`] is kept in the
//! E-link's [`Head`] and joined with the clean LAST piece that follows, in a reused buffer, with
//! fixed-size moves. Anything else (a MIDDLE piece, a flag, a longer packet, a block gap or a
//! damaged block, an out-of-band or timeout subchunk) first hands the kept piece to the E-link's
//! [`ElinkReassembler`] as the FIRST subchunk it is, so the reassembler applies the FELIX rules
//! exactly as if it had seen every piece: a held piece is nothing but a reassembler state that
//! has not been written down yet.

use rodeo_format::felix::{
    ElinkReassembler, Subchunk, SubchunkType, TrailerFlags, TrailerSize, MARKER_TRAILER16,
    MARKER_TRAILER32, MAX_ELINK,
};
use rodeo_memory::cache::prefetch_bytes;

use super::decoder::PacketDecoder;
use super::fragment::FragmentSink;
use super::receiver::{copy_bytes, Aggregator, Lane, PUBLISH_EVERY};

const NO_SEQUENCE: u8 = 0xFF;
/// How many blocks ahead of the walker the input is prefetched.
const PREFETCH_BLOCKS: usize = 4;
/// The longest FIRST piece a [`Head`] keeps.
pub(crate) const HEAD_BYTES: usize = 128;
/// The longest packet joined from a kept FIRST piece and a LAST piece.
const JOINED_BYTES: usize = 256;

/// Copies `src` into `dst` with fixed-size moves when both have the same length (they always
/// do here; a mismatch copies nothing).
#[inline(always)]
fn copy_slice(dst: &mut [u8], src: &[u8]) {
    if dst.len() == src.len() {
        // SAFETY: both slices are valid for their common length, and a `&mut` slice never
        // overlaps a shared one.
        unsafe { copy_bytes(dst.as_mut_ptr(), src.as_ptr(), src.len()) };
    }
}

/// The FIRST piece of an E-link's split packet, kept until its LAST piece arrives.
struct Head {
    pending: bool,
    len: u16,
    bytes: [u8; HEAD_BYTES],
}

impl Head {
    /// Hands the kept piece, if any, to the reassembler as the FIRST subchunk it is.
    fn spill(
        &mut self,
        r: &mut ElinkReassembler,
        on_chunk: impl FnMut(rodeo_format::felix::Chunk<'_>),
    ) {
        if !self.pending {
            return;
        }
        self.pending = false;
        let sub = Subchunk {
            kind: SubchunkType::First,
            flags: TrailerFlags::NONE,
            payload: &self.bytes[..usize::from(self.len)],
            offset: 0,
        };
        r.push_subchunk(&sub, on_chunk);
    }
}

/// A receiving thread: the block walker, the reassemblers, and the aggregator.
pub(crate) struct Receiver<'b, 'p, D, K> {
    pub(crate) agg: Aggregator<'b, 'p, D, K>,
    reasm: Vec<ElinkReassembler>,
    heads: Vec<Head>,
    joined: [u8; JOINED_BYTES],
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
            heads: elinks
                .iter()
                .map(|_| Head {
                    pending: false,
                    len: 0,
                    bytes: [0; HEAD_BYTES],
                })
                .collect(),
            joined: [0; JOINED_BYTES],
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
                prefetch_bytes(next);
            }
            at += bs;
            self.block(block);
        }
        self.agg.c.bad_bytes += blocks.remainder().len() as u64;
    }

    /// Sums the reassemblers' counters (sequence errors, skipped subchunks, oversize packets)
    /// into the thread's counters.
    pub(crate) fn sync_counters(&mut self) {
        let mut sum = rodeo_format::felix::FelixCounters::default();
        for r in &self.reasm {
            sum.add(r.counters());
        }
        let c = &mut self.agg.c;
        c.sequence_errors = sum.sequence_errors;
        c.out_of_band_subchunks = sum.out_of_band;
        c.reserved_subchunks = sum.reserved;
        c.oversize_packets = sum.oversize_chunks;
        c.oversize_dropped_bytes = sum.dropped_bytes;
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
        let w32 = match u16::from_le_bytes([m0, m1]) {
            MARKER_TRAILER32 => true,
            MARKER_TRAILER16 => false,
            _ => {
                c.bad_blocks += 1;
                return;
            }
        };
        let elink = w0 & MAX_ELINK;
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
        let lane = self.agg.lane(local, elink);
        match (w32, lane.low()) {
            (true, true) => self.walk::<true, true>(block, &lane, gap),
            (true, false) => self.walk::<true, false>(block, &lane, gap),
            (false, true) => self.walk::<false, true>(block, &lane, gap),
            (false, false) => self.walk::<false, false>(block, &lane, gap),
        }
        // Completion is checked once per block rather than once per packet, and the full test
        // only when the base slot's bits say it may be complete.
        if self.agg.base_may_be_complete() {
            self.agg.drain();
        }
        if self.agg.base() >= self.agg.published + PUBLISH_EVERY {
            self.agg.publish();
        }
    }

    /// Walks one block's subchunks (`W32`: 32-bit trailers, else 16-bit; `LOW`: the lane's
    /// arrival bit is in the hot slot, see [`Aggregator::packet`]).
    #[inline(always)]
    fn walk<const W32: bool, const LOW: bool>(&mut self, block: &[u8], lane: &Lane, gap: bool) {
        let size = if W32 {
            TrailerSize::Bits32
        } else {
            TrailerSize::Bits16
        };
        let t = size.bytes();
        // Type bits and error flags of the trailer; a whole packet without flags (type BOTH = 3,
        // flags 0) is the one value `whole` under that mask. `flag_bits`: the flags alone.
        let (mask, whole, len_mask, flag_bits) = if W32 {
            (0xFE00_0000u32, 0x6000_0000u32, 0xFFFFu32, 0x1E00_0000u32)
        } else {
            (0xFC00, 0x6000, 0x3FF, 0x1C00)
        };
        let Receiver {
            agg,
            reasm,
            heads,
            joined,
            trailers,
            ..
        } = self;
        // Backwards from the block end. A whole packet without flags (BOTH) is placed at once;
        // pieces of split packets (and flagged or out-of-band subchunks) are kept for the
        // forward pass below. `end <= block.len()` throughout: it only decreases.
        trailers.clear();
        let mut end = block.len();
        let mut damaged = false;
        while end >= 4 + t {
            let at = end - t;
            // SAFETY: `at + t == end <= block.len()`.
            let word = unsafe { read_trailer::<W32>(block, at) };
            let len = (word & len_mask) as usize;
            let padded = (len + t - 1) & !(t - 1);
            if word & mask == whole {
                if padded > at - 4 {
                    damaged = true;
                    break;
                }
                let start = at - padded;
                // SAFETY: `start + len <= start + padded == at < block.len()`.
                let data = unsafe { block.get_unchecked(start..start + len) };
                agg.packet::<LOW>(lane, data, 0);
                end = start;
                continue;
            }
            let kind = kind_of(word, size);
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
        let (Some(r), Some(head)) = (reasm.get_mut(lane.local), heads.get_mut(lane.local)) else {
            return;
        };
        if gap || damaged {
            if damaged {
                agg.c.damaged_blocks += 1;
            }
            // The open packet lost its end (or the block between): deliver it as truncated.
            head.spill(r, |ch| agg.packet::<LOW>(lane, ch.data, ch.flags.bits()));
            r.flush(|ch| agg.packet::<LOW>(lane, ch.data, ch.flags.bits()));
        }
        // Forwards: the pieces in time order.
        for &tw in trailers.iter().rev() {
            let at = tw as u32 as usize;
            let word = (tw >> 32) as u32;
            let kind = kind_of(word, size);
            let len = (word & len_mask) as usize;
            let payload = if kind == 7 {
                &[][..]
            } else {
                let start = at - ((len + t - 1) & !(t - 1));
                &block[start..start + len]
            };
            if word & flag_bits == 0 {
                if kind == 2 && head.pending {
                    // LAST after a kept FIRST: join them.
                    let hl = usize::from(head.len);
                    if let Some(dst) = joined.get_mut(..hl + len) {
                        let (a, b) = dst.split_at_mut(hl);
                        copy_slice(a, &head.bytes[..hl]);
                        copy_slice(b, payload);
                        head.pending = false;
                        agg.packet::<LOW>(lane, dst, 0);
                        continue;
                    }
                } else if kind == 1 && !head.pending && !r.has_open_chunk() && len <= HEAD_BYTES {
                    copy_slice(&mut head.bytes[..len], payload);
                    head.len = len as u16;
                    head.pending = true;
                    continue;
                }
            }
            head.spill(r, |ch| agg.packet::<LOW>(lane, ch.data, ch.flags.bits()));
            let sub = Subchunk {
                kind: SubchunkType::from_bits(kind as u8),
                flags: size.decode(word).flags,
                payload,
                offset: at,
            };
            r.push_subchunk(&sub, |ch| agg.packet::<LOW>(lane, ch.data, ch.flags.bits()));
        }
    }
}

/// The trailer word at `at` (little-endian, 32 or 16 bits).
///
/// # Safety
///
/// `at + 4` (`W32`) or `at + 2` is at most `block.len()`.
#[inline(always)]
unsafe fn read_trailer<const W32: bool>(block: &[u8], at: usize) -> u32 {
    // SAFETY: the caller guarantees the bytes are inside `block`.
    unsafe {
        let p = block.as_ptr().add(at);
        if W32 {
            u32::from_le_bytes(p.cast::<[u8; 4]>().read())
        } else {
            u32::from(u16::from_le_bytes(p.cast::<[u8; 2]>().read()))
        }
    }
}

/// The subchunk type of a trailer word.
#[inline(always)]
fn kind_of(word: u32, size: TrailerSize) -> u32 {
    match size {
        TrailerSize::Bits32 => word >> 29,
        TrailerSize::Bits16 => (word >> 13) & 7,
    }
}
