//! A readout node (ROS) assembled from its parts: page pool, event store, input, request server.
//!
//! [`NodeConfig`] says how many ROB channels, what feeds them (emulated S-LINK cards through
//! DMA superpages, raw-data files replayed through the same cards, SW ROD fragment builders, or
//! the inline firmware-style generator) and how the store and server are
//! sized; [`ReadoutNode::start`] builds everything, warms the memory, binds the request
//! endpoint and starts the core thread. [`ReadoutNode::start_direct`] builds the same node
//! answering one in-process client over the direct link (no ZeroMQ) instead. `rodeo ros`, the ROSTester's in-process node and the
//! embedded partition all start nodes this way.
//!
//! # The SW ROD input
//!
//! With [`NodeInput::SwRod`] the node runs one SW ROD serving all its ROBs: per ROB an emulated
//! FELIX channel (12 channels to a card, one DMA-engine thread per card) and a single-thread
//! fragment builder, all the builders on a fixed [`BuilderPool`] of builder threads (`threads`,
//! default one per core; ROB `r` on pool thread `r % threads`, so a ROB's fragment completes
//! where its packets land) drawing their blocks from one shared block pool, and one thread
//! (`swrod`) that runs the pool and publishes the builders' counters every 20 ms for
//! [`ReadoutNode::swrod_stats`]. Each builder hands its fragments to the core thread through
//! its ROB's [`swrod_link`] (the per-ROB reorder window; back-pressure: a full store holds the
//! builder, which stops reading its card, which stalls).
//!
//! Shutdown ([`ReadoutNode::stop`] or drop) goes producers first, so nothing waits on a thread
//! already gone: the cards' generators are told to finish (each card hands over its last
//! superpage and reports its link down); the builders read what is left and end on their own
//! while the core thread still stores their fragments. If they stop making progress for
//! 100 ms (a full store nobody clears) or 2 s pass, the links are abandoned
//! ([`StoreSink::abandon`]: a waiting sink drops its fragment, counted) and the builders
//! stopped; the builder thread is joined (and with it the card threads); then the core thread
//! is stopped (pending requests answered), which drops its input and counts what it still
//! held.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rodeo_format::felix::{packet_len, BLOCK_HEADER_BYTES, DEFAULT_BLOCK_SIZE};
use rodeo_format::fragment::SourceId;
use rodeo_format::slink::SlinkCheckConfig;
use rodeo_memory::{
    ChunkPool, PagePool, PagePoolConfig, PoolConfig, RegionOptions, Superpage, SuperpagePool,
    SuperpagePoolConfig,
};
use rodeo_transport::socket::Transport;

use crate::links::{
    file_sources, net_totals, network_sources, start_links, FileInput, NetTotals, NetworkInput,
    ProgressInput, ReadoutProgress,
};
use crate::server::{
    swrod_link, DirectClient, DmaInput, FirmwareInput, Input, Payload, RequestServer, ServerConfig,
    ServerCounters, Stopped, StoreSink, SwRodInputCounters, SwRodInputs,
};
use crate::store::slink::ErrorDump;
use crate::store::{EventStore, StoreConfig};
use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig, Fill, Generator};
use rodeo_cards::generator::{FelixConfig, FelixGenerator, SlinkConfig, SlinkGenerator, WordRange};
use rodeo_cards::replay::ReplayGenerator;
use rodeo_files::replay::{L1idMode, ReplayError, ReplayEvents};
use rodeo_swrod::{
    BuilderPool, DefaultFormat, FragmentBuilder, RobRun, SwRodConfig, SwRodCounters, SwRodError,
};

/// Raw-data files replayed through a node's channels ([`NodeInput::Replay`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReplayInput {
    /// The files (rodeo's container or EventStorage v2-v6), replayed in this order.
    pub files: Vec<PathBuf>,
    /// Fragments per second per channel at most (`None`: as fast as the store takes).
    pub rate_hz: Option<f64>,
    /// Start again after the last event.
    pub looping: bool,
    /// L1IDs kept or renumbered from 0.
    pub l1id: L1idMode,
    /// Source ids renamed before they pick their channel: (id in the file, channel's id).
    pub source_map: Vec<(u32, u32)>,
}

