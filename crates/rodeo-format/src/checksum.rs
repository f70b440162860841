//! Checksums of the event format: none, CRC16-CCITT ("CCITT-FALSE") and Adler-32.
//!
//! Both real checksums are incremental: `update(state, bytes) -> state`, starting from
//! [`CRC16_INIT`] or [`ADLER32_INIT`], so a fragment written from several pieces can be summed
//! piece by piece and give the same value as a sum over the joined bytes.
//!
//! Word order: fragments are little-endian 32-bit words. Adler-32 runs over the bytes as they lie
//! in memory (little-endian). CRC16 is fed word by word, each word's bytes most significant first
//! (see [`crc16_words`]).

/// Initial value of a CRC16-CCITT computation.
pub const CRC16_INIT: u16 = 0xFFFF;
/// Initial value of an Adler-32 computation.
pub const ADLER32_INIT: u32 = 1;

const CRC16_POLY: u16 = 0x1021;
const ADLER_MOD: u32 = 65_521;
/// Largest number of bytes that can be summed before the Adler-32 accumulators must be reduced
/// (zlib's NMAX: the largest n with 255 n (n+1) / 2 + (n+1)(MOD-1) <= 2^32-1).
const ADLER_NMAX: usize = 5552;

/// The checksum type word of a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChecksumType {
    /// No checksum word follows the payload (type word 0).
    None,
    /// CRC16-CCITT, stored in the low half of the checksum word (type word 1).
    Crc16,
    /// zlib Adler-32 of the payload bytes (type word 2).
    Adler32,
}

impl ChecksumType {
    /// The type from its word, or `None` if the word names no known checksum.
    pub fn from_word(word: u32) -> Option<ChecksumType> {
        match word {
            0 => Some(ChecksumType::None),
            1 => Some(ChecksumType::Crc16),
            2 => Some(ChecksumType::Adler32),
            _ => None,
        }
    }

    /// The word that names this type in a fragment header.
    pub fn to_word(self) -> u32 {
        match self {
            ChecksumType::None => 0,
            ChecksumType::Crc16 => 1,
            ChecksumType::Adler32 => 2,
        }
    }

    /// Number of checksum words that follow a payload of this type (0 or 1).
    pub fn trailer_words(self) -> usize {
        match self {
            ChecksumType::None => 0,
            _ => 1,
        }
    }

    /// The checksum word of `words` for this type (0 for [`ChecksumType::None`]).
    pub fn compute(self, words: &[u32]) -> u32 {
        let mut c = Checksum::new(self);
        c.update_words(words);
        c.finish()
    }
}

/// An incremental checksum of any type: feed pieces in order, then [`Checksum::finish`].
#[derive(Debug, Clone, Copy)]
pub struct Checksum {
    kind: ChecksumType,
    state: u32,
}

impl Checksum {
    /// Starts a checksum of the given type.
    pub fn new(kind: ChecksumType) -> Checksum {
        let state = match kind {
            ChecksumType::None => 0,
            ChecksumType::Crc16 => u32::from(CRC16_INIT),
            ChecksumType::Adler32 => ADLER32_INIT,
        };
        Checksum { kind, state }
    }

    /// Feeds the next words.
    pub fn update_words(&mut self, words: &[u32]) {
        self.state = match self.kind {
            ChecksumType::None => 0,
            ChecksumType::Crc16 => u32::from(crc16_words(self.state as u16, words)),
            ChecksumType::Adler32 => adler32(self.state, words_as_bytes(words)),
        };
    }

    /// The checksum word: the CRC in the low 16 bits, or the Adler-32 value, or 0.
    pub fn finish(self) -> u32 {
        self.state
    }
}

/// Views 32-bit words as their in-memory (little-endian on every supported target) bytes.
pub fn words_as_bytes(words: &[u32]) -> &[u8] {
    // SAFETY: u32 has no padding and every bit pattern of u8 is valid; the byte slice covers
    // exactly the memory of `words` (len * 4 bytes, which cannot overflow isize since the word
    // slice already exists) and borrows it for the same lifetime, so no aliasing rules change.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

/// CRC16-CCITT of `bytes`, continuing from `crc` (start with [`CRC16_INIT`]).
pub fn crc16(mut crc: u16, bytes: &[u8]) -> u16 {
    for &b in bytes {
        crc = (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ b)];
    }
    crc
}

/// CRC16-CCITT of fragment words, each fed most significant byte first, continuing from `crc`.
pub fn crc16_words(mut crc: u16, words: &[u32]) -> u16 {
    for &w in words {
        crc = crc16(crc, &w.to_be_bytes());
    }
    crc
}

/// zlib Adler-32 of `bytes`, continuing from `adler` (start with [`ADLER32_INIT`]).
pub fn adler32(adler: u32, bytes: &[u8]) -> u32 {
    let mut a = adler & 0xFFFF;
    let mut b = adler >> 16;
    for chunk in bytes.chunks(ADLER_NMAX) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= ADLER_MOD;
        b %= ADLER_MOD;
    }
    (b << 16) | a
}

const CRC16_TABLE: [u16; 256] = crc16_table();

const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ CRC16_POLY
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_check_value() {
        assert_eq!(crc16(CRC16_INIT, b"123456789"), 0x29B1);
    }

    #[test]
    fn adler32_check_values() {
        assert_eq!(adler32(ADLER32_INIT, b""), 1);
        assert_eq!(adler32(ADLER32_INIT, b"Wikipedia"), 0x11E6_0398);
        assert_eq!(adler32(ADLER32_INIT, b"123456789"), 0x091E_01DE);
    }

    #[test]
    fn incremental_equals_whole() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
        for split in [0, 1, 17, 5552, 5553, 19_999] {
            let (x, y) = data.split_at(split);
            assert_eq!(
                adler32(adler32(ADLER32_INIT, x), y),
                adler32(ADLER32_INIT, &data)
            );
            assert_eq!(crc16(crc16(CRC16_INIT, x), y), crc16(CRC16_INIT, &data));
        }
    }

    #[test]
    fn crc16_words_are_fed_big_endian() {
        let w = [u32::from_be_bytes(*b"1234"), u32::from_be_bytes(*b"5678")];
        assert_eq!(crc16_words(CRC16_INIT, &w), crc16(CRC16_INIT, b"12345678"));
    }
}
