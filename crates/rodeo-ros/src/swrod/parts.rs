//! A node's SW ROD input built but not running ([`SwRodParts::build`]): per ROB an emulated
//! FELIX card (lazy: written by the builder thread that reads it), the builder's configuration
//! and the sink of its link; one block pool for every builder; the builder pool; and the links'
//! core-thread ends as one [`SwRodInputs`]. [`super::feed`] starts it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig, Fill, Generator};
use rodeo_cards::generator::{FelixConfig, FelixGenerator, WordRange};
use rodeo_format::felix::{packet_len, BLOCK_HEADER_BYTES, DEFAULT_BLOCK_SIZE};
use rodeo_format::fragment::SourceId;
use rodeo_format::l1id::L1idCounter;
use rodeo_memory::{
    ChunkPool, PoolConfig, RegionOptions, Superpage, SuperpagePool, SuperpagePoolConfig,
};
use rodeo_swrod::{BuilderPool, DefaultFormat, FragmentBuilder, SwRodConfig};

use super::link::{swrod_link, SwRodInputs};
use super::sink::StoreSink;
use crate::inputs::setup::ChannelSetup;
use crate::node::error::NodeError;

/// Rate of FELIX blocks for about `events_per_s` events of `elinks` packets of
/// `payload_words` words each (a 32-bit subchunk trailer per packet).
fn blocks_per_s(events_per_s: f64, elinks: usize, payload_words: u32) -> f64 {
    let per_event = elinks as f64 * (packet_len(payload_words) + 4) as f64;
    events_per_s * per_event / (DEFAULT_BLOCK_SIZE - BLOCK_HEADER_BYTES) as f64
}

/// A generator that reports itself finished once `finish` is set: its card hands over its
/// last superpage and takes its link down, so the reader ends by itself.
struct Finishing<G> {
    generator: G,
    finish: Arc<AtomicBool>,
}

impl<G: Generator> Generator for Finishing<G> {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        self.generator.fill(buf, max_units)
    }

    fn is_finished(&self) -> bool {
        self.finish.load(Ordering::Acquire) || self.generator.is_finished()
    }
}

/// One ROB's builder before it runs.
pub(super) struct SwRodRob {
    pub(super) config: SwRodConfig,
    pub(super) card: EmulatedChannel<Superpage>,
    pub(super) sink: StoreSink,
}

/// The SW ROD input's threads and memory, built but not running.
pub(crate) struct SwRodParts {
    pub(super) robs: Vec<SwRodRob>,
    /// The block pool every ROB's builder draws from.
    pub(super) pools: Vec<ChunkPool>,
    pub(super) pool: BuilderPool,
    /// Tells the cards' generators to finish.
    pub(super) finish: Arc<AtomicBool>,
}

/// Superpages per FELIX channel (its queues are as deep) and their size: small, so that a
/// paced card hands over its events within milliseconds. The channels are lazy (filled by the
/// builder thread that pops one), so two are enough: the builder reads one while the other
/// waits, and a ROB's superpages stay in its thread's cache.
const SWROD_SUPERPAGES: usize = 2;
const SWROD_SUPERPAGE_BYTES: usize = 16 * 1024;
/// Superpage size of an unpaced SW ROD input: larger, so that the cards and builders pay their
/// per-superpage work (queues, timeouts, counters) over more events.
const SWROD_UNPACED_SUPERPAGE_BYTES: usize = 64 * 1024;

