//! The bound side of the stream transport: accepts peers, receives from all of them with one
//! `poll`, and sends to the one a message names.

use std::net::{TcpListener, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::conn::{Conn, Fill, Sent};
use super::error::{StreamError, StreamStats};
use super::tls::TlsContext;
use super::wire::FrameError;
use super::{left, message_len, sys, Limits};

/// How long accepting pauses when the process has no descriptor left.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// A connected peer of a [`Router`], unique for the router's life (never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u64);

impl std::fmt::Display for PeerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer {}", self.0)
    }
}

/// A message a [`Router`] received: who sent it and its bytes (a slice of the connection's
/// receive buffer, valid until the next receive).
#[derive(Debug)]
pub struct Message<'a> {
    /// The sender.
    pub peer: PeerId,
    /// The payload.
    pub bytes: &'a [u8],
}

/// The bound side: accepts peers ([`super::Dealer`]s), receives from all, replies to one.
pub struct Router {
    listener: TcpListener,
    local: String,
    limits: Limits,
    conns: Vec<Conn>,
    /// Peers whose connection ended but whose whole messages are still to be handed out.
    ended: Vec<bool>,
    next_id: u64,
    /// Where the next search for a buffered message starts (fairness among peers).
    cursor: usize,
    pollfds: Vec<libc::pollfd>,
    stats: StreamStats,
    /// Small messages wait for the next flush ([`Router::set_cork`]).
    cork: bool,
    /// Accepting pauses until then (the process ran out of descriptors).
    accept_paused_until: Option<Instant>,
    /// Every peer's connection is TLS with these (`None`: plain).
    tls: Option<TlsContext>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("local", &self.local)
            .field("peers", &self.conns.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Router {
    /// Binds `addr` (`host:port`; port 0 picks a free one, see [`Router::local_addr`]); its
    /// peers connect in plain TCP.
    pub fn bind(
        addr: impl ToSocketAddrs + std::fmt::Display,
        limits: Limits,
    ) -> Result<Router, StreamError> {
        Router::bind_tls(addr, limits, None)
    }

    /// [`Router::bind`], and with `tls` every peer must complete a TLS 1.3 handshake with the
    /// partition's certificate ([`super::tls`]) before a byte of it is handed out; one that
    /// fails is closed and counted ([`StreamStats::tls_refused`]).
    pub fn bind_tls(
        addr: impl ToSocketAddrs + std::fmt::Display,
        limits: Limits,
        tls: Option<TlsContext>,
    ) -> Result<Router, StreamError> {
        let io = |op, e| StreamError::Io {
            op,
            addr: addr.to_string(),
            source: e,
        };
        let listener = TcpListener::bind(&addr).map_err(|e| io("bind", e))?;
        listener.set_nonblocking(true).map_err(|e| io("bind", e))?;
        let local = listener
            .local_addr()
            .map_err(|e| io("bind", e))?
            .to_string();
        Ok(Router {
            listener,
            local,
            limits: limits.checked(),
            conns: Vec::new(),
            ended: Vec::new(),
            next_id: 1,
            cursor: 0,
            pollfds: Vec::new(),
            stats: StreamStats::default(),
            cork: false,
            accept_paused_until: None,
            tls,
        })
    }

    /// The bound address (`ip:port`).
    pub fn local_addr(&self) -> &str {
        &self.local
    }

    /// The peers connected now.
    pub fn peers(&self) -> Vec<PeerId> {
        self.conns.iter().map(|c| PeerId(c.id)).collect()
    }

    /// Every descriptor a wait for this router's next message watches (the listener and each
    /// peer), with the events to watch: for a socket that waits beside others
    /// ([`crate::socket::poll_readable`]).
    pub(crate) fn poll_fds(&self, out: &mut Vec<(RawFd, libc::c_short)>) {
        let paused = self.accept_paused_until.is_some_and(|t| Instant::now() < t);
        out.push((
            self.listener.as_raw_fd(),
            if paused { 0 } else { libc::POLLIN },
        ));
        for (c, &ended) in self.conns.iter().zip(&self.ended) {
            let mut ev = if ended { 0 } else { libc::POLLIN };
            if c.has_pending() {
                ev |= libc::POLLOUT;
            }
            out.push((c.fd(), ev));
        }
    }

    /// With `on`, a message of at most 16 KiB sent to a peer waits in that peer's buffer (64
    /// KiB at most) until [`Router::flush_all`], the next receive's wait, or the next larger
    /// message to the peer: many small messages go out in one system call. Off by default;
    /// whoever turns it on flushes before waiting for anything else.
    pub(crate) fn set_cork(&mut self, on: bool) {
        self.cork = on;
    }

    /// Hands every peer's pending bytes to the kernel, as much as it takes now (a peer whose
    /// socket failed is closed by the next receive).
    pub(crate) fn flush_all(&mut self) {
        for (c, ended) in self.conns.iter_mut().zip(self.ended.iter_mut()) {
            if c.has_pending() && c.flush().is_err() {
                *ended = true;
            }
        }
    }

    /// What the router counted.
    pub fn stats(&self) -> StreamStats {
        self.stats
    }

    /// Non-blocking sends to `peer` refused because its buffers were full (`None`: not
    /// connected).
    pub fn refused(&self, peer: PeerId) -> Option<u64> {
        self.conns
            .iter()
            .find(|c| c.id == peer.0)
            .map(|c| c.refused)
    }

    /// Waits up to `timeout` for a message from any peer (accepting new peers meanwhile);
    /// `None` when none came. Peers are served in turn: one that sends a lot does not keep
    /// another's messages waiting.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Message<'_>>, StreamError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((i, range)) = self.buffered() {
                self.stats.received += 1;
                let c = &self.conns[i];
                return Ok(Some(Message {
                    peer: PeerId(c.id),
                    bytes: c.message(range),
                }));
            }
            if !self.wait(left(deadline))? && Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    /// The next whole message already read from a peer, without a system call (`None`: none
    /// is buffered; the kernel may hold more).
    pub(crate) fn recv_buffered(&mut self) -> Option<Message<'_>> {
        let (i, range) = self.buffered()?;
        self.stats.received += 1;
        let c = &self.conns[i];
        Some(Message {
            peer: PeerId(c.id),
            bytes: c.message(range),
        })
    }

