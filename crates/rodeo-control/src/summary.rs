//! The end of a run: each application's typed summary ([`AppSummary`]), and the run's balance
//! sheet ([`RunSummary`]) assembled from them by [`RunSummary::assemble`], the same way for the
//! embedded partition and for a partition of processes (whose summaries come over the control
//! channel as JSON of these types).
//!
//! # The balance sheet (protocol rule 6)
//!
//! [`RunSummary::balanced`] checks the counts: every L1 accept decided once (accepted +
//! rejected + forced = L1 accepts), every readout node told to clear every event, the loggers
//! wrote exactly the accepted and forced events. A mismatch is listed in
//! [`RunSummary::problems`] and is an error, never a warning.

use std::path::PathBuf;

use rodeo_dataflow::dcm::DcmSummary;
use rodeo_dataflow::logger::{CheckedFile, LoggerSummary};
use rodeo_dataflow::supervisor::SupervisorSummary;
use serde::{Deserialize, Serialize};

pub use rodeo_ros::inputs::{InputState, InputStatus};

/// What one readout node reports at the end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// Node name.
    pub name: String,
    /// Data requests answered.
    pub requests: u64,
    /// L1IDs cleared (received in clears).
    pub cleared: u64,
    /// Gaps in the clear sequence.
    pub clear_gaps: u64,
    /// Fragments stored from the input.
    pub stored: u64,
    /// Fragments still stored at the end (not yet cleared: the emulated inputs run ahead).
    pub stored_now: u64,
    /// With a detector's input (network, link files: not an emulator that runs ahead of the
    /// L1), of `stored_now`, the fragments at or before the L1 front (the newest L1ID a
    /// request or clear named): passed over by the L1, e.g. missing on another input.
    /// Early-clear markers are not counted here.
    #[serde(default)]
    pub stored_behind_l1: u64,
    /// As `stored_behind_l1`, the fragments after the L1 front: received after the last
    /// accept (with a stream cut by the stop, its last events).
    #[serde(default)]
    pub stored_ahead_of_l1: u64,
    /// Of `stored_ahead_of_l1`, the fragments of L1IDs some channel of the node does not
    /// hold (never to be complete once every input has ended).
    #[serde(default)]
    pub stored_ahead_incomplete: u64,
    /// With a detector's input, fragments its receivers (players) counted that the store
    /// never took in, nor dropped as a duplicate or as cleared before they came: still in the
    /// input's queues when the node stopped (it reads them in at its stop, for up to 2 s; a
    /// full store refuses them). When the input's checks dropped words (a damaged unit is then
    /// not one fragment), the units the links still held, as their cards counted them; 0 for
    /// other inputs.
    #[serde(default)]
    pub received_not_stored: u64,
    /// Fragments the store dropped as duplicates of an L1ID its channel held (a detector
    /// sending an L1ID twice: the first is kept). With `store_dropped_after_clear` and
    /// `received_not_stored` they close a detector's inputs: received = `stored` + these three
    /// (unless the checks dropped words).
    #[serde(default)]
    pub store_duplicates: u64,
    /// Fragments the store dropped because their L1ID had been cleared before they came
    /// (late fragments).
    #[serde(default)]
    pub store_dropped_after_clear: u64,
    /// Fragments the SW ROD fragment builders built (`[ros] input = "swrod"`; 0 otherwise).
    pub swrod_built: u64,
    /// The SW ROD input's first error at the stop (a builder that failed), if any: also a
    /// problem of the run ([`RunSummary::problems`]).
    pub swrod_error: Option<String>,
    /// Errors the input's checks found in the link data, every kind summed (S-LINK framing,
    /// markers, CRC, sequence, garbage...; units of the wrong size dropped by a network
    /// receiver). Corrupt input does not unbalance a run (its events are built without the
    /// fragment, flagged), but the balance sheet says it happened.
    #[serde(default)]
    pub input_errors: u64,
    /// Words of link data dropped by those checks (garbage, short fragments).
    #[serde(default)]
    pub input_dropped_words: u64,
    /// Of `input_errors`, fragments whose ROD source identifier was not their input's ROB (a
    /// detector's cables swapped or mislabelled; `SlinkCounters::source_mismatches`).
    #[serde(default)]
    pub input_source_mismatches: u64,
    /// Restarted into the run (set by the controller): it saw the clears from its rejoin on
    /// only, so its clear count and sequence are not checked against the run's.
    #[serde(default)]
    pub restarted: bool,
    /// Died during the run's stop, too late to be restarted (set by the controller): its
    /// counts are its last heartbeat's and its clears are not checked against the run's (the
    /// events are counted by the supervisor, the DCMs and the loggers).
    #[serde(default)]
    pub died_at_stop: bool,
    /// Every input of the node (one per ROB) at the end: state, counters, and the problem it
    /// was for the run, if any (`problem`: never delivered, lost, silent longer than
    /// `[ros] input_silence_seconds`, closed before the run's end without being its end;
    /// docs/run-control.md, "Inputs"). Empty in summaries of older versions.
    #[serde(default)]
    pub inputs: Vec<InputStatus>,
    /// What its earlier lives in the run counted, when it was restarted into it (set by the
    /// controller): the counts above are its last life's only.
    #[serde(default)]
    pub earlier_lives: Option<EarlierLives>,
}

