//! The run-control interface: what the HTTP API, the web page and the controller see of a
//! partition or of one application, whatever runs it (threads in this process, local processes,
//! processes on other hosts).
//!
//! [`RunControl`] is implemented by the embedded partition, by each `rodeo app` process and by
//! the controller that drives processes; the HTTP server serves any of them. [`Partition`] adds
//! what a whole run needs (its end, its progress, its balance sheet), implemented by the
//! embedded partition and by the controller, and [`run_to_end`] runs either one run long.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::RunWords;
use crate::lifecycle::{Command, State, TransitionError};
use crate::metrics::AppMetrics;
use crate::prometheus::MetricsWriter;
use crate::summary::{InputStatus, RunSummary};

/// The state of one application, as the status endpoint reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppStatus {
    /// The application's name (`dcm-1`, `ros-1`, …).
    pub name: String,
    /// Its role (`supervisor`, `dcm`, `ros`, `logger`, `swrod`).
    pub role: String,
    /// Its lifecycle state.
    pub state: State,
    /// Why it is in ERROR (or the last failure), if any.
    pub error: Option<String>,
    /// The host it runs on (`None`: this process).
    pub host: Option<String>,
    /// Its process id, when it is a process.
    pub pid: Option<u32>,
    /// Milliseconds since its last heartbeat (`None`: not monitored by heartbeat).
    pub heartbeat_age_ms: Option<u64>,
    /// Its main rate now (events, requests or fragments per second, by role).
    pub rate_hz: f64,
    /// Times it was restarted after a death since the partition came up.
    #[serde(default)]
    pub restarts: u64,
}

/// The state of a partition, as `GET /api/status` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionStatus {
    /// The partition's name.
    pub partition: String,
    /// The partition's lifecycle state (the controller's).
    pub state: State,
    /// Why the partition is in ERROR, naming the application that failed.
    pub error: Option<String>,
    /// The run number (0 before the first start).
    pub run_number: u32,
    /// Seconds since the run started (0 when not running).
    pub run_seconds: f64,
    /// L1 accepts per second now.
    pub l1_rate_hz: f64,
    /// Events built (decided) per second now.
    pub event_rate_hz: f64,
    /// Events written per second now.
    pub write_rate_hz: f64,
    /// L1 accepts since the start of the run.
    pub l1_accepts: u64,
    /// Events written since the start of the run.
    pub events_written: u64,
    /// Applications restarted after a death in the current run, or in the last one between
    /// runs (reset when a run starts).
    #[serde(default)]
    pub restarts: u64,
    /// Every application.
    pub apps: Vec<AppStatus>,
    /// Recent errors, newest last (bounded).
    pub recent_errors: Vec<String>,
    /// Every readout input of every node (one per ROB), with its state, counters and live
    /// problem (docs/run-control.md, "Inputs"). Under a controller, as of each node's last
    /// heartbeat.
    #[serde(default)]
    pub inputs: Vec<InputStatus>,
    /// The run's words (comment, run type, shifter) as its configuration has them.
    #[serde(default)]
    pub words: RunWords,
}

impl PartitionStatus {
    /// The status of partition `partition` in `state` for run `run_number`, before anything
    /// happened in it: no application, count, rate, error or run words.
    pub fn empty(partition: String, state: State, run_number: u32) -> PartitionStatus {
        PartitionStatus {
            partition,
            state,
            error: None,
            run_number,
            run_seconds: 0.0,
            l1_rate_hz: 0.0,
            event_rate_hz: 0.0,
            write_rate_hz: 0.0,
            l1_accepts: 0,
            events_written: 0,
            restarts: 0,
            apps: Vec::new(),
            recent_errors: Vec::new(),
            inputs: Vec::new(),
            words: RunWords::default(),
        }
    }
}

/// Something that can be controlled and watched: a partition or one application.
///
/// Implementations are shared between the HTTP server's threads and their owner, so every
/// method takes `&self`; commands are serialised inside the implementation.
pub trait RunControl: Send + Sync {
    /// The status now.
    fn status(&self) -> PartitionStatus;

