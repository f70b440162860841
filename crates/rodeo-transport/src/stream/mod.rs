//! The stream transport: rodeo's own framing over plain kernel TCP, for bulk data between hosts
//! (ROB fragments to DCMs, built events to loggers), where ZeroMQ's per-message work costs
//! more than half of what the kernel can move (see docs/transport.md for the measurements and
//! the choice against libfabric and UCX).
//!
//! - [`Router`]: the bound side. It accepts any number of peers, knows which peer each message
//!   came from ([`PeerId`]) and replies to it.
//! - [`Dealer`]: the connecting side, one connection to a router.
//!
//! How it moves bytes: nonblocking sockets with `TCP_NODELAY` and large buffers; a message is
//! an 8-byte header and its payload ([`wire`]), sent with one vectored write of the header and
//! the caller's parts (the payload is never copied into one buffer; only the tail of a message
//! the kernel took part of is kept, and sent before the next). The receiver reads into one
//! reusable buffer per connection and hands messages out as slices of it: no allocation and no
//! copy per message.
//!
//! Bounded waits: every receive has a timeout, a blocking send has one, and a non-blocking send
//! ([`Router::try_send_to`], [`Dealer::try_send`]) never waits: a peer that does not read fills
//! its own socket buffers and then its messages are refused, counted per peer and in
//! [`StreamStats::refused_full`], while every other peer goes on. A frame whose header is wrong
//! or announces more than [`Limits::max_message`] is refused before its payload is buffered,
//! counted, and its connection closed; a connection that ends in the middle of a frame is
//! counted ([`StreamStats::truncated`]). Nothing here panics on what a peer sends.
//!
//! Encryption: with a [`TlsContext`] ([`Router::bind_tls`], [`Dealer::connect_tls`]) every
//! connection is TLS 1.3 with both sides authenticated by the partition's own CA ([`tls`]);
//! without one the bytes go plain, for a network private to the partition.
//!
//! [`Router`] and [`Dealer`] are types of their own, whose receive lends the bytes where they
//! lie. The partition's data paths reach the same transport through [`crate::socket::Socket`]
//! and a `stream://HOST:PORT` endpoint (`adapter`: identities, connecting before the peer
//! binds and again after it restarts, one copy on receipt); see docs/architecture.md.

mod adapter;
mod conn;
mod dealer;
mod error;
mod router;
mod sys;
pub mod tls;
pub mod wire;

pub(crate) use adapter::{wait_of, StreamSocket};
pub use conn::MAX_PARTS;
pub use dealer::Dealer;
pub use error::{StreamError, StreamStats};
pub use router::{Message, PeerId, Router};
pub use tls::{TlsContext, TlsKeys};
pub use wire::FrameError;

/// A stream socket's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest message accepted or sent, in bytes (at most `u32::MAX`); a peer's frame
    /// above it closes the peer's connection.
    pub max_message: usize,
    /// The send and receive buffer asked of the kernel per connection, in bytes, when the
    /// kernel allows that much (`net.core.wmem_max`/`rmem_max`); else, and with 0, the kernel's
    /// autotuning sizes them.
    pub socket_buffer: usize,
    /// The most peers a [`Router`] keeps connected; one more is accepted and closed at once,
    /// counted in [`StreamStats::peers_refused`] (a peer that opens connections without end
    /// does not take the process's descriptors).
    pub max_peers: usize,
}

impl Default for Limits {
    /// 64 MiB messages, 4 MiB socket buffers, 1,024 peers.
    fn default() -> Limits {
        Limits {
            max_message: 64 << 20,
            socket_buffer: 4 << 20,
            max_peers: 1024,
        }
    }
}

impl Limits {
    /// The limits with `max_message` cut to what the header can carry.
    fn checked(self) -> Limits {
        Limits {
            max_message: self.max_message.min(u32::MAX as usize),
            ..self
        }
    }
}

/// Checks a message to send: its parts and its size; returns the size.
fn message_len(parts: &[&[u8]], limits: &Limits) -> Result<usize, StreamError> {
    if parts.len() > MAX_PARTS {
        return Err(StreamError::TooManyParts {
            parts: parts.len(),
            max: MAX_PARTS,
        });
    }
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len > limits.max_message {
        return Err(StreamError::TooLarge {
            len: len as u64,
            max: limits.max_message as u64,
        });
    }
    Ok(len)
}

/// The wait left until `deadline` (zero once it passed).
fn left(deadline: std::time::Instant) -> std::time::Duration {
    deadline.saturating_duration_since(std::time::Instant::now())
}