/// What feeds the node's channels.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeInput {
    /// Emulated S-LINK card threads writing framed fragments into superpages, split and checked
    /// into the store: the real data path. `rate_hz` limits fragments per second per channel.
    Dma {
        /// Fragments per second per channel at most (`None`: as fast as the store takes).
        rate_hz: Option<f64>,
    },
    /// The inline generator writing fragments straight into store pages (no card threads).
    Firmware(Payload),
    /// One SW ROD for all channels (ROBs): per ROB a single-thread fragment builder
    /// ([`rodeo_swrod`]) fed by one emulated FELIX channel carrying `elinks` E-links (L1IDs
    /// from 0), the builders run by `threads` pooled builder threads, its fragments stored
    /// through [`swrod_link`]. Each E-link's packet carries
    /// `fragment_words / elinks - 4` payload words (at least 1), so a fragment has about
    /// `fragment_words` data words. Threads and shutdown: the module docs.
    SwRod {
        /// E-links per ROB (1..=2048).
        elinks: usize,
        /// Events per second per ROB at most, about (the card is paced in FELIX blocks;
        /// `None`: as fast as the store takes).
        rate_hz: Option<f64>,
        /// Builder threads serving all ROBs (0: one per core, [`BuilderPool::default_threads`]).
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
    /// reads its emulated cards ([`crate::links`]).
    Network(NetworkInput),
    /// Per channel an S-LINK link capture file played once or looping (the channels of
    /// `rodeo cards --play`), read through the S-LINK checks ([`crate::links`]).
    Files(FileInput),
}

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

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The configuration is unusable.
    #[error("readout node: {0}")]
    Config(String),
    /// Memory could not be mapped.
    #[error("readout node memory: {0}")]
    Memory(#[from] rodeo_memory::Error),
    /// The store rejected its configuration.
    #[error("readout node store: {0}")]
    Store(#[from] crate::store::StoreError),
    /// The server could not start.
    #[error("readout node server: {0}")]
    Server(#[from] crate::server::ServerError),
    /// A fragment builder rejected its configuration.
    #[error("readout node fragment builder: {0}")]
    SwRod(#[from] SwRodError),
    /// The replay files could not be loaded.
    #[error("readout node replay: {0}")]
    Replay(#[from] ReplayError),
    /// A card thread or the error file could not be set up.
    #[error("readout node: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// A running readout node and the memory it holds.
pub struct ReadoutNode {
    /// Declared before the server: dropped (stopped) first, see the module docs.
    swrod: Option<SwRodFeed>,
    server: RequestServer,
    progress: Arc<ReadoutProgress>,
    net: Vec<Arc<rodeo_cards::net::NetCounters>>,
    robs: Vec<u32>,
    _pool: PagePool,
    _superpages: Option<SuperpagePool>,
}

impl std::fmt::Debug for ReadoutNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadoutNode")
            .field("endpoint", &self.server.endpoint())
            .field("robs", &self.robs.len())
            .finish()
    }
}

/// The memory a readout node claims before it is started: its page pool, allocated and warmed
/// (every page written once). What a node's CONFIGURED state promises; a cheap handle, kept
/// across starts (a stopped node's store gives every page back when it is dropped).
#[derive(Debug, Clone)]
pub struct NodeMemory {
    pool: PagePool,
}

impl NodeMemory {
    /// Allocates and warms the page pool `config` needs.
    pub fn allocate(config: &NodeConfig) -> Result<NodeMemory, NodeError> {
        if config.channels == 0 {
            return Err(NodeError::Config(
                "a node needs at least one channel".into(),
            ));
        }
        let pool = PagePool::new(PagePoolConfig {
            page_bytes: config.page_bytes,
            pages: config.channels * config.pages_per_channel,
            region: RegionOptions {
                huge_pages: rodeo_memory::HugePages::Transparent,
                ..RegionOptions::default()
            },
        })?;
        Ok(NodeMemory { pool })
    }

    /// The page pool (its stats are the buffer occupancy).
    pub fn page_pool(&self) -> &PagePool {
        &self.pool
    }
}

impl ReadoutNode {
    /// Builds the node and starts serving on `endpoint`.
    pub fn start(
        transport: &Transport,
        config: &NodeConfig,
        endpoint: &str,
    ) -> Result<ReadoutNode, NodeError> {
        Self::start_in(NodeMemory::allocate(config)?, transport, config, endpoint)
    }

    /// Builds the node in `memory` (from [`NodeMemory::allocate`] with the same `config`) and
    /// starts serving on `endpoint`.
    pub fn start_in(
        memory: NodeMemory,
        transport: &Transport,
        config: &NodeConfig,
        endpoint: &str,
    ) -> Result<ReadoutNode, NodeError> {
        let (memory, store, input) = Parts::build(memory, config)?.split();
        let server =
            RequestServer::start(transport, &server_config(config, endpoint), store, input)?;
        memory.node(server, config)
    }

    /// Builds the node and starts serving the one client returned, over the direct in-process
    /// link ([`crate::server::direct`]): the same core thread, without ZeroMQ.
    pub fn start_direct(config: &NodeConfig) -> Result<(ReadoutNode, DirectClient), NodeError> {
        let (memory, store, input) = Parts::build(NodeMemory::allocate(config)?, config)?.split();
        let (server, client) =
            RequestServer::start_direct(&server_config(config, "direct"), store, input)?;
        Ok((memory.node(server, config)?, client))
    }
}

fn server_config(config: &NodeConfig, endpoint: &str) -> ServerConfig {
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
        ..ServerConfig::default()
    }
}

/// A node's parts before its server starts.
struct Parts {
    pool: PagePool,
    superpages: Option<SuperpagePool>,
    store: EventStore,
    input: Box<dyn Input>,
    swrod: Option<SwRodParts>,
    net: Vec<Arc<rodeo_cards::net::NetCounters>>,
    l1id_wrap: u32,
}

/// The memory (and the SW ROD builders, not yet running) a running node keeps.
struct Memory {
    pool: PagePool,
    superpages: Option<SuperpagePool>,
    swrod: Option<SwRodParts>,
    progress: Arc<ReadoutProgress>,
    net: Vec<Arc<rodeo_cards::net::NetCounters>>,
}

impl Memory {
    /// The node around `server`; starts the SW ROD builders (the core thread already polls
    /// their links). If they cannot start, the server is stopped again.
    fn node(self, server: RequestServer, config: &NodeConfig) -> Result<ReadoutNode, NodeError> {
        let swrod = self.swrod.map(SwRodParts::start).transpose()?;
        Ok(ReadoutNode {
            swrod,
            server,
            progress: self.progress,
            net: self.net,
            robs: config.robs(),
            _pool: self.pool,
            _superpages: self.superpages,
        })
    }
}

impl Parts {
    fn split(self) -> (Memory, EventStore, Box<dyn Input>) {
        let input = ProgressInput::new(self.input, self.store.channels(), self.l1id_wrap);
        let memory = Memory {
            pool: self.pool,
            superpages: self.superpages,
            swrod: self.swrod,
            progress: input.progress(),
            net: self.net,
        };
        (memory, self.store, Box::new(input))
    }

    fn build(memory: NodeMemory, config: &NodeConfig) -> Result<Parts, NodeError> {
        let pool = memory.pool;
        let store = EventStore::new(
            &pool,
            &StoreConfig::with_channels(
                config.channels,
                config.base_source_id,
                config.pages_per_channel,
            ),
        )?;
        let mut superpages = None;
        let mut swrod = None;
        let mut net = Vec::new();
        let input: Box<dyn Input> = match &config.input {
            NodeInput::SwRod {
                elinks,
                rate_hz,
                threads,
            } => {
                let (parts, input, sp) = SwRodParts::build(config, *elinks, *rate_hz, *threads)?;
                swrod = Some(parts);
                superpages = Some(sp);
                Box::new(input)
            }
            NodeInput::Firmware(payload) => Box::new(FirmwareInput::new(
                &store,
                config.fragment_words as usize,
                config.l1id_wrap,
                *payload,
            )),
            NodeInput::Dma { rate_hz } => {
                let (input, sp) = dma_input(config, *rate_hz, 256 * 1024, |c| {
                    let mut g = SlinkGenerator::new(SlinkConfig {
                        source_id: config.base_source_id + c as u32,
                        data_words: WordRange::fixed(config.fragment_words),
                        l1id_wrap: config.l1id_wrap,
                        framing: true,
                        ..SlinkConfig::default()
                    });
                    g.skip(config.first_event);
                    g
                })?;
                superpages = Some(sp);
                input
            }
            NodeInput::Replay(r) => {
                let map = r.source_map.iter().copied().collect();
                let mut events = ReplayEvents::load(&r.files, &map)?;
                if r.l1id == L1idMode::Keep {
                    // In link order: the store takes a fragment older than the newest as lost.
                    events.sort_by_l1id();
                }
                let events = Arc::new(events);
                // A superpage holds the largest fragment with its framing words.
                let largest = 4 * (events.max_rod_words() + 2);
                let superpage_bytes = (256 * 1024).max(largest.next_power_of_two());
                let (input, sp) = dma_input(config, r.rate_hz, superpage_bytes, |c| {
                    ReplayGenerator::new(
                        Arc::clone(&events),
                        config.base_source_id + c as u32,
                        r.l1id,
                        r.looping,
                        config.l1id_wrap,
                    )
                })?;
                superpages = Some(sp);
                input
            }
            NodeInput::Network(n) => {
                if n.listen.len() != config.channels {
                    return Err(NodeError::Config(format!(
                        "{} network addresses for {} channels: one per channel (ROB)",
                        n.listen.len(),
                        config.channels
                    )));
                }
                let (input, sp, counters) =
                    link_input(config, network_sources(n).map_err(NodeError::Config)?)?;
                net = counters;
                superpages = Some(sp);
                input
            }
            NodeInput::Files(f) => {
                if f.files.len() != config.channels {
                    return Err(NodeError::Config(format!(
                        "{} link files for {} channels: one per channel (ROB)",
                        f.files.len(),
                        config.channels
                    )));
                }
                let (input, sp, _) = link_input(config, file_sources(f))?;
                superpages = Some(sp);
                input
            }
        };
        Ok(Parts {
            pool,
            superpages,
            store,
            input,
            swrod,
            net,
            l1id_wrap: config.l1id_wrap,
        })
    }
}

/// Superpages of a network or file channel: the largest network unit with its record, so any
/// fragment a sender may send fits one.
const LINK_SUPERPAGE_BYTES: usize = 128 * 1024;

/// Per channel a `rodeo cards` channel (network receiver or file player) with `depth`
/// superpages, read through the S-LINK checks the channels' links call for.
#[allow(clippy::type_complexity)]
fn link_input(
    config: &NodeConfig,
    sources: Vec<rodeo_cards::card::ChannelSource>,
) -> Result<
    (
        Box<dyn Input>,
        SuperpagePool,
        Vec<Arc<rodeo_cards::net::NetCounters>>,
    ),
    NodeError,
> {
    let depth = 8;
    let sp = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes: LINK_SUPERPAGE_BYTES,
        superpages: config.channels * depth,
        region: RegionOptions::default(),
    })?;
    let links = start_links("link", sources, depth, config.l1id_wrap).map_err(NodeError::Config)?;
    for ch in &links.channels {
        for _ in 0..depth {
            let s = sp
                .alloc()
                .map_err(|e| NodeError::Config(format!("superpage pool too small: {e}")))?;
            if ch.push_superpage(s).is_err() {
                return Err(NodeError::Config(
                    "transfer queue smaller than its depth".into(),
                ));
            }
        }
    }
    let dump = ErrorDump::new(error_file(config)?, 10);
    Ok((
        Box::new(DmaInput::new(links.channels, links.check, dump)),
        sp,
        links.net,
    ))
}

