//! Builders: write fragments from pieces into a `Vec<u32>` or a `&mut [u32]`.
//!
//! A builder is a plain struct of borrowed parts. It computes its size first (checked against the
//! 32-bit size fields), then writes every part once, in order, feeding the payload pieces to the
//! checksum as they go out: no intermediate copy of the payload.

use super::error::{ErrorKind, FragmentError, FragmentKind};
use super::event::{StreamTag, EVENT_FIXED_WORDS, EVENT_LISTS};
use super::rod::StatusPosition;
use super::source_id::SourceId;
use super::{
    FORMAT_VERSION, FULL_EVENT_MARKER, GENERIC_FIXED_WORDS, ROB_MARKER, ROD_FORMAT_VERSION,
    ROD_HEADER_WORDS, ROD_MARKER, ROD_TRAILER_WORDS,
};
use crate::checksum::{Checksum, ChecksumType};

/// Where builders write.
trait Sink {
    fn put_slice(&mut self, words: &[u32]);
    fn put(&mut self, word: u32) {
        self.put_slice(&[word]);
    }
}

struct VecSink<'v>(&'v mut Vec<u32>);

impl Sink for VecSink<'_> {
    fn put_slice(&mut self, words: &[u32]) {
        self.0.extend_from_slice(words);
    }
}

/// Keeps a fragment's words before and after its payload, skipping the payload itself (the
/// pieces stay where they are; the checksum still runs over them).
struct SplitSink<'v> {
    head: &'v mut Vec<u32>,
    tail: &'v mut Vec<u32>,
    head_left: usize,
    skip_left: u64,
}

impl Sink for SplitSink<'_> {
    fn put_slice(&mut self, mut words: &[u32]) {
        let n = self.head_left.min(words.len());
        self.head.extend_from_slice(&words[..n]);
        self.head_left -= n;
        words = &words[n..];
        let n = usize::try_from(self.skip_left).map_or(words.len(), |s| s.min(words.len()));
        self.skip_left -= n as u64;
        self.tail.extend_from_slice(&words[n..]);
    }
}

/// Writes into a slice; a write past its end is dropped and remembered (never panics).
struct SliceSink<'s> {
    buf: &'s mut [u32],
    pos: usize,
    overflow: bool,
}

impl Sink for SliceSink<'_> {
    fn put_slice(&mut self, words: &[u32]) {
        let dst = self
            .pos
            .checked_add(words.len())
            .and_then(|end| self.buf.get_mut(self.pos..end));
        match dst {
            Some(dst) => {
                dst.copy_from_slice(words);
                self.pos += words.len();
            }
            None => self.overflow = true,
        }
    }
}

/// Passes words on and feeds them to a checksum.
struct Summing<'s, S: Sink> {
    inner: &'s mut S,
    checksum: Checksum,
}

impl<S: Sink> Sink for Summing<'_, S> {
    fn put_slice(&mut self, words: &[u32]) {
        self.checksum.update_words(words);
        self.inner.put_slice(words);
    }
}

/// A fragment that can be sized and emitted.
trait Emit {
    fn kind(&self) -> FragmentKind;
    fn size(&self) -> Result<usize, FragmentError>;
    /// Emits the fragment; `size` is the value `size()` returned.
    fn emit<S: Sink>(&self, sink: &mut S, size: u32);
}

fn to_u32(kind: FragmentKind, words: u64) -> Result<u32, FragmentError> {
    u32::try_from(words).map_err(|_| FragmentError::new(kind, 0, ErrorKind::TooLarge { words }))
}

fn pieces_len(pieces: &[&[u32]]) -> u64 {
    pieces.iter().map(|p| p.len() as u64).sum()
}

fn checked_size<E: Emit>(e: &E) -> Result<(usize, u32), FragmentError> {
    let size = e.size()?;
    Ok((size, to_u32(e.kind(), size as u64)?))
}

fn write_vec<E: Emit>(e: &E, out: &mut Vec<u32>) -> Result<usize, FragmentError> {
    let (size, size32) = checked_size(e)?;
    out.reserve(size);
    e.emit(&mut VecSink(out), size32);
    Ok(size)
}

fn write_slice<E: Emit>(e: &E, out: &mut [u32]) -> Result<usize, FragmentError> {
    let (size, size32) = checked_size(e)?;
    let too_small = FragmentError::new(
        e.kind(),
        0,
        ErrorKind::BufferTooSmall {
            needed: size,
            available: out.len(),
        },
    );
    if size > out.len() {
        return Err(too_small);
    }
    let mut sink = SliceSink {
        buf: out,
        pos: 0,
        overflow: false,
    };
    e.emit(&mut sink, size32);
    if sink.overflow {
        return Err(too_small);
    }
    Ok(size)
}

