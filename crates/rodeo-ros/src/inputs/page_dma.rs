//! The DMA input into the store's own pages, as a RobinNP stores fragments: per channel an
//! emulated S-LINK card whose DMA engine writes framed fragments straight into store pages it
//! was given from the channel's free pages ([`EventStore::lend`]), and the core thread checks
//! each one (the same S-LINK checks as [`super::dma::DmaInput`]) and indexes it where it lies
//! ([`EventStore::adopt_rod`]) instead of copying it from a superpage into the store.
//!
//! # The page's layout
//!
//! The card leaves [`HEADROOM_WORDS`] (7) words before each fragment's S-LINK begin word, as a
//! DMA engine configured with a headroom does; the core thread writes the fragment's 8-word ROB
//! header over the headroom and the begin word once the checks have its status, so the stored
//! ROB fragment (header, then the ROD words the card wrote) is contiguous. The end word after
//! it stays in the page, unread. Each unit (headroom and framed fragment) has the length the
//! card's descriptor reports ([`Filled::unit_bytes`]); a page whose units the card did not
//! report is not read (its words are dumped, and counted there).
//!
//! # When
//!
//! A node runs it for [`crate::node::NodeInput::DmaPages`]: the partition's `dma` input when
//! `ros.dma_into` is `"pages"`, or `"auto"` (the default) and the fragments fit, and `rodeo
//! ros` and `rodeo tester` `--input dma-pages`. It needs whole units to fill at least
//! [`MIN_PAGE_USE`] of a store page ([`fits_page`]; else the node is not built and `config
//! check` refuses `"pages"`): a page holds only whole units, so the rest of it is lost to the
//! store. Other fragment sizes take the superpage input and its copy ([`super::dma`], which
//! packs and chains fragments across pages). Measured against it (default partition,
//! `/usr/bin/time` around `rodeo run --events 300000`, CPU of every process,
//! docs/benchmarks-history-2026-12a.md, "fourteenth session"): in one process 6.6-6.8 us per
//! L1 accept at 270-281 kHz against 7.6-7.8 us at 230-240 kHz (7.5-8.2 against 8.6-8.8 in a
//! slower regime); with `--processes` no cheaper in total (7.1-7.5 against 7.3-7.4 us), its
//! readout node's process 0.1-0.4 us cheaper (`rodeo bench partition`).
//!
//! # Back-pressure
//!
//! The card gets pages only while the channel has free ones (all but [`crate::store::LEND_KEEP`])
//! and fewer than [`depth`] pages lent (empty at the card or holding fragments ahead of the L1
//! front: the card runs at most that far ahead of the L1, [`PAGE_DMA_DEPTH`]). When the store
//! is full, or the card that far ahead, its free-page queue runs dry and it stalls (XOFF). A
//! fragment the store refuses (a full index) is taken back from the checks and offered again
//! on the next poll, as with the superpage input.

use std::sync::Arc;

use rodeo_cards::dma::{
    DmaChannel, EmulatedChannel, EmulatedConfig, Fill, Filled, Generator, SuperpageBuffer,
};
use rodeo_cards::generator::SlinkGenerator;
use rodeo_format::slink::{SlinkCheckConfig, SlinkChecker, SlinkCounters, SlinkItem};

use super::dma::{checker_totals, framed_slink, slink_config, CHANNELS_PER_CARD};
use super::follow::Following;
use super::setup::{error_file, start_card, BuiltInput, ChannelSetup};
use super::watch::{LaneErrors, LaneProbe, ProbeSource};
use crate::node::error::NodeError;
use crate::server::input::{Input, POLL_BUDGET};
use crate::store::slink::ErrorDump;
use crate::store::{EventStore, IngestError, LentPage, ROB_HEADER_WORDS};

/// Words a card leaves free before each fragment's begin word: with the begin word, room for
/// the ROB header the core thread writes there.
pub const HEADROOM_WORDS: usize = ROB_HEADER_WORDS - 1;

