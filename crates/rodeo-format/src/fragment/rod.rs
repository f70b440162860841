//! ROD fragments: the unit a readout driver (or the software ROD) produces for one event.

use super::error::{ErrorKind, FragmentError, FragmentKind};
use super::source_id::SourceId;
use super::{check_marker, word, words_in, ROD_HEADER_WORDS, ROD_MARKER, ROD_TRAILER_WORDS};
use super::{ROD_VERSION_MAJOR, VERSION_MAJOR_SHIFT};

/// Where the status block sits relative to the data block (the last trailer word).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StatusPosition {
    /// Status words before the data (word 0).
    #[default]
    BeforeData,
    /// Status words after the data (word 1).
    AfterData,
}

impl StatusPosition {
    /// The trailer word for this position.
    pub fn to_word(self) -> u32 {
        match self {
            StatusPosition::BeforeData => 0,
            StatusPosition::AfterData => 1,
        }
    }
}

/// A validated, zero-copy view of a ROD fragment.
///
/// A ROD fragment carries no total size in its header: it occupies the whole slice given to
/// [`RodFragment::parse`] (inside a ROB, the ROB's payload) and is read from its end, the trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RodFragment<'a> {
    words: &'a [u32],
    nstatus: usize,
    ndata: usize,
    position: StatusPosition,
}

impl<'a> RodFragment<'a> {
    /// Validates the ROD fragment that fills `words`: marker, header size (9), major version
    /// (0x0301), status position, and that `9 + nstatus + ndata + 3` equals the slice length.
    /// Reads the header and trailer only.
    pub fn parse(words: &'a [u32]) -> Result<RodFragment<'a>, FragmentError> {
        let err = |e| FragmentError::new(FragmentKind::Rod, 0, e);
        check_marker(FragmentKind::Rod, words, ROD_MARKER)?;
        let len = words.len();
        let min = ROD_HEADER_WORDS + ROD_TRAILER_WORDS;
        if len < min {
            return Err(err(ErrorKind::Truncated {
                what: "ROD header and trailer",
                needed: min as u64,
                available: len,
            }));
        }
        let header_size = word(words, 1);
        if header_size as usize != ROD_HEADER_WORDS {
            return Err(err(ErrorKind::BadHeaderSize {
                expected: ROD_HEADER_WORDS as u64,
                found: header_size,
            })
            .at_word(1));
        }
        let version = word(words, 2);
        if version >> VERSION_MAJOR_SHIFT != ROD_VERSION_MAJOR {
            return Err(err(ErrorKind::BadVersion {
                expected: ROD_VERSION_MAJOR,
                found: version,
            })
            .at_word(2));
        }
        let pos = word(words, len - 1);
        let ndata = word(words, len - 2);
        let nstatus = word(words, len - 3);
        let position = match pos {
            0 => StatusPosition::BeforeData,
            1 => StatusPosition::AfterData,
            found => {
                return Err(err(ErrorKind::BadStatusPosition { found }).at_word(len - 1));
            }
        };
        let total = min as u64 + u64::from(nstatus) + u64::from(ndata);
        if total != len as u64 {
            return Err(err(ErrorKind::RodTrailer {
                size: len as u64,
                nstatus,
                ndata,
            })
            .at_word(len - 3));
        }
        Ok(RodFragment {
            words,
            nstatus: nstatus as usize,
            ndata: ndata as usize,
            position,
        })
    }

    /// All words of the fragment.
    pub fn words(&self) -> &'a [u32] {
        self.words
    }

    /// Size in words.
    pub fn size_words(&self) -> usize {
        self.words.len()
    }

    /// Format version word (0x0301xxxx).
    pub fn version(&self) -> u32 {
        word(self.words, 2)
    }

    /// Detector-defined minor version (low 16 bits of the version word).
    pub fn minor_version(&self) -> u16 {
        self.version() as u16
    }

    /// Source identifier.
    pub fn source_id(&self) -> SourceId {
        SourceId(word(self.words, 3))
    }

    /// Run number.
    pub fn run_number(&self) -> u32 {
        word(self.words, 4)
    }

    /// Extended L1ID: ECR counter in bits 31..24, L1ID in bits 23..0.
    pub fn extended_l1id(&self) -> u32 {
        word(self.words, 5)
    }

    /// ECR counter (bits 31..24 of the extended L1ID).
    pub fn ecr(&self) -> u8 {
        (self.extended_l1id() >> 24) as u8
    }

    /// L1ID proper (bits 23..0 of the extended L1ID).
    pub fn l1id(&self) -> u32 {
        self.extended_l1id() & 0x00FF_FFFF
    }

    /// Bunch-crossing id (bits 11..0).
    pub fn bcid(&self) -> u16 {
        (word(self.words, 6) & 0xFFF) as u16
    }

    /// L1 trigger type (bits 7..0).
    pub fn trigger_type(&self) -> u8 {
        word(self.words, 7) as u8
    }

    /// Detector event type.
    pub fn detector_event_type(&self) -> u32 {
        word(self.words, 8)
    }

    /// Where the status block is.
    pub fn status_position(&self) -> StatusPosition {
        self.position
    }

    /// The status words.
    pub fn status_words(&self) -> &'a [u32] {
        let start = match self.position {
            StatusPosition::BeforeData => ROD_HEADER_WORDS,
            StatusPosition::AfterData => ROD_HEADER_WORDS + self.ndata,
        };
        words_in(self.words, start, self.nstatus)
    }

    /// The data words.
    pub fn data(&self) -> &'a [u32] {
        let start = match self.position {
            StatusPosition::BeforeData => ROD_HEADER_WORDS + self.nstatus,
            StatusPosition::AfterData => ROD_HEADER_WORDS,
        };
        words_in(self.words, start, self.ndata)
    }
}
