//! Cards: groups of DMA channels with their links, as an operator sees them (`rodeo cards`).
//!
//! A [`CardSpec`] says what feeds each channel ([`ChannelSource`]: an emulated FELIX or S-LINK
//! generator, a file player, a UDP or TCP receiver) and with which limits; [`Card::start`]
//! builds the channels behind the [`DmaChannel`] trait like any driver: every generator, file
//! player and replay channel of a card is filled by one engine thread (the card's DMA engine,
//! named after the card, see [`crate::dma`]); a network input channel, which waits for its
//! input, gets an engine thread of its own (`<card>-ch<N>`). A card reports, per channel, the
//! link state, queue depths and counters ([`ChannelReport`]), and the CPU time of its engine
//! threads ([`Card::cpu_ns`]).
//!
//! [`CardSpec::defaults`] is the built-in set `rodeo cards` shows with no configuration: a
//! FELIX card (2 channels of 12 E-links) and a RobinNP-like S-LINK card (12 channels in two
//! halves of 6, as in the ROS paper), both paced at a 100 kHz L1 rate.

use std::path::PathBuf;
use std::sync::Arc;

use rodeo_files::linkfile::{LinkFile, LinkFileError, LinkMode};
use rodeo_format::felix::{packet_len, TrailerSize};
use rodeo_format::slink::SlinkCheckConfig;
use rodeo_memory::Superpage;

use crate::dma::{
    CardCpu, ChannelStatus, DmaChannel, EmulatedChannel, EmulatedConfig, Generator, StatusReader,
};
use crate::generator::{FelixConfig, FelixGenerator, GeneratorError, SlinkConfig, SlinkGenerator};
use crate::net::{LinkAddress, LinkState, NetCounters, TcpReceiver, UdpReceiver, UnitRule};
use crate::player::{FilePlayer, PlayerError};

/// What feeds a channel.
#[derive(Debug, Clone)]
pub enum ChannelSource {
    /// An emulated FELIX link: blocks of E-link packets.
    Felix(FelixConfig),
    /// An emulated S-LINK: ROD fragments.
    Slink(SlinkConfig),
    /// A recorded link stream, replayed once or looping.
    File {
        /// The link capture file.
        path: PathBuf,
        /// Start again after the last unit.
        looping: bool,
    },
    /// Units from the network (UDP datagrams or TCP records) in the given link mode.
    Net {
        /// Where to listen.
        address: LinkAddress,
        /// FELIX blocks or S-LINK fragments.
        mode: LinkMode,
        /// FELIX block size (FELIX mode).
        block_size: usize,
        /// S-LINK framing and CRC (S-LINK mode).
        slink: SlinkCheckConfig,
        /// TCP: the channel finishes (link down) when its first sender ends its connection
        /// cleanly ([`TcpReceiver::end_with_sender`]); otherwise it waits for the next one.
        end_with_sender: bool,
    },
}

/// One channel of a card.
#[derive(Debug, Clone)]
pub struct ChannelSpec {
    /// Its source.
    pub source: ChannelSource,
    /// Queue depth and limits.
    pub config: EmulatedConfig,
}

/// A card: a name and its channels.
#[derive(Debug, Clone)]
pub struct CardSpec {
    /// Card name (e.g. `felix0`).
    pub name: String,
    /// The channels, numbered from 0.
    pub channels: Vec<ChannelSpec>,
}

/// The L1 rate the default cards are paced at.
pub const DEFAULT_L1_RATE_HZ: f64 = 100_000.0;

impl CardSpec {
    /// The built-in cards; see the module docs.
    pub fn defaults() -> Vec<CardSpec> {
        let felix = |ch: u16| {
            let cfg = FelixConfig {
                elinks: (0..12).map(|e| (ch << 6) | e).collect(),
                seed: 0xFE11C5 + u64::from(ch),
                ..FelixConfig::default()
            };
            let bytes = felix_bytes_per_l1id(&cfg) * DEFAULT_L1_RATE_HZ;
            ChannelSpec {
                source: ChannelSource::Felix(cfg),
                config: EmulatedConfig {
                    max_bytes_per_s: Some(bytes),
                    ..EmulatedConfig::default()
                },
            }
        };
        let slink = |ch: u32| ChannelSpec {
            source: ChannelSource::Slink(SlinkConfig {
                source_id: 0x0011_0000 | ch,
                framing: true,
                seed: 0x5EED + u64::from(ch),
                ..SlinkConfig::default()
            }),
            config: EmulatedConfig {
                max_units_per_s: Some(DEFAULT_L1_RATE_HZ),
                ..EmulatedConfig::default()
            },
        };
        vec![
            CardSpec {
                name: "felix0".into(),
                channels: (0..2).map(felix).collect(),
            },
            CardSpec {
                name: "robinnp0".into(),
                channels: (0..12).map(slink).collect(),
            },
        ]
    }
}

