//! eformat v3 and v4 full events (BESIII, ATLAS before 2009), walked down to their ROBs.
//!
//! rodeo builds and reads eformat 5 ([`rodeo_format::fragment`]); the experiments' older files hold
//! events of major version 3 (0x0300xxxx) or 4 (0x0400xxxx). This module reads them, read-only,
//! into what a replay or a dump needs: the event's run number and L1ID and the list of its ROB
//! fragments (source identifier, the ROB's words, its ROD's words and data block).
//!
//! # Layout
//!
//! Every fragment starts with the generic header: marker, total size, header size, version,
//! source identifier, number of status words N, the N status words, then one more word, which is
//!
//! - in version 3, the count of fragment-specific words that follow it (BESIII's layout, as
//!   pybes3's raw reader `src/pybes3/kernels/raw_io.cpp`, `RawBinaryParser::read_event` and
//!   `read_sub_detector`, reads it);
//! - in version 4, the checksum type, the fragment-specific words following it (athena,
//!   `Event/ByteStreamCnvSvcLegacy/src/offline_eformat/old/v40_Header.cxx`,
//!   `checksum_type()` = word 6+N and `specific_header()` = word 7+N). A checksum type other
//!   than 0 adds one checksum word at the end of the fragment, outside its payload.
//!
//! The children start at the header size (`payload()` = start + header size in both sources).
//! A full event (0xAA1234AA) holds sub-detector fragments (0xBB1234BB, BESIII and ATLAS v3),
//! which hold ROS fragments (0xCC1234CC), which hold ROB fragments (0xDD1234DD); ATLAS v4 events
//! hold ROBs directly (`v40_FullEventFragment.cxx`, `children()` looks for ROB markers). The
//! walker here dispatches on each child's marker, so both hierarchies read the same way. A ROB's
//! payload is one ROD fragment (0xEE1234EE): marker, header size (9), version, source, run
//! number, L1ID, BCID, trigger type, detector event type, then status and data blocks and the
//! 3-word trailer (number of status words, number of data words, status position), the same in
//! both sources (`v40_ROBFragment.cxx`, `rod_run_no()` = word 4, `rod_lvl1_id()` = word 5;
//! pybes3 `read_ROB`).
//!
//! # Run number and L1ID of the event
//!
//! - Version 4 (ATLAS, athena `v40_FullEventFragment.cxx`): specific words `bc_time_seconds`
//!   [0], `bc_time_nanoseconds` [1], `global_id` [2], `run_type` [3], `run_no` [4],
//!   `lumi_block` [5], `lvl1_id` [6], `bc_id` [7], `lvl1_trigger_type` [8], then counted L1,
//!   L2, EF and stream-tag lists.
//! - Version 3 with 10 specific words (BESIII, pybes3 `read_event`, which requires exactly 10):
//!   time [0], event number [1], run number [2], L1ID [3], two words pybes3 skips [4..5], four
//!   event-filter tag words [6..9].
//! - Version 3 with another count (ATLAS eformat 3.x, whose full-event specific layout has no
//!   public source this project could cite): the run number and L1ID of the first ROD, which
//!   every ROB carries at fixed offsets in both layouts; [`IdSource`] says which rule applied.
//!
//! # Robustness
//!
//! Every size comes from the data and is checked before use: a child must lie inside its parent
//! (never trusted past it), a header inside its fragment, a ROD's trailer counts must add up to
//! the ROD's size. Every access is bounds-checked; errors are [`LegacyError`]s naming the
//! fragment kind and its word offset in the event.

use std::fmt;

use rodeo_format::fragment::{
    FULL_EVENT_MARKER, LEGACY_ROS_MARKER, LEGACY_SUBDETECTOR_MARKER, ROB_MARKER, ROD_MARKER,
};

