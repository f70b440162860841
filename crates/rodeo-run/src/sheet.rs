//! The run's balance sheet as it is kept: one shape ([`RunSheet`]) for every way a run ends.
//!
//! A run that ended in order has its counts from the applications' summaries
//! ([`RunSheet::from_summary`]); a run that failed ([`RunSheet::failed`]) or whose process died
//! before recording it ([`RunSheet::crashed`], found at a later start) has the counts its files
//! prove (events and bytes in them) and `null` for what nobody counted; a run found later with
//! its `summary.json` is read back into the same shape ([`RunSheet::from_json`]). So
//! `summary.json`, `rodeo run --json`, the run database's `summary_json` and `GET
//! /api/runs/N`'s `summary` have the same keys whatever happened to the run.
//!
//! Every sheet carries its [`Verdict`] and the [`Problem`]s behind it ([`crate::verdict`]).

use std::path::PathBuf;

use rodeo_control::metrics::AppMetrics;
use rodeo_control::summary::RunSummary;
use rodeo_files::verify::check_file;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rundb::FileRecord;
use crate::verdict::{judge, Problem, ProblemKind, Verdict};

/// How a run ended, as recorded: its verdict, or `crashed` for a run whose process died
/// before recording it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Verdict ok.
    Ok,
    /// Verdict degraded.
    Degraded,
    /// Verdict failed.
    #[default]
    Failed,
    /// Its process died before recording it (found at a later start; verdict failed).
    Crashed,
}

impl RunStatus {
    /// The word kept in the run database's `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Degraded => "degraded",
            RunStatus::Failed => "failed",
            RunStatus::Crashed => "crashed",
        }
    }

    /// The status of a run that ended with `verdict`.
    pub fn of(verdict: Verdict) -> RunStatus {
        match verdict {
            Verdict::Ok => RunStatus::Ok,
            Verdict::Degraded => RunStatus::Degraded,
            Verdict::Failed => RunStatus::Failed,
        }
    }
}

/// One readout node's lines of the balance sheet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct NodeSheet {
    /// The node's name (`ros-1`).
    pub name: String,
    /// Data requests it answered.
    pub requests: u64,
    /// Events it cleared.
    pub cleared: u64,
    /// Gaps in its clears.
    pub clear_gaps: u64,
    /// Fragments it stored.
    pub stored: u64,
    /// Fragments its SW ROD input built.
    pub swrod_built: u64,
    /// Why its SW ROD input failed, if it did.
    pub swrod_error: Option<String>,
    /// Link errors its inputs found.
    pub input_errors: u64,
    /// Words its inputs dropped.
    pub input_dropped_words: u64,
    /// Of `input_errors`, fragments of another source than their input's ROB (cables swapped?).
    pub input_source_mismatches: u64,
    /// Fragments it received from the detector (network inputs, link files) that are in no
    /// event built and should have been (passed over by the L1, or after the last accept,
    /// every input ended, with an L1ID some channel lacks: [`crate::unbuilt`]); 0 for
    /// emulated inputs and replays, which run ahead of the L1.
    pub unbuilt_fragments: u64,
    /// Fragments its inputs counted as received that never reached the store (still queued
    /// when it stopped, the store full): in `unbuilt_fragments` when lost, in
    /// `unbuilt_cut_by_stop` when every input of the run still flowed ([`crate::unbuilt`]).
    pub received_not_stored: u64,
    /// Fragments its store dropped as duplicates of an L1ID it held (a detector sending an
    /// L1ID twice: the first kept). A detector's inputs close: the fragments they received =
    /// `stored` + `store_duplicates` + `store_dropped_after_clear` + `received_not_stored`
    /// (when no words were dropped).
    pub store_duplicates: u64,
    /// Fragments its store dropped because their L1ID was cleared before they came.
    pub store_dropped_after_clear: u64,
    /// Fragments it received from the detector after the last L1 accept whose events the
    /// run's end cut (a stream still flowing, or L1IDs every channel holds): said on the
    /// sheet, not a problem ([`crate::unbuilt`]).
    pub unbuilt_cut_by_stop: u64,
    /// Whether it was restarted into the run.
    pub restarted: bool,
    /// Whether it died during the run's stop, too late to be restarted (its counts are its
    /// last heartbeat's).
    #[serde(default)]
    pub died_at_stop: bool,
    /// Its inputs at the end: state, counters, problem (rodeo_control's `NodeSummary::inputs`).
    pub inputs: Vec<rodeo_control::summary::InputStatus>,
    /// Restarted into the run: what its earlier lives counted, each to its last heartbeat
    /// (the counts above are its last life's).
    pub earlier_lives: Option<rodeo_control::summary::EarlierLives>,
}

