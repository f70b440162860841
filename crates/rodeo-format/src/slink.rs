//! S-LINK streams: ROD fragments as a readout channel delivers them, checked per links.md.
//!
//! An S-LINK channel writes whole ROD fragments back to back into its pages, each optionally
//! framed by the control words [`SLINK_BEGIN`] / [`SLINK_END`] and optionally followed by a CRC
//! word. [`SlinkChecker`] walks such a stream (one superpage at a time) and hands out every
//! fragment with the status bits of its errors, or the words it had to drop, so the event store
//! can index what is usable and count the rest.
//!
//! # Finding fragments
//!
//! A ROD fragment carries no total size in its header; it is read from its end. In memory the
//! control words are ordinary words, so the checker finds boundaries the way the link does:
//!
//! - **framing on**: a fragment runs from a begin word to the next end word. A ROD marker where a
//!   begin word should be starts a fragment flagged *missing begin-of-fragment*; a begin word
//!   (or the end of the data) before the end word closes it flagged *missing end-of-fragment*
//!   (plus *truncation* at the end of the data). Anything else between fragments is garbage.
//! - **framing off**: a fragment starts at a ROD marker and ends before the next ROD marker whose
//!   position agrees with the ROD trailer (`9 + nstatus + ndata + 3` words); if none agrees, the
//!   first following marker (a payload word may equal the marker, so agreement is preferred).
//!
//! # Fragments whose length the card reported
//!
//! A real card marks the control words out of band (the S-LINK control bit; the CRU's page
//! headers) and reports each fragment's length in its DMA descriptor, so the host never
//! searches the payload for the end. [`SlinkChecker::next_item_sized`] takes that length
//! (`words`, control and CRC words included, the same for every fragment of the superpage:
//! an emulated card's `Filled::unit_bytes` / 4) and checks the fragment at the
//! known offsets: the begin word at its first word and the end word at its last (framing on),
//! or the ROD marker at its first word and a ROD trailer accounting for exactly its length
//! (framing off). A fragment that passes goes through every other check below as any other
//! (CRC, marker, header and trailer, L1ID sequence, duplicates) and is counted in
//! [`SlinkCounters::sized_fragments`]; a payload word that happens to equal a control word is
//! then data, as on a real link. The first fragment that does not pass, and every later one of
//! the superpage, goes through the value scan above, so a damaged stream is checked and
//! counted exactly as without a reported length.
//!
//! # Checks and status bits
//!
//! | problem | specific bit (generic) | fragment kept |
//! |---|---|---|
//! | no begin word | `ROB_MISSING_BOF` | yes |
//! | no end word | `ROB_MISSING_EOF` (+ `ROB_TRUNCATION` at the end of the data) | yes |
//! | CRC word disagrees | `ROB_TRANSMISSION` (`DATA_CORRUPTION`) | yes |
//! | first word not the ROD marker | `ROB_INVALID_MARKER` (`DATA_CORRUPTION`) | yes |
//! | header or trailer inconsistent | `ROB_FRAGMENT_SIZE` or `ROB_FORMAT_ERROR` (`DATA_CORRUPTION`) | yes |
//! | L1ID equals the previous one | `ROB_DUPLICATE_EVENT` | yes |
//! | L1ID not the previous one + 1 (with wrap) | `ROB_L1ID_SEQUENCE` (`L1ID_CHECK_FAIL`) | yes |
//! | fewer than 6 words: no readable L1ID | - | no: [`SlinkItem::Dropped`] |
//! | words outside any fragment | - | no: [`SlinkItem::Dropped`] |
//!
//! A fragment is kept whenever its extended L1ID (word 5) is readable; every problem is counted
//! in [`SlinkCounters`] by kind, and every dropped word too.
//!
//! # The CRC word
//!
//! With `crc` on, the word after the ROD trailer (before the end word) holds the CRC16-CCITT of
//! the ROD fragment's words ([`crate::checksum::crc16_words`], the event format's CRC) in its
//! low 16 bits, the high 16 bits zero.
//!
//! # L1ID sequence
//!
//! The checker expects each extended L1ID to follow the previous one: L1ID + 1, or L1ID 0 with
//! the ECR byte incremented once the L1ID reaches the channel's wrap value (links.md's
//! generator rule; real front-ends reset at ECR, which is the same thing). After a sequence
//! error the checker follows the new value, so one lost fragment is one error.

use crate::checksum::{crc16_words, CRC16_INIT};
use crate::fragment::{
    ErrorKind, RodFragment, Status, ROD_HEADER_WORDS, ROD_MARKER, ROD_TRAILER_WORDS, SLINK_BEGIN,
    SLINK_END,
};
use crate::l1id::{next_extended_l1id, DEFAULT_L1ID_WRAP};

/// Words up to and including the extended L1ID of a ROD fragment.
pub const MIN_READABLE_WORDS: usize = 6;

