//! The hand-over between a SW ROD link's two ends ([`Link`]): the `free` and `ready` queues of
//! batches, the batch the sink fills, and the link's counters. The sink's side appends, flushes
//! and hands over; the core thread's side gives batches back. The loom tests at the end check
//! the hand-over.

use rodeo_format::fragment::Status;
use rodeo_memory::sync::{lock, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};
use rodeo_memory::{BoundedQueue, FullPolicy};
use rodeo_swrod::{Fragment, ROB_HEADER_WORDS};

use super::batch::{gather, l1id_of, rod_pieces, Batch, Frag, Room, SPILLED};
use super::counters::SwRodLinkCounters;

/// The sink's state behind the link's mutex.
#[derive(Debug, Default)]
struct Open {
    /// The batch being filled.
    batch: Option<Batch>,
    /// Batches handed over since the last flush.
    handed: usize,
}

#[derive(Debug)]
pub(super) struct Link {
    /// Empty batches for the sink (`refuse`: as many slots as batches, so a give-back never
    /// finds it full; see [`Link::give_back`]).
    pub(super) free: BoundedQueue<Batch>,
    /// Filled batches for the core thread (`refuse`, as large as `free`, for the same reason).
    pub(super) ready: BoundedQueue<Batch>,
    /// The batch the sink fills (taken from `free` at its first fragment), and what the
    /// sink handed over since its last flush.
    open: Mutex<Open>,
    /// Free batches the sink needs to read one more superpage without waiting: the most one
    /// superpage has taken so far (at least 1, at most every batch of the link).
    pub(super) need: AtomicUsize,
    pub(super) consumer_gone: AtomicBool,
    /// The sink last reported no room (counted once per episode in `sink_waits`).
    pub(super) no_room: AtomicBool,
    pub(super) sink_waits: AtomicU64,
    pub(super) dropped_no_consumer: AtomicU64,
    pub(super) fragments: AtomicU64,
    pub(super) in_place: AtomicU64,
    pub(super) rejected: AtomicU64,
    pub(super) out_of_order: AtomicU64,
    pub(super) duplicates: AtomicU64,
    pub(super) skipped: AtomicU64,
}

impl Link {
    /// A link of `batches` batches, each with room for about `words` ROD words, all free.
    pub(super) fn new(batches: usize, words: usize) -> Link {
        let link = Link {
            free: BoundedQueue::new("ros.swrod.free", batches, FullPolicy::Refuse),
            ready: BoundedQueue::new("ros.swrod.ready", batches, FullPolicy::Refuse),
            open: Mutex::new(Open::default()),
            need: AtomicUsize::new(1),
            consumer_gone: AtomicBool::new(false),
            no_room: AtomicBool::new(false),
            sink_waits: AtomicU64::new(0),
            dropped_no_consumer: AtomicU64::new(0),
            fragments: AtomicU64::new(0),
            in_place: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            out_of_order: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        };
        for _ in 0..batches {
            link.give_back(Batch::with_capacity(words));
        }
        link
    }

    /// The sink's side: a free batch, waiting (with the hand-over back-off, one `sink_waits`
    /// per wait) while the core thread holds them all; `None` once the core thread's input
    /// is gone.
    fn take_free(&self) -> Option<Batch> {
        if let Some(b) = self.free.pop() {
            return Some(b);
        }
        if !self.consumer_gone.load(Ordering::Acquire) {
            self.sink_waits.fetch_add(1, Ordering::Relaxed);
        }
        self.free
            .pop_or(|| self.consumer_gone.load(Ordering::Acquire))
    }

