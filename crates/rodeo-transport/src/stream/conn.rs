//! One connection of the stream transport: a nonblocking TCP socket, the buffer it is read
//! into (reused: messages are handed out as slices of it) and the unsent tail of a message the
//! kernel took only part of.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

use super::sys;
use super::wire::{decode_header, encode_header, FrameError, HEADER_BYTES};
use super::Limits;

/// The most parts one message may be sent as (one vectored write: the header and these).
pub const MAX_PARTS: usize = 15;

/// The receive buffer a connection starts with; it grows (rarely, and never beyond one frame
/// of the limit) when a frame is larger.
const INITIAL_BUFFER: usize = 1 << 20;

/// Below this much room at the buffer's end, the unread bytes move to its start before a read.
const MIN_READ: usize = 64 * 1024;

/// The largest message (header included) a corked send keeps for the next flush.
pub(super) const CORK_MESSAGE: usize = 16 * 1024;

/// The most bytes corked messages (and a partly sent one) may hold.
pub(super) const CORK_BYTES: usize = 64 * 1024;

/// What a read of the socket found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fill {
    /// Bytes came.
    Data,
    /// Nothing to read now.
    Idle,
    /// The peer closed the connection (and every byte before was read).
    Eof,
}

/// What a non-blocking send did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sent {
    /// The message is the kernel's (or, its tail, in the connection's pending bytes).
    Queued,
    /// The peer's buffers are full: nothing of the message was sent.
    Full,
}

/// One TCP connection with rodeo's framing.
pub(super) struct Conn {
    /// The id its bound side gives it (0 on a connecting side).
    pub(super) id: u64,
    /// The peer's address.
    pub(super) addr: SocketAddr,
    sock: TcpStream,
    /// Received bytes; `head..tail` are not handed out yet.
    buf: Vec<u8>,
    head: usize,
    tail: usize,
    /// The tail of the last message the kernel took only part of; `out_pos..` not sent yet.
    out: Vec<u8>,
    out_pos: usize,
    /// Non-blocking sends to this peer refused because its buffers were full.
    pub(super) refused: u64,
}

impl Conn {
    /// Makes `sock` a stream connection: nonblocking, TCP_NODELAY, large buffers.
    pub(super) fn new(
        id: u64,
        sock: TcpStream,
        addr: SocketAddr,
        limits: &Limits,
    ) -> io::Result<Conn> {
        sock.set_nonblocking(true)?;
        sock.set_nodelay(true)?;
        sys::set_buffers(sock.as_raw_fd(), limits.socket_buffer)?;
        Ok(Conn {
            id,
            addr,
            sock,
            buf: vec![
                0;
                INITIAL_BUFFER
                    .min(limits.max_message + HEADER_BYTES)
                    .max(MIN_READ)
            ],
            head: 0,
            tail: 0,
            out: Vec::new(),
            out_pos: 0,
            refused: 0,
        })
    }

