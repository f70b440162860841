//! Rebuilding chunks from the subchunks of successive blocks, per E-link.

use std::ops::{BitOr, BitOrAssign};

use super::{Block, BlockDecoder, FelixError, Subchunk, SubchunkType, ELINK_COUNT, MAX_ELINK};

/// Default bound of a reassembled chunk; bytes beyond it are dropped and the chunk flagged.
pub const DEFAULT_MAX_CHUNK_BYTES: usize = 1 << 20;

/// Status flags of a reassembled chunk (16 bits: the packet status of the SW ROD's packet
/// header). Zero means a good chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ChunkFlags(u16);

impl ChunkFlags {
    /// No flag: a good chunk.
    pub const NONE: ChunkFlags = ChunkFlags(0);
    /// A piece carried the CRC-error bit.
    pub const CRC_ERROR: ChunkFlags = ChunkFlags(1 << 0);
    /// A piece carried the error bit.
    pub const ERROR: ChunkFlags = ChunkFlags(1 << 1);
    /// A piece carried the truncation bit, or the chunk was cut (TIMEOUT, size bound, sequence).
    pub const TRUNCATED: ChunkFlags = ChunkFlags(1 << 2);
    /// Subchunk sequence error: a MIDDLE/LAST without FIRST, or the chunk was open when a
    /// FIRST/BOTH arrived.
    pub const SEQUENCE: ChunkFlags = ChunkFlags(1 << 3);
    /// A block of the E-link was lost (sequence-number gap) while the chunk was being built.
    pub const LOST_BLOCK: ChunkFlags = ChunkFlags(1 << 4);
    /// A damaged block (unparsable subchunks) was seen while the chunk was being built.
    pub const DAMAGED_BLOCK: ChunkFlags = ChunkFlags(1 << 5);
    /// The chunk ended (or continued) with a TIMEOUT subchunk.
    pub const TIMEOUT: ChunkFlags = ChunkFlags(1 << 6);
    /// The chunk exceeded the reassembler's size bound; the excess was dropped.
    pub const OVERSIZE: ChunkFlags = ChunkFlags(1 << 7);
    /// The chunk was still open at [`Reassembler::flush`] (end of run).
    pub const INCOMPLETE: ChunkFlags = ChunkFlags(1 << 8);

    /// The flags from their bits.
    pub fn from_bits(bits: u16) -> ChunkFlags {
        ChunkFlags(bits)
    }

    /// The bits.
    pub fn bits(self) -> u16 {
        self.0
    }

    /// Whether no flag is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: ChunkFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for ChunkFlags {
    type Output = ChunkFlags;
    fn bitor(self, rhs: ChunkFlags) -> ChunkFlags {
        ChunkFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for ChunkFlags {
    fn bitor_assign(&mut self, rhs: ChunkFlags) {
        self.0 |= rhs.0;
    }
}

/// A reassembled chunk, lent to the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// E-link of the chunk.
    pub elink: u16,
    /// The chunk's bytes (valid during the callback only: the buffer is reused).
    pub data: &'a [u8],
    /// Status flags.
    pub flags: ChunkFlags,
}

/// Counters of a reassembler; all 64-bit, only ever incremented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FelixCounters {
    /// Blocks accepted (valid size and marker).
    pub blocks: u64,
    /// Blocks rejected as unusable (bad size, bad marker, wrong E-link).
    pub bad_blocks: u64,
    /// Blocks whose backward parse stopped at an impossible trailer.
    pub damaged_blocks: u64,
    /// Non-null subchunks processed.
    pub subchunks: u64,
    /// Chunks delivered.
    pub chunks: u64,
    /// Bytes of delivered chunks.
    pub chunk_bytes: u64,
    /// Chunks delivered with a non-zero status.
    pub flagged_chunks: u64,
    /// Subchunk sequence errors (orphan MIDDLE/LAST, FIRST/BOTH while a chunk was open).
    pub sequence_errors: u64,
    /// Block sequence-number gaps seen.
    pub block_gaps: u64,
    /// Blocks lost, summed over the gaps (modulo 32 per gap).
    pub lost_blocks: u64,
    /// Subchunks with the CRC-error bit.
    pub crc_errors: u64,
    /// Subchunks with the error bit.
    pub errors: u64,
    /// Subchunks with the truncation bit.
    pub truncations: u64,
    /// TIMEOUT subchunks.
    pub timeouts: u64,
    /// Subchunks with the busy bit.
    pub busy: u64,
    /// Out-of-band subchunks.
    pub out_of_band: u64,
    /// Subchunks of the reserved type (their payload is skipped).
    pub reserved: u64,
    /// Chunks cut at the size bound.
    pub oversize_chunks: u64,
    /// Bytes dropped beyond the size bound.
    pub dropped_bytes: u64,
}

