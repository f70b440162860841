//! The DMA input: per channel a DMA channel (a real or emulated card, S-LINK mode) whose
//! superpages are read through the S-LINK checks into the store ([`DmaInput`]), and the node's
//! emulated S-LINK cards that feed it ([`crate::node::NodeInput::Dma`]; the replay input runs
//! the same cards with another generator).
//!
//! # Back-pressure
//!
//! [`DmaInput`] stops at the first fragment the store refuses ([`IngestError::Full`]) and
//! retries it on the next poll: it keeps the superpage it was reading, stops popping, and the
//! card stalls once its queues are full (counted in the channel's stalls): XOFF to the link.

use std::sync::Arc;

use rodeo_cards::dma::{DmaChannel, EmulatedConfig, Filled, Generator};
use rodeo_cards::generator::{SlinkConfig, SlinkGenerator, WordRange};
use rodeo_format::slink::{SlinkCheckConfig, SlinkChecker, SlinkCounters, SlinkItem};
use rodeo_memory::{RegionOptions, Superpage, SuperpagePool, SuperpagePoolConfig};

use super::setup::{error_file, start_card, BuiltInput, ChannelSetup};
use super::watch::{LaneErrors, LaneProbe, ProbeSource};
use crate::node::error::NodeError;
use crate::server::input::{Input, POLL_BUDGET};
use crate::store::slink::ErrorDump;
use crate::store::{EventStore, IngestError};

struct DmaLane<D> {
    channel: D,
    checker: SlinkChecker,
    /// The superpage being read, the word the checker resumes at, and the length in words
    /// of its fragments while the card's report of it holds (`SlinkChecker::next_item_sized`).
    current: Option<(Filled<Superpage>, usize, Option<usize>)>,
    /// Items (fragments, dropped spans) the checks took from `current` so far: its units
    /// less these are its unread rest ([`Input::units_left`]).
    taken: u64,
}

/// One DMA channel per store channel (channel `i` feeds store channel `i`), each superpage
/// checked by a [`SlinkChecker`] in its pull form. Words the checker drops go to the error dump.
///
/// When the card reports the length of the superpage's fragments ([`Filled::unit_bytes`]), the
/// checker finds each fragment's end at that offset (`SlinkChecker::next_item_sized`) instead
/// of scanning every word for the end word; from the first fragment that does not fit it, the
/// rest of the superpage is scanned, so a damaged stream is checked and counted as before.
///
/// When the store refuses a fragment (full), the checker takes it back
/// ([`SlinkChecker::unread`]), the superpage is kept with the position of that fragment, and
/// the channel is not read until the store has room: the card stalls (back-pressure), nothing
/// is dropped.
pub struct DmaInput<D> {
    lanes: Vec<DmaLane<D>>,
    dump: ErrorDump,
    /// Per channel, the checks' errors so far, for the input watch.
    errors: Arc<LaneErrors>,
    /// At the stop, the channels end their links and the core thread reads what they hold
    /// ([`DmaInput::ending_links_at_stop`]).
    end_at_stop: bool,
}

impl<D: DmaChannel<Superpage> + 'static> DmaInput<D> {
    /// Reads `channels` (each already given its empty superpages), checked per `check`.
    pub fn new(channels: Vec<D>, check: SlinkCheckConfig, dump: ErrorDump) -> DmaInput<D> {
        let n = channels.len();
        DmaInput {
            lanes: channels
                .into_iter()
                .map(|channel| DmaLane {
                    channel,
                    checker: SlinkChecker::new(check),
                    current: None,
                    taken: 0,
                })
                .collect(),
            dump,
            errors: Arc::new(LaneErrors::new(n)),
            end_at_stop: false,
        }
    }

    /// Checks each channel's fragments against its ROD source identifier (`ids`, channel by
    /// channel; [`SlinkChecker::expect_source`]): for links from outside, where a swapped
    /// cable is a real fault; an emulated card writes its channel's own.
    pub fn expecting_sources(mut self, ids: impl IntoIterator<Item = u32>) -> DmaInput<D> {
        for (lane, id) in self.lanes.iter_mut().zip(ids) {
            lane.checker.expect_source(id);
        }
        self
    }

    /// Takes gaps in each channel's L1ID sequence as no error
    /// ([`SlinkChecker::allow_l1id_gaps`]): a replay of recorded data keeping its L1IDs.
    pub fn allowing_l1id_gaps(mut self) -> DmaInput<D> {
        for lane in &mut self.lanes {
            lane.checker.allow_l1id_gaps();
        }
        self
    }

    /// At the node's stop, ends every channel's link ([`DmaChannel::end_link`]) and has the
    /// core thread read what the channels still hold ([`Input::end_links`]): for channels
    /// carrying data from outside (network receivers, file players), whose every unit was
    /// counted as received. An emulated card's data is made up: what it wrote past the stop
    /// is not read.
    pub fn ending_links_at_stop(mut self) -> DmaInput<D> {
        self.end_at_stop = true;
        self
    }

    /// Per channel, the S-LINK check errors so far (published after each superpage).
    pub(crate) fn lane_errors(&self) -> Arc<LaneErrors> {
        Arc::clone(&self.errors)
    }

    /// The error dump (counters).
    pub fn dump(&self) -> &ErrorDump {
        &self.dump
    }
}

