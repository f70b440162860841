//! The same-host data plane: shared memory through iceoryx2 (`shm://NAME` endpoints).
//!
//! A [`Socket`](crate::socket::Socket) whose endpoint is `shm://NAME` talks through iceoryx2
//! instead of ZeroMQ, with the same ROUTER/DEALER shape:
//!
//! - A ROUTER that binds `shm://NAME` owns the *inbox* `rodeo/NAME`: a publish-subscribe service
//!   of byte slices with one subscriber (the router) and up to [`MAX_PEERS`] publishers (its
//!   dealers), plus an event service of the same name that wakes the router.
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
//! Every send notifies the receiver's event service; iceoryx2 sends a datagram only when the
//! receiver has consumed the previous one, so a busy receiver costs its senders an atomic, and a
//! receiver that drains everything before it waits gets one wake-up per batch. An empty
//! `try_recv` costs no system call; a waiting receiver consumes its notification before it looks
//! at its queue once more, so a sample that arrives afterwards always comes with a fresh datagram.
//! The event's file descriptor joins [`poll_readable`](crate::socket::poll_readable) next to
//! ZeroMQ sockets. No thread is added: iceoryx2 has none of its own.
//!
//! # Back-pressure
//!
//! Queues are bounded ([`QUEUE_MESSAGES`] per inbox) and never overflow: a sample a full inbox
//! cannot take is not delivered, the send reports it as "would block" (as ZeroMQ's high-water
//! mark does) and a blocking send retries until its send timeout. Each refusal is counted
//! ([`backpressure_count`]).
//!
//! # Names and clean-up
//!
//! NAME carries the partition and run (the layout makes it from the run's runtime directory), so
//! two partitions on one host never share a service. Every process creates one iceoryx2 node
//! (without signal handlers: the applications keep theirs); creating it first removes what dead
//! nodes (processes killed with -9, crashed earlier runs) left behind, and the controller calls
//! [`cleanup_dead_nodes`] again when a run ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use iceoryx2::node::NodeView;
use iceoryx2::port::listener::Listener;
use iceoryx2::port::notifier::Notifier;
use iceoryx2::port::publisher::Publisher;
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::port::LoanError;
use iceoryx2::prelude::*;

use crate::frame::{Frame, Received, TransportError};

/// The iceoryx2 service variant: inter-process, ports usable from the thread they are moved to.
pub(crate) type Svc = ipc_threadsafe::Service;

/// Messages an inbox queues before its senders see back-pressure.
pub const QUEUE_MESSAGES: usize = 512;
/// Senders one inbox accepts (a readout node's dealers: every DCM and the supervisor).
pub const MAX_PEERS: usize = 128;
/// The first shared-memory slot size of a sender; it grows by powers of two with the messages.
const INITIAL_SLICE_BYTES: usize = 4096;
/// Frames of one message kept on the stack (more are accepted, joined in a scratch buffer).
const MAX_FRAMES: usize = 8;

static BACKPRESSURE: AtomicU64 = AtomicU64::new(0);
static ANON: AtomicU64 = AtomicU64::new(0);
/// The process's node while any socket uses it: when the last shared-memory socket goes, the
/// node goes with it (its files removed), so a process that exits leaves nothing behind.
static NODE: OnceLock<Mutex<Weak<Node<Svc>>>> = OnceLock::new();

/// Sends refused by a full shared-memory inbox in this process so far (each retry of a blocking
/// send counts once): the back-pressure figure of `/metrics`.
pub fn backpressure_count() -> u64 {
    BACKPRESSURE.load(Ordering::Relaxed)
}

fn shm_err(op: &'static str, name: &str, e: impl std::fmt::Debug) -> TransportError {
    TransportError::Shm {
        op,
        name: name.to_string(),
        detail: format!("{e:?}"),
    }
}

