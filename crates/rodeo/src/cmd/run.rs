//! `rodeo run`: rodeo's main job, a whole partition in this process (or as processes).
//!
//! With no configuration file the built-in default partition runs (one ROS with 12 emulated
//! S-LINK channels, a supervisor with its L1 emulator, 2 DCMs x 256 slots, one logger, inproc
//! endpoints; `rodeo config default` prints it). At the end: the balance sheet of protocol rule
//! 6 and every file written checked. A run that does not balance exits non-zero.
//!
//! The run itself is `rodeo_run::run::Run` (number, lock, snapshot, driver, sheet, record);
//! this module reads the arguments, shows the live status line and prints the sheet.

use std::path::PathBuf;
use std::process::ExitCode;

use rodeo_control::lifecycle::TransitionError;
use rodeo_control::run_control::RunControl as _;
use rodeo_control::summary::RunSummary;
use rodeo_run::output::{started_by, OutputDir};
use rodeo_run::run::{Mode, Run, RunOptions};
use rodeo_run::setup::{load_config, Overrides};

/// Arguments of `rodeo run`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Partition configuration (TOML); default: the built-in partition.
    #[arg(long, short, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Stop after this many L1 accepts (overrides run.events).
    #[arg(long, conflicts_with = "seconds")]
    events: Option<u64>,
    /// Stop after this many seconds (overrides run.seconds; run.events is then unlimited).
    #[arg(long)]
    seconds: Option<f64>,
    /// Output directory (a `run-NNNNNNNN` directory is made inside it; overrides run.output).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Run number (default: the next free one in the output directory).
    #[arg(long)]
    run_number: Option<u32>,
    /// L1 accept rate in Hz (overrides l1.rate_hz; 0: as fast as the partition takes).
    #[arg(long)]
    rate: Option<f64>,
    /// Run every application as its own `rodeo app` process under a controller (on this host,
    /// or on `[hosts]` over ssh): data over shared memory on one host (TCP across hosts)
    /// unless `[transport] kind` says otherwise, same configuration, same summary.
    #[arg(long)]
    processes: bool,
    /// Serve the HTTP API (status, commands, /metrics, the web page) on this address during
    /// the run, e.g. 127.0.0.1:8080 (overrides control.http; port 0: any free port). Commands
    /// need `Authorization: Bearer $RODEO_TOKEN` (or control.token).
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Write per-event stage time stamps (L1 accept, assigned, requests, decision, logged) of
    /// one event in control.trace_every as a Chrome/Perfetto trace (JSON) to FILE. Not with
    /// --processes (refused): the time stamps are gathered from the applications' threads in
    /// this process.
    #[arg(long, value_name = "FILE", conflicts_with = "processes")]
    trace: Option<PathBuf>,
    /// Trace one event in this many (overrides control.trace_every).
    #[arg(long, value_name = "N", requires = "trace")]
    trace_every: Option<u64>,
    /// Run this Python callable as every DCM's trigger algorithm: FILE.py:FUNCTION or
    /// MODULE:FUNCTION (docs/python.md, "Trigger algorithms in Python"). Needs a rodeo built
    /// with `--features python`.
    #[arg(long, value_name = "SPEC", conflicts_with = "processes")]
    trigger: Option<String>,
    /// After the run, re-read every file completely as `rodeo verify` does (overrides
    /// logger.verify_after; default: the loggers' own check, record checksums computed as the
    /// bytes are written and each file's end record read back).
    #[arg(long)]
    verify_after: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    tls: super::TlsArgs,
    /// No live status line on the terminal (it is never shown when stderr is not a terminal).
    #[arg(long, short)]
    quiet: bool,
    /// Exit 0 for a run whose verdict is degraded too (balanced, with counted losses: partial
    /// events, input errors, restarts...); without it such a run exits 3.
    #[arg(long)]
    accept_degraded: bool,
}

/// The DCMs' trigger factory for `--trigger SPEC`, and a closure reporting its counters.
type TriggerSetup = (
    rodeo_control::application::TriggerFactory,
    Box<dyn Fn() -> serde_json::Value>,
);

