//! The S-LINK input adapter: splits the words of a filled superpage into ROD fragments and
//! hands each to the store with its status bits.
//!
//! This is deliberately small: the reusable S-LINK stream checker (`rodeo_format::slink`) is
//! being written separately; this adapter does the checks the store needs now (framing control
//! words, ROD header and trailer through [`RodFragment::parse`], the L1ID sequence per channel
//! with its wrap, and whether the L1ID can be read at all) and is replaced by that checker
//! when it lands. Framing must be on: without the control words a stream of ROD fragments
//! cannot be split from the front.
//!
//! Fragments whose L1ID cannot be read are counted, dumped (rate-limited) and dropped; every
//! other error sets status bits and the fragment is stored.

use std::io::Write;
use std::time::Instant;

use rodeo_format::fragment::{RodFragment, Status, ROD_MARKER, SLINK_BEGIN, SLINK_END};

/// Counters of the adapter (64-bit, monotonic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlinkCounters {
    /// Fragments handed on (good or flagged).
    pub fragments: u64,
    /// Fragments handed on with status bits set.
    pub flagged: u64,
    /// Fragments dropped because their L1ID could not be read.
    pub unreadable: u64,
    /// Words skipped looking for a begin control word.
    pub skipped_words: u64,
    /// L1ID sequence errors.
    pub sequence_errors: u64,
}

/// One piece the adapter found.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// A ROD fragment (without control words) whose L1ID is readable, with its status.
    Fragment(&'a [u32], Status),
    /// Words that hold no readable L1ID: count, dump, drop.
    Unreadable(&'a [u32]),
}

/// Per-channel adapter state: the L1ID sequence and counters.
#[derive(Debug, Clone)]
pub struct SlinkAdapter {
    wrap: u32,
    last: Option<u32>,
    /// The sequence state and counters before the last fragment, for [`SlinkAdapter::unread`].
    undo: (Option<u32>, SlinkCounters),
    /// Counters.
    pub counters: SlinkCounters,
}

impl SlinkAdapter {
    /// An adapter expecting L1IDs that wrap at `wrap` (the ECR then increments).
    pub fn new(wrap: u32) -> SlinkAdapter {
        SlinkAdapter {
            wrap: wrap.clamp(1, 1 << 24),
            last: None,
            undo: (None, SlinkCounters::default()),
            counters: SlinkCounters::default(),
        }
    }

    fn expected_after(&self, last: u32) -> u32 {
        let l1 = (last & 0x00FF_FFFF) + 1;
        if l1 >= self.wrap {
            ((last >> 24).wrapping_add(1) & 0xFF) << 24
        } else {
            (last & 0xFF00_0000) | l1
        }
    }

    /// Forgets the last fragment returned (the store refused it; it will be read again).
    pub fn unread(&mut self) {
        (self.last, self.counters) = self.undo;
    }

    /// The next piece of `words` from `*at`, advancing `*at`; `None` at the end.
    pub fn next<'a>(&mut self, words: &'a [u32], at: &mut usize) -> Option<Piece<'a>> {
        let start = *at;
        let rest = words.get(start..).filter(|r| !r.is_empty())?;
        if rest[0] != SLINK_BEGIN {
            // Resynchronise on the next begin word; what lies before it is unreadable.
            let skip = rest
                .iter()
                .position(|&w| w == SLINK_BEGIN)
                .unwrap_or(rest.len());
            *at = start + skip;
            self.counters.skipped_words += skip as u64;
            self.counters.unreadable += 1;
            return Some(Piece::Unreadable(&rest[..skip]));
        }
        let body = &rest[1..];
        self.undo = (self.last, self.counters);
        let mut status = Status::OK;
        let (rod, used) = match body
            .iter()
            .position(|&w| w == SLINK_END || w == SLINK_BEGIN)
        {
            Some(i) if body[i] == SLINK_END => (&body[..i], i + 2),
            Some(i) => {
                status.insert(Status::ROB_MISSING_EOF);
                (&body[..i], i + 1)
            }
            None => {
                status.insert(Status::ROB_MISSING_EOF);
                (body, body.len() + 1)
            }
        };
        *at = start + used;
        if rod.len() <= 5 || rod[0] != ROD_MARKER {
            self.counters.unreadable += 1;
            return Some(Piece::Unreadable(&rest[..used]));
        }
        if RodFragment::parse(rod).is_err() {
            status.insert(Status::ROB_FORMAT_ERROR);
        }
        let l1id = rod[5];
        if let Some(last) = self.last {
            if l1id == last {
                status.insert(Status::ROB_DUPLICATE_EVENT);
            } else if l1id != self.expected_after(last) {
                status.insert(Status::ROB_L1ID_SEQUENCE);
                self.counters.sequence_errors += 1;
            }
        }
        self.last = Some(l1id);
        self.counters.fragments += 1;
        if !status.is_ok() {
            self.counters.flagged += 1;
        }
        Some(Piece::Fragment(rod, status))
    }
}

