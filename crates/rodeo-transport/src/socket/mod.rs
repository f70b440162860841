//! ZeroMQ sockets as the dataflow protocol uses them.
//!
//! One [`Transport`] per process owns the ZeroMQ context (and so its I/O threads); every
//! application of an embedded partition shares it, which is what makes `inproc://` endpoints
//! reachable between them.
//!
//! # Frames and zero copy
//!
//! A protocol message is one ZeroMQ message of one or more frames; the receiver joins the frames.
//! [`Socket::send`] takes [`Frame`]s: [`Frame::Copy`] copies bytes into the message (headers and
//! small fields), [`Frame::ZeroCopy`] hands an owner of bytes to ZeroMQ, which sends the bytes where
//! they lie and drops the owner once the bytes are on the wire (for tcp/ipc) or once the receiver
//! released them (inproc). A readout node passes page handles this way: the page goes back to its
//! pool when ZeroMQ is done with it, with no copy on the way.
//!
//! # Routing
//!
//! A ROUTER socket prefixes every received message with the sending peer's routing id and needs
//! it as the first frame of every reply. [`Received::peer`] holds it; [`Socket::send_to`] puts it
//! back. No empty delimiter frame is used (the protocol's rule), so DEALER peers see exactly the
//! protocol frames.
//!
//! # CURVE
//!
//! A transport made with [`Transport::with_curve`] authenticates every `tcp://` socket with
//! the partition's keys ([`crate::curve`]): a bind makes a CURVE server (refusing peers without
//! the partition's client key, counting and logging them), a connect a CURVE client. Other
//! schemes are unchanged.
//!
//! # Timeouts
//!
//! Nothing here waits forever: [`Socket::recv`] takes a timeout and returns `Ok(false)` when it
//! expires, so every receive loop can check its stop flag. [`Socket::try_send`] and
//! [`Socket::try_send_to`] never wait: a server's thread sends with them, so a peer that does
//! not read its replies costs that peer its replies (the caller's policy) and never stalls the
//! thread that serves everybody else.

use std::ffi::c_void;

use std::cell::{Cell, OnceCell, RefCell};
use std::sync::Arc;

use crate::curve::{Guard, PartitionKeys};
use crate::endpoint::{Endpoint, Scheme};
use crate::shm::ShmSocket;
use crate::stream::{wait_of, StreamSocket, TlsContext, TlsKeys};

pub use crate::frame::{oversized_count, Frame, FrameOwner, Received, TransportError};

/// The socket types the protocol uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketKind {
    /// Binds a request endpoint; replies go to the peer that asked.
    Router,
    /// Connects to a ROUTER.
    Dealer,
    /// Publishes clears.
    Pub,
    /// Subscribes to clears.
    Sub,
}

/// The per-process ZeroMQ context.
#[derive(Clone)]
pub struct Transport {
    ctx: zmq::Context,
    /// With CURVE: the partition's keys and the authenticator thread.
    curve: Option<Arc<Guard>>,
    /// With the partition's TLS keys: every `stream://` connection is TLS.
    tls: Option<TlsContext>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Transport")
    }
}

impl Transport {
    /// A context with `io_threads` ZeroMQ I/O threads (1 is enough below a few GB/s).
    pub fn new(io_threads: u32) -> Result<Transport, TransportError> {
        let ctx = zmq::Context::new();
        let n = i32::try_from(io_threads.max(1)).unwrap_or(i32::MAX);
        ctx.set_io_threads(n)
            .map_err(|source| TransportError::Setup {
                op: "set io threads",
                source,
            })?;
        Ok(Transport {
            ctx,
            curve: None,
            tls: None,
        })
    }

    /// Like [`Transport::new`], with every `tcp://` socket authenticated by CURVE with the
    /// partition's `keys` ([`crate::curve`]) and, when the keys have TLS keys, every
    /// `stream://` connection TLS 1.3 ([`crate::stream::tls`]). Starts the authenticator
    /// thread; fails when this build's libzmq has no CURVE.
    pub fn with_curve(io_threads: u32, keys: PartitionKeys) -> Result<Transport, TransportError> {
        let mut t = Transport::new(io_threads)?;
        t.tls = keys.tls.as_ref().map(TlsKeys::context).transpose()?;
        t.curve = Some(Arc::new(Guard::start(&t.ctx, keys)?));
        Ok(t)
    }

    /// Whether this transport's `stream://` connections are TLS.
    pub fn stream_encrypted(&self) -> bool {
        self.tls.is_some()
    }

    /// The partition's keys, when this transport authenticates tcp with CURVE.
    pub fn curve_keys(&self) -> Option<&PartitionKeys> {
        self.curve.as_deref().map(Guard::keys)
    }