impl SwRodParts {
    /// The cards (started: they fill their superpages and stall until the builders read),
    /// the block pools, the links and the core thread's input.
    pub(crate) fn build(
        config: &ChannelSetup<'_>,
        elinks: usize,
        rate_hz: Option<f64>,
        threads: usize,
    ) -> Result<(SwRodParts, SwRodInputs, SuperpagePool), NodeError> {
        if !(1..=2048).contains(&elinks) {
            return Err(NodeError::Config(format!(
                "{elinks} E-links per ROB: 1..=2048 needed"
            )));
        }
        // Each E-link's packet carries the fragment's share less its 4 words of overhead.
        let share = config.fragment_words as usize / elinks;
        if !(5..=0xFFFF + 4).contains(&share) {
            return Err(NodeError::Config(format!(
                "{} fragment words over {elinks} E-links: {share} per E-link, 5..=65539 needed \
                 (a packet's payload of 1..=65535 words and 4 words around it)",
                config.fragment_words
            )));
        }
        let payload_words = (share - 4) as u32;
        // A packet longer than the builder's largest is cut, and its fragment never completes:
        // refused here rather than run with every event lacking this node's fragments.
        let max_packet = SwRodConfig::default().max_packet_bytes;
        if packet_len(payload_words) > max_packet {
            return Err(NodeError::Config(format!(
                "{} fragment words over {elinks} E-links: packets of {} bytes, beyond the \
                 fragment builder's largest packet of {max_packet} bytes (raise the E-links or \
                 lower the fragment words)",
                config.fragment_words,
                packet_len(payload_words)
            )));
        }
        let sp = SuperpagePool::new(SuperpagePoolConfig {
            superpage_bytes: if rate_hz.is_some() {
                SWROD_SUPERPAGE_BYTES
            } else {
                SWROD_UNPACED_SUPERPAGE_BYTES
            },
            superpages: config.channels * SWROD_SUPERPAGES,
            region: RegionOptions::default(),
        })?;
        let finish = Arc::new(AtomicBool::new(false));
        let elink_ids: Vec<u16> = (0..elinks as u16).collect();
        let configs: Vec<SwRodConfig> = (0..config.channels)
            .map(|c| SwRodConfig {
                source_id: SourceId(config.base_source_id + c as u32),
                thread_elinks: vec![elink_ids.clone()],
                // The smallest window for 1 KiB blocks: the link holds twice as many fragments.
                window: DEFAULT_BLOCK_SIZE / 2,
                // No packet is lost in emulation: a long timeout only matters at very low
                // rates, where a block takes longer than this to fill.
                timeout: Duration::from_secs(5),
                l1id_wrap: config.l1id_wrap,
                // A node restarted into a running run starts where the controller said, as
                // the S-LINK inputs do (`ChannelSetup::first_event`): at event 0 every
                // fragment would be of an event long cleared, and one beyond the builder's
                // window move (2^20 events) would be dropped as a damaged L1ID.
                first_l1id: L1idCounter::expected(config.l1id_wrap, config.first_event),
                ..SwRodConfig::default()
            })
            .collect();
        let Some(first) = configs.first() else {
            return Err(NodeError::Config("a SW ROD input without a channel".into()));
        };
        // One block pool for every ROB: each ROB's window of blocks twice over.
        let chunk = first.block_bytes_for(packet_len(payload_words));
        let pools = vec![ChunkPool::new(PoolConfig {
            chunk_bytes: chunk,
            chunks_per_region: 2 * first.window * config.channels,
            max_regions: 1,
            initial_regions: 1,
            region: RegionOptions::default(),
        })?];
        let mut generators = Vec::with_capacity(config.channels);
        let mut robs = Vec::with_capacity(config.channels);
        let mut inputs = Vec::with_capacity(config.channels);
        for (c, sw) in configs.iter().enumerate() {
            // Checks the configuration now, so that the builder thread cannot fail on it.
            FragmentBuilder::new(sw, &pools, DefaultFormat::default())?;
            let mut generator = FelixGenerator::new(&FelixConfig {
                elinks: elink_ids.clone(),
                payload_words: WordRange::fixed(payload_words),
                l1id_wrap: config.l1id_wrap,
                ..FelixConfig::default()
            })
            .map_err(|e| NodeError::Config(format!("FELIX generator: {e}")))?;
            generator.skip(config.first_event);
            generators.push(Finishing {
                generator,
                finish: Arc::clone(&finish),
            });
            let words = elinks * (payload_words as usize + 4) + 32;
            let (sink, input) = swrod_link(c, sw, 1, words);
            inputs.push((sw.clone(), sink, input));
        }
        let card_config = EmulatedConfig {
            queue_depth: SWROD_SUPERPAGES,
            max_units_per_s: rate_hz.map(|r| blocks_per_s(r, elinks, payload_words)),
            ..EmulatedConfig::default()
        };
        // Lazy channels: the builder thread that reads a ROB writes its next superpage when
        // it finds none ready (no card thread; see rodeo_cards::dma, "Lazy channels").
        let cards: Vec<EmulatedChannel<Superpage>> = generators
            .into_iter()
            .map(|g| EmulatedChannel::start_lazy_untimed(card_config, g))
            .collect();
        let mut store_inputs = Vec::with_capacity(config.channels);
        for (card, (sw, sink, input)) in cards.into_iter().zip(inputs) {
            for _ in 0..SWROD_SUPERPAGES {
                let s = sp
                    .alloc()
                    .map_err(|e| NodeError::Config(format!("superpage pool too small: {e}")))?;
                if card.push_superpage(s).is_err() {
                    return Err(NodeError::Config(
                        "transfer queue smaller than its depth".into(),
                    ));
                }
            }
            store_inputs.push(input);
            robs.push(SwRodRob {
                config: sw,
                card,
                sink,
            });
        }
        Ok((
            SwRodParts {
                robs,
                pools,
                pool: BuilderPool::new(threads, Vec::new()),
                finish,
            },
            SwRodInputs::new(store_inputs),
            sp,
        ))
    }
}
