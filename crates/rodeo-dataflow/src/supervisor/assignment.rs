//! Assignment (protocol rules 1 and 2): events assigned against credits, round-robin over the
//! DCMs as their credits arrive; events taken back (after the event timeout, or from a dead
//! DCM) assigned again first, as `Build` (forced accept), to another DCM when there is one.

use std::time::Instant;

use rodeo_transport::message::encode_assignment;
use rodeo_transport::socket::{Frame, Socket};

use crate::error::DataflowError;
use crate::l1source::L1Accept;
use crate::trace::Stage as TraceStage;

use super::Supervisor;

/// An event assigned to a DCM and not yet decided.
#[derive(Debug, Clone, Copy)]
pub(super) struct Assigned {
    /// The accept.
    pub(super) accept: L1Accept,
    /// The DCM holding it (index in `dcms`).
    pub(super) dcm: usize,
    /// Its assignment number (a deadline of an earlier assignment does not match).
    pub(super) number: u64,
    /// Sent as `Build` (a reassigned event, forced accept).
    pub(super) forced: bool,
    /// When it was assigned.
    pub(super) at: Instant,
}

impl Supervisor {
    /// Takes back events whose deadline passed.
    /// Entries of events already decided are dropped from the front as soon as they get
    /// there, not at their deadline: the queue holds about the events in flight, not every
    /// event of the last `event_timeout` (memory flat whatever the rate).
    pub(super) fn check_timeouts(&mut self, now: Instant) {
        while let Some(&(deadline, gid, number)) = self.deadlines.front() {
            let live = self.assigned.get(&gid).is_some_and(|a| a.number == number);
            if live && deadline > now {
                break;
            }
            self.deadlines.pop_front();
            if let Some(a) = self.assigned.get(&gid) {
                if a.number == number {
                    let a = *a;
                    self.assigned.remove(&gid);
                    self.summary.timeouts += 1;
                    self.summary.reassignments += 1;
                    self.reassign.push_back((a.accept, a.dcm));
                }
            }
        }
    }

    /// Takes a credit, preferring a DCM other than `avoid`; `None` without credits.
    fn take_credit(&mut self, avoid: Option<usize>) -> Option<usize> {
        while let Some(&dcm) = self.credits.front() {
            if self.dcms[dcm].alive {
                break;
            }
            self.credits.pop_front();
        }
        let pos = match avoid {
            Some(a) => self
                .credits
                .iter()
                .position(|&c| c != a && self.dcms[c].alive)
                .or_else(|| (!self.credits.is_empty()).then_some(0)),
            None => (!self.credits.is_empty()).then_some(0),
        }?;
        let dcm = self.credits.remove(pos)?;
        self.dcms[dcm].credits = self.dcms[dcm].credits.saturating_sub(1);
        Some(dcm)
    }

    /// Assigns reassigned events (as Build) first, then new ones while credits and the L1 rate
    /// allow. Returns whether anything was sent.
    pub(super) fn assign(
        &mut self,
        router: &mut Socket,
        stopping: bool,
    ) -> Result<bool, DataflowError> {
        let mut sent = false;
        // One clock read per call: the assignments of one call go out within microseconds, and
        // their times serve the event timeout (seconds) and the L1 rate's span.
        let now = Instant::now();
        while let Some(&(accept, from)) = self.reassign.front() {
            let Some(dcm) = self.take_credit(Some(from)) else {
                return Ok(sent);
            };
            self.reassign.pop_front();
            self.send_assignment(router, dcm, accept, true, now)?;
            sent = true;
        }
        if stopping {
            return Ok(sent);
        }
        let mut budget = self.l1.available();
        while budget > 0 && !self.credits.is_empty() && !self.l1.is_done() {
            let Some(dcm) = self.take_credit(None) else {
                break;
            };
            let Some(accept) = self.l1.next_accept() else {
                self.credits.push_front(dcm);
                break;
            };
            budget -= 1;
            self.l1_first.get_or_insert(now);
            self.l1_last = Some(now);
            self.counters
                .trace
                .record(accept.global_id, TraceStage::L1Accept, 0);
            self.send_assignment(router, dcm, accept, false, now)?;
            sent = true;
        }
        Ok(sent)
    }

    fn send_assignment(
        &mut self,
        router: &mut Socket,
        dcm: usize,
        accept: L1Accept,
        forced: bool,
        now: Instant,
    ) -> Result<(), DataflowError> {
        self.buf.clear();
        encode_assignment(
            &mut self.buf,
            forced,
            0,
            accept.global_id,
            accept.l1id,
            accept.bcid,
            accept.trigger_type,
            accept.rois(),
        );
        let number = self.next_number;
        self.next_number += 1;
        self.assigned.insert(
            accept.global_id,
            Assigned {
                accept,
                dcm,
                number,
                forced,
                at: now,
            },
        );
        self.deadlines
            .push_back((now + self.config.event_timeout, accept.global_id, number));
        // Never waits for one DCM (the thread serves them all and the L1 source).
        match router.try_send_to(&self.dcms[dcm].id, [Frame::Copy(&self.buf)]) {
            Ok(()) => {}
            Err(e) if e.is_would_block() => {
                // The DCM does not read: as if it were gone, the event waits for its timeout
                // or the DCM's death, then goes elsewhere. Nothing is lost.
                if self.summary.assignments_dropped == 0 {
                    tracing::warn!(
                        "supervisor: DCM {} does not read its assignments (queue full); \
                         dropped, reassigned at their timeout",
                        String::from_utf8_lossy(&self.dcms[dcm].id)
                    );
                }
                self.summary.assignments_dropped += 1;
            }
            Err(_) => {
                // The DCM is gone: the event waits for its timeout or the DCM's death, then
                // goes elsewhere. Nothing is lost.
                self.bad_message();
            }
        }
        Ok(())
    }
}
