//! The iceoryx2 services behind a shared-memory socket (inboxes and their wake-up events), their
//! limits, and making a port where a dead process may still hold one.
//!
//! # Limits ([`ShmLimits`])
//!
//! iceoryx2 fixes at a service's creation how many publishers, subscribers, notifiers,
//! listeners and nodes it takes, and a dead process's ports count until its clean-up. Every
//! process of a partition computes the same limits from the partition (its applications) and
//! its restart budget ([`set_limits`], before its first socket: processes that open one service
//! must agree, or the opening fails), so that a run can restart an application as often as its
//! budget allows even before the dead one is cleaned up:
//!
//! - publishers and notifiers of a service: every application, plus one per restart (a
//!   restarted readout node opens a new publisher into every DCM's reply inbox while its dead
//!   predecessor's may still be there), plus [`EXTERNAL_PEERS`];
//! - nodes of a service: the same plus one;
//! - listeners of an inbox's event: one plus one per restart;
//! - subscribers of an inbox: **one**. Each subscriber slot of a service multiplies the shared
//!   memory of every sender into it (iceoryx2 sizes a publisher's segment for every subscriber's
//!   full queue: 514 slots of up to a full event each); a restarted application instead makes
//!   its subscriber after its predecessor's is cleaned up ([`super::cleanup`]): when the
//!   subscriber (or any port) is refused at its limit, the port is retried after a clean-up
//!   pass, for up to [`PORT_WAIT`].

use std::sync::Mutex;
use std::time::{Duration, Instant};

use iceoryx2::port::listener::{Listener, ListenerCreateError};
use iceoryx2::port::notifier::{Notifier, NotifierCreateError};
use iceoryx2::port::publisher::{Publisher, PublisherCreateError};
use iceoryx2::port::subscriber::{Subscriber, SubscriberCreateError};
use iceoryx2::prelude::*;
use iceoryx2::service::builder::event::{EventOpenError, EventOpenOrCreateError};
use iceoryx2::service::builder::publish_subscribe::{
    PublishSubscribeOpenError, PublishSubscribeOpenOrCreateError,
};

use super::cleanup::{clean_dead_nodes, CLEANUP_WAIT};
use super::{shm_err, Svc, INITIAL_SLICE_BYTES, QUEUE_MESSAGES};
use crate::frame::TransportError;

/// Senders beyond the partition's own applications one inbox accepts (a `rodeo tester` or a
/// probe connected from outside).
pub const EXTERNAL_PEERS: usize = 8;
/// How long making a port waits for a dead process's port to be cleaned up.
pub const PORT_WAIT: Duration = Duration::from_secs(10);

/// A port made after retrying this long is logged with the error that held it up.
const SLOW_PORT: Duration = Duration::from_secs(1);

/// How many processes use a partition's services, and how often one may be restarted in a run
/// (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmLimits {
    /// The partition's applications (every process that may open one of its services).
    pub apps: usize,
    /// Restarts a run allows (`control.max_restarts_per_run` when restarts are on, else 0).
    pub restarts: usize,
}

impl ShmLimits {
    /// The limits a process uses before it is told its partition's: 120 applications and 8
    /// restarts (128 senders per inbox, as before limits were sized).
    pub const DEFAULT: ShmLimits = ShmLimits {
        apps: 120,
        restarts: 8,
    };

    /// Publishers (and notifiers) of one service.
    pub fn publishers(&self) -> usize {
        self.apps + self.restarts + EXTERNAL_PEERS
    }

    /// Nodes (processes, dead ones not yet cleaned up included) of one service.
    pub fn nodes(&self) -> usize {
        self.publishers() + 1
    }

    /// Listeners of one inbox's event: its owner, and a dead predecessor per restart.
    pub fn listeners(&self) -> usize {
        1 + self.restarts
    }
}

static LIMITS: Mutex<ShmLimits> = Mutex::new(ShmLimits::DEFAULT);

