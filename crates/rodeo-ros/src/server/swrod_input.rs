//! The SW ROD fragment builder feeding the event store: a [`FragmentSink`] on the builder's
//! side ([`StoreSink`]) and an [`Input`] on the core thread's side ([`SwRodInput`]), joined by
//! two bounded lock-free queues of batches ([`swrod_link`]).
//!
//! # Data flow and copies
//!
//! The builder's receiving threads complete a fragment as N pool blocks joined by reference.
//! The sink writes it, in one pass over the pieces (`FragmentSink::inspect`), into the link's
//! open **batch**, and leaves the blocks to the builder, which recycles them at once through
//! its thread's pool caches, so the builder's memory stays with the builder. A batch carries
//! store pages that the core thread lent it ([`EventStore::lend`], up to
//! `BATCH_PAGES_BYTES` worth): the sink writes each fragment straight into the next room in
//! them, behind the store's own 8-word ROB header with the builder's status (TIMEOUT,
//! FRAGMENT_LOST, BCID_CHECK_FAIL, ...), in place of the builder's header, and warms the lines
//! where the next one goes. A batch goes to the core thread when the builder has read a
//! superpage (`FragmentSink::flush`), when its pages are full, or at [`BATCH_FRAGMENTS`]
//! fragments: a batch is to the SW ROD input what a superpage is to the S-LINK input, so the
//! two threads exchange one queue item per superpage, not one per fragment (a queue hop moves
//! a few cache lines between the cores: per fragment it cost more than the fragment's
//! copies). The core thread then indexes each fragment where it lies ([`EventStore::adopt`]:
//! no copy, and no read of the page: the sink noted each fragment's L1ID), takes back the
//! pages written, lends fresh ones in their place, and returns the batch. The only copy of a
//! fragment between the builder's blocks and the reply is the sink's, on the builder's core
//! (the S-LINK input's is the core thread's).
//!
//! A fragment that no lent page can take (the store lent the batch none, its channel having
//! no page to spare, or one larger than a page) is copied into the batch's own words instead
//! (at most [`BATCH_WORDS`] of them), and the core thread copies it into the store
//! ([`EventStore::ingest`]), as before the pages were lent: two copies, but back-pressure
//! stays the store's. A link's batches hold at most a quarter of their channel's pages
//! (`LENT_SHARE`); the store keeps its last free page ([`crate::store::LEND_KEEP`]).
//!
//! # Order
//!
//! The store expects each channel's L1IDs in order: an absent L1ID older than the channel's
//! last one is answered LOST (protocol rule 3), as an S-LINK ROD sends in order. A builder of
//! one receiving thread (a pooled ROB, [`rodeo_swrod::BuilderPool`]) completes its L1IDs in
//! order, incomplete ones included (a thread closes its oldest open L1ID first), so each
//! fragment is the one the input waits for and is stored straight from its batch. A builder of
//! N threads does not: its threads complete L1IDs in groups of 64, group `g` on thread
//! `g % N`, so a group can arrive before the one before it is finished. The input therefore
//! puts the fragments back in L1ID order before storing them, in a window twice the builder's
//! own (L1IDs in flight, [`SwRodConfig::window`]): a fragment ahead of the one it waits for is
//! copied out of its batch into a window slot (a buffer of the core thread's, reused), so a
//! batch always goes back once read and the window never holds the builder back. The builder
//! never has more L1IDs open than its window and builds every one exactly once, so the window
//! always drains.
//!
//! What the window does with the unexpected:
//! - a fragment a whole window or more ahead of the L1ID it waits for (a gap in the builder's
//!   sequence, or a builder restarted at another L1ID): the window is flushed in order up to
//!   it, the L1IDs that never came counted in [`SwRodLinkCounters::skipped`], and waiting
//!   resumes from there;
//! - a second copy of an L1ID waiting in the window: dropped, counted in
//!   [`SwRodLinkCounters::duplicates`];
//! - a fragment behind the L1ID it waits for (one skipped earlier, or a copy of one stored):
//!   stored as it came (the store keeps the first copy of an L1ID), counted in
//!   [`SwRodLinkCounters::out_of_order`];
//! - a fragment too short to carry an L1ID: counted in [`SwRodLinkCounters::rejected`].
//!
//! # State and ownership
//!
//! | queue | producer | consumer | holds |
//! |---|---|---|---|
//! | `free` | core thread | builder threads (any) | empty batches, with their lent pages |
//! | `ready` | builder threads (any) | core thread | filled batches |
//!
//! A lent page is written by one thread at a time, the holder of its batch, and read by no one
//! before the core thread has indexed its fragments; the queues order the sink's writes before
//! the core thread's look (see [`crate::store`], `lend`). When the input is dropped, the lent
//! pages of the batches it can reach go back to the store at once, and those of a batch the sink
//! holds at its next hand-over or flush, so a store outliving its input gets every page back.
//!
//! The batch being filled (`open`) is behind a mutex that only the ROB's receiving threads
//! take (one thread for a pooled ROB: never contended). Every batch is allocated when the link
//! is made and keeps its capacity; one that must grow for a larger fragment grows once. Each
//! queue is as large as the set of batches, so a push never fails. The window's slots and the
//! batch being read belong to the core thread.
//!
//! # Back-pressure
//!
//! Full store: [`SwRodInput::poll`] stops at the refused fragment and retries it on the next
//! poll, so read batches stop coming back. Fewer free batches than one superpage has taken so
//! far (learnt at each `flush`): the sink reports no room (`FragmentSink::has_room`, counted
//! once per episode in [`SwRodLinkCounters::sink_waits`]) and its builder stops reading its
//! cards, which stall, so that a pool thread does not start a superpage it cannot finish; a
//! sink that still needs a batch in the middle of a superpage waits (spin, then yield, then
//! short sleeps; counted likewise) while holding the fragment, so its pool blocks stay taken.
//! Nothing is dropped on the way; a fragment the store drops for its own reasons (a duplicate
//! L1ID, one cleared before it arrived, too short to hold an L1ID) is counted by the store as
//! for any input.
//!
//! # Shutdown
//!
//! Dropping the [`SwRodInput`] (the core thread stopped) makes a waiting sink give up: it then
//! drops the fragment and counts it in [`SwRodLinkCounters::dropped_no_consumer`], as it does
//! for a batch it would hand over from then on, so a builder never hangs on a node that is
//! gone. [`StoreSink::abandon`] does the same while the core thread still runs: a node stopping
//! its builder before its core thread calls it once the builder no longer progresses (a full
//! store nobody clears), so the builder's final fragments cannot wait forever; fragments
//! already handed over are still stored.
//!
//! [`SwRodInputs`] polls several links (one per store channel) as one [`Input`], as a readout
//! node fed by one builder per ROB does.