impl<D: DmaChannel<Superpage> + 'static> Input for DmaInput<D> {
    fn poll(&mut self, store: &mut EventStore) -> u64 {
        let mut consumed = 0u64;
        for (c, lane) in self.lanes.iter_mut().enumerate() {
            let mut budget = POLL_BUDGET;
            while budget > 0 {
                if lane.current.is_none() {
                    match lane.channel.pop_superpage() {
                        Some(f) => {
                            let sized = (f.unit_bytes % 4 == 0 && f.unit_bytes > 0)
                                .then_some(f.unit_bytes / 4);
                            lane.current = Some((f, 0, sized));
                            lane.taken = 0;
                        }
                        None => break,
                    }
                }
                let Some((filled, at, sized)) = lane.current.as_mut() else {
                    break;
                };
                let used = filled.bytes_used.min(filled.superpage.len()) / 4;
                let words = &filled.superpage.words()[..used];
                let mut blocked = false;
                while budget > 0 {
                    let before = *at;
                    let Some(item) = lane.checker.next_item_sized(words, at, sized) else {
                        break;
                    };
                    if let Some(n) = *sized {
                        // The first and last lines of the fragment PREFETCH_AHEAD on (the
                        // checks read them, then the store's copy reads the rest): fetched
                        // from the card's core while the ones before are checked and copied
                        // (those nearer were asked for on earlier turns).
                        let ahead = *at + (PREFETCH_AHEAD - 1) * n;
                        prefetch_word(words, ahead);
                        prefetch_word(words, ahead + n - 1);
                    }
                    match item {
                        SlinkItem::Fragment(f) => {
                            if let Err(IngestError::Full) = store.ingest(c, f.rod, f.status) {
                                // Retry this fragment on a later poll.
                                lane.checker.unread();
                                *at = before;
                                blocked = true;
                                break;
                            }
                        }
                        SlinkItem::Dropped(d) => self.dump.dump(c, d.words),
                    }
                    consumed += 1;
                    lane.taken += 1;
                    budget -= 1;
                }
                if blocked {
                    break;
                }
                if *at >= used {
                    self.errors.set(c, lane.checker.counters().errors());
                    let (filled, _, _) = lane.current.take().expect("checked above");
                    // The superpage came from this channel: its transfer queue has room.
                    let _ = lane.channel.push_superpage(filled.superpage);
                }
            }
        }
        consumed
    }

    fn slink_counters(&self) -> SlinkCounters {
        checker_totals(self.lanes.iter().map(|l| &l.checker))
    }

    fn stalls(&self) -> u64 {
        self.lanes
            .iter()
            .map(|l| l.channel.status().counters.stalls)
            .sum()
    }

    fn end_links(&mut self) -> bool {
        if self.end_at_stop {
            for lane in &self.lanes {
                lane.channel.end_link();
            }
        }
        self.end_at_stop
    }

    fn finished(&self) -> bool {
        (0..self.lanes.len()).all(|c| self.channel_ended(c))
    }

    fn release(&mut self, _store: &mut EventStore) {
        // The checks' errors of the superpages read last (published per superpage so far):
        // the inputs' error counts add up to the node's (a QA pass: 5,780 against 6,260).
        for (c, lane) in self.lanes.iter().enumerate() {
            self.errors.set(c, lane.checker.counters().errors());
        }
    }

    fn units_left(&mut self) -> u64 {
        let mut left = 0;
        for lane in &mut self.lanes {
            if let Some((filled, ..)) = lane.current.take() {
                left += filled.units.saturating_sub(lane.taken);
            }
            while let Some(filled) = lane.channel.pop_superpage() {
                left += filled.units;
            }
        }
        left
    }

    fn channel_ended(&self, c: usize) -> bool {
        self.lanes.get(c).is_some_and(|l| {
            // The card puts its last superpage on the ready queue before its link goes down.
            let s = l.channel.status();
            l.current.is_none() && !s.link_up && s.ready_queue_len == 0
        })
    }
}

