//! Where the core thread's requests come from and where its replies go: the
//! [`RequestSource`] trait, and its ZeroMQ implementation [`ZmqSource`] (a ROUTER socket).
//!
//! The core thread's logic (descriptors, pending queue, clears, replies built from page
//! references) is written once, against this trait. A source only moves requests in and
//! replies out: [`ZmqSource`] decodes protocol messages from a ROUTER (received in place, not
//! copied) and sends a reply of up to [`JOIN_REPLY_BYTES`] as one frame the fragments are copied
//! into, a larger one as a header frame plus one zero-copy frame per page segment (shared
//! memory: always copied into the sample); [`super::direct`] hands typed
//! requests and page references over bounded lock-free queues to a tester in the same process.
//!
//! # Ownership
//!
//! The core thread owns its source. A received request lives in the source's
//! [`RequestSource::Buffer`] (owned by the loop) until the next receive into that buffer; the
//! core copies what it keeps into its descriptor before then. A reply's page references are
//! moved into the source by [`RequestSource::reply`], which must leave `segments` empty: the
//! references travel on (and the pages stay held) until the receiver drops them.

use std::time::Duration;

use rodeo_transport::message::{decode, Message, U32List};
use rodeo_transport::socket::{timeout_ms, Frame, FrameOwner, Received, Socket};

use crate::store::{EventStore, HeldSegment, PageRef};

/// A list of ROB ids or L1IDs, as received on the wire or as a slice.
#[derive(Debug, Clone, Copy)]
pub enum Ids<'a> {
    /// Little-endian words of a decoded message.
    Wire(U32List<'a>),
    /// Native words (an in-process request).
    Slice(&'a [u32]),
}

impl<'a> Ids<'a> {
    /// Number of ids.
    pub fn len(&self) -> usize {
        match self {
            Ids::Wire(l) => l.len(),
            Ids::Slice(s) => s.len(),
        }
    }

    /// True when there is no id.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with each id in order.
    #[inline]
    pub fn for_each(&self, mut f: impl FnMut(u32)) {
        match self {
            Ids::Wire(l) => l.iter().for_each(f),
            Ids::Slice(s) => s.iter().for_each(|&x| f(x)),
        }
    }
}

/// One message for the core thread, borrowed from a source's buffer.
#[derive(Debug, Clone, Copy)]
pub enum Incoming<'a> {
    /// A DataRequest.
    DataRequest {
        /// Who asked: passed back to [`RequestSource::reply`].
        peer: &'a [u8],
        /// Transaction id to echo.
        transaction: u32,
        /// The event.
        l1id: u32,
        /// ROB ids; empty means every ROB of the node.
        robs: Ids<'a>,
    },
    /// A Clear.
    Clear {
        /// The clear sequence number.
        sequence: u32,
        /// L1IDs to release.
        l1ids: Ids<'a>,
    },
    /// A KeepAlive.
    KeepAlive,
    /// A well-formed message of a type a readout node does not take.
    Unexpected,
    /// Bytes that did not decode.
    Bad,
}

/// Why a reply could not be handed on; in every case its page references were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyRefused {
    /// The peer's queue is full (it does not read its replies): the reply was dropped without
    /// waiting, the node's policy for such a peer (see [`super::peers`]).
    PeerFull,
    /// The peer is gone or unknown, or the link is closed.
    Gone,
}

/// A source of requests and a sink of replies for the core thread. See the module docs.
pub trait RequestSource: Send + 'static {
    /// Where one received message is kept while the core handles it.
    type Buffer: Default + Send;
    /// Receives one message into `buf` if one is ready; never waits.
    fn try_recv(&mut self, buf: &mut Self::Buffer) -> bool;
    /// Receives one message into `buf`, waiting up to `timeout`.
    fn recv_timeout(&mut self, buf: &mut Self::Buffer, timeout: Duration) -> bool;
    /// The message in `buf` (after a receive returned true).
    fn view(buf: &Self::Buffer) -> Incoming<'_>;
    /// Sends a reply to `peer`: `head` is the DataReply's header, L1ID, count and empty
    /// fragments (bytes), `segments` the present fragments' page segments in order. Moves every
    /// reference out of `segments`, also on failure.
    fn reply(
        &mut self,
        peer: &[u8],
        head: &[u8],
        segments: &mut Vec<PageRef>,
    ) -> Result<(), ReplyRefused>;
    /// A name for logs and the server's endpoint.
    fn endpoint(&self) -> String;
    /// True when this source takes replies as segments the store holds itself
    /// ([`RequestSource::reply_held`]) instead of [`PageRef`]s: a reader that hands them back to
    /// the core thread, so no atomic reference count is needed.
    fn holds_segments(&self) -> bool {
        false
    }
    /// Sends a reply whose present fragments are `segments`, held by `store` until the source
    /// gives them back ([`EventStore::release_held`]) in [`RequestSource::maintain`]. Moves the
    /// segments out on success; on failure leaves them for the caller to release.
    fn reply_held(
        &mut self,
        _peer: &[u8],
        _head: &[u8],
        _segments: &mut Vec<HeldSegment>,
        _store: &mut EventStore,
    ) -> Result<(), ReplyRefused> {
        Err(ReplyRefused::Gone)
    }
    /// Housekeeping the core thread calls once per loop turn and once when it stops (the
    /// direct link takes back read reply boxes there and releases what they held).
    fn maintain(&mut self, _store: &mut EventStore) {}
}

