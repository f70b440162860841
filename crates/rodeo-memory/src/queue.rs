//! Bounded in-process queues with a named full policy, and the one back-off every waiting
//! thread of rodeo uses.
//!
//! Every queue between two threads of rodeo is a [`BoundedQueue`]: a fixed capacity chosen at
//! construction and a [`FullPolicy`] saying what a push does when the queue is full, by name
//! (the names are those of the configuration and of `/metrics`):
//!
//! | policy | a push to a full queue | counted in |
//! |---|---|---|
//! | `block` | waits with the policy's [`Backoff`] until there is room or the caller gives up | `full_events` (once per push that found it full) |
//! | `drop_newest` | drops the item being pushed | `full_events` and `dropped` |
//! | `refuse` | hands the item back ([`Refused`]); the caller reports the error | `full_events` |
//!
//! The queue itself is lock-free and allocates nothing after construction (a crossbeam
//! `ArrayQueue`); the counters are relaxed 64-bit atomics touched only when the queue is full,
//! so the common push and pop cost what the bare queue costs. Each queue reports into a small
//! process-wide registry ([`snapshot`]) under a dotted name (`cards.dma.ready`,
//! `ros.swrod.free`, ...), which the control crate's Prometheus writer exposes as
//! `rodeo_queue_depth`, `rodeo_queue_capacity` and `rodeo_queue_full_events_total`.
//!
//! Under `--cfg loom` the queue is a loom mutex around a `VecDeque` and the back-off yields to
//! loom's scheduler, so code built on these queues can be model-checked; the checks then cover
//! the rules of that code, not crossbeam's own (tested by its authors).

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::sync::{AtomicU64, Ordering};

/// How a [`Backoff`] waits: `spins` busy spins, then `yields` yields of the CPU, then sleeps
/// from `min_sleep_us` doubling every 8 waits up to `max_sleep_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffSpec {
    /// Waits that spin (`spin_loop` hint) first.
    pub spins: u32,
    /// Waits that yield the CPU after the spins.
    pub yields: u32,
    /// The first sleep, in microseconds.
    pub min_sleep_us: u32,
    /// The longest sleep, in microseconds (the sleeps double every 8 waits up to it).
    pub max_sleep_us: u32,
}

