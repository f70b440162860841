//! The replay input ([`crate::node::NodeInput::Replay`]): per channel an emulated S-LINK card
//! replaying the ROD fragments of raw-data files ([`ReplayGenerator`]) through the same DMA
//! path as the emulated cards ([`super::dma`]). The files are loaded when the node is built.

use std::path::PathBuf;
use std::sync::Arc;

use super::dma::emulated_cards;
use super::setup::{BuiltInput, ChannelSetup};
use crate::node::error::NodeError;
use rodeo_cards::replay::ReplayGenerator;
use rodeo_files::replay::{L1idMode, ReplayEvents};

/// Raw-data files replayed through a node's channels ([`crate::node::NodeInput::Replay`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReplayInput {
    /// The files (rodeo's container or EventStorage v2-v6), replayed in this order.
    pub files: Vec<PathBuf>,
    /// Fragments per second per channel at most (`None`: as fast as the store takes).
    pub rate_hz: Option<f64>,
    /// Start again after the last event.
    pub looping: bool,
    /// L1IDs kept or renumbered from 0.
    pub l1id: L1idMode,
    /// Source ids renamed before they pick their channel: (id in the file, channel's id).
    pub source_map: Vec<(u32, u32)>,
}

/// The node's replay input for `r`: the files loaded (in L1ID order when the L1IDs are kept),
/// then per channel an emulated card replaying its ROBs, superpages large enough for the
/// largest fragment.
pub(crate) fn build(config: &ChannelSetup<'_>, r: &ReplayInput) -> Result<BuiltInput, NodeError> {
    let map = r.source_map.iter().copied().collect();
    let mut events = ReplayEvents::load(&r.files, &map)?;
    if r.l1id == L1idMode::Keep {
        // In link order: the store takes a fragment older than the newest as lost.
        events.sort_by_l1id();
    }
    let events = Arc::new(events);
    // A superpage holds the largest fragment with its framing words.
    let largest = 4 * (events.max_rod_words() + 2);
    let superpage_bytes = (256 * 1024).max(largest.next_power_of_two());
    let address = match r.files.as_slice() {
        [one] => format!("replay:{}", one.display()),
        [first, rest @ ..] => format!("replay:{} (+{} more)", first.display(), rest.len()),
        [] => "replay".to_string(),
    };
    // Recorded data keeping its L1IDs has gaps wherever the trigger rejected: no error (every
    // fragment was flagged, unexplained, before a QA pass); a repeat still is.
    let gaps = r.l1id == L1idMode::Keep;
    emulated_cards(config, r.rate_hz, superpage_bytes, &address, gaps, |c| {
        ReplayGenerator::new(
            Arc::clone(&events),
            config.base_source_id + c as u32,
            r.l1id,
            r.looping,
            config.l1id_wrap,
        )
    })
}
