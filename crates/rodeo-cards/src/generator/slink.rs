//! S-LINK mode: whole ROD fragments, one per L1ID.
//!
//! Each unit is one ROD fragment of the event format, written as little-endian words:
//!
//! ```text
//! [0xB0F00000]                      S-LINK begin control word (framing on)
//! 9 header words                    marker, 9, version, source id, run, extended L1ID, BCID,
//!                                   trigger type, detector event type
//! 1 status word (0)                 status before data
//! n data words                      counter_word(source id, extended L1ID, i)
//! 3 trailer words                   1, n, 0
//! [0xE0F00000]                      S-LINK end control word (framing on)
//! ```
//!
//! The data is `rodeo_format::synth`'s counter payload, so [`rodeo_format::synth::check_counter`]
//! checks every word. The header and trailer are written directly (the same words
//! [`rodeo_format::fragment::RodBuilder`] writes) and the data in one pass straight into the
//! superpage: the generator never copies a fragment twice and never allocates. A fragment's size
//! is drawn once; if it does not fit the rest of the superpage it is kept for the next one, so
//! the sequence of sizes does not depend on the superpage size.

use rodeo_format::checksum::{crc16_words, CRC16_INIT};
use rodeo_format::fragment::{
    ROD_FORMAT_VERSION, ROD_HEADER_WORDS, ROD_MARKER, ROD_TRAILER_WORDS, SLINK_BEGIN, SLINK_END,
};
use rodeo_format::synth::counter_word;

use super::{L1idCounter, Rng, WordRange, DEFAULT_L1ID_WRAP};
use crate::dma::{Fill, Generator};

/// Status words of every generated fragment (one word, 0 = good, before the data).
const STATUS_WORDS: usize = 1;

/// Largest data block, in words: keeps one fragment far below any superpage size limit.
const MAX_DATA_WORDS: u32 = 1 << 24;

/// Configuration of a [`SlinkGenerator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlinkConfig {
    /// Source id written into every fragment (and seeding its payload).
    pub source_id: u32,
    /// Run number in the ROD header.
    pub run_number: u32,
    /// Data words per fragment (fixed or uniform); at most 2^24.
    pub data_words: WordRange,
    /// The L1ID wraps at this value, then the ECR increments (default 2^24).
    pub l1id_wrap: u32,
    /// Frame each fragment with the S-LINK control words 0xB0F00000 / 0xE0F00000.
    pub framing: bool,
    /// Follow each ROD fragment with a CRC word (CRC16-CCITT of its words, see
    /// `rodeo_format::slink`).
    pub crc: bool,
    /// PRNG seed for the fragment sizes.
    pub seed: u64,
}

impl Default for SlinkConfig {
    fn default() -> SlinkConfig {
        SlinkConfig {
            source_id: 0x0011_0001,
            run_number: 1,
            data_words: WordRange::fixed(256),
            l1id_wrap: DEFAULT_L1ID_WRAP,
            framing: false,
            crc: false,
            seed: 0x5EED,
        }
    }
}

impl SlinkConfig {
    /// Words of a fragment with `data_words` data words, control words included.
    pub fn fragment_words(&self, data_words: u32) -> usize {
        let framing = if self.framing { 2 } else { 0 };
        framing
            + usize::from(self.crc)
            + ROD_HEADER_WORDS
            + STATUS_WORDS
            + data_words as usize
            + ROD_TRAILER_WORDS
    }
}

/// The S-LINK-mode generator: one ROD fragment per unit. See the module docs for the layout.
#[derive(Debug, Clone)]
pub struct SlinkGenerator {
    config: SlinkConfig,
    l1id: L1idCounter,
    rng: Rng,
    /// Data words of the next fragment (drawn, not yet written).
    next_words: u32,
}

impl SlinkGenerator {
    /// A generator at L1ID 0.
    pub fn new(config: SlinkConfig) -> SlinkGenerator {
        let mut config = config;
        config.data_words = config.data_words.clamp(MAX_DATA_WORDS);
        let mut rng = Rng::new(config.seed);
        let next_words = config.data_words.draw(&mut rng);
        SlinkGenerator {
            l1id: L1idCounter::new(config.l1id_wrap),
            config,
            rng,
            next_words,
        }
    }