/// The process's iceoryx2 node, created on first use (after removing dead nodes' resources;
/// "dead": their process is gone, which iceoryx2 tells by a file lock the process held).
fn node() -> Result<Arc<Node<Svc>>, TransportError> {
    let cell = NODE.get_or_init(|| Mutex::new(Weak::new()));
    let mut guard = cell.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = guard.upgrade() {
        return Ok(n);
    }
    set_log_level(LogLevel::Fatal);
    // iceoryx2 would remove dead nodes' resources while creating the node and again when it is
    // dropped, waiting for each (see `remove_abandoned_segments` for a wait without end): we do
    // it ourselves, off the caller's path (a background thread here, `cleanup_dead_nodes` at
    // the end of a run).
    let mut config = iceoryx2::config::Config::global_config().clone();
    config.global.node.cleanup_dead_nodes_on_creation = false;
    config.global.node.cleanup_dead_nodes_on_destruction = false;
    let n = NodeBuilder::new()
        .config(&config)
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<Svc>()
        .map_err(|e| shm_err("create node", "(process)", e))?;
    let n = Arc::new(n);
    let cleaner = Arc::clone(&n);
    let spawned = std::thread::Builder::new()
        .name("shm-cleanup".into())
        .spawn(move || report_cleanup(&cleaner));
    if spawned.is_err() {
        // No thread to spare: the next run's end cleans up instead.
        eprintln!("rodeo: cannot start the shared-memory cleanup thread");
    }
    *guard = Arc::downgrade(&n);
    Ok(n)
}

/// Removes dead nodes' resources ([`settle_abandoned_segments`] first) and says what it did.
fn report_cleanup(n: &Node<Svc>) -> u64 {
    settle_abandoned_segments();
    let state = n.try_cleanup_dead_nodes();
    // What iceoryx2 could not clean up: the files of nodes it lists as dead.
    let forced = if state.failed_cleanups > 0 {
        remove_dead_node_files()
    } else {
        0
    };
    if state.cleanups > 0 || state.failed_cleanups > 0 {
        eprintln!(
            "rodeo: removed the shared-memory resources of {} dead process(es) ({} more whose \
             iceoryx2 clean-up failed: {} of them by removing their node files)",
            state.cleanups, state.failed_cleanups, forced
        );
    }
    state.cleanups + forced
}

/// Where iceoryx2 keeps its node files (its default root, which rodeo keeps).
const NODES_DIR: &str = "/tmp/iceoryx2/nodes";

/// Removes the files of the nodes iceoryx2 lists as dead (their process is gone: the node's
/// owner lock is free) after its own clean-up failed: a process killed with -9 while it was
/// still making a port or opening a service leaves a node naming a port or service that is no
/// longer there, and iceoryx2's clean-up of such a node fails every time, so its files would
/// stay for good. Returns how many nodes' files were removed.
fn remove_dead_node_files() -> u64 {
    let config = iceoryx2::config::Config::global_config();
    let mut dead = Vec::new();
    let _ = Node::<Svc>::list(config, |state| {
        if let NodeState::Dead(view) = state {
            dead.push(view.id().value().to_string());
        }
        CallbackProgression::Continue
    });
    let mut removed = 0;
    for id in dead {
        let monitor = format!("iox2_{id}.");
        let mut any = false;
        for e in std::fs::read_dir(NODES_DIR).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == id || name.starts_with(&monitor) {
                let path = e.path();
                let gone = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                any |= gone.is_ok();
            }
        }
        removed += u64::from(any);
    }
    removed
}

/// Removes the shared-memory resources of every dead process (killed with -9, crashed) on this
/// host; returns how many were removed. The controller calls it when a run ends.
pub fn cleanup_dead_nodes() -> Result<u64, TransportError> {
    let n = node()?;
    Ok(report_cleanup(&n))
}

/// Waits (at most [`ABANDONED_SEGMENT_AGE`]) until every empty iceoryx2 segment is old enough
/// to count as abandoned, then removes them ([`remove_abandoned_segments`]).
fn settle_abandoned_segments() {
    if let Some(youngest) = empty_segments().iter().map(|&(_, age)| age).min() {
        std::thread::sleep(ABANDONED_SEGMENT_AGE.saturating_sub(youngest));
    }
    remove_abandoned_segments();
}

/// The empty iceoryx2 segments (`/dev/shm/iox2_*` of size zero) and how old each is.
fn empty_segments() -> Vec<(std::path::PathBuf, Duration)> {
    std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("iox2_"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let age = m.modified().ok()?.elapsed().ok()?;
            (m.is_file() && m.len() == 0).then(|| (e.path(), age))
        })
        .collect()
}

/// How old an empty iceoryx2 segment must be to count as abandoned: its creator sizes it
/// microseconds after creating it, so one still empty after this was left by a process killed
/// in between.
const ABANDONED_SEGMENT_AGE: Duration = Duration::from_secs(2);

