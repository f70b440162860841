//! The error type of EventStorage files.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Which record a reader was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EsRecord {
    /// The file start record.
    FileStart,
    /// The file name strings.
    FileName,
    /// The free strings.
    FreeStrings,
    /// The run parameters.
    RunParameters,
    /// The data separator and data block of event `n` (0-based).
    Event(u64),
    /// The file end record.
    FileEnd,
}

impl fmt::Display for EsRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EsRecord::FileStart => write!(f, "the file start record"),
            EsRecord::FileName => write!(f, "the file name strings"),
            EsRecord::FreeStrings => write!(f, "the free strings"),
            EsRecord::RunParameters => write!(f, "the run parameters"),
            EsRecord::Event(i) => write!(f, "event {i}"),
            EsRecord::FileEnd => write!(f, "the file end record"),
        }
    }
}

/// What went wrong writing or reading an EventStorage file.
///
/// Reader errors carry the byte offset where reading stopped and the number of events returned
/// before it ([`EsError::offset`], [`EsError::events_recovered`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EsError {
    /// An I/O operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation ("open", "read", "write", "rename", "fsync", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The writer configuration is invalid.
    #[error("invalid EventStorage writer configuration: {reason}")]
    Config {
        /// What is wrong and what to change.
        reason: String,
    },
    /// Free disk space is below the configured margin.
    #[error("not enough free disk space in {}: {free} bytes free, the margin is {margin} bytes", dir.display())]
    DiskSpace {
        /// The output directory.
        dir: PathBuf,
        /// Bytes available.
        free: u64,
        /// The configured margin.
        margin: u64,
    },
    /// The output file already exists; the writer never overwrites.
    #[error("{} already exists; refusing to overwrite it", path.display())]
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
    },
    /// An event could not be prepared for writing (it does not parse, or its compressed payload
    /// is damaged).
    #[error("event {index} cannot be written: {reason}")]
    BadEvent {
        /// Index of the event in the writer's run (0-based).
        index: u64,
        /// What is wrong.
        reason: String,
    },
    /// An event is larger than a data block can declare (4 GiB).
    #[error("event of {bytes} bytes does not fit a data block (at most 4 GiB - 4)")]
    EventTooLarge {
        /// Its size in bytes.
        bytes: u64,
    },
    /// zlib compression failed.
    #[error("zlib compression of event {index}: {source}")]
    Compress {
        /// Index of the event.
        index: u64,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The file does not start with a file start record of a version this reader knows.
    #[error("file start record: {field}: expected {expected}, found {found} ({found:#x})")]
    BadStart {
        /// The field.
        field: &'static str,
        /// What was expected.
        expected: String,
        /// What was found.
        found: u64,
    },
    /// A metadata record is malformed.
    #[error("{record} at byte {offset}: {reason}")]
    BadRecord {
        /// The record.
        record: EsRecord,
        /// Byte offset of the record.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A record starts with an unknown marker.
    #[error("record at byte {offset}: marker {found:#010x} is neither a data separator (0x1234cccc) nor the file end (0x1234dddd); {events} events recovered")]
    BadMarker {
        /// Byte offset of the record.
        offset: u64,
        /// The word found.
        found: u32,
        /// Events recovered.
        events: u64,
    },
    /// A data separator is malformed.
    #[error(
        "data separator of event {index} at byte {offset}: {reason}; {index} events recovered"
    )]
    BadSeparator {
        /// Index of the event (= events recovered).
        index: u64,
        /// Byte offset of the separator.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The file ends inside a record.
    #[error("file ends at byte {file_len} inside {record} at byte {offset} (needs {needed} bytes); {events} events recovered")]
    Truncated {
        /// The record being read.
        record: EsRecord,
        /// Byte offset of the record.
        offset: u64,
        /// Bytes the record needs.
        needed: u64,
        /// Length of the file.
        file_len: u64,
        /// Events recovered.
        events: u64,
    },
    /// A compressed data block does not decompress to whole words.
    #[error(
        "event {index} at byte {offset}: {codec} data block: {reason}; {index} events recovered"
    )]
    Decompress {
        /// Index of the event (= events recovered).
        index: u64,
        /// Byte offset of its separator.
        offset: u64,
        /// The codec named by the file.
        codec: String,
        /// What went wrong.
        reason: String,
    },
    /// The file names a codec this reader does not have.
    #[error("file compression {codec:?} is not supported (this reader has zlib); the events cannot be read")]
    UnsupportedCompression {
        /// The codec named by the `Compression=` free string.
        codec: String,
    },
    /// The file ends cleanly between records but has no end record.
    #[error("no file end record: the file was not closed cleanly (stopped at byte {offset}; {events} events recovered)")]
    NoEndRecord {
        /// Where reading stopped (the file length).
        offset: u64,
        /// Events recovered.
        events: u64,
    },
    /// A field of the end record disagrees with the file.
    #[error("file end record at byte {offset}: {field}: expected {expected} ({expected:#x}), found {found} ({found:#x}); {events} events recovered")]
    BadEndRecord {
        /// Byte offset of the end record.
        offset: u64,
        /// The field.
        field: &'static str,
        /// The value expected.
        expected: u64,
        /// The value in the record.
        found: u64,
        /// Events recovered.
        events: u64,
    },
    /// Bytes follow the end record.
    #[error("{bytes} bytes follow the file end record that ends at byte {offset}; {events} events recovered")]
    TrailingBytes {
        /// Byte offset just after the end record.
        offset: u64,
        /// How many bytes follow.
        bytes: u64,
        /// Events recovered.
        events: u64,
    },
}

impl EsError {
    /// For reader errors, the byte offset where reading stopped.
    pub fn offset(&self) -> Option<u64> {
        match *self {
            EsError::BadRecord { offset, .. }
            | EsError::BadMarker { offset, .. }
            | EsError::BadSeparator { offset, .. }
            | EsError::Truncated { offset, .. }
            | EsError::Decompress { offset, .. }
            | EsError::NoEndRecord { offset, .. }
            | EsError::BadEndRecord { offset, .. }
            | EsError::TrailingBytes { offset, .. } => Some(offset),
            EsError::BadStart { .. } => Some(0),
            _ => None,
        }
    }

    /// For reader errors after the metadata records, the events returned before the error.
    pub fn events_recovered(&self) -> Option<u64> {
        match *self {
            EsError::BadSeparator { index, .. } | EsError::Decompress { index, .. } => Some(index),
            EsError::BadMarker { events, .. }
            | EsError::Truncated { events, .. }
            | EsError::NoEndRecord { events, .. }
            | EsError::BadEndRecord { events, .. }
            | EsError::TrailingBytes { events, .. } => Some(events),
            EsError::BadRecord { .. } | EsError::BadStart { .. } => Some(0),
            _ => None,
        }
    }
}
