//! The same-host data plane: shared memory through iceoryx2 (`shm://NAME` endpoints).
//!
//! A [`Socket`](crate::socket::Socket) whose endpoint is `shm://NAME` talks through iceoryx2
//! instead of ZeroMQ, with the same ROUTER/DEALER shape:
//!
//! - A ROUTER that binds `shm://NAME` owns the *inbox* `rodeo/NAME`: a publish-subscribe service
//!   of byte slices with one subscriber (the router) and a publisher per dealer (how many: the
//!   partition's [`ShmLimits`]), plus an event service of the same name that wakes the router.
//! - A DEALER that connects to `shm://NAME` owns its own reply inbox `rodeo/NAME/reply/ID` (ID its
//!   identity, or a name unique to the process when it has none) and publishes into `rodeo/NAME`.
//!   Every message it sends starts with its identity (one length byte, then the bytes), which the
//!   router hands out as [`Received::peer`](crate::socket::Received::peer) and uses to open (once,
//!   then cached) a publisher into that dealer's reply inbox.
//!
//! A message is written once, straight into a loaned shared-memory sample (frames copied in, the
//! zero-copy frames' owners dropped at once), and read once by the receiver into its
//! [`Received`](crate::socket::Received) buffer: no kernel copy, no I/O thread.
//!
//! # Wake-ups
//!
//! Event notification after a bounded spin:
//!
//! - Every send notifies the receiver's event service; iceoryx2 sends a datagram only when the
//!   receiver has consumed the previous one, so a busy receiver costs its senders an atomic, and
//!   a receiver that drains everything before it waits gets one wake-up per batch.
//! - A receiver whose queue is empty spins on it first ([`spin`]: 5 us unless set, counted in
//!   [`spin_counts`]), without a system call. While it spins it has not consumed its last
//!   notification, so the senders' notifications stay an atomic too: a stream of messages closer
//!   together than the spin costs neither side a system call. Only then does it wait on the
//!   event (`recv`); a spin that runs out costs its length in CPU once per wait.
//! - An empty `try_recv` costs no system call; a waiting receiver consumes its notification
//!   before it looks at its queue once more, so a sample that arrives afterwards always comes
//!   with a fresh datagram. The event's file descriptor joins
//!   [`poll_readable`](crate::socket::poll_readable) next to ZeroMQ sockets (which does not
//!   spin). No thread is added: iceoryx2 has none of its own.
//!
//! # Back-pressure
//!
//! Queues are bounded ([`QUEUE_MESSAGES`] per inbox) and never overflow: a sample a full inbox
//! cannot take is not delivered, the send reports it as "would block" (as ZeroMQ's high-water
//! mark does) and a blocking send retries until its send timeout: at once for up to [`spin`] (the
//! receiver is usually draining), then with sleeps from 20 us doubling to 1 ms. A refusal is
//! counted ([`backpressure_count`]) when the send first meets the full inbox and again at each
//! sleep. An inbox without its receiver (its process left, or is being
//! restarted and its dead predecessor was cleaned up) fails the send at once, without a wait:
//! there is nobody to wait for, so a process walking down does not spend a send timeout per
//! socket on peers that already left.
//!
//! # Names and clean-up
//!
//! NAME carries the partition and run (the layout makes it from the run's runtime directory), so
//! two partitions on one host never share a service. Every process creates one iceoryx2 node
//! (without signal handlers: the applications keep theirs); creating it first removes what dead
//! processes (killed with -9, crashed earlier runs) left behind (`cleanup`: one pass at a time,
//! waiting for another process's pass rather than counting it a failure), a port refused at its
//! limit is made again after a clean-up pass (`services`), and the run calls
//! [`cleanup_dead_nodes`] again when it ends. A restarted application so gets its predecessor's
//! ports back however often it restarts.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iceoryx2::port::LoanError;
use iceoryx2::prelude::*;
use iceoryx2::sample::Sample;

use crate::frame::{Frame, Received, TransportError};

mod batch;
mod cleanup;
mod services;
mod spin;

pub use batch::{batching_allowed, undelivered_count, BATCH_BYTES, BATCH_ENV, BATCH_MESSAGE_BYTES};
pub use cleanup::{
    clean_dead_nodes, cleanup_dead_nodes, iceoryx2_config, remove_abandoned_segments, Cleanup,
    ROOT_DIR,
};
pub use services::{limits, set_limits, ShmLimits, EXTERNAL_PEERS, PORT_WAIT};
pub use spin::{set_spin, spin, spin_counts, SpinCounts, DEFAULT_SPIN, SPIN_ENV};

