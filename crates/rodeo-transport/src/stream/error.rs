//! What the stream transport fails with ([`StreamError`]) and what it counts ([`StreamStats`]).

use super::wire::FrameError;

/// What went wrong in a stream socket operation, with the address or peer named.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// A system call on a socket failed (bind, connect, accept, read, write, poll, an option).
    #[error("stream {op} {addr}: {source}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The address (local for bind and accept, the peer's otherwise).
        addr: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The peer sent a frame that cannot be accepted; its connection was closed.
    #[error("stream peer {addr}: {source}; connection closed")]
    Frame {
        /// The peer's address.
        addr: String,
        /// What was wrong.
        source: FrameError,
    },
    /// The peer closed the connection (or it was closed after a bad frame).
    #[error("stream peer {addr} closed the connection (is it still running?)")]
    Closed {
        /// The peer's address.
        addr: String,
    },
    /// A message to send is larger than the limit (the receiver would refuse it).
    #[error("stream send of {len} bytes is above the limit of {max} bytes")]
    TooLarge {
        /// The message's length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A message has more parts than one vectored write takes.
    #[error("stream send of {parts} parts: at most {max} parts per message (join some)")]
    TooManyParts {
        /// Parts given.
        parts: usize,
        /// The most one message may have.
        max: usize,
    },
    /// No peer with this id is connected (never was, or gone).
    #[error("stream peer {peer} is not connected (gone, or never was)")]
    UnknownPeer {
        /// The peer's id.
        peer: u64,
    },
    /// A blocking send found the peer's buffers full for the whole timeout.
    #[error("stream send to {addr}: the peer did not read for {ms} ms (is it stalled?)")]
    Timeout {
        /// The peer's address.
        addr: String,
        /// The timeout in milliseconds.
        ms: u64,
    },
}

/// What a stream socket counted since it was made (64-bit counters, never reset).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StreamStats {
    /// Messages sent (queued to the kernel whole or in part).
    pub sent: u64,
    /// Messages received and handed out.
    pub received: u64,
    /// Non-blocking sends refused because the peer's buffers were full (the message was not
    /// sent: the caller keeps it or drops it and counts it).
    pub refused_full: u64,
    /// Frames refused as longer than the limit (their connection closed).
    pub oversized: u64,
    /// Frames refused for a wrong tag (their connection closed).
    pub malformed: u64,
    /// Connections that ended in the middle of a frame (the partial frame dropped).
    pub truncated: u64,
    /// Peers accepted (a bound socket) or connections made (a connecting one).
    pub peers_accepted: u64,
    /// Peers whose connection ended (closed by them, or by us after a bad frame).
    pub peers_closed: u64,
    /// Connections a router closed at once: it had `Limits::max_peers` already, or the
    /// process had no descriptor left for them (accepting pauses 100 ms then).
    pub peers_refused: u64,
    /// Connections TLS refused: a handshake that failed (a peer of another partition, or not
    /// speaking TLS) or a record that did not decrypt; each was closed.
    pub tls_refused: u64,
}
