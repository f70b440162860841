//! The stream transport behind [`crate::socket::Socket`]'s methods: what a `stream://HOST:PORT`
//! endpoint binds or connects, so that the partition's data paths (ROB fragments to DCMs,
//! built events to loggers, the supervisor's assignments) run over it with the code they run
//! over ZeroMQ and shared memory.
//!
//! What it adds to [`Router`] and [`Dealer`] to behave as the ZeroMQ ROUTER/DEALER pair the
//! applications expect:
//!
//! - **Identities.** Every connection a DEALER makes starts with a hello message
//!   ([`HELLO`] and the DEALER's identity). The ROUTER names the peer's messages with that
//!   identity and routes replies by it; a DEALER that reconnects (a restarted DCM) takes its
//!   name over to the new connection. A peer that sends no hello is named `#<id>`.
//! - **Connecting before the peer binds, and again after it restarts.** A DEALER that finds no
//!   router tries again on its next operation after [`RETRY`], doubled after each failure up to
//!   [`RETRY_MAX`] (each attempt waits [`CONNECT_TIMEOUT`] at most); meanwhile what it sends waits in
//!   a queue bounded by the high-water mark and 64 MiB (as ZeroMQ queues on a connecting
//!   pipe), and goes
//!   out first, in order, once a connection is up. A full queue refuses ([`would_block`]).
//! - **Small messages together**, where the owner asks for it
//!   ([`crate::socket::Socket::set_batching`]: a loop that receives or polls this socket on
//!   every turn). Messages of at most 16 KiB wait in their connection's buffer (64 KiB at most)
//!   and go out together: at the next receive or poll of this socket that finds no message
//!   already read from the kernel (one that takes such a message, the next of a batch read
//!   together, does not flush), with the next larger message, at [`StreamSocket::flush`], or
//!   when the socket is dropped (what the kernel takes). A DCM's requests of one loop turn, a
//!   readout node's replies to one batch of requests and a logger's acknowledgements then
//!   cost one system call instead of one per message.
//! - **One copy on receipt.** A message is copied from the connection's buffer into the
//!   [`Received`] (the socket's receive contract owns its bytes; ZeroMQ copies as well). Sends
//!   take the frames where they lie, zero-copy frames included, in one vectored write.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::{
    left, Dealer, Limits, PeerId, Router, StreamError, StreamStats, TlsContext, MAX_PARTS,
};
use crate::frame::{Frame, FrameOwner, Received, TransportError};

/// The first message of every connection a stream DEALER makes: this tag, then its identity.
pub(crate) const HELLO: &[u8; 8] = b"\xffRSHELLO";

/// The longest identity a hello may name (ZeroMQ's limit for routing ids).
const MAX_IDENTITY: usize = 255;

/// How long one connection attempt may take (it blocks the owner's thread: a router's host
/// answers a connect within a millisecond on a LAN, a dead host never).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(50);

/// Between two connection attempts of a DEALER whose router is not there (yet, or again);
/// doubled after each failed attempt up to [`RETRY_MAX`], so a host that is gone costs its
/// peers at most 50 ms per second.
const RETRY: Duration = Duration::from_millis(100);

/// The longest wait between two connection attempts.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// The most bytes a DEALER queues while it has no connection (besides the message count).
const QUEUE_BYTES: usize = 64 << 20;

/// What a wait of "forever" (a negative timeout) waits at most per call.
const LONGEST_WAIT: Duration = Duration::from_secs(3600);

/// A timeout in milliseconds as a duration (negative: [`LONGEST_WAIT`]).
pub(crate) fn wait_of(ms: i64) -> Duration {
    u64::try_from(ms).map_or(LONGEST_WAIT, Duration::from_millis)
}

/// A socket bound or connected to a `stream://` endpoint.
pub(crate) struct StreamSocket {
    side: Side,
    endpoint: String,
    limits: Limits,
    /// A message taken by a poll, handed out by the next receive.
    ready: bool,
    ready_peer: Vec<u8>,
    ready_bytes: Vec<u8>,
    /// The zero-copy frames of the message being sent (dropped once it is sent).
    owners: Vec<Box<dyn FrameOwner>>,
    /// A message of more frames than one vectored write takes, joined.
    joined: Vec<u8>,
    /// Small messages wait for the next receive or poll ([`StreamSocket::set_cork`]).
    cork: bool,
}

