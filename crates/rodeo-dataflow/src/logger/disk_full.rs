//! A full disk in a logger (module docs of the logger, "Full disks"), or a directory that can
//! no longer be written (read-only, immutable, removed: handled the same way): how it shows in
//! an error (the kernel's `ENOSPC`/`EDQUOT`, `EROFS`/`EPERM`/`EACCES`/`ENOENT`, or a writer
//! refusing to open a file below the margin), and what the logger does then: every file closed,
//! the events of a failed file not yet synced forgotten, and the next directory used, or
//! writing halted when every one is full or unwritable.

use std::sync::atomic::Ordering;

use super::{Logger, Pending};
use crate::disks::{is_disk_full, is_not_writable};
use crate::error::DataflowError;

/// How a full disk showed itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FullKind {
    /// A write, sync or close failed (`ENOSPC`/`EDQUOT`): the open file is damaged.
    Failed,
    /// A writer refused to open its next file below the margin (the file before is closed).
    Refused,
}

/// Why `e` means the directory in use is full or can no longer be written, as a sentence, and
/// how; `None` for any other error. Full: the kernel's `ENOSPC`/`EDQUOT`, or a writer refusing
/// to open a file below the margin. Not writable ([`is_not_writable`]: read-only, immutable,
/// permission taken away, removed): a file that could not be made or renamed is
/// [`FullKind::Refused`] (nothing written is lost: a file whose rename failed is whole and
/// synced, listed under its `.writing` name), a failed write or sync [`FullKind::Failed`].
pub(super) fn disk_full_reason(e: &DataflowError) -> Option<(String, FullKind)> {
    use rodeo_files::eventstorage::EsError;
    use rodeo_files::rawfile::RawFileError;
    let io_kind = |op: &str, source: &std::io::Error| {
        if is_disk_full(source) {
            Some((FullKind::Failed, "disk full"))
        } else if is_not_writable(source) {
            let kind = if matches!(op, "create" | "rename" | "remove" | "open") {
                FullKind::Refused
            } else {
                FullKind::Failed
            };
            Some((kind, "directory not writable"))
        } else {
            None
        }
    };
    let kind = match e {
        DataflowError::Files { source, .. } => match source {
            RawFileError::Io { op, source, .. } => io_kind(op, source),
            RawFileError::DiskSpace { .. } => Some((FullKind::Refused, "disk full")),
            _ => None,
        },
        DataflowError::EventStorage { source, .. } => match source {
            EsError::Io { op, source, .. } => io_kind(op, source),
            EsError::DiskSpace { .. } => Some((FullKind::Refused, "disk full")),
            _ => None,
        },
        _ => None,
    };
    kind.map(|(k, what)| (format!("{what}: {e}"), k))
}

impl Logger {
    /// The directory in use is full (`why`; `failed`: the stream whose write or sync failed):
    /// closes every file, forgets the events of a failed file that were not synced, and moves
    /// to the next directory, or stops writing when every one is full (module docs).
    pub(super) fn full(&mut self, failed: Option<usize>, why: String) -> Result<(), DataflowError> {
        let name = self.config.name.clone();
        // Streams whose events may not be on disk, with the latest group commit that is.
        let mut lost: Vec<(usize, u64)> = Vec::new();
        for i in 0..self.writers.len() {
            let Some(w) = self.writers[i].take() else {
                continue;
            };
            self.next_sequence[i] = self.next_sequence[i].saturating_add(w.files_opened());
            self.touched[i] = false;
            if failed == Some(i) {
                lost.push((i, w.last_synced()));
                self.closed.extend(w.abandon());
                continue;
            }
            let (closed, r) = w.close(&name);
            self.closed.extend(closed);
            if let Err(e) = r {
                // A file that could not be renamed (a read-only directory) is whole and synced
                // under its `.writing` name: its events are on disk. Anything else failed
                // before the sync.
                let synced = matches!(disk_full_reason(&e), Some((_, FullKind::Refused)));
                tracing::error!("{name}: cannot close a file in a full directory: {e}");
                if !synced {
                    lost.push((i, 0));
                }
            }
        }
        // Events in a file that failed before they were synced are not on disk: not
        // acknowledged, not counted (their DCMs' events are reassigned at the timeout). Those
        // of a commit on its way are lost when its sync of the stream was not done; every
        // other file is closed (synced), so no commit waits for a sync any more.
        let (mut events, mut bytes) = (0u64, 0u64);
        let written = &mut self.written;
        let mut forget = |pending: &mut Vec<Pending>, streams: &[usize]| {
            pending.retain(|p| match p.stream {
                Some(st) if streams.contains(&st) => {
                    written.remove(p.gid);
                    events += 1;
                    bytes += p.bytes;
                    false
                }
                _ => true,
            })
        };
        let all_lost: Vec<usize> = lost.iter().map(|&(s, _)| s).collect();
        forget(&mut self.pending, &all_lost);
        for c in self.commits.queue.iter_mut() {
            let unsynced: Vec<usize> = lost
                .iter()
                .filter(|&&(s, durable)| c.tickets.iter().any(|&(cs, t)| cs == s && t > durable))
                .map(|&(s, _)| s)
                .collect();
            forget(&mut c.pending, &unsynced);
            c.tickets.clear();
        }
        self.summary.events_unsynced += events;
        self.summary.events_written -= events;
        self.summary.bytes_written -= bytes;
        self.counters
            .events_written
            .fetch_sub(events, Ordering::Relaxed);
        self.counters
            .bytes_written
            .fetch_sub(bytes, Ordering::Relaxed);
        match self.disks.move_on(why.clone()) {
            Some(next) => {
                tracing::warn!(
                    "{name}: {why}: writing to {} from now on{}",
                    next.display(),
                    if events > 0 {
                        format!(" ({events} events not synced are left to their reassignment)")
                    } else {
                        String::new()
                    }
                );
                self.summary.directory_moves += 1;
                self.counters
                    .directory_moves
                    .fetch_add(1, Ordering::Relaxed);
            }
            None => {
                let reason = format!(
                    "{name}: every output directory is full or cannot be written, events are \
                     no longer written: {}",
                    self.disks.why_full()
                );
                tracing::error!("{reason}");
                self.summary.disk_full = Some(reason.clone());
                self.counters.disk_full.store(1, Ordering::Relaxed);
                let _ = self.counters.halted.set(reason.clone());
                self.halted = Some(reason);
            }
        }
        Ok(())
    }
}
