//! Request scheduling of a DCM: asking the readout nodes for a slot's fragments (one request
//! per node, at most `max_outstanding` in flight per node, the rest queued), reading their
//! replies, completing a fetch stage, re-asking for pending fragments after `retry_delay`, and
//! the timers (retries, holds, delayed shipping).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rodeo_format::checksum::bytes_as_words;
use rodeo_transport::message::{decode, encode_data_request, Message};
use rodeo_transport::socket::{Frame, Received, Socket};

use super::{transaction, Dcm, Phase, Stage, TraceStage};
use crate::error::DataflowError;
use crate::trigger::Verdict;

impl Dcm {
    /// Requests `robs` (those not fetched yet) for slot `i`, grouped by node.
    pub(super) fn fetch(
        &mut self,
        i: usize,
        stage: Stage,
        robs: &[u32],
        readout: &mut [Socket],
    ) -> Result<(), DataflowError> {
        for w in &mut self.slots[i].wanted {
            w.clear();
        }
        for &rob in robs {
            if self.slots[i].has(rob) {
                continue;
            }
            if let Some(n) = self.node_of(rob) {
                if !self.slots[i].wanted[n].contains(&rob) {
                    self.slots[i].wanted[n].push(rob);
                }
            }
        }
        self.slots[i].phase = Phase::Fetching(stage);
        self.dispatch_wanted(i, readout)?;
        if self.slots[i].waiting == 0 {
            self.stage_complete(i, readout)?;
        }
        Ok(())
    }

    /// Requests every ROB not fetched yet from every node (n = 0 when nothing came from it).
    pub(super) fn fetch_rest(
        &mut self,
        i: usize,
        readout: &mut [Socket],
    ) -> Result<(), DataflowError> {
        for n in 0..self.nodes.len() {
            // The slot's own list, refilled in place (no allocation once it has grown).
            let mut missing = std::mem::take(&mut self.slots[i].wanted[n]);
            missing.clear();
            let s = &self.slots[i];
            missing.extend(
                self.config.readout[n]
                    .robs
                    .iter()
                    .copied()
                    .filter(|&r| !s.has(r)),
            );
            self.slots[i].wanted[n] = missing;
        }
        self.slots[i].phase = Phase::Fetching(Stage::Rest);
        self.dispatch_wanted(i, readout)?;
        if self.slots[i].waiting == 0 {
            self.stage_complete(i, readout)?;
        }
        Ok(())
    }

    /// Sends node `n`'s queued requests while it has room (`max_outstanding`), in order; a
    /// request whose slot has moved on is dropped. Called after the turn's replies from the
    /// node (one reply frees room for one request: sent one by one, each would go out alone,
    /// one shared-memory sample per request; after the replies, one batch for them all) and
    /// after requests given up (`faults`). A node that is down sends nothing.
    pub(super) fn send_queued(
        &mut self,
        n: usize,
        readout: &mut [Socket],
    ) -> Result<(), DataflowError> {
        while !self.nodes[n].down && self.nodes[n].outstanding < self.config.max_outstanding.max(1)
        {
            let Some((q, g)) = self.nodes[n].queue.pop_front() else {
                break;
            };
            self.counters
                .queued_requests
                .fetch_sub(1, Ordering::Relaxed);
            if self.slots[q].generation == g && matches!(self.slots[q].phase, Phase::Fetching(_)) {
                self.send_request(q, n, readout)?;
            }
        }
        Ok(())
    }