enum Side {
    Router(RouterSide),
    Dealer(DealerSide),
}

struct RouterSide {
    router: Router,
    /// The name each peer goes by (its hello's identity, or `#<id>`).
    names: HashMap<PeerId, Vec<u8>>,
    /// The peer each name routes to (the newest connection that announced it).
    by_name: HashMap<Vec<u8>, PeerId>,
}

struct DealerSide {
    addr: String,
    identity: Vec<u8>,
    /// Each connection is TLS with these (`None`: plain).
    tls: Option<TlsContext>,
    dealer: Option<Dealer>,
    next_try: Instant,
    /// The wait after the next failed attempt.
    retry: Duration,
    /// Messages sent while no connection was up (or while older ones were still queued).
    queue: VecDeque<Vec<u8>>,
    queue_max: usize,
    /// The bytes `queue` holds (at most [`QUEUE_BYTES`]).
    queue_bytes: usize,
    /// What the connections that ended counted.
    past: StreamStats,
    /// New connections cork small messages ([`StreamSocket`]'s `cork`).
    cork: bool,
}

impl std::fmt::Debug for StreamSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSocket")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// `host:port`, with `*` for the port (any free one) as `0`.
fn socket_address(address: &str) -> String {
    match address.strip_suffix(":*") {
        Some(host) => format!("{host}:0"),
        None => address.to_string(),
    }
}

fn limits_of(max_message: Option<usize>) -> Limits {
    let d = Limits::default();
    Limits {
        max_message: max_message.unwrap_or(d.max_message),
        ..d
    }
}

impl StreamSocket {
    fn new(side: Side, endpoint: String, limits: Limits) -> StreamSocket {
        StreamSocket {
            side,
            endpoint,
            limits,
            ready: false,
            ready_peer: Vec::new(),
            ready_bytes: Vec::new(),
            owners: Vec::new(),
            joined: Vec::new(),
            cork: false,
        }
    }

    /// Hands what waits in the connections' buffers to the kernel (as much as it takes now).
    pub(crate) fn flush(&mut self) {
        match &mut self.side {
            Side::Router(r) => r.router.flush_all(),
            Side::Dealer(d) => {
                if let Some(dealer) = d.dealer.as_mut() {
                    dealer.flush_pending();
                }
            }
        }
    }

    /// Turns corking on or off for every connection, present and future (module docs: the
    /// owner receives or polls this socket on every turn of its loop, which flushes).
    pub(crate) fn set_cork(&mut self, on: bool) {
        if !on {
            self.flush();
        }
        self.cork = on;
        match &mut self.side {
            Side::Router(r) => r.router.set_cork(on),
            Side::Dealer(d) => {
                d.cork = on;
                if let Some(dealer) = d.dealer.as_mut() {
                    dealer.set_cork(on);
                }
            }
        }
    }

    /// Binds `address` (`host:port`, `host:*`); returns the socket and the endpoint bound.
    /// With `tls`, every peer must pass the partition's TLS handshake.
    pub(crate) fn bind(
        address: &str,
        max_message: Option<usize>,
        tls: Option<TlsContext>,
    ) -> Result<(StreamSocket, String), TransportError> {
        let limits = limits_of(max_message);
        let router = Router::bind_tls(socket_address(address), limits, tls).map_err(|source| {
            TransportError::Stream {
                op: "bind",
                endpoint: format!("stream://{address}"),
                source: Box::new(source),
            }
        })?;
        let bound = format!("stream://{}", router.local_addr());
        let side = Side::Router(RouterSide {
            router,
            names: HashMap::new(),
            by_name: HashMap::new(),
        });
        Ok((StreamSocket::new(side, bound.clone(), limits), bound))
    }

