//! `rodeo verify FILE...`: structure, every checksum and the end record of raw-data files of
//! either container (rodeo's own or EventStorage v2-v6, told apart by the first record; the
//! checks are `rodeo_files::verify::check_file`'s).
//!
//! One summary line per file. On the first problem in a file: where (byte offset in the file),
//! what was expected and what was found, and how many events before it are good; the exit code
//! is then 1.

use std::path::PathBuf;
use std::process::ExitCode;

use rodeo_files::datafile::Container;
use rodeo_files::verify::{check_file, FileVerdict};
use serde_json::json;

/// Arguments of `rodeo verify`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Raw-data files to check (rodeo's container or EventStorage v2-v6).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print one JSON object per file instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut all_ok = true;
    for file in &args.files {
        let v = check_file(file);
        all_ok &= v.ok;
        if args.json {
            outln!("{}", verdict_json(&v));
        } else if v.ok {
            outln!(
                "{}: OK, {} events, {} ROBs, {} bytes of events ({})",
                v.file.display(),
                v.good_events,
                v.robs,
                v.event_bytes,
                kind(&v)
            );
        } else {
            outln!(
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

/// The container, its version and the events' eformat versions, e.g. `eventstorage 2, eformat 3`.
fn kind(v: &FileVerdict) -> String {
    let (Some(c), Some(version)) = (v.container, v.version) else {
        return "not a raw-data file".into();
    };
    let eformat: Vec<String> = (3..=5)
        .filter(|&e| v.events_by_eformat[e] > 0)
        .map(|e| e.to_string())
        .collect();
    // Every start record is cross-checked against the events; only rodeo's version 2 carries a
    // checksum of its own.
    let start = match (v.start_record_checked, c) {
        (true, _) => "start record checksummed",
        (false, Container::Rodeo) => "v1 file: start record unchecked, not checksummed",
        (false, Container::EventStorage) => "start record unchecked (no checksum in the format)",
    };
    // Events without a checksum of their own: "OK" covers less of them (their ROBs' checksums,
    // if any, and the structure).
    let unsummed = match v.events_without_checksum {
        0 => String::new(),
        n => format!(", {n} events without an event checksum (their payload unchecked)"),
    };
    if eformat.is_empty() {
        format!("{} {version}, {start}{unsummed}", c.name())
    } else {
        format!(
            "{} {version}, eformat {}, {start}{unsummed}",
            c.name(),
            eformat.join("/")
        )
    }
}

/// One file's verdict as the JSON line `--json` prints.
fn verdict_json(v: &FileVerdict) -> serde_json::Value {
    json!({
        "file": v.file,
        "ok": v.ok,
        "good_events": v.good_events,
        "robs": v.robs,
        "event_bytes": v.event_bytes,
        "error_offset": v.error_offset,
        "error": v.error,
        "container": v.container.map(|c| c.name()),
        "version": v.version,
        "start_record_checked": v.start_record_checked,
        "events_without_checksum": v.events_without_checksum,
        "events_by_eformat": {
            "3": v.events_by_eformat[3],
            "4": v.events_by_eformat[4],
            "5": v.events_by_eformat[5],
        },
    })
}
