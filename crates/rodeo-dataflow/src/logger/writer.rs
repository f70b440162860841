//! One stream's open files, in the logger's format: rodeo's container through the raw-file
//! writer or ATLAS EventStorage through `EsWriter` (module docs of the logger, "File
//! formats"); each closed file cross-checked on disk without reading its events back.

use std::path::{Path, PathBuf};

use rodeo_files::eventstorage::{split_stream, EsCompression, EsWriter, EsWriterConfig};
use rodeo_files::rawfile::{RawFileConfig, RawFileWriter};

use super::config::{FileFormat, LoggerCompression, LoggerConfig};
use crate::error::DataflowError;

/// One stream's open files, in the logger's format.
#[derive(Debug)]
pub(super) enum StreamWriter {
    Rodeo(RawFileWriter),
    Es(EsWriter),
}

impl StreamWriter {
    /// Opens the first file of stream `stream` in `dir`, numbered `sequence`, refusing to open
    /// any file with less than `margin` bytes free.
    pub(super) fn create(
        c: &LoggerConfig,
        dir: &Path,
        stream: &str,
        sequence: u32,
        margin: u64,
    ) -> Result<StreamWriter, DataflowError> {
        let app = || c.name.clone();
        match c.format {
            FileFormat::Rodeo => {
                let mut cfg = RawFileConfig::new(dir, c.run, &c.name, stream);
                cfg.max_file_bytes = c.max_file_bytes;
                // After files of a previous life of this logger (restarted into the run).
                cfg.first_sequence = sequence.max(rodeo_files::recover::next_sequence(
                    dir, c.run, stream, &c.name,
                ));
                cfg.free_disk_margin_bytes = margin;
                let w = RawFileWriter::create(cfg)
                    .map_err(|source| DataflowError::Files { app: app(), source })?;
                if let Some(why) = w.direct_io_fallback() {
                    tracing::warn!("{}: no direct I/O for stream {stream}: {why}", c.name);
                }
                Ok(StreamWriter::Rodeo(w))
            }
            FileFormat::EventStorage => {
                let (t, n) = split_stream(stream);
                let mut cfg = EsWriterConfig::new(dir, &c.project, c.run, t, n, &c.name);
                cfg.run.rec_enable = 1;
                cfg.max_file_bytes = c.max_file_bytes;
                cfg.free_disk_margin_bytes = margin;
                cfg.extra_free_strings.clone_from(&c.free_strings);
                cfg.compression = match c.compression {
                    LoggerCompression::Zlib => EsCompression::Zlib { level: 1 },
                    _ => EsCompression::None,
                };
                EsWriter::create(cfg)
                    .map(StreamWriter::Es)
                    .map_err(|source| DataflowError::EventStorage { app: app(), source })
            }
        }
    }

    /// Writes one event (`compressed`: a zstd event, rodeo's record flag; `summed`: the
    /// Adler-32 of its bytes when known, so rodeo's writer does not sum them again); returns
    /// the bytes stored.
    pub(super) fn write(
        &mut self,
        app: &str,
        words: &[u32],
        compressed: bool,
        summed: Option<u32>,
    ) -> Result<u64, DataflowError> {
        match self {
            StreamWriter::Rodeo(w) => match summed {
                Some(sum) => w.write_event_summed(words, u32::from(compressed), sum),
                None => w.write_event(words, u32::from(compressed)),
            }
            .map(|_| 4 * words.len() as u64)
            .map_err(files_error(app)),
            StreamWriter::Es(w) => {
                let before = w.data_bytes();
                w.write_event(words)
                    .map(|_| w.data_bytes() - before)
                    .map_err(es_error(app))
            }
        }
    }

    /// Starts a group commit of every event written so far and returns its ticket: rodeo's
    /// container queues the sync in its writer thread and returns at once (the ticket is done
    /// when [`StreamWriter::synced`] reaches it); EventStorage syncs before it returns (ticket
    /// 0: nothing to wait for).
    pub(super) fn start_sync(&mut self, app: &str) -> Result<u64, DataflowError> {
        match self {
            StreamWriter::Rodeo(w) => w.start_sync().map_err(files_error(app)),
            StreamWriter::Es(w) => w.sync().map(|()| 0).map_err(es_error(app)),
        }
    }

    /// The latest ticket whose events are on disk, without waiting (a failed write or sync of
    /// the open file is returned: its events not yet synced are not on disk).
    pub(super) fn synced(&mut self, app: &str) -> Result<u64, DataflowError> {
        match self {
            StreamWriter::Rodeo(w) => w.synced().map_err(files_error(app)),
            StreamWriter::Es(_) => Ok(0),
        }
    }