    /// Handshakes this transport's tcp servers refused (0 without CURVE); the process's
    /// total, over every transport, is [`crate::curve::refused_count`].
    pub fn auth_refused(&self) -> u64 {
        self.curve.as_deref().map_or(0, Guard::refused)
    }

    /// A new socket of `kind`. Sockets are linger-free (a stopped application does not hang on
    /// unsent messages) and a ROUTER reports unroutable replies instead of dropping them silently.
    pub fn socket(&self, kind: SocketKind) -> Result<Socket, TransportError> {
        let zkind = match kind {
            SocketKind::Router => zmq::ROUTER,
            SocketKind::Dealer => zmq::DEALER,
            SocketKind::Pub => zmq::PUB,
            SocketKind::Sub => zmq::SUB,
        };
        let inner = self
            .ctx
            .socket(zkind)
            .map_err(|source| TransportError::Setup {
                op: "create socket",
                source,
            })?;
        let setup =
            |r: zmq::Result<()>, op| r.map_err(|source| TransportError::Setup { op, source });
        setup(inner.set_linger(0), "set linger")?;
        if kind == SocketKind::Router {
            setup(inner.set_router_mandatory(true), "set router mandatory")?;
        }
        if kind == SocketKind::Sub {
            setup(inner.set_subscribe(b""), "subscribe")?;
        }
        Ok(Socket {
            inner,
            curve: self.curve.clone(),
            tls: self.tls.clone(),
            curve_set: Cell::new(false),
            watched: Cell::new(false),
            kind,
            part: zmq::Message::new(),
            shm: OnceCell::new(),
            stream: RefCell::new(None),
            high_water_mark: Cell::new(1000),
            batching: Cell::new(false),
            identity: RefCell::new(Vec::new()),
            send_timeout_ms: Cell::new(-1),
            max_message_bytes: Cell::new(None),
            stalled: false,
            oversized_zmq: 0,
            joiner: Joiner::default(),
        })
    }
}

/// A socket with the protocol's framing: ZeroMQ, shared memory once bound or connected to a
/// `shm://` endpoint ([`crate::shm`]), or the stream transport once bound or connected to a
/// `stream://` endpoint ([`crate::stream`]); the methods are the same for all three.
pub struct Socket {
    inner: zmq::Socket,
    /// The transport's CURVE keys and authenticator (tcp endpoints only).
    curve: Option<Arc<Guard>>,
    /// The transport's TLS configurations (stream endpoints only).
    tls: Option<TlsContext>,
    /// The CURVE options are set (the next non-tcp bind or connect clears them).
    curve_set: Cell<bool>,
    /// The authenticator reads this socket's monitor (set at its first tcp bind).
    watched: Cell<bool>,
    kind: SocketKind,
    part: zmq::Message,
    /// Set by `bind`/`connect` of an `shm://` endpoint; every operation then goes there.
    shm: OnceCell<ShmSocket>,
    /// Set by `bind`/`connect` of a `stream://` endpoint; every operation then goes there
    /// (in a cell: [`poll_readable`] takes a message in passing through a shared borrow).
    stream: RefCell<Option<StreamSocket>>,
    /// The high-water mark (a stream DEALER's queue while it has no connection).
    high_water_mark: Cell<u32>,
    /// Small messages may wait for the next receive ([`Socket::set_batching`]).
    batching: Cell<bool>,
    identity: RefCell<Vec<u8>>,
    send_timeout_ms: Cell<i32>,
    max_message_bytes: Cell<Option<usize>>,
    /// A [`Socket::send`] timed out and no send has got through since: the next sends do not
    /// wait (a vanished or stuck peer costs one send timeout, not one per message).
    stalled: bool,
    /// ZeroMQ messages dropped on receipt as larger than `max_message_bytes` in total.
    oversized_zmq: u64,
    /// Joins the pieces of [`Socket::send_joined`] and [`Socket::try_send_to_joined`].
    joiner: Joiner,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket").field("kind", &self.kind).finish()
    }
}

/// Whether an `ipc://` endpoint's path may be bound. ZeroMQ unlinks the path before it binds:
/// `rodeo ros --listen ipc://FILE` replaced a regular file with its socket, and a second node
/// on a live node's path took its clients over in silence. Nothing there, or a socket nobody
/// listens on (left by a process that ended), may be bound; anything else is refused.
fn check_ipc_path(endpoint: &Endpoint) -> Result<(), TransportError> {
    check_ipc_bind(endpoint.address()).map_err(|detail| TransportError::IpcPath {
        endpoint: endpoint.to_string(),
        detail,
    })
}

