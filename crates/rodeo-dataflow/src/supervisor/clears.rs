//! The clear group (protocol rule 5): L1IDs of finished events, sent to every readout node in
//! groups of `clear_group` with consecutive sequence numbers, flushed when idle and at stop;
//! a KeepAlive after `keepalive` without a clear.
//!
//! # A readout node that does not take its clears
//!
//! A clear is never dropped because its node is slow. Each node's messages go out without
//! waiting ([`Socket::try_send`]); what its inbox cannot take now waits in that node's
//! [`Backlog`], in order, and goes out first on the next turns, before anything newer. A node
//! paused past the DCMs' timeout (SIGSTOP, a swapping machine) so gets every clear when it
//! resumes. Before 2026-12-08 each send waited up to 1 s (the supervisor's whole loop with it)
//! and then dropped the clear: the node never learnt those events were decided, stored their
//! fragments when its input came to them, and its store filled for good (a 2.8 s pause at the
//! full rate: the L1 at 0-200 Hz to the run's end, a QA pass). A backlog is bounded
//! ([`MAX_BACKLOG_BYTES`]: about a minute of clears at 200 kHz): beyond it, and for a node
//! whose inbox is gone (it died: its restart rejoins from the run's front), messages are
//! dropped and counted (`send_failures`; the node's clear sequence shows the gap). At the stop
//! the backlogs are sent with the send timeout; a node that takes nothing then has the rest of
//! its backlog counted as failures.

use std::collections::VecDeque;
use std::time::Instant;

use rodeo_transport::message::{encode_clear, encode_keepalive};
use rodeo_transport::socket::{Frame, Socket};

use super::Supervisor;
use crate::error::DataflowError;

/// The most bytes of messages one readout node's backlog holds (module docs).
pub(super) const MAX_BACKLOG_BYTES: usize = 64 << 20;

/// The messages one readout node's inbox could not take yet, oldest first (module docs).
#[derive(Debug, Default)]
pub(super) struct Backlog {
    queue: VecDeque<Vec<u8>>,
    bytes: usize,
}

impl Backlog {
    /// Sends what waits, oldest first, without waiting; stops at a full inbox. A message the
    /// node cannot take at all (its inbox gone) is dropped: returns how many were.
    fn drain(&mut self, s: &mut Socket) -> u64 {
        let mut dropped = 0;
        while let Some(m) = self.queue.front() {
            match s.try_send([Frame::Copy(m)]) {
                Ok(()) => {}
                Err(e) if e.is_would_block() => break,
                Err(_) => dropped += 1,
            }
            self.bytes -= m.len();
            self.queue.pop_front();
        }
        dropped
    }

    /// Queues `m` behind the rest; false (not queued) past [`MAX_BACKLOG_BYTES`].
    fn push(&mut self, m: &[u8]) -> bool {
        if self.bytes + m.len() > MAX_BACKLOG_BYTES {
            return false;
        }
        self.bytes += m.len();
        self.queue.push_back(m.to_vec());
        true
    }

    /// Whether nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

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
        self.drain_backlogs(readout);
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

    /// A KeepAlive to every readout node, as a clear goes (`send_to_readout`).
    fn send_keepalive(&mut self, readout: &mut [Socket], now: Instant) {
        self.buf.clear();
        encode_keepalive(&mut self.buf, self.clear_sequence);
        self.send_to_readout(readout);
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
        self.send_to_readout(readout);
        self.summary.cleared += self.clear.len() as u64;
        self.summary.clear_messages += 1;
        self.clear.clear();
        self.oldest_pending_clear = None;
        self.last_clear = now;
        Ok(())
    }

    /// Sends `self.buf` to every readout node: behind its backlog, or at once without waiting;
    /// what its inbox cannot take now joins its backlog (module docs).
    fn send_to_readout(&mut self, readout: &mut [Socket]) {
        self.backlogs.resize_with(readout.len(), Backlog::default);
        for (s, b) in readout.iter_mut().zip(self.backlogs.iter_mut()) {
            self.summary.send_failures += b.drain(s);
            if b.is_empty() {
                match s.try_send([Frame::Copy(&self.buf)]) {
                    Ok(()) => continue,
                    Err(e) if e.is_would_block() => {}
                    Err(_) => {
                        // Its inbox is gone (the node died): counted, its clear sequence
                        // shows the gap.
                        self.summary.send_failures += 1;
                        continue;
                    }
                }
            }
            if !b.push(&self.buf) {
                self.summary.send_failures += 1;
            }
        }
    }

    /// Sends what the readout nodes' backlogs hold, as far as their inboxes take it now.
    fn drain_backlogs(&mut self, readout: &mut [Socket]) {
        for (s, b) in readout.iter_mut().zip(self.backlogs.iter_mut()) {
            if !b.is_empty() {
                self.summary.send_failures += b.drain(s);
            }
        }
    }

    /// At the stop: every backlog sent, each message waiting up to the send timeout; a node
    /// that takes none of it then has the rest counted as failures (module docs).
    pub(super) fn flush_backlogs(&mut self, readout: &mut [Socket]) {
        for (s, b) in readout.iter_mut().zip(self.backlogs.iter_mut()) {
            while let Some(m) = b.queue.pop_front() {
                b.bytes -= m.len();
                if s.send([Frame::Copy(&m)]).is_err() {
                    self.summary.send_failures += 1 + b.queue.len() as u64;
                    b.queue.clear();
                    b.bytes = 0;
                }
            }
        }
    }
}