/// Following ROD markers examined for a fragment boundary (framing off) before taking the first.
const MAX_BOUNDARY_CANDIDATES: usize = 16;

/// How an S-LINK channel frames its fragments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlinkCheckConfig {
    /// Fragments are framed by begin/end control words.
    pub framing: bool,
    /// A CRC word follows each ROD fragment.
    pub crc: bool,
    /// The L1ID wraps at this value into the ECR byte (clamped to `1..=2^24`).
    pub l1id_wrap: u32,
}

impl Default for SlinkCheckConfig {
    fn default() -> SlinkCheckConfig {
        SlinkCheckConfig {
            framing: false,
            crc: false,
            l1id_wrap: DEFAULT_L1ID_WRAP,
        }
    }
}

/// A fragment found in the stream, with the status bits of its problems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlinkFragment<'a> {
    /// Word offset of the fragment's first word (its begin word, when framed) in the stream.
    pub offset: usize,
    /// The ROD fragment's words, without control words or CRC word.
    pub rod: &'a [u32],
    /// The extended L1ID (word 5).
    pub extended_l1id: u32,
    /// Specific and generic status bits of every problem found (0 for a good fragment).
    pub status: Status,
}

/// Why words were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Words outside any fragment (no begin word or ROD marker where a fragment should start).
    Garbage,
    /// A fragment too short to hold its L1ID.
    Short,
}

/// Words the checker could not use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlinkDrop<'a> {
    /// Word offset in the stream.
    pub offset: usize,
    /// The dropped words (for an error dump).
    pub words: &'a [u32],
    /// Why.
    pub reason: DropReason,
}

/// One item of a checked stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlinkItem<'a> {
    /// A fragment with a readable L1ID: store and index it, with its status.
    Fragment(SlinkFragment<'a>),
    /// Words that cannot be stored: count and dump them.
    Dropped(SlinkDrop<'a>),
}

/// Counters of a checked stream, by kind (64-bit, monotonic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlinkCounters {
    /// Words examined.
    pub words: u64,
    /// Fragments handed out (kept).
    pub fragments: u64,
    /// Kept fragments with at least one status bit.
    pub flagged_fragments: u64,
    /// Fragments without a begin word (framing on).
    pub missing_begin: u64,
    /// Fragments without an end word (framing on).
    pub missing_end: u64,
    /// Fragments cut by the end of the data.
    pub truncated: u64,
    /// Fragments whose CRC word disagrees.
    pub crc_errors: u64,
    /// Fragments whose first word is not the ROD marker.
    pub bad_markers: u64,
    /// Fragments whose header or trailer is inconsistent.
    pub format_errors: u64,
    /// Fragments repeating the previous L1ID.
    pub duplicates: u64,
    /// Fragments whose L1ID does not follow the previous one.
    pub l1id_sequence_errors: u64,
    /// Fragments whose ROD source identifier (sub-detector and module, the low 24 bits) is not
    /// the channel's ([`SlinkChecker::expect_source`]): a link cabled to the wrong input.
    pub source_mismatches: u64,
    /// Fragments dropped because their L1ID is unreadable.
    pub short_fragments: u64,
    /// Spans of words outside any fragment.
    pub garbage_spans: u64,
    /// Words dropped (short fragments and garbage), with their control words.
    pub dropped_words: u64,
    /// Fragments found at the length the card reported, without scanning for their end
    /// (module docs, "Fragments whose length the card reported"); included in `fragments`.
    pub sized_fragments: u64,
}

impl SlinkCounters {
    /// Adds another set of counters (for totals over channels).
    pub fn add(&mut self, o: &SlinkCounters) {
        self.words += o.words;
        self.fragments += o.fragments;
        self.flagged_fragments += o.flagged_fragments;
        self.missing_begin += o.missing_begin;
        self.missing_end += o.missing_end;
        self.truncated += o.truncated;
        self.crc_errors += o.crc_errors;
        self.bad_markers += o.bad_markers;
        self.format_errors += o.format_errors;
        self.duplicates += o.duplicates;
        self.l1id_sequence_errors += o.l1id_sequence_errors;
        self.short_fragments += o.short_fragments;
        self.garbage_spans += o.garbage_spans;
        self.source_mismatches += o.source_mismatches;
        self.dropped_words += o.dropped_words;
        self.sized_fragments += o.sized_fragments;
    }

    /// Fragments dropped (short).
    pub fn dropped_fragments(&self) -> u64 {
        self.short_fragments
    }

    /// Every error found, whatever its kind (a fragment with several counts once per kind):
    /// framing, truncation, CRC, marker, format, duplicate, L1ID sequence and source errors,
    /// dropped short fragments and garbage spans.
    pub fn errors(&self) -> u64 {
        self.missing_begin
            + self.missing_end
            + self.truncated
            + self.crc_errors
            + self.bad_markers
            + self.format_errors
            + self.duplicates
            + self.l1id_sequence_errors
            + self.short_fragments
            + self.garbage_spans
            + self.source_mismatches
    }
}

