//! The dataflow protocol's messages (`specs/dataflow-protocol.md`): header, types, codec.
//!
//! Every message is a 12-byte header of three little-endian u32 (type id, transaction id, payload
//! size in bytes) followed by the payload. A message may arrive split over several ZeroMQ frames;
//! the receiver joins them and calls [`decode`] on the whole.
//!
//! # Decoding
//!
//! [`decode`] borrows the received bytes and validates the whole payload before it returns, so
//! the lists it hands out ([`U32List`], [`U64List`], [`Decisions`], [`RobList`]) iterate without
//! further checks and without allocating. Nothing in this module indexes past the bytes it was
//! given, whatever they hold: a count that promises more entries than the payload holds is a
//! [`DecodeError::Truncated`], extra bytes are [`DecodeError::TrailingBytes`].
//!
//! # Encoding
//!
//! [`MessageWriter`] appends one message to a caller's `Vec<u8>` (reused between messages, so
//! steady-state encoding does not allocate) and patches the payload size when it is finished. For
//! zero-copy multi-frame sends, [`header_bytes`] gives the 12 header bytes for a payload whose
//! pieces are sent as separate frames.

use std::fmt;

/// Size of the message header in bytes.
pub const HEADER_BYTES: usize = 12;

/// The most L1IDs one Clear may carry: the partition configuration's largest clear group
/// (`supervisor.clear_group`). A readout node's default limit on incoming messages is derived
/// from it ([`clear_bytes`]).
pub const MAX_CLEAR_L1IDS: usize = 100_000;

/// Size in bytes of a DataRequest naming `robs` ROB ids (header, L1ID, count, ids).
pub const fn data_request_bytes(robs: usize) -> usize {
    // Saturating: a configuration check asks this of counts it is about to refuse.
    robs.saturating_mul(4).saturating_add(HEADER_BYTES + 8)
}

/// Size in bytes of a Clear carrying `l1ids` L1IDs (header, count, ids).
pub const fn clear_bytes(l1ids: usize) -> usize {
    l1ids.saturating_mul(4).saturating_add(HEADER_BYTES + 4)
}

/// The message types of the protocol, with their type ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum MessageType {
    /// DCM -> supervisor: new credits and decisions.
    Update = 0x00DC_DF00,
    /// Supervisor -> DCM: process an event.
    Process = 0x00DC_DF01,
    /// Supervisor -> DCM: a reassigned event; build it whole and force-accept it.
    Build = 0x00DC_DF0F,
    /// Supervisor -> readout: release these L1IDs; the transaction id is the clear sequence number.
    Clear = 0x00DC_DF10,
    /// Supervisor -> readout: no clear for a while, the supervisor is alive.
    KeepAlive = 0x00DC_DF11,
    /// DCM -> readout: send these ROB fragments of one L1ID.
    DataRequest = 0x00DC_DF20,
    /// Readout -> DCM: the requested ROB fragments.
    DataReply = 0x00DC_DF21,
    /// DCM -> logger: a full event for a stream.
    Event = 0x00DC_DF30,
    /// Logger -> DCM: these global ids are safely written.
    EventAck = 0x00DC_DF31,
}

impl MessageType {
    /// Every message type, in type-id order.
    pub const ALL: [MessageType; 9] = [
        MessageType::Update,
        MessageType::Process,
        MessageType::Build,
        MessageType::Clear,
        MessageType::KeepAlive,
        MessageType::DataRequest,
        MessageType::DataReply,
        MessageType::Event,
        MessageType::EventAck,
    ];