/// Store pages a channel has lent at most ([`depth`]): empty ones at its card (its free-page
/// queue) and those holding fragments ahead of the L1 front (the newest L1ID the dataflow
/// named). With 4 KiB pages and the default partition's four fragments a page, the card runs
/// at most 1,024 fragments ahead of the L1, as a real link sends only what the L1 accepted,
/// instead of filling the whole store ahead: the pages it writes are then the ones the last
/// clears freed, still in the caches. Measured (`rodeo run`, default partition on this input,
/// 300,000 events, docs/benchmarks-history-2026-12a.md, "tenth session"): without the bound
/// (the whole store ahead) 7.0-7.5 us per L1 accept in one process, with it 6.1-6.8 us; 512
/// pages 6.6-7.2 us; 32 pages of queue ran at 150 kHz (the card waited for pages).
pub const PAGE_DMA_DEPTH: usize = 256;

/// The lent-page bound of a channel of `pages_per_channel` store pages: [`PAGE_DMA_DEPTH`],
/// or a quarter of the channel's pages if fewer (at least 1), so that a small store keeps pages
/// for the events in flight.
pub fn depth(pages_per_channel: usize) -> usize {
    (pages_per_channel / 4).clamp(1, PAGE_DMA_DEPTH)
}

/// The share of a store page the units of a fragment size must fill for the page DMA input
/// ([`fits`]), as a fraction `MIN_PAGE_USE.0 / MIN_PAGE_USE.1`.
pub const MIN_PAGE_USE: (usize, usize) = (4, 5);

/// Words of one unit (headroom and framed fragment) for `config`'s fragments.
fn unit_words(config: &ChannelSetup<'_>) -> usize {
    page_unit_words(config.fragment_words)
}

/// Words of one unit in a store page (headroom, then the framed S-LINK fragment: control
/// words, ROD header, status, `data_words` data words, trailer) for fragments of `data_words`
/// data words: what a fragment of this input takes of a page (the partition's checks count
/// fragments per channel with it).
pub fn page_unit_words(data_words: u32) -> usize {
    HEADROOM_WORDS + framed_slink().fragment_words(data_words)
}

/// True when the page DMA input carries fragments of `data_words` data words in store pages
/// of `page_words` words: the whole units that fit a page fill at least [`MIN_PAGE_USE`] of it
/// (the partition's `ros.dma_into = "auto"` takes this input then, the superpage input
/// otherwise).
pub fn fits_page(data_words: u32, page_words: usize) -> bool {
    let unit = page_unit_words(data_words);
    let used = (page_words / unit) * unit;
    used > 0 && used * MIN_PAGE_USE.1 >= page_words * MIN_PAGE_USE.0
}

/// [`fits_page`] for a node's channels.
pub(crate) fn fits(config: &ChannelSetup<'_>, page_words: usize) -> bool {
    fits_page(config.fragment_words, page_words)
}

/// A lent store page as a card's DMA buffer: the card writes it as bytes.
impl SuperpageBuffer for LentPage {
    fn as_bytes(&self) -> &[u8] {
        let words = self.words(0, self.page_words());
        // SAFETY: the same memory viewed as bytes: `u8` has no alignment requirement and no
        // invalid bit pattern, the length is the words' in bytes, and the shared borrow of
        // `self` covers the returned slice as it covered `words`.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), 4 * words.len()) }
    }

    fn as_bytes_mut(&mut self) -> &mut [u8] {
        let words = self.words_mut();
        // SAFETY: as in `as_bytes`; the exclusive borrow of `self` covers the returned slice,
        // and any bytes written there are valid words.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), 4 * words.len()) }
    }
}

/// A generator whose every unit is `G`'s unit behind [`HEADROOM_WORDS`] words it leaves as
/// they were: the card's DMA engine writing with a headroom.
pub struct Headroom<G> {
    inner: G,
}

impl<G: Generator> Generator for Headroom<G> {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let headroom = 4 * HEADROOM_WORDS;
        let mut fill = Fill::default();
        while fill.units < max_units {
            let Some(rest) = buf.get_mut(fill.bytes + headroom..) else {
                break;
            };
            let one = self.inner.fill(rest, 1);
            if one.units == 0 {
                break;
            }
            fill.push_unit(headroom + one.bytes);
        }
        fill
    }

    fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    fn waits_for_input(&self) -> bool {
        self.inner.waits_for_input()
    }
}

