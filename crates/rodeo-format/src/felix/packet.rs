//! The default E-link packet format and the emulator's payload pattern.
//!
//! | word | field |
//! |---|---|
//! | 0 | extended L1ID |
//! | 1 | bits 11..0 BCID, bits 31..16 number of payload words `n` |
//! | 2 .. 2+n | payload: `pattern(elink, l1id, i)` for word `i` |
//!
//! Words are little-endian; a packet is exactly `8 + 4 n` bytes.
//!
//! The pattern is a 32-bit counter starting at a seed mixed from the E-link and the L1ID
//! ([`packet_seed`]): `pattern(elink, l1id, i) = packet_seed(elink, l1id) + i` (wrapping). So any
//! word of any packet can be checked knowing only its E-link, L1ID and index, and packets of
//! different E-links or L1IDs differ.

use super::{FelixError, MAX_ELINK};

/// Bytes of the packet header (2 words).
pub const PACKET_HEADER_BYTES: usize = 8;

const MAX_BCID: u16 = 0xFFF;
const MAX_PAYLOAD_WORDS: u32 = 0xFFFF;

/// The header fields of a default-format packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketHeader {
    /// Extended L1ID.
    pub l1id: u32,
    /// Bunch-crossing id (12 bits).
    pub bcid: u16,
    /// Number of payload words after the header.
    pub payload_words: u32,
}

/// The first payload word of the packet of `elink` with `l1id`.
pub fn packet_seed(elink: u16, l1id: u32) -> u32 {
    l1id.wrapping_mul(0x9E37_79B1) ^ (u32::from(elink & MAX_ELINK) << 21)
}

/// Payload word `i` of the packet of `elink` with `l1id`.
pub fn pattern(elink: u16, l1id: u32, i: u32) -> u32 {
    packet_seed(elink, l1id).wrapping_add(i)
}

/// Length in bytes of a packet with `payload_words` payload words.
pub fn packet_len(payload_words: u32) -> usize {
    PACKET_HEADER_BYTES + 4 * payload_words as usize
}

/// Writes the packet of `elink` / `l1id` / `bcid` with `payload_words` pattern words at the
/// start of `buf`; returns its length in bytes.
pub fn encode_packet(
    buf: &mut [u8],
    elink: u16,
    l1id: u32,
    bcid: u16,
    payload_words: u32,
) -> Result<usize, FelixError> {
    if bcid > MAX_BCID {
        return Err(FelixError::PacketField {
            field: "bcid",
            value: u64::from(bcid),
            max: u64::from(MAX_BCID),
        });
    }
    if payload_words > MAX_PAYLOAD_WORDS {
        return Err(FelixError::PacketField {
            field: "payload_words",
            value: u64::from(payload_words),
            max: u64::from(MAX_PAYLOAD_WORDS),
        });
    }
    let len = packet_len(payload_words);
    let available = buf.len();
    let out = buf.get_mut(..len).ok_or(FelixError::BufferTooSmall {
        needed: len,
        available,
    })?;
    let (header, payload) = out.split_at_mut(PACKET_HEADER_BYTES);
    header[..4].copy_from_slice(&l1id.to_le_bytes());
    header[4..].copy_from_slice(&(u32::from(bcid) | (payload_words << 16)).to_le_bytes());
    let seed = packet_seed(elink, l1id);
    for (i, word) in payload.chunks_exact_mut(4).enumerate() {
        word.copy_from_slice(&seed.wrapping_add(i as u32).to_le_bytes());
    }
    Ok(len)
}

