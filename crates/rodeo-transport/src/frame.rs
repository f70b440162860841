//! What both transports (ZeroMQ in [`crate::socket`], shared memory in [`crate::shm`]) send,
//! receive and fail with: [`Frame`], [`FrameOwner`], [`Received`] and [`TransportError`], and the
//! process-wide count of messages both refuse as too large ([`oversized_count`]). They
//! live apart from either transport so that neither imports the other's internals for them
//! (re-exported from [`crate::socket`], where callers have always found them).

use std::sync::atomic::{AtomicU64, Ordering};
/// What went wrong in a socket operation, with the endpoint or operation named.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Creating a socket or setting an option failed.
    #[error("zeromq {op}: {source}")]
    Setup {
        /// The operation.
        op: &'static str,
        /// ZeroMQ's error.
        source: zmq::Error,
    },
    /// Binding an endpoint failed (in use, bad interface, missing directory).
    #[error("cannot bind {endpoint}: {source}{}", bind_hint(source))]
    Bind {
        /// The endpoint.
        endpoint: String,
        /// ZeroMQ's error.
        source: zmq::Error,
    },
    /// Connecting to an endpoint failed.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// ZeroMQ's error.
        source: zmq::Error,
    },
    /// Sending failed (peer unknown to a ROUTER, high-water mark with a timeout, context closed).
    #[error("send failed: {source}")]
    Send {
        /// ZeroMQ's error.
        source: zmq::Error,
    },
    /// Receiving failed (context closed, interrupted).
    #[error("receive failed: {source}")]
    Recv {
        /// ZeroMQ's error.
        source: zmq::Error,
    },
    /// The socket cannot do this with this endpoint (a PUB socket on `stream://`, a second
    /// bind or connect of a stream socket).
    #[error("{endpoint}: {detail}")]
    Unsupported {
        /// The endpoint.
        endpoint: String,
        /// What cannot be done, and what to do instead.
        detail: String,
    },
    /// An `ipc://` path that must not be bound: ZeroMQ removes whatever is there first, so a
    /// file there would be destroyed and a live socket taken over from its process.
    #[error("cannot bind {endpoint}: {detail}")]
    IpcPath {
        /// The endpoint.
        endpoint: String,
        /// What is at the path, and what to do.
        detail: String,
    },
    /// The partition's TLS keys (for `stream://` connections) could not be made or used.
    #[error("{0}")]
    TlsKeys(#[from] crate::stream::tls::TlsKeyError),
    /// A stream (`stream://`) operation failed.
    #[error("{op} on {endpoint}: {source}")]
    Stream {
        /// The operation.
        op: &'static str,
        /// The endpoint.
        endpoint: String,
        /// The stream transport's error (boxed: every result of every socket call carries
        /// this enum's size).
        source: Box<crate::stream::StreamError>,
    },
    /// A shared-memory (iceoryx2) operation failed.
    #[error(
        "shared memory {op} {name:?}: {detail} (stale resources of a crashed run are removed at \
         the next start; check /dev/shm and /dev/shm/iceoryx2)"
    )]
    Shm {
        /// The operation.
        op: &'static str,
        /// The service or endpoint name.
        name: String,
        /// iceoryx2's error.
        detail: String,
    },
}

/// What to look at when a bind fails: another process only when the address is in use (the
/// hint was given for an address of another host or a missing directory too).
fn bind_hint(e: &zmq::Error) -> &'static str {
    match e {
        zmq::Error::EADDRINUSE => " (is another process using it?)",
        zmq::Error::EADDRNOTAVAIL | zmq::Error::ENODEV => " (not an address of this host)",
        zmq::Error::ENOENT => " (its directory does not exist)",
        _ => "",
    }
}

impl TransportError {
    /// The error of a send that would have to wait, on every transport (ZeroMQ's `EAGAIN`).
    pub(crate) fn would_block() -> TransportError {
        TransportError::Send {
            source: zmq::Error::EAGAIN,
        }
    }

    /// The error of a ROUTER send to a peer it does not know, on every transport (ZeroMQ's
    /// `EHOSTUNREACH`).
    pub(crate) fn unroutable() -> TransportError {
        TransportError::Send {
            source: zmq::Error::EHOSTUNREACH,
        }
    }

