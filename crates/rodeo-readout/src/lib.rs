//! rodeo's readout: from the links to buffered fragments.
//!
//! - [`dma`]: the DMA-channel interface a card driver implements (the ALICE O2 model: the reader
//!   pushes empty superpages, the card fills them, the reader pops filled ones), and
//!   [`dma::EmulatedChannel`], a channel whose "card" is a thread running a [`dma::Generator`].
//!   Pool superpages ([`rodeo_memory::Superpage`]) are [`dma::SuperpageBuffer`]s.
//! - [`generator`]: the emulated cards' data sources: [`generator::SlinkGenerator`] (whole ROD
//!   fragments, S-LINK mode) and [`generator::FelixGenerator`] (1 KiB FELIX blocks of E-link
//!   packets, FELIX mode).
//! - [`swrod`]: the SW ROD fragment builder: N receiving threads turn the E-link packets of FELIX
//!   blocks into one ROB fragment per L1ID, handed to a [`swrod::FragmentSink`].
//!
//! Stages after the card (fragment builder, event store) depend on the [`dma::DmaChannel`] trait,
//! never on the emulator, so a real driver replaces the emulator without touching them.

pub mod dma;
pub mod generator;
pub mod swrod;
