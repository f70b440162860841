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
    Fresh(FreshFrame),
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
            return Joined::Fresh(FreshFrame::new(pieces, total));
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

/// A frame ZeroMQ allocated (one allocation for its record and the bytes, `zmq_msg_init_size`)
/// holding a message's pieces, written once: not zeroed first as the `zmq` crate's safe
/// constructor does (a pass over every byte of every small reply, 8% of a readout node's core
/// thread), and not a second allocation as a frame made of our own buffer would be. Closed
/// when dropped unless sent ([`FreshFrame::send`]).
pub(super) struct FreshFrame {
    msg: zmq_sys::zmq_msg_t,
}

impl FreshFrame {
    /// A frame of `total` bytes holding `pieces` back to back (a clone of `pieces` that yields
    /// more than it did when counted is cut at `total`; one that yields less leaves the rest
    /// zero).
    fn new<'a>(pieces: impl Iterator<Item = &'a [u8]>, total: usize) -> FreshFrame {
        let mut msg = zmq_sys::zmq_msg_t::default();
        // SAFETY: `msg` is a fresh zmq_msg_t; zmq_msg_init_size gives it `total` bytes, or
        // returns -1 (ENOMEM) and leaves it unallocated.
        let rc = unsafe { zmq_sys::zmq_msg_init_size(&mut msg, total) };
        // Out of memory: a panic, as Rust's own allocation failure aborts.
        assert_eq!(rc, 0, "zmq_msg_init_size failed: out of memory");
        // SAFETY: an initialised message's data pointer addresses its `total` bytes
        // (uninitialised); only raw writes go there below, no reference to unwritten bytes.
        let data = unsafe { zmq_sys::zmq_msg_data(&mut msg) }.cast::<u8>();
        let mut at = 0;
        for p in pieces {
            let n = p.len().min(total - at);
            // SAFETY: `at + n <= total`: inside the message's bytes; `p` is another buffer.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), data.add(at), n) };
            at += n;
        }
        // SAFETY: as above; zeroes what the pieces did not fill, so every byte is written.
        unsafe { std::ptr::write_bytes(data.add(at), 0, total - at) };
        FreshFrame { msg }
    }

    /// The frame's bytes (tests look at them; the sender hands the frame to ZeroMQ unread).
    #[cfg(test)]
    pub(super) fn bytes(&self) -> &[u8] {
        let msg = std::ptr::addr_of!(self.msg).cast_mut();
        // SAFETY: an initialised message (every byte written in `new`); ZeroMQ's accessors take
        // a mutable pointer but only read the record here, and the bytes live as long as `self`.
        unsafe {
            let data = zmq_sys::zmq_msg_data(msg).cast::<u8>();
            let len = zmq_sys::zmq_msg_size(msg);
            std::slice::from_raw_parts(data, len)
        }
    }

    /// Sends the frame on `sock` with `flags`; on failure it is closed (dropped).
    pub(super) fn send(mut self, sock: &mut zmq::Socket, flags: i32) -> Result<(), zmq::Error> {
        // SAFETY: `sock.as_mut_ptr()` is the live socket owned by `sock` (borrowed mutably, so
        // no other thread uses it); `self.msg` is initialised. On success ZeroMQ takes the
        // message and leaves `self.msg` empty (closing an empty message is a no-op).
        let rc = unsafe { zmq_sys::zmq_msg_send(&mut self.msg, sock.as_mut_ptr(), flags) };
        if rc < 0 {
            // SAFETY: zmq_errno reads the calling thread's errno.
            return Err(zmq::Error::from_raw(unsafe { zmq_sys::zmq_errno() }));
        }
        Ok(())
    }
}

impl Drop for FreshFrame {
    fn drop(&mut self) {
        // SAFETY: `msg` is initialised (or emptied by a send); closed once, here.
        unsafe { zmq_sys::zmq_msg_close(&mut self.msg) };
    }
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
            Joined::Fresh(m) => m.bytes().to_vec(),
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

    /// A fresh frame holds its pieces' bytes exactly, at every size (empty, kept inline in
    /// ZeroMQ's record up to 33 bytes, allocated beyond), a short iterator's rest is zero, an
    /// unsent frame is closed when dropped, and a sent one arrives whole.
    #[test]
    fn fresh_frames_hold_their_pieces_and_arrive_whole() {
        for total in [0usize, 1, 33, 34, 1000, REUSED_FROM_BYTES - 1] {
            let bytes: Vec<u8> = (0..total).map(|i| (i % 251) as u8 + 1).collect();
            let (a, b) = bytes.split_at(total / 3);
            let f = FreshFrame::new([a, b].into_iter(), total);
            assert_eq!(f.bytes(), &bytes[..], "{total} bytes");
            drop(f);
        }
        let short = FreshFrame::new([&b"xy"[..]].into_iter(), 5);
        assert_eq!(short.bytes(), b"xy\0\0\0");
        let ctx = zmq::Context::new();
        let rx = ctx.socket(zmq::PAIR).expect("socket");
        rx.bind("inproc://fresh-frame").expect("bind");
        let mut tx = ctx.socket(zmq::PAIR).expect("socket");
        tx.connect("inproc://fresh-frame").expect("connect");
        let payload = vec![0xA5u8; 2048];
        FreshFrame::new([&b"head"[..], &payload[..]].into_iter(), 4 + payload.len())
            .send(&mut tx, 0)
            .expect("send");
        let got = rx.recv_bytes(0).expect("receive");
        assert_eq!(&got[..4], b"head");
        assert_eq!(&got[4..], &payload[..]);
        // A refused send (nobody connected, not waiting) closes the frame: no leak, no error
        // beyond the send's own.
        let mut lone = ctx.socket(zmq::PUSH).expect("socket");
        let refused = FreshFrame::new([&payload[..]].into_iter(), payload.len())
            .send(&mut lone, zmq::DONTWAIT);
        assert!(refused.is_err());
    }
}