/// Words of the generic header before the status words.
const FIXED: usize = 6;
/// Words of a ROD header and trailer.
const ROD_HEADER: usize = 9;
const ROD_TRAILER: usize = 3;
/// Specific words of a BESIII (v3) full event (pybes3 `read_event` requires exactly this).
pub const BESIII_EVENT_SPECIFIC_WORDS: u32 = 10;
/// Deepest nesting walked (event, sub-detector, ROS, ROB): deeper means a malformed event.
const MAX_DEPTH: usize = 4;

/// Which kind of legacy fragment an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LegacyKind {
    /// Full event (0xAA1234AA).
    FullEvent,
    /// Sub-detector fragment (0xBB1234BB).
    SubDetector,
    /// ROS fragment (0xCC1234CC).
    Ros,
    /// ROB fragment (0xDD1234DD).
    Rob,
    /// ROD fragment (0xEE1234EE).
    Rod,
}

impl fmt::Display for LegacyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LegacyKind::FullEvent => "full event",
            LegacyKind::SubDetector => "sub-detector",
            LegacyKind::Ros => "ROS",
            LegacyKind::Rob => "ROB",
            LegacyKind::Rod => "ROD",
        })
    }
}

/// What is wrong with a legacy fragment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LegacyErrorKind {
    /// Fewer words than the generic header or the ROD needs.
    #[error("truncated: {what} needs {needed} words, {available} available")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Words needed from the fragment start.
        needed: u64,
        /// Words available (up to the parent's end).
        available: u64,
    },
    /// The marker is not the one expected here.
    #[error("bad marker {found:#010x} (expected {expected})")]
    BadMarker {
        /// What the position allows.
        expected: &'static str,
        /// The word found.
        found: u32,
    },
    /// The major version is neither 3 nor 4.
    #[error("unsupported format version {found:#010x} (major 3 or 4 expected)")]
    BadVersion {
        /// The version word.
        found: u32,
    },
    /// The total size runs past the parent fragment (or the event's words).
    #[error("size of {size} words runs past its parent ({room} words left)")]
    PastParent {
        /// The total size word.
        size: u32,
        /// Words left in the parent from this fragment's start.
        room: u64,
    },
    /// The header size does not fit the status words or the fragment.
    #[error(
        "header size {header} does not fit (at least {minimum}, at most the fragment size {size})"
    )]
    BadHeaderSize {
        /// The header size word.
        header: u32,
        /// The smallest header the status count allows.
        minimum: u64,
        /// The total size word.
        size: u32,
    },
    /// The specific words of the full event are too few for the layout.
    #[error("{count} specific words; the {layout} layout needs {needed}")]
    ShortSpecific {
        /// Specific words present.
        count: u64,
        /// The layout applied.
        layout: &'static str,
        /// Words it needs.
        needed: u64,
    },
    /// The ROD trailer does not add up to the ROD's size.
    #[error("ROD trailer inconsistent: header {header} + {nstatus} status + {ndata} data + 3 != size {size}")]
    RodTrailer {
        /// The ROD's size (its ROB's payload).
        size: u64,
        /// ROD header size word.
        header: u32,
        /// Status words in the trailer.
        nstatus: u32,
        /// Data words in the trailer.
        ndata: u32,
    },
    /// Fragments nest deeper than event, sub-detector, ROS, ROB.
    #[error("fragments nest deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// A v3 event with a non-BESIII header holds no ROB to take its run number and L1ID from.
    #[error("no ROB to take the run number and L1ID from (non-BESIII eformat 3 header)")]
    NoIdentifiers,
}

/// An error in a legacy event: the fragment kind, its word offset in the event, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("eformat v3/v4 {kind} fragment at word {offset}: {error}")]
pub struct LegacyError {
    /// Kind of the wrong fragment.
    pub kind: LegacyKind,
    /// Its word offset from the start of the event.
    pub offset: usize,
    /// What is wrong.
    #[source]
    pub error: LegacyErrorKind,
}

