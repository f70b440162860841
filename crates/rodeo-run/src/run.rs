//! One run, from its number to its record: [`Run`].
//!
//! [`Run::new`] takes the run number from the [`OutputDir`] this process owns (or the one
//! asked for, refused when its directory exists), checks the configuration, writes the
//! configuration snapshot `partition.toml` (mode 0600: it may hold the command token) into the
//! run directory and builds the partition: threads of this process ([`Mode::Embedded`]) or one
//! `rodeo app` process per application under a controller ([`Mode::Processes`]: shared memory
//! between the processes of one host, tcp to other hosts). [`Run::drive`] brings it up, runs
//! it to its end (event count, seconds, `quit`, a `stop` over HTTP, a failure) and down, and
//! removes what the run leaves at run time (ipc sockets, the shared memory of dead
//! processes). [`Run::finish`] makes the [`RunSheet`] (the balance sheet, or what the files
//! prove of a failed run), writes it to `summary.json` and records it in the run database: the
//! same steps, and the same record, for `rodeo run` and for every run of `rodeo serve`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use rodeo_control::application::TriggerFactory;
use rodeo_control::config::{L1Mode, PartitionConfig, TransportKind};
use rodeo_control::controller::Controller;
use rodeo_control::embedded::EmbeddedPartition;
use rodeo_control::lifecycle::{Command, State, TransitionError};
use rodeo_control::metrics::AppMetrics;
use rodeo_control::monitoring::Forwarder;
use rodeo_control::partition::Layout;
use rodeo_control::run_control::{run_to_end, Partition};
use rodeo_control::summary::RunSummary;
use serde_json::Value;

use crate::lock::OutputLock;
use crate::output::{data_files, file_records, OutputDir};
use crate::rundb::now_ns;
use crate::sheet::RunSheet;

/// Where the applications of a run live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every application a set of threads of this process.
    Embedded,
    /// Every application its own `rodeo app` process under a controller (on this host, or on
    /// the hosts of `[hosts]` over ssh).
    Processes,
}

/// How to make a run, besides its configuration.
#[derive(Clone)]
pub struct RunOptions {
    /// Threads or processes.
    pub mode: Mode,
    /// The run number (None: the next free one).
    pub run_number: Option<u32>,
    /// Trace one event in this many (embedded only; None: no trace).
    pub trace_every: Option<u64>,
    /// The DCMs' trigger algorithm (embedded only; None: the configured one).
    pub trigger: Option<TriggerFactory>,
    /// Start the `[monitoring]` forwarder with the run (a service keeps its own).
    pub forward_samples: bool,
    /// Who starts the run, for its record (`rodeo run (user@host)`).
    pub started_by: String,
}

impl RunOptions {
    /// Options for `mode` with everything else as `rodeo run` has it by default.
    pub fn new(mode: Mode, started_by: String) -> RunOptions {
        RunOptions {
            mode,
            run_number: None,
            trace_every: None,
            trigger: None,
            forward_samples: true,
            started_by,
        }
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("mode", &self.mode)
            .field("run_number", &self.run_number)
            .field("trace_every", &self.trace_every)
            .field("trigger", &self.trigger.is_some())
            .field("forward_samples", &self.forward_samples)
            .field("started_by", &self.started_by)
            .finish()
    }
}

/// One run of a partition (see the module docs).
pub struct Run {
    config: PartitionConfig,
    layout: Layout,
    mode: Mode,
    partition: Arc<dyn Partition>,
    embedded: Option<Arc<EmbeddedPartition>>,
    controller: Option<Arc<Controller>>,
    started_at_ns: Option<u64>,
    started_by: String,
    /// The applications' counters as last seen while the run ran (for a failed run's sheet).
    last_metrics: Vec<(String, AppMetrics)>,
    /// Whether `quit` stopped the run before its end ([`RunSheet::stopped_early`]).
    stopped_early: bool,
    _forwarder: Option<Forwarder>,
    /// The locks of `[logger] directories` other than the output directory, for the run's
    /// life ([`lock_logger_directories`]).
    _logger_locks: Vec<OutputLock>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("number", &self.config.run.number)
            .field("directory", &self.layout.output)
            .field("mode", &self.mode)
            .finish()
    }
}