/// Loads `--trigger SPEC` (see [`TriggerSetup`]).
#[cfg(feature = "python")]
fn python_trigger(spec: &str) -> anyhow::Result<TriggerSetup> {
    use serde_json::json;
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;
    let loader = rodeo_pytrigger::PyTriggerLoader::load(spec)?;
    let stats = Arc::clone(loader.stats());
    let factory: rodeo_control::application::TriggerFactory =
        Arc::new(move |_dcm: &str| Box::new(loader.make()));
    let report = Box::new(move || {
        json!({
            "calls": stats.calls.load(Relaxed),
            "accepts": stats.accepts.load(Relaxed),
            "rejects": stats.rejects.load(Relaxed),
            "more_robs": stats.more_robs.load(Relaxed),
            "errors": stats.errors.load(Relaxed),
        })
    });
    Ok((factory, report))
}

/// Refuses `--trigger`: this binary has no Python.
#[cfg(not(feature = "python"))]
fn python_trigger(spec: &str) -> anyhow::Result<TriggerSetup> {
    anyhow::bail!(
        "--trigger {spec}: this rodeo was built without Python triggers; build it with \
         `cargo build --release --features python` (needs python3-dev)"
    )
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (mut output, run, trigger_report) = match make_run(&args) {
        Ok(made) => made,
        Err(e) => return Ok(not_made(&e, args.json)),
    };
    drive_and_finish(args, &mut output, run, trigger_report)
}

/// What a trigger of the run reports at its end (the Python trigger's counters).
type TriggerReport = Option<Box<dyn Fn() -> serde_json::Value>>;

/// A run that could not be made at all (a refused configuration, a directory in use, a run
/// number taken, an HTTP address in use): said as every error is, exit status 1, which the
/// verdicts (0, 2, 3) never use (docs/run-control.md, "Verdicts"). With `--json` stdout still
/// gets one object, so that a script reading it finds the reason, not an empty stream.
fn not_made(err: &anyhow::Error, json: bool) -> ExitCode {
    crate::print_error(err);
    if json {
        outln!("{}", not_made_json(err));
    }
    ExitCode::from(1)
}

/// `rodeo run --json`'s object for a run not made: no run number, no verdict, the error.
fn not_made_json(err: &anyhow::Error) -> serde_json::Value {
    serde_json::json!({
        "made": false,
        "run_number": null,
        "verdict": null,
        "error": rodeo_run::error_text::error_text(err),
        "exit_status": 1,
    })
}

/// The configuration with the command line's overrides, checked; the output directory
/// opened; the run made (its number taken, the partition built, not yet up).
fn make_run(args: &Args) -> anyhow::Result<(OutputDir, Run, TriggerReport)> {
    let mut config = load_config(args.config.as_deref())?;
    Overrides {
        events: args.events,
        seconds: args.seconds,
        output: args.output.as_ref().map(|o| o.display().to_string()),
        rate_hz: args.rate,
        http: args.http.clone(),
        trace_every: args.trace_every,
        verify_after: args.verify_after,
    }
    .apply(&mut config);
    // Without an HTTP API nobody can stop the run but Ctrl-C: it must end by itself.
    config.check_ends_by_itself()?;
    let mode = if args.processes {
        Mode::Processes
    } else {
        Mode::Embedded
    };
    // Every check that needs no output directory, before it is opened (a refused
    // configuration leaves no `runs.sqlite` behind); `Run::new` makes them again and logs the
    // warnings. A margin of free space no output directory has: the run would write nothing.
    Run::check_config(&mut config.clone(), mode)?;
    config.check_free_space()?;
    let output = OutputDir::open(
        std::path::Path::new(&config.run.output),
        &rodeo_run::lock::this_command(),
    )?;
    let mut options = RunOptions::new(mode, started_by("rodeo run"));
    options.run_number = args.run_number;
    options.trace_every = args.trace.is_some().then_some(config.control.trace_every);
    let mut trigger_report: TriggerReport = None;
    if let Some(spec) = &args.trigger {
        let (factory, report) = python_trigger(spec)?;
        options.trigger = Some(factory);
        trigger_report = Some(report);
    }
    let run = Run::new(&output, config, options)?;
    Ok((output, run, trigger_report))
}

