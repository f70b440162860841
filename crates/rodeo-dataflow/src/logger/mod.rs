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
//! The sync does not hold the logger's thread: a commit queues it in each touched file's writer
//! thread, behind the buffers written before it (rodeo's container; EventStorage still syncs in
//! place), and the logger goes on receiving and copying the next events while the disk writes
//! and syncs. A commit's events are acknowledged when every one of its syncs has returned,
//! oldest commit first, looked at on every turn of the loop (at least every millisecond).
//! While a sync is on its way the next commit waits for it, unless its batch is full: the
//! batch forms while the disk syncs, as it did while the logger waited, so a busy logger makes
//! one sync per batch, not one per millisecond.
//! Nothing is acknowledged earlier than before; a write or sync that fails makes its events
//! after the last sync that returned unacknowledged (the full-disk handling below).
//!
//! # Record checksums
//!
//! Every record of rodeo's container carries the Adler-32 of its event's bytes. A DCM already
//! summed the payload (the event format's Adler-32 checksum word, its default), so the logger
//! combines that sum with the header and checksum words it sums itself
//! (`rodeo_format::checksum::adler32_concat`) and does not read the payload a second time:
//! the event is only copied into the direct-I/O buffer. The record's checksum is then the
//! DCM's, so an event damaged between the DCM and the disk disagrees with it and every reader
//! of the file (`rodeo verify`, `scripts/raw-file-check`) reports it. An event without an
//! Adler-32 of its payload (another checksum type, none, compressed) is summed here as before.
//!
//! # Exactly once
//!
//! An event reassigned after a timeout may reach the logger twice (the slow node finishing it
//! after all). The logger remembers the global ids it wrote in a [`DedupWindow`] (a low-water
//! mark and a sliding bitmap over the last [`DEFAULT_WINDOW_IDS`] ids, 2 MiB whatever the
//! length of the run) and drops a repeat, counting it and still acknowledging it, so every
//! event is written once. A repeat can only come within the supervisor's event and node
//! timeouts (seconds), far inside the window; an id below the window is written (counted,
//! `late_ids`), never dropped: a forged id far ahead cannot make genuine events "duplicates"
//! (a forged copy of a future id still can: the partition's endpoints belong on a private
//! network or behind CURVE).
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
//!
//! # Layout
//!
//! - this module: [`spawn`], the logger's state and its main loop (receive, batch, commit at
//!   [`COMMIT_DELAY`] or a full batch, close the files at stop);
//! - `config`: [`LoggerConfig`], [`FileFormat`], [`LoggerCompression`] and the check that the
//!   codec is the format's;
//! - `counters`: [`LoggerCounters`] (live) and [`LoggerSummary`] (the run's totals);
//! - `events`: an `Event` message from a DCM: decoded, a repeat dropped (exactly once),
//!   compressed if asked, written to its stream;
//! - `commit`: the group commit: the events waiting for it, the syncs of the touched files
//!   queued, the commits on their way, and their acknowledgements once the syncs are done;
//! - `disk_full`: what a full disk looks like in an error, and the move to the next directory
//!   (or the halt);
//! - `writer`: one stream's open files in either format (rodeo's container, EventStorage),
//!   their close and cross-check on disk;
//! - `recovery`: the files a previous life of the logger left open, recovered at start.

mod commit;
mod config;
mod counters;
mod disk_full;
mod events;
mod recovery;
mod writer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rodeo_format::compress::EventCompressor;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{timeout_ms, Received, SocketKind, Transport};

use crate::dedup::{DedupWindow, DEFAULT_WINDOW_IDS};
use crate::disks::Disks;
use crate::error::DataflowError;
use crate::handle::AppHandle;

pub use commit::COMMIT_DELAY;
pub use config::{FileFormat, LoggerCompression, LoggerConfig};
pub use counters::{CheckedFile, LoggerCounters, LoggerSummary};

use commit::Commits;
use disk_full::disk_full_reason;
use writer::{Closed, StreamWriter};

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
    // The logger's loop receives on every turn (which flushes): acknowledgements of one
    // turn go out together (the stream transport; the others batch on their own).
    socket.set_batching(true);
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
    /// The event's global id.
    gid: u64,
    /// Stream it was written to (`None`: a duplicate, written before).
    stream: Option<usize>,
    /// Bytes stored.
    bytes: u64,
}