/// Writes the generic header (full event and ROB) up to and including the checksum type word.
fn generic_header<S: Sink>(
    sink: &mut S,
    marker: u32,
    size: u32,
    header_size: u32,
    source_id: SourceId,
    status: &[u32],
    checksum: ChecksumType,
) {
    sink.put_slice(&[
        marker,
        size,
        header_size,
        FORMAT_VERSION,
        source_id.word(),
        status.len() as u32,
    ]);
    sink.put_slice(status);
    sink.put(checksum.to_word());
}

/// A ROD fragment to write. The data block may come in several pieces.
#[derive(Debug, Clone, Copy, Default)]
pub struct RodBuilder<'a> {
    /// Source identifier.
    pub source_id: SourceId,
    /// Detector-defined minor version (low half of the version word).
    pub minor_version: u16,
    /// Run number.
    pub run_number: u32,
    /// Extended L1ID (ECR in bits 31..24).
    pub extended_l1id: u32,
    /// Bunch-crossing id (12 bits; higher bits are dropped).
    pub bcid: u16,
    /// L1 trigger type.
    pub trigger_type: u8,
    /// Detector event type.
    pub detector_event_type: u32,
    /// Status words.
    pub status: &'a [u32],
    /// Where the status block goes.
    pub status_position: StatusPosition,
    /// The data block, as pieces written back to back.
    pub data: &'a [&'a [u32]],
}

impl RodBuilder<'_> {
    /// Size of the fragment in words, without writing it.
    pub fn size_words(&self) -> Result<usize, FragmentError> {
        let words = (ROD_HEADER_WORDS + ROD_TRAILER_WORDS) as u64
            + self.status.len() as u64
            + pieces_len(self.data);
        Ok(to_u32(FragmentKind::Rod, words)? as usize)
    }

    /// The nine header words.
    pub fn header_words(&self) -> [u32; ROD_HEADER_WORDS] {
        [
            ROD_MARKER,
            ROD_HEADER_WORDS as u32,
            ROD_FORMAT_VERSION | u32::from(self.minor_version),
            self.source_id.word(),
            self.run_number,
            self.extended_l1id,
            u32::from(self.bcid) & 0xFFF,
            u32::from(self.trigger_type),
            self.detector_event_type,
        ]
    }

    /// The three trailer words (status count, data count, status position).
    pub fn trailer_words(&self) -> Result<[u32; ROD_TRAILER_WORDS], FragmentError> {
        Ok([
            to_u32(FragmentKind::Rod, self.status.len() as u64)?,
            to_u32(FragmentKind::Rod, pieces_len(self.data))?,
            self.status_position.to_word(),
        ])
    }

    /// Appends the fragment to `out`; returns the number of words written.
    pub fn write_vec(&self, out: &mut Vec<u32>) -> Result<usize, FragmentError> {
        write_vec(self, out)
    }

    /// Writes the fragment at the start of `out`; returns the number of words written.
    pub fn write_slice(&self, out: &mut [u32]) -> Result<usize, FragmentError> {
        write_slice(self, out)
    }
}

impl Emit for RodBuilder<'_> {
    fn kind(&self) -> FragmentKind {
        FragmentKind::Rod
    }

    fn size(&self) -> Result<usize, FragmentError> {
        self.size_words()
    }

    fn emit<S: Sink>(&self, sink: &mut S, _size: u32) {
        sink.put_slice(&self.header_words());
        if self.status_position == StatusPosition::BeforeData {
            sink.put_slice(self.status);
        }
        for piece in self.data {
            sink.put_slice(piece);
        }
        if self.status_position == StatusPosition::AfterData {
            sink.put_slice(self.status);
        }
        // size() succeeded, so both counts fit u32.
        sink.put_slice(&[
            self.status.len() as u32,
            pieces_len(self.data) as u32,
            self.status_position.to_word(),
        ]);
    }
}

/// What a ROB fragment wraps.
#[derive(Debug, Clone, Copy)]
pub enum RobPayload<'a> {
    /// A ROD fragment built on the fly (its data pieces are copied once, into the output).
    Rod(RodBuilder<'a>),
    /// An already formatted ROD fragment, as pieces written back to back (not validated).
    Pieces(&'a [&'a [u32]]),
}

impl Default for RobPayload<'_> {
    fn default() -> Self {
        RobPayload::Pieces(&[])
    }
}

