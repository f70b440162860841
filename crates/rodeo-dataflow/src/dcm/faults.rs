//! A DCM's answer to peers that fail: a readout node that stops answering, a logger that stops
//! acknowledging (killed, crashed, restarted by the controller).
//!
//! # A readout node down
//!
//! A request not answered within [`REQUEST_TIMEOUT`] (far longer than a node's pending
//! timeout, after which a live node always answers) is given up: its fragments are missing,
//! the event goes on and is built flagged PARTIAL_EVENT, and the node counts as **down**. So
//! does a node whose send failed (its queue full past the send timeout: the transport then
//! fails the following sends at once). While a node is down no request goes to it: a slot
//! that wants its ROBs skips it at once (the event partial, counted in `skipped_requests`),
//! except one request every [`PROBE_EVERY`], the probe. Any reply from the node (the probe's,
//! or a late one) brings it back up, and events are complete again. A restarted node that
//! rejoins at the current L1ID answers the probe at once.
//!
//! Requests in flight are tracked per slot and node (`Slot::asked`): a reply to a request
//! given up is stale (counted, dropped), never filed twice, and the node's outstanding count
//! is taken down once, when the request is given up.
//!
//! # A logger that does not acknowledge
//!
//! An accepted event stays in its slot (fragments kept) until its logger acknowledges it, so
//! the slot count bounds the events waiting: when every slot waits, the DCM announces no
//! credit and the supervisor assigns it nothing (back-pressure, nothing dropped). An event not
//! acknowledged within [`ACK_TIMEOUT`] is built and sent again: to a logger that died, the
//! copy waits in the transport's queue until the restarted logger connects. A logger drops a
//! copy of an event it already holds (it acknowledges it again), so resending never writes an
//! event twice.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rodeo_transport::socket::Socket;

use super::{Dcm, Phase};
use crate::error::DataflowError;

/// A request not answered within this is given up and its node counts as down.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);

/// While a node is down, one request goes to it this often (the probe).
pub const PROBE_EVERY: Duration = Duration::from_millis(200);

/// An accepted event not acknowledged by its logger within this is sent again.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(3);

/// A turn of the DCM's loop (its poll waits at most 50 ms) that took this much longer than its
/// wait is the DCM's own stall, not its peers' silence: a quarter of [`REQUEST_TIMEOUT`].
pub const OWN_STALL: Duration = Duration::from_millis(375);

impl Dcm {
    /// Marks readout node `n` down (module docs).
    pub(super) fn node_down(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        if !node.down {
            node.down = true;
            node.probe_at = Instant::now() + PROBE_EVERY;
            self.summary.nodes_down += 1;
            tracing::warn!(
                "{}: readout node {} does not answer: events are built without its ROBs \
                 (PARTIAL_EVENT) until it answers again",
                self.config.name,
                self.config.readout[n].endpoint
            );
        }
    }

    /// Node `n` answered: it is up.
    pub(super) fn node_up(&mut self, n: usize) {
        if self.nodes[n].down {
            self.nodes[n].down = false;
            tracing::warn!(
                "{}: readout node {} answers again",
                self.config.name,
                self.config.readout[n].endpoint
            );
        }
    }

    /// Whether slot `i`'s request to node `n` is skipped because the node is down (the slot
    /// then misses its ROBs: partial); a due probe is not skipped.
    pub(super) fn skip_if_down(&mut self, i: usize, n: usize) -> bool {
        let now = Instant::now();
        let node = &mut self.nodes[n];
        if !node.down {
            return false;
        }
        if now >= node.probe_at {
            node.probe_at = now + PROBE_EVERY;
            return false;
        }
        self.summary.skipped_requests += 1;
        self.slots[i].partial = true;
        true
    }

