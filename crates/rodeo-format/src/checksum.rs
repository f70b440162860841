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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ChecksumType {
    /// No checksum word follows the payload (type word 0).
    #[default]
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

/// Views bytes as 32-bit words when they are 4-byte aligned and a whole number of words (a
/// superpage's data, a page); `None` otherwise (the caller then copies).
pub fn bytes_as_words(bytes: &[u8]) -> Option<&[u32]> {
    if bytes.is_empty() {
        return Some(&[]);
    }
    if bytes.len() % 4 != 0 || bytes.as_ptr().align_offset(std::mem::align_of::<u32>()) != 0 {
        return None;
    }
    // SAFETY: the pointer is aligned for u32 (checked above), the length is a whole number of
    // words, every bit pattern is a valid u32, and the word slice covers exactly the memory of
    // `bytes` for the same lifetime (shared borrow), so no aliasing rules change.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<u32>(), bytes.len() / 4) })
}

/// CRC16-CCITT of `bytes`, continuing from `crc` (start with [`CRC16_INIT`]).
///
/// Table-driven, slicing-by-16: sixteen bytes per step through sixteen 256-entry tables.
pub fn crc16(mut crc: u16, bytes: &[u8]) -> u16 {
    let mut chunks = bytes.chunks_exact(16);
    for c in &mut chunks {
        let mut hi = [0u8; 8];
        let mut lo = [0u8; 8];
        hi.copy_from_slice(&c[..8]);
        lo.copy_from_slice(&c[8..]);
        crc = crc16_step16(crc, u64::from_be_bytes(hi), u64::from_be_bytes(lo));
    }
    crc16_scalar(crc, chunks.remainder())
}

/// CRC16-CCITT of fragment words, each fed most significant byte first, continuing from `crc`.
///
/// Equivalent to [`crc16`] over the words' big-endian bytes, computed without copying them.
pub fn crc16_words(mut crc: u16, words: &[u32]) -> u16 {
    let mut chunks = words.chunks_exact(4);
    for c in &mut chunks {
        let hi = (u64::from(c[0]) << 32) | u64::from(c[1]);
        let lo = (u64::from(c[2]) << 32) | u64::from(c[3]);
        crc = crc16_step16(crc, hi, lo);
    }
    for &w in chunks.remainder() {
        crc = crc16_scalar(crc, &w.to_be_bytes());
    }
    crc
}

/// Reference CRC16-CCITT, one table lookup per byte (the baseline the fast paths are tested and
/// benchmarked against).
pub fn crc16_scalar(mut crc: u16, bytes: &[u8]) -> u16 {
    for &b in bytes {
        crc = (crc << 8) ^ CRC16_TABLES[0][usize::from((crc >> 8) as u8 ^ b)];
    }
    crc
}

/// Reference [`crc16_words`], byte by byte.
pub fn crc16_words_scalar(mut crc: u16, words: &[u32]) -> u16 {
    for &w in words {
        crc = crc16_scalar(crc, &w.to_be_bytes());
    }
    crc
}

/// One slicing-by-16 step over 16 message bytes given as two big-endian u64 (first byte in the
/// top bits of `hi`). The CRC register stands for the next two message bytes, so it is folded into
/// the top of `hi`; byte `i` of the block (0-based) then contributes the CRC of itself followed by
/// `15 - i` zero bytes, which is `CRC16_TABLES[15 - i]`.
#[inline(always)]
fn crc16_step16(crc: u16, hi: u64, lo: u64) -> u16 {
    let hi = hi ^ (u64::from(crc) << 48);
    let t = &CRC16_TABLES;
    let b = |x: u64, s: u32| usize::from((x >> s) as u8);
    t[15][b(hi, 56)]
        ^ t[14][b(hi, 48)]
        ^ t[13][b(hi, 40)]
        ^ t[12][b(hi, 32)]
        ^ t[11][b(hi, 24)]
        ^ t[10][b(hi, 16)]
        ^ t[9][b(hi, 8)]
        ^ t[8][b(hi, 0)]
        ^ t[7][b(lo, 56)]
        ^ t[6][b(lo, 48)]
        ^ t[5][b(lo, 40)]
        ^ t[4][b(lo, 32)]
        ^ t[3][b(lo, 24)]
        ^ t[2][b(lo, 16)]
        ^ t[1][b(lo, 8)]
        ^ t[0][b(lo, 0)]
}

/// zlib Adler-32 of `bytes`, continuing from `adler` (start with [`ADLER32_INIT`]).
///
/// On x86_64 with AVX2 (detected at run time) this runs a SIMD kernel; elsewhere it is
/// [`adler32_scalar`].
pub fn adler32(adler: u32, bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if bytes.len() >= 64 && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above, which is the only requirement
            // of `adler32_avx2`.
            return unsafe { avx2::adler32_avx2(adler, bytes) };
        }
    }
    adler32_scalar(adler, bytes)
}

