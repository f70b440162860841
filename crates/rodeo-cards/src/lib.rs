//! rodeo's readout cards: where the data enters a readout node.
//!
//! **Role in the flow.** `links -> card (DMA superpages)` -> fragment builder (`rodeo-swrod`) ->
//! event store (`rodeo-ros`). This crate is the first stage after the bytes on the links
//! (`rodeo-format`): the DMA-channel interface a card driver implements and every source that
//! stands behind it today.
//!
//! The interface:
//!
//! - [`dma`]: the DMA-channel interface a card driver implements (the ALICE O2 model: the reader
//!   pushes empty superpages, the card fills them, the reader pops filled ones), and
//!   [`dma::EmulatedChannel`], a channel whose "card" is a thread running a [`dma::Generator`].
//!   Pool superpages ([`rodeo_memory::Superpage`]) are [`dma::SuperpageBuffer`]s.
//!
//! The sources behind it:
//!
//! - [`generator`]: the emulated cards' data sources: [`generator::SlinkGenerator`] (whole ROD
//!   fragments, S-LINK mode) and [`generator::FelixGenerator`] (1 KiB FELIX blocks of E-link
//!   packets, FELIX mode).
//! - [`player`], [`replay`], [`net`]: the other sources behind the same channel: a recorded
//!   link stream replayed ([`player::FilePlayer`]), the ROBs of raw-data files' events as ROD
//!   fragments ([`replay::ReplayGenerator`]), units from the network ([`net::UdpReceiver`],
//!   [`net::TcpReceiver`]).
//!
//! Testing, watching and grouping them:
//!
//! - [`corrupt`]: every error kind of links.md injected into a unit stream, for testing the
//!   receiving side; [`monitor`]: the receiving side's decoders over a channel's output, with
//!   counters by kind.
//! - [`card`]: channels grouped into cards, built from specs, with the built-in default cards.
//!
//! **Owns**: the card threads (one per emulated channel), the superpage queues between a card
//! and its reader, and the link counters.
//!
//! **Must not depend on** anything downstream (fragment builder, event store, dataflow,
//! control) nor on a transport: the stages after the card depend on the [`dma::DmaChannel`]
//! trait, never on the emulator, so a real driver replaces the emulator without touching them.

pub mod card;
pub mod corrupt;
pub mod dma;
pub mod generator;
pub mod monitor;
pub mod net;
pub mod player;
pub mod replay;
