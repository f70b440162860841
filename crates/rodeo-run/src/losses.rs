//! The losses of a run, balanced or not: each a problem of the balance sheet with its count
//! and place (no L1 accept, DCMs lost, partial events, input errors, unbuilt fragments,
//! restarts, ...), made from the run's summary for [`crate::sheet::RunSheet`].

use rodeo_control::summary::RunSummary;

use crate::verdict::{Problem, ProblemKind};

/// The losses of a run that balanced or not: each a degraded problem with its count and place
/// (or, for events short of ROBs without the partial flag, a failed one).
pub(crate) fn losses(s: &RunSummary) -> Vec<Problem> {
    let mut out = Vec::new();
    if s.l1_accepts == 0 {
        // Balanced trivially: "OK" would tell the shift that a run that did nothing was fine.
        out.push(Problem::new(
            ProblemKind::NoEvents,
            Some(0),
            Some("supervisor".into()),
            "the run took no L1 accept: nothing was read out, built or written".into(),
        ));
    }
    for (name, why) in &s.dcms_lost {
        // Not a loss of events (the supervisor reassigned them), but of a DCM: the run went
        // on with fewer, its events came back as forced accepts (not the trigger's decision).
        out.push(Problem::new(
            ProblemKind::DcmLost,
            // One DCM per problem (the forced accepts are the run's, in the text).
            Some(1),
            Some(name.clone()),
            if s.forced_accepts > 0 {
                format!(
                    "{name} died during the run ({why}): its events were reassigned as forced \
                     accepts ({} in the run) and the run went on without it",
                    s.forced_accepts
                )
            } else {
                // Dead during the stop, or holding nothing: "its events were reassigned (0 in
                // the run)" read as a loss that never was (a QA pass).
                format!(
                    "{name} died ({why}): it held no event the supervisor had to reassign, \
                     the run went on without it"
                )
            },
        ));
    }
    if s.dcms_lost.is_empty() && s.forced_accepts > 0 {
        // Written like accepted events, but not the trigger's decision: a run that forced
        // some is not "ok" (before 2026-12-07 it was, with 204 forced accepts after a DCM's
        // full queue dropped assignments).
        out.push(Problem::new(
            ProblemKind::ForcedAccepts,
            Some(s.forced_accepts),
            Some("supervisor".into()),
            format!(
                "{} events were accepted without the trigger's decision (forced accepts: \
                 assignments not decided within `supervisor.event_timeout_ms`, or dropped by a DCM's \
                 full queue, were given again as forced accepts)",
                s.forced_accepts
            ),
        ));
    }
    if s.events_short_unflagged > 0 {
        out.push(Problem::new(
            ProblemKind::Incomplete,
            Some(s.events_short_unflagged),
            Some("loggers".into()),
            format!(
                "{} events written short of ROBs without the partial flag",
                s.events_short_unflagged
            ),
        ));
    }
    if s.partial_events > 0 {
        out.push(Problem::new(
            ProblemKind::PartialEvents,
            Some(s.partial_events),
            Some("DCMs".into()),
            partial_text(s.partial_events, s.l1_accepts),
        ));
    }
    for n in &s.nodes {
        if n.input_errors > 0 {
            out.push(Problem::new(
                ProblemKind::InputErrors,
                Some(n.input_errors),
                Some(n.name.clone()),
                format!(
                    "{}: {} link errors in the input ({} words dropped{}{}); {}",
                    n.name,
                    n.input_errors,
                    n.input_dropped_words,
                    if n.store_duplicates > 0 {
                        format!(
                            ", {} fragment(s) of an L1ID already stored, dropped (the first \
                             kept)",
                            n.store_duplicates
                        )
                    } else {
                        String::new()
                    },
                    if n.input_source_mismatches > 0 {
                        format!(
                            ", {} fragments of another source than their input's ROB: cables \
                             swapped?",
                            n.input_source_mismatches
                        )
                    } else {
                        String::new()
                    },
                    // A duplicate the store dropped is in no event (a QA pass found "flagged"
                    // said of duplicates alone, and nothing flagged).
                    if n.input_errors > n.store_duplicates {
                        "their events are flagged"
                    } else {
                        "no event holds them"
                    }
                ),
            ));
        }
    }
    for n in &s.nodes {
        if let Some(p) = crate::unbuilt::Unbuilt::in_run(n, &s.nodes).problem(&n.name) {
            out.push(p);
        }
    }
    for input in s.nodes.iter().flat_map(|n| &n.inputs) {
        if let Some(why) = &input.problem {
            out.push(Problem::new(
                ProblemKind::Input,
                None,
                Some(format!(
                    "{} ROB {:#010x} {}",
                    input.node, input.rob, input.address
                )),
                why.clone(),
            ));
        }
    }
    if s.l1_missed > 0 {
        out.push(Problem::new(
            ProblemKind::L1Missed,
            Some(s.l1_missed),
            Some("supervisor".into()),
            format!(
                "{} L1 accepts fell behind the configured rate and were not sent (the \
                 partition could not take l1.rate_hz)",
                s.l1_missed
            ),
        ));
    }
    let late: Vec<&str> = s
        .nodes
        .iter()
        .filter(|n| n.died_at_stop)
        .map(|n| n.name.as_str())
        .collect();
    if !late.is_empty() {
        out.push(Problem::new(
            ProblemKind::DiedAtStop,
            Some(late.len() as u64),
            Some(late.join(", ")),
            format!(
                "{} died too late to be restarted (during the run's stop, or before its \
                 restart was due when the stop came): its own counts are its last heartbeat's \
                 (the events are counted by the supervisor, the DCMs and the loggers)",
                late.join(", ")
            ),
        ));
    }
    if s.restarts > 0 {
        // Every application restarted (the loggers too: only the readout nodes were named).
        let mut names: Vec<&str> = s.restarted_apps.iter().map(String::as_str).collect();
        if names.is_empty() {
            names = s
                .nodes
                .iter()
                .filter(|n| n.restarted)
                .map(|n| n.name.as_str())
                .collect();
        }
        out.push(Problem::new(
            ProblemKind::Restarts,
            Some(s.restarts),
            (!names.is_empty()).then(|| names.join(", ")),
            format!(
                "{} application restart(s) into the run ({} events recovered from files left \
                 open)",
                s.restarts, s.recovered_events
            ),
        ));
    }
    out
}

