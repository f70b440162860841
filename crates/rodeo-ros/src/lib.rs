//! rodeo's ReadOut System (ROS): the readout node that buffers fragments by L1ID and serves
//! the trigger farm.
//!
//! **Role in the flow.** card (`rodeo-cards`) / fragment builder (`rodeo-swrod`) -> **input ->
//! event store -> request server** <-> data collection (`rodeo-dataflow`'s DCM). A readout node
//! is cards + (optionally) a SW ROD fragment builder + the event store + the request server.
//!
//! # Modules
//!
//! The data path:
//! - [`store`]: the event store: per ROB channel, fragments in pages taken once from the page
//!   pool, an O(1) L1ID index, zero-copy page references for replies, clears, occupancy and
//!   back-pressure; unusable S-LINK words go to the rate-limited [`store::slink::ErrorDump`].
//! - [`server`]: the request server: a ROUTER socket (or the direct in-process link) and one
//!   core thread that owns the store, the input and the request descriptors; DataRequest/Clear
//!   per the dataflow protocol, with a pending queue and timeout; the [`server::Input`] trait
//!   the core thread polls.
//!
//! What feeds the store:
//! - [`inputs`]: one module per input kind, each with its `Input` and the constructor that
//!   builds it for a node: emulated S-LINK cards through DMA superpages and the S-LINK checks
//!   ([`inputs::dma`]), the inline firmware-style generator ([`inputs::firmware`]), raw-data
//!   files replayed ([`inputs::replay`]), per ROB a network receiver ([`inputs::network`]) or a
//!   link capture file ([`mod@inputs::file`]); and the node's readout progress for a data-driven L1
//!   ([`inputs::progress`]).
//! - [`swrod`]: the SW ROD input: emulated FELIX cards, fragment builders on a builder pool,
//!   and per ROB a link (sink, batches, reorder window) into the store; its feed, shutdown and
//!   monitor.
//!
//! The node:
//! - [`node`]: a whole readout node from a [`node::NodeConfig`]: page pool, store, the input
//!   its [`node::NodeInput`] selects, and request server, started and stopped in order.
//! - [`standalone`]: the node `rodeo ros` and `rodeo tester` start, from command-line options
//!   ([`standalone::NodeArgs`], a clap `Args` struct), and its final counters as JSON.
//!
//! **Owns**: the store's pages (from a `rodeo_memory::PagePool`), the request descriptors, the
//! core thread, and the card and builder threads of a [`node::ReadoutNode`].
//!
//! **Must not depend on** the dataflow applications (`rodeo-dataflow`), the control layer
//! (`rodeo-control`), the ROSTester (`rodeo-rostester`), the studies (`rodeo-studies`) or the
//! binary: the DCM talks to it only through the protocol (`rodeo-transport`'s messages), and
//! its clients (the ROSTester, the studies) sit above it.

pub mod cli_values;
pub mod inputs;
pub mod node;
pub mod server;
pub mod standalone;
pub mod store;
pub mod swrod;
