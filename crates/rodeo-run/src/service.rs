//! A partition that stays up for a shift: [`RunService`], one [`Run`] after another.
//!
//! The service comes up with the next run prepared (CONNECTED) and waits; `start` (over
//! HTTP) starts it on a thread of its own, `stop` ends it (files closed, balance sheet, a
//! record in the run database, the same [`Run::finish`] as `rodeo run`) and prepares the next
//! number; as many runs as the operator likes. A run that ends by itself (its event count or
//! seconds, a failure) is reaped the same way. `shutdown` brings everything down in order (a
//! run in progress is stopped first; a run prepared and never started gives its number back).
//! Each run gets a fresh partition configured with its number, so a `start` only starts.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rodeo_control::config::{PartitionConfig, RunWords};
use rodeo_control::lifecycle::{Command, State, TransitionError};
use rodeo_control::prometheus::MetricsWriter;
use rodeo_control::run_control::{ConfigChangeError, Partition, PartitionStatus, RunControl};

use crate::observe::Observer;
use crate::output::{started_by, OutputDir};
use crate::run::{bring_down, Mode, Run, RunOptions};
use crate::sheet::RunSheet;

/// What a service does with each run's sheet when the run has ended (print it).
pub type SheetSink = Box<dyn Fn(&RunSheet) + Send + Sync>;

/// The run of the moment: prepared, running, or just ended.
struct Current {
    /// Its number.
    number: u32,
    /// Its partition (status and metrics come from here).
    partition: Arc<dyn Partition>,
    /// The prepared run, until `start` hands it to the run thread.
    prepared: Option<Run>,
    /// The thread running it.
    thread: Option<JoinHandle<()>>,
    /// Tells the run thread to stop.
    quit: Arc<AtomicBool>,
    /// Who started it (the HTTP request's role and peer), once started.
    started_by: Option<String>,
    /// Who stopped it, once stopped by a command.
    stopped_by: Option<String>,
    /// Why no run is prepared (its preparation failed): said by the status and a refused
    /// `start` (only the service's stderr said it).
    unprepared: Option<String>,
}

/// The service (see the module docs).
pub struct RunService {
    /// The configuration of the next run (`PUT /api/config` replaces it between runs).
    config: Mutex<PartitionConfig>,
    /// The configuration the service was started with: the fields HTTP may not change come
    /// from here ([`crate::fixed`]).
    started: PartitionConfig,
    /// History, alarms, sampled histograms, log.
    observer: Observer,
    mode: Mode,
    output: Mutex<OutputDir>,
    current: Mutex<Current>,
    /// `current`'s number as of its last change, read without its lock: the HTTP audit reads
    /// it for every request, and a `start` that brings the prepared run up again holds the
    /// lock for seconds.
    number_now: AtomicU32,
    /// Serialises commands (start, stop, shutdown, configuration) against each other.
    commands: Mutex<()>,
    shut_down: AtomicBool,
    on_end: SheetSink,
}

impl std::fmt::Debug for RunService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunService")
            .field("mode", &self.mode)
            .field("run", &lock(&self.current).number)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A failure of the service itself (not of an application), as a transition error.
fn failed(command: Command, reason: String) -> TransitionError {
    TransitionError::Failed {
        who: "serve".into(),
        command,
        from: State::None,
        reason,
    }
}

impl RunService {
    /// Starts a service on `output` with `config`, its first run (the next free number)
    /// prepared; `on_end` gets each run's sheet.
    pub fn start(
        output: OutputDir,
        config: PartitionConfig,
        mode: Mode,
        on_end: SheetSink,
    ) -> anyhow::Result<Arc<RunService>> {
        let observer = Observer::new(output.path(), &config.alarms, &config.monitoring)?;
        let first = output.next_run_number()?;
        let run = prepare_run(&output, config.clone(), mode, first)
            .map_err(|e| anyhow::anyhow!("cannot bring the partition for run {first} up: {e}"))?;
        Ok(Arc::new(RunService {
            started: config.clone(),
            config: Mutex::new(config),
            observer,
            mode,
            output: Mutex::new(output),
            number_now: AtomicU32::new(first),
            current: Mutex::new(Current {
                number: first,
                partition: run.partition(),
                prepared: Some(run),
                thread: None,
                quit: Arc::new(AtomicBool::new(false)),
                started_by: None,
                stopped_by: None,
                unprepared: None,
            }),
            commands: Mutex::new(()),
            shut_down: AtomicBool::new(false),
            on_end,
        }))
    }