impl FelixCounters {
    /// Adds every counter of `other` to `self`.
    pub fn add(&mut self, other: &FelixCounters) {
        self.blocks += other.blocks;
        self.bad_blocks += other.bad_blocks;
        self.damaged_blocks += other.damaged_blocks;
        self.subchunks += other.subchunks;
        self.chunks += other.chunks;
        self.chunk_bytes += other.chunk_bytes;
        self.flagged_chunks += other.flagged_chunks;
        self.sequence_errors += other.sequence_errors;
        self.block_gaps += other.block_gaps;
        self.lost_blocks += other.lost_blocks;
        self.crc_errors += other.crc_errors;
        self.errors += other.errors;
        self.truncations += other.truncations;
        self.timeouts += other.timeouts;
        self.busy += other.busy;
        self.out_of_band += other.out_of_band;
        self.reserved += other.reserved;
        self.oversize_chunks += other.oversize_chunks;
        self.dropped_bytes += other.dropped_bytes;
    }
}

/// Rebuilds the chunks of one E-link.
///
/// Rules, per subchunk in forward order:
///
/// 1. BOTH delivers a whole chunk. FIRST opens one. MIDDLE appends. LAST appends and delivers.
/// 2. TIMEOUT appends its payload (opening a chunk if none is open, which is not a sequence
///    error) and flags [`ChunkFlags::TIMEOUT`]; with the truncation bit it delivers the chunk as
///    truncated, without it the chunk stays open.
/// 3. CRC-error, error and truncation bits of every piece are OR-ed into the chunk's flags.
/// 4. FIRST or BOTH while a chunk is open: sequence error; the open chunk is delivered flagged
///    [`ChunkFlags::SEQUENCE`] and the new one starts clean. MIDDLE or LAST with no open chunk:
///    sequence error; a chunk is opened with [`ChunkFlags::SEQUENCE`] (plus the lost/damaged
///    flag if a gap explains it).
/// 5. A block sequence-number gap or a damaged block counts and flags the open chunk
///    ([`ChunkFlags::LOST_BLOCK`], [`ChunkFlags::DAMAGED_BLOCK`]), which stays open.
/// 6. A chunk is bounded by `max_chunk_bytes`; the excess is dropped and counted, the chunk
///    flagged [`ChunkFlags::OVERSIZE`] and [`ChunkFlags::TRUNCATED`].
///
/// The chunk buffer is reused: after it has grown to the largest chunk, nothing is allocated.
#[derive(Debug, Clone)]
pub struct ElinkReassembler {
    elink: u16,
    max_chunk: usize,
    buf: Vec<u8>,
    open: bool,
    flags: ChunkFlags,
    /// Flags explaining a possible orphan MIDDLE/LAST right after a gap or damage.
    gap_flags: ChunkFlags,
    last_sequence: Option<u8>,
    counters: FelixCounters,
}

impl ElinkReassembler {
    /// A reassembler for `elink` with chunks bounded to `max_chunk_bytes`.
    pub fn new(elink: u16, max_chunk_bytes: usize) -> ElinkReassembler {
        ElinkReassembler {
            elink: elink & MAX_ELINK,
            max_chunk: max_chunk_bytes,
            buf: Vec::new(),
            open: false,
            flags: ChunkFlags::NONE,
            gap_flags: ChunkFlags::NONE,
            last_sequence: None,
            counters: FelixCounters::default(),
        }
    }

    /// The E-link number.
    pub fn elink(&self) -> u16 {
        self.elink
    }

    /// The counters of this E-link.
    pub fn counters(&self) -> &FelixCounters {
        &self.counters
    }

    /// Whether a chunk is being built.
    pub fn has_open_chunk(&self) -> bool {
        self.open
    }