/// A ROB fragment to write: header, one ROD fragment, optional checksum over the ROD.
#[derive(Debug, Clone, Copy, Default)]
pub struct RobBuilder<'a> {
    /// Source identifier.
    pub source_id: SourceId,
    /// Status words.
    pub status: &'a [u32],
    /// Checksum type.
    pub checksum: ChecksumType,
    /// The ROD fragment.
    pub payload: RobPayload<'a>,
}

impl RobBuilder<'_> {
    fn header_size(&self) -> u64 {
        GENERIC_FIXED_WORDS as u64 + self.status.len() as u64 + 1
    }

    fn payload_size(&self) -> Result<u64, FragmentError> {
        Ok(match self.payload {
            RobPayload::Rod(rod) => rod.size_words()? as u64,
            RobPayload::Pieces(p) => pieces_len(p),
        })
    }

    /// Size of the fragment in words, without writing it.
    pub fn size_words(&self) -> Result<usize, FragmentError> {
        let words =
            self.header_size() + self.payload_size()? + self.checksum.trailer_words() as u64;
        Ok(to_u32(FragmentKind::Rob, words)? as usize)
    }

    /// Appends the fragment to `out`; returns the number of words written.
    pub fn write_vec(&self, out: &mut Vec<u32>) -> Result<usize, FragmentError> {
        write_vec(self, out)
    }

    /// Writes the fragment at the start of `out`; returns the number of words written.
    pub fn write_slice(&self, out: &mut [u32]) -> Result<usize, FragmentError> {
        write_slice(self, out)
    }
}

impl Emit for RobBuilder<'_> {
    fn kind(&self) -> FragmentKind {
        FragmentKind::Rob
    }

    fn size(&self) -> Result<usize, FragmentError> {
        self.size_words()
    }

    fn emit<S: Sink>(&self, sink: &mut S, size: u32) {
        generic_header(
            sink,
            ROB_MARKER,
            size,
            self.header_size() as u32,
            self.source_id,
            self.status,
            self.checksum,
        );
        let mut summing = Summing {
            inner: sink,
            checksum: Checksum::new(self.checksum),
        };
        match self.payload {
            RobPayload::Rod(rod) => rod.emit(&mut summing, 0),
            RobPayload::Pieces(pieces) => {
                for p in pieces {
                    summing.put_slice(p);
                }
            }
        }
        let checksum = summing.checksum.finish();
        if self.checksum != ChecksumType::None {
            sink.put(checksum);
        }
    }
}

/// A full event to write: header fields, trigger info, stream tags, and the ROB fragments.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventBuilder<'a> {
    /// Source identifier of the writer (e.g. 0x007C0000).
    pub source_id: SourceId,
    /// Status words.
    pub status: &'a [u32],
    /// Checksum type (over the payload).
    pub checksum: ChecksumType,
    /// Bunch-crossing time, seconds.
    pub bc_time_seconds: u32,
    /// Bunch-crossing time, nanoseconds.
    pub bc_time_nanoseconds: u32,
    /// Global event id.
    pub global_id: u64,
    /// Run type.
    pub run_type: u32,
    /// Run number.
    pub run_number: u32,
    /// Luminosity block.
    pub lumi_block: u32,
    /// Extended L1ID.
    pub extended_l1id: u32,
    /// Bunch-crossing id.
    pub bcid: u32,
    /// L1 trigger type.
    pub l1_trigger_type: u32,
    /// Compression type (0 none, 1 zstd; the builder does not compress, it writes the payload
    /// as given).
    pub compression: u32,
    /// Uncompressed payload size in words; `None` writes the payload size.
    pub uncompressed_size: Option<u32>,
    /// L1 trigger-info words.
    pub l1_info: &'a [u32],
    /// L2 trigger-info words.
    pub l2_info: &'a [u32],
    /// Event-filter info words.
    pub ef_info: &'a [u32],
    /// Stream tags (names non-empty; no NUL in names or types).
    pub stream_tags: &'a [StreamTag<'a>],
    /// The payload: ROB fragments as pieces written back to back (not validated).
    pub robs: &'a [&'a [u32]],
}

