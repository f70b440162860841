//! The raw-data-file replay channel: the ROBs of real events fed through a card.
//!
//! A [`ReplayGenerator`] is a [`Generator`] for one S-LINK channel: for every event of a
//! [`ReplayEvents`] set (data files of either container and any version, loaded once before
//! the run) that has a ROB with the channel's source id, it writes that ROB's ROD fragment,
//! framed by the S-LINK control words as the emulated S-LINK card frames its own, into the
//! channel's superpages. The receiving side cannot tell it from a card: the node's S-LINK
//! checker finds, checks and stores the fragments, with back-pressure and stalls exactly as for
//! emulated data. That is why replay is a generator behind a DMA channel rather than an input
//! writing into the store: the whole S-LINK path is exercised with real data.
//!
//! The L1ID word of each ROD (word 5) is the event's L1ID ([`L1idMode::Keep`]) or a counter
//! from 0 in event order ([`L1idMode::Renumber`], wrapping into the ECR like the emulators);
//! every other word is the file's. An event without a ROB for this channel leaves a gap in
//! its L1ID sequence (counted by the checker). The channel's limits pace it (fragments per
//! second); `looping` starts again after the last event (renumbered L1IDs keep counting).

use std::sync::Arc;

use rodeo_format::fragment::{SLINK_BEGIN, SLINK_END};
use rodeo_format::l1id::L1idCounter;
use rodeo_format::replay::{L1idMode, ReplayEvents};

use crate::dma::{Fill, Generator};

/// One channel's replay; see the module docs.
#[derive(Debug, Clone)]
pub struct ReplayGenerator {
    events: Arc<ReplayEvents>,
    source_id: u32,
    mode: L1idMode,
    looping: bool,
    /// Index of the next event to look at.
    next: usize,
    /// The renumbered L1ID of event `next` (advanced for every event, present here or not).
    l1id: L1idCounter,
    passes: u64,
    fragments: u64,
    finished: bool,
}

impl ReplayGenerator {
    /// The channel of ROB `source_id` over `events`; `wrap` is the L1ID wrap of renumbering.
    pub fn new(
        events: Arc<ReplayEvents>,
        source_id: u32,
        mode: L1idMode,
        looping: bool,
        wrap: u32,
    ) -> ReplayGenerator {
        // A channel with no fragment at all would loop without writing anything.
        let finished = !events
            .events()
            .iter()
            .any(|e| e.robs.iter().any(|r| r.0 == source_id));
        ReplayGenerator {
            events,
            source_id,
            mode,
            looping,
            next: 0,
            l1id: L1idCounter::new(wrap),
            passes: 0,
            fragments: 0,
            finished,
        }
    }

    /// Fragments written so far.
    pub fn fragments(&self) -> u64 {
        self.fragments
    }

    /// Complete passes over the events so far.
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// Moves to the next event (wrapping when looping).
    fn advance(&mut self) {
        self.next += 1;
        self.l1id.advance();
        if self.next >= self.events.len() {
            self.passes += 1;
            self.next = 0;
            if !self.looping {
                self.finished = true;
            }
        }
    }
}

impl Generator for ReplayGenerator {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let mut fill = Fill::default();
        let events = Arc::clone(&self.events);
        while fill.units < max_units && !self.finished {
            let Some(ev) = events.events().get(self.next) else {
                self.finished = true;
                break;
            };
            let Some((_, range)) = ev.robs.iter().find(|r| r.0 == self.source_id) else {
                self.advance();
                continue;
            };
            let rod = events.rod(range);
            let bytes = 4 * (rod.len() + 2);
            let Some(out) = buf.get_mut(fill.bytes..fill.bytes + bytes) else {
                break;
            };
            let l1id = match self.mode {
                L1idMode::Keep => ev.l1id,
                L1idMode::Renumber => self.l1id.extended(),
            };
            let words = std::iter::once(SLINK_BEGIN)
                .chain(
                    rod.iter()
                        .enumerate()
                        .map(|(i, &w)| if i == 5 { l1id } else { w }),
                )
                .chain(std::iter::once(SLINK_END));
            for (dst, w) in out.chunks_exact_mut(4).zip(words) {
                dst.copy_from_slice(&w.to_le_bytes());
            }
            fill.bytes += bytes;
            fill.units += 1;
            self.fragments += 1;
            self.advance();
        }
        fill
    }

    fn is_finished(&self) -> bool {
        self.finished
    }
}