/// Runs the made run to its end and prints its sheet; a run whose HTTP API or log settings
/// cannot be set up is abandoned before it starts (its number stays free) and not made.
fn drive_and_finish(
    args: Args,
    output: &mut OutputDir,
    mut run: Run,
    trigger_report: TriggerReport,
) -> anyhow::Result<ExitCode> {
    if let Err(e) = crate::logging::apply_config(&run.config().control.log) {
        run.abandon();
        return Ok(not_made(&e, args.json));
    }
    // Ctrl-C or SIGTERM stops the run in order (files closed, balance sheet); a second one
    // aborts.
    crate::signal::install();
    crate::signal::abort_on_second();
    if args.json {
        crate::signal::json_on_abort(run.number());
    }
    let _server = match rodeo_run::http::serve_section(
        &run.config().control,
        run.partition(),
        Some(output.db_path()),
        args.tls.files().as_ref(),
    ) {
        Ok(server) => server,
        Err(e) => {
            // Before the start: nothing ran, so no run either (it was recorded as a crash
            // when the next run found its directory).
            run.abandon();
            return Ok(not_made(&e, args.json));
        }
    };
    // The note of an interrupt is said when it comes, also while the run is stopping (its
    // loop looks at the flag only while it runs: a Ctrl-C during a long stop said nothing).
    // The partition hears of it at once too: a restart waiting for its process gives up (the
    // run's loop, held in that wait, could not ask for the stop for up to 20 s).
    let ended = std::sync::atomic::AtomicBool::new(false);
    let partition = run.partition();
    let note = || {
        while !ended.load(std::sync::atomic::Ordering::Relaxed) {
            if interrupted_with_note() {
                partition.stop_wanted();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let outcome = std::thread::scope(|s| {
        s.spawn(note);
        let outcome = drive(&args, &mut run);
        ended.store(true, std::sync::atomic::Ordering::Relaxed);
        outcome
    });
    let outcome = outcome.map_err(|e| anyhow::Error::from(e).context("the partition failed"));
    let sheet = run.finish(output, outcome, trigger_report.map(|r| r()));
    if args.json {
        outln!("{}", sheet.to_json());
    } else {
        out!("{}", rodeo_run::text::render(&sheet));
    }
    Ok(exit_code(&sheet, args.accept_degraded))
}

/// Runs `run` to its end, with the status line of an embedded partition and its trace.
fn drive(args: &Args, run: &mut Run) -> Result<RunSummary, TransitionError> {
    match run.embedded().cloned() {
        Some(partition) => {
            let mut line = crate::status::StatusLine::new(
                args.quiet,
                PathBuf::from(&run.config().run.output),
                run.requested_l1_hz(),
            );
            let outcome = run.drive(&interrupted_with_note, |_, _| {
                line.update(&partition.status(), partition.bytes_written())
            });
            line.finish();
            if let (Some(path), Ok(_)) = (&args.trace, &outcome) {
                // The run ended: a trace that cannot be written does not take its sheet.
                match run.write_trace(path) {
                    Ok(n) => eprintln!(
                        "rodeo: trace of {n} stage time stamps written to {}",
                        path.display()
                    ),
                    Err(e) => {
                        eprintln!("rodeo: warning: {}", rodeo_run::error_text::error_text(&e))
                    }
                }
            }
            outcome
        }
        None => run.drive(&interrupted_with_note, |_, _| {}),
    }
}

/// `rodeo run`'s exit status (docs/run-control.md, "Verdicts"): 0 ok, 2 failed, 3 degraded
/// (0 with `--accept-degraded`); 1 is left to a run that could not be made at all (a bad
/// configuration, a directory in use).
fn exit_code(sheet: &rodeo_run::sheet::RunSheet, accept_degraded: bool) -> ExitCode {
    use rodeo_run::verdict::{verdict_line, Verdict};
    match sheet.verdict {
        Verdict::Ok => ExitCode::SUCCESS,
        Verdict::Degraded if accept_degraded => ExitCode::SUCCESS,
        v => {
            eprintln!(
                "rodeo: run {}: {}",
                sheet.run_number,
                verdict_line(v, &sheet.problems)
            );
            ExitCode::from(if v == Verdict::Degraded { 3 } else { 2 })
        }
    }
}

/// Whether SIGINT/SIGTERM arrived; says once on stderr that the run is stopping.
fn interrupted_with_note() -> bool {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let yes = crate::signal::interrupted();
    if yes && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("rodeo: interrupted: stopping the run in order (interrupt again to abort)");
    }
    yes
}
