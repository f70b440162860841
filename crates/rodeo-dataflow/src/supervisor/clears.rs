//! The clear group (protocol rule 5): L1IDs of finished events, sent to every readout node in
//! groups of `clear_group` with consecutive sequence numbers, flushed when idle and at stop;
//! a KeepAlive after `keepalive` without a clear.

use std::time::Instant;

use rodeo_transport::message::{encode_clear, encode_keepalive};
use rodeo_transport::socket::{Frame, Socket};

use crate::error::DataflowError;

use super::Supervisor;

impl Supervisor {
    pub(super) fn add_clear(&mut self, l1id: u32, now: Instant) {
        if self.clear.is_empty() {
            self.oldest_pending_clear = Some(now);
        }
        self.clear.push(l1id);
    }

    pub(super) fn maybe_flush_clears(
        &mut self,
        readout: &mut [Socket],
        now: Instant,
        force: bool,
    ) -> Result<(), DataflowError> {
        let group = self.config.clear_group.max(1);
        while self.clear.len() >= group {
            let rest = self.clear.split_off(group);
            self.send_clear(readout, now)?;
            self.clear = rest;
            if !self.clear.is_empty() {
                self.oldest_pending_clear = Some(now);
            }
        }
        let idle = self
            .oldest_pending_clear
            .is_some_and(|t| now.duration_since(t) >= self.config.clear_flush);
        if !self.clear.is_empty() && (force || idle) {
            self.send_clear(readout, now)?;
        }
        if now.duration_since(self.last_clear) >= self.config.keepalive {
            self.send_keepalive(readout, now);
        }
        Ok(())
    }

    /// A KeepAlive to every readout node (a node that does not take it is counted).
    fn send_keepalive(&mut self, readout: &mut [Socket], now: Instant) {
        self.buf.clear();
        encode_keepalive(&mut self.buf, self.clear_sequence);
        for s in readout.iter_mut() {
            if s.send([Frame::Copy(&self.buf)]).is_err() {
                self.summary.send_failures += 1;
            }
        }
        self.summary.keepalives += 1;
        self.last_clear = now;
    }

    /// A KeepAlive to every readout node as the run begins, before any clear: over shared
    /// memory, beside a busy core, the first clear of a short run (sent within milliseconds of
    /// the start, 0.2 ms after a DCM's last request) never reached the readout node in 10 of
    /// 12 runs of 3 events, which then failed with "ros-1 received clears for 0 events" (a QA
    /// pass, 2026-12-07; 3 of 8 with the binary before). With this first message, 10 of 10
    /// such runs got their clear. Why the clear was lost is not understood (iceoryx2 reported
    /// no failed connection; docs/faults.md).
    pub(super) fn hello_readout(&mut self, readout: &mut [Socket]) {
        self.send_keepalive(readout, Instant::now());
    }

    fn send_clear(&mut self, readout: &mut [Socket], now: Instant) -> Result<(), DataflowError> {
        self.buf.clear();
        encode_clear(&mut self.buf, self.clear_sequence, &self.clear);
        self.clear_sequence = self.clear_sequence.wrapping_add(1);
        for s in readout.iter_mut() {
            // A node that does not take the clear is counted (its clear sequence shows the gap).
            if s.send([Frame::Copy(&self.buf)]).is_err() {
                self.summary.send_failures += 1;
            }
        }
        self.summary.cleared += self.clear.len() as u64;
        self.summary.clear_messages += 1;
        self.clear.clear();
        self.oldest_pending_clear = None;
        self.last_clear = now;
        Ok(())
    }
}
