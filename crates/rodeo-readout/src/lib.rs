//! rodeo's readout: from the links to buffered fragments.
//!
//! - [`dma`]: the DMA-channel interface a card driver implements (the ALICE O2 model: the reader
//!   pushes empty superpages, the card fills them, the reader pops filled ones), and
//!   [`dma::EmulatedChannel`], a channel whose "card" is a thread running a [`dma::Generator`].
//!   Pool superpages ([`rodeo_memory::Superpage`]) are [`dma::SuperpageBuffer`]s.
//! - [`generator`]: the emulated cards' data sources: [`generator::SlinkGenerator`] (whole ROD
//!   fragments, S-LINK mode) and [`generator::FelixGenerator`] (1 KiB FELIX blocks of E-link
//!   packets, FELIX mode).
//! - [`player`], [`net`]: the other sources behind the same channel: a recorded link stream
//!   replayed ([`player::FilePlayer`]), units from the network ([`net::UdpReceiver`],
//!   [`net::TcpReceiver`]).
//! - [`corrupt`]: every error kind of links.md injected into a unit stream, for testing the
//!   receiving side; [`monitor`]: the receiving side's decoders over a channel's output, with
//!   counters by kind.
//! - [`card`]: channels grouped into cards, built from specs, with the built-in default cards.
//!
//! - [`store`]: the event store of a readout node (ROS): per ROB channel, fragments in pages
//!   taken once from the page pool, an O(1) L1ID index, zero-copy page references for replies,
//!   clears, occupancy and back-pressure; S-LINK superpages reach it through
//!   `rodeo_format::slink::SlinkChecker` ([`server::DmaInput`]), unusable words go to the
//!   rate-limited [`store::slink::ErrorDump`].
//! - [`server`]: the request server: a ROUTER socket and one core thread that owns the store,
//!   the input and the request descriptors; DataRequest/Clear per the dataflow protocol, with a
//!   pending queue and timeout.
//! - [`tester`]: the ROSTester, the paper's request-mix driver that measures a node.
//! - [`cputime`]: a thread's CPU time, for per-event costs that do not depend on the load.
//! - [`swrod`]: the SW ROD fragment builder: N receiving threads turn the E-link packets of FELIX
//!   blocks into one ROB fragment per L1ID, handed to a [`swrod::FragmentSink`].
//!
//! Stages after the card (fragment builder, event store) depend on the [`dma::DmaChannel`] trait,
//! never on the emulator, so a real driver replaces the emulator without touching them.

pub mod card;
pub mod corrupt;
pub mod cputime;
pub mod dma;
pub mod generator;
pub mod monitor;
pub mod net;
pub mod node;
pub mod player;
pub mod server;
pub mod store;
pub mod swrod;
pub mod tester;