    /// Feeds one decoded block of this E-link; complete chunks go to `on_chunk`.
    ///
    /// Returns the block's damage error, if any, after processing every subchunk that could be
    /// parsed (the error is also counted), or [`FelixError::ElinkMismatch`] without processing.
    pub fn push_block(
        &mut self,
        block: &Block<'_, '_>,
        mut on_chunk: impl FnMut(Chunk<'_>),
    ) -> Result<(), FelixError> {
        let header = block.header();
        if header.elink != self.elink {
            self.counters.bad_blocks += 1;
            return Err(FelixError::ElinkMismatch {
                expected: self.elink,
                found: header.elink,
            });
        }
        self.counters.blocks += 1;
        if let Some(last) = self.last_sequence {
            let expected = (last + 1) % super::SEQUENCE_MODULO;
            if header.sequence != expected {
                let lost =
                    (header.sequence + super::SEQUENCE_MODULO - expected) % super::SEQUENCE_MODULO;
                self.counters.block_gaps += 1;
                self.counters.lost_blocks += u64::from(lost);
                self.mark_gap(ChunkFlags::LOST_BLOCK);
            }
        }
        self.last_sequence = Some(header.sequence);
        let mut result = Ok(());
        for item in block.subchunks() {
            match item {
                Ok(sub) => self.push_subchunk(&sub, &mut on_chunk),
                Err(e) => {
                    self.counters.damaged_blocks += 1;
                    self.mark_gap(ChunkFlags::DAMAGED_BLOCK);
                    result = Err(e);
                }
            }
        }
        result
    }

    /// Feeds one subchunk (for callers that decode blocks themselves). Block sequence numbers
    /// are not checked here.
    pub fn push_subchunk(&mut self, sub: &Subchunk<'_>, mut on_chunk: impl FnMut(Chunk<'_>)) {
        let c = &mut self.counters;
        c.subchunks += 1;
        let mut piece = ChunkFlags::NONE;
        if sub.flags.crc_error {
            c.crc_errors += 1;
            piece |= ChunkFlags::CRC_ERROR;
        }
        if sub.flags.error {
            c.errors += 1;
            piece |= ChunkFlags::ERROR;
        }
        if sub.flags.truncation {
            c.truncations += 1;
            piece |= ChunkFlags::TRUNCATED;
        }
        if sub.flags.busy {
            c.busy += 1;
        }
        match sub.kind {
            SubchunkType::Null => {}
            SubchunkType::OutOfBand => self.counters.out_of_band += 1,
            SubchunkType::Reserved => self.counters.reserved += 1,
            SubchunkType::Both => {
                self.close_open_as_sequence_error(&mut on_chunk);
                self.start(sub.payload, piece);
                self.deliver(&mut on_chunk);
            }
            SubchunkType::First => {
                self.close_open_as_sequence_error(&mut on_chunk);
                self.start(sub.payload, piece);
            }
            SubchunkType::Middle | SubchunkType::Last => {
                if self.open {
                    self.flags |= piece;
                    self.append(sub.payload);
                } else {
                    self.counters.sequence_errors += 1;
                    let gap = self.gap_flags;
                    self.start(sub.payload, piece | ChunkFlags::SEQUENCE | gap);
                }
                if sub.kind == SubchunkType::Last {
                    self.deliver(&mut on_chunk);
                }
            }
            SubchunkType::Timeout => {
                self.counters.timeouts += 1;
                if self.open {
                    self.flags |= piece | ChunkFlags::TIMEOUT;
                    self.append(sub.payload);
                } else {
                    self.start(sub.payload, piece | ChunkFlags::TIMEOUT);
                }
                if sub.flags.truncation {
                    self.deliver(&mut on_chunk);
                }
            }
        }
    }

