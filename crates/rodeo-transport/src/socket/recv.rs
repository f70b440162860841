//! The receiving side of [`Socket`]: waiting and non-waiting receives, into a [`Received`]
//! whose frames are joined, or read in place when the message is one frame.

use super::{Received, Socket, SocketKind, TransportError};
use crate::frame::count_oversized;

impl Socket {
    /// Waits up to `timeout_ms` for a message and receives it into `msg` (reusing its buffers).
    /// Returns `Ok(false)` when the timeout expired first.
    pub fn recv(&mut self, msg: &mut Received, timeout_ms: i64) -> Result<bool, TransportError> {
        self.recv_waiting(msg, timeout_ms, false)
    }

    /// As [`Socket::recv`] (waiting up to `timeout_ms`), keeping a one-frame ZeroMQ message in
    /// place as [`Socket::try_recv_in_place`] does: read it with [`Received::data`].
    pub fn recv_in_place(
        &mut self,
        msg: &mut Received,
        timeout_ms: i64,
    ) -> Result<bool, TransportError> {
        self.recv_waiting(msg, timeout_ms, true)
    }

    /// [`Socket::recv`] and [`Socket::recv_in_place`]: shared memory and streams receive as
    /// always; ZeroMQ polls up to `timeout_ms`, then takes the message (`in_place`: a one-frame
    /// message kept where ZeroMQ put it).
    fn recv_waiting(
        &mut self,
        msg: &mut Received,
        timeout_ms: i64,
        in_place: bool,
    ) -> Result<bool, TransportError> {
        if let Some(s) = self.shm.get_mut() {
            return s.recv(msg, timeout_ms);
        }
        if let Some(s) = self.stream_mut() {
            return s.recv(msg, timeout_ms);
        }
        let ready = match self.inner.poll(zmq::POLLIN, timeout_ms) {
            Ok(n) => n,
            // Interrupted by a signal: nothing received (the caller's loop asks again).
            Err(zmq::Error::EINTR) => 0,
            Err(source) => return Err(TransportError::Recv { source }),
        };
        if ready == 0 {
            return Ok(false);
        }
        self.recv_parts(msg, 0, in_place)
    }

    /// Receives a message into `msg` if one is queued, without waiting and without a poll
    /// system call (the busy loops' receive). Returns `Ok(false)` when none is queued.
    pub fn try_recv(&mut self, msg: &mut Received) -> Result<bool, TransportError> {
        if let Some(s) = self.shm.get_mut() {
            return s.try_recv(msg);
        }
        if let Some(s) = self.stream_mut() {
            return s.recv(msg, 0);
        }
        self.recv_parts(msg, zmq::DONTWAIT, false)
    }

    /// As [`Socket::try_recv`], but a ZeroMQ message of one frame (besides a ROUTER's routing
    /// id) is not copied: `msg` keeps it where ZeroMQ put it until the next receive into `msg`.
    /// Read the message with [`Received::data`] (`msg.bytes` stays empty then). A message of
    /// several frames is joined into `msg.bytes` as always; shared memory copies out of the
    /// sample as always.
    pub fn try_recv_in_place(&mut self, msg: &mut Received) -> Result<bool, TransportError> {
        if let Some(s) = self.shm.get_mut() {
            return s.try_recv(msg);
        }
        if let Some(s) = self.stream_mut() {
            return s.recv(msg, 0);
        }
        self.recv_parts(msg, zmq::DONTWAIT, true)
    }

    fn recv_parts(
        &mut self,
        msg: &mut Received,
        first_flags: i32,
        in_place: bool,
    ) -> Result<bool, TransportError> {
        let limit = self.max_message_bytes.get().unwrap_or(usize::MAX);
        let mut flags = first_flags;
        loop {
            match self.recv_one(msg, flags, limit, in_place)? {
                Some(true) => return Ok(true),
                None => return Ok(false),
                // Larger than the limit in total (each frame below it: libzmq refuses those):
                // dropped and counted; the next message, if one is queued, is taken instead.
                Some(false) => {
                    count_oversized();
                    self.oversized_zmq += 1;
                    flags = zmq::DONTWAIT;
                }
            }
        }
    }

    /// One message into `msg`: `Some(true)` taken, `Some(false)` read to its end but larger
    /// than `limit` in total (its bytes not kept), `None` nothing queued. `in_place`: a
    /// message of one frame is kept as ZeroMQ's message (swapped into `msg`), not copied.
    fn recv_one(
        &mut self,
        msg: &mut Received,
        first_flags: i32,
        limit: usize,
        in_place: bool,
    ) -> Result<Option<bool>, TransportError> {
        msg.reset();
        let mut first = true;
        let mut over = false;
        loop {
            let flags = if first { first_flags } else { 0 };
            match self.inner.recv(&mut self.part, flags) {
                Ok(()) => {}
                Err(zmq::Error::EAGAIN) if first => return Ok(None),
                // A signal interrupted the call: the message is still whole in the queue.
                Err(zmq::Error::EINTR) => continue,
                Err(source) => return Err(TransportError::Recv { source }),
            }
            if first && self.kind == SocketKind::Router {
                msg.peer.extend_from_slice(&self.part);
            } else if in_place
                && msg.frames == 0
                && !over
                && !self.part.get_more()
                && self.part.len() <= limit
            {
                // The whole message in one frame: handed over as it is. The message `msg`
                // held before comes back here and is released by the next receive into it.
                std::mem::swap(
                    &mut self.part,
                    msg.held.get_or_insert_with(zmq::Message::new),
                );
                msg.in_place = true;
                msg.frames = 1;
                return Ok(Some(true));
            } else if over || msg.bytes.len() + self.part.len() > limit {
                // Read the rest of the frames (they are in memory already) without keeping them.
                over = true;
                msg.bytes.clear();
            } else {
                msg.bytes.extend_from_slice(&self.part);
                msg.frames += 1;
            }
            first = false;
            if !self.part.get_more() {
                return Ok(Some(!over));
            }
        }
    }
}