impl BackoffSpec {
    /// A thread handing items to another that is usually fast: a short spin, a few hundred
    /// microseconds of yields (longer than an answer takes under load, so the two threads do
    /// not sleep in turn), then 50 us sleeps. The ROS direct link's client side and the SW ROD
    /// input.
    pub const HANDOVER: BackoffSpec = BackoffSpec {
        spins: 64,
        yields: 1024,
        min_sleep_us: 50,
        max_sleep_us: 50,
    };
    /// A readout node's core thread with nothing to do, waiting for a request on the direct
    /// link: a short spin, 64 yields (tens of microseconds), then 50 us sleeps. Shorter than
    /// [`BackoffSpec::HANDOVER`]'s yields: a yielding thread stays runnable and takes its share
    /// of a shared core from the threads that feed it. Measured (`rodeo tester ... --input
    /// swrod|dma`, 2026-12-02): with 1,024 yields the SW ROD node's idle core thread took 9-15
    /// us of CPU per event (quiet) and 25-29 us beside a busy core; with 64, 6-8 and 8-11 us.
    /// Beside the busy core the SW ROD node ran about a quarter faster, the DMA node no slower.
    pub const CORE_IDLE: BackoffSpec = BackoffSpec {
        spins: 64,
        yields: 64,
        min_sleep_us: 50,
        max_sleep_us: 50,
    };
    /// A worker with nothing to do: a short spin, a few yields, then sleeps growing from 10 to
    /// 100 us, so an idle thread costs little CPU yet resumes within about 100 us. The card
    /// engines.
    pub const IDLE: BackoffSpec = BackoffSpec {
        spins: 32,
        yields: 8,
        min_sleep_us: 10,
        max_sleep_us: 100,
    };
    /// A client waiting for answers that may take long (the ROSTester on the direct link,
    /// whose requests can wait for data the node has not got yet): a short spin, a few
    /// yields, then sleeps from 10 to 50 us, so that it leaves the cores to the node it
    /// waits for. Yielding for longer cost the node a tenth of two cores in context switches.
    pub const CLIENT: BackoffSpec = BackoffSpec {
        spins: 64,
        yields: 16,
        min_sleep_us: 10,
        max_sleep_us: 50,
    };
    /// A receiving thread waiting for its peers or its pool: spin, yield, then 50 us sleeps.
    /// The SW ROD receivers.
    pub const RECEIVER: BackoffSpec = BackoffSpec {
        spins: 32,
        yields: 32,
        min_sleep_us: 50,
        max_sleep_us: 50,
    };
    /// A thread waiting for threads that share its cores (the SW ROD ring window): yields for
    /// a long while (the others need the CPU to move), then 20 us sleeps.
    pub const PEERS: BackoffSpec = BackoffSpec {
        spins: 64,
        yields: 20_000,
        min_sleep_us: 20,
        max_sleep_us: 20,
    };
    /// A thread waiting while another maps a region of a pool (milliseconds at most): yields,
    /// then sleeps growing from 10 to 100 us. Under loom every wait is a yield.
    pub const MAPPING: BackoffSpec = BackoffSpec {
        spins: 0,
        yields: 64,
        min_sleep_us: 10,
        max_sleep_us: 100,
    };
    /// A server's worker with nothing to do (the HTTP workers): sleeps from 100 us growing to
    /// 5 ms, so an idle worker wakes at most 200 times a second and a request waits at most
    /// about 5 ms for it.
    pub const IDLE_SERVER: BackoffSpec = BackoffSpec {
        spins: 0,
        yields: 0,
        min_sleep_us: 100,
        max_sleep_us: 5_000,
    };
    /// A paced producer ahead of its consumer: sleeps of 50 us straight away (the L1 source).
    pub const PACED: BackoffSpec = BackoffSpec {
        spins: 0,
        yields: 0,
        min_sleep_us: 50,
        max_sleep_us: 50,
    };
}

/// Spin, then yield, then sleep, as its [`BackoffSpec`] says: the one way a rodeo thread waits
/// for another without a lock. [`reset`](Backoff::reset) after progress.
#[derive(Debug, Clone)]
pub struct Backoff {
    spec: BackoffSpec,
    step: u32,
}

impl Backoff {
    /// A back-off at its first step.
    pub const fn new(spec: BackoffSpec) -> Backoff {
        Backoff { spec, step: 0 }
    }

    /// Waits once: spins, yields or sleeps depending on how many waits came before.
    #[inline]
    pub fn wait(&mut self) {
        #[cfg(loom)]
        {
            loom::thread::yield_now();
        }
        #[cfg(not(loom))]
        {
            let s = &self.spec;
            if self.step < s.spins {
                std::hint::spin_loop();
            } else if self.step - s.spins < s.yields {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(u64::from(self.sleep_us())));
            }
        }
        self.step = self.step.saturating_add(1);
    }

    /// The sleep of the current step, in microseconds (once past the spins and yields).
    #[cfg_attr(loom, allow(dead_code))]
    fn sleep_us(&self) -> u32 {
        let s = &self.spec;
        let past = self.step.saturating_sub(s.spins.saturating_add(s.yields));
        let doublings = (past / 8).min(16);
        s.min_sleep_us
            .saturating_mul(1 << doublings)
            .min(s.max_sleep_us.max(s.min_sleep_us))
    }

    /// Back to the first step (after the awaited thing happened).
    #[inline]
    pub fn reset(&mut self) {
        self.step = 0;
    }

    /// Whether the next wait sleeps (the spins and yields are used up).
    pub fn sleeping(&self) -> bool {
        self.step >= self.spec.spins.saturating_add(self.spec.yields)
    }
}