    /// The type with this id, or `None` for an unknown id.
    pub fn from_id(id: u32) -> Option<MessageType> {
        MessageType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The type id on the wire.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The protocol's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            MessageType::Update => "Update",
            MessageType::Process => "Process",
            MessageType::Build => "Build",
            MessageType::Clear => "Clear",
            MessageType::KeepAlive => "KeepAlive",
            MessageType::DataRequest => "DataRequest",
            MessageType::DataReply => "DataReply",
            MessageType::Event => "Event",
            MessageType::EventAck => "EventAck",
        }
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why received bytes are not a valid message. Every variant says what was expected and found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer than 12 bytes: no complete header.
    #[error("message of {len} bytes is shorter than the 12-byte header")]
    ShortHeader {
        /// Bytes received.
        len: usize,
    },
    /// The type id is not one of the protocol's.
    #[error("unknown message type id {id:#010x}")]
    UnknownType {
        /// The type id received.
        id: u32,
    },
    /// The header's payload size disagrees with the bytes received.
    #[error("{kind} header says {declared} payload bytes, {received} received")]
    SizeMismatch {
        /// The message type.
        kind: MessageType,
        /// Payload size in the header.
        declared: u32,
        /// Payload bytes actually received.
        received: usize,
    },
    /// The payload ends before a field or list entry it must hold.
    #[error("{kind} payload truncated: {field} needs {needed} bytes at payload offset {offset}, {available} left")]
    Truncated {
        /// The message type.
        kind: MessageType,
        /// The field being read.
        field: &'static str,
        /// Payload byte offset of the field.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the payload.
        available: usize,
    },
    /// Bytes left over after the last field.
    #[error("{kind} payload has {extra} trailing bytes after its last field")]
    TrailingBytes {
        /// The message type.
        kind: MessageType,
        /// Number of bytes left over.
        extra: usize,
    },
    /// A decision value other than 0, 1 or 2 in an Update.
    #[error(
        "Update entry {index}: decision {value} is not 0 (reject), 1 (accept) or 2 (forced accept)"
    )]
    BadDecision {
        /// Index of the entry.
        index: usize,
        /// The value found.
        value: u32,
    },
    /// A ROB fragment in a DataReply whose size word cannot be right.
    #[error("DataReply fragment {index} at payload offset {offset}: size {size_words} words is impossible ({reason})")]
    BadFragmentSize {
        /// Index of the fragment in the reply.
        index: usize,
        /// Payload byte offset of the fragment.
        offset: usize,
        /// The fragment's size word.
        size_words: u32,
        /// Why it is impossible.
        reason: &'static str,
    },
}

/// The fixed 12-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The message type.
    pub kind: MessageType,
    /// Transaction id (the clear sequence number for Clear).
    pub transaction: u32,
    /// Payload size in bytes (all frames after the header).
    pub payload_bytes: u32,
}

/// Reads and checks the header of a message whose bytes are all in `bytes`.
pub fn decode_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    let mut r = Reader::header(bytes)?;
    let id = r.u32("type id")?;
    let kind = MessageType::from_id(id).ok_or(DecodeError::UnknownType { id })?;
    r.kind = kind;
    let transaction = r.u32("transaction id")?;
    let payload_bytes = r.u32("payload size")?;
    let received = bytes.len() - HEADER_BYTES;
    if usize::try_from(payload_bytes).ok() != Some(received) {
        return Err(DecodeError::SizeMismatch {
            kind,
            declared: payload_bytes,
            received,
        });
    }
    Ok(Header {
        kind,
        transaction,
        payload_bytes,
    })
}

/// The 12 header bytes of a message whose payload (of `payload_bytes`) is sent in later frames.
pub fn header_bytes(kind: MessageType, transaction: u32, payload_bytes: u32) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..4].copy_from_slice(&kind.id().to_le_bytes());
    h[4..8].copy_from_slice(&transaction.to_le_bytes());
    h[8..12].copy_from_slice(&payload_bytes.to_le_bytes());
    h
}

/// What a DCM decided about an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Rejected by the trigger.
    Reject,
    /// Accepted by the trigger.
    Accept,
    /// Accepted without a decision after a reassignment.
    ForcedAccept,
}

impl Verdict {
    fn from_word(w: u32) -> Option<Verdict> {
        match w {
            0 => Some(Verdict::Reject),
            1 => Some(Verdict::Accept),
            2 => Some(Verdict::ForcedAccept),
            _ => None,
        }
    }

    fn to_word(self) -> u32 {
        match self {
            Verdict::Reject => 0,
            Verdict::Accept => 1,
            Verdict::ForcedAccept => 2,
        }
    }
}

/// One entry of an Update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Global event id.
    pub global_id: u64,
    /// The event's L1ID.
    pub l1id: u32,
    /// The decision.
    pub verdict: Verdict,
}

/// The fields of a Process or Build.
#[derive(Debug, Clone, Copy)]
pub struct Assignment<'a> {
    /// Global event id.
    pub global_id: u64,
    /// Extended L1ID.
    pub l1id: u32,
    /// Bunch-crossing id.
    pub bcid: u32,
    /// L1 trigger type.
    pub trigger_type: u32,
    /// ROB ids of the regions of interest.
    pub rois: U32List<'a>,
}

