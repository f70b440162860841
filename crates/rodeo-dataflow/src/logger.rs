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
//! after all). The logger remembers the global ids it wrote in the last [`DEDUP_WINDOW`] and
//! drops a repeat, counting it and still acknowledging it, so every event is written once. A
//! repeat can only come within the supervisor's event and node timeouts (seconds), so the
//! window bounds the memory of a long run without losing that guarantee.
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

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
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

use crate::{AppHandle, DataflowError};

/// How long the logger remembers a written global id (far longer than any reassignment takes).
pub const DEDUP_WINDOW: Duration = Duration::from_secs(300);

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
            run,
            streams: vec!["physics_Main".into()],
            max_file_bytes: 1 << 30,
            batch: 256,
            format: FileFormat::Rodeo,
            compression: LoggerCompression::None,
            project: "data_test".to_string(),
            high_water_mark: crate::DEFAULT_HIGH_WATER_MARK,
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
    /// Opens the first file of stream `stream`.
    fn create(c: &LoggerConfig, stream: &str) -> Result<StreamWriter, DataflowError> {
        let app = || c.name.clone();
        match c.format {
            FileFormat::Rodeo => {
                let mut cfg = RawFileConfig::new(&c.directory, c.run, &c.name, stream);
                cfg.max_file_bytes = c.max_file_bytes;
                let w = RawFileWriter::create(cfg)
                    .map_err(|source| DataflowError::Files { app: app(), source })?;
                if let Some(why) = w.direct_io_fallback() {
                    tracing::warn!("{}: no direct I/O for stream {stream}: {why}", c.name);
                }
                Ok(StreamWriter::Rodeo(w))
            }
            FileFormat::EventStorage => {
                let (t, n) = split_stream(stream);
                let mut cfg = EsWriterConfig::new(&c.directory, &c.project, c.run, t, n, &c.name);
                cfg.run.rec_enable = 1;
                cfg.max_file_bytes = c.max_file_bytes;
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

    /// Closes the last file; every file closed, each cross-checked on disk without reading
    /// its events back (see [`LoggerSummary::events_verified`]).
    fn finish(self, app: &str) -> Result<Vec<Closed>, DataflowError> {
        match self {
            StreamWriter::Rodeo(w) => w
                .finish()
                .map(|c| {
                    c.into_iter()
                        .map(|c| Closed {
                            problem: c.check_on_disk().err().map(|e| e.to_string()),
                            path: c.path,
                            events: c.events,
                        })
                        .collect()
                })
                .map_err(|source| DataflowError::Files {
                    app: app.to_string(),
                    source,
                }),
            StreamWriter::Es(w) => w
                .finish()
                .map(|c| {
                    c.into_iter()
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
                        .collect()
                })
                .map_err(|source| DataflowError::EventStorage {
                    app: app.to_string(),
                    source,
                }),
        }
    }
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
}

/// Live counters of a logger, readable while it runs.
#[derive(Debug, Default)]
pub struct LoggerCounters {
    /// Events written.
    pub events_written: std::sync::atomic::AtomicU64,
    /// Bytes written.
    pub bytes_written: std::sync::atomic::AtomicU64,
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
    socket
        .bind(&endpoint)
        .map_err(terr(&format!("bind {}", config.endpoint)))?;
    std::fs::create_dir_all(&config.directory).map_err(|e| DataflowError::Config {
        app: app.clone(),
        reason: format!("cannot create {}: {e}", config.directory.display()),
    })?;
    AppHandle::spawn(&app, move |stop| {
        Logger::new(config, counters).run(socket, &stop)
    })
}

struct Logger {
    config: LoggerConfig,
    counters: Arc<LoggerCounters>,
    writers: Vec<Option<StreamWriter>>,
    touched: Vec<bool>,
    written: HashSet<u64>,
    /// Global ids in `written`, oldest first, with the time they were written.
    written_order: VecDeque<(Instant, u64)>,
    peers: HashMap<Vec<u8>, usize>,
    peer_ids: Vec<Vec<u8>>,
    pending: Vec<(usize, u64)>,
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
    fn new(config: LoggerConfig, counters: Arc<LoggerCounters>) -> Logger {
        Logger {
            config,
            counters,
            writers: Vec::new(),
            touched: Vec::new(),
            written: HashSet::new(),
            written_order: VecDeque::new(),
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
                self.handle(&msg)?;
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
        let mut files = Vec::new();
        for w in self.writers.drain(..).flatten() {
            for c in w.finish(&self.config.name)? {
                match c.problem {
                    None => self.summary.events_verified += c.events,
                    Some(p) => self
                        .summary
                        .verify_problems
                        .push(format!("{}: {p}", c.path.display())),
                }
                files.push(c.path);
            }
        }
        self.summary.files = files;
        if let (Some(first), Some(last)) = (self.first_write, self.last_write) {
            self.summary.write_span_ns =
                u64::try_from(last.duration_since(first).as_nanos()).unwrap_or(u64::MAX);
        }
        Ok(self.summary)
    }

    fn handle(&mut self, msg: &Received) -> Result<(), DataflowError> {
        let Ok(decoded) = decode(&msg.bytes) else {
            self.summary.bad_messages += 1;
            return Ok(());
        };
        let Message::Event { stream, event } = decoded.message else {
            self.summary.bad_messages += 1;
            return Ok(());
        };
        let words: &[u32] = match bytes_as_words(event) {
            Some(w) => w,
            None if event.len() % 4 == 0 => {
                self.scratch.clear();
                self.scratch.extend(
                    event
                        .chunks_exact(4)
                        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
                &self.scratch
            }
            None => {
                self.summary.bad_messages += 1;
                return Ok(());
            }
        };
        let Ok(parsed) = FullEvent::parse(words) else {
            self.summary.bad_messages += 1;
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
        let now = Instant::now();
        while let Some(&(t, old)) = self.written_order.front() {
            if now.duration_since(t) < DEDUP_WINDOW {
                break;
            }
            self.written.remove(&old);
            self.written_order.pop_front();
        }
        if self.written.insert(gid) {
            self.written_order.push_back((now, gid));
        } else {
            self.summary.duplicates += 1;
            self.pending.push((peer, gid));
            return Ok(());
        }
        let s = stream as usize;
        if self.writers.len() <= s {
            self.writers.resize_with(s + 1, || None);
            self.touched.resize(s + 1, false);
        }
        if self.writers[s].is_none() {
            let name = self
                .config
                .streams
                .get(s)
                .cloned()
                .unwrap_or_else(|| format!("stream{s}"));
            self.writers[s] = Some(StreamWriter::create(&self.config, &name)?);
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
            if c.compress(words, &mut self.packed).is_err() {
                self.summary.bad_messages += 1;
                return Ok(());
            }
            words = &self.packed;
            compressed = true;
        }
        let Some(writer) = self.writers[s].as_mut() else {
            return Ok(());
        };
        let bytes = writer.write(&self.config.name, words, compressed)?;
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
        self.pending.push((peer, gid));
        Ok(())
    }

    /// Syncs the touched files, then acknowledges every pending event to its sender.
    fn commit(
        &mut self,
        socket: &mut rodeo_transport::socket::Socket,
    ) -> Result<(), DataflowError> {
        for (w, t) in self.writers.iter_mut().zip(self.touched.iter_mut()) {
            if let (Some(w), true) = (w.as_mut(), *t) {
                w.sync(&self.config.name)?;
            }
            *t = false;
        }
        self.summary.commits += 1;
        self.pending.sort_unstable_by_key(|&(p, _)| p);
        let mut i = 0;
        while i < self.pending.len() {
            let peer = self.pending[i].0;
            self.ids.clear();
            while i < self.pending.len() && self.pending[i].0 == peer {
                self.ids.push(self.pending[i].1);
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