/// The error file of unreadable words, created if configured.
fn error_file(config: &NodeConfig) -> Result<Option<std::fs::File>, NodeError> {
    match &config.error_file {
        Some(p) => Ok(Some(std::fs::File::create(p).map_err(|source| {
            NodeError::Io {
                what: format!("creating error file {}", p.display()),
                source,
            }
        })?)),
        None => Ok(None),
    }
}

/// Channels per emulated card (one DMA-engine thread each), for S-LINK (a RobinNP's 12 links)
/// and FELIX inputs alike.
pub const CHANNELS_PER_CARD: usize = 12;

/// Per channel an emulated S-LINK link running `generator(channel)`, [`CHANNELS_PER_CARD`] to
/// a card (one engine thread), `depth` superpages of
/// `superpage_bytes` each, read through the S-LINK checks (framing on): the node's DMA input.
fn dma_input<G: Generator>(
    config: &NodeConfig,
    rate_hz: Option<f64>,
    superpage_bytes: usize,
    generator: impl Fn(usize) -> G,
) -> Result<(Box<dyn Input>, SuperpagePool), NodeError> {
    let depth = 8;
    let sp = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes,
        superpages: config.channels * depth,
        region: RegionOptions::default(),
    })?;
    // One engine thread per card of (at most) CHANNELS_PER_CARD channels, as a RobinNP
    // serves its links with its DMA engine; never a thread per channel.
    let mut chans = Vec::with_capacity(config.channels);
    let card_config = EmulatedConfig {
        queue_depth: depth,
        max_units_per_s: rate_hz,
        ..EmulatedConfig::default()
    };
    let channels: Vec<usize> = (0..config.channels).collect();
    for (k, group) in channels.chunks(CHANNELS_PER_CARD).enumerate() {
        let card = EmulatedChannel::start_card(
            &format!("slink{k}"),
            group.iter().map(|&c| (card_config, generator(c))).collect(),
        )
        .map_err(|source| NodeError::Io {
            what: format!("starting card thread slink{k}"),
            source,
        })?;
        for ch in card {
            for _ in 0..depth {
                let s = sp
                    .alloc()
                    .map_err(|e| NodeError::Config(format!("superpage pool too small: {e}")))?;
                if ch.push_superpage(s).is_err() {
                    return Err(NodeError::Config(
                        "transfer queue smaller than its depth".into(),
                    ));
                }
            }
            chans.push(ch);
        }
    }
    let file = error_file(config)?;
    let check = SlinkCheckConfig {
        framing: true,
        crc: false,
        l1id_wrap: config.l1id_wrap,
    };
    Ok((
        Box::new(DmaInput::new(chans, check, ErrorDump::new(file, 10))),
        sp,
    ))
}