use cleanup::node;
use services::{open_inbox, open_outbox, Inbox, Outbox};

/// The iceoryx2 service variant: inter-process, single-threaded ports (no lock per call: the
/// thread-safe variant's mutexes and per-sample mutex were a quarter of the CPU per message).
/// A socket is used by one thread at a time and moved between threads whole ([`ShmSocket`]'s
/// `Send`).
pub(crate) type Svc = ipc::Service;

/// Messages an inbox queues before its senders see back-pressure.
pub const QUEUE_MESSAGES: usize = 512;
/// The first shared-memory slot size of a sender; it grows by powers of two with the messages.
pub(crate) const INITIAL_SLICE_BYTES: usize = 4096;
/// Frames of one message kept on the stack (more are accepted, joined in a scratch buffer).
const MAX_FRAMES: usize = 8;
/// How long a refused batch is retried every millisecond (see [`ShmSocket::retry_soon`]).
const QUICK_RETRY: Duration = Duration::from_millis(20);
/// How long a dropped socket waits for room for its last batches.
const DROP_FLUSH: Duration = Duration::from_millis(200);

static BACKPRESSURE: AtomicU64 = AtomicU64::new(0);
static ANON: AtomicU64 = AtomicU64::new(0);
/// Sends refused by a full shared-memory inbox in this process so far (a blocking send counts
/// once when it meets the full inbox and once per sleep after its spin): the back-pressure
/// figure of `/metrics`.
pub fn backpressure_count() -> u64 {
    BACKPRESSURE.load(Ordering::Relaxed)
}

pub(crate) fn shm_err(op: &'static str, name: &str, e: impl std::fmt::Debug) -> TransportError {
    TransportError::Shm {
        op,
        name: name.to_string(),
        detail: format!("{e:?}"),
    }
}

/// A sample as the subscriber of an inbox receives it.
type ReceivedSample = Sample<Svc, [u8], ()>;

/// Which end of the ROUTER/DEALER pair a socket is, with what that end owns.
enum Side {
    Router { peers: HashMap<Vec<u8>, Outbox> },
    Dealer { out: Box<Outbox> },
}

/// The shared-memory side of a [`Socket`](crate::socket::Socket) once bound or connected.
pub(crate) struct ShmSocket {
    node: Arc<Node<Svc>>,
    inbox: Inbox,
    role: Side,
    /// The identity a dealer writes in front of its messages (empty for a router).
    identity: Vec<u8>,
    /// The inbox a router was bound as (its dealers' reply inboxes are named after it).
    bound: String,
    send_timeout_ms: i32,
    max_message_bytes: Option<usize>,
    scratch: Vec<u8>,
    /// Messages refused as larger than the maximum size (dropped, counted).
    pub(crate) oversized: u64,
    /// Small messages join a batch (module `batch`).
    batching: Cell<bool>,
    /// Some outbox holds a batch not yet published.
    pending: Cell<bool>,
    /// Since when a batch has been refused by a full inbox (cleared when every batch is out).
    refused_since: Cell<Option<Instant>>,
    /// The batch sample being read, and the byte its next message starts at.
    held: Option<(ReceivedSample, usize)>,
}

impl Drop for ShmSocket {
    /// What waits in a batch goes out, waiting for room up to [`DROP_FLUSH`] in all.
    fn drop(&mut self) {
        let until = Instant::now() + DROP_FLUSH;
        self.flush(false);
        while self.pending.get() && Instant::now() < until {
            std::thread::sleep(Duration::from_micros(200));
            self.flush(false);
        }
    }
}

// SAFETY: what keeps `ShmSocket` from being `Send` on its own are its iceoryx2 ports of the
// single-threaded `ipc::Service` (subscriber, listener, publishers, notifiers): each holds its
// port state in an `Rc` that only the port and the samples it loans or receives share. Every
// port is made by this socket from its own port factories and owned by it alone (`Inbox`,
// `Outbox`), and no loaned sample outlives the method that loaned it (`publish`), so
// no clone of any of those `Rc`s exists outside this value: moving the socket moves every clone
// with it, and no two threads ever touch one counter. The rest (the node, shared as
// `Arc<Node<ipc::Service>>`, and the port factories) is `Send + Sync` in iceoryx2 itself. The
// one sample that outlives a method, the batch being read (`held`), is owned by this value
// alone as well and moves with it; so do the `Cell`s and `RefCell`s of the batches.
// `ShmSocket` is not `Sync`: a `Socket` (its only owner) is used through `&mut` or from one
// thread (`Cell` fields). Test: `shm_socket_moves_between_threads` (tests/shm.rs).
unsafe impl Send for ShmSocket {}