/// Walks S-LINK streams of one channel; see the module docs. Keeps the L1ID sequence across
/// calls, so superpages are checked one after another.
#[derive(Debug, Clone)]
pub struct SlinkChecker {
    config: SlinkCheckConfig,
    /// The channel's ROD source identifier, when checked ([`SlinkChecker::expect_source`]).
    source: Option<u32>,
    /// L1ID gaps are errors ([`SlinkChecker::allow_l1id_gaps`] turns that off).
    gaps_are_errors: bool,
    last_l1id: Option<u32>,
    counters: SlinkCounters,
    /// State before the last item, for [`SlinkChecker::unread`].
    undo: Option<(Option<u32>, SlinkCounters)>,
}

impl SlinkChecker {
    /// A checker expecting any first L1ID.
    pub fn new(config: SlinkCheckConfig) -> SlinkChecker {
        SlinkChecker {
            config,
            source: None,
            gaps_are_errors: true,
            last_l1id: None,
            counters: SlinkCounters::default(),
            undo: None,
        }
    }

    /// Checks every fragment's ROD source identifier against `source_id` (the low 24 bits:
    /// sub-detector and module; the top byte is optional): one of another source is kept,
    /// flagged `ROB_FORMAT_ERROR` and `DATA_CORRUPTION`, and counted in
    /// [`SlinkCounters::source_mismatches`]. For links from outside (a detector's cables, link
    /// captures): two swapped links ran "ok" before 2026-12-07.
    pub fn expect_source(&mut self, source_id: u32) {
        self.source = Some(source_id);
    }

    /// Takes a gap in the L1ID sequence as no error (a repeat still is): for a replay of
    /// recorded data keeping its L1IDs, whose accepted events are sparse (every fragment was
    /// flagged a link error, unexplained, before a QA pass, 2026-12-07).
    pub fn allow_l1id_gaps(&mut self) {
        self.gaps_are_errors = false;
    }

    /// The configuration.
    pub fn config(&self) -> &SlinkCheckConfig {
        &self.config
    }

    /// Counters so far.
    pub fn counters(&self) -> &SlinkCounters {
        &self.counters
    }

    /// The extended L1ID of the last kept fragment.
    pub fn last_l1id(&self) -> Option<u32> {
        self.last_l1id
    }

    /// Checks every fragment of `words` (whole fragments, as a card writes them into a
    /// superpage) and hands each out, in stream order. Never panics, whatever the words.
    pub fn check<'a>(&mut self, words: &'a [u32], mut on_item: impl FnMut(SlinkItem<'a>)) {
        let mut at = 0;
        while let Some(item) = self.next_item(words, &mut at) {
            on_item(item);
        }
    }

