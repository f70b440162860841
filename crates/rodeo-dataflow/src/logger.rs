//! The logger (the seeds' SFO): writes accepted events to raw-data files, per stream, and
//! acknowledges them once they are safely on disk.
//!
//! # Protocol
//!
//! A ROUTER socket bound at the configured endpoint receives `Event` messages from DCMs and
//! answers each sender with `EventAck` messages listing the global ids now written.
//!
//! # Group commit
//!
//! An acknowledgement promises the event is on disk, so the logger must `fdatasync` before it
//! acknowledges; doing that per event would cap a logger at a few thousand events per second.
//! It writes every event that has arrived (up to `batch`), syncs the files it touched once, then
//! acknowledges the whole batch: the cost of a sync is shared by the batch, and under load the
//! batch grows by itself.
//!
//! # Exactly once
//!
//! An event reassigned after a timeout may reach the logger twice (the slow node finishing it
//! after all). The logger remembers the global ids it wrote in a [`DedupWindow`] (a low-water
//! mark and a sliding bitmap over the last [`DEFAULT_WINDOW_IDS`] ids, 2 MiB whatever the
//! length of the run) and drops a repeat, counting it and still acknowledging it, so every
//! event is written once. A repeat can only come within the supervisor's event and node
//! timeouts (seconds), far inside the window.
//!
//! # Full disks
//!
//! The files go to the first of the configured directories ([`LoggerConfig::directory`], then
//! [`LoggerConfig::more_directories`]) that has room ([`crate::disks`]): its free space is
//! checked every few MiB written and at each file rotation, against the margin. When it is
//! full (the check, or the kernel's `ENOSPC`/`EDQUOT` on a write or an `fdatasync`), every
//! open file is closed (a file whose write failed is left `.writing`, as a crash would leave
//! it; its events not yet synced are not acknowledged and not counted, so their DCMs' events
//! are reassigned at the timeout) and the logger goes on in the next directory. When every
//! directory is full it stops writing: events are neither written nor acknowledged (counted
//! as refused), which is back-pressure on the DCMs and, through their credits, on the L1;
//! [`LoggerCounters::halted`] says why (the application reports it, the run stops in order)
//! and [`LoggerSummary::disk_full`] puts it in the balance sheet. No event is dropped silently.
//!
//! # File formats
//!
//! [`FileFormat::Rodeo`] (the default) writes rodeo's container (`specs/raw-file.md`) with the
//! raw-file writer, optionally zstd events; [`FileFormat::EventStorage`] writes ATLAS
//! EventStorage version 5 (`specs/eventstorage.md`) with `EsWriter`: ATLAS file names
//! (`<project>.<run>.<type>_<name>.daq.RAW._lb0000._<app>._0001.data`, the stream `physics_Main`
//! split at its first `_` into type and name, a name without `_` taking type `physics`), free
//! strings `GUID=`, `Stream=`, `Project=`, `LumiBlock=` (and `Compression=zlib`), the run
//! parameters, the end record, `.writing` then rename, optionally zlib data blocks (the ATLAS
//! readers' codec). The group commit and the fsync on close are the same for both.
//! [`LoggerConfig::check`] refuses a codec the format does not have (zstd in EventStorage, zlib
//! in rodeo's container).
//!
//! # Bad input
//!
//! A message that does not decode, or an event fragment that does not parse, is counted,
//! logged and dropped (never acknowledged: its sender will see the event time out and the
//! supervisor will reassign it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_files::eventstorage::{split_stream, EsCompression, EsWriter, EsWriterConfig};
use rodeo_files::rawfile::{RawFileConfig, RawFileWriter};
use rodeo_format::checksum::bytes_as_words;
use rodeo_format::compress::{EventCompressor, DEFAULT_ZSTD_LEVEL};
use rodeo_format::fragment::FullEvent;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{decode, encode_event_ack, Message};
use rodeo_transport::socket::{Frame, Received, SocketKind, Transport};

