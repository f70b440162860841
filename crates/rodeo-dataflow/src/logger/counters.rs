//! What a logger counts: [`LoggerCounters`], live and shared with whoever watches it, and
//! [`LoggerSummary`], the totals of a run returned when it stops.

use std::path::PathBuf;

/// A file a logger wrote and cross-checked after closing it ([`LoggerSummary::checked_files`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckedFile {
    /// Its place in [`LoggerSummary::files`] (the path is not repeated: the summary travels in
    /// one control message).
    pub file: usize,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// The Adler-32 its bytes must have, summed as the writer wrote them: each event record's
    /// from its header and the payload checksum of the DCM that built it, so that a payload
    /// damaged on its way makes the file disagree with this sum, as with its record.
    pub adler32: u32,
    /// Events in it (the writer's count, found in its end record on disk).
    pub events: u64,
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
    /// The files of `files` whose cross-check passed, with their size and the Adler-32 summed
    /// as they were written (rodeo's container): the run's file records without reading the
    /// files back. Files not here (EventStorage, a previous life's, a failed cross-check) are
    /// read back for their records.
    #[serde(default)]
    pub checked_files: Vec<CheckedFile>,
    /// Nanoseconds from the first event written to the last one on disk (its group commit's
    /// sync returned; the last written, if none was committed), on the logger's clock (0 when
    /// nothing was written, or one event never committed): the written rate is
    /// `bytes_written / write_span_ns`, durable bytes per second as `dd conv=fsync` times them.
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
    /// Events whose ids were below the duplicate detector's window: written without a check
    /// for a repeat (0 unless an event came more than the window late, or a forged id moved
    /// the window).
    #[serde(default)]
    pub late_ids: u64,
    /// New sender identities that took the place of an idle one in a full table
    /// (`LoggerConfig::max_senders`; 0 unless more identities than that sent events).
    #[serde(default)]
    pub senders_replaced: u64,
    /// Events kept from files a previous life of this logger left open (restarted into the
    /// run; included in `events_written` and `files`).
    #[serde(default)]
    pub recovered_events: u64,
    /// Events written whose ROBs were counted against the partition's (`expected_robs`;
    /// compressed events and a partition that does not say are not counted).
    #[serde(default)]
    pub events_rob_checked: u64,
    /// Events written with the partial flag (built without some fragments; the DCMs count
    /// them as `partial`).
    #[serde(default)]
    pub events_partial: u64,
    /// Events written short of ROBs without the partial flag: data lost without a trace in
    /// the event (0 in a sound run; the balance sheet's `complete` is false otherwise).
    #[serde(default)]
    pub events_short_unflagged: u64,
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
