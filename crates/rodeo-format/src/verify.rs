//! Checking a raw-data file completely: its records, record checksums and end record, and inside
//! every event the fragment structure, the event checksum and every ROB checksum. `rodeo verify`
//! prints these verdicts; `rodeo run` reads back every file it wrote with them.

use std::path::{Path, PathBuf};

use crate::compress::{decompress_event, CompressError};
use crate::fragment::{ErrorKind, FragmentError, FragmentKind, FullEvent};
use crate::rawfile::RawFileReader;

/// The verdict on one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileVerdict {
    /// The file checked.
    pub file: PathBuf,
    /// Whether the whole file is good.
    pub ok: bool,
    /// Events read and found good (all of them when `ok`; those before the problem otherwise).
    pub good_events: u64,
    /// ROB fragments in the good events.
    pub robs: u64,
    /// Bytes of the good events.
    pub event_bytes: u64,
    /// Byte offset of the first problem.
    pub error_offset: Option<u64>,
    /// What was wrong at `error_offset`.
    pub error: Option<String>,
}

/// Checks one file completely (unlike `rawfile::verify_file`, which checks the container alone):
/// records, record checksums, the end record, and inside every event
/// the fragment structure, the event checksum and every ROB checksum.
pub fn check_file(path: &Path) -> FileVerdict {
    let mut v = FileVerdict {
        file: path.to_path_buf(),
        ok: false,
        good_events: 0,
        robs: 0,
        event_bytes: 0,
        error_offset: None,
        error: None,
    };
    let mut reader = match RawFileReader::open(path) {
        Ok(r) => r,
        Err(e) => {
            v.error_offset = e.offset().or(Some(0));
            v.error = Some(e.to_string());
            return v;
        }
    };
    while let Some(next) = reader.next_event() {
        let ev = match next {
            Ok(ev) => ev,
            Err(e) => {
                v.error_offset = e.offset();
                v.error = Some(e.to_string());
                return v;
            }
        };
        // Fragment words start after the record's 4 header words.
        let frag_offset = ev.offset + 16;
        match check_event(ev.words) {
            Ok(robs) => {
                v.robs += robs;
                v.event_bytes += ev.words.len() as u64 * 4;
                v.good_events += 1;
            }
            Err(e) => {
                let at = frag_offset + e.offset() as u64 * 4;
                v.error_offset = Some(at);
                v.error = Some(format!(
                    "event {} (record at byte {}): {e}",
                    ev.index, ev.offset
                ));
                return v;
            }
        }
    }
    v.ok = true;
    v
}

/// Checks one full event: structure, event checksum, each ROB's structure and checksum.
/// Returns the number of ROBs.
///
/// A compressed event (compression type 1) is checked as stored (its checksum covers the
/// compressed payload), then decompressed and its ROBs checked.
pub fn check_event(words: &[u32]) -> Result<u64, FragmentError> {
    let ev = FullEvent::parse(words)?;
    ev.verify_checksum()?;
    if ev.compression() != 0 {
        let mut plain = Vec::new();
        return match decompress_event(words, &mut plain) {
            Ok(()) => check_event(&plain),
            Err(CompressError::Fragment(e)) => Err(e),
            Err(_) => Err(FragmentError::new(
                FragmentKind::FullEvent,
                0,
                ErrorKind::Compressed {
                    compression: ev.compression(),
                },
            )),
        };
    }
    let mut robs = 0;
    for rob in ev.robs() {
        rob?.verify_checksum()?;
        robs += 1;
    }
    Ok(robs)
}