/// Removes iceoryx2 shared-memory segments (`/dev/shm/iox2_*`) of size zero older than
/// [`ABANDONED_SEGMENT_AGE`]; returns how many. A process killed between creating a segment
/// and sizing it leaves one, and iceoryx2 0.10's dead-node cleanup then waits for it to be
/// sized without a timeout (`MappingSizeIsZero` in `posix_shared_memory::open_impl`): the next
/// process to create a node would hang there (seen: a logger restarted after kill -9). Nothing
/// alive uses such a segment, so removing it first is safe.
pub fn remove_abandoned_segments() -> u64 {
    let removed = empty_segments()
        .into_iter()
        .filter(|(path, age)| *age >= ABANDONED_SEGMENT_AGE && std::fs::remove_file(path).is_ok())
        .count() as u64;
    if removed > 0 {
        eprintln!(
            "rodeo: removed {removed} empty shared-memory segment(s) left by a process killed \
             while creating them"
        );
    }
    removed
}

fn service_name(name: &str) -> Result<ServiceName, TransportError> {
    ServiceName::new(&format!("rodeo/{name}")).map_err(|e| shm_err("service name", name, e))
}

/// A receiving end: the subscriber of an inbox and the listener that wakes its owner.
struct Inbox {
    name: String,
    sub: Subscriber<Svc, [u8], ()>,
    listener: Listener<Svc>,
}

/// A sending end: a publisher into somebody's inbox and the notifier that wakes them.
struct Outbox {
    publisher: Publisher<Svc, [u8], ()>,
    notifier: Notifier<Svc>,
}

fn open_inbox(node: &Node<Svc>, name: &str) -> Result<Inbox, TransportError> {
    let sname = service_name(name)?;
    let ps = node
        .service_builder(&sname)
        .publish_subscribe::<[u8]>()
        .max_publishers(MAX_PEERS)
        .max_subscribers(1)
        .max_nodes(MAX_PEERS + 8)
        .subscriber_max_buffer_size(QUEUE_MESSAGES)
        .subscriber_max_borrowed_samples(2)
        .history_size(0)
        .enable_safe_overflow(false)
        .open_or_create()
        .map_err(|e| shm_err("open inbox", name, e))?;
    let sub = ps
        .subscriber_builder()
        .buffer_size(QUEUE_MESSAGES)
        .create()
        .map_err(|e| shm_err("create subscriber", name, e))?;
    let ev = event_service(node, name)?;
    let listener = ev
        .listener_builder()
        .create()
        .map_err(|e| shm_err("create listener", name, e))?;
    Ok(Inbox {
        name: name.to_string(),
        sub,
        listener,
    })
}

fn event_service(
    node: &Node<Svc>,
    name: &str,
) -> Result<iceoryx2::service::port_factory::event::PortFactory<Svc>, TransportError> {
    node.service_builder(&service_name(name)?)
        .event()
        .max_notifiers(MAX_PEERS)
        .max_listeners(2)
        .max_nodes(MAX_PEERS + 8)
        .disable_notifier_created_event()
        .disable_notifier_dropped_event()
        .open_or_create()
        .map_err(|e| shm_err("open event", name, e))
}