impl ReadoutNode {
    /// The request endpoint actually bound.
    pub fn endpoint(&self) -> &str {
        self.server.endpoint()
    }

    /// The node's ROB ids.
    pub fn robs(&self) -> &[u32] {
        &self.robs
    }

    /// Live counters.
    pub fn stats(&self) -> ServerCounters {
        self.server.stats()
    }

    /// The request server's live counters, shared (for monitoring without the node).
    pub fn shared_stats(&self) -> std::sync::Arc<crate::server::ServerStats> {
        self.server.shared_stats()
    }

    /// Per-channel figures (fragments, held now, occupancy, errors by kind), shared, for
    /// monitoring without the node.
    pub fn channel_stats(&self) -> std::sync::Arc<crate::server::ChannelStats> {
        self.server.channel_stats()
    }

    /// Replies dropped per peer that did not read (shared, for monitoring without the node).
    pub fn peer_drops(&self) -> std::sync::Arc<crate::server::PeerDrops> {
        self.server.peer_drops()
    }

    /// The input's progress: L1IDs complete on every channel, and whether the input ended
    /// ([`crate::links`]); shared, for a data-driven L1 source.
    pub fn progress(&self) -> Arc<ReadoutProgress> {
        Arc::clone(&self.progress)
    }

    /// Totals of the network receivers ([`NodeInput::Network`]; zero for other inputs).
    pub fn net_totals(&self) -> NetTotals {
        net_totals(&self.net)
    }

