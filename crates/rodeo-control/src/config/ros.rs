//! `[ros]`: the readout nodes, their channels and what feeds each ROB (emulated S-LINK or
//! FELIX cards, replayed files, the network, link capture files).

use serde::{Deserialize, Serialize};

use super::address::host_port;
use super::error::{num, Checks};
use super::l1::rate_ok;
use rodeo_ros::cli_values::MAX_CHANNELS;

/// `[ros]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RosSection {
    /// Nodes.
    pub nodes: usize,
    /// Channels per node.
    pub channels: usize,
    /// Data words per fragment.
    pub fragment_words: u32,
    /// Store pages (4 KiB each) per readout channel: the node's buffer, which holds every
    /// event in flight and what the emulated inputs write ahead of the L1.
    pub pages_per_channel: usize,
    /// Sub-detector id.
    pub subdetector: u8,
    /// What feeds each ROB.
    pub input: RosInput,
    /// [`RosInput::Dma`]: where the emulated cards write (store pages or superpages).
    pub dma_into: DmaInto,
    /// E-links per ROB for [`RosInput::Swrod`].
    pub elinks: usize,
    /// Files replayed by [`RosInput::Replay`].
    pub replay_files: Vec<String>,
    /// Replay rate per ROB (0: unpaced).
    pub replay_rate_hz: f64,
    /// Replay the files again after the last event.
    pub replay_loop: bool,
    /// L1IDs of the replay.
    pub replay_l1id: ReplayL1id,
    /// Source ids renamed for the replay: `[id in the file, ROB id here]`.
    #[serde(deserialize_with = "source_pairs")]
    pub replay_source_map: Vec<[u32; 2]>,
    /// [`RosInput::Network`]: one address per ROB (`udp://` or `tcp://HOST:PORT`).
    pub listen: Vec<String>,
    /// What the network input carries.
    pub listen_mode: ListenMode,
    /// Network S-LINK fragments are framed by control words.
    pub listen_framing: bool,
    /// Network S-LINK fragments carry a CRC word.
    pub listen_crc: bool,
    /// TCP: a ROB's input ends when its sender closes the connection.
    pub listen_end_on_close: bool,
    /// [`RosInput::File`]: one S-LINK link capture file per ROB.
    pub link_files: Vec<String>,
    /// Play the link files in a loop.
    pub link_loop: bool,
    /// ZeroMQ high-water mark of each readout node's request server, in messages.
    pub high_water_mark: u32,
    /// Seconds an input may wait for its first data or stay silent before it is lost and a
    /// problem of the run (0: never).
    pub input_silence_seconds: f64,
}

/// `ros.pages_per_channel` when not set: 2 MiB of 4 KiB pages per channel, 2,044 events in
/// flight with the default fragments. Measured against 1,024 pages (docs/configuration.md,
/// "Events in flight must fit the readout channels"): 3-5% less CPU per L1 accept and 5%
/// more L1 rate (the emulated cards write ahead into fewer pages, still in the caches when
/// reused), and half the memory to warm before a run.
pub const DEFAULT_PAGES_PER_CHANNEL: usize = 512;
/// The fewest `ros.pages_per_channel`.
pub const MIN_PAGES_PER_CHANNEL: usize = 16;
/// The most `ros.pages_per_channel` (4 GiB of pages per channel).
pub const MAX_PAGES_PER_CHANNEL: usize = 1 << 20;

/// `[ros] listen_mode`: the framing of a network input.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ListenMode {
    /// S-LINK ROD fragments.
    Slink,
    /// FELIX blocks of E-link packets.
    Felix,
}

/// `[ros] replay_l1id`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReplayL1id {
    /// The files' L1IDs.
    Keep,
    /// 0, 1, 2, ... in file order.
    Renumber,
}