    /// The next whole buffered message, searching the peers from the cursor; closes the peers
    /// whose next frame is bad and those that ended with nothing whole left.
    fn buffered(&mut self) -> Option<(usize, (usize, usize))> {
        let mut seen = 0;
        while seen < self.conns.len() {
            let i = (self.cursor + seen) % self.conns.len();
            match self.conns[i].next_message(self.limits.max_message) {
                Ok(Some(range)) => {
                    self.cursor = i + 1;
                    return Some((i, range));
                }
                Ok(None) if self.ended[i] => {
                    if let Some(e) = self.conns[i].truncated(self.limits.max_message) {
                        self.refuse(i, e);
                    }
                    self.close(i);
                }
                Ok(None) => seen += 1,
                Err(e) => {
                    self.refuse(i, e);
                    self.close(i);
                }
            }
        }
        None
    }

    /// Counts a bad frame of peer `i` (which is then closed).
    fn refuse(&mut self, i: usize, e: FrameError) {
        match e {
            FrameError::TooLong { .. } => {
                self.stats.oversized += 1;
                crate::frame::count_oversized();
            }
            FrameError::Truncated { .. } => self.stats.truncated += 1,
            _ => self.stats.malformed += 1,
        }
        let c = &self.conns[i];
        tracing::warn!(peer = c.id, addr = %c.addr, "stream: {e}; connection closed");
    }

    fn close(&mut self, i: usize) {
        if let Some(e) = &self.conns[i].tls_error {
            self.stats.tls_refused += 1;
            crate::curve::count_tls_refused();
            let c = &self.conns[i];
            tracing::warn!(peer = c.id, addr = %c.addr, "stream {}: TLS refused the peer ({e}); connection closed (a process of another partition?)", self.local);
        }
        self.conns.remove(i);
        self.ended.remove(i);
        self.stats.peers_closed += 1;
        if self.cursor > i {
            self.cursor -= 1;
        }
    }

    /// One `poll` over the listener and every peer, up to `timeout`; accepts, reads and
    /// flushes what it finds. Returns whether anything happened.
    fn wait(&mut self, timeout: Duration) -> Result<bool, StreamError> {
        self.pollfds.clear();
        let listen = if self.accepting() { libc::POLLIN } else { 0 };
        self.pollfds
            .push(sys::pollfd(self.listener.as_raw_fd(), listen));
        for (c, &ended) in self.conns.iter().zip(&self.ended) {
            let mut ev = if ended { 0 } else { libc::POLLIN };
            if c.has_pending() {
                ev |= libc::POLLOUT;
            }
            self.pollfds.push(sys::pollfd(c.fd(), ev));
        }
        let n = sys::poll(&mut self.pollfds, timeout).map_err(|e| StreamError::Io {
            op: "poll",
            addr: self.local.clone(),
            source: e,
        })?;
        if n == 0 {
            return Ok(false);
        }
        let before = self.conns.len();
        for i in (0..before).rev() {
            let rev = self.pollfds[i + 1].revents;
            if rev == 0 {
                continue;
            }
            if rev & libc::POLLOUT != 0 && self.conns[i].flush().is_err() {
                self.ended[i] = true;
            }
            if rev & !libc::POLLOUT != 0 && !self.ended[i] {
                match self.conns[i].fill() {
                    Ok(Fill::Data | Fill::Idle) => {}
                    Ok(Fill::Eof) | Err(_) => self.ended[i] = true,
                }
            }
        }
        if self.pollfds[0].revents != 0 {
            self.accept()?;
        }
        Ok(true)
    }