/// Writes the words `first..first + dst.len() / 4` of the packet of `elink` / `l1id` / `bcid`
/// with `payload_words` pattern words into `dst`: the word-aligned case of
/// [`write_packet_bytes`] (every piece of a packet in blocks with 32-bit trailers), one store
/// per word and no partial word. Returns false, writing nothing, when `dst` is not a whole
/// number of words or reaches past the packet's end (then use [`write_packet_bytes`]).
#[inline]
pub fn write_packet_words(
    dst: &mut [u8],
    first: usize,
    elink: u16,
    l1id: u32,
    bcid: u16,
    payload_words: u32,
) -> bool {
    let words = (payload_words & MAX_PAYLOAD_WORDS) as usize;
    if dst.len() % 4 != 0 || first + dst.len() / 4 > 2 + words {
        return false;
    }
    let header = [l1id, u32::from(bcid & MAX_BCID) | ((words as u32) << 16)];
    let mut chunks = dst.chunks_exact_mut(4);
    let mut i = first;
    while i < 2 {
        let Some(c) = chunks.next() else {
            return true;
        };
        c.copy_from_slice(&header[i].to_le_bytes());
        i += 1;
    }
    // Word `i` (>= 2) is `seed + (i - 2)`: one counter, which the compiler vectorises.
    let base = packet_seed(elink, l1id).wrapping_add((i - 2) as u32);
    for (k, c) in chunks.enumerate() {
        c.copy_from_slice(&base.wrapping_add(k as u32).to_le_bytes());
    }
    true
}

/// Writes the bytes `offset..offset + dst.len()` of the packet of `elink` / `l1id` / `bcid` with
/// `payload_words` pattern words into `dst`: a packet generated piece by piece, straight into
/// FELIX blocks (see [`super::ElinkEncoder::push_chunk_from`]). Fields are masked to their
/// widths (BCID 12 bits, payload words 16 bits); bytes past the packet's end are written as 0.
pub fn write_packet_bytes(
    dst: &mut [u8],
    offset: usize,
    elink: u16,
    l1id: u32,
    bcid: u16,
    payload_words: u32,
) {
    let header = [
        l1id,
        u32::from(bcid & MAX_BCID) | ((payload_words & MAX_PAYLOAD_WORDS) << 16),
    ];
    let seed = packet_seed(elink, l1id);
    let word = |i: usize| -> u32 {
        if i < 2 {
            header[i]
        } else if i - 2 < (payload_words & MAX_PAYLOAD_WORDS) as usize {
            seed.wrapping_add((i - 2) as u32)
        } else {
            0
        }
    };
    let mut at = 0;
    // A leading partial word.
    let lead = (4 - offset % 4) % 4;
    if lead > 0 {
        let w = word(offset / 4).to_le_bytes();
        let n = lead.min(dst.len());
        dst[..n].copy_from_slice(&w[offset % 4..offset % 4 + n]);
        at = n;
    }
    // Whole words in three runs, each a loop without a branch per word (the pattern run is a
    // counter the compiler vectorises): header words, payload words, zeros past the end.
    let first_word = (offset + at) / 4;
    let whole = (dst.len() - at) / 4;
    let end_word = first_word + whole;
    let payload_end = 2 + (payload_words & MAX_PAYLOAD_WORDS) as usize;
    let words = &mut dst[at..at + 4 * whole];
    let head_end = 2.clamp(first_word, end_word);
    let pay_end = payload_end.clamp(head_end, end_word);
    let (head, rest) = words.split_at_mut(4 * (head_end - first_word));
    let (pay, zeros) = rest.split_at_mut(4 * (pay_end - head_end));
    for (k, c) in head.chunks_exact_mut(4).enumerate() {
        c.copy_from_slice(&header[first_word + k].to_le_bytes());
    }
    let base = seed.wrapping_add(head_end.saturating_sub(2) as u32);
    for (k, c) in pay.chunks_exact_mut(4).enumerate() {
        c.copy_from_slice(&base.wrapping_add(k as u32).to_le_bytes());
    }
    if !zeros.is_empty() {
        zeros.fill(0);
    }
    at += 4 * whole;
    // A trailing partial word.
    if at < dst.len() {
        let w = word((offset + at) / 4).to_le_bytes();
        let n = dst.len() - at;
        dst[at..].copy_from_slice(&w[..n]);
    }
}

