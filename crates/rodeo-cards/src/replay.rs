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

use rodeo_files::replay::{L1idMode, ReplayEvents};
use rodeo_format::fragment::{SLINK_BEGIN, SLINK_END};
use rodeo_format::l1id::L1idCounter;

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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rodeo_files::rawfile::{RawFileConfig, RawFileWriter};
    use rodeo_format::fragment::{EventBuilder, RobBuilder, RobPayload, RodBuilder, SourceId};

    use super::*;

    /// A file of 3 events with L1IDs 10, 20, 30; event 1 lacks ROB 0x41.
    fn events(dir: &std::path::Path) -> Arc<ReplayEvents> {
        let mut c = RawFileConfig::new(dir, 1, "t", "s");
        c.fsync_on_close = false;
        c.free_disk_margin_bytes = 0;
        let mut w = RawFileWriter::create(c).unwrap();
        for (i, l1id) in [10u32, 20, 30].into_iter().enumerate() {
            let mut robs = Vec::new();
            for source in [0x41u32, 0x42] {
                if i == 1 && source == 0x41 {
                    continue;
                }
                let data = [source, l1id];
                RobBuilder {
                    source_id: SourceId(source),
                    payload: RobPayload::Rod(RodBuilder {
                        source_id: SourceId(source),
                        extended_l1id: l1id,
                        data: &[&data],
                        ..RodBuilder::default()
                    }),
                    ..RobBuilder::default()
                }
                .write_vec(&mut robs)
                .unwrap();
            }
            let mut ev = Vec::new();
            EventBuilder {
                global_id: i as u64,
                extended_l1id: l1id,
                robs: &[&robs],
                ..EventBuilder::default()
            }
            .write_vec(&mut ev)
            .unwrap();
            w.write_event(&ev, 0).unwrap();
        }
        let path = w.finish().unwrap()[0].path.clone();
        Arc::new(ReplayEvents::load(&[path], &HashMap::new()).unwrap())
    }

    /// (L1ID word, first data word) of each framed fragment in `bytes`.
    fn fragments(bytes: &[u8]) -> Vec<(u32, u32)> {
        let w: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let mut out = Vec::new();
        let mut at = 0;
        while at < w.len() {
            assert_eq!(w[at], SLINK_BEGIN);
            let end = (at..w.len()).find(|&i| w[i] == SLINK_END).unwrap();
            // Framing word, 9 header words (L1ID the 6th), no status words, then the data.
            out.push((w[at + 6], w[at + 10]));
            at = end + 1;
        }
        out
    }

    #[test]
    fn renumbers_or_keeps_l1ids_skips_missing_robs_and_loops() {
        let dir = tempfile::tempdir().unwrap();
        let ev = events(dir.path());
        let mut buf = vec![0u8; 4096];
        // Renumbered: event k has L1ID k; the channel of 0x41 has no fragment for event 1.
        let mut g = ReplayGenerator::new(Arc::clone(&ev), 0x41, L1idMode::Renumber, false, 1 << 24);
        let f = g.fill(&mut buf, u64::MAX);
        assert_eq!(f.units, 2);
        assert_eq!(fragments(&buf[..f.bytes]), [(0, 0x41), (2, 0x41)]);
        assert!(g.is_finished());
        // Kept, looping: the file's L1IDs again and again.
        let mut g = ReplayGenerator::new(Arc::clone(&ev), 0x42, L1idMode::Keep, true, 1 << 24);
        let f = g.fill(&mut buf, 5);
        let got: Vec<u32> = fragments(&buf[..f.bytes]).iter().map(|x| x.0).collect();
        assert_eq!(got, [10, 20, 30, 10, 20]);
        assert!(!g.is_finished() && g.passes() == 1);
        // A channel whose ROB the files never have is finished at once.
        assert!(ReplayGenerator::new(ev, 0x99, L1idMode::Keep, true, 1 << 24).is_finished());
    }
}