    /// Moves on by `events` events without generating them: a generator that joins a running
    /// run at its current L1ID (the fragment sizes go on from the seed, not as if drawn).
    pub fn skip(&mut self, events: u64) {
        self.l1id.skip(events);
    }

    /// The configuration (with the data size clamped).
    pub fn config(&self) -> &SlinkConfig {
        &self.config
    }

    /// Fragments generated so far.
    pub fn fragments(&self) -> u64 {
        self.l1id.events()
    }

    /// Writes one fragment of `ndata` data words into `out` (exactly its size).
    fn write_fragment(&self, out: &mut [u8], ndata: u32) {
        let c = &self.config;
        let l1id = self.l1id.extended();
        let mut at = 0usize;
        let mut put = |w: u32| {
            out[at..at + 4].copy_from_slice(&w.to_le_bytes());
            at += 4;
        };
        if c.framing {
            put(SLINK_BEGIN);
        }
        for w in [
            ROD_MARKER,
            ROD_HEADER_WORDS as u32,
            ROD_FORMAT_VERSION,
            c.source_id,
            c.run_number,
            l1id,
            l1id.wrapping_mul(7) % 3564,
            1,
            0,
            0, // the status word
        ] {
            put(w);
        }
        let data_bytes = 4 * ndata as usize;
        let base = counter_word(c.source_id, l1id, 0);
        write_counter(&mut out[at..at + data_bytes], base);
        at += data_bytes;
        let trailer = [STATUS_WORDS as u32, ndata, 0];
        for w in trailer {
            out[at..at + 4].copy_from_slice(&w.to_le_bytes());
            at += 4;
        }
        if c.crc {
            let first = usize::from(c.framing) * 4;
            let crc = u32::from(crc16_le_bytes(&out[first..at]));
            out[at..at + 4].copy_from_slice(&crc.to_le_bytes());
            at += 4;
        }
        let mut put = |w: u32| {
            out[at..at + 4].copy_from_slice(&w.to_le_bytes());
            at += 4;
        };
        if c.framing {
            put(SLINK_END);
        }
    }
}

/// Writes the counter payload `base`, `base + 1`, ... as little-endian words into `data` (a
/// multiple of 4 bytes). A word-aligned `data` (a superpage always is) is written as words, which
/// the compiler turns into vector stores; an unaligned one word by word as bytes.
fn write_counter(data: &mut [u8], base: u32) {
    // SAFETY: `u32` and `u8` have no invalid bit patterns and no padding, so viewing the bytes
    // as words (only the aligned middle part `align_to_mut` returns) is sound; the words alias
    // nothing else while `data` is borrowed mutably here.
    let (head, words, _) = unsafe { data.align_to_mut::<u32>() };
    if head.is_empty() {
        // Aligned: the fragment's words are the slice's words (the tail is empty: `data` is a
        // multiple of 4 bytes).
        for (i, w) in words.iter_mut().enumerate() {
            *w = base.wrapping_add(i as u32).to_le();
        }
        return;
    }
    for (i, w) in data.chunks_exact_mut(4).enumerate() {
        w.copy_from_slice(&base.wrapping_add(i as u32).to_le_bytes());
    }
}

/// CRC16-CCITT of little-endian words given as bytes (a multiple of 4), fed word by word as
/// the event format defines it, through a small stack buffer (the superpage need not be
/// word-aligned).
fn crc16_le_bytes(bytes: &[u8]) -> u16 {
    let mut crc = CRC16_INIT;
    let mut words = [0u32; 64];
    for block in bytes.chunks(4 * words.len()) {
        let n = block.len() / 4;
        for (w, b) in words.iter_mut().zip(block.chunks_exact(4)) {
            *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        crc = crc16_words(crc, &words[..n]);
    }
    crc
}

impl Generator for SlinkGenerator {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let mut fill = Fill::default();
        while fill.units < max_units {
            let ndata = self.next_words;
            let bytes = 4 * self.config.fragment_words(ndata);
            let Some(out) = buf.get_mut(fill.bytes..fill.bytes + bytes) else {
                break;
            };
            self.write_fragment(out, ndata);
            // The card's descriptor: the fragment's length, as the link's control bit ends it.
            fill.push_unit(bytes);
            self.l1id.advance();
            self.next_words = self.config.data_words.draw(&mut self.rng);
        }
        fill
    }
}