/// What a push to a full [`BoundedQueue`] does (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullPolicy {
    /// Wait with a [`Backoff`] of this spec until there is room or the caller gives up.
    Block(BackoffSpec),
    /// Drop the item being pushed, counted.
    DropNewest,
    /// Hand the item back: the caller reports the error.
    Refuse,
}

impl FullPolicy {
    /// The policy's name, as in the configuration and `/metrics`.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The policy's kind (its name without the back-off).
    pub fn kind(&self) -> PolicyKind {
        match self {
            FullPolicy::Block(_) => PolicyKind::Block,
            FullPolicy::DropNewest => PolicyKind::DropNewest,
            FullPolicy::Refuse => PolicyKind::Refuse,
        }
    }
}

/// A full policy by name: what a configuration file says (`block`, `drop_newest`, `refuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// `block`: wait for room (bounded by the caller's give-up condition or a timeout).
    Block,
    /// `drop_newest`: drop the item being pushed, counted.
    DropNewest,
    /// `refuse`: fail the push with an error.
    Refuse,
}

impl PolicyKind {
    /// The name as written in configuration files and `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Block => "block",
            PolicyKind::DropNewest => "drop_newest",
            PolicyKind::Refuse => "refuse",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy name that is none of `block`, `drop_newest`, `refuse`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown queue full policy {0:?}: use block, drop_newest or refuse")]
pub struct UnknownPolicy(pub String);

impl FromStr for PolicyKind {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<PolicyKind, UnknownPolicy> {
        match s {
            "block" => Ok(PolicyKind::Block),
            "drop_newest" => Ok(PolicyKind::DropNewest),
            "refuse" => Ok(PolicyKind::Refuse),
            other => Err(UnknownPolicy(other.to_string())),
        }
    }
}

/// A push that found the queue full: the item, handed back (policy `refuse`, or `block` when
/// the caller gave up).
#[derive(Debug, thiserror::Error)]
#[error("queue {queue} is full ({capacity} items, policy {policy})")]
pub struct Refused<T> {
    /// The queue's name.
    pub queue: &'static str,
    /// Its capacity.
    pub capacity: usize,
    /// Its policy's name.
    pub policy: &'static str,
    /// The item that was not queued.
    pub item: T,
}

/// What a push did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// The item is in the queue.
    Queued,
    /// The queue was full and the item was dropped (policy `drop_newest`).
    Dropped,
}

/// The counters of a queue, what the registry reads.
#[derive(Debug)]
struct Counters {
    name: &'static str,
    capacity: usize,
    policy: FullPolicy,
    full_events: AtomicU64,
    dropped: AtomicU64,
}

#[cfg(not(loom))]
type Inner<T> = crossbeam_queue::ArrayQueue<T>;

/// The loom model of the queue: a loom mutex around a deque (see the module docs).
#[cfg(loom)]
#[derive(Debug)]
struct Inner<T> {
    items: loom::sync::Mutex<std::collections::VecDeque<T>>,
    capacity: usize,
}

#[cfg(loom)]
impl<T> Inner<T> {
    fn new(capacity: usize) -> Inner<T> {
        Inner {
            items: loom::sync::Mutex::new(std::collections::VecDeque::with_capacity(capacity)),
            capacity,
        }
    }
    fn push(&self, item: T) -> Result<(), T> {
        let mut q = self.items.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= self.capacity {
            return Err(item);
        }
        q.push_back(item);
        Ok(())
    }
    fn pop(&self) -> Option<T> {
        self.items
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }
    fn len(&self) -> usize {
        self.items.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The part of a queue the registry holds (weakly): its counters and its depth.
trait Gauge: Send + Sync {
    fn counters(&self) -> &Counters;
    fn depth(&self) -> usize;
}

/// A queue with its counters: what a [`BoundedQueue`] handle holds, and the registry (weakly,
/// as a [`Gauge`]).
struct CountedQueue<T> {
    queue: Inner<T>,
    counters: Counters,
}

impl<T: Send> Gauge for CountedQueue<T> {
    fn counters(&self) -> &Counters {
        &self.counters
    }
    fn depth(&self) -> usize {
        self.queue.len()
    }
}

/// A bounded multi-producer multi-consumer queue with a named [`FullPolicy`], reporting its
/// depth and full events to the registry ([`snapshot`]). Lock-free, no allocation after
/// construction.
pub struct BoundedQueue<T> {
    shared: Arc<CountedQueue<T>>,
}

impl<T> fmt::Debug for BoundedQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.shared.counters;
        f.debug_struct("BoundedQueue")
            .field("name", &c.name)
            .field("capacity", &c.capacity)
            .field("policy", &c.policy.name())
            .field("len", &self.shared.queue.len())
            .finish()
    }
}

