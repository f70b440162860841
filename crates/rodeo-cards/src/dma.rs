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
//! # Shutdown
//!
//! [`EmulatedChannel::stop`] (or drop) stops the card thread after the unit it is writing;
//! superpages still queued can be popped (filled) or are dropped with the channel (empty).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

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

    /// True when the generator has nothing more to send (a file played once); the channel then
    /// hands over its last superpage and stops.
    fn is_finished(&self) -> bool {
        false
    }

    /// True for sources fed from outside (a network receiver): `fill` waits a bounded time
    /// (milliseconds) for input, and writing nothing means nothing arrived yet. The channel then
    /// hands over a partly filled superpage, so data never waits for more data to come.
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

struct Shared<S> {
    transfer: ArrayQueue<S>,
    ready: ArrayQueue<Filled<S>>,
    stop: AtomicBool,
    running: AtomicBool,
    superpages: AtomicU64,
    bytes: AtomicU64,
    units: AtomicU64,
    stalls: AtomicU64,
    stall_ns: AtomicU64,
}

/// A DMA channel whose card is a thread running a [`Generator`].
pub struct EmulatedChannel<S: SuperpageBuffer> {
    shared: Arc<Shared<S>>,
    thread: Option<JoinHandle<()>>,
}

impl<S: SuperpageBuffer> EmulatedChannel<S> {
    /// Starts the card thread (named `name`) writing with `generator`.
    pub fn start<G: Generator>(
        name: &str,
        config: EmulatedConfig,
        generator: G,
    ) -> std::io::Result<Self> {
        let depth = config.queue_depth.max(1);
        let shared = Arc::new(Shared {
            transfer: ArrayQueue::new(depth),
            ready: ArrayQueue::new(depth),
            stop: AtomicBool::new(false),
            running: AtomicBool::new(true),
            superpages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            units: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            stall_ns: AtomicU64::new(0),
        });
        let card = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || card_loop(&card, generator, &config))?;
        Ok(EmulatedChannel {
            shared,
            thread: Some(thread),
        })
    }

    /// Stops the card thread and waits for it.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl<S: SuperpageBuffer> Drop for EmulatedChannel<S> {
    fn drop(&mut self) {
        self.stop();
    }
}

impl<S: SuperpageBuffer> DmaChannel<S> for EmulatedChannel<S> {
    fn push_superpage(&self, superpage: S) -> Result<(), S> {
        self.shared.transfer.push(superpage)
    }

    fn pop_superpage(&self) -> Option<Filled<S>> {
        self.shared.ready.pop()
    }

    fn transfer_queue_available(&self) -> usize {
        self.shared.transfer.capacity() - self.shared.transfer.len()
    }

    fn status(&self) -> ChannelStatus {
        let s = &self.shared;
        ChannelStatus {
            link_up: s.running.load(Ordering::Acquire),
            transfer_queue_len: s.transfer.len(),
            ready_queue_len: s.ready.len(),
            counters: ChannelCounters {
                superpages: s.superpages.load(Ordering::Relaxed),
                bytes: s.bytes.load(Ordering::Relaxed),
                units: s.units.load(Ordering::Relaxed),
                stalls: s.stalls.load(Ordering::Relaxed),
                stall_ns: s.stall_ns.load(Ordering::Relaxed),
            },
        }
    }
}

/// Waits with a short spin, then yields, then sleeps, so a stalled card costs little CPU yet
/// resumes within tens of microseconds.
struct Backoff(u32);

impl Backoff {
    fn wait(&mut self) {
        if self.0 < 64 {
            std::hint::spin_loop();
        } else if self.0 < 128 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        self.0 = self.0.saturating_add(1);
    }
}

/// A token bucket: refilled from elapsed time at `per_s`, capped at 10 ms worth.
struct Bucket {
    per_s: f64,
    tokens: f64,
}

impl Bucket {
    fn new(per_s: Option<f64>) -> Option<Bucket> {
        per_s
            .filter(|r| *r > 0.0)
            .map(|per_s| Bucket { per_s, tokens: 0.0 })
    }

    fn refill(&mut self, seconds: f64) {
        let cap = (self.per_s * 0.01).max(1.0);
        self.tokens = (self.tokens + seconds * self.per_s).min(cap);
    }
}

/// The unit-rate and bandwidth limits of a channel.
struct Limits {
    units: Option<Bucket>,
    bytes: Option<Bucket>,
    last: Instant,
    /// Bytes of the last unit written, to turn a byte budget into a unit count.
    unit_bytes: f64,
}

impl Limits {
    fn new(config: &EmulatedConfig) -> Option<Limits> {
        let units = Bucket::new(config.max_units_per_s);
        let bytes = Bucket::new(config.max_bytes_per_s);
        (units.is_some() || bytes.is_some()).then(|| Limits {
            units,
            bytes,
            last: Instant::now(),
            unit_bytes: 1.0,
        })
    }