use std::sync::Arc;

use rodeo_format::fragment::Status;
use rodeo_format::l1id::next_extended_l1id;

use super::input::Input;
use crate::store::{EventStore, IngestError, LentPage};
use rodeo_memory::sync::{lock, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};
use rodeo_memory::{BoundedQueue, FullPolicy};
use rodeo_swrod::{Flow, Fragment, FragmentSink, SwRodConfig, SwRodCounters, ROB_HEADER_WORDS};

/// Fragments a batch holds at most before the sink hands it over.
pub const BATCH_FRAGMENTS: usize = 64;
/// ROD words a batch holds before the sink hands it over (32 KiB: half a superpage's worth).
pub const BATCH_WORDS: usize = 8 * 1024;
/// Batches of a link: one being filled, one being stored, one in between. Few and small, so
/// that the batches of 24 ROBs stay in the cores' caches (the sink writes them, the core
/// thread reads them at once).
const BATCHES: usize = 3;

/// Lent store pages a batch carries at most: 64 KiB of the usual 4 KiB pages, about what a
/// SW ROD superpage completes.
const BATCH_PAGES_BYTES: usize = 64 * 1024;

/// A link's batches hold at most a quarter (1 / `LENT_SHARE`) of their channel's pages. The
/// rest is always the store's: a fragment the core thread must copy in (one larger than a
/// page, or one put back in order) then finds room once the events before it are cleared,
/// however many pages the batches hold.
const LENT_SHARE: usize = 4;

/// `Frag::page` of a fragment copied into the batch's own words.
const SPILLED: u32 = u32::MAX;

/// Where one fragment of a batch lies.
#[derive(Debug, Clone, Copy)]
struct Frag {
    /// Index into the batch's lent pages, or [`SPILLED`].
    page: u32,
    /// In a page: the word offset of its ROB header; spilled: where its ROD words start in
    /// the batch's words.
    start: u32,
    /// In a page: the ROB fragment's words (header included); spilled: its ROD words.
    len: u32,
    /// The builder's status.
    status: Status,
    /// Its extended L1ID (ROD word 5), read by the sink while writing it; `None`: too short.
    l1id: Option<u32>,
}

/// Fragments on their way, each either written by the sink straight into one of the batch's
/// lent store pages, header included (the core thread then indexes it where it lies), or,
/// when no lent page has room (none lent, or a fragment larger than a page), as ROD words
/// back to back in the batch's own `words` (the core thread copies it into the store).
#[derive(Debug, Default)]
struct Batch {
    /// Store pages lent to this batch by the core thread, filled in order.
    pages: Vec<LentPage>,
    /// Pages written into; the last of them may have room left at `offset`.
    used: usize,
    offset: usize,
    words: Vec<u32>,
    frags: Vec<Frag>,
    /// Fragments written into lent pages.
    in_place: u64,
}

/// Where the sink may write a fragment.
enum Room {
    /// In lent page `.0` at word `.1`.
    Page(usize, usize),
    /// The lent pages are full: hand the batch over and take the next.
    PagesFull,
    /// No lent page could hold it: copy it into the batch's words.
    Spill,
}

impl Batch {
    /// An empty batch with room for about `words` ROD words.
    fn with_capacity(words: usize) -> Batch {
        Batch {
            pages: Vec::new(),
            used: 0,
            offset: 0,
            words: Vec::with_capacity(words),
            frags: Vec::with_capacity(BATCH_FRAGMENTS),
            in_place: 0,
        }
    }

    /// The ROD words of fragment `f` (in its lent page or the batch's words).
    /// Empty when its page is no longer the batch's (taken back at a release).
    fn rod(&self, f: &Frag) -> &[u32] {
        let (start, len) = (f.start as usize, f.len as usize);
        if f.page == SPILLED {
            return self.words.get(start..start + len).unwrap_or(&[]);
        }
        match self.pages.get(f.page as usize) {
            Some(lent) => lent.words(start + ROB_HEADER_WORDS, len - ROB_HEADER_WORDS),
            None => &[],
        }
    }

    /// Where a ROB fragment of `words` words (header included) goes: after the last one in
    /// the current lent page, at the start of the next lent page, or nowhere in a page.
    fn room(&mut self, words: usize) -> Room {
        let Some(page_words) = self.pages.first().map(LentPage::page_words) else {
            return Room::Spill;
        };
        if words > page_words {
            return Room::Spill;
        }
        if self.used > 0 && self.offset + words <= page_words {
            return Room::Page(self.used - 1, self.offset);
        }
        match self.pages.get(self.used) {
            Some(next) => {
                self.offset = next.first_offset(words);
                self.used += 1;
                Room::Page(self.used - 1, self.offset)
            }
            None => Room::PagesFull,
        }
    }