    /// The number of the run prepared or in progress, as [`RunControl::status`] has it; an
    /// implementation whose status may wait (a service bringing a run up) answers at once.
    fn run_number(&self) -> u32 {
        self.status().run_number
    }

    /// Runs a lifecycle command to its end (for `stop`: after the dataflow drained) and
    /// returns the new state, or why it was refused or failed.
    fn command(&self, command: Command) -> Result<State, TransitionError>;

    /// [`RunControl::command`] on behalf of `by` (who asked, for the record: `operator from
    /// 10.0.0.2:51234`); an implementation that keeps no record of runs ignores it.
    fn command_by(&self, command: Command, by: &str) -> Result<State, TransitionError> {
        let _ = by;
        self.command(command)
    }

    /// `start` on behalf of `by` with the run's words (comment, run type, shifter: checked
    /// by the caller with [`RunWords::check`]). `None`: this partition takes its words from
    /// its configuration only (`[run]`) and refuses them at `start`; no words is a plain
    /// `start`.
    fn start_with_words(
        &self,
        words: &RunWords,
        by: &str,
    ) -> Option<Result<State, TransitionError>> {
        words
            .is_empty()
            .then(|| self.command_by(Command::Start, by))
    }

    /// The configuration in effect, as TOML.
    fn config_toml(&self) -> String;

    /// Writes the metrics in Prometheus text format.
    fn write_metrics(&self, out: &mut MetricsWriter);

    /// Replaces the configuration of the next run with `toml` (`PUT /api/config`), after the
    /// checks of `rodeo config check`. Only a service between runs can.
    fn replace_config(&self, toml: &str) -> Result<(), ConfigChangeError> {
        let _ = toml;
        Err(ConfigChangeError::NotSupported)
    }

    /// A service's view `what` (`history`, `alarms`, `histograms`, `log`) as JSON; `None`
    /// where there is no such view.
    fn view(&self, what: &str) -> Option<serde_json::Value> {
        let _ = what;
        None
    }

    /// Acknowledges the alarm `name`.
    fn acknowledge_alarm(&self, name: &str) -> Result<(), String> {
        Err(format!(
            "no alarm named {name:?}: alarms are kept by `rodeo serve`"
        ))
    }
}

/// Why `PUT /api/config` did not replace the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigChangeError {
    /// Only `rodeo serve` replaces its configuration.
    #[error(
        "this partition cannot change its configuration (only `rodeo serve` can, between runs)"
    )]
    NotSupported,
    /// The configuration does not pass the checks (names the field).
    #[error("{0}")]
    Invalid(String),
    /// A run is in progress.
    #[error(
        "the configuration changes only between runs: the partition is {0}; stop the run first"
    )]
    Busy(State),
    /// The new configuration was accepted but the partition could not be brought up with it.
    #[error("{0}")]
    Failed(String),
}

/// A whole partition (embedded, or processes under a controller): a [`RunControl`] whose run
/// ends by itself and leaves a balance sheet.
pub trait Partition: RunControl {
    /// The partition's lifecycle state (cheaper than the whole status).
    fn partition_state(&self) -> State;

    /// Whether the run ended by itself (the supervisor reached the event count) or an
    /// application failed (the partition is then in ERROR): time to stop.
    fn run_ended(&self) -> bool;

    /// L1 accepts so far and seconds since the start of the run.
    fn progress(&self) -> (u64, f64);

    /// The balance sheet, once disconnected (taken: a second call returns `None`).
    fn take_summary(&self) -> Option<RunSummary>;

    /// The failure that last put the partition in ERROR, if any.
    fn last_failure(&self) -> Option<TransitionError>;

    /// The configured length of a run in seconds (0: until the event count).
    fn run_limit_seconds(&self) -> f64;

