//! The error type of raw-data files.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Which record a reader was in when the file ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// The file start record.
    Start,
    /// Event record with this index (0-based).
    Event(u64),
    /// The file end record.
    End,
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordKind::Start => write!(f, "the file start record"),
            RecordKind::Event(i) => write!(f, "event record {i}"),
            RecordKind::End => write!(f, "the file end record"),
        }
    }
}

/// What went wrong writing or reading a raw-data file.
///
/// Reader errors carry the byte offset where reading stopped and the number of events that
/// were recovered (returned as valid) before it: see [`RawFileError::offset`] and
/// [`RawFileError::events_recovered`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RawFileError {
    /// An I/O operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation ("open", "write", "rename", "fsync", "statvfs", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Free disk space is below the configured margin: the writer refuses to open a file.
    #[error("not enough free disk space in {}: {free} bytes free, the margin is {margin} bytes", dir.display())]
    DiskSpace {
        /// The output directory.
        dir: PathBuf,
        /// Bytes available to the writer.
        free: u64,
        /// The configured margin.
        margin: u64,
    },
    /// The writer configuration is invalid.
    #[error("invalid raw-file writer configuration: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },
    /// The output file already exists; the writer never overwrites.
    #[error("{} already exists; refusing to overwrite it", path.display())]
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
    },
    /// An event is larger than a record may hold ([`super::MAX_EVENT_BYTES`], 1 GiB): refused
    /// by the writer (the reader says [`RawFileError::RecordTooLarge`]).
    #[error("event of {words} words is too large for one record (at most 1 GiB)")]
    EventTooLarge {
        /// Fragment size in words.
        words: u64,
    },
    /// A field of the file start record is invalid.
    #[error("file start record: {field}: expected {expected}, found {found} ({found:#x})")]
    BadStart {
        /// The field.
        field: &'static str,
        /// What was expected (a value or a bound).
        expected: String,
        /// The value found.
        found: u64,
    },
    /// The file start record's Adler-32 (format version 2) disagrees with its bytes: a field of
    /// the record (run number, sequence, names...) was damaged.
    #[error("file start record: Adler-32 stored {expected:#010x}, computed {found:#010x}: the record (run number, sequence, lumiblock or names) is damaged")]
    StartChecksum {
        /// The checksum stored in the record's last word.
        expected: u32,
        /// The checksum of the record's bytes.
        found: u32,
    },
    /// A string of the file start record is not valid UTF-8.
    #[error("file start record: {field} at byte {offset} is not valid UTF-8")]
    BadString {
        /// Which string.
        field: &'static str,
        /// Byte offset of the string.
        offset: u64,
    },
    /// A record starts with an unknown marker.
    #[error("event record {index} at byte {offset}: marker {expected:#010x} (or end record 0x1234dddd) expected, found {found:#010x}; {index} events recovered")]
    BadMarker {
        /// Index of the record (= events recovered).
        index: u64,
        /// Byte offset of the record.
        offset: u64,
        /// The event-record marker.
        expected: u32,
        /// The word found.
        found: u32,
    },
    /// An event record declares fewer words than its own header.
    #[error("event record {index} at byte {offset}: record size of {size_words} words is below the 4 header words; {index} events recovered")]
    BadRecordSize {
        /// Index of the record (= events recovered).
        index: u64,
        /// Byte offset of the record.
        offset: u64,
        /// The declared size.
        size_words: u32,
    },
    /// An event record declares a fragment past [`super::MAX_EVENT_BYTES`] (1 GiB): refused
    /// before anything is reserved for it.
    #[error("event record {index} at byte {offset}: record size of {size_words} words is past the largest event of 1 GiB; {index} events recovered")]
    RecordTooLarge {
        /// Index of the record (= events recovered).
        index: u64,
        /// Byte offset of the record.
        offset: u64,
        /// The declared size.
        size_words: u32,
    },
    /// The file ends inside a record.
    #[error("file ends at byte {file_len} inside {record} at byte {offset} (needs {needed} bytes); {events} events recovered")]
    Truncated {
        /// The record being read.
        record: RecordKind,
        /// Byte offset of the record.
        offset: u64,
        /// Bytes the record needs (as far as known).
        needed: u64,
        /// Length of the file.
        file_len: u64,
        /// Events recovered.
        events: u64,
    },
    /// An event's Adler-32 does not match its record header.
    #[error("event record {index} at byte {offset}: Adler-32 {expected:#010x} expected (record header), found {found:#010x} (computed); {index} events recovered")]
    Checksum {
        /// Index of the event (= events recovered).
        index: u64,
        /// Byte offset of the record.
        offset: u64,
        /// Checksum stored in the record.
        expected: u32,
        /// Checksum of the fragment read.
        found: u32,
    },
    /// The file ends cleanly between records but has no end record.
    #[error("no end record: file was not closed cleanly (stopped at byte {offset}; {events} events recovered)")]
    NoEndRecord {
        /// File length: where reading stopped.
        offset: u64,
        /// Events recovered.
        events: u64,
    },
    /// A field of the end record disagrees with the file.
    #[error("end record at byte {offset}: {field}: expected {expected} ({expected:#x}), found {found} ({found:#x}); {events} events recovered")]
    BadEndRecord {
        /// Byte offset of the end record.
        offset: u64,
        /// The field.
        field: &'static str,
        /// The value the reader computed.
        expected: u64,
        /// The value in the record.
        found: u64,
        /// Events recovered.
        events: u64,
    },
    /// Bytes follow the end record.
    #[error(
        "{bytes} bytes follow the end record that ends at byte {offset}; {events} events recovered"
    )]
    TrailingBytes {
        /// Byte offset just after the end record.
        offset: u64,
        /// How many bytes follow.
        bytes: u64,
        /// Events recovered.
        events: u64,
    },
}

impl RawFileError {
    /// For reader errors, the byte offset where reading stopped.
    pub fn offset(&self) -> Option<u64> {
        match *self {
            RawFileError::BadMarker { offset, .. }
            | RawFileError::BadRecordSize { offset, .. }
            | RawFileError::RecordTooLarge { offset, .. }
            | RawFileError::Truncated { offset, .. }
            | RawFileError::Checksum { offset, .. }
            | RawFileError::NoEndRecord { offset, .. }
            | RawFileError::BadEndRecord { offset, .. }
            | RawFileError::TrailingBytes { offset, .. } => Some(offset),
            RawFileError::BadString { offset, .. } => Some(offset),
            RawFileError::StartChecksum { .. } => Some(0),
            _ => None,
        }
    }

    /// For reader errors after the start record, how many valid events were returned first.
    pub fn events_recovered(&self) -> Option<u64> {
        match *self {
            RawFileError::BadMarker { index, .. }
            | RawFileError::BadRecordSize { index, .. }
            | RawFileError::RecordTooLarge { index, .. }
            | RawFileError::Checksum { index, .. } => Some(index),
            RawFileError::Truncated { events, .. }
            | RawFileError::NoEndRecord { events, .. }
            | RawFileError::BadEndRecord { events, .. }
            | RawFileError::TrailingBytes { events, .. } => Some(events),
            _ => None,
        }
    }
}
