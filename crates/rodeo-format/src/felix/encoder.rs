//! The per-E-link block encoder used by emulators.

use super::{
    is_valid_block_size, BlockHeader, FelixError, SubchunkType, Trailer, TrailerFlags, TrailerSize,
    BLOCK_HEADER_BYTES, MAX_ELINK, SEQUENCE_MODULO,
};

/// Where the bytes of a chunk come from: a slice, or a generator writing them in place.
trait PieceSource {
    /// The chunk's length in bytes.
    fn len(&self) -> usize;
    /// Writes the chunk's bytes `offset..offset + dst.len()` into `dst`.
    fn write(&mut self, offset: usize, dst: &mut [u8]);
}

struct SliceSource<'a>(&'a [u8]);

impl PieceSource for SliceSource<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn write(&mut self, offset: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self.0[offset..offset + dst.len()]);
    }
}

struct FnSource<F> {
    len: usize,
    write: F,
}

impl<F: FnMut(usize, &mut [u8])> PieceSource for FnSource<F> {
    fn len(&self) -> usize {
        self.len
    }
    fn write(&mut self, offset: usize, dst: &mut [u8]) {
        (self.write)(offset, dst)
    }
}

/// Packs the chunks of one E-link into FELIX blocks.
///
/// The encoder owns one block buffer (allocated in [`ElinkEncoder::new`], never again). Chunks
/// are written forwards after the header as subchunks; a chunk larger than the space left is
/// split into FIRST / MIDDLE... / LAST pieces across as many blocks as needed (a chunk that fits
/// is one BOTH subchunk). A block is handed to the sink the moment it is full, with the E-link's
/// next sequence number in its header; [`ElinkEncoder::flush`] hands out a partial block padded
/// with null trailers (zero bytes).
///
/// Sinks are `FnMut(&[u8])` called with each finished block, valid only during the call: copy it
/// where it belongs (a superpage, a file). [`ElinkEncoder::max_blocks_for`] bounds how many blocks
/// one push can emit, so a caller can reserve superpage space first.
///
/// ```
/// use rodeo_format::felix::{ElinkEncoder, Reassembler, TrailerSize};
///
/// let mut enc = ElinkEncoder::new(0x41, TrailerSize::Bits32, 1024)?;
/// let mut superpage = vec![0u8; 16 * 1024];
/// let mut used = 0;
/// let chunk = [7u8; 3000];
/// assert!(used + enc.max_blocks_for(chunk.len()) * enc.block_size() <= superpage.len());
/// let mut sink = |block: &[u8]| {
///     superpage[used..used + block.len()].copy_from_slice(block);
///     used += block.len();
/// };
/// enc.push_chunk(&chunk, &mut sink);
/// enc.flush(&mut sink);
/// assert_eq!(used, 3 * 1024);
///
/// let mut reassembler = Reassembler::default();
/// for block in superpage[..used].chunks_exact(1024) {
///     reassembler.push_block(block, |c| assert_eq!((c.elink, c.data), (0x41, &chunk[..])))?;
/// }
/// assert_eq!(reassembler.counters().chunks, 1);
/// # Ok::<(), rodeo_format::felix::FelixError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ElinkEncoder {
    elink: u16,
    trailer: TrailerSize,
    block: Box<[u8]>,
    pos: usize,
    sequence: u8,
    blocks: u64,
    chunks: u64,
}

impl ElinkEncoder {
    /// A new encoder for `elink` (11 bits) with blocks of `block_size` bytes (a non-zero
    /// multiple of 1024), starting at sequence number 0.
    pub fn new(
        elink: u16,
        trailer: TrailerSize,
        block_size: usize,
    ) -> Result<ElinkEncoder, FelixError> {
        if !is_valid_block_size(block_size) {
            return Err(FelixError::BlockSize { len: block_size });
        }
        Ok(ElinkEncoder {
            elink: elink & MAX_ELINK,
            trailer,
            block: vec![0u8; block_size].into_boxed_slice(),
            pos: BLOCK_HEADER_BYTES,
            sequence: 0,
            blocks: 0,
            chunks: 0,
        })
    }