/// A logger's state, owned by its thread.
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
    /// When each sender was last heard (`heard`'s value then), by index in `peer_ids`.
    peer_heard: Vec<u64>,
    /// Events received from known senders so far: the senders' clock.
    heard: u64,
    /// Scratch of `idle_sender`: which senders have events waiting for a commit.
    peer_busy: Vec<bool>,
    pending: Vec<Pending>,
    /// Group commits whose syncs are on their way (acknowledged when done).
    commits: Commits,
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
    /// Time the latest group commit with events was acknowledged (its syncs returned).
    last_durable: Option<Instant>,
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
            peer_heard: Vec::new(),
            heard: 0,
            peer_busy: Vec::new(),
            pending: Vec::new(),
            commits: Commits::default(),
            summary: LoggerSummary::default(),
            scratch: Vec::new(),
            packed: Vec::new(),
            ack: Vec::new(),
            ids: Vec::new(),
            compressor: None,
            first_write: None,
            last_write: None,
            last_durable: None,
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
            // Take what is queued without a poll system call; wait only when idle. An event
            // (one frame from a DCM: `Socket::send_joined`) is read where ZeroMQ put it.
            let mut got = socket.try_recv_in_place(&mut msg).map_err(terr)?;
            if !got {
                // Idle: wait for the next event, at most until the batch is due (rounded up to
                // the poll's millisecond, never 0: that would spin).
                let wait = match oldest {
                    // Syncs on their way are looked at every millisecond.
                    None if self.commits_in_flight() > 0 => 1,
                    None => 20,
                    Some(t) => match COMMIT_DELAY.checked_sub(t.elapsed()) {
                        // Due, but a sync is on its way: look again in a millisecond.
                        None if self.commits_in_flight() > 0 => 1,
                        None => 0,
                        Some(left) => timeout_ms(left).max(1),
                    },
                };
                if wait > 0 {
                    got = socket.recv_in_place(&mut msg, wait).map_err(terr)?;
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
            }
            // Acknowledge the commits whose syncs are done (a look at each writer's answers).
            if self.commits_in_flight() > 0 {
                self.settle(&mut socket, false)?;
            }
            if got && self.pending.len() < self.config.batch.max(1) {
                continue;
            }
            if !self.pending.is_empty() {
                // One sync on its way at a time while the batch is not full: the next batch
                // forms while the disk syncs (a commit per sync, not per millisecond).
                let due = oldest.is_some_and(|t| t.elapsed() >= COMMIT_DELAY)
                    && self.commits_in_flight() == 0;
                if due
                    || self.pending.len() >= self.config.batch.max(1)
                    || stop.load(Ordering::Acquire)
                {
                    self.commit()?;
                    oldest = None;
                }
            } else if !got && stop.load(Ordering::Acquire) {
                // The last commits' syncs, waited for and acknowledged, before the files close.
                self.settle(&mut socket, true)?;
                if self.commits_in_flight() == 0 {
                    break;
                }
            }
        }
        // The last acknowledgements, if they wait to go out together, go before the files close.
        socket.flush();
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
        for c in std::mem::take(&mut self.closed) {
            match c.problem {
                None => {
                    self.summary.events_verified += c.events;
                    if let Some(adler32) = c.adler32 {
                        self.summary.checked_files.push(CheckedFile {
                            file: self.summary.files.len(),
                            size_bytes: c.size_bytes,
                            adler32,
                            events: c.events,
                        });
                    }
                }
                Some(p) => self
                    .summary
                    .verify_problems
                    .push(format!("{}: {p}", c.path.display())),
            }
            self.summary.files.push(c.path);
        }
        self.summary.late_ids = self.written.late();
        // To the last event on disk (its commit's sync returned), as a writer timed with its
        // final sync; an event never committed (a full disk) ends it at its write.
        let last = self.last_write.max(self.last_durable);
        if let (Some(first), Some(last)) = (self.first_write, last) {
            self.summary.write_span_ns =
                u64::try_from(last.duration_since(first).as_nanos()).unwrap_or(u64::MAX);
        }
        Ok(self.summary)
    }
}