    /// Gives up the requests in flight longer than [`REQUEST_TIMEOUT`] (module docs).
    /// Called at every turn of the loop with `overrun`, how much longer the turn took than
    /// its poll's wait. An overrun of [`OWN_STALL`] or more is the DCM's own stall (a loaded
    /// machine, or a VM whose CPUs were held for seconds): the requests' and shipments' time
    /// during it is not their peers' silence, so their timers move on by the overrun (no
    /// PARTIAL_EVENT, no resend for it). Returns whether it was such a stall.
    pub(super) fn after_own_stall(&mut self, overrun: Duration) -> bool {
        if overrun < OWN_STALL {
            return false;
        }
        for s in &mut self.slots {
            for t in &mut s.sent_at {
                *t += overrun;
            }
            s.shipped_at += overrun;
        }
        if overrun >= Duration::from_secs(1) {
            tracing::warn!(
                dcm = %self.config.name,
                overrun_ms = overrun.as_millis() as u64,
                "the DCM was held up for {} ms (a loaded or frozen machine?): its requests' \
                 and shipments' timeouts are counted from now",
                overrun.as_millis()
            );
        }
        true
    }

    pub(super) fn expire_requests(
        &mut self,
        now: Instant,
        readout: &mut [Socket],
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        for i in 0..self.slots.len() {
            if self.slots[i].asked == 0 || !matches!(self.slots[i].phase, Phase::Fetching(_)) {
                continue;
            }
            for n in 0..self.nodes.len() {
                let s = &mut self.slots[i];
                if s.asked & (1 << n) == 0 || now.duration_since(s.sent_at[n]) < REQUEST_TIMEOUT {
                    continue;
                }
                s.asked &= !(1 << n);
                s.partial = true;
                s.waiting = s.waiting.saturating_sub(1);
                let done = s.waiting == 0;
                self.summary.request_timeouts += 1;
                if self.nodes[n].outstanding > 0 {
                    self.nodes[n].outstanding -= 1;
                    self.counters
                        .outstanding_requests
                        .fetch_sub(1, Ordering::Relaxed);
                }
                self.node_down(n);
                if done {
                    self.stage_complete_or_retry(i, readout, loggers)?;
                    break;
                }
            }
        }
        self.drain_down_queues(readout, loggers)?;
        // Requests given up free room on their node: what waits in its queue goes now (a
        // reply would have sent it; none will come for these).
        for n in 0..self.nodes.len() {
            self.send_queued(n, readout)?;
        }
        Ok(())
    }

    /// Requests queued for a node that is down (over its `max_outstanding`) are not sent:
    /// each such slot misses the node's ROBs (partial) and goes on.
    fn drain_down_queues(
        &mut self,
        readout: &mut [Socket],
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        for n in 0..self.nodes.len() {
            if !self.nodes[n].down {
                continue;
            }
            while let Some((i, g)) = self.nodes[n].queue.pop_front() {
                self.counters
                    .queued_requests
                    .fetch_sub(1, Ordering::Relaxed);
                let s = &mut self.slots[i];
                if s.generation != g || !matches!(s.phase, Phase::Fetching(_)) {
                    continue;
                }
                self.summary.skipped_requests += 1;
                s.partial = true;
                s.waiting = s.waiting.saturating_sub(1);
                if s.waiting == 0 {
                    self.stage_complete_or_retry(i, readout, loggers)?;
                }
            }
        }
        Ok(())
    }

    /// Sends again the events whose logger has not acknowledged them within [`ACK_TIMEOUT`].
    pub(super) fn resend_unacked(
        &mut self,
        now: Instant,
        loggers: &mut [Socket],
    ) -> Result<(), DataflowError> {
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.phase != Phase::Logging || now.duration_since(s.shipped_at) < ACK_TIMEOUT {
                continue;
            }
            self.summary.events_resent += 1;
            self.ship(i, loggers)?;
            // A send that failed leaves the slot in Logging with its old time: try again at
            // the next timeout, not at every pass.
            self.slots[i].shipped_at = now;
        }
        Ok(())
    }
}
