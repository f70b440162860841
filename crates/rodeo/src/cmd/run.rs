//! `rodeo run`: rodeo's main job, a whole partition in this process.
//!
//! With no configuration file the built-in default partition runs (one ROS with 12 emulated
//! S-LINK channels, a supervisor with its L1 emulator, 2 DCMs x 256 slots, one logger, inproc
//! endpoints; `rodeo config default` prints it). At the end: the balance sheet of protocol rule
//! 6 and every file written read back and verified. A run that does not balance exits non-zero.
//!
//! The partition runs under the lifecycle ([`EmbeddedPartition`]): brought up to RUNNING, run
//! to `--events`/`--seconds` or until a `stop` arrives over `--http`, then brought down. With
//! `--http` the HTTP API, `/metrics` and the web page are served for the whole run; with
//! `--trace` sampled per-event stage time stamps are written as a Chrome/Perfetto trace.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use rodeo_control::config::PartitionConfig;
use rodeo_control::control::RunControl;
use rodeo_control::embedded::EmbeddedPartition;
use rodeo_control::http::{HttpConfig, HttpServer};
use rodeo_control::summary::RunSummary;
use serde_json::json;
use std::sync::Arc;

use rodeo_files::verify::check_file;

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
    /// Run every application as its own `rodeo app` process on this host (ipc endpoints unless
    /// the configuration says tcp), same configuration, same summary.
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
    /// No live status line on the terminal (it is never shown when stderr is not a terminal).
    #[arg(long, short)]
    quiet: bool,
}

/// The DCMs' trigger factory for `--trigger SPEC`, and a closure reporting its counters.
type TriggerSetup = (
    rodeo_control::application::TriggerFactory,
    Box<dyn Fn() -> serde_json::Value>,
);