impl<T: Send + 'static> BoundedQueue<T> {
    /// A queue of `capacity` items (at least 1) named `name` (dotted: `crate.component.queue`,
    /// listed in docs/architecture.md), registered for `/metrics`.
    pub fn new(name: &'static str, capacity: usize, policy: FullPolicy) -> BoundedQueue<T> {
        let capacity = capacity.max(1);
        let shared = Arc::new(CountedQueue {
            queue: Inner::new(capacity),
            counters: Counters {
                name,
                capacity,
                policy,
                full_events: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
            },
        });
        register(Arc::downgrade(&shared) as Weak<dyn Gauge>);
        BoundedQueue { shared }
    }
}

impl<T> BoundedQueue<T> {
    /// Pushes `item`, applying the queue's policy when it is full. With `block`, waits until
    /// there is room, checking `give_up` between waits: when it returns true the item comes
    /// back as [`Refused`] (so nothing blocks forever). `give_up` is not called otherwise.
    #[inline]
    pub fn push_or(
        &self,
        item: T,
        mut give_up: impl FnMut() -> bool,
    ) -> Result<Pushed, Refused<T>> {
        let item = match self.shared.queue.push(item) {
            Ok(()) => return Ok(Pushed::Queued),
            Err(item) => item,
        };
        self.full_path(item, &mut give_up)
    }

    /// Pushes `item` applying the policy, where `block` gives up at once (so a `block` queue
    /// used here behaves as `refuse`; for queues that cannot be full, or callers with their
    /// own retry loop).
    #[inline]
    pub fn push(&self, item: T) -> Result<Pushed, Refused<T>> {
        self.push_or(item, || true)
    }

    /// Retries a push whose first attempt was already counted (a caller that keeps the item
    /// and tries again on its next turn, as a card's DMA engine does): no policy, not counted.
    #[inline]
    pub fn retry_push(&self, item: T) -> Result<(), T> {
        self.shared.queue.push(item)
    }

    #[cold]
    fn full_path(
        &self,
        mut item: T,
        give_up: &mut dyn FnMut() -> bool,
    ) -> Result<Pushed, Refused<T>> {
        let c = &self.shared.counters;
        c.full_events.fetch_add(1, Ordering::Relaxed);
        match c.policy {
            FullPolicy::DropNewest => {
                c.dropped.fetch_add(1, Ordering::Relaxed);
                drop(item);
                Ok(Pushed::Dropped)
            }
            FullPolicy::Refuse => Err(self.refused(item)),
            FullPolicy::Block(spec) => {
                let mut backoff = Backoff::new(spec);
                loop {
                    if give_up() {
                        return Err(self.refused(item));
                    }
                    backoff.wait();
                    match self.shared.queue.push(item) {
                        Ok(()) => return Ok(Pushed::Queued),
                        Err(back) => item = back,
                    }
                }
            }
        }
    }

    fn refused(&self, item: T) -> Refused<T> {
        let c = &self.shared.counters;
        Refused {
            queue: c.name,
            capacity: c.capacity,
            policy: c.policy.name(),
            item,
        }
    }