    /// Warms the lines where the next fragment goes if it has `words` words (the last one's
    /// size): in the current page after the last one, or at the start of the next page. The
    /// pages are the store's, cold in this core's cache; the builder's work on the next
    /// fragment hides the misses.
    fn prefetch_next(&self, words: usize) {
        let Some(page) = self.used.checked_sub(1).and_then(|i| self.pages.get(i)) else {
            return;
        };
        if self.offset + words <= page.page_words() {
            page.prefetch(self.offset, words);
        } else if let Some(next) = self.pages.get(self.used) {
            next.prefetch(next.first_offset(words), words);
        }
    }

    /// Gives every lent page of the batch back to `store` (the input stopping).
    fn take_back_pages(&mut self, store: &mut EventStore) {
        for lent in self.pages.drain(..) {
            store.take_back(lent);
        }
    }

    /// Empties the batch (its lent pages kept, to be written from the start).
    fn clear(&mut self) {
        self.words.clear();
        self.frags.clear();
        self.used = 0;
        self.offset = 0;
        self.in_place = 0;
    }

    fn is_full(&self) -> bool {
        self.frags.len() >= BATCH_FRAGMENTS || self.words.len() >= BATCH_WORDS
    }
}

/// Copies `pieces` less the builder's ROB header into `dst` (at most its length); returns
/// the words copied.
fn gather<'a>(pieces: impl Iterator<Item = &'a [u32]>, dst: &mut [u32]) -> usize {
    let mut skip = ROB_HEADER_WORDS;
    let mut at = 0;
    for piece in pieces {
        let n = skip.min(piece.len());
        skip -= n;
        let piece = &piece[n..];
        let m = piece.len().min(dst.len() - at);
        dst[at..at + m].copy_from_slice(&piece[..m]);
        at += m;
    }
    at
}

/// The sink's state behind the link's mutex.
#[derive(Debug, Default)]
struct Open {
    /// The batch being filled.
    batch: Option<Batch>,
    /// Batches handed over since the last flush.
    handed: usize,
}

/// One fragment out of its batch: a window slot's copy (the core thread's buffer).
#[derive(Debug)]
struct Filled {
    words: Vec<u32>,
    status: Status,
}

#[derive(Debug)]
struct Link {
    /// Empty batches for the sink (`refuse`: as many slots as batches, so a give-back never
    /// finds it full; see [`Link::give_back`]).
    free: BoundedQueue<Batch>,
    /// Filled batches for the core thread (`refuse`, as large as `free`, for the same reason).
    ready: BoundedQueue<Batch>,
    /// The batch the sink fills (taken from `free` at its first fragment), and what the
    /// sink handed over since its last flush.
    open: Mutex<Open>,
    /// Free batches the sink needs to read one more superpage without waiting: the most one
    /// superpage has taken so far (at least 1, at most every batch of the link).
    need: AtomicUsize,
    consumer_gone: AtomicBool,
    /// The sink last reported no room (counted once per episode in `sink_waits`).
    no_room: AtomicBool,
    sink_waits: AtomicU64,
    dropped_no_consumer: AtomicU64,
    fragments: AtomicU64,
    in_place: AtomicU64,
    rejected: AtomicU64,
    out_of_order: AtomicU64,
    duplicates: AtomicU64,
    skipped: AtomicU64,
}