impl ShmSocket {
    /// A router's inbox for `name`.
    pub(crate) fn bind(
        name: &str,
        send_timeout_ms: i32,
        max_message_bytes: Option<usize>,
    ) -> Result<ShmSocket, TransportError> {
        let node = node()?;
        let inbox = open_inbox(&node, name)?;
        Ok(ShmSocket {
            node,
            inbox,
            role: Side::Router {
                peers: HashMap::new(),
            },
            identity: Vec::new(),
            bound: name.to_string(),
            send_timeout_ms,
            max_message_bytes,
            scratch: Vec::new(),
            oversized: 0,
            batching: Cell::new(false),
            pending: Cell::new(false),
            refused_since: Cell::new(None),
            held: None,
        })
    }

    /// A dealer of the router `name`, presenting `identity` (a unique one when empty).
    pub(crate) fn connect(
        name: &str,
        identity: &[u8],
        send_timeout_ms: i32,
        max_message_bytes: Option<usize>,
    ) -> Result<ShmSocket, TransportError> {
        let identity = if identity.is_empty() {
            format!(
                "anon-{}-{}",
                std::process::id(),
                ANON.fetch_add(1, Ordering::Relaxed)
            )
            .into_bytes()
        } else {
            identity.to_vec()
        };
        let id_text = std::str::from_utf8(&identity)
            .ok()
            .filter(|s| {
                s.len() <= 64
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
            .ok_or_else(|| {
                shm_err(
                    "identity",
                    name,
                    "shm identities are up to 64 ASCII letters, digits, '-' or '_'",
                )
            })?;
        let node = node()?;
        let inbox = open_inbox(&node, &format!("{name}/reply/{id_text}"))?;
        let out = open_outbox(&node, name, true)?;
        Ok(ShmSocket {
            node,
            inbox,
            role: Side::Dealer { out: Box::new(out) },
            identity,
            bound: name.to_string(),
            send_timeout_ms,
            max_message_bytes,
            scratch: Vec::new(),
            oversized: 0,
            batching: Cell::new(false),
            pending: Cell::new(false),
            refused_since: Cell::new(None),
            held: None,
        })
    }

    /// Sends `frames` (to `peer` for a router); `wait`: retry a full inbox until the send
    /// timeout. With batching on, a message of at most [`BATCH_MESSAGE_BYTES`] joins its
    /// outbox's batch instead (module `batch`).
    pub(crate) fn send<'a>(
        &mut self,
        peer: Option<&[u8]>,
        frames: impl IntoIterator<Item = Frame<'a>>,
        wait: bool,
    ) -> Result<(), TransportError> {
        // Hold the frames (their owners stay alive until the bytes are in the sample).
        let mut held: [Option<Frame<'a>>; MAX_FRAMES] = std::array::from_fn(|_| None);
        let mut n = 0;
        let mut extra = false;
        self.scratch.clear();
        for f in frames {
            if n < MAX_FRAMES {
                held[n] = Some(f);
                n += 1;
            } else {
                extra = true;
                self.scratch.extend_from_slice(frame_bytes(&f));
            }
        }
        let body_len: usize = held[..n]
            .iter()
            .flatten()
            .map(|f| frame_bytes(f).len())
            .sum::<usize>()
            + if extra { self.scratch.len() } else { 0 };
        let node = &self.node;
        let out: &Outbox = match (&mut self.role, peer) {
            (Side::Dealer { out }, _) => out,
            (Side::Router { peers }, Some(p)) => {
                if !peers.contains_key(p) {
                    let id = std::str::from_utf8(p).map_err(|_| TransportError::unroutable())?;
                    let ob = open_outbox(node, &format!("{}/reply/{id}", self.bound), false)
                        .map_err(|_| TransportError::unroutable())?;
                    peers.insert(p.to_vec(), ob);
                }
                peers.get(p).ok_or_else(TransportError::unroutable)?
            }
            (Side::Router { .. }, None) => {
                return Err(shm_err(
                    "send",
                    &self.bound,
                    "a router sends to a peer (send_to)",
                ));
            }
        };
        let ends = Ends {
            identity: &self.identity,
            bound: &self.bound,
            send_timeout_ms: self.send_timeout_ms,
        };
        let frames = || {
            held[..n]
                .iter()
                .flatten()
                .map(frame_bytes)
                .chain(extra.then_some(self.scratch.as_slice()))
        };
        if self.batching.get() && body_len <= BATCH_MESSAGE_BYTES {
            if !out.has_receiver() {
                // Nobody to batch for: fail now, as an unbatched send does, so that the
                // caller keeps what it sent for a later try (a DCM its credits).
                return Err(TransportError::would_block());
            }
            let room = out.batch.borrow().len() + 4 + body_len <= BATCH_BYTES;
            if !room {
                ends.publish_batch(out, wait)?;
            }
            batch::append(&mut out.batch.borrow_mut(), body_len, frames());
            out.batched.set(out.batched.get() + 1);
            self.pending.set(true);
            return Ok(());
        }
        if out.batched.get() > 0 {
            // What waits goes first: messages keep their order.
            ends.publish_batch(out, wait)?;
        }
        let id = &self.identity;
        let total = 1 + id.len() + body_len;
        ends.publish(out, wait, total, |put| {
            put(&[id.len() as u8]);
            put(id);
            for f in frames() {
                put(f);
            }
        })
    }

    /// Publishes every outbox's batch; `wait`: retry a full inbox until the send timeout. A
    /// batch an inbox cannot take yet stays for the next try (module `batch`).
    pub(crate) fn flush(&self, wait: bool) {
        if !self.pending.get() {
            return;
        }
        let ends = Ends {
            identity: &self.identity,
            bound: &self.bound,
            send_timeout_ms: self.send_timeout_ms,
        };
        let mut left = false;
        let mut each = |out: &Outbox| {
            if out.batched.get() > 0 && ends.publish_batch(out, wait).is_err() {
                left |= out.batched.get() > 0;
            }
        };
        match &self.role {
            Side::Dealer { out } => each(out),
            Side::Router { peers } => peers.values().for_each(each),
        }
        self.pending.set(left);
        match (left, self.refused_since.get()) {
            (true, None) => self.refused_since.set(Some(Instant::now())),
            (false, Some(_)) => self.refused_since.set(None),
            _ => {}
        }
    }

    /// True while a batch waits to go out ([`ShmSocket::flush`]).
    pub(crate) fn has_pending(&self) -> bool {
        self.pending.get()
    }

    /// True while a batch waits and was first refused less than [`QUICK_RETRY`] ago: waits
    /// are then cut to a millisecond so that it goes out as soon as the inbox drains. A peer
    /// that stays full longer (it stopped reading) gets its batch tried at its owner's own pace
    /// (every receive, poll and flush), not every millisecond.
    pub(crate) fn retry_soon(&self) -> bool {
        self.pending.get()
            && self
                .refused_since
                .get()
                .is_none_or(|t| t.elapsed() < QUICK_RETRY)
    }

    /// Turns batching of small messages on or off (module `batch`); what waits goes out at the
    /// next flush either way.
    pub(crate) fn set_batching(&self, on: bool) {
        self.batching.set(on && batch::batching_allowed());
    }

    fn take(&mut self, msg: &mut Received) -> Result<bool, TransportError> {
        loop {
            if let Some(got) = self.take_batched(msg) {
                if got {
                    return Ok(true);
                }
                continue;
            }
            let Some(sample) = self
                .inbox
                .sub
                .receive()
                .map_err(|e| shm_err("receive", &self.inbox.name, e))?
            else {
                return Ok(false);
            };
            let bytes: &[u8] = sample.payload();
            if bytes.first() == Some(&batch::BATCH_MARK) {
                match batch::header(bytes) {
                    Some((_, at)) => self.held = Some((sample, at)),
                    None => self.refuse(),
                }
                continue;
            }
            let Some((&id_len, rest)) = bytes.split_first() else {
                self.refuse();
                continue;
            };
            let Some((id, body)) = rest.split_at_checked(usize::from(id_len)) else {
                self.refuse();
                continue;
            };
            if self.max_message_bytes.is_some_and(|m| body.len() > m) {
                self.refuse();
                continue;
            }
            msg.reset();
            if matches!(self.role, Side::Router { .. }) {
                msg.peer.extend_from_slice(id);
            }
            msg.bytes.extend_from_slice(body);
            msg.frames = 1;
            return Ok(true);
        }
    }

    /// The next message of the batch being read into `msg`: `Some(true)` when one was taken,
    /// `Some(false)` when one was refused (look again), `None` when no batch is being read.
    fn take_batched(&mut self, msg: &mut Received) -> Option<bool> {
        let (sample, at) = self.held.as_mut()?;
        let payload: &[u8] = sample.payload();
        let taken = match batch::next(payload, at) {
            None => {
                self.held = None;
                return Some(false);
            }
            Some(Ok(body)) if self.max_message_bytes.is_none_or(|m| body.len() <= m) => {
                msg.reset();
                if matches!(self.role, Side::Router { .. }) {
                    if let Some((id, _)) = batch::header(payload) {
                        msg.peer.extend_from_slice(&payload[id]);
                    }
                }
                msg.bytes.extend_from_slice(&payload[body]);
                msg.frames = 1;
                true
            }
            Some(_) => false,
        };
        if !taken {
            self.refuse();
        }
        Some(taken)
    }

    /// Counts a message dropped on receipt (malformed, or above the limit), here and in the
    /// process-wide count of `/metrics`.
    fn refuse(&mut self) {
        self.oversized += 1;
        crate::frame::count_oversized();
    }

    /// Receives one message if one is queued, without waiting and without a system call.
    /// What waits in a batch goes out first, unless the message is the next one of the batch
    /// sample being read (module `batch`).
    pub(crate) fn try_recv(&mut self, msg: &mut Received) -> Result<bool, TransportError> {
        if !self.holds_more() {
            self.flush(false);
        }
        self.take(msg)
    }

    /// True while the batch sample being read has a message left.
    fn holds_more(&self) -> bool {
        self.held
            .as_ref()
            .is_some_and(|(s, at)| *at < s.payload().len())
    }

    /// Consumes this inbox's pending notification (a non-blocking read of its datagram), then
    /// tells whether a message is queued. After it, whatever arrives comes with a new
    /// notification (module docs): `poll_readable` calls it for an inbox whose descriptor was
    /// readable, so that a consumed notification never keeps a poll awake.
    pub(crate) fn consume_wake(&self) -> Result<bool, TransportError> {
        self.inbox
            .listener
            .try_wait(|_| {})
            .map_err(|e| shm_err("event", &self.inbox.name, e))?;
        Ok(self.has_message())
    }

    /// Waits up to `timeout_ms` (-1: forever) for a message.
    pub(crate) fn recv(
        &mut self,
        msg: &mut Received,
        timeout_ms: i64,
    ) -> Result<bool, TransportError> {
        // As `try_recv`: the next message of the batch being read comes without a flush.
        if !self.holds_more() {
            self.flush(false);
        }
        if self.take(msg)? {
            return Ok(true);
        }
        // The clock is read only when nothing was queued.
        let deadline =
            (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64));
        loop {
            // A bounded spin first (module docs): a message that comes within it costs neither
            // side a system call.
            if spin::until_ready(deadline, || self.has_message()) && self.take(msg)? {
                return Ok(true);
            }
            let left = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(false);
                    }
                    d - now
                }
                None => Duration::from_secs(1),
            };
            // A batch the peer's full inbox refused is tried again every millisecond for a
            // while (`retry_soon`).
            self.flush(false);
            let left = if self.retry_soon() {
                left.min(Duration::from_millis(1))
            } else {
                left
            };
            // Returns at once when a notification is pending (a message may have come with
            // it), else sleeps until one comes; either way it consumes it before we look.
            spin::count_wait();
            match self.inbox.listener.timed_wait(|_| {}, left) {
                Ok(_) => {}
                // A signal woke the wait (SIGCONT after the process was stopped, a profiler):
                // not an error, look again.
                Err(iceoryx2::port::listener::ListenerWaitError::InterruptSignal) => {}
                Err(e) => return Err(shm_err("event wait", &self.inbox.name, e)),
            }
            if self.take(msg)? {
                return Ok(true);
            }
        }
    }

    /// True when a message is queued (no system call).
    pub(crate) fn has_message(&self) -> bool {
        self.holds_more() || self.inbox.sub.has_samples().unwrap_or(true)
    }

    /// The file descriptor that becomes readable when a sender notifies this inbox. Valid while
    /// `self` lives; the caller polls it while borrowing `self` and never closes it.
    pub(crate) fn wake_fd(&self) -> i32 {
        // SAFETY: the descriptor belongs to the listener, which `self` owns; the only caller
        // (`poll_readable`) uses the number during one poll while it borrows the socket (so the
        // listener, and its descriptor, stay open) and neither stores nor closes it.
        unsafe { self.inbox.listener.file_descriptor().native_handle() }
    }
}