    /// A DEALER of `address` (`host:port`) presenting `identity`. It connects now if the
    /// router is there, else at its next operation (module docs); what it sends meanwhile
    /// waits in a queue of at most `queue_max` messages. With `tls`, each connection is TLS.
    pub(crate) fn connect(
        address: &str,
        identity: &[u8],
        max_message: Option<usize>,
        queue_max: usize,
        tls: Option<TlsContext>,
    ) -> StreamSocket {
        let mut side = DealerSide {
            addr: address.to_string(),
            identity: identity.to_vec(),
            tls,
            dealer: None,
            next_try: Instant::now(),
            retry: RETRY,
            queue: VecDeque::new(),
            queue_max: queue_max.max(1),
            queue_bytes: 0,
            past: StreamStats::default(),
            cork: false,
        };
        let limits = limits_of(max_message);
        side.connected(&limits);
        StreamSocket::new(Side::Dealer(side), format!("stream://{address}"), limits)
    }

    /// Sets how many messages a DEALER queues while it has no connection.
    pub(crate) fn set_queue_max(&mut self, messages: usize) {
        if let Side::Dealer(d) = &mut self.side {
            d.queue_max = messages.max(1);
        }
    }

    /// Keeps a message for the next receive: one already read from the kernel, without a
    /// flush or a system call; else, after a flush, one that comes within the timeout (`Some`,
    /// accepting peers and reading on the way; `None`: none); whether one is kept. Not
    /// flushing while messages read together are taken one by one lets the replies to a
    /// batch of requests go out together, in one write, once the batch is read (as the
    /// shared-memory sockets do, `crate::shm`); nothing waits longer than that batch.
    pub(crate) fn take(&mut self, timeout: Option<Duration>) -> Result<bool, TransportError> {
        if self.ready || self.take_within(None)? {
            return Ok(true);
        }
        self.flush();
        self.take_within(timeout)
    }

    /// [`StreamSocket::take`] without the flush.
    fn take_within(&mut self, timeout: Option<Duration>) -> Result<bool, TransportError> {
        let got = match &mut self.side {
            Side::Router(r) => r.recv(
                timeout,
                &mut self.ready_peer,
                &mut self.ready_bytes,
                &self.endpoint,
            )?,
            Side::Dealer(d) => {
                self.ready_peer.clear();
                match timeout {
                    Some(t) => d.recv(t, &self.limits, &mut self.ready_bytes),
                    None => d.recv_buffered(&mut self.ready_bytes),
                }
            }
        };
        self.ready = got;
        Ok(got)
    }

    /// Receives into `msg`, waiting up to `timeout_ms` (negative: long); `Ok(false)` when
    /// nothing came.
    pub(crate) fn recv(
        &mut self,
        msg: &mut Received,
        timeout_ms: i64,
    ) -> Result<bool, TransportError> {
        msg.reset();
        if !self.take(Some(wait_of(timeout_ms)))? {
            return Ok(false);
        }
        std::mem::swap(&mut msg.bytes, &mut self.ready_bytes);
        std::mem::swap(&mut msg.peer, &mut self.ready_peer);
        msg.frames = 1;
        self.ready = false;
        Ok(true)
    }

    /// Every descriptor a wait for this socket's next message watches, with its events.
    pub(crate) fn poll_fds(&self, out: &mut Vec<(RawFd, libc::c_short)>) {
        match &self.side {
            Side::Router(r) => r.router.poll_fds(out),
            Side::Dealer(d) => {
                if let Some(dealer) = d.dealer.as_ref().filter(|x| !x.is_ended()) {
                    out.push(dealer.poll_fd());
                }
            }
        }
    }

    /// Messages refused on receipt (too long, malformed, cut short), over every connection.
    pub(crate) fn dropped(&self) -> u64 {
        let s = self.stats();
        s.oversized + s.malformed + s.truncated
    }

    /// What this socket counted, over every connection it had.
    pub(crate) fn stats(&self) -> StreamStats {
        match &self.side {
            Side::Router(r) => r.router.stats(),
            Side::Dealer(d) => {
                let now = d.dealer.as_ref().map(Dealer::stats).unwrap_or_default();
                add(d.past, now)
            }
        }
    }