impl Default for RosSection {
    fn default() -> Self {
        RosSection {
            nodes: 1,
            channels: 12,
            fragment_words: 200,
            pages_per_channel: DEFAULT_PAGES_PER_CHANNEL,
            subdetector: 0x41,
            input: RosInput::Dma,
            dma_into: DmaInto::Auto,
            elinks: 4,
            replay_files: Vec::new(),
            replay_rate_hz: 0.0,
            replay_loop: false,
            replay_l1id: ReplayL1id::Renumber,
            replay_source_map: Vec::new(),
            listen: Vec::new(),
            listen_mode: ListenMode::Slink,
            listen_framing: false,
            listen_crc: false,
            listen_end_on_close: true,
            link_files: Vec::new(),
            link_loop: false,
            high_water_mark: 10_000,
            input_silence_seconds: 10.0,
        }
    }
}

/// What feeds a readout node's ROBs (`[ros] input`).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RosInput {
    /// Emulated S-LINK card threads writing fragments into superpages.
    Dma,
    /// Per ROB one SW ROD fragment builder fed by an emulated FELIX card.
    Swrod,
    /// Per ROB an emulated S-LINK card replaying raw-data files.
    Replay,
    /// Per ROB a network receiver (UDP or TCP) of S-LINK fragments.
    Network,
    /// Per ROB an S-LINK link capture file.
    File,
}

/// `[ros] dma_into`: where the emulated S-LINK cards of `input = "dma"` write their fragments.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DmaInto {
    /// Store pages when whole fragments fill most of a page
    /// (`rodeo_ros::inputs::page_dma::fits_page`), superpages otherwise.
    Auto,
    /// The store's own pages, checked and indexed where they lie
    /// (`rodeo_ros::inputs::page_dma`); refused for fragments that fill too little of a page.
    Pages,
    /// Superpages, checked and copied into the store (`rodeo_ros::inputs::dma`).
    Superpages,
}

impl RosSection {
    /// ROBs of the partition (`nodes` x `channels`), saturating: the checks ask it of counts
    /// their own rules refuse (any size TOML allows), and a wrapped product would pass for a
    /// small one.
    pub fn robs(&self) -> usize {
        self.nodes.saturating_mul(self.channels)
    }

