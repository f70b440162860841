//! The state shared by the receiving threads: each thread's ring of parts (its memory block and
//! summary per event), each thread's completion mark, and the assembly claim.
//!
//! # Batched completion
//!
//! Thread `t` closes its part of events strictly in event order and writes each part into its
//! own ring (`rings[t][seq % window]`), a cell no other thread writes. Now and then (once per
//! superpage, and whenever it has to wait) it publishes `marks[t]`: "my parts of every event
//! below n are written", one store on a cache line of its own. An event is complete when every
//! thread's mark has passed it, so there is no shared read-modify-write per event: per batch, a
//! thread stores its mark, reads the other marks, and the thread that finds complete events not
//! yet assembled claims them all (one flag), takes their parts from the rings, builds the
//! fragments and stores `assembled`.
//!
//! # State
//!
//! | field | written by | meaning |
//! |---|---|---|
//! | `rings[t][i]: UnsafeCell` | thread `t` (write), the claim holder (take) | thread `t`'s part of the event `seq` with `seq % window == i` |
//! | `marks[t]: AtomicU64` | thread `t` | parts of events below this are in the ring |
//! | `assembled: AtomicU64` | the claim holder | events below this are assembled and their cells empty |
//! | `assembling: AtomicBool` | any thread | the claim flag: its holder alone assembles |
//!
//! # Rules
//!
//! 1. Thread `t` writes the cell of `seq` only when `seq < assembled + window` (acquire load of
//!    `assembled`): the previous occupant, `seq - window`, has been taken. It writes each `seq`
//!    once, in order, and publishes `marks[t] = n` (release) only after writing every `seq < n`.
//! 2. Only the holder of `assembling` (set by a successful compare-exchange, acquire) takes cells,
//!    and only of events in `assembled .. min(marks)`: every mark's release happened before its
//!    acquire load of the marks, so those cells are written and their writers are past them.
//! 3. The holder stores `assembled` (release) after taking the cells, then clears the flag. A
//!    writer that sees the new `assembled` therefore never writes a cell still being taken.
//! 4. Marks, the flag's compare-exchange and its clearing, and the marks' loads in a claim are
//!    `SeqCst`: a thread whose claim failed because another held the flag had stored its mark
//!    before; the holder, after clearing the flag, looks at the marks again (`try_claim` in a
//!    loop), so a published mark is never left unassembled.
//! 5. A thread a whole window ahead of the assembly waits (counted in `slot_waits`), assembling
//!    whatever is complete meanwhile: the back-pressure between threads. It publishes its mark
//!    before waiting, so the slower threads can always complete the events it waits for.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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

/// A value on a cache line of its own.
#[repr(align(64))]
struct Line<T>(T);

/// One thread's ring of parts, one cell per event of the window.
struct Ring<'p>(Box<[UnsafeCell<Option<Part<'p>>>]>);

// SAFETY: the cells are written and taken under the rules of the module docs: a cell is written
// only by its ring's thread while the assembly has released it (rule 1), and taken only by the
// claim holder after the writer's mark covers it (rules 2-3); the atomics order those accesses.
// Parts hold `Chunk`s, which are `Send`.
unsafe impl Sync for Ring<'_> {}

pub(crate) struct Shared<'p> {
    rings: Box<[Ring<'p>]>,
    marks: Box<[Line<AtomicU64>]>,
    assembled: Line<AtomicU64>,
    assembling: Line<AtomicBool>,
    mask: u64,
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
        Shared {
            rings: (0..threads)
                .map(|_| Ring((0..window).map(|_| UnsafeCell::new(None)).collect()))
                .collect(),
            marks: (0..threads).map(|_| Line(AtomicU64::new(0))).collect(),
            assembled: Line(AtomicU64::new(0)),
            assembling: Line(AtomicBool::new(false)),
            mask: window as u64 - 1,
            horizon: AtomicU64::new(0),
            finished: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }

    /// Nanoseconds since the run started (the clock of every timeout).
    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Events below this are assembled: a thread may write its part of `seq` while
    /// `seq < assembled() + window`.
    pub(crate) fn assembled(&self) -> u64 {
        self.assembled.0.load(Ordering::Acquire)
    }

    /// Whether another thread than `t` has published parts of event `seq` (or later ones).
    pub(crate) fn others_past(&self, t: usize, seq: u64) -> bool {
        self.marks
            .iter()
            .enumerate()
            .any(|(i, m)| i != t && m.0.load(Ordering::Acquire) > seq)
    }

    /// Writes thread `t`'s part of `seq` into its ring.
    ///
    /// # Safety
    ///
    /// - `t` is in range and the caller is the only thread using index `t`;
    /// - `seq < assembled() + window`, read by this thread, and `seq` is the next event of the
    ///   thread (each written once, in order, at or above its last published mark).
    pub(crate) unsafe fn write(&self, t: usize, seq: u64, part: Part<'p>) {
        let cell = &self.rings[t].0[(seq & self.mask) as usize];
        // SAFETY: rule 1: the previous occupant of the cell was taken before `assembled` was
        // released past it, and no claim takes this cell before our mark passes `seq`.
        unsafe { *cell.get() = Some(part) };
    }

    /// Publishes that thread `t` has written its parts of every event below `mark`.
    pub(crate) fn publish(&self, t: usize, mark: u64) {
        self.marks[t].0.store(mark, Ordering::SeqCst);
    }

    fn complete_end(&self) -> u64 {
        self.marks
            .iter()
            .map(|m| m.0.load(Ordering::SeqCst))
            .min()
            .unwrap_or(0)
    }

    /// Claims the complete events not yet assembled, `start..end`, if there are any and no
    /// other thread holds the claim. The caller takes their parts with [`take`](Shared::take)
    /// in order and then calls [`release`](Shared::release)`(end)`.
    pub(crate) fn try_claim(&self) -> Option<(u64, u64)> {
        loop {
            if self.complete_end() <= self.assembled.0.load(Ordering::Acquire) {
                return None;
            }
            if self
                .assembling
                .0
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                // The holder looks at the marks again after clearing the flag (rule 4).
                return None;
            }
            let start = self.assembled.0.load(Ordering::Relaxed);
            let end = self.complete_end();
            if end > start {
                return Some((start, end));
            }
            // Nothing after all: clear the flag, then look again (a thread whose claim failed
            // meanwhile may have published a mark that our loads above missed).
            self.assembling.0.store(false, Ordering::SeqCst);
        }
    }

    /// Takes every thread's part of `seq`.
    ///
    /// # Safety
    ///
    /// The caller holds the claim returned by [`try_claim`](Shared::try_claim) and `seq` lies in
    /// it; each `seq` is taken once.
    pub(crate) unsafe fn take(&self, seq: u64) -> Parts<'p> {
        let i = (seq & self.mask) as usize;
        std::array::from_fn(|t| {
            let ring = self.rings.get(t)?;
            // SAFETY: rule 2: every thread's mark is past `seq`, so its cell is written and its
            // writer does not touch it again before `assembled` moves past `seq` (rule 1); only
            // the claim holder takes cells.
            unsafe { (*ring.0[i].get()).take() }
        })
    }

    /// Ends a claim: events below `end` are assembled.
    pub(crate) fn release(&self, end: u64) {
        self.assembled.0.store(end, Ordering::Release);
        self.assembling.0.store(false, Ordering::SeqCst);
    }
}