/// A decoded message, borrowing the received bytes.
#[derive(Debug, Clone, Copy)]
pub enum Message<'a> {
    /// DCM -> supervisor.
    Update {
        /// Credits added (free slots).
        credits: u32,
        /// Decisions about finished events.
        decisions: Decisions<'a>,
    },
    /// Supervisor -> DCM: process.
    Process(Assignment<'a>),
    /// Supervisor -> DCM: build and force-accept.
    Build(Assignment<'a>),
    /// Supervisor -> readout: release L1IDs.
    Clear {
        /// The L1IDs to release.
        l1ids: U32List<'a>,
    },
    /// Supervisor -> readout: alive, nothing to clear.
    KeepAlive,
    /// DCM -> readout.
    DataRequest {
        /// The event's L1ID.
        l1id: u32,
        /// Requested ROB ids; empty means every ROB of the node.
        robs: U32List<'a>,
    },
    /// Readout -> DCM.
    DataReply {
        /// The event's L1ID.
        l1id: u32,
        /// The ROB fragments, as bytes, back to back.
        fragments: RobList<'a>,
    },
    /// DCM -> logger.
    Event {
        /// Index of the stream the event is written to.
        stream: u32,
        /// The full event fragment's bytes.
        event: &'a [u8],
    },
    /// Logger -> DCM.
    EventAck {
        /// Global ids now safely written.
        global_ids: U64List<'a>,
    },
}

/// A decoded message with its header.
#[derive(Debug, Clone, Copy)]
pub struct Decoded<'a> {
    /// The header.
    pub header: Header,
    /// The payload.
    pub message: Message<'a>,
}

/// Decodes one whole message (all frames joined). Validates every field and list entry.
pub fn decode(bytes: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    let header = decode_header(bytes)?;
    let kind = header.kind;
    let mut r = Reader {
        bytes: &bytes[HEADER_BYTES..],
        pos: 0,
        kind,
    };
    let message = match kind {
        MessageType::Update => {
            let credits = r.u32("credits")?;
            let n = r.u32("decision count")?;
            let raw = r.array("decisions", n, 16)?;
            let decisions = Decisions { raw };
            for (index, chunk) in raw.chunks_exact(16).enumerate() {
                let value = le_u32(&chunk[12..16]);
                if Verdict::from_word(value).is_none() {
                    return Err(DecodeError::BadDecision { index, value });
                }
            }
            Message::Update { credits, decisions }
        }
        MessageType::Process | MessageType::Build => {
            let global_id = r.u64("global id")?;
            let l1id = r.u32("L1ID")?;
            let bcid = r.u32("BCID")?;
            let trigger_type = r.u32("trigger type")?;
            let n = r.u32("RoI count")?;
            let rois = U32List {
                raw: r.array("RoI ROB ids", n, 4)?,
            };
            let a = Assignment {
                global_id,
                l1id,
                bcid,
                trigger_type,
                rois,
            };
            if kind == MessageType::Process {
                Message::Process(a)
            } else {
                Message::Build(a)
            }
        }
        MessageType::Clear => {
            let n = r.u32("L1ID count")?;
            Message::Clear {
                l1ids: U32List {
                    raw: r.array("L1IDs", n, 4)?,
                },
            }
        }
        MessageType::KeepAlive => Message::KeepAlive,
        MessageType::DataRequest => {
            let l1id = r.u32("L1ID")?;
            let n = r.u32("ROB count")?;
            Message::DataRequest {
                l1id,
                robs: U32List {
                    raw: r.array("ROB ids", n, 4)?,
                },
            }
        }
        MessageType::DataReply => {
            let l1id = r.u32("L1ID")?;
            let n = r.u32("fragment count")?;
            let start = r.pos;
            for index in 0..n as usize {
                let offset = r.pos;
                let head = r.take("fragment header", 8)?;
                let size_words = le_u32(&head[4..8]);
                if size_words < 2 {
                    return Err(DecodeError::BadFragmentSize {
                        index,
                        offset,
                        size_words,
                        reason: "smaller than marker and size words",
                    });
                }
                let rest = (size_words as usize - 2).checked_mul(4).ok_or(
                    DecodeError::BadFragmentSize {
                        index,
                        offset,
                        size_words,
                        reason: "overflows",
                    },
                )?;
                r.take("fragment body", rest)?;
            }
            let fragments = RobList {
                raw: &r.bytes[start..r.pos],
                count: n as usize,
            };
            Message::DataReply { l1id, fragments }
        }
        MessageType::Event => {
            let stream = r.u32("stream index")?;
            let event = r.rest();
            Message::Event { stream, event }
        }
        MessageType::EventAck => {
            let n = r.u32("global id count")?;
            Message::EventAck {
                global_ids: U64List {
                    raw: r.array("global ids", n, 8)?,
                },
            }
        }
    };
    r.finish()?;
    Ok(Decoded { header, message })
}