    /// Checks this section's own values, and `l1.l1id_wrap` (`l1id_wrap`) against the SW ROD
    /// input, each error naming its field (other checks across sections, and the limits of
    /// the readout's memory, are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self, l1id_wrap: u32, c: &mut Checks) {
        if self.nodes == 0 || self.nodes > 32 {
            c.bad("ros.nodes", self.nodes, "1..=32");
        }
        if self.channels == 0 || self.channels > MAX_CHANNELS {
            c.bad("ros.channels", self.channels, format!("1..={MAX_CHANNELS}"));
        }
        if !(MIN_PAGES_PER_CHANNEL..=MAX_PAGES_PER_CHANNEL).contains(&self.pages_per_channel) {
            c.bad(
                "ros.pages_per_channel",
                self.pages_per_channel,
                format!("{MIN_PAGES_PER_CHANNEL}..={MAX_PAGES_PER_CHANNEL}"),
            );
        }
        if self.input != RosInput::Dma && self.dma_into != DmaInto::Auto {
            c.bad(
                "ros.dma_into",
                format!("{:?} with ros.input = {:?}", self.dma_into, self.input).to_lowercase(),
                "\"auto\": it chooses where the emulated S-LINK cards of ros.input = \"dma\" \
                 write, and no other input has them",
            );
        }
        if self.fragment_words == 0 || self.fragment_words > 1 << 20 {
            c.bad("ros.fragment_words", self.fragment_words, "1..=1048576");
        }
        if self.elinks == 0 || self.elinks > 2048 {
            c.bad("ros.elinks", self.elinks, "1..=2048");
        } else if self.input == RosInput::Swrod {
            self.check_swrod(l1id_wrap, c);
        }
        if self.input == RosInput::Replay
            && (self.replay_files.is_empty() || self.replay_files.iter().any(|f| f.is_empty()))
        {
            c.bad(
                "ros.replay_files",
                format!("{:?}", self.replay_files),
                "at least one raw-data file path with ros.input = \"replay\"",
            );
        }
        if !rate_ok(self.replay_rate_hz) {
            c.bad(
                "ros.replay_rate_hz",
                num(self.replay_rate_hz),
                "fragments per second: 0 (unpaced) or 0.001..=1000000000",
            );
        }
        let mut mapped = std::collections::HashSet::new();
        for [from, to] in &self.replay_source_map {
            if !mapped.insert(*from) {
                c.bad(
                    "ros.replay_source_map",
                    format!("[{from:#x}, {to:#x}]"),
                    "each file source id mapped once",
                );
            }
        }
        if self.input == RosInput::Network {
            self.check_listen(c);
        }
        let robs = self.robs();
        if !self.input_silence_seconds.is_finite()
            || !(0.0..=86_400.0).contains(&self.input_silence_seconds)
        {
            c.bad(
                "ros.input_silence_seconds",
                num(self.input_silence_seconds),
                "seconds in 0..=86400 (0: an input is never judged silent)",
            );
        }
        if self.input == RosInput::File
            && (self.link_files.len() != robs || self.link_files.iter().any(|f| f.is_empty()))
        {
            c.bad(
                "ros.link_files",
                format!("{:?}", self.link_files),
                "one S-LINK link capture file per ROB (ros.nodes x ros.channels, node by node) \
                 with ros.input = \"file\"",
            );
        }
    }

    /// `ros.elinks` (already within 1..=2048) and `ros.fragment_words` against the SW ROD's
    /// packets, and `l1.l1id_wrap` against its window.
    fn check_swrod(&self, l1id_wrap: u32, c: &mut Checks) {
        // Each E-link's packet: the fragment's share less 4 words, 1..=65535 payload words.
        let share = self.fragment_words as usize / self.elinks;
        if share < 5 {
            c.bad(
                "ros.elinks",
                self.elinks,
                "at most ros.fragment_words / 5 with ros.input = \"swrod\"",
            );
        } else if share - 4 > 0xFFFF {
            c.bad(
                "ros.fragment_words",
                self.fragment_words,
                "at most 65539 x ros.elinks with ros.input = \"swrod\" (FELIX packets)",
            );
        }
        // The fragment builder's window of 512 L1IDs needs a cycle of 256 x 8 at least.
        if l1id_wrap < 8 {
            c.bad(
                "l1.l1id_wrap",
                l1id_wrap,
                ">= 8 with ros.input = \"swrod\" (the fragment builder's window)",
            );
        }
    }

    /// `ros.listen` with the network input: one address per ROB, each once, a port in
    /// 1..=65535; and `ros.listen_mode`.
    fn check_listen(&self, c: &mut Checks) {
        let robs = self.robs();
        if self.listen.len() != robs {
            c.bad(
                "ros.listen",
                format!(
                    "{:?} ({} addresses for {robs} ROBs)",
                    self.listen,
                    self.listen.len()
                ),
                "one address per ROB (ros.nodes x ros.channels, node by node) with ros.input \
                 = \"network\"",
            );
        }
        let mut seen = std::collections::HashSet::new();
        for a in &self.listen {
            let why = match host_port(a, &["tcp", "udp"]) {
                Err(why) => why,
                Ok(_) if !seen.insert(a) => "given twice".into(),
                Ok(_) => continue,
            };
            c.bad(
                "ros.listen",
                format!("{a:?} ({why})"),
                "\"tcp://HOST:PORT\" or \"udp://HOST:PORT\" with a port in 1..=65535, each \
                 address once",
            );
        }
        if self.listen_mode == ListenMode::Felix {
            c.bad(
                "ros.listen_mode",
                "\"felix\"",
                "\"slink\": a partition's network input takes S-LINK fragments for now \
                 (FELIX blocks: `rodeo cards --listen ADDRESS --listen-mode felix`)",
            );
        }
    }
}

/// `ros.replay_source_map`'s entries, each exactly two ids (a third was dropped in silence:
/// a fixed-size array reads its first two, a QA pass).
fn source_pairs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<[u32; 2]>, D::Error> {
    let entries = <Vec<Vec<u32>> as serde::Deserialize>::deserialize(d)?;
    entries
        .into_iter()
        .map(|e| match e[..] {
            [from, to] => Ok([from, to]),
            _ => Err(serde::de::Error::custom(format!(
                "an entry of {} ids ({e:?}): each entry is [id in the file, ROB id here]",
                e.len()
            ))),
        })
        .collect()
}
