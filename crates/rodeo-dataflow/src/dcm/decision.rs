//! The trigger call-out of a DCM: the algorithm decides on a slot's fragments (or asks for
//! more ROBs), an emulated processing time may hold the slot, and when the slot frees its
//! decision and credit are queued for the supervisor.

use std::sync::atomic::Ordering;
use std::time::Instant;

use rodeo_format::fragment::RobFragment;
use rodeo_transport::message::{Decision, Verdict as WireVerdict};
use rodeo_transport::socket::Socket;

use super::assembly::relabel;
use super::{Dcm, Phase, Stage, TraceStage};
use crate::error::DataflowError;
use crate::trigger::{EventInfo, Verdict};

/// Most rounds of "more ROBs" one event may ask for.
const MAX_MORE_ROUNDS: u32 = 4;

impl Dcm {
    pub(super) fn decide(&mut self, i: usize, readout: &mut [Socket]) -> Result<(), DataflowError> {
        let mut robs: Vec<RobFragment<'_>> = relabel(std::mem::take(&mut self.rob_views));
        let s = &self.slots[i];
        robs.extend(
            s.frags
                .iter()
                .filter_map(|f| RobFragment::parse(s.fragment(f)).ok()),
        );
        let info = EventInfo {
            global_id: s.global_id,
            l1id: s.l1id,
            bcid: s.bcid,
            trigger_type: s.trigger_type,
            rois: &s.rois,
        };
        let outcome = self.algorithm.decide(&info, &robs);
        self.rob_views = relabel(robs);
        let s = &self.slots[i];
        self.counters
            .decision_latency
            .record(self.turn_time.saturating_duration_since(s.assigned_at));
        self.counters
            .trace
            .record(s.global_id, TraceStage::Decided, 0);
        if outcome.hold.is_zero() {
            self.act(i, outcome.verdict, readout)
        } else {
            let t = Instant::now() + outcome.hold;
            let s = &mut self.slots[i];
            s.phase = Phase::Holding(t);
            s.held = Some(outcome.verdict);
            self.arm(t);
            Ok(())
        }
    }

    pub(super) fn act(
        &mut self,
        i: usize,
        verdict: Verdict,
        readout: &mut [Socket],
    ) -> Result<(), DataflowError> {
        match verdict {
            Verdict::Reject => {
                self.summary.rejected += 1;
                self.finish(i, WireVerdict::Reject);
                Ok(())
            }
            Verdict::Accept { stream } => {
                self.slots[i].stream = Some(stream);
                self.fetch_rest(i, readout)
            }
            Verdict::NeedRobs(robs) => {
                let s = &mut self.slots[i];
                s.more_rounds += 1;
                if s.more_rounds > MAX_MORE_ROUNDS {
                    self.summary.rejected += 1;
                    self.finish(i, WireVerdict::Reject);
                    return Ok(());
                }
                self.fetch(i, Stage::Decide, &robs, readout)
            }
        }
    }

    pub(super) fn finish(&mut self, i: usize, verdict: WireVerdict) {
        let s = &mut self.slots[i];
        if s.partial {
            self.summary.partial += 1;
        }
        self.decisions.push(Decision {
            global_id: s.global_id,
            l1id: s.l1id,
            verdict,
        });
        self.counters
            .build_latency
            .record(self.turn_time.saturating_duration_since(s.assigned_at));
        s.phase = Phase::Free;
        s.drop_fragments(&mut self.spare_replies);
        s.retry_at = None;
        s.generation = s.generation.wrapping_add(1);
        self.credits += 1;
        self.counters.events.fetch_add(1, Ordering::Relaxed);
        self.counters.busy_slots.fetch_sub(1, Ordering::Relaxed);
    }
}