    /// Waits until `ticket` is on disk (or its write or sync failed: the error).
    pub(super) fn wait_synced(&mut self, app: &str, ticket: u64) -> Result<(), DataflowError> {
        match self {
            StreamWriter::Rodeo(w) => w.wait_synced(ticket).map_err(files_error(app)),
            StreamWriter::Es(_) => Ok(()),
        }
    }

    /// The latest ticket known to be on disk, without looking (after a failure: what was on
    /// disk before it).
    pub(super) fn last_synced(&self) -> u64 {
        match self {
            StreamWriter::Rodeo(w) => w.last_synced(),
            StreamWriter::Es(_) => 0,
        }
    }

    /// Files opened so far (the next writer of the stream goes on numbering from there).
    pub(super) fn files_opened(&self) -> u32 {
        match self {
            StreamWriter::Rodeo(w) => u32::try_from(w.stats().files_opened).unwrap_or(u32::MAX),
            StreamWriter::Es(_) => 0,
        }
    }

    /// Closes the open file; returns every file closed, each cross-checked on disk without
    /// reading its events back (see [`LoggerSummary::events_verified`](super::LoggerSummary::events_verified)), and whether the last
    /// close failed (the file is then left `.writing`).
    pub(super) fn close(self, app: &str) -> (Vec<Closed>, Result<(), DataflowError>) {
        match self {
            StreamWriter::Rodeo(mut w) => {
                let r = w.rotate(0).map_err(files_error(app));
                (StreamWriter::Rodeo(w).abandon(), r)
            }
            StreamWriter::Es(mut w) => {
                let r = w.rotate(0).map_err(es_error(app));
                (StreamWriter::Es(w).abandon(), r)
            }
        }
    }

    /// Leaves the open file as a crash would (`.writing`, no end record: a write or sync
    /// failed); returns the files closed before, cross-checked as in [`StreamWriter::close`].
    pub(super) fn abandon(self) -> Vec<Closed> {
        match self {
            StreamWriter::Rodeo(w) => w
                .abandon()
                .into_iter()
                .map(|c| Closed {
                    problem: c.check_on_disk().err().map(|e| e.to_string()),
                    size_bytes: c.file_bytes,
                    adler32: Some(c.file_adler),
                    path: c.path,
                    events: c.events,
                })
                .collect(),
            StreamWriter::Es(w) => w
                .abandon()
                .into_iter()
                .map(|c| {
                    // EventStorage records carry no checksum: the size is checked.
                    let problem = match std::fs::metadata(&c.path) {
                        Ok(m) if m.len() == c.file_bytes => None,
                        Ok(m) => Some(format!(
                            "file size {} on disk, {} written",
                            m.len(),
                            c.file_bytes
                        )),
                        Err(e) => Some(format!("cannot stat: {e}")),
                    };
                    Closed {
                        path: c.path,
                        events: c.events,
                        size_bytes: c.file_bytes,
                        adler32: None,
                        problem,
                    }
                })
                .collect(),
        }
    }
}

/// A raw-file writer's error as the logger's `app`'s.
fn files_error(app: &str) -> impl FnOnce(rodeo_files::rawfile::RawFileError) -> DataflowError + '_ {
    move |source| DataflowError::Files {
        app: app.to_string(),
        source,
    }
}

/// An EventStorage writer's error as the logger's `app`'s.
fn es_error(app: &str) -> impl FnOnce(rodeo_files::eventstorage::EsError) -> DataflowError + '_ {
    move |source| DataflowError::EventStorage {
        app: app.to_string(),
        source,
    }
}

/// Whether `e` is a writer's refusal of one event (its bytes, not the disk): the EventStorage
/// writer's [`EsError::BadEvent`](rodeo_files::eventstorage::EsError::BadEvent).
pub(super) fn is_bad_event(e: &DataflowError) -> bool {
    matches!(
        e,
        DataflowError::EventStorage {
            source: rodeo_files::eventstorage::EsError::BadEvent { .. },
            ..
        }
    )
}

/// A file a logger closed, with the verdict of its cross-check on disk.
pub(super) struct Closed {
    /// The file.
    pub(super) path: PathBuf,
    /// Events in it.
    pub(super) events: u64,
    /// Its size in bytes, as written.
    pub(super) size_bytes: u64,
    /// The Adler-32 its bytes must have, summed as it was written (`ClosedFile::file_adler`;
    /// `None`: EventStorage, whose writer does not sum its files).
    pub(super) adler32: Option<u32>,
    /// What its cross-check found wrong (`None`: nothing).
    pub(super) problem: Option<String>,
}