fn open_outbox(node: &Node<Svc>, name: &str, create: bool) -> Result<Outbox, TransportError> {
    let sname = service_name(name)?;
    let b = node
        .service_builder(&sname)
        .publish_subscribe::<[u8]>()
        .max_publishers(MAX_PEERS)
        .max_subscribers(1)
        .max_nodes(MAX_PEERS + 8)
        .subscriber_max_buffer_size(QUEUE_MESSAGES)
        .subscriber_max_borrowed_samples(2)
        .history_size(0)
        .enable_safe_overflow(false);
    let ps = if create {
        b.open_or_create()
            .map_err(|e| shm_err("open peer inbox", name, e))?
    } else {
        b.open().map_err(|e| shm_err("open peer inbox", name, e))?
    };
    let publisher = ps
        .publisher_builder()
        .initial_max_slice_len(INITIAL_SLICE_BYTES)
        .allocation_strategy(AllocationStrategy::PowerOfTwo)
        .backpressure_strategy(BackpressureStrategy::DiscardData)
        .max_loaned_samples(2)
        .create()
        .map_err(|e| shm_err("create publisher", name, e))?;
    let notifier = event_service(node, name)?
        .notifier_builder()
        .create()
        .map_err(|e| shm_err("create notifier", name, e))?;
    Ok(Outbox {
        publisher,
        notifier,
    })
}

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
}

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
        })
    }

    /// Sends `frames` (to `peer` for a router); `wait`: retry a full inbox until the send
    /// timeout.
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
        let node = self.node.clone();
        let out: &Outbox = match (&mut self.role, peer) {
            (Side::Dealer { out }, _) => out,
            (Side::Router { peers }, Some(p)) => {
                if !peers.contains_key(p) {
                    let id = std::str::from_utf8(p).map_err(|_| unroutable())?;
                    let ob = open_outbox(&node, &format!("{}/reply/{id}", self.bound), false)
                        .map_err(|_| unroutable())?;
                    peers.insert(p.to_vec(), ob);
                }
                peers.get(p).ok_or_else(unroutable)?
            }
            (Side::Router { .. }, None) => {
                return Err(shm_err(
                    "send",
                    &self.bound,
                    "a router sends to a peer (send_to)",
                ));
            }
        };
        let id = &self.identity;
        let total = 1 + id.len() + body_len;
        let deadline = (wait && self.send_timeout_ms >= 0)
            .then(|| Instant::now() + Duration::from_millis(self.send_timeout_ms as u64));
        let mut backoff = Duration::from_micros(20);
        loop {
            let delivered = match out.publisher.loan_slice_uninit(total) {
                Ok(mut sample) => {
                    let dst = sample.payload_mut();
                    let mut at = 0;
                    let mut put = |b: &[u8]| {
                        for (d, s) in dst[at..at + b.len()].iter_mut().zip(b) {
                            d.write(*s);
                        }
                        at += b.len();
                    };
                    put(&[id.len() as u8]);
                    put(id);
                    for f in held[..n].iter().flatten() {
                        put(frame_bytes(f));
                    }
                    if extra {
                        put(&self.scratch);
                    }
                    debug_assert_eq!(at, total);
                    // SAFETY: every one of the `total` elements was written just above (the
                    // identity byte, the identity, and each frame, whose lengths sum to
                    // `total`), so the whole slice is initialised.
                    let sample = unsafe { sample.assume_init() };
                    sample.send().map_err(|e| shm_err("send", &self.bound, e))?
                }
                // All slots in flight: the receiver has not released them yet.
                Err(LoanError::ExceedsMaxLoans | LoanError::OutOfMemory) => 0,
                // A size the segment cannot take (above what iceoryx2 can map) or a broken
                // segment: an error now, never a retry without end.
                Err(e) => return Err(shm_err("loan", &self.bound, format!("{e} ({total} bytes)"))),
            };
            if delivered > 0 {
                // A failed notification only delays the receiver until its next timeout.
                let _ = out.notifier.notify();
                return Ok(());
            }
            BACKPRESSURE.fetch_add(1, Ordering::Relaxed);
            // Wake the receiver: it may be waiting while its queue is full of our messages.
            let _ = out.notifier.notify();
            match deadline {
                Some(d) if Instant::now() < d => {}
                None if wait => {}
                _ => return Err(would_block()),
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(1));
        }
    }

    fn take(&mut self, msg: &mut Received) -> Result<bool, TransportError> {
        loop {
            let Some(sample) = self
                .inbox
                .sub
                .receive()
                .map_err(|e| shm_err("receive", &self.inbox.name, e))?
            else {
                return Ok(false);
            };
            let bytes: &[u8] = sample.payload();
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
            msg.peer.clear();
            msg.bytes.clear();
            if matches!(self.role, Side::Router { .. }) {
                msg.peer.extend_from_slice(id);
            }
            msg.bytes.extend_from_slice(body);
            msg.frames = 1;
            return Ok(true);
        }
    }

    /// Counts a message dropped on receipt (malformed, or above the limit), here and in the
    /// process-wide count of `/metrics`.
    fn refuse(&mut self) {
        self.oversized += 1;
        crate::frame::count_oversized();
    }

    /// Receives one message if one is queued, without waiting and without a system call.
    pub(crate) fn try_recv(&mut self, msg: &mut Received) -> Result<bool, TransportError> {
        self.take(msg)
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
        let deadline =
            (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64));
        loop {
            if self.take(msg)? {
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
            // Returns at once when a notification is pending (a message may have come with
            // it), else sleeps until one comes; either way it consumes it before we look.
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
        self.inbox.sub.has_samples().unwrap_or(true)
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

fn would_block() -> TransportError {
    TransportError::Send {
        source: zmq::Error::EAGAIN,
    }
}

fn unroutable() -> TransportError {
    TransportError::Send {
        source: zmq::Error::EHOSTUNREACH,
    }
}
