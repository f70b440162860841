//! A detector's fragments that are in no event built: which of them the run lost, and which
//! the stop cut.
//!
//! A readout node fed by a detector (network inputs, `tcp://` or `udp://`, or link files:
//! inputs that do not run ahead of the L1) builds an event for every L1ID the L1 accepts (with
//! the data-driven L1, every L1ID each of its inputs delivered). What it still stores at the end
//! splits at the L1 front, the newest L1ID a request or clear named
//! (`rodeo_ros::store::EventStore::stored_around_l1_front`):
//!
//! - **behind** the front: the L1 passed them over (missing on another input). Lost: a problem.
//! - **ahead** of it: received after the last accept. When every input was still flowing at
//!   the stop (UDP has no end; TCP senders still connected; each with data within three of
//!   its periods, and 250 ms, of the end), the stop cut those events: said
//!   on the sheet, not a problem (a UDP run ended by `run.seconds` was degraded every time,
//!   612 fragments of two links 15 ms apart). Otherwise (an input closed or lost, or all of
//!   them ended), the fragments of L1IDs every channel holds are events the run's end cut
//!   (`run.events` reached); those of L1IDs some channel lacks could never be built: lost, a
//!   problem (two link files of 1,000 and 500 fragments in the data-driven L1 ran "ok" with
//!   500 of them unbuilt and unsaid).
//!
//! Fragments a receiver counted that never reached the store (`NodeSummary::
//! received_not_stored`: still in the input's queues when the node stopped, the store full)
//! came after every fragment stored on their link: cut by the stop when every input was still
//! flowing, as the stored ones ahead of the L1 (a TCP detector at full speed fills the store
//! before every stop: 1,880 of them, a QA pass), lost otherwise.
//!
//! "Every input" is the run's, not the node's: an input of another node that ended holds no
//! L1ID past its last, so none of this node's fragments ahead of the L1 front can be built,
//! complete as they are here (two nodes, the second's senders closing after 300 fragments:
//! the first's 1,635 were "cut" and the run "ok", a QA pass). The node reads its network and
//! file inputs in at its stop (`rodeo_ros`'s `Input::end_links`): before that, a UDP run
//! ended by `run.seconds` received 122-305 fragments more than it stored, and said nothing.
//!
//! Emulated inputs and replays run ahead of the L1 by design and count none.

use rodeo_control::summary::{InputState, InputStatus, NodeSummary};

use crate::verdict::{Problem, ProblemKind};

/// One node's fragments in no event built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Unbuilt {
    /// Fragments that should have been built: a problem of the run.
    pub lost: u64,
    /// Fragments after the last accept of a stream the stop cut: not a problem.
    pub cut: u64,
    /// Of `lost`, fragments received and never stored.
    pub not_stored: u64,
}

/// Whether every input of node `n` was still flowing at the run's end (module docs).
fn flowing(n: &NodeSummary) -> bool {
    n.inputs.iter().all(input_flowing)
}

/// The shortest silence at the run's end that makes a connected input no longer flowing:
/// its fragments stopped coming before the stop, so the others' surplus is not the stop's cut.
const SILENT_AT_END_MS: f64 = 250.0;

/// An input still flowing at the run's end: connected, and its last data younger than
/// [`SILENT_AT_END_MS`] or three of its periods (at its rate over the last second), whichever
/// is longer. A link silent for 3 s before the stop, within `input_silence_seconds`, had the
/// other's 500 fragments called cut, verdict ok (a QA pass).
fn input_flowing(i: &InputStatus) -> bool {
    let limit = if i.rate_hz > 0.0 {
        SILENT_AT_END_MS.max(3000.0 / i.rate_hz)
    } else {
        SILENT_AT_END_MS
    };
    i.state == InputState::Connected && i.last_data_age_ms.is_some_and(|ms| ms as f64 <= limit)
}

impl Unbuilt {
    /// The split of node `n`'s summary in a run of `nodes` (`n` among them, by name): an
    /// input of another node that ended makes this node's fragments ahead of the L1 lost
    /// (module docs).
    pub fn in_run(n: &NodeSummary, nodes: &[NodeSummary]) -> Unbuilt {
        let elsewhere_ended = nodes
            .iter()
            .filter(|o| o.name != n.name)
            .any(|o| !flowing(o));
        Unbuilt::of(n, elsewhere_ended)
    }