    /// The socket's descriptor (for poll).
    pub(super) fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Whether part of a message waits to be sent.
    pub(super) fn has_pending(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// The next whole message buffered, as its range in [`Conn::message`]; `None` when the
    /// buffer holds none (then room is made for the frame under way). A bad header is an
    /// error before any of its payload is kept.
    pub(super) fn next_message(
        &mut self,
        max: usize,
    ) -> Result<Option<(usize, usize)>, FrameError> {
        let avail = self.tail - self.head;
        if avail < HEADER_BYTES {
            return Ok(None);
        }
        let mut h = [0u8; HEADER_BYTES];
        h.copy_from_slice(&self.buf[self.head..self.head + HEADER_BYTES]);
        let len = decode_header(&h, max)?;
        if avail < HEADER_BYTES + len {
            self.make_room(HEADER_BYTES + len);
            return Ok(None);
        }
        let start = self.head + HEADER_BYTES;
        self.head = start + len;
        Ok(Some((start, start + len)))
    }

    /// The bytes of a range [`Conn::next_message`] gave (valid until the next read).
    pub(super) fn message(&self, range: (usize, usize)) -> &[u8] {
        &self.buf[range.0..range.1]
    }

    /// Makes sure a frame of `frame` bytes starting at `head` fits in the buffer: moves the
    /// unread bytes to the start, grows the buffer if the frame is larger than it (checked
    /// against the limit already).
    fn make_room(&mut self, frame: usize) {
        if self.head + frame <= self.buf.len() {
            return;
        }
        self.compact();
        if frame > self.buf.len() {
            self.buf.resize(frame, 0);
        }
    }

    fn compact(&mut self) {
        self.buf.copy_within(self.head..self.tail, 0);
        self.tail -= self.head;
        self.head = 0;
    }

    /// Reads what the kernel holds for this connection into the buffer (one read, not waiting).
    pub(super) fn fill(&mut self) -> io::Result<Fill> {
        if self.head == self.tail {
            self.head = 0;
            self.tail = 0;
        } else if self.buf.len() - self.tail < MIN_READ && self.head > 0 {
            self.compact();
        }
        if self.tail == self.buf.len() {
            // Whole messages fill the buffer: they are handed out before more is read.
            return Ok(Fill::Data);
        }
        loop {
            match (&self.sock).read(&mut self.buf[self.tail..]) {
                Ok(0) => return Ok(Fill::Eof),
                Ok(n) => {
                    self.tail += n;
                    return Ok(Fill::Data);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Fill::Idle),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The frame cut short when the peer closed: `Some` when bytes of a frame were buffered.
    pub(super) fn truncated(&self, max: usize) -> Option<FrameError> {
        let have = self.tail - self.head;
        if have == 0 {
            return None;
        }
        let want = if have >= HEADER_BYTES {
            let mut h = [0u8; HEADER_BYTES];
            h.copy_from_slice(&self.buf[self.head..self.head + HEADER_BYTES]);
            decode_header(&h, max).map_or(HEADER_BYTES, |l| HEADER_BYTES + l)
        } else {
            HEADER_BYTES
        };
        Some(FrameError::Truncated {
            have: have as u64,
            want: want as u64,
        })
    }

    /// Sends the pending tail of a message, as much as the kernel takes now.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        while self.has_pending() {
            match sys::send_vectored(self.fd(), &[sys::iovec(&self.out[self.out_pos..])]) {
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(())
    }

    /// Sends one message made of `parts` (at most [`MAX_PARTS`], `total` bytes together,
    /// checked by the caller) without waiting.
    ///
    /// `cork`: a message of at most [`CORK_MESSAGE`] bytes is appended to the connection's
    /// pending bytes (up to [`CORK_BYTES`] of them) and goes out with the next flush or the
    /// next message that is not corked: many small messages, one system call. The caller
    /// flushes before it waits ([`Conn::flush`]).
    ///
    /// Otherwise one vectored write takes the pending bytes, the header and the parts. When
    /// the kernel takes part of the message, the rest is kept and sent before the next
    /// message; when it takes none of it (the peer's buffers are full, or the pending bytes
    /// are not all out), nothing of the message was sent and the answer is [`Sent::Full`].
    pub(super) fn try_send(
        &mut self,
        parts: &[&[u8]],
        total: usize,
        cork: bool,
    ) -> io::Result<Sent> {
        let pending = self.out.len() - self.out_pos;
        let framed = HEADER_BYTES + total;
        let header = encode_header(total as u32);
        if cork && framed <= CORK_MESSAGE && pending + framed <= CORK_BYTES {
            if self.out_pos > 0 {
                self.out.drain(..self.out_pos);
                self.out_pos = 0;
            }
            self.out.extend_from_slice(&header);
            for p in parts {
                self.out.extend_from_slice(p);
            }
            return Ok(Sent::Queued);
        }
        let mut iov = [sys::iovec(&[]); MAX_PARTS + 2];
        let mut k = 0;
        if pending > 0 {
            iov[0] = sys::iovec(&self.out[self.out_pos..]);
            k = 1;
        }
        iov[k] = sys::iovec(&header);
        for (slot, p) in iov[k + 1..].iter_mut().zip(parts) {
            *slot = sys::iovec(p);
        }
        let n = match sys::send_vectored(self.fd(), &iov[..k + 1 + parts.len()]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Sent::Full),
            Err(e) => return Err(e),
        };
        if n < pending {
            self.out_pos += n;
            return Ok(Sent::Full);
        }
        self.out.clear();
        self.out_pos = 0;
        let n = n - pending;
        if n < framed {
            // The kernel took part of it: the rest is the only copy this path makes.
            let mut skip = n;
            for piece in std::iter::once(&header[..]).chain(parts.iter().copied()) {
                if skip >= piece.len() {
                    skip -= piece.len();
                    continue;
                }
                self.out.extend_from_slice(&piece[skip..]);
                skip = 0;
            }
        }
        Ok(Sent::Queued)
    }
}