    /// Sends one message of `frames`, to `peer` (a ROUTER) or to the router (a DEALER),
    /// waiting up to `wait` for room (`None`: not at all, [`would_block`] at once).
    pub(crate) fn send<'a>(
        &mut self,
        peer: Option<&[u8]>,
        frames: impl IntoIterator<Item = Frame<'a>>,
        wait: Option<Duration>,
    ) -> Result<(), TransportError> {
        #[derive(Clone, Copy)]
        enum Part<'b> {
            Copy(&'b [u8]),
            Owned(usize),
        }
        let StreamSocket {
            side,
            owners,
            joined,
            limits,
            endpoint,
            ..
        } = self;
        owners.clear();
        joined.clear();
        let mut src = [Part::Copy(&[]); MAX_PARTS];
        let mut n = 0;
        let mut overflow = false;
        for f in frames {
            if !overflow && n == MAX_PARTS {
                // More frames than one vectored write takes: the message goes joined.
                overflow = true;
                for p in &src[..n] {
                    match *p {
                        Part::Copy(b) => joined.extend_from_slice(b),
                        Part::Owned(k) => joined.extend_from_slice(owners[k].frame_bytes()),
                    }
                }
            }
            match (f, overflow) {
                (Frame::Copy(b), true) => joined.extend_from_slice(b),
                (Frame::ZeroCopy(o), true) => joined.extend_from_slice(o.frame_bytes()),
                (Frame::Copy(b), false) => {
                    src[n] = Part::Copy(b);
                    n += 1;
                }
                (Frame::ZeroCopy(o), false) => {
                    owners.push(o);
                    src[n] = Part::Owned(owners.len() - 1);
                    n += 1;
                }
            }
        }
        let mut parts: [&[u8]; MAX_PARTS] = [&[]; MAX_PARTS];
        let parts: &[&[u8]] = if overflow {
            parts[0] = joined;
            &parts[..1]
        } else {
            for (slot, p) in parts.iter_mut().zip(&src[..n]) {
                *slot = match *p {
                    Part::Copy(b) => b,
                    Part::Owned(k) => owners[k].frame_bytes(),
                };
            }
            &parts[..n]
        };
        let sent = match side {
            Side::Router(r) => match peer {
                Some(peer) => r.send(peer, parts, wait, endpoint),
                None => Err(TransportError::unroutable()),
            },
            Side::Dealer(d) => d.send(parts, wait, limits, endpoint),
        };
        owners.clear();
        sent
    }
}

impl Drop for StreamSocket {
    fn drop(&mut self) {
        // What waits corked goes to the kernel, as much as it takes without waiting.
        self.flush();
    }
}

fn add(a: StreamStats, b: StreamStats) -> StreamStats {
    StreamStats {
        sent: a.sent + b.sent,
        received: a.received + b.received,
        refused_full: a.refused_full + b.refused_full,
        oversized: a.oversized + b.oversized,
        malformed: a.malformed + b.malformed,
        truncated: a.truncated + b.truncated,
        peers_accepted: a.peers_accepted + b.peers_accepted,
        peers_closed: a.peers_closed + b.peers_closed,
        peers_refused: a.peers_refused + b.peers_refused,
        tls_refused: a.tls_refused + b.tls_refused,
    }
}

