//! Parsing one block into its subchunks.

use super::{
    is_valid_block_size, BlockHeader, FelixError, SubchunkType, TrailerFlags, TrailerSize,
    BLOCK_HEADER_BYTES,
};

/// One subchunk of a block: a piece of a chunk, or an out-of-band / reserved marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subchunk<'b> {
    /// Type from the trailer.
    pub kind: SubchunkType,
    /// Flags from the trailer.
    pub flags: TrailerFlags,
    /// The payload bytes (without padding); empty for types without payload.
    pub payload: &'b [u8],
    /// Byte offset of the trailer inside the block.
    pub offset: usize,
}

/// Validates blocks and lists their subchunks.
///
/// Subchunks are found backwards from the end of the block, but must be handed out in forward
/// order; the decoder keeps the trailer positions of the last block in a vector that is reused
/// from block to block (it grows at most to `block_size / trailer_size` entries, once).
#[derive(Debug, Default, Clone)]
pub struct BlockDecoder {
    trailers: Vec<(usize, u32)>,
}

impl BlockDecoder {
    /// A decoder with an empty position buffer.
    pub fn new() -> BlockDecoder {
        BlockDecoder::default()
    }

    /// Parses `block` (the whole block, header included).
    ///
    /// Fails only when the block is unusable: wrong size or unknown start-of-block marker. A
    /// trailer whose payload would overlap the header stops the backward parse: the subchunks
    /// found after it (closer to the end of the block) are kept, and the error is reported by
    /// [`Block::damage`] and as the first item of [`Block::subchunks`]. Null trailers are
    /// skipped.
    pub fn decode<'d, 'b>(&'d mut self, block: &'b [u8]) -> Result<Block<'d, 'b>, FelixError> {
        if !is_valid_block_size(block.len()) {
            return Err(FelixError::BlockSize { len: block.len() });
        }
        let header = BlockHeader::parse(block)?;
        let t = header.trailer.bytes();
        self.trailers.clear();
        let mut damage = None;
        let mut end = block.len();
        // `end` stays a multiple of the trailer size (block size and padded payloads are), and
        // the header is a whole number of units, so the loop ends exactly at the header.
        while end >= BLOCK_HEADER_BYTES + t {
            let at = end - t;
            let word = match (header.trailer, block.get(at..end)) {
                (TrailerSize::Bits16, Some(&[a, b])) => u32::from(u16::from_le_bytes([a, b])),
                (TrailerSize::Bits32, Some(&[a, b, c, d])) => u32::from_le_bytes([a, b, c, d]),
                _ => break,
            };
            let trailer = header.trailer.decode(word);
            if !trailer.kind.has_payload() {
                if trailer.kind != SubchunkType::Null {
                    self.trailers.push((at, word));
                }
                end = at;
                continue;
            }
            let padded = trailer.length.next_multiple_of(t);
            let available = at - BLOCK_HEADER_BYTES;
            if padded > available {
                damage = Some(FelixError::SubchunkOverrun {
                    elink: header.elink,
                    offset: at,
                    length: trailer.length,
                    padded,
                    available,
                });
                break;
            }
            self.trailers.push((at, word));
            end = at - padded;
        }
        Ok(Block {
            header,
            bytes: block,
            trailers: &self.trailers,
            damage,
        })
    }
}

/// A decoded block: its header and its subchunks.
#[derive(Debug, Clone)]
pub struct Block<'d, 'b> {
    header: BlockHeader,
    bytes: &'b [u8],
    trailers: &'d [(usize, u32)],
    damage: Option<FelixError>,
}

impl<'d, 'b> Block<'d, 'b> {
    /// The block header.
    pub fn header(&self) -> BlockHeader {
        self.header
    }

    /// The structural error that stopped the backward parse, if any: the bytes between the
    /// header and the trailer it names could not be interpreted.
    pub fn damage(&self) -> Option<&FelixError> {
        self.damage.as_ref()
    }

    /// Number of subchunks found, null subchunks excluded.
    pub fn len(&self) -> usize {
        self.trailers.len()
    }

    /// Whether the block holds only null subchunks.
    pub fn is_empty(&self) -> bool {
        self.trailers.is_empty()
    }

    /// The subchunks in forward (time) order, preceded by the damage error if there is one.
    pub fn subchunks(&self) -> Subchunks<'d, 'b> {
        Subchunks {
            trailer: self.header.trailer,
            bytes: self.bytes,
            rest: self.trailers,
            damage: self.damage.clone(),
        }
    }
}

/// Iterator over the subchunks of a [`Block`], in forward order.
#[derive(Debug, Clone)]
pub struct Subchunks<'d, 'b> {
    trailer: TrailerSize,
    bytes: &'b [u8],
    rest: &'d [(usize, u32)],
    damage: Option<FelixError>,
}

impl<'b> Iterator for Subchunks<'_, 'b> {
    type Item = Result<Subchunk<'b>, FelixError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.damage.take() {
            return Some(Err(e));
        }
        let (&(offset, word), rest) = self.rest.split_last()?;
        self.rest = rest;
        let trailer = self.trailer.decode(word);
        let payload = if trailer.kind.has_payload() {
            let t = self.trailer.bytes();
            let start = offset - trailer.length.next_multiple_of(t);
            self.bytes.get(start..start + trailer.length).unwrap_or(&[])
        } else {
            &[]
        };
        Some(Ok(Subchunk {
            kind: trailer.kind,
            flags: trailer.flags,
            payload,
            offset,
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.rest.len() + usize::from(self.damage.is_some());
        (n, Some(n))
    }
}