/// What the earlier lives of a readout node restarted into the run counted, each to its last
/// heartbeat before it died (what it did after that heartbeat is known to nobody), summed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EarlierLives {
    /// Lives that died and were followed by a restart.
    pub lives: u64,
    /// Of `lives`, those that died before any heartbeat (their counts are not in the sums).
    pub unheard: u64,
    /// Data requests they answered.
    pub requests: u64,
    /// L1IDs they cleared.
    pub cleared: u64,
    /// Fragments their inputs delivered to their stores.
    pub stored: u64,
    /// Missing fragments they answered FRAGMENT_LOST.
    pub lost_fragments: u64,
}

/// What an application hands back at the end of its part of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum AppSummary {
    /// The supervisor's (at `stop`): the counts that must balance.
    Supervisor(SupervisorSummary),
    /// A DCM's (at `disconnect`).
    Dcm(DcmSummary),
    /// A logger's (at `disconnect`): events, bytes and files written.
    Logger(LoggerSummary),
    /// A readout node's (at `disconnect`).
    Ros(NodeSummary),
}

/// The end of a run: counts, balance, files.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Run number.
    pub run: u32,
    /// L1 accepts.
    pub l1_accepts: u64,
    /// Accepted by the trigger.
    pub accepted: u64,
    /// Rejected.
    pub rejected: u64,
    /// Forced accepts.
    pub forced_accepts: u64,
    /// Events written by the loggers.
    pub events_written: u64,
    /// Duplicates dropped by the loggers.
    pub duplicates: u64,
    /// Bytes of event records written.
    pub bytes_written: u64,
    /// Events in files the loggers cross-checked after closing them (record checksums
    /// computed on the way, end record and size read back: `LoggerSummary::events_verified`).
    pub events_verified: u64,
    /// Events built without some fragments.
    pub partial_events: u64,
    /// Bytes of built events the DCMs compressed, and the bytes they became (0: compression
    /// off).
    pub compress_in_bytes: u64,
    /// Bytes of the compressed events.
    pub compress_out_bytes: u64,
    /// Seconds of DCM thread time spent compressing, summed over the DCMs.
    pub compress_seconds: f64,
    /// Per readout node.
    pub nodes: Vec<NodeSummary>,
    /// Seconds from the first L1 accept to the supervisor's end.
    pub seconds: f64,
    /// L1 accepts per second, on the supervisor's clock from the first L1 accept to the last
    /// (`(l1_accepts - 1) / l1_seconds`); the run's `seconds` when the supervisor did not
    /// measure it (fewer than two accepts).
    pub l1_rate_hz: f64,
    /// Seconds from the first L1 accept to the last, on the supervisor's clock (0: unknown).
    pub l1_seconds: f64,
    /// Bytes of event records written per second: each logger's bytes over its own first to
    /// last write, summed over the loggers (they write at the same time).
    pub write_bytes_per_s: f64,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// The files of `files` their loggers cross-checked after closing them, with size and
    /// whole-file Adler-32 summed as written (`LoggerSummary::checked_files`, `file` an index
    /// into `files`).
    pub checked_files: Vec<CheckedFile>,
    /// The output directory of the run.
    pub output: PathBuf,
    /// Every imbalance found (empty: balanced).
    pub problems: Vec<String>,
    /// Applications the controller restarted into the run (process mode).
    pub restarts: u64,
    /// Their names (each once, however often it was restarted).
    pub restarted_apps: Vec<String>,
    /// Events in the DCMs' slots when they stopped (left to the supervisor to reassign; a
    /// run that lost its supervisor leaves them undecided).
    pub unfinished: u64,
    /// Events the loggers kept from files a previous life left open (included in
    /// `events_written`).
    pub recovered_events: u64,
    /// Events the DCMs sent to a logger again for want of an acknowledgement.
    pub events_resent: u64,
    /// Why the run ended early, if something ended it (the supervisor's death).
    pub ended_by: Option<String>,
    /// DCMs that died during the run (process mode) and were not replaced, each with why: the
    /// supervisor reassigned their events as forced accepts and the run went on with the
    /// others. Not an imbalance, but a loss the verdict counts (`dcm_lost`).
    pub dcms_lost: Vec<(String, String)>,
    /// Applications that ended without handing back their summary (their counts are not in
    /// this one: the balance sheet takes the supervisor's from its last heartbeat and what
    /// was written from the files).
    pub missing: Vec<String>,
    /// L1 accepts the emulator's schedule could not send (the partition could not take the
    /// configured rate).
    pub l1_missed: u64,
    /// Events whose ROBs the loggers counted against the partition's.
    pub events_rob_checked: u64,
    /// Of those, written with the partial flag.
    pub events_partial_written: u64,
    /// Of those, short of ROBs without the partial flag (not `complete`).
    pub events_short_unflagged: u64,
    /// Events the DCMs decided (accepted, forced, rejected), by their own count.
    pub dcm_decided: u64,
    /// Of those, accepted or forced and acknowledged by a logger.
    pub dcm_logged: u64,
}