    /// Called by [`run_to_end`] while the run runs (every poll): the partition's own upkeep,
    /// e.g. the controller restarting a dead application into the run. Default: nothing.
    fn maintain(&self) {}

    /// The run is to stop (an interrupt came): upkeep that waits ([`Partition::maintain`]: a
    /// restart waiting for its process's hello) gives up, so the stop is not held behind it.
    /// Never waits. Default: nothing.
    fn stop_wanted(&self) {}

    /// Every application's counters as it last reported them (its heartbeats under a
    /// controller, its live counters in this process): what a failed run's balance sheet is
    /// made of. Default: none.
    fn last_metrics(&self) -> Vec<(String, AppMetrics)> {
        Vec::new()
    }
}

/// How often [`run_to_end`] looks at the partition, and how often it calls its tick.
const POLL: Duration = Duration::from_millis(20);
const TICK: Duration = Duration::from_millis(200);
/// A run without any L1 accept this long after its start says so on stderr (then again after
/// twice as long, and so on): an external trigger that never connects otherwise kept a run
/// waiting in silence for as long as nobody looked.
const FIRST_SILENCE_WARNING: Duration = Duration::from_secs(10);

/// A command refused because the partition went to ERROR between two commands (an
/// application died meanwhile), as that failure, which names the application: it read
/// "connect refused: partition is ERROR, and connect is not legal there" (a QA pass). Any
/// other error as it is.
pub fn cause_of_refusal(p: &dyn Partition, e: TransitionError) -> TransitionError {
    match e {
        TransitionError::Illegal {
            state: State::Error,
            ..
        } => p.last_failure().unwrap_or(e),
        e => e,
    }
}

/// Brings `p` up to RUNNING (from whatever state it is in: a service keeps its partition
/// CONNECTED between runs), runs it until the event count, the configured seconds, an
/// application failure, `quit()` or a `stop` from elsewhere (HTTP), then down to NONE, and
/// returns the balance sheet. `tick` gets the L1 accepts so far and the seconds since start,
/// about every 200 ms and once at the end. A failure at any step brings everything down
/// (`shutdown`) and returns the error that names the application.
pub fn run_to_end(
    p: &dyn Partition,
    quit: &dyn Fn() -> bool,
    mut tick: impl FnMut(u64, f64),
) -> Result<RunSummary, TransitionError> {
    let up = Command::path(p.partition_state(), State::Running).unwrap_or_else(|| {
        vec![
            Command::Initialize,
            Command::Configure,
            Command::Connect,
            Command::Start,
        ]
    });
    let mut not_started = false;
    for c in up {
        // Interrupted while the partition came up: it goes down without starting (a SIGTERM
        // during a minute-long connect started the run anyway, took 1,920 accepts and ended
        // it, a QA pass); its sheet says so.
        if c == Command::Start && quit() {
            tracing::warn!("interrupted before the start: the run is not started");
            not_started = true;
            break;
        }
        if let Err(e) = p.command(c) {
            let e = cause_of_refusal(p, e);
            let _ = p.command(Command::Shutdown);
            return Err(e);
        }
    }
    let limit = p.run_limit_seconds();
    let mut last_tick = Instant::now();
    let started = last_tick;
    let mut silence_warning = FIRST_SILENCE_WARNING;
    while p.partition_state() == State::Running {
        std::thread::sleep(POLL);
        p.maintain();
        let (l1, seconds) = p.progress();
        if last_tick.elapsed() >= TICK {
            tick(l1, seconds);
            last_tick = Instant::now();
        }
        if l1 == 0 && started.elapsed() >= silence_warning {
            tracing::warn!(
                "no L1 accept {} s after the start: is the trigger sending (an external unit \
                 connected, the RoIB's or the readout's inputs delivering)? The run waits for its \
                 events; Ctrl-C or `rodeo ctl stop` ends it",
                silence_warning.as_secs()
            );
            silence_warning = silence_warning.saturating_mul(2);
        }
        if (limit > 0.0 && seconds >= limit) || p.run_ended() || quit() {
            break;
        }
    }
    // Down, whoever drives: a stop from HTTP may be under way (it holds the command lock) or
    // done, so each step starts from the state found then.
    loop {
        let next = match p.partition_state() {
            State::None => break,
            State::Error => {
                let e = p.last_failure().unwrap_or_else(|| in_error(p));
                // A death after `disconnect` assembled the balance sheet (every summary in)
                // takes nothing from it: the run's counts stand, checked as any run's, and the
                // death is said (a ros-1 killed 4.15 s into a 4 s run failed a balanced run).
                let late = matches!(
                    &e,
                    TransitionError::Failed { command, .. }
                        if matches!(command, Command::Disconnect | Command::Unconfigure)
                );
                let summary = if late { p.take_summary() } else { None };
                let _ = p.command(Command::Shutdown);
                return match summary {
                    Some(s) => {
                        tracing::warn!(
                            "after the run's balance sheet was complete: {e} (the run's counts \
                             stand)"
                        );
                        Ok(s)
                    }
                    None => Err(e),
                };
            }
            s => Command::path(s, State::None)
                .and_then(|p| p.first().copied())
                .unwrap_or(Command::Shutdown),
        };
        match p.command(next) {
            Ok(_) | Err(TransitionError::Illegal { .. }) => {}
            Err(e) => {
                let _ = p.command(Command::Shutdown);
                return Err(e);
            }
        }
    }
    let (l1, seconds) = p.progress();
    tick(l1, seconds);
    if not_started {
        // No run, so no balance sheet (an embedded partition makes none without a run): the
        // caller's sheet of a run that failed says why, in every mode alike.
        let _ = p.take_summary();
        return Err(TransitionError::Failed {
            who: "partition".into(),
            command: Command::Start,
            from: State::Connected,
            reason: "interrupted before the start: the run was not started (its partition \
                     taken down in order)"
                .into(),
        });
    }
    p.take_summary().ok_or_else(|| TransitionError::Failed {
        who: "partition".into(),
        command: Command::Disconnect,
        from: State::Connected,
        reason: "no balance sheet: the run was not disconnected".into(),
    })
}

