//! The DMA-channel interface, on the ALICE O2 ReadoutCard model, and an emulated channel.
//!
//! # The contract a driver implements
//!
//! A DMA channel owns two bounded queues:
//!
//! 1. the **transfer queue**: empty superpages the reader pushed ([`DmaChannel::push_superpage`]);
//!    the card takes them in order and fills them;
//! 2. the **ready queue**: filled superpages, in the order they were filled, which the reader pops
//!    ([`DmaChannel::pop_superpage`]) and, once done with the data, eventually pushes again.
//!
//! A superpage is a contiguous buffer (see [`SuperpageBuffer`]); the card writes whole units into
//! it (FELIX blocks or ROD fragments, never split across superpages) and reports how many bytes
//! and units it wrote ([`Filled`]). Ownership moves with the superpage: while the card holds it
//! the reader cannot touch it, which is the safety argument a real driver makes with its IOMMU
//! mapping.
//!
//! # Back-pressure
//!
//! When the transfer queue is empty the card has nowhere to write: it **stalls** and counts the
//! stall (an XOFF to the front-end). Nothing is ever dropped. When the ready queue is full the
//! card keeps the filled superpage and stalls the same way. [`ChannelCounters::stalls`] and
//! [`ChannelCounters::stall_ns`] show how often and for how long.
//!
//! # Threads: one DMA engine per card
//!
//! An emulated card is one thread (its DMA engine) filling the superpages of all its channels
//! in turn ([`EmulatedChannel::start_card`]; [`EmulatedChannel::start`] is a card of one
//! channel): per turn, each channel that has an empty superpage and room on its ready queue
//! gets as many units as its limits grant (all that fit when unlimited). A channel without an
//! empty superpage, a full ready queue or no grant simply waits for the next turn; only when no
//! channel of the card could do anything does the thread back off (a short spin, a few yields,
//! then sleeps growing to 100 us), so a card of 12 stalled channels costs one thread's
//! wake-ups, not twelve. The CPU time the engine thread used is published at most every
//! millisecond ([`EmulatedChannel::card_cpu_ns`], the same figure on every channel of a card),
//! so that a measurement can say what the emulation cost.
//!
//! Sources fed from outside ([`Generator::waits_for_input`], a network receiver) wait inside
//! their `fill`; give each its own card so that it never holds other channels up.
//!
//! # When a partly filled superpage is handed over
//!
//! A source without limits that does not wait (an emulator running free) fills a superpage in
//! one call and hands it over at once. The others (a source paced by
//! [`EmulatedConfig::max_units_per_s`] or `max_bytes_per_s`, a replay at a rate, a network
//! receiver) write a superpage over many calls, and hand it over when it is full, when a call
//! writes nothing (the source paused), or at the latest [`FLUSH_INTERVAL`] after its first
//! unit was written, whatever the rate: the engine reads the clock once per turn, and a
//! receiver that waits for input ([`Generator::fill_until`]) stops waiting at that deadline.
//! So a unit reaches the reader within about [`FLUSH_INTERVAL`] of its arrival at 1 Hz as at
//! the link's limit, and never waits for a pause in the stream.
//!
//! # Lazy channels: no thread at all
//!
//! A channel started with [`EmulatedChannel::start_lazy`] has no engine thread: its reader's
//! thread plays the DMA engine when it pops and finds nothing ready, writing the next
//! superpage there and then (the same turn an engine thread would run, with the same limits,
//! stalls and end of input). A real card's DMA costs the host no CPU; an emulation always
//! does, and lazily it costs the least: no hand-over between threads, no thread waking up or
//! backing off, and the data is still in the reader's cache when it reads it. It suits a
//! reader that has cores of its own to spend (the SW ROD's builder threads), not one whose
//! single thread is the bottleneck (a readout node's core thread reading S-LINK), which is
//! better served by a card thread beside it. The CPU time spent writing is counted on the
//! channel ([`EmulatedChannel::card_cpu_ns`]), as an engine thread's is; or, started with
//! [`EmulatedChannel::start_lazy_untimed`], its wall time ([`DmaChannel::reader_write_ns`],
//! no system call), which the reader turns into CPU time (`card_cpu_ns` then stays 0).
//!
//! # Shutdown
//!
//! [`EmulatedChannel::stop`] (or drop) stops the channel after the unit it is writing (and
//! waits until its engine has let it go); the card's thread ends with its last channel.
//! Superpages still queued can be popped (filled) or are dropped with the channel (empty).
//!
//! [`DmaChannel::end_link`] ends the link without losing what the card holds: the engine
//! stops writing, hands over its partly filled superpage and the one a full ready queue kept
//! back (waiting, turn after turn, for the reader to make room), and only then takes the link
//! down. A reader that keeps popping until the link is down and the ready queue empty has
//! every unit the card wrote: a network receiver's datagrams received before the end are all
//! read (a readout node's stop, `rodeo_ros`'s core thread). `stop` still ends at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rodeo_memory::{Backoff, BackoffSpec, BoundedQueue, FullPolicy};