/// The counters of `checkers` (one per channel) summed.
pub(crate) fn checker_totals<'a>(
    checkers: impl Iterator<Item = &'a SlinkChecker>,
) -> SlinkCounters {
    let mut t = SlinkCounters::default();
    for c in checkers {
        t.add(c.counters());
    }
    t
}

/// How many fragments ahead of the checks [`DmaInput`] prefetches a sized superpage's words.
const PREFETCH_AHEAD: usize = 2;

/// Hints the CPU to bring the cache line holding `words[i]` into cache; nothing past the end.
#[inline(always)]
fn prefetch_word(words: &[u32], i: usize) {
    if let Some(w) = words.get(i) {
        rodeo_memory::cache::prefetch(w);
    }
}

/// Channels per emulated card (one DMA-engine thread each), for S-LINK (a RobinNP's 12 links)
/// and FELIX inputs alike.
pub const CHANNELS_PER_CARD: usize = 12;

/// Per channel an emulated S-LINK link running `generator(channel)`, [`CHANNELS_PER_CARD`] to
/// a card (one engine thread), `depth` superpages of
/// `superpage_bytes` each, read through the S-LINK checks (framing on; L1ID gaps no error with
/// `l1id_gaps`): the node's DMA input ([`build`]) and its replay input ([`super::replay`]).
pub(crate) fn emulated_cards<G: Generator>(
    config: &ChannelSetup<'_>,
    rate_hz: Option<f64>,
    superpage_bytes: usize,
    address: &str,
    l1id_gaps: bool,
    generator: impl Fn(usize) -> G,
) -> Result<BuiltInput, NodeError> {
    let depth = 8;
    let sp = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes,
        superpages: config.channels * depth,
        region: RegionOptions::default(),
    })?;
    // One engine thread per card of (at most) CHANNELS_PER_CARD channels, as a RobinNP
    // serves its links with its DMA engine; never a thread per channel.
    let mut chans = Vec::with_capacity(config.channels);
    let mut lanes = Vec::with_capacity(config.channels);
    let card_config = EmulatedConfig {
        queue_depth: depth,
        max_units_per_s: rate_hz,
        ..EmulatedConfig::default()
    };
    let channels: Vec<usize> = (0..config.channels).collect();
    for (k, group) in channels.chunks(CHANNELS_PER_CARD).enumerate() {
        let card = start_card(
            config,
            k,
            group.iter().map(|&c| (card_config, generator(c))).collect(),
        )?;
        for ch in card {
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
            lanes.push(LaneProbe {
                address: address.to_string(),
                source: ProbeSource::Channel(ch.status_reader()),
            });
            chans.push(ch);
        }
    }
    let file = error_file(config)?;
    let check = SlinkCheckConfig {
        framing: true,
        crc: false,
        l1id_wrap: config.l1id_wrap,
    };
    let mut input = DmaInput::new(chans, check, ErrorDump::new(file, 10));
    if l1id_gaps {
        input = input.allowing_l1id_gaps();
    }
    Ok(BuiltInput {
        errors: Some(input.lane_errors()),
        input: Box::new(input),
        superpages: Some(sp),
        lanes,
        net: Vec::new(),
    })
}

/// The node's DMA input: per channel an emulated S-LINK card's link writing framed fragments
/// of `config.fragment_words` data words from event `config.first_event` on, at most `rate_hz`
/// fragments per second per channel.
///
/// Its superpages are [`dma_superpage_bytes`] long. A fragment that does not fit (its framed
/// words beyond [`DMA_SUPERPAGE_BYTES`]) is refused here: the card would never write it, and
/// every event would lack it while the node ran on.
pub(crate) fn build(
    config: &ChannelSetup<'_>,
    rate_hz: Option<f64>,
) -> Result<BuiltInput, NodeError> {
    let slink = |c: usize| slink_config(config, c);
    let framed = slink(0).fragment_words(config.fragment_words);
    if framed > DMA_SUPERPAGE_BYTES / 4 {
        let overhead = framed - config.fragment_words as usize;
        return Err(NodeError::Config(format!(
            "{} data words per fragment ({framed} framed as S-LINK) do not fit one DMA \
             superpage of {} words: at most {} with the DMA input (a larger fragment is never \
             written and every event would lack it)",
            config.fragment_words,
            DMA_SUPERPAGE_BYTES / 4,
            DMA_SUPERPAGE_BYTES / 4 - overhead
        )));
    }
    emulated_cards(
        config,
        rate_hz,
        dma_superpage_bytes(framed),
        "emulated",
        false,
        |c| {
            let mut g = SlinkGenerator::new(slink(c));
            g.skip(config.first_event);
            super::follow::Following::new(g, config.front.cloned())
        },
    )
}

