//! How the tester reaches a node ([`TesterLink`]): a ZeroMQ DEALER speaking the protocol
//! ([`ZmqLink`]) or the direct in-process link ([`DirectClient`]); what it reads of a reply
//! ([`ReplyHead`], [`FragmentHead`]); and why a run stops early ([`TesterError`]).

use std::time::Duration;

use rodeo_ros::server::{DirectClient, DirectError, DirectReply};
use rodeo_transport::message::{decode, encode_clear, encode_data_request, Message};
use rodeo_transport::socket::{Frame, Received, Socket, TransportError};

/// Why a tester run stopped early.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TesterError {
    /// The ZeroMQ socket failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The direct link failed.
    #[error(transparent)]
    Direct(#[from] DirectError),
}

/// What a reply says about itself: the header fields the tester checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHead {
    /// Transaction id echoed.
    pub transaction: u32,
    /// The event's L1ID.
    pub l1id: u32,
    /// Payload bytes declared.
    pub payload_bytes: u32,
}

/// Words 0, 4 and 6 (marker, source id, status) of a reply's fragment; `None` when the
/// fragment is too short to have them.
pub type FragmentHead = Option<[u32; 3]>;

/// How the tester reaches a node. See the module docs.
pub trait TesterLink {
    /// Where a received reply is kept until the next receive.
    type Reply: Default;
    /// The most DataRequests the link takes unanswered, if it bounds them.
    fn max_in_flight(&self) -> Option<usize> {
        None
    }
    /// Sends a DataRequest.
    fn send_request(
        &mut self,
        transaction: u32,
        l1id: u32,
        robs: &[u32],
    ) -> Result<(), TesterError>;
    /// Sends a Clear.
    fn send_clear(&mut self, sequence: u32, l1ids: &[u32]) -> Result<(), TesterError>;
    /// Receives a reply if one is ready.
    fn try_recv(&mut self, reply: &mut Self::Reply) -> Result<bool, TesterError>;
    /// Receives a reply, waiting up to `timeout`.
    fn recv(&mut self, reply: &mut Self::Reply, timeout: Duration) -> Result<bool, TesterError>;
    /// Reads a received reply: its header (`None` if it is not a well-formed DataReply) and the
    /// head words of each fragment into `heads`.
    fn read(reply: &Self::Reply, heads: &mut Vec<FragmentHead>) -> Option<ReplyHead>;
}

/// The ZeroMQ link: a DEALER connected to the node, protocol messages.
pub struct ZmqLink<'s> {
    socket: &'s mut Socket,
    buf: Vec<u8>,
}

impl<'s> ZmqLink<'s> {
    /// Wraps a DEALER socket connected to the node.
    pub fn new(socket: &'s mut Socket) -> ZmqLink<'s> {
        ZmqLink {
            socket,
            buf: Vec::with_capacity(4096),
        }
    }
}

impl std::fmt::Debug for ZmqLink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZmqLink").finish_non_exhaustive()
    }
}

impl TesterLink for ZmqLink<'_> {
    type Reply = Received;

    fn send_request(
        &mut self,
        transaction: u32,
        l1id: u32,
        robs: &[u32],
    ) -> Result<(), TesterError> {
        self.buf.clear();
        encode_data_request(&mut self.buf, transaction, l1id, robs);
        Ok(self.socket.send([Frame::Copy(&self.buf)])?)
    }

    fn send_clear(&mut self, sequence: u32, l1ids: &[u32]) -> Result<(), TesterError> {
        self.buf.clear();
        encode_clear(&mut self.buf, sequence, l1ids);
        Ok(self.socket.send([Frame::Copy(&self.buf)])?)
    }

    fn try_recv(&mut self, reply: &mut Received) -> Result<bool, TesterError> {
        Ok(self.socket.try_recv(reply)?)
    }

    fn recv(&mut self, reply: &mut Received, timeout: Duration) -> Result<bool, TesterError> {
        let ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        Ok(self.socket.recv(reply, ms)?)
    }

    fn read(reply: &Received, heads: &mut Vec<FragmentHead>) -> Option<ReplyHead> {
        let d = decode(&reply.bytes).ok()?;
        let Message::DataReply { l1id, fragments } = d.message else {
            return None;
        };
        for f in fragments.iter() {
            let w = |i: usize| {
                f.get(4 * i..4 * i + 4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            };
            heads.push(match (w(0), w(4), w(6)) {
                (Some(a), Some(b), Some(c)) => Some([a, b, c]),
                _ => None,
            });
        }
        Some(ReplyHead {
            transaction: d.header.transaction,
            l1id,
            payload_bytes: d.header.payload_bytes,
        })
    }
}

impl TesterLink for DirectClient {
    type Reply = Option<Box<DirectReply>>;

    fn max_in_flight(&self) -> Option<usize> {
        Some(self.capacity())
    }

    fn send_request(
        &mut self,
        transaction: u32,
        l1id: u32,
        robs: &[u32],
    ) -> Result<(), TesterError> {
        Ok(DirectClient::send_request(self, transaction, l1id, robs)?)
    }

    fn send_clear(&mut self, sequence: u32, l1ids: &[u32]) -> Result<(), TesterError> {
        Ok(DirectClient::send_clear(self, sequence, l1ids)?)
    }

    fn try_recv(&mut self, reply: &mut Self::Reply) -> Result<bool, TesterError> {
        Ok(DirectClient::try_recv(self, reply))
    }

    fn recv(&mut self, reply: &mut Self::Reply, timeout: Duration) -> Result<bool, TesterError> {
        Ok(self.recv_timeout(reply, timeout))
    }

    fn read(reply: &Self::Reply, heads: &mut Vec<FragmentHead>) -> Option<ReplyHead> {
        let r = reply.as_deref()?;
        let head = ReplyHead {
            transaction: r.transaction()?,
            l1id: r.l1id()?,
            payload_bytes: r.payload_bytes()?,
        };
        r.for_each_fragment(|h| heads.push(h));
        Some(head)
    }
}
