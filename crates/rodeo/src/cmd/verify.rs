//! `rodeo verify FILE...`: structure, every checksum and the end record of raw-data files.
//!
//! One summary line per file. On the first problem in a file: where (byte offset in the file),
//! what was expected and what was found, and how many events before it are good; the exit code
//! is then 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rodeo_format::compress::{decompress_event, CompressError};
use rodeo_format::fragment::{ErrorKind, FragmentError, FragmentKind, FullEvent};
use rodeo_format::rawfile::RawFileReader;
use serde::Serialize;

/// Arguments of `rodeo verify`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Raw-data files to check.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print one JSON object per file instead of text.
    #[arg(long)]
    json: bool,
}

/// The verdict on one file.
#[derive(Debug, Serialize)]
pub(crate) struct FileVerdict {
    pub(crate) file: PathBuf,
    pub(crate) ok: bool,
    /// Events read and found good (all of them when `ok`; those before the problem otherwise).
    pub(crate) good_events: u64,
    pub(crate) robs: u64,
    pub(crate) event_bytes: u64,
    /// Byte offset of the first problem.
    pub(crate) error_offset: Option<u64>,
    pub(crate) error: Option<String>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut all_ok = true;
    for file in &args.files {
        let v = verify_file(file);
        all_ok &= v.ok;
        if args.json {
            println!("{}", serde_json::to_string(&v)?);
        } else if v.ok {
            println!(
                "{}: OK, {} events, {} ROBs, {} bytes of events",
                v.file.display(),
                v.good_events,
                v.robs,
                v.event_bytes
            );
        } else {
            println!(
                "{}: FAILED at byte {}: {} ({} good events before it)",
                v.file.display(),
                v.error_offset
                    .map_or_else(|| "?".to_string(), |o| o.to_string()),
                v.error.as_deref().unwrap_or("unknown error"),
                v.good_events
            );
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Checks one file completely: records, record checksums, the end record, and inside every event
/// the fragment structure, the event checksum and every ROB checksum.
pub(crate) fn verify_file(path: &Path) -> FileVerdict {
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
pub(crate) fn check_event(words: &[u32]) -> Result<u64, FragmentError> {
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