/// Whether the path `address` of an `ipc://` endpoint may be bound by a ZeroMQ socket, which
/// unlinks what is there first: nothing, or a socket nobody listens on (left by a process that
/// ended); ZeroMQ's own names (`*`, `@...`) too. Otherwise why not. For sockets bound outside
/// [`Socket`] (the monitoring forwarder's, which deleted a file at its path and took a live
/// service's socket over before a QA pass).
pub fn check_ipc_bind(address: &str) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt as _;
    // ZeroMQ's own names (`*`: a new temporary path; `@`: the abstract namespace).
    if address == "*" || address.starts_with('@') {
        return Ok(());
    }
    let path = std::path::Path::new(address);
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(
            "something that is not a socket is at this path, and binding would replace it: \
             remove it or choose another path"
                .into(),
        );
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(
            "a process listens on this socket (another node?): stop it or choose another path"
                .into(),
        ),
        Err(_) => Ok(()),
    }
}

impl Socket {
    /// Binds `endpoint`; returns the endpoint actually bound (tcp port 0 or `*` resolved).
    pub fn bind(&self, endpoint: &Endpoint) -> Result<String, TransportError> {
        if endpoint.scheme() == Scheme::Shm {
            let s = ShmSocket::bind(
                endpoint.address(),
                self.send_timeout_ms.get(),
                self.max_message_bytes.get(),
            )?;
            self.set_shm(s, endpoint)?;
            return Ok(endpoint.to_string());
        }
        if endpoint.scheme() == Scheme::Stream {
            let (s, bound) = StreamSocket::bind(
                endpoint.address(),
                self.max_message_bytes.get(),
                self.tls.clone(),
            )?;
            self.set_stream(s, endpoint)?;
            return Ok(bound);
        }
        if endpoint.scheme() == Scheme::Ipc {
            check_ipc_path(endpoint)?;
        }
        self.prepare_curve(endpoint, true)?;
        self.inner
            .bind(endpoint.as_str())
            .map_err(|source| TransportError::Bind {
                endpoint: endpoint.to_string(),
                source,
            })?;
        Ok(self
            .inner
            .get_last_endpoint()
            .ok()
            .and_then(Result::ok)
            .unwrap_or_else(|| endpoint.to_string()))
    }

    /// Connects to `endpoint` (the peer may bind later; ZeroMQ reconnects by itself).
    pub fn connect(&self, endpoint: &Endpoint) -> Result<(), TransportError> {
        if endpoint.scheme() == Scheme::Shm {
            let s = ShmSocket::connect(
                endpoint.address(),
                &self.identity.borrow(),
                self.send_timeout_ms.get(),
                self.max_message_bytes.get(),
            )?;
            return self.set_shm(s, endpoint);
        }
        if endpoint.scheme() == Scheme::Stream {
            let s = StreamSocket::connect(
                endpoint.address(),
                &self.identity.borrow(),
                self.max_message_bytes.get(),
                self.high_water_mark.get() as usize,
                self.tls.clone(),
            );
            return self.set_stream(s, endpoint);
        }
        self.prepare_curve(endpoint, false)?;
        self.inner
            .connect(endpoint.as_str())
            .map_err(|source| TransportError::Connect {
                endpoint: endpoint.to_string(),
                source,
            })
    }

    /// Before a ZeroMQ bind (`server`) or connect of `endpoint`: with CURVE keys, a tcp
    /// endpoint gets the CURVE options (ZeroMQ copies them into the binding or connection);
    /// any other endpoint gets them cleared (the mechanism back to NULL).
    fn prepare_curve(&self, endpoint: &Endpoint, server: bool) -> Result<(), TransportError> {
        let Some(guard) = &self.curve else {
            return Ok(());
        };
        let setup =
            |r: zmq::Result<()>, op| r.map_err(|source| TransportError::Setup { op, source });
        if endpoint.scheme() != Scheme::Tcp {
            // The ZAP domain may stay: a NULL connection asks the authenticator, which lets
            // NULL in (only this context's non-tcp endpoints speak it).
            if self.curve_set.get() {
                setup(self.inner.set_curve_server(false), "clear CURVE")?;
                self.curve_set.set(false);
            }
            return Ok(());
        }
        let keys = guard.keys();
        if server {
            setup(self.inner.set_curve_server(true), "set CURVE server")?;
            setup(
                self.inner.set_curve_secretkey(&keys.server.secret),
                "set the CURVE server secret key",
            )?;
            setup(
                self.inner.set_zap_domain(crate::curve::ZAP_DOMAIN),
                "set the ZAP domain",
            )?;
            if !self.watched.get() {
                guard.watch(&self.inner, endpoint.as_str())?;
                self.watched.set(true);
            }
        } else {
            setup(
                self.inner.set_curve_serverkey(&keys.server.public),
                "set the CURVE server key",
            )?;
            setup(
                self.inner.set_curve_publickey(&keys.client.public),
                "set the CURVE client public key",
            )?;
            setup(
                self.inner.set_curve_secretkey(&keys.client.secret),
                "set the CURVE client secret key",
            )?;
        }
        self.curve_set.set(true);
        Ok(())
    }

