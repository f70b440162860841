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

use crate::frame::count_oversized;
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
        Ok(Transport { ctx, curve: None })
    }

    /// Like [`Transport::new`], with every `tcp://` socket authenticated by CURVE with the
    /// partition's `keys` ([`crate::curve`]). Starts the authenticator thread; fails when this
    /// build's libzmq has no CURVE.
    pub fn with_curve(io_threads: u32, keys: PartitionKeys) -> Result<Transport, TransportError> {
        let mut t = Transport::new(io_threads)?;
        t.curve = Some(Arc::new(Guard::start(&t.ctx, keys)?));
        Ok(t)
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
            curve_set: Cell::new(false),
            watched: Cell::new(false),
            kind,
            part: zmq::Message::new(),
            shm: OnceCell::new(),
            identity: RefCell::new(Vec::new()),
            send_timeout_ms: Cell::new(-1),
            max_message_bytes: Cell::new(None),
            stalled: false,
            oversized_zmq: 0,
        })
    }
}

/// A socket with the protocol's framing: ZeroMQ, or shared memory once bound or connected to a
/// `shm://` endpoint ([`crate::shm`]); the methods are the same for both.
pub struct Socket {
    inner: zmq::Socket,
    /// The transport's CURVE keys and authenticator (tcp endpoints only).
    curve: Option<Arc<Guard>>,
    /// The CURVE options are set (the next non-tcp bind or connect clears them).
    curve_set: Cell<bool>,
    /// The authenticator reads this socket's monitor (set at its first tcp bind).
    watched: Cell<bool>,
    kind: SocketKind,
    part: zmq::Message,
    /// Set by `bind`/`connect` of an `shm://` endpoint; every operation then goes there.
    shm: OnceCell<ShmSocket>,
    identity: RefCell<Vec<u8>>,
    send_timeout_ms: Cell<i32>,
    max_message_bytes: Cell<Option<usize>>,
    /// A [`Socket::send`] timed out and no send has got through since: the next sends do not
    /// wait (a vanished or stuck peer costs one send timeout, not one per message).
    stalled: bool,
    /// ZeroMQ messages dropped on receipt as larger than `max_message_bytes` in total.
    oversized_zmq: u64,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket").field("kind", &self.kind).finish()
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
        self.shm.set(s).map_err(|_| TransportError::Shm {
            op: "bind/connect",
            name: endpoint.to_string(),
            detail: "a shared-memory socket binds or connects one endpoint".into(),
        })
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

    /// Messages this socket dropped on receipt because they were larger than
    /// [`Socket::set_max_message_size`] (ZeroMQ: in total over several frames; a single frame
    /// above the limit makes libzmq close the peer's connection instead, uncounted) or, on
    /// shared memory, malformed.
    pub fn dropped_count(&self) -> u64 {
        self.oversized_zmq + self.shm.get().map_or(0, |s| s.oversized)
    }