impl RouterSide {
    /// One message from any peer into `peer`/`bytes`, waiting up to `timeout` (`None`: only
    /// a message already buffered, no system call); hellos are taken in passing.
    fn recv(
        &mut self,
        timeout: Option<Duration>,
        peer: &mut Vec<u8>,
        bytes: &mut Vec<u8>,
        endpoint: &str,
    ) -> Result<bool, TransportError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let got = match deadline {
                Some(at) => {
                    self.router
                        .recv(left(at))
                        .map_err(|source| TransportError::Stream {
                            op: "receive",
                            endpoint: endpoint.to_string(),
                            source: Box::new(source),
                        })?
                }
                None => self.router.recv_buffered(),
            };
            let Some(m) = got else {
                return Ok(false);
            };
            let id = m.peer;
            let named = self.names.contains_key(&id);
            let hello = !named && m.bytes.starts_with(HELLO);
            // An identity longer than a name is not taken (the peer goes by its id): a hostile
            // hello does not make the router keep megabytes per name.
            let long = m.bytes.len() > HELLO.len() + MAX_IDENTITY;
            let mut identity = Vec::new();
            if hello && !long {
                identity.extend_from_slice(&m.bytes[HELLO.len()..]);
            } else if !hello {
                bytes.clear();
                bytes.extend_from_slice(m.bytes);
            }
            if !named {
                // The peer's first message: its hello, or a message of a peer that has none.
                let name = if identity.is_empty() {
                    format!("#{}", id.0).into_bytes()
                } else {
                    identity
                };
                self.by_name.insert(name.clone(), id);
                self.names.insert(id, name);
                self.prune();
            }
            if hello {
                continue;
            }
            peer.clear();
            peer.extend_from_slice(self.names.get(&id).map_or(&[][..], Vec::as_slice));
            return Ok(true);
        }
    }

    /// Forgets the names of peers that are gone, once they are more than the peers connected.
    fn prune(&mut self) {
        if self.names.len() <= 2 * self.router.peers().len() + 16 {
            return;
        }
        let live: std::collections::HashSet<PeerId> = self.router.peers().into_iter().collect();
        self.names.retain(|id, _| live.contains(id));
        self.by_name.retain(|_, id| live.contains(id));
    }

    fn send(
        &mut self,
        peer: &[u8],
        parts: &[&[u8]],
        wait: Option<Duration>,
        endpoint: &str,
    ) -> Result<(), TransportError> {
        let Some(&id) = self.by_name.get(peer) else {
            return Err(TransportError::unroutable());
        };
        let sent = match wait {
            Some(t) => self.router.send_to(id, parts, t).map(|()| true),
            None => self.router.try_send_to(id, parts),
        };
        match sent {
            Ok(true) => Ok(()),
            Ok(false) | Err(StreamError::Timeout { .. }) => Err(TransportError::would_block()),
            Err(StreamError::UnknownPeer { .. } | StreamError::Closed { .. }) => {
                self.by_name.remove(peer);
                self.names.remove(&id);
                Err(TransportError::unroutable())
            }
            Err(source) => Err(TransportError::Stream {
                op: "send",
                endpoint: endpoint.to_string(),
                source: Box::new(source),
            }),
        }
    }
}

impl DealerSide {
    /// Whether a connection is up: the one there is, or a new one if the last attempt is
    /// [`RETRY`] old (the hello is its first message).
    fn connected(&mut self, limits: &Limits) -> bool {
        if self.dealer.as_ref().is_some_and(|d| !d.is_ended()) {
            return true;
        }
        self.drop_connection();
        let now = Instant::now();
        if now < self.next_try {
            return false;
        }
        self.next_try = now + self.retry;
        self.retry = (self.retry * 2).min(RETRY_MAX);
        let Ok(mut d) = Dealer::connect_tls(
            self.addr.as_str(),
            *limits,
            CONNECT_TIMEOUT,
            self.tls.as_ref(),
        ) else {
            return false;
        };
        if d.send(&[HELLO.as_slice(), &self.identity], CONNECT_TIMEOUT)
            .is_err()
        {
            self.past = add(self.past, d.stats());
            return false;
        }
        self.retry = RETRY;
        tracing::debug!(addr = %self.addr, "stream: connected");
        d.set_cork(self.cork);
        self.dealer = Some(d);
        true
    }

    fn drop_connection(&mut self) {
        if let Some(d) = self.dealer.take() {
            self.past = add(self.past, d.stats());
        }
    }

