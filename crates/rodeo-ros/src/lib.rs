//! rodeo's ReadOut System (ROS): the readout node that buffers fragments by L1ID and serves
//! the trigger farm.
//!
//! **Role in the flow.** card (`rodeo-cards`) / fragment builder (`rodeo-swrod`) -> **event
//! store -> request server** <-> data collection (`rodeo-dataflow`'s DCM). A readout node is
//! cards + (optionally) a SW ROD fragment builder + the event store + the request server.
//!
//! - [`store`]: the event store: per ROB channel, fragments in pages taken once from the page
//!   pool, an O(1) L1ID index, zero-copy page references for replies, clears, occupancy and
//!   back-pressure; S-LINK superpages reach it through `rodeo_format::slink::SlinkChecker`
//!   ([`server::DmaInput`]), unusable words go to the rate-limited [`store::slink::ErrorDump`].
//! - [`server`]: the request server: a ROUTER socket (or the direct in-process link) and one
//!   core thread that owns the store, the input and the request descriptors; DataRequest/Clear
//!   per the dataflow protocol, with a pending queue and timeout; the SW ROD builder's
//!   [`server::StoreSink`] feeding the store in L1ID order.
//! - [`links`]: real inputs (per ROB a UDP/TCP receiver or a link capture file, `rodeo cards`'
//!   channels) and the node's [`links::ReadoutProgress`] for a data-driven L1.
//! - [`node`]: a whole readout node from a [`node::NodeConfig`]: page pool, store, input
//!   (emulated S-LINK cards, the inline firmware generator, or SW ROD builders on emulated FELIX
//!   cards) and request server, started and stopped in order.
//!
//! **Owns**: the store's pages (from a `rodeo_memory::PagePool`), the request descriptors, the
//! core thread, and the card and builder threads of a [`node::ReadoutNode`].
//!
//! **Must not depend on** the dataflow applications, the control layer or the binary: the DCM
//! talks to it only through the protocol (`rodeo-transport`'s messages), and its clients (the
//! ROSTester, `rodeo-rostester`) sit above it.

pub mod links;
pub mod node;
pub mod server;
pub mod store;
