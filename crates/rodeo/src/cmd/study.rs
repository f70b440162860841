//! `rodeo study NAME`: the papers' characterisation methods. The study itself is
//! `rodeo_studies::study::run`, which writes the CSV, `summary.json` and PNG plots into
//! `--output DIR/NAME/`; this command prints its report (a table, or one JSON object with
//! `--json`) and exits non-zero when one of the study's checks failed.

use std::process::ExitCode;

pub(crate) use rodeo_studies::study::Args;

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let outcome = rodeo_studies::study::run(&args)?;
    outcome.report.print(args.json);
    Ok(if outcome.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