    /// The sink's side: appends one fragment of `size` words (its `pieces`, whose first
    /// [`ROB_HEADER_WORDS`] are the builder's ROB header, left out) to the open batch, taking
    /// a free batch first if none is open: into a lent store page behind the store's ROB
    /// header when one has room (a batch whose pages are full is handed over first), else
    /// into the batch's words. Hands the batch over when full. Without a consumer the
    /// fragment is dropped and counted. The fragment's L1ID (ROD word 5) is read from the
    /// pieces. The tests' way in: a builder's fragments, which know their L1ID, go through
    /// [`append_run`](Link::append_run).
    #[cfg(any(test, loom))]
    pub(super) fn append<'a>(
        &self,
        size: usize,
        pieces: impl Iterator<Item = &'a [u32]> + Clone,
        status: Status,
    ) {
        let l1id = rod_pieces(pieces.clone())
            .flatten()
            .nth(crate::store::ROD_L1ID_WORD)
            .copied();
        let mut guard = lock(&self.open);
        self.append_locked(&mut guard, size, pieces, status, l1id);
    }

    /// The sink's side: appends a run of fragments as `append` does each,
    /// under one lock (one pass through the link's mutex per run rather than per fragment).
    pub(super) fn append_run(&self, fragments: &[Fragment<'_>]) {
        let mut guard = lock(&self.open);
        for f in fragments {
            // The builder wrote `f.l1id()` into the ROD header: passing it on spares a read of
            // the page just written (its samples beside a busy core were the copy's stores
            // waiting: no gain measured, docs/benchmarks-history-2026-12b.md).
            let l1id = Some(f.l1id());
            self.append_locked(&mut guard, f.size_words(), f.pieces(), f.status(), l1id);
        }
    }

    fn append_locked<'a>(
        &self,
        state: &mut Open,
        size: usize,
        pieces: impl Iterator<Item = &'a [u32]>,
        status: Status,
        l1id: Option<u32>,
    ) {
        let rod_words = size.saturating_sub(ROB_HEADER_WORDS);
        let rob_words = ROB_HEADER_WORDS + rod_words;
        let room = loop {
            if state.batch.is_none() {
                state.batch = self.take_free();
            }
            let Some(batch) = state.batch.as_mut() else {
                self.dropped_no_consumer.fetch_add(1, Ordering::Relaxed);
                return;
            };
            match batch.room(rob_words) {
                Room::PagesFull if !batch.frags.is_empty() => {
                    if let Some(b) = state.batch.take() {
                        self.hand_over(b);
                        state.handed += 1;
                    }
                }
                Room::PagesFull => break Room::Spill,
                room => break room,
            }
        };
        let Some(batch) = state.batch.as_mut() else {
            return;
        };
        match room {
            Room::Page(i, offset) => {
                let lent = &mut batch.pages[i];
                let header = lent.rob_header(rob_words, status);
                let dst = &mut lent.words_mut()[offset..offset + rob_words];
                // Plain stores: streaming stores waited on the write-combining buffers and the
                // node took 25-30% fewer fragments a second with them (2026-12-05; a lent page
                // is lent again soon after it is freed, its lines often still cached).
                dst[..ROB_HEADER_WORDS].copy_from_slice(&header);
                let copied = gather(pieces, &mut dst[ROB_HEADER_WORDS..]);
                debug_assert_eq!(
                    l1id,
                    l1id_of(&dst[ROB_HEADER_WORDS..ROB_HEADER_WORDS + copied]),
                    "the L1ID passed is the one written"
                );
                debug_assert_eq!(copied, rod_words, "a fragment's pieces are its size");
                // Words the pieces did not cover (never, for a builder's fragment) read as 0.
                dst[ROB_HEADER_WORDS + copied..].fill(0);
                batch.frags.push(Frag {
                    page: i as u32,
                    start: offset as u32,
                    len: rob_words as u32,
                    status,
                    l1id,
                });
                batch.offset = offset + rob_words;
                // Counted per batch at the hand-over: an atomic add here would wait for the
                // fragment's writes into the page to drain first.
                batch.in_place += 1;
            }
            Room::Spill | Room::PagesFull => {
                let start = batch.words.len();
                for piece in rod_pieces(pieces) {
                    batch.words.extend_from_slice(piece);
                }
                let rod = &batch.words[start..];
                batch.frags.push(Frag {
                    page: SPILLED,
                    start: start as u32,
                    len: rod.len() as u32,
                    status,
                    l1id,
                });
            }
        }
        if batch.is_full() {
            if let Some(b) = state.batch.take() {
                self.hand_over(b);
                state.handed += 1;
            }
        }
    }

    /// The sink's side: hands the open batch (if it holds anything) to the core thread, and
    /// learns from the batches handed over since the last flush (about a superpage's worth)
    /// how many a superpage may take.
    pub(super) fn flush(&self) {
        let mut guard = lock(&self.open);
        let state = &mut *guard;
        // Once the consumer is gone an empty open batch goes too, so its lent pages go back.
        let gone = self.consumer_gone.load(Ordering::Acquire);
        if state
            .batch
            .as_ref()
            .is_some_and(|b| gone || !b.frags.is_empty())
        {
            if let Some(b) = state.batch.take() {
                self.hand_over(b);
                state.handed += 1;
            }
        }
        let took = std::mem::take(&mut state.handed).min(self.free.capacity());
        if took > self.need.load(Ordering::Relaxed) {
            self.need.store(took, Ordering::Relaxed);
        }
    }

    /// The sink's side: a filled batch to the core thread. Every batch is in one place at a
    /// time (free, ready, the sink's hands, the core's) and `ready` has a slot per batch, so
    /// the push cannot find it full. Once the core thread's input is gone the batch's
    /// fragments are counted as dropped instead, and the batch freed.
    fn hand_over(&self, batch: Batch) {
        let n = batch.frags.len() as u64;
        if self.consumer_gone.load(Ordering::Acquire) {
            self.dropped_no_consumer.fetch_add(n, Ordering::Relaxed);
            let mut batch = batch;
            // Its lent pages go back to the store (through its returned queue).
            batch.pages.clear();
            batch.clear();
            self.give_back(batch);
            return;
        }
        let in_place = batch.in_place;
        let pushed = self.ready.push(batch);
        debug_assert!(pushed.is_ok(), "ros.swrod.ready has a slot per batch");
        self.fragments.fetch_add(n, Ordering::Relaxed);
        self.in_place.fetch_add(in_place, Ordering::Relaxed);
    }

    /// The core thread's side: a batch back to the sink. `free` has a slot per batch, so the
    /// push cannot find it full (a full event in `/metrics` would show a lost batch).
    pub(super) fn give_back(&self, batch: Batch) {
        let pushed = self.free.push(batch);
        debug_assert!(pushed.is_ok(), "ros.swrod.free has a slot per batch");
    }

    /// The link's counters, as they are now.
    pub(super) fn counters(&self) -> SwRodLinkCounters {
        SwRodLinkCounters {
            fragments: self.fragments.load(Ordering::Relaxed),
            in_place: self.in_place.load(Ordering::Relaxed),
            sink_waits: self.sink_waits.load(Ordering::Relaxed),
            dropped_no_consumer: self.dropped_no_consumer.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            out_of_order: self.out_of_order.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The free/ready hand-over under loom (queues and flags from rodeo-memory's facade): every
    //! buffer is in one place at a time, so neither queue is ever found full, fragments arrive
    //! in order, and a consumer that goes away never leaves the sink waiting.
    use super::*;
    use std::sync::Arc;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(2);
        }
        builder.check(f);
    }

    /// The sink's loop: `n` fragments of one word (after the ROB header), each appended and
    /// flushed (a batch each); how many were not dropped.
    fn sink(link: &Link, n: u32) -> u32 {
        for i in 0..n {
            let rob = [0u32; ROB_HEADER_WORDS];
            link.append(
                ROB_HEADER_WORDS + 1,
                [&rob[..], &[i][..]].into_iter(),
                Status::default(),
            );
            link.flush();
        }
        n - link.dropped_no_consumer.load(Ordering::Relaxed) as u32
    }

    #[test]
    fn loom_every_buffer_comes_back_and_no_queue_is_ever_full() {
        model(|| {
            let link = Arc::new(Link::new(2, 4));
            let producer = {
                let link = Arc::clone(&link);
                loom::thread::spawn(move || sink(&link, 3))
            };
            let mut got = Vec::new();
            while got.len() < 3 {
                match link.ready.pop() {
                    Some(mut b) => {
                        got.extend_from_slice(&b.words);
                        b.clear();
                        link.give_back(b);
                    }
                    None => loom::thread::yield_now(),
                }
            }
            assert_eq!(producer.join().unwrap(), 3);
            assert_eq!(got, vec![0, 1, 2]);
            assert_eq!((link.free.len(), link.ready.len()), (2, 0));
            assert_eq!((link.free.full_events(), link.ready.full_events()), (0, 0));
            assert_eq!(link.fragments.load(Ordering::Relaxed), 3);
        });
    }

    #[test]
    fn loom_a_consumer_that_goes_away_never_leaves_the_sink_waiting() {
        model(|| {
            let link = Arc::new(Link::new(1, 4));
            let producer = {
                let link = Arc::clone(&link);
                loom::thread::spawn(move || sink(&link, 3))
            };
            // The consumer takes nothing and goes (as SwRodInput's drop does).
            link.consumer_gone.store(true, Ordering::Release);
            let sent = producer.join().unwrap();
            let dropped = link.dropped_no_consumer.load(Ordering::Relaxed);
            assert_eq!(u64::from(sent) + dropped, 3);
            assert!(sent <= 1, "one batch: at most one fragment handed over");
        });
    }
}