/// The partial events' problem text, with their share of the run's L1 accepts: a run whose
/// events are nearly all partial said only the count (a readout node killed at the start, its
/// rejoin never caught up: 468,750 of 468,750 partial, a QA pass).
fn partial_text(partial: u64, l1_accepts: u64) -> String {
    let share = if l1_accepts > 0 {
        partial as f64 * 100.0 / l1_accepts as f64
    } else {
        0.0
    };
    let most = if share >= 90.0 {
        ": the run holds almost none of their missing ROBs' data (see the readout nodes' rows)"
    } else {
        ""
    };
    format!(
        "{partial} events ({share:.1}% of the L1 accepts) built without some of their \
         fragments (flagged partial){most}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DCM dead with no event to reassign (during the stop) is not said to have had its
    /// events reassigned.
    #[test]
    fn a_dcm_lost_without_forced_accepts_reassigned_nothing() {
        let mut s = RunSummary {
            l1_accepts: 10,
            dcms_lost: vec![("dcm-1".into(), "killed".into())],
            ..RunSummary::default()
        };
        let text = |s: &RunSummary| {
            losses(s)
                .into_iter()
                .find(|p| p.kind == ProblemKind::DcmLost)
                .map(|p| p.text)
                .unwrap()
        };
        assert!(text(&s).contains("held no event"), "{}", text(&s));
        s.forced_accepts = 3;
        assert!(
            text(&s).contains("reassigned as forced accepts (3"),
            "{}",
            text(&s)
        );
    }

    /// The partial events' problem gives their share of the L1 accepts, and says so when
    /// nearly every event is partial.
    #[test]
    fn partial_events_are_given_with_their_share() {
        assert_eq!(
            partial_text(25, 100),
            "25 events (25.0% of the L1 accepts) built without some of their fragments \
             (flagged partial)"
        );
        assert!(partial_text(468_750, 468_750).contains("100.0%"));
        assert!(partial_text(468_750, 468_750).contains("almost none"));
        assert!(partial_text(5, 0).contains("0.0%"));
    }
}
