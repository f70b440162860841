//! A message's pieces joined into one ZeroMQ frame ([`Joiner`]): a small message into a frame
//! ZeroMQ allocates, a large one (a DCM's built event) into a buffer the socket reuses, lent to
//! ZeroMQ without a copy and given back when the receiver releases the message.
//!
//! Why reuse: a fresh 100 KB buffer per event is a `malloc` and, in the receiving thread, a
//! `free` that gives the pages back to the kernel (glibc trims its heap above 128 KiB free), so
//! the next event's copy faults them in again: page faults, zeroing and cgroup accounting on
//! every event. A reused buffer is already mapped, and often still in cache.

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use crate::frame::FrameOwner;

/// Joined messages of at least this many bytes go into a reused buffer; smaller ones into a
/// frame ZeroMQ allocates (its allocation is cheap at that size, and a lent buffer costs ZeroMQ
/// a content record and this module an owner box).
pub(super) const REUSED_FROM_BYTES: usize = 16 * 1024;

/// Buffers a socket keeps for reuse: more than a DCM's events in flight to its loggers
/// usually (the receiver gives a buffer back once it has read the message).
const KEPT_BUFFERS: usize = 64;

/// A buffer whose capacity grew past this (an unusually large event) is freed, not kept: the
/// kept buffers stay within `KEPT_BUFFERS` x 4 MiB per socket.
const KEPT_MAX_BYTES: usize = 4 << 20;

/// One frame's worth of pieces, joined.
pub(super) enum Joined {
    /// A frame ZeroMQ allocated (small messages).
    Fresh(zmq::Message),
    /// A reused buffer lent to ZeroMQ (send it zero-copy: it comes back when released).
    Lent(Box<dyn FrameOwner>),
}

/// Joins pieces into one frame, keeping the buffers of large messages for the next ones.
pub(super) struct Joiner {
    /// Buffers given back by released messages (any thread), taken by this socket's sends.
    kept: Arc<ArrayQueue<Vec<u8>>>,
}

impl Default for Joiner {
    fn default() -> Joiner {
        Joiner {
            kept: Arc::new(ArrayQueue::new(KEPT_BUFFERS)),
        }
    }
}

impl Joiner {
    /// `pieces` back to back in one frame, each byte written once.
    pub(super) fn join<'a>(&self, pieces: impl Iterator<Item = &'a [u8]> + Clone) -> Joined {
        let total: usize = pieces.clone().map(<[u8]>::len).sum();
        if total < REUSED_FROM_BYTES {
            return Joined::Fresh(fresh_message(pieces, total));
        }
        let mut bytes = self.kept.pop().unwrap_or_default();
        bytes.clear();
        bytes.reserve(total);
        for p in pieces {
            bytes.extend_from_slice(p);
        }
        Joined::Lent(Box::new(KeptBytes {
            bytes,
            home: Arc::clone(&self.kept),
        }))
    }

    /// Buffers waiting for reuse (for tests).
    #[cfg(test)]
    pub(super) fn kept(&self) -> usize {
        self.kept.len()
    }
}

/// A frame ZeroMQ allocates (one allocation for the record and the bytes) holding `pieces`,
/// `total` bytes. ZeroMQ's safe constructor zeroes the frame first: a pass over a few KiB at
/// most here, cheaper than the second allocation a frame made of our own buffer would cost.
fn fresh_message<'a>(pieces: impl Iterator<Item = &'a [u8]>, total: usize) -> zmq::Message {
    let mut joined = zmq::Message::with_size(total);
    let mut at = 0;
    for p in pieces {
        // A clone of `pieces` that yields more than it did when counted is cut at `total`.
        let n = p.len().min(total - at);
        joined[at..at + n].copy_from_slice(&p[..n]);
        at += n;
    }
    joined
}

/// A reused buffer lent to a message: back to its socket's [`Joiner`] when ZeroMQ drops it
/// (dropped instead if the socket keeps enough, or it grew too large).
struct KeptBytes {
    bytes: Vec<u8>,
    home: Arc<ArrayQueue<Vec<u8>>>,
}

impl FrameOwner for KeptBytes {
    fn frame_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for KeptBytes {
    fn drop(&mut self) {
        if self.bytes.capacity() <= KEPT_MAX_BYTES {
            // Full: this buffer is freed instead.
            let _ = self.home.push(std::mem::take(&mut self.bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(j: &Joined) -> Vec<u8> {
        match j {
            Joined::Fresh(m) => m.to_vec(),
            Joined::Lent(o) => o.frame_bytes().to_vec(),
        }
    }

    /// Small messages go into fresh frames; large ones into a buffer that comes back when the
    /// message is dropped and is reused by the next join (same allocation), each joined
    /// correctly whatever the buffer held before.
    #[test]
    fn large_joins_reuse_their_buffer_once_released() {
        let j = Joiner::default();
        let small = j.join([&b"ab"[..], &b"cd"[..]].into_iter());
        assert!(matches!(small, Joined::Fresh(_)));
        assert_eq!(bytes_of(&small), b"abcd");
        let big = vec![7u8; REUSED_FROM_BYTES];
        let first = j.join([&b"hd"[..], &big[..]].into_iter());
        let Joined::Lent(owner) = first else {
            panic!("a large join is lent");
        };
        assert_eq!(owner.frame_bytes().len(), 2 + big.len());
        assert_eq!(&owner.frame_bytes()[..3], b"hd\x07");
        let at = owner.frame_bytes().as_ptr();
        assert_eq!(j.kept(), 0);
        drop(owner);
        assert_eq!(j.kept(), 1, "released: back for reuse");
        let other = vec![9u8; REUSED_FROM_BYTES + 1];
        let second = j.join([&other[..]].into_iter());
        let Joined::Lent(owner) = second else {
            panic!("a large join is lent");
        };
        assert_eq!(owner.frame_bytes(), &other[..]);
        assert_eq!(owner.frame_bytes().as_ptr(), at, "the same buffer, reused");
        drop(owner);
        assert_eq!(j.kept(), 1);
        // The kept buffer, grown past the limit, is freed when released, not kept.
        let huge = vec![1u8; KEPT_MAX_BYTES + 1];
        drop(j.join([&huge[..]].into_iter()));
        assert_eq!(j.kept(), 0);
    }
}