impl RunSummary {
    /// Whether the run balanced (rule 6).
    pub fn balanced(&self) -> bool {
        self.problems.is_empty()
    }

    /// The balance sheet of run `run` (written to `output`, `seconds` long) from the
    /// applications' summaries, each named; `expected` names the applications that must have
    /// handed one back (a logger or readout node without one is a problem; a DCM that died is
    /// not: its events were reassigned). The problems of rule 6 are filled in.
    pub fn assemble(
        run: u32,
        output: PathBuf,
        seconds: f64,
        summaries: &[(String, AppSummary)],
        missing: &[String],
    ) -> RunSummary {
        let mut s = RunSummary {
            run,
            seconds,
            output,
            ..RunSummary::default()
        };
        let mut undecided = 0;
        let mut have_supervisor = false;
        let mut l1_span_ns = 0u64;
        for (name, summary) in summaries {
            match summary {
                AppSummary::Supervisor(sup) => {
                    have_supervisor = true;
                    s.l1_accepts = sup.l1_accepts;
                    s.accepted = sup.accepted;
                    s.rejected = sup.rejected;
                    s.forced_accepts = sup.forced_accepts;
                    undecided = sup.undecided;
                    l1_span_ns = sup.l1_span_ns;
                    s.l1_missed = sup.l1_missed;
                }
                AppSummary::Dcm(d) => {
                    s.partial_events += d.partial;
                    s.unfinished += d.unfinished;
                    s.dcm_decided += d.accepted + d.forced + d.rejected;
                    s.dcm_logged += d.accepted + d.forced;
                    s.events_resent += d.events_resent;
                    s.compress_in_bytes += d.compress_in_bytes;
                    s.compress_out_bytes += d.compress_out_bytes;
                    s.compress_seconds += d.compress_ns as f64 / 1e9;
                }
                AppSummary::Logger(l) => {
                    s.events_written += l.events_written;
                    s.duplicates += l.duplicates;
                    s.bytes_written += l.bytes_written;
                    s.events_verified += l.events_verified;
                    s.recovered_events += l.recovered_events;
                    s.events_rob_checked += l.events_rob_checked;
                    s.events_partial_written += l.events_partial;
                    s.events_short_unflagged += l.events_short_unflagged;
                    s.problems.extend(l.verify_problems.iter().cloned());
                    if let Some(why) = &l.disk_full {
                        s.problems.push(format!(
                            "{why} ({} event messages refused)",
                            l.events_refused
                        ));
                    }
                    if l.write_span_ns > 0 {
                        s.write_bytes_per_s +=
                            l.bytes_written as f64 / (l.write_span_ns as f64 / 1e9);
                    }
                    // Indices into this logger's files become indices into the run's.
                    let first = s.files.len();
                    s.checked_files.extend(
                        l.checked_files
                            .iter()
                            .filter(|c| c.file < l.files.len())
                            .map(|c| CheckedFile {
                                file: first + c.file,
                                ..c.clone()
                            }),
                    );
                    s.files.extend(l.files.iter().cloned());
                }
                AppSummary::Ros(n) => {
                    let mut n = n.clone();
                    if n.name.is_empty() {
                        n.name = name.clone();
                    }
                    s.nodes.push(n);
                }
            }
        }
        s.l1_seconds = l1_span_ns as f64 / 1e9;
        s.l1_rate_hz = if l1_span_ns > 0 && s.l1_accepts >= 2 {
            (s.l1_accepts - 1) as f64 / s.l1_seconds
        } else {
            s.l1_accepts as f64 / seconds.max(1e-9)
        };
        if !have_supervisor {
            s.problems
                .push("the supervisor ended without its summary".to_string());
            s.missing.push("supervisor".to_string());
        }
        for name in missing {
            s.problems.push(format!("{name} ended without its summary"));
            s.missing.push(name.clone());
        }
        check_balance(&mut s, undecided);
        s
    }
}