fn word_at(bytes: &[u8], index: usize) -> Option<u32> {
    let w = bytes.get(index * 4..index * 4 + 4)?;
    Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

/// Parses a packet's header and checks that its length matches the declared payload.
pub fn decode_packet(bytes: &[u8]) -> Result<PacketHeader, FelixError> {
    let (Some(l1id), Some(w1)) = (word_at(bytes, 0), word_at(bytes, 1)) else {
        return Err(FelixError::PacketTooShort { len: bytes.len() });
    };
    if bytes.len() % 4 != 0 {
        return Err(FelixError::PacketTooShort { len: bytes.len() });
    }
    let header = PacketHeader {
        l1id,
        bcid: (w1 & 0xFFF) as u16,
        payload_words: w1 >> 16,
    };
    let expected = packet_len(header.payload_words);
    if expected != bytes.len() {
        return Err(FelixError::PacketLength {
            declared_words: header.payload_words,
            expected,
            found: bytes.len(),
        });
    }
    Ok(header)
}

/// [`decode_packet`], then checks every payload word against [`pattern`] for `elink`.
pub fn check_packet(elink: u16, bytes: &[u8]) -> Result<PacketHeader, FelixError> {
    let header = decode_packet(bytes)?;
    let seed = packet_seed(elink, header.l1id);
    let payload = bytes.get(PACKET_HEADER_BYTES..).unwrap_or(&[]);
    for (i, w) in payload.chunks_exact(4).enumerate() {
        let found = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let expected = seed.wrapping_add(i as u32);
        if found != expected {
            return Err(FelixError::PatternMismatch {
                elink,
                l1id: header.l1id,
                word: i as u32,
                offset: PACKET_HEADER_BYTES + 4 * i,
                expected,
                found,
            });
        }
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every word-aligned piece written by the word path is what the byte path writes; a piece
    /// that is not whole words or reaches past the packet is refused and left untouched.
    #[test]
    fn the_word_path_writes_what_the_byte_path_writes() {
        for words in [0u32, 1, 5, 62] {
            let len = packet_len(words) / 4;
            for first in 0..=len {
                for n in 0..=len - first {
                    let mut a = vec![0xAAu8; 4 * n];
                    let mut b = vec![0x55u8; 4 * n];
                    assert!(write_packet_words(
                        &mut a,
                        first,
                        0x41,
                        0x0700_0123,
                        0x9AB,
                        words
                    ));
                    write_packet_bytes(&mut b, 4 * first, 0x41, 0x0700_0123, 0x9AB, words);
                    assert_eq!(a, b, "{words} words, piece {first}+{n}");
                }
            }
            let mut past = vec![7u8; 4];
            assert!(!write_packet_words(&mut past, len, 0x41, 1, 2, words));
            let mut odd = vec![7u8; 3];
            assert!(!write_packet_words(&mut odd, 0, 0x41, 1, 2, words));
            assert!(past == [7; 4] && odd == [7; 3]);
        }
    }

    #[test]
    fn packet_round_trip_and_checks() {
        let mut buf = [0u8; 64];
        let n = encode_packet(&mut buf, 0x123, 77, 0xABC, 5).unwrap();
        assert_eq!(n, 28);
        let h = check_packet(0x123, &buf[..n]).unwrap();
        assert_eq!((h.l1id, h.bcid, h.payload_words), (77, 0xABC, 5));
        assert!(matches!(
            check_packet(0x124, &buf[..n]),
            Err(FelixError::PatternMismatch { word: 0, .. })
        ));
        assert!(matches!(
            decode_packet(&buf[..n - 4]),
            Err(FelixError::PacketLength { .. })
        ));
        assert!(decode_packet(&buf[..7]).is_err());
        assert!(encode_packet(&mut buf, 1, 1, 0x1000, 0).is_err());
        assert!(encode_packet(&mut buf[..20], 1, 1, 1, 4).is_err());
        buf[12] ^= 1;
        assert!(matches!(
            check_packet(0x123, &buf[..n]),
            Err(FelixError::PatternMismatch {
                word: 1,
                offset: 12,
                ..
            })
        ));
    }

    #[test]
    fn packet_bytes_written_piecewise_match_the_encoder() {
        for words in [0u32, 1, 2, 7, 40] {
            let len = packet_len(words);
            // The packet, then zeros: bytes past its end are written as 0.
            let mut whole = vec![0u8; len + 9];
            encode_packet(&mut whole, 0x41, 0x0100_0203, 0x123, words).unwrap();
            for start in 0..whole.len() {
                for end in start..=whole.len() {
                    let mut piece = vec![0xAAu8; end - start];
                    write_packet_bytes(&mut piece, start, 0x41, 0x0100_0203, 0x123, words);
                    assert_eq!(
                        piece,
                        &whole[start..end],
                        "words {words} bytes {start}..{end}"
                    );
                }
            }
        }
    }
}