/// The balance sheet of one run, in the one shape every record of a run has (module docs).
/// Counts are `None` (`null` in JSON) where nobody could count them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct RunSheet {
    /// The run number.
    pub run_number: u32,
    /// The run directory.
    pub directory: PathBuf,
    /// How the run ended.
    pub status: RunStatus,
    /// The verdict: ok, degraded or failed ([`crate::verdict`]).
    pub verdict: Verdict,
    /// L1 accepts.
    pub l1_accepts: Option<u64>,
    /// Events the trigger accepted.
    pub accepted: Option<u64>,
    /// Events the trigger rejected.
    pub rejected: Option<u64>,
    /// Events accepted without a decision (timeouts, dead DCMs).
    pub forced_accepts: Option<u64>,
    /// Events written to the files.
    pub events_written: Option<u64>,
    /// Events found intact in the files (by the loggers' check, or by reading them back).
    pub events_verified: Option<u64>,
    /// Whether `events_verified` comes from reading every file back completely (otherwise:
    /// record checksums computed as the bytes were written, each file's end record and size
    /// read back).
    pub verified_by_reading: bool,
    /// Whether every written event carries every ROB of the partition, or the partial flag
    /// (no event found short of ROBs without saying so).
    pub complete: bool,
    /// Events whose ROBs were counted against the partition's (compressed events are not).
    pub events_rob_checked: Option<u64>,
    /// Repeated events the loggers dropped.
    pub duplicates_dropped: Option<u64>,
    /// Events built without some of their fragments.
    pub partial_events: Option<u64>,
    /// Link errors the readout inputs found.
    pub input_errors: Option<u64>,
    /// L1 accepts the emulator's schedule could not send (the partition could not take the
    /// configured rate).
    pub l1_missed: Option<u64>,
    /// Applications restarted into the run.
    pub restarts: Option<u64>,
    /// Events recovered from files a dead logger left open.
    pub recovered_events: Option<u64>,
    /// Events the DCMs sent to a logger again.
    pub events_resent: Option<u64>,
    /// Events in the DCMs' slots when they stopped.
    pub in_flight_at_stop: Option<u64>,
    /// Bytes written to the files.
    pub bytes_written: Option<u64>,
    /// The data files.
    pub files: Vec<PathBuf>,
    /// Per readout node.
    pub readout_nodes: Vec<NodeSheet>,
    /// Seconds from the first L1 accept to the supervisor's end.
    pub seconds: Option<f64>,
    /// L1 accepts per second over `l1_seconds`.
    pub l1_rate_hz: Option<f64>,
    /// Seconds from the first L1 accept to the last, on the supervisor's clock.
    pub l1_seconds: Option<f64>,
    /// Bytes of event records written per second.
    pub write_bytes_per_s: Option<f64>,
    /// Bytes the DCMs compressed.
    pub compress_in_bytes: Option<u64>,
    /// Bytes they became.
    pub compress_out_bytes: Option<u64>,
    /// `compress_in_bytes / compress_out_bytes` (None: compression off).
    pub compression_ratio: Option<f64>,
    /// Seconds of DCM thread time spent compressing.
    pub compress_seconds: Option<f64>,
    /// The L1 rate the configuration asked for (0: as fast as the partition takes).
    pub l1_rate_requested_hz: f64,
    /// Why the run ended early (the supervisor's death), if something ended it.
    pub ended_by: Option<String>,
    /// Whether it was stopped before its events or seconds ran out (a signal to `rodeo run`,
    /// a `stop` over HTTP): not a fault, but a run shorter than configured.
    pub stopped_early: bool,
    /// Malformed messages the applications dropped, by application, as they last reported
    /// them (a broken or hostile peer on the partition's sockets; no event of the run is in
    /// them): only `/metrics` said so, a run that took 380,000 of them read "ok" (a QA pass).
    pub bad_messages: std::collections::BTreeMap<String, u64>,
    /// Whether the balance sheet adds up (protocol rule 6, and the files hold what the loggers
    /// wrote).
    pub balanced: bool,
    /// The first problem of the verdict's severity (all are in `problems`).
    pub reason: Option<String>,
    /// Every problem found, each with its kind, count, place and the verdict it gives.
    pub problems: Vec<Problem>,
    /// The Python trigger's counters, when one ran.
    pub python_trigger: Option<Value>,
    /// The run's comment (`[run] comment`, or given at `start`; empty: none).
    pub comment: String,
    /// The run's type (empty: none).
    pub run_type: String,
    /// Who was on shift (empty: not said).
    pub shifter: String,
    /// The conditions (`POST /api/conditions`) as they stood when the run started and when
    /// it ended: `{"begin": {key: value}, "end": {key: value}}`, the latest value of each key
    /// (None: no run database).
    pub conditions: Option<Value>,
}

