//! The network input ([`crate::node::NodeInput::Network`]): per channel a network receiver of
//! S-LINK fragments (UDP datagrams or TCP records, the channels of `rodeo cards --listen`),
//! started and read through `card_channels`; and the receivers' totals
//! ([`NetTotals`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rodeo_cards::card::ChannelSource;
use rodeo_cards::net::{LinkAddress, NetCounters};
use rodeo_files::linkfile::LinkMode;
use rodeo_format::slink::SlinkCheckConfig;

use super::card_channels::link_input;
use super::setup::{BuiltInput, ChannelSetup};
use crate::node::error::NodeError;

/// Network receivers feeding a node's channels ([`crate::node::NodeInput::Network`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkInput {
    /// One address per channel, in channel order: `udp://HOST:PORT` or `tcp://HOST:PORT`.
    pub listen: Vec<String>,
    /// S-LINK fragments are framed by the begin/end control words.
    pub framing: bool,
    /// S-LINK fragments are followed by a CRC word.
    pub crc: bool,
    /// TCP: a channel's link goes down when its first sender ends its connection cleanly (the
    /// node's input then ends when every channel's has); otherwise it waits for another sender.
    pub end_with_sender: bool,
}

/// The channel sources of a network input.
fn network_sources(n: &NetworkInput) -> Result<Vec<ChannelSource>, String> {
    n.listen
        .iter()
        .map(|a| {
            let address = LinkAddress::parse(a).map_err(|e| e.to_string())?;
            Ok(ChannelSource::Net {
                address,
                mode: LinkMode::Slink,
                block_size: 0,
                slink: SlinkCheckConfig {
                    framing: n.framing,
                    crc: n.crc,
                    ..SlinkCheckConfig::default()
                },
                end_with_sender: n.end_with_sender,
            })
        })
        .collect()
}

/// Totals of a node's network receivers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetTotals {
    /// Units received.
    pub units: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Units dropped for their size.
    pub dropped_units: u64,
    /// Datagrams the kernel dropped, the socket buffer full (UDP).
    pub kernel_dropped_units: u64,
    /// Bytes left unread in the socket buffers when the receivers ended (UDP).
    pub unread_bytes: u64,
    /// TCP connections accepted.
    pub connections: u64,
    /// TCP connections ended by an invalid record.
    pub broken_connections: u64,
}

impl NetTotals {
    /// The totals of `net` (a node's [`crate::node::ReadoutNode::net_counters`]).
    pub fn of(net: &[Arc<NetCounters>]) -> NetTotals {
        net_totals(net)
    }
}

/// Sums the receivers' counters.
pub(crate) fn net_totals(net: &[Arc<NetCounters>]) -> NetTotals {
    let mut t = NetTotals::default();
    for n in net {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        t.units += ld(&n.units);
        t.bytes += ld(&n.bytes);
        t.dropped_units += ld(&n.dropped_units);
        t.kernel_dropped_units += ld(&n.kernel_dropped_units);
        t.unread_bytes += ld(&n.unread_bytes);
        t.connections += ld(&n.connections);
        t.broken_connections += ld(&n.broken_connections);
    }
    t
}

/// The node's network input for `n`: one address per channel, each a receiver started (its
/// socket bound and listening from here on) and given its superpages.
pub(crate) fn build(config: &ChannelSetup<'_>, n: &NetworkInput) -> Result<BuiltInput, NodeError> {
    if n.listen.len() != config.channels {
        return Err(NodeError::Config(format!(
            "{} network addresses for {} channels: one per channel (ROB)",
            n.listen.len(),
            config.channels
        )));
    }
    link_input(config, network_sources(n).map_err(NodeError::Config)?)
}
