//! What every input of a node is built for ([`ChannelSetup`]): the node's channels, their
//! fragments and the error file, taken from its [`crate::node::NodeConfig`].

use std::path::Path;

use crate::node::error::NodeError;

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
    /// The event the emulated S-LINK inputs start at.
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