impl RunSheet {
    /// Takes the malformed messages each application dropped from `metrics` (their last
    /// report), those with any.
    pub fn set_bad_messages(&mut self, metrics: &[(String, AppMetrics)]) {
        self.bad_messages = metrics
            .iter()
            .map(|(name, m)| (name.clone(), m.bad_messages()))
            .filter(|(_, n)| *n > 0)
            .collect();
    }

    /// Marks the sheet of a run stopped before its end (a signal, a `stop`): it says so, and
    /// a run stopped before its first L1 accept says that it was, rather than blaming the
    /// trigger for taking none (an interrupt just after the start read "the run took no L1
    /// accept" as if the trigger had failed).
    pub fn mark_stopped_early(&mut self) {
        self.stopped_early = true;
        let mut changed = false;
        for p in &mut self.problems {
            if p.kind == ProblemKind::NoEvents {
                p.text = "the run was stopped (a signal or a stop command) before its first L1 \
                          accept: nothing was read out, built or written"
                    .into();
                changed = true;
            }
        }
        if changed {
            self.reason = first_reason(self.verdict, &self.problems);
        }
    }

    /// The sheet of a run that ended in order: `summary`'s counts; the events written must all
    /// be in the files, intact (the loggers' check: record checksums computed on the way, each
    /// closed file's end record and size read back; with `verify_after` every file re-read
    /// completely with `check_file`); the verdict from every problem found.
    pub fn from_summary(
        summary: &RunSummary,
        requested_hz: f64,
        trigger: Option<Value>,
        verify_after: bool,
    ) -> RunSheet {
        RunSheet::from_summary_and_files(summary, requested_hz, trigger, verify_after, None, &[])
    }

    /// [`RunSheet::from_summary`] for a run some of whose applications ended without their
    /// summary (`summary.missing`): the supervisor's counts as it last reported them
    /// (`metrics`), what was written as the files (`files`, read completely) hold.
    pub fn from_summary_and_files(
        summary: &RunSummary,
        requested_hz: f64,
        trigger: Option<Value>,
        verify_after: bool,
        files: Option<&[FileRecord]>,
        metrics: &[(String, AppMetrics)],
    ) -> RunSheet {
        let mut sheet = RunSheet::balance(summary, requested_hz, trigger, verify_after);
        if let Some(files) = files.filter(|_| !summary.missing.is_empty()) {
            let read = RunSheet::from_files(sheet.run_number, sheet.directory.clone(), files);
            sheet.events_written = read.events_written;
            sheet.events_verified = read.events_verified;
            sheet.bytes_written = read.bytes_written;
            sheet.verified_by_reading = true;
            sheet.files = read.files;
            sheet.written_from_files(summary, files);
        }
        if summary.missing.iter().any(|m| m == "supervisor") {
            sheet.add_last_counts(metrics);
        }
        sheet
    }