/// Where a legacy event's run number and L1ID were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdSource {
    /// ATLAS eformat 4: full-event specific words 4 (run) and 6 (L1ID).
    AtlasV4,
    /// BESIII eformat 3: full-event specific words 2 (run) and 3 (L1ID).
    Besiii,
    /// Another eformat 3 header: the first ROD's words 4 (run) and 5 (L1ID).
    FirstRod,
}

/// One ROB of a legacy event: word ranges into the event's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyRob {
    /// The ROB's source identifier.
    pub source_id: u32,
    /// Word offset of the ROB fragment in the event.
    pub offset: usize,
    /// Its total size in words.
    pub size: usize,
    /// Word offset of its ROD fragment in the event.
    pub rod_offset: usize,
    /// The ROD's size in words.
    pub rod_size: usize,
    /// Word offset of the ROD's data block in the event.
    pub data_offset: usize,
    /// Data words.
    pub data_len: usize,
    /// The ROD's run number (ROD word 4).
    pub rod_run_number: u32,
    /// The ROD's L1ID (ROD word 5).
    pub rod_l1id: u32,
}

/// A validated eformat v3/v4 full event: its identifiers and its ROBs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyEvent {
    /// The version word (0x0300xxxx or 0x0400xxxx).
    pub version: u32,
    /// Major version: 3 or 4.
    pub major: u32,
    /// The event's source identifier.
    pub source_id: u32,
    /// Run number.
    pub run_number: u32,
    /// Level-1 identifier.
    pub l1id: u32,
    /// Global event id / event number, when the layout has one.
    pub global_id: Option<u32>,
    /// Which rule gave the run number and L1ID.
    pub id_source: IdSource,
    /// The ROBs, in the order they appear, walked through any sub-detector and ROS levels.
    pub robs: Vec<LegacyRob>,
}

/// The validated generic header of a fragment at `at`, bounded by `end`.
struct Header {
    size: usize,
    header: usize,
    nstatus: usize,
    version: u32,
    source: u32,
}

fn get(words: &[u32], i: usize) -> u32 {
    words.get(i).copied().unwrap_or(0)
}

fn parse_header(
    words: &[u32],
    at: usize,
    end: usize,
    kind: LegacyKind,
) -> Result<Header, LegacyError> {
    let err = |error| LegacyError {
        kind,
        offset: at,
        error,
    };
    let room = end.saturating_sub(at) as u64;
    if room < FIXED as u64 + 1 {
        return Err(err(LegacyErrorKind::Truncated {
            what: "generic header",
            needed: FIXED as u64 + 1,
            available: room,
        }));
    }
    let (size, header, version, source, nstatus) = (
        get(words, at + 1),
        get(words, at + 2),
        get(words, at + 3),
        get(words, at + 4),
        get(words, at + 5),
    );
    if u64::from(size) > room {
        return Err(err(LegacyErrorKind::PastParent { size, room }));
    }
    let major = version >> 24;
    if major != 3 && major != 4 {
        return Err(err(LegacyErrorKind::BadVersion { found: version }));
    }
    let minimum = FIXED as u64 + u64::from(nstatus) + 1;
    if u64::from(header) < minimum || header > size {
        return Err(err(LegacyErrorKind::BadHeaderSize {
            header,
            minimum,
            size,
        }));
    }
    Ok(Header {
        size: size as usize,
        header: header as usize,
        nstatus: nstatus as usize,
        version,
        source,
    })
}

/// Words at the end of a fragment outside its children: the checksum word of a v4 fragment
/// whose checksum type is not 0.
fn trailer_words(words: &[u32], at: usize, h: &Header) -> usize {
    if h.version >> 24 == 4 && get(words, at + FIXED + h.nstatus) != 0 {
        1
    } else {
        0
    }
}