/// Loads `--trigger SPEC` (see [`TriggerSetup`]).
#[cfg(feature = "python")]
fn python_trigger(spec: &str) -> anyhow::Result<TriggerSetup> {
    use std::sync::atomic::Ordering::Relaxed;
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

/// Serves the HTTP API of `control` on `control.http` (nothing when it is empty).
pub(crate) fn serve_http(
    section: &rodeo_control::config::ControlSection,
    control: Arc<dyn RunControl>,
    runs_db: Option<PathBuf>,
) -> anyhow::Result<Option<HttpServer>> {
    if section.http.is_empty() {
        return Ok(None);
    }
    let token = section.effective_token();
    if token.is_none() {
        eprintln!("rodeo: note: no RODEO_TOKEN or control.token: HTTP commands are refused");
    }
    let server = HttpServer::start(
        &section.http,
        control,
        HttpConfig {
            token,
            runs_db,
            ..HttpConfig::default()
        },
    )
    .with_context(|| format!("cannot serve HTTP on {}", section.http))?;
    eprintln!("rodeo: HTTP API on http://{}/", server.local_addr());
    Ok(Some(server))
}

/// `<output>/runs.sqlite` of a configuration.
fn runs_db_path(config: &PartitionConfig) -> PathBuf {
    std::path::Path::new(&config.run.output).join(rodeo_control::rundb::FILE_NAME)
}

/// Loads the configuration file (or the default) and applies the command-line overrides.
pub(crate) fn load_config(path: Option<&PathBuf>) -> anyhow::Result<PartitionConfig> {
    Ok(match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read configuration {}", p.display()))?;
            PartitionConfig::from_toml(&text, &p.display().to_string())?
        }
        None => PartitionConfig::default(),
    })
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut config = load_config(args.config.as_ref())?;
    if let Some(n) = args.events {
        config.run.events = n;
        config.run.seconds = 0.0;
    }
    if let Some(s) = args.seconds {
        config.run.seconds = s;
        config.run.events = 0;
    }
    if let Some(o) = &args.output {
        config.run.output = o.display().to_string();
    }
    if let Some(r) = args.rate {
        config.l1.rate_hz = r;
    }
    if let Some(h) = &args.http {
        config.control.http = h.clone();
    }
    if let Some(n) = args.trace_every {
        config.control.trace_every = n;
    }
    if args.verify_after {
        config.logger.verify_after = true;
    }
    std::fs::create_dir_all(&config.run.output)
        .with_context(|| format!("cannot create output directory {}", config.run.output))?;
    // The run database remembers every run (and records those a crash left unrecorded).
    let mut rundb = super::runs::open_and_reconcile(std::path::Path::new(&config.run.output))?;
    let next_in_db = rundb.last_run_number()?.map_or(1, |n| n.saturating_add(1));
    config.run.number = match args.run_number {
        Some(r) => r,
        None => next_run_number(std::path::Path::new(&config.run.output)).max(next_in_db),
    };
    let started_at_ns = rodeo_control::rundb::now_ns();
    config.validate()?;
    if args.processes && config.l1.mode == rodeo_control::config::L1Mode::Readout {
        anyhow::bail!(
            "l1.mode = \"readout\" (the data-driven L1) reads the readout nodes' progress in \
             the supervisor's process: run this partition without --processes"
        );
    }
    crate::logging::apply_config(&config.control.log)?;
    // Known before any data is taken: a run directory that exists would fail the run at stop.
    let run_dir = rodeo_control::partition::Layout::new(&config).output;
    if run_dir.exists() {
        anyhow::bail!(
            "the run directory {} already exists: run {} was taken before. Leave out \
             --run-number to take the next free number ({}), or choose another.",
            run_dir.display(),
            config.run.number,
            next_run_number(std::path::Path::new(&config.run.output))
        );
    }
    // The loggers' output directories, like run.output: writable or creatable.
    config.check_directories()?;
    // Ctrl-C or SIGTERM stops the run in order (files closed, balance sheet); a second one
    // aborts.
    crate::signal::install();
    crate::signal::abort_on_second();
    // `[monitoring]`: the forwarder every DCM publishes its samples through (lives as long as
    // the run).
    let _forwarder = config
        .monitoring
        .enabled()
        .then(|| rodeo_control::monitoring::Forwarder::start(&config.monitoring))
        .transpose()?;

    let mut trigger_report: Option<Box<dyn Fn() -> serde_json::Value>> = None;
    let outcome = if args.processes {
        run_processes(&config).context("the partition failed")
    } else {
        write_config_snapshot(&rodeo_control::partition::Layout::new(&config), &config)?;
        let trace_every = args.trace.is_some().then_some(config.control.trace_every);
        let mut partition = EmbeddedPartition::new(config.clone(), trace_every);
        if let Some(spec) = &args.trigger {
            let (factory, report) = python_trigger(spec)?;
            partition = partition.with_trigger(factory);
            trigger_report = Some(report);
        }
        let partition = Arc::new(partition);
        let _server = serve_http(
            &config.control,
            partition.clone(),
            Some(runs_db_path(&config)),
        )?;
        let mut line = crate::status::StatusLine::new(
            args.quiet,
            PathBuf::from(&config.run.output),
            match config.l1.mode {
                rodeo_control::config::L1Mode::Readout
                | rodeo_control::config::L1Mode::External => 0.0,
                _ => config.l1.rate_hz,
            },
        );
        let watched = Arc::clone(&partition);
        let outcome = rodeo_control::control::run_to_end(
            partition.as_ref(),
            &interrupted_with_note,
            |_, _| line.update(&watched.status(), watched.bytes_written()),
        );
        line.finish();
        let outcome = outcome.context("the partition failed");
        if let (Some(path), Ok(_)) = (&args.trace, &outcome) {
            let records = partition.take_traces();
            let json = rodeo_control::chrome_trace::to_json(&records);
            std::fs::write(path, serde_json::to_vec(&json)?)
                .with_context(|| format!("cannot write the trace {}", path.display()))?;
            eprintln!(
                "rodeo: trace of {} stage time stamps written to {}",
                records.len(),
                path.display()
            );
        }
        outcome
    };
    let summary = match outcome {
        Ok(s) => s,
        Err(e) => {
            let (code, record) = failed_run(&config, &e, args.json);
            let files =
                super::runs::data_files(&rodeo_control::partition::Layout::new(&config).output);
            super::runs::record_run(
                &mut rundb,
                config.run.number,
                started_at_ns,
                config.to_toml_public(),
                &record,
                &files,
            );
            return Ok(code);
        }
    };

    let trigger = trigger_report.map(|r| r());
    // The data-driven and external L1 ignore l1.rate_hz: nothing was requested.
    let requested = match config.l1.mode {
        rodeo_control::config::L1Mode::Readout | rodeo_control::config::L1Mode::External => 0.0,
        _ => config.l1.rate_hz,
    };
    let (record, verified, problems, balanced) = balance_sheet(
        &summary,
        requested,
        trigger.as_ref(),
        config.logger.verify_after,
    );
    // The balance sheet stays with the data: `summary.json` in the run directory.
    let record_path = summary.output.join("summary.json");
    if let Err(e) = serde_json::to_vec_pretty(&record)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(&record_path, b))
    {
        problems_note(&format!("cannot write {}: {e}", record_path.display()));
    }
    super::runs::record_run(
        &mut rundb,
        config.run.number,
        started_at_ns,
        config.to_toml_public(),
        &record,
        &summary.files,
    );
    if args.json {
        println!("{record}");
    } else {
        print_summary(&summary, requested, verified, &problems, balanced, trigger);
    }
    if let Some(why) = &summary.ended_by {
        anyhow::bail!("{why} (balance sheet above)");
    }
    if !balanced {
        anyhow::bail!("the run's balance sheet does not add up (see above)");
    }
    Ok(ExitCode::SUCCESS)
}