    /// Rule 6's line for the events written, with the events the files hold (read back: a
    /// logger left no summary, so the loggers' count lacks its events), and a failed `files`
    /// problem for the files left unfinished among them. The sheet said "9229 read back and
    /// verified" beside "events written 0 != accepted 9229" for a logger frozen at the stop,
    /// its `.writing` file unnamed.
    fn written_from_files(&mut self, summary: &RunSummary, files: &[FileRecord]) {
        let written = self.events_written.unwrap_or(0);
        let expected = summary.accepted + summary.forced_accepts;
        let prefix = format!("events written {} != ", summary.events_written);
        self.problems
            .retain(|p| !(p.kind == ProblemKind::Balance && p.text.starts_with(&prefix)));
        if written != expected {
            // More in the files than accepted reads as events written twice; they are events
            // the dead logger wrote and never acknowledged, undecided for the run (a QA pass:
            // each once in its `.writing` file).
            let more = if written > expected {
                format!(
                    "; the {} more are events the logger wrote before it ended and never \
                     acknowledged, which the run counts as undecided (events in the DCMs' \
                     slots at the stop: {})",
                    written - expected,
                    summary.unfinished
                )
            } else {
                String::new()
            };
            self.problems.push(Problem::new(
                ProblemKind::Balance,
                Some(written.abs_diff(expected)),
                None,
                format!(
                    "events written {written} (read back from the files: a logger left no \
                     summary) != accepted {} + forced {}{more}",
                    summary.accepted, summary.forced_accepts
                ),
            ));
        }
        let unfinished: Vec<FileRecord> = files
            .iter()
            .filter(|f| rodeo_files::rawfile::is_unfinished(&f.path))
            .cloned()
            .collect();
        self.problems.extend(unfinished_problem(&unfinished));
        self.rejudge();
    }

    /// The verdict, status, reason and balance again, after problems were added.
    fn rejudge(&mut self) {
        self.balanced &= !self
            .problems
            .iter()
            .any(|p| matches!(p.kind, ProblemKind::Balance | ProblemKind::Files));
        self.verdict = judge(&self.problems);
        self.status = RunStatus::of(self.verdict);
        self.reason = first_reason(self.verdict, &self.problems);
    }

    /// The balance sheet of `summary` (see [`RunSheet::from_summary`]).
    fn balance(
        summary: &RunSummary,
        requested_hz: f64,
        trigger: Option<Value>,
        verify_after: bool,
    ) -> RunSheet {
        let s = summary;
        let mut problems: Vec<Problem> = s
            .problems
            .iter()
            .map(|p| Problem::new(ProblemKind::Balance, None, None, p.clone()))
            .collect();
        let verified = if verify_after {
            let mut verified = 0u64;
            for f in &s.files {
                let v = check_file(f);
                verified += v.good_events;
                if let Some(e) = v.error {
                    problems.push(Problem::new(
                        ProblemKind::Files,
                        None,
                        Some(f.display().to_string()),
                        format!("{}: {e}", f.display()),
                    ));
                }
            }
            verified
        } else {
            s.events_verified
        };
        if verified != s.events_written {
            problems.push(Problem::new(
                ProblemKind::Files,
                Some(s.events_written.abs_diff(verified)),
                None,
                format!(
                    "files hold {verified} verified events, the loggers wrote {}",
                    s.events_written
                ),
            ));
        }
        let balanced = problems.is_empty();
        if let Some(why) = &s.ended_by {
            problems.push(Problem::new(
                ProblemKind::EndedEarly,
                Some(s.unfinished),
                None,
                format!("ended early: {why}; {} events were in flight", s.unfinished),
            ));
        }
        problems.extend(crate::losses::losses(s));
        let verdict = judge(&problems);
        RunSheet {
            run_number: s.run,
            directory: s.output.clone(),
            status: RunStatus::of(verdict),
            verdict,
            l1_accepts: Some(s.l1_accepts),
            accepted: Some(s.accepted),
            rejected: Some(s.rejected),
            forced_accepts: Some(s.forced_accepts),
            events_written: Some(s.events_written),
            events_verified: Some(verified),
            verified_by_reading: verify_after,
            complete: s.events_short_unflagged == 0,
            events_rob_checked: Some(s.events_rob_checked),
            duplicates_dropped: Some(s.duplicates),
            partial_events: Some(s.partial_events),
            input_errors: Some(s.nodes.iter().map(|n| n.input_errors).sum()),
            l1_missed: Some(s.l1_missed),
            restarts: Some(s.restarts),
            recovered_events: Some(s.recovered_events),
            events_resent: Some(s.events_resent),
            in_flight_at_stop: Some(s.unfinished),
            bytes_written: Some(s.bytes_written),
            files: s.files.clone(),
            readout_nodes: s
                .nodes
                .iter()
                .map(|n| {
                    let unbuilt = crate::unbuilt::Unbuilt::in_run(n, &s.nodes);
                    NodeSheet {
                        name: n.name.clone(),
                        requests: n.requests,
                        cleared: n.cleared,
                        clear_gaps: n.clear_gaps,
                        stored: n.stored,
                        swrod_built: n.swrod_built,
                        swrod_error: n.swrod_error.clone(),
                        input_errors: n.input_errors,
                        input_dropped_words: n.input_dropped_words,
                        input_source_mismatches: n.input_source_mismatches,
                        unbuilt_fragments: unbuilt.lost,
                        received_not_stored: n.received_not_stored,
                        store_duplicates: n.store_duplicates,
                        store_dropped_after_clear: n.store_dropped_after_clear,
                        unbuilt_cut_by_stop: unbuilt.cut,
                        restarted: n.restarted,
                        died_at_stop: n.died_at_stop,
                        inputs: n.inputs.clone(),
                        earlier_lives: n.earlier_lives.clone(),
                    }
                })
                .collect(),
            seconds: Some(s.seconds),
            l1_rate_hz: Some(s.l1_rate_hz),
            l1_seconds: Some(s.l1_seconds),
            write_bytes_per_s: Some(s.write_bytes_per_s),
            compress_in_bytes: Some(s.compress_in_bytes),
            compress_out_bytes: Some(s.compress_out_bytes),
            compression_ratio: (s.compress_out_bytes > 0)
                .then(|| s.compress_in_bytes as f64 / s.compress_out_bytes as f64),
            compress_seconds: Some(s.compress_seconds),
            l1_rate_requested_hz: requested_hz,
            ended_by: s.ended_by.clone(),
            balanced,
            reason: first_reason(verdict, &problems),
            problems,
            python_trigger: trigger,
            ..RunSheet::default()
        }
    }

