//! The state shared by the receiving threads, [`PartExchange`]: each thread's ring of parts (its
//! memory block and summary per event), each thread's completion mark, and the assembly claim.
//!
//! # Batched completion
//!
//! Thread `t` closes its part of events strictly in event order and writes each part into its
//! own ring (`rings[t][seq % window]`), a cell no other thread writes. Now and then (once per
//! superpage, and whenever it has to wait) it publishes `marks[t]`: "my parts of every event
//! below n are written", one store on a cache line of its own. An event is complete when every
//! thread's mark has passed it, so there is no shared read-modify-write per event.
//!
//! Assembly is shared out by groups of [`GROUP`] consecutive events: group `g` belongs to thread
//! `g % threads`. When it publishes, a thread reads the other marks and assembles the complete
//! events of its own groups (taking every thread's part from the rings), then stores
//! `cursors[t]`: "every event of my groups below n is assembled". So the threads share the
//! assembly evenly, and each frees as many of the other threads' blocks as they free of its own.
//!
//! # State
//!
//! | field | written by | meaning |
//! |---|---|---|
//! | `rings[t][i]: UnsafeCell` | thread `t` (write), the event's assembler (take) | thread `t`'s part of the event `seq` with `seq % window == i` |
//! | `marks[t]: AtomicU64` | thread `t` | its parts of every event below this are in its ring |
//! | `cursors[t]: AtomicU64` | thread `t` | the events of its groups below this are assembled, their cells empty |
//! | `starved[p]: AtomicBool` | a thread of pool `p` | it waits for a block of pool `p`: every thread gives back the blocks of `p` its caches hold |
//!
//! # Rules
//!
//! 1. Thread `t` writes the cell of `seq` only when `seq < min(cursors) + window` (acquire
//!    loads): the previous occupant, `seq - window`, has been taken by its assembler. It writes
//!    each `seq` once, in order, and publishes `marks[t] = n` (release) only after writing every
//!    `seq < n`.
//! 2. Thread `a` takes the cells of `seq` only if `seq` is in one of its groups and below
//!    `min(marks)` (acquire loads): every cell is written and its writer is past it. No other
//!    thread takes them (one assembler per group), and `a` takes each `seq` once (its cursor).
//! 3. `a` stores its cursor (release) after taking the cells, so a writer that sees the new
//!    cursor never writes a cell still being taken.
//! 4. A thread a whole window ahead of the assembly waits (counted in `slot_waits`), publishing
//!    its mark and assembling its groups meanwhile: the back-pressure between threads. Every
//!    wait of a receiving thread (ring, pool, end of run) publishes and assembles, so the
//!    events a waiting thread needs assembled always complete.
//! 5. Blocks of fragments a sink does not keep go to the assembling thread's cache of their
//!    pool, which returns them in batches. A thread that finds its pool empty sets
//!    `starved[p]` (relaxed: a hint, re-set on every retry) and every thread flushes its cache
//!    of `p` when it next publishes, which it does while waiting too: a block never stays in
//!    one thread's cache while another waits for it.
//!
//! The atomics and the cells come from rodeo-memory's loom facade (`rodeo_memory::sync`), so
//! `RUSTFLAGS="--cfg loom"` model-checks rules 1-3 with the ring's real code (the `loom_tests`
//! module below; scripts/test-all runs them): a cell written while its assembler takes it, or
//! taken before its writer's mark, fails the model.

use std::time::Instant;

use rodeo_memory::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering, UnsafeCell};

use rodeo_format::fragment::Status;
use rodeo_memory::Chunk;

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
    /// Extended L1ID of the event (every thread's part carries the same).
    pub(crate) l1id: u32,
}

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

