//! FELIX mode: E-link packets packed into blocks, one unit per block.
//!
//! Each E-link sends one packet per L1ID in the default packet format (extended L1ID, BCID
//! and payload length, then the `pattern` payload). The generator writes one whole block at a
//! time, straight into the superpage (no block buffer to copy from, as a card's DMA engine
//! writes each block once): the block header, then the E-link's packets as subchunks, each
//! generated in place ([`write_packet_bytes`]), a packet longer than the room left split as
//! FIRST / MIDDLE... / LAST over that E-link's next blocks, the rest of a block padded with
//! null trailers. The next block always goes to the E-link that is furthest behind (fewest
//! packets finished; the lowest index first), so the E-links stay within about a block's
//! worth of L1IDs of each other, as on a card whose E-links carry the same rate, and a packet
//! split over blocks continues in that E-link's next block, across superpages if it must.
//!
//! The blocks are exactly what [`rodeo_format::felix::ElinkEncoder`] would make of each
//! E-link's packets; only the order of the E-links' blocks in the superpage differs (by
//! E-link progress here, by block completion there). The generator never allocates after it
//! is built.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rodeo_format::felix::{
    is_valid_block_size, packet_len, write_packet_bytes, write_packet_words, BlockHeader,
    FelixError, SubchunkType, Trailer, TrailerFlags, TrailerSize, BLOCK_HEADER_BYTES,
    DEFAULT_BLOCK_SIZE, MAX_ELINK, SEQUENCE_MODULO,
};

use super::{GeneratorError, L1idCounter, Rng, WordRange, DEFAULT_L1ID_WRAP};
use crate::dma::{Fill, Generator};

/// Largest payload of a default-format packet, in words (a 16-bit field).
const MAX_PAYLOAD_WORDS: u32 = 0xFFFF;

/// Configuration of a [`FelixGenerator`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FelixConfig {
    /// The E-link numbers (11 bits each), one packet per E-link per L1ID.
    pub elinks: Vec<u16>,
    /// Payload words per packet (fixed or uniform); at most 0xFFFF.
    pub payload_words: WordRange,
    /// Block size in bytes (a non-zero multiple of 1024).
    pub block_size: usize,
    /// Trailer width of the blocks.
    pub trailer: TrailerSize,
    /// The L1ID wraps at this value, then the ECR increments (default 2^24).
    pub l1id_wrap: u32,
    /// PRNG seed for the packet sizes.
    pub seed: u64,
}

impl Default for FelixConfig {
    fn default() -> FelixConfig {
        FelixConfig {
            elinks: (0..8).collect(),
            payload_words: WordRange::fixed(62),
            block_size: DEFAULT_BLOCK_SIZE,
            trailer: TrailerSize::Bits32,
            l1id_wrap: DEFAULT_L1ID_WRAP,
            seed: 0xFE11C5,
        }
    }
}

/// The packet an E-link is writing.
#[derive(Debug, Clone, Copy)]
struct Packet {
    l1id: u32,
    bcid: u16,
    words: u32,
    len: usize,
}

/// One E-link's state: its L1IDs, block sequence number and the packet it is in.
#[derive(Debug, Clone)]
struct Lane {
    elink: u16,
    l1id: L1idCounter,
    sequence: u8,
    /// The packet being written and the bytes of it written so far.
    packet: Option<Packet>,
    done: usize,
}