    /// The sheet of a run that failed before its balance sheet was complete: `reason`, the
    /// counts the applications last reported (`metrics`: heartbeats or live counters), and
    /// what its files (`files`, read completely) prove: the events and bytes in them.
    pub fn failed(
        run_number: u32,
        directory: PathBuf,
        reason: String,
        files: &[FileRecord],
        metrics: &[(String, AppMetrics)],
    ) -> RunSheet {
        let mut sheet = RunSheet::from_files(run_number, directory, files);
        sheet.add_last_counts(metrics);
        // The L1 accepts the last reports left without a decision: lost or in flight when the
        // run failed, named rather than left for the reader to subtract.
        let undecided = sheet.l1_accepts.map(|l1| {
            let decided = [sheet.accepted, sheet.rejected, sheet.forced_accepts]
                .iter()
                .map(|n| n.unwrap_or(0))
                .fold(0u64, u64::saturating_add);
            l1.saturating_sub(decided)
        });
        let text = match undecided {
            Some(n) if n > 0 => format!(
                "{reason}; {n} L1 accepts had no decision in the applications' last reports \
                 (lost or in flight when the run failed)"
            ),
            _ => reason.clone(),
        };
        sheet.problems = vec![Problem::new(ProblemKind::RunFailed, undecided, None, text)];
        sheet.reason = Some(reason);
        sheet
    }

    /// Adds the data files a logger left unfinished (`.writing`, no end record: it gave them
    /// up when a write failed, e.g. the kernel's ENOSPC on a disk without margin) that the
    /// loggers' summaries did not list: read back (`files`: their complete events), named in
    /// the sheet's files and in a failed `files` problem. The sheet listed no file then, with
    /// thousands of events on disk.
    pub fn add_unfinished(&mut self, files: &[FileRecord]) {
        self.files.extend(files.iter().map(|f| f.path.clone()));
        self.problems.extend(unfinished_problem(files));
        self.rejudge();
    }

    /// The sheet of a run found at a later start without a record or a `summary.json`: its
    /// process died before it could record it; what its files prove.
    pub fn crashed(run_number: u32, directory: PathBuf, files: &[FileRecord]) -> RunSheet {
        let reason = "found at a later start without a record: the process ended before the \
                      run was recorded"
            .to_string();
        let mut sheet = RunSheet::failed(run_number, directory, reason, files, &[]);
        sheet.status = RunStatus::Crashed;
        sheet
    }