/// A page being read: the card's report of it, where its current unit starts, where in that
/// unit's framed fragment the checks resume, and the checker's knowledge of the unit's length.
struct Reading {
    filled: Filled<LentPage>,
    unit_at: usize,
    pos: usize,
    sized: Option<usize>,
}

struct PageLane {
    /// `None` once released (the card stopped and its pages given back).
    channel: Option<EmulatedChannel<LentPage>>,
    checker: SlinkChecker,
    current: Option<Reading>,
}

/// Per channel an emulated S-LINK card writing into the channel's store pages, read through
/// the S-LINK checks and indexed in place (module docs). Words the checks drop go to the error
/// dump.
pub struct PageDmaInput {
    lanes: Vec<PageLane>,
    /// Pages each channel may have lent at most: empty at its card, or holding fragments
    /// ahead of the L1 front ([`depth`]).
    depth: usize,
    /// Words of each unit (the card's descriptor is checked against it).
    unit: usize,
    dump: ErrorDump,
    errors: Arc<LaneErrors>,
}

impl PageDmaInput {
    /// The error dump (counters).
    pub fn dump(&self) -> &ErrorDump {
        &self.dump
    }

    /// Reads lane `c`'s pages into `store`, at most `budget` fragments; returns how many were
    /// consumed (stored, dropped as duplicates, or dropped by the checks).
    fn read_lane(&mut self, c: usize, store: &mut EventStore, mut budget: usize) -> u64 {
        let lane = &mut self.lanes[c];
        let Some(channel) = lane.channel.as_ref() else {
            return 0;
        };
        // The card's free-page queue, topped up from the channel's free pages while the
        // channel has fewer than `depth` pages lent (empty at the card, or ahead of the L1).
        let room = self.depth.saturating_sub(store.lent_pages(c));
        for _ in 0..channel.transfer_queue_available().min(room) {
            let Some(page) = store.lend(c) else {
                break;
            };
            if let Err(page) = channel.push_superpage(page) {
                store.take_back(page);
                break;
            }
        }
        let unit = self.unit;
        let framed_words = unit - HEADROOM_WORDS;
        let mut consumed = 0u64;
        while budget > 0 {
            if lane.current.is_none() {
                let Some(filled) = channel.pop_superpage() else {
                    break;
                };
                // The lines the checks read first (the first two units' begin and end words),
                // asked for from the card's core before they are needed.
                for i in 0..2 {
                    filled.superpage.prefetch(i * unit + HEADROOM_WORDS);
                    filled.superpage.prefetch((i + 1) * unit - 1);
                }
                lane.current = Some(Reading {
                    filled,
                    unit_at: 0,
                    pos: 0,
                    sized: Some(framed_words),
                });
            }
            let Some(r) = lane.current.as_mut() else {
                break;
            };
            let page = &r.filled.superpage;
            let used = (r.filled.bytes_used / 4).min(page.page_words());
            if r.filled.unit_bytes != 4 * unit && r.unit_at == 0 && used > 0 {
                // Not this input's units: nothing in it can be told apart safely.
                self.dump.dump(c, page.words(0, used));
                r.unit_at = used;
            }
            let mut blocked = false;
            while budget > 0 && r.unit_at + unit <= used {
                let framed = r
                    .filled
                    .superpage
                    .words(r.unit_at + HEADROOM_WORDS, framed_words);
                let before = r.pos;
                let Some(item) = lane
                    .checker
                    .next_item_sized(framed, &mut r.pos, &mut r.sized)
                else {
                    // The unit is done: on to the next, whose lines were asked for a unit ago.
                    r.unit_at += unit;
                    r.pos = 0;
                    r.sized = Some(framed_words);
                    r.filled
                        .superpage
                        .prefetch(r.unit_at + unit + HEADROOM_WORDS);
                    r.filled.superpage.prefetch(r.unit_at + 2 * unit - 1);
                    continue;
                };
                // Where the ROD fragment starts in the unit's framed words (1: after its begin
                // word, where its ROB header fits the headroom).
                let found = match item {
                    SlinkItem::Fragment(f) => {
                        let rod_at = (f.rod.as_ptr() as usize - framed.as_ptr() as usize) / 4;
                        Some((rod_at, f.rod.len(), f.extended_l1id, f.status))
                    }
                    SlinkItem::Dropped(d) => {
                        self.dump.dump(c, d.words);
                        None
                    }
                };
                if let Some((rod_at, rod_words, l1id, status)) = found {
                    // Its ROB header goes in the 8 words before it: the headroom and begin word
                    // of a well-formed unit; in a damaged one, words the checks dropped.
                    let rod_offset = r.unit_at + HEADROOM_WORDS + rod_at;
                    let page = &r.filled.superpage;
                    let header_at = rod_offset
                        .checked_sub(ROB_HEADER_WORDS)
                        .filter(|&o| o >= page.indexed_end());
                    let Some(offset) = header_at else {
                        // No room for the header before it (no begin word at the unit's
                        // start, or right behind a fragment just stored: counted by the checks
                        // as a missing begin word): dumped, not stored.
                        self.dump.dump(c, page.words(rod_offset, rod_words));
                        consumed += 1;
                        budget -= 1;
                        continue;
                    };
                    let page = &mut r.filled.superpage;
                    let adopted = store.adopt_rod(c, page, offset, rod_words, l1id, status);
                    if let Err(IngestError::Full) = adopted {
                        // Offered again on a later poll.
                        lane.checker.unread();
                        r.pos = before;
                        blocked = true;
                        break;
                    }
                }
                consumed += 1;
                budget -= 1;
            }
            if blocked {
                break;
            }
            if r.unit_at + unit > used {
                if r.unit_at < used {
                    // Words after the last whole unit (never written so by this card).
                    self.dump
                        .dump(c, r.filled.superpage.words(r.unit_at, used - r.unit_at));
                }
                self.errors.set(c, lane.checker.counters().errors());
                let done = lane.current.take().expect("read above");
                store.take_back(done.filled.superpage);
            }
        }
        consumed
    }
}

