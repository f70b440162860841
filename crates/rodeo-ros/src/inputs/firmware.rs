//! The firmware input: an inline, firmware-style generator writing fixed-size fragments
//! straight into the store's pages ([`FirmwareInput`], [`crate::node::NodeInput::Firmware`]):
//! no card threads, no superpages. It builds itself from the store it feeds
//! ([`FirmwareInput::new`]).
//!
//! # Back-pressure
//!
//! It stops at the first fragment the store refuses (full) and writes it again on the next
//! poll: the L1ID counter advances only by what the store took.

use rodeo_cards::generator::L1idCounter;
use rodeo_format::fragment::{Status, ROD_FORMAT_VERSION, ROD_HEADER_WORDS, ROD_MARKER};

use crate::server::input::{Input, POLL_BUDGET};
use crate::store::{EventStore, Rewrite, ROB_HEADER_WORDS};

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