impl EventBuilder<'_> {
    /// Number of words the stream tags take, after checking them.
    fn stream_tag_words(&self) -> Result<u64, FragmentError> {
        let mut bytes = 0u64;
        for tag in self.stream_tags {
            let bad = |reason| {
                FragmentError::new(
                    FragmentKind::FullEvent,
                    0,
                    ErrorKind::BadStreamTag {
                        byte: bytes as usize,
                        reason,
                    },
                )
            };
            if tag.name.is_empty() {
                return Err(bad("empty stream name"));
            }
            if tag.name.contains('\0') || tag.stream_type.contains('\0') {
                return Err(bad("NUL inside a stream name or type"));
            }
            bytes += tag.name.len() as u64 + tag.stream_type.len() as u64 + 2;
        }
        Ok(bytes.div_ceil(4))
    }

    fn header_size(&self) -> Result<u64, FragmentError> {
        Ok(GENERIC_FIXED_WORDS as u64
            + self.status.len() as u64
            + 1
            + EVENT_FIXED_WORDS as u64
            + EVENT_LISTS as u64
            + self.l1_info.len() as u64
            + self.l2_info.len() as u64
            + self.ef_info.len() as u64
            + self.stream_tag_words()?)
    }

    /// Size of the fragment in words, without writing it.
    pub fn size_words(&self) -> Result<usize, FragmentError> {
        let words =
            self.header_size()? + pieces_len(self.robs) + self.checksum.trailer_words() as u64;
        Ok(to_u32(FragmentKind::FullEvent, words)? as usize)
    }

    /// Appends the event to `out`; returns the number of words written.
    pub fn write_vec(&self, out: &mut Vec<u32>) -> Result<usize, FragmentError> {
        write_vec(self, out)
    }

    /// Writes the event at the start of `out`; returns the number of words written.
    pub fn write_slice(&self, out: &mut [u32]) -> Result<usize, FragmentError> {
        write_slice(self, out)
    }

    /// Writes the event without its payload: the words before the ROB fragments into `head`
    /// and those after them (the checksum word, if any) into `tail` (both cleared first), the
    /// checksum computed over the pieces where they lie. `head`, the pieces of `robs` and
    /// `tail` back to back are the event [`EventBuilder::write_vec`] writes (a sender gathers
    /// them, no copy of the payload here); returns the event's size in words.
    pub fn write_around(
        &self,
        head: &mut Vec<u32>,
        tail: &mut Vec<u32>,
    ) -> Result<usize, FragmentError> {
        let (size, size32) = checked_size(self)?;
        head.clear();
        tail.clear();
        let mut sink = SplitSink {
            head,
            tail,
            head_left: self.header_size()? as usize,
            skip_left: pieces_len(self.robs),
        };
        self.emit(&mut sink, size32);
        Ok(size)
    }

    fn emit_stream_tags<S: Sink>(&self, sink: &mut S, nwords: u32) {
        sink.put(nwords);
        let bytes = self.stream_tags.iter().flat_map(|t| {
            t.name
                .bytes()
                .chain([0])
                .chain(t.stream_type.bytes())
                .chain([0])
        });
        let mut acc = [0u8; 4];
        let mut n = 0;
        for b in bytes {
            acc[n] = b;
            n += 1;
            if n == 4 {
                sink.put(u32::from_le_bytes(acc));
                n = 0;
            }
        }
        if n > 0 {
            acc[n..].fill(0);
            sink.put(u32::from_le_bytes(acc));
        }
    }
}

impl Emit for EventBuilder<'_> {
    fn kind(&self) -> FragmentKind {
        FragmentKind::FullEvent
    }

    fn size(&self) -> Result<usize, FragmentError> {
        self.size_words()
    }

    fn emit<S: Sink>(&self, sink: &mut S, size: u32) {
        // size() succeeded: every count below fits u32.
        let header_size = self.header_size().unwrap_or(0) as u32;
        let st_words = self.stream_tag_words().unwrap_or(0) as u32;
        let payload = pieces_len(self.robs) as u32;
        generic_header(
            sink,
            FULL_EVENT_MARKER,
            size,
            header_size,
            self.source_id,
            self.status,
            self.checksum,
        );
        sink.put_slice(&[
            self.bc_time_seconds,
            self.bc_time_nanoseconds,
            self.global_id as u32,
            (self.global_id >> 32) as u32,
            self.run_type,
            self.run_number,
            self.lumi_block,
            self.extended_l1id,
            self.bcid,
            self.l1_trigger_type,
            self.compression,
            self.uncompressed_size.unwrap_or(payload),
        ]);
        for list in [self.l1_info, self.l2_info, self.ef_info] {
            sink.put(list.len() as u32);
            sink.put_slice(list);
        }
        self.emit_stream_tags(sink, st_words);
        let mut summing = Summing {
            inner: sink,
            checksum: Checksum::new(self.checksum),
        };
        for rob in self.robs {
            summing.put_slice(rob);
        }
        let checksum = summing.checksum.finish();
        if self.checksum != ChecksumType::None {
            sink.put(checksum);
        }
    }
}