impl Link {
    /// A link of `batches` batches, each with room for about `words` ROD words, all free.
    fn new(batches: usize, words: usize) -> Link {
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
    /// fragment is dropped and counted.
    fn append<'a>(&self, size: usize, pieces: impl Iterator<Item = &'a [u32]>, status: Status) {
        let rod_words = size.saturating_sub(ROB_HEADER_WORDS);
        let rob_words = ROB_HEADER_WORDS + rod_words;
        let mut guard = lock(&self.open);
        let state = &mut *guard;
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
                dst[..ROB_HEADER_WORDS].copy_from_slice(&header);
                let rod = &mut dst[ROB_HEADER_WORDS..];
                let copied = gather(pieces, rod);
                debug_assert_eq!(copied, rod_words, "a fragment's pieces are its size");
                // Words the pieces did not cover (never, for a builder's fragment) read as 0.
                rod[copied..].fill(0);
                batch.frags.push(Frag {
                    page: i as u32,
                    start: offset as u32,
                    len: rob_words as u32,
                    status,
                    l1id: l1id_of(rod),
                });
                batch.offset = offset + rob_words;
                batch.prefetch_next(rob_words);
                // Counted per batch at the hand-over: an atomic add here would wait for the
                // fragment's writes into the (cold) page to drain first.
                batch.in_place += 1;
            }
            Room::Spill | Room::PagesFull => {
                let start = batch.words.len();
                let mut skip = ROB_HEADER_WORDS;
                for piece in pieces {
                    let n = skip.min(piece.len());
                    batch.words.extend_from_slice(&piece[n..]);
                    skip -= n;
                }
                let rod = &batch.words[start..];
                batch.frags.push(Frag {
                    page: SPILLED,
                    start: start as u32,
                    len: rod.len() as u32,
                    status,
                    l1id: l1id_of(rod),
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
    fn flush(&self) {
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
    fn give_back(&self, batch: Batch) {
        let pushed = self.free.push(batch);
        debug_assert!(pushed.is_ok(), "ros.swrod.free has a slot per batch");
    }
}

/// Counters of a [`swrod_link`] (64-bit, monotonic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwRodLinkCounters {
    /// Fragments the sink handed to the core thread.
    pub fragments: u64,
    /// Of those, the fragments the sink wrote straight into a lent store page (the core
    /// thread indexed them where they lay); the rest it copied into the store.
    pub in_place: u64,
    /// Times the sink found no free batch and waited, or reported no room so that its
    /// builder stopped reading its cards (back-pressure from the store; once per episode).
    pub sink_waits: u64,
    /// Fragments dropped because the core thread's input was gone, or still queued or waiting
    /// in the reorder window when it went (shutdown only).
    pub dropped_no_consumer: u64,
    /// Fragments the store refused for good: no readable L1ID, or no such channel (a
    /// configuration error). Duplicates and fragments already cleared are the store's counts.
    pub rejected: u64,
    /// Fragments behind the L1ID the window waited for, stored as they came.
    pub out_of_order: u64,
    /// Second copies of an L1ID waiting in the window, dropped.
    pub duplicates: u64,
    /// L1IDs the window stopped waiting for (a fragment came a whole window later).
    pub skipped: u64,
}

impl SwRodLinkCounters {
    /// Adds every counter of `other`.
    pub fn add(&mut self, other: &SwRodLinkCounters) {
        self.fragments += other.fragments;
        self.in_place += other.in_place;
        self.sink_waits += other.sink_waits;
        self.dropped_no_consumer += other.dropped_no_consumer;
        self.rejected += other.rejected;
        self.out_of_order += other.out_of_order;
        self.duplicates += other.duplicates;
        self.skipped += other.skipped;
    }

    /// `(name, value)` pairs, for metrics and reports.
    pub fn fields(&self) -> [(&'static str, u64); 8] {
        [
            ("fragments", self.fragments),
            ("in_place", self.in_place),
            ("sink_waits", self.sink_waits),
            ("dropped_no_consumer", self.dropped_no_consumer),
            ("rejected", self.rejected),
            ("out_of_order", self.out_of_order),
            ("duplicates", self.duplicates),
            ("skipped", self.skipped),
        ]
    }
}

/// The counters of a SW ROD input: its builders' and its links', each summed over the ROBs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwRodInputCounters {
    /// The fragment builders' counters.
    pub builder: SwRodCounters,
    /// The links' counters.
    pub link: SwRodLinkCounters,
    /// FELIX blocks the cards had handed over and no builder read before the node stopped:
    /// dropped at shutdown (known once the builders have stopped; zero before).
    pub unread_blocks: u64,
    /// Bytes of those blocks.
    pub unread_bytes: u64,
    /// CPU time the emulated FELIX cards spent writing superpages, in nanoseconds (lazy
    /// channels: inside the builder threads, so part of `builder.cpu_ns`; known once the
    /// builders have stopped, zero before).
    pub card_cpu_ns: u64,
}

/// Makes a link between a builder configured by `config` and store channel `channel`: a
/// reorder window twice the builder's window of L1IDs in flight, and batches (`extra` more
/// than the minimum of [`BATCHES`]), each starting with room for about [`BATCH_WORDS`] ROD
/// words or [`BATCH_FRAGMENTS`] fragments of `words` ROD words, whichever is less.
pub fn swrod_link(
    channel: usize,
    config: &SwRodConfig,
    extra: usize,
    words: usize,
) -> (StoreSink, SwRodInput) {
    let window = 2 * config.window.max(1).next_power_of_two();
    let batch_words = (BATCH_FRAGMENTS * words.max(1)).min(BATCH_WORDS + words);
    let link = Arc::new(Link::new(BATCHES + extra, batch_words));
    (
        StoreSink {
            link: Arc::clone(&link),
        },
        SwRodInput {
            link,
            channel,
            batch: None,
            at: 0,
            held: None,
            ahead: None,
            slots: (0..window).map(|_| None).collect(),
            spare: Vec::new(),
            lend_pages: None,
            base: 0,
            next: config.first_l1id,
            wrap: config.l1id_wrap.clamp(1, 1 << 24),
        },
    )
}

/// The builder's end: a [`FragmentSink`] that hands the fragments to the core thread in
/// batches.
#[derive(Debug, Clone)]
pub struct StoreSink {
    link: Arc<Link>,
}

impl StoreSink {
    /// The link's counters.
    pub fn counters(&self) -> SwRodLinkCounters {
        self.link.counters()
    }

    /// From now on a fragment that finds no free batch is dropped (counted in
    /// [`SwRodLinkCounters::dropped_no_consumer`]) instead of waiting, as when the input is
    /// gone, and so is a batch the sink would hand over; a sink waiting now gives up. For
    /// shutting a builder down while the core thread runs on and may never free a batch again
    /// (see the module docs).
    pub fn abandon(&self) {
        self.link.consumer_gone.store(true, Ordering::Release);
    }
}

impl Link {
    fn counters(&self) -> SwRodLinkCounters {
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

impl<'p> FragmentSink<'p> for StoreSink {
    /// Room for what one more superpage may complete: as many free batches (besides the open
    /// one) as a superpage has taken at most, so that the builder does not wait in the
    /// middle of a superpage, holding up the thread's other ROBs.
    fn has_room(&self) -> bool {
        let link = &*self.link;
        let room = link.free.len() >= link.need.load(Ordering::Relaxed)
            || link.consumer_gone.load(Ordering::Relaxed);
        // Each episode without room is back-pressure from the store, counted once.
        if room == link.no_room.load(Ordering::Relaxed) {
            link.no_room.store(!room, Ordering::Relaxed);
            if !room {
                link.sink_waits.fetch_add(1, Ordering::Relaxed);
            }
        }
        room
    }

    /// Writes the fragment into the open batch (into a lent store page, or the batch's own
    /// words) and lets the builder keep its blocks: they go back to the calling thread's pool
    /// caches in batches, not one shared free per block.
    fn inspect(&self, fragment: &Fragment<'p>) -> Option<Flow> {
        self.link
            .append(fragment.size_words(), fragment.pieces(), fragment.status());
        Some(Flow::Continue)
    }

    fn fragment(&self, fragment: Fragment<'p>) -> Flow {
        // The pool blocks go back when `fragment` drops, after the copy.
        self.inspect(&fragment).unwrap_or(Flow::Continue)
    }

    fn flush(&self) {
        self.link.flush();
    }

    fn finish(&self, _counters: &SwRodCounters) {
        self.link.flush();
    }
}

/// The core thread's end: an [`Input`] storing the builder's fragments on one channel.
#[derive(Debug)]
pub struct SwRodInput {
    link: Arc<Link>,
    channel: usize,
    /// The batch being stored, and its next fragment.
    batch: Option<Batch>,
    at: usize,
    /// A fragment behind the window that the store refused (full), retried first.
    held: Option<Filled>,
    /// A fragment a whole window ahead: the window is flushed up to it first.
    ahead: Option<Filled>,
    /// The reorder window: slot `(base + d) % len` holds the fragment `d` events after `next`.
    slots: Box<[Option<Filled>]>,
    /// Buffers of window slots, for reuse.
    spare: Vec<Vec<u32>>,
    /// Store pages lent to each batch (known at the first poll, from the store's size).
    lend_pages: Option<usize>,
    /// The slot of `next`.
    base: usize,
    /// The extended L1ID stored next.
    next: u32,
    /// The builder's L1ID wrap.
    wrap: u32,
}

impl SwRodInput {
    /// The link's counters.
    pub fn counters(&self) -> SwRodLinkCounters {
        self.link.counters()
    }
}

impl Drop for SwRodInput {
    fn drop(&mut self) {
        self.link.consumer_gone.store(true, Ordering::Release);
        // What never reached the store is counted, not lost silently.
        let mut left = self.slots.iter().filter(|s| s.is_some()).count() as u64;
        left += u64::from(self.held.is_some()) + u64::from(self.ahead.is_some());
        if let Some(b) = &self.batch {
            left += (b.frags.len() - self.at) as u64;
        }
        while let Some(b) = self.link.ready.pop() {
            left += b.frags.len() as u64;
        }
        // The free batches' lent pages go back to the store (through its returned queue);
        // the batches stay, empty, for a sink that still hands over (it then drops).
        for _ in 0..self.link.free.len() {
            let Some(mut b) = self.link.free.pop() else {
                break;
            };
            b.pages.clear();
            b.clear();
            self.link.give_back(b);
        }
        self.link
            .dropped_no_consumer
            .fetch_add(left, Ordering::Relaxed);
    }
}

/// Fragments stored per poll at most, so requests are not starved.
const POLL_BUDGET: usize = 256;

/// What to do with a fragment read from a batch.
enum Place {
    /// The L1ID the window waits for: store it now.
    Next,
    /// `d` events after it, within the window: file it in its slot.
    Window(usize),
    /// Behind the window: store it as it came.
    Behind,
    /// A window or more ahead.
    Ahead,
    /// No L1ID.
    Reject,
}

impl SwRodInput {
    /// Events from `self.next` to the extended L1ID `l1id`, counted along the wrap and ECR
    /// sequence (so 0 is `next` itself); large for an L1ID behind it.
    fn distance(&self, l1id: u32) -> u64 {
        let n = |x: u32| u64::from(x >> 24) * u64::from(self.wrap) + u64::from(x & 0x00FF_FFFF);
        let period = 256 * u64::from(self.wrap);
        (n(l1id) + period - n(self.next) % period) % period
    }

    /// Where a fragment of L1ID `l1id` goes (`None`: too short to carry one).
    fn place(&self, l1id: Option<u32>) -> Place {
        let Some(l1id) = l1id else {
            return Place::Reject;
        };
        let d = self.distance(l1id);
        let len = self.slots.len() as u64;
        if d == 0 {
            Place::Next
        } else if d < len {
            Place::Window(d as usize)
        } else if d >= 256 * u64::from(self.wrap) / 2 {
            Place::Behind
        } else {
            Place::Ahead
        }
    }

    /// A copy of a fragment in one of the core thread's buffers (`spare`).
    fn copy(spare: &mut Vec<Vec<u32>>, words: &[u32], status: Status) -> Filled {
        let mut buf = spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(words);
        Filled { words: buf, status }
    }

    /// Files `f` in window slot `slot`, unless a copy of its L1ID already waits there: that
    /// second copy is dropped (counted) and its buffer kept for reuse.
    fn file(&mut self, slot: usize, f: Filled) {
        if self.slots[slot].is_some() {
            self.link.duplicates.fetch_add(1, Ordering::Relaxed);
            self.spare.push(f.words);
        } else {
            self.slots[slot] = Some(f);
        }
    }

    /// Stores fragment `f` of `batch`: indexed where it lies in its lent page, or copied in
    /// from the batch's words; false when the store is full (nothing stored).
    fn store_frag(
        store: &mut EventStore,
        link: &Link,
        channel: usize,
        batch: &mut Batch,
        f: &Frag,
    ) -> bool {
        let (Some(lent), Some(l1id)) = (batch.pages.get_mut(f.page as usize), f.l1id) else {
            return Self::store_words(store, link, channel, batch.rod(f), f.status);
        };
        match store.adopt(channel, lent, f.start as usize, f.len as usize, l1id) {
            Err(IngestError::Full) => false,
            stored => {
                if stored.is_err() {
                    link.rejected.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
        }
    }

    /// Ends a read batch: the store takes back the pages the sink wrote into (their
    /// fragments stay where they are), lends it fresh ones in their place as far as it can,
    /// and the batch goes back to the sink.
    fn finish(&mut self, store: &mut EventStore, mut batch: Batch) {
        for lent in batch.pages.drain(..batch.used) {
            store.take_back(lent);
        }
        let want = self.lend_pages(store);
        while batch.pages.len() < want {
            match store.lend(self.channel) {
                Some(lent) => batch.pages.push(lent),
                None => break,
            }
        }
        batch.clear();
        self.link.give_back(batch);
    }

    /// Pages to lend each batch: [`BATCH_PAGES_BYTES`] worth, less in a store too small for
    /// the link's batches to hold that many within [`LENT_SHARE`] of the channel.
    fn lend_pages(&mut self, store: &EventStore) -> usize {
        *self.lend_pages.get_or_insert_with(|| {
            let page_bytes = store.page_words().max(1) * 4;
            let batches = self.link.free.capacity().max(1);
            let fair = store.pages_per_channel() / LENT_SHARE / batches;
            (BATCH_PAGES_BYTES / page_bytes).max(1).min(fair)
        })
    }

    /// At the first poll: lends pages to the batches the sink has not taken yet (the others
    /// get theirs when they come back).
    fn prime(&mut self, store: &mut EventStore) {
        if self.lend_pages.is_some() {
            return;
        }
        let n = self.link.free.len();
        for _ in 0..n {
            let Some(batch) = self.link.free.pop() else {
                break;
            };
            self.finish(store, batch);
        }
        self.lend_pages(store);
    }

    /// Stores `words`; false when the store is full (nothing stored).
    fn store_words(
        store: &mut EventStore,
        link: &Link,
        channel: usize,
        words: &[u32],
        status: Status,
    ) -> bool {
        match store.ingest(channel, words, status) {
            Err(IngestError::Full) => false,
            stored => {
                // Stored, or dropped and counted by the store (duplicate, already cleared);
                // refused for good otherwise, counted here.
                if stored.is_err() {
                    link.rejected.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
        }
    }

    /// Stores `f`; false (and `f` kept in `slot`) when the store is full.
    fn store_one(
        store: &mut EventStore,
        link: &Link,
        spare: &mut Vec<Vec<u32>>,
        channel: usize,
        f: Filled,
        slot: &mut Option<Filled>,
    ) -> bool {
        if Self::store_words(store, link, channel, &f.words, f.status) {
            spare.push(f.words);
            true
        } else {
            *slot = Some(f);
            false
        }
    }

    /// Moves the window one L1ID on (the one at `base` was stored or never came).
    fn advance(&mut self) {
        self.next = next_extended_l1id(self.next, self.wrap);
        self.base = (self.base + 1) & (self.slots.len() - 1);
    }

    /// Reads the next fragment of the current batch (fetching one when none is left): stores
    /// it when it is the one the window waits for or one behind it, files it otherwise.
    /// Returns `None` when there is nothing to read or the store is full, else the fragments
    /// stored (0 or 1).
    fn read_batch(&mut self, store: &mut EventStore) -> Option<u64> {
        loop {
            match &self.batch {
                Some(b) if self.at < b.frags.len() => break,
                Some(_) => {
                    if let Some(b) = self.batch.take() {
                        self.finish(store, b);
                    }
                }
                None => {}
            }
            self.batch = Some(self.link.ready.pop()?);
            self.at = 0;
        }
        let f = self.batch.as_ref()?.frags[self.at];
        let place = self.place(f.l1id);
        self.at += 1;
        let status = f.status;
        let batch = self.batch.as_mut()?;
        match place {
            Place::Next => {
                if !Self::store_frag(store, &self.link, self.channel, batch, &f) {
                    // Full: read again at the next poll.
                    self.at -= 1;
                    return None;
                }
                self.advance();
                Some(1)
            }
            Place::Behind => {
                self.link.out_of_order.fetch_add(1, Ordering::Relaxed);
                if Self::store_frag(store, &self.link, self.channel, batch, &f) {
                    return Some(1);
                }
                // Full: kept for the next poll.
                self.held = Some(Self::copy(&mut self.spare, batch.rod(&f), status));
                None
            }
            Place::Window(d) => {
                let f = Self::copy(&mut self.spare, batch.rod(&f), status);
                let slot = (self.base + d) & (self.slots.len() - 1);
                self.file(slot, f);
                Some(0)
            }
            Place::Ahead => {
                self.ahead = Some(Self::copy(&mut self.spare, batch.rod(&f), status));
                Some(0)
            }
            Place::Reject => {
                self.link.rejected.fetch_add(1, Ordering::Relaxed);
                Some(0)
            }
        }
    }
}

/// The L1ID of a ROD fragment's words, if it has one.
fn l1id_of(words: &[u32]) -> Option<u32> {
    words.get(5).copied()
}

impl Input for SwRodInput {
    /// The consumer is gone from now on (as when dropped): every lent page the input can
    /// reach goes back to `store` (a batch the sink holds gives its pages back at its next
    /// hand-over or flush, through the store's returned queue); the fragments of filled
    /// batches not read are counted as dropped.
    fn release(&mut self, store: &mut EventStore) {
        self.link.consumer_gone.store(true, Ordering::Release);
        if let Some(b) = &mut self.batch {
            b.take_back_pages(store);
        }
        while let Some(mut b) = self.link.ready.pop() {
            self.link
                .dropped_no_consumer
                .fetch_add(b.frags.len() as u64, Ordering::Relaxed);
            b.take_back_pages(store);
            b.clear();
            self.link.give_back(b);
        }
        for _ in 0..self.link.free.len() {
            let Some(mut b) = self.link.free.pop() else {
                break;
            };
            b.take_back_pages(store);
            self.link.give_back(b);
        }
    }

    fn poll(&mut self, store: &mut EventStore) -> u64 {
        self.prime(store);
        let len = self.slots.len();
        let mut consumed = 0;
        if let Some(f) = self.held.take() {
            if !Self::store_one(
                store,
                &self.link,
                &mut self.spare,
                self.channel,
                f,
                &mut self.held,
            ) {
                return 0;
            }
            consumed += 1;
        }
        while consumed < POLL_BUDGET as u64 {
            // The next L1ID in order, if it waits in the window.
            let at = self.base;
            if let Some(f) = self.slots[at].take() {
                if !Self::store_one(
                    store,
                    &self.link,
                    &mut self.spare,
                    self.channel,
                    f,
                    &mut self.slots[at],
                ) {
                    break;
                }
                self.advance();
                consumed += 1;
                continue;
            }
            // A fragment a window ahead waits: flush towards it, skipping what never came.
            if let Some(f) = self.ahead.take() {
                let target = l1id_of(&f.words).unwrap_or(self.next);
                let d = self.distance(target);
                if d as usize >= len && self.slots.iter().any(|s| s.is_some()) {
                    self.link.skipped.fetch_add(1, Ordering::Relaxed);
                    self.advance();
                    self.ahead = Some(f);
                    continue;
                }
                if d as usize >= len {
                    // The window is empty: jump, counting the L1IDs that never came.
                    self.link.skipped.fetch_add(d, Ordering::Relaxed);
                    self.next = target;
                    self.base = 0;
                }
                // In reach now.
                let slot = (self.base + self.distance(target) as usize) & (len - 1);
                self.file(slot, f);
                continue;
            }
            match self.read_batch(store) {
                Some(n) => consumed += n,
                None => break,
            }
        }
        consumed
    }
}

/// Several [`SwRodInput`]s (one per store channel) polled as one [`Input`].
#[derive(Debug)]
pub struct SwRodInputs {
    inputs: Vec<SwRodInput>,
}

impl SwRodInputs {
    /// Polls `inputs` in turn, each with its own budget.
    pub fn new(inputs: Vec<SwRodInput>) -> SwRodInputs {
        SwRodInputs { inputs }
    }

    /// The links' counters, summed.
    pub fn counters(&self) -> SwRodLinkCounters {
        let mut total = SwRodLinkCounters::default();
        for i in &self.inputs {
            total.add(&i.counters());
        }
        total
    }
}

impl Input for SwRodInputs {
    fn poll(&mut self, store: &mut EventStore) -> u64 {
        self.inputs.iter_mut().map(|i| i.poll(store)).sum()
    }

    /// The times a sink waited for a free batch (the store held the builder back).
    fn stalls(&self) -> u64 {
        self.counters().sink_waits
    }

    fn release(&mut self, store: &mut EventStore) {
        for i in &mut self.inputs {
            i.release(store);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Lookup, StoreConfig};
    use rodeo_format::fragment::{RodBuilder, SourceId};
    use rodeo_memory::{PagePool, PagePoolConfig};

    fn rod(l1id: u32) -> Vec<u32> {
        let mut out = Vec::new();
        RodBuilder {
            source_id: SourceId(9),
            extended_l1id: l1id,
            status: &[0],
            data: &[&[l1id; 3]],
            ..RodBuilder::default()
        }
        .write_vec(&mut out)
        .unwrap();
        out
    }

    /// Fragments handed over out of order (across an L1ID wrap and ECR) reach the store in
    /// order; one far outside the window is stored as it came and counted. In a store too
    /// small to lend pages to the link's batches: every fragment copied in.
    #[test]
    fn the_input_stores_in_l1id_order() {
        assert_eq!(stores_in_l1id_order(64), 0);
    }

    /// The same in a store that lends pages: after the first batches (taken before the
    /// first poll lent them pages) every fragment is written straight into a store page.
    #[test]
    fn the_input_stores_in_l1id_order_from_lent_pages() {
        assert_eq!(stores_in_l1id_order(1024), 18 - 3);
    }

    /// Runs the order test on a store of `pages` pages; returns the fragments written in
    /// place.
    fn stores_in_l1id_order(pages: usize) -> u64 {
        let pool = PagePool::new(PagePoolConfig {
            page_bytes: 256,
            pages,
            ..PagePoolConfig::default()
        })
        .unwrap();
        let mut store = EventStore::new(&pool, &StoreConfig::with_channels(1, 9, pages)).unwrap();
        let config = SwRodConfig {
            window: 4,
            l1id_wrap: 3,
            first_l1id: 1,
            ..SwRodConfig::default()
        };
        // One batch per fragment handed over below before a poll (up to eight at once): the
        // sink would otherwise wait for the core thread, which is this test's own thread.
        let (_sink, mut input) = swrod_link(0, &config, 16, 16);
        // Hands `words` over as the sink would: appended after a ROB header, then flushed
        // (a batch of one fragment).
        let give_words = |input: &mut SwRodInput, rod_words: &[u32]| {
            let rob = [0u32; ROB_HEADER_WORDS];
            input.link.append(
                ROB_HEADER_WORDS + rod_words.len(),
                [&rob[..], rod_words].into_iter(),
                Status::OK,
            );
            input.link.flush();
        };
        let give = |input: &mut SwRodInput, l1id: u32| give_words(input, &rod(l1id));
        // Events 1, 2, then (ECR 1) L1IDs 0, 1, 2: handed over as 0x1000001, 2, 0x1000000, 1.
        for l1id in [0x0100_0001, 2, 0x0100_0000] {
            give(&mut input, l1id);
        }
        assert_eq!(input.poll(&mut store), 0, "waiting for L1ID 1");
        assert_eq!(store.lookup(0, 2), Lookup::Pending, "not stored before 1");
        give(&mut input, 1);
        assert_eq!(input.poll(&mut store), 4);
        assert_eq!(store.last_l1id(0), Some(0x0100_0001));
        for l1id in [1, 2, 0x0100_0000, 0x0100_0001] {
            assert_eq!(store.lookup(0, l1id), Lookup::Present, "{l1id:#x}");
        }
        // A gap: ECR 1 L1ID 2 never comes. The next seven fill the window behind it; the
        // eighth is a whole window ahead, so the window is flushed past the gap.
        let l1ids: Vec<u32> = (0..8)
            .map(|k| rodeo_format::l1id::L1idCounter::expected(3, 6 + k))
            .collect();
        for &l in &l1ids {
            give(&mut input, l);
        }
        assert_eq!(input.poll(&mut store), 8);
        assert_eq!(input.counters().skipped, 1);
        for &l in &l1ids {
            assert_eq!(store.lookup(0, l), Lookup::Present, "{l:#x}");
        }
        // A copy of a stored L1ID is behind the window: stored as it came (the store keeps
        // the first copy and counts the second).
        give(&mut input, 1);
        assert_eq!(input.poll(&mut store), 1);
        assert_eq!(input.counters().out_of_order, 1);
        assert_eq!(store.counters(0).duplicates, 1);
        // Two copies of a waiting L1ID: the second is dropped.
        let next = rodeo_format::l1id::L1idCounter::expected(3, 14);
        let after = rodeo_format::l1id::L1idCounter::expected(3, 15);
        give(&mut input, after);
        give(&mut input, after);
        assert_eq!(input.poll(&mut store), 0);
        assert_eq!(input.counters().duplicates, 1);
        give(&mut input, next);
        assert_eq!(input.poll(&mut store), 2);
        // Far ahead (ECR 100, less than half the L1ID period on): the window is empty, so it
        // jumps there.
        give(&mut input, 0x6400_0000);
        assert_eq!(input.poll(&mut store), 1);
        assert_eq!(store.lookup(0, 0x6400_0000), Lookup::Present);
        assert_eq!(input.counters().skipped, 1 + (100 * 3 - 16));
        // A fragment too short for an L1ID is rejected; buffers all came back.
        give_words(&mut input, &[1, 2, 3]);
        assert_eq!(input.poll(&mut store), 0);
        assert_eq!(input.counters().rejected, 1);
        assert_eq!(input.link.free.len(), input.link.free.capacity());
        assert_eq!(input.counters().fragments, 18);
        let in_place = input.counters().in_place;
        // Releasing the input (the core thread stopping) counts what it still held, and every
        // page lent to the link comes back, the sink still alive: only the stored fragments'
        // pages stay in use.
        give(&mut input, 0xC800_0005);
        input.release(&mut store);
        let link = Arc::clone(&input.link);
        drop(input);
        assert_eq!(link.counters().dropped_no_consumer, 1);
        store.reclaim();
        let stored = store.counters(0);
        assert!(
            stored.pages_in_use <= stored.stored,
            "{} pages in use for {} fragments",
            stored.pages_in_use,
            stored.stored
        );
        in_place
    }
}

#[cfg(test)]
mod room_tests {
    use super::*;
    use crate::store::StoreConfig;
    use rodeo_format::fragment::{RodBuilder, SourceId};
    use rodeo_memory::{PagePool, PagePoolConfig};

    /// The sink has room while as many batches are free as one superpage has taken (so its
    /// builder never waits in the middle of one); reading the batches gives it room again.
    #[test]
    fn room_is_what_a_superpage_took() {
        let config = SwRodConfig {
            window: 4,
            ..SwRodConfig::default()
        };
        // Five batches of 64 fragments of 16 words.
        let (sink, mut input) = swrod_link(0, &config, 2, 16);
        let mut l1id = 0u32;
        // One "superpage" of 128 fragments: two batches, handed over when full.
        let superpage = |l1id: &mut u32| {
            for _ in 0..128 {
                let mut words = Vec::new();
                RodBuilder {
                    source_id: SourceId(9),
                    extended_l1id: *l1id,
                    status: &[0],
                    data: &[&[1, 2, 3]],
                    ..RodBuilder::default()
                }
                .write_vec(&mut words)
                .unwrap();
                let rob = [0u32; ROB_HEADER_WORDS];
                sink.link.append(
                    ROB_HEADER_WORDS + words.len(),
                    [&rob[..], &words[..]].into_iter(),
                    Status::OK,
                );
                *l1id += 1;
            }
            FragmentSink::flush(&sink);
        };
        assert!(sink.has_room());
        superpage(&mut l1id);
        // Two batches taken, three free: room for another superpage of two.
        assert_eq!(sink.link.need.load(Ordering::Relaxed), 2);
        assert!(sink.has_room());
        superpage(&mut l1id);
        assert!(!sink.has_room(), "one batch free, a superpage takes two");
        assert_eq!(sink.counters().sink_waits, 1);
        let pool = PagePool::new(PagePoolConfig {
            page_bytes: 256,
            pages: 512,
            ..PagePoolConfig::default()
        })
        .unwrap();
        let mut store = EventStore::new(&pool, &StoreConfig::with_channels(1, 9, 512)).unwrap();
        assert_eq!(input.poll(&mut store), 256);
        assert!(sink.has_room());
        assert_eq!(sink.counters().sink_waits, 1, "counted once per episode");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The free/ready hand-over under loom (queues and flags from rodeo-memory's facade): every
    //! buffer is in one place at a time, so neither queue is ever found full, fragments arrive
    //! in order, and a consumer that goes away never leaves the sink waiting.
    use super::*;

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