    /// Sends (or queues, over the per-node bound) the slot's wanted requests.
    fn dispatch_wanted(&mut self, i: usize, readout: &mut [Socket]) -> Result<(), DataflowError> {
        for n in 0..self.nodes.len() {
            let rest_all = self.slots[i].phase == Phase::Fetching(Stage::Rest)
                && self.config.readout[n].robs.is_empty();
            if self.slots[i].wanted[n].is_empty() && !rest_all {
                continue;
            }
            if self.skip_if_down(i, n) {
                continue;
            }
            self.slots[i].waiting += 1;
            // Behind requests already queued for the node (their room may have been freed by
            // replies of this turn, which `send_queued` fills after the replies): in order.
            if self.nodes[n].outstanding < self.config.max_outstanding.max(1)
                && self.nodes[n].queue.is_empty()
            {
                self.send_request(i, n, readout)?;
            } else {
                let g = self.slots[i].generation;
                self.nodes[n].queue.push_back((i, g));
                self.counters
                    .queued_requests
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    pub(super) fn send_request(
        &mut self,
        i: usize,
        n: usize,
        readout: &mut [Socket],
    ) -> Result<(), DataflowError> {
        let s = &self.slots[i];
        self.buf.clear();
        encode_data_request(
            &mut self.buf,
            transaction(i, s.generation),
            s.l1id,
            &s.wanted[n],
        );
        if readout[n].send([Frame::Copy(&self.buf)]).is_err() {
            // The node is gone or stuck: ask again after the retry delay, like a PENDING
            // answer (and, past the retry limit, build without it).
            self.summary.send_failures += 1;
            self.counters.send_failures.fetch_add(1, Ordering::Relaxed);
            self.node_down(n);
            let s = &mut self.slots[i];
            let wanted = std::mem::take(&mut s.wanted[n]);
            s.pending.extend_from_slice(&wanted);
            s.wanted[n] = wanted;
            s.waiting = s.waiting.saturating_sub(1);
            if s.waiting == 0 {
                let t = Instant::now() + self.config.retry_delay;
                s.retry_at = Some(t);
                self.arm(t);
            }
            return Ok(());
        }
        self.nodes[n].outstanding += 1;
        self.summary.requests += 1;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters
            .outstanding_requests
            .fetch_add(1, Ordering::Relaxed);
        let s = &mut self.slots[i];
        s.sent_at[n] = self.turn_time;
        s.asked |= 1 << n;
        self.counters
            .trace
            .record(s.global_id, TraceStage::RequestSent, n as u32);
        Ok(())
    }

    pub(super) fn on_reply(
        &mut self,
        n: usize,
        msg: &mut Received,
        readout: &mut [Socket],
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        let Ok(decoded) = decode(msg.data()) else {
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        let Message::DataReply { fragments, .. } = decoded.message else {
            self.summary.bad_messages += 1;
            self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        let tx = decoded.header.transaction;
        let (i, g) = ((tx >> 16) as usize, tx as u16);
        // A reply to a request that timed out (`faults`) was already counted out.
        let asked = self
            .slots
            .get(i)
            .is_some_and(|s| s.generation == g && s.asked & (1 << n) != 0);
        self.node_up(n);
        if asked {
            self.slots[i].asked &= !(1 << n);
            if self.nodes[n].outstanding > 0 {
                self.counters
                    .outstanding_requests
                    .fetch_sub(1, Ordering::Relaxed);
            }
            self.nodes[n].outstanding = self.nodes[n].outstanding.saturating_sub(1);
        }
        // The room this reply freed on the node is filled by `send_queued` once the turn has
        // read every reply the node sent, so that the requests it frees go out together.
        let live = asked
            && self
                .slots
                .get(i)
                .is_some_and(|s| matches!(s.phase, Phase::Fetching(_)));
        if !live {
            self.summary.stale_replies += 1;
            self.counters.stale_replies.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let s = &self.slots[i];
        self.counters
            .request_latency
            .record(s.sent_at.get(n).map_or(Duration::ZERO, |&t| {
                self.turn_time.saturating_duration_since(t)
            }));
        self.counters
            .trace
            .record(s.global_id, TraceStage::RequestAnswered, n as u32);
        let raw = fragments.as_bytes();
        self.counters
            .bytes_received
            .fetch_add(raw.len() as u64 & !3, Ordering::Relaxed);
        // Aligned words (always, in practice): the reply is kept whole by the slot and its
        // fragments are filed where they lie, no copy. Otherwise each is copied into the
        // slot's arena.
        let kept = match bytes_as_words(raw) {
            Some(words) => {
                let reply = self.slots[i].replies.len() as u32;
                let base = raw.as_ptr() as usize - msg.data().as_ptr() as usize;
                self.file_fragments(i, n, words, Some((reply, base))) > 0
            }
            None => {
                let scratch: Vec<u32> = raw
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                self.file_fragments(i, n, &scratch, None);
                false
            }
        };
        if kept {
            let spare = self.spare_replies.pop().unwrap_or_default();
            self.slots[i].replies.push(std::mem::replace(msg, spare));
        }
        let s = &mut self.slots[i];
        s.waiting = s.waiting.saturating_sub(1);
        if s.waiting == 0 {
            self.stage_complete_or_retry(i, readout, loggers)?;
        }
        Ok(())
    }

    pub(super) fn stage_complete_or_retry(
        &mut self,
        i: usize,
        readout: &mut [Socket],
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        let s = &mut self.slots[i];
        if !s.pending.is_empty() {
            if s.retries < self.config.max_retries
                && s.assigned_at.elapsed() < self.config.max_pending_time
            {
                let t = Instant::now() + self.config.retry_delay;
                s.retry_at = Some(t);
                self.arm(t);
                return Ok(());
            }
            s.partial = true;
            s.pending.clear();
        }
        self.stage_complete_with(i, readout, loggers)
    }

    fn stage_complete(&mut self, i: usize, readout: &mut [Socket]) -> Result<(), DataflowError> {
        // Called when no request was needed: nothing can be pending, loggers are not needed
        // before the Rest stage completes, which goes through the retry path with loggers.
        let mut none: [Socket; 0] = [];
        self.stage_complete_with(i, readout, &mut none)
    }

    fn stage_complete_with(
        &mut self,
        i: usize,
        readout: &mut [Socket],
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        match self.slots[i].phase {
            Phase::Fetching(Stage::Decide) => self.decide(i, readout),
            Phase::Fetching(Stage::Rest) => {
                if loggers.is_empty() {
                    // Reached without any request (every ROB already fetched): ship on the
                    // next timer pass, which has the loggers.
                    let t = Instant::now();
                    self.slots[i].retry_at = Some(t);
                    self.arm(t);
                    return Ok(());
                }
                self.ship(i, loggers)
            }
            _ => Ok(()),
        }
    }

    /// The timers at `now` (the loop turn's time): requests and acknowledgements past their
    /// timeout (every [`super::FAULT_SCAN_EVERY`], and every turn while a node is down), then
    /// the slots' retries and holds, once the earliest of them is due ([`Dcm::arm`]).
    pub(super) fn run_timers(
        &mut self,
        now: Instant,
        readout: &mut [Socket],
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        if now >= self.fault_scan_at || self.nodes.iter().any(|n| n.down) {
            self.fault_scan_at = now + super::FAULT_SCAN_EVERY;
            self.expire_requests(now, readout, loggers)?;
            self.resend_unacked(now, loggers)?;
        }
        if self.timer_due.is_none_or(|t| t > now) {
            return Ok(());
        }
        // Recomputed over the slots below; timers set meanwhile arm it again.
        self.timer_due = None;
        for i in 0..self.slots.len() {
            if let Phase::Holding(t) = self.slots[i].phase {
                if t <= now {
                    let v = self.slots[i].held.take().unwrap_or(Verdict::Reject);
                    self.act(i, v, readout)?;
                } else {
                    self.arm(t);
                }
                continue;
            }
            let Some(t) = self.slots[i].retry_at else {
                continue;
            };
            if t > now {
                self.arm(t);
                continue;
            }
            self.slots[i].retry_at = None;
            if self.slots[i].pending.is_empty() {
                // A Rest stage that completed without requests: ship it now.
                if self.slots[i].phase == Phase::Fetching(Stage::Rest) {
                    self.ship(i, loggers)?;
                }
                continue;
            }
            let s = &mut self.slots[i];
            s.retries += 1;
            self.summary.retries += 1;
            let pending = std::mem::take(&mut s.pending);
            let stage = match s.phase {
                Phase::Fetching(st) => st,
                _ => Stage::Decide,
            };
            for w in &mut s.wanted {
                w.clear();
            }
            for &rob in &pending {
                if let Some(n) = self
                    .rob_node
                    .binary_search_by_key(&rob, |&(r, _)| r)
                    .ok()
                    .map(|k| self.rob_node[k].1)
                {
                    self.slots[i].wanted[n].push(rob);
                }
            }
            self.slots[i].phase = Phase::Fetching(stage);
            self.dispatch_wanted(i, readout)?;
            if self.slots[i].waiting == 0 {
                self.stage_complete_with(i, readout, loggers)?;
            }
        }
        Ok(())
    }
}