impl Run {
    /// What `mode` refuses and sets in `config` before its fields are checked: a
    /// `--processes` run refuses the data-driven L1 (it reads the nodes' progress in one
    /// process) and exchanges data over shared memory on one host (TCP across `[hosts]`)
    /// unless `[transport] kind` says otherwise. `rodeo config check` applies it for
    /// `--processes` (and warns without it), so that the check refuses what the run would.
    pub fn adapt_to_mode(config: &mut PartitionConfig, mode: Mode) -> anyhow::Result<()> {
        if mode == Mode::Processes {
            if config.l1.mode == L1Mode::Readout {
                anyhow::bail!(
                    "l1.mode = \"readout\" (the data-driven L1) reads the readout nodes' \
                     progress in the supervisor's process: run this partition without \
                     --processes"
                );
            }
            // Applications on one host exchange data through shared memory (ZeroMQ stays
            // for run control); `[transport] kind = "ipc"` or `"tcp"` keeps ZeroMQ.
            if config.transport.kind == TransportKind::Inproc {
                config.transport.kind = if config.hosts.is_empty() {
                    TransportKind::Shm
                } else {
                    TransportKind::Tcp
                };
            }
        }
        Ok(())
    }

    /// Checks `config` as a run in `mode` takes it, before any run directory or run number:
    /// the transport a `--processes` run uses on one host (shared memory unless the
    /// configuration says otherwise, which this sets), what that mode cannot run, every
    /// field (`validate`), what this host can give the partition (memory, cores: the
    /// warnings are returned) and the output directories (writable or creatable).
    /// [`Run::new`] calls it; `rodeo run` calls it first too, so that a refused configuration
    /// leaves no output directory behind.
    pub fn check_config(config: &mut PartitionConfig, mode: Mode) -> anyhow::Result<Vec<String>> {
        Run::adapt_to_mode(config, mode)?;
        config.validate()?;
        // What this host can give the partition (memory, cores): refused here, before any
        // data is taken, as `rodeo config check` refuses it.
        let mut warnings = config.check_resources()?;
        warnings.extend(config.unused_settings());
        if mode != Mode::Processes && !config.hosts.is_empty() {
            // It ran everything here without a word (2026-12-07).
            warnings.push(format!(
                "[hosts] places {} application(s) on other hosts only with --processes: this \
                 run runs every application in this process",
                config.hosts.len()
            ));
        }
        // The loggers' output directories, like run.output: writable or creatable. (Their free
        // space is `rodeo run`'s check, not here: a served partition prepares its next run as
        // one ends, often on the disk that run filled to the margin and that may be freed
        // before the start.)
        config.check_directories()?;
        // The inputs' files, as the readout node will read them: before any run number.
        config.check_input_files()?;
        // The partition's own addresses: none twice, every host this host's.
        config.check_binds_here()?;
        Ok(warnings)
    }

    /// Takes a run number in `output`, checks `config`, writes the configuration snapshot and
    /// builds the partition (not yet brought up). Refused, before anything is written, when
    /// the configuration fails its checks or the run directory exists.
    pub fn new(
        output: &OutputDir,
        mut config: PartitionConfig,
        options: RunOptions,
    ) -> anyhow::Result<Run> {
        config.run.output = output.path().display().to_string();
        // An explicit number does not need a next one (a directory holding run 4294967295
        // refused every --run-number).
        let next = output.next_run_number();
        let next_free = match &next {
            Ok(n) => format!("take the next free number ({n})"),
            Err(_) => "take the next free number (there is none above the largest)".into(),
        };
        config.run.number = match options.run_number {
            Some(n) => n,
            None => next?,
        };
        for warning in Run::check_config(&mut config, options.mode)? {
            tracing::warn!("{warning}");
        }
        let layout = Layout::new(&config);
        // Known before any data is taken: a run directory that exists would fail the run at
        // stop.
        if layout.output.exists() {
            anyhow::bail!(
                "the run directory {} already exists: run {} was taken before. Leave out \
                 --run-number to {next_free}, or choose another.",
                layout.output.display(),
                config.run.number,
            );
        }
        // A number the run database has recorded, its directory gone: taking it again would
        // replace that run's record (its sheet, files, comments) without a word.
        if output.db().has_run(config.run.number)? {
            anyhow::bail!(
                "run {} is recorded in {} already (its directory is gone): a new run with its \
                 number would replace that record. Leave out --run-number to {next_free}, or \
                 choose another.",
                config.run.number,
                output.db().path().display(),
            );
        }
        let logger_locks = lock_logger_directories(&config, output.path())?;
        let snapshot = write_snapshot(&layout, &config)?;
        let built = build(&config, &options, snapshot);
        let (partition, embedded, controller, forwarder) = match built {
            Ok(b) => b,
            Err(e) => {
                // Nothing ran: the number stays free.
                let _ = std::fs::remove_file(layout.output.join("partition.toml"));
                let _ = std::fs::remove_dir(&layout.output);
                return Err(e);
            }
        };
        Ok(Run {
            config,
            layout,
            mode: options.mode,
            partition,
            embedded,
            controller,
            started_at_ns: None,
            started_by: options.started_by,
            last_metrics: Vec::new(),
            stopped_early: false,
            _forwarder: forwarder,
            _logger_locks: logger_locks,
        })
    }

