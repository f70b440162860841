//! rodeo's transport layer: the dataflow protocol's messages and the endpoints they travel on.
//!
//! - [`message`]: the message types of `specs/dataflow-protocol.md`, a decoder that borrows the
//!   received bytes (no allocation, no copy: lists are iterators over the payload) and an encoder
//!   that appends to a reusable buffer.
//! - [`socket`]: ZeroMQ sockets with the protocol's framing, zero-copy frames and receive timeouts.
//! - [`endpoint`]: endpoint URLs (`inproc://`, `ipc://`, `tcp://`, `shm://`), checked before a
//!   socket sees them.
//! - [`shm`]: the same-host data plane: ROUTER/DEALER over iceoryx2 shared memory.
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