/// Writes unreadable fragments to an error file as hex words, at most `per_s` per second.
#[derive(Debug)]
pub struct ErrorDump {
    out: Option<std::fs::File>,
    per_s: u32,
    window: Instant,
    in_window: u32,
    /// Fragments written.
    pub dumped: u64,
    /// Fragments not written because of the rate limit.
    pub suppressed: u64,
}

impl ErrorDump {
    /// A dump into `out` (none: count only).
    pub fn new(out: Option<std::fs::File>, per_s: u32) -> ErrorDump {
        ErrorDump {
            out,
            per_s,
            window: Instant::now(),
            in_window: 0,
            dumped: 0,
            suppressed: 0,
        }
    }

    /// Dumps `words` of channel `channel` unless the rate limit is reached.
    pub fn dump(&mut self, channel: usize, words: &[u32]) {
        if self.window.elapsed().as_secs() >= 1 {
            self.window = Instant::now();
            self.in_window = 0;
        }
        let Some(out) = self.out.as_mut() else {
            self.suppressed += 1;
            return;
        };
        if self.in_window >= self.per_s {
            self.suppressed += 1;
            return;
        }
        self.in_window += 1;
        let mut line = format!("channel {channel} words {}:", words.len());
        for w in words.iter().take(64) {
            line.push_str(&format!(" {w:08x}"));
        }
        line.push('\n');
        if out.write_all(line.as_bytes()).is_ok() {
            self.dumped += 1;
        } else {
            self.suppressed += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::Generator;
    use crate::generator::{SlinkConfig, SlinkGenerator, WordRange};

    fn stream(n: u64, wrap: u32) -> Vec<u32> {
        let mut g = SlinkGenerator::new(SlinkConfig {
            framing: true,
            data_words: WordRange::uniform(0, 20),
            l1id_wrap: wrap,
            ..SlinkConfig::default()
        });
        let mut buf = vec![0u8; 64 * 1024];
        let f = g.fill(&mut buf, n);
        buf[..f.bytes]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    #[test]
    fn clean_stream_across_wrap_has_no_flags() {
        let w = stream(50, 7);
        let mut a = SlinkAdapter::new(7);
        let mut at = 0;
        let mut n = 0;
        while let Some(p) = a.next(&w, &mut at) {
            assert!(matches!(p, Piece::Fragment(_, s) if s.is_ok()), "{p:?}");
            n += 1;
        }
        assert_eq!(n, 50);
        assert_eq!(a.counters.flagged, 0);
    }

    #[test]
    fn broken_fragments_are_flagged_or_unreadable() {
        let mut w = stream(6, 1 << 24);
        // Fragment 2: break the ROD trailer (format error, still readable).
        let begins: Vec<usize> = (0..w.len()).filter(|&i| w[i] == SLINK_BEGIN).collect();
        let end2 = begins[3] - 2; // word before the end control word of fragment 2
        w[end2] = 77;
        // Fragment 4: break the ROD marker (unreadable).
        w[begins[4] + 1] = 0xDEAD_BEEF;
        // Garbage before fragment 5.
        w.insert(begins[5], 0x1234_5678);
        let mut a = SlinkAdapter::new(1 << 24);
        let mut at = 0;
        let mut got = Vec::new();
        while let Some(p) = a.next(&w, &mut at) {
            got.push(match p {
                Piece::Fragment(_, s) => s.word(),
                Piece::Unreadable(_) => u32::MAX,
            });
        }
        assert_eq!(got.len(), 7);
        assert!(Status(got[2]).contains(Status::ROB_FORMAT_ERROR));
        assert_eq!(got[4], u32::MAX);
        assert_eq!(got[5], u32::MAX, "the garbage word");
        // Fragment 5 follows a dropped fragment: its L1ID skips one.
        assert!(Status(got[6]).contains(Status::ROB_L1ID_SEQUENCE));
        assert_eq!(a.counters.unreadable, 2);
    }
}
