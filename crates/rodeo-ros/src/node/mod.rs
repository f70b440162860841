//! A readout node (ROS) assembled from its parts: page pool, event store, input, request server.
//!
//! [`NodeConfig`] says how many ROB channels, what feeds them (emulated S-LINK cards through
//! DMA superpages, raw-data files replayed through the same cards, network receivers, link
//! capture files, SW ROD fragment builders, or the inline firmware-style generator) and how the
//! store and server are sized; [`ReadoutNode::start`] builds everything, warms the memory,
//! binds the request endpoint and starts the core thread. [`ReadoutNode::start_direct`] builds
//! the same node answering one in-process client over the direct link (no ZeroMQ) instead.
//! `rodeo ros`, the ROSTester's in-process node and the embedded partition all start nodes
//! this way.
//!
//! This module only selects, assembles and stops: each input builds itself beside its
//! [`crate::server::Input`] ([`crate::inputs`]; the SW ROD input in [`crate::swrod`]).
//!
//! - `config`: [`NodeConfig`], [`NodeInput`];
//! - `error`: [`NodeError`] (also the inputs' build error);
//! - this file: [`NodeMemory`], [`ReadoutNode`] (the parts built from the configuration,
//!   started in order, and stopped).
//!
//! # Shutdown
//!
//! [`ReadoutNode::stop`] (or drop) goes producers first, so nothing waits on a thread already
//! gone: a SW ROD input's cards and builders are stopped while the core thread still stores
//! their fragments (see [`crate::swrod`], "Shutdown"); then the core thread is stopped
//! (pending requests answered), which drops its input and counts what it still held.

pub mod config;
pub(crate) mod error;

use std::sync::Arc;

use rodeo_memory::{PagePool, PagePoolConfig, RegionOptions, SuperpagePool};
use rodeo_transport::socket::Transport;

use crate::inputs::follow::RunFront;
use crate::inputs::network::net_totals;
use crate::inputs::progress::ProgressInput;
use crate::inputs::setup::BuiltInput;
use crate::inputs::watch::LaneProbe;
use crate::inputs::{
    dma, file, network, page_dma, replay, FirmwareInput, InputWatch, NetTotals, ReadoutProgress,
};
use crate::server::{DirectClient, Input, RequestServer, ServerCounters, Stopped};
use crate::store::{EventStore, StoreConfig};
use crate::swrod::{SwRodFeed, SwRodInputCounters, SwRodParts};
use config::server_config;

pub use crate::inputs::replay::ReplayInput;
pub use crate::inputs::CHANNELS_PER_CARD;
pub use crate::swrod::SwRodMonitor;
pub use config::{NodeConfig, NodeInput, DEFAULT_INPUT_SILENCE};
pub use error::NodeError;

/// A running readout node and the memory it holds.
pub struct ReadoutNode {
    /// Declared before the server: dropped (stopped) first, see the module docs.
    swrod: Option<SwRodFeed>,
    server: RequestServer,
    progress: Arc<ReadoutProgress>,
    net: Vec<Arc<rodeo_cards::net::NetCounters>>,
    watch: InputWatch,
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
        let (memory, store, input, front) = Parts::build(memory, config)?.split();
        let server = RequestServer::start(
            transport,
            &server_config(config, endpoint, front),
            store,
            input,
        )?;
        memory.node(server, config)
    }

    /// Builds the node and starts serving the one client returned, over the direct in-process
    /// link ([`crate::server::direct`]): the same core thread, without ZeroMQ.
    pub fn start_direct(config: &NodeConfig) -> Result<(ReadoutNode, DirectClient), NodeError> {
        let (memory, store, input, front) =
            Parts::build(NodeMemory::allocate(config)?, config)?.split();
        let (server, client) =
            RequestServer::start_direct(&server_config(config, "direct", front), store, input)?;
        Ok((memory.node(server, config)?, client))
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
    watch: InputWatch,
    l1id_wrap: u32,
    /// A rejoined node's run front, shared by its inputs and its server (`inputs::follow`).
    front: Option<RunFront>,
}

/// The memory (and the SW ROD builders, not yet running) a running node keeps.
struct Memory {
    pool: PagePool,
    superpages: Option<SuperpagePool>,
    swrod: Option<SwRodParts>,
    progress: Arc<ReadoutProgress>,
    net: Vec<Arc<rodeo_cards::net::NetCounters>>,
    watch: InputWatch,
}

impl Memory {
    /// The node around `server`; starts the SW ROD builders (the core thread already polls
    /// their links). If they cannot start, the server is stopped again.
    fn node(self, server: RequestServer, config: &NodeConfig) -> Result<ReadoutNode, NodeError> {
        let swrod = self.swrod.map(SwRodParts::start).transpose()?;
        self.watch.set_store(server.channel_stats());
        Ok(ReadoutNode {
            swrod,
            server,
            progress: self.progress,
            net: self.net,
            watch: self.watch,
            robs: config.robs(),
            _pool: self.pool,
            _superpages: self.superpages,
        })
    }
}

impl Parts {
    fn split(self) -> (Memory, EventStore, Box<dyn Input>, Option<RunFront>) {
        let input = ProgressInput::new(self.input, self.store.channels(), self.l1id_wrap);
        let memory = Memory {
            pool: self.pool,
            superpages: self.superpages,
            swrod: self.swrod,
            progress: input.progress(),
            net: self.net,
            watch: self.watch,
        };
        (memory, self.store, Box::new(input), self.front)
    }

