//! Raw-data files: the logger's on-disk format, a rotating writer and a validating reader.
//!
//! # Record layout
//!
//! Everything is little-endian 32-bit words (`specs/raw-file.md`):
//!
//! ```text
//! file start  0x1234AAAA | size words | version=2 | file sequence | creation ns (u64: low, high)
//!             | run | lumiblock | app name (u32 byte length, UTF-8, zero pad to 4)
//!             | stream name (same) | Adler-32 of the record's bytes before this word (version 2)
//! event  *    0x1234CCCC | record size words (4 + fragment) | flags (bit 0 compressed)
//!             | Adler-32 of the fragment bytes | fragment words...
//! file end    0x1234DDDD | 9 | event count (u64) | event-record bytes (u64)
//!             | Adler-32 over all event records | reserved (0) | 0xDDDD1234
//! ```
//!
//! u64 fields are two words, low word first. Fragments are written as they lie in memory
//! (`words_as_bytes`), which is little-endian on every target rodeo supports. The end record's Adler-32 runs over the complete
//! event records (their 4 header words included), in file order; its byte count is theirs.
//!
//! **Start record checksum (version 2).** Version 1 of the spec left the start record
//! unprotected: a flipped run number or stream name went unnoticed. Version 2 (written since
//! 2026-11) appends one word, the Adler-32 of every byte of the start record before it; the size
//! word counts it. Readers accept both versions; a version-1 file's start record is reported as
//! unchecked ([`FileStart::checksummed`]).
//!
//! **End record size.** The spec gives the end record a size of 9 words but lists fields for 8.
//! rodeo keeps the size word at 9 and inserts one reserved word (written 0, ignored by readers)
//! before the closing 0xDDDD1234, so the closing marker stays the last word of a file.
//!
//! File names are `<run:08>.<stream>.<app>.<seq:04>.data` ([`file_name`]), with `.writing`
//! appended while the file is open; a file is renamed only after its end record is written and
//! the file (and then its directory) is fsync'ed, so a final name always means a complete file.
//!
//! # Recovery rules
//!
//! The [`RawFileReader`] streams through a file and validates as it goes. It yields every event
//! record that is complete and whose Adler-32 matches, in order. At the first problem it yields
//! one typed [`RawFileError`] naming the byte offset where it stopped, the number of events
//! recovered before it, and the expected and found values, and then stops:
//!
//! - a start record that is not exactly its fields (marker, size within bounds and equal to
//!   the fields and strings it holds, version 1 or 2, UTF-8 names with zero padding):
//!   [`RawFileError::BadStart`] or [`RawFileError::BadString`], before any event; a version-2
//!   start record whose Adler-32 disagrees: [`RawFileError::StartChecksum`] (at byte 0;
//!   [`RawFileReader::open_salvaging`] reads past it and past damaged names, for crash
//!   recovery);
//! - a record marker that is neither an event nor the end record: [`RawFileError::BadMarker`];
//! - a record size below 4 words: [`RawFileError::BadRecordSize`]; one past the largest event
//!   ([`MAX_EVENT_BYTES`], 1 GiB): [`RawFileError::RecordTooLarge`];
//! - a record that runs past the end of the file: [`RawFileError::Truncated`] (sizes are always
//!   checked against the file length before anything is read or allocated);
//! - a fragment whose Adler-32 differs: [`RawFileError::Checksum`];
//! - the end of the file with no end record: [`RawFileError::NoEndRecord`];
//! - an end record whose fields disagree with what was read: [`RawFileError::BadEndRecord`].
//!
//! A reader does not try to resynchronise after damage: a marker search would risk returning
//! events whose place in the file is not certain, and every event before the damage is already
//! recovered.

mod block;
mod direct;
mod direct_in;
mod error;
mod reader;
mod write_queue;
mod writer;

pub use block::ALIGN as DIRECT_IO_ALIGN;
pub use error::{RawFileError, RecordKind};
pub use reader::{verify_file, Event, EventRef, FileSummary, RawFileReader};
pub use writer::{
    free_disk_bytes, ClosedFile, EventLocation, RawFileConfig, RawFileWriter, WriterStats,
};

/// Write buffers (of [`RawFileConfig::buffer_bytes`] each) an open file holds at most: one
/// filling while up to `write_queue::QUEUE_DEPTH` wait for or are in its writer thread. For
/// memory estimates.
pub const WRITE_BUFFERS_PER_FILE: usize = write_queue::QUEUE_DEPTH + 1;

/// Marker of the file start record.
pub const START_MARKER: u32 = 0x1234_AAAA;
/// Marker of an event record.
pub const EVENT_MARKER: u32 = 0x1234_CCCC;
/// Marker of the file end record.
pub const END_MARKER: u32 = 0x1234_DDDD;
/// Last word of the file end record.
pub const END_TRAILER: u32 = 0xDDDD_1234;
/// Format version written: 2, whose start record ends in its own Adler-32.
pub const FORMAT_VERSION: u32 = 2;
/// Oldest format version read: 1, whose start record carries no checksum.
pub const MIN_FORMAT_VERSION: u32 = 1;
/// Size of the file end record in words.
pub const END_RECORD_WORDS: u32 = 9;
/// Header words of an event record (marker, size, flags, checksum).
pub const EVENT_HEADER_WORDS: u32 = 4;
/// Largest event fragment a record may hold, in bytes (1 GiB, as the largest compressed event
/// restored: `rodeo_format::compress::MAX_DECOMPRESSED_BYTES`): the writer refuses a larger
/// event and the reader a record that declares one, before reserving memory for it (a sparse
/// file passes any check against its length).
pub const MAX_EVENT_BYTES: u64 = 1 << 30;
/// Event record flag: the fragment is compressed.
pub const FLAG_COMPRESSED: u32 = 1;
/// Suffix of a file that is still being written.
pub const WRITING_SUFFIX: &str = ".writing";