    /// The node's page pool (a cheap shared handle; its stats are the buffer occupancy).
    pub fn page_pool(&self) -> PagePool {
        self._pool.clone()
    }

    /// Live counters of the SW ROD input (builders and links, summed over the ROBs; the
    /// builders' published every 20 ms); `None` for other inputs.
    pub fn swrod_stats(&self) -> Option<SwRodInputCounters> {
        self.swrod.as_ref().map(SwRodFeed::counters)
    }

    /// A shared handle reading the same live counters as [`ReadoutNode::swrod_stats`], for
    /// monitors that must not hold the node (the last values stay readable after the stop);
    /// `None` for other inputs.
    pub fn swrod_monitor(&self) -> Option<SwRodMonitor> {
        self.swrod.as_ref().map(|f| SwRodMonitor {
            live: Arc::clone(&f.live),
            sinks: f.sinks.clone(),
        })
    }

    /// Stops the node (pending requests answered first) and returns its final state. A SW ROD
    /// input's producers and builders are stopped before the core thread (module docs).
    pub fn stop(self) -> Stopped {
        let ReadoutNode {
            swrod,
            server,
            _pool,
            _superpages,
            ..
        } = self;
        let builders = swrod.map(|mut f| (f.shutdown(), f));
        let mut stopped = server.stop();
        if let Some(((builder, cards, error), feed)) = builders {
            // Read after the core thread dropped its input (what it still held is counted).
            stopped.swrod = Some(SwRodInputCounters {
                builder,
                link: link_counters(&feed.sinks),
                unread_blocks: cards.unread_blocks,
                unread_bytes: cards.unread_bytes,
                card_cpu_ns: cards.cpu_ns,
            });
            stopped.swrod_error = error;
        }
        stopped
    }
}

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
struct SwRodRob {
    config: SwRodConfig,
    card: EmulatedChannel<Superpage>,
    sink: StoreSink,
}

