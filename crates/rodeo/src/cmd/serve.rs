//! `rodeo serve`: a partition that stays up for a shift (`rodeo_run::service::RunService`).
//! It comes up to CONNECTED and waits; `start` over HTTP runs the next run number, `stop` ends
//! it (balance sheet, a record in the run database) and prepares the next; `shutdown`, SIGINT
//! or SIGTERM bring everything down in order.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use rodeo_run::output::OutputDir;
use rodeo_run::run::Mode;
use rodeo_run::service::RunService;
use rodeo_run::setup::load_config;

/// Arguments of `rodeo serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Partition configuration (TOML); the built-in default otherwise. A run ends at `stop` or
    /// by itself at its `[run] events` or `seconds` (set `seconds` large for runs that last
    /// until the operator stops them).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Output directory: a `run-NNNNNNNN` directory per run, and `runs.sqlite`.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Address of the HTTP API and page (port 0: any free port, printed on stderr).
    #[arg(long, default_value = "127.0.0.1:8080")]
    http: String,
    /// Applications as processes under a controller (as `rodeo run --processes`).
    #[arg(long)]
    processes: bool,
    /// Print each run's balance sheet as one JSON line on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    tls: super::TlsArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut config = load_config(args.config.as_deref())?;
    if let Some(o) = &args.output {
        config.run.output = o.display().to_string();
    }
    config.control.http = args.http.clone();
    config.validate()?;
    crate::logging::apply_config(&config.control.log)?;
    let output = OutputDir::open(
        std::path::Path::new(&config.run.output),
        &rodeo_run::lock::this_command(),
    )?;
    let db = output.db_path();
    let mode = if args.processes {
        Mode::Processes
    } else {
        Mode::Embedded
    };
    let json = args.json;
    let service = RunService::start(
        output,
        config.clone(),
        mode,
        Box::new(move |sheet| {
            if json {
                outln!("{}", sheet.to_json());
            } else {
                eprintln!("rodeo: {}", rodeo_run::text::one_line(sheet));
            }
        }),
    )?;
    crate::signal::install();
    crate::signal::abort_on_second();
    let https = args.tls.files();
    let server = rodeo_run::http::serve_section(
        &config.control,
        service.control(),
        Some(db),
        https.as_ref(),
    )
    .and_then(|s| s.context("rodeo serve needs --http"));
    let _server = match server {
        Ok(s) => s,
        Err(e) => {
            // Nothing can start a run: the prepared one goes, its number stays free.
            service.abandon();
            return Err(e);
        }
    };
    eprintln!(
        "rodeo: serving; run {} is ready (CONNECTED): POST {{\"command\":\"start\"}}",
        service.run_number()
    );
    service.serve_until(&crate::signal::interrupted);
    eprintln!("rodeo: shut down");
    Ok(ExitCode::SUCCESS)
}
