//! The error type of the FELIX codec.

/// What went wrong while encoding or decoding FELIX blocks or E-link packets.
///
/// Every variant carries the context needed to find the problem: the E-link, the byte offset
/// inside the block (or packet) and the expected and found values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FelixError {
    /// The block length is not a non-zero multiple of 1 KiB (or shorter than its header).
    #[error("block of {len} bytes: the size must be a non-zero multiple of 1024 bytes")]
    BlockSize {
        /// Length of the bytes given as a block.
        len: usize,
    },
    /// The start-of-block marker is neither 0xABCD nor 0xABCE.
    #[error("E-link {elink:#x}: start-of-block marker 0xabcd or 0xabce expected at byte 2, found {found:#06x}")]
    BadMarker {
        /// E-link number read from the (untrusted) header.
        elink: u16,
        /// The marker found.
        found: u16,
    },
    /// A trailer's payload (padded) would start before the end of the block header.
    #[error("E-link {elink:#x}: trailer at byte {offset} declares {length} payload bytes ({padded} padded), only {available} bytes lie between it and the header")]
    SubchunkOverrun {
        /// E-link of the block.
        elink: u16,
        /// Byte offset of the trailer in the block.
        offset: usize,
        /// Declared payload length.
        length: usize,
        /// Declared length padded to the trailer size.
        padded: usize,
        /// Bytes available before the trailer.
        available: usize,
    },
    /// A block was given to the reassembler of another E-link.
    #[error("block of E-link {found:#x} given to the reassembler of E-link {expected:#x}")]
    ElinkMismatch {
        /// The reassembler's E-link.
        expected: u16,
        /// The block's E-link.
        found: u16,
    },
    /// A subchunk payload larger than one trailer can describe or one block can hold.
    #[error("E-link {elink:#x}: subchunk payload of {length} bytes, at most {max} fit")]
    PayloadTooLarge {
        /// E-link of the encoder.
        elink: u16,
        /// Requested payload length.
        length: usize,
        /// Largest possible payload.
        max: usize,
    },
    /// A packet does not fit in the buffer given to hold it.
    #[error("packet of {needed} bytes does not fit in a buffer of {available} bytes")]
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// A packet field is out of range (BCID above 12 bits, payload above 65535 words).
    #[error("packet field {field} = {value} exceeds its maximum {max}")]
    PacketField {
        /// Field name.
        field: &'static str,
        /// Value given.
        value: u64,
        /// Largest value allowed.
        max: u64,
    },
    /// The packet's length disagrees with its header.
    #[error("packet of {found} bytes: its header declares {declared_words} payload words, so {expected} bytes expected")]
    PacketLength {
        /// Payload words declared by word 1.
        declared_words: u32,
        /// Expected packet length in bytes.
        expected: usize,
        /// Actual packet length in bytes.
        found: usize,
    },
    /// A packet is shorter than its 2-word header or not a whole number of words.
    #[error("packet of {len} bytes: at least 8 bytes and a multiple of 4 expected")]
    PacketTooShort {
        /// Packet length in bytes.
        len: usize,
    },
    /// A payload word differs from the emulator's pattern.
    #[error("E-link {elink:#x} L1ID {l1id:#x}: payload word {word} (byte {offset}) expected {expected:#010x}, found {found:#010x}")]
    PatternMismatch {
        /// E-link of the packet.
        elink: u16,
        /// L1ID of the packet.
        l1id: u32,
        /// Index of the payload word.
        word: u32,
        /// Byte offset of the word in the packet.
        offset: usize,
        /// The pattern value.
        expected: u32,
        /// The value found.
        found: u32,
    },
}