    /// Takes the oldest item, if any.
    #[inline]
    pub fn pop(&self) -> Option<T> {
        self.shared.queue.pop()
    }

    /// Takes the oldest item, waiting with the policy's back-off (or
    /// [`BackoffSpec::HANDOVER`] for other policies) while the queue is empty, until `give_up`
    /// returns true (checked between waits; then `None`).
    pub fn pop_or(&self, mut give_up: impl FnMut() -> bool) -> Option<T> {
        if let Some(v) = self.shared.queue.pop() {
            return Some(v);
        }
        let spec = match self.shared.counters.policy {
            FullPolicy::Block(spec) => spec,
            _ => BackoffSpec::HANDOVER,
        };
        let mut backoff = Backoff::new(spec);
        loop {
            if give_up() {
                return None;
            }
            backoff.wait();
            if let Some(v) = self.shared.queue.pop() {
                return Some(v);
            }
        }
    }

    /// Items in the queue now.
    #[inline]
    pub fn len(&self) -> usize {
        self.shared.queue.len()
    }

    /// Whether the queue is empty now.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queue's capacity.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.shared.counters.capacity
    }

    /// The queue's name.
    pub fn name(&self) -> &'static str {
        self.shared.counters.name
    }

    /// The queue's full policy.
    pub fn policy(&self) -> FullPolicy {
        self.shared.counters.policy
    }

    /// Pushes that found the queue full, so far.
    pub fn full_events(&self) -> u64 {
        self.shared.counters.full_events.load(Ordering::Relaxed)
    }

    /// Items dropped by policy `drop_newest`, so far.
    pub fn dropped(&self) -> u64 {
        self.shared.counters.dropped.load(Ordering::Relaxed)
    }
}

/// One queue name's figures in the registry, summed over the live queues of that name (a card
/// has a ready queue per channel, for instance).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueueSnapshot {
    /// The queue's name.
    pub name: &'static str,
    /// Its full policy's name.
    pub policy: &'static str,
    /// Live queues of this name.
    pub instances: u64,
    /// Their capacity, summed.
    pub capacity: u64,
    /// Their depth now, summed.
    pub depth: u64,
    /// Pushes that found one of them full (of the live queues).
    pub full_events: u64,
    /// Items dropped by `drop_newest` (of the live queues).
    pub dropped: u64,
}

fn registry() -> &'static Mutex<Vec<Weak<dyn Gauge>>> {
    static REGISTRY: OnceLock<Mutex<Vec<Weak<dyn Gauge>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Vec::new()))
}

fn register(gauge: Weak<dyn Gauge>) {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    // Forget the queues that are gone, so the registry stays as long as the live queues.
    if r.len() >= 64 && r.len().is_power_of_two() {
        r.retain(|w| w.strong_count() > 0);
    }
    r.push(gauge);
}