    fn set_shm(&self, s: ShmSocket, endpoint: &Endpoint) -> Result<(), TransportError> {
        if !matches!(self.kind, SocketKind::Router | SocketKind::Dealer) {
            return Err(TransportError::Shm {
                op: "bind/connect",
                name: endpoint.to_string(),
                detail: format!("{:?} sockets have no shared-memory transport", self.kind),
            });
        }
        s.set_batching(self.batching.get());
        self.shm.set(s).map_err(|_| TransportError::Shm {
            op: "bind/connect",
            name: endpoint.to_string(),
            detail: "a shared-memory socket binds or connects one endpoint".into(),
        })
    }

    fn set_stream(&self, s: StreamSocket, endpoint: &Endpoint) -> Result<(), TransportError> {
        if !matches!(self.kind, SocketKind::Router | SocketKind::Dealer) {
            return Err(TransportError::Unsupported {
                endpoint: endpoint.to_string(),
                detail: format!(
                    "{:?} sockets have no stream transport (ROUTER and DEALER only; use tcp:// \
                     for PUB/SUB)",
                    self.kind
                ),
            });
        }
        let mut slot = self.stream.borrow_mut();
        if slot.is_some() || self.shm.get().is_some() {
            return Err(TransportError::Unsupported {
                endpoint: endpoint.to_string(),
                detail: "a stream socket binds or connects one endpoint: make one socket per \
                         endpoint"
                    .into(),
            });
        }
        let mut s = s;
        s.set_cork(self.batching.get());
        *slot = Some(s);
        Ok(())
    }

    /// The stream transport, when bound or connected to a `stream://` endpoint.
    fn stream_mut(&mut self) -> Option<&mut StreamSocket> {
        self.stream.get_mut().as_mut()
    }

    fn consume_shm_wake(&self) -> Result<bool, TransportError> {
        // The inbox's notification is consumed through a shared borrow: iceoryx2's listener
        // takes `&self`. The socket is not shared between threads (`!Sync`).
        match self.shm.get() {
            Some(s) => s.consume_wake(),
            None => Ok(true),
        }
    }

    /// True once the socket is bound or connected to an `shm://` endpoint.
    pub fn is_shm(&self) -> bool {
        self.shm.get().is_some()
    }

    /// Lets small messages wait and go out together (the stream transport and shared memory;
    /// ZeroMQ batches on its own and ignores it): a message sent on this socket (stream: of at
    /// most 16 KiB; shared memory: of at most [`crate::shm::BATCH_MESSAGE_BYTES`], in batches
    /// of up to [`crate::shm::BATCH_BYTES`]) waits until this socket's next receive (on shared
    /// memory: one that is not the next message of a batch being read) or
    /// [`poll_readable`], the next larger message, [`Socket::flush`], or the socket's drop.
    /// Only for an owner whose loop receives or polls this socket on every turn (or flushes):
    /// a message could otherwise wait indefinitely. Set it before or after `bind`/`connect`.
    pub fn set_batching(&self, on: bool) {
        self.batching.set(on);
        if let Some(s) = self.stream.borrow_mut().as_mut() {
            s.set_cork(on);
        }
        if let Some(s) = self.shm.get() {
            s.set_batching(on);
        }
    }

    /// Hands every message that waits ([`Socket::set_batching`]) to the kernel or, on shared
    /// memory, to the peers' inboxes, as much as they take without waiting.
    pub fn flush(&mut self) {
        if let Some(s) = self.stream_mut() {
            s.flush();
        }
        if let Some(s) = self.shm.get() {
            s.flush(false);
        }
    }

