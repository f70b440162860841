//! What the partition's readout nodes are built with, as numbers the checks use: the event
//! store's pages (the layout's `NodeConfig`, `rodeo_ros::node::NodeConfig::default()`), the
//! superpages each input kind allocates (`rodeo_ros::inputs`, `rodeo_ros::swrod::parts`),
//! the SW ROD's packet limit; and the checks that follow from them:
//!
//! - a fragment must fit what carries it: with `ros.input = "dma"` one DMA superpage holds a
//!   whole framed S-LINK fragment (a larger one is never written: the card's link goes down
//!   and every event is built without it); with `"swrod"` each E-link's packet must fit the
//!   builder's largest packet (longer ones are cut and the fragment never completes);
//! - every event in flight (`dcm.nodes` x `dcm.slots`, one per DCM slot) holds one fragment
//!   on every readout channel until it is decided and cleared: a channel that cannot hold as
//!   many leaves the later events waiting for room, their requests time out and they are built
//!   without the node's fragments (partial), or worse (the measured `dcm.nodes = 60,
//!   slots = 4096`: 1.4 M partial events of 1.4 M, unbalanced).
//!
//! The constants below copy private values of rodeo-ros (named at each); the tests of
//! `tests/config_limits.rs` build real readout nodes at the limits and one past them, so a
//! change there fails here.

use std::borrow::Cow;

use rodeo_cards::generator::SlinkConfig;
use rodeo_format::felix::packet_len;
use rodeo_format::fragment::{ROD_HEADER_WORDS, ROD_TRAILER_WORDS};
use rodeo_ros::inputs::dma::dma_superpage_bytes;
use rodeo_ros::inputs::page_dma::{fits_page, page_unit_words, MIN_PAGE_USE};
use rodeo_ros::node::NodeConfig;
use rodeo_ros::store::ROB_HEADER_WORDS;
use rodeo_swrod::SwRodConfig;

use super::error::Checks;
use super::ros::{DmaInto, RosInput, RosSection};
use super::PartitionConfig;

/// The largest superpage of the emulated S-LINK cards of `ros.input = "dma"` (the readout
/// node's own figure, with which it refuses a fragment too large).
pub use rodeo_ros::inputs::dma::DMA_SUPERPAGE_BYTES;
/// Superpages per channel of the emulated S-LINK and replay cards
/// (`rodeo_ros::inputs::dma::emulated_cards`, `depth`).
pub const DMA_SUPERPAGES_PER_CHANNEL: usize = 8;
/// The smallest superpage of `ros.input = "replay"` (larger when a file's fragment needs it;
/// `rodeo_ros::inputs::replay::build`).
pub const REPLAY_SUPERPAGE_BYTES: usize = 256 * 1024;
/// Superpage size and count per channel of the network and file inputs
/// (`rodeo_ros::inputs::card_channels`, `LINK_SUPERPAGE_BYTES`, `depth`).
pub const LINK_SUPERPAGE_BYTES: usize = 128 * 1024;
/// See [`LINK_SUPERPAGE_BYTES`].
pub const LINK_SUPERPAGES_PER_CHANNEL: usize = 8;
/// Superpage size and count per ROB of the (unpaced) SW ROD input
/// (`rodeo_ros::swrod::parts`, `SWROD_UNPACED_SUPERPAGE_BYTES`, `SWROD_SUPERPAGES`).
pub const SWROD_SUPERPAGE_BYTES: usize = 64 * 1024;
/// See [`SWROD_SUPERPAGE_BYTES`].
pub const SWROD_SUPERPAGES_PER_CHANNEL: usize = 2;
/// The SW ROD builders' window per ROB, in L1IDs (`rodeo_ros::swrod::parts`: half the FELIX
/// block size); their block pool holds two windows per ROB.
pub const SWROD_WINDOW: usize = rodeo_format::felix::DEFAULT_BLOCK_SIZE / 2;

/// The readout node's store as the partition builds it (`Layout::new`: `ros.pages_per_channel`
/// pages of `NodeConfig`'s default size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreShape {
    /// Bytes per page.
    pub page_bytes: usize,
    /// Pages per channel.
    pub pages_per_channel: usize,
    /// Index entries per channel (the store's default: four per page).
    pub index_per_channel: usize,
}