/// Every live queue of the process, by name (sorted), with its capacity, depth and full
/// events: what `/metrics` shows. Takes a lock; not for hot paths.
pub fn snapshot() -> Vec<QueueSnapshot> {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    r.retain(|w| w.strong_count() > 0);
    let mut out: Vec<QueueSnapshot> = Vec::new();
    for g in r.iter().filter_map(Weak::upgrade) {
        let c = g.counters();
        let depth = g.depth() as u64;
        let full = c.full_events.load(Ordering::Relaxed);
        let dropped = c.dropped.load(Ordering::Relaxed);
        match out.iter_mut().find(|s| s.name == c.name) {
            Some(s) => {
                s.instances += 1;
                s.capacity += c.capacity as u64;
                s.depth += depth;
                s.full_events += full;
                s.dropped += dropped;
            }
            None => out.push(QueueSnapshot {
                name: c.name,
                policy: c.policy.name(),
                instances: 1,
                capacity: c.capacity as u64,
                depth,
                full_events: full,
                dropped,
            }),
        }
    }
    out.sort_by(|a, b| a.name.cmp(b.name));
    out
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn each_policy_does_what_its_name_says_and_counts() {
        let drop_q = BoundedQueue::new("test.drop", 2, FullPolicy::DropNewest);
        assert_eq!(drop_q.push(1).unwrap(), Pushed::Queued);
        drop_q.push(2).unwrap();
        assert_eq!(drop_q.push(3).unwrap(), Pushed::Dropped);
        assert_eq!((drop_q.full_events(), drop_q.dropped()), (1, 1));
        assert_eq!(
            (drop_q.pop(), drop_q.pop(), drop_q.pop()),
            (Some(1), Some(2), None)
        );

        let refuse_q = BoundedQueue::new("test.refuse", 1, FullPolicy::Refuse);
        refuse_q.push("a").unwrap();
        let e = refuse_q.push("b").unwrap_err();
        assert_eq!(
            (e.item, e.queue, e.capacity, e.policy),
            ("b", "test.refuse", 1, "refuse")
        );
        assert!(e
            .to_string()
            .contains("test.refuse is full (1 items, policy refuse)"));
        assert_eq!(refuse_q.full_events(), 1);

        let block_q = BoundedQueue::new("test.block", 1, FullPolicy::Block(BackoffSpec::IDLE));
        block_q.push(1u8).unwrap();
        let mut asked = 0;
        let e = block_q
            .push_or(2, || {
                asked += 1;
                asked > 3
            })
            .unwrap_err();
        assert_eq!((e.item, asked, block_q.full_events()), (2, 4, 1));
    }

    #[test]
    fn a_blocked_push_goes_through_when_a_consumer_makes_room() {
        let q = Arc::new(BoundedQueue::new(
            "test.block.wake",
            1,
            FullPolicy::Block(BackoffSpec::HANDOVER),
        ));
        q.push(0u32).unwrap();
        let consumer = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                let mut got = Vec::new();
                while got.len() < 100 && std::time::Instant::now() < deadline {
                    if let Some(v) = q.pop_or(|| std::time::Instant::now() > deadline) {
                        got.push(v);
                    }
                }
                got
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for i in 1..100u32 {
            q.push_or(i, || std::time::Instant::now() > deadline)
                .unwrap();
        }
        let got = consumer.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn the_registry_sums_live_queues_by_name_and_forgets_dropped_ones() {
        let a = BoundedQueue::new("test.registry", 4, FullPolicy::Refuse);
        let b = BoundedQueue::new("test.registry", 4, FullPolicy::Refuse);
        a.push(1u64).unwrap();
        b.push(2).unwrap();
        b.push(3).unwrap();
        let s = snapshot();
        let r = s.iter().find(|s| s.name == "test.registry").unwrap();
        assert_eq!(
            (r.instances, r.capacity, r.depth, r.policy),
            (2, 8, 3, "refuse")
        );
        drop(a);
        drop(b);
        assert!(snapshot().iter().all(|s| s.name != "test.registry"));
    }

    #[test]
    fn policy_names_parse_and_unknown_ones_are_named() {
        for k in [
            PolicyKind::Block,
            PolicyKind::DropNewest,
            PolicyKind::Refuse,
        ] {
            assert_eq!(k.name().parse::<PolicyKind>().unwrap(), k);
        }
        let e = "drop_oldest".parse::<PolicyKind>().unwrap_err();
        assert!(e.to_string().contains("\"drop_oldest\""), "{e}");
    }

    #[test]
    fn backoff_sleeps_grow_to_the_maximum() {
        let mut b = Backoff::new(BackoffSpec::IDLE);
        for _ in 0..40 {
            assert!(!b.sleeping());
            b.step += 1;
        }
        assert!(b.sleeping());
        assert_eq!(b.sleep_us(), 10);
        b.step += 8;
        assert_eq!(b.sleep_us(), 20);
        b.step += 100;
        assert_eq!(b.sleep_us(), 100);
        b.reset();
        assert!(!b.sleeping());
    }
}