/// The SW ROD input's threads and memory, built but not running.
struct SwRodParts {
    robs: Vec<SwRodRob>,
    /// The block pool every ROB's builder draws from.
    pools: Vec<ChunkPool>,
    pool: BuilderPool,
    finish: Arc<AtomicBool>,
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
    fn build(
        config: &NodeConfig,
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
                first_l1id: 0,
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
            let generator = FelixGenerator::new(&FelixConfig {
                elinks: elink_ids.clone(),
                payload_words: WordRange::fixed(payload_words),
                l1id_wrap: config.l1id_wrap,
                ..FelixConfig::default()
            })
            .map_err(|e| NodeError::Config(format!("FELIX generator: {e}")))?;
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
            .map(|g| EmulatedChannel::start_lazy(card_config, g))
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

    /// Starts the `swrod` thread running the builder pool.
    fn start(self) -> Result<SwRodFeed, NodeError> {
        let live = Arc::new(Mutex::new(vec![SwRodCounters::default(); self.robs.len()]));
        let stop = Arc::new(AtomicBool::new(false));
        let sinks: Vec<StoreSink> = self.robs.iter().map(|r| r.sink.clone()).collect();
        let finish = Arc::clone(&self.finish);
        let (thread_live, thread_stop) = (Arc::clone(&live), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("swrod".into())
            .spawn(move || run_builders(self, &thread_live, &thread_stop))
            .map_err(|source| NodeError::Io {
                what: "starting the fragment builder thread".into(),
                source,
            })?;
        Ok(SwRodFeed {
            finish,
            stop,
            live,
            sinks,
            thread: Some(thread),
        })
    }
}

/// The cards when they stopped: what they had handed over and no builder read, and the CPU
/// time their writing took (the lazy channels write in the builder threads).
#[derive(Debug, Clone, Copy, Default)]
struct CardsAtStop {
    unread_blocks: u64,
    unread_bytes: u64,
    cpu_ns: u64,
}

/// The builders' result: their counters summed (or the first error), and what they left
/// unread in the cards' queues.
type BuildersResult = (Result<SwRodCounters, SwRodError>, CardsAtStop);

/// Runs every ROB's builder on the builder pool until all have returned, publishing their
/// counters into `live` every 20 ms; returns the final counters, summed, and counts what the
/// cards had handed over that no builder read (dropped at shutdown, never silently).
fn run_builders(
    parts: SwRodParts,
    live: &Mutex<Vec<SwRodCounters>>,
    stop: &AtomicBool,
) -> BuildersResult {
    let SwRodParts {
        mut robs,
        pools,
        pool,
        ..
    } = parts;
    let builders = match robs
        .iter()
        .map(|r| FragmentBuilder::new(&r.config, &pools, DefaultFormat::default()))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(b) => b,
        Err(e) => return (Err(e), cards_at_stop(&mut robs)),
    };
    let runs: Vec<RobRun<'_, '_, _, EmulatedChannel<Superpage>, StoreSink>> = builders
        .iter()
        .zip(&robs)
        .map(|(b, r)| RobRun {
            builder: b,
            channels: vec![&r.card],
            sink: &r.sink,
        })
        .collect();
    let results = std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("swrod-pool".into())
            .spawn_scoped(s, || pool.run(&runs, stop));
        let publish = || {
            let mut l = live.lock().unwrap_or_else(|e| e.into_inner());
            for (slot, b) in l.iter_mut().zip(&builders) {
                *slot = b.counters();
            }
        };
        while handle.as_ref().is_ok_and(|h| !h.is_finished()) {
            publish();
            std::thread::sleep(Duration::from_millis(20));
        }
        publish();
        match handle {
            Ok(h) => h.join().unwrap_or(Err(SwRodError::Panicked(0))),
            Err(e) => Err(SwRodError::Spawn(e)),
        }
    });
    let mut total = SwRodCounters::default();
    let mut first_error = None;
    match results {
        Ok(per_rob) => {
            for r in per_rob {
                match r {
                    Ok(c) => total.add(&c),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        Err(e) => first_error = Some(e),
    }
    // The cards (and their threads) go with `robs`, after the builders returned and what
    // they left in the cards' queues is counted.
    drop(runs);
    drop(builders);
    let left = cards_at_stop(&mut robs);
    drop(robs);
    let result = match first_error {
        Some(e) => Err(e),
        None => Ok(total),
    };
    (result, left)
}

/// Stops the cards, then empties their ready queues, counting the blocks and bytes no builder
/// read, and sums the CPU time the cards spent writing. Stopped first: a lazy card's pop would
/// otherwise write new superpages for the count.
fn cards_at_stop(robs: &mut [SwRodRob]) -> CardsAtStop {
    let mut u = CardsAtStop::default();
    for r in robs {
        r.card.stop();
        while let Some(f) = r.card.pop_superpage() {
            u.unread_blocks += f.units;
            u.unread_bytes += f.bytes_used as u64;
        }
        u.cpu_ns += r.card.card_cpu_ns();
    }
    u
}

/// A running SW ROD input: the `swrod` thread and what stops it (see the module docs).
struct SwRodFeed {
    /// Tells the cards' generators to finish.
    finish: Arc<AtomicBool>,
    /// The builders' stop flag.
    stop: Arc<AtomicBool>,
    /// The builders' counters, published by the `swrod` thread.
    live: Arc<Mutex<Vec<SwRodCounters>>>,
    /// Clones of the builders' sinks (the links' counters, and to abandon them).
    sinks: Vec<StoreSink>,
    thread: Option<JoinHandle<BuildersResult>>,
}

/// A cheap shared handle on a SW ROD input's live counters ([`ReadoutNode::swrod_monitor`]):
/// the builders' as last published by the `swrod` thread (every 20 ms) and the links' atomics.
/// Reading takes the publication lock for a copy (never on a hot path).
#[derive(Debug, Clone)]
pub struct SwRodMonitor {
    live: Arc<Mutex<Vec<SwRodCounters>>>,
    sinks: Vec<StoreSink>,
}

impl SwRodMonitor {
    /// The builders' and links' counters, summed over the ROBs (`unread_*` are zero: known
    /// only at the stop, in [`Stopped::swrod`]).
    pub fn counters(&self) -> SwRodInputCounters {
        swrod_counters(&self.live, &self.sinks)
    }
}

/// The links' counters, summed over the ROBs' sinks.
fn link_counters(sinks: &[StoreSink]) -> crate::server::SwRodLinkCounters {
    let mut total = crate::server::SwRodLinkCounters::default();
    for s in sinks {
        total.add(&s.counters());
    }
    total
}

fn swrod_counters(live: &Mutex<Vec<SwRodCounters>>, sinks: &[StoreSink]) -> SwRodInputCounters {
    let mut builder = SwRodCounters::default();
    for c in live.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        builder.add(c);
    }
    SwRodInputCounters {
        builder,
        link: link_counters(sinks),
        unread_blocks: 0,
        unread_bytes: 0,
        card_cpu_ns: 0,
    }
}

impl SwRodFeed {
    fn counters(&self) -> SwRodInputCounters {
        swrod_counters(&self.live, &self.sinks)
    }

    /// Stops producers, then builders (module docs); returns the builders' final counters,
    /// what the cards had handed over that no builder read, and the first error, if one failed
    /// (the counters are then the last published). Idempotent: once stopped, returns the last
    /// published counters, nothing unread and no error.
    fn shutdown(&mut self) -> (SwRodCounters, CardsAtStop, Option<String>) {
        let Some(thread) = self.thread.take() else {
            return (self.counters().builder, CardsAtStop::default(), None);
        };
        self.finish.store(true, Ordering::Release);
        // The builders drain their cards while the core thread stores, as long as they move.
        let deadline = Instant::now() + Duration::from_secs(2);
        let progress = |f: &SwRodFeed| {
            let c = f.counters();
            c.builder.superpages + c.link.fragments + c.link.dropped_no_consumer
        };
        let (mut last, mut since) = (progress(self), Instant::now());
        while !thread.is_finished()
            && Instant::now() < deadline
            && since.elapsed() < Duration::from_millis(100)
        {
            std::thread::sleep(Duration::from_millis(2));
            let now = progress(self);
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
        for s in &self.sinks {
            s.abandon();
        }
        self.stop.store(true, Ordering::Release);
        match thread.join() {
            Ok((Ok(c), cards)) => (c, cards, None),
            Ok((Err(e), cards)) => (self.counters().builder, cards, Some(e.to_string())),
            Err(_) => (
                self.counters().builder,
                CardsAtStop::default(),
                Some("the SW ROD builders' thread panicked".into()),
            ),
        }
    }
}

impl Drop for SwRodFeed {
    fn drop(&mut self) {
        self.shutdown();
    }
}