/// Average bytes one L1ID costs a FELIX channel (packets, trailers, block headers): turns an L1
/// rate into the channel's bandwidth limit.
pub fn felix_bytes_per_l1id(cfg: &FelixConfig) -> f64 {
    let avg_words = (f64::from(cfg.payload_words.min) + f64::from(cfg.payload_words.max)) / 2.0;
    let packet = packet_len(0) as f64 + 4.0 * avg_words + cfg.trailer.bytes() as f64;
    let per_block = (cfg.block_size - 4) as f64 / cfg.block_size as f64;
    cfg.elinks.len() as f64 * packet / per_block
}

/// Why a card could not start.
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    /// A generator configuration is invalid.
    #[error("card {card} channel {channel}: {source}")]
    Generator {
        /// Card name.
        card: String,
        /// Channel number.
        channel: usize,
        /// The error.
        #[source]
        source: GeneratorError,
    },
    /// A link file could not be read.
    #[error("card {card} channel {channel}: {source}")]
    LinkFile {
        /// Card name.
        card: String,
        /// Channel number.
        channel: usize,
        /// The error.
        #[source]
        source: LinkFileError,
    },
    /// A link file cannot be played.
    #[error("card {card} channel {channel}: {source}")]
    Player {
        /// Card name.
        card: String,
        /// Channel number.
        channel: usize,
        /// The error.
        #[source]
        source: PlayerError,
    },
    /// A socket or thread could not be set up.
    #[error("card {card} channel {channel}: {what}: {source}")]
    Io {
        /// Card name.
        card: String,
        /// Channel number.
        channel: usize,
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// A started channel and what is known about its link.
pub struct CardChannel {
    /// The channel.
    pub channel: Box<dyn DmaChannel<Superpage>>,
    /// Reads the channel's status after `channel` went to its reader (monitors keep it).
    pub status: StatusReader,
    /// The link: mode and parameters, for people.
    pub link: String,
    /// FELIX blocks or S-LINK fragments.
    pub mode: LinkMode,
    /// FELIX block size.
    pub block_size: usize,
    /// S-LINK framing and CRC, for a checking reader.
    pub slink: SlinkCheckConfig,
    /// Network receiver counters (network channels only).
    pub net: Option<Arc<NetCounters>>,
    /// The address a network channel listens on (the port chosen when 0 was asked for).
    pub address: Option<LinkAddress>,
    /// The largest unit the channel will deliver, when known before the run (a file
    /// channel's): a reader whose superpages are smaller refuses the channel, since such a
    /// unit fits no superpage and would end the channel there.
    pub max_unit_bytes: Option<usize>,
}

/// A running card.
pub struct Card {
    name: String,
    channels: Vec<CardChannel>,
    /// One per engine thread of the card.
    engines: Vec<CardCpu>,
}

/// The state of one channel, for reports.
#[derive(Debug, Clone)]
pub struct ChannelReport {
    /// Card name.
    pub card: String,
    /// Channel number.
    pub channel: usize,
    /// The link, for people.
    pub link: String,
    /// Queues and counters.
    pub status: ChannelStatus,
    /// Units and bytes dropped by a network receiver (size errors), if any.
    pub net_dropped_units: u64,
    /// Datagrams the kernel dropped before a UDP receiver read them (socket buffer full).
    pub net_kernel_dropped_units: u64,
    /// A network channel's link state (`None` for the other channels).
    pub net_state: Option<LinkState>,
}

/// Refuses a channel whose largest unit (when known: [`CardChannel::max_unit_bytes`]) would not
/// fit a superpage of `superpage_bytes`: the error names the channel, its link and both sizes.
pub fn check_unit_fits(channel: &CardChannel, superpage_bytes: usize) -> Result<(), String> {
    match channel.max_unit_bytes {
        Some(unit) if unit > superpage_bytes => Err(format!(
            "{}: a unit of {unit} bytes, larger than the reader's superpages of \
             {superpage_bytes} bytes (it would fit none, and the channel would end there)",
            channel.link
        )),
        _ => Ok(()),
    }
}

impl Card {
    /// Starts every channel of `spec`: the generator, file and replay channels on one engine
    /// thread named after the card, each network channel on its own (`<card>-ch<N>`).
    pub fn start(spec: &CardSpec) -> Result<Card, CardError> {
        let mut started: Vec<Option<CardChannel>> = Vec::with_capacity(spec.channels.len());
        let mut engines = Vec::new();
        let mut pending = Vec::new();
        for (i, ch) in spec.channels.iter().enumerate() {
            match prepare_channel(&spec.name, i, ch)? {
                Prepared::Started(c, cpu) => {
                    engines.push(cpu);
                    started.push(Some(c));
                }
                Prepared::Generator(g, meta) => {
                    pending.push((i, ch.config, g, meta));
                    started.push(None);
                }
            }
        }
        if !pending.is_empty() {
            let first = pending[0].0;
            let (index, lanes, metas): (Vec<_>, Vec<_>, Vec<_>) = pending.into_iter().fold(
                (Vec::new(), Vec::new(), Vec::new()),
                |(mut a, mut b, mut c), (i, config, g, meta)| {
                    a.push(i);
                    b.push((config, g));
                    c.push(meta);
                    (a, b, c)
                },
            );
            let chans =
                EmulatedChannel::<Superpage>::start_card(&spec.name, lanes).map_err(|source| {
                    CardError::Io {
                        card: spec.name.clone(),
                        channel: first,
                        what: "start the card's engine thread".into(),
                        source,
                    }
                })?;
            if let Some(c) = chans.first() {
                engines.push(c.card_cpu());
            }
            for ((i, ch), meta) in index.into_iter().zip(chans).zip(metas) {
                started[i] = Some(CardChannel {
                    status: ch.status_reader(),
                    channel: Box::new(ch),
                    ..meta
                });
            }
        }
        Ok(Card {
            name: spec.name.clone(),
            channels: started.into_iter().flatten().collect(),
            engines,
        })
    }

    /// CPU time the card's engine threads have used so far, in nanoseconds (what the
    /// emulation cost).
    pub fn cpu_ns(&self) -> u64 {
        self.engines.iter().map(CardCpu::ns).sum()
    }

    /// Engine threads of the card.
    pub fn threads(&self) -> usize {
        self.engines.len()
    }

    /// The card's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The channels.
    pub fn channels(&self) -> &[CardChannel] {
        &self.channels
    }

    /// Every channel's state.
    pub fn report(&self) -> Vec<ChannelReport> {
        self.channels
            .iter()
            .enumerate()
            .map(|(i, c)| ChannelReport {
                card: self.name.clone(),
                channel: i,
                link: c.link.clone(),
                status: c.channel.status(),
                net_dropped_units: c.net.as_ref().map_or(0, |n| {
                    n.dropped_units.load(std::sync::atomic::Ordering::Relaxed)
                }),
                net_kernel_dropped_units: c.net.as_ref().map_or(0, |n| {
                    n.kernel_dropped_units
                        .load(std::sync::atomic::Ordering::Relaxed)
                }),
                net_state: c.net.as_ref().map(|n| n.state()),
            })
            .collect()
    }
}

/// Starts one channel of `spec` as channel `i` of card `card`, on an engine thread of its own
/// (named `<card>-ch<i>`): what [`Card::start`] does for a channel, for a reader (a readout
/// node) that keeps its channels itself. The channel is given no superpages.
pub fn start_channel(card: &str, i: usize, spec: &ChannelSpec) -> Result<CardChannel, CardError> {
    match prepare_channel(card, i, spec)? {
        Prepared::Started(c, _) => Ok(c),
        Prepared::Generator(g, meta) => {
            let name = format!("{card}-ch{i}");
            let ch =
                EmulatedChannel::<Superpage>::start(&name, spec.config, g).map_err(|source| {
                    CardError::Io {
                        card: card.to_string(),
                        channel: i,
                        what: "start the channel's engine thread".into(),
                        source,
                    }
                })?;
            Ok(CardChannel {
                status: ch.status_reader(),
                channel: Box::new(ch),
                ..meta
            })
        }
    }
}

/// A channel ready to join its card's engine, or started on an engine of its own.
enum Prepared {
    /// The source, and the channel's description (its `channel` a placeholder until the
    /// card's engine starts).
    Generator(Box<dyn Generator>, CardChannel),
    /// A network channel on its own engine thread.
    Started(CardChannel, CardCpu),
}

/// A `DmaChannel` that is never used: the placeholder of a channel whose card has not started.
struct NotStarted;

impl DmaChannel<Superpage> for NotStarted {
    fn push_superpage(&self, superpage: Superpage) -> Result<(), Superpage> {
        Err(superpage)
    }
    fn pop_superpage(&self) -> Option<crate::dma::Filled<Superpage>> {
        None
    }
    fn transfer_queue_available(&self) -> usize {
        0
    }
    fn status(&self) -> ChannelStatus {
        not_started()
    }
}

/// The status of a channel that never started.
fn not_started() -> ChannelStatus {
    ChannelStatus {
        link_up: false,
        transfer_queue_len: 0,
        ready_queue_len: 0,
        counters: crate::dma::ChannelCounters::default(),
    }
}

fn prepare_channel(card: &str, i: usize, spec: &ChannelSpec) -> Result<Prepared, CardError> {
    let name = format!("{card}-ch{i}");
    let io = |what: String| {
        let card = card.to_string();
        move |source| CardError::Io {
            card,
            channel: i,
            what,
            source,
        }
    };
    let slink_check = |c: &SlinkConfig| SlinkCheckConfig {
        framing: c.framing,
        crc: c.crc,
        l1id_wrap: c.l1id_wrap,
    };
    let boxed = |ch: EmulatedChannel<Superpage>| -> Box<dyn DmaChannel<Superpage>> { Box::new(ch) };
    let placeholder = || -> Box<dyn DmaChannel<Superpage>> { Box::new(NotStarted) };
    let no_status = || StatusReader::fixed(not_started());
    Ok(match &spec.source {
        ChannelSource::Felix(cfg) => {
            let g = FelixGenerator::new(cfg).map_err(|source| CardError::Generator {
                card: card.to_string(),
                channel: i,
                source,
            })?;
            Prepared::Generator(
                Box::new(g),
                CardChannel {
                    channel: placeholder(),
                    status: no_status(),
                    link: format!(
                        "FELIX emulator, {} E-links, {} B blocks, {}-bit trailers",
                        cfg.elinks.len(),
                        cfg.block_size,
                        if cfg.trailer == TrailerSize::Bits32 {
                            32
                        } else {
                            16
                        }
                    ),
                    mode: LinkMode::Felix,
                    block_size: cfg.block_size,
                    slink: SlinkCheckConfig::default(),
                    net: None,
                    address: None,
                    max_unit_bytes: None,
                },
            )
        }
        ChannelSource::Slink(cfg) => Prepared::Generator(
            Box::new(SlinkGenerator::new(*cfg)),
            CardChannel {
                channel: placeholder(),
                status: no_status(),
                link: format!(
                    "S-LINK emulator, source {:#010x}, {}..{} data words{}{}",
                    cfg.source_id,
                    cfg.data_words.min,
                    cfg.data_words.max,
                    if cfg.framing { ", framed" } else { "" },
                    if cfg.crc { ", CRC" } else { "" }
                ),
                mode: LinkMode::Slink,
                block_size: 0,
                slink: slink_check(cfg),
                net: None,
                address: None,
                max_unit_bytes: None,
            },
        ),
        ChannelSource::File { path, looping } => {
            let file = LinkFile::read(path).map_err(|source| CardError::LinkFile {
                card: card.to_string(),
                channel: i,
                source,
            })?;
            let h = *file.header();
            let max_unit = file.max_unit();
            let player =
                FilePlayer::new(Arc::new(file), *looping).map_err(|source| CardError::Player {
                    card: card.to_string(),
                    channel: i,
                    source,
                })?;
            Prepared::Generator(
                Box::new(player),
                CardChannel {
                    channel: placeholder(),
                    status: no_status(),
                    link: format!(
                        "file player, {}{}",
                        path.display(),
                        if *looping { ", looping" } else { "" }
                    ),
                    mode: h.mode,
                    block_size: h.block_size as usize,
                    slink: SlinkCheckConfig {
                        framing: h.framing,
                        crc: h.crc,
                        l1id_wrap: h.l1id_wrap,
                    },
                    net: None,
                    address: None,
                    max_unit_bytes: Some(max_unit),
                },
            )
        }
        ChannelSource::Net {
            address,
            mode,
            block_size,
            slink,
            end_with_sender,
        } => {
            let rule = match mode {
                LinkMode::Felix => UnitRule::Block(*block_size),
                LinkMode::Slink => UnitRule::Words(crate::net::MAX_NET_UNIT),
            };
            let bind = io(format!("listen on {address}"));
            let (channel, status, net, bound, cpu) = match address {
                LinkAddress::Udp(a) => {
                    let r = UdpReceiver::bind(*a, rule).map_err(bind)?;
                    let net = r.counters();
                    let bound = r.local_addr().map(LinkAddress::Udp).unwrap_or(*address);
                    let ch = EmulatedChannel::start(&name, spec.config, r)
                        .map_err(io("start".into()))?;
                    let cpu = ch.card_cpu();
                    let status = ch.status_reader();
                    (boxed(ch), status, net, bound, cpu)
                }
                LinkAddress::Tcp(a) => {
                    let r = TcpReceiver::bind(*a, rule)
                        .map_err(bind)?
                        .end_with_sender(*end_with_sender);
                    let net = r.counters();
                    let bound = r.local_addr().map(LinkAddress::Tcp).unwrap_or(*address);
                    let ch = EmulatedChannel::start(&name, spec.config, r)
                        .map_err(io("start".into()))?;
                    let cpu = ch.card_cpu();
                    let status = ch.status_reader();
                    (boxed(ch), status, net, bound, cpu)
                }
            };
            let started = CardChannel {
                channel,
                status,
                link: format!(
                    "network input {bound}, {}",
                    match mode {
                        LinkMode::Felix => "FELIX blocks",
                        LinkMode::Slink => "S-LINK fragments",
                    }
                ),
                mode: *mode,
                block_size: *block_size,
                slink: *slink,
                net: Some(net),
                address: Some(bound),
                max_unit_bytes: None,
            };
            Prepared::Started(started, cpu)
        }
    })
}

#[cfg(test)]
mod tests {
    use rodeo_files::linkfile::{LinkFileHeader, LinkFileWriter};

    use super::*;

    /// A file channel says its largest unit, and a reader with smaller superpages refuses it
    /// (before: the unit fit no superpage and the channel ended there, as if the file were
    /// done, the rest of it never played).
    #[test]
    fn a_file_unit_larger_than_the_readers_superpages_is_refused() {
        let header = LinkFileHeader {
            mode: LinkMode::Slink,
            block_size: 0,
            framing: false,
            crc: false,
            l1id_wrap: 1 << 24,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.link");
        let mut w = LinkFileWriter::create(&path, &header).unwrap();
        for len in [64usize, 200_000, 64] {
            w.write_unit(&vec![0u8; len]).unwrap();
        }
        w.finish().unwrap();
        let card = Card::start(&CardSpec {
            name: "file0".into(),
            channels: vec![ChannelSpec {
                source: ChannelSource::File {
                    path,
                    looping: false,
                },
                config: EmulatedConfig::default(),
            }],
        })
        .unwrap();
        let ch = &card.channels()[0];
        assert_eq!(ch.max_unit_bytes, Some(200_000));
        let e = check_unit_fits(ch, 128 * 1024).unwrap_err();
        assert!(e.contains("200000 bytes") && e.contains("131072"), "{e}");
        assert!(check_unit_fits(ch, 256 * 1024).is_ok());
    }
}