    /// Delivers the open chunk, if any, flagged [`ChunkFlags::INCOMPLETE`] and
    /// [`ChunkFlags::TRUNCATED`] (end of run), and forgets the block sequence number.
    pub fn flush(&mut self, mut on_chunk: impl FnMut(Chunk<'_>)) {
        if self.open {
            self.flags |= ChunkFlags::INCOMPLETE | ChunkFlags::TRUNCATED;
            self.deliver(&mut on_chunk);
        }
        self.last_sequence = None;
        self.gap_flags = ChunkFlags::NONE;
    }

    fn mark_gap(&mut self, flag: ChunkFlags) {
        if self.open {
            self.flags |= flag;
        }
        self.gap_flags |= flag;
    }

    fn close_open_as_sequence_error(&mut self, on_chunk: &mut impl FnMut(Chunk<'_>)) {
        if self.open {
            self.counters.sequence_errors += 1;
            self.flags |= ChunkFlags::SEQUENCE;
            self.deliver(on_chunk);
        }
    }

    fn start(&mut self, payload: &[u8], flags: ChunkFlags) {
        self.buf.clear();
        self.open = true;
        self.flags = flags;
        self.gap_flags = ChunkFlags::NONE;
        self.append(payload);
    }

    fn append(&mut self, payload: &[u8]) {
        let room = self.max_chunk.saturating_sub(self.buf.len());
        if payload.len() > room {
            if !self.flags.contains(ChunkFlags::OVERSIZE) {
                self.counters.oversize_chunks += 1;
            }
            self.flags |= ChunkFlags::OVERSIZE | ChunkFlags::TRUNCATED;
            self.counters.dropped_bytes += (payload.len() - room) as u64;
        }
        let keep = payload.get(..room).unwrap_or(payload);
        self.buf.extend_from_slice(keep);
    }

    fn deliver(&mut self, on_chunk: &mut impl FnMut(Chunk<'_>)) {
        let c = &mut self.counters;
        c.chunks += 1;
        c.chunk_bytes += self.buf.len() as u64;
        if !self.flags.is_empty() {
            c.flagged_chunks += 1;
        }
        on_chunk(Chunk {
            elink: self.elink,
            data: &self.buf,
            flags: self.flags,
        });
        self.buf.clear();
        self.open = false;
        self.flags = ChunkFlags::NONE;
    }
}

/// Rebuilds chunks of every E-link from a stream of blocks (any E-link order).
///
/// Owns a [`BlockDecoder`] and one [`ElinkReassembler`] per E-link seen (created on its first
/// block: the only allocations, besides chunk buffers growing to their largest chunk).
#[derive(Debug)]
pub struct Reassembler {
    decoder: BlockDecoder,
    elinks: Vec<Option<Box<ElinkReassembler>>>,
    max_chunk: usize,
    /// Blocks rejected before their E-link could be trusted.
    bad_blocks: u64,
}

impl Default for Reassembler {
    fn default() -> Reassembler {
        Reassembler::new(DEFAULT_MAX_CHUNK_BYTES)
    }
}

impl Reassembler {
    /// A reassembler with chunks bounded to `max_chunk_bytes`.
    pub fn new(max_chunk_bytes: usize) -> Reassembler {
        let mut elinks = Vec::with_capacity(ELINK_COUNT);
        elinks.resize_with(ELINK_COUNT, || None);
        Reassembler {
            decoder: BlockDecoder::new(),
            elinks,
            max_chunk: max_chunk_bytes,
            bad_blocks: 0,
        }
    }

    /// Decodes one block and feeds its E-link's reassembler; complete chunks go to `on_chunk`.
    ///
    /// An unusable block (size, marker) is counted in `bad_blocks` and returned as an error; a
    /// damaged block is processed as far as possible, counted, and its error returned.
    pub fn push_block(
        &mut self,
        bytes: &[u8],
        on_chunk: impl FnMut(Chunk<'_>),
    ) -> Result<(), FelixError> {
        let block = match self.decoder.decode(bytes) {
            Ok(block) => block,
            Err(e) => {
                self.bad_blocks += 1;
                return Err(e);
            }
        };
        let elink = block.header().elink;
        let max_chunk = self.max_chunk;
        let slot = self
            .elinks
            .get_mut(usize::from(elink))
            .ok_or(FelixError::BlockSize { len: bytes.len() })?;
        let state = slot.get_or_insert_with(|| Box::new(ElinkReassembler::new(elink, max_chunk)));
        state.push_block(&block, on_chunk)
    }

    /// Delivers every open chunk as incomplete (end of run); see [`ElinkReassembler::flush`].
    pub fn flush(&mut self, mut on_chunk: impl FnMut(Chunk<'_>)) {
        for state in self.elinks.iter_mut().flatten() {
            state.flush(&mut on_chunk);
        }
    }

    /// Delivers the open chunk of one E-link as incomplete (e.g. when the fragment builder
    /// gives up waiting for it); see [`ElinkReassembler::flush`].
    pub fn flush_elink(&mut self, elink: u16, on_chunk: impl FnMut(Chunk<'_>)) {
        if let Some(Some(state)) = self.elinks.get_mut(usize::from(elink)) {
            state.flush(on_chunk);
        }
    }

    /// The reassembler of one E-link, if a block of it was seen.
    pub fn elink(&self, elink: u16) -> Option<&ElinkReassembler> {
        self.elinks.get(usize::from(elink))?.as_deref()
    }

    /// Counters summed over all E-links, plus unusable blocks.
    pub fn counters(&self) -> FelixCounters {
        let mut total = FelixCounters {
            bad_blocks: self.bad_blocks,
            ..FelixCounters::default()
        };
        for state in self.elinks.iter().flatten() {
            total.add(state.counters());
        }
        total
    }
}