impl Input for PageDmaInput {
    fn poll(&mut self, store: &mut EventStore) -> u64 {
        (0..self.lanes.len())
            .map(|c| self.read_lane(c, store, POLL_BUDGET))
            .sum()
    }

    fn slink_counters(&self) -> SlinkCounters {
        checker_totals(self.lanes.iter().map(|l| &l.checker))
    }

    fn stalls(&self) -> u64 {
        self.lanes
            .iter()
            .filter_map(|l| l.channel.as_ref())
            .map(|ch| ch.status().counters.stalls)
            .sum()
    }

    fn finished(&self) -> bool {
        self.lanes.iter().all(|l| {
            l.current.is_none()
                && l.channel.as_ref().is_none_or(|ch| {
                    let s = ch.status();
                    !s.link_up && s.ready_queue_len == 0
                })
        })
    }

    fn release(&mut self, store: &mut EventStore) {
        // Every card stops first (their engines let go of the pages they write), then each
        // page comes back: the one being read, the filled ones, and, as the channels go, the
        // empty ones of their free-page queues (through the returned queue).
        for lane in &mut self.lanes {
            if let Some(ch) = lane.channel.as_mut() {
                ch.stop();
            }
        }
        for lane in &mut self.lanes {
            if let Some(r) = lane.current.take() {
                store.take_back(r.filled.superpage);
            }
            if let Some(ch) = lane.channel.take() {
                while let Some(f) = ch.pop_superpage() {
                    store.take_back(f.superpage);
                }
            }
        }
        store.reclaim();
    }
}

/// The node's DMA input into store pages (module docs): per channel an emulated S-LINK link
/// writing framed fragments of `config.fragment_words` data words behind a headroom, from
/// event `config.first_event` on, at most `rate_hz` fragments per second per channel, each
/// card given at most [`depth`] of its channel's `pages_per_channel` pages at a time;
/// [`CHANNELS_PER_CARD`] channels to a card (one engine thread). Only for fragments that
/// [`fits`] the store's pages.
pub(crate) fn build(
    config: &ChannelSetup<'_>,
    pages_per_channel: usize,
    rate_hz: Option<f64>,
) -> Result<BuiltInput, NodeError> {
    with_generators(config, depth(pages_per_channel), rate_hz, |c| {
        let mut g = SlinkGenerator::new(slink_config(config, c));
        g.skip(config.first_event);
        Headroom {
            inner: Following::new(g, config.front.cloned()),
        }
    })
}

