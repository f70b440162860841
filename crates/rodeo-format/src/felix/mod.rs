//! FELIX to-host blocks: block codec, per-E-link chunk reassembly, default E-link packet format.
//!
//! # Block layout
//!
//! A block is `block_size` bytes (a non-zero multiple of [`BLOCK_UNIT`], default
//! [`DEFAULT_BLOCK_SIZE`]) and belongs to one E-link. It starts with a 4-byte header, two
//! little-endian u16 (see [`BlockHeader`]), and the rest holds subchunks:
//!
//! ```text
//! | header | payload A | pad | trailer A | payload B | pad | trailer B | null | null | ... | null |
//! 0        4                                                                         block_size
//! ```
//!
//! - Trailers are stored **little-endian** (u16 or u32, chosen by the header marker, see
//!   [`TrailerSize`]). A subchunk's payload lies just before its trailer, zero-padded up to a
//!   multiple of the trailer size.
//! - Subchunks are parsed **backwards** from the end of the block (the only way to find a payload
//!   is to read its trailer first), and handed out in **forward** (time) order.
//! - Unused space is filled with **null trailers** (type 0, length 0, no flags). A null trailer
//!   is an all-zero trailer word and consumes exactly one trailer-size unit, so padding is just
//!   zero bytes. The [`ElinkEncoder`] fills blocks forwards from the header and pads the tail of a
//!   flushed block; the decoder accepts null trailers anywhere (for example between the header
//!   and the earliest subchunk, as a firmware that fills blocks from the end would write them).
//! - The length field of null (0) and out-of-band (7) trailers is ignored: they never carry a
//!   payload and always consume exactly one unit.
//!
//! # Encoder: no allocation per chunk
//!
//! An [`ElinkEncoder`] owns exactly one block buffer, allocated when it is created. Chunks are
//! copied into it as subchunks; whenever the block is full it is handed to the caller's sink
//! (`FnMut(&[u8])`, typically a copy into a DMA superpage) and the buffer is reused. Nothing is
//! allocated after construction.
//!
//! # Decoder and reassembler
//!
//! [`BlockDecoder`] validates a block and iterates over its subchunks; it keeps one reusable
//! vector of trailer positions (needed because the backward parse yields subchunks in reverse
//! order). [`Reassembler`] (all E-links) and [`ElinkReassembler`] (one E-link) rebuild chunks
//! into reused per-E-link buffers and hand them to a callback as `&[u8]`; see
//! [`ElinkReassembler`] for the rules. Every anomaly is counted in
//! [`FelixCounters`] (64-bit) and flagged in the chunk's [`ChunkFlags`]; nothing panics on any
//! input.

mod decoder;
mod encoder;
mod error;
mod packet;
mod reassembler;

pub use decoder::{Block, BlockDecoder, Subchunk, Subchunks};
pub use encoder::ElinkEncoder;
pub use error::FelixError;
pub use packet::{
    check_packet, decode_packet, encode_packet, packet_len, packet_seed, pattern,
    write_packet_bytes, write_packet_words, PacketHeader, PACKET_HEADER_BYTES,
};
pub use reassembler::{
    Chunk, ChunkFlags, ElinkReassembler, FelixCounters, Reassembler, DEFAULT_MAX_CHUNK_BYTES,
};

/// Block sizes are multiples of this many bytes (1 KiB).
pub const BLOCK_UNIT: usize = 1024;
/// The default block size in bytes.
pub const DEFAULT_BLOCK_SIZE: usize = 1024;
/// Size of the block header in bytes.
pub const BLOCK_HEADER_BYTES: usize = 4;
/// Start-of-block marker of blocks with 16-bit trailers.
pub const MARKER_TRAILER16: u16 = 0xABCD;
/// Start-of-block marker of blocks with 32-bit trailers.
pub const MARKER_TRAILER32: u16 = 0xABCE;
/// Largest E-link number (11 bits).
pub const MAX_ELINK: u16 = 0x7FF;
/// Number of distinct E-link numbers.
pub const ELINK_COUNT: usize = 2048;
/// Block sequence numbers count modulo this value.
pub const SEQUENCE_MODULO: u8 = 32;

/// Checks that `size` is a valid block size: a non-zero multiple of [`BLOCK_UNIT`].
pub fn is_valid_block_size(size: usize) -> bool {
    size != 0 && size % BLOCK_UNIT == 0
}

/// The E-link number split into its fields.
pub fn elink_fields(elink: u16) -> (u16, u16, u16) {
    ((elink >> 6) & 0x1F, (elink >> 3) & 0x7, elink & 0x7)
}