/// Sets the limits of every service this process creates or opens from now on (module docs);
/// every process of a partition sets the same, before its first shared-memory socket.
pub fn set_limits(limits: ShmLimits) {
    *LIMITS.lock().unwrap_or_else(|p| p.into_inner()) = limits;
}

/// The limits in force in this process.
pub fn limits() -> ShmLimits {
    *LIMITS.lock().unwrap_or_else(|p| p.into_inner())
}

/// An iceoryx2 error that may go away once dead processes are cleaned up (a limit reached,
/// a service being removed or made by someone else at this instant).
trait Retryable {
    fn retryable(&self) -> bool;
}

impl Retryable for SubscriberCreateError {
    fn retryable(&self) -> bool {
        matches!(self, SubscriberCreateError::ExceedsMaxSupportedSubscribers)
    }
}

impl Retryable for PublisherCreateError {
    fn retryable(&self) -> bool {
        matches!(self, PublisherCreateError::ExceedsMaxSupportedPublishers)
    }
}

impl Retryable for ListenerCreateError {
    fn retryable(&self) -> bool {
        matches!(self, ListenerCreateError::ExceedsMaxSupportedListeners)
    }
}

impl Retryable for NotifierCreateError {
    fn retryable(&self) -> bool {
        matches!(self, NotifierCreateError::ExceedsMaxSupportedNotifiers)
    }
}

impl Retryable for PublishSubscribeOpenError {
    fn retryable(&self) -> bool {
        matches!(
            self,
            PublishSubscribeOpenError::ExceedsMaxNumberOfNodes
                | PublishSubscribeOpenError::IsMarkedForDestruction
        )
    }
}

impl Retryable for PublishSubscribeOpenOrCreateError {
    fn retryable(&self) -> bool {
        match self {
            PublishSubscribeOpenOrCreateError::PublishSubscribeOpenError(e) => e.retryable(),
            PublishSubscribeOpenOrCreateError::SystemInFlux => true,
            PublishSubscribeOpenOrCreateError::PublishSubscribeCreateError(_) => false,
        }
    }
}

impl Retryable for EventOpenOrCreateError {
    fn retryable(&self) -> bool {
        match self {
            EventOpenOrCreateError::EventOpenError(e) => matches!(
                e,
                EventOpenError::ExceedsMaxNumberOfNodes | EventOpenError::IsMarkedForDestruction
            ),
            EventOpenOrCreateError::SystemInFlux => true,
            EventOpenOrCreateError::EventCreateError(_) => false,
        }
    }
}