    /// A sheet read back from a `summary.json` (any version: what is missing stays `None`); a
    /// file that is not a sheet gives `None`.
    pub fn from_json(value: Value) -> Option<RunSheet> {
        if !value.is_object() {
            return None;
        }
        let mut sheet: RunSheet = serde_json::from_value(value.clone()).ok()?;
        // Sheets written before the verdict: it follows `balanced`.
        if value.get("verdict").is_none() {
            sheet.verdict = if sheet.balanced {
                Verdict::Ok
            } else {
                Verdict::Failed
            };
            sheet.status = RunStatus::of(sheet.verdict);
            sheet.complete = sheet.balanced;
        }
        Some(sheet)
    }

    /// The sheet as the JSON object that is printed, written and recorded.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// What `files` prove: their events (good events, as `rodeo verify` counts them) and bytes,
    /// read back completely.
    fn from_files(run_number: u32, directory: PathBuf, files: &[FileRecord]) -> RunSheet {
        let events: u64 = files.iter().map(|f| f.events).sum();
        // Verified: those in finished files; an unfinished one (`.writing`, no end record) is
        // read back but `rodeo verify` refuses it.
        let finished: u64 = files
            .iter()
            .filter(|f| !f.path.to_string_lossy().ends_with(".writing"))
            .map(|f| f.events)
            .sum();
        RunSheet {
            run_number,
            directory,
            status: RunStatus::Failed,
            verdict: Verdict::Failed,
            events_written: Some(events),
            events_verified: Some(finished),
            verified_by_reading: true,
            bytes_written: Some(files.iter().map(|f| f.size_bytes).sum()),
            files: files.iter().map(|f| f.path.clone()).collect(),
            ..RunSheet::default()
        }
    }

    /// The supervisor's decisions as it last reported them, where they exceed what the sheet
    /// has (the summary's lower bounds from the DCMs); then the floors the other applications
    /// and the files prove: the DCMs' last decisions, the events in the files (each was
    /// accepted), and accepted plus rejected (each was an L1 accept). A supervisor frozen or
    /// killed before its first heartbeat leaves no zero beside events that were written.
    /// The files stay the truth for what was written.
    /// Nothing reported (`metrics` empty) leaves the counts unknown.
    fn add_last_counts(&mut self, metrics: &[(String, AppMetrics)]) {
        if metrics.is_empty() {
            return;
        }
        let at_least = |have: Option<u64>, last: u64| Some(have.unwrap_or(0).max(last));
        let (mut dcm_accepted, mut dcm_rejected) = (0u64, 0u64);
        for (_, m) in metrics {
            match m {
                AppMetrics::Supervisor(s) => {
                    self.l1_accepts = at_least(self.l1_accepts, s.l1_accepts);
                    self.accepted = at_least(self.accepted, s.accepted);
                    self.rejected = at_least(self.rejected, s.rejected);
                    self.forced_accepts = at_least(self.forced_accepts, s.forced_accepts);
                }
                AppMetrics::Dcm(d) => {
                    dcm_accepted += d.accepted;
                    dcm_rejected += d.events.saturating_sub(d.accepted);
                }
                _ => {}
            }
        }
        self.accepted = at_least(self.accepted, dcm_accepted);
        self.rejected = at_least(self.rejected, dcm_rejected);
        if let Some(written) = self.events_written {
            self.accepted = at_least(self.accepted, written);
        }
        let decided = self.accepted.unwrap_or(0) + self.rejected.unwrap_or(0);
        self.l1_accepts = at_least(self.l1_accepts, decided);
    }
}

/// The failed `files` problem of data files left unfinished (`.writing`, no end record),
/// with the complete events read back from them; `None` without any.
fn unfinished_problem(files: &[FileRecord]) -> Option<Problem> {
    if files.is_empty() {
        return None;
    }
    let events: u64 = files.iter().map(|f| f.events).sum();
    let names: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
    Some(Problem::new(
        ProblemKind::Files,
        Some(events),
        Some(names.join(", ")),
        format!(
            "{} file(s) left unfinished, without an end record (a write failed, or its logger \
             died: a full disk? a frozen or killed process?): {events} complete events in them, \
             read back; `rodeo verify` refuses such a file, rodeo's readers recover its events",
            files.len()
        ),
    ))
}