    /// Sets the send and receive high-water marks (messages queued per peer before back-pressure).
    pub fn set_high_water_marks(&self, messages: u32) -> Result<(), TransportError> {
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
        let sent = if let Some(s) = self.shm.get_mut() {
            s.send(None, frames, wait)
        } else {
            self.send_frames(frames, if wait { 0 } else { zmq::DONTWAIT })
        };
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
        let total: usize = pieces.clone().map(<[u8]>::len).sum();
        let mut joined = zmq::Message::with_size(total);
        let mut at = 0;
        for p in pieces {
            joined[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        self.send_frame(Frame::Copy(peer), zmq::SNDMORE | zmq::DONTWAIT)?;
        self.inner
            .send(joined, zmq::DONTWAIT)
            .map_err(|source| TransportError::Send { source })
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

    /// Waits up to `timeout_ms` for a message and receives it into `msg` (reusing its buffers).
    /// Returns `Ok(false)` when the timeout expired first.
    pub fn recv(&mut self, msg: &mut Received, timeout_ms: i64) -> Result<bool, TransportError> {
        if let Some(s) = self.shm.get_mut() {
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
        self.recv_parts(msg, 0, false)
    }

    /// Receives a message into `msg` if one is queued, without waiting and without a poll
    /// system call (the busy loops' receive). Returns `Ok(false)` when none is queued.
    pub fn try_recv(&mut self, msg: &mut Received) -> Result<bool, TransportError> {
        if let Some(s) = self.shm.get_mut() {
            return s.try_recv(msg);
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

/// Waits up to `timeout_ms` (-1: forever, 0: not at all) until at least one of `sockets` has a
/// message to receive; returns a bit per socket (bit `i` set: `sockets[i]` is readable), 0 on
/// timeout. An application thread that owns several sockets (a DCM: supervisor, readout nodes,
/// loggers) waits on all of them with one call. At most 64 sockets.
pub fn poll_readable(sockets: &[&Socket], timeout_ms: i64) -> Result<u64, TransportError> {
    let sockets = &sockets[..sockets.len().min(64)];
    // A zero timeout reads no clock (the busy loops poll with it on every turn).
    let deadline = (timeout_ms > 0)
        .then(|| std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms as u64));
    loop {
        // Shared-memory sockets with a queued message: ready without a system call.
        let queued = sockets
            .iter()
            .enumerate()
            .filter(|(_, s)| s.shm.get().is_some_and(ShmSocket::has_message))
            .fold(0u64, |mask, (i, _)| mask | (1 << i));
        if queued != 0 {
            return Ok(queued);
        }
        let wait = match deadline {
            Some(d) => d
                .saturating_duration_since(std::time::Instant::now())
                .as_millis()
                .min(i64::MAX as u128) as i64,
            None if timeout_ms == 0 => 0,
            None => -1,
        };
        let mut items: Vec<zmq::PollItem<'_>> = sockets
            .iter()
            .map(|s| match s.shm.get() {
                Some(shm) => zmq::PollItem::from_fd(shm.wake_fd(), zmq::POLLIN),
                None => s.inner.as_poll_item(zmq::POLLIN),
            })
            .collect();
        let n = match zmq::poll(&mut items, wait) {
            Ok(n) => n,
            // A signal interrupted the wait (SIGCONT after a stop, a profiler): nothing is
            // ready yet; the caller polls again.
            Err(zmq::Error::EINTR) => return Ok(0),
            Err(source) => return Err(TransportError::Recv { source }),
        };
        if n == 0 {
            return Ok(0);
        }
        let mut mask = 0u64;
        for (i, it) in items.iter().enumerate() {
            if !it.is_readable() {
                continue;
            }
            let ready = match sockets[i].shm.get() {
                // A notification: consume it; ready only if a message came with it.
                Some(_) => sockets[i].consume_shm_wake()?,
                None => true,
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;

    struct Counted(Vec<u8>, Arc<AtomicU64>);
    impl FrameOwner for Counted {
        fn frame_bytes(&self) -> &[u8] {
            &self.0
        }
    }
    impl Drop for Counted {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn round_trip(endpoint: &str) {
        let t = Transport::new(1).unwrap();
        let server = t.socket(SocketKind::Router).unwrap();
        let bound = server.bind(&Endpoint::parse(endpoint).unwrap()).unwrap();
        let mut server = server;
        let mut client = t.socket(SocketKind::Dealer).unwrap();
        client.connect(&Endpoint::parse(&bound).unwrap()).unwrap();
        let dropped = Arc::new(AtomicU64::new(0));
        client
            .send([
                Frame::Copy(b"head"),
                Frame::ZeroCopy(Box::new(Counted(b"-page-".to_vec(), dropped.clone()))),
                Frame::ZeroCopy(Box::new(b"tail".to_vec())),
            ])
            .unwrap();
        let mut msg = Received::default();
        assert!(
            server.recv(&mut msg, 5000).unwrap(),
            "no message within 5 s on {bound}"
        );
        assert_eq!(msg.bytes, b"head-page-tail");
        assert_eq!(msg.frames, 3);
        assert!(!msg.peer.is_empty());
        let peer = msg.peer.clone();
        server.send_to(&peer, [Frame::Copy(b"reply")]).unwrap();
        let mut reply = Received::default();
        assert!(client.recv(&mut reply, 5000).unwrap());
        assert_eq!(reply.bytes, b"reply");
        assert!(reply.peer.is_empty());
        // The zero-copy owner is released once ZeroMQ is done with it.
        rodeo_testkit::wait_until(
            "ZeroMQ to release the zero-copy owner",
            std::time::Duration::from_secs(10),
            || dropped.load(Ordering::SeqCst) >= 1,
        );
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn inproc_round_trip_with_zero_copy() {
        round_trip("inproc://socket-test");
    }

    #[test]
    fn tcp_round_trip_with_zero_copy() {
        round_trip("tcp://127.0.0.1:*");
    }

    /// A ROUTER bound to `endpoint` and a DEALER connected to it, in one transport (returned
    /// first: it must outlive the sockets).
    fn inproc_pair(endpoint: &str) -> (Transport, Socket, Socket) {
        let t = Transport::new(1).unwrap();
        let server = t.socket(SocketKind::Router).unwrap();
        server.bind(&Endpoint::parse(endpoint).unwrap()).unwrap();
        let client = t.socket(SocketKind::Dealer).unwrap();
        client.connect(&Endpoint::parse(endpoint).unwrap()).unwrap();
        (t, server, client)
    }

    #[test]
    fn try_recv_returns_false_when_empty_and_a_message_when_queued() {
        let (_t, mut server, mut client) = inproc_pair("inproc://try-recv");
        let mut msg = Received::default();
        assert!(!server.try_recv(&mut msg).unwrap());
        client
            .send([Frame::Copy(b"a"), Frame::Copy(b"bc")])
            .unwrap();
        let t0 = std::time::Instant::now();
        while !server.try_recv(&mut msg).unwrap() {
            assert!(t0.elapsed().as_secs() < 5);
            std::thread::yield_now();
        }
        assert_eq!(msg.bytes, b"abc");
        assert_eq!(msg.frames, 2);
        assert!(!msg.peer.is_empty());
    }

    #[test]
    fn a_joined_reply_is_one_frame_and_a_receive_in_place_keeps_it_uncopied() {
        let (_t, mut server, mut client) = inproc_pair("inproc://joined");
        let wait = std::time::Duration::from_secs(10);
        // A ROUTER receiving in place: the routing id apart, the one frame kept.
        client.send([Frame::Copy(b"request")]).unwrap();
        let mut req = Received::default();
        rodeo_testkit::wait_until("the request", wait, || {
            server.try_recv_in_place(&mut req).unwrap()
        });
        assert!(!req.peer.is_empty());
        assert_eq!((req.data(), req.frames), (&b"request"[..], 1));
        assert!(req.bytes.is_empty(), "a one-frame message is not copied");
        let peer = req.peer.clone();
        // Pieces joined into one frame, received in place.
        let body: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        server
            .try_send_to_joined(&peer, [&b"head"[..], &body, b"tail"])
            .unwrap();
        let mut got = Received::default();
        rodeo_testkit::wait_until("the joined reply", wait, || {
            client.try_recv_in_place(&mut got).unwrap()
        });
        assert_eq!(got.frames, 1);
        assert!(got.bytes.is_empty());
        let mut want = b"head".to_vec();
        want.extend_from_slice(&body);
        want.extend_from_slice(b"tail");
        assert_eq!(got.data(), &want[..]);
        // Several frames are joined into `bytes`, in place or not.
        server
            .send_to(&peer, [Frame::Copy(b"a"), Frame::Copy(b"bc")])
            .unwrap();
        rodeo_testkit::wait_until("the two-frame message", wait, || {
            client.try_recv_in_place(&mut got).unwrap()
        });
        assert_eq!(
            (got.data(), &got.bytes[..], got.frames),
            (&b"abc"[..], &b"abc"[..], 2)
        );
        // A copying receive after one in place: `data` is the copy.
        server.try_send_to_joined(&peer, [&b"xyz"[..]]).unwrap();
        assert!(client.recv(&mut got, 5000).unwrap());
        assert_eq!((got.data(), &got.bytes[..]), (&b"xyz"[..], &b"xyz"[..]));
        // A peer that is gone: refused at once, as try_send_to is.
        let e = server
            .try_send_to_joined(b"nobody", [&b"x"[..]])
            .unwrap_err();
        assert!(e.is_unroutable(), "{e}");
    }

    #[test]
    fn recv_times_out() {
        let t = Transport::new(1).unwrap();
        let mut s = t.socket(SocketKind::Dealer).unwrap();
        s.connect(&Endpoint::parse("inproc://nobody").unwrap())
            .unwrap();
        let mut msg = Received::default();
        assert!(!s.recv(&mut msg, 10).unwrap());
    }

    #[test]
    fn router_reports_unknown_peer() {
        let t = Transport::new(1).unwrap();
        let mut s = t.socket(SocketKind::Router).unwrap();
        s.bind(&Endpoint::parse("inproc://router-unknown").unwrap())
            .unwrap();
        let dropped = Arc::new(AtomicU64::new(0));
        let err = s.send_to(
            b"ghost",
            [Frame::ZeroCopy(Box::new(Counted(vec![1], dropped.clone())))],
        );
        assert!(err.is_err());
        // The owner of a frame that could not be sent is released, not leaked.
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn try_send_to_a_peer_that_does_not_read_fails_at_once_and_releases_the_frames() {
        let t = Transport::new(1).unwrap();
        let mut server = t.socket(SocketKind::Router).unwrap();
        server.set_high_water_marks(4).unwrap();
        let bound = server
            .bind(&Endpoint::parse("tcp://127.0.0.1:*").unwrap())
            .unwrap();
        let mut client = t.socket(SocketKind::Dealer).unwrap();
        client.set_high_water_marks(1).unwrap();
        client.connect(&Endpoint::parse(&bound).unwrap()).unwrap();
        client.send([Frame::Copy(b"hello")]).unwrap();
        let mut msg = Received::default();
        assert!(server.recv(&mut msg, 5000).unwrap());
        let peer = msg.peer.clone();
        let released = Arc::new(AtomicU64::new(0));
        let (mut sent, mut refused) = (0u64, 0u64);
        let t0 = std::time::Instant::now();
        // 64 KiB replies: the socket buffers fill after a few MB at most.
        while refused == 0 {
            assert!(
                t0.elapsed().as_secs() < 10,
                "never refused after {sent} sends"
            );
            let owner = Box::new(Counted(vec![7u8; 65536], released.clone()));
            match server.try_send_to(&peer, [Frame::Copy(b"h"), Frame::ZeroCopy(owner)]) {
                Ok(()) => sent += 1,
                Err(e) => {
                    assert!(e.is_would_block(), "{e}");
                    refused += 1;
                }
            }
        }
        // The refused reply's owner was dropped before try_send_to returned.
        assert!(released.load(Ordering::SeqCst) >= refused);
        // An unknown peer is unroutable, at once.
        let e = server
            .try_send_to(b"nobody", [Frame::Copy(b"x")])
            .unwrap_err();
        assert!(e.is_unroutable(), "{e}");
        // A DEALER without a peer does not wait either.
        let mut lonely = t.socket(SocketKind::Dealer).unwrap();
        let e = lonely.try_send([Frame::Copy(b"x")]).unwrap_err();
        assert!(e.is_would_block(), "{e}");
    }

    #[test]
    fn a_message_over_the_limit_in_several_frames_is_dropped_and_counted() {
        let t = Transport::new(1).unwrap();
        let mut server = t.socket(SocketKind::Router).unwrap();
        server.set_max_message_size(100).unwrap();
        server
            .bind(&Endpoint::parse("inproc://max-frames").unwrap())
            .unwrap();
        let mut client = t.socket(SocketKind::Dealer).unwrap();
        client
            .connect(&Endpoint::parse("inproc://max-frames").unwrap())
            .unwrap();
        let before = oversized_count();
        // Each frame below the limit (libzmq takes them), together above it.
        let part = [7u8; 60];
        client
            .send([Frame::Copy(&part), Frame::Copy(&part), Frame::Copy(&part)])
            .unwrap();
        client
            .send([Frame::Copy(&part[..40]), Frame::Copy(&part)])
            .unwrap();
        let mut msg = Received::default();
        assert!(server.recv(&mut msg, 5000).unwrap());
        assert_eq!(
            msg.bytes.len(),
            100,
            "the message at the limit is taken whole"
        );
        assert_eq!(msg.frames, 2);
        assert_eq!(server.dropped_count(), 1);
        assert!(oversized_count() > before);
        assert!(!server.try_recv(&mut msg).unwrap());
    }

    #[test]
    fn poll_readable_names_the_sockets_with_messages() {
        let t = Transport::new(1).unwrap();
        let a = t.socket(SocketKind::Router).unwrap();
        a.bind(&Endpoint::parse("inproc://poll-a").unwrap())
            .unwrap();
        let b = t.socket(SocketKind::Router).unwrap();
        b.bind(&Endpoint::parse("inproc://poll-b").unwrap())
            .unwrap();
        assert_eq!(poll_readable(&[&a, &b], 0).unwrap(), 0);
        let mut client = t.socket(SocketKind::Dealer).unwrap();
        client
            .connect(&Endpoint::parse("inproc://poll-b").unwrap())
            .unwrap();
        client.send([Frame::Copy(b"x")]).unwrap();
        assert_eq!(poll_readable(&[&a, &b], 5000).unwrap(), 0b10);
    }
}
