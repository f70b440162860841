//! What feeds the store inside the core thread: a DMA channel per ROB (real or emulated card,
//! S-LINK mode) through the S-LINK checker, or an inline firmware-style generator.
//!
//! # Back-pressure
//!
//! Both stop at the first fragment the store refuses ([`IngestError::Full`]) and retry it on
//! the next poll. [`DmaInput`] then keeps the superpage it was reading, stops popping, and the
//! card stalls once its queues are full (counted in the channel's stalls): XOFF to the link.

use rodeo_format::fragment::{Status, ROD_FORMAT_VERSION, ROD_HEADER_WORDS, ROD_MARKER};
use rodeo_memory::Superpage;

use crate::store::slink::ErrorDump;
use crate::store::{EventStore, IngestError, Rewrite, ROB_HEADER_WORDS};
use rodeo_cards::dma::{DmaChannel, Filled};
use rodeo_cards::generator::L1idCounter;
use rodeo_format::slink::{SlinkCheckConfig, SlinkChecker, SlinkCounters, SlinkItem};

/// A source of fragments polled by the core thread.
pub trait Input: Send + 'static {
    /// Moves what is ready into `store`; returns the fragments consumed (stored or dropped).
    fn poll(&mut self, store: &mut EventStore) -> u64;
    /// Counters of the S-LINK checks (zero for inputs that do not check).
    fn slink_counters(&self) -> SlinkCounters {
        SlinkCounters::default()
    }
    /// Back-pressure events seen by the card (stalls), if the input knows them.
    fn stalls(&self) -> u64 {
        0
    }
    /// True once the input has nothing more to deliver and everything it delivered was read
    /// (every link down, nothing left in its queues); false for inputs that never end.
    fn finished(&self) -> bool {
        false
    }
    /// The core thread is stopping (after its last poll): gives back to `store` what the input
    /// holds of it (store pages lent to it), so that the stopped store counts them free.
    fn release(&mut self, store: &mut EventStore) {
        let _ = store;
    }
}

/// Fragments taken per channel per poll, so one busy channel cannot starve requests.
const POLL_BUDGET: usize = 256;

struct DmaLane<D> {
    channel: D,
    checker: SlinkChecker,
    /// The superpage being read and the word the checker resumes at.
    current: Option<(Filled<Superpage>, usize)>,
}

/// One DMA channel per store channel (channel `i` feeds store channel `i`), each superpage
/// checked by a [`SlinkChecker`] in its pull form. Words the checker drops go to the error dump.
///
/// When the store refuses a fragment (full), the checker takes it back
/// ([`SlinkChecker::unread`]), the superpage is kept with the position of that fragment, and
/// the channel is not read until the store has room: the card stalls (back-pressure), nothing
/// is dropped.
pub struct DmaInput<D> {
    lanes: Vec<DmaLane<D>>,
    dump: ErrorDump,
}

impl<D: DmaChannel<Superpage> + 'static> DmaInput<D> {
    /// Reads `channels` (each already given its empty superpages), checked per `check`.
    pub fn new(channels: Vec<D>, check: SlinkCheckConfig, dump: ErrorDump) -> DmaInput<D> {
        DmaInput {
            lanes: channels
                .into_iter()
                .map(|channel| DmaLane {
                    channel,
                    checker: SlinkChecker::new(check),
                    current: None,
                })
                .collect(),
            dump,
        }
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
                        Some(f) => lane.current = Some((f, 0)),
                        None => break,
                    }
                }
                let Some((filled, at)) = lane.current.as_mut() else {
                    break;
                };
                let used = filled.bytes_used.min(filled.superpage.len()) / 4;
                let words = &filled.superpage.words()[..used];
                let mut blocked = false;
                while budget > 0 {
                    let before = *at;
                    let Some(item) = lane.checker.next_item(words, at) else {
                        break;
                    };
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
                    budget -= 1;
                }
                if blocked {
                    break;
                }
                if *at >= used {
                    let (filled, _) = lane.current.take().expect("checked above");
                    // The superpage came from this channel: its transfer queue has room.
                    let _ = lane.channel.push_superpage(filled.superpage);
                }
            }
        }
        consumed
    }

    fn slink_counters(&self) -> SlinkCounters {
        let mut t = SlinkCounters::default();
        for l in &self.lanes {
            t.add(l.checker.counters());
        }
        t
    }

    fn stalls(&self) -> u64 {
        self.lanes
            .iter()
            .map(|l| l.channel.status().counters.stalls)
            .sum()
    }

    fn finished(&self) -> bool {
        self.lanes.iter().all(|l| {
            // The card puts its last superpage on the ready queue before its link goes down.
            let s = l.channel.status();
            l.current.is_none() && !s.link_up && s.ready_queue_len == 0
        })
    }
}