/// Whether `path` names a data file left unfinished (still named [`WRITING_SUFFIX`]: being
/// written, or given up by its writer).
pub fn is_unfinished(path: &std::path::Path) -> bool {
    path.to_string_lossy().ends_with(WRITING_SUFFIX)
}

/// Longest application or stream name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// The fields of a file start record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStart {
    /// Format version (1 or 2; 2 adds the start record's checksum).
    pub version: u32,
    /// File sequence number within the run and stream.
    pub sequence: u32,
    /// Creation time, nanoseconds since the Unix epoch.
    pub creation_time_ns: u64,
    /// Run number.
    pub run: u32,
    /// Luminosity block.
    pub lumiblock: u32,
    /// Name of the application that wrote the file.
    pub app_name: String,
    /// Stream name.
    pub stream_name: String,
}

impl FileStart {
    /// Size of this start record in words.
    pub fn size_words(&self) -> usize {
        8 + 1
            + self.app_name.len().div_ceil(4)
            + 1
            + self.stream_name.len().div_ceil(4)
            + usize::from(self.checksummed())
    }

    /// Whether the record carries its own checksum (format version 2 and later); a version-1
    /// start record is read unchecked.
    pub fn checksummed(&self) -> bool {
        self.version >= 2
    }

    /// Appends the record's bytes to `out` (with its checksum word for version 2).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let begin = out.len();
        let time = self.creation_time_ns;
        for w in [
            START_MARKER,
            self.size_words() as u32,
            self.version,
            self.sequence,
            time as u32,
            (time >> 32) as u32,
            self.run,
            self.lumiblock,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for s in [&self.app_name, &self.stream_name] {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
            out.resize(out.len() + (s.len().next_multiple_of(4) - s.len()), 0);
        }
        if self.checksummed() {
            let sum = rodeo_format::checksum::adler32(
                rodeo_format::checksum::ADLER32_INIT,
                &out[begin..],
            );
            out.extend_from_slice(&sum.to_le_bytes());
        }
    }
}

/// The file name `<run:08>.<stream>.<app>.<seq:04>.data` (without the `.writing` suffix).
pub fn file_name(run: u32, stream: &str, app: &str, sequence: u32) -> String {
    format!("{run:08}.{stream}.{app}.{sequence:04}.data")
}

/// Parses a file name made by [`file_name`] (optionally with `.writing`): run, stream, app,
/// sequence, and whether it is still being written.
pub fn parse_file_name(name: &str) -> Option<(u32, &str, &str, u32, bool)> {
    let (name, writing) = match name.strip_suffix(WRITING_SUFFIX) {
        Some(n) => (n, true),
        None => (name, false),
    };
    let name = name.strip_suffix(".data")?;
    let mut parts = name.split('.');
    let run = parts.next()?.parse().ok()?;
    let stream = parts.next()?;
    let app = parts.next()?;
    let sequence = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((run, stream, app, sequence, writing))
}

/// Checks an application or stream name: 1 to 255 bytes, no `.`, `/` or NUL (names are part of
/// file names).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && !name.bytes().any(|b| matches!(b, b'.' | b'/' | 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let n = file_name(42, "physics", "SFO-1", 3);
        assert_eq!(n, "00000042.physics.SFO-1.0003.data");
        assert_eq!(
            parse_file_name(&n),
            Some((42, "physics", "SFO-1", 3, false))
        );
        assert_eq!(
            parse_file_name(&format!("{n}.writing")),
            Some((42, "physics", "SFO-1", 3, true))
        );
        assert_eq!(parse_file_name("x.data"), None);
        assert!(valid_name("SFO-1"));
        assert!(!valid_name("a.b") && !valid_name("") && !valid_name("a/b"));
    }

    #[test]
    fn start_record_size() {
        let mut s = FileStart {
            version: 1,
            sequence: 1,
            creation_time_ns: 0,
            run: 1,
            lumiblock: 0,
            app_name: "abcde".into(),
            stream_name: "abcd".into(),
        };
        let mut out = Vec::new();
        s.encode(&mut out);
        assert_eq!(out.len(), s.size_words() * 4);
        assert_eq!(s.size_words(), 8 + 1 + 2 + 1 + 1);
        s.version = 2;
        let mut v2 = Vec::new();
        s.encode(&mut v2);
        assert_eq!(v2.len(), s.size_words() * 4);
        assert_eq!(v2.len(), out.len() + 4);
        // Beside the version and the size word, version 2 only appends the checksum.
        assert_eq!(&v2[12..out.len()], &out[12..], "fields after the version");
        assert_eq!(v2[..4], out[..4]);
    }
}
