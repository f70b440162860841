//! `rodeo runs [--output DIR] [--json]`: the runs recorded in `<output>/runs.sqlite`, newest
//! first (the recording itself is `rodeo_run`'s: every run, however it ended).

use std::path::PathBuf;
use std::process::ExitCode;

use rodeo_run::rundb::RunDb;
use serde_json::json;

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
    let path = args.output.join(rodeo_run::rundb::FILE_NAME);
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
        "{:>8}  {:<8}  {:>10}  {:>10}  {:>10}  {:>9}  {:>9}  {:>5}  started",
        "run", "status", "L1", "accepted", "written", "MB", "seconds", "files"
    );
    for r in &runs {
        let seconds = match (r["started_at_ns"].as_i64(), r["stopped_at_ns"].as_i64()) {
            (Some(a), Some(b)) if b >= a => format!("{:.1}", (b - a) as f64 / 1e9),
            _ => "-".into(),
        };
        println!(
            "{:>8}  {:<8}  {:>10}  {:>10}  {:>10}  {:>9.1}  {:>9}  {:>5}  {}{}",
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