mod engine;
mod limits;

use engine::{engine_loop, Lane};

/// The longest a unit waits in a partly filled superpage before the channel hands the
/// superpage over (module docs, "When a partly filled superpage is handed over").
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(5);

/// A contiguous buffer a card can fill: a pool superpage, or plain memory in tests.
pub trait SuperpageBuffer: Send + 'static {
    /// The whole buffer.
    fn as_bytes(&self) -> &[u8];
    /// The whole buffer, writable.
    fn as_bytes_mut(&mut self) -> &mut [u8];
}

impl SuperpageBuffer for Vec<u8> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl SuperpageBuffer for Box<[u8]> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// A superpage the card has filled.
#[derive(Debug)]
pub struct Filled<S> {
    /// The buffer; its first `bytes_used` bytes hold `units` whole units.
    pub superpage: S,
    /// Bytes written.
    pub bytes_used: usize,
    /// Units (blocks, fragments) written.
    pub units: u64,
    /// Position of this superpage in the channel's fill order, from 0.
    pub sequence: u64,
    /// The length in bytes of every unit of the superpage, when the source reported it and
    /// every unit has it (0: not reported): the card's descriptor, as a real card reports each
    /// fragment's length in its DMA descriptor, so the reader finds a unit's end without
    /// scanning for it ([`Fill::unit_bytes`]).
    pub unit_bytes: usize,
}

impl<S: SuperpageBuffer> Filled<S> {
    /// The bytes the card wrote.
    pub fn data(&self) -> &[u8] {
        let b = self.superpage.as_bytes();
        &b[..self.bytes_used.min(b.len())]
    }
}

/// Counters of one channel (64-bit, monotonic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelCounters {
    /// Superpages filled and put on the ready queue.
    pub superpages: u64,
    /// Bytes written into superpages.
    pub bytes: u64,
    /// Units written (FELIX blocks or ROD fragments).
    pub units: u64,
    /// Times the card found no empty superpage (or a full ready queue) and had to wait.
    pub stalls: u64,
    /// Total time spent stalled, in nanoseconds.
    pub stall_ns: u64,
}

/// Observable state of a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelStatus {
    /// The link delivers data (emulated: the card thread runs).
    pub link_up: bool,
    /// Empty superpages the card may still take.
    pub transfer_queue_len: usize,
    /// Filled superpages waiting for the reader.
    pub ready_queue_len: usize,
    /// Counters.
    pub counters: ChannelCounters,
}

/// A DMA channel of a readout card. See the module docs for the contract.
pub trait DmaChannel<S: SuperpageBuffer>: Send + Sync {
    /// Gives the card an empty superpage; returns it back if the transfer queue is full.
    fn push_superpage(&self, superpage: S) -> Result<(), S>;
    /// Takes the oldest filled superpage, if any.
    fn pop_superpage(&self) -> Option<Filled<S>>;
    /// Free slots in the transfer queue.
    fn transfer_queue_available(&self) -> usize;
    /// The channel's state and counters.
    fn status(&self) -> ChannelStatus;
    /// Wall time, in nanoseconds, that this channel's pops have spent writing superpages so
    /// far: a lazy emulated card writes in its reader's pops
    /// ([`EmulatedChannel::start_lazy_untimed`]); 0 for a channel written by its own engine
    /// (hardware, or a card thread) or one that times its writing in CPU time itself.
    fn reader_write_ns(&self) -> u64 {
        0
    }
    /// Asks the card to end the link once everything it wrote is handed over: it writes no
    /// more, hands over its partly filled superpage (and one a full ready queue kept back, as
    /// soon as the reader makes room), then takes the link down
    /// ([`ChannelStatus::link_up`] false). Does not wait; the reader keeps popping until the
    /// link is down and the ready queue empty. A channel that cannot end this way ignores it.
    fn end_link(&self) {}
}