/// The first problem of the verdict's severity: the sheet's `reason`.
fn first_reason(verdict: Verdict, problems: &[Problem]) -> Option<String> {
    problems
        .iter()
        .find(|p| p.verdict == verdict)
        .map(|p| p.text.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rodeo_control::metrics::LoggerMetrics;

    fn file(events: u64) -> FileRecord {
        FileRecord {
            path: PathBuf::from("/x/1.data"),
            size_bytes: 100 * events,
            adler32: 1,
            events,
        }
    }

    #[test]
    fn a_failed_sheet_never_counts_fewer_accepts_than_the_files_hold() {
        // The supervisor never reported (frozen before its first heartbeat); a logger did.
        let logger = AppMetrics::Logger(LoggerMetrics {
            events_written: 300,
            bytes_written: 1,
            disk_full: 0,
            directory_moves: 0,
            events_refused: 0,
            bad_messages: 0,
        });
        let metrics = vec![("logger-1".to_string(), logger)];
        let s = RunSheet::failed(1, "/x".into(), "dcm-2 died".into(), &[file(324)], &metrics);
        assert_eq!(s.events_written, Some(324));
        assert_eq!(s.accepted, Some(324));
        assert_eq!(s.rejected, Some(0));
        assert_eq!(s.l1_accepts, Some(324));
        assert_eq!(s.problems[0].count, Some(0));
    }

    /// A failed run names the L1 accepts its last reports left undecided.
    #[test]
    fn a_failed_sheet_names_the_undecided_accepts() {
        let sup = AppMetrics::Supervisor(Box::new(rodeo_control::metrics::SupervisorMetrics {
            l1_accepts: 7424,
            l1_missed: 0,
            accepted: 752,
            rejected: 6434,
            forced_accepts: 0,
            in_flight: 0,
            credits: 0,
            decision_latency: rodeo_memory::histogram::LogHistogram::new().snapshot(),
            bad_messages: 0,
        }));
        let metrics = vec![("supervisor".to_string(), sup)];
        let s = RunSheet::failed(1, "/x".into(), "ros-1 is dead".into(), &[], &metrics);
        assert_eq!(s.problems[0].count, Some(238));
        assert!(s.problems[0]
            .text
            .starts_with("ros-1 is dead; 238 L1 accepts had no decision"));
        assert_eq!(s.reason.as_deref(), Some("ros-1 is dead"));
    }

    /// A run that took no L1 accept balances trivially; its verdict says it did nothing.
    #[test]
    fn a_run_without_l1_accepts_is_not_ok() {
        let none = RunSummary::default();
        let s = RunSheet::from_summary(&none, 100_000.0, None, false);
        assert!(s.balanced, "{:?}", s.problems);
        assert_eq!(s.verdict, Verdict::Degraded);
        assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
        assert_eq!(s.problems[0].kind, ProblemKind::NoEvents);
        // Stopped before its first accept (an interrupt just after the start): said so.
        let mut stopped = s.clone();
        stopped.mark_stopped_early();
        assert!(stopped.stopped_early);
        assert!(
            stopped.problems[0].text.contains("stopped"),
            "{:?}",
            stopped.problems
        );
        assert_eq!(stopped.reason.as_ref(), Some(&stopped.problems[0].text));
        assert_eq!(stopped.verdict, Verdict::Degraded);
        let some = RunSummary {
            l1_accepts: 10,
            accepted: 10,
            events_written: 10,
            events_verified: 10,
            ..RunSummary::default()
        };
        let s = RunSheet::from_summary(&some, 100_000.0, None, false);
        assert!(s.problems.iter().all(|p| p.kind != ProblemKind::NoEvents));
    }

    /// Forced accepts while every DCM lived (timeouts, a DCM's full queue) make the run
    /// degraded, with their count; with a lost DCM its own problem says them.
    #[test]
    fn forced_accepts_without_a_lost_dcm_are_a_problem() {
        let forced = RunSummary {
            l1_accepts: 10,
            accepted: 6,
            forced_accepts: 4,
            events_written: 10,
            events_verified: 10,
            ..RunSummary::default()
        };
        let s = RunSheet::from_summary(&forced, 100_000.0, None, false);
        assert!(s.balanced, "{:?}", s.problems);
        assert_eq!(s.verdict, Verdict::Degraded);
        let p: Vec<_> = s.problems.iter().map(|p| (p.kind, p.count)).collect();
        assert_eq!(p, [(ProblemKind::ForcedAccepts, Some(4))]);
        let lost = RunSummary {
            dcms_lost: vec![("dcm-2".into(), "its process exited".into())],
            ..forced
        };
        let s = RunSheet::from_summary(&lost, 100_000.0, None, false);
        let kinds: Vec<_> = s.problems.iter().map(|p| p.kind).collect();
        assert_eq!(kinds, [ProblemKind::DcmLost]);
    }

    /// A file a logger gave up is named in the files and in a failed problem with its events.
    #[test]
    fn an_unfinished_file_is_listed_and_fails_the_run() {
        let done = RunSummary {
            l1_accepts: 10,
            accepted: 10,
            events_written: 10,
            events_verified: 10,
            files: vec![PathBuf::from("/x/1.data")],
            ..RunSummary::default()
        };
        let mut s = RunSheet::from_summary(&done, 100_000.0, None, false);
        s.add_unfinished(&[]);
        assert_eq!(s.verdict, Verdict::Ok, "{:?}", s.problems);
        assert!(s.balanced);
        let left = FileRecord {
            path: PathBuf::from("/x/2.data.writing"),
            ..file(7)
        };
        s.add_unfinished(&[left]);
        assert_eq!(s.verdict, Verdict::Failed);
        assert_eq!(s.files.len(), 2);
        let p = s.problems.last().unwrap();
        assert_eq!((p.kind, p.count), (ProblemKind::Files, Some(7)));
        assert_eq!(p.place.as_deref(), Some("/x/2.data.writing"));
        assert_eq!(s.reason.as_deref(), Some(p.text.as_str()));
        assert!(!s.balanced, "the files do not hold what the loggers wrote");
    }

    /// A logger that left no summary (frozen at the stop): rule 6 counts what the files hold,
    /// and its unfinished file fails the run by name.
    #[test]
    fn a_logger_without_a_summary_is_counted_from_its_files() {
        let mut summary = RunSummary {
            l1_accepts: 10,
            accepted: 10,
            missing: vec!["logger-1".into()],
            ..RunSummary::default()
        };
        rodeo_control::summary::check_balance(&mut summary, 0);
        summary
            .problems
            .push("logger-1 ended without its summary".into());
        let left = FileRecord {
            path: PathBuf::from("/x/1.data.writing"),
            ..file(10)
        };
        let s = RunSheet::from_summary_and_files(&summary, 1.0, None, false, Some(&[left]), &[]);
        let texts: Vec<&str> = s.problems.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(s.events_written, Some(10));
        assert!(
            !texts.iter().any(|t| t.starts_with("events written")),
            "{texts:?}"
        );
        assert!(
            texts.contains(&"logger-1 ended without its summary"),
            "{texts:?}"
        );
        let p = s.problems.last().unwrap();
        assert_eq!((p.kind, p.count), (ProblemKind::Files, Some(10)));
        assert_eq!((s.verdict, s.balanced), (Verdict::Failed, false));
        // Files holding more than accepted: said to be the dead logger's unacknowledged
        // events, not read as events written twice.
        let more = FileRecord {
            path: PathBuf::from("/x/1.data.writing"),
            ..file(12)
        };
        let s = RunSheet::from_summary_and_files(&summary, 1.0, None, false, Some(&[more]), &[]);
        assert!(
            s.problems
                .iter()
                .any(|p| p.text.contains("the 2 more are events the logger wrote")),
            "{:?}",
            s.problems
        );
    }

    #[test]
    fn a_failed_sheet_without_reports_leaves_the_decisions_unknown() {
        let s = RunSheet::failed(1, "/x".into(), "crashed".into(), &[file(5)], &[]);
        assert_eq!(s.events_written, Some(5));
        assert_eq!(s.l1_accepts, None);
        assert_eq!(s.accepted, None);
    }
}