use crate::dedup::{DedupWindow, DEFAULT_WINDOW_IDS};
use crate::disks::{is_disk_full, DiskMargin, Disks};
use crate::{AppHandle, DataflowError};

mod recovery;

/// Longest an event waits for its batch before the group commit (the fdatasync and the
/// acknowledgements): more events share a sync, at the cost of this much latency.
pub const COMMIT_DELAY: Duration = Duration::from_millis(1);

/// Configuration of a logger.
#[derive(Debug, Clone)]
pub struct LoggerConfig {
    /// Application name (in file names and errors).
    pub name: String,
    /// Endpoint to bind (DCMs connect here).
    pub endpoint: String,
    /// Output directory.
    pub directory: PathBuf,
    /// Further output directories, used in order once `directory` is full (module docs, "Full
    /// disks"; made when first used).
    pub more_directories: Vec<PathBuf>,
    /// Room every output directory keeps free.
    pub margin: DiskMargin,
    /// Run number.
    pub run: u32,
    /// Stream names, by stream index; events for other indices go to `stream<N>`.
    pub streams: Vec<String>,
    /// Rotate files at this size.
    pub max_file_bytes: u64,
    /// Most events per group commit.
    pub batch: usize,
    /// The container of the files.
    pub format: FileFormat,
    /// How events are compressed (a codec of `format`: see [`LoggerConfig::check`]).
    pub compression: LoggerCompression,
    /// EventStorage project tag (first part of the file names, `Project=`).
    pub project: String,
    /// ZeroMQ high-water mark of its socket (default [`crate::DEFAULT_HIGH_WATER_MARK`]).
    pub high_water_mark: u32,
    /// Largest incoming message of its sockets, in bytes (ZMQ_MAXMSGSIZE, or the shared-memory
    /// inbox's limit): larger ones are refused before they are buffered (`None`, the default:
    /// no limit). A partition sets it from `[transport] max_message_bytes`.
    pub max_message_bytes: Option<usize>,
}

/// The container a logger writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileFormat {
    /// rodeo's own container (`specs/raw-file.md`), with a checksum per record.
    #[default]
    Rodeo,
    /// ATLAS EventStorage version 5 (`specs/eventstorage.md`), what offline software reads.
    EventStorage,
}

/// How a logger compresses events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoggerCompression {
    /// Events as they are.
    #[default]
    None,
    /// zstd payloads (compression type 1), rodeo's container only.
    Zstd,
    /// zlib data blocks (`Compression=zlib`, level 1 as ATLAS), EventStorage only.
    Zlib,
}

impl LoggerConfig {
    /// A logger `name` binding `endpoint`, writing run `run` into `directory`, one stream
    /// `physics_Main`, 1 GiB files, batches of 256.
    pub fn new(name: &str, endpoint: &str, directory: PathBuf, run: u32) -> LoggerConfig {
        LoggerConfig {
            name: name.to_string(),
            endpoint: endpoint.to_string(),
            directory,
            more_directories: Vec::new(),
            margin: DiskMargin::default(),
            run,
            streams: vec!["physics_Main".into()],
            max_file_bytes: 1 << 30,
            batch: 256,
            format: FileFormat::Rodeo,
            compression: LoggerCompression::None,
            project: "data_test".to_string(),
            high_water_mark: crate::DEFAULT_HIGH_WATER_MARK,
            max_message_bytes: None,
        }
    }

