//! `rodeo serve`: a partition that stays up for a shift. It comes up to CONNECTED and waits;
//! `start` (over HTTP, `POST /api/command {"command":"start"}`) runs the next run number, `stop`
//! ends that run (files closed, balance sheet, a record in the run database) and brings the
//! partition back to CONNECTED with the number after; as many runs as the operator likes.
//! `shutdown`, SIGINT or SIGTERM bring everything down in order (a run in progress is stopped
//! first). Each run gets a fresh partition configured with its number (the run directory and
//! the files carry it); the next one is configured and connected as soon as a run ends, so a
//! `start` only starts.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use anyhow::Context;
use rodeo_control::config::{PartitionConfig, TransportKind};
use rodeo_control::control::{ConfigChangeError, Partition, PartitionStatus, RunControl};
use rodeo_control::embedded::EmbeddedPartition;
use rodeo_control::lifecycle::{Command, State, TransitionError};
use rodeo_control::observe::Observer;
use rodeo_control::prometheus::MetricsWriter;
use rodeo_control::rundb::RunDb;

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
}

/// The partition of the current (or next) run and the thread running it.
struct Current {
    partition: Arc<dyn Partition>,
    number: u32,
    run: Option<JoinHandle<()>>,
    quit: Arc<AtomicBool>,
}