    /// Units that may be written now (0: wait).
    fn grant(&mut self) -> u64 {
        let now = Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        let mut n = u64::MAX;
        if let Some(u) = &mut self.units {
            u.refill(dt);
            n = n.min(u.tokens.max(0.0) as u64);
        }
        if let Some(b) = &mut self.bytes {
            b.refill(dt);
            n = if b.tokens <= 0.0 {
                0
            } else {
                n.min(((b.tokens / self.unit_bytes) as u64).max(1))
            };
        }
        n
    }

    fn charge(&mut self, fill: Fill) {
        if let Some(u) = &mut self.units {
            u.tokens -= fill.units as f64;
        }
        if let Some(b) = &mut self.bytes {
            b.tokens -= fill.bytes as f64;
        }
        if fill.units > 0 {
            self.unit_bytes = (fill.bytes as f64 / fill.units as f64).max(1.0);
        }
    }
}

/// What one superpage's filling ended with.
enum Filling {
    /// Hand the superpage over (full, finished, idle input, or stopping).
    Done(Fill),
    /// Not even one unit fits an empty superpage: a configuration error.
    Unfit,
}

/// Fills one superpage: in one call without limits, unit batch by unit batch under a limit,
/// and until input pauses for a source that waits for input.
fn fill_superpage<G: Generator>(
    shared: &Shared<impl SuperpageBuffer>,
    generator: &mut G,
    limits: &mut Option<Limits>,
    buf: &mut [u8],
) -> Filling {
    let mut fill = Fill::default();
    let waits = generator.waits_for_input();
    while fill.bytes < buf.len() && !generator.is_finished() {
        let max_units = match limits {
            None => u64::MAX,
            Some(l) => match l.grant() {
                0 => {
                    if shared.stop.load(Ordering::Acquire) {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(20));
                    continue;
                }
                n => n,
            },
        };
        let f = generator.fill(&mut buf[fill.bytes..], max_units);
        if let Some(l) = limits {
            l.charge(f);
        }
        fill.bytes += f.bytes;
        fill.units += f.units;
        if f.units == 0 {
            if waits && fill.units == 0 && !shared.stop.load(Ordering::Acquire) {
                continue; // nothing arrived yet: keep waiting with an empty superpage
            }
            break;
        }
        if limits.is_none() && !waits {
            break;
        }
    }
    if fill.units == 0 && !waits && !generator.is_finished() && !shared.stop.load(Ordering::Acquire)
    {
        return Filling::Unfit;
    }
    Filling::Done(fill)
}

fn card_loop<S: SuperpageBuffer, G: Generator>(
    shared: &Shared<S>,
    mut generator: G,
    config: &EmulatedConfig,
) {
    let mut limits = Limits::new(config);
    let mut sequence = 0u64;
    while !shared.stop.load(Ordering::Acquire) {
        let Some(mut superpage) = take_empty(shared) else {
            break;
        };
        let fill = match fill_superpage(
            shared,
            &mut generator,
            &mut limits,
            superpage.as_bytes_mut(),
        ) {
            Filling::Done(fill) => fill,
            Filling::Unfit => break,
        };
        if fill.units == 0 && generator.waits_for_input() {
            // Stopping with nothing received: the empty superpage is not a filled one.
            break;
        }
        let filled = Filled {
            superpage,
            bytes_used: fill.bytes,
            units: fill.units,
            sequence,
        };
        sequence += 1;
        shared.bytes.fetch_add(fill.bytes as u64, Ordering::Relaxed);
        shared.units.fetch_add(fill.units, Ordering::Relaxed);
        if !put_ready(shared, filled) {
            break;
        }
        shared.superpages.fetch_add(1, Ordering::Relaxed);
        if generator.is_finished() {
            break;
        }
    }
    shared.running.store(false, Ordering::Release);
}

/// Takes an empty superpage, stalling (counted) while there is none. `None` when stopped.
fn take_empty<S: SuperpageBuffer>(shared: &Shared<S>) -> Option<S> {
    if let Some(s) = shared.transfer.pop() {
        return Some(s);
    }
    let start = Instant::now();
    shared.stalls.fetch_add(1, Ordering::Relaxed);
    let mut backoff = Backoff(0);
    let got = loop {
        if let Some(s) = shared.transfer.pop() {
            break Some(s);
        }
        if shared.stop.load(Ordering::Acquire) {
            break None;
        }
        backoff.wait();
    };
    shared
        .stall_ns
        .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    got
}