    /// Whether the listener is watched (not while accepting pauses).
    fn accepting(&mut self) -> bool {
        match self.accept_paused_until {
            Some(t) if Instant::now() < t => false,
            Some(_) => {
                self.accept_paused_until = None;
                true
            }
            None => true,
        }
    }

    /// Accepts every peer waiting. One beyond [`Limits::max_peers`] is closed at once; when
    /// the process has no descriptor left, accepting pauses 100 ms. Both are counted
    /// ([`StreamStats::peers_refused`]) and logged, and neither is the caller's error: the
    /// peers connected go on being served.
    fn accept(&mut self) -> Result<(), StreamError> {
        loop {
            match self.listener.accept() {
                Ok((sock, addr)) if self.conns.len() >= self.limits.max_peers => {
                    drop(sock);
                    self.stats.peers_refused += 1;
                    if self.stats.peers_refused.is_power_of_two() {
                        tracing::warn!(
                            %addr,
                            max = self.limits.max_peers,
                            refused = self.stats.peers_refused,
                            "stream {}: a peer beyond the most this router keeps, closed",
                            self.local
                        );
                    }
                }
                Ok((sock, addr)) => {
                    let io = |e| StreamError::Io {
                        op: "accept",
                        addr: addr.to_string(),
                        source: e,
                    };
                    let tls = match &self.tls {
                        Some(t) => Some(t.server().map_err(|e| io(std::io::Error::other(e)))?),
                        None => None,
                    };
                    let conn =
                        Conn::new(self.next_id, sock, addr, &self.limits, tls).map_err(io)?;
                    self.next_id += 1;
                    self.conns.push(conn);
                    self.ended.push(false);
                    self.stats.peers_accepted += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // A peer that left before we accepted it.
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {}
                // No descriptor left (EMFILE, ENFILE) or no memory: pause accepting, go on
                // serving the peers there are.
                Err(e) => {
                    self.stats.peers_refused += 1;
                    self.accept_paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                    tracing::warn!(
                        "stream {}: cannot accept a peer ({e}); accepting pauses {} ms",
                        self.local,
                        ACCEPT_PAUSE.as_millis()
                    );
                    return Ok(());
                }
            }
        }
    }

    fn index(&self, peer: PeerId) -> Result<usize, StreamError> {
        self.conns
            .iter()
            .position(|c| c.id == peer.0)
            .ok_or(StreamError::UnknownPeer { peer: peer.0 })
    }

    /// Sends one message made of `parts` to `peer` without ever waiting: `Ok(false)` when the
    /// peer's buffers are full (nothing sent; counted for that peer, see [`Router::refused`]).
    pub fn try_send_to(&mut self, peer: PeerId, parts: &[&[u8]]) -> Result<bool, StreamError> {
        let len = message_len(parts, &self.limits)?;
        let i = self.index(peer)?;
        match self.send_once(i, parts, len)? {
            Sent::Queued => Ok(true),
            Sent::Full => {
                self.conns[i].refused += 1;
                self.stats.refused_full += 1;
                Ok(false)
            }
        }
    }

    /// Sends one message made of `parts` to `peer`, waiting up to `timeout` for room in its
    /// buffers ([`StreamError::Timeout`] then; nothing was sent).
    pub fn send_to(
        &mut self,
        peer: PeerId,
        parts: &[&[u8]],
        timeout: Duration,
    ) -> Result<(), StreamError> {
        let len = message_len(parts, &self.limits)?;
        let deadline = Instant::now() + timeout;
        loop {
            let i = self.index(peer)?;
            if self.send_once(i, parts, len)? == Sent::Queued {
                return Ok(());
            }
            let c = &self.conns[i];
            let mut fds = [sys::pollfd(c.fd(), c.room_events())];
            let wait = left(deadline);
            if wait.is_zero() {
                return Err(StreamError::Timeout {
                    addr: c.addr.to_string(),
                    ms: timeout.as_millis() as u64,
                });
            }
            sys::poll(&mut fds, wait).map_err(|e| StreamError::Io {
                op: "poll",
                addr: c.addr.to_string(),
                source: e,
            })?;
        }
    }

    /// One non-blocking send to peer `i`; a failed socket closes the peer.
    fn send_once(&mut self, i: usize, parts: &[&[u8]], len: usize) -> Result<Sent, StreamError> {
        match self.conns[i].try_send(parts, len, self.cork) {
            Ok(Sent::Queued) => {
                self.stats.sent += 1;
                Ok(Sent::Queued)
            }
            Ok(Sent::Full) => Ok(Sent::Full),
            Err(_) => {
                let addr = self.conns[i].addr.to_string();
                self.close(i);
                Err(StreamError::Closed { addr })
            }
        }
    }
}