    /// As [`Socket::flush`], but on shared memory waits for room in the peers' inboxes up to
    /// the send timeout, and fails ([`TransportError::is_would_block`]) when a batch is still
    /// waiting then. For a sender that is about to stop receiving or polling (its last
    /// message).
    pub fn flush_wait(&mut self) -> Result<(), TransportError> {
        self.flush();
        match self.shm.get() {
            Some(s) => {
                s.flush(true);
                if s.has_pending() {
                    return Err(TransportError::would_block());
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// True once the socket is bound or connected to a `stream://` endpoint.
    pub fn is_stream(&self) -> bool {
        self.stream.borrow().is_some()
    }

    /// Messages this socket dropped on receipt because they were larger than
    /// [`Socket::set_max_message_size`] (ZeroMQ: in total over several frames; a single frame
    /// above the limit makes libzmq close the peer's connection instead, uncounted) or, on
    /// shared memory, malformed; on the stream transport, too long, malformed or cut short
    /// (each of those closed its connection).
    pub fn dropped_count(&self) -> u64 {
        self.oversized_zmq
            + self.shm.get().map_or(0, |s| s.oversized)
            + self
                .stream
                .borrow()
                .as_ref()
                .map_or(0, StreamSocket::dropped)
    }

    /// Sets the send and receive high-water marks (messages queued per peer before back-pressure).
    pub fn set_high_water_marks(&self, messages: u32) -> Result<(), TransportError> {
        self.high_water_mark.set(messages);
        if let Some(s) = self.stream.borrow_mut().as_mut() {
            s.set_queue_max(messages as usize);
        }
        let n = i32::try_from(messages).unwrap_or(i32::MAX);
        self.inner
            .set_sndhwm(n)
            .map_err(|source| TransportError::Setup {
                op: "set sndhwm",
                source,
            })?;
        self.inner
            .set_rcvhwm(n)
            .map_err(|source| TransportError::Setup {
                op: "set rcvhwm",
                source,
            })
    }

    /// Bounds how long a send may block (high-water mark reached, or no peer connected yet) to
    /// `ms` milliseconds; a send that would wait longer fails with `EAGAIN`. -1: forever.
    pub fn set_send_timeout(&self, ms: i32) -> Result<(), TransportError> {
        self.send_timeout_ms.set(ms);
        self.inner
            .set_sndtimeo(ms)
            .map_err(|source| TransportError::Setup {
                op: "set send timeout",
                source,
            })
    }

    /// Refuses any incoming message larger than `bytes`: a ZeroMQ frame above it before it is
    /// buffered (libzmq closes that peer's connection), a message of several frames that
    /// passes it in total when it is received (dropped, counted: [`Socket::dropped_count`],
    /// [`oversized_count`]), a shared-memory message when it is taken from the inbox (dropped,
    /// counted). Set it before `bind`/`connect` (ZeroMQ applies it to new connections, the
    /// shared-memory inbox takes it when it is opened).
    pub fn set_max_message_size(&self, bytes: i64) -> Result<(), TransportError> {
        self.max_message_bytes
            .set(usize::try_from(bytes).ok().filter(|_| bytes >= 0));
        self.inner
            .set_maxmsgsize(bytes)
            .map_err(|source| TransportError::Setup {
                op: "set maxmsgsize",
                source,
            })
    }

    /// Sets the routing id this (DEALER) socket presents to a ROUTER.
    pub fn set_identity(&self, id: &[u8]) -> Result<(), TransportError> {
        *self.identity.borrow_mut() = id.to_vec();
        self.inner
            .set_identity(id)
            .map_err(|source| TransportError::Setup {
                op: "set identity",
                source,
            })
    }

    /// Sends one message made of `frames` (blocking while the high-water mark is reached, up to
    /// the send timeout if one is set). After a send timed out, the following sends fail at once
    /// while the peer's queue stays full ([`Socket::try_send`]); the first that gets through
    /// makes sends wait again. So a peer that vanished or stopped reading costs its sender one
    /// send timeout, not one per message (a DCM with a dead readout node and a queue of events
    /// to ask for would otherwise spend seconds per event on its way down).
    pub fn send<'a>(
        &mut self,
        frames: impl IntoIterator<Item = Frame<'a>>,
    ) -> Result<(), TransportError> {
        let wait = !self.stalled;
        let timeout = wait.then(|| wait_of(i64::from(self.send_timeout_ms.get())));
        let sent = if let Some(s) = self.shm.get_mut() {
            s.send(None, frames, wait)
        } else if let Some(s) = self.stream_mut() {
            s.send(None, frames, timeout)
        } else {
            self.send_frames(frames, if wait { 0 } else { zmq::DONTWAIT })
        };
        self.after_blocking_send(sent)
    }

    /// Sends one message (blocking as [`Socket::send`] does, with its stalled state) with
    /// `pieces` joined into one frame: their bytes are copied once, straight into the message,
    /// so a receiver that takes one frame in place ([`Socket::try_recv_in_place`]) reads them
    /// without a second copy (several frames would be joined there, a copy of the whole
    /// message). A DCM's built event goes to its logger this way, in a buffer the socket reuses
    /// once the logger has released it (`joined`: no fresh 100 KB allocation, and no page
    /// faults, per event). On shared memory and streams
    /// the pieces go as [`Socket::send`]'s frames do (copied into the sample, or written where
    /// they lie).
    pub fn send_joined<'a, I>(&mut self, pieces: I) -> Result<(), TransportError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        let pieces = pieces.into_iter();
        if self.shm.get_mut().is_some() || self.stream_mut().is_some() {
            return self.send(pieces.map(Frame::Copy));
        }
        let flags = if self.stalled { zmq::DONTWAIT } else { 0 };
        let sent = self.send_joined_frame(pieces, flags);
        self.after_blocking_send(sent)
    }

    /// A blocking send's outcome kept as the stalled state (see [`Socket::send`]): a timeout
    /// makes the following blocking sends fail at once, the first that gets through clears it.
    fn after_blocking_send(
        &mut self,
        sent: Result<(), TransportError>,
    ) -> Result<(), TransportError> {
        match &sent {
            Ok(()) => self.stalled = false,
            Err(e) if e.is_would_block() => self.stalled = true,
            Err(_) => {}
        }
        sent
    }

    /// Whether the last blocking send timed out and none got through since (see
    /// [`Socket::send`]).
    pub fn is_stalled(&self) -> bool {
        self.stalled
    }

    /// Sends one message to the peer with routing id `peer` (ROUTER), blocking like
    /// [`Socket::send`].
    pub fn send_to<'a>(
        &mut self,
        peer: &[u8],
        frames: impl IntoIterator<Item = Frame<'a>>,
    ) -> Result<(), TransportError> {
        if let Some(s) = self.shm.get_mut() {
            return s.send(Some(peer), frames, true);
        }
        let timeout = wait_of(i64::from(self.send_timeout_ms.get()));
        if let Some(s) = self.stream_mut() {
            return s.send(Some(peer), frames, Some(timeout));
        }
        self.send_frame(Frame::Copy(peer), zmq::SNDMORE)?;
        self.send_frames(frames, 0)
    }

    /// Sends one message made of `frames` without ever waiting: when the peer's queue is full
    /// (high-water mark) or, for a DEALER, no peer is connected, it fails at once with an error
    /// for which [`TransportError::is_would_block`] is true, and nothing was queued. The owners
    /// of zero-copy frames not sent are dropped before it returns.
    pub fn try_send<'a>(
        &mut self,
        frames: impl IntoIterator<Item = Frame<'a>>,
    ) -> Result<(), TransportError> {
        if let Some(s) = self.shm.get_mut() {
            return s.send(None, frames, false);
        }
        if let Some(s) = self.stream_mut() {
            return s.send(None, frames, None);
        }
        self.send_frames(frames, zmq::DONTWAIT)
    }