/// Reference Adler-32, byte by byte (portable fallback and baseline for tests and benchmarks).
pub fn adler32_scalar(adler: u32, bytes: &[u8]) -> u32 {
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

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! AVX2 Adler-32.
    //!
    //! For a block of `n` bytes x_1..x_n starting from sums (a, b):
    //! a' = a + sum x_i and b' = b + n a + sum (n - i + 1) x_i. The kernel walks the block in
    //! 32-byte vectors. Per vector it adds the byte sums (`sad` against zero) to `vs1`, adds the
    //! previous `vs1` to `vps` (each earlier vector's bytes weigh 32 more for every later vector)
    //! and adds the bytes weighted 32..1 (`maddubs` then `madd`) to `vs2`. At the end of the block
    //! b' = b + n a + 32 * sum(vps) + sum(vs2), reduced mod 65521. Blocks are at most
    //! [`BLOCK`] bytes (a multiple of 32 below NMAX) so no 32-bit lane overflows; the horizontal
    //! sums are done in 64 bits.

    use super::{adler32_scalar, ADLER_MOD, ADLER_NMAX};
    use std::arch::x86_64::*;

    /// Bytes per block between reductions: the largest multiple of 32 not above NMAX.
    const BLOCK: usize = ADLER_NMAX / 32 * 32;

    /// Adler-32 with AVX2.
    ///
    /// # Safety
    ///
    /// - The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn adler32_avx2(adler: u32, bytes: &[u8]) -> u32 {
        let mut a = u64::from(adler & 0xFFFF);
        let mut b = u64::from(adler >> 16);
        let vec_len = bytes.len() / 32 * 32;
        let (head, tail) = bytes.split_at(vec_len);
        let weights = _mm256_setr_epi8(
            32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11,
            10, 9, 8, 7, 6, 5, 4, 3, 2, 1,
        );
        let ones = _mm256_set1_epi16(1);
        let zero = _mm256_setzero_si256();
        for block in head.chunks(BLOCK) {
            let mut vs1 = zero;
            let mut vps = zero;
            let mut vs2 = zero;
            for v in block.chunks_exact(32) {
                // SAFETY: `v` is a 32-byte slice, so reading 32 bytes from its start stays in
                // bounds; `loadu` has no alignment requirement.
                let d = unsafe { _mm256_loadu_si256(v.as_ptr().cast::<__m256i>()) };
                vps = _mm256_add_epi32(vps, vs1);
                vs1 = _mm256_add_epi32(vs1, _mm256_sad_epu8(d, zero));
                let w = _mm256_maddubs_epi16(d, weights);
                vs2 = _mm256_add_epi32(vs2, _mm256_madd_epi16(w, ones));
            }
            let n = block.len() as u64;
            // SAFETY: AVX2 is available (this function's own precondition).
            let (ps, s2, s1) = unsafe { (hsum(vps), hsum(vs2), hsum(vs1)) };
            b += n * a + 32 * ps + s2;
            a += s1;
            a %= u64::from(ADLER_MOD);
            b %= u64::from(ADLER_MOD);
        }
        adler32_scalar(((b as u32) << 16) | a as u32, tail)
    }

    /// Sum of the eight u32 lanes, in 64 bits.
    #[target_feature(enable = "avx2")]
    unsafe fn hsum(v: __m256i) -> u64 {
        let mut lanes = [0u32; 8];
        // SAFETY: `lanes` is 32 bytes long and writable; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), v) };
        lanes.iter().map(|&x| u64::from(x)).sum()
    }
}

/// Slicing-by-16 tables: `CRC16_TABLES[k][x]` is the CRC (from a zero register) of byte `x`
/// followed by `k` zero bytes.
static CRC16_TABLES: [[u16; 256]; 16] = crc16_tables();

