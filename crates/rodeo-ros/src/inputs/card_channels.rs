//! Channels of `rodeo cards` as a node's inputs: per ROB a card channel
//! ([`rodeo_cards::card::start_channel`]: a UDP or TCP receiver or a file player on a card
//! thread, behind the [`DmaChannel`] interface), read as the emulated S-LINK cards are read
//! ([`super::dma::DmaInput`]): the same S-LINK checks, status bits, error dump and
//! back-pressure (a full store stops reading, the card stalls, a TCP sender blocks; UDP loses
//! what the socket buffer cannot hold, seen as L1ID sequence errors). The network
//! ([`super::network`]) and file ([`super::file`]) inputs start their channels here.

use std::sync::Arc;

use rodeo_cards::card::{start_channel, CardChannel, ChannelSource, ChannelSpec};
use rodeo_cards::dma::{ChannelStatus, DmaChannel, EmulatedConfig, Filled};
use rodeo_cards::net::NetCounters;
use rodeo_files::linkfile::LinkMode;
use rodeo_format::slink::SlinkCheckConfig;
use rodeo_memory::{RegionOptions, Superpage, SuperpagePool, SuperpagePoolConfig};

use super::dma::DmaInput;
use super::setup::{error_file, BuiltInput, ChannelSetup};
use super::watch::{LaneProbe, ProbeSource};
use crate::node::error::NodeError;
use crate::store::slink::ErrorDump;

/// A started card channel as the node's DMA input reads it.
struct LinkChannel(Box<dyn DmaChannel<Superpage>>);

impl DmaChannel<Superpage> for LinkChannel {
    fn push_superpage(&self, superpage: Superpage) -> Result<(), Superpage> {
        self.0.push_superpage(superpage)
    }

    fn pop_superpage(&self) -> Option<Filled<Superpage>> {
        self.0.pop_superpage()
    }

    fn transfer_queue_available(&self) -> usize {
        self.0.transfer_queue_available()
    }

    fn status(&self) -> ChannelStatus {
        self.0.status()
    }

    fn end_link(&self) {
        self.0.end_link();
    }
}

/// The started channels of a network or file input, with how to check what they carry.
struct LinkChannels {
    channels: Vec<LinkChannel>,
    check: SlinkCheckConfig,
    net: Vec<Arc<NetCounters>>,
    lanes: Vec<LaneProbe>,
}

/// Starts one channel per ROB: `card` names the card threads (`<card>-ch<N>`).
fn start_links(
    card: &str,
    sources: Vec<ChannelSource>,
    queue_depth: usize,
    l1id_wrap: u32,
) -> Result<LinkChannels, String> {
    let mut channels = Vec::with_capacity(sources.len());
    let mut net = Vec::new();
    let mut lanes = Vec::with_capacity(sources.len());
    let mut check = None;
    for (i, source) in sources.into_iter().enumerate() {
        let (address, end_on_close) = match &source {
            ChannelSource::Net {
                end_with_sender, ..
            } => (None, *end_with_sender),
            ChannelSource::File { path, .. } => (Some(path.display().to_string()), false),
            _ => (Some("emulated".to_string()), false),
        };
        let spec = ChannelSpec {
            source,
            config: EmulatedConfig {
                queue_depth,
                ..EmulatedConfig::default()
            },
        };
        let started: CardChannel = start_channel(card, i, &spec).map_err(|e| e.to_string())?;
        if started.mode != LinkMode::Slink {
            return Err(format!(
                "{card} channel {i} ({}): carries FELIX blocks; a readout node's network and \
                 file inputs take S-LINK fragments",
                started.link
            ));
        }
        rodeo_cards::card::check_unit_fits(&started, LINK_SUPERPAGE_BYTES)
            .map_err(|e| format!("{card} channel {i}: {e}"))?;
        let this = SlinkCheckConfig {
            l1id_wrap,
            ..started.slink
        };
        if *check.get_or_insert(this) != this {
            return Err(format!(
                "{card} channel {i} ({}): framing or CRC differs from channel 0's; every \
                 channel of a node is checked the same way",
                started.link
            ));
        }
        lanes.push(match &started.net {
            Some(counters) => LaneProbe {
                // The bound address (a port 0 asked for is the one chosen).
                address: started
                    .address
                    .map_or_else(|| address.clone().unwrap_or_default(), |a| a.to_string()),
                source: ProbeSource::Net {
                    counters: Arc::clone(counters),
                    end_on_close,
                },
            },
            None => LaneProbe {
                address: address.unwrap_or_default(),
                source: ProbeSource::Channel(started.status.clone()),
            },
        });
        net.extend(started.net.clone());
        channels.push(LinkChannel(started.channel));
    }
    Ok(LinkChannels {
        channels,
        check: check.unwrap_or_default(),
        net,
        lanes,
    })
}

/// Superpages of a network or file channel: the largest network unit with its record, so any
/// fragment a sender may send fits one.
const LINK_SUPERPAGE_BYTES: usize = 128 * 1024;

/// Per channel a `rodeo cards` channel (network receiver or file player) with `depth`
/// superpages, read through the S-LINK checks the channels' links call for.
pub(super) fn link_input(
    config: &ChannelSetup<'_>,
    sources: Vec<ChannelSource>,
) -> Result<BuiltInput, NodeError> {
    let depth = 8;
    let sp = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes: LINK_SUPERPAGE_BYTES,
        superpages: config.channels * depth,
        region: RegionOptions::default(),
    })?;
    let links = start_links("link", sources, depth, config.l1id_wrap).map_err(NodeError::Config)?;
    for ch in &links.channels {
        for _ in 0..depth {
            let s = sp
                .alloc()
                .map_err(|e| NodeError::Config(format!("superpage pool too small: {e}")))?;
            if ch.push_superpage(s).is_err() {
                return Err(NodeError::Config(
                    "transfer queue smaller than its depth".into(),
                ));
            }
        }
    }
    let dump = ErrorDump::new(error_file(config)?, 10);
    // Data from outside: each fragment's source must be its channel's ROB (a swapped cable is
    // flagged and counted), and at the stop what the receivers (players) hold is read in.
    let sources = (0..config.channels as u32).map(|c| config.base_source_id + c);
    let input = DmaInput::new(links.channels, links.check, dump)
        .expecting_sources(sources)
        .ending_links_at_stop();
    Ok(BuiltInput {
        errors: Some(input.lane_errors()),
        input: Box::new(input),
        superpages: Some(sp),
        lanes: links.lanes,
        net: links.net,
    })
}