/// Puts a filled superpage on the ready queue, stalling (counted) while it is full.
fn put_ready<S: SuperpageBuffer>(shared: &Shared<S>, filled: Filled<S>) -> bool {
    let Err(mut filled) = shared.ready.push(filled) else {
        return true;
    };
    let start = Instant::now();
    shared.stalls.fetch_add(1, Ordering::Relaxed);
    let mut backoff = Backoff(0);
    let ok = loop {
        match shared.ready.push(filled) {
            Ok(()) => break true,
            Err(f) => filled = f,
        }
        if shared.stop.load(Ordering::Acquire) {
            break false;
        }
        backoff.wait();
    };
    shared
        .stall_ns
        .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Units of 16 little-endian u32: a running counter, so order and loss are checkable.
    struct Counter {
        next: u32,
        limit: Option<u32>,
    }

    impl Generator for Counter {
        fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
            let mut f = Fill::default();
            while f.units < max_units && buf.len() - f.bytes >= 64 && !self.is_finished() {
                for w in 0..16 {
                    let v = self.next * 16 + w;
                    buf[f.bytes + 4 * w as usize..][..4].copy_from_slice(&v.to_le_bytes());
                }
                self.next += 1;
                f.bytes += 64;
                f.units += 1;
            }
            f
        }
        fn is_finished(&self) -> bool {
            self.limit.is_some_and(|l| self.next >= l)
        }
    }

    fn drain(ch: &EmulatedChannel<Vec<u8>>, expect_units: u64) -> Vec<u32> {
        let mut words = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while (words.len() as u64) < expect_units * 16 {
            assert!(
                Instant::now() < deadline,
                "channel stalled: {:?}",
                ch.status()
            );
            match ch.pop_superpage() {
                Some(f) => {
                    words.extend(
                        f.data()
                            .chunks_exact(4)
                            .map(|b| u32::from_le_bytes(b.try_into().unwrap())),
                    );
                    let mut sp = f.superpage;
                    sp.iter_mut().for_each(|b| *b = 0xEE);
                    ch.push_superpage(sp).unwrap();
                }
                None => std::thread::yield_now(),
            }
        }
        words
    }

    #[test]
    fn delivers_every_unit_in_order_under_back_pressure() {
        // Two superpages of 1000 bytes (15 units each) for 2000 units: the card must stall and wait.
        let ch = EmulatedChannel::start(
            "test-card",
            EmulatedConfig {
                queue_depth: 2,
                ..EmulatedConfig::default()
            },
            Counter {
                next: 0,
                limit: Some(2000),
            },
        )
        .unwrap();
        ch.push_superpage(vec![0; 1000]).unwrap();
        ch.push_superpage(vec![0; 1000]).unwrap();
        assert!(ch.transfer_queue_available() <= 2);
        // Hold both superpages until the card has filled them and stalled (deterministic back-pressure).
        let held = Instant::now();
        while ch.status().counters.superpages < 2 || ch.status().counters.stalls == 0 {
            assert!(
                held.elapsed() < Duration::from_secs(20),
                "card never filled both: {:?}",
                ch.status()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Both superpages are on the ready queue now: the transfer queue (depth 2) is empty and
        // takes exactly two more.
        assert_eq!(ch.transfer_queue_available(), 2);
        let words = drain(&ch, 2000);
        assert!(
            words.iter().enumerate().all(|(i, &w)| w == i as u32),
            "a unit was lost, duplicated or reordered"
        );
        let st = ch.status();
        assert_eq!(st.counters.units, 2000);
        assert!(
            st.counters.stalls > 0,
            "the card never stalled with only two superpages"
        );
    }

    #[test]
    fn rate_limit_bounds_the_unit_rate() {
        let ch = EmulatedChannel::start(
            "rate-card",
            EmulatedConfig {
                queue_depth: 8,
                max_units_per_s: Some(20_000.0),
                ..EmulatedConfig::default()
            },
            Counter {
                next: 0,
                limit: None,
            },
        )
        .unwrap();
        for _ in 0..8 {
            ch.push_superpage(vec![0; 640]).unwrap();
        }
        let start = Instant::now();
        drain(&ch, 2000);
        // 2000 units at 20 kHz take at least ~0.1 s (minus the 10 ms burst the bucket allows).
        assert!(
            start.elapsed() >= Duration::from_millis(80),
            "rate limit not applied: {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn bandwidth_limit_bounds_the_byte_rate() {
        let ch = EmulatedChannel::start(
            "bw-card",
            EmulatedConfig {
                queue_depth: 8,
                max_bytes_per_s: Some(1_280_000.0),
                ..EmulatedConfig::default()
            },
            Counter {
                next: 0,
                limit: None,
            },
        )
        .unwrap();
        for _ in 0..8 {
            ch.push_superpage(vec![0; 640]).unwrap();
        }
        let start = Instant::now();
        // 2000 units of 64 bytes at 1.28 MB/s take at least ~0.1 s.
        let words = drain(&ch, 2000);
        assert!(words.iter().enumerate().all(|(i, &w)| w == i as u32));
        assert!(
            start.elapsed() >= Duration::from_millis(80),
            "bandwidth limit not applied: {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn stop_ends_a_stalled_card() {
        let mut ch: EmulatedChannel<Vec<u8>> = EmulatedChannel::start(
            "stall-card",
            EmulatedConfig::default(),
            Counter {
                next: 0,
                limit: None,
            },
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        ch.stop();
        assert!(!ch.status().link_up);
    }
}