/// What the receiving threads exchange (module docs): each thread's ring of parts, its
/// completion mark and assembly cursor, the pools' starvation flags, and the run's flags and
/// clock.
pub(crate) struct PartExchange<'p> {
    rings: Box<[Ring<'p>]>,
    marks: Box<[Line<AtomicU64>]>,
    cursors: Box<[Line<AtomicU64>]>,
    mask: u64,
    threads: u64,
    /// End (exclusive) of the events any thread has seen, published now and then.
    pub(crate) horizon: AtomicU64,
    /// Threads whose input has ended.
    pub(crate) finished: AtomicUsize,
    /// Set by a sink returning [`Flow::Stop`](super::Flow::Stop) or by the caller's stop flag.
    pub(crate) stop: AtomicBool,
    /// Set when a thread panics, so that no other thread waits for it forever.
    pub(crate) abort: AtomicBool,
    /// Per block pool: a thread waits for a block of it (the others flush their caches of it).
    starved: Box<[Line<AtomicBool>]>,
    epoch: Instant,
}

/// Events per assembly group (a power of two).
pub(crate) const GROUP: u64 = 64;

impl<'p> PartExchange<'p> {
    pub(crate) fn new(window: usize, threads: usize, pools: usize) -> PartExchange<'p> {
        PartExchange {
            rings: (0..threads)
                .map(|_| Ring((0..window).map(|_| UnsafeCell::new(None)).collect()))
                .collect(),
            marks: (0..threads).map(|_| Line(AtomicU64::new(0))).collect(),
            cursors: (0..threads).map(|_| Line(AtomicU64::new(0))).collect(),
            mask: window as u64 - 1,
            threads: threads as u64,
            horizon: AtomicU64::new(0),
            finished: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            starved: (0..pools).map(|_| Line(AtomicBool::new(false))).collect(),
            epoch: Instant::now(),
        }
    }

    /// Marks block pool `p` as one a thread waits for (or no longer waits for).
    pub(crate) fn set_starved(&self, p: usize, starved: bool) {
        if let Some(f) = self.starved.get(p) {
            if f.0.load(Ordering::Relaxed) != starved {
                f.0.store(starved, Ordering::Relaxed);
            }
        }
    }

    /// Whether a thread waits for a block of pool `p`.
    pub(crate) fn starved(&self, p: usize) -> bool {
        self.starved
            .get(p)
            .is_some_and(|f| f.0.load(Ordering::Relaxed))
    }

    /// Nanoseconds since the run started (the clock of every timeout).
    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Every event below this is assembled: a thread may write its part of `seq` while
    /// `seq < released() + window`.
    pub(crate) fn released(&self) -> u64 {
        self.cursors
            .iter()
            .map(|c| c.0.load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
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
    /// - `seq < released() + window`, read by this thread, and `seq` is the next event of the
    ///   thread (each written once, in order, at or above its last published mark).
    #[inline]
    pub(crate) unsafe fn write(&self, t: usize, seq: u64, part: Part<'p>) {
        let cell = &self.rings[t].0[(seq & self.mask) as usize];
        // SAFETY: rule 1: the previous occupant of the cell was taken before its assembler's
        // cursor was released past it, and no assembler takes this cell before our mark passes
        // `seq`.
        cell.with_mut(|p| unsafe { *p = Some(part) });
    }

    /// Publishes that thread `t` has written its parts of every event below `mark`.
    pub(crate) fn publish(&self, t: usize, mark: u64) {
        self.marks[t].0.store(mark, Ordering::Release);
    }

    /// Every event below this has all its parts written.
    pub(crate) fn complete_end(&self) -> u64 {
        self.marks
            .iter()
            .map(|m| m.0.load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
    }

    /// The thread that assembles `seq`.
    pub(crate) fn assembler_of(&self, seq: u64) -> u64 {
        (seq / GROUP) % self.threads
    }

    /// Takes thread `t`'s part of `seq` (`None` for a thread index out of range).
    ///
    /// # Safety
    ///
    /// The caller is thread [`assembler_of(seq)`](PartExchange::assembler_of), has read
    /// `complete_end() > seq`, takes each `(t, seq)` once, and stores its cursor past `seq` only
    /// after.
    #[inline]
    pub(crate) unsafe fn take(&self, t: usize, seq: u64) -> Option<Part<'p>> {
        let ring = self.rings.get(t)?;
        let cell = ring.0.get((seq & self.mask) as usize)?;
        // SAFETY: rule 2: every thread's mark is past `seq`, so the cell is written and its
        // writer does not touch it again before our cursor moves past `seq` (rules 1, 3); only
        // the assembler of `seq` takes it.
        cell.with_mut(|p| unsafe { (*p).take() })
    }

    /// Publishes that thread `t` has assembled every event of its groups below `end`.
    pub(crate) fn set_cursor(&self, t: usize, end: u64) {
        self.cursors[t].0.store(end, Ordering::Release);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Rules 1-3 under loom: two receiving threads write their parts of events 0..EVENTS
    //! into rings of a window of 2 (so every cell is reused), thread 0 assembles them (the
    //! events are all in its first group). Every part taken must be the one written for that
    //! event, each exactly once; a cell access not ordered by the marks and cursors is a data
    //! race that loom reports.
    use super::*;
    use loom::sync::Arc;

    const EVENTS: u64 = 3;
    const WINDOW: usize = 2;

    fn part(t: usize, seq: u64) -> Part<'static> {
        Part {
            chunk: None,
            end: t as u32,
            missing: 0,
            status: Default::default(),
            bcid: None,
            packets: 1,
            l1id: seq as u32,
        }
    }

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(2);
        }
        builder.check(f);
    }

    /// Thread 0 assembles every complete event from `*assembled` on (rules 2, 3).
    fn assemble(
        shared: &PartExchange<'static>,
        assembled: &mut u64,
        taken: &mut Vec<(usize, u64, u32)>,
    ) {
        let end = shared.complete_end().min(EVENTS);
        while *assembled < end {
            let seq = *assembled;
            assert_eq!(shared.assembler_of(seq), 0);
            for w in 0..2 {
                // SAFETY: thread 0 assembles every event here, `complete_end` is past `seq`,
                // each is taken once and the cursor moves after.
                let p = unsafe { shared.take(w, seq) }.expect("a written part");
                assert_eq!(p.end as usize, w);
                taken.push((w, seq, p.l1id));
            }
            *assembled = seq + 1;
            shared.set_cursor(0, seq + 1);
        }
    }

    /// Thread `t` writing its parts in order, waiting for the window (rule 1); thread 0 also
    /// assembles what is complete while it waits and after.
    fn receive(shared: &PartExchange<'static>, t: usize, taken: &mut Vec<(usize, u64, u32)>) {
        let mut assembled = 0u64;
        for seq in 0..EVENTS {
            while seq >= shared.released() + WINDOW as u64 {
                if t == 0 {
                    assemble(shared, &mut assembled, taken);
                }
                loom::thread::yield_now();
            }
            // SAFETY: this thread is the only one using index `t`; the window was checked.
            unsafe { shared.write(t, seq, part(t, seq)) };
            shared.publish(t, seq + 1);
        }
        while t == 0 && assembled < EVENTS {
            assemble(shared, &mut assembled, taken);
            loom::thread::yield_now();
        }
    }

    #[test]
    fn loom_rings_hand_every_part_to_its_assembler_once_in_order() {
        model(|| {
            let shared = Arc::new(PartExchange::new(WINDOW, 2, 0));
            // Thread 1 has no group below GROUP: its cursor is past these events.
            shared.set_cursor(1, GROUP);
            let other = {
                let shared = Arc::clone(&shared);
                loom::thread::spawn(move || {
                    let mut none = Vec::new();
                    receive(&shared, 1, &mut none);
                    assert!(none.is_empty());
                })
            };
            let mut taken = Vec::new();
            receive(&shared, 0, &mut taken);
            other.join().unwrap();
            let want: Vec<(usize, u64, u32)> = (0..EVENTS)
                .flat_map(|seq| (0..2).map(move |w| (w, seq, seq as u32)))
                .collect();
            assert_eq!(taken, want);
        });
    }
}
