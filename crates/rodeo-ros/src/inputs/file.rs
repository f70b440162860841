//! The file input ([`crate::node::NodeInput::Files`]): per channel an S-LINK link capture file
//! played once or looping (the channels of `rodeo cards --play`), started and read through
//! `card_channels`.

use std::path::PathBuf;

use rodeo_cards::card::ChannelSource;

use super::card_channels::link_input;
use super::setup::{BuiltInput, ChannelSetup};
use crate::node::error::NodeError;

/// Link capture files replayed into a node's channels ([`crate::node::NodeInput::Files`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FileInput {
    /// One S-LINK capture file per channel (`rodeo gen link --mode slink --output`).
    pub files: Vec<PathBuf>,
    /// Start again after the last unit.
    pub looping: bool,
}

/// The channel sources of a file input.
fn file_sources(f: &FileInput) -> Vec<ChannelSource> {
    f.files
        .iter()
        .map(|path| ChannelSource::File {
            path: path.clone(),
            looping: f.looping,
        })
        .collect()
}

/// The node's file input for `f`: one file per channel, each played by a card thread given its
/// superpages.
pub(crate) fn build(config: &ChannelSetup<'_>, f: &FileInput) -> Result<BuiltInput, NodeError> {
    if f.files.len() != config.channels {
        return Err(NodeError::Config(format!(
            "{} link files for {} channels: one per channel (ROB)",
            f.files.len(),
            config.channels
        )));
    }
    link_input(config, file_sources(f))
}
