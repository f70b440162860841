//! Real inputs of a readout node: per ROB a network receiver or a link capture file, and the
//! node's readout progress (the L1IDs complete on every channel) for a data-driven L1.
//!
//! The channels are `rodeo cards`' own ([`rodeo_cards::card::start_channel`]): a UDP or TCP
//! receiver ([`rodeo_cards::net`]) or a file player ([`rodeo_cards::player`]) on a card thread,
//! behind the [`DmaChannel`] interface. The node reads them as it reads its emulated S-LINK
//! cards ([`crate::server::DmaInput`]): the same S-LINK checks, status bits, error dump and
//! back-pressure (a full store stops reading, the card stalls, a TCP sender blocks; UDP loses
//! what the socket buffer cannot hold, seen as L1ID sequence errors).
//!
//! # Progress
//!
//! [`ReadoutProgress`] is what the node publishes after each poll that moved data: `complete`,
//! the number of L1IDs, counted from the first (L1ID 0) in the readout's wrap order, that every
//! channel has reached (a channel's count is its newest L1ID's position plus one, unwrapped
//! through ECR wraps), and `ended`, set once every channel's link is down and everything it
//! delivered has been read (a file played to its end, a TCP sender that closed). A channel that
//! skipped an L1ID still counts past it: the event is built without that fragment (LOST).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rodeo_cards::card::{start_channel, CardChannel, ChannelSource, ChannelSpec};
use rodeo_cards::dma::{ChannelStatus, DmaChannel, EmulatedConfig, Filled};
use rodeo_cards::net::{LinkAddress, NetCounters};
use rodeo_files::linkfile::LinkMode;
use rodeo_format::slink::{SlinkCheckConfig, SlinkCounters};
use rodeo_memory::Superpage;

use crate::server::Input;
use crate::store::EventStore;

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

/// Link capture files replayed into a node's channels ([`crate::node::NodeInput::Files`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FileInput {
    /// One S-LINK capture file per channel (`rodeo gen link --mode slink --output`).
    pub files: Vec<PathBuf>,
    /// Start again after the last unit.
    pub looping: bool,
}

/// What a node publishes of its input's progress; see the module docs.
#[derive(Debug, Default)]
pub struct ReadoutProgress {
    complete: AtomicU64,
    ended: AtomicBool,
}

impl ReadoutProgress {
    /// L1IDs, counted from the first, that every channel has reached.
    pub fn complete(&self) -> u64 {
        self.complete.load(Ordering::Acquire)
    }

    /// Every channel's input has ended and was read to its end. Read before
    /// [`ReadoutProgress::complete`]: `complete` is final once this is true.
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

/// Wraps a node's input and publishes its [`ReadoutProgress`] after each poll.
pub(crate) struct ProgressInput {
    inner: Box<dyn Input>,
    progress: Arc<ReadoutProgress>,
    /// L1IDs per ECR cycle, and the extended sequence's period (256 cycles).
    wrap: u64,
    /// Per channel: the newest L1ID seen and its unwrapped count (position + 1).
    lanes: Vec<(Option<u32>, u64)>,
}

impl ProgressInput {
    pub(crate) fn new(inner: Box<dyn Input>, channels: usize, wrap: u32) -> ProgressInput {
        ProgressInput {
            inner,
            progress: Arc::default(),
            wrap: u64::from(wrap.max(1)),
            lanes: vec![(None, 0); channels],
        }
    }

    pub(crate) fn progress(&self) -> Arc<ReadoutProgress> {
        Arc::clone(&self.progress)
    }

    /// Position of extended L1ID `l1id` in the sequence 0, 1, ... (ECR in bits 31..24).
    fn position(&self, l1id: u32) -> u64 {
        u64::from(l1id >> 24) * self.wrap + u64::from(l1id & 0x00FF_FFFF)
    }

    fn update(&mut self, store: &EventStore) {
        let period = 256 * self.wrap;
        let mut min = u64::MAX;
        for c in 0..self.lanes.len() {
            let newest = store.last_l1id(c);
            let (prev, count) = self.lanes[c];
            if newest != prev {
                if let Some(n) = newest {
                    let now = self.position(n);
                    let count = match prev {
                        None => now + 1,
                        Some(p) => count + (now + period - self.position(p)) % period,
                    };
                    self.lanes[c] = (newest, count);
                }
            }
            min = min.min(self.lanes[c].1);
        }
        if min != u64::MAX && min > self.progress.complete.load(Ordering::Relaxed) {
            self.progress.complete.store(min, Ordering::Release);
        }
    }
}

impl Input for ProgressInput {
    fn poll(&mut self, store: &mut EventStore) -> u64 {
        let n = self.inner.poll(store);
        if n > 0 {
            self.update(store);
        } else if !self.progress.ended.load(Ordering::Relaxed) && self.inner.finished() {
            self.update(store);
            self.progress.ended.store(true, Ordering::Release);
        }
        n
    }

    fn slink_counters(&self) -> SlinkCounters {
        self.inner.slink_counters()
    }

    fn stalls(&self) -> u64 {
        self.inner.stalls()
    }

    fn finished(&self) -> bool {
        self.inner.finished()
    }

    fn release(&mut self, store: &mut EventStore) {
        self.inner.release(store);
    }
}

/// A started card channel as the node's DMA input reads it.
pub(crate) struct LinkChannel(Box<dyn DmaChannel<Superpage>>);

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
}

/// The started channels of a network or file input, with how to check what they carry.
pub(crate) struct LinkChannels {
    pub(crate) channels: Vec<LinkChannel>,
    pub(crate) check: SlinkCheckConfig,
    pub(crate) net: Vec<Arc<NetCounters>>,
}

/// Starts one channel per ROB: `card` names the card threads (`<card>-ch<N>`).
pub(crate) fn start_links(
    card: &str,
    sources: Vec<ChannelSource>,
    queue_depth: usize,
    l1id_wrap: u32,
) -> Result<LinkChannels, String> {
    let mut channels = Vec::with_capacity(sources.len());
    let mut net = Vec::new();
    let mut check = None;
    for (i, source) in sources.into_iter().enumerate() {
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
        net.extend(started.net.clone());
        channels.push(LinkChannel(started.channel));
    }
    Ok(LinkChannels {
        channels,
        check: check.unwrap_or_default(),
        net,
    })
}

/// The channel sources of a network input.
pub(crate) fn network_sources(n: &NetworkInput) -> Result<Vec<ChannelSource>, String> {
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

/// The channel sources of a file input.
pub(crate) fn file_sources(f: &FileInput) -> Vec<ChannelSource> {
    f.files
        .iter()
        .map(|path| ChannelSource::File {
            path: path.clone(),
            looping: f.looping,
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
    /// TCP connections accepted.
    pub connections: u64,
    /// TCP connections ended by an invalid record.
    pub broken_connections: u64,
}

/// Sums the receivers' counters.
pub(crate) fn net_totals(net: &[Arc<NetCounters>]) -> NetTotals {
    let mut t = NetTotals::default();
    for n in net {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        t.units += ld(&n.units);
        t.bytes += ld(&n.bytes);
        t.dropped_units += ld(&n.dropped_units);
        t.connections += ld(&n.connections);
        t.broken_connections += ld(&n.broken_connections);
    }
    t
}