/// The service: a [`RunControl`] over one run's partition after another.
struct Service {
    /// The configuration of the next run (`PUT /api/config` replaces it between runs).
    config: Mutex<PartitionConfig>,
    /// History, alarms, sampled histograms, log ([`Observer`]).
    observer: Observer,
    processes: bool,
    json: bool,
    db: Mutex<RunDb>,
    current: Mutex<Current>,
    /// Serialises commands (start, stop, shutdown) against each other.
    commands: Mutex<()>,
    shut_down: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Service {
    /// A partition for run `number`, brought up to CONNECTED.
    fn config(&self) -> PartitionConfig {
        lock(&self.config).clone()
    }

    /// A partition for run `number`, brought up to CONNECTED.
    fn prepare(&self, number: u32) -> Result<Arc<dyn Partition>, TransitionError> {
        let mut config = self.config();
        config.run.number = number;
        let layout = rodeo_control::partition::Layout::new(&config);
        std::fs::create_dir_all(&layout.output).map_err(|e| TransitionError::Failed {
            who: "serve".into(),
            command: Command::Configure,
            from: State::None,
            reason: format!("cannot make {}: {e}", layout.output.display()),
        })?;
        let _ = std::fs::write(
            layout.output.join("partition.toml"),
            config.to_toml_public(),
        );
        let partition: Arc<dyn Partition> = if self.processes {
            let exe = std::env::current_exe().map_err(|e| TransitionError::Failed {
                who: "serve".into(),
                command: Command::Initialize,
                from: State::None,
                reason: format!("cannot find the rodeo executable: {e}"),
            })?;
            let c = rodeo_control::controller::Controller::new(config, exe).map_err(|e| {
                TransitionError::Failed {
                    who: "controller".into(),
                    command: Command::Initialize,
                    from: State::None,
                    reason: e.to_string(),
                }
            })?;
            Arc::new(c)
        } else {
            Arc::new(EmbeddedPartition::new(config, None))
        };
        for c in [Command::Initialize, Command::Configure, Command::Connect] {
            if let Err(e) = partition.command(c) {
                let _ = partition.command(Command::Shutdown);
                return Err(e);
            }
        }
        Ok(partition)
    }

    /// Starts the prepared run on its own thread.
    fn start(self: &Arc<Self>) -> Result<State, TransitionError> {
        let mut cur = lock(&self.current);
        let state = cur.partition.partition_state();
        if cur.run.is_some() || state != State::Connected {
            return Err(TransitionError::Illegal {
                who: "partition".into(),
                command: Command::Start,
                state,
            });
        }
        cur.partition.command(Command::Start)?;
        let quit = Arc::new(AtomicBool::new(false));
        cur.quit = quit.clone();
        let (partition, number) = (cur.partition.clone(), cur.number);
        let me = Arc::clone(self);
        cur.run = Some(
            std::thread::Builder::new()
                .name(format!("run-{number}"))
                .spawn(move || me.run(partition.as_ref(), number, &quit))
                .map_err(|e| TransitionError::Failed {
                    who: "serve".into(),
                    command: Command::Start,
                    from: State::Connected,
                    reason: format!("cannot start the run thread: {e}"),
                })?,
        );
        Ok(State::Running)
    }

    /// One run to its end: its balance sheet printed and recorded.
    fn run(&self, partition: &dyn Partition, number: u32, quit: &AtomicBool) {
        let started = rodeo_control::rundb::now_ns();
        let mut config = self.config();
        config.run.number = number;
        let outcome = rodeo_control::control::run_to_end(
            partition,
            &|| quit.load(Ordering::Relaxed),
            |_, _| {},
        );
        let (record, files) = match outcome {
            Ok(summary) => {
                let (record, ..) = super::run::balance_sheet(
                    &summary,
                    config.l1.rate_hz,
                    None,
                    config.logger.verify_after,
                );
                (record, summary.files.clone())
            }
            Err(e) => {
                let layout = rodeo_control::partition::Layout::new(&config);
                (
                    serde_json::json!({
                        "run_number": number,
                        "balanced": false,
                        "reason": e.to_string(),
                        "problems": [e.to_string()],
                    }),
                    super::runs::data_files(&layout.output),
                )
            }
        };
        let dir = rodeo_control::partition::Layout::new(&config).output;
        let _ = std::fs::write(dir.join("summary.json"), record.to_string());
        super::runs::record_run(
            &mut lock(&self.db),
            number,
            started,
            config.to_toml_public(),
            &record,
            &files,
        );
        if self.json {
            println!("{record}");
        } else {
            eprintln!(
                "rodeo: run {number} ended: {} L1 accepts, {} events written, balance {}",
                record["l1_accepts"],
                record["events_written"],
                if record["balanced"] == true {
                    "OK"
                } else {
                    "FAILED"
                }
            );
        }
    }

    /// Ends the run in progress (if any) and prepares the next one. The status stays readable
    /// meanwhile: the lock on the current partition is not held while the run drains.
    fn stop(&self) -> Result<State, TransitionError> {
        let (run, quit) = {
            let mut cur = lock(&self.current);
            match cur.run.take() {
                Some(run) => (run, cur.quit.clone()),
                None => {
                    return Err(TransitionError::Illegal {
                        who: "partition".into(),
                        command: Command::Stop,
                        state: cur.partition.partition_state(),
                    })
                }
            }
        };
        quit.store(true, Ordering::Relaxed);
        let _ = run.join();
        if self.shut_down.load(Ordering::Relaxed) {
            return Ok(State::None);
        }
        let next = lock(&self.current).number.saturating_add(1);
        let partition = self.prepare(next)?;
        let mut cur = lock(&self.current);
        cur.partition = partition;
        cur.number = next;
        Ok(State::Connected)
    }

    /// A run that ended by itself (event count, seconds, failure): joined, next prepared.
    fn reap(&self) {
        let _guard = lock(&self.commands);
        let finished = lock(&self.current)
            .run
            .as_ref()
            .is_some_and(JoinHandle::is_finished);
        if finished {
            if let Err(e) = self.stop() {
                eprintln!("rodeo: cannot prepare the next run: {e}");
            }
        }
    }

    /// `PUT /api/config`: checks `toml` as `rodeo config check` does, and between runs makes it
    /// the configuration of the next run (the prepared partition brought down and up again with
    /// it). `run.output` and `control.http` stay the service's; a token shown as `(hidden)`
    /// keeps the one in effect.
    fn replace_config(&self, toml: &str) -> Result<(), ConfigChangeError> {
        let old = self.config();
        let mut new = PartitionConfig::from_toml(toml, "PUT /api/config")
            .map_err(|e| ConfigChangeError::Invalid(e.to_string()))?;
        new.run.output = old.run.output.clone();
        new.control.http = old.control.http.clone();
        if new.control.token == "(hidden)" {
            new.control.token = old.control.token.clone();
        }
        if self.processes && new.transport.kind == TransportKind::Inproc {
            new.transport.kind = TransportKind::Ipc;
        }
        new.validate()
            .and_then(|()| new.check_output())
            .map_err(|e| ConfigChangeError::Invalid(e.to_string()))?;
        let mut cur = lock(&self.current);
        let state = cur.partition.partition_state();
        if cur.run.is_some() || state == State::Running {
            return Err(ConfigChangeError::Busy(state));
        }
        while cur.partition.partition_state() != State::None {
            let s = cur.partition.partition_state();
            let next = Command::path(s, State::None)
                .and_then(|p| p.first().copied())
                .unwrap_or(Command::Shutdown);
            if cur.partition.command(next).is_err() && next == Command::Shutdown {
                break;
            }
        }
        *lock(&self.config) = new.clone();
        self.observer
            .reconfigure(&new.alarms, &new.monitoring)
            .map_err(|e| ConfigChangeError::Failed(e.to_string()))?;
        tracing::warn!(run = cur.number, "configuration replaced (PUT /api/config)");
        cur.partition = self
            .prepare(cur.number)
            .map_err(|e| ConfigChangeError::Failed(e.to_string()))?;
        Ok(())
    }

    /// One look for the observer: the status and metrics of the partition now.
    fn look(&self, control: &dyn RunControl) {
        let status = control.status();
        let mut w = MetricsWriter::new();
        lock(&self.current).partition.write_metrics(&mut w);
        self.observer
            .tick(&status, &w.finish(), std::time::Instant::now());
    }

    fn shutdown(&self) -> Result<State, TransitionError> {
        self.shut_down.store(true, Ordering::Relaxed);
        if lock(&self.current).run.is_some() {
            self.stop()?;
        }
        let cur = lock(&self.current);
        let started = cur.run.is_some();
        while cur.partition.partition_state() != State::None {
            let s = cur.partition.partition_state();
            let next = Command::path(s, State::None)
                .and_then(|p| p.first().copied())
                .unwrap_or(Command::Shutdown);
            if cur.partition.command(next).is_err() && next == Command::Shutdown {
                break;
            }
        }
        // The run prepared for the next start was never started: not a run. Its directory
        // goes (unless something was written there), so the next service takes its number.
        if !started {
            let mut config = self.config();
            config.run.number = cur.number;
            let dir = rodeo_control::partition::Layout::new(&config).output;
            if super::runs::data_files(&dir).is_empty() {
                let _ = std::fs::remove_file(dir.join("partition.toml"));
                let _ = std::fs::remove_dir(&dir);
            }
        }
        Ok(State::None)
    }
}

/// The HTTP face of the service (the `Arc` lets `start` hand the service to the run thread).
struct ServiceControl(Arc<Service>);

impl RunControl for ServiceControl {
    fn status(&self) -> PartitionStatus {
        let cur = lock(&self.0.current);
        let mut s = cur.partition.status();
        s.run_number = cur.number;
        s
    }

