//! The request server of a readout node: one core thread that owns the event store, the input
//! and the request descriptors, fed by a [`RequestSource`]: a ZeroMQ ROUTER socket on any
//! endpoint ([`RequestServer::start`]), or the direct in-process link to one tester
//! ([`RequestServer::start_direct`], see [`direct`]). The core logic is the same for both.
//!
//! # Threads
//!
//! The ROS of the paper splits the work over I/O threads, a pending handler, a collector and
//! per-card core threads joined by queues. rodeo keeps the I/O threads (ZeroMQ's, configured
//! on the [`Transport`]: they move bytes between sockets and the network) and folds the rest
//! into **one core thread** that owns every mutable structure: the [`EventStore`], the
//! [`Input`], the descriptor pool and the pending queue. Nothing on the request path is shared,
//! so nothing is locked; the only cross-thread traffic is the ZeroMQ queues and the page
//! reference counts of zero-copy replies. The rejected alternative, a store shared by several
//! request threads, needs a lock or a concurrent index on every insert, lookup and clear (tens
//! of millions a second at 1 MHz with 24 channels) and buys nothing on a 2-core machine.
//!
//! # The loop
//!
//! Each turn: take back pages whose replies were sent; poll the input (fragments into the
//! store); read up to a batch of messages (DataRequest, Clear, KeepAlive) while descriptors
//! are free; re-check pending requests when data or clears arrived, and answer those whose
//! timeout expired. With nothing to do it waits on the socket for up to a millisecond.
//!
//! # Requests (protocol rules 3 and 4)
//!
//! A DataRequest takes a descriptor. If every requested fragment is present, or absent for
//! good (LOST), it is answered at once. Otherwise it waits in the pending queue and is answered
//! as soon as that becomes true (new data, a clear) or when its timeout expires, with each
//! missing fragment an empty ROB fragment flagged FRAGMENT_PENDING or FRAGMENT_LOST. A reply
//! is one header frame (which also carries the empty fragments) and one zero-copy frame per
//! page segment of each present fragment. Every descriptor is answered exactly once.
//!
//! # Back-pressure
//!
//! A descriptor is held from a request's arrival to its reply; only parked requests hold one
//! across turns. Full store: the input stops (see [`input`]). Parked requests never take every
//! descriptor (the loop would then stop reading until a reply freed one): the pool has one more than
//! [`ServerConfig::descriptors`], and with that many requests parked, a request that would
//! wait is answered at once, flagged PENDING (`pending_overflow`; the client asks again), so
//! the loop keeps reading clears and other clients' requests however many requests one client
//! parks (far ahead of the input, or for data that never comes). Which request gives way is
//! the queue's fair share per peer (`descriptor`): the newest of the peer holding the most,
//! when it holds at least two more than the newcomer's peer, else the newcomer; so a flooding
//! client answers its own excess and another client's request that must wait still waits.
//! Size the descriptors to the clients' requests in flight (a partition does: every DCM's
//! `max_outstanding`); a client within them is never answered so.
//!
//! # Hostile or broken peers
//!
//! The core thread never waits for a client. Replies are sent without blocking; a reply to a
//! peer whose queue is full (a client that does not read) is dropped, its pages released, and
//! counted in total and per peer ([`peers`]); the client sees a lost reply and asks again.
//! Requests are bounded: an incoming message larger than [`ServerConfig::max_message_bytes`]
//! is refused by ZeroMQ before it is buffered (the peer's connection is closed); a DataRequest
//! lists each ROB id once in its reply (repeats are ignored and counted in `duplicate_robs`),
//! ids the node does not have are answered FRAGMENT_LOST as before, and one naming more
//! distinct ids than the node has channels is dropped unanswered and counted
//! (`rejected_requests`): the protocol has no error reply, and such a request cannot come from
//! a client that follows it. So a reply never holds more than one fragment per channel.
//!
//! # Inputs
//!
//! Anything that implements [`Input`]: emulated S-LINK cards through DMA superpages
//! ([`crate::inputs::DmaInput`]), the inline firmware-style generator
//! ([`crate::inputs::FirmwareInput`]), network and file channels ([`crate::inputs`]), or the
//! SW ROD fragment builders ([`crate::swrod`]).
//!
//! # Shutdown
//!
//! [`RequestServer::stop`] sets the stop flag; the loop answers every pending request
//! (flagged), then returns the store and the counters.