    /// True for a send refused because it would have waited: the peer's queue is at its
    /// high-water mark, or no peer is connected (`EAGAIN` of a non-blocking or timed send).
    pub fn is_would_block(&self) -> bool {
        matches!(
            self,
            TransportError::Send {
                source: zmq::Error::EAGAIN
            }
        )
    }

    /// True for a ROUTER send to a peer it does not know (never connected, or gone).
    pub fn is_unroutable(&self) -> bool {
        matches!(
            self,
            TransportError::Send {
                source: zmq::Error::EHOSTUNREACH
            }
        )
    }
}

/// A frame to send.
pub enum Frame<'a> {
    /// Bytes copied into the message.
    Copy(&'a [u8]),
    /// Bytes sent where they lie; ZeroMQ drops the owner when it no longer needs them.
    ZeroCopy(Box<dyn FrameOwner>),
}

/// Something that owns bytes ZeroMQ may send without copying (a page handle, a `Vec<u8>`).
///
/// The bytes must stay where they are, unchanged, until the owner is dropped.
pub trait FrameOwner: Send + 'static {
    /// The bytes to send.
    fn frame_bytes(&self) -> &[u8];
}

impl FrameOwner for Vec<u8> {
    fn frame_bytes(&self) -> &[u8] {
        self
    }
}

/// A received message: the peer's routing id (ROUTER only) and all frames joined.
///
/// After a receive in place ([`Socket::try_recv_in_place`](crate::socket::Socket::try_recv_in_place))
/// a one-frame ZeroMQ message stays where ZeroMQ put it and `bytes` is empty: read the message
/// with [`Received::data`], which is right after every kind of receive.
#[derive(Debug, Default)]
pub struct Received {
    /// Routing id of the sender (empty unless received on a ROUTER).
    pub peer: Vec<u8>,
    /// The message's frames, joined (empty after a receive in place that kept the message in
    /// [`Received::data`]).
    pub bytes: Vec<u8>,
    /// Number of frames the message had (not counting the routing id).
    pub frames: u32,
    /// The one-frame message a receive in place took, not copied (valid while `in_place`).
    pub(crate) held: Option<zmq::Message>,
    /// `held` is the message (and `bytes` empty).
    pub(crate) in_place: bool,
}

impl Received {
    /// The message's bytes: [`Received::bytes`], or the message a receive in place left where
    /// ZeroMQ put it.
    pub fn data(&self) -> &[u8] {
        match (&self.held, self.in_place) {
            (Some(m), true) => m,
            _ => &self.bytes,
        }
    }

    /// Empties it for the next message (the held message's buffer is kept for reuse).
    pub(crate) fn reset(&mut self) {
        self.peer.clear();
        self.bytes.clear();
        self.frames = 0;
        self.in_place = false;
    }
}

/// Messages refused on receipt in this process so far because they were larger than their
/// socket's limit ([`Socket::set_max_message_size`](crate::socket::Socket::set_max_message_size)) or malformed on the shared-memory
/// transport: what `/metrics` exports as `rodeo_oversized_messages_total`. A ZeroMQ frame
/// above the limit is refused by libzmq itself, which closes the peer's connection before the
/// frame is buffered and gives no count; what is counted here is a message whose frames
/// together pass the limit (each frame below it) and every refusal on shared memory.
static OVERSIZED: AtomicU64 = AtomicU64::new(0);

/// Messages this process refused on receipt as larger than their socket's limit (see
/// [`OVERSIZED`]'s rules: multi-frame ZeroMQ messages over the limit, every shared-memory
/// refusal).
pub fn oversized_count() -> u64 {
    OVERSIZED.load(Ordering::Relaxed)
}

/// Counts one refused message in the process-wide [`oversized_count`].
pub(crate) fn count_oversized() {
    OVERSIZED.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed bind says what to look at: another process only for an address in use.
    #[test]
    fn a_bind_error_names_its_likely_cause() {
        let bind = |source| {
            TransportError::Bind {
                endpoint: "tcp://x:1".into(),
                source,
            }
            .to_string()
        };
        assert!(bind(zmq::Error::EADDRINUSE).ends_with("(is another process using it?)"));
        assert!(bind(zmq::Error::EADDRNOTAVAIL).ends_with("(not an address of this host)"));
        assert!(!bind(zmq::Error::EINVAL).contains("another process"));
    }
}
