//! `rodeo run`: rodeo's main job on its built-in default configuration.
//!
//! Until the dataflow applications land, the main job runs the chain that exists end to end:
//! synthetic events (the realistic ROB mix) are written through the logger's raw-file writer
//! (rotation, `.writing` names, fsync on close), then every file is read back and verified, and
//! the run ends with a balance sheet: events made = events written = events verified, or an error.

use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

use super::gen::{gen_events, ChecksumArg, EventsArgs};
use super::verify::verify_file;

/// Arguments of `rodeo run`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Number of events.
    #[arg(long, default_value_t = 20_000)]
    events: u64,
    /// Output directory (a fresh `run-NNNNNNNN` directory is made inside it).
    #[arg(long, short, default_value = "rodeo-output")]
    output: PathBuf,
    /// Run number (default: the next free one in the output directory).
    #[arg(long)]
    run_number: Option<u32>,
    /// Print the balance sheet as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Balance {
    run_number: u32,
    directory: PathBuf,
    events_made: u64,
    events_written: u64,
    events_verified: u64,
    files: usize,
    event_bytes: u64,
    seconds: f64,
    events_per_s: f64,
    bytes_per_s: f64,
    balanced: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.output)?;
    let run_number = match args.run_number {
        Some(r) => r,
        None => next_run_number(&args.output),
    };
    let dir = args.output.join(format!("run-{run_number:08}"));
    let gen = EventsArgs {
        count: args.events,
        output: dir.clone(),
        robs: 16,
        checksum: ChecksumArg::Adler32,
        run: run_number,
        stream: "physics_Main".into(),
        max_file_mib: 256,
        events_per_file: 0,
        json: false,
    };
    let written = gen_events(&gen)?;
    let mut verified = 0;
    let mut problems = Vec::new();
    for f in &written.files {
        let v = verify_file(f);
        verified += v.good_events;
        if let Some(e) = v.error {
            problems.push(format!("{}: {e}", f.display()));
        }
    }
    let balanced = problems.is_empty() && written.events == args.events && verified == args.events;
    let b = Balance {
        run_number,
        directory: dir,
        events_made: args.events,
        events_written: written.events,
        events_verified: verified,
        files: written.files.len(),
        event_bytes: written.event_bytes,
        seconds: written.seconds,
        events_per_s: written.events as f64 / written.seconds.max(1e-9),
        bytes_per_s: written.event_bytes as f64 / written.seconds.max(1e-9),
        balanced,
    };
    if args.json {
        println!("{}", serde_json::to_string(&b)?);
    } else {
        println!("run {} -> {}", b.run_number, b.directory.display());
        println!(
            "  {} events, {:.1} MB in {} file(s), {:.2} s: {:.0} events/s, {:.0} MB/s",
            b.events_written,
            b.event_bytes as f64 / 1e6,
            b.files,
            b.seconds,
            b.events_per_s,
            b.bytes_per_s / 1e6
        );
        println!(
            "  balance: made {} = written {} = verified {}: {}",
            b.events_made,
            b.events_written,
            b.events_verified,
            if balanced { "OK" } else { "MISMATCH" }
        );
        for p in &problems {
            println!("  problem: {p}");
        }
    }
    if !balanced {
        anyhow::bail!("the run's balance sheet does not add up (see above)");
    }
    Ok(ExitCode::SUCCESS)
}

/// One more than the largest `run-NNNNNNNN` in `dir` (1 when there is none).
fn next_run_number(dir: &std::path::Path) -> u32 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("run-")?
                .parse::<u32>()
                .ok()
        })
        .max()
        .map_or(1, |m| m.saturating_add(1))
}
