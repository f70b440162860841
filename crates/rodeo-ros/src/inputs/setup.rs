//! What every input of a node is built for ([`ChannelSetup`]): the node's channels, their
//! fragments and the error file, taken from its [`crate::node::NodeConfig`]; and what each
//! input's builder hands back ([`BuiltInput`]).

use std::path::Path;
use std::sync::Arc;

use rodeo_cards::net::NetCounters;
use rodeo_memory::SuperpagePool;

use super::watch::{LaneErrors, LaneProbe};
use crate::node::error::NodeError;
use crate::server::input::Input;

/// An input built for a node: what the core thread polls, the memory it reads, and what the
/// node's input watch reads of it.
pub(crate) struct BuiltInput {
    /// What the core thread polls.
    pub(crate) input: Box<dyn Input>,
    /// The DMA superpages its cards fill (kept as long as the node).
    pub(crate) superpages: Option<SuperpagePool>,
    /// Per channel, where its data comes from and how to read its figures.
    pub(crate) lanes: Vec<LaneProbe>,
    /// Per channel, the S-LINK check errors (DMA inputs).
    pub(crate) errors: Option<Arc<LaneErrors>>,
    /// The network receivers' counters (network inputs).
    pub(crate) net: Vec<Arc<NetCounters>>,
}

/// The part of a node's configuration every input is built from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChannelSetup<'a> {
    /// ROB channels.
    pub(crate) channels: usize,
    /// Data words per ROD fragment.
    pub(crate) fragment_words: u32,
    /// Source (ROB) id of channel 0; channel i has this + i.
    pub(crate) base_source_id: u32,
    /// L1ID wrap of the emulated inputs.
    pub(crate) l1id_wrap: u32,
    /// The event the emulated inputs (S-LINK and FELIX) start at.
    pub(crate) first_event: u64,
    /// File receiving unreadable fragments (rate-limited).
    pub(crate) error_file: Option<&'a Path>,
}

/// The error file of unreadable words, created if configured.
pub(crate) fn error_file(config: &ChannelSetup<'_>) -> Result<Option<std::fs::File>, NodeError> {
    match config.error_file {
        Some(p) => Ok(Some(std::fs::File::create(p).map_err(|source| {
            NodeError::Io {
                what: format!("creating error file {}", p.display()),
                source,
            }
        })?)),
        None => Ok(None),
    }
}