    /// Sends one message to the peer with routing id `peer` (ROUTER) without ever waiting.
    /// A full peer queue fails at once ([`TransportError::is_would_block`]); so does an unknown
    /// or departed peer ([`TransportError::is_unroutable`], the ROUTER being mandatory). In
    /// either case nothing was queued and the frames' owners are dropped before it returns.
    /// Once the routing id is accepted the rest of the message cannot block: libzmq checks the
    /// high-water mark per message, on its first frame.
    pub fn try_send_to<'a>(
        &mut self,
        peer: &[u8],
        frames: impl IntoIterator<Item = Frame<'a>>,
    ) -> Result<(), TransportError> {
        if let Some(s) = self.shm.get_mut() {
            return s.send(Some(peer), frames, false);
        }
        if let Some(s) = self.stream_mut() {
            return s.send(Some(peer), frames, None);
        }
        self.send_frame(Frame::Copy(peer), zmq::SNDMORE | zmq::DONTWAIT)?;
        self.send_frames(frames, zmq::DONTWAIT)
    }

    /// Sends one message to `peer` (ROUTER) without ever waiting, as [`Socket::try_send_to`]
    /// does, with `pieces` joined into one frame: their bytes are copied once, straight into
    /// the message. A small message made of several pieces (a readout node's reply of a few
    /// fragments) costs less this way than as zero-copy frames: ZeroMQ allocates for each of
    /// those (its content record, and here the owner's box), and the receiver takes one frame
    /// instead of one per piece. On shared memory the pieces are copied into the loaned sample,
    /// as every frame is.
    pub fn try_send_to_joined<'a, I>(
        &mut self,
        peer: &[u8],
        pieces: I,
    ) -> Result<(), TransportError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        let pieces = pieces.into_iter();
        if let Some(s) = self.shm.get_mut() {
            return s.send(Some(peer), pieces.map(Frame::Copy), false);
        }
        if let Some(s) = self.stream_mut() {
            // The pieces go out where they lie, in one vectored write.
            return s.send(Some(peer), pieces.map(Frame::Copy), None);
        }
        self.send_frame(Frame::Copy(peer), zmq::SNDMORE | zmq::DONTWAIT)?;
        self.send_joined_frame(pieces, zmq::DONTWAIT)
    }

    /// `pieces` joined into one ZeroMQ frame ([`joined::Joiner`]: a large one in a reused
    /// buffer lent without a copy) and sent with `flags`.
    fn send_joined_frame<'a>(
        &mut self,
        pieces: impl Iterator<Item = &'a [u8]> + Clone,
        flags: i32,
    ) -> Result<(), TransportError> {
        match self.joiner.join(pieces) {
            Joined::Fresh(m) => m
                .send(&mut self.inner, flags)
                .map_err(|source| TransportError::Send { source }),
            Joined::Lent(owner) => send_zero_copy(&mut self.inner, owner, flags),
        }
    }

    fn send_frames<'a>(
        &mut self,
        frames: impl IntoIterator<Item = Frame<'a>>,
        flags: i32,
    ) -> Result<(), TransportError> {
        let mut frames = frames.into_iter().peekable();
        while let Some(frame) = frames.next() {
            let more = if frames.peek().is_some() {
                zmq::SNDMORE
            } else {
                0
            };
            self.send_frame(frame, flags | more)?;
        }
        Ok(())
    }

    fn send_frame(&mut self, frame: Frame<'_>, flags: i32) -> Result<(), TransportError> {
        match frame {
            Frame::Copy(bytes) => self
                .inner
                .send(bytes, flags)
                .map_err(|source| TransportError::Send { source }),
            Frame::ZeroCopy(owner) => send_zero_copy(&mut self.inner, owner, flags),
        }
    }
}