/// The largest reply (header and fragments) a [`ZmqSource`] copies into one message instead
/// of sending its page segments as zero-copy frames. Each zero-copy frame costs ZeroMQ an
/// allocation and a free (its content record), the owner's box another pair, and the receiver a
/// frame to take; copying a few KiB costs less than that for the few fragments of a typical
/// request (the default partition: 2.3 fragments, ~2 KiB per reply). Larger replies (a full
/// event's worth of big fragments) keep zero copy. On shared memory every reply is copied: the
/// sample is written once either way.
pub const JOIN_REPLY_BYTES: usize = 16 * 1024;

/// The ZeroMQ source: a bound ROUTER socket (any inproc/ipc/tcp endpoint).
pub struct ZmqSource {
    socket: Socket,
    endpoint: String,
}

impl std::fmt::Debug for ZmqSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZmqSource")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl ZmqSource {
    /// Wraps a ROUTER socket bound to `endpoint`.
    pub fn new(socket: Socket, endpoint: String) -> ZmqSource {
        ZmqSource { socket, endpoint }
    }
}

impl RequestSource for ZmqSource {
    type Buffer = Received;

    fn try_recv(&mut self, buf: &mut Received) -> bool {
        matches!(self.socket.try_recv_in_place(buf), Ok(true))
    }

    fn maintain(&mut self, _store: &mut EventStore) {
        // Once per turn and at the end: replies that wait to go out together go now.
        self.socket.flush();
    }

    fn recv_timeout(&mut self, buf: &mut Received, timeout: Duration) -> bool {
        matches!(self.socket.recv(buf, timeout_ms(timeout)), Ok(true))
    }

    fn view(buf: &Received) -> Incoming<'_> {
        let Ok(d) = decode(buf.data()) else {
            return Incoming::Bad;
        };
        match d.message {
            Message::DataRequest { l1id, robs } => Incoming::DataRequest {
                peer: &buf.peer,
                transaction: d.header.transaction,
                l1id,
                robs: Ids::Wire(robs),
            },
            Message::Clear { l1ids } => Incoming::Clear {
                sequence: d.header.transaction,
                l1ids: Ids::Wire(l1ids),
            },
            Message::KeepAlive => Incoming::KeepAlive,
            _ => Incoming::Unexpected,
        }
    }

    fn reply(
        &mut self,
        peer: &[u8],
        head: &[u8],
        segments: &mut Vec<PageRef>,
    ) -> Result<(), ReplyRefused> {
        let seg_bytes: usize = segments.iter().map(|r| r.frame_bytes().len()).sum();
        // Never waits: a peer that does not read loses this reply, nobody else waits for it.
        // A refused message's frames (and so its page references) are dropped before this
        // returns.
        let sent = if self.socket.is_shm() || head.len() + seg_bytes <= JOIN_REPLY_BYTES {
            // Copied into one frame (see JOIN_REPLY_BYTES); the references are dropped below,
            // here on the core thread, once the bytes are in the message.
            let pieces = std::iter::once(head).chain(segments.iter().map(FrameOwner::frame_bytes));
            self.socket.try_send_to_joined(peer, pieces)
        } else {
            let frames = std::iter::once(Frame::Copy(head))
                .chain(segments.drain(..).map(|r| Frame::ZeroCopy(Box::new(r))));
            self.socket.try_send_to(peer, frames)
        };
        let r = sent.map_err(|e| {
            if e.is_would_block() {
                ReplyRefused::PeerFull
            } else {
                ReplyRefused::Gone
            }
        });
        segments.clear();
        r
    }

    fn endpoint(&self) -> String {
        self.endpoint.clone()
    }
}
