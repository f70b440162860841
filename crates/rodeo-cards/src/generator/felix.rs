//! FELIX mode: E-link packets packed into blocks, one unit per block.
//!
//! Per L1ID the generator writes one packet per E-link in the default packet format (extended
//! L1ID, BCID and payload length, then the `pattern` payload), generated piece by piece straight
//! into that E-link's [`ElinkEncoder`] block ([`write_packet_bytes`], no intermediate packet
//! buffer). Each encoder packs its packets into blocks (splitting a packet over blocks as FIRST/MIDDLE/LAST when needed) and hands
//! out a block the moment it is full, as a FELIX card does for a busy E-link.
//!
//! Blocks are the units: they go into the superpage whole. A block finished when the superpage
//! (or the unit budget) is full is kept in an overflow queue and written first into the next
//! superpage, so the stream of blocks per E-link is continuous across superpages and nothing is
//! ever split or dropped. The overflow queue is a reused byte buffer: no allocation per packet or
//! block once it has grown to its high-water mark (about one L1ID's worth of blocks).

use rodeo_format::felix::{
    packet_len, write_packet_bytes, ElinkEncoder, TrailerSize, DEFAULT_BLOCK_SIZE,
};

use super::{GeneratorError, L1idCounter, Rng, WordRange, DEFAULT_L1ID_WRAP};
use crate::dma::{Fill, Generator};

/// Largest payload of a default-format packet, in words (a 16-bit field).
const MAX_PAYLOAD_WORDS: u32 = 0xFFFF;

/// Configuration of a [`FelixGenerator`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FelixConfig {
    /// The E-link numbers (11 bits each), one packet per E-link per L1ID, in this order.
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

/// The FELIX-mode generator: blocks of E-link packets. See the module docs.
#[derive(Debug, Clone)]
pub struct FelixGenerator {
    encoders: Vec<ElinkEncoder>,
    payload_words: WordRange,
    block_size: usize,
    l1id: L1idCounter,
    rng: Rng,
    /// Finished blocks that did not fit the last superpage, from `overflow_head`.
    overflow: Vec<u8>,
    overflow_head: usize,
    blocks: u64,
}

impl FelixGenerator {
    /// A generator at L1ID 0; fails on an empty E-link list or an invalid block size.
    pub fn new(config: &FelixConfig) -> Result<FelixGenerator, GeneratorError> {
        if config.elinks.is_empty() {
            return Err(GeneratorError::NoElinks);
        }
        let encoders = config
            .elinks
            .iter()
            .map(|&e| ElinkEncoder::new(e, config.trailer, config.block_size))
            .collect::<Result<Vec<_>, _>>()?;
        let payload_words = config.payload_words.clamp(MAX_PAYLOAD_WORDS);
        Ok(FelixGenerator {
            encoders,
            payload_words,
            block_size: config.block_size,
            l1id: L1idCounter::new(config.l1id_wrap),
            rng: Rng::new(config.seed),
            overflow: Vec::new(),
            overflow_head: 0,
            blocks: 0,
        })
    }

    /// L1IDs generated so far (every E-link has its packet of each pushed into its encoder;
    /// the last ones may still wait in a partly filled block).
    pub fn l1ids(&self) -> u64 {
        self.l1id.events()
    }

    /// Blocks written into buffers so far.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The block size in bytes.
    pub fn block_size(&self) -> usize {
        self.block_size
    }
}

/// Where finished blocks go during one `fill`: the buffer while it has room (and the unit budget
/// allows), else the overflow queue.
struct Out<'a> {
    buf: &'a mut [u8],
    fill: Fill,
    max_units: u64,
    overflow: &'a mut Vec<u8>,
    overflow_head: &'a mut usize,
}

impl Out<'_> {
    fn room(&self, block: usize) -> bool {
        self.fill.units < self.max_units && self.buf.len() - self.fill.bytes >= block
    }

    fn put(&mut self, block: &[u8]) {
        if *self.overflow_head == self.overflow.len() && self.room(block.len()) {
            self.buf[self.fill.bytes..self.fill.bytes + block.len()].copy_from_slice(block);
            self.fill.bytes += block.len();
            self.fill.units += 1;
        } else {
            self.overflow.extend_from_slice(block);
        }
    }

    /// Moves queued blocks into the buffer while they fit; true when the queue is empty.
    fn drain(&mut self, block: usize) -> bool {
        while *self.overflow_head < self.overflow.len() && self.room(block) {
            let h = *self.overflow_head;
            self.buf[self.fill.bytes..self.fill.bytes + block]
                .copy_from_slice(&self.overflow[h..h + block]);
            self.fill.bytes += block;
            self.fill.units += 1;
            *self.overflow_head += block;
        }
        if *self.overflow_head == self.overflow.len() {
            self.overflow.clear();
            *self.overflow_head = 0;
            true
        } else {
            false
        }
    }
}

impl Generator for FelixGenerator {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let bs = self.block_size;
        let FelixGenerator {
            encoders,
            payload_words,
            l1id,
            rng,
            overflow,
            overflow_head,
            ..
        } = self;
        let mut out = Out {
            buf,
            fill: Fill::default(),
            max_units,
            overflow,
            overflow_head,
        };
        while out.drain(bs) && out.room(bs) {
            let ext = l1id.extended();
            let bcid = (ext.wrapping_mul(7) % 3564) as u16;
            for enc in encoders.iter_mut() {
                let words = payload_words.draw(rng);
                let elink = enc.elink();
                // The packet is generated straight into the E-link's block, piece by piece.
                enc.push_chunk_from(
                    packet_len(words),
                    |offset, dst| write_packet_bytes(dst, offset, elink, ext, bcid, words),
                    |block| out.put(block),
                );
            }
            l1id.advance();
        }
        let fill = out.fill;
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
