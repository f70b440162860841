//! The group commit of a logger (module docs of the logger, "Group commit"): the events
//! written (or repeated) since the last commit wait as [`Pending`]; the commit queues a sync of
//! the files they touched in each file's writer thread and becomes an [`InFlight`] commit, and
//! the logger goes on receiving and copying events. Once every one of its syncs is done its
//! events are acknowledged to their senders, one `EventAck` per DCM, oldest commit first.

use std::collections::VecDeque;
use std::time::Duration;

use rodeo_transport::message::encode_event_ack;
use rodeo_transport::socket::Frame;

use super::disk_full::disk_full_reason;
use super::{Logger, Pending};
use crate::error::DataflowError;

/// Longest an event waits for its batch before the group commit starts (its fdatasync, then
/// the acknowledgements), unless the sync of the commit before is still on its way: more
/// events share a sync, at the cost of this much latency. 2 ms by measurement (default
/// partition, `rodeo bench partition --processes`, 2026-12-07): with 1 ms the file's writer
/// thread made a sync every 0.9 ms (1,370 in a 300,000-event run) and took 0.47-0.51 us of CPU
/// per L1 accept, with 2 ms 0.32-0.33 us, with 4 ms 0.20-0.22 us but the DCMs, which keep an
/// accepted event in its slot until it is acknowledged, 0.02-0.04 us more each.
pub const COMMIT_DELAY: Duration = Duration::from_millis(2);

/// A group commit on its way: the syncs it waits for and the events it acknowledges then.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    /// `(stream, ticket)`: the stream's writer must report the ticket on disk. Emptied when the
    /// files are closed (a full directory: closed files are synced, or their events forgotten).
    pub(super) tickets: Vec<(usize, u64)>,
    /// The events it acknowledges.
    pub(super) pending: Vec<Pending>,
}

/// The group commits on their way, oldest first, and emptied ones kept for reuse (no
/// allocation per commit once the queue has its length).
#[derive(Debug, Default)]
pub(super) struct Commits {
    pub(super) queue: VecDeque<InFlight>,
    spare: Vec<InFlight>,
}

impl Logger {
    /// Starts a group commit of the pending events: a sync of each file they touched, queued
    /// in its writer thread (EventStorage: done before this returns). [`Logger::settle`]
    /// acknowledges them once the syncs are done.
    pub(super) fn commit(&mut self) -> Result<(), DataflowError> {
        let mut c = self.commits.spare.pop().unwrap_or_default();
        std::mem::swap(&mut c.pending, &mut self.pending);
        self.commits.queue.push_back(c);
        for i in 0..self.writers.len() {
            if !std::mem::take(&mut self.touched[i]) {
                continue;
            }
            let r = match self.writers[i].as_mut() {
                Some(w) => w.start_sync(&self.config.name).map(Some),
                None => Ok(None),
            };
            match r {
                Ok(Some(ticket)) => {
                    if let Some(c) = self.commits.queue.back_mut() {
                        c.tickets.push((i, ticket));
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    // A sync that never started is never done: `full` forgets the stream's
                    // events of this commit (not on disk), as those of a sync that failed.
                    if let Some(c) = self.commits.queue.back_mut() {
                        c.tickets.push((i, u64::MAX));
                    }
                    match disk_full_reason(&e) {
                        Some((why, _)) => self.full(Some(i), why)?,
                        None => return Err(e),
                    }
                }
            }
        }
        self.summary.commits += 1;
        Ok(())
    }

    /// Acknowledges every group commit whose syncs are done, oldest first; with `wait`, waits
    /// for each (the end of the run). A failed write or sync is a full directory
    /// ([`Logger::full`]: its events not on disk are forgotten, not acknowledged) or the
    /// logger's error.
    pub(super) fn settle(
        &mut self,
        socket: &mut rodeo_transport::socket::Socket,
        wait: bool,
    ) -> Result<(), DataflowError> {
        while let Some(front) = self.commits.queue.front_mut() {
            let Some(&(stream, ticket)) = front.tickets.last() else {
                let done = self.commits.queue.pop_front().unwrap_or_default();
                self.acknowledge(socket, done);
                continue;
            };
            let name = &self.config.name;
            let r = match self.writers.get_mut(stream).and_then(Option::as_mut) {
                // Closed since (a full directory): synced at close, or forgotten by `full`.
                None => Ok(true),
                Some(w) if wait => w.wait_synced(name, ticket).map(|()| true),
                Some(w) => w.synced(name).map(|done| done >= ticket),
            };
            match r {
                Ok(true) => {
                    front.tickets.pop();
                }
                Ok(false) => return Ok(()),
                Err(e) => match disk_full_reason(&e) {
                    Some((why, _)) => self.full(Some(stream), why)?,
                    None => return Err(e),
                },
            }
        }
        Ok(())
    }

    /// Group commits on their way.
    pub(super) fn commits_in_flight(&self) -> usize {
        self.commits.queue.len()
    }

    /// Acknowledges a done commit's events to their senders, one `EventAck` per DCM.
    fn acknowledge(&mut self, socket: &mut rodeo_transport::socket::Socket, mut c: InFlight) {
        // Only a commit that wrote something moves the written rate's end (not one of
        // repeats only: a late copy from a slow DCM writes nothing).
        if c.pending.iter().any(|p| p.stream.is_some()) {
            self.last_durable = Some(std::time::Instant::now());
        }
        c.pending.sort_unstable_by_key(|p| p.peer);
        let mut i = 0;
        while i < c.pending.len() {
            let peer = c.pending[i].peer;
            self.ids.clear();
            while i < c.pending.len() && c.pending[i].peer == peer {
                self.ids.push(c.pending[i].gid);
                i += 1;
            }
            self.ack.clear();
            encode_event_ack(&mut self.ack, 0, &self.ids);
            // A DCM that went away cannot be acknowledged; its events are reassigned and
            // written again (then dropped here as duplicates). One that does not read is not
            // waited for (the thread serves every DCM): its acknowledgement is dropped, counted.
            match socket.try_send_to(&self.peer_ids[peer], [Frame::Copy(&self.ack)]) {
                Ok(()) => self.summary.acks_sent += 1,
                Err(e) if e.is_would_block() => {
                    if self.summary.acks_dropped == 0 {
                        tracing::warn!(
                            "logger: a DCM does not read its acknowledgements (queue full); \
                             dropping them (counted)"
                        );
                    }
                    self.summary.acks_dropped += 1;
                }
                Err(_) => {}
            }
        }
        c.pending.clear();
        c.tickets.clear();
        self.commits.spare.push(c);
    }
}