/// Calls `make` until it succeeds, fails for good, or [`PORT_WAIT`] passes; between tries, a
/// clean-up pass removes what dead processes hold (module docs).
fn with_room<T, E: Retryable + std::fmt::Debug>(
    op: &'static str,
    name: &str,
    mut make: impl FnMut() -> Result<T, E>,
) -> Result<T, TransportError> {
    let began = Instant::now();
    let deadline = began + PORT_WAIT;
    let mut last = None;
    loop {
        match make() {
            Ok(v) => {
                if let Some(e) = last.filter(|_| began.elapsed() >= SLOW_PORT) {
                    eprintln!(
                        "rodeo: made {op} of {name:?} after {} ms of retries (last: {e:?})",
                        began.elapsed().as_millis()
                    );
                }
                return Ok(v);
            }
            Err(e) if e.retryable() && Instant::now() < deadline => {
                last = Some(e);
                let done = clean_dead_nodes(CLEANUP_WAIT);
                if done.did_anything() {
                    eprintln!("{} (to make {op} of {name:?})", done.line());
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Err(e) => return Err(shm_err(op, name, e)),
        }
    }
}

fn service_name(name: &str) -> Result<ServiceName, TransportError> {
    ServiceName::new(&format!("rodeo/{name}")).map_err(|e| shm_err("service name", name, e))
}

/// A receiving end: the subscriber of an inbox and the listener that wakes its owner.
pub(crate) struct Inbox {
    pub(crate) name: String,
    pub(crate) sub: Subscriber<Svc, [u8], ()>,
    pub(crate) listener: Listener<Svc>,
}

/// A sending end: a publisher into somebody's inbox and the notifier that wakes them.
pub(crate) struct Outbox {
    pub(crate) publisher: Publisher<Svc, [u8], ()>,
    pub(crate) notifier: Notifier<Svc>,
    service: PubSub,
    /// Small messages waiting to go out together (`super::batch`), and how many.
    pub(crate) batch: std::cell::RefCell<Vec<u8>>,
    pub(crate) batched: std::cell::Cell<u64>,
}

impl Outbox {
    /// Whether the inbox has its receiver (a subscriber, alive or dead and not yet cleaned
    /// up): without one nothing can be delivered, however long a send waits.
    pub(crate) fn has_receiver(&self) -> bool {
        self.service.dynamic_config().number_of_subscribers() > 0
    }
}

type PubSub = iceoryx2::service::port_factory::publish_subscribe::PortFactory<Svc, [u8], ()>;
type EventFactory = iceoryx2::service::port_factory::event::PortFactory<Svc>;

/// The inbox service `rodeo/NAME`: created if `create`, else it must exist.
fn inbox_service(node: &Node<Svc>, name: &str, create: bool) -> Result<PubSub, TransportError> {
    let sname = service_name(name)?;
    let l = limits();
    let builder = || {
        node.service_builder(&sname)
            .publish_subscribe::<[u8]>()
            .max_publishers(l.publishers())
            .max_subscribers(1)
            .max_nodes(l.nodes())
            .subscriber_max_buffer_size(QUEUE_MESSAGES)
            .subscriber_max_borrowed_samples(2)
            .history_size(0)
            .enable_safe_overflow(false)
    };
    if create {
        with_room("open inbox", name, || builder().open_or_create())
    } else {
        with_room("open peer inbox", name, || builder().open())
    }
}

fn event_service(node: &Node<Svc>, name: &str) -> Result<EventFactory, TransportError> {
    let sname = service_name(name)?;
    let l = limits();
    with_room("open event", name, || {
        node.service_builder(&sname)
            .event()
            .max_notifiers(l.publishers())
            .max_listeners(l.listeners())
            .max_nodes(l.nodes())
            .disable_notifier_created_event()
            .disable_notifier_dropped_event()
            .open_or_create()
    })
}

/// Opens (or creates) the inbox `name` and makes its subscriber and listener.
pub(crate) fn open_inbox(node: &Node<Svc>, name: &str) -> Result<Inbox, TransportError> {
    let ps = inbox_service(node, name, true)?;
    let sub = with_room("create subscriber", name, || {
        ps.subscriber_builder().buffer_size(QUEUE_MESSAGES).create()
    })?;
    let ev = event_service(node, name)?;
    let listener = with_room("create listener", name, || ev.listener_builder().create())?;
    Ok(Inbox {
        name: name.to_string(),
        sub,
        listener,
    })
}

/// A publisher and notifier into the inbox `name` (created if `create`, else it must exist).
pub(crate) fn open_outbox(
    node: &Node<Svc>,
    name: &str,
    create: bool,
) -> Result<Outbox, TransportError> {
    let ps = inbox_service(node, name, create)?;
    let publisher = with_room("create publisher", name, || {
        ps.publisher_builder()
            .initial_max_slice_len(INITIAL_SLICE_BYTES)
            .allocation_strategy(AllocationStrategy::PowerOfTwo)
            .backpressure_strategy(BackpressureStrategy::DiscardData)
            .max_loaned_samples(2)
            .create()
    })?;
    let ev = event_service(node, name)?;
    let notifier = with_room("create notifier", name, || ev.notifier_builder().create())?;
    Ok(Outbox {
        publisher,
        notifier,
        service: ps,
        batch: std::cell::RefCell::new(Vec::new()),
        batched: std::cell::Cell::new(0),
    })
}