/// The run's balance sheet: the events written must all be in the files, intact (the
/// loggers' check: record checksums computed on the way, each closed file's end record and
/// size read back; with `verify_after` every file re-read completely with `check_file`), the
/// problems found, and the JSON object `--json` prints (also `summary.json` and the run
/// database's record). Returns (record, events verified, problems, balanced).
pub(crate) fn balance_sheet(
    summary: &RunSummary,
    requested_hz: f64,
    trigger: Option<&serde_json::Value>,
    verify_after: bool,
) -> (serde_json::Value, u64, Vec<String>, bool) {
    let mut problems = summary.problems.clone();
    let verified = if verify_after {
        let mut verified = 0u64;
        for f in &summary.files {
            let v = check_file(f);
            verified += v.good_events;
            if let Some(e) = v.error {
                problems.push(format!("{}: {e}", f.display()));
            }
        }
        verified
    } else {
        summary.events_verified
    };
    if verified != summary.events_written {
        problems.push(format!(
            "files hold {verified} verified events, the loggers wrote {}",
            summary.events_written
        ));
    }
    let balanced = problems.is_empty();
    let record = summary_json(
        summary,
        requested_hz,
        verified,
        verify_after,
        &problems,
        balanced,
        trigger,
    );
    (record, verified, problems, balanced)
}

/// Writes the configuration of the run into its run directory as `partition.toml` (made here
/// if need be): the record of what ran, and the file the local `rodeo app` processes of a
/// `--processes` run name on their command line. Readable by the owner only: it may hold the
/// command token (control.token).
fn write_config_snapshot(
    layout: &rodeo_control::partition::Layout,
    config: &PartitionConfig,
) -> anyhow::Result<PathBuf> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::create_dir_all(&layout.output).with_context(|| {
        format!(
            "cannot create the run directory {}",
            layout.output.display()
        )
    })?;
    let path = layout.output.join("partition.toml");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(config.to_toml().as_bytes()))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Runs the partition with one `rodeo app` process per application (see `cmd/app.rs`), on