/// The emulated S-LINK link of channel `c` of a node's DMA input: framed fragments of
/// `config.fragment_words` data words, its ROB's source id.
pub(crate) fn slink_config(config: &ChannelSetup<'_>, c: usize) -> SlinkConfig {
    SlinkConfig {
        source_id: config.base_source_id + c as u32,
        data_words: WordRange::fixed(config.fragment_words),
        l1id_wrap: config.l1id_wrap,
        ..framed_slink()
    }
}

/// The framing of every emulated S-LINK link of a node's DMA inputs (control words, no CRC
/// word): what sets a framed fragment's length ([`slink_config`],
/// [`super::page_dma::page_unit_words`]).
pub(crate) fn framed_slink() -> SlinkConfig {
    SlinkConfig {
        framing: true,
        ..SlinkConfig::default()
    }
}

/// Bytes of the largest superpage of the node's emulated S-LINK (DMA) cards: the largest framed
/// fragment they carry (`config check` refuses a partition's fragments with it).
pub const DMA_SUPERPAGE_BYTES: usize = 256 * 1024;
/// Bytes of the smallest superpage of the node's emulated S-LINK (DMA) cards.
pub const DMA_MIN_SUPERPAGE_BYTES: usize = 64 * 1024;
/// Framed fragments a superpage of the node's emulated S-LINK cards is sized to hold
/// ([`dma_superpage_bytes`]).
pub const DMA_SUPERPAGE_FRAGMENTS: usize = 64;

/// Bytes of each superpage of the node's emulated S-LINK (DMA) cards for framed fragments of
/// `framed_words` words: [`DMA_SUPERPAGE_FRAGMENTS`] of them rounded up to a power of two,
/// within [`DMA_MIN_SUPERPAGE_BYTES`] and [`DMA_SUPERPAGE_BYTES`].
///
/// Why not always the largest: the superpages a card fills while the core thread reads the
/// ones before it should stay in the caches. With the default partition's 12 channels, 8
/// superpages each, 256 KiB superpages cycle through 24 MiB (the card's writes and the core's
/// reads went to memory and back); 64 KiB ones through 6 MiB, and the partition took ~10% less
/// CPU per L1 accept (docs/benchmarks.md, "CPU per L1 accept"). 64 fragments a superpage, 8
/// superpages a channel, keep 512 fragments per channel queued to the card (2 ms at 250 kHz).
pub fn dma_superpage_bytes(framed_words: usize) -> usize {
    framed_words
        .saturating_mul(4 * DMA_SUPERPAGE_FRAGMENTS)
        .checked_next_power_of_two()
        .unwrap_or(DMA_SUPERPAGE_BYTES)
        .clamp(DMA_MIN_SUPERPAGE_BYTES, DMA_SUPERPAGE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superpages_hold_their_fragments_within_the_bounds() {
        // The default partition's fragments (~220 framed words): 64 KiB.
        assert_eq!(dma_superpage_bytes(222), 64 * 1024);
        assert_eq!(dma_superpage_bytes(1), DMA_MIN_SUPERPAGE_BYTES);
        // 300 words: 76,800 bytes for 64 of them, the next power of two.
        assert_eq!(dma_superpage_bytes(300), 128 * 1024);
        // The largest fragment the input carries still fits its superpage.
        let largest = DMA_SUPERPAGE_BYTES / 4;
        assert_eq!(dma_superpage_bytes(largest), DMA_SUPERPAGE_BYTES);
        assert_eq!(dma_superpage_bytes(usize::MAX), DMA_SUPERPAGE_BYTES);
        for words in [1, 17, 222, 1024, 1025, 4096, 20_000, largest] {
            let bytes = dma_superpage_bytes(words);
            assert!(bytes >= 4 * words, "{words} words in {bytes} bytes");
            assert!(bytes.is_power_of_two());
        }
    }
}