/// [`build`] with channel `c`'s card running `generator(c)` (units of [`unit_words`] behind
/// their headroom), each card given at most `depth` pages at a time.
fn with_generators<G: Generator>(
    config: &ChannelSetup<'_>,
    depth: usize,
    rate_hz: Option<f64>,
    generator: impl Fn(usize) -> G,
) -> Result<BuiltInput, NodeError> {
    let card_config = EmulatedConfig {
        queue_depth: depth,
        max_units_per_s: rate_hz,
        ..EmulatedConfig::default()
    };
    let mut lanes = Vec::with_capacity(config.channels);
    let mut probes = Vec::with_capacity(config.channels);
    let check = SlinkCheckConfig {
        framing: true,
        crc: false,
        l1id_wrap: config.l1id_wrap,
    };
    let channels: Vec<usize> = (0..config.channels).collect();
    for (k, group) in channels.chunks(CHANNELS_PER_CARD).enumerate() {
        let generators = group.iter().map(|&c| (card_config, generator(c)));
        let card = start_card(config, k, generators.collect())?;
        for ch in card {
            probes.push(LaneProbe {
                address: "emulated".to_string(),
                source: ProbeSource::Channel(ch.status_reader()),
            });
            lanes.push(PageLane {
                channel: Some(ch),
                checker: SlinkChecker::new(check),
                current: None,
            });
        }
    }
    let input = PageDmaInput {
        lanes,
        depth,
        unit: unit_words(config),
        dump: ErrorDump::new(error_file(config)?, 10),
        errors: Arc::new(LaneErrors::new(config.channels)),
    };
    Ok(BuiltInput {
        errors: Some(Arc::clone(&input.errors)),
        input: Box::new(input),
        superpages: None,
        lanes: probes,
        net: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use rodeo_format::fragment::{RobFragment, Status};
    use rodeo_format::synth::check_counter;
    use rodeo_memory::{PagePool, PagePoolConfig};

    use rodeo_cards::generator::{SlinkConfig, WordRange};

    use super::*;
    use crate::store::{Lookup, StoreConfig};

    const SOURCE: u32 = 0x0041_0000;

    fn setup(channels: usize, fragment_words: u32) -> ChannelSetup<'static> {
        ChannelSetup {
            channels,
            fragment_words,
            base_source_id: SOURCE,
            l1id_wrap: 1 << 24,
            first_event: 0,
            error_file: None,
            card_cpu: None,
            front: None,
        }
    }

    fn store(channels: usize, page_bytes: usize, pages: usize) -> (PagePool, EventStore) {
        let pool = PagePool::new(PagePoolConfig {
            page_bytes,
            pages: channels * pages,
            ..PagePoolConfig::default()
        })
        .unwrap();
        let mut st =
            EventStore::new(&pool, &StoreConfig::with_channels(channels, SOURCE, pages)).unwrap();
        st.set_runs_ahead(true);
        (pool, st)
    }

    /// Polls until `done` holds (at most 10 s).
    fn poll_until(
        input: &mut dyn Input,
        st: &mut EventStore,
        mut done: impl FnMut(&EventStore) -> bool,
    ) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done(st) {
            assert!(
                Instant::now() < deadline,
                "the input did not get there in 10 s"
            );
            input.poll(st);
            st.reclaim();
        }
    }

    /// The words of channel `c`'s stored fragment of `l1id`, as a reply would send them.
    fn stored(st: &EventStore, c: usize, l1id: u32) -> Vec<u32> {
        let mut words = Vec::new();
        assert!(st.with_segments(c, l1id, |r| words.extend_from_slice(r.words())));
        words
    }

    #[test]
    fn a_lent_page_as_bytes_is_its_words() {
        let (_pool, mut st) = store(1, 256, 8);
        let mut page = st.lend(0).unwrap();
        let bytes = page.as_bytes_mut();
        assert_eq!(bytes.len(), 256);
        bytes[4..8].copy_from_slice(&0xdead_beefu32.to_le_bytes());
        bytes[252..].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(page.words(1, 1), [0xdead_beef]);
        assert_eq!(page.words(63, 1), [7]);
        assert_eq!(page.as_bytes()[4..8], 0xdead_beefu32.to_le_bytes());
        st.take_back(page);
    }

    #[test]
    fn the_headroom_generator_leaves_room_before_each_framed_fragment() {
        let config = setup(1, 20);
        let mut g = Headroom {
            inner: SlinkGenerator::new(slink_config(&config, 0)),
        };
        let mut buf = vec![0xffu8; 1000];
        let f = g.fill(&mut buf, u64::MAX);
        let unit = unit_words(&config);
        assert_eq!(f.unit_bytes, 4 * unit);
        assert_eq!(f.units as usize, 1000 / (4 * unit));
        assert_eq!(f.bytes, f.units as usize * 4 * unit);
        let word = |i: usize| u32::from_le_bytes(buf[4 * i..4 * i + 4].try_into().unwrap());
        for u in 0..f.units as usize {
            // The headroom is left as it was; the begin word follows it.
            assert_eq!(word(u * unit), 0xffff_ffff);
            assert_eq!(
                word(u * unit + HEADROOM_WORDS),
                rodeo_format::fragment::SLINK_BEGIN
            );
            assert_eq!(word((u + 1) * unit - 1), rodeo_format::fragment::SLINK_END);
        }
    }

    #[test]
    fn fits_asks_for_whole_units_filling_most_of_a_page() {
        // The default partition: 200 data words, 222-word units, four in a 1024-word page.
        assert_eq!(unit_words(&setup(1, 200)), 222);
        assert!(fits(&setup(1, 200), 1024));
        // 400 words: two 422-word units, 82% of the page.
        assert!(fits(&setup(1, 400), 1024));
        // 350 words: two 372-word units, 73%.
        assert!(!fits(&setup(1, 350), 1024));
        // Larger than a page.
        assert!(!fits(&setup(1, 2000), 1024));
        // The word-based forms the partition's checks use agree.
        for words in [1, 200, 350, 400, 800, 1010, 2000] {
            assert_eq!(page_unit_words(words), unit_words(&setup(1, words)));
            assert_eq!(fits_page(words, 1024), fits(&setup(1, words), 1024));
        }
        assert_eq!(depth(1024), PAGE_DMA_DEPTH);
        assert_eq!(depth(64), 16);
        assert_eq!(depth(2), 1);
    }

    /// The card's fragments are stored where it wrote them, as ROB fragments a reply sends
    /// unchanged: header with the channel's source id and status OK, the ROD fragment with its
    /// counter payload; with no clears the store fills, the card stalls, nothing is lost; and
    /// released, every page comes back.
    #[test]
    fn fragments_are_stored_in_place_back_pressure_loses_nothing_and_pages_come_back() {
        let config = setup(2, 20);
        // 128-word pages hold three units of 20 data words.
        let (_pool, mut st) = store(2, 512, 16);
        assert_eq!(st.page_words() / unit_words(&config), 3);
        // The dataflow has named L1IDs far ahead: no page is ahead of the L1 front, only the
        // store's room bounds the card.
        st.note_l1(1000);
        assert!(fits(&config, st.page_words()));
        let BuiltInput { mut input, .. } = build(&config, st.pages_per_channel(), None).unwrap();
        // 16 pages of 3 fragments a channel, the card given 4 at a time: every page but the
        // one the lend keeps is filled.
        let full = 3 * (16 - crate::store::LEND_KEEP as u64);
        poll_until(input.as_mut(), &mut st, |st| {
            (0..2).all(|c| st.counters(c).fragments >= full)
        });
        // Full: the card stalls, and keeps stalling.
        let before: Vec<u64> = (0..2).map(|c| st.counters(c).fragments).collect();
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            input.poll(&mut st);
        }
        let after: Vec<u64> = (0..2).map(|c| st.counters(c).fragments).collect();
        assert_eq!(before, after, "a full store takes nothing more");
        assert_eq!(after, [full, full]);
        assert!(input.stalls() > 0, "the card stalled");
        for (c, &n) in after.iter().enumerate() {
            let n = n as u32;
            for l1id in 0..n {
                assert_eq!(
                    st.lookup(c, l1id),
                    Lookup::Present,
                    "channel {c}, L1ID {l1id}"
                );
                let words = stored(&st, c, l1id);
                let rob = RobFragment::parse(&words).unwrap();
                assert_eq!(rob.source_id().word(), SOURCE + c as u32);
                assert_eq!(rob.status(), Status::OK);
                let rod = rob.rod();
                assert_eq!(rod.extended_l1id(), l1id);
                assert_eq!(check_counter(rod.data(), SOURCE + c as u32, l1id), None);
            }
            assert_eq!(
                st.lookup(c, n),
                Lookup::Pending,
                "nothing past what was stored"
            );
        }
        assert_eq!(input.slink_counters().errors(), 0);
        // Clearing makes room: the card goes on where it stopped, in order.
        st.clear(0..after[0] as u32);
        poll_until(input.as_mut(), &mut st, |st| {
            (0..2).all(|c| st.counters(c).fragments >= after[c] + 20)
        });
        for (c, &first) in after.iter().enumerate() {
            let first = first as u32;
            let words = stored(&st, c, first);
            assert_eq!(
                RobFragment::parse(&words).unwrap().rod().extended_l1id(),
                first
            );
        }
        input.release(&mut st);
        st.clear(0..1000);
        st.reclaim();
        for c in 0..2 {
            let k = st.counters(c);
            assert_eq!(k.pages_in_use, 0, "channel {c}: every page back");
            assert_eq!(k.lent_pages, 0);
        }
    }

    /// Fragments small enough that the index fills before the pages (22 to a page, 4 index
    /// entries a page; the partition's 16-word fragments are 26 to a page): each one the full
    /// index refuses is found again, whole, when it is offered again after clears made room.
    /// Before the fix the refused fragment's ROB header had already replaced its begin word,
    /// and the retry counted link errors and dropped it.
    #[test]
    fn fragments_the_full_index_refused_are_stored_whole_later() {
        let config = setup(1, 1);
        let (_pool, mut st) = store(1, 2048, 16);
        assert_eq!(st.page_words() / unit_words(&config), 22);
        st.note_l1(100_000);
        let BuiltInput { mut input, .. } = build(&config, st.pages_per_channel(), None).unwrap();
        let refusals = |st: &EventStore| st.counters(0).full + st.counters(0).full_ahead;
        let mut cleared = 0u32;
        for _ in 0..20 {
            // Until the full index refuses a fragment again, then clear what it holds.
            let before = refusals(&st);
            poll_until(input.as_mut(), &mut st, |st| refusals(st) > before);
            let upto = st.counters(0).fragments as u32;
            for l1id in cleared..upto {
                let words = stored(&st, 0, l1id);
                let rob = RobFragment::parse(&words).unwrap();
                assert_eq!(rob.status(), Status::OK, "L1ID {l1id}");
                assert_eq!(rob.rod().extended_l1id(), l1id);
            }
            st.clear(cleared..upto);
            cleared = upto;
        }
        assert!(cleared >= 20 * 50, "{cleared} stored");
        assert_eq!(input.slink_counters().errors(), 0);
        input.release(&mut st);
    }

    /// A generator that breaks the end word of every third fragment, as a link that loses
    /// its control bit would.
    struct BrokenEnds {
        inner: SlinkGenerator,
        n: u64,
    }

    impl Generator for BrokenEnds {
        fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
            let f = self.inner.fill(buf, max_units.min(1));
            if f.units == 1 {
                self.n += 1;
                if self.n % 3 == 2 {
                    buf[f.bytes - 4..f.bytes].copy_from_slice(&0x1234_5678u32.to_le_bytes());
                }
            }
            f
        }
    }

    /// Damaged fragments are found by the checks, counted, and stored with their error status
    /// or dropped; the good ones around them are stored as written, and nothing panics.
    #[test]
    fn damaged_fragments_are_counted_and_the_rest_stored() {
        let config = setup(1, 20);
        let (_pool, mut st) = store(1, 512, 64);
        st.note_l1(1000);
        let BuiltInput { mut input, .. } = with_generators(&config, 8, None, |c| Headroom {
            inner: BrokenEnds {
                inner: SlinkGenerator::new(slink_config(&config, c)),
                n: 0,
            },
        })
        .unwrap();
        poll_until(input.as_mut(), &mut st, |st| st.counters(0).fragments >= 60);
        let errors = input.slink_counters().errors();
        assert!(errors >= 15, "the checks found the broken ends ({errors})");
        // Every good fragment (L1ID 3k and 3k + 2) is stored as the card wrote it.
        for l1id in (0..60u32).filter(|i| i % 3 != 1) {
            let words = stored(&st, 0, l1id);
            let rob = RobFragment::parse(&words).unwrap();
            assert_eq!(rob.status(), Status::OK, "L1ID {l1id}");
            assert_eq!(rob.rod().extended_l1id(), l1id);
            assert_eq!(check_counter(rob.rod().data(), SOURCE, l1id), None);
        }
        input.release(&mut st);
    }

    /// Without requests or clears every stored page is ahead of the L1: the card stops at
    /// `depth` pages; as the L1 front moves, it gets as many more as fell behind it.
    #[test]
    fn the_card_runs_at_most_depth_pages_ahead_of_the_l1() {
        let config = setup(1, 20);
        let (_pool, mut st) = store(1, 512, 64);
        let BuiltInput { mut input, .. } = build(&config, 64, None).unwrap();
        // depth(64) = 16 pages of 3 fragments.
        poll_until(input.as_mut(), &mut st, |st| st.counters(0).fragments >= 48);
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline {
            input.poll(&mut st);
        }
        assert_eq!(st.counters(0).fragments, 48, "16 pages ahead, no more");
        assert_eq!(st.lent_pages(0), 16);
        // The front passes the first four pages (L1IDs 0..=11): four more pages.
        st.note_l1(11);
        poll_until(input.as_mut(), &mut st, |st| st.counters(0).fragments >= 60);
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline {
            input.poll(&mut st);
        }
        assert_eq!(st.counters(0).fragments, 60);
        assert_eq!(st.lookup(0, 59), Lookup::Present);
        input.release(&mut st);
    }

    /// Units holding two fragments, the second without a begin word, then zero words.
    struct TwoInOne {
        inner: SlinkGenerator,
        framed_words: usize,
    }

    impl Generator for TwoInOne {
        fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
            let bytes = 4 * self.framed_words;
            let mut fill = Fill::default();
            if max_units == 0 || buf.len() < bytes {
                return fill;
            }
            let out = &mut buf[..bytes];
            out.fill(0);
            let word = |out: &mut [u8], at: usize, w: u32| {
                out[at..at + 4].copy_from_slice(&w.to_le_bytes());
            };
            word(out, 0, rodeo_format::fragment::SLINK_BEGIN);
            let a = self.inner.fill(&mut out[4..], 1).bytes;
            word(out, 4 + a, rodeo_format::fragment::SLINK_END);
            let b = self.inner.fill(&mut out[8 + a..], 1).bytes;
            assert!(
                8 + a + b < bytes,
                "room for the words after the second fragment"
            );
            fill.push_unit(bytes);
            fill
        }
    }

    /// A unit holding two fragments, the second without a begin word, then words that are
    /// none: the checks find both, the first is stored, the second (its ROB header would
    /// overlap the first) is dumped, nothing panics, and the units after it are stored.
    #[test]
    fn a_damaged_unit_with_two_fragments_is_counted_not_a_panic() {
        let config = setup(1, 20);
        let (_pool, mut st) = store(1, 512, 64);
        st.note_l1(1000);
        let framed_words = unit_words(&config) - HEADROOM_WORDS;
        let BuiltInput { mut input, .. } = with_generators(&config, 8, None, |c| Headroom {
            inner: TwoInOne {
                inner: SlinkGenerator::new(SlinkConfig {
                    framing: false,
                    data_words: WordRange::fixed(0),
                    ..slink_config(&config, c)
                }),
                framed_words,
            },
        })
        .unwrap();
        // Units of L1IDs (0, 1), (2, 3), ...: the even ones stored.
        poll_until(input.as_mut(), &mut st, |st| st.counters(0).fragments >= 20);
        assert!(input.slink_counters().errors() > 0);
        for l1id in (0..40u32).step_by(2) {
            let words = stored(&st, 0, l1id);
            let rob = RobFragment::parse(&words).unwrap();
            assert_eq!(rob.rod().extended_l1id(), l1id);
            assert_eq!(rob.source_id().word(), SOURCE);
        }
        input.release(&mut st);
    }
}
