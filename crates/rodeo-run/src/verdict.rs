//! The run's verdict: `ok`, `degraded` or `failed`, and every problem behind it with its kind,
//! count and place (docs/run-control.md, "Verdicts").
//!
//! `balanced` is protocol rule 6 (every L1 accept decided, cleared and written once); the
//! verdict adds what the shift needs to know besides. A run is:
//! - **failed** when it did not end in order, its balance sheet does not add up, its files do
//!   not hold what the loggers wrote, or an event lacks ROBs without saying so (not
//!   `complete`): counts that cannot be trusted;
//! - **degraded** when it balances but with losses that are counted: partial events, link
//!   errors, inputs that never delivered, closed early, were lost or went silent, L1 accepts
//!   the partition could not take, applications restarted into the run, a readout node that
//!   died during the stop, a DCM that died (its events reassigned), or no L1 accept at all (a
//!   run stopped before its first event, or one whose partition never started taking events);
//! - **ok** otherwise.

use serde::{Deserialize, Serialize};

/// The verdict on a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Balanced, complete, every input alive, every file checked, nothing missed.
    Ok,
    /// Balanced, but with losses (each a [`Problem`]).
    Degraded,
    /// Not ended in order, not balanced, or not complete.
    #[default]
    Failed,
}

impl Verdict {
    /// The word (`ok`, `degraded`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Degraded => "degraded",
            Verdict::Failed => "failed",
        }
    }
}

/// What kind of problem a run had (docs/run-control.md explains each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// The run did not end in order (an application failed, the controller was lost...).
    RunFailed,
    /// Something ended the run early (the supervisor's death).
    EndedEarly,
    /// The balance sheet (rule 6) does not add up, or an application ended without its
    /// summary.
    Balance,
    /// The files do not hold what the loggers wrote, or do not check.
    Files,
    /// Events written short of ROBs without the partial flag.
    Incomplete,
    /// Events built without some of their fragments (flagged partial).
    PartialEvents,
    /// Errors the readout inputs found in the link data (their events are flagged).
    InputErrors,
    /// Fragments a readout node received over the network that are in no event built: their
    /// L1IDs were never accepted (missing on another input, or received after the last L1
    /// accept), so the detector's data is not in the files.
    UnbuiltFragments,
    /// A readout input that never delivered, closed early, was lost or went silent.
    Input,
    /// L1 accepts the partition could not take at the configured rate.
    L1Missed,
    /// Applications restarted into the run.
    Restarts,
    /// A readout node that died during the run's stop, too late to be restarted.
    DiedAtStop,
    /// A DCM that died during the run: its events were reassigned as forced accepts and the
    /// run went on with the other DCMs.
    DcmLost,
    /// Events accepted without the trigger's decision while every DCM lived (assignments that
    /// timed out, or that a DCM's full queue could not take, given again as forced accepts).
    ForcedAccepts,
    /// The run took no L1 accept: it balances trivially, but read out nothing.
    NoEvents,
    /// A problem written by an older rodeo, kept as its text.
    Other,
}

impl ProblemKind {
    /// The verdict a problem of this kind gives the run.
    pub fn verdict(self) -> Verdict {
        match self {
            ProblemKind::RunFailed
            | ProblemKind::EndedEarly
            | ProblemKind::Balance
            | ProblemKind::Files
            | ProblemKind::Incomplete
            | ProblemKind::Other => Verdict::Failed,
            ProblemKind::PartialEvents
            | ProblemKind::InputErrors
            | ProblemKind::UnbuiltFragments
            | ProblemKind::Input
            | ProblemKind::L1Missed
            | ProblemKind::Restarts
            | ProblemKind::DiedAtStop
            | ProblemKind::DcmLost
            | ProblemKind::ForcedAccepts
            | ProblemKind::NoEvents => Verdict::Degraded,
        }
    }
}

