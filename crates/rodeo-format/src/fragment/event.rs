//! Full event fragments: the event header, trigger information, stream tags and the ROBs.

use super::error::{ErrorKind, FragmentError, FragmentKind};
use super::rob::RobFragment;
use super::source_id::SourceId;
use super::status::Status;
use super::{word, words_in, GenericHeader, FULL_EVENT_MARKER, GENERIC_FIXED_WORDS};
use crate::checksum::{words_as_bytes, ChecksumType};

/// Fixed words of the full-event specific header after the checksum type word.
pub(super) const EVENT_FIXED_WORDS: usize = 12;
/// Counted lists at the end of the full-event header (L1, L2, EF info, stream tags).
pub(super) const EVENT_LISTS: usize = 4;

/// A validated, zero-copy view of a full event fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FullEvent<'a> {
    words: &'a [u32],
    header_size: usize,
    nstatus: usize,
    checksum: ChecksumType,
    /// Index of the first word after the checksum type word.
    fixed: usize,
    /// (start, len) of the L1, L2, EF info and stream-tag words.
    lists: [(usize, usize); EVENT_LISTS],
}

impl<'a> FullEvent<'a> {
    /// Validates the full event at the start of `words` (which may hold more after it): the
    /// generic header, the specific header's counted lists against the header size, the total
    /// size against the slice. Does not look into the payload: iterate [`FullEvent::robs`] (or
    /// call [`FullEvent::validate_robs`]) to validate the ROB headers, and
    /// [`FullEvent::verify_checksum`] for the payload checksum.
    pub fn parse(words: &'a [u32]) -> Result<FullEvent<'a>, FragmentError> {
        let h = GenericHeader::parse(FragmentKind::FullEvent, words, FULL_EVENT_MARKER)?;
        let err = |e| FragmentError::new(FragmentKind::FullEvent, 0, e);
        let fixed = GENERIC_FIXED_WORDS + h.nstatus + 1;
        let mut pos = fixed as u64 + EVENT_FIXED_WORDS as u64;
        let header_size = h.header_size as u64;
        let names = ["L1 info", "L2 info", "EF info", "stream tags"];
        let mut lists = [(0usize, 0usize); EVENT_LISTS];
        for (list, what) in lists.iter_mut().zip(names) {
            if pos >= header_size {
                return Err(err(ErrorKind::BadHeaderSize {
                    expected: pos + 1,
                    found: h.header_size as u32,
                })
                .at_word(2));
            }
            // pos < header_size <= words.len(), so the word is present and pos fits usize.
            let count = word(h.words, pos as usize);
            let start = pos + 1;
            let end = start + u64::from(count);
            if end > header_size {
                return Err(err(ErrorKind::HeaderOverrun { what, count }).at_word(pos as usize));
            }
            *list = (start as usize, count as usize);
            pos = end;
        }
        if pos != header_size {
            return Err(err(ErrorKind::BadHeaderSize {
                expected: pos,
                found: h.header_size as u32,
            })
            .at_word(2));
        }
        Ok(FullEvent {
            words: h.words,
            header_size: h.header_size,
            nstatus: h.nstatus,
            checksum: h.checksum,
            fixed,
            lists,
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

    fn fixed_word(&self, i: usize) -> u32 {
        word(self.words, self.fixed + i)
    }

    fn list(&self, i: usize) -> &'a [u32] {
        let (start, len) = self.lists.get(i).copied().unwrap_or((0, 0));
        words_in(self.words, start, len)
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

    /// Source identifier (of the writer, e.g. 0x007C0000).
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

    /// Bunch-crossing time, seconds.
    pub fn bc_time_seconds(&self) -> u32 {
        self.fixed_word(0)
    }

    /// Bunch-crossing time, nanoseconds.
    pub fn bc_time_nanoseconds(&self) -> u32 {
        self.fixed_word(1)
    }

    /// Global event id (low word, then high word).
    pub fn global_id(&self) -> u64 {
        u64::from(self.fixed_word(2)) | (u64::from(self.fixed_word(3)) << 32)
    }

    /// Run type.
    pub fn run_type(&self) -> u32 {
        self.fixed_word(4)
    }

    /// Run number.
    pub fn run_number(&self) -> u32 {
        self.fixed_word(5)
    }

    /// Luminosity block.
    pub fn lumi_block(&self) -> u32 {
        self.fixed_word(6)
    }

    /// Extended L1ID (ECR in bits 31..24, L1ID in bits 23..0).
    pub fn extended_l1id(&self) -> u32 {
        self.fixed_word(7)
    }

    /// Bunch-crossing id.
    pub fn bcid(&self) -> u32 {
        self.fixed_word(8)
    }

    /// L1 trigger type.
    pub fn l1_trigger_type(&self) -> u32 {
        self.fixed_word(9)
    }

    /// Compression type: 0 none, 1 zstd.
    pub fn compression(&self) -> u32 {
        self.fixed_word(10)
    }

    /// Uncompressed payload size in words.
    pub fn uncompressed_size(&self) -> u32 {
        self.fixed_word(11)
    }

    /// L1 trigger-info words.
    pub fn l1_info(&self) -> &'a [u32] {
        self.list(0)
    }

    /// L2 trigger-info words.
    pub fn l2_info(&self) -> &'a [u32] {
        self.list(1)
    }

    /// Event-filter info words.
    pub fn ef_info(&self) -> &'a [u32] {
        self.list(2)
    }

    /// The raw stream-tag words.
    pub fn stream_tag_words(&self) -> &'a [u32] {
        self.list(3)
    }