/// Why `p` is in ERROR when it recorded no failure of its own: the applications in ERROR
/// with their reasons, and the partition's recent errors.
fn in_error(p: &dyn Partition) -> TransitionError {
    let status = p.status();
    let mut why: Vec<String> = status
        .apps
        .iter()
        .filter(|a| a.state == State::Error || a.error.is_some())
        .map(|a| format!("{}: {}", a.name, a.error.as_deref().unwrap_or("in ERROR")))
        .collect();
    if why.is_empty() {
        why.extend(status.error.clone());
    }
    if why.is_empty() {
        why.extend(status.recent_errors.last().cloned());
    }
    let who = status
        .apps
        .iter()
        .find(|a| a.state == State::Error || a.error.is_some())
        .map_or_else(|| "partition".to_string(), |a| a.name.clone());
    TransitionError::Failed {
        who,
        command: Command::Stop,
        from: State::Error,
        reason: if why.is_empty() {
            "the partition is in ERROR and no application said why".into()
        } else {
            why.join("; ")
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A partition that runs one short run and whose application dies at `dies_at`: the
    /// partition goes to ERROR after that command, which itself completed.
    struct DiesAt {
        dies_at: Command,
        state: Mutex<State>,
        summary: Mutex<Option<RunSummary>>,
        failure: Mutex<Option<TransitionError>>,
        /// Every command it was sent, in order.
        sent: Mutex<Vec<Command>>,
    }

    impl DiesAt {
        fn new(dies_at: Command) -> DiesAt {
            DiesAt {
                dies_at,
                state: Mutex::new(State::None),
                summary: Mutex::new(None),
                failure: Mutex::new(None),
                sent: Mutex::new(Vec::new()),
            }
        }
    }

    impl RunControl for DiesAt {
        fn status(&self) -> PartitionStatus {
            unreachable!("run_to_end reads the status only without a recorded failure")
        }
        fn command(&self, command: Command) -> Result<State, TransitionError> {
            self.sent.lock().unwrap().push(command);
            let mut state = self.state.lock().unwrap();
            let next = match command {
                Command::Shutdown => State::None,
                c => match c.target(*state) {
                    Some(next) => next,
                    None => {
                        return Err(TransitionError::Illegal {
                            who: "partition".into(),
                            command: c,
                            state: *state,
                        })
                    }
                },
            };
            if command == Command::Disconnect {
                *self.summary.lock().unwrap() = Some(RunSummary {
                    l1_accepts: 10,
                    ..RunSummary::default()
                });
            }
            *state = if command == self.dies_at {
                *self.failure.lock().unwrap() = Some(TransitionError::Failed {
                    who: "partition".into(),
                    command,
                    from: *state,
                    reason: "ros-1 is dead".into(),
                });
                State::Error
            } else {
                next
            };
            Ok(*state)
        }
        fn config_toml(&self) -> String {
            String::new()
        }
        fn write_metrics(&self, _out: &mut MetricsWriter) {}
    }

    impl Partition for DiesAt {
        fn partition_state(&self) -> State {
            *self.state.lock().unwrap()
        }
        fn run_ended(&self) -> bool {
            true
        }
        fn progress(&self) -> (u64, f64) {
            (10, 0.1)
        }
        fn take_summary(&self) -> Option<RunSummary> {
            self.summary.lock().unwrap().take()
        }
        fn last_failure(&self) -> Option<TransitionError> {
            self.failure.lock().unwrap().clone()
        }
        fn run_limit_seconds(&self) -> f64 {
            0.0
        }
    }

    /// A death after `disconnect` assembled the sheet leaves the run its sheet (checked as
    /// any); one before (here at `stop`) fails the run, naming the application.
    #[test]
    fn a_death_after_the_sheet_is_complete_does_not_fail_the_run() {
        for late in [Command::Disconnect, Command::Unconfigure] {
            let p = DiesAt::new(late);
            let s = run_to_end(&p, &|| false, |_, _| {}).unwrap();
            assert_eq!(s.l1_accepts, 10, "{late}");
            assert_eq!(p.partition_state(), State::None, "{late}");
        }
        let p = DiesAt::new(Command::Stop);
        let e = run_to_end(&p, &|| false, |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("ros-1 is dead"), "{e}");
        assert_eq!(p.partition_state(), State::None);
    }

    /// An application dead between two commands of the bring-up (the partition in ERROR
    /// when the next is sent): the error is the death, naming the application, not the
    /// refusal of the next command ("connect refused: partition is ERROR").
    #[test]
    fn a_death_during_the_bring_up_is_the_error_not_the_next_refusal() {
        let p = DiesAt::new(Command::Configure);
        let e = run_to_end(&p, &|| false, |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("ros-1 is dead"), "{e}");
        assert!(!e.to_string().contains("refused"), "{e}");
    }

    /// Interrupted while it comes up (the quit asked before the start is true): the partition
    /// is taken down from CONNECTED without a start, and the run fails saying so.
    #[test]
    fn an_interrupt_before_the_start_takes_the_partition_down_unstarted() {
        // Dies at a stop, which a run never started is not sent.
        let p = DiesAt::new(Command::Stop);
        let e = run_to_end(&p, &|| true, |_, _| {}).unwrap_err();
        assert!(
            e.to_string()
                .contains("interrupted before the start: the run was not started"),
            "{e}"
        );
        let sent = p.sent.lock().unwrap().clone();
        assert!(!sent.contains(&Command::Start), "{sent:?}");
        assert_eq!(
            sent[..3],
            [Command::Initialize, Command::Configure, Command::Connect]
        );
        assert!(sent.contains(&Command::Disconnect), "{sent:?}");
        assert_eq!(p.partition_state(), State::None);
    }
}
