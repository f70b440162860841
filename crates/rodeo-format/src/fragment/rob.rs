//! ROB fragments: one ROD fragment wrapped with the readout buffer's header and checksum.

use super::error::{ErrorKind, FragmentError, FragmentKind};
use super::rod::RodFragment;
use super::source_id::SourceId;
use super::status::Status;
use super::{word, GenericHeader, ROB_MARKER};
use crate::checksum::ChecksumType;

/// A validated, zero-copy view of a ROB fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RobFragment<'a> {
    words: &'a [u32],
    header_size: usize,
    nstatus: usize,
    checksum: ChecksumType,
    rod: RodFragment<'a>,
}

impl<'a> RobFragment<'a> {
    /// Validates the ROB fragment at the start of `words` (which may hold more after it): the
    /// generic header, header size `7 + N`, and the payload as exactly one ROD fragment (its
    /// header and trailer). Does not read payload words; see [`RobFragment::verify_checksum`].
    pub fn parse(words: &'a [u32]) -> Result<RobFragment<'a>, FragmentError> {
        let h = GenericHeader::parse(FragmentKind::Rob, words, ROB_MARKER)?;
        let expected = super::GENERIC_FIXED_WORDS as u64 + h.nstatus as u64 + 1;
        if h.header_size as u64 != expected {
            return Err(FragmentError::new(
                FragmentKind::Rob,
                0,
                ErrorKind::BadHeaderSize {
                    expected,
                    found: h.header_size as u32,
                },
            )
            .at_word(2));
        }
        let rod = RodFragment::parse(h.payload()).map_err(|e| e.shifted(h.header_size))?;
        Ok(RobFragment {
            words: h.words,
            header_size: h.header_size,
            nstatus: h.nstatus,
            checksum: h.checksum,
            rod,
        })
    }

    fn generic(&self) -> GenericHeader<'a> {
        GenericHeader {
            words: self.words,
            header_size: self.header_size,
            nstatus: self.nstatus,
            checksum: self.checksum,
        }
    }

    /// All words of the fragment.
    pub fn words(&self) -> &'a [u32] {
        self.words
    }

    /// Total size in words.
    pub fn size_words(&self) -> usize {
        self.words.len()
    }

    /// Header size in words.
    pub fn header_size(&self) -> usize {
        self.header_size
    }

    /// Format version word.
    pub fn version(&self) -> u32 {
        word(self.words, 3)
    }

    /// Source identifier.
    pub fn source_id(&self) -> SourceId {
        SourceId(word(self.words, 4))
    }

    /// The status words.
    pub fn status_words(&self) -> &'a [u32] {
        self.generic().status_words()
    }

    /// The first status word ([`Status::OK`] if there is none).
    pub fn status(&self) -> Status {
        Status(self.status_words().first().copied().unwrap_or(0))
    }

    /// Checksum type.
    pub fn checksum_type(&self) -> ChecksumType {
        self.checksum
    }

    /// The stored checksum word, if the checksum type has one.
    pub fn checksum_word(&self) -> Option<u32> {
        self.generic().checksum_word()
    }

    /// The payload: the ROD fragment's words.
    pub fn payload(&self) -> &'a [u32] {
        self.rod.words()
    }

    /// The ROD fragment.
    pub fn rod(&self) -> RodFragment<'a> {
        self.rod
    }

    /// Computes the checksum of the payload and compares it with the stored word; on mismatch
    /// the error carries both. Always `Ok` for checksum type none.
    pub fn verify_checksum(&self) -> Result<(), FragmentError> {
        self.generic().verify_checksum(FragmentKind::Rob)
    }
}
