//! A logger's first act: closing the files its previous life left open.
//!
//! A logger restarted into a running run (its process was killed) finds its `.writing` files
//! of the run in its directory and has them recovered ([`rodeo_files::recover`]: every
//! complete event kept, the end record written, the file renamed). The kept events count as
//! written by this logger (they are the run's events, on disk, read back with their
//! checksums), and their global ids are remembered, so the copies the DCMs resend (their
//! acknowledgements died with the old process) are dropped as duplicates and acknowledged:
//! every accepted event is in the files exactly once. The files earlier lives closed (rotated,
//! or recovered by a life killed in its turn) are read and counted the same way, not
//! recovered: a logger killed twice in a run still accounts for every file of the run. Only rodeo's container is recovered; an
//! EventStorage file left open stays `.writing` (a warning says so). In a directory that can no
//! longer be written, the files are read and counted where they lie (they stay `.writing`) and
//! the logger then leaves the directory as a full one.

use rodeo_files::recover::{read_closed, read_left_open, recover_files};

use super::config::FileFormat;
use super::Logger;
use crate::error::DataflowError;

impl Logger {
    /// Recovers the files left open in this logger's directory (module docs).
    pub(super) fn recover_left_open(&mut self) -> Result<(), DataflowError> {
        let c = &self.config;
        if c.format != FileFormat::Rodeo {
            let left = std::fs::read_dir(&c.directory)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.ends_with(".writing") && n.contains(c.name.as_str())
                })
                .count();
            if left > 0 {
                tracing::warn!(
                    "{}: {left} EventStorage file(s) left open by a previous run of this \
                     logger stay .writing (recovery handles rodeo's container only)",
                    c.name
                );
            }
            return Ok(());
        }
        // A directory that can no longer be written (read-only, immutable) cannot take a
        // recovery: the files are read where they lie and their events counted, and the
        // logger then finds the directory unwritable at its first check and leaves it (the
        // next directory, or a halt in order): never a restart that fails on it again.
        let read_only = crate::disks::writable(&c.directory).err();
        // The files earlier lives closed (rotated, or recovered by a life that was killed in
        // its turn) are this logger's events of the run too, and no summary counts them: read
        // first, before the recovery below closes more.
        let closed =
            read_closed(&c.directory, c.run, &c.name).map_err(|e| DataflowError::Config {
                app: c.name.clone(),
                reason: e.to_string(),
            })?;
        for r in closed {
            tracing::warn!(
                "{}: counted {} ({} events) closed by an earlier life of this logger",
                self.config.name,
                r.path.display(),
                r.events
            );
            for &gid in &r.global_ids {
                self.written.insert(gid);
            }
            self.summary.events_written += r.events;
            self.summary.events_verified += r.events;
            self.summary.bytes_written += r.event_bytes;
            self.summary.files.push(r.path);
        }
        let c = &self.config;
        let recovered = match &read_only {
            None => recover_files(&c.directory, c.run, &c.name),
            Some(why) => {
                tracing::warn!(
                    "{}: {why}: the files left open are counted where they lie, not recovered",
                    c.name
                );
                read_left_open(&c.directory, c.run, &c.name)
            }
        }
        .map_err(|e| DataflowError::Config {
            app: c.name.clone(),
            reason: e.to_string(),
        })?;
        for r in recovered {
            tracing::warn!(
                "{}: recovered {} ({} complete events{}{}{})",
                self.config.name,
                r.path.display(),
                r.events,
                r.dropped_tail
                    .as_deref()
                    .map_or(String::new(), |t| format!("; dropped what follows: {t}")),
                r.start_damaged
                    .as_deref()
                    .map_or(String::new(), |t| format!(
                        "; start record rewritten from the file name: {t}"
                    )),
                r.kept_damaged.as_deref().map_or(String::new(), |k| format!(
                    "; the damaged original kept as {} for an expert (events after the \
                     damage may be recoverable by hand)",
                    k.display()
                ))
            );
            for &gid in &r.global_ids {
                self.written.insert(gid);
            }
            self.summary.events_written += r.events;
            self.summary.events_verified += r.events;
            self.summary.bytes_written += r.event_bytes;
            self.summary.recovered_events += r.events;
            self.summary.files.push(r.path);
        }
        Ok(())
    }
}