/// this host or on the hosts of `[hosts]` over ssh, under the controller
/// (`rodeo_control::controller`): initialize, configure, connect, start; stop at the end of
/// the run (event count reached, time up, or SIGINT/SIGTERM); disconnect (each application
/// hands back its summary), unconfigure, shutdown.
fn run_processes(config: &PartitionConfig) -> anyhow::Result<RunSummary> {
    use rodeo_control::config::TransportKind;
    use rodeo_control::control::run_to_end;
    use rodeo_control::controller::Controller;
    use rodeo_control::partition::Layout;

    let mut config = config.clone();
    // Applications on one host exchange data through shared memory (ZeroMQ stays for run
    // control); `[transport] kind = "ipc"` or `"tcp"` keeps ZeroMQ for data too.
    if config.transport.kind == TransportKind::Inproc {
        config.transport.kind = if config.hosts.is_empty() {
            TransportKind::Shm
        } else {
            TransportKind::Tcp
        };
    }
    let layout = Layout::new(&config);
    let cfg_path = write_config_snapshot(&layout, &config)?;
    let exe = std::env::current_exe().context("cannot find the rodeo executable")?;
    let mut ctl = Controller::new(config.clone(), exe)?;
    ctl.set_local_config_file(cfg_path);
    let ctl = Arc::new(ctl);
    let _server = serve_http(&config.control, ctl.clone(), Some(runs_db_path(&config)))?;
    let result = run_to_end(ctl.as_ref(), &interrupted_with_note, |_, _| {});
    // The ipc socket files go with the run, whatever its end.
    if let Err(e) = layout.remove_runtime_dir() {
        eprintln!(
            "rodeo: warning: cannot remove the runtime directory {}: {e}",
            layout.runtime.display()
        );
    }
    // What a process killed with -9 left in shared memory goes with the run too.
    if config.transport.kind == TransportKind::Shm {
        match rodeo_transport::shm::cleanup_dead_nodes() {
            Ok(0) => {}
            Ok(n) => eprintln!(
                "rodeo: removed the shared-memory resources of {n} dead application process(es)"
            ),
            Err(e) => eprintln!("rodeo: warning: shared-memory clean-up: {e}"),
        }
    }
    let summary = result?;
    for (name, why) in ctl.dead_apps() {
        // A DCM that died: its events were reassigned; not an imbalance, but worth saying.
        if name.starts_with("dcm") {
            eprintln!("note: {name} died ({why}); its events were reassigned");
        } else {
            eprintln!("note: {name} died ({why})");
        }
    }
    if summary.restarts > 0 {
        eprintln!(
            "note: {} application(s) restarted into the run ({} partial events, {} events \
             recovered from files left open)",
            summary.restarts, summary.partial_events, summary.recovered_events
        );
    }
    Ok(summary)
}