impl Lane {
    /// Writes the E-link's next block into `block` (exactly one block long).
    fn write_block(
        &mut self,
        block: &mut [u8],
        trailer: TrailerSize,
        sizes: WordRange,
        rng: &mut Rng,
    ) {
        let header = BlockHeader {
            elink: self.elink,
            sequence: self.sequence,
            trailer,
        };
        block[..BLOCK_HEADER_BYTES].copy_from_slice(&header.to_bytes());
        let t = trailer.bytes();
        let max_field = trailer.max_payload();
        let mut pos = BLOCK_HEADER_BYTES;
        // A subchunk needs its trailer and at least one byte.
        while block.len() - pos > t {
            let p = match self.packet {
                Some(p) => p,
                None => {
                    let words = sizes.draw(rng);
                    let l1id = self.l1id.extended();
                    let p = Packet {
                        l1id,
                        bcid: (l1id.wrapping_mul(7) % 3564) as u16,
                        words,
                        len: packet_len(words),
                    };
                    self.packet = Some(p);
                    p
                }
            };
            let rest = p.len - self.done;
            let n = rest.min(block.len() - pos - t).min(max_field);
            let last = n == rest;
            let kind = match (self.done == 0, last) {
                (true, true) => SubchunkType::Both,
                (true, false) => SubchunkType::First,
                (false, false) => SubchunkType::Middle,
                (false, true) => SubchunkType::Last,
            };
            let dst = &mut block[pos..pos + n];
            // Word-aligned pieces (always, with 32-bit trailers) take the word path.
            let whole_words = self.done % 4 == 0
                && write_packet_words(dst, self.done / 4, self.elink, p.l1id, p.bcid, p.words);
            if !whole_words {
                write_packet_bytes(dst, self.done, self.elink, p.l1id, p.bcid, p.words);
            }
            let padded = n.next_multiple_of(t);
            // Tiny fills are written by hand: a memset call each costs more than the bytes.
            for b in &mut block[pos + n..pos + padded] {
                *b = 0;
            }
            let word = trailer.encode(Trailer {
                kind,
                length: n,
                flags: TrailerFlags::NONE,
            });
            let at = pos + padded;
            match trailer {
                TrailerSize::Bits16 => {
                    block[at..at + 2].copy_from_slice(&(word as u16).to_le_bytes());
                }
                TrailerSize::Bits32 => block[at..at + 4].copy_from_slice(&word.to_le_bytes()),
            }
            pos = at + t;
            if last {
                self.packet = None;
                self.done = 0;
                self.l1id.advance();
            } else {
                self.done += n;
            }
        }
        // Null trailers (at most a trailer's width of bytes is left).
        for b in &mut block[pos..] {
            *b = 0;
        }
        self.sequence = (self.sequence + 1) % SEQUENCE_MODULO;
    }
}

/// E-links up to which the next block's E-link is found by a scan of their progress (a few
/// compares, no heap); more take the heap.
const SCAN_LANES: usize = 32;

/// The FELIX-mode generator: blocks of E-link packets. See the module docs.
#[derive(Debug, Clone)]
pub struct FelixGenerator {
    lanes: Vec<Lane>,
    /// With more than [`SCAN_LANES`] E-links: the E-links by packets finished, then index;
    /// the next block goes to the first.
    order: BinaryHeap<Reverse<(u64, usize)>>,
    /// With at most [`SCAN_LANES`] E-links: each E-link's packets finished, by index.
    progress: Vec<u64>,
    payload_words: WordRange,
    block_size: usize,
    trailer: TrailerSize,
    rng: Rng,
    blocks: u64,
}

impl FelixGenerator {
    /// A generator at L1ID 0; fails on an empty E-link list or an invalid block size.
    pub fn new(config: &FelixConfig) -> Result<FelixGenerator, GeneratorError> {
        if config.elinks.is_empty() {
            return Err(GeneratorError::NoElinks);
        }
        if !is_valid_block_size(config.block_size) {
            return Err(FelixError::BlockSize {
                len: config.block_size,
            }
            .into());
        }
        let lanes: Vec<Lane> = config
            .elinks
            .iter()
            .map(|&e| Lane {
                elink: e & MAX_ELINK,
                l1id: L1idCounter::new(config.l1id_wrap),
                sequence: 0,
                packet: None,
                done: 0,
            })
            .collect();
        let scan = lanes.len() <= SCAN_LANES;
        Ok(FelixGenerator {
            order: if scan {
                BinaryHeap::new()
            } else {
                (0..lanes.len()).map(|i| Reverse((0, i))).collect()
            },
            progress: if scan {
                vec![0; lanes.len()]
            } else {
                Vec::new()
            },
            lanes,
            payload_words: config.payload_words.clamp(MAX_PAYLOAD_WORDS),
            block_size: config.block_size,
            trailer: config.trailer,
            rng: Rng::new(config.seed),
            blocks: 0,
        })
    }