/// The E-link number from GBT link (0..32), e-group (0..8) and e-path (0..8); extra bits are masked.
pub fn elink_number(gbt: u16, egroup: u16, epath: u16) -> u16 {
    ((gbt & 0x1F) << 6) | ((egroup & 0x7) << 3) | (epath & 0x7)
}

/// Width of the subchunk trailers of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrailerSize {
    /// 16-bit trailers (marker 0xABCD): payloads up to 1023 bytes per subchunk, no busy bit.
    Bits16,
    /// 32-bit trailers (marker 0xABCE): payloads up to 65535 bytes per subchunk.
    Bits32,
}

impl TrailerSize {
    /// Size of one trailer (the padding unit) in bytes.
    pub fn bytes(self) -> usize {
        match self {
            TrailerSize::Bits16 => 2,
            TrailerSize::Bits32 => 4,
        }
    }

    /// The start-of-block marker for this trailer size.
    pub fn marker(self) -> u16 {
        match self {
            TrailerSize::Bits16 => MARKER_TRAILER16,
            TrailerSize::Bits32 => MARKER_TRAILER32,
        }
    }

    /// The trailer size named by a start-of-block marker, if it is one.
    pub fn from_marker(marker: u16) -> Option<TrailerSize> {
        match marker {
            MARKER_TRAILER16 => Some(TrailerSize::Bits16),
            MARKER_TRAILER32 => Some(TrailerSize::Bits32),
            _ => None,
        }
    }

    /// Largest payload length one subchunk trailer can express.
    pub fn max_payload(self) -> usize {
        match self {
            TrailerSize::Bits16 => 0x3FF,
            TrailerSize::Bits32 => 0xFFFF,
        }
    }

    /// Encodes a trailer word (in the low bits of the returned u32 for 16-bit trailers).
    ///
    /// `length` is masked to the field width; flags that the width cannot hold (busy in 16-bit
    /// trailers) are dropped.
    pub fn encode(self, trailer: Trailer) -> u32 {
        let kind = u32::from(trailer.kind.to_bits());
        let f = trailer.flags;
        match self {
            TrailerSize::Bits16 => {
                (trailer.length as u32 & 0x3FF)
                    | (u32::from(f.crc_error) << 10)
                    | (u32::from(f.error) << 11)
                    | (u32::from(f.truncation) << 12)
                    | (kind << 13)
            }
            TrailerSize::Bits32 => {
                (trailer.length as u32 & 0xFFFF)
                    | (u32::from(f.busy) << 25)
                    | (u32::from(f.crc_error) << 26)
                    | (u32::from(f.error) << 27)
                    | (u32::from(f.truncation) << 28)
                    | (kind << 29)
            }
        }
    }

    /// Decodes a trailer word (the low 16 bits for 16-bit trailers).
    pub fn decode(self, word: u32) -> Trailer {
        let bit = |n: u32| word >> n & 1 == 1;
        match self {
            TrailerSize::Bits16 => Trailer {
                kind: SubchunkType::from_bits((word >> 13 & 0x7) as u8),
                length: (word & 0x3FF) as usize,
                flags: TrailerFlags {
                    busy: false,
                    crc_error: bit(10),
                    error: bit(11),
                    truncation: bit(12),
                },
            },
            TrailerSize::Bits32 => Trailer {
                kind: SubchunkType::from_bits((word >> 29 & 0x7) as u8),
                length: (word & 0xFFFF) as usize,
                flags: TrailerFlags {
                    busy: bit(25),
                    crc_error: bit(26),
                    error: bit(27),
                    truncation: bit(28),
                },
            },
        }
    }
}

/// The type field of a subchunk trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubchunkType {
    /// 0: padding, no payload.
    Null,
    /// 1: first piece of a chunk.
    First,
    /// 2: last piece of a chunk.
    Last,
    /// 3: a whole chunk.
    Both,
    /// 4: a middle piece of a chunk.
    Middle,
    /// 5: the front end timed out; with the truncation bit the chunk ends truncated here.
    Timeout,
    /// 6: reserved; its payload is skipped and counted.
    Reserved,
    /// 7: out-of-band, no payload.
    OutOfBand,
}

impl SubchunkType {
    /// The type from its 3-bit field (higher bits ignored).
    pub fn from_bits(bits: u8) -> SubchunkType {
        match bits & 0x7 {
            0 => SubchunkType::Null,
            1 => SubchunkType::First,
            2 => SubchunkType::Last,
            3 => SubchunkType::Both,
            4 => SubchunkType::Middle,
            5 => SubchunkType::Timeout,
            6 => SubchunkType::Reserved,
            _ => SubchunkType::OutOfBand,
        }
    }