impl SuperpageBuffer for rodeo_memory::Superpage {
    fn as_bytes(&self) -> &[u8] {
        self
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// What a generator wrote into a buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fill {
    /// Bytes written from the start of the buffer.
    pub bytes: usize,
    /// Whole units written.
    pub units: u64,
    /// The length in bytes of every unit written, when the source knows it and every unit
    /// has it (0: not reported, or units of different lengths). A real card reports each
    /// fragment's length in its descriptor (the S-LINK control bit ends a fragment, not a
    /// word's value); an emulator that writes units of one size reports it here and the
    /// channel passes it on in [`Filled::unit_bytes`].
    pub unit_bytes: usize,
}

impl Fill {
    /// Adds `next`, written after this, to it: a unit length is kept only when both report
    /// the same (or one of them wrote nothing).
    pub fn append(&mut self, next: Fill) {
        if next.units > 0 {
            self.unit_bytes = if self.units == 0 || self.unit_bytes == next.unit_bytes {
                next.unit_bytes
            } else {
                0
            };
        }
        self.bytes += next.bytes;
        self.units += next.units;
    }

    /// One more unit of `bytes` bytes written after the others (for a generator's loop).
    pub fn push_unit(&mut self, bytes: usize) {
        self.append(Fill {
            bytes,
            units: 1,
            unit_bytes: bytes,
        });
    }
}

impl<G: Generator + ?Sized> Generator for Box<G> {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        (**self).fill(buf, max_units)
    }
    fn fill_until(
        &mut self,
        buf: &mut [u8],
        max_units: u64,
        flush_by: &mut Option<Instant>,
    ) -> Fill {
        (**self).fill_until(buf, max_units, flush_by)
    }
    fn is_finished(&self) -> bool {
        (**self).is_finished()
    }
    fn waits_for_input(&self) -> bool {
        (**self).waits_for_input()
    }
}

/// The data source of an emulated card: writes whole units (never a partial one) into buffers.
///
/// Emulators, file players and network receivers are all generators: the channel thread asks
/// for units, the generator writes them. Only the channel knows about superpages and queues.
pub trait Generator: Send + 'static {
    /// Writes at most `max_units` whole units at the start of `buf`. Writing nothing into an
    /// empty superpage means a unit can never fit (unless [`Generator::waits_for_input`]); the
    /// channel reports that and stops.
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill;

    /// [`Generator::fill`] into a superpage that must be handed over by `*flush_by` (`None`:
    /// it holds no unit yet). A source that waits for input returns by that deadline, and when
    /// it writes the superpage's first unit sets it to that unit's arrival plus
    /// [`FLUSH_INTERVAL`]; the channel passes the same deadline until it hands the superpage
    /// over. The default calls `fill` (a source that never waits returns at once anyway; the
    /// channel sets the deadline for it).
    fn fill_until(
        &mut self,
        buf: &mut [u8],
        max_units: u64,
        flush_by: &mut Option<Instant>,
    ) -> Fill {
        let _ = flush_by;
        self.fill(buf, max_units)
    }

    /// True when the generator has nothing more to send (a file played once); the channel then
    /// hands over its last superpage and stops.
    fn is_finished(&self) -> bool {
        false
    }

    /// True for sources fed from outside (a network receiver): `fill` waits a bounded time
    /// (milliseconds) for input, and writing nothing means nothing arrived yet. The channel then
    /// hands over a partly filled superpage, so data never waits for more data to come; and it
    /// hands one over [`FLUSH_INTERVAL`] after its first unit even if the input never pauses.
    fn waits_for_input(&self) -> bool {
        false
    }
}

/// Configuration of an emulated channel.
#[derive(Debug, Clone, Copy)]
pub struct EmulatedConfig {
    /// Capacity of each of the two queues (superpages).
    pub queue_depth: usize,
    /// Maximum units per second; `None` runs as fast as memory allows.
    pub max_units_per_s: Option<f64>,
    /// Maximum bytes per second (a link's bandwidth, e.g. 250 MB/s for S-LINK); `None` for no
    /// bandwidth limit. Both limits apply when both are set.
    pub max_bytes_per_s: Option<f64>,
}