pub mod channels;
mod core;
mod descriptor;
pub mod direct;
pub mod input;
pub mod peers;
pub mod rejoin;
pub mod source;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{clear_bytes, data_request_bytes, MAX_CLEAR_L1IDS};
use rodeo_transport::socket::{SocketKind, Transport, TransportError};

use crate::store::EventStore;
use crate::swrod::counters::SwRodInputCounters;
pub use channels::{ChannelFigures, ChannelStats};
pub use direct::{direct_link, DirectClient, DirectError, DirectReply, DirectSource};
pub use input::Input;
pub use peers::{PeerDrop, PeerDrops};
use rodeo_format::slink::SlinkCounters;
pub use source::{Ids, Incoming, ReplyRefused, RequestSource, ZmqSource};

/// The default ZeroMQ high-water mark of a request server's ROUTER, in messages per peer
/// (`[ros] high_water_mark` in a partition file): requests beyond it wait in the peer (policy
/// `block`), replies beyond it are dropped and counted (policy `drop_newest`,
/// `rodeo_ros_send_dropped_total`; the client asks again at its timeout).
pub const DEFAULT_HIGH_WATER_MARK: u32 = 10_000;

/// Configuration of a [`RequestServer`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The request endpoint to bind (`inproc://`, `ipc://`, `tcp://`).
    pub endpoint: String,
    /// Request descriptors: the bound on requests waiting in the pending queue (default 1024;
    /// beyond it a request that would wait is answered at once, flagged PENDING).
    pub descriptors: usize,
    /// How long a request may wait for missing fragments (default 200 ms).
    pub pending_timeout: Duration,
    /// Messages read per loop turn before the input is polled again (default 64).
    pub batch: usize,
    /// ZeroMQ high-water mark of the ROUTER, in messages (default [`DEFAULT_HIGH_WATER_MARK`]):
    /// per peer, the replies queued before further replies to that peer are dropped and
    /// counted (policy `drop_newest`, see `peers`), and the requests queued before the peer is
    /// held back (policy `block`).
    pub high_water_mark: u32,
    /// Largest incoming message accepted, in bytes (ZMQ_MAXMSGSIZE): a peer sending a larger
    /// one is disconnected by ZeroMQ before the message is buffered. `None` (the default):
    /// [`default_max_message_bytes`] for the node's channels.
    pub max_message_bytes: Option<usize>,
    /// Pin the core thread to this CPU (default: none, the kernel places it). Whether the
    /// kernel accepted is in [`Stopped::core_pinned`].
    pub core_cpu: Option<usize>,
    /// A node restarted into a running run: the extended L1ID its inputs start at. Its clears
    /// then also release what no clear will ever name (see [`rejoin`]). Default `None`.
    pub rejoin_from: Option<u32>,
    /// A node restarted into a running run: the front its emulated inputs follow, which its
    /// clears move on ([`crate::inputs::follow`]). Default `None`.
    pub run_front: Option<crate::inputs::follow::RunFront>,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            endpoint: "tcp://127.0.0.1:*".into(),
            descriptors: 1024,
            pending_timeout: Duration::from_millis(200),
            batch: 64,
            high_water_mark: DEFAULT_HIGH_WATER_MARK,
            max_message_bytes: None,
            core_cpu: None,
            rejoin_from: None,
            run_front: None,
        }
    }
}

