//! A builder's configuration: [`SwRodConfig`] as the caller gives it, and `Plan`, the same
//! checked and turned into what the receiving threads use (the E-link table, the L1ID cycle,
//! the block limits).

use std::time::Duration;

use rodeo_format::felix::DEFAULT_BLOCK_SIZE;
use rodeo_format::fragment::SourceId;

use crate::fragment::{HEADER_WORDS, PACKET_HEADER_WORDS};

/// Configuration of a [`FragmentBuilder`](crate::FragmentBuilder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwRodConfig {
    /// Source identifier of the built ROB fragments.
    pub source_id: SourceId,
    /// Run number (ROD header).
    pub run_number: u32,
    /// The E-links of each receiving thread (one entry per thread; disjoint). A fragment's data
    /// holds thread 0's E-links in this order, then thread 1's, and so on.
    pub thread_elinks: Vec<Vec<u16>>,
    /// FELIX block size in bytes.
    pub felix_block_bytes: usize,
    /// L1IDs in flight per thread and in the shared window (a power of two, at least half the
    /// FELIX block size).
    pub window: usize,
    /// A thread's oldest open L1ID is built incomplete after this long.
    pub timeout: Duration,
    /// The L1ID wraps at this value and the ECR byte increments (1..=2^24).
    pub l1id_wrap: u32,
    /// Extended L1ID of the run's first event.
    pub first_l1id: u32,
    /// Largest packet (bytes); longer ones are cut by the reassembler and flagged.
    pub max_packet_bytes: usize,
    /// Pin receiving thread `i` to CPU `cpus[i % cpus.len()]` (none when empty).
    pub cpus: Vec<usize>,
}

impl Default for SwRodConfig {
    fn default() -> SwRodConfig {
        SwRodConfig {
            source_id: SourceId(0x0071_0000),
            run_number: 0,
            thread_elinks: vec![(0..8).collect()],
            felix_block_bytes: DEFAULT_BLOCK_SIZE,
            window: 4096,
            timeout: Duration::from_millis(500),
            l1id_wrap: 1 << 24,
            first_l1id: 0,
            max_packet_bytes: 16 * 1024,
            cpus: Vec::new(),
        }
    }
}

impl SwRodConfig {
    /// Words every thread block reserves after its data for the trailer (status word, every
    /// E-link listed missing, ROD trailer).
    pub fn trailer_reserve_words(&self) -> usize {
        1 + self.thread_elinks.iter().map(Vec::len).sum::<usize>() + 3
    }

    /// The smallest pool chunk (thread block) for packets of `packet_bytes` on every E-link of
    /// the busiest thread, rounded up to a multiple of 64 bytes.
    pub fn block_bytes_for(&self, packet_bytes: usize) -> usize {
        let per_thread = self.thread_elinks.iter().map(Vec::len).max().unwrap_or(0);
        let words = HEADER_WORDS
            + per_thread * (PACKET_HEADER_WORDS + packet_bytes.div_ceil(4))
            + self.trailer_reserve_words();
        (words * 4).next_multiple_of(64)
    }
}

/// The configuration turned into what the threads use.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) thread_elinks: Vec<Vec<u16>>,
    /// E-link -> `thread << 16 | local index`, or `u32::MAX`.
    pub(crate) table: Box<[u32]>,
    pub(crate) wrap: u64,
    pub(crate) modulus: u64,
    pub(crate) window: u64,
    pub(crate) first_mod: u64,
    pub(crate) timeout_ns: u64,
    pub(crate) felix_block_bytes: usize,
    pub(crate) max_packet_bytes: usize,
    pub(crate) chunk_bytes: usize,
    pub(crate) data_limit_bytes: usize,
    pub(crate) total_elinks: usize,
    pub(crate) source_id: SourceId,
    pub(crate) run_number: u32,
}

impl Plan {
    #[inline]
    pub(crate) fn local_of(&self, elink: u16) -> Option<(usize, usize)> {
        let e = *self.table.get(usize::from(elink))?;
        (e != u32::MAX).then_some(((e >> 16) as usize, (e & 0xFFFF) as usize))
    }

    pub(crate) fn threads(&self) -> usize {
        self.thread_elinks.len()
    }

    pub(crate) fn extended_l1id(&self, seq: u64) -> u32 {
        let m = (self.first_mod + seq % self.modulus) % self.modulus;
        (((m / self.wrap) as u32 & 0xFF) << 24) | (m % self.wrap) as u32
    }
}