/// A bounds-checked little-endian reader over a payload.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    kind: MessageType,
}

impl<'a> Reader<'a> {
    fn header(bytes: &'a [u8]) -> Result<Reader<'a>, DecodeError> {
        if bytes.len() < HEADER_BYTES {
            return Err(DecodeError::ShortHeader { len: bytes.len() });
        }
        Ok(Reader {
            bytes,
            pos: 0,
            kind: MessageType::KeepAlive,
        })
    }

    fn take(&mut self, field: &'static str, needed: usize) -> Result<&'a [u8], DecodeError> {
        let available = self.bytes.len() - self.pos;
        if needed > available {
            return Err(DecodeError::Truncated {
                kind: self.kind,
                field,
                offset: self.pos,
                needed,
                available,
            });
        }
        let s = &self.bytes[self.pos..self.pos + needed];
        self.pos += needed;
        Ok(s)
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.take(field, 4).map(le_u32)
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.take(field, 8).map(le_u64)
    }

    fn array(
        &mut self,
        field: &'static str,
        count: u32,
        entry: usize,
    ) -> Result<&'a [u8], DecodeError> {
        let needed = (count as usize).saturating_mul(entry);
        self.take(field, needed)
    }

    fn rest(&mut self) -> &'a [u8] {
        let s = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        s
    }

    fn finish(&self) -> Result<(), DecodeError> {
        let extra = self.bytes.len() - self.pos;
        if extra == 0 {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                kind: self.kind,
                extra,
            })
        }
    }
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// A validated list of little-endian u32 in a payload.
#[derive(Debug, Clone, Copy, Default)]
pub struct U32List<'a> {
    raw: &'a [u8],
}

impl<'a> U32List<'a> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.raw.len() / 4
    }

    /// True when the list has no entries.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The entries in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        self.raw.chunks_exact(4).map(le_u32)
    }
}

/// A validated list of little-endian u64 in a payload.
#[derive(Debug, Clone, Copy, Default)]
pub struct U64List<'a> {
    raw: &'a [u8],
}

impl<'a> U64List<'a> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.raw.len() / 8
    }

    /// True when the list has no entries.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The entries in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        self.raw.chunks_exact(8).map(le_u64)
    }
}

/// The validated decisions of an Update.
#[derive(Debug, Clone, Copy)]
pub struct Decisions<'a> {
    raw: &'a [u8],
}

impl<'a> Decisions<'a> {
    /// Number of decisions.
    pub fn len(&self) -> usize {
        self.raw.len() / 16
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The decisions in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Decision> + 'a {
        self.raw.chunks_exact(16).map(|c| Decision {
            global_id: le_u64(&c[0..8]),
            l1id: le_u32(&c[8..12]),
            // Checked by `decode`; a value it let through is one of the three.
            verdict: Verdict::from_word(le_u32(&c[12..16])).unwrap_or(Verdict::Reject),
        })
    }
}

/// The ROB fragments of a DataReply: sizes checked against the payload, contents not parsed.
#[derive(Debug, Clone, Copy)]
pub struct RobList<'a> {
    raw: &'a [u8],
    count: usize,
}

impl<'a> RobList<'a> {
    /// Number of fragments.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when the reply holds no fragment.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// All fragments' bytes, back to back.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// Each fragment's bytes (a whole number of words, as its size word says).
    pub fn iter(&self) -> RobIter<'a> {
        RobIter { rest: self.raw }
    }
}

/// Iterator over the fragments of a [`RobList`].
#[derive(Debug, Clone)]
pub struct RobIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for RobIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let size = self.rest.get(4..8).map(le_u32)? as usize * 4;
        let (frag, rest) = self.rest.split_at_checked(size)?;
        self.rest = rest;
        Some(frag)
    }
}

/// Appends one message to a buffer; [`MessageWriter::finish`] patches the payload size.
#[derive(Debug)]
pub struct MessageWriter<'b> {
    buf: &'b mut Vec<u8>,
    start: usize,
}