impl Default for EmulatedConfig {
    fn default() -> EmulatedConfig {
        EmulatedConfig {
            queue_depth: 64,
            max_units_per_s: None,
            max_bytes_per_s: None,
        }
    }
}

/// What an emulated channel's engine (a card thread, or a lazy channel's reader) shares with
/// its reader: the two superpage queues, the stop and running flags and the transfer counters.
struct ChannelState<S> {
    /// Empty superpages from the reader: `refuse` (the reader keeps a superpage that does
    /// not fit; [`DmaChannel::push_superpage`] hands it back).
    transfer: BoundedQueue<S>,
    /// Filled superpages for the reader: `block` (the engine keeps a superpage that does not
    /// fit and retries on its next turn, the channel stalled meanwhile).
    ready: BoundedQueue<Filled<S>>,
    stop: AtomicBool,
    /// [`DmaChannel::end_link`]: hand over everything written, then down.
    ending: AtomicBool,
    running: AtomicBool,
    superpages: AtomicU64,
    bytes: AtomicU64,
    units: AtomicU64,
    stalls: AtomicU64,
    stall_ns: AtomicU64,
}

impl<S: SuperpageBuffer> ChannelState<S> {
    fn new(depth: usize) -> ChannelState<S> {
        ChannelState {
            transfer: BoundedQueue::new("cards.dma.transfer", depth, FullPolicy::Refuse),
            ready: BoundedQueue::new(
                "cards.dma.ready",
                depth,
                FullPolicy::Block(BackoffSpec::IDLE),
            ),
            stop: AtomicBool::new(false),
            ending: AtomicBool::new(false),
            running: AtomicBool::new(true),
            superpages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            units: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            stall_ns: AtomicU64::new(0),
        }
    }
}

impl<S> ChannelState<S> {
    fn status(&self) -> ChannelStatus {
        ChannelStatus {
            link_up: self.running.load(Ordering::Acquire),
            transfer_queue_len: self.transfer.len(),
            ready_queue_len: self.ready.len(),
            counters: ChannelCounters {
                superpages: self.superpages.load(Ordering::Relaxed),
                bytes: self.bytes.load(Ordering::Relaxed),
                units: self.units.load(Ordering::Relaxed),
                stalls: self.stalls.load(Ordering::Relaxed),
                stall_ns: self.stall_ns.load(Ordering::Relaxed),
            },
        }
    }
}

/// A cheap shared handle reading a channel's [`ChannelStatus`] after the channel itself has
/// gone to its reader (behind a `dyn DmaChannel`, in another thread): what a monitor keeps
/// ([`EmulatedChannel::status_reader`]). The last status stays readable after the channel
/// stopped (link down).
#[derive(Clone)]
pub struct StatusReader(Arc<dyn Fn() -> ChannelStatus + Send + Sync>);

impl StatusReader {
    /// The channel's status now.
    pub fn status(&self) -> ChannelStatus {
        (self.0)()
    }

    /// A reader that always answers `status` (a channel that never started).
    pub fn fixed(status: ChannelStatus) -> StatusReader {
        StatusReader(Arc::new(move || status))
    }
}

impl std::fmt::Debug for StatusReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StatusReader").field(&self.status()).finish()
    }
}

/// What a card's engine thread shares with its channels.
struct EngineState {
    stop: AtomicBool,
    cpu_ns: AtomicU64,
    /// An untimed lazy channel's writing, in wall-clock nanoseconds (vDSO reads).
    write_ns: AtomicU64,
}