fn frame_bytes<'f>(f: &'f Frame<'_>) -> &'f [u8] {
    match f {
        Frame::Copy(b) => b,
        Frame::ZeroCopy(o) => o.frame_bytes(),
    }
}

/// What publishing needs of its socket, borrowed apart from the outbox it publishes into.
struct Ends<'s> {
    identity: &'s [u8],
    bound: &'s str,
    send_timeout_ms: i32,
}

impl Ends<'_> {
    /// Publishes `out`'s batch as one sample (module `batch`) and empties it. An inbox that
    /// lost its receiver drops the batch (counted: [`undelivered_count`]); a full one keeps it
    /// and fails as a send would.
    fn publish_batch(&self, out: &Outbox, wait: bool) -> Result<(), TransportError> {
        let sent = {
            let b = out.batch.borrow();
            let id = self.identity;
            self.publish(out, wait, 2 + id.len() + b.len(), |put| {
                put(&[batch::BATCH_MARK, id.len() as u8]);
                put(id);
                put(&b);
            })
        };
        let done = match &sent {
            Ok(()) => true,
            Err(e) if e.is_would_block() && !out.has_receiver() => {
                batch::count_undelivered(out.batched.get());
                true
            }
            Err(_) => false,
        };
        if done {
            out.batch.borrow_mut().clear();
            out.batched.set(0);
        }
        sent
    }

    /// Loans a sample of `total` bytes from `out`, has `write` put exactly that many bytes
    /// into it (through the `put` it is given, in order) and publishes it, then notifies the
    /// receiver. A full inbox is retried as the module docs say (back-pressure) when `wait`.
    fn publish(
        &self,
        out: &Outbox,
        wait: bool,
        total: usize,
        mut write: impl FnMut(&mut dyn FnMut(&[u8])),
    ) -> Result<(), TransportError> {
        // The send timeout starts at the first refusal (a delivered send reads no clock).
        let mut deadline: Option<Option<Instant>> = None;
        let mut backoff = Duration::from_micros(20);
        // Until when a refused send retries at once (set at the first refusal; module docs).
        let mut spin_until: Option<Instant> = None;
        loop {
            let delivered = match out.publisher.loan_slice_uninit(total) {
                Ok(mut sample) => {
                    let dst = sample.payload_mut();
                    let mut at = 0;
                    write(&mut |b: &[u8]| {
                        for (d, s) in dst[at..at + b.len()].iter_mut().zip(b) {
                            d.write(*s);
                        }
                        at += b.len();
                    });
                    assert_eq!(at, total, "a shared-memory sample written short");
                    // SAFETY: `at == total` was just checked: `write` put `total` bytes, in
                    // order from the start, so the whole slice is initialised.
                    let sample = unsafe { sample.assume_init() };
                    sample.send().map_err(|e| shm_err("send", self.bound, e))?
                }
                // All slots in flight: the receiver has not released them yet.
                Err(LoanError::ExceedsMaxLoans | LoanError::OutOfMemory) => 0,
                // A size the segment cannot take (above what iceoryx2 can map) or a broken
                // segment: an error now, never a retry without end.
                Err(e) => return Err(shm_err("loan", self.bound, format!("{e} ({total} bytes)"))),
            };
            if delivered > 0 {
                // A failed notification only delays the receiver until its next timeout.
                let _ = out.notifier.notify();
                return Ok(());
            }
            if !out.has_receiver() {
                // Nobody to wait for: the receiver left (or is not there yet, or is being
                // restarted). As a ZeroMQ peer that is gone, it costs the sender nothing.
                return Err(TransportError::would_block());
            }
            if spin_until.is_none() {
                BACKPRESSURE.fetch_add(1, Ordering::Relaxed);
            }
            // Wake the receiver: it may be waiting while its queue is full of our messages.
            let _ = out.notifier.notify();
            let now = Instant::now();
            let timeout = self.send_timeout_ms;
            match *deadline.get_or_insert_with(|| {
                (wait && timeout >= 0).then(|| now + Duration::from_millis(timeout as u64))
            }) {
                Some(d) if now < d => {}
                None if wait => {}
                _ => return Err(TransportError::would_block()),
            }
            // A bounded spin first: a receiver that is draining its queue makes room within
            // microseconds, long before a sleep would end.
            if now < *spin_until.get_or_insert_with(|| now + spin::spin()) {
                for _ in 0..32 {
                    std::hint::spin_loop();
                }
                continue;
            }
            BACKPRESSURE.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(1));
        }
    }
}