impl<'b> MessageWriter<'b> {
    /// Starts a message of `kind` at the end of `buf`.
    pub fn new(buf: &'b mut Vec<u8>, kind: MessageType, transaction: u32) -> MessageWriter<'b> {
        let start = buf.len();
        buf.extend_from_slice(&header_bytes(kind, transaction, 0));
        MessageWriter { buf, start }
    }

    /// Appends a little-endian u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a little-endian u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }

    /// Appends a count followed by the u32 entries.
    pub fn u32_list(&mut self, list: &[u32]) -> &mut Self {
        self.u32(len_u32(list.len()));
        for &v in list {
            self.u32(v);
        }
        self
    }

    /// Finishes the message: writes its payload size. Returns the message's bytes.
    pub fn finish(self) -> &'b [u8] {
        let payload = self.buf.len() - self.start - HEADER_BYTES;
        let size = len_u32(payload).to_le_bytes();
        self.buf[self.start + 8..self.start + 12].copy_from_slice(&size);
        &self.buf[self.start..]
    }
}

fn len_u32(n: usize) -> u32 {
    u32::try_from(n).expect("protocol messages are limited to 4 GiB")
}

/// Appends an Update.
pub fn encode_update(buf: &mut Vec<u8>, transaction: u32, credits: u32, decisions: &[Decision]) {
    let mut w = MessageWriter::new(buf, MessageType::Update, transaction);
    w.u32(credits).u32(len_u32(decisions.len()));
    for d in decisions {
        w.u64(d.global_id).u32(d.l1id).u32(d.verdict.to_word());
    }
    w.finish();
}

/// Appends a Process (or, with `build`, a Build).
#[allow(clippy::too_many_arguments)]
pub fn encode_assignment(
    buf: &mut Vec<u8>,
    build: bool,
    transaction: u32,
    global_id: u64,
    l1id: u32,
    bcid: u32,
    trigger_type: u32,
    rois: &[u32],
) {
    let kind = if build {
        MessageType::Build
    } else {
        MessageType::Process
    };
    let mut w = MessageWriter::new(buf, kind, transaction);
    w.u64(global_id)
        .u32(l1id)
        .u32(bcid)
        .u32(trigger_type)
        .u32_list(rois);
    w.finish();
}

/// Appends a Clear with clear sequence number `sequence`.
pub fn encode_clear(buf: &mut Vec<u8>, sequence: u32, l1ids: &[u32]) {
    let mut w = MessageWriter::new(buf, MessageType::Clear, sequence);
    w.u32_list(l1ids);
    w.finish();
}

/// Appends a KeepAlive.
pub fn encode_keepalive(buf: &mut Vec<u8>, transaction: u32) {
    MessageWriter::new(buf, MessageType::KeepAlive, transaction).finish();
}

/// Appends a DataRequest (empty `robs`: every ROB of the node).
pub fn encode_data_request(buf: &mut Vec<u8>, transaction: u32, l1id: u32, robs: &[u32]) {
    let mut w = MessageWriter::new(buf, MessageType::DataRequest, transaction);
    w.u32(l1id).u32_list(robs);
    w.finish();
}

/// Appends a DataReply whose fragments are given as word slices (copied into the buffer; the
/// zero-copy path sends [`header_bytes`] and the fragment pages as separate frames instead).
pub fn encode_data_reply(buf: &mut Vec<u8>, transaction: u32, l1id: u32, fragments: &[&[u32]]) {
    let mut w = MessageWriter::new(buf, MessageType::DataReply, transaction);
    w.u32(l1id).u32(len_u32(fragments.len()));
    for f in fragments {
        for &word in *f {
            w.u32(word);
        }
    }
    w.finish();
}

/// Appends an Event for stream `stream`.
pub fn encode_event(buf: &mut Vec<u8>, transaction: u32, stream: u32, event_words: &[u32]) {
    let mut w = MessageWriter::new(buf, MessageType::Event, transaction);
    w.u32(stream);
    for &word in event_words {
        w.u32(word);
    }
    w.finish();
}

