//! A readout node (ROS) assembled from its parts: page pool, event store, input, request server.
//!
//! [`NodeConfig`] says how many ROB channels, what feeds them (emulated S-LINK cards through
//! DMA superpages, or the inline firmware-style generator) and how the store and server are
//! sized; [`ReadoutNode::start`] builds everything, warms the memory, binds the request
//! endpoint and starts the core thread. [`ReadoutNode::start_direct`] builds the same node
//! answering one in-process client over the direct link (no ZeroMQ) instead. `rodeo ros`, the ROSTester's in-process node and the
//! embedded partition all start nodes this way.

use std::path::PathBuf;
use std::time::Duration;

use rodeo_format::slink::SlinkCheckConfig;
use rodeo_memory::{PagePool, PagePoolConfig, RegionOptions, SuperpagePool, SuperpagePoolConfig};
use rodeo_transport::socket::Transport;

use crate::dma::{DmaChannel, EmulatedChannel, EmulatedConfig};
use crate::generator::{SlinkConfig, SlinkGenerator, WordRange};
use crate::server::{
    DirectClient, DmaInput, FirmwareInput, Input, Payload, RequestServer, ServerConfig,
    ServerCounters, Stopped,
};
use crate::store::slink::ErrorDump;
use crate::store::{EventStore, StoreConfig};

/// What feeds the node's channels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NodeInput {
    /// Emulated S-LINK card threads writing framed fragments into superpages, split and checked
    /// into the store: the real data path. `rate_hz` limits fragments per second per channel.
    Dma {
        /// Fragments per second per channel at most (`None`: as fast as the store takes).
        rate_hz: Option<f64>,
    },
    /// The inline generator writing fragments straight into store pages (no card threads).
    Firmware(Payload),
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
    server: RequestServer,
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

impl ReadoutNode {
    /// Builds the node and starts serving on `endpoint`.
    pub fn start(
        transport: &Transport,
        config: &NodeConfig,
        endpoint: &str,
    ) -> Result<ReadoutNode, NodeError> {
        let (memory, store, input) = Parts::build(config)?.split();
        let server =
            RequestServer::start(transport, &server_config(config, endpoint), store, input)?;
        Ok(memory.node(server, config))
    }

    /// Builds the node and starts serving the one client returned, over the direct in-process
    /// link ([`crate::server::direct`]): the same core thread, without ZeroMQ.
    pub fn start_direct(config: &NodeConfig) -> Result<(ReadoutNode, DirectClient), NodeError> {
        let (memory, store, input) = Parts::build(config)?.split();
        let (server, client) =
            RequestServer::start_direct(&server_config(config, "direct"), store, input)?;
        Ok((memory.node(server, config), client))
    }
}

fn server_config(config: &NodeConfig, endpoint: &str) -> ServerConfig {
    ServerConfig {
        endpoint: endpoint.to_string(),
        descriptors: config.descriptors,
        pending_timeout: config.pending_timeout,
        core_cpu: config.core_cpu,
        ..ServerConfig::default()
    }
}

/// A node's parts before its server starts.
struct Parts {
    pool: PagePool,
    superpages: Option<SuperpagePool>,
    store: EventStore,
    input: Box<dyn Input>,
}

/// The memory a running node keeps.
struct Memory {
    pool: PagePool,
    superpages: Option<SuperpagePool>,
}

impl Memory {
    fn node(self, server: RequestServer, config: &NodeConfig) -> ReadoutNode {
        ReadoutNode {
            server,
            robs: config.robs(),
            _pool: self.pool,
            _superpages: self.superpages,
        }
    }
}

impl Parts {
    fn split(self) -> (Memory, EventStore, Box<dyn Input>) {
        let memory = Memory {
            pool: self.pool,
            superpages: self.superpages,
        };
        (memory, self.store, self.input)
    }

    fn build(config: &NodeConfig) -> Result<Parts, NodeError> {
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
        let store = EventStore::new(
            &pool,
            &StoreConfig::with_channels(
                config.channels,
                config.base_source_id,
                config.pages_per_channel,
            ),
        )?;
        let mut superpages = None;
        let input: Box<dyn Input> = match config.input {
            NodeInput::Firmware(payload) => Box::new(FirmwareInput::new(
                &store,
                config.fragment_words as usize,
                config.l1id_wrap,
                payload,
            )),
            NodeInput::Dma { rate_hz } => {
                let depth = 8;
                let sp = SuperpagePool::new(SuperpagePoolConfig {
                    superpage_bytes: 256 * 1024,
                    superpages: config.channels * depth,
                    region: RegionOptions::default(),
                })?;
                let mut chans = Vec::with_capacity(config.channels);
                for c in 0..config.channels {
                    let ch = EmulatedChannel::start(
                        &format!("slink{c}"),
                        EmulatedConfig {
                            queue_depth: depth,
                            max_units_per_s: rate_hz,
                            ..EmulatedConfig::default()
                        },
                        SlinkGenerator::new(SlinkConfig {
                            source_id: config.base_source_id + c as u32,
                            data_words: WordRange::fixed(config.fragment_words),
                            l1id_wrap: config.l1id_wrap,
                            framing: true,
                            ..SlinkConfig::default()
                        }),
                    )
                    .map_err(|source| NodeError::Io {
                        what: format!("starting card thread slink{c}"),
                        source,
                    })?;
                    for _ in 0..depth {
                        let s = sp.alloc().map_err(|e| {
                            NodeError::Config(format!("superpage pool too small: {e}"))
                        })?;
                        if ch.push_superpage(s).is_err() {
                            return Err(NodeError::Config(
                                "transfer queue smaller than its depth".into(),
                            ));
                        }
                    }
                    chans.push(ch);
                }
                superpages = Some(sp);
                let file = match &config.error_file {
                    Some(p) => Some(std::fs::File::create(p).map_err(|source| NodeError::Io {
                        what: format!("creating error file {}", p.display()),
                        source,
                    })?),
                    None => None,
                };
                let check = SlinkCheckConfig {
                    framing: true,
                    crc: false,
                    l1id_wrap: config.l1id_wrap,
                };
                Box::new(DmaInput::new(chans, check, ErrorDump::new(file, 10)))
            }
        };
        Ok(Parts {
            pool,
            superpages,
            store,
            input,
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

    /// The node's page pool (a cheap shared handle; its stats are the buffer occupancy).
    pub fn page_pool(&self) -> PagePool {
        self._pool.clone()
    }

    /// Stops the node (pending requests answered first) and returns its final state.
    pub fn stop(self) -> Stopped {
        self.server.stop()
    }
}