    /// The split of node `n`'s summary, `elsewhere_ended` when an input of another node had
    /// ended. A summary without the split (an older version, or nothing but early-clear
    /// markers left) counts a network input's fragments still stored as lost, as that version
    /// did.
    pub fn of(n: &NodeSummary, elsewhere_ended: bool) -> Unbuilt {
        let all_flowing = flowing(n) && !elsewhere_ended;
        // Received and never stored: after everything stored on their links (module docs).
        let (lost, cut) = if all_flowing {
            (0, n.received_not_stored)
        } else {
            (n.received_not_stored, 0)
        };
        let split = n.stored_behind_l1 + n.stored_ahead_of_l1 > 0;
        if !split {
            let network = !n.inputs.is_empty()
                && n.inputs
                    .iter()
                    .all(|i| i.address.starts_with("tcp://") || i.address.starts_with("udp://"));
            return Unbuilt {
                lost: if network { n.stored_now } else { 0 } + lost,
                cut,
                not_stored: lost,
            };
        }
        // Cut by the stop only when every input was still flowing: one that had ended (closed,
        // lost) while others went on will never send the L1IDs it lacks (an input closed 3 s
        // before the stop had 1,535 fragments of the others called "cut", verdict ok); one of
        // another node lacks every L1ID ahead of the front here.
        let never = if all_flowing {
            0
        } else if elsewhere_ended {
            n.stored_ahead_of_l1
        } else {
            n.stored_ahead_incomplete.min(n.stored_ahead_of_l1)
        };
        Unbuilt {
            lost: n.stored_behind_l1 + never + lost,
            cut: n.stored_ahead_of_l1 - never + cut,
            not_stored: lost,
        }
    }

    /// Why the lost fragments are lost, each cause with its count.
    fn why(&self) -> String {
        let stored = self.lost - self.not_stored;
        let mut parts = Vec::new();
        if stored > 0 {
            parts.push(format!(
                "{stored} passed over by the L1, or after the last accept with no other input \
                 holding their L1ID (missing on another input)"
            ));
        }
        if self.not_stored > 0 {
            parts.push(format!(
                "{} never stored (still in the input's queues when the node stopped: the store \
                 full?)",
                self.not_stored
            ));
        }
        parts.join("; ")
    }