    /// Sends what the queue holds, in order; whether it is empty now.
    fn flush_queue(&mut self) -> bool {
        let Some(d) = self.dealer.as_mut() else {
            return self.queue.is_empty();
        };
        while let Some(m) = self.queue.front() {
            match d.try_send(&[m]) {
                Ok(true) => {
                    self.queue_bytes -= m.len();
                    self.queue.pop_front();
                }
                Ok(false) => return false,
                Err(_) => {
                    self.drop_connection();
                    return false;
                }
            }
        }
        true
    }

    fn send(
        &mut self,
        parts: &[&[u8]],
        wait: Option<Duration>,
        limits: &Limits,
        endpoint: &str,
    ) -> Result<(), TransportError> {
        let deadline = wait.map(|t| Instant::now() + t);
        loop {
            if self.connected(limits) && self.flush_queue() {
                let Some(d) = self.dealer.as_mut() else {
                    continue;
                };
                let sent = match deadline {
                    Some(at) => d.send(parts, left(at)).map(|()| true),
                    None => d.try_send(parts),
                };
                match sent {
                    Ok(true) => return Ok(()),
                    Ok(false) | Err(StreamError::Timeout { .. }) => {
                        return Err(TransportError::would_block())
                    }
                    Err(e @ (StreamError::TooLarge { .. } | StreamError::TooManyParts { .. })) => {
                        return Err(TransportError::Stream {
                            op: "send",
                            endpoint: endpoint.to_string(),
                            source: Box::new(e),
                        })
                    }
                    // The connection ended: the next turn connects again (or queues).
                    Err(_) => {
                        self.drop_connection();
                        continue;
                    }
                }
            }
            let total: usize = parts.iter().map(|p| p.len()).sum();
            if self.queue.len() < self.queue_max && self.queue_bytes + total <= QUEUE_BYTES {
                if total > limits.max_message {
                    return Err(TransportError::Stream {
                        op: "send",
                        endpoint: endpoint.to_string(),
                        source: Box::new(StreamError::TooLarge {
                            len: total as u64,
                            max: limits.max_message as u64,
                        }),
                    });
                }
                self.queue.push_back(parts.concat());
                self.queue_bytes += total;
                return Ok(());
            }
            match deadline {
                Some(at) if Instant::now() < at => {
                    std::thread::sleep(left(at).min(Duration::from_millis(5)));
                }
                _ => return Err(TransportError::would_block()),
            }
        }
    }

    /// A message already read from the router into `bytes`, without a system call.
    fn recv_buffered(&mut self, bytes: &mut Vec<u8>) -> bool {
        let Some(d) = self.dealer.as_mut() else {
            return false;
        };
        match d.recv_buffered() {
            Ok(Some(m)) => {
                bytes.clear();
                bytes.extend_from_slice(m);
                true
            }
            Ok(None) => false,
            // A bad frame (counted): the next full receive connects again. What this socket
            // had corked goes to the kernel first, as it did when every receive flushed.
            Err(_) => {
                if let Some(d) = self.dealer.as_mut() {
                    d.flush_pending();
                }
                self.drop_connection();
                false
            }
        }
    }