impl StoreShape {
    /// The store of each channel of the partition configured with `ros`.
    pub fn of_partition(ros: &RosSection) -> StoreShape {
        StoreShape {
            page_bytes: NodeConfig::default().page_bytes,
            pages_per_channel: ros.pages_per_channel,
            index_per_channel: 4 * ros.pages_per_channel,
        }
    }

    /// Bytes of store pages per channel.
    pub fn channel_bytes(&self) -> usize {
        self.page_bytes * self.pages_per_channel
    }

    /// Fragments of `words` words (ROB header included) one channel holds at once: whole
    /// fragments per page (a fragment larger than a page takes a chain of fresh pages), one
    /// page left for the write cursor, at most the index's entries.
    pub fn fragments_per_channel(&self, words: usize) -> usize {
        let page_words = self.page_bytes / 4;
        let pages = self.pages_per_channel.saturating_sub(1);
        let by_pages = if words <= page_words {
            pages * (page_words / words.max(1))
        } else {
            pages / words.div_ceil(page_words)
        };
        by_pages.min(self.index_per_channel)
    }
}

impl PartitionConfig {
    /// Words of one ROB fragment as the store keeps it (ROB header, ROD header, status, data,
    /// trailer), for inputs whose fragment size the configuration sets (`dma`, `swrod`: an
    /// upper bound, the builder's block); `None` for fragments from outside (`replay`,
    /// `network`, `file`).
    pub fn stored_fragment_words(&self) -> Option<usize> {
        let r = &self.ros;
        match r.input {
            // In a store page: headroom (the ROB header less one word), the framed fragment.
            RosInput::Dma if self.dma_into_pages() => Some(page_unit_words(r.fragment_words)),
            RosInput::Dma => {
                Some(ROB_HEADER_WORDS + ROD_HEADER_WORDS + 1 + r.fragment_words as usize + 3)
            }
            RosInput::Swrod => {
                let block = self.swrod_block_bytes()? / 4;
                Some(ROB_HEADER_WORDS + ROD_HEADER_WORDS + block + ROD_TRAILER_WORDS)
            }
            RosInput::Replay | RosInput::Network | RosInput::File => None,
        }
    }

    /// True when the emulated S-LINK cards of `ros.input = "dma"` write into the store's own
    /// pages (`rodeo_ros::inputs::page_dma`): `ros.dma_into = "pages"`, or `"auto"` when whole
    /// framed fragments fill at least 80% of a store page (the default partition's four
    /// 222-word units fill 87% of its 1,024 words); false for the superpage input and every
    /// other `ros.input`.
    pub fn dma_into_pages(&self) -> bool {
        let r = &self.ros;
        r.input == RosInput::Dma
            && match r.dma_into {
                DmaInto::Pages => true,
                DmaInto::Superpages => false,
                DmaInto::Auto => fits_page(r.fragment_words, self.store_page_words()),
            }
    }

    /// Where the emulated S-LINK cards of `ros.input = "dma"` write, in words, for `config
    /// check` to say (`None` for another input): store pages or superpages, the `dma_into`
    /// that chose it and, for `"auto"`, why.
    pub fn dma_path(&self) -> Option<String> {
        let r = &self.ros;
        if r.input != RosInput::Dma {
            return None;
        }
        let page = self.store_page_words();
        let unit = page_unit_words(r.fragment_words);
        let per_page = page / unit;
        // Rounded down, so that a fill just under the bar never reads as the bar.
        let fill = 100 * per_page * unit / page;
        let pages = self.dma_into_pages();
        let into = if pages { "store pages" } else { "superpages" };
        let setting = format!("{:?}", r.dma_into).to_lowercase();
        Some(if r.dma_into == DmaInto::Auto {
            format!(
                "emulated S-LINK cards writing into {into} (ros.dma_into = \"auto\": \
                 {per_page} fragment{} of {unit} words fill{} {fill}% of a {page}-word store \
                 page, {} {}%)",
                if per_page == 1 { "" } else { "s" },
                if per_page == 1 { "s" } else { "" },
                if pages { "at least" } else { "under" },
                100 * MIN_PAGE_USE.0 / MIN_PAGE_USE.1
            )
        } else {
            format!("emulated S-LINK cards writing into {into} (ros.dma_into = \"{setting}\")")
        })
    }

