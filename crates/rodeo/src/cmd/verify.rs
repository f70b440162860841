//! `rodeo verify FILE...`: structure, every checksum and the end record of raw-data files.
//!
//! One summary line per file. On the first problem in a file: where (byte offset in the file),
//! what was expected and what was found, and how many events before it are good; the exit code
//! is then 1.

use std::path::PathBuf;
use std::process::ExitCode;

use rodeo_format::verify::{check_file, FileVerdict};
use serde_json::json;

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

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut all_ok = true;
    for file in &args.files {
        let v = check_file(file);
        all_ok &= v.ok;
        if args.json {
            println!("{}", verdict_json(&v));
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
    })
}