/// A card's DMA-engine thread, shared by its channels: stopped and joined when the last one
/// goes (the thread itself holds only the [`EngineState`], so it never joins itself).
struct Engine {
    state: Arc<EngineState>,
    channels: usize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    fn finished(&self) -> bool {
        self.thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        let t = self
            .thread
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

/// A DMA channel of an emulated card: the card's engine thread runs a [`Generator`] for it,
/// or, for a lazy channel, the reader's thread does when it pops (see the module docs).
pub struct EmulatedChannel<S: SuperpageBuffer> {
    shared: Arc<ChannelState<S>>,
    engine: Option<Arc<Engine>>,
    /// A lazy channel's engine: no thread, its one lane turned by the readers.
    lazy: Option<Lazy>,
}

/// The engine of a lazy channel.
struct Lazy {
    /// Its writing time: CPU (`cpu_ns`), or wall (`write_ns`) when untimed.
    state: Arc<EngineState>,
    /// Its one lane.
    lane: Mutex<Box<dyn LazyLane>>,
}

/// A lane a lazy channel's reader turns (type-erased over the generator).
trait LazyLane: Send {
    /// One engine turn (see `Lane::turn`); false when the channel did not move or is down.
    fn turn_once(&mut self) -> bool;
    /// The channel is stopped (what was written is handed over) and goes down.
    fn stop_now(&mut self);
}

impl<S: SuperpageBuffer, G: Generator> LazyLane for Lane<S, G> {
    fn turn_once(&mut self) -> bool {
        !self.done && self.turn()
    }

    fn stop_now(&mut self) {
        if !self.done {
            self.turn();
        }
    }
}

/// Engine turns a lazy pop runs at most before it gives up for now: enough to take a
/// superpage, fill it and hand it over, or to push one a full ready queue kept back.
const LAZY_TURNS: usize = 4;

impl<S: SuperpageBuffer> EmulatedChannel<S> {
    /// Starts a card of one channel (its engine thread named `name`) writing with `generator`.
    pub fn start<G: Generator>(
        name: &str,
        config: EmulatedConfig,
        generator: G,
    ) -> std::io::Result<Self> {
        let mut v = Self::start_card(name, vec![(config, generator)])?;
        Ok(v.remove(0))
    }

    /// A channel without a thread (see "Lazy channels" in the module docs): `generator`
    /// writes a superpage in the thread that pops one and finds none ready.
    pub fn start_lazy<G: Generator>(config: EmulatedConfig, generator: G) -> Self {
        Self::lazy(config, generator, true)
    }

    /// A lazy channel whose writing is timed by the wall clock (a vDSO read, no system call:
    /// [`DmaChannel::reader_write_ns`]), not in CPU time: [`EmulatedChannel::card_cpu_ns`]
    /// stays 0, and the reader turns the wall time into CPU time (the SW ROD's builder pool
    /// scales it by its thread's CPU clock, read once per turn over all its channels). Timing
    /// every write in CPU time reads the thread's CPU clock twice per superpage, a system call
    /// each (no vDSO for thread clocks): a cost a reader that pops tens of thousands of
    /// superpages a second should not pay.
    pub fn start_lazy_untimed<G: Generator>(config: EmulatedConfig, generator: G) -> Self {
        Self::lazy(config, generator, false)
    }

    fn lazy<G: Generator>(config: EmulatedConfig, generator: G, timed: bool) -> Self {
        let state = Arc::new(EngineState {
            stop: AtomicBool::new(false),
            cpu_ns: AtomicU64::new(0),
            write_ns: AtomicU64::new(0),
        });
        let mut lane = Lane::new(config, generator);
        lane.fill_clock = Some((
            Arc::clone(&state),
            if timed {
                FillClock::ThreadCpu
            } else {
                FillClock::Wall
            },
        ));
        let shared = Arc::clone(&lane.shared);
        EmulatedChannel {
            shared,
            engine: None,
            lazy: Some(Lazy {
                state,
                lane: Mutex::new(Box::new(lane)),
            }),
        }
    }

    /// Starts a card of `channels.len()` channels, each with its configuration and generator,
    /// driven by one engine thread named `name` (see the module docs); returns the channels in
    /// the order given.
    pub fn start_card<G: Generator>(
        name: &str,
        channels: Vec<(EmulatedConfig, G)>,
    ) -> std::io::Result<Vec<Self>> {
        let lanes: Vec<Lane<S, G>> = channels
            .into_iter()
            .map(|(config, generator)| Lane::new(config, generator))
            .collect();
        let channels: Vec<Arc<ChannelState<S>>> =
            lanes.iter().map(|l| Arc::clone(&l.shared)).collect();
        let state = Arc::new(EngineState {
            stop: AtomicBool::new(false),
            cpu_ns: AtomicU64::new(0),
            write_ns: AtomicU64::new(0),
        });
        let engine = Arc::new(Engine {
            state: Arc::clone(&state),
            channels: channels.len(),
            thread: Mutex::new(None),
        });
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || engine_loop(lanes, &state))?;
        *engine.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
        Ok(channels
            .into_iter()
            .map(|shared| EmulatedChannel {
                shared,
                engine: Some(Arc::clone(&engine)),
                lazy: None,
            })
            .collect())
    }

    /// Stops this channel and waits until its card's engine has let it go (the engine thread
    /// ends with the card's last channel).
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(lazy) = &self.lazy {
            lazy.lane
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .stop_now();
        }
        let Some(engine) = self.engine.take() else {
            return;
        };
        // The engine marks the channel down at its next turn (after the unit it writes).
        let mut backoff = Backoff::new(BackoffSpec::IDLE);
        while self.shared.running.load(Ordering::Acquire) && !engine.finished() {
            backoff.wait();
        }
        self.shared.running.store(false, Ordering::Release);
        // The last channel's engine is joined as the Arc goes.
        drop(engine);
    }