/// `wait` as the millisecond timeout the receives and [`poll_readable`] take: rounded up (0.9
/// ms left is 1 ms, not a poll that returns at once and a loop that never sleeps), saturating.
pub fn timeout_ms(wait: std::time::Duration) -> i64 {
    wait.as_micros().div_ceil(1000).min(i64::MAX as u128) as i64
}

/// Waits up to `timeout_ms` (-1: forever, 0: not at all) until at least one of `sockets` has a
/// message to receive; returns a bit per socket (bit `i` set: `sockets[i]` is readable), 0 on
/// timeout. An application thread that owns several sockets (a DCM: supervisor, readout nodes,
/// loggers) waits on all of them with one call. At most 64 sockets.
pub fn poll_readable(sockets: &[&Socket], timeout_ms: i64) -> Result<u64, TransportError> {
    let sockets = &sockets[..sockets.len().min(64)];
    // A zero timeout reads no clock (the busy loops poll with it on every turn).
    let deadline = (timeout_ms > 0)
        .then(|| std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms as u64));
    let mut stream_fds: Vec<(std::os::fd::RawFd, libc::c_short)> = Vec::new();
    loop {
        // Shared-memory batches waiting to go out go now ([`Socket::set_batching`]); one an
        // inbox refused (full) is tried again within a millisecond for a while.
        let mut unsent = false;
        for s in sockets {
            if let Some(shm) = s.shm.get() {
                shm.flush(false);
                unsent |= shm.retry_soon();
            }
        }
        // Shared-memory sockets with a queued message, stream sockets with a whole message
        // buffered: ready without waiting.
        let mut queued = 0u64;
        for (i, s) in sockets.iter().enumerate() {
            let ready = match s.shm.get() {
                Some(shm) => shm.has_message(),
                None => take_stream(s, None)?,
            };
            if ready {
                queued |= 1 << i;
            }
        }
        if queued != 0 {
            return Ok(queued);
        }
        let wait = match deadline {
            Some(d) => self::timeout_ms(d.saturating_duration_since(std::time::Instant::now())),
            None if timeout_ms == 0 => 0,
            None => -1,
        };
        let wait = if unsent && !(0..=1).contains(&wait) {
            1
        } else {
            wait
        };
        // One item per ZeroMQ or shared-memory socket; as many as a stream socket has
        // descriptors (a router's listener and peers). `owner[k]`: whose item `k` is.
        let mut items: Vec<zmq::PollItem<'_>> = Vec::with_capacity(sockets.len());
        let mut owner: Vec<usize> = Vec::with_capacity(sockets.len());
        for (i, s) in sockets.iter().enumerate() {
            if let Some(st) = s.stream.borrow().as_ref() {
                stream_fds.clear();
                st.poll_fds(&mut stream_fds);
                for &(fd, ev) in &stream_fds {
                    items.push(zmq::PollItem::from_fd(
                        fd,
                        zmq::PollEvents::from_bits_truncate(ev),
                    ));
                    owner.push(i);
                }
                continue;
            }
            items.push(match s.shm.get() {
                Some(shm) => zmq::PollItem::from_fd(shm.wake_fd(), zmq::POLLIN),
                None => s.inner.as_poll_item(zmq::POLLIN),
            });
            owner.push(i);
        }
        let n = match zmq::poll(&mut items, wait) {
            Ok(n) => n,
            // A signal interrupted the wait (SIGCONT after a stop, a profiler): nothing is
            // ready yet; the caller polls again.
            Err(zmq::Error::EINTR) => return Ok(0),
            Err(source) => return Err(TransportError::Recv { source }),
        };
        if n == 0 {
            // Only the batches' millisecond passed: try them again until the caller's wait ends.
            let more =
                unsent && timeout_ms != 0 && deadline.is_none_or(|d| std::time::Instant::now() < d);
            if more {
                continue;
            }
            return Ok(0);
        }
        let mut woken = 0u64;
        for (k, it) in items.iter().enumerate() {
            if it.get_revents().is_empty() {
                continue;
            }
            woken |= 1 << owner[k];
        }
        drop(items);
        let mut mask = 0u64;
        for (i, s) in sockets.iter().enumerate() {
            if woken & (1 << i) == 0 {
                continue;
            }
            let ready = if s.shm.get().is_some() {
                // A notification: consume it; ready only if a message came with it.
                s.consume_shm_wake()?
            } else if s.stream.borrow().is_some() {
                // Bytes, a peer or room came: ready only once a whole message is here.
                take_stream(s, Some(std::time::Duration::ZERO))?
            } else {
                true
            };
            if ready {
                mask |= 1 << i;
            }
        }
        if mask != 0 || wait == 0 {
            return Ok(mask);
        }
    }
}

