//! `rodeo runs [--output DIR] [--json]`: the runs recorded in `<output>/runs.sqlite`, newest
//! first; and the recording itself, which `rodeo run` does for every run it makes (balanced,
//! failed, or found at the next start after a crash).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use rodeo_control::rundb::{file_checksum, FileRecord, RunDb, RunRecord};
use rodeo_files::verify::check_file;
use serde_json::{json, Value};

/// Arguments of `rodeo runs`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The output directory whose runs to list (its `runs.sqlite`).
    #[arg(long, default_value = "rodeo-output")]
    output: PathBuf,
    /// Print `{"runs": [...]}` (the form `GET /api/runs` serves) instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = args.output.join(rodeo_control::rundb::FILE_NAME);
    if !path.exists() {
        anyhow::bail!(
            "no run database at {}: no run was made with --output {}",
            path.display(),
            args.output.display()
        );
    }
    let db = RunDb::open(&path)?;
    let runs = db.list()?;
    if args.json {
        println!("{}", json!({ "runs": runs }));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:>8}  {:<7}  {:>10}  {:>10}  {:>10}  {:>9}  {:>9}  {:>5}  started",
        "run", "status", "L1", "accepted", "written", "MB", "seconds", "files"
    );
    for r in &runs {
        let seconds = match (r["started_at_ns"].as_i64(), r["stopped_at_ns"].as_i64()) {
            (Some(a), Some(b)) if b >= a => format!("{:.1}", (b - a) as f64 / 1e9),
            _ => "-".into(),
        };
        println!(
            "{:>8}  {:<7}  {:>10}  {:>10}  {:>10}  {:>9.1}  {:>9}  {:>5}  {}{}",
            r["run_number"],
            r["status"].as_str().unwrap_or("?"),
            r["l1_accepts"],
            r["accepted"],
            r["events_written"],
            r["bytes_written"].as_f64().unwrap_or(0.0) / 1e6,
            seconds,
            r["files"].as_array().map_or(0, Vec::len),
            r["started_by"].as_str().unwrap_or(""),
            r["reason"]
                .as_str()
                .map_or(String::new(), |why| format!("  ({why})")),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The files of `records` with size, Adler-32 and their good events (`rodeo verify`'s count).
fn file_records(files: &[PathBuf]) -> Vec<FileRecord> {
    files
        .iter()
        .filter_map(|p| {
            let (size_bytes, adler32) = file_checksum(p).ok()?;
            Some(FileRecord {
                path: p.clone(),
                size_bytes,
                adler32,
                events: check_file(p).good_events,
            })
        })
        .collect()
}

/// The data files (`*.data`, `*.data.writing`) in a run directory.
pub(crate) fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".data") || n.ends_with(".data.writing"))
        })
        .collect();
    v.sort();
    v
}

/// Opens `<output>/runs.sqlite` and records every run directory there that it does not know:
/// a run whose process died before recording it (status `crashed`, or the status of the
/// `summary.json` it left), with its files found and verified. Returns the database.
pub(crate) fn open_and_reconcile(output: &Path) -> anyhow::Result<RunDb> {
    let mut db = RunDb::open_in(output)
        .with_context(|| format!("cannot open the run database in {}", output.display()))?;
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(output)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e
                .file_name()
                .to_str()?
                .strip_prefix("run-")?
                .parse::<u32>()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    for (n, dir) in found {
        if db.has_run(n)? {
            continue;
        }
        let summary: Option<Value> = std::fs::read(dir.join("summary.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let (status, summary) = match summary {
            Some(s) if s["balanced"] == true => ("ok", s),
            Some(s) => ("failed", s),
            None => (
                "crashed",
                json!({
                    "run_number": n,
                    "balanced": false,
                    "reason": "found at a later start without a record: the process ended \
                               before the run was recorded",
                }),
            ),
        };
        let files = data_files(&dir);
        let config_toml = std::fs::read_to_string(dir.join("partition.toml")).unwrap_or_default();
        db.record(&RunRecord {
            run_number: n,
            started_at_ns: None,
            stopped_at_ns: None,
            started_by: "recovered".into(),
            config_toml,
            status: status.into(),
            summary,
            files: file_records(&files),
        })?;
        eprintln!(
            "rodeo: run {n} in {} had no record: recorded as {status} with {} file(s)",
            dir.display(),
            files.len()
        );
    }
    Ok(db)
}

/// Records one run made by this process.
pub(crate) fn record_run(
    db: &mut RunDb,
    run_number: u32,
    started_at_ns: u64,
    config_toml: String,
    summary: &Value,
    files: &[PathBuf],
) {
    let status = if summary["balanced"] == true {
        "ok"
    } else {
        "failed"
    };
    let r = RunRecord {
        run_number,
        started_at_ns: Some(started_at_ns),
        stopped_at_ns: Some(rodeo_control::rundb::now_ns()),
        started_by: started_by(),
        config_toml,
        status: status.into(),
        summary: summary.clone(),
        files: file_records(files),
    };
    if let Err(e) = db.record(&r) {
        eprintln!("rodeo: warning: run {run_number} not recorded: {e}");
    }
}

/// `rodeo run` by `user@host`.
fn started_by() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "?".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    format!("rodeo run ({user}@{host})")
}
