//! The connecting side of the stream transport: one connection to a [`super::Router`].

use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::conn::{Conn, Fill, Sent};
use super::error::{StreamError, StreamStats};
use super::tls::TlsContext;
use super::wire::FrameError;
use super::{left, message_len, sys, Limits};

/// The connecting side: sends to its router and receives its replies.
pub struct Dealer {
    conn: Conn,
    limits: Limits,
    /// The connection ended (the peer closed it, a bad frame, a failed send).
    ended: bool,
    stats: StreamStats,
    /// Small messages wait for the next flush ([`Dealer::set_cork`]).
    cork: bool,
}

impl std::fmt::Debug for Dealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dealer")
            .field("peer", &self.conn.addr)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Dealer {
    /// Connects to the router at `addr` (`host:port`), waiting up to `timeout` per address it
    /// resolves to; plain TCP.
    pub fn connect(
        addr: impl ToSocketAddrs + std::fmt::Display,
        limits: Limits,
        timeout: Duration,
    ) -> Result<Dealer, StreamError> {
        Dealer::connect_tls(addr, limits, timeout, None)
    }

    /// [`Dealer::connect`], and with `tls` the connection is TLS 1.3 with the partition's
    /// certificate ([`super::tls`]). The handshake goes on in the background of the next
    /// sends and receives: what is sent meanwhile waits (in order), and a router that fails
    /// it ends the connection (counted in [`StreamStats::tls_refused`]).
    pub fn connect_tls(
        addr: impl ToSocketAddrs + std::fmt::Display,
        limits: Limits,
        timeout: Duration,
        tls: Option<&TlsContext>,
    ) -> Result<Dealer, StreamError> {
        let io = |e| StreamError::Io {
            op: "connect",
            addr: addr.to_string(),
            source: e,
        };
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address resolved");
        for a in addr.to_socket_addrs().map_err(io)? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(sock) => {
                    let limits = limits.checked();
                    let state = match tls {
                        Some(t) => Some(t.client().map_err(|e| io(std::io::Error::other(e)))?),
                        None => None,
                    };
                    let conn = Conn::new(0, sock, a, &limits, state).map_err(io)?;
                    let stats = StreamStats {
                        peers_accepted: 1,
                        ..StreamStats::default()
                    };
                    return Ok(Dealer {
                        conn,
                        limits,
                        ended: false,
                        stats,
                        cork: false,
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(io(last))
    }

    /// The descriptor a wait for this dealer's next message watches, with the events to
    /// watch ([`crate::socket::poll_readable`]).
    pub(crate) fn poll_fd(&self) -> (std::os::fd::RawFd, libc::c_short) {
        let out = if self.conn.has_pending() {
            libc::POLLOUT
        } else {
            0
        };
        (self.conn.fd(), libc::POLLIN | out)
    }

    /// With `on`, a message of at most 16 KiB waits in the connection's buffer (64 KiB at
    /// most) until [`Dealer::flush_pending`], the next receive's wait, or the next larger
    /// message: many small messages go out in one system call. Off by default; whoever turns
    /// it on flushes before waiting for anything else.
    pub(crate) fn set_cork(&mut self, on: bool) {
        self.cork = on;
    }

    /// Hands the pending bytes to the kernel, as much as it takes now.
    pub(crate) fn flush_pending(&mut self) {
        if self.conn.has_pending() && self.conn.flush().is_err() {
            self.end();
        }
    }

    /// Whether the connection ended (every later call fails: connect again).
    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }

    /// What the dealer counted.
    pub fn stats(&self) -> StreamStats {
        self.stats
    }

    fn closed(&self) -> StreamError {
        StreamError::Closed {
            addr: self.conn.addr.to_string(),
        }
    }

    /// Ends the connection after `e` (counted) and returns the error to give the caller.
    fn refuse(&mut self, e: FrameError) -> StreamError {
        match e {
            FrameError::TooLong { .. } => {
                self.stats.oversized += 1;
                crate::frame::count_oversized();
            }
            FrameError::Truncated { .. } => self.stats.truncated += 1,
            _ => self.stats.malformed += 1,
        }
        self.end();
        StreamError::Frame {
            addr: self.conn.addr.to_string(),
            source: e,
        }
    }

    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            self.stats.peers_closed += 1;
            if let Some(e) = &self.conn.tls_error {
                self.stats.tls_refused += 1;
                crate::curve::count_tls_refused();
                tracing::warn!(addr = %self.conn.addr, "stream: TLS refused the router ({e}); connection closed (a router of another partition?)");
            }
        }
    }

    /// Waits up to `timeout` for a message from the router; `None` when none came. A bad
    /// frame, or the router gone, is an error (and every later call fails with
    /// [`StreamError::Closed`]).
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<&[u8]>, StreamError> {
        let deadline = Instant::now() + timeout;
        let mut eof = false;
        loop {
            if self.ended && !eof {
                return Err(self.closed());
            }
            match self.conn.next_message(self.limits.max_message) {
                Ok(Some(range)) => {
                    self.stats.received += 1;
                    return Ok(Some(self.conn.message(range)));
                }
                Ok(None) if eof => {
                    if let Some(e) = self.conn.truncated(self.limits.max_message) {
                        return Err(self.refuse(e));
                    }
                    self.end();
                    return Err(self.closed());
                }
                Ok(None) => {}
                Err(e) => return Err(self.refuse(e)),
            }
            match self.conn.fill() {
                Ok(Fill::Data) => continue,
                Ok(Fill::Eof) | Err(_) => {
                    eof = true;
                    continue;
                }
                Ok(Fill::Idle) => {}
            }
            let wait = left(deadline);
            if wait.is_zero() {
                return Ok(None);
            }
            let ev = libc::POLLIN
                | if self.conn.has_pending() {
                    libc::POLLOUT
                } else {
                    0
                };
            let mut fds = [sys::pollfd(self.conn.fd(), ev)];
            sys::poll(&mut fds, wait).map_err(|e| StreamError::Io {
                op: "poll",
                addr: self.conn.addr.to_string(),
                source: e,
            })?;
            if fds[0].revents & libc::POLLOUT != 0 && self.conn.flush().is_err() {
                eof = true;
            }
        }
    }

    /// The next whole message already read, without a system call (`None`: none is buffered,
    /// or the connection ended: [`Dealer::recv`] says which).
    pub(crate) fn recv_buffered(&mut self) -> Result<Option<&[u8]>, StreamError> {
        if self.ended {
            return Ok(None);
        }
        match self.conn.next_message(self.limits.max_message) {
            Ok(Some(range)) => {
                self.stats.received += 1;
                Ok(Some(self.conn.message(range)))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(self.refuse(e)),
        }
    }

    /// Sends one message made of `parts` without ever waiting: `Ok(false)` when the router's
    /// buffers are full (nothing sent; counted in [`StreamStats::refused_full`]).
    pub fn try_send(&mut self, parts: &[&[u8]]) -> Result<bool, StreamError> {
        let len = message_len(parts, &self.limits)?;
        match self.send_once(parts, len)? {
            Sent::Queued => Ok(true),
            Sent::Full => {
                self.conn.refused += 1;
                self.stats.refused_full += 1;
                Ok(false)
            }
        }
    }

    /// Sends one message made of `parts`, waiting up to `timeout` for room in the router's
    /// buffers ([`StreamError::Timeout`] then; nothing was sent).
    pub fn send(&mut self, parts: &[&[u8]], timeout: Duration) -> Result<(), StreamError> {
        let len = message_len(parts, &self.limits)?;
        let deadline = Instant::now() + timeout;
        loop {
            if self.send_once(parts, len)? == Sent::Queued {
                return Ok(());
            }
            let wait = left(deadline);
            if wait.is_zero() {
                return Err(StreamError::Timeout {
                    addr: self.conn.addr.to_string(),
                    ms: timeout.as_millis() as u64,
                });
            }
            let mut fds = [sys::pollfd(self.conn.fd(), self.conn.room_events())];
            sys::poll(&mut fds, wait).map_err(|e| StreamError::Io {
                op: "poll",
                addr: self.conn.addr.to_string(),
                source: e,
            })?;
        }
    }

    /// Waits up to `timeout` until the tail of a partly sent message (with TLS: every message
    /// sent during the handshake too) is the kernel's; whether nothing is left pending.
    pub fn flush(&mut self, timeout: Duration) -> Result<bool, StreamError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.ended {
                return Err(self.closed());
            }
            if self.conn.flush().is_err() {
                self.end();
                return Err(self.closed());
            }
            if !self.conn.unsent() {
                return Ok(true);
            }
            let wait = left(deadline);
            if wait.is_zero() {
                return Ok(false);
            }
            // Room, or (TLS) the router's handshake records.
            let (fd, ev) = self.poll_fd();
            let mut fds = [sys::pollfd(fd, ev)];
            let _ = sys::poll(&mut fds, wait);
        }
    }

    fn send_once(&mut self, parts: &[&[u8]], len: usize) -> Result<Sent, StreamError> {
        if self.ended {
            return Err(self.closed());
        }
        match self.conn.try_send(parts, len, self.cork) {
            Ok(Sent::Queued) => {
                self.stats.sent += 1;
                Ok(Sent::Queued)
            }
            Ok(Sent::Full) => Ok(Sent::Full),
            Err(_) => {
                self.end();
                Err(self.closed())
            }
        }
    }
}
