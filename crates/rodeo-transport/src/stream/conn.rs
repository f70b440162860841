//! One connection of the stream transport: a nonblocking TCP socket, the buffer it is read
//! into (reused: messages are handed out as slices of it) and the unsent tail of a message the
//! kernel took only part of; with TLS ([`super::tls`]), the connection's TLS state between the
//! socket and these buffers.

use std::io::{self, Read, Write};
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
    /// The TLS state (`None`: plain TCP). Sent bytes are encrypted into its buffer and
    /// written from there; received bytes are decrypted there and copied into `buf`.
    tls: Option<Box<rustls::Connection>>,
    /// The TLS peer closed the TCP connection (what TLS holds is still handed out).
    tls_eof: bool,
    /// Why TLS refused this connection (a handshake or a record that failed).
    pub(super) tls_error: Option<rustls::Error>,
}

/// The kernel's side of TLS's writes: `sendmsg` with `MSG_NOSIGNAL`, as the plain path.
struct SendFd(RawFd);

impl Write for SendFd {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        sys::send_vectored(self.0, &[sys::iovec(b)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut iov = [sys::iovec(&[]); 64];
        let n = bufs.len().min(iov.len());
        for (slot, b) in iov.iter_mut().zip(bufs) {
            *slot = sys::iovec(b);
        }
        sys::send_vectored(self.0, &iov[..n])
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Conn {
    /// Makes `sock` a stream connection: nonblocking, TCP_NODELAY, large buffers; with `tls`,
    /// its handshake starts (a client's first flight goes out now, if the kernel takes it).
    pub(super) fn new(
        id: u64,
        sock: TcpStream,
        addr: SocketAddr,
        limits: &Limits,
        tls: Option<rustls::Connection>,
    ) -> io::Result<Conn> {
        sock.set_nonblocking(true)?;
        sock.set_nodelay(true)?;
        sys::set_buffers(sock.as_raw_fd(), limits.socket_buffer)?;
        let mut c = Conn {
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
            tls: tls.map(Box::new),
            tls_eof: false,
            tls_error: None,
        };
        c.pump_tls()?;
        Ok(c)
    }

    /// The socket's descriptor (for poll).
    pub(super) fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Whether bytes wait to be sent (part of a message, corked messages, TLS records or
    /// handshake); while TLS shakes hands, only what TLS itself has to send counts.
    pub(super) fn has_pending(&self) -> bool {
        let plain = self.out_pos < self.out.len();
        match self.tls.as_deref() {
            None => plain,
            Some(t) => t.wants_write() || (plain && !t.is_handshaking()),
        }
    }

    /// With TLS: hands TLS's bytes to the kernel, as many as it takes now; once the kernel
    /// took them all and the handshake is done, moves the waiting plaintext (corked messages,
    /// messages sent during the handshake) into TLS in one write (few records) and hands those
    /// on. Plaintext goes into TLS only when TLS holds nothing unsent, so a peer that does not
    /// read holds at most one batch there and one in `out` (back-pressure, as the plain path).
    fn pump_tls(&mut self) -> io::Result<()> {
        let fd = self.sock.as_raw_fd();
        let Some(t) = self.tls.as_deref_mut() else {
            return Ok(());
        };
        loop {
            while t.wants_write() {
                match t.write_tls(&mut SendFd(fd)) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if t.is_handshaking() || self.out_pos == self.out.len() {
                return Ok(());
            }
            // No buffer limit (tls.rs): TLS takes it all.
            t.writer().write_all(&self.out[self.out_pos..])?;
            self.out.clear();
            self.out_pos = 0;
        }
    }

    /// With TLS: copies what TLS decrypted already into `buf` (no system call); whether bytes
    /// came.
    fn pull_plaintext(&mut self) -> bool {
        if self.tls.is_none() {
            return false;
        }
        if self.tail == self.buf.len() {
            if self.head == 0 {
                return false;
            }
            self.compact();
        }
        let Some(t) = self.tls.as_deref_mut() else {
            return false;
        };
        let mut got = false;
        while self.tail < self.buf.len() {
            match t.reader().read(&mut self.buf[self.tail..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.tail += n;
                    got = true;
                }
            }
        }
        got
    }

    /// The next whole message buffered, as its range in [`Conn::message`]; `None` when the
    /// buffer holds none (then room is made for the frame under way). A bad header is an
    /// error before any of its payload is kept.
    ///
    /// With TLS, bytes TLS decrypted already are taken first: a socket whose bytes were all
    /// read does not wake a `poll`, so none may stay behind there.
    pub(super) fn next_message(
        &mut self,
        max: usize,
    ) -> Result<Option<(usize, usize)>, FrameError> {
        loop {
            let avail = self.tail - self.head;
            if avail >= HEADER_BYTES {
                let mut h = [0u8; HEADER_BYTES];
                h.copy_from_slice(&self.buf[self.head..self.head + HEADER_BYTES]);
                let len = decode_header(&h, max)?;
                if avail >= HEADER_BYTES + len {
                    let start = self.head + HEADER_BYTES;
                    self.head = start + len;
                    return Ok(Some((start, start + len)));
                }
                self.make_room(HEADER_BYTES + len);
            }
            if !self.pull_plaintext() {
                return Ok(None);
            }
        }
    }

    /// The bytes of a range [`Conn::next_message`] gave (valid until the next read).
    pub(super) fn message(&self, range: (usize, usize)) -> &[u8] {
        &self.buf[range.0..range.1]
    }

    /// Makes room for a frame of `frame` bytes starting at `head` (checked against the limit
    /// already): moves the unread bytes to the start and, when the frame is larger than the
    /// buffer and the buffer is nearly full, grows it, at most doubling and never past the
    /// frame. The buffer grows as the frame's bytes arrive, not from its header alone: a header
    /// announcing the largest message, sent on every connection a router takes, committed a
    /// whole message's memory each (1,024 x 64 MiB).
    fn make_room(&mut self, frame: usize) {
        if self.head + frame <= self.buf.len() {
            return;
        }
        self.compact();
        if frame > self.buf.len() && self.buf.len() - self.tail < MIN_READ {
            let grown = self
                .buf
                .len()
                .saturating_mul(2)
                .max(self.tail + MIN_READ)
                .min(frame);
            self.buf.resize(grown, 0);
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
        if self.tls.is_some() {
            return self.fill_tls();
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

    /// Has TLS process the records just read. When it refuses them, its alert goes to the peer
    /// if the kernel takes it, the reason is kept ([`Conn::tls_error`]) and the answer is an
    /// error (the connection is to be closed).
    fn process_tls(&mut self) -> io::Result<()> {
        let Some(t) = self.tls.as_deref_mut() else {
            return Ok(());
        };
        if let Err(e) = t.process_new_packets() {
            let _ = self.pump_tls();
            let err = io::Error::new(io::ErrorKind::InvalidData, e.to_string());
            self.tls_error = Some(e);
            return Err(err);
        }
        Ok(())
    }

    /// Moves the TLS handshake on without waiting: reads what the peer sent (records after the
    /// handshake stay decrypted in TLS for the next receive), answers it.
    fn shake(&mut self) -> io::Result<()> {
        while let Some(t) = self.tls.as_deref_mut() {
            if !t.is_handshaking() || self.tls_eof {
                break;
            }
            match t.read_tls(&mut &self.sock) {
                Ok(0) => {
                    self.tls_eof = true;
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                Ok(_) => self.process_tls()?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.pump_tls()
    }

    /// [`Conn::fill`] through TLS: decrypted bytes first, then reads of the socket until it is
    /// empty or closed or the buffer is full (a message of several records costs one wake-up,
    /// not one per record), or TLS refuses what came (an error; [`Conn::tls_error`] says why).
    /// `Idle` when no byte for the buffer came (handshake records alone bring none).
    fn fill_tls(&mut self) -> io::Result<Fill> {
        let mut got = self.pull_plaintext();
        loop {
            if self.tls_eof {
                return Ok(if got { Fill::Data } else { Fill::Eof });
            }
            if self.tail == self.buf.len() {
                return Ok(Fill::Data);
            }
            let Some(t) = self.tls.as_deref_mut() else {
                return Ok(Fill::Eof);
            };
            match t.read_tls(&mut &self.sock) {
                Ok(0) => {
                    self.tls_eof = true;
                    let _ = t.process_new_packets();
                    got |= self.pull_plaintext();
                }
                Ok(_) => {
                    self.process_tls()?;
                    self.pump_tls()?;
                    got |= self.pull_plaintext();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(if got { Fill::Data } else { Fill::Idle });
                }
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

    /// What a sender refused for want of room waits for: room in the socket, or, while TLS
    /// shakes hands, the peer's handshake records (room alone would not move it on).
    pub(super) fn room_events(&self) -> libc::c_short {
        match self.tls.as_deref() {
            Some(t) if t.is_handshaking() => {
                libc::POLLIN | if t.wants_write() { libc::POLLOUT } else { 0 }
            }
            _ => libc::POLLOUT,
        }
    }

    /// Whether bytes given to this connection are not the kernel's yet (also while they wait
    /// for the TLS handshake).
    pub(super) fn unsent(&self) -> bool {
        self.out_pos < self.out.len() || self.tls.as_deref().is_some_and(|t| t.wants_write())
    }

    /// Sends the pending tail of a message, as much as the kernel takes now (with TLS, moving
    /// its handshake on first).
    pub(super) fn flush(&mut self) -> io::Result<()> {
        if self.tls.as_deref().is_some_and(|t| t.is_handshaking()) {
            return self.shake();
        }
        if self.tls.is_some() {
            return self.pump_tls();
        }
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
        if self.tls.is_some() {
            return self.try_send_tls(parts, total, cork);
        }
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

    /// [`Conn::try_send`] through TLS, with the same answers. A corked message, or one sent
    /// while the handshake is under way (one of any size, or up to [`CORK_BYTES`] together),
    /// waits in the plaintext buffer and goes into TLS with the next flush. Otherwise the
    /// message is refused while bytes wait (in TLS, not taken by the kernel, or plaintext
    /// behind them); else TLS
    /// encrypts it whole (the header and parts in the same records) and the kernel takes what
    /// it takes now, the rest staying in TLS's buffer.
    fn try_send_tls(&mut self, parts: &[&[u8]], total: usize, cork: bool) -> io::Result<Sent> {
        let framed = HEADER_BYTES + total;
        let header = encode_header(total as u32);
        if self.tls.as_deref().is_some_and(|t| t.is_handshaking()) {
            // A sender that only sends (or waits for room) still finishes the handshake.
            self.shake()?;
        }
        let pending = self.out.len() - self.out_pos;
        let handshaking = self.tls.as_deref().is_some_and(|t| t.is_handshaking());
        let corked = cork && framed <= CORK_MESSAGE && pending + framed <= CORK_BYTES;
        if corked || handshaking {
            if !corked && pending > 0 && pending + framed > CORK_BYTES {
                return Ok(Sent::Full);
            }
            self.out.extend_from_slice(&header);
            for p in parts {
                self.out.extend_from_slice(p);
            }
            if !corked {
                self.pump_tls()?;
            }
            return Ok(Sent::Queued);
        }
        self.pump_tls()?;
        let waiting = self.out_pos < self.out.len();
        let Some(t) = self.tls.as_deref_mut() else {
            return Ok(Sent::Full);
        };
        if t.wants_write() || waiting {
            return Ok(Sent::Full);
        }
        let mut slices = [io::IoSlice::new(&[]); MAX_PARTS + 1];
        slices[0] = io::IoSlice::new(&header);
        for (slot, p) in slices[1..].iter_mut().zip(parts) {
            *slot = io::IoSlice::new(p);
        }
        let mut left = &mut slices[..1 + parts.len()];
        while !left.is_empty() {
            let n = t.writer().write_vectored(left)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "TLS took none of a message",
                ));
            }
            io::IoSlice::advance_slices(&mut left, n);
        }
        self.pump_tls()?;
        Ok(Sent::Queued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame's header alone does not grow the buffer to the frame: it grows as the bytes
    /// arrive (at most doubling), and a large frame sent in pieces still comes out whole.
    #[test]
    fn the_buffer_grows_with_the_bytes_not_with_the_header() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut peer = TcpStream::connect(addr).unwrap();
        let (sock, from) = listener.accept().unwrap();
        let limits = Limits::default();
        let mut conn = Conn::new(1, sock, from, &limits, None).unwrap();
        let start = conn.buf.len();
        // A header announcing the largest message, and a few bytes of it.
        let frame = limits.max_message;
        peer.write_all(&encode_header(frame as u32)).unwrap();
        peer.write_all(&[7u8; 100]).unwrap();
        let t0 = std::time::Instant::now();
        while conn.tail - conn.head < HEADER_BYTES + 100 {
            assert!(t0.elapsed() < std::time::Duration::from_secs(10));
            conn.fill().unwrap();
        }
        assert_eq!(conn.next_message(limits.max_message).unwrap(), None);
        assert_eq!(conn.buf.len(), start, "grown from a header alone");
        // A frame of 5 MiB, sent in pieces by another thread: whole, and the buffer at most
        // twice what arrived.
        let (listener, big) = (std::net::TcpListener::bind("127.0.0.1:0").unwrap(), 5 << 20);
        let addr = listener.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            let mut peer = TcpStream::connect(addr).unwrap();
            peer.write_all(&encode_header(big as u32)).unwrap();
            let payload: Vec<u8> = (0..big).map(|i| (i % 251) as u8).collect();
            for piece in payload.chunks(300_000) {
                peer.write_all(piece).unwrap();
            }
            peer
        });
        let (sock, from) = listener.accept().unwrap();
        let mut conn = Conn::new(2, sock, from, &limits, None).unwrap();
        let t0 = std::time::Instant::now();
        let range = loop {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "never whole"
            );
            if let Some(r) = conn.next_message(limits.max_message).unwrap() {
                break r;
            }
            assert!(
                conn.buf.len() <= start.max(2 * (conn.tail + MIN_READ)),
                "{} bytes for {} received",
                conn.buf.len(),
                conn.tail
            );
            if conn.fill().unwrap() == Fill::Idle {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        let msg = conn.message(range);
        assert_eq!(msg.len(), big);
        assert!(msg.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        drop(sender.join().unwrap());
        drop(peer);
    }
}