/// One problem of a run: its kind, how many, where, and a sentence for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "ProblemJson")]
pub struct Problem {
    /// What kind.
    pub kind: ProblemKind,
    /// The verdict it gives the run.
    pub verdict: Verdict,
    /// How many (events, errors, accepts, restarts), where it is a count.
    pub count: Option<u64>,
    /// Where: an application, a node, a ROB, an input address, a file.
    #[serde(rename = "where")]
    pub place: Option<String>,
    /// The sentence.
    pub text: String,
}

impl Problem {
    /// A problem of `kind` (its verdict follows the kind).
    pub fn new(kind: ProblemKind, count: Option<u64>, place: Option<String>, text: String) -> Self {
        Problem {
            kind,
            verdict: kind.verdict(),
            count,
            place,
            text,
        }
    }
}

/// A problem as a sheet holds it: the full object, or the plain sentence older sheets kept.
#[derive(Deserialize)]
#[serde(untagged)]
enum ProblemJson {
    Text(String),
    Full {
        kind: ProblemKind,
        verdict: Option<Verdict>,
        count: Option<u64>,
        #[serde(rename = "where")]
        place: Option<String>,
        text: String,
    },
}

impl From<ProblemJson> for Problem {
    fn from(p: ProblemJson) -> Problem {
        match p {
            ProblemJson::Text(text) => Problem::new(ProblemKind::Other, None, None, text),
            ProblemJson::Full {
                kind,
                verdict,
                count,
                place,
                text,
            } => Problem {
                kind,
                verdict: verdict.unwrap_or_else(|| kind.verdict()),
                count,
                place,
                text,
            },
        }
    }
}

/// The verdict of a run with `problems`: the worst of theirs (ok without any).
pub fn judge(problems: &[Problem]) -> Verdict {
    problems
        .iter()
        .map(|p| p.verdict)
        .max()
        .unwrap_or(Verdict::Ok)
}

/// The verdict's line for people: `ok`, or the verdict with its reasons, the failing ones
/// first (`DEGRADED: 22 events built without ...; ...`).
pub fn verdict_line(verdict: Verdict, problems: &[Problem]) -> String {
    if verdict == Verdict::Ok {
        return "OK".into();
    }
    let mut reasons: Vec<&Problem> = problems.iter().collect();
    reasons.sort_by_key(|p| std::cmp::Reverse(p.verdict));
    let text: Vec<&str> = reasons.iter().map(|p| p.text.as_str()).collect();
    format!("{}: {}", verdict.as_str().to_uppercase(), text.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_problem_decides_and_none_is_ok() {
        assert_eq!(judge(&[]), Verdict::Ok);
        let partial = Problem::new(
            ProblemKind::PartialEvents,
            Some(3),
            None,
            "3 partial".into(),
        );
        let balance = Problem::new(ProblemKind::Balance, None, None, "L1 != decided".into());
        assert_eq!(judge(std::slice::from_ref(&partial)), Verdict::Degraded);
        assert_eq!(judge(&[partial.clone(), balance.clone()]), Verdict::Failed);
        let line = verdict_line(Verdict::Failed, &[partial, balance]);
        assert_eq!(line, "FAILED: L1 != decided; 3 partial");
        assert_eq!(verdict_line(Verdict::Ok, &[]), "OK");
    }

    #[test]
    fn problems_read_back_from_either_shape() {
        let v: Vec<Problem> = serde_json::from_str(
            r#"["disk full", {"kind":"input","count":null,"where":"ros-1","text":"never"}]"#,
        )
        .unwrap();
        assert_eq!(v[0].kind, ProblemKind::Other);
        assert_eq!(v[0].verdict, Verdict::Failed);
        assert_eq!(v[1].kind, ProblemKind::Input);
        assert_eq!(v[1].verdict, Verdict::Degraded);
        assert_eq!(v[1].place.as_deref(), Some("ros-1"));
        let back = serde_json::to_value(&v[1]).unwrap();
        assert_eq!(back["where"], "ros-1");
        assert_eq!(back["verdict"], "degraded");
    }
}