/// A run that failed before its balance sheet was complete: prints what is known (with
/// `--json`, the summary's JSON object with `balanced: false` and the `reason`), writes it to
/// `summary.json` when the run directory exists, and gives exit code 2.
fn failed_run(
    config: &PartitionConfig,
    error: &anyhow::Error,
    json: bool,
) -> (ExitCode, serde_json::Value) {
    let layout = rodeo_control::partition::Layout::new(config);
    let reason = format!("{error:#}");
    let files = super::runs::data_files(&layout.output);
    let record = json!({
        "run_number": config.run.number,
        "directory": layout.output,
        "balanced": false,
        "reason": reason,
        "problems": [reason],
        "files": files,
    });
    if layout.output.is_dir() {
        let path = layout.output.join("summary.json");
        if let Err(e) = std::fs::write(&path, record.to_string()) {
            problems_note(&format!("cannot write {}: {e}", path.display()));
        }
    }
    if json {
        println!("{record}");
    } else {
        println!("run {} -> {}", config.run.number, layout.output.display());
        println!("  balance: FAILED: {reason}");
        for f in &files {
            println!("  file left: {}", f.display());
        }
    }
    eprintln!("error: the run failed: {reason}");
    (ExitCode::from(2), record)
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

/// A note on stderr that does not change the run's verdict.
fn problems_note(what: &str) {
    eprintln!("rodeo: warning: {what}");
}

/// The run's balance sheet as one JSON object (`--json`, and `summary.json` in the run
/// directory).
fn summary_json(
    s: &RunSummary,
    requested_hz: f64,
    verified: u64,
    verify_after: bool,
    problems: &[String],
    balanced: bool,
    trigger: Option<&serde_json::Value>,
) -> serde_json::Value {
    let nodes: Vec<_> = s
        .nodes
        .iter()
        .map(|n| {
            json!({
                "name": n.name,
                "requests": n.requests,
                "cleared": n.cleared,
                "clear_gaps": n.clear_gaps,
                "stored": n.stored,
                "swrod_built": n.swrod_built,
                "swrod_error": n.swrod_error,
                "input_errors": n.input_errors,
                "input_dropped_words": n.input_dropped_words,
                "restarted": n.restarted,
            })
        })
        .collect();
    json!({
        "run_number": s.run,
        "directory": s.output,
        "l1_accepts": s.l1_accepts,
        "accepted": s.accepted,
        "rejected": s.rejected,
        "forced_accepts": s.forced_accepts,
        "events_written": s.events_written,
        "events_verified": verified,
        "verified_by_reading": verify_after,
        "duplicates_dropped": s.duplicates,
        "partial_events": s.partial_events,
        "input_errors": s.nodes.iter().map(|n| n.input_errors).sum::<u64>(),
        "restarts": s.restarts,
        "recovered_events": s.recovered_events,
        "events_resent": s.events_resent,
        "in_flight_at_stop": s.unfinished,
        "bytes_written": s.bytes_written,
        "files": s.files,
        "readout_nodes": nodes,
        "seconds": s.seconds,
        "l1_rate_hz": s.l1_rate_hz,
        "l1_seconds": s.l1_seconds,
        "write_bytes_per_s": s.write_bytes_per_s,
        "compress_in_bytes": s.compress_in_bytes,
        "compress_out_bytes": s.compress_out_bytes,
        "compression_ratio": (s.compress_out_bytes > 0)
            .then(|| s.compress_in_bytes as f64 / s.compress_out_bytes as f64),
        "compress_seconds": s.compress_seconds,
        "l1_rate_requested_hz": requested_hz,
        "balanced": balanced,
        // Why the run did not balance (the first problem; all are in `problems`).
        "reason": problems.first(),
        "problems": problems,
        "python_trigger": trigger,
    })
}

/// Prints the run's balance sheet for people.
fn print_summary(
    s: &RunSummary,
    requested_hz: f64,
    verified: u64,
    problems: &[String],
    balanced: bool,
    trigger: Option<serde_json::Value>,
) {
    if let Some(t) = &trigger {
        println!("python trigger: {t}");
    }
    println!("run {} -> {}", s.run, s.output.display());
    println!(
        "  {} L1 accepts in {:.2} s: {:.1} kHz{}",
        s.l1_accepts,
        s.seconds,
        s.l1_rate_hz / 1e3,
        if requested_hz > 0.0 {
            format!(" (requested {:.1} kHz)", requested_hz / 1e3)
        } else {
            String::new()
        }
    );
    if requested_hz > 0.0 && s.l1_rate_hz < 0.98 * requested_hz {
        println!(
            "  warning: the partition delivered {:.1}% of the requested L1 rate",
            100.0 * s.l1_rate_hz / requested_hz
        );
    }
    println!(
        "  decided: accepted {} + rejected {} + forced {} = {}",
        s.accepted,
        s.rejected,
        s.forced_accepts,
        s.accepted + s.rejected + s.forced_accepts
    );
    println!(
        "  written: {} events ({:.1} MB, {:.2} GB/s) in {} file(s), {} verified",
        s.events_written,
        s.bytes_written as f64 / 1e6,
        s.write_bytes_per_s / 1e9,
        s.files.len(),
        verified
    );
    for n in &s.nodes {
        println!(
            "  {}: {} requests, clears for {} events",
            n.name, n.requests, n.cleared
        );
        if n.input_errors > 0 {
            println!(
                "    input: {} link errors found ({} words dropped); their events are flagged",
                n.input_errors, n.input_dropped_words
            );
        }
        if n.swrod_built > 0 || n.swrod_error.is_some() {
            println!(
                "    SW ROD input: {} fragments built{}",
                n.swrod_built,
                n.swrod_error
                    .as_deref()
                    .map_or(String::new(), |e| format!(", error: {e}"))
            );
        }
    }
    if s.restarts > 0 || s.partial_events > 0 {
        println!(
            "  faults: {} restart(s), {} partial events, {} events recovered from files left \
             open, {} events resent to a logger",
            s.restarts, s.partial_events, s.recovered_events, s.events_resent
        );
    }
    if let Some(why) = &s.ended_by {
        println!(
            "  ended early: {why}; {} events were in flight",
            s.unfinished
        );
    }
    println!("  balance: {}", if balanced { "OK" } else { "MISMATCH" });
    for p in problems {
        println!("  problem: {p}");
    }
}

/// One more than the largest `run-NNNNNNNN` in `dir` (1 when there is none).
pub(crate) fn next_run_number(dir: &std::path::Path) -> u32 {
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
