//! Event fragments: ROD, ROB and full event; validating zero-copy views and builders.
//!
//! # Views
//!
//! [`RodFragment`], [`RobFragment`] and [`FullEvent`] borrow a `&[u32]` and never copy it:
//! `parse` checks the header (marker, major version, header size, status word count, checksum
//! type, total size against the slice) and returns a view whose accessors read words in place.
//! A ROB's payload must be exactly one ROD fragment, checked through the ROD trailer
//! (`9 + nstatus + ndata + 3 == size`).
//!
//! Validation reads headers and trailers only, never the payload words. A 1 MiB event of 100
//! ROBs is validated by reading about 2,000 words, so an event store or a data collector can
//! check every fragment it touches at memory-latency cost rather than memory-bandwidth cost. The
//! payload is covered by the checksum, and computing it is a separate, explicit step
//! ([`RobFragment::verify_checksum`], [`FullEvent::verify_checksum`]) a component runs when its
//! configuration asks for it. The rejected alternative, a `parse` that also checks checksums,
//! would make every hop pay a full pass over the data.
//!
//! # Errors
//!
//! Every failure is a [`FragmentError`]: the [`FragmentKind`], the word offset of the fragment
//! (relative to the slice given to the outermost call: a bad ROB inside an event reports its
//! offset in the event), the offending word when there is one, and an [`ErrorKind`] with the
//! expected and found values. Sizes come from the data and may be anything: every size is
//! checked with 64-bit or checked arithmetic before use, every access goes through `get`, and no
//! input can make a parser panic. A byte-swapped stream is recognised from its marker and
//! reported as [`ErrorKind::ByteSwapped`]; legacy fragments as [`ErrorKind::UnsupportedLegacy`].
//!
//! # Builders
//!
//! [`RodBuilder`], [`RobBuilder`] and [`EventBuilder`] write into a caller's `Vec<u32>` or
//! `&mut [u32]` from pieces (scatter-gather: a ROD data block, a ROB's ROD or an event's payload
//! can be several slices, for example DMA pages), accumulating checksums piece by piece. Each has
//! `size_words` to pre-size a buffer without writing. What they write, the views parse.
//!
//! Word order: fragments are native `u32` words; the crate assumes a little-endian host (as the
//! format does) where byte order matters, for Adler-32 and stream-tag strings.

mod builder;
mod error;
mod event;
mod rob;
mod rod;
mod source_id;
mod status;

pub use builder::{EventBuilder, RobBuilder, RobPayload, RodBuilder};
pub use error::{ErrorKind, FragmentError, FragmentKind};
pub use event::{FullEvent, Robs, StreamTag, StreamTags};
pub use rob::RobFragment;
pub use rod::{RodFragment, StatusPosition};
pub use source_id::{SourceId, SubDetector, System};
pub use status::Status;

/// Marker of a full event fragment.
pub const FULL_EVENT_MARKER: u32 = 0xAA12_34AA;
/// Marker of a ROB fragment.
pub const ROB_MARKER: u32 = 0xDD12_34DD;
/// Marker of a ROD fragment.
pub const ROD_MARKER: u32 = 0xEE12_34EE;
/// Marker of a legacy sub-detector fragment (recognised, not supported).
pub const LEGACY_SUBDETECTOR_MARKER: u32 = 0xBB12_34BB;
/// Marker of a legacy ROS fragment (recognised, not supported).
pub const LEGACY_ROS_MARKER: u32 = 0xCC12_34CC;
/// Format version word of full events and ROB fragments.
pub const FORMAT_VERSION: u32 = 0x0500_0000;
/// Format version word of ROD fragments, minor version 0.
pub const ROD_FORMAT_VERSION: u32 = 0x0301_0000;
/// Legacy S-LINK begin-of-fragment control word.
pub const SLINK_BEGIN: u32 = 0xB0F0_0000;
/// Legacy S-LINK end-of-fragment control word.
pub const SLINK_END: u32 = 0xE0F0_0000;
/// Words in a ROD header.
pub const ROD_HEADER_WORDS: usize = 9;
/// Words in a ROD trailer.
pub const ROD_TRAILER_WORDS: usize = 3;

const VERSION_MAJOR_SHIFT: u32 = 16;
const VERSION_MAJOR: u32 = FORMAT_VERSION >> VERSION_MAJOR_SHIFT;
const ROD_VERSION_MAJOR: u32 = ROD_FORMAT_VERSION >> VERSION_MAJOR_SHIFT;
/// Words of the generic header before the status words.
const GENERIC_FIXED_WORDS: usize = 6;

/// Word `i`, or 0 past the end (views only ask for words their validation proved present).
#[inline]
fn word(words: &[u32], i: usize) -> u32 {
    words.get(i).copied().unwrap_or(0)
}

/// `len` words from `start`, or an empty slice if they are not all there.
#[inline]
fn words_in(words: &[u32], start: usize, len: usize) -> &[u32] {
    start
        .checked_add(len)
        .and_then(|end| words.get(start..end))
        .unwrap_or(&[])
}