    /// Checks that the compression is a codec of the format and, for EventStorage, that the
    /// project, application and stream names can be parts of an ATLAS file name. The message
    /// says what to use instead.
    pub fn check(&self) -> Result<(), String> {
        match (self.format, self.compression) {
            (FileFormat::EventStorage, LoggerCompression::Zstd) => {
                return Err(
                    "compression \"zstd\" is not an EventStorage codec (ATLAS readers \
                     decompress zlib only): use compression = \"zlib\" or \"none\" with \
                     format = \"eventstorage\", or format = \"rodeo\" for zstd"
                        .into(),
                )
            }
            (FileFormat::Rodeo, LoggerCompression::Zlib) => {
                return Err(
                    "compression \"zlib\" is EventStorage's codec: rodeo's container \
                     compresses with zstd; use compression = \"zstd\" or \"none\" with \
                     format = \"rodeo\", or format = \"eventstorage\" for zlib"
                        .into(),
                )
            }
            _ => {}
        }
        if self.format == FileFormat::EventStorage {
            use rodeo_files::eventstorage::valid_name_part;
            let name_ok = |s: &str| valid_name_part(s);
            if !name_ok(&self.project) {
                return Err(format!(
                    "project {:?}: 1 to 255 ASCII letters, digits, '-' or '_' (part of the \
                     EventStorage file names)",
                    self.project
                ));
            }
            if !name_ok(&self.name) {
                return Err(format!(
                    "application name {:?}: 1 to 255 ASCII letters, digits, '-' or '_' (part of \
                     the EventStorage file names)",
                    self.name
                ));
            }
            for s in &self.streams {
                let (t, n) = split_stream(s);
                if !name_ok(t) || t.contains('_') || !name_ok(n) {
                    return Err(format!(
                        "stream {s:?}: \"<type>_<name>\" (or a name alone, of type physics) \
                         of ASCII letters, digits, '-' and '_' (part of the EventStorage file \
                         names)"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// One stream's open files, in the logger's format.
#[derive(Debug)]
enum StreamWriter {
    Rodeo(RawFileWriter),
    Es(EsWriter),
}

impl StreamWriter {
    /// Opens the first file of stream `stream` in `dir`, numbered `sequence`, refusing to open
    /// any file with less than `margin` bytes free.
    fn create(
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

    /// Writes one event (`compressed`: a zstd event, rodeo's record flag); returns the bytes
    /// stored.
    fn write(&mut self, app: &str, words: &[u32], compressed: bool) -> Result<u64, DataflowError> {
        match self {
            StreamWriter::Rodeo(w) => w
                .write_event(words, u32::from(compressed))
                .map(|_| 4 * words.len() as u64)
                .map_err(|source| DataflowError::Files {
                    app: app.to_string(),
                    source,
                }),
            StreamWriter::Es(w) => {
                let before = w.data_bytes();
                w.write_event(words)
                    .map(|_| w.data_bytes() - before)
                    .map_err(|source| DataflowError::EventStorage {
                        app: app.to_string(),
                        source,
                    })
            }
        }
    }

    /// Flushes and `fdatasync`s the open file.
    fn sync(&mut self, app: &str) -> Result<(), DataflowError> {
        match self {
            StreamWriter::Rodeo(w) => w.sync().map_err(|source| DataflowError::Files {
                app: app.to_string(),
                source,
            }),
            StreamWriter::Es(w) => w.sync().map_err(|source| DataflowError::EventStorage {
                app: app.to_string(),
                source,
            }),
        }
    }

    /// Files opened so far (the next writer of the stream goes on numbering from there).
    fn files_opened(&self) -> u32 {
        match self {
            StreamWriter::Rodeo(w) => u32::try_from(w.stats().files_opened).unwrap_or(u32::MAX),
            StreamWriter::Es(_) => 0,
        }
    }

    /// Closes the open file; returns every file closed, each cross-checked on disk without
    /// reading its events back (see [`LoggerSummary::events_verified`]), and whether the last
    /// close failed (the file is then left `.writing`).
    fn close(self, app: &str) -> (Vec<Closed>, Result<(), DataflowError>) {
        match self {
            StreamWriter::Rodeo(mut w) => {
                let r = w.rotate(0).map_err(|source| DataflowError::Files {
                    app: app.to_string(),
                    source,
                });
                (StreamWriter::Rodeo(w).abandon(), r)
            }
            StreamWriter::Es(mut w) => {
                let r = w.rotate(0).map_err(|source| DataflowError::EventStorage {
                    app: app.to_string(),
                    source,
                });
                (StreamWriter::Es(w).abandon(), r)
            }
        }
    }

    /// Leaves the open file as a crash would (`.writing`, no end record: a write or sync
    /// failed); returns the files closed before, cross-checked as in [`StreamWriter::close`].
    fn abandon(self) -> Vec<Closed> {
        match self {
            StreamWriter::Rodeo(w) => w
                .abandon()
                .into_iter()
                .map(|c| Closed {
                    problem: c.check_on_disk().err().map(|e| e.to_string()),
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
                        problem,
                    }
                })
                .collect(),
        }
    }
}

/// How a full disk showed itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FullKind {
    /// A write, sync or close failed (`ENOSPC`/`EDQUOT`): the open file is damaged.
    Failed,
    /// A writer refused to open its next file below the margin (the file before is closed).
    Refused,
}

/// Why `e` means the disk is full (the kernel's `ENOSPC`/`EDQUOT`, or a writer refusing to
/// open a file below the margin), as a sentence, and how; `None` for any other error.
fn disk_full_reason(e: &DataflowError) -> Option<(String, FullKind)> {
    use rodeo_files::eventstorage::EsError;
    use rodeo_files::rawfile::RawFileError;
    let kind = match e {
        DataflowError::Files { source, .. } => match source {
            RawFileError::Io { source, .. } if is_disk_full(source) => Some(FullKind::Failed),
            RawFileError::DiskSpace { .. } => Some(FullKind::Refused),
            _ => None,
        },
        DataflowError::EventStorage { source, .. } => match source {
            EsError::Io { source, .. } if is_disk_full(source) => Some(FullKind::Failed),
            EsError::DiskSpace { .. } => Some(FullKind::Refused),
            _ => None,
        },
        _ => None,
    };
    kind.map(|k| (format!("disk full: {e}"), k))
}

/// A file a logger closed, with the verdict of its cross-check on disk.
struct Closed {
    path: PathBuf,
    events: u64,
    problem: Option<String>,
}

/// What a logger did in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoggerSummary {
    /// Events written (each once).
    pub events_written: u64,
    /// Bytes of events written, as stored (compressed when compressed).
    pub bytes_written: u64,
    /// Repeated events dropped (still acknowledged).
    pub duplicates: u64,
    /// Messages or events that could not be decoded (dropped, not acknowledged).
    pub bad_messages: u64,
    /// Group commits (fdatasync rounds).
    pub commits: u64,
    /// EventAck messages sent.
    pub acks_sent: u64,
    /// EventAck messages dropped because the DCM's queue was full (it does not read): the
    /// logger never waits for one DCM; the events' reassignment writes them again, dropped
    /// here as duplicates and acknowledged.
    #[serde(default)]
    pub acks_dropped: u64,
    /// Files closed, in order.
    pub files: Vec<PathBuf>,
    /// Events in files cross-checked after their close: every record's Adler-32 computed as
    /// its bytes went into the write buffer (nothing is read back), then the file's size and
    /// its end record (event count, bytes, Adler-32 over the records) read back and compared
    /// with what the writer counted and summed (EventStorage: the size). A full re-read is
    /// `rodeo run --verify-after` / `[logger] verify_after` (`rodeo_files::verify::check_file`).
    #[serde(default)]
    pub events_verified: u64,
    /// Files whose cross-check failed, each with what was wrong (empty in a good run).
    #[serde(default)]
    pub verify_problems: Vec<String>,
    /// Nanoseconds from the first event written to the last, on the logger's clock (0 with
    /// fewer than two): the written rate is `bytes_written / write_span_ns`.
    #[serde(default)]
    pub write_span_ns: u64,
    /// Why every output directory became full (`None`: the run ended with room left); the
    /// balance sheet shows it as a problem.
    #[serde(default)]
    pub disk_full: Option<String>,
    /// Event messages refused because every directory was full: neither written nor
    /// acknowledged (an event resent after its reassignment counts again).
    #[serde(default)]
    pub events_refused: u64,
    /// Events written into a file whose write or sync then failed (disk full) before they
    /// were synced: not acknowledged, not counted as written (their DCMs' events are
    /// reassigned at the timeout).
    #[serde(default)]
    pub events_unsynced: u64,
    /// Moves to the next output directory (the one before was full).
    #[serde(default)]
    pub directory_moves: u64,
    /// Ids below the duplicate detector's window, counted as duplicates without having been
    /// seen (0 unless an event came back more than the window late).
    #[serde(default)]
    pub late_ids: u64,
    /// Events kept from files a previous life of this logger left open (restarted into the
    /// run; included in `events_written` and `files`).
    #[serde(default)]
    pub recovered_events: u64,
}

/// Live counters of a logger, readable while it runs.
#[derive(Debug, Default)]
pub struct LoggerCounters {
    /// Events written.
    pub events_written: std::sync::atomic::AtomicU64,
    /// Bytes written.
    pub bytes_written: std::sync::atomic::AtomicU64,
    /// 1 while every output directory is full (the logger writes nothing), else 0.
    pub disk_full: std::sync::atomic::AtomicU64,
    /// Moves to the next output directory.
    pub directory_moves: std::sync::atomic::AtomicU64,
    /// Event messages refused because every directory was full.
    pub events_refused: std::sync::atomic::AtomicU64,
    /// Messages that did not decode or were not expected (ignored), live.
    pub bad_messages: std::sync::atomic::AtomicU64,
    /// Why the logger stopped writing (every directory full), set once: the application
    /// reports it and the run stops in order.
    pub halted: std::sync::OnceLock<String>,
}

/// Starts a logger thread; the socket is bound before this returns.
pub fn spawn(
    config: LoggerConfig,
    transport: &Transport,
    counters: Arc<LoggerCounters>,
) -> Result<AppHandle<LoggerSummary>, DataflowError> {
    let app = config.name.clone();
    config.check().map_err(|reason| DataflowError::Config {
        app: app.clone(),
        reason,
    })?;
    let endpoint = Endpoint::parse(&config.endpoint).map_err(|source| DataflowError::Endpoint {
        app: app.clone(),
        source,
    })?;
    let terr = |what: &str| {
        let app = app.clone();
        let what = what.to_string();
        move |source| DataflowError::Transport { app, what, source }
    };
    let socket = transport
        .socket(SocketKind::Router)
        .map_err(terr("create socket"))?;
    socket
        .set_high_water_marks(config.high_water_mark)
        .map_err(terr("set high-water marks"))?;
    if let Some(n) = config.max_message_bytes {
        socket
            .set_max_message_size(i64::try_from(n).unwrap_or(i64::MAX))
            .map_err(terr("set max message size"))?;
    }
    socket
        .bind(&endpoint)
        .map_err(terr(&format!("bind {}", config.endpoint)))?;
    std::fs::create_dir_all(&config.directory).map_err(|e| DataflowError::Config {
        app: app.clone(),
        reason: format!("cannot create {}: {e}", config.directory.display()),
    })?;
    let mut logger = Logger::new(config, counters);
    logger.recover_left_open()?;
    AppHandle::spawn(&app, move |stop| logger.run(socket, &stop))
}

/// An event written (or a duplicate) waiting for the group commit's acknowledgement.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// Index of the sender in `peer_ids`.
    peer: usize,
    gid: u64,
    /// Stream it was written to (`None`: a duplicate, written before).
    stream: Option<usize>,
    /// Bytes stored.
    bytes: u64,
}

struct Logger {
    config: LoggerConfig,
    counters: Arc<LoggerCounters>,
    writers: Vec<Option<StreamWriter>>,
    touched: Vec<bool>,
    /// Sequence number of the next file of each stream (numbering goes on across directories).
    next_sequence: Vec<u32>,
    written: DedupWindow,
    disks: Disks,
    /// Files closed when a directory was left.
    closed: Vec<Closed>,
    /// Why every directory is full (nothing more is written).
    halted: Option<String>,
    peers: HashMap<Vec<u8>, usize>,
    peer_ids: Vec<Vec<u8>>,
    pending: Vec<Pending>,
    summary: LoggerSummary,
    scratch: Vec<u32>,
    packed: Vec<u32>,
    ack: Vec<u8>,
    ids: Vec<u64>,
    /// The encoder for events that arrive uncompressed with `LoggerCompression::Zstd` (the
    /// DCMs compress in a partition; made at the first such event).
    compressor: Option<EventCompressor>,
    /// Time of the first and of the latest event written.
    first_write: Option<Instant>,
    last_write: Option<Instant>,
}

impl Logger {
    /// Counts a message that did not decode or was not expected, in the summary and live.
    fn bad_message(&mut self) {
        self.summary.bad_messages += 1;
        self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
    }

    fn new(config: LoggerConfig, counters: Arc<LoggerCounters>) -> Logger {
        let mut dirs = vec![config.directory.clone()];
        dirs.extend(config.more_directories.iter().cloned());
        let disks = Disks::new(dirs, config.margin);
        Logger {
            config,
            counters,
            writers: Vec::new(),
            touched: Vec::new(),
            next_sequence: Vec::new(),
            written: DedupWindow::new(DEFAULT_WINDOW_IDS),
            disks,
            closed: Vec::new(),
            halted: None,
            peers: HashMap::new(),
            peer_ids: Vec::new(),
            pending: Vec::new(),
            summary: LoggerSummary::default(),
            scratch: Vec::new(),
            packed: Vec::new(),
            ack: Vec::new(),
            ids: Vec::new(),
            compressor: None,
            first_write: None,
            last_write: None,
        }
    }

    fn run(
        mut self,
        mut socket: rodeo_transport::socket::Socket,
        stop: &AtomicBool,
    ) -> Result<LoggerSummary, DataflowError> {
        let mut msg = Received::default();
        let app = self.config.name.clone();
        let terr = |source| DataflowError::Transport {
            app: app.clone(),
            what: "receive".into(),
            source,
        };
        let mut oldest: Option<Instant> = None;
        // A directory already below its margin is left before the first event.
        if let Err(why) = self.disks.check() {
            self.full(None, why)?;
        }
        loop {
            // Take what is queued without a poll system call; wait only when idle.
            let mut got = socket.try_recv(&mut msg).map_err(terr)?;
            if !got {
                // Idle: wait for the next event, at most until the batch is due (rounded up to
                // the poll's millisecond, never 0: that would spin).
                let wait = match oldest {
                    None => 20,
                    Some(t) => match COMMIT_DELAY.checked_sub(t.elapsed()) {
                        None => 0,
                        Some(left) => left.as_micros().div_ceil(1000).max(1) as i64,
                    },
                };
                if wait > 0 {
                    got = socket.recv(&mut msg, wait).map_err(terr)?;
                }
            }
            if got {
                let mut scratch = std::mem::take(&mut self.scratch);
                let mut packed = std::mem::take(&mut self.packed);
                let r = self.handle(&msg, &mut scratch, &mut packed);
                self.scratch = scratch;
                self.packed = packed;
                r?;
                if !self.pending.is_empty() {
                    oldest.get_or_insert_with(Instant::now);
                }
                if self.pending.len() < self.config.batch.max(1) {
                    continue;
                }
            }
            if !self.pending.is_empty() {
                let due = oldest.is_some_and(|t| t.elapsed() >= COMMIT_DELAY);
                if due
                    || self.pending.len() >= self.config.batch.max(1)
                    || stop.load(Ordering::Acquire)
                {
                    self.commit(&mut socket)?;
                    oldest = None;
                }
            } else if !got && stop.load(Ordering::Acquire) {
                break;
            }
        }
        let name = self.config.name.clone();
        for w in self.writers.drain(..).flatten() {
            let (closed, r) = w.close(&name);
            self.closed.extend(closed);
            if let Err(e) = r {
                // The events are synced and acknowledged; the file stays `.writing` (its
                // events recoverable) and the balance sheet says so.
                tracing::error!("{name}: cannot close a file: {e}");
                if let Some((why, _)) = disk_full_reason(&e) {
                    self.summary.disk_full.get_or_insert(why);
                }
                self.summary.verify_problems.push(e.to_string());
            }
        }
        let mut files = Vec::new();
        for c in std::mem::take(&mut self.closed) {
            match c.problem {
                None => self.summary.events_verified += c.events,
                Some(p) => self
                    .summary
                    .verify_problems
                    .push(format!("{}: {p}", c.path.display())),
            }
            files.push(c.path);
        }
        self.summary.files.extend(files);
        self.summary.late_ids = self.written.late();
        if let (Some(first), Some(last)) = (self.first_write, self.last_write) {
            self.summary.write_span_ns =
                u64::try_from(last.duration_since(first).as_nanos()).unwrap_or(u64::MAX);
        }
        Ok(self.summary)
    }

    fn handle(
        &mut self,
        msg: &Received,
        scratch: &mut Vec<u32>,
        packed: &mut Vec<u32>,
    ) -> Result<(), DataflowError> {
        let Ok(decoded) = decode(&msg.bytes) else {
            self.bad_message();
            return Ok(());
        };
        let Message::Event { stream, event } = decoded.message else {
            self.bad_message();
            return Ok(());
        };
        let words: &[u32] = match bytes_as_words(event) {
            Some(w) => w,
            None if event.len() % 4 == 0 => {
                scratch.clear();
                scratch.extend(
                    event
                        .chunks_exact(4)
                        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
                scratch
            }
            None => {
                self.bad_message();
                return Ok(());
            }
        };
        let Ok(parsed) = FullEvent::parse(words) else {
            self.bad_message();
            return Ok(());
        };
        let gid = parsed.global_id();
        let peer = match self.peers.get(msg.peer.as_slice()) {
            Some(&p) => p,
            None => {
                self.peer_ids.push(msg.peer.clone());
                self.peers.insert(msg.peer.clone(), self.peer_ids.len() - 1);
                self.peer_ids.len() - 1
            }
        };
        if self.written.contains(gid) {
            self.summary.duplicates += 1;
            self.pending.push(Pending {
                peer,
                gid,
                stream: None,
                bytes: 0,
            });
            return Ok(());
        }
        if self.halted.is_some() {
            // Every directory is full: not written, not acknowledged (back-pressure), counted.
            self.summary.events_refused += 1;
            self.counters.events_refused.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let s = stream as usize;
        if self.writers.len() <= s {
            self.writers.resize_with(s + 1, || None);
            self.touched.resize(s + 1, false);
            self.next_sequence.resize(s + 1, 1);
        }
        let mut words = words;
        let mut compressed = parsed.compression() != 0;
        if self.config.compression == LoggerCompression::Zstd && !compressed {
            let c = match self.compressor.as_mut() {
                Some(c) => c,
                None => {
                    let c = EventCompressor::new(DEFAULT_ZSTD_LEVEL).map_err(|e| {
                        DataflowError::Config {
                            app: self.config.name.clone(),
                            reason: format!("cannot make the zstd encoder: {e}"),
                        }
                    })?;
                    self.compressor.insert(c)
                }
            };
            if c.compress(words, packed).is_err() {
                self.bad_message();
                return Ok(());
            }
            words = packed;
            compressed = true;
        }
        // A full directory is left for the next one and the event written there: at most one
        // try per directory.
        let bytes = loop {
            match self.write(s, words, compressed) {
                Ok(bytes) => break bytes,
                Err(e) => match disk_full_reason(&e) {
                    Some((why, kind)) => {
                        self.full((kind == FullKind::Failed).then_some(s), why)?;
                        if self.halted.is_some() {
                            self.summary.events_refused += 1;
                            self.counters.events_refused.fetch_add(1, Ordering::Relaxed);
                            return Ok(());
                        }
                    }
                    None => return Err(e),
                },
            }
        };
        self.written.insert(gid);
        let now = Instant::now();
        self.first_write.get_or_insert(now);
        self.last_write = Some(now);
        self.touched[s] = true;
        self.summary.events_written += 1;
        self.summary.bytes_written += bytes;
        self.counters.events_written.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_written
            .fetch_add(bytes, Ordering::Relaxed);
        self.pending.push(Pending {
            peer,
            gid,
            stream: Some(s),
            bytes,
        });
        if self.disks.wrote(bytes) {
            if let Err(why) = self.disks.check() {
                self.full(None, why)?;
            }
        }
        Ok(())
    }

    /// Writes one event to stream `s` in the directory in use, opening its file first if
    /// need be; returns the bytes stored.
    fn write(&mut self, s: usize, words: &[u32], compressed: bool) -> Result<u64, DataflowError> {
        if self.writers[s].is_none() {
            let Some(dir) = self.disks.current().map(Path::to_path_buf) else {
                return Err(DataflowError::Config {
                    app: self.config.name.clone(),
                    reason: "every output directory is full".into(),
                });
            };
            let name = self
                .config
                .streams
                .get(s)
                .cloned()
                .unwrap_or_else(|| format!("stream{s}"));
            let margin = self.disks.margin_bytes();
            self.writers[s] = Some(StreamWriter::create(
                &self.config,
                &dir,
                &name,
                self.next_sequence[s],
                margin,
            )?);
        }
        let Some(writer) = self.writers[s].as_mut() else {
            return Ok(0);
        };
        writer.write(&self.config.name, words, compressed)
    }

    /// The directory in use is full (`why`; `failed`: the stream whose write or sync failed):
    /// closes every file, forgets the events of a failed file that were not synced, and moves
    /// to the next directory, or stops writing when every one is full (module docs).
    fn full(&mut self, failed: Option<usize>, why: String) -> Result<(), DataflowError> {
        let name = self.config.name.clone();
        let mut lost = Vec::new();
        for i in 0..self.writers.len() {
            let Some(w) = self.writers[i].take() else {
                continue;
            };
            self.next_sequence[i] = self.next_sequence[i].saturating_add(w.files_opened());
            self.touched[i] = false;
            if failed == Some(i) {
                self.closed.extend(w.abandon());
                lost.push(i);
                continue;
            }
            let (closed, r) = w.close(&name);
            self.closed.extend(closed);
            if let Err(e) = r {
                tracing::error!("{name}: cannot close a file in a full directory: {e}");
                lost.push(i);
            }
        }
        // Events in a file that failed before they were synced are not on disk: not
        // acknowledged, not counted (their DCMs' events are reassigned at the timeout).
        let (mut events, mut bytes) = (0u64, 0u64);
        let written = &mut self.written;
        self.pending.retain(|p| match p.stream {
            Some(st) if lost.contains(&st) => {
                written.remove(p.gid);
                events += 1;
                bytes += p.bytes;
                false
            }
            _ => true,
        });
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
                    "{name}: every output directory is full, events are no longer written: {}",
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

    /// Syncs the touched files, then acknowledges every pending event to its sender.
    fn commit(
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