    /// The degraded problem of node `name`'s lost fragments, if any.
    pub fn problem(&self, name: &str) -> Option<Problem> {
        (self.lost > 0).then(|| {
            Problem::new(
                ProblemKind::UnbuiltFragments,
                Some(self.lost),
                Some(name.to_string()),
                format!(
                    "{name}: {} fragments received from the detector are in no event built: {}",
                    self.lost,
                    self.why()
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use rodeo_control::summary::RunSummary;

    use super::*;
    use crate::sheet::RunSheet;
    use crate::verdict::Verdict;

    fn node(address: &str, state: InputState, behind: u64, ahead: (u64, u64)) -> NodeSummary {
        NodeSummary {
            name: "ros-1".into(),
            stored: 33_063,
            stored_now: 13_211,
            stored_behind_l1: behind,
            stored_ahead_of_l1: ahead.0,
            stored_ahead_incomplete: ahead.1,
            inputs: vec![InputStatus {
                node: "ros-1".into(),
                rob: 0x0041_0001,
                address: address.into(),
                state,
                fragments: 33_063,
                bytes: 0,
                errors: 0,
                last_data_age_ms: Some(2),
                rate_hz: 1_000.0,
                problem: None,
            }],
            ..NodeSummary::default()
        }
    }

    fn sheet(n: NodeSummary) -> RunSheet {
        let run = RunSummary {
            l1_accepts: 19_852,
            accepted: 19_852,
            events_written: 19_852,
            events_verified: 19_852,
            nodes: vec![n],
            ..RunSummary::default()
        };
        RunSheet::from_summary(&run, 1.0, None, false)
    }

    /// Fragments a node received over the network and never built are a degraded problem
    /// with their count; the fragments an emulated input stored ahead of the L1 are not.
    #[test]
    fn unbuilt_network_fragments_are_a_problem() {
        let s = sheet(node("udp://127.0.0.1:5001", InputState::Closed, 0, (0, 0)));
        let p: Vec<_> = s.problems.iter().map(|p| (p.kind, p.count)).collect();
        assert_eq!(p, [(ProblemKind::UnbuiltFragments, Some(13_211))]);
        assert_eq!(s.verdict, Verdict::Degraded);
        assert_eq!(s.readout_nodes[0].unbuilt_fragments, 13_211);
        let s = sheet(node("emulated", InputState::Ended, 0, (0, 0)));
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        assert_eq!(s.readout_nodes[0].unbuilt_fragments, 0);
    }

    /// A stream still flowing at the stop: its fragments after the last accept are cut, not
    /// lost; the ones the L1 passed over still are. When every input had ended, the ones of
    /// L1IDs some channel lacks are lost, the others cut by the run's end.
    #[test]
    fn the_stop_cuts_a_flowing_stream_and_loses_nothing_by_it() {
        let split = |s: &RunSheet| {
            let n = &s.readout_nodes[0];
            (n.unbuilt_fragments, n.unbuilt_cut_by_stop)
        };
        let udp = "udp://127.0.0.1:5001";
        let s = sheet(node(udp, InputState::Connected, 0, (612, 612)));
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        assert_eq!(s.verdict, Verdict::Ok);
        assert_eq!(split(&s), (0, 612));
        let s = sheet(node(udp, InputState::Connected, 3, (612, 600)));
        let p: Vec<_> = s.problems.iter().map(|p| (p.kind, p.count)).collect();
        assert_eq!(p, [(ProblemKind::UnbuiltFragments, Some(3))]);
        assert_eq!(split(&s), (3, 612));
        // One input closed early while the other flowed: what it lacks is lost.
        let mut early = node(udp, InputState::Connected, 0, (1535, 1535));
        let mut closed = early.inputs[0].clone();
        closed.state = InputState::Closed;
        early.inputs.push(closed);
        assert_eq!(split(&sheet(early)), (1535, 0));
        // Every sender closed: 100 L1IDs on one link only are lost, 40 on both were cut.
        let s = sheet(node(
            "tcp://127.0.0.1:5001",
            InputState::Closed,
            3,
            (140, 100),
        ));
        let p: Vec<_> = s.problems.iter().map(|p| (p.kind, p.count)).collect();
        assert_eq!(p, [(ProblemKind::UnbuiltFragments, Some(103))]);
        assert_eq!(split(&s), (103, 40));
        // Link files read to their end: the same.
        let s = sheet(node("/data/link0.bin", InputState::Ended, 0, (500, 500)));
        assert_eq!(split(&s), (500, 0));
        assert_eq!(s.verdict, Verdict::Degraded);
    }

    /// Two nodes: the second's senders closed, the first's still flowing. None of the first's
    /// fragments ahead of the L1 can be built (the second lacks their L1IDs): lost, and the
    /// run degraded; with both flowing they are cut.
    #[test]
    fn an_input_that_ended_on_another_node_makes_this_node_s_fragments_ahead_lost() {
        let mut first = node("tcp://127.0.0.1:5001", InputState::Connected, 0, (1_635, 0));
        first.received_not_stored = 100;
        let mut second = node("tcp://127.0.0.1:5003", InputState::Closed, 0, (0, 0));
        second.name = "ros-2".into();
        let run = |nodes: Vec<NodeSummary>| {
            let summary = RunSummary {
                l1_accepts: 300,
                accepted: 300,
                events_written: 300,
                events_verified: 300,
                nodes,
                ..RunSummary::default()
            };
            RunSheet::from_summary(&summary, 1.0, None, false)
        };
        let s = run(vec![first.clone(), second.clone()]);
        let n = &s.readout_nodes[0];
        assert_eq!((n.unbuilt_fragments, n.unbuilt_cut_by_stop), (1_735, 0));
        assert_eq!(s.verdict, Verdict::Degraded);
        assert!(s
            .problems
            .iter()
            .any(|p| p.place.as_deref() == Some("ros-1")));
        second.inputs[0].state = InputState::Connected;
        let s = run(vec![first, second]);
        let n = &s.readout_nodes[0];
        assert_eq!((n.unbuilt_fragments, n.unbuilt_cut_by_stop), (0, 1_735));
    }

    /// A connected input silent for longer than three of its periods (and 250 ms) before the
    /// run's end is no longer flowing: the others' surplus is lost, not cut; a slow one
    /// (1 Hz) within its period still flows.
    #[test]
    fn an_input_silent_before_the_end_is_not_flowing() {
        let mut i =
            node("udp://127.0.0.1:5001", InputState::Connected, 0, (0, 0)).inputs[0].clone();
        assert!(input_flowing(&i));
        i.last_data_age_ms = Some(3_000);
        i.rate_hz = 0.0;
        assert!(!input_flowing(&i));
        i.rate_hz = 1.0;
        assert!(input_flowing(&i));
        i.last_data_age_ms = None;
        assert!(!input_flowing(&i), "no data at all");
        // The other link's 500 fragments whose L1IDs the silent one never sent.
        let mut n = node("udp://127.0.0.1:5001", InputState::Connected, 0, (500, 500));
        n.inputs[0].last_data_age_ms = Some(3_000);
        n.inputs[0].rate_hz = 0.0;
        let s = sheet(n);
        assert_eq!(s.readout_nodes[0].unbuilt_fragments, 500);
        assert_eq!(s.verdict, Verdict::Degraded);
    }

    /// Fragments received and never stored (left in the input's queues at the stop) are cut
    /// with the stream when every input still flowed; lost on top of the split, said in the
    /// problem, when one had ended; shown apart on the node's line either way.
    #[test]
    fn fragments_received_and_never_stored_are_cut_or_lost_as_their_stream() {
        let row = |s: &RunSheet| {
            let n = &s.readout_nodes[0];
            (
                n.unbuilt_fragments,
                n.received_not_stored,
                n.unbuilt_cut_by_stop,
            )
        };
        let mut n = node("tcp://127.0.0.1:5001", InputState::Connected, 0, (612, 612));
        n.received_not_stored = 305;
        let s = sheet(n.clone());
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        assert_eq!(row(&s), (0, 305, 917));
        n.inputs[0].state = InputState::Closed;
        let s = sheet(n);
        let p: Vec<_> = s.problems.iter().map(|p| (p.kind, p.count)).collect();
        assert_eq!(p, [(ProblemKind::UnbuiltFragments, Some(612 + 305))]);
        assert!(
            s.problems[0].text.contains("612 passed over")
                && s.problems[0].text.contains("; 305 never stored")
        );
        assert_eq!(s.verdict, Verdict::Degraded);
        assert_eq!(row(&s), (917, 305, 0));
    }
}