    /// Starts the generator `events` events further on (a readout node rejoining a running
    /// run: its first L1ID is the extended L1ID of event `events`, not 0). Before the first
    /// block only: a lane in the middle of a packet would split it between two L1IDs.
    ///
    /// # Panics
    ///
    /// After a block was written.
    pub fn skip(&mut self, events: u64) {
        assert!(
            self.blocks == 0,
            "FelixGenerator::skip after {} blocks",
            self.blocks
        );
        for lane in &mut self.lanes {
            lane.l1id.skip(events);
        }
    }

    /// L1IDs generated so far, counted from event 0 (those [`FelixGenerator::skip`]ped
    /// included): every E-link has written its whole packet of each (some
    /// E-links may be up to a block's worth of L1IDs further).
    pub fn l1ids(&self) -> u64 {
        self.lanes
            .iter()
            .map(|l| l.l1id.events())
            .min()
            .unwrap_or(0)
    }

    /// Blocks written into buffers so far.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The block size in bytes.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The E-link that gets the next block: the fewest packets finished, then the lowest index.
    #[inline]
    fn next_lane(&mut self) -> Option<usize> {
        if self.progress.is_empty() {
            return self.order.pop().map(|Reverse((_, i))| i);
        }
        let mut best = 0;
        for (i, &p) in self.progress.iter().enumerate().skip(1) {
            if p < self.progress[best] {
                best = i;
            }
        }
        Some(best)
    }

    /// E-link `i` has written a block and finished `events` packets in all.
    #[inline]
    fn wrote(&mut self, i: usize, events: u64) {
        match self.progress.get_mut(i) {
            Some(p) => *p = events,
            None => self.order.push(Reverse((events, i))),
        }
    }
}

impl Generator for FelixGenerator {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let bs = self.block_size;
        let mut fill = Fill::default();
        for block in buf.chunks_exact_mut(bs) {
            if fill.units >= max_units {
                break;
            }
            let Some(i) = self.next_lane() else {
                break;
            };
            let lane = &mut self.lanes[i];
            lane.write_block(block, self.trailer, self.payload_words, &mut self.rng);
            let events = lane.l1id.events();
            self.wrote(i, events);
            fill.bytes += bs;
            fill.units += 1;
        }
        self.blocks += fill.units;
        fill
    }
}

#[cfg(test)]
mod tests {
    use rodeo_format::felix::{check_packet, Reassembler};

    use super::*;

    #[test]
    fn blocks_reassemble_into_checked_packets() {
        let cfg = FelixConfig {
            elinks: vec![1, 0x41, 0x7FF],
            payload_words: WordRange::uniform(0, 600),
            ..FelixConfig::default()
        };
        let mut g = FelixGenerator::new(&cfg).unwrap();
        let mut r = Reassembler::default();
        let mut next = [0u32; 3];
        let mut buf = vec![0u8; 3 * 1024 + 100];
        for _ in 0..200 {
            let f = g.fill(&mut buf, u64::MAX);
            assert_eq!(f.bytes, 3 * 1024);
            for block in buf[..f.bytes].chunks_exact(1024) {
                r.push_block(block, |c| {
                    assert!(c.flags.is_empty());
                    let h = check_packet(c.elink, c.data).unwrap();
                    let i = cfg.elinks.iter().position(|&e| e == c.elink).unwrap();
                    assert_eq!(h.l1id, next[i]);
                    next[i] += 1;
                })
                .unwrap();
            }
        }
        assert!(next.iter().all(|&n| n > 50), "{next:?}");
        assert_eq!(g.blocks(), 600);
    }