    fn command(&self, command: Command) -> Result<State, TransitionError> {
        let _guard = lock(&self.0.commands);
        match command {
            Command::Start => self.0.start(),
            Command::Stop => self.0.stop(),
            Command::Shutdown => self.0.shutdown(),
            other => Err(TransitionError::Illegal {
                who: "partition".into(),
                command: other,
                state: lock(&self.0.current).partition.partition_state(),
            }),
        }
    }

    fn config_toml(&self) -> String {
        self.0.config().to_toml_public()
    }

    fn write_metrics(&self, out: &mut MetricsWriter) {
        lock(&self.0.current).partition.write_metrics(out);
        self.0.observer.write_metrics(out);
    }

    fn replace_config(&self, toml: &str) -> Result<(), ConfigChangeError> {
        let _guard = lock(&self.0.commands);
        self.0.replace_config(toml)
    }

    fn view(&self, what: &str) -> Option<serde_json::Value> {
        self.0.observer.view(what)
    }

    fn acknowledge_alarm(&self, name: &str) -> Result<(), String> {
        self.0.observer.acknowledge(name)
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut config = super::run::load_config(args.config.as_ref())?;
    if let Some(o) = &args.output {
        config.run.output = o.display().to_string();
    }
    config.control.http = args.http.clone();
    if args.processes && config.transport.kind == TransportKind::Inproc {
        config.transport.kind = TransportKind::Ipc;
    }
    config.validate()?;
    crate::logging::apply_config(&config.control.log)?;
    let output = PathBuf::from(&config.run.output);
    std::fs::create_dir_all(&output)
        .with_context(|| format!("cannot create output directory {}", output.display()))?;
    let db = super::runs::open_and_reconcile(&output)?;
    let first = next_number(&output, &db)?;
    let observer = Observer::new(&output, &config.alarms, &config.monitoring)?;
    let service = Arc::new(Service {
        config: Mutex::new(config.clone()),
        observer,
        processes: args.processes,
        json: args.json,
        db: Mutex::new(db),
        current: Mutex::new(Current {
            // Replaced at once below; a partition that was never brought up.
            partition: Arc::new(EmbeddedPartition::new(config.clone(), None)),
            number: first,
            run: None,
            quit: Arc::new(AtomicBool::new(false)),
        }),
        commands: Mutex::new(()),
        shut_down: AtomicBool::new(false),
    });
    let partition = service
        .prepare(first)
        .with_context(|| format!("cannot bring the partition for run {first} up"))?;
    lock(&service.current).partition = partition;
    crate::signal::install();
    crate::signal::abort_on_second();
    let control: Arc<dyn RunControl> = Arc::new(ServiceControl(Arc::clone(&service)));
    let _server = super::run::serve_http(
        &config.control,
        control.clone(),
        Some(output.join(rodeo_control::rundb::FILE_NAME)),
    )?
    .context("rodeo serve needs --http")?;
    eprintln!("rodeo: serving; run {first} is ready (CONNECTED): POST {{\"command\":\"start\"}}");
    let mut last_look = std::time::Instant::now();
    while !service.shut_down.load(Ordering::Relaxed) {
        if crate::signal::interrupted() {
            eprintln!("rodeo: interrupted: stopping in order (interrupt again to abort)");
            let _ = control.command(Command::Shutdown);
            break;
        }
        service.reap();
        if last_look.elapsed() >= std::time::Duration::from_secs(1) {
            last_look = std::time::Instant::now();
            service.look(&*control);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    eprintln!("rodeo: shut down");
    Ok(ExitCode::SUCCESS)
}

/// The first free run number: after every run directory and every recorded run.
fn next_number(output: &Path, db: &RunDb) -> anyhow::Result<u32> {
    let in_db = db.last_run_number()?.map_or(1, |n| n.saturating_add(1));
    let in_dir = super::run::next_run_number(output);
    Ok(in_db.max(in_dir))
}