    /// Gives the prepared run up before any start (the HTTP API could not be served): the
    /// partition comes down and the run's directory goes, so its number stays free (it was
    /// recorded as a crashed run at the next start).
    pub fn abandon(self: &Arc<Self>) {
        self.shut_down.store(true, Ordering::Relaxed);
        if let Some(run) = lock(&self.current).prepared.take() {
            run.abandon();
        }
    }

    /// The number of the run prepared or running (never waits).
    pub fn run_number(&self) -> u32 {
        self.number_now.load(Ordering::Relaxed)
    }

    /// The service's run control, for the HTTP API.
    pub fn control(self: &Arc<Self>) -> Arc<dyn RunControl> {
        Arc::new(ServiceControl(Arc::clone(self)))
    }

    /// Serves until `shutdown` (or `interrupted()`, which shuts down in order): reaps runs
    /// that ended by themselves and lets the observer look about once a second.
    pub fn serve_until(self: &Arc<Self>, interrupted: &dyn Fn() -> bool) {
        let control = self.control();
        let mut last_look = Instant::now();
        while !self.shut_down.load(Ordering::Relaxed) {
            if interrupted() {
                eprintln!("rodeo: interrupted: stopping in order (interrupt again to abort)");
                let _ = control.command_by(Command::Shutdown, "a signal (SIGINT or SIGTERM)");
                break;
            }
            self.reap();
            if last_look.elapsed() >= Duration::from_secs(1) {
                last_look = Instant::now();
                self.look(&*control);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A run with number `number` of the configuration now, brought up to CONNECTED.
    fn prepare(&self, number: u32) -> Result<Run, TransitionError> {
        let config = lock(&self.config).clone();
        prepare_run(&lock(&self.output), config, self.mode, number)
    }

    /// Starts the prepared run on its own thread, on behalf of `by`, with `words` (none: the
    /// configuration's). A prepared run that lost an application while it waited, or that
    /// lacks `words` (they reach every application at `configure`: the loggers write them
    /// into the files), is given up and prepared again first, without the lock on the current
    /// run: the status answers meanwhile (every caller holds `commands`, so nothing else
    /// changes the current run).
    fn start_run(self: &Arc<Self>, by: &str, words: &RunWords) -> Result<State, TransitionError> {
        let mut config = lock(&self.config).clone();
        if !words.is_empty() {
            config.run.set_words(words.clone());
        }
        let rebuild = {
            let mut cur = lock(&self.current);
            let waiting = cur.thread.is_none() && cur.prepared.is_some();
            let lost = if waiting {
                lost_application(&cur.partition.status())
            } else {
                None
            };
            if let Some(why) = &lost {
                tracing::warn!(
                    run = cur.number,
                    "the prepared partition lost an application while it waited for start \
                     ({why}): it is prepared again before the start"
                );
            }
            let has = cur.prepared.as_ref().map(|r| r.config().run.words());
            let lacks_words = waiting && !words.is_empty() && has != Some(config.run.words());
            (lost.is_some() || lacks_words).then(|| (cur.number, cur.prepared.take()))
        };
        if let Some((number, old)) = rebuild {
            self.prepare_again(number, old, config)?;
        }
        let partition = {
            let cur = lock(&self.current);
            let state = cur.partition.partition_state();
            if let (None, None, Some(why)) = (&cur.thread, &cur.prepared, &cur.unprepared) {
                return Err(failed(
                    Command::Start,
                    format!(
                        "run {} could not be prepared ({why}): fix the cause and PUT /api/config \
                         to prepare it",
                        cur.number
                    ),
                ));
            }
            if cur.thread.is_some() || cur.prepared.is_none() || state != State::Connected {
                return Err(TransitionError::Illegal {
                    who: "partition".into(),
                    command: Command::Start,
                    state,
                });
            }
            cur.partition.clone()
        };
        // Without the lock: in `--processes` mode the start waits for every application.
        partition.command(Command::Start)?;
        let mut cur = lock(&self.current);
        let Some(run) = cur.prepared.take() else {
            return Err(failed(Command::Start, "no prepared run".into()));
        };
        let quit = Arc::new(AtomicBool::new(false));
        cur.quit = quit.clone();
        cur.started_by = Some(by.to_string());
        cur.stopped_by = None;
        let me = Arc::clone(self);
        let thread = std::thread::Builder::new()
            .name(format!("run-{}", cur.number))
            .spawn(move || me.run_thread(run, &quit))
            .map_err(|e| failed(Command::Start, format!("cannot start the run thread: {e}")))?;
        cur.thread = Some(thread);
        Ok(State::Running)
    }

    /// `old` (the prepared run, taken out of the current run) given up and run `number`
    /// prepared again with `config`; when that fails, prepared again with the service's
    /// configuration (the error says why, and the log whether even that failed: the service
    /// is then in NONE). The lock on the current run is held only to put the new run in.
    fn prepare_again(
        &self,
        number: u32,
        old: Option<Run>,
        config: PartitionConfig,
    ) -> Result<(), TransitionError> {
        if let Some(run) = old {
            let began = Instant::now();
            run.abandon();
            if began.elapsed() >= SLOW_PREPARE {
                tracing::warn!(
                    run = number,
                    "giving up the prepared run took {} ms",
                    began.elapsed().as_millis()
                );
            }
        }
        let attempt = prepare_run(&lock(&self.output), config, self.mode, number);
        match attempt {
            Ok(run) => {
                self.put_prepared(run);
                Ok(())
            }
            Err(e) => {
                tracing::error!(run = number, "the run cannot be prepared: {e}");
                match self.prepare(number) {
                    Ok(run) => self.put_prepared(run),
                    Err(e2) => tracing::error!(
                        "nor with the service's configuration: {e2}; `shutdown` the service"
                    ),
                }
                Err(e)
            }
        }
    }

    /// `run` as the current run's prepared one (its partition the one the status shows).
    fn put_prepared(&self, run: Run) {
        let mut cur = lock(&self.current);
        cur.partition = run.partition();
        cur.prepared = Some(run);
        cur.unprepared = None;
    }

    /// The number the next run takes, its run directory not made yet: `number`, or the next
    /// free one when something made `number`'s directory (or recorded it) meanwhile (a run
    /// directory made while the service waited in NONE failed every `PUT /api/config`, a QA
    /// pass). Kept as the current run's number.
    fn free_number(&self, number: u32) -> u32 {
        let free = lock(&self.output).next_run_number().unwrap_or(number);
        let next = number.max(free);
        let mut cur = lock(&self.current);
        cur.number = next;
        self.number_now.store(next, Ordering::Relaxed);
        next
    }

    /// One run to its end: its sheet recorded (with who started and stopped it) and handed
    /// to `on_end`.
    fn run_thread(&self, mut run: Run, quit: &AtomicBool) {
        let outcome = run.drive(&|| quit.load(Ordering::Relaxed), |_, _| {});
        let number = run.number();
        let (started_by, stopped_by) = {
            let cur = lock(&self.current);
            (cur.started_by.clone(), cur.stopped_by.clone())
        };
        let mut output = lock(&self.output);
        let sheet = run.finish(&mut output, outcome, None);
        let started_by = format!(
            "{}: {}",
            started_by_here(),
            started_by.as_deref().unwrap_or("?")
        );
        let stopped_by = stopped_by
            .unwrap_or_else(|| "itself (its events, seconds or inputs ended, or it failed)".into());
        if let Err(e) = output
            .db()
            .set_actors(number, &started_by, Some(&stopped_by))
        {
            eprintln!("rodeo: warning: run {number}: who started and stopped it not recorded: {e}");
        }
        drop(output);
        (self.on_end)(&sheet);
    }

    /// Ends the run in progress (on behalf of `by`; `None`: it ended by itself) and prepares
    /// the next one. The status stays readable meanwhile: the lock on the current run is not
    /// held while the run drains.
    fn stop(&self, by: Option<&str>) -> Result<State, TransitionError> {
        let (thread, quit) = {
            let mut cur = lock(&self.current);
            if let (Some(by), false) =
                (by, cur.thread.as_ref().is_some_and(JoinHandle::is_finished))
            {
                cur.stopped_by = Some(by.to_string());
            }
            match cur.thread.take() {
                Some(t) => (t, cur.quit.clone()),
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
        let asked = Instant::now();
        let _ = thread.join();
        if asked.elapsed() >= SLOW_PREPARE {
            tracing::warn!(
                "the run took {} ms to end after it was asked to stop",
                asked.elapsed().as_millis()
            );
        }
        if self.shut_down.load(Ordering::Relaxed) {
            return Ok(State::None);
        }
        // The next number is taken before the run is prepared: when that fails, the service
        // waits in NONE with it, so a `PUT /api/config` prepares it (it prepared the ended
        // run's number again, into that run's directory). A run directory made meanwhile by
        // something else is skipped, as at the service's start.
        let after = lock(&self.current).number.saturating_add(1);
        let next = self.free_number(after);
        let run = self.prepare(next).inspect_err(|e| {
            lock(&self.current).unprepared = Some(e.to_string());
        })?;
        self.put_prepared(run);
        Ok(State::Connected)
    }

    /// A run that ended by itself (event count, seconds, failure): joined, next prepared.
    fn reap(&self) {
        let _guard = lock(&self.commands);
        let finished = lock(&self.current)
            .thread
            .as_ref()
            .is_some_and(JoinHandle::is_finished);
        if finished {
            if let Err(e) = self.stop(None) {
                eprintln!("rodeo: cannot prepare the next run: {e}");
            }
        }
    }

    /// `PUT /api/config`: checks `toml` as `rodeo config check` does, refuses a change of the
    /// fields HTTP may not change ([`crate::fixed`]: they come from the file the service
    /// started with), and between runs makes it the configuration of the next run (the
    /// prepared run given up and prepared again with it). If the partition cannot be built
    /// with it (even by a panic, a value no check caught), the previous configuration is
    /// brought back up and the answer says so.
    fn replace_config(&self, toml: &str) -> Result<(), ConfigChangeError> {
        let invalid = |e: String| ConfigChangeError::Invalid(e);
        let parse_error = |e: toml::de::Error| {
            invalid(format!(
                "configuration PUT /api/config: {}",
                e.to_string().trim_end()
            ))
        };
        let named: toml::Table = toml::from_str(toml).map_err(parse_error)?;
        let mut new = PartitionConfig::from_toml(toml, "PUT /api/config")
            .map_err(|e| invalid(e.to_string()))?;
        let output = lock(&self.output).path().to_path_buf();
        crate::fixed::keep_fixed_fields(&self.started, &mut new, &named, &output)
            .map_err(|e| invalid(e.to_string()))?;
        let before = lock(&self.config).clone();
        // Checked as the service's mode runs it (what `--processes` refuses is a bad request,
        // not a partition that failed to come up: it was a 500, a QA pass, 2026-12-08).
        let mut checked = new.clone();
        crate::run::Run::adapt_to_mode(&mut checked, self.mode)
            .map_err(|e| invalid(format!("{e:#}")))?;
        let new_checked = &checked;
        new_checked
            .validate()
            .and_then(|()| new_checked.check_output())
            .and_then(|()| new_checked.check_directories())
            .and_then(|()| new_checked.check_input_files())
            .and_then(|()| new_checked.check_binds_here())
            .and_then(|()| new_checked.check_free_space())
            .and_then(|()| {
                // The partition prepared now gives its memory back before the new one is
                // brought up.
                let mut here = rodeo_control::config::Machine::this_host();
                here.available_bytes = here
                    .available_bytes
                    .map(|a| a.saturating_add(before.estimate().host_bytes(&None)));
                new_checked.check_resources_on(&here).map(|_| ())
            })
            .map_err(|e| invalid(e.to_string()))?;
        // The lock on the current run is held only to look and to put the new run in: the
        // status answers while the partition is brought down and up (the caller holds
        // `commands`, so nothing else changes the current run).
        let (number, prepared, partition) = {
            let mut cur = lock(&self.current);
            let state = cur.partition.partition_state();
            if cur.thread.is_some() || state == State::Running {
                return Err(ConfigChangeError::Busy(state));
            }
            (cur.number, cur.prepared.take(), cur.partition.clone())
        };
        match prepared {
            Some(run) => run.abandon(),
            None => bring_down(partition.as_ref()),
        }
        let number = self.free_number(number);
        let old = std::mem::replace(&mut *lock(&self.config), new.clone());
        let attempt = match self.observer.reconfigure(&new.alarms, &new.monitoring) {
            Ok(()) => self.prepare_isolated(number),
            Err(e) => Err(ConfigChangeError::Failed(e.to_string())),
        };
        let error = match attempt {
            Ok(run) => {
                tracing::warn!(run = number, "configuration replaced (PUT /api/config)");
                self.put_prepared(run);
                return Ok(());
            }
            Err(e) => e,
        };
        // Back to the configuration that worked.
        *lock(&self.config) = old.clone();
        let _ = self.observer.reconfigure(&old.alarms, &old.monitoring);
        let again = match self.prepare_isolated(number) {
            Ok(run) => {
                self.put_prepared(run);
                "the previous configuration is back in effect (CONNECTED)".to_string()
            }
            Err(e) => {
                lock(&self.current).unprepared = Some(e.to_string());
                format!(
                    "and the previous configuration could not be brought back up either ({e}): \
                     the service is in NONE; fix the cause and PUT a configuration again, or \
                     `shutdown` it"
                )
            }
        };
        Err(match error {
            ConfigChangeError::Invalid(e) => invalid(format!("{e}; {again}")),
            other => ConfigChangeError::Failed(format!("{other}; {again}")),
        })
    }

    /// [`Self::prepare`] with a panic caught: a configuration whose values break the building
    /// of the partition is an invalid one (400), not the end of the request's worker. The run
    /// directory a failed attempt made is removed, so the number stays free.
    fn prepare_isolated(&self, number: u32) -> Result<Run, ConfigChangeError> {
        let attempt =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.prepare(number)));
        match attempt {
            Ok(Ok(run)) => Ok(run),
            Ok(Err(e)) => Err(ConfigChangeError::Failed(e.to_string())),
            Err(panic) => {
                let what = crate::http::panic_message(&*panic);
                tracing::error!(run = number, "building the partition panicked: {what}");
                let dir = lock(&self.output).path().join(format!("run-{number:08}"));
                if crate::output::data_files(&dir).is_empty() {
                    let _ = std::fs::remove_file(dir.join("partition.toml"));
                    let _ = std::fs::remove_dir(&dir);
                }
                Err(ConfigChangeError::Invalid(format!(
                    "the partition cannot be built with this configuration ({what}): a value \
                     is out of the range the applications take"
                )))
            }
        }
    }

    /// One look for the observer: the status and metrics of the partition now.
    fn look(&self, control: &dyn RunControl) {
        let status = control.status();
        let mut w = MetricsWriter::new();
        let partition = lock(&self.current).partition.clone();
        partition.write_metrics(&mut w);
        self.observer.tick(&status, &w.finish(), Instant::now());
    }

    /// Brings everything down: the run in progress stopped (recorded), the prepared one given
    /// up (its number stays free).
    fn shutdown(&self, by: &str) -> Result<State, TransitionError> {
        self.shut_down.store(true, Ordering::Relaxed);
        if lock(&self.current).thread.is_some() {
            self.stop(Some(&format!("shutdown by {by}")))?;
        }
        let (prepared, partition) = {
            let mut cur = lock(&self.current);
            (cur.prepared.take(), cur.partition.clone())
        };
        match prepared {
            Some(run) => run.abandon(),
            None => bring_down(partition.as_ref()),
        }
        Ok(State::None)
    }
}

/// The HTTP face of the service (the `Arc` lets `start` hand the service to the run thread).
struct ServiceControl(Arc<RunService>);

impl RunControl for ServiceControl {
    fn status(&self) -> PartitionStatus {
        let (partition, number, unprepared) = {
            let cur = lock(&self.0.current);
            let waiting = cur.thread.is_none() && cur.prepared.is_none();
            let why = cur.unprepared.clone().filter(|_| waiting);
            (cur.partition.clone(), cur.number, why)
        };
        let mut s = partition.status();
        s.run_number = number;
        if let Some(why) = unprepared {
            // The partition shown is the ended run's: none of its applications, counts or
            // rates are the run waiting to be prepared's (its dead pids and rates were shown).
            let why = format!("run {number} could not be prepared: {why}");
            s = PartitionStatus {
                error: Some(why.clone()),
                recent_errors: vec![why],
                words: s.words,
                ..PartitionStatus::empty(s.partition, State::None, number)
            };
        }
        s
    }

    fn run_number(&self) -> u32 {
        self.0.run_number()
    }

    fn command(&self, command: Command) -> Result<State, TransitionError> {
        self.command_by(command, "this process")
    }

    fn command_by(&self, command: Command, by: &str) -> Result<State, TransitionError> {
        let _guard = lock(&self.0.commands);
        match command {
            Command::Start => self.0.start_run(by, &RunWords::default()),
            Command::Stop => self.0.stop(Some(by)),
            Command::Shutdown => self.0.shutdown(by),
            other => Err(TransitionError::Illegal {
                who: "partition".into(),
                command: other,
                state: lock(&self.0.current).partition.partition_state(),
            }),
        }
    }

    fn start_with_words(
        &self,
        words: &RunWords,
        by: &str,
    ) -> Option<Result<State, TransitionError>> {
        let _guard = lock(&self.0.commands);
        Some(self.0.start_run(by, words))
    }

    fn config_toml(&self) -> String {
        lock(&self.0.config).to_toml_public()
    }

    fn write_metrics(&self, out: &mut MetricsWriter) {
        let partition = lock(&self.0.current).partition.clone();
        partition.write_metrics(out);
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

/// A run whose preparation (or giving up) takes longer than this is logged with the time:
/// the operator's `start` or `stop` waits for it.
const SLOW_PREPARE: Duration = Duration::from_secs(5);

/// `rodeo serve (user@host)`: the service, in each run's `started_by`.
fn started_by_here() -> String {
    started_by("rodeo serve")
}

/// A run of `config` with number `number` in `output`, brought up to CONNECTED (given up
/// again when that fails).
fn prepare_run(
    output: &OutputDir,
    config: PartitionConfig,
    mode: Mode,
    number: u32,
) -> Result<Run, TransitionError> {
    let mut options = RunOptions::new(mode, started_by_here());
    options.run_number = Some(number);
    // The service's observer runs the `[monitoring]` forwarder for every run.
    options.forward_samples = false;
    let began = Instant::now();
    let run = Run::new(output, config, options)
        .map_err(|e| failed(Command::Configure, crate::error_text::error_text(&e)))?;
    let made = began.elapsed();
    if let Err(e) = run.prepare() {
        run.abandon();
        return Err(e);
    }
    let took = began.elapsed();
    if took >= SLOW_PREPARE {
        tracing::warn!(
            run = number,
            "preparing the run took {} ms ({} ms of it before the applications were started)",
            took.as_millis(),
            made.as_millis()
        );
    }
    Ok(run)
}

/// Why a prepared partition is no longer whole: it is in ERROR, or one of its applications is
/// (died or fell silent while the partition waited for its start; only a running partition
/// restarts its applications). `None`: every application is there.
fn lost_application(status: &PartitionStatus) -> Option<String> {
    if status.state == State::Error {
        return Some(status.error.clone().unwrap_or_else(|| "in ERROR".into()));
    }
    status
        .apps
        .iter()
        .find(|a| a.state == State::Error)
        .map(|a| format!("{}: {}", a.name, a.error.as_deref().unwrap_or("in ERROR")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rodeo_control::run_control::AppStatus;

    fn app(name: &str, state: State, error: Option<&str>) -> AppStatus {
        AppStatus {
            name: name.into(),
            role: "dcm".into(),
            state,
            error: error.map(str::to_string),
            host: None,
            pid: None,
            heartbeat_age_ms: None,
            rate_hz: 0.0,
            restarts: 0,
        }
    }

    #[test]
    fn a_prepared_partition_with_a_dead_application_is_not_whole() {
        let status = |state, apps| PartitionStatus {
            error: (state == State::Error).then(|| "logger-1 is dead: killed".into()),
            apps,
            ..PartitionStatus::empty("p".into(), state, 3)
        };
        let whole = vec![app("dcm-1", State::Connected, None)];
        assert_eq!(lost_application(&status(State::Connected, whole)), None);
        let dcm_dead = vec![
            app("dcm-1", State::Connected, None),
            app("dcm-2", State::Error, Some("no heartbeat for 3100 ms")),
        ];
        assert_eq!(
            lost_application(&status(State::Connected, dcm_dead)).as_deref(),
            Some("dcm-2: no heartbeat for 3100 ms")
        );
        assert_eq!(
            lost_application(&status(State::Error, Vec::new())).as_deref(),
            Some("logger-1 is dead: killed")
        );
    }

    /// The run number answers at once while the current run's lock is held (a `start` that
    /// brings the prepared run up again holds it for seconds): every request above an
    /// observer's reads it before its token is checked, so with the status it waited.
    #[test]
    fn the_run_number_is_read_without_waiting_for_the_current_run() {
        let dir = tempfile::tempdir().unwrap();
        let output = OutputDir::open(dir.path(), "test").unwrap();
        let service = RunService::start(
            output,
            PartitionConfig::default(),
            Mode::Embedded,
            Box::new(|_| {}),
        )
        .unwrap();
        let control = service.control();
        let held = lock(&service.current);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || tx.send(control.run_number()).unwrap());
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        drop(held);
        reader.join().unwrap();
        assert_eq!(got, Ok(1));
        service
            .control()
            .command(Command::Shutdown)
            .expect("the service shuts down");
    }

    /// A start that brings the prepared run up again (it is given words it lacks) leaves the
    /// status answering: it waited for the whole rebuild while the start held the lock on the
    /// current run.
    #[test]
    fn the_status_answers_while_a_start_prepares_the_run_again() {
        let dir = tempfile::tempdir().unwrap();
        let output = OutputDir::open(dir.path(), "test").unwrap();
        let mut config = PartitionConfig::default();
        config.run.events = 0;
        config.run.seconds = 60.0;
        let service = RunService::start(output, config, Mode::Embedded, Box::new(|_| {})).unwrap();
        let control = service.control();
        let done = Arc::new(AtomicBool::new(false));
        let poller = {
            let (control, done) = (service.control(), done.clone());
            std::thread::spawn(move || {
                let mut longest = Duration::ZERO;
                let mut last = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    let _ = control.status();
                    longest = longest.max(last.elapsed());
                    last = Instant::now();
                }
                longest
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        let words = RunWords {
            comment: "HV scan".into(),
            ..RunWords::default()
        };
        let began = Instant::now();
        let started = control.start_with_words(&words, "test").unwrap();
        let took = began.elapsed();
        done.store(true, Ordering::Relaxed);
        let longest = poller.join().unwrap();
        assert_eq!(started, Ok(State::Running));
        assert!(
            longest < took / 2,
            "a status waited {longest:?} during a start of {took:?} (the prepared run was \
             brought up again with the words)"
        );
        control.command(Command::Stop).expect("the run stops");
        control
            .command(Command::Shutdown)
            .expect("the service shuts down");
    }
}