    /// CPU time the card's engine thread has used so far, in nanoseconds (published at most
    /// every millisecond; the same figure on every channel of the card); for a lazy channel,
    /// the CPU time its readers' threads spent writing its superpages (0 for an untimed one:
    /// see [`DmaChannel::reader_write_ns`]).
    pub fn card_cpu_ns(&self) -> u64 {
        self.card_cpu().ns()
    }

    /// Channels of this channel's card (sharing its engine thread).
    pub fn card_channels(&self) -> usize {
        self.engine.as_ref().map_or(0, |e| e.channels)
    }

    /// A handle reading this channel's status after the channel has gone to its reader.
    pub fn status_reader(&self) -> StatusReader {
        let shared = Arc::clone(&self.shared);
        StatusReader(Arc::new(move || shared.status()))
    }

    /// A handle reading the card's engine CPU time after the channel has gone behind a
    /// `dyn DmaChannel` (one per card is enough: every channel of a card reads the same).
    pub fn card_cpu(&self) -> CardCpu {
        match (&self.engine, &self.lazy) {
            (Some(e), _) => CardCpu(Some(Arc::clone(&e.state))),
            (None, Some(lazy)) => CardCpu(Some(Arc::clone(&lazy.state))),
            (None, None) => CardCpu(None),
        }
    }
}

/// A cheap shared handle on a card engine's CPU time ([`EmulatedChannel::card_cpu`]).
#[derive(Clone)]
pub struct CardCpu(Option<Arc<EngineState>>);

impl std::fmt::Debug for CardCpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CardCpu").field(&self.ns()).finish()
    }
}

impl CardCpu {
    /// CPU time the engine thread has used so far, in nanoseconds (published at most every
    /// millisecond, and when the thread ends).
    pub fn ns(&self) -> u64 {
        self.0
            .as_ref()
            .map_or(0, |s| s.cpu_ns.load(Ordering::Relaxed))
    }
}

impl<S: SuperpageBuffer> Drop for EmulatedChannel<S> {
    fn drop(&mut self) {
        self.stop();
    }
}

impl<S: SuperpageBuffer> DmaChannel<S> for EmulatedChannel<S> {
    fn push_superpage(&self, superpage: S) -> Result<(), S> {
        self.shared
            .transfer
            .push(superpage)
            .map(drop)
            .map_err(|refused| refused.item)
    }

    fn pop_superpage(&self) -> Option<Filled<S>> {
        if let Some(f) = self.shared.ready.pop() {
            return Some(f);
        }
        // A lazy channel's reader writes the next superpage now; a reader that finds another
        // one doing so comes back later.
        let lazy = self.lazy.as_ref()?;
        let mut lane = lazy.lane.try_lock().ok()?;
        for _ in 0..LAZY_TURNS {
            if !lane.turn_once() || !self.shared.ready.is_empty() {
                break;
            }
        }
        drop(lane);
        self.shared.ready.pop()
    }

    fn transfer_queue_available(&self) -> usize {
        self.shared.transfer.capacity() - self.shared.transfer.len()
    }

    fn status(&self) -> ChannelStatus {
        self.shared.status()
    }

    fn reader_write_ns(&self) -> u64 {
        self.lazy
            .as_ref()
            .map_or(0, |l| l.state.write_ns.load(Ordering::Relaxed))
    }

    fn end_link(&self) {
        self.shared.ending.store(true, Ordering::Release);
    }
}

/// How a lazy channel times its writing (its reader's thread writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FillClock {
    /// The thread's CPU clock (two system calls per superpage): `EngineState::cpu_ns`.
    ThreadCpu,
    /// The wall clock (vDSO reads): `EngineState::write_ns`, for the reader to scale.
    Wall,
}

#[cfg(test)]
mod tests;
