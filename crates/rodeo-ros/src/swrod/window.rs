//! The core thread's end of a SW ROD link: [`SwRodInput`], the [`Input`] that reads the link's
//! batches and stores their fragments on one channel in L1ID order, through the reorder window
//! (see the module docs of [`super`], "Order").

use std::sync::Arc;

use rodeo_format::fragment::Status;
use rodeo_format::l1id::next_extended_l1id;
use rodeo_memory::sync::Ordering;
use rodeo_swrod::SwRodConfig;

use super::batch::{l1id_of, Batch, Frag, BATCH_PAGES_BYTES};
use super::counters::SwRodLinkCounters;
use super::handover::Link;
use crate::server::input::Input;
use crate::store::{EventStore, IngestError};

/// A link's batches hold at most a quarter (1 / `LENT_SHARE`) of their channel's pages. The
/// rest is always the store's: a fragment the core thread must copy in (one larger than a
/// page, or one put back in order) then finds room once the events before it are cleared,
/// however many pages the batches hold.
const LENT_SHARE: usize = 4;

/// One fragment out of its batch: a window slot's copy (the core thread's buffer).
#[derive(Debug)]
struct Filled {
    words: Vec<u32>,
    status: Status,
}

/// The core thread's end: an [`Input`] storing the builder's fragments on one channel.
#[derive(Debug)]
pub struct SwRodInput {
    pub(super) link: Arc<Link>,
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
    /// The core thread's end of `link`, storing on store channel `channel` through a reorder
    /// window of `window` slots (a power of two), from the builder's first L1ID on.
    pub(super) fn new(
        link: Arc<Link>,
        channel: usize,
        window: usize,
        config: &SwRodConfig,
    ) -> SwRodInput {
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
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Lookup, StoreConfig};
    use crate::swrod::swrod_link;
    use rodeo_format::fragment::{RodBuilder, SourceId};
    use rodeo_memory::{PagePool, PagePoolConfig};
    use rodeo_swrod::ROB_HEADER_WORDS;

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