const fn crc16_tables() -> [[u16; 256]; 16] {
    let mut t = [[0u16; 256]; 16];
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
        t[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < 16 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev << 8) ^ t[0][(prev >> 8) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// The Adler-32 of `A || B` from the Adler-32 of `A` (`first`), that of `B` (`second`) and the
/// length of `B`, so a checksum over concatenated pieces needs no second pass over pieces
/// already summed.
///
/// With `a` the byte sum plus one and `b` the sum of the successive `a` values (both modulo
/// 65521): `a(AB) = a(A) + a(B) - 1` and `b(AB) = b(A) + b(B) + len(B) (a(A) - 1)`.
pub fn adler32_concat(first: u32, second: u32, second_len: u64) -> u32 {
    const MOD: u64 = 65_521;
    let (a1, b1) = (u64::from(first & 0xFFFF), u64::from(first >> 16));
    let (a2, b2) = (u64::from(second & 0xFFFF), u64::from(second >> 16));
    let a = (a1 + a2 + MOD - 1) % MOD;
    let b = (b1 + b2 + (second_len % MOD) * ((a1 + MOD - 1) % MOD)) % MOD;
    ((b << 16) | a) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adler32_concat_matches_one_pass() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 31 + 7) as u8).collect();
        for split in [0, 1, 3, 5552, 20_000, 50_000] {
            let (x, y) = data.split_at(split);
            let whole = adler32(ADLER32_INIT, &data);
            let joined = adler32_concat(
                adler32(ADLER32_INIT, x),
                adler32(ADLER32_INIT, y),
                y.len() as u64,
            );
            assert_eq!(joined, whole, "split {split}");
        }
        let ff = vec![0xFFu8; 100_000];
        assert_eq!(
            adler32_concat(
                adler32(ADLER32_INIT, &ff[..1]),
                adler32(ADLER32_INIT, &ff[1..]),
                99_999
            ),
            adler32(ADLER32_INIT, &ff)
        );
    }

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

    /// Deterministic pseudo-random bytes (xorshift), no extra dependency.
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn fast_paths_match_scalar_on_random_lengths_and_offsets() {
        let data = noise(10_100, 42);
        let mut lens = noise(400, 7)
            .chunks_exact(2)
            .map(|c| usize::from(u16::from_le_bytes([c[0], c[1]])) % 10_000)
            .collect::<Vec<_>>();
        lens.extend([
            0, 1, 31, 32, 33, 63, 64, 65, 5535, 5536, 5537, 5552, 5553, 9999,
        ]);
        for (i, len) in lens.into_iter().enumerate() {
            let start = i % 37;
            let s = &data[start..start + len];
            assert_eq!(
                adler32(ADLER32_INIT, s),
                adler32_scalar(ADLER32_INIT, s),
                "adler len {len} start {start}"
            );
            assert_eq!(
                crc16(CRC16_INIT, s),
                crc16_scalar(CRC16_INIT, s),
                "crc len {len} start {start}"
            );
            let seed = 0x1234_5678 ^ len as u32;
            assert_eq!(adler32(seed % 65521, s), adler32_scalar(seed % 65521, s));
        }
    }

    #[test]
    fn all_ff_bytes_do_not_overflow() {
        let data = vec![0xFFu8; 100_000];
        for len in [5536, 5552, 11_104, 100_000] {
            let init = (65_520 << 16) | 65_520;
            assert_eq!(
                adler32(init, &data[..len]),
                adler32_scalar(init, &data[..len])
            );
        }
    }

    #[test]
    fn incremental_fast_splits() {
        let data = noise(30_000, 3);
        for split in [0, 1, 31, 64, 5536, 5553, 12_345, 29_999, 30_000] {
            let (x, y) = data.split_at(split);
            assert_eq!(
                adler32(adler32(ADLER32_INIT, x), y),
                adler32_scalar(ADLER32_INIT, &data)
            );
            assert_eq!(
                crc16(crc16(CRC16_INIT, x), y),
                crc16_scalar(CRC16_INIT, &data)
            );
        }
    }

    #[test]
    fn crc16_words_matches_scalar() {
        let bytes = noise(4 * 2_000, 9);
        let words: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        for len in [0, 1, 3, 4, 5, 7, 8, 9, 1_999, 2_000] {
            for start in [0, 1, 2, 3] {
                if start + len > words.len() {
                    continue;
                }
                let w = &words[start..start + len];
                assert_eq!(
                    crc16_words(CRC16_INIT, w),
                    crc16_words_scalar(CRC16_INIT, w)
                );
                let be: Vec<u8> = w.iter().flat_map(|x| x.to_be_bytes()).collect();
                assert_eq!(crc16_words(CRC16_INIT, w), crc16(CRC16_INIT, &be));
            }
        }
    }

    #[test]
    fn bytes_as_words_needs_alignment_and_whole_words() {
        let words = [0x0403_0201u32, 0x0807_0605];
        let bytes = words_as_bytes(&words);
        assert_eq!(bytes_as_words(bytes), Some(&words[..]));
        assert_eq!(bytes_as_words(&bytes[..7]), None);
        assert_eq!(bytes_as_words(&bytes[1..5]), None);
        assert_eq!(bytes_as_words(&[]), Some(&[][..]));
    }
}
