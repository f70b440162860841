//! Typed errors of fragment parsing, checksum verification and building.

use crate::checksum::ChecksumType;
use std::fmt;

/// Which kind of fragment an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FragmentKind {
    /// A ROD fragment (marker 0xEE1234EE).
    Rod,
    /// A ROB fragment (marker 0xDD1234DD).
    Rob,
    /// A full event fragment (marker 0xAA1234AA).
    FullEvent,
}

impl fmt::Display for FragmentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FragmentKind::Rod => "ROD",
            FragmentKind::Rob => "ROB",
            FragmentKind::FullEvent => "full event",
        })
    }
}

/// An error found in (or while building) a fragment, with its context.
///
/// `offset` is the word offset, relative to the start of the slice given to the outermost
/// `parse` call, of the fragment that is wrong (for an error inside a ROB of an event: the ROB's
/// offset inside the event's slice). `word` is the offset of the offending word when the error is
/// about one word, also relative to that slice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} fragment at word {offset}: {error}")]
pub struct FragmentError {
    kind: FragmentKind,
    offset: usize,
    word: Option<usize>,
    #[source]
    error: ErrorKind,
}

impl FragmentError {
    /// A new error about the fragment of `kind` at word `offset`.
    pub fn new(kind: FragmentKind, offset: usize, error: ErrorKind) -> FragmentError {
        FragmentError {
            kind,
            offset,
            word: None,
            error,
        }
    }

    /// The same error, naming the offending word as `word` words from the fragment start.
    pub(crate) fn at_word(mut self, word: usize) -> FragmentError {
        self.word = Some(self.offset.saturating_add(word));
        self
    }

    /// The same error with all offsets moved by `base` words (the error was found in a
    /// sub-slice that starts `base` words into the caller's slice).
    pub(crate) fn shifted(mut self, base: usize) -> FragmentError {
        self.offset = self.offset.saturating_add(base);
        self.word = self.word.map(|w| w.saturating_add(base));
        self
    }

    /// The kind of fragment that is wrong.
    pub fn kind(&self) -> FragmentKind {
        self.kind
    }

    /// Word offset of the wrong fragment from the start of the parsed slice.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Word offset of the offending word from the start of the parsed slice, if the error is
    /// about a single word.
    pub fn word(&self) -> Option<usize> {
        self.word
    }

    /// What is wrong, with expected and found values.
    pub fn error(&self) -> &ErrorKind {
        &self.error
    }
}

/// What is wrong with a fragment.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The slice ends before the fragment does.
    #[error("truncated: {what} needs {needed} words, {available} available")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Words needed from the fragment start.
        needed: u64,
        /// Words available from the fragment start.
        available: usize,
    },
    /// The first word is not the expected marker.
    #[error("bad marker: expected {expected:#010x}, found {found:#010x}")]
    BadMarker {
        /// The marker of the expected fragment kind.
        expected: u32,
        /// The word found.
        found: u32,
    },
    /// The marker is a known marker byte-swapped: the stream has the wrong endianness.
    #[error("byte-swapped stream: marker {found:#010x} is {expected:#010x} byte-swapped")]
    ByteSwapped {
        /// The marker, in the right byte order.
        expected: u32,
        /// The word found.
        found: u32,
    },
    /// A legacy fragment (sub-detector 0xBB1234BB or ROS 0xCC1234CC), which rodeo does not read.
    #[error("unsupported legacy fragment (marker {marker:#010x})")]
    UnsupportedLegacy {
        /// The legacy marker found.
        marker: u32,
    },
    /// The major format version is not the supported one.
    #[error("unsupported format version {found:#010x} (expected major {expected:#06x})")]
    BadVersion {
        /// The supported major version (bits 31..16).
        expected: u32,
        /// The whole version word found.
        found: u32,
    },
    /// The header size word does not match the header layout.
    #[error("bad header size: expected {expected}, found {found}")]
    BadHeaderSize {
        /// The size the header layout gives.
        expected: u64,
        /// The header size word.
        found: u32,
    },
    /// The total size word is smaller than the header plus trailer.
    #[error("fragment size {size} is smaller than the minimum {minimum}")]
    SizeTooSmall {
        /// The size word.
        size: u32,
        /// The smallest size the header allows.
        minimum: u64,
    },
    /// The checksum type word names no known checksum.
    #[error("unknown checksum type {found}")]
    UnknownChecksumType {
        /// The checksum type word.
        found: u32,
    },
    /// The ROD trailer counts do not add up to the fragment size.
    #[error("ROD trailer inconsistent: 9 + {nstatus} status + {ndata} data + 3 != size {size}")]
    RodTrailer {
        /// The size the ROD fragment occupies (from its ROB, or the slice).
        size: u64,
        /// Number of status words in the trailer.
        nstatus: u32,
        /// Number of data words in the trailer.
        ndata: u32,
    },
    /// The ROD status position word is neither 0 nor 1.
    #[error("bad ROD status position {found} (0 or 1 expected)")]
    BadStatusPosition {
        /// The status position word.
        found: u32,
    },
    /// A variable-length header field runs past the header.
    #[error("header field {what} ({count} words) runs past the header")]
    HeaderOverrun {
        /// The field.
        what: &'static str,
        /// Its word count.
        count: u32,
    },
    /// The stored checksum differs from the one computed over the payload.
    #[error("{checksum:?} checksum mismatch: stored {expected:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// Checksum type.
        checksum: ChecksumType,
        /// The checksum word stored in the fragment.
        expected: u32,
        /// The checksum computed over the payload.
        computed: u32,
    },
    /// The payload is compressed, so its ROBs cannot be read in place.
    #[error("payload is compressed (compression type {compression})")]
    Compressed {
        /// The compression type word.
        compression: u32,
    },
    /// The stream-tag words are not valid "name\0type\0" entries.
    #[error("bad stream tag at byte {byte}: {reason}")]
    BadStreamTag {
        /// Byte offset inside the stream-tag words.
        byte: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A builder's output buffer is too small.
    #[error("buffer too small: {needed} words needed, {available} available")]
    BufferTooSmall {
        /// Words the fragment needs.
        needed: usize,
        /// Words in the buffer.
        available: usize,
    },
    /// A fragment to build does not fit the 32-bit size fields.
    #[error("fragment too large: {words} words")]
    TooLarge {
        /// Its size in words.
        words: u64,
    },
}
