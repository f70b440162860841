//! The window shared by the receiving threads: one slot per L1ID in flight, where each thread
//! leaves its part (its memory block for that L1ID) and the last one to arrive builds the
//! fragment.
//!
//! # State of a slot
//!
//! | field | meaning |
//! |---|---|
//! | `accept: AtomicU64` | the event number (run-local, from 0, never wraps) whose parts the slot takes now; starts at the slot index, grows by the window size each time a fragment leaves |
//! | `done: AtomicU32` | parts left for `accept` so far |
//! | `first_at: AtomicU64` | when the first part arrived (ns since the run's epoch) |
//! | `parts[t]: UnsafeCell` | thread `t`'s part |
//!
//! # Rules
//!
//! 1. Thread `t` writes `parts[t]` only after it has read `accept == seq` (acquire), and at most
//!    once per `seq`. Each thread writes only its own cell, so writes never race one another.
//! 2. After writing, it increments `done` (acq-rel). The first part of a round stores
//!    `first_at` before its increment.
//! 3. The thread whose increment makes `done == threads` owns every cell: its acquire sees all
//!    the writes (the increments form one release sequence). It takes the parts, stores
//!    `done = 0`, and only then publishes `accept = seq + window` (release).
//! 4. So a thread that waits for `accept == seq + window` before writing its next part there
//!    cannot overwrite a cell the builder is still reading. A thread finalizes its parts in event
//!    order, so a faster thread can get at most one window ahead of a slower one: it waits
//!    (counted in `slot_waits`), which is the back-pressure between threads. The waiting thread
//!    is never the one the slower thread needs, so the wait cannot deadlock.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use rodeo_format::fragment::Status;
use rodeo_memory::Chunk;

use super::fragment::MAX_THREADS;

/// One thread's contribution to one L1ID.
pub(crate) struct Part<'p> {
    /// The memory block; `None` when the thread had no packet for this L1ID (all its E-links
    /// are missing then).
    pub(crate) chunk: Option<Chunk<'p>>,
    /// End of the data in words.
    pub(crate) end: u32,
    /// Missing E-links, listed in the block right after the data.
    pub(crate) missing: u32,
    /// Status bits found while aggregating.
    pub(crate) status: Status,
    /// BCID of the part's first packet.
    pub(crate) bcid: Option<u16>,
    /// Packets in the part.
    pub(crate) packets: u32,
}

pub(crate) type Parts<'p> = [Option<Part<'p>>; MAX_THREADS];

/// A slot: its atomics on one cache line, each thread's cell on its own line (threads write
/// their cells at about the same time; sharing a line would bounce it between cores).
#[repr(align(64))]
pub(crate) struct Slot<'p> {
    accept: AtomicU64,
    done: AtomicU32,
    first_at: AtomicU64,
    parts: [Cell64<'p>; MAX_THREADS],
}

#[repr(align(64))]
struct Cell64<'p>(UnsafeCell<Option<Part<'p>>>);

// SAFETY: the cells are written and read under the protocol of the module docs (rules 1-4):
// a cell is written only by its own thread while the slot accepts that thread's event, and read
// only by the one thread that completed the round; the atomics order those accesses. Parts hold
// `Chunk`s, which are `Send`.
unsafe impl Sync for Slot<'_> {}

pub(crate) struct Shared<'p> {
    slots: Box<[Slot<'p>]>,
    mask: u64,
    window: u64,
    threads: u32,
    /// End (exclusive) of the events any thread has seen, published now and then.
    pub(crate) horizon: AtomicU64,
    /// Threads whose input has ended.
    pub(crate) finished: AtomicUsize,
    /// Set by a sink returning [`Flow::Stop`](super::Flow::Stop) or by the caller's stop flag.
    pub(crate) stop: AtomicBool,
    /// Set when a thread panics, so that no other thread waits for it forever.
    pub(crate) abort: AtomicBool,
    epoch: Instant,
}

impl<'p> Shared<'p> {
    pub(crate) fn new(window: usize, threads: usize) -> Shared<'p> {
        let slots = (0..window)
            .map(|i| Slot {
                accept: AtomicU64::new(i as u64),
                done: AtomicU32::new(0),
                first_at: AtomicU64::new(0),
                parts: std::array::from_fn(|_| Cell64(UnsafeCell::new(None))),
            })
            .collect();
        Shared {
            slots,
            mask: window as u64 - 1,
            window: window as u64,
            threads: threads as u32,
            horizon: AtomicU64::new(0),
            finished: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }

    /// Nanoseconds since the run started (the clock of `first_at` and of every timeout).
    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn slot(&self, seq: u64) -> &Slot<'p> {
        &self.slots[(seq & self.mask) as usize]
    }

    /// Whether the slot of `seq` takes parts of `seq` now.
    pub(crate) fn accepts(&self, seq: u64) -> bool {
        self.slot(seq).accept.load(Ordering::Acquire) == seq
    }

    /// When the first part of `seq` arrived, if some thread has left one.
    pub(crate) fn first_part_at(&self, seq: u64) -> Option<u64> {
        let slot = self.slot(seq);
        if slot.accept.load(Ordering::Acquire) != seq || slot.done.load(Ordering::Acquire) == 0 {
            return None;
        }
        Some(slot.first_at.load(Ordering::Relaxed))
    }

    /// Leaves thread `t`'s part of `seq`; returns every part when it was the last one.
    ///
    /// # Safety
    ///
    /// - `t < threads` and the caller is the only thread using index `t`;
    /// - the caller has seen [`accepts(seq)`](Shared::accepts) return true and has not yet
    ///   called `put` for this `seq`.
    pub(crate) unsafe fn put(
        &self,
        t: usize,
        seq: u64,
        part: Part<'p>,
        now: u64,
    ) -> Option<Parts<'p>> {
        let slot = self.slot(seq);
        // SAFETY: by the caller's contract the slot accepts `seq` and cell `t` is ours alone
        // until our increment of `done` below publishes it (rule 1).
        unsafe { *slot.parts[t].0.get() = Some(part) };
        // Relaxed is enough: `first_at` is read only after an acquire of `done`.
        if slot.done.load(Ordering::Relaxed) == 0 {
            slot.first_at.store(now, Ordering::Relaxed);
        }
        let before = slot.done.fetch_add(1, Ordering::AcqRel);
        if before + 1 < self.threads {
            return None;
        }
        // Rule 3: every other thread has put its part and incremented `done`; our acquire
        // increment synchronises with all of them, and nobody touches the cells again until we
        // publish the next `accept`.
        let parts = std::array::from_fn(|i| {
            // SAFETY: rule 3, we own every cell now.
            unsafe { (*slot.parts[i].0.get()).take() }
        });
        slot.done.store(0, Ordering::Relaxed);
        slot.accept.store(seq + self.window, Ordering::Release);
        Some(parts)
    }
}