    /// The E-link number.
    pub fn elink(&self) -> u16 {
        self.elink
    }

    /// The trailer width.
    pub fn trailer(&self) -> TrailerSize {
        self.trailer
    }

    /// The block size in bytes.
    pub fn block_size(&self) -> usize {
        self.block.len()
    }

    /// The sequence number the next emitted block will carry.
    pub fn sequence(&self) -> u8 {
        self.sequence
    }

    /// Sets the sequence number of the next emitted block (modulo 32), e.g. to inject a gap.
    pub fn set_sequence(&mut self, sequence: u8) {
        self.sequence = sequence % SEQUENCE_MODULO;
    }

    /// Number of blocks emitted so far.
    pub fn blocks_emitted(&self) -> u64 {
        self.blocks
    }

    /// Number of chunks pushed so far (raw subchunks not included).
    pub fn chunks_pushed(&self) -> u64 {
        self.chunks
    }

    /// Whether the current block holds no subchunk yet.
    pub fn is_empty(&self) -> bool {
        self.pos == BLOCK_HEADER_BYTES
    }

    /// Largest payload of one subchunk: limited by the trailer's length field and the block.
    pub fn max_subchunk_payload(&self) -> usize {
        let t = self.trailer.bytes();
        self.trailer
            .max_payload()
            .min(self.block.len() - BLOCK_HEADER_BYTES - t)
    }

    /// An upper bound of the number of blocks one push of a `len`-byte chunk can emit.
    pub fn max_blocks_for(&self, len: usize) -> usize {
        let t = self.trailer.bytes();
        let room = self.block.len() - BLOCK_HEADER_BYTES;
        // Worst-case overhead per block: one trailer and padding per subchunk.
        let pieces_per_block = room.div_ceil(self.max_subchunk_payload()) + 1;
        let per_block = room.saturating_sub(2 * t * pieces_per_block).max(1);
        2 + len / per_block
    }

    /// Appends one chunk (BOTH, or FIRST/MIDDLE/LAST when split) with no flag set.
    pub fn push_chunk(&mut self, chunk: &[u8], mut sink: impl FnMut(&[u8])) {
        self.push_pieces(&mut SliceSource(chunk), TrailerFlags::NONE, None, &mut sink);
    }

    /// Appends one chunk of `len` bytes produced by `source` straight into the block (no
    /// intermediate buffer): `source(offset, dst)` writes the chunk's bytes
    /// `offset..offset + dst.len()` into `dst`. Pieces may start at any byte offset.
    pub fn push_chunk_from(
        &mut self,
        len: usize,
        source: impl FnMut(usize, &mut [u8]),
        mut sink: impl FnMut(&[u8]),
    ) {
        self.push_pieces(
            &mut FnSource { len, write: source },
            TrailerFlags::NONE,
            None,
            &mut sink,
        );
    }

    /// Appends one chunk whose last piece carries `flags` (error injection: CRC error, error,
    /// truncation, busy).
    pub fn push_chunk_flagged(
        &mut self,
        chunk: &[u8],
        flags: TrailerFlags,
        mut sink: impl FnMut(&[u8]),
    ) {
        self.push_pieces(&mut SliceSource(chunk), flags, None, &mut sink);
    }

    /// Appends one chunk that ends in a TIMEOUT subchunk with the truncation bit instead of a
    /// LAST (or BOTH): a reassembler completes it as truncated, with all of `chunk` as its data.
    pub fn push_chunk_timeout(&mut self, chunk: &[u8], mut sink: impl FnMut(&[u8])) {
        let flags = TrailerFlags {
            truncation: true,
            ..TrailerFlags::NONE
        };
        self.push_pieces(
            &mut SliceSource(chunk),
            flags,
            Some(SubchunkType::Timeout),
            &mut sink,
        );
    }