/// Appends an EventAck.
pub fn encode_event_ack(buf: &mut Vec<u8>, transaction: u32, global_ids: &[u64]) {
    let mut w = MessageWriter::new(buf, MessageType::EventAck, transaction);
    w.u32(len_u32(global_ids.len()));
    for &g in global_ids {
        w.u64(g);
    }
    w.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rob(words: u32, fill: u32) -> Vec<u32> {
        let mut v = vec![0xDD12_34DD, words];
        v.resize(words as usize, fill);
        v
    }

    #[test]
    fn update_round_trip() {
        let mut buf = Vec::new();
        let ds = [
            Decision {
                global_id: 1 << 40,
                l1id: 7,
                verdict: Verdict::Accept,
            },
            Decision {
                global_id: 2,
                l1id: 8,
                verdict: Verdict::ForcedAccept,
            },
        ];
        encode_update(&mut buf, 99, 4, &ds);
        let d = decode(&buf).unwrap();
        assert_eq!(d.header.transaction, 99);
        let Message::Update { credits, decisions } = d.message else {
            panic!("not an Update")
        };
        assert_eq!(credits, 4);
        assert_eq!(decisions.iter().collect::<Vec<_>>(), ds);
    }

    #[test]
    fn data_reply_round_trip() {
        let (a, b) = (rob(12, 5), rob(20, 6));
        let mut buf = Vec::new();
        encode_data_reply(&mut buf, 3, 0x0100_0005, &[&a, &b]);
        let Message::DataReply { l1id, fragments } = decode(&buf).unwrap().message else {
            panic!()
        };
        assert_eq!(l1id, 0x0100_0005);
        let frags: Vec<&[u8]> = fragments.iter().collect();
        assert_eq!(frags.len(), 2);
        assert_eq!(frags[0].len(), 48);
        assert_eq!(frags[1].len(), 80);
    }

    #[test]
    fn every_type_round_trips() {
        let mut buf = Vec::new();
        encode_assignment(&mut buf, true, 1, 5, 6, 7, 8, &[0x0011_0001, 0x0011_0002]);
        assert!(
            matches!(decode(&buf).unwrap().message, Message::Build(a) if a.rois.len() == 2 && a.global_id == 5)
        );
        buf.clear();
        encode_clear(&mut buf, 17, &[1, 2, 3]);
        let d = decode(&buf).unwrap();
        assert_eq!(d.header.transaction, 17);
        assert!(matches!(d.message, Message::Clear { l1ids } if l1ids.iter().sum::<u32>() == 6));
        buf.clear();
        encode_keepalive(&mut buf, 0);
        assert!(matches!(decode(&buf).unwrap().message, Message::KeepAlive));
        buf.clear();
        encode_data_request(&mut buf, 4, 9, &[]);
        assert!(
            matches!(decode(&buf).unwrap().message, Message::DataRequest { l1id: 9, robs } if robs.is_empty())
        );
        buf.clear();
        encode_event(&mut buf, 4, 2, &[0xAA12_34AA, 2]);
        assert!(
            matches!(decode(&buf).unwrap().message, Message::Event { stream: 2, event } if event.len() == 8)
        );
        buf.clear();
        encode_event_ack(&mut buf, 4, &[u64::MAX, 3]);
        assert!(
            matches!(decode(&buf).unwrap().message, Message::EventAck { global_ids } if global_ids.iter().next() == Some(u64::MAX))
        );
    }

    #[test]
    fn bad_input_is_typed() {
        assert!(matches!(
            decode(&[0; 5]),
            Err(DecodeError::ShortHeader { len: 5 })
        ));
        assert!(matches!(
            decode(&header_bytes(MessageType::Clear, 0, 0)[..]),
            Err(DecodeError::Truncated { .. })
        ));
        let mut unknown = header_bytes(MessageType::Clear, 0, 0);
        unknown[0] = 0x77;
        assert!(matches!(
            decode(&unknown),
            Err(DecodeError::UnknownType { .. })
        ));
        let mut buf = Vec::new();
        encode_clear(&mut buf, 1, &[1, 2]);
        buf.push(0);
        assert!(matches!(
            decode(&buf),
            Err(DecodeError::SizeMismatch {
                declared: 12,
                received: 13,
                ..
            })
        ));
        // A count promising a huge list is truncation, not an allocation or a panic.
        let mut w = Vec::new();
        let mut m = MessageWriter::new(&mut w, MessageType::Clear, 0);
        m.u32(u32::MAX);
        m.finish();
        assert!(matches!(decode(&w), Err(DecodeError::Truncated { .. })));
        // Trailing bytes after the last field.
        let mut w = Vec::new();
        let mut m = MessageWriter::new(&mut w, MessageType::DataRequest, 0);
        m.u32(1).u32(0).u32(5);
        m.finish();
        assert!(matches!(
            decode(&w),
            Err(DecodeError::TrailingBytes { extra: 4, .. })
        ));
        // A fragment size of zero words in a reply.
        let mut w = Vec::new();
        let mut m = MessageWriter::new(&mut w, MessageType::DataReply, 0);
        m.u32(1).u32(1).u32(0xDD12_34DD).u32(0);
        m.finish();
        assert!(matches!(
            decode(&w),
            Err(DecodeError::BadFragmentSize { .. })
        ));
    }
}