    /// The run number.
    pub fn number(&self) -> u32 {
        self.config.run.number
    }

    /// The run directory.
    pub fn directory(&self) -> &Path {
        &self.layout.output
    }

    /// The configuration the run runs with.
    pub fn config(&self) -> &PartitionConfig {
        &self.config
    }

    /// The partition, for run control (HTTP) and status.
    pub fn partition(&self) -> Arc<dyn Partition> {
        Arc::clone(&self.partition)
    }

    /// The partition as threads of this process (None with processes).
    pub fn embedded(&self) -> Option<&Arc<EmbeddedPartition>> {
        self.embedded.as_ref()
    }

    /// The L1 rate the configuration asks for (0: the data-driven and external L1, which
    /// ignore `l1.rate_hz`, and an unpaced one).
    pub fn requested_l1_hz(&self) -> f64 {
        match self.config.l1.mode {
            L1Mode::Readout | L1Mode::External => 0.0,
            _ => self.config.l1.rate_hz,
        }
    }

    /// Brings the partition up to CONNECTED, ready for a `start` (what a service does between
    /// runs); on a failure everything is brought down and the error names the application.
    pub fn prepare(&self) -> Result<(), TransitionError> {
        for c in [Command::Initialize, Command::Configure, Command::Connect] {
            if let Err(e) = self.partition.command(c) {
                let e = rodeo_control::run_control::cause_of_refusal(self.partition.as_ref(), e);
                let _ = self.partition.command(Command::Shutdown);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Runs the partition to its end (see [`run_to_end`]: up from wherever it is, the run,
    /// down) and removes what it left at run time; `tick` gets the L1 accepts and seconds so
    /// far about every 200 ms.
    pub fn drive(
        &mut self,
        quit: &dyn Fn() -> bool,
        mut tick: impl FnMut(u64, f64),
    ) -> Result<RunSummary, TransitionError> {
        self.started_at_ns = Some(now_ns());
        let partition = Arc::clone(&self.partition);
        let mut seen = Vec::new();
        let stopped = std::cell::Cell::new(false);
        let quit_seen = || {
            let q = quit();
            stopped.set(stopped.get() || q);
            q
        };
        let result = run_to_end(partition.as_ref(), &quit_seen, |l1, seconds| {
            // What the applications last said, kept for a sheet of a run that fails.
            let now = partition.last_metrics();
            if !now.is_empty() {
                seen = now;
            }
            tick(l1, seconds);
        });
        let now = partition.last_metrics();
        self.last_metrics = if now.is_empty() { seen } else { now };
        self.stopped_early = stopped.get();
        self.clean_up_runtime();
        if let (Some(c), Ok(summary)) = (&self.controller, &result) {
            for (name, why) in c.dead_apps() {
                // A DCM that died is a problem of the sheet (`dcm_lost`); the others are
                // said here.
                if !summary.dcms_lost.iter().any(|(dcm, _)| *dcm == name) {
                    eprintln!("note: {name} died ({why})");
                }
            }
            if summary.restarts > 0 {
                eprintln!(
                    "note: {} restart(s) of applications into the run ({} partial events, {} \
                     events recovered from files left open)",
                    summary.restarts, summary.partial_events, summary.recovered_events
                );
            }
        }
        result
    }

    /// The applications' counters as they last reported them (after [`Run::drive`]: at the
    /// run's end, or the last seen while it ran).
    pub fn last_metrics(&self) -> &[(String, AppMetrics)] {
        &self.last_metrics
    }

    /// Writes the sampled stage time stamps of an embedded run with a trace as a
    /// Chrome/Perfetto trace to `path`; returns how many were written.
    pub fn write_trace(&self, path: &Path) -> anyhow::Result<usize> {
        let records = self
            .embedded
            .as_ref()
            .map(|p| p.take_traces())
            .unwrap_or_default();
        let json = crate::chrome_trace::to_json(&records);
        std::fs::write(path, serde_json::to_vec(&json)?)
            .with_context(|| format!("cannot write the trace {}", path.display()))?;
        Ok(records.len())
    }

    /// The end of the run: its sheet from `outcome` (the balance sheet of a run that ended in
    /// order; for a failure, its reason and what the files prove), written to `summary.json`
    /// in the run directory and recorded in `output`'s run database. `trigger` is the Python
    /// trigger's report, when one ran.
    pub fn finish<E: std::fmt::Display>(
        self,
        output: &mut OutputDir,
        outcome: Result<RunSummary, E>,
        trigger: Option<Value>,
    ) -> RunSheet {
        let (sheet, files) = match outcome {
            Ok(summary) if summary.missing.is_empty() => {
                let sheet = RunSheet::from_summary(
                    &summary,
                    self.requested_l1_hz(),
                    trigger,
                    self.config.logger.verify_after,
                );
                // With `verify_after` the sheet read every file back: so do the records.
                let checked: &[_] = if self.config.logger.verify_after {
                    &[]
                } else {
                    &summary.checked_files
                };
                let mut files = file_records(&summary.files, checked);
                let mut sheet = sheet;
                // Files a logger gave up (`.writing`) are not in its summary: read them back.
                let unfinished: Vec<PathBuf> = self
                    .files_on_disk()
                    .into_iter()
                    .filter(|p| {
                        rodeo_files::rawfile::is_unfinished(p) && !summary.files.contains(p)
                    })
                    .collect();
                let unfinished = file_records(&unfinished, &[]);
                sheet.add_unfinished(&unfinished);
                files.extend(unfinished);
                (sheet, files)
            }
            Ok(summary) => {
                // Some applications left no summary: the files say what was written, read back
                // completely (the sheet says its events were verified by reading).
                let files = file_records(&self.files_on_disk(), &[]);
                let sheet = RunSheet::from_summary_and_files(
                    &summary,
                    self.requested_l1_hz(),
                    trigger,
                    self.config.logger.verify_after,
                    Some(&files),
                    &self.last_metrics,
                );
                (sheet, files)
            }
            Err(e) => {
                let files = file_records(&self.files_on_disk(), &[]);
                let mut sheet = RunSheet::failed(
                    self.number(),
                    self.layout.output.clone(),
                    format!("{e:#}"),
                    &files,
                    &self.last_metrics,
                );
                // The controller counted the run's restarts (a failed sheet left them null).
                sheet.restarts = Some(self.partition.status().restarts);
                // How long it ran, on this process's clock (the sheet read "in 0.00 s").
                sheet.seconds = self
                    .started_at_ns
                    .map(|t| now_ns().saturating_sub(t) as f64 / 1e9);
                (sheet, files)
            }
        };
        let mut sheet = sheet;
        if self.stopped_early {
            sheet.mark_stopped_early();
        }
        sheet.set_bad_messages(&self.last_metrics);
        let words = self.config.run.words();
        sheet.comment = words.comment;
        sheet.run_type = words.run_type;
        sheet.shifter = words.shifter;
        sheet.conditions = conditions_at_ends(output, self.started_at_ns);
        if self.layout.output.is_dir() {
            let path = self.layout.output.join("summary.json");
            // Whole or not at all: written beside it, then renamed (a full disk left a
            // 0-byte `summary.json`, which a later start could not read as a sheet).
            let part = self.layout.output.join(".summary.json.part");
            if let Err(e) = serde_json::to_vec_pretty(&sheet)
                .map_err(std::io::Error::other)
                .and_then(|b| std::fs::write(&part, b))
                .and_then(|()| std::fs::rename(&part, &path))
            {
                let _ = std::fs::remove_file(&part);
                eprintln!("rodeo: warning: cannot write {}: {e}", path.display());
            }
        }
        output.record(
            &sheet,
            self.config.to_toml_public(),
            self.started_at_ns,
            &self.started_by,
            files,
        );
        sheet
    }

    /// A run prepared and never started (a service shutting down or changing its
    /// configuration): the partition brought down, its run directory removed unless something
    /// was written there, so the number stays free.
    pub fn abandon(self) {
        bring_down(self.partition.as_ref());
        self.clean_up_runtime();
        let dir = &self.layout.output;
        if data_files(dir).is_empty() {
            let _ = std::fs::remove_file(dir.join("partition.toml"));
            let _ = std::fs::remove_dir(dir);
        }
        // The loggers made the run's directory in each of `[logger] directories` too: gone if
        // empty (a service shut down left one per directory behind).
        if let Some(run) = dir.file_name() {
            for d in &self.config.logger.directories {
                let _ = std::fs::remove_dir(Path::new(d).join(run));
            }
        }
    }

    /// The data files of this run on disk: in the run directory and in the run's directory
    /// under each of `[logger] directories`.
    fn files_on_disk(&self) -> Vec<PathBuf> {
        let mut files = data_files(&self.layout.output);
        let run = self.layout.output.file_name().map(PathBuf::from);
        for d in &self.config.logger.directories {
            if let Some(run) = &run {
                let dir = Path::new(d).join(run);
                if dir != self.layout.output {
                    files.extend(data_files(&dir));
                }
            }
        }
        files
    }

    /// Removes the run's runtime directory (ipc sockets) and, with shared memory, what dead
    /// application processes left there.
    fn clean_up_runtime(&self) {
        if let Err(e) = self.layout.remove_runtime_dir() {
            eprintln!(
                "rodeo: warning: cannot remove the runtime directory {}: {e}",
                self.layout.runtime.display()
            );
        }
        if self.mode == Mode::Processes && self.config.transport.kind == TransportKind::Shm {
            match rodeo_transport::shm::cleanup_dead_nodes() {
                Ok(0) => {}
                Ok(n) => eprintln!(
                    "rodeo: removed the shared-memory resources of {n} dead application \
                     process(es)"
                ),
                Err(e) => eprintln!("rodeo: warning: shared-memory clean-up: {e}"),
            }
        }
    }
}

/// The conditions as they stood at the run's start (`started_at_ns`; None: it never started)
/// and now, its end: `{"begin": {...}, "end": {...}}` (None when the database cannot say).
fn conditions_at_ends(output: &OutputDir, started_at_ns: Option<u64>) -> Option<Value> {
    let db = output.db();
    let end = db.conditions_as_of(u64::MAX);
    let begin = match started_at_ns {
        Some(t) => db.conditions_as_of(t).map(Value::Object),
        None => Ok(Value::Null),
    };
    match (begin, end) {
        (Ok(begin), Ok(end)) => Some(serde_json::json!({ "begin": begin, "end": end })),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("rodeo: warning: the run's conditions not read: {e}");
            None
        }
    }
}

/// The parts of a run: its partition (threads or a controller of processes) and the
/// `[monitoring]` forwarder.
type Built = (
    Arc<dyn Partition>,
    Option<Arc<EmbeddedPartition>>,
    Option<Arc<Controller>>,
    Option<Forwarder>,
);

/// Builds the partition of `config` as `options` say (not yet brought up); `snapshot` is the
/// configuration file the local processes read.
fn build(
    config: &PartitionConfig,
    options: &RunOptions,
    snapshot: PathBuf,
) -> anyhow::Result<Built> {
    let forwarder = (options.forward_samples && config.monitoring.enabled())
        .then(|| Forwarder::start(&config.monitoring))
        .transpose()?;
    Ok(match options.mode {
        Mode::Embedded => {
            let mut p = EmbeddedPartition::new(config.clone(), options.trace_every);
            if let Some(factory) = &options.trigger {
                p = p.with_trigger(Arc::clone(factory));
            }
            let p = Arc::new(p);
            (p.clone(), Some(p), None, forwarder)
        }
        Mode::Processes => {
            let exe = std::env::current_exe().context("cannot find the rodeo executable")?;
            let mut c = Controller::new(config.clone(), exe)?;
            c.set_local_config_file(snapshot);
            let c = Arc::new(c);
            (c.clone(), None, Some(c), forwarder)
        }
    })
}

/// Takes `p` down to NONE from whatever state it is in (a failed step: shutdown).
pub fn bring_down(p: &dyn Partition) {
    while p.partition_state() != State::None {
        let s = p.partition_state();
        let next = Command::path(s, State::None)
            .and_then(|p| p.first().copied())
            .unwrap_or(Command::Shutdown);
        if p.command(next).is_err() && next == Command::Shutdown {
            break;
        }
    }
}

/// Locks each of `[logger] directories` that is not the output directory itself, for the
/// run's life: one directory has one owner ([`crate::lock`]). One that another `rodeo run` or
/// `rodeo serve` owns is refused, naming the holder: a run whose loggers wrote into a serving
/// service's directory put its file into the service's next run directory, where the
/// service's run of that number added its own, each calling the run its own (2026-12-07). A
/// run directory holding anything there already is refused, as in the output directory. With
/// `[hosts]` placing a logger on another host, the directories may be that host's: nothing is
/// locked here.
fn lock_logger_directories(
    config: &PartitionConfig,
    output: &Path,
) -> anyhow::Result<Vec<OutputLock>> {
    if config.hosts.keys().any(|app| app.starts_with("logger-")) {
        return Ok(Vec::new());
    }
    let mut held: Vec<PathBuf> = std::fs::canonicalize(output).into_iter().collect();
    let mut locks = Vec::new();
    for d in &config.logger.directories {
        let dir = Path::new(d);
        let field = || format!("logger.directories: {}", dir.display());
        // Before it is made: a refused run must leave nothing in another's directory.
        OutputLock::check_not_inside_held(dir).with_context(field)?;
        std::fs::create_dir_all(dir).with_context(field)?;
        let real = std::fs::canonicalize(dir).with_context(field)?;
        if held.contains(&real) {
            continue;
        }
        locks.push(OutputLock::acquire(&real, &crate::lock::this_command()).with_context(field)?);
        // An empty one is a prepared run's that never started (its service killed).
        let run_dir = real.join(format!("run-{:08}", config.run.number));
        let holds_something = std::fs::read_dir(&run_dir).is_ok_and(|mut d| d.next().is_some());
        if holds_something {
            anyhow::bail!(
                "logger.directories: the run directory {} already holds files: run {} was \
                 taken there before. Choose another run number or directory.",
                run_dir.display(),
                config.run.number
            );
        }
        held.push(real);
    }
    Ok(locks)
}

/// Writes the configuration of the run into its run directory (made here) as
/// `partition.toml`: the record of what ran, and the file the local `rodeo app` processes of a
/// run with processes name on their command line. Readable by the owner only: it may hold the
/// command token (control.token).
fn write_snapshot(layout: &Layout, config: &PartitionConfig) -> anyhow::Result<PathBuf> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `[hosts]` without `--processes` runs everything here, and says so.
    #[test]
    fn hosts_without_processes_are_said_to_be_ignored() {
        let mut c = PartitionConfig::default();
        c.hosts.insert("dcm-1".into(), "node7".into());
        c.transport.kind = TransportKind::Tcp;
        let w = Run::check_config(&mut c, Mode::Embedded).unwrap();
        assert!(w.iter().any(|w| w.contains("[hosts]")), "{w:?}");
        let mut c = PartitionConfig::default();
        let w = Run::check_config(&mut c, Mode::Embedded).unwrap();
        assert!(!w.iter().any(|w| w.contains("[hosts]")), "{w:?}");
    }
}