impl LegacyEvent {
    /// Validates the eformat v3/v4 full event at the start of `words` and walks it down to its
    /// ROBs (see the module documentation for the layouts and their sources).
    pub fn parse(words: &[u32]) -> Result<LegacyEvent, LegacyError> {
        let kind = LegacyKind::FullEvent;
        let marker = get(words, 0);
        if marker != FULL_EVENT_MARKER {
            return Err(LegacyError {
                kind,
                offset: 0,
                error: LegacyErrorKind::BadMarker {
                    expected: "0xaa1234aa",
                    found: marker,
                },
            });
        }
        let h = parse_header(words, 0, words.len(), kind)?;
        let major = h.version >> 24;
        let count_at = FIXED + h.nstatus;
        let specific = count_at + 1;
        let in_header = (h.header - specific) as u64;
        let short = |layout, needed: u64, count: u64| LegacyError {
            kind,
            offset: 0,
            error: LegacyErrorKind::ShortSpecific {
                count,
                layout,
                needed,
            },
        };
        let mut robs = Vec::new();
        let end = h.size - trailer_words(words, 0, &h);
        walk_children(words, h.header, end, 1, &mut robs)?;
        let (run_number, l1id, global_id, id_source) = if major == 4 {
            if in_header < 9 {
                return Err(short("ATLAS eformat 4", 9, in_header));
            }
            (
                get(words, specific + 4),
                get(words, specific + 6),
                Some(get(words, specific + 2)),
                IdSource::AtlasV4,
            )
        } else if get(words, count_at) == BESIII_EVENT_SPECIFIC_WORDS {
            if in_header < u64::from(BESIII_EVENT_SPECIFIC_WORDS) {
                return Err(short("BESIII eformat 3", 10, in_header));
            }
            (
                get(words, specific + 2),
                get(words, specific + 3),
                Some(get(words, specific + 1)),
                IdSource::Besiii,
            )
        } else {
            let Some(first) = robs.first() else {
                return Err(LegacyError {
                    kind,
                    offset: 0,
                    error: LegacyErrorKind::NoIdentifiers,
                });
            };
            (
                first.rod_run_number,
                first.rod_l1id,
                None,
                IdSource::FirstRod,
            )
        };
        Ok(LegacyEvent {
            version: h.version,
            major,
            source_id: h.source,
            run_number,
            l1id,
            global_id,
            id_source,
            robs,
        })
    }
}

/// Walks the children between `at` and `end` (the parent's payload), collecting ROBs.
fn walk_children(
    words: &[u32],
    mut at: usize,
    end: usize,
    depth: usize,
    robs: &mut Vec<LegacyRob>,
) -> Result<(), LegacyError> {
    while at < end {
        let marker = get(words, at);
        let kind = match marker {
            LEGACY_SUBDETECTOR_MARKER => LegacyKind::SubDetector,
            LEGACY_ROS_MARKER => LegacyKind::Ros,
            ROB_MARKER => LegacyKind::Rob,
            found => {
                return Err(LegacyError {
                    kind: LegacyKind::Rob,
                    offset: at,
                    error: LegacyErrorKind::BadMarker {
                        expected: "a sub-detector, ROS or ROB marker",
                        found,
                    },
                })
            }
        };
        if depth >= MAX_DEPTH && kind != LegacyKind::Rob {
            return Err(LegacyError {
                kind,
                offset: at,
                error: LegacyErrorKind::TooDeep,
            });
        }
        let h = parse_header(words, at, end, kind)?;
        let child_end = at + h.size - trailer_words(words, at, &h);
        if kind == LegacyKind::Rob {
            robs.push(parse_rob(words, at, &h, child_end)?);
        } else {
            walk_children(words, at + h.header, child_end, depth + 1, robs)?;
        }
        // A valid header has at least 7 words, so the walk always advances.
        at += h.size;
    }
    Ok(())
}