/// Checks the marker of a fragment of `kind`, telling apart byte-swapped and legacy markers.
fn check_marker(kind: FragmentKind, words: &[u32], expected: u32) -> Result<(), FragmentError> {
    let err = |e| Err(FragmentError::new(kind, 0, e).at_word(0));
    let Some(&found) = words.first() else {
        return err(ErrorKind::Truncated {
            what: "marker",
            needed: 1,
            available: 0,
        });
    };
    if found == expected {
        return Ok(());
    }
    if found == LEGACY_SUBDETECTOR_MARKER || found == LEGACY_ROS_MARKER {
        return err(ErrorKind::UnsupportedLegacy { marker: found });
    }
    let swapped = found.swap_bytes();
    let known = [
        FULL_EVENT_MARKER,
        ROB_MARKER,
        ROD_MARKER,
        LEGACY_SUBDETECTOR_MARKER,
        LEGACY_ROS_MARKER,
    ];
    if known.contains(&swapped) {
        return err(ErrorKind::ByteSwapped {
            expected: swapped,
            found,
        });
    }
    err(ErrorKind::BadMarker { expected, found })
}

/// The validated generic header of a full event or ROB fragment.
#[derive(Debug, Clone, Copy)]
struct GenericHeader<'a> {
    /// Exactly the fragment's words (`size` of them).
    words: &'a [u32],
    header_size: usize,
    nstatus: usize,
    checksum: crate::checksum::ChecksumType,
}

impl<'a> GenericHeader<'a> {
    /// Validates the generic header: marker, version, sizes against the slice, status count
    /// against the header size, checksum type.
    fn parse(
        kind: FragmentKind,
        words: &'a [u32],
        marker: u32,
    ) -> Result<GenericHeader<'a>, FragmentError> {
        let err = |e| FragmentError::new(kind, 0, e);
        check_marker(kind, words, marker)?;
        let available = words.len();
        let Some(fixed) = words.get(..GENERIC_FIXED_WORDS) else {
            return Err(err(ErrorKind::Truncated {
                what: "generic header",
                needed: GENERIC_FIXED_WORDS as u64,
                available,
            }));
        };
        let (size, header_size, version, nstatus) = (fixed[1], fixed[2], fixed[3], fixed[5]);
        if version >> VERSION_MAJOR_SHIFT != VERSION_MAJOR {
            return Err(err(ErrorKind::BadVersion {
                expected: VERSION_MAJOR,
                found: version,
            })
            .at_word(3));
        }
        // Header: fixed words, status words, checksum type word.
        let min_header = GENERIC_FIXED_WORDS as u64 + u64::from(nstatus) + 1;
        if u64::from(header_size) < min_header {
            return Err(err(ErrorKind::BadHeaderSize {
                expected: min_header,
                found: header_size,
            })
            .at_word(2));
        }
        if u64::from(header_size) > u64::from(size) {
            return Err(err(ErrorKind::SizeTooSmall {
                size,
                minimum: u64::from(header_size),
            })
            .at_word(1));
        }
        let Some(words) = words.get(..size as usize) else {
            return Err(err(ErrorKind::Truncated {
                what: "fragment",
                needed: u64::from(size),
                available,
            }));
        };
        // header_size <= size <= len, so the checksum word index is in bounds.
        let ck_index = GENERIC_FIXED_WORDS + nstatus as usize;
        let ck_word = word(words, ck_index);
        let Some(checksum) = crate::checksum::ChecksumType::from_word(ck_word) else {
            return Err(err(ErrorKind::UnknownChecksumType { found: ck_word }).at_word(ck_index));
        };
        let minimum = u64::from(header_size) + checksum.trailer_words() as u64;
        if u64::from(size) < minimum {
            return Err(err(ErrorKind::SizeTooSmall { size, minimum }).at_word(1));
        }
        Ok(GenericHeader {
            words,
            header_size: header_size as usize,
            nstatus: nstatus as usize,
            checksum,
        })
    }

    fn status_words(&self) -> &'a [u32] {
        words_in(self.words, GENERIC_FIXED_WORDS, self.nstatus)
    }

    /// The payload: between the header and the checksum word.
    fn payload(&self) -> &'a [u32] {
        let end = self
            .words
            .len()
            .saturating_sub(self.checksum.trailer_words());
        self.words.get(self.header_size..end).unwrap_or(&[])
    }

    /// The stored checksum word, if the type has one.
    fn checksum_word(&self) -> Option<u32> {
        match self.checksum {
            crate::checksum::ChecksumType::None => None,
            _ => self.words.last().copied(),
        }
    }

    /// Computes the payload checksum and compares it with the stored one.
    fn verify_checksum(&self, kind: FragmentKind) -> Result<(), FragmentError> {
        let Some(expected) = self.checksum_word() else {
            return Ok(());
        };
        let computed = self.checksum.compute(self.payload());
        if computed == expected {
            Ok(())
        } else {
            Err(FragmentError::new(
                kind,
                0,
                ErrorKind::ChecksumMismatch {
                    checksum: self.checksum,
                    expected,
                    computed,
                },
            )
            .at_word(self.words.len().saturating_sub(1)))
        }
    }
}