    /// The next item of `words` from word `*at`, advancing `*at` past it; `None` at the end.
    ///
    /// The pull form of [`SlinkChecker::check`], for a reader that may have to stop in the
    /// middle of a superpage (a full event store): it keeps `*at`, and if it cannot take the
    /// item it calls [`SlinkChecker::unread`] and asks again later from the same `*at`.
    pub fn next_item<'a>(&mut self, words: &'a [u32], at: &mut usize) -> Option<SlinkItem<'a>> {
        if *at >= words.len() {
            return None;
        }
        self.undo = Some((self.last_l1id, self.counters));
        let mut item = None;
        let start = *at;
        *at = if self.config.framing {
            self.framed_at(words, start, &mut |i| item = Some(i))
        } else {
            self.unframed_at(words, start, &mut |i| item = Some(i))
        };
        self.counters.words += (*at - start) as u64;
        item
    }

    /// [`SlinkChecker::next_item`] for a stream whose fragments are `*unit_words` words long
    /// each, control and CRC words included (the card's descriptor; module docs, "Fragments
    /// whose length the card reported"): the fragment at `*at` is checked at its known end
    /// instead of scanned for it. When it does not fit that length (damaged, or `*at` is not
    /// a fragment's start), `*unit_words` becomes `None` and the item comes from the scan, as
    /// do the items of every later call with it: pass the same `Option` for the rest of the
    /// superpage.
    pub fn next_item_sized<'a>(
        &mut self,
        words: &'a [u32],
        at: &mut usize,
        unit_words: &mut Option<usize>,
    ) -> Option<SlinkItem<'a>> {
        let start = *at;
        let Some(n) = *unit_words else {
            return self.next_item(words, at);
        };
        if start >= words.len() {
            return None;
        }
        let end = start.saturating_add(n);
        let fits = end <= words.len()
            && if self.config.framing {
                n >= 2 && words[start] == SLINK_BEGIN && words[end - 1] == SLINK_END
            } else {
                words.get(start) == Some(&ROD_MARKER)
                    && trailer_agrees_len(words, start, end, usize::from(self.config.crc))
            };
        if !fits {
            *unit_words = None;
            return self.next_item(words, at);
        }
        self.undo = Some((self.last_l1id, self.counters));
        let body = if self.config.framing {
            &words[start + 1..end - 1]
        } else {
            &words[start..end]
        };
        let mut item = None;
        self.body(words, start, end, body, Status::OK, &mut |i| item = Some(i));
        if matches!(item, Some(SlinkItem::Fragment(_))) {
            self.counters.sized_fragments += 1;
        }
        self.counters.words += n as u64;
        *at = end;
        item
    }

    /// Takes back the last item of [`SlinkChecker::next_item`]: the L1ID sequence and the
    /// counters return to where they were before it (the caller rewinds its position).
    pub fn unread(&mut self) {
        if let Some((last, counters)) = self.undo.take() {
            self.last_l1id = last;
            self.counters = counters;
        }
    }

    /// Handles the stream from word `i` (framing on); returns where the next item starts.
    fn framed_at<'a>(
        &mut self,
        words: &'a [u32],
        i: usize,
        on_item: &mut impl FnMut(SlinkItem<'a>),
    ) -> usize {
        let (start, has_begin) = match words[i] {
            SLINK_BEGIN => (i + 1, true),
            ROD_MARKER => (i, false),
            _ => {
                let end = find(words, i + 1, |w| w == SLINK_BEGIN || w == ROD_MARKER);
                self.drop_words(words, i, end, DropReason::Garbage, on_item);
                return end;
            }
        };
        let stop = find(words, start, |w| w == SLINK_END || w == SLINK_BEGIN);
        let has_end = words.get(stop) == Some(&SLINK_END);
        let mut status = Status::OK;
        if !has_begin {
            self.counters.missing_begin += 1;
            status.insert(Status::ROB_MISSING_BOF);
        }
        if !has_end {
            self.counters.missing_end += 1;
            status.insert(Status::ROB_MISSING_EOF);
            if stop == words.len() {
                self.counters.truncated += 1;
                status.insert(Status::ROB_TRUNCATION);
            }
        }
        let next = if has_end { stop + 1 } else { stop };
        self.body(words, i, next, &words[start..stop], status, on_item);
        next
    }

    /// Handles the stream from word `i` (framing off); returns where the next item starts.
    fn unframed_at<'a>(
        &mut self,
        words: &'a [u32],
        i: usize,
        on_item: &mut impl FnMut(SlinkItem<'a>),
    ) -> usize {
        if words[i] != ROD_MARKER {
            let end = find(words, i + 1, |w| w == ROD_MARKER);
            self.drop_words(words, i, end, DropReason::Garbage, on_item);
            return end;
        }
        let crc = usize::from(self.config.crc);
        // Look at a bounded number of following markers for one where the trailer agrees, so
        // adversarial data (markers everywhere) costs linear time.
        let mut first = None;
        let mut at = i + 1;
        let mut tries = 0;
        let end = loop {
            let candidate = find(words, at, |w| w == ROD_MARKER);
            if trailer_agrees_len(words, i, candidate, crc) {
                break candidate;
            }
            let first = *first.get_or_insert(candidate);
            tries += 1;
            if candidate == words.len() || tries == MAX_BOUNDARY_CANDIDATES {
                break first;
            }
            at = candidate + 1;
        };
        self.body(words, i, end, &words[i..end], Status::OK, on_item);
        end
    }

    /// Checks one fragment's words (`body`: ROD fragment plus CRC word, without control
    /// words), spanning stream words `from..to`.
    fn body<'a>(
        &mut self,
        words: &'a [u32],
        from: usize,
        to: usize,
        body: &'a [u32],
        mut status: Status,
        on_item: &mut impl FnMut(SlinkItem<'a>),
    ) {
        let (rod, crc) = match body.split_last() {
            Some((&crc, rod)) if self.config.crc => (rod, Some(crc)),
            _ => (body, None),
        };
        if rod.len() < MIN_READABLE_WORDS {
            self.drop_words(words, from, to, DropReason::Short, on_item);
            return;
        }
        if crc.is_some_and(|crc| u32::from(crc16_words(CRC16_INIT, rod)) != crc) {
            self.counters.crc_errors += 1;
            status.insert(Status::ROB_TRANSMISSION);
            status.insert(Status::DATA_CORRUPTION);
        }
        match RodFragment::parse(rod) {
            Ok(_) => {}
            Err(e) => match e.error() {
                ErrorKind::BadMarker { .. }
                | ErrorKind::ByteSwapped { .. }
                | ErrorKind::UnsupportedLegacy { .. } => {
                    self.counters.bad_markers += 1;
                    status.insert(Status::ROB_INVALID_MARKER);
                    status.insert(Status::DATA_CORRUPTION);
                }
                ErrorKind::Truncated { .. } | ErrorKind::RodTrailer { .. } => {
                    self.counters.format_errors += 1;
                    status.insert(Status::ROB_FRAGMENT_SIZE);
                    status.insert(Status::DATA_CORRUPTION);
                }
                _ => {
                    self.counters.format_errors += 1;
                    status.insert(Status::ROB_FORMAT_ERROR);
                    status.insert(Status::DATA_CORRUPTION);
                }
            },
        }
        if let Some(want) = self.source {
            if (rod[3] ^ want) & 0x00FF_FFFF != 0 {
                self.counters.source_mismatches += 1;
                status.insert(Status::ROB_FORMAT_ERROR);
                status.insert(Status::DATA_CORRUPTION);
            }
        }
        let l1id = rod[5];
        match self.last_l1id {
            Some(last) if last == l1id => {
                self.counters.duplicates += 1;
                status.insert(Status::ROB_DUPLICATE_EVENT);
            }
            Some(last)
                if self.gaps_are_errors
                    && next_extended_l1id(last, self.config.l1id_wrap) != l1id =>
            {
                self.counters.l1id_sequence_errors += 1;
                status.insert(Status::ROB_L1ID_SEQUENCE);
                status.insert(Status::L1ID_CHECK_FAIL);
            }
            _ => {}
        }
        self.last_l1id = Some(l1id);
        self.counters.fragments += 1;
        if !status.is_ok() {
            self.counters.flagged_fragments += 1;
        }
        on_item(SlinkItem::Fragment(SlinkFragment {
            offset: from,
            rod,
            extended_l1id: l1id,
            status,
        }));
    }

    fn drop_words<'a>(
        &mut self,
        words: &'a [u32],
        from: usize,
        to: usize,
        reason: DropReason,
        on_item: &mut impl FnMut(SlinkItem<'a>),
    ) {
        match reason {
            DropReason::Garbage => self.counters.garbage_spans += 1,
            DropReason::Short => self.counters.short_fragments += 1,
        }
        self.counters.dropped_words += (to - from) as u64;
        on_item(SlinkItem::Dropped(SlinkDrop {
            offset: from,
            words: &words[from..to],
            reason,
        }));
    }
}