fn parse_rob(
    words: &[u32],
    at: usize,
    h: &Header,
    payload_end: usize,
) -> Result<LegacyRob, LegacyError> {
    let rod = at + h.header;
    let len = payload_end.saturating_sub(rod);
    let err = |error| LegacyError {
        kind: LegacyKind::Rod,
        offset: rod,
        error,
    };
    if len < ROD_HEADER + ROD_TRAILER {
        return Err(err(LegacyErrorKind::Truncated {
            what: "ROD header and trailer",
            needed: (ROD_HEADER + ROD_TRAILER) as u64,
            available: len as u64,
        }));
    }
    let marker = get(words, rod);
    if marker != ROD_MARKER {
        return Err(err(LegacyErrorKind::BadMarker {
            expected: "0xee1234ee",
            found: marker,
        }));
    }
    let header = get(words, rod + 1);
    let (nstatus, ndata, position) = (
        get(words, payload_end - 3),
        get(words, payload_end - 2),
        get(words, payload_end - 1),
    );
    let total = u64::from(header) + u64::from(nstatus) + u64::from(ndata) + ROD_TRAILER as u64;
    if header < ROD_HEADER as u32 || total != len as u64 {
        return Err(err(LegacyErrorKind::RodTrailer {
            size: len as u64,
            header,
            nstatus,
            ndata,
        }));
    }
    // Status position 0: status before data (pybes3 `read_ROB`, athena `rod_data()`).
    let data_offset = if position == 0 {
        rod + header as usize + nstatus as usize
    } else {
        rod + header as usize
    };
    Ok(LegacyRob {
        source_id: h.source,
        offset: at,
        size: h.size,
        rod_offset: rod,
        rod_size: len,
        data_offset,
        data_len: ndata as usize,
        rod_run_number: get(words, rod + 4),
        rod_l1id: get(words, rod + 5),
    })
}

/// Builders of legacy events, for tests, fuzz seeds and conversions: what they write,
/// [`LegacyEvent::parse`] reads.
pub mod build {
    use super::{FULL_EVENT_MARKER, ROB_MARKER, ROD_MARKER};
    use rodeo_format::fragment::{LEGACY_ROS_MARKER, LEGACY_SUBDETECTOR_MARKER};

    /// A generic header (marker, size, header size, version, source, no status, then `word6`
    /// and `specific`) followed by `payload`.
    pub fn fragment(
        marker: u32,
        version: u32,
        source: u32,
        word6: u32,
        specific: &[u32],
        payload: &[u32],
    ) -> Vec<u32> {
        let header = 7 + specific.len();
        let size = header + payload.len();
        let mut out = vec![
            marker,
            size as u32,
            header as u32,
            version,
            source,
            0,
            word6,
        ];
        out.extend_from_slice(specific);
        out.extend_from_slice(payload);
        out
    }

    /// A ROB (eformat 3: no specific words) holding one ROD with `data` (status before data,
    /// no status words) for `run` and `l1id`.
    pub fn rob_v3(source: u32, run: u32, l1id: u32, data: &[u32]) -> Vec<u32> {
        let mut rod = vec![ROD_MARKER, 9, 0x0300_0000, source, run, l1id, 0, 0, 0];
        rod.extend_from_slice(data);
        rod.extend_from_slice(&[0, data.len() as u32, 0]);
        fragment(ROB_MARKER, 0x0300_0000, source, 0, &[], &rod)
    }

    /// A BESIII eformat 3 full event: the 10 specific words (time, event number, run, L1ID,
    /// two spare words, four tags) and the ROBs grouped by sub-detector (bits 23..16 of the
    /// source id), one ROS per sub-detector.
    pub fn besiii_event(event_number: u32, run: u32, l1id: u32, robs: &[Vec<u32>]) -> Vec<u32> {
        let mut groups: Vec<(u32, Vec<u32>)> = Vec::new();
        for rob in robs {
            let sd = rob.get(4).copied().unwrap_or(0) & 0x00FF_0000;
            match groups.iter_mut().find(|(s, _)| *s == sd) {
                Some((_, words)) => words.extend_from_slice(rob),
                None => groups.push((sd, rob.clone())),
            }
        }
        let mut payload = Vec::new();
        for (sd, robs) in &groups {
            let ros = fragment(
                LEGACY_ROS_MARKER,
                0x0300_0000,
                *sd,
                3,
                &[run, 0, l1id],
                robs,
            );
            payload.extend(fragment(
                LEGACY_SUBDETECTOR_MARKER,
                0x0300_0000,
                *sd,
                0,
                &[],
                &ros,
            ));
        }
        let specific = [0, event_number, run, l1id, 0, 0, 0, 0, 0, 0];
        fragment(FULL_EVENT_MARKER, 0x0300_0000, 0, 10, &specific, &payload)
    }

