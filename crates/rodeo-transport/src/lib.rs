//! rodeo's transport layer: the dataflow protocol's messages and the endpoints they travel on.
//!
//! **Role in the flow.** Between the applications: readout nodes, supervisor, DCMs and loggers
//! (and the ROSTester) exchange the protocol's messages through it, in one process or across
//! hosts.
//!
//! **Must not depend on** any other rodeo crate nor on what the messages carry (fragments are
//! bytes here): the applications build on it, never the other way round.
//!
//! The protocol:
//!
//! - [`message`]: the message types of `specs/dataflow-protocol.md`, a decoder that borrows the
//!   received bytes (no allocation, no copy: lists are iterators over the payload) and an encoder
//!   that appends to a reusable buffer.
//! - [`endpoint`]: endpoint URLs (`inproc://`, `ipc://`, `tcp://`, `shm://`, `stream://`),
//!   checked before a socket sees them.
//!
//! The transports:
//!
//! - [`socket`]: the sockets the applications use: ZeroMQ with the protocol's framing, zero-copy
//!   frames and receive timeouts; shared memory or the stream transport by the endpoint's scheme.
//! - [`shm`]: the same-host data plane: ROUTER/DEALER over iceoryx2 shared memory.
//! - [`stream`]: the data plane between hosts: rodeo's own framing over kernel TCP, a
//!   bound side that knows each message's peer and connecting peers, bounded waits, small
//!   messages sent together; behind [`socket::Socket`] for `stream://` endpoints.
//! - [`frame`]: what both transports send, receive and fail with (frames, received messages,
//!   the transport error, the count of oversized messages).
//! - [`curve`]: ZeroMQ CURVE on tcp: a partition's keys, the authenticator (ZAP) and the count
//!   of refused peers.
//!
//! The decoder treats every received byte as hostile: an unknown type, a size that disagrees with
//! the bytes received, or a payload that does not parse is a typed [`message::DecodeError`], never
//! a panic.

pub mod curve;
pub mod endpoint;
pub mod frame;
pub mod message;
pub mod shm;
pub mod socket;
pub mod stream;