/// Fills [`RunSummary::problems`] with every imbalance of rule 6.
pub fn check_balance(s: &mut RunSummary, undecided: u64) {
    let decided = s.accepted + s.rejected + s.forced_accepts;
    if undecided > 0 {
        s.problems.push(format!(
            "{undecided} events were still undecided when the supervisor stopped"
        ));
    }
    if decided != s.l1_accepts {
        s.problems.push(format!(
            "L1 accepts {} != accepted {} + rejected {} + forced {} = {decided}",
            s.l1_accepts, s.accepted, s.rejected, s.forced_accepts
        ));
    }
    if s.events_written != s.accepted + s.forced_accepts {
        s.problems.push(format!(
            "events written {} != accepted {} + forced {}",
            s.events_written, s.accepted, s.forced_accepts
        ));
    }
    for n in &s.nodes {
        if n.restarted || n.died_at_stop {
            if let Some(e) = &n.swrod_error {
                s.problems
                    .push(format!("{}: SW ROD fragment builder failed: {e}", n.name));
            }
            continue;
        }
        if n.cleared != s.l1_accepts {
            s.problems.push(format!(
                "{} received clears for {} events, expected {}",
                n.name, n.cleared, s.l1_accepts
            ));
        }
        if let Some(e) = &n.swrod_error {
            s.problems
                .push(format!("{}: SW ROD fragment builder failed: {e}", n.name));
        }
        if n.clear_gaps != 0 {
            s.problems.push(format!(
                "{} saw {} gaps in the clear sequence",
                n.name, n.clear_gaps
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn balanced_summary() -> RunSummary {
        RunSummary {
            l1_accepts: 10,
            accepted: 4,
            rejected: 6,
            events_written: 4,
            nodes: vec![NodeSummary {
                name: "ros-1".into(),
                cleared: 10,
                ..NodeSummary::default()
            }],
            ..RunSummary::default()
        }
    }

    #[test]
    fn a_restarted_node_is_not_held_to_the_clears_it_could_not_see() {
        let mut s = balanced_summary();
        s.nodes[0].cleared = 4;
        s.nodes[0].clear_gaps = 1;
        check_balance(&mut s, 0);
        assert_eq!(s.problems.len(), 2, "{:?}", s.problems);
        let mut s = balanced_summary();
        s.nodes[0].cleared = 4;
        s.nodes[0].clear_gaps = 1;
        s.nodes[0].restarted = true;
        check_balance(&mut s, 0);
        assert!(s.balanced(), "{:?}", s.problems);
    }

    #[test]
    fn a_builder_error_at_the_stop_is_a_problem_of_the_run() {
        let mut s = balanced_summary();
        check_balance(&mut s, 0);
        assert!(s.balanced(), "{:?}", s.problems);

        let mut s = balanced_summary();
        s.nodes[0].swrod_error = Some("builder 2 panicked".into());
        check_balance(&mut s, 0);
        assert!(!s.balanced());
        assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
        assert!(
            s.problems[0].contains("ros-1") && s.problems[0].contains("builder 2 panicked"),
            "{:?}",
            s.problems
        );
    }

    #[test]
    fn summaries_assemble_into_the_balance_sheet_and_travel_as_json() {
        let summaries = vec![
            (
                "supervisor".to_string(),
                AppSummary::Supervisor(SupervisorSummary {
                    l1_accepts: 10,
                    accepted: 3,
                    rejected: 6,
                    forced_accepts: 1,
                    ..SupervisorSummary::default()
                }),
            ),
            (
                "dcm-1".to_string(),
                AppSummary::Dcm(DcmSummary {
                    partial: 2,
                    ..DcmSummary::default()
                }),
            ),
            (
                "logger-1".to_string(),
                AppSummary::Logger(LoggerSummary {
                    events_written: 4,
                    files: vec![PathBuf::from("a.data")],
                    ..LoggerSummary::default()
                }),
            ),
            (
                "logger-2".to_string(),
                AppSummary::Logger(LoggerSummary {
                    files: vec![PathBuf::from("b.data"), PathBuf::from("c.data")],
                    // Its second file vouched for; an index past its files is not taken.
                    checked_files: [1, 2]
                        .map(|file| CheckedFile {
                            file,
                            size_bytes: 100,
                            adler32: 5,
                            events: 0,
                        })
                        .to_vec(),
                    ..LoggerSummary::default()
                }),
            ),
            (
                "ros-1".to_string(),
                AppSummary::Ros(NodeSummary {
                    cleared: 10,
                    ..NodeSummary::default()
                }),
            ),
        ];
        for (_, a) in &summaries {
            let text = serde_json::to_string(a).unwrap();
            assert_eq!(&serde_json::from_str::<AppSummary>(&text).unwrap(), a);
        }
        let s = RunSummary::assemble(7, PathBuf::from("out"), 2.0, &summaries, &[]);
        assert!(s.balanced(), "{:?}", s.problems);
        assert_eq!((s.run, s.l1_accepts, s.partial_events), (7, 10, 2));
        assert_eq!(s.nodes[0].name, "ros-1");
        assert_eq!(s.files, ["a.data", "b.data", "c.data"].map(PathBuf::from));
        // logger-2's second file is the run's third.
        let vouched: Vec<usize> = s.checked_files.iter().map(|c| c.file).collect();
        assert_eq!(vouched, vec![2]);
        assert!((s.l1_rate_hz - 5.0).abs() < 1e-9);

        // With the supervisor's and the logger's own spans, the rates are theirs.
        let mut timed = summaries.clone();
        if let AppSummary::Supervisor(sup) = &mut timed[0].1 {
            sup.l1_span_ns = 3_000_000_000;
        }
        if let AppSummary::Logger(l) = &mut timed[2].1 {
            l.bytes_written = 8_000;
            l.write_span_ns = 2_000_000_000;
        }
        let s = RunSummary::assemble(7, PathBuf::from("out"), 2.0, &timed, &[]);
        assert!((s.l1_rate_hz - 3.0).abs() < 1e-9, "{}", s.l1_rate_hz);
        assert!((s.l1_seconds - 3.0).abs() < 1e-9);
        assert!((s.write_bytes_per_s - 4_000.0).abs() < 1e-6);

        let s = RunSummary::assemble(
            7,
            PathBuf::new(),
            1.0,
            &summaries[1..],
            &["logger-2".into()],
        );
        assert!(
            s.problems.iter().any(|p| p.contains("supervisor")),
            "{:?}",
            s.problems
        );
        assert!(
            s.problems.iter().any(|p| p.contains("logger-2")),
            "{:?}",
            s.problems
        );
    }
}