/// The first index `>= from` whose word satisfies `pred`, or `words.len()`.
///
/// Words are tested 16 at a time with a branch-free OR over the block (which the compiler turns
/// into vector compares), then the block that matched is searched word by word: the scan over a
/// fragment's payload for its end word runs at memory speed.
fn find(words: &[u32], from: usize, pred: impl Fn(u32) -> bool) -> usize {
    let Some(rest) = words.get(from..) else {
        return words.len();
    };
    let mut blocks = rest.chunks_exact(16);
    let mut at = from;
    for block in &mut blocks {
        if block.iter().fold(false, |hit, &w| hit | pred(w)) {
            if let Some(p) = block.iter().position(|&w| pred(w)) {
                return at + p;
            }
        }
        at += 16;
    }
    blocks
        .remainder()
        .iter()
        .position(|&w| pred(w))
        .map_or(words.len(), |p| at + p)
}

/// Whether the ROD trailer at the end of `rod` accounts for exactly its length.
fn trailer_agrees(rod: &[u32]) -> bool {
    let n = rod.len();
    if n < ROD_HEADER_WORDS + ROD_TRAILER_WORDS {
        return false;
    }
    let nstatus = u64::from(rod[n - 3]);
    let ndata = u64::from(rod[n - 2]);
    (ROD_HEADER_WORDS + ROD_TRAILER_WORDS) as u64 + nstatus + ndata == n as u64
}