    /// Words of one page of the readout nodes' stores.
    fn store_page_words(&self) -> usize {
        NodeConfig::default().page_bytes / 4
    }

    /// Events in flight at most: one per DCM slot (the supervisor's credits).
    pub fn events_in_flight(&self) -> usize {
        self.dcm.nodes.saturating_mul(self.dcm.slots)
    }

    /// The largest `ros.fragment_words` the DMA input carries: a framed S-LINK fragment
    /// (control words, ROD header, status, data, trailer) in one superpage.
    pub fn max_dma_fragment_words() -> u32 {
        let overhead = dma_slink().fragment_words(0);
        (DMA_SUPERPAGE_BYTES / 4 - overhead) as u32
    }

    /// Bytes of each superpage of the DMA input's emulated cards for `ros.fragment_words`
    /// (`rodeo_ros::inputs::dma::dma_superpage_bytes`).
    pub fn dma_superpage_bytes(&self) -> usize {
        dma_superpage_bytes(dma_slink().fragment_words(self.ros.fragment_words))
    }

    /// Payload words of each E-link's packet with the SW ROD input (`None` when `elinks` or
    /// `fragment_words` leave none).
    pub(crate) fn swrod_payload_words(&self) -> Option<u32> {
        let share = (self.ros.fragment_words as usize).checked_div(self.ros.elinks)?;
        share.checked_sub(4).filter(|&p| p >= 1).map(|p| p as u32)
    }

    /// The SW ROD builders' block (pool chunk) in bytes: one fragment's packets of every
    /// E-link with their headers and the trailer's room.
    pub(crate) fn swrod_block_bytes(&self) -> Option<usize> {
        let payload = self.swrod_payload_words()?;
        let sw = SwRodConfig {
            thread_elinks: vec![(0..self.ros.elinks as u16).collect()],
            ..SwRodConfig::default()
        };
        Some(sw.block_bytes_for(packet_len(payload)))
    }

    /// Settings of `[ros]` that the chosen `ros.input` does not read, one warning each (a file
    /// list with the SW ROD input ran on emulated data, "ok", without a word: a QA pass,
    /// 2026-12-08). `rodeo config check` and every run print them.
    pub fn unused_settings(&self) -> Vec<String> {
        let r = &self.ros;
        let input = format!("{:?}", r.input).to_lowercase();
        let lists: [(&str, usize, RosInput); 3] = [
            ("ros.link_files", r.link_files.len(), RosInput::File),
            ("ros.replay_files", r.replay_files.len(), RosInput::Replay),
            ("ros.listen", r.listen.len(), RosInput::Network),
        ];
        lists
            .into_iter()
            .filter(|&(_, n, reader)| n > 0 && r.input != reader)
            .map(|(field, n, reader)| {
                format!(
                    "{field} lists {n} entr{} that ros.input = \"{input}\" does not read (only \
                     \"{}\" does): this partition takes no data from {}",
                    if n == 1 { "y" } else { "ies" },
                    format!("{reader:?}").to_lowercase(),
                    if n == 1 { "it" } else { "them" },
                )
            })
            .collect()
    }