    /// Appends one raw subchunk of any type (error injection: orphan MIDDLE/LAST, TIMEOUT,
    /// out-of-band, reserved). The current block is emitted first if the subchunk does not fit.
    /// Types without payload (null, out-of-band) ignore `payload`.
    pub fn push_subchunk(
        &mut self,
        kind: SubchunkType,
        payload: &[u8],
        flags: TrailerFlags,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<(), FelixError> {
        let payload = if kind.has_payload() { payload } else { &[] };
        let max = self.max_subchunk_payload();
        if payload.len() > max {
            return Err(FelixError::PayloadTooLarge {
                elink: self.elink,
                length: payload.len(),
                max,
            });
        }
        let t = self.trailer.bytes();
        if payload.len().next_multiple_of(t) + t > self.block.len() - self.pos {
            self.emit(&mut sink);
        }
        self.write_subchunk(kind, &mut SliceSource(payload), 0, payload.len(), flags);
        if self.pos == self.block.len() {
            self.emit(&mut sink);
        }
        Ok(())
    }

    /// Emits the current block if it holds any subchunk, padding the rest with null trailers.
    pub fn flush(&mut self, mut sink: impl FnMut(&[u8])) {
        if !self.is_empty() {
            self.emit(&mut sink);
        }
    }

    fn push_pieces(
        &mut self,
        chunk: &mut impl PieceSource,
        flags: TrailerFlags,
        end_kind: Option<SubchunkType>,
        sink: &mut impl FnMut(&[u8]),
    ) {
        let t = self.trailer.bytes();
        let max_field = self.trailer.max_payload();
        let total = chunk.len();
        let mut done = 0;
        let mut first = true;
        self.chunks += 1;
        loop {
            // Invariant: the block is never left full, so at least one trailer unit is free.
            let avail = (self.block.len() - self.pos).saturating_sub(t);
            let rest = total - done;
            if avail == 0 && rest > 0 {
                self.emit(sink);
                continue;
            }
            let n = rest.min(avail).min(max_field);
            let last = n == rest;
            let kind = match (first, last, end_kind) {
                (_, true, Some(kind)) => kind,
                (true, true, None) => SubchunkType::Both,
                (true, false, _) => SubchunkType::First,
                (false, false, _) => SubchunkType::Middle,
                (false, true, None) => SubchunkType::Last,
            };
            let piece_flags = if last { flags } else { TrailerFlags::NONE };
            self.write_subchunk(kind, chunk, done, n, piece_flags);
            if self.pos == self.block.len() {
                self.emit(sink);
            }
            if last {
                return;
            }
            done += n;
            first = false;
        }
    }

    /// Writes `n` payload bytes of `src` from `offset`, padding and trailer at `pos`. The
    /// caller guarantees they fit.
    fn write_subchunk(
        &mut self,
        kind: SubchunkType,
        src: &mut impl PieceSource,
        offset: usize,
        n: usize,
        flags: TrailerFlags,
    ) {
        let t = self.trailer.bytes();
        let padded = n.next_multiple_of(t);
        let start = self.pos;
        src.write(offset, &mut self.block[start..start + n]);
        self.block[start + n..start + padded].fill(0);
        let word = self.trailer.encode(Trailer {
            kind,
            length: n,
            flags,
        });
        let at = start + padded;
        match self.trailer {
            TrailerSize::Bits16 => {
                self.block[at..at + 2].copy_from_slice(&(word as u16).to_le_bytes());
            }
            TrailerSize::Bits32 => self.block[at..at + 4].copy_from_slice(&word.to_le_bytes()),
        }
        self.pos = at + t;
    }

    fn emit(&mut self, sink: &mut impl FnMut(&[u8])) {
        let header = BlockHeader {
            elink: self.elink,
            sequence: self.sequence,
            trailer: self.trailer,
        };
        self.block[..BLOCK_HEADER_BYTES].copy_from_slice(&header.to_bytes());
        self.block[self.pos..].fill(0);
        sink(&self.block);
        self.sequence = (self.sequence + 1) % SEQUENCE_MODULO;
        self.blocks += 1;
        self.pos = BLOCK_HEADER_BYTES;
    }
}