/// What the inline generator writes into each fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// Header, status, counter data and trailer: the S-LINK generator's fragments.
    Full,
    /// Header and trailer only; the data words are left as the page holds them. Models a card
    /// whose DMA costs the host no CPU, to measure the store and request path alone.
    HeadersOnly,
}

/// An inline, firmware-style generator: per channel, L1IDs from 0 (wrapping into the ECR),
/// fixed-size fragments written straight into the store's pages as fast as it accepts them.
pub struct FirmwareInput {
    counters: Vec<L1idCounter>,
    source_ids: Vec<u32>,
    data_words: usize,
    payload: Payload,
    /// Stop generating after this many events per channel (`None`: unbounded).
    limit: Option<u64>,
    /// Fragments larger than a page are built here first.
    scratch: Vec<u32>,
}

impl FirmwareInput {
    /// A generator for every channel of `store`.
    pub fn new(store: &EventStore, data_words: usize, wrap: u32, payload: Payload) -> Self {
        FirmwareInput {
            counters: vec![L1idCounter::new(wrap); store.channels()],
            source_ids: (0..store.channels())
                .map(|c| store.source_id(c).unwrap_or(0))
                .collect(),
            data_words,
            payload,
            limit: None,
            scratch: Vec::new(),
        }
    }

    /// Generates at most `events` events per channel.
    pub fn with_limit(mut self, events: u64) -> Self {
        self.limit = Some(events);
        self
    }
}

/// Writes one emulated ROD fragment of `ndata` data words into `d` (exactly its size).
#[inline]
fn write_rod(d: &mut [u32], source: u32, l1id: u32, ndata: usize, payload: Payload) {
    // Split once: the header, data and trailer stores below need no further bounds checks.
    let (head, rest) = d.split_at_mut(ROD_HEADER_WORDS + 1);
    let (data, trailer) = rest.split_at_mut(ndata);
    head.copy_from_slice(&[
        ROD_MARKER,
        ROD_HEADER_WORDS as u32,
        ROD_FORMAT_VERSION,
        source,
        1,
        l1id,
        bcid_of(l1id),
        1,
        0,
        0, // status word
    ]);
    if payload == Payload::Full {
        let base = rodeo_format::synth::counter_word(source, l1id, 0);
        for (i, w) in data.iter_mut().enumerate() {
            *w = base.wrapping_add(i as u32);
        }
    }
    trailer[..3].copy_from_slice(&[1, ndata as u32, 0]);
}

/// Rewrites, in a fragment [`write_rod`] wrote with the same size (headers only), the words
/// that depend on the L1ID: the L1ID and the BCID.
#[inline]
fn rewrite_rod(d: &mut [u32], l1id: u32) {
    if let Some([l1, bcid]) = d.get_mut(5..7) {
        *l1 = l1id;
        *bcid = bcid_of(l1id);
    }
}

/// The emulated BCID of an L1ID.
#[inline]
fn bcid_of(l1id: u32) -> u32 {
    l1id.wrapping_mul(7) % 3564
}

impl Input for FirmwareInput {
    fn poll(&mut self, store: &mut EventStore) -> u64 {
        let mut consumed = 0;
        let nwords = ROD_HEADER_WORDS + 1 + self.data_words + 3;
        // Fragments larger than a page are built aside and copied (they span pages).
        let in_place = nwords + ROB_HEADER_WORDS <= store.page_words();
        if !in_place && self.scratch.len() != nwords {
            self.scratch = vec![0; nwords];
        }
        let (ndata, payload) = (self.data_words, self.payload);
        for c in 0..self.counters.len() {
            let counter = &mut self.counters[c];
            let budget = match self.limit {
                Some(l) => POLL_BUDGET.min(l.saturating_sub(counter.events()) as usize),
                None => POLL_BUDGET,
            };
            if budget == 0 {
                continue;
            }
            let source = self.source_ids[c];
            // The L1IDs from the counter's position; it advances by what the store consumed.
            let mut next = *counter;
            let done = if in_place {
                // The whole run in one call: the store's common path stays in registers.
                let (done, _) = store.ingest_run(
                    c,
                    nwords,
                    Status::OK,
                    budget,
                    || {
                        let l1id = next.extended();
                        next.advance();
                        l1id
                    },
                    |l1id, d, rewrite| {
                        if rewrite == Rewrite::Changed && payload == Payload::HeadersOnly {
                            rewrite_rod(d, l1id)
                        } else {
                            write_rod(d, source, l1id, ndata, payload)
                        }
                    },
                );
                done
            } else {
                let mut done = 0;
                while done < budget {
                    let l1id = next.extended();
                    write_rod(&mut self.scratch, source, l1id, ndata, Payload::Full);
                    if store.ingest(c, &self.scratch, Status::OK).is_err() {
                        break;
                    }
                    next.advance();
                    done += 1;
                }
                done
            };
            for _ in 0..done {
                counter.advance();
            }
            consumed += done as u64;
        }
        consumed
    }
}