    /// The stream tags, parsed lazily from the stream-tag words.
    pub fn stream_tags(&self) -> StreamTags<'a> {
        StreamTags {
            bytes: words_as_bytes(self.stream_tag_words()),
            pos: 0,
            base: self.lists[3].0,
            done: false,
        }
    }

    /// The payload: the ROB fragments (or the compressed payload).
    pub fn payload(&self) -> &'a [u32] {
        self.generic().payload()
    }

    /// The ROB fragments of the payload, each validated by [`RobFragment::parse`]. The first
    /// error ends the iteration; its offsets are relative to the event's slice. A compressed
    /// payload yields one [`ErrorKind::Compressed`] error.
    pub fn robs(&self) -> Robs<'a> {
        let compression = self.compression();
        Robs {
            payload: self.payload(),
            pos: 0,
            base: self.header_size,
            done: false,
            compression,
        }
    }

    /// Validates the header of every ROB (and its ROD): returns their number or the first error.
    pub fn validate_robs(&self) -> Result<usize, FragmentError> {
        let mut n = 0;
        for rob in self.robs() {
            rob?;
            n += 1;
        }
        Ok(n)
    }

    /// Computes the checksum of the payload and compares it with the stored word; on mismatch
    /// the error carries both. Always `Ok` for checksum type none.
    pub fn verify_checksum(&self) -> Result<(), FragmentError> {
        self.generic().verify_checksum(FragmentKind::FullEvent)
    }
}

/// Iterator over the ROB fragments of a [`FullEvent`]; see [`FullEvent::robs`].
#[derive(Debug, Clone)]
pub struct Robs<'a> {
    payload: &'a [u32],
    pos: usize,
    base: usize,
    done: bool,
    compression: u32,
}

impl<'a> Robs<'a> {
    /// Word offset, inside the event, of the next ROB.
    pub fn offset(&self) -> usize {
        self.base.saturating_add(self.pos)
    }
}

impl<'a> Iterator for Robs<'a> {
    type Item = Result<RobFragment<'a>, FragmentError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.compression != 0 {
            self.done = true;
            return Some(Err(FragmentError::new(
                FragmentKind::FullEvent,
                0,
                ErrorKind::Compressed {
                    compression: self.compression,
                },
            )));
        }
        let rest = self.payload.get(self.pos..).unwrap_or(&[]);
        if rest.is_empty() {
            self.done = true;
            return None;
        }
        match RobFragment::parse(rest) {
            Ok(rob) => {
                // A valid ROB has at least one word, so the iteration always advances.
                self.pos = self.pos.saturating_add(rob.size_words());
                Some(Ok(rob))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e.shifted(self.offset())))
            }
        }
    }
}

impl std::iter::FusedIterator for Robs<'_> {}

/// A stream tag: which output stream an event goes to, and the stream's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StreamTag<'a> {
    /// Stream name (non-empty, no NUL).
    pub name: &'a str,
    /// Stream type (e.g. "physics"; no NUL).
    pub stream_type: &'a str,
}

/// Iterator over the stream tags of a [`FullEvent`]; see [`FullEvent::stream_tags`].
///
/// Entries are "name\0type\0", back to back, the whole padded with NULs to a word boundary. The
/// first malformed entry yields an error (with the byte offset inside the stream-tag words) and
/// ends the iteration.
#[derive(Debug, Clone)]
pub struct StreamTags<'a> {
    bytes: &'a [u8],
    pos: usize,
    base: usize,
    done: bool,
}

impl<'a> StreamTags<'a> {
    fn fail(
        &mut self,
        byte: usize,
        reason: &'static str,
    ) -> Option<Result<StreamTag<'a>, FragmentError>> {
        self.done = true;
        Some(Err(FragmentError::new(
            FragmentKind::FullEvent,
            0,
            ErrorKind::BadStreamTag { byte, reason },
        )
        .at_word(self.base.saturating_add(byte / 4))))
    }

    /// The next NUL-terminated string from `self.pos`.
    fn string(&mut self) -> Result<&'a str, (usize, &'static str)> {
        let start = self.pos;
        let rest = self.bytes.get(start..).unwrap_or(&[]);
        let Some(len) = rest.iter().position(|&b| b == 0) else {
            return Err((start, "missing NUL terminator"));
        };
        let s = std::str::from_utf8(rest.get(..len).unwrap_or(&[]))
            .map_err(|_| (start, "invalid UTF-8"))?;
        self.pos = start.saturating_add(len).saturating_add(1);
        Ok(s)
    }
}

impl<'a> Iterator for StreamTags<'a> {
    type Item = Result<StreamTag<'a>, FragmentError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rest = self.bytes.get(self.pos..).unwrap_or(&[]);
        if rest.iter().all(|&b| b == 0) {
            self.done = true;
            return None;
        }
        if rest.first() == Some(&0) {
            return self.fail(self.pos, "empty stream name");
        }
        let name = match self.string() {
            Ok(s) => s,
            Err((byte, reason)) => return self.fail(byte, reason),
        };
        let stream_type = match self.string() {
            Ok(s) => s,
            Err((byte, reason)) => return self.fail(byte, reason),
        };
        Some(Ok(StreamTag { name, stream_type }))
    }
}

impl std::iter::FusedIterator for StreamTags<'_> {}