    /// The store in `memory`, and the input `config` selects, built by its own module.
    fn build(memory: NodeMemory, config: &NodeConfig) -> Result<Parts, NodeError> {
        let pool = memory.pool;
        let mut store = EventStore::new(
            &pool,
            &StoreConfig {
                l1id_wrap: config.l1id_wrap,
                first_event: config.first_event,
                ..StoreConfig::with_channels(
                    config.channels,
                    config.base_source_id,
                    config.pages_per_channel,
                )
            },
        )?;
        // A node restarted into a running run: its emulated inputs follow the run's clears.
        let front =
            (config.first_event > 0).then(|| RunFront::new(config.l1id_wrap, config.first_event));
        let mut setup = config.channel_setup();
        setup.front = front.as_ref();
        let mut swrod = None;
        let built = match &config.input {
            NodeInput::SwRod {
                elinks,
                rate_hz,
                threads,
            } => {
                let (parts, input, sp) = SwRodParts::build(&setup, *elinks, *rate_hz, *threads)?;
                swrod = Some(parts);
                BuiltInput {
                    input: Box::new(input),
                    superpages: Some(sp),
                    lanes: LaneProbe::store(config.channels, "emulated"),
                    errors: None,
                    net: Vec::new(),
                }
            }
            NodeInput::Firmware(payload) => BuiltInput {
                input: Box::new(FirmwareInput::new(
                    &store,
                    config.fragment_words as usize,
                    config.l1id_wrap,
                    *payload,
                )),
                superpages: None,
                lanes: LaneProbe::store(config.channels, "emulated"),
                errors: None,
                net: Vec::new(),
            },
            NodeInput::DmaPages { rate_hz } => {
                if !page_dma::fits(&setup, store.page_words()) {
                    return Err(NodeError::Config(format!(
                        "the page DMA input stores whole fragments only, and {} data words \
                         per fragment fill less than {}% of a store page of {} words: use \
                         `--input dma` (superpages, fragments packed and chained across \
                         pages), or another fragment or page size",
                        config.fragment_words,
                        100 * page_dma::MIN_PAGE_USE.0 / page_dma::MIN_PAGE_USE.1,
                        store.page_words()
                    )));
                }
                page_dma::build(&setup, store.pages_per_channel(), *rate_hz)?
            }
            NodeInput::Dma { rate_hz } => dma::build(&setup, *rate_hz)?,
            NodeInput::Replay(r) => replay::build(&setup, r)?,
            NodeInput::Network(n) => network::build(&setup, n)?,
            NodeInput::Files(f) => file::build(&setup, f)?,
        };
        // The emulated inputs produce ahead of the L1 (a real detector sends what it accepted):
        // their pages ahead of it count as lent, not as the store's fill (crate::store).
        store.set_runs_ahead(matches!(
            config.input,
            NodeInput::Dma { .. }
                | NodeInput::DmaPages { .. }
                | NodeInput::Firmware(_)
                | NodeInput::SwRod { .. }
                | NodeInput::Replay(_)
        ));
        let watch = InputWatch::new(
            config.robs(),
            built.lanes,
            built.errors,
            config.input_silence,
        );
        Ok(Parts {
            pool,
            superpages: built.superpages,
            store,
            input: built.input,
            swrod,
            net: built.net,
            watch,
            l1id_wrap: config.l1id_wrap,
            front,
        })
    }
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
    /// ([`crate::inputs::progress`]); shared, for a data-driven L1 source.
    pub fn progress(&self) -> Arc<ReadoutProgress> {
        Arc::clone(&self.progress)
    }

    /// Every channel's input as the outside sees it (state, counters, rate, problem): a
    /// cheap shared handle, readable after the node stopped ([`crate::inputs::watch`]).
    pub fn input_watch(&self) -> InputWatch {
        self.watch.clone()
    }

    /// Totals of the network receivers ([`NodeInput::Network`]; zero for other inputs).
    pub fn net_totals(&self) -> NetTotals {
        net_totals(&self.net)
    }

    /// The network receivers' counters (shared): read after [`ReadoutNode::stop`] they hold
    /// the receivers' last counts (a UDP receiver reads its kernel drops when it ends).
    pub fn net_counters(&self) -> Vec<Arc<rodeo_cards::net::NetCounters>> {
        self.net.clone()
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
        self.swrod.as_ref().map(SwRodFeed::monitor)
    }

    /// Stops the node (pending requests answered first) and returns its final state. A SW ROD
    /// input's producers and builders are stopped before the core thread (module docs).
    pub fn stop(self) -> Stopped {
        let ReadoutNode {
            swrod,
            server,
            watch,
            _pool,
            _superpages,
            ..
        } = self;
        let builders = swrod.map(|mut f| (f.shutdown(), f));
        let mut stopped = server.stop();
        watch.set_stopped();
        if let Some(((builder, cards, error), feed)) = builders {
            // Read after the core thread dropped its input (what it still held is counted).
            stopped.swrod = Some(feed.final_counters(builder, cards));
            stopped.swrod_error = error;
        }
        stopped
    }
}