    /// Each E-link's blocks are byte for byte what an `ElinkEncoder` makes of its packets
    /// (whole and split ones), and the E-links stay within a few L1IDs of each other.
    #[test]
    fn blocks_match_the_encoders() {
        use rodeo_format::felix::{encode_packet, ElinkEncoder};
        // 32-bit trailers take the word path, 16-bit ones the byte path (pieces at any byte).
        for (words, trailer) in [
            (62, TrailerSize::Bits32),
            (300, TrailerSize::Bits32),
            (61, TrailerSize::Bits16),
            (300, TrailerSize::Bits16),
        ] {
            let cfg = FelixConfig {
                elinks: vec![3, 0x41, 0x7FF],
                payload_words: WordRange::fixed(words),
                l1id_wrap: 40,
                trailer,
                ..FelixConfig::default()
            };
            let mut g = FelixGenerator::new(&cfg).unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
            for _ in 0..4 {
                let f = g.fill(&mut buf, u64::MAX);
                for block in buf[..f.bytes].chunks_exact(1024) {
                    let elink = u16::from_le_bytes([block[0], block[1]]) & 0x7FF;
                    let i = cfg.elinks.iter().position(|&e| e == elink).unwrap();
                    got[i].push(block.to_vec());
                }
                let lag = g.lanes.iter().map(|l| l.l1id.events()).max().unwrap() - g.l1ids();
                assert!(lag <= 6, "E-links {lag} L1IDs apart");
            }
            for (i, &elink) in cfg.elinks.iter().enumerate() {
                let mut enc = ElinkEncoder::new(elink, trailer, 1024).unwrap();
                let mut want = Vec::new();
                let mut l1id = L1idCounter::new(40);
                let mut packet = vec![0u8; packet_len(words)];
                while want.len() < got[i].len() {
                    let ext = l1id.extended();
                    let bcid = (ext.wrapping_mul(7) % 3564) as u16;
                    encode_packet(&mut packet, elink, ext, bcid, words).unwrap();
                    enc.push_chunk(&packet, |b| want.push(b.to_vec()));
                    l1id.advance();
                }
                want.truncate(got[i].len());
                assert!(got[i].len() > 40, "{}", got[i].len());
                assert!(got[i] == want, "E-link {elink:#x}, {words} words");
            }
        }
    }

    /// The scan of the E-links' progress (up to `SCAN_LANES` E-links) picks the same E-link
    /// for every block as the heap: the superpages are byte for byte the same.
    #[test]
    fn the_scan_and_the_heap_order_the_blocks_alike() {
        for n in [1u16, 3, 8, SCAN_LANES as u16] {
            let cfg = FelixConfig {
                elinks: (0..n).map(|e| e * 5).collect(),
                payload_words: WordRange::uniform(0, 700),
                ..FelixConfig::default()
            };
            let mut scan = FelixGenerator::new(&cfg).unwrap();
            assert!(!scan.progress.is_empty());
            let mut heap = scan.clone();
            heap.progress.clear();
            heap.order = (0..usize::from(n)).map(|i| Reverse((0, i))).collect();
            let (mut a, mut b) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
            for _ in 0..300 {
                assert_eq!(scan.fill(&mut a, u64::MAX), heap.fill(&mut b, u64::MAX));
                assert!(a == b, "{n} E-links");
            }
            assert_eq!(scan.l1ids(), heap.l1ids());
        }
        let many = FelixConfig {
            elinks: (0..=SCAN_LANES as u16).collect(),
            ..FelixConfig::default()
        };
        assert!(FelixGenerator::new(&many).unwrap().progress.is_empty());
    }

    #[test]
    fn rejects_bad_configurations() {
        let no_elinks = FelixConfig {
            elinks: Vec::new(),
            ..FelixConfig::default()
        };
        assert!(matches!(
            FelixGenerator::new(&no_elinks),
            Err(GeneratorError::NoElinks)
        ));
        let bad_block = FelixConfig {
            block_size: 1000,
            ..FelixConfig::default()
        };
        assert!(matches!(
            FelixGenerator::new(&bad_block),
            Err(GeneratorError::Felix(_))
        ));
    }

    #[test]
    fn max_units_is_respected() {
        let mut g = FelixGenerator::new(&FelixConfig::default()).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        assert_eq!(g.fill(&mut buf, 5).units, 5);
        assert_eq!(g.fill(&mut buf[..1000], 5).units, 0);
    }
}