/// For a stream socket: whether a whole message is here after a flush: one already read
/// (`None`: no other system call) or one taken without waiting (`Some(ZERO)`: accepting peers,
/// reading and sending on the way). `false` for other sockets.
fn take_stream(s: &Socket, wait: Option<std::time::Duration>) -> Result<bool, TransportError> {
    match s.stream.borrow_mut().as_mut() {
        Some(st) => st.take(wait),
        None => Ok(false),
    }
}

/// Frees a zero-copy frame's owner once ZeroMQ no longer needs its bytes.
///
/// # Safety
///
/// `hint` must be the pointer `send_zero_copy` obtained from `Box::into_raw` of a
/// `Box<Box<dyn FrameOwner>>`, and this must be its only call (ZeroMQ calls the free function once).
unsafe extern "C" fn free_owner(_data: *mut c_void, hint: *mut c_void) {
    // SAFETY: by this function's contract, `hint` came from Box::into_raw of exactly this type and
    // is freed only here, once.
    drop(unsafe { Box::from_raw(hint.cast::<Box<dyn FrameOwner>>()) });
}

fn send_zero_copy(
    sock: &mut zmq::Socket,
    owner: Box<dyn FrameOwner>,
    flags: i32,
) -> Result<(), TransportError> {
    let owner = Box::new(owner);
    let bytes = owner.frame_bytes();
    let (data, len) = (bytes.as_ptr().cast_mut().cast::<c_void>(), bytes.len());
    let hint = Box::into_raw(owner).cast::<c_void>();
    let mut msg = zmq_sys::zmq_msg_t::default();
    // SAFETY: `msg` is a fresh zmq_msg_t; `data`/`len` describe bytes owned by the boxed owner at
    // `hint`, which stays alive (and its bytes in place, per the FrameOwner contract) until ZeroMQ
    // calls `free_owner(data, hint)`, which it does exactly once when the message is released.
    // ZeroMQ never writes through `data` of a message it sends.
    let rc = unsafe { zmq_sys::zmq_msg_init_data(&mut msg, data, len, Some(free_owner), hint) };
    if rc != 0 {
        // SAFETY: initialisation failed, so ZeroMQ did not take the owner: free it here, once.
        unsafe { free_owner(data, hint) };
        return Err(TransportError::Send {
            source: zmq::Error::from_raw(zmq_errno()),
        });
    }
    // SAFETY: `sock.as_mut_ptr()` is the live socket owned by `sock` (borrowed mutably, so no other
    // thread uses it); `msg` was initialised above. On success ZeroMQ takes the message.
    let rc = unsafe { zmq_sys::zmq_msg_send(&mut msg, sock.as_mut_ptr(), flags) };
    if rc < 0 {
        let err = zmq::Error::from_raw(zmq_errno());
        // SAFETY: on failure the message still belongs to us; closing it releases the owner
        // through `free_owner`.
        unsafe { zmq_sys::zmq_msg_close(&mut msg) };
        return Err(TransportError::Send { source: err });
    }
    Ok(())
}

fn zmq_errno() -> i32 {
    // SAFETY: zmq_errno reads the calling thread's errno; no preconditions.
    unsafe { zmq_sys::zmq_errno() }
}

mod joined;
mod recv;
#[cfg(test)]
mod tests;

use joined::{Joined, Joiner};
