//! The group commit of a logger (module docs of the logger, "Group commit"): the events
//! written (or repeated) since the last commit wait as [`Pending`]; the commit syncs the files
//! they touched once, then acknowledges them to their senders, one `EventAck` per DCM.

use std::time::Duration;

use rodeo_transport::message::encode_event_ack;
use rodeo_transport::socket::Frame;

use super::disk_full::disk_full_reason;
use super::Logger;
use crate::error::DataflowError;

/// Longest an event waits for its batch before the group commit (the fdatasync and the
/// acknowledgements): more events share a sync, at the cost of this much latency.
pub const COMMIT_DELAY: Duration = Duration::from_millis(1);

/// An event written (or a duplicate) waiting for the group commit's acknowledgement.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    /// Index of the sender in `peer_ids`.
    pub(super) peer: usize,
    pub(super) gid: u64,
    /// Stream it was written to (`None`: a duplicate, written before).
    pub(super) stream: Option<usize>,
    /// Bytes stored.
    pub(super) bytes: u64,
}

impl Logger {
    /// Syncs the touched files, then acknowledges every pending event to its sender.
    pub(super) fn commit(
        &mut self,
        socket: &mut rodeo_transport::socket::Socket,
    ) -> Result<(), DataflowError> {
        for i in 0..self.writers.len() {
            if !std::mem::take(&mut self.touched[i]) {
                continue;
            }
            let r = match self.writers[i].as_mut() {
                Some(w) => w.sync(&self.config.name),
                None => Ok(()),
            };
            if let Err(e) = r {
                match disk_full_reason(&e) {
                    Some((why, _)) => self.full(Some(i), why)?,
                    None => return Err(e),
                }
            }
        }
        self.summary.commits += 1;
        self.pending.sort_unstable_by_key(|p| p.peer);
        let mut i = 0;
        while i < self.pending.len() {
            let peer = self.pending[i].peer;
            self.ids.clear();
            while i < self.pending.len() && self.pending[i].peer == peer {
                self.ids.push(self.pending[i].gid);
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
        self.pending.clear();
        Ok(())
    }
}
