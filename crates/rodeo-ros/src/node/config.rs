//! How a readout node is built ([`NodeConfig`]) and what feeds its channels ([`NodeInput`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::inputs::file::FileInput;
use crate::inputs::firmware::Payload;
use crate::inputs::network::NetworkInput;
use crate::inputs::replay::ReplayInput;
use crate::inputs::setup::ChannelSetup;
use crate::server::ServerConfig;

/// What feeds the node's channels.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeInput {
    /// Emulated S-LINK card threads writing framed fragments into superpages, split and checked
    /// into the store: the real data path. `rate_hz` limits fragments per second per channel.
    Dma {
        /// Fragments per second per channel at most (`None`: as fast as the store takes).
        rate_hz: Option<f64>,
    },
    /// Emulated S-LINK card threads writing framed fragments straight into the store's pages,
    /// checked and indexed where they lie, as a RobinNP stores them
    /// ([`crate::inputs::page_dma`]). Only for fragments whose whole units fill most of a page
    /// (`inputs::page_dma::fits`; else the node is not built). `rate_hz` as for `Dma`.
    DmaPages {
        /// Fragments per second per channel at most (`None`: as fast as the store takes).
        rate_hz: Option<f64>,
    },
    /// The inline generator writing fragments straight into store pages (no card threads).
    Firmware(Payload),
    /// One SW ROD for all channels (ROBs): per ROB a single-thread fragment builder
    /// ([`rodeo_swrod`]) fed by one emulated FELIX channel carrying `elinks` E-links (L1IDs
    /// from 0), the builders run by `threads` pooled builder threads, its fragments stored
    /// through [`crate::swrod::swrod_link`]. Each E-link's packet carries
    /// `fragment_words / elinks - 4` payload words (at least 1), so a fragment has about
    /// `fragment_words` data words. Threads and shutdown: [`crate::swrod`].
    SwRod {
        /// E-links per ROB (1..=2048).
        elinks: usize,
        /// Events per second per ROB at most, about (the card is paced in FELIX blocks;
        /// `None`: as fast as the store takes).
        rate_hz: Option<f64>,
        /// Builder threads serving all ROBs (0: one per core, [`rodeo_swrod::BuilderPool::default_threads`]).
        threads: usize,
    },
    /// Per channel an emulated S-LINK card replaying the ROD fragments of raw-data files
    /// ([`rodeo_cards::replay::ReplayGenerator`]): the ROBs of each event go to the channel with
    /// their source id (after [`ReplayInput::source_map`]), framed, through superpages and the
    /// S-LINK checks into the store, as [`NodeInput::Dma`] does with emulated fragments. The
    /// files are loaded when the node is built; ROBs of no channel of this node are not
    /// replayed by it. Keeping the L1IDs replays the events in L1ID order (link order).
    Replay(ReplayInput),
    /// Per channel a network receiver of S-LINK fragments (UDP datagrams or TCP records, the
    /// channels of `rodeo cards --listen`), read through the S-LINK checks as [`NodeInput::Dma`]
    /// reads its emulated cards ([`crate::inputs::network`]).
    Network(NetworkInput),
    /// Per channel an S-LINK link capture file played once or looping (the channels of
    /// `rodeo cards --play`), read through the S-LINK checks ([`mod@crate::inputs::file`]).
    Files(FileInput),
}

/// The default of [`NodeConfig::input_silence`].
pub const DEFAULT_INPUT_SILENCE: Duration = Duration::from_secs(10);

/// How a readout node is built.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// ROB channels.
    pub channels: usize,
    /// Data words per ROD fragment.
    pub fragment_words: u32,
    /// Source (ROB) id of channel 0; channel i has this + i.
    pub base_source_id: u32,
    /// Store pages per channel.
    pub pages_per_channel: usize,
    /// Store page size in bytes.
    pub page_bytes: usize,
    /// The input.
    pub input: NodeInput,
    /// L1ID wrap of the emulated inputs.
    pub l1id_wrap: u32,
    /// Request descriptors.
    pub descriptors: usize,
    /// How long a request waits for missing fragments.
    pub pending_timeout: Duration,
    /// File receiving unreadable fragments (rate-limited).
    pub error_file: Option<PathBuf>,
    /// Pin the core thread to this CPU (`None`: the kernel places it).
    pub core_cpu: Option<usize>,
    /// Largest incoming message accepted, in bytes (`None`: derived from the protocol, see
    /// [`crate::server::default_max_message_bytes`]).
    pub max_message_bytes: Option<usize>,
    /// The event the emulated S-LINK inputs (`NodeInput::Dma`) start at (0: L1ID 0). A node
    /// restarted into a running run starts at the run's L1 accepts so far, so it rejoins at
    /// the current L1ID instead of filling its store with events long cleared.
    pub first_event: u64,
    /// ZeroMQ high-water mark of the request server (default
    /// [`crate::server::DEFAULT_HIGH_WATER_MARK`]; `[ros] high_water_mark`).
    pub high_water_mark: u32,
    /// An input silent (or waiting for its first data) longer than this is lost, and a problem
    /// of the run ([`crate::inputs::watch`]; `[ros] input_silence_seconds`; `None`: never).
    pub input_silence: Option<Duration>,
}

impl Default for NodeConfig {
    fn default() -> NodeConfig {
        NodeConfig {
            channels: 4,
            fragment_words: 400,
            base_source_id: 0x0051_0000,
            pages_per_channel: 1024,
            page_bytes: 4096,
            input: NodeInput::Dma { rate_hz: None },
            l1id_wrap: 1 << 24,
            descriptors: 1024,
            pending_timeout: Duration::from_millis(200),
            error_file: None,
            core_cpu: None,
            max_message_bytes: None,
            first_event: 0,
            high_water_mark: crate::server::DEFAULT_HIGH_WATER_MARK,
            input_silence: Some(DEFAULT_INPUT_SILENCE),
        }
    }
}

impl NodeConfig {
    /// The node's ROB ids.
    pub fn robs(&self) -> Vec<u32> {
        (0..self.channels as u32)
            .map(|c| self.base_source_id + c)
            .collect()
    }
}

impl NodeConfig {
    /// The part of this configuration every input is built from.
    pub(crate) fn channel_setup(&self) -> ChannelSetup<'_> {
        ChannelSetup {
            channels: self.channels,
            fragment_words: self.fragment_words,
            base_source_id: self.base_source_id,
            l1id_wrap: self.l1id_wrap,
            first_event: self.first_event,
            error_file: self.error_file.as_deref(),
            card_cpu: self.core_cpu,
            front: None,
        }
    }
}

/// The request server's configuration for a node built from `config`, serving on `endpoint`.
pub(super) fn server_config(
    config: &NodeConfig,
    endpoint: &str,
    run_front: Option<crate::inputs::follow::RunFront>,
) -> ServerConfig {
    ServerConfig {
        endpoint: endpoint.to_string(),
        descriptors: config.descriptors,
        pending_timeout: config.pending_timeout,
        core_cpu: config.core_cpu,
        max_message_bytes: config.max_message_bytes,
        rejoin_from: (config.first_event > 0).then(|| {
            rodeo_format::l1id::L1idCounter::expected(config.l1id_wrap, config.first_event)
        }),
        high_water_mark: config.high_water_mark,
        run_front,
        ..ServerConfig::default()
    }
}
