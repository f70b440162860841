//! What feeds a readout node's store: each input kind in its own module, with the [`Input`]
//! the core thread polls and the constructor that builds it for a node
//! ([`crate::node::NodeInput`] selects one; [`crate::node`] assembles and stops it).
//!
//! | input | module | its `Input` |
//! |---|---|---|
//! | emulated S-LINK cards through DMA superpages and the S-LINK checks | [`dma`] | [`DmaInput`] |
//! | emulated S-LINK cards writing straight into store pages (RobinNP-style), through the S-LINK checks | [`page_dma`] | [`page_dma::PageDmaInput`] |
//! | the inline firmware-style generator writing into store pages | [`firmware`] | [`FirmwareInput`] |
//! | raw-data files replayed through emulated S-LINK cards | [`replay`] | [`DmaInput`] |
//! | per ROB a UDP/TCP receiver of S-LINK fragments | [`network`] | [`DmaInput`] |
//! | per ROB an S-LINK link capture file | [`mod@file`] | [`DmaInput`] |
//! | SW ROD fragment builders on emulated FELIX cards | [`crate::swrod`] | [`crate::swrod::SwRodInputs`] |
//!
//! The network and file inputs start `rodeo cards`' channels (`card_channels`). Every input
//! is built from the part of the node's configuration its channels need (`setup`: channels,
//! source ids, fragment size, L1ID wrap, first event, error file) and fails with the node's
//! error, and hands back what it is made of ([`setup`]: the input, its superpages, and per
//! channel how [`watch`] reads it). [`progress`] wraps whichever input the node runs and
//! publishes its [`ReadoutProgress`]; [`watch`] ([`InputWatch`]) reads every channel's input
//! from outside the core thread as [`InputStatus`] records ([`status`]): state, counters, rate,
//! problem.
//!
//! Inputs depend on the store and the server's [`Input`] trait, never on the request server
//! or on the node that assembles them (only on its error type, `node::error`).
//!
//! [`Input`]: crate::server::Input

mod card_channels;
pub mod dma;
pub mod file;
pub mod firmware;
pub mod follow;
pub mod network;
pub mod page_dma;
pub mod progress;
pub mod replay;
pub(crate) mod setup;
pub mod status;
pub mod watch;

pub use dma::{DmaInput, CHANNELS_PER_CARD};
pub use file::FileInput;
pub use firmware::{FirmwareInput, Payload};
pub use network::{NetTotals, NetworkInput};
pub use progress::ReadoutProgress;
pub use replay::ReplayInput;
pub use status::{InputState, InputStatus};
pub use watch::InputWatch;
