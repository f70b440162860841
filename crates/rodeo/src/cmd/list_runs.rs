//! `rodeo runs [--output DIR] [--json]`: the runs recorded in `<output>/runs.sqlite`, newest
//! first (the recording itself is `rodeo_run`'s: every run, however it ended); `rodeo runs note
//! N TEXT...` adds a note to a recorded run after the fact (the comments `POST
//! /api/runs/N/comment` adds, from this shell's user and host).

use std::path::PathBuf;
use std::process::ExitCode;

use rodeo_run::rundb::{Comment, RunDb};
use rodeo_run::runs_table;
use serde_json::json;

/// Arguments of `rodeo runs`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Add a note to a run instead of listing.
    #[command(subcommand)]
    what: Option<What>,
    /// The output directory whose runs to list (its `runs.sqlite`).
    #[arg(long, default_value = "rodeo-output", global = true)]
    output: PathBuf,
    /// Print `{"runs": [...]}` (the form `GET /api/runs` serves) instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Add a note to recorded run N (after the run: what the beam did, why it was stopped);
    /// shown in `rodeo runs`, `--json` (`comments`) and `GET /api/runs`.
    Note {
        /// The run number.
        run: u32,
        /// The note (the words are joined with spaces).
        #[arg(required = true)]
        text: Vec<String>,
    },
}

/// Longest note, in bytes (as a comment over HTTP).
const MAX_NOTE_BYTES: usize = 4096;

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = args.output.join(rodeo_run::rundb::FILE_NAME);
    if !path.exists() {
        anyhow::bail!(
            "no run database at {}: no run was made with --output {}",
            path.display(),
            args.output.display()
        );
    }
    // Listing writes nothing: an empty file is not given a schema (it was, by the open).
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == 0) {
        anyhow::bail!(
            "run database {} is empty (0 bytes): no run is recorded in it (left as it is; the \
             next run in --output {} makes it a run database)",
            path.display(),
            args.output.display()
        );
    }
    let db = RunDb::open(&path)?;
    let runs = db.list()?;
    if let Some(What::Note { run, text }) = args.what {
        let text = text.join(" ");
        if text.trim().is_empty()
            || text.len() > MAX_NOTE_BYTES
            || rodeo_run::rundb::hides_text(&text)
        {
            anyhow::bail!(
                "a note is 1 to {MAX_NOTE_BYTES} bytes of text, lines without control or \
                 invisible formatting characters"
            );
        }
        if !runs.iter().any(|r| r["run_number"] == run) {
            anyhow::bail!(
                "no run {run} in {}: `rodeo runs --output {}` lists the recorded runs",
                path.display(),
                args.output.display()
            );
        }
        let at_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let added = db.comment(&Comment {
            run_number: run,
            at_ns,
            role: "local".into(),
            peer: rodeo_run::output::started_by("rodeo runs note"),
            text,
        })?;
        if !added {
            anyhow::bail!(
                "run {run} has {} notes already, the most a run keeps: say it in one of them \
                 or in the log book",
                rodeo_run::rundb::MAX_COMMENTS_PER_RUN
            );
        }
        outln!("run {run}: note added");
        return Ok(ExitCode::SUCCESS);
    }
    if args.json {
        outln!("{}", json!({ "runs": runs }));
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{}", runs_table::header());
    for r in &runs {
        outln!("{}", runs_table::line(r));
    }
    Ok(ExitCode::SUCCESS)
}