    /// The 3-bit field value of this type.
    pub fn to_bits(self) -> u8 {
        match self {
            SubchunkType::Null => 0,
            SubchunkType::First => 1,
            SubchunkType::Last => 2,
            SubchunkType::Both => 3,
            SubchunkType::Middle => 4,
            SubchunkType::Timeout => 5,
            SubchunkType::Reserved => 6,
            SubchunkType::OutOfBand => 7,
        }
    }

    /// Whether a trailer of this type is followed (preceded, in the block) by a payload.
    pub fn has_payload(self) -> bool {
        !matches!(self, SubchunkType::Null | SubchunkType::OutOfBand)
    }
}

/// The flag bits of a subchunk trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TrailerFlags {
    /// Busy (32-bit trailers only).
    pub busy: bool,
    /// CRC error detected by the card.
    pub crc_error: bool,
    /// Error reported by the front end or the card.
    pub error: bool,
    /// The chunk was truncated.
    pub truncation: bool,
}

impl TrailerFlags {
    /// No flag set.
    pub const NONE: TrailerFlags = TrailerFlags {
        busy: false,
        crc_error: false,
        error: false,
        truncation: false,
    };

    /// Whether any of CRC error, error or truncation is set.
    pub fn any_error(self) -> bool {
        self.crc_error || self.error || self.truncation
    }
}

/// A decoded subchunk trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Trailer {
    /// Subchunk type.
    pub kind: SubchunkType,
    /// Payload length in bytes (without padding).
    pub length: usize,
    /// Flag bits.
    pub flags: TrailerFlags,
}

/// The 4-byte block header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHeader {
    /// E-link number (11 bits).
    pub elink: u16,
    /// Block sequence number of this E-link, modulo 32.
    pub sequence: u8,
    /// Trailer width, from the start-of-block marker.
    pub trailer: TrailerSize,
}

impl BlockHeader {
    /// The header bytes.
    pub fn to_bytes(self) -> [u8; 4] {
        let w0 = (u16::from(self.sequence & 0x1F) << 11) | (self.elink & MAX_ELINK);
        let w0 = w0.to_le_bytes();
        let w1 = self.trailer.marker().to_le_bytes();
        [w0[0], w0[1], w1[0], w1[1]]
    }

    /// Parses the first 4 bytes of a block.
    pub fn parse(block: &[u8]) -> Result<BlockHeader, FelixError> {
        let (Some(&b0), Some(&b1), Some(&b2), Some(&b3)) =
            (block.first(), block.get(1), block.get(2), block.get(3))
        else {
            return Err(FelixError::BlockSize { len: block.len() });
        };
        let w0 = u16::from_le_bytes([b0, b1]);
        let marker = u16::from_le_bytes([b2, b3]);
        let elink = w0 & MAX_ELINK;
        let trailer = TrailerSize::from_marker(marker).ok_or(FelixError::BadMarker {
            elink,
            found: marker,
        })?;
        Ok(BlockHeader {
            elink,
            sequence: (w0 >> 11) as u8,
            trailer,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_round_trip_both_sizes() {
        for size in [TrailerSize::Bits16, TrailerSize::Bits32] {
            for bits in 0..8 {
                let t = Trailer {
                    kind: SubchunkType::from_bits(bits),
                    length: 1000,
                    flags: TrailerFlags {
                        busy: size == TrailerSize::Bits32,
                        crc_error: true,
                        error: false,
                        truncation: true,
                    },
                };
                assert_eq!(size.decode(size.encode(t)), t);
            }
        }
        assert_eq!(
            TrailerSize::Bits16.encode(Trailer {
                kind: SubchunkType::Both,
                length: 5,
                flags: TrailerFlags::NONE
            }),
            0x6005
        );
    }

    #[test]
    fn header_round_trip() {
        let h = BlockHeader {
            elink: elink_number(3, 2, 1),
            sequence: 31,
            trailer: TrailerSize::Bits16,
        };
        assert_eq!(elink_fields(h.elink), (3, 2, 1));
        let b = h.to_bytes();
        assert_eq!(&b[2..], &[0xCD, 0xAB]);
        assert_eq!(BlockHeader::parse(&b), Ok(h));
        assert!(BlockHeader::parse(&b[..3]).is_err());
    }
}