    /// `ros.fragment_words` against the superpage or packet that carries it, and
    /// `dcm.slots` against what a readout channel holds (module docs).
    pub(super) fn check_readout(&self, c: &mut Checks) {
        let r = &self.ros;
        if r.link_loop {
            // Found by QA passes (2026-12-07): with the data-driven L1 one pass built, then
            // nothing until run.seconds, every loop counted as a link error; with the L1
            // emulator every event past the capture's L1IDs partial, and 86 million repeated
            // fragments dropped in 3 s (the loop runs unpaced). `rodeo cards --play --loop`
            // still loops a capture (the card's throughput, no store). With any other input it
            // did nothing and passed without a word (QA pass 10): refused there too.
            c.bad(
                "ros.link_loop",
                true,
                "not in a partition: each pass of a looping capture starts its L1IDs again at \
                 0, so every \
                 event past the capture's last L1ID would take no fragment of it and every \
                 later pass repeats L1IDs already built; play the files once (a run with \
                 l1.mode = \"readout\" ends with them), or replay raw data files with \
                 ros.input = \"replay\" and ros.replay_loop, which numbers each pass on (with \
                 any other ros.input it loops nothing: leave it out)",
            );
        }
        if c.has_any(&["ros.fragment_words", "ros.elinks"]) {
            return;
        }
        if r.input == RosInput::Dma
            && r.dma_into == DmaInto::Pages
            && !fits_page(r.fragment_words, self.store_page_words())
        {
            let (page, unit) = (self.store_page_words(), page_unit_words(r.fragment_words));
            c.bad(
                "ros.dma_into",
                format!(
                    "\"pages\" (ros.fragment_words = {}: units of {unit} words, {} to a store \
                     page of {page} words)",
                    r.fragment_words,
                    page / unit
                ),
                format!(
                    "\"auto\" or \"superpages\" for these fragments: the page DMA input \
                     stores whole fragments only, and they must fill at least {}% of a store \
                     page (the rest of each page is lost to the store); or choose \
                     ros.fragment_words so that they do (200 and 400 words do)",
                    100 * MIN_PAGE_USE.0 / MIN_PAGE_USE.1
                ),
            );
            return;
        }
        if r.input == RosInput::Dma
            && !self.dma_into_pages()
            && r.fragment_words > Self::max_dma_fragment_words()
        {
            let framed = dma_slink().fragment_words(r.fragment_words);
            c.bad(
                "ros.fragment_words",
                format!("{} ({framed} words framed)", r.fragment_words),
                format!(
                    "at most {} with ros.input = \"dma\": a fragment with its S-LINK framing \
                     must fit one DMA superpage of {} KiB ({} words); a larger one is never \
                     written and every event would lack it",
                    Self::max_dma_fragment_words(),
                    DMA_SUPERPAGE_BYTES >> 10,
                    DMA_SUPERPAGE_BYTES / 4
                ),
            );
            return;
        }
        if r.input == RosInput::Swrod {
            let max = SwRodConfig::default().max_packet_bytes;
            if let Some(p) = self.swrod_payload_words().filter(|&p| packet_len(p) > max) {
                // share = fragment_words / elinks (rounded down) must stay <= share_max.
                let share_max = (max - packet_len(0)) / 4 + 4;
                let most = (share_max + 1) * r.elinks - 1;
                c.bad(
                    "ros.fragment_words",
                    format!(
                        "{} ({} E-links: packets of {p} payload words, {} bytes)",
                        r.fragment_words,
                        r.elinks,
                        packet_len(p)
                    ),
                    format!(
                        "at most {most} with ros.input = \"swrod\" and ros.elinks = {}: each \
                         E-link's packet must fit the fragment builder's largest packet of \
                         {max} bytes (longer ones are cut and the fragment never completes); \
                         raise ros.elinks or lower ros.fragment_words",
                        r.elinks
                    ),
                );
                return;
            }
        }
        self.check_in_flight(c);
    }

    /// `dcm.nodes` x `dcm.slots` against the fragments a readout channel holds.
    fn check_in_flight(&self, c: &mut Checks) {
        if c.has_any(&[
            "dcm.nodes",
            "dcm.slots",
            "ros.nodes",
            "ros.channels",
            "ros.pages_per_channel",
        ]) {
            return;
        }
        let Some(words) = self.stored_fragment_words() else {
            return;
        };
        let store = StoreShape::of_partition(&self.ros);
        let holds = store.fragments_per_channel(words);
        let in_flight = self.events_in_flight();
        if in_flight <= holds {
            return;
        }
        let per_dcm = holds / self.dcm.nodes.max(1);
        let allowed: Cow<'static, str> = format!(
            "at most {per_dcm} per DCM here ({holds} events in flight): every event in flight \
             holds one fragment on every readout channel until it is cleared, and a channel \
             holds {holds} fragments of {words} words ({} pages of {} bytes, {} index entries); \
             the events beyond wait for room, their requests time out and they are built \
             without their fragments (partial). Lower dcm.slots or dcm.nodes, or \
             ros.fragment_words, or raise ros.pages_per_channel",
            store.pages_per_channel, store.page_bytes, store.index_per_channel
        )
        .into();
        c.bad(
            "dcm.slots",
            format!(
                "{} (dcm.nodes x dcm.slots = {} x {} = {in_flight} events in flight)",
                self.dcm.slots, self.dcm.nodes, self.dcm.slots
            ),
            allowed,
        );
    }
}