/// [`trailer_agrees`] for the fragment `words[from..to]` followed by `crc` CRC words.
fn trailer_agrees_len(words: &[u32], from: usize, to: usize, crc: usize) -> bool {
    to >= from + crc && trailer_agrees(&words[from..to - crc])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragment::RodBuilder;

    fn rod(l1id: u32, ndata: usize) -> Vec<u32> {
        let data: Vec<u32> = (0..ndata as u32).map(|i| 0x100 + i).collect();
        let pieces: [&[u32]; 1] = [&data];
        let b = RodBuilder {
            source_id: crate::fragment::SourceId(0x0011_0001),
            run_number: 1,
            extended_l1id: l1id,
            bcid: 3,
            trigger_type: 1,
            status: &[0],
            data: &pieces,
            ..RodBuilder::default()
        };
        let mut out = Vec::new();
        b.write_vec(&mut out).unwrap();
        out
    }

    fn collect(c: &mut SlinkChecker, words: &[u32]) -> (Vec<(u32, u32)>, Vec<DropReason>) {
        let mut frags = Vec::new();
        let mut drops = Vec::new();
        c.check(words, |item| match item {
            SlinkItem::Fragment(f) => frags.push((f.extended_l1id, f.status.word())),
            SlinkItem::Dropped(d) => drops.push(d.reason),
        });
        (frags, drops)
    }

    /// With a source expected, a fragment of another sub-detector or module is kept, flagged
    /// and counted; the optional top byte is not compared; without one nothing is checked.
    #[test]
    fn a_fragment_of_another_source_is_flagged_when_a_source_is_expected() {
        let mut words = rod(0, 2);
        words.extend(rod(1, 2));
        words[3] = 0x0011_0002; // the first from module 2
        let mut c = SlinkChecker::new(SlinkCheckConfig::default());
        c.expect_source(0xAB11_0001);
        let (frags, drops) = collect(&mut c, &words);
        assert!(drops.is_empty());
        let flags = (Status::ROB_FORMAT_ERROR | Status::DATA_CORRUPTION).word();
        assert_eq!(frags, [(0, flags), (1, 0)]);
        assert_eq!(c.counters().source_mismatches, 1);
        assert_eq!(c.counters().errors(), 1);
        let mut any = SlinkChecker::new(SlinkCheckConfig::default());
        assert_eq!(collect(&mut any, &words).0, [(0, 0), (1, 0)]);
    }

    /// With gaps allowed (a replay of recorded data), a gap in the L1IDs is no error and a
    /// repeat still is; by default the gap is one.
    #[test]
    fn l1id_gaps_are_no_error_when_allowed_and_repeats_still_are() {
        let words: Vec<u32> = [0, 7, 7].iter().flat_map(|&l| rod(l, 2)).collect();
        let mut c = SlinkChecker::new(SlinkCheckConfig::default());
        c.allow_l1id_gaps();
        collect(&mut c, &words);
        assert_eq!(
            (c.counters().l1id_sequence_errors, c.counters().duplicates),
            (0, 1)
        );
        let mut strict = SlinkChecker::new(SlinkCheckConfig::default());
        collect(&mut strict, &words);
        assert_eq!(strict.counters().l1id_sequence_errors, 1);
    }

    #[test]
    fn framed_stream_with_every_problem() {
        let mut s = Vec::new();
        let framed = |s: &mut Vec<u32>, r: &[u32], begin: bool, end: bool| {
            if begin {
                s.push(SLINK_BEGIN);
            }
            s.extend_from_slice(r);
            if end {
                s.push(SLINK_END);
            }
        };
        framed(&mut s, &rod(0, 5), true, true); // good
        framed(&mut s, &rod(1, 5), false, true); // missing begin
        framed(&mut s, &rod(2, 5), true, false); // missing end
        framed(&mut s, &rod(2, 5), true, true); // duplicate
        s.extend_from_slice(&[7, 8, 9]); // garbage
        framed(&mut s, &rod(5, 5), true, true); // sequence error
        framed(&mut s, &[ROD_MARKER, 9, 3], true, true); // short: dropped
        let mut bad = rod(6, 5);
        bad[0] = 0x1234_5678;
        framed(&mut s, &bad, true, true); // bad marker
        let mut size = rod(7, 5);
        let n = size.len();
        size[n - 2] += 1;
        framed(&mut s, &size, true, true); // trailer inconsistent
        framed(&mut s, &rod(8, 5)[..10], true, false); // truncated at the end of data
        let mut c = SlinkChecker::new(SlinkCheckConfig {
            framing: true,
            ..Default::default()
        });
        let (frags, drops) = collect(&mut c, &s);
        assert_eq!(drops, [DropReason::Garbage, DropReason::Short]);
        let l1ids: Vec<u32> = frags.iter().map(|f| f.0).collect();
        assert_eq!(l1ids, [0, 1, 2, 2, 5, 6, 7, 8]);
        let st = |i: usize| Status(frags[i].1);
        assert!(st(0).is_ok());
        assert!(st(1).contains(Status::ROB_MISSING_BOF));
        assert!(st(2).contains(Status::ROB_MISSING_EOF));
        assert!(st(3).contains(Status::ROB_DUPLICATE_EVENT));
        assert!(st(4).contains(Status::ROB_L1ID_SEQUENCE));
        assert!(st(5).contains(Status::ROB_INVALID_MARKER));
        assert!(st(6).contains(Status::ROB_FRAGMENT_SIZE));
        assert!(st(7).contains(Status::ROB_TRUNCATION));
        let k = c.counters();
        assert_eq!(
            (
                k.missing_begin,
                k.missing_end,
                k.duplicates,
                k.l1id_sequence_errors
            ),
            (1, 2, 1, 1)
        );
        assert_eq!((k.bad_markers, k.format_errors, k.truncated), (1, 2, 1));
        assert_eq!((k.short_fragments, k.garbage_spans, k.fragments), (1, 1, 8));
        assert_eq!(k.words, s.len() as u64);
    }

    #[test]
    fn unframed_stream_prefers_trailer_agreement() {
        let mut s = rod(0, 4);
        let mut second = rod(1, 6);
        // A payload word equal to the marker must not split the fragment.
        second[12] = ROD_MARKER;
        s.extend_from_slice(&second);
        s.extend_from_slice(&rod(2, 3));
        let mut c = SlinkChecker::new(SlinkCheckConfig::default());
        let (frags, drops) = collect(&mut c, &s);
        assert!(drops.is_empty());
        assert_eq!(frags, [(0, 0), (1, 0), (2, 0)]);
    }

    #[test]
    fn crc_word_is_checked() {
        let mut s = Vec::new();
        for l1 in 0..3 {
            let r = rod(l1, 8);
            s.push(SLINK_BEGIN);
            s.extend_from_slice(&r);
            s.push(u32::from(crc16_words(CRC16_INIT, &r)));
            s.push(SLINK_END);
        }
        s[1 + 12] ^= 0x10; // a data bit of the first fragment
        let mut c = SlinkChecker::new(SlinkCheckConfig {
            framing: true,
            crc: true,
            ..Default::default()
        });
        let (frags, _) = collect(&mut c, &s);
        assert_eq!(frags.len(), 3);
        assert!(Status(frags[0].1).contains(Status::ROB_TRANSMISSION));
        assert!(Status(frags[1].1).is_ok() && Status(frags[2].1).is_ok());
        assert_eq!(c.counters().crc_errors, 1);
    }

    #[test]
    fn arbitrary_words_never_panic() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let specials = [SLINK_BEGIN, SLINK_END, ROD_MARKER, 9, 0, 1];
        for framing in [false, true] {
            for crc in [false, true] {
                let mut c = SlinkChecker::new(SlinkCheckConfig {
                    framing,
                    crc,
                    l1id_wrap: 7,
                });
                for len in 0..300 {
                    let words: Vec<u32> = (0..len)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            if x % 3 == 0 {
                                specials[(x >> 8) as usize % specials.len()]
                            } else {
                                (x >> 32) as u32 % 40
                            }
                        })
                        .collect();
                    let mut seen = 0u64;
                    c.check(&words, |item| {
                        seen += match item {
                            SlinkItem::Fragment(f) => f.rod.len() as u64,
                            SlinkItem::Dropped(d) => d.words.len() as u64,
                        };
                    });
                    assert!(seen <= len as u64);
                }
            }
        }
    }

    #[test]
    fn pull_with_unread_matches_push() {
        let mut s = Vec::new();
        for l1 in [0, 1, 1, 3, 4] {
            s.push(SLINK_BEGIN);
            s.extend_from_slice(&rod(l1, 3));
            s.push(SLINK_END);
        }
        s.extend_from_slice(&[5, 6]);
        let cfg = SlinkCheckConfig {
            framing: true,
            ..Default::default()
        };
        let mut push = SlinkChecker::new(cfg);
        let (want, drops) = collect(&mut push, &s);
        let mut pull = SlinkChecker::new(cfg);
        let mut at = 0;
        let mut got = Vec::new();
        let mut refused = false;
        while let Some(item) = pull.next_item(&s, &mut at) {
            if let SlinkItem::Fragment(f) = item {
                if f.extended_l1id == 3 && !refused {
                    // The store is full: give it back, rewind, take it again later.
                    refused = true;
                    pull.unread();
                    at = f.offset;
                    continue;
                }
                got.push((f.extended_l1id, f.status.word()));
            }
        }
        assert_eq!(got, want);
        assert_eq!(drops, [DropReason::Garbage]);
        assert_eq!(pull.counters(), push.counters());
    }

    /// Every item of `s` through [`SlinkChecker::next_item_sized`] with fragments of
    /// `unit` words, and whether the length was still trusted at the end.
    fn collect_sized(
        c: &mut SlinkChecker,
        words: &[u32],
        unit: usize,
    ) -> (Vec<(u32, u32)>, Vec<DropReason>, bool) {
        let (mut frags, mut drops) = (Vec::new(), Vec::new());
        let mut at = 0;
        let mut hint = Some(unit);
        while let Some(item) = c.next_item_sized(words, &mut at, &mut hint) {
            match item {
                SlinkItem::Fragment(f) => frags.push((f.extended_l1id, f.status.word())),
                SlinkItem::Dropped(d) => drops.push(d.reason),
            }
        }
        (frags, drops, hint.is_some())
    }

    fn framed_stream(l1ids: &[u32], crc: bool) -> (Vec<u32>, usize) {
        let mut s = Vec::new();
        let mut unit = 0;
        for &l1 in l1ids {
            let r = rod(l1, 40);
            let before = s.len();
            s.push(SLINK_BEGIN);
            s.extend_from_slice(&r);
            if crc {
                s.push(u32::from(crc16_words(CRC16_INIT, &r)));
            }
            s.push(SLINK_END);
            unit = s.len() - before;
        }
        (s, unit)
    }

    #[test]
    fn a_reported_length_finds_the_same_fragments_as_the_scan() {
        for crc in [false, true] {
            let (s, unit) = framed_stream(&[0, 1, 2, 2, 4, 5], crc);
            let cfg = SlinkCheckConfig {
                framing: true,
                crc,
                ..Default::default()
            };
            let mut scan = SlinkChecker::new(cfg);
            let (want, want_drops) = collect(&mut scan, &s);
            let mut sized = SlinkChecker::new(cfg);
            let (got, drops, trusted) = collect_sized(&mut sized, &s, unit);
            assert_eq!((got, drops), (want, want_drops));
            assert!(trusted);
            let mut k = *sized.counters();
            assert_eq!(k.sized_fragments, 6);
            assert_eq!((k.duplicates, k.l1id_sequence_errors), (1, 1));
            k.sized_fragments = 0;
            assert_eq!(&k, scan.counters());
        }
        // Framing off: the ROD marker at the start and the trailer's count at the end.
        let mut s = rod(0, 7);
        let unit = s.len();
        s.extend_from_slice(&rod(1, 7));
        let mut c = SlinkChecker::new(SlinkCheckConfig::default());
        let (got, drops, trusted) = collect_sized(&mut c, &s, unit);
        assert_eq!(got, [(0, 0), (1, 0)]);
        assert!(drops.is_empty() && trusted);
        assert_eq!(c.counters().sized_fragments, 2);
    }

    #[test]
    fn a_damaged_fragment_is_found_as_the_scan_finds_it() {
        let cfg = SlinkCheckConfig {
            framing: true,
            ..Default::default()
        };
        let (clean, unit) = framed_stream(&[0, 1, 2, 3, 4], false);
        // Every damage the scan sees: a lost end word, garbage, a size error in the trailer.
        let mut no_end = clean.clone();
        no_end.remove(2 * unit - 1);
        let mut garbage = clean.clone();
        garbage.splice(unit..unit, [7, 8, 9]);
        let mut size = clean.clone();
        size[2 * unit - 3] += 1;
        // A size error inside a well-framed fragment is the ROD checks' to find: the length
        // stays trusted.
        let cases = [
            ("no end", no_end, false),
            ("garbage", garbage, false),
            ("size", size, true),
        ];
        for (what, s, still_trusted) in cases {
            let mut scan = SlinkChecker::new(cfg);
            let (want, want_drops) = collect(&mut scan, &s);
            let mut sized = SlinkChecker::new(cfg);
            let (got, drops, trusted) = collect_sized(&mut sized, &s, unit);
            assert_eq!((&got, &drops), (&want, &want_drops), "{what}");
            assert_eq!(trusted, still_trusted, "{what}");
            assert!(scan.counters().errors() > 0, "{what}");
            let mut k = *sized.counters();
            assert!(
                k.sized_fragments >= 1,
                "{what}: the first fragment was sized"
            );
            k.sized_fragments = 0;
            assert_eq!(&k, scan.counters(), "{what}");
        }
    }

    #[test]
    fn with_a_reported_length_a_payload_word_equal_to_a_control_word_is_data() {
        let (mut s, unit) = framed_stream(&[0, 1], false);
        s[20] = SLINK_END;
        s[unit + 21] = SLINK_BEGIN;
        let cfg = SlinkCheckConfig {
            framing: true,
            ..Default::default()
        };
        let mut c = SlinkChecker::new(cfg);
        let (got, drops, trusted) = collect_sized(&mut c, &s, unit);
        assert_eq!(got, [(0, 0), (1, 0)]);
        assert!(drops.is_empty() && trusted);
        assert_eq!(c.counters().errors(), 0);
        // The value scan cannot tell: it splits both fragments.
        let mut scan = SlinkChecker::new(cfg);
        collect(&mut scan, &s);
        assert!(scan.counters().errors() > 0);
    }

    #[test]
    fn a_sized_item_can_be_unread() {
        let (s, unit) = framed_stream(&[0, 1, 2], false);
        let mut c = SlinkChecker::new(SlinkCheckConfig {
            framing: true,
            ..Default::default()
        });
        let (mut at, mut hint) = (0, Some(unit));
        c.next_item_sized(&s, &mut at, &mut hint).unwrap();
        let before = (at, *c.counters());
        c.next_item_sized(&s, &mut at, &mut hint).unwrap();
        c.unread();
        at = before.0;
        assert_eq!(*c.counters(), before.1);
        let Some(SlinkItem::Fragment(f)) = c.next_item_sized(&s, &mut at, &mut hint) else {
            panic!("the second fragment again");
        };
        assert_eq!((f.extended_l1id, f.status.word()), (1, 0));
        assert_eq!(c.counters().sized_fragments, 2);
    }

    #[test]
    fn find_matches_a_plain_scan() {
        let mut words = vec![0u32; 100];
        for probe in [0usize, 1, 15, 16, 17, 47, 63, 64, 99] {
            words.iter_mut().for_each(|w| *w = 7);
            words[probe] = SLINK_END;
            for from in [0usize, 1, 16, 50, 100, 101] {
                let plain = (from..words.len())
                    .find(|&i| words[i] == SLINK_END)
                    .unwrap_or(words.len());
                assert_eq!(
                    find(&words, from, |w| w == SLINK_END),
                    plain,
                    "{probe} {from}"
                );
            }
        }
    }
}