#[cfg(test)]
mod tests {
    use rodeo_format::fragment::RodFragment;
    use rodeo_format::synth::check_counter;

    use super::*;

    fn words(bytes: &[u8]) -> Vec<u32> {
        bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    #[test]
    fn fragments_parse_and_check() {
        let mut g = SlinkGenerator::new(SlinkConfig {
            framing: true,
            data_words: WordRange::uniform(0, 40),
            l1id_wrap: 5,
            ..SlinkConfig::default()
        });
        let mut buf = vec![0u8; 4096];
        let f = g.fill(&mut buf, 12);
        assert_eq!(f.units, 12);
        let w = words(&buf[..f.bytes]);
        let mut at = 0;
        for n in 0..12 {
            assert_eq!(w[at], SLINK_BEGIN);
            let end = at + w[at + 1..].iter().position(|&x| x == SLINK_END).unwrap() + 1;
            let rod = RodFragment::parse(&w[at + 1..end]).unwrap();
            assert_eq!(rod.extended_l1id(), L1idCounter::expected(5, n));
            assert_eq!(
                check_counter(rod.data(), rod.source_id().word(), rod.extended_l1id()),
                None
            );
            at = end + 1;
        }
        assert_eq!(at, w.len());
    }

    #[test]
    fn crc_words_pass_the_checker() {
        use rodeo_format::slink::{SlinkCheckConfig, SlinkChecker, SlinkItem};
        for framing in [false, true] {
            let mut g = SlinkGenerator::new(SlinkConfig {
                framing,
                crc: true,
                data_words: WordRange::uniform(0, 300),
                ..SlinkConfig::default()
            });
            let mut buf = vec![0u8; 64 * 1024];
            let f = g.fill(&mut buf, u64::MAX);
            let mut checker = SlinkChecker::new(SlinkCheckConfig {
                framing,
                crc: true,
                ..SlinkCheckConfig::default()
            });
            let mut good = 0u64;
            checker.check(&words(&buf[..f.bytes]), |item| {
                if let SlinkItem::Fragment(fr) = item {
                    assert!(fr.status.is_ok(), "{:#x}", fr.status.word());
                    good += 1;
                }
            });
            assert_eq!(good, f.units);
            assert_eq!(checker.counters().dropped_words, 0);
        }
    }

    #[test]
    fn aligned_and_unaligned_buffers_get_the_same_fragments() {
        let config = SlinkConfig {
            framing: true,
            data_words: WordRange::uniform(0, 70),
            ..SlinkConfig::default()
        };
        let mut aligned = vec![0u32; 1024];
        let mut bytes = vec![0u8; 4 * 1024 + 3];
        for shift in 0..4 {
            let mut a = SlinkGenerator::new(config);
            let mut u = SlinkGenerator::new(config);
            let fa = a.fill(bytemuck_bytes(&mut aligned), u64::MAX);
            let fu = u.fill(&mut bytes[shift..shift + 4 * 1024], u64::MAX);
            assert_eq!(fa, fu);
            assert!(fa.units > 3);
            let got = words(&bytes[shift..shift + fu.bytes]);
            assert_eq!(&got[..], &aligned[..fa.bytes / 4], "shift {shift}");
        }
    }

    /// The bytes of `words` (little-endian words: this target's order).
    fn bytemuck_bytes(words: &mut [u32]) -> &mut [u8] {
        let n = words.len() * 4;
        // SAFETY: the bytes of `words`, exactly its memory, borrowed as long as it is; u8 has
        // no invalid bit patterns.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), n) }
    }

    #[test]
    fn never_splits_a_fragment() {
        let mut g = SlinkGenerator::new(SlinkConfig {
            data_words: WordRange::fixed(100),
            ..SlinkConfig::default()
        });
        let mut buf = vec![0u8; 1000];
        assert_eq!(
            g.fill(&mut buf, u64::MAX),
            Fill {
                bytes: 904,
                units: 2,
                unit_bytes: 452,
            }
        );
        assert_eq!(g.fill(&mut buf[..100], u64::MAX), Fill::default());
        assert_eq!(g.fragments(), 2);
    }
}