    /// One message from the router into `bytes`, waiting up to `timeout` (connecting, and
    /// sending the queue, on the way); whether one came.
    fn recv(&mut self, timeout: Duration, limits: &Limits, bytes: &mut Vec<u8>) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.connected(limits) {
                self.flush_queue();
            }
            if let Some(d) = self.dealer.as_mut() {
                match d.recv(left(deadline)) {
                    Ok(Some(m)) => {
                        bytes.clear();
                        bytes.extend_from_slice(m);
                        return true;
                    }
                    Ok(None) => return false,
                    // The router went away (or sent a bad frame, counted): connect again.
                    Err(_) => self.drop_connection(),
                }
            }
            let w = left(deadline).min(RETRY);
            if w.is_zero() {
                return false;
            }
            std::thread::sleep(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A router bound to a free port, and its `host:port`.
    fn bound_router() -> (StreamSocket, String) {
        let (r, bound) = StreamSocket::bind("127.0.0.1:*", None, None).unwrap();
        let addr = bound.strip_prefix("stream://").unwrap().to_string();
        (r, addr)
    }

    fn recv(s: &mut StreamSocket, ms: i64) -> Option<Received> {
        let mut m = Received::default();
        s.recv(&mut m, ms).unwrap().then_some(m)
    }

    #[test]
    fn a_dealer_connecting_before_the_router_binds_queues_and_is_named_by_its_identity() {
        // A free port, then released: the router binds it later.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut d = StreamSocket::connect(&addr, b"dcm-1", None, 10, None);
        d.send(None, [Frame::Copy(b"early")], None).unwrap();
        let (mut r, bound) = StreamSocket::bind(&addr, None, None).unwrap();
        assert_eq!(bound, format!("stream://{addr}"));
        // The dealer connects at its next operation after RETRY.
        std::thread::sleep(RETRY);
        d.send(None, [Frame::Copy(b"la"), Frame::Copy(b"te")], None)
            .unwrap();
        let m = recv(&mut r, 2000).expect("the early message");
        assert_eq!(
            (m.peer.as_slice(), m.bytes.as_slice()),
            (&b"dcm-1"[..], &b"early"[..])
        );
        let m = recv(&mut r, 2000).expect("the late one");
        assert_eq!(m.bytes, b"late");
        r.send(Some(b"dcm-1"), [Frame::Copy(b"reply")], None)
            .unwrap();
        assert_eq!(recv(&mut d, 2000).expect("the reply").bytes, b"reply");
        let e = r
            .send(Some(b"dcm-9"), [Frame::Copy(b"x")], None)
            .unwrap_err();
        assert!(e.is_unroutable(), "{e}");
    }

    #[test]
    fn a_full_queue_refuses_and_a_restarted_router_is_found_again() {
        let (mut r, addr) = bound_router();
        let mut d = StreamSocket::connect(&addr, b"d", None, 2, None);
        d.send(None, [Frame::Copy(b"1")], None).unwrap();
        assert_eq!(recv(&mut r, 2000).unwrap().bytes, b"1");
        drop(r);
        // The router is gone: sends queue (2), then are refused.
        let mut refused = 0;
        for _ in 0..5 {
            if let Err(e) = d.send(None, [Frame::Copy(b"q")], None) {
                assert!(e.is_would_block(), "{e}");
                refused += 1;
            }
        }
        assert!(refused >= 2, "{refused}");
        let (mut r, _) = StreamSocket::bind(&addr, None, None).unwrap();
        std::thread::sleep(RETRY);
        d.send(None, [Frame::Copy(b"after")], Some(Duration::from_secs(2)))
            .unwrap();
        let mut got = Vec::new();
        while let Some(m) = recv(&mut r, 500) {
            assert_eq!(m.peer, b"d");
            got.push(m.bytes);
        }
        assert_eq!(
            got.last().map(Vec::as_slice),
            Some(&b"after"[..]),
            "{got:?}"
        );
    }

    #[test]
    fn more_frames_than_one_write_takes_go_joined_and_zero_copy_owners_are_released() {
        let (mut r, addr) = bound_router();
        let mut d = StreamSocket::connect(&addr, b"", None, 10, None);
        let frames: Vec<Frame<'_>> = (0..40u8)
            .map(|i| {
                if i % 2 == 0 {
                    Frame::ZeroCopy(Box::new(vec![i]))
                } else {
                    Frame::Copy(std::slice::from_ref(&ASCENDING[i as usize]))
                }
            })
            .collect();
        d.send(None, frames, Some(Duration::from_secs(1))).unwrap();
        let m = recv(&mut r, 2000).unwrap();
        assert_eq!(m.bytes, (0..40u8).collect::<Vec<_>>());
        // No hello's identity: the peer is named by its id, and replies reach it.
        assert!(m.peer.starts_with(b"#"), "{:?}", m.peer);
        r.send(Some(&m.peer), [Frame::Copy(b"ok")], None).unwrap();
        assert_eq!(recv(&mut d, 2000).unwrap().bytes, b"ok");
    }

    #[test]
    fn corked_messages_wait_for_the_senders_next_receive_and_go_out_together() {
        let (mut r, addr) = bound_router();
        let mut d = StreamSocket::connect(&addr, b"dcm-1", None, 10, None);
        d.send(None, [Frame::Copy(b"hello")], None).unwrap();
        assert_eq!(recv(&mut r, 2000).unwrap().bytes, b"hello");
        r.set_cork(true);
        for i in 0..100u8 {
            r.send(Some(b"dcm-1"), [Frame::Copy(&[i; 100])], None)
                .unwrap();
        }
        // Nothing was handed to the kernel: the dealer sees nothing.
        assert!(recv(&mut d, 100).is_none());
        // The router's next receive (here a poll that finds nothing) flushes them, in order.
        assert!(!r.take(Some(Duration::ZERO)).unwrap());
        for i in 0..100u8 {
            assert_eq!(recv(&mut d, 2000).expect("corked message").bytes, [i; 100]);
        }
        // A large message goes at once, after what waited.
        r.send(Some(b"dcm-1"), [Frame::Copy(b"small")], None)
            .unwrap();
        let big = vec![7u8; 64 * 1024];
        r.send(Some(b"dcm-1"), [Frame::Copy(&big)], None).unwrap();
        assert_eq!(recv(&mut d, 2000).unwrap().bytes, b"small");
        assert_eq!(recv(&mut d, 2000).unwrap().bytes, big);
        // Dropped with messages corked: they are flushed.
        r.send(Some(b"dcm-1"), [Frame::Copy(b"last")], None)
            .unwrap();
        drop(r);
        assert_eq!(recv(&mut d, 2000).unwrap().bytes, b"last");
    }

    /// The replies to a batch of requests read together wait until the batch is read: a
    /// receive that takes a message already read from the kernel does not flush; the first
    /// that finds none does, and the replies go out together.
    #[test]
    fn replies_to_a_batch_of_requests_wait_until_the_batch_is_read() {
        let (mut r, addr) = bound_router();
        let mut d = StreamSocket::connect(&addr, b"dcm-1", None, 10, None);
        d.send(None, [Frame::Copy(b"hello")], None).unwrap();
        assert_eq!(recv(&mut r, 2000).unwrap().bytes, b"hello");
        r.set_cork(true);
        d.set_cork(true);
        for i in 0..3u8 {
            d.send(None, [Frame::Copy(&[i; 10])], None).unwrap();
        }
        // The three requests in one write, all in the router's kernel buffer before it reads.
        d.flush();
        std::thread::sleep(Duration::from_millis(50));
        for i in 0..3u8 {
            assert_eq!(recv(&mut r, 2000).expect("a request").bytes, [i; 10]);
            r.send(Some(b"dcm-1"), [Frame::Copy(&[100 + i; 10])], None)
                .unwrap();
            if i < 2 {
                assert!(
                    recv(&mut d, 100).is_none(),
                    "a reply out before request {} was read",
                    i + 1
                );
            }
        }
        // The router's next receive finds nothing read: the three replies go, in order.
        assert!(!r.take(Some(Duration::ZERO)).unwrap());
        for i in 0..3u8 {
            assert_eq!(recv(&mut d, 2000).expect("a reply").bytes, [100 + i; 10]);
        }
    }

    #[test]
    fn a_hello_with_an_identity_longer_than_a_name_leaves_the_peer_named_by_its_id() {
        let (mut r, addr) = bound_router();
        let long = vec![b'x'; 10_000];
        let mut d = StreamSocket::connect(&addr, &long, None, 10, None);
        d.send(None, [Frame::Copy(b"m")], None).unwrap();
        let m = recv(&mut r, 2000).unwrap();
        assert_eq!(m.bytes, b"m");
        assert!(
            m.peer.starts_with(b"#") && m.peer.len() < 32,
            "{:?}",
            m.peer
        );
    }

    const ASCENDING: [u8; 40] = {
        let mut a = [0u8; 40];
        let mut i = 0;
        while i < 40 {
            a[i] = i as u8;
            i += 1;
        }
        a
    };
}