    /// An ATLAS eformat 4 full event (no checksum, empty trigger lists and stream tags) holding
    /// `robs` directly.
    pub fn atlas_v4_event(global_id: u32, run: u32, l1id: u32, robs: &[Vec<u32>]) -> Vec<u32> {
        let specific = [0, 0, global_id, 0, run, 0, l1id, 0, 0, 0, 0, 0, 0];
        let payload: Vec<u32> = robs.iter().flatten().copied().collect();
        fragment(FULL_EVENT_MARKER, 0x0400_0000, 0, 0, &specific, &payload)
    }

    /// An eformat 4 ROB (checksum type 0) holding one ROD with `data`.
    pub fn rob_v4(source: u32, run: u32, l1id: u32, data: &[u32]) -> Vec<u32> {
        let mut rob = rob_v3(source, run, l1id, data);
        if let Some(v) = rob.get_mut(3) {
            *v = 0x0400_0000;
        }
        if let Some(v) = rob.get_mut(9) {
            *v = 0x0301_0000;
        }
        rob
    }
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use super::*;

    #[test]
    fn besiii_event_walks_to_robs() {
        let robs = vec![
            rob_v3(0x00A1_0001, 7, 42, &[1, 2, 3]),
            rob_v3(0x00A1_0002, 7, 42, &[4]),
            rob_v3(0x00A3_0001, 7, 42, &[]),
        ];
        let e = besiii_event(5, 7, 42, &robs);
        let p = LegacyEvent::parse(&e).unwrap();
        assert_eq!((p.run_number, p.l1id, p.global_id), (7, 42, Some(5)));
        assert_eq!(p.id_source, IdSource::Besiii);
        let ids: Vec<u32> = p.robs.iter().map(|r| r.source_id).collect();
        assert_eq!(ids, [0x00A1_0001, 0x00A1_0002, 0x00A3_0001]);
        let r = p.robs[0];
        assert_eq!(&e[r.data_offset..r.data_offset + r.data_len], &[1, 2, 3]);
        assert_eq!(&e[r.offset..r.offset + r.size], &robs[0][..]);
    }

    #[test]
    fn atlas_v4_event_reads_its_header() {
        let robs = vec![rob_v4(0x0011_0001, 9, 0x0100_0003, &[8, 9])];
        let e = atlas_v4_event(77, 9, 0x0100_0003, &robs);
        let p = LegacyEvent::parse(&e).unwrap();
        assert_eq!((p.major, p.run_number, p.l1id), (4, 9, 0x0100_0003));
        assert_eq!(p.global_id, Some(77));
        assert_eq!(p.robs.len(), 1);
    }

    #[test]
    fn sizes_past_the_parent_are_errors() {
        let robs = vec![rob_v3(0x00A1_0001, 7, 42, &[1, 2, 3])];
        let e = besiii_event(5, 7, 42, &robs);
        // The sub-detector starts at word 17; grow its size word past the event.
        let mut bad = e.clone();
        bad[18] += 1;
        let err = LegacyEvent::parse(&bad).unwrap_err();
        assert_eq!(err.kind, LegacyKind::SubDetector);
        assert!(matches!(err.error, LegacyErrorKind::PastParent { .. }));
        // Truncating the event anywhere is an error, never a panic.
        for n in 0..e.len() {
            assert!(LegacyEvent::parse(&e[..n]).is_err(), "prefix of {n} words");
        }
    }
}