/// The default limit on a readout node's incoming messages, from the protocol: the larger of a
/// DataRequest naming each of its `channels` ROBs and a Clear of the largest clear group a
/// partition may configure ([`MAX_CLEAR_L1IDS`]), about 400 kB. Anything larger cannot come
/// from a client that follows the protocol.
pub fn default_max_message_bytes(channels: usize) -> usize {
    data_request_bytes(channels).max(clear_bytes(MAX_CLEAR_L1IDS))
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The endpoint is not a valid URL.
    #[error("bad endpoint: {0}")]
    Endpoint(String),
    /// Socket setup or bind failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The core thread could not be spawned.
    #[error("cannot start the core thread: {0}")]
    Spawn(#[from] std::io::Error),
}

/// Adds `n` to a [`ServerStats`] counter. Only the core thread writes them, so a plain load and
/// store do (readers see one value or the next); a locked read-modify-write would also wait
/// for every earlier store of the thread, such as the input's writes into cold pages.
#[inline(always)]
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

macro_rules! counters {
    ($(#[$m:meta])* $name:ident, $snap:ident { $($(#[$fm:meta])* $f:ident),* $(,)? }) => {
        /// Live counters of the server: written by the core thread alone, with plain loads and
        /// stores (see `bump`), read by anyone. Do not write them from elsewhere: such a write
        /// could be lost.
        #[derive(Debug, Default)]
        pub struct $name { $($(#[$fm])* pub $f: AtomicU64,)* }
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $snap { $($(#[$fm])* pub $f: u64,)* }
        impl $name {
            /// A snapshot.
            pub fn snapshot(&self) -> $snap {
                $snap { $($f: self.$f.load(Ordering::Relaxed),)* }
            }
        }
    };
}

counters!(
    /// A snapshot of [`ServerStats`].
    ServerStats, ServerCounters {
    /// DataRequests read.
    requests,
    /// DataReplies sent (one per request, exactly).
    replies,
    /// Fragments sent (present ones).
    fragments_sent,
    /// Payload bytes of replies.
    bytes_sent,
    /// Missing fragments answered FRAGMENT_PENDING (timeout, stop, or a full pending queue).
    pending_fragments,
    /// Missing fragments answered FRAGMENT_LOST.
    lost_fragments,
    /// Requests that waited in the pending queue.
    parked,
    /// Parked requests answered because their timeout expired.
    timeouts,
    /// Requests that would have waited but found the pending queue full (as many parked as
    /// [`ServerConfig::descriptors`]): it, or the newest parked request of a peer holding more
    /// of the queue (the fair share, `descriptor`), answered at once, missing fragments flagged
    /// PENDING.
    pending_overflow,
    /// Requests pending now (gauge).
    pending_now,
    /// Clear messages read.
    clears,
    /// L1IDs listed in clears.
    cleared_l1ids,
    /// Gaps in the clear sequence numbers.
    clear_gaps,
    /// KeepAlives read.
    keepalives,
    /// Messages that did not decode (counted, dropped).
    bad_messages,
    /// Messages of a type a readout node does not take.
    unexpected_messages,
    /// Requested ROB ids this node does not have (answered LOST).
    unknown_robs,
    /// Replies ZeroMQ refused because the peer is gone or unknown.
    send_errors,
    /// Replies dropped because the requesting peer's queue was full (it does not read); per
    /// peer in [`PeerDrops`].
    send_dropped,
    /// DataRequests naming more distinct ROB ids than the node has channels: dropped
    /// unanswered (the protocol has no error reply).
    rejected_requests,
    /// ROB ids repeated within one DataRequest (ignored: each ROB is answered once).
    duplicate_robs,
    /// Loop turns that found every descriptor taken (none with the spare descriptor: kept as a
    /// guard).
    descriptors_exhausted,
    /// Fragments taken from the input (stored or dropped).
    input_fragments,
    /// Times the input stalled on a full store so far (published when the core is idle; the
    /// final count is [`Stopped::input_stalls`]).
    input_stalls,
});

/// What a stopped server hands back.
#[derive(Debug)]
pub struct Stopped {
    /// The store, with whatever was not cleared.
    pub store: EventStore,
    /// Final counters.
    pub counters: ServerCounters,
    /// The input's S-LINK check counters.
    pub slink: SlinkCounters,
    /// Back-pressure events of the input (card stalls).
    pub input_stalls: u64,
    /// CPU time the core thread used (busy polling included).
    pub core_cpu: std::time::Duration,
    /// The part of [`Stopped::core_cpu`] spent waiting idle for a message (going to sleep and
    /// being woken): what a saturated node would not spend. `core_cpu - core_idle_cpu` is the
    /// CPU the work took.
    pub core_idle_cpu: std::time::Duration,
    /// The core thread ran pinned to [`ServerConfig::core_cpu`] (false: no CPU asked for, or
    /// the kernel refused it).
    pub core_pinned: bool,
    /// Replies dropped per peer whose queue was full (see [`peers`]).
    pub peer_drops: Vec<PeerDrop>,
    /// The SW ROD input's builder and link counters, for a node fed by fragment builders
    /// (filled in by [`crate::node::ReadoutNode::stop`]; `None` otherwise).
    pub swrod: Option<SwRodInputCounters>,
    /// The SW ROD input's first error (a builder that failed or panicked, or its thread that
    /// did): its ROB's fragments stopped there, and the builder counters are the last ones
    /// published. `None` when every builder ran to its end, or for other inputs.
    pub swrod_error: Option<String>,
    /// Units an input of data from outside still held when the core thread gave up reading it
    /// in at the stop ([`Input::units_left`]; 0 when it read everything, or for other inputs).
    pub input_units_left: u64,
    /// The input carries data from outside (a detector's network receivers or link files:
    /// [`Input::end_links`]), whose every unit its receivers counted must reach the store;
    /// false for emulated cards, which run ahead by design.
    pub input_from_outside: bool,
}

/// A running request server. See the module docs.
pub struct RequestServer {
    endpoint: String,
    stop: Arc<AtomicBool>,
    stats: Arc<ServerStats>,
    drops: Arc<PeerDrops>,
    channels: Arc<ChannelStats>,
    thread: Option<JoinHandle<Stopped>>,
}

impl std::fmt::Debug for RequestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestServer")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl RequestServer {
    /// Binds the endpoint and starts the core thread with `store` and `input`.
    pub fn start(
        transport: &Transport,
        config: &ServerConfig,
        store: EventStore,
        input: Box<dyn Input>,
    ) -> Result<RequestServer, ServerError> {
        let ep =
            Endpoint::parse(&config.endpoint).map_err(|e| ServerError::Endpoint(e.to_string()))?;
        let socket = transport.socket(SocketKind::Router)?;
        socket.set_high_water_marks(config.high_water_mark)?;
        let max = config
            .max_message_bytes
            .unwrap_or_else(|| default_max_message_bytes(store.channels()));
        socket.set_max_message_size(i64::try_from(max).unwrap_or(i64::MAX))?;
        // The core thread receives on every turn (which flushes): the replies of one batch of
        // requests go out together (the stream transport; the others batch on their own).
        socket.set_batching(true);
        let endpoint = socket.bind(&ep)?;
        RequestServer::start_with(ZmqSource::new(socket, endpoint), config, store, input)
    }

    /// Starts the core thread with `store` and `input`, answering the one client of a direct
    /// in-process link (no ZeroMQ; see [`direct`]). `config.descriptors` also bounds the
    /// client's requests in flight; `config.endpoint` is not used.
    pub fn start_direct(
        config: &ServerConfig,
        store: EventStore,
        input: Box<dyn Input>,
    ) -> Result<(RequestServer, DirectClient), ServerError> {
        let channels = store.channels();
        let (source, client) = direct::direct_link_for(
            Some(std::sync::Arc::clone(store.table())),
            config.descriptors,
            channels.max(128),
            channels * 2,
            64 + channels * 4 * crate::store::EMPTY_ROB_WORDS,
        );
        let server = RequestServer::start_with(source, config, store, input)?;
        Ok((server, client))
    }

    /// Starts the core thread on any request source.
    pub fn start_with<S: RequestSource>(
        source: S,
        config: &ServerConfig,
        store: EventStore,
        input: Box<dyn Input>,
    ) -> Result<RequestServer, ServerError> {
        let endpoint = source.endpoint();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ServerStats::default());
        let drops = Arc::new(PeerDrops::default());
        let channels = Arc::new(ChannelStats::for_store(&store));
        let core = core::Core::new(
            source,
            config.clone(),
            store,
            input,
            Arc::clone(&stop),
            core::CoreFigures {
                stats: Arc::clone(&stats),
                drops: Arc::clone(&drops),
                channels: Arc::clone(&channels),
            },
        );
        let thread = std::thread::Builder::new()
            .name("ros-core".into())
            .spawn(move || core.run())?;
        Ok(RequestServer {
            endpoint,
            stop,
            stats,
            drops,
            channels,
            thread: Some(thread),
        })
    }

    /// The endpoint actually bound (tcp port resolved).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Live counters.
    pub fn stats(&self) -> ServerCounters {
        self.stats.snapshot()
    }

    /// The live counters themselves, for a monitor that outlives this handle's borrow.
    pub fn shared_stats(&self) -> Arc<ServerStats> {
        Arc::clone(&self.stats)
    }

    /// Replies dropped per peer so far (shared with the core thread, which adds to it).
    pub fn peer_drops(&self) -> Arc<PeerDrops> {
        Arc::clone(&self.drops)
    }

    /// Per-channel figures as the core thread last published them (shared with it).
    pub fn channel_stats(&self) -> Arc<ChannelStats> {
        Arc::clone(&self.channels)
    }

    /// Stops the core thread (pending requests are answered first) and hands back the store.
    pub fn stop(mut self) -> Stopped {
        self.stop.store(true, Ordering::Release);
        let t = self.thread.take().expect("joined only here");
        match t.join() {
            Ok(s) => s,
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

impl Drop for RequestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