/// The S-LINK framing of the DMA input's emulated cards (`rodeo_ros::inputs::dma::build`).
fn dma_slink() -> SlinkConfig {
    SlinkConfig {
        framing: true,
        crc: false,
        ..SlinkConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file list the chosen input does not read is said (the run took emulated data from a
    /// SW ROD input, "ok"); the input that reads it says nothing.
    #[test]
    fn settings_the_input_does_not_read_are_warned() {
        let parse = |text: &str| PartitionConfig::from_toml(text, "t.toml").unwrap();
        let c = parse("[ros]\ninput = \"swrod\"\nlink_files = [\"a\", \"b\"]\nlisten = [\"tcp://127.0.0.1:1\"]\n");
        let w = c.unused_settings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("ros.link_files lists 2 entries") && w[0].contains("\"file\""));
        assert!(w[1].starts_with("ros.listen lists 1 entry") && w[1].contains("\"swrod\""));
        let c = parse("[ros]\nchannels = 1\ninput = \"file\"\nlink_files = [\"a\"]\n");
        assert!(c.unused_settings().is_empty());
    }

    #[test]
    fn a_channel_holds_whole_fragments_per_page_or_chains_of_pages() {
        let s = StoreShape {
            page_bytes: 4096,
            pages_per_channel: 1024,
            index_per_channel: 4096,
        };
        // The default partition: 221-word fragments, four to a page, 1023 pages.
        assert_eq!(s.fragments_per_channel(221), 4092);
        // Small fragments: the index is the limit.
        assert_eq!(s.fragments_per_channel(21), 4096);
        // Three pages per fragment.
        assert_eq!(s.fragments_per_channel(2100), 341);
        assert_eq!(s.channel_bytes(), 4 << 20);
        let ros = RosSection {
            pages_per_channel: 1024,
            ..RosSection::default()
        };
        assert_eq!(StoreShape::of_partition(&ros), s);
    }

    #[test]
    fn the_store_size_is_checked_and_sets_the_events_in_flight_a_partition_may_have() {
        let parse = |text: &str| PartitionConfig::from_toml(text, "t.toml");
        // The default: 512 pages, 2044 fragments of 221 words, 2 x 256 in flight.
        let c = parse("").unwrap();
        assert_eq!(c.ros.pages_per_channel, 512);
        assert_eq!(
            StoreShape::of_partition(&c.ros).fragments_per_channel(221),
            2044
        );
        // Out of range: refused naming the field and the range.
        for pages in [0, 15, (1 << 20) + 1] {
            let e = parse(&format!("[ros]\npages_per_channel = {pages}\n")).unwrap_err();
            assert_eq!(e.fields(), ["ros.pages_per_channel"], "{e}");
            assert!(e.to_string().contains("16..=1048576"), "{e}");
        }
        // 4 x 1000 events in flight: refused with 512 pages, saying which field admits them,
        // and taken with 1024.
        let e = parse("[dcm]\nnodes = 4\nslots = 1000\n").unwrap_err();
        assert_eq!(e.fields(), ["dcm.slots"], "{e}");
        assert!(e.to_string().contains("raise ros.pages_per_channel"), "{e}");
        let c = parse("[ros]\npages_per_channel = 1024\n[dcm]\nnodes = 4\nslots = 1000\n");
        assert_eq!(c.unwrap().events_in_flight(), 4000);
    }

    #[test]
    fn the_dma_limit_is_a_superpage_less_the_framing() {
        // 2 control words, 9 header words, 1 status word, 3 trailer words.
        assert_eq!(PartitionConfig::max_dma_fragment_words(), 65536 - 15);
        let mut c = PartitionConfig::default();
        c.ros.dma_into = DmaInto::Superpages;
        assert_eq!(c.stored_fragment_words(), Some(221));
        // Into store pages: the 7-word headroom, the framed fragment (its end word stays).
        c.ros.dma_into = DmaInto::Auto;
        assert_eq!(c.stored_fragment_words(), Some(222));
        c.ros.input = RosInput::Network;
        assert_eq!(c.stored_fragment_words(), None);
        // A fragment larger than a superpage with "auto" is refused as before.
        let e = PartitionConfig::from_toml("[ros]\nfragment_words = 70000\n", "t.toml");
        let e = e.unwrap_err();
        assert_eq!(e.fields(), ["ros.fragment_words"], "{e}");
        assert!(e.to_string().contains("at most 65521"), "{e}");
    }

    /// `ros.dma_into`: "auto" takes the store's pages when whole fragments fill 80% of one
    /// (200 and 400 data words) and the superpages when they do not (350 words: 73%); "pages"
    /// for fragments that do not fill them is refused naming the field, the units and the way
    /// out; a value other than "auto" with another input is refused, as it would do nothing.
    #[test]
    fn dma_into_takes_store_pages_that_fragments_fill_and_refuses_what_would_waste_them() {
        let parse = |text: &str| PartitionConfig::from_toml(text, "t.toml");
        let c = parse("").unwrap();
        assert_eq!(c.ros.dma_into, DmaInto::Auto);
        assert!(c.dma_into_pages());
        assert!(parse("[ros]\nfragment_words = 400\n")
            .unwrap()
            .dma_into_pages());
        let c = parse("[ros]\nfragment_words = 350\n").unwrap();
        assert!(!c.dma_into_pages());
        assert_eq!(c.stored_fragment_words(), Some(371));
        assert!(!parse("[ros]\ndma_into = \"superpages\"\n")
            .unwrap()
            .dma_into_pages());
        assert!(parse("[ros]\ndma_into = \"pages\"\n")
            .unwrap()
            .dma_into_pages());
        for words in [350, 600, 2000] {
            let e = parse(&format!(
                "[ros]\ndma_into = \"pages\"\nfragment_words = {words}\n"
            ))
            .unwrap_err();
            assert_eq!(e.fields(), ["ros.dma_into"], "{e}");
            let text = e.to_string();
            assert!(
                text.contains(&format!("fragment_words = {words}"))
                    && text.contains("80%")
                    && text.contains("\"superpages\""),
                "{text}"
            );
        }
        let e = parse("[ros]\ninput = \"swrod\"\ndma_into = \"pages\"\n").unwrap_err();
        assert_eq!(e.fields(), ["ros.dma_into"], "{e}");
        assert!(
            e.to_string().contains("pages with ros.input = swrod"),
            "{e}"
        );
        let e = parse("[ros]\ndma_into = \"ram\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("dma_into") && e.contains("superpages"), "{e}");
        // `config check` says which, and why.
        let said = |text: &str| parse(text).unwrap().dma_path().unwrap();
        assert_eq!(
            said(""),
            "emulated S-LINK cards writing into store pages (ros.dma_into = \"auto\": 4 \
             fragments of 222 words fill 86% of a 1024-word store page, at least 80%)"
        );
        assert!(said("[ros]\nfragment_words = 350\n").contains(
            "into superpages (ros.dma_into = \"auto\": 2 fragments of 372 words fill 72%"
        ));
        assert!(said("[ros]\nfragment_words = 2000\n[dcm]\nslots = 64\n")
            .contains("0 fragments of 2022 words"));
        assert!(said("[ros]\ndma_into = \"superpages\"\n")
            .ends_with("into superpages (ros.dma_into = \"superpages\")"));
        assert_eq!(
            parse("[ros]\ninput = \"swrod\"\n").unwrap().dma_path(),
            None
        );
        // Pages need no superpages: the memory estimate has none.
        let pages = parse("").unwrap();
        let superpages = parse("[ros]\ndma_into = \"superpages\"\n").unwrap();
        assert!(pages.estimate().host_bytes(&None) < superpages.estimate().host_bytes(&None));
    }
}
