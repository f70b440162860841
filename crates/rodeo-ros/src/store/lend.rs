//! Pages lent to a writer on another thread: the SW ROD sink writes whole ROB fragments
//! (header included) straight into store pages, and the store thread then indexes them where
//! they lie ([`EventStore::adopt`]) instead of copying them in.
//!
//! # The lend
//!
//! [`EventStore::lend`] takes a page off a channel's free stack and hands it out as a
//! [`LentPage`], which holds one reference on the page's shared count (as a reply frame
//! does), so the store neither reuses nor frees the page while it is lent. The holder writes
//! anywhere in the page through [`LentPage::words_mut`]: nothing of it is indexed, so nobody
//! else reads it (the generalisation of `pages` rule 1: the page's one writer is its
//! holder). The page goes back to the store thread with its holder's queue (whose push and pop
//! order the writes before the store's reads); from then on nobody writes it.
//!
//! On the store thread, [`EventStore::adopt`] indexes a fragment the holder wrote, taking a
//! store hold on the page as for a fragment the store wrote itself (its first hold adds the
//! store's one shared reference); a reply on it refers to the page's words as they lie.
//! [`EventStore::take_back`] then ends the lend: the lend's reference is dropped, and the page
//! is free again once no adopted fragment and no reply holds it (at once if none was
//! adopted). A [`LentPage`] dropped anywhere else (a link torn down with its batches) drops
//! its reference the same way, through the page table's returned queue, so no page is lost to
//! its channel.
//!
//! # Limits
//!
//! A channel lends its free pages but the last [`LEND_KEEP`], kept for the copying path
//! ([`EventStore::ingest`], for what a lent page cannot take). How many pages a borrower
//! holds at most is the borrower's limit, and must leave the store enough to store what the
//! borrower cannot (the SW ROD link's batches hold at most a quarter of a channel). A lent page
//! is in use, but counts as lent, not in the channel's occupancy (its fill), until a fragment
//! is adopted on it (then, with an input that runs ahead of the L1, it stays lent while that
//! fragment is newer than the L1 front: the store's module docs). Keeping more (1/64 of a
//! channel, tried first) sent a fifth of the SW ROD link's fragments through the copying path
//! against the ROSTester, whose store runs nearly full; one page lets the copying path
//! progress.

use std::sync::Arc;

use rodeo_format::fragment::Status;

use super::index::{Location, Slot};
use super::ingest::{first_offset, NO_LAYOUT};
use super::pages::{PageTable, NO_PAGE};
use super::{
    count_full, known_l1id, note_fresh_pages, note_l1id, rob_header, EventStore, IngestError,
    Ingested, ROB_HEADER_WORDS,
};

/// Free pages a channel keeps from lending.
pub const LEND_KEEP: usize = 1;

/// A store page lent to one writer (see the module docs). Dropping it ends the lend.
pub struct LentPage {
    table: Arc<PageTable>,
    page: u32,
    source_id: u32,
    /// The store indexed a fragment of it: readers may hold its words, so nobody writes it
    /// any more.
    sealed: bool,
    /// The end (word offset) of the furthest fragment the store indexed on it: the store
    /// writes a ROB header only past it ([`EventStore::adopt_rod`]).
    adopted_end: usize,
}

impl std::fmt::Debug for LentPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LentPage")
            .field("page", &self.page)
            .field("source_id", &self.source_id)
            .finish()
    }
}

impl LentPage {
    /// The page's words, to write fragments into.
    ///
    /// # Panics
    ///
    /// Once the store has indexed a fragment of the page ([`EventStore::adopt`]): from then on
    /// replies may read it.
    pub fn words_mut(&mut self) -> &mut [u32] {
        assert!(
            !self.sealed,
            "store page {} written after the store indexed a fragment of it",
            self.page
        );
        let words = self.table.page_words();
        // SAFETY: a lent page that is not sealed is indexed nowhere and referenced by no
        // reader (adopt seals it before indexing), and only its one holder (`&mut self`)
        // writes it (module docs).
        unsafe { self.table.slice_mut(self.page, 0, words) }
    }

    /// The words `offset..offset + len` of the page (what the holder wrote there).
    ///
    /// # Panics
    ///
    /// When the range is not inside the page.
    pub fn words(&self, offset: usize, len: usize) -> &[u32] {
        // SAFETY: while lent, nobody but the holder writes the page, and `&self` excludes the
        // holder's writes for the slice's lifetime.
        unsafe { self.table.slice(self.page, offset, len) }
    }

    /// Words per page.
    pub fn page_words(&self) -> usize {
        self.table.page_words()
    }

    /// The end (word offset) of the furthest fragment the store indexed on the page (0: none):
    /// [`EventStore::adopt_rod`] writes a ROB header only from here on.
    pub fn indexed_end(&self) -> usize {
        self.adopted_end
    }

    /// Hints the CPU to bring the cache line holding word `offset` of the page into cache
    /// (nothing past the page's end). Never reads or writes memory.
    pub fn prefetch(&self, offset: usize) {
        self.table.prefetch(self.page, offset);
    }

    /// Where the first of fragments of `words` words (header included) goes in this page:
    /// staggered from page to page as the store's own pages are, so that the first headers of
    /// all pages do not compete for the same cache sets.
    pub fn first_offset(&self, words: usize) -> usize {
        first_offset(self.page, words.max(1), self.table.page_words())
    }

    /// The 8-word ROB header the store would write for a fragment of `words` words
    /// (header included) with status `status` on the page's channel.
    pub fn rob_header(&self, words: usize, status: Status) -> [u32; ROB_HEADER_WORDS] {
        rob_header(self.source_id, words, status)
    }
}

impl Drop for LentPage {
    fn drop(&mut self) {
        if self.page != NO_PAGE && self.table.release(self.page) {
            // The last reference: back through the returned queue (`reclaim`), which has a
            // slot per page and holds each at most once.
            self.table.push_returned(self.page);
        }
    }
}

impl EventStore {
    /// Lends a free page of channel `c` to a writer on another thread; `None` when the
    /// channel does not exist or keeps its last free pages for the copying path.
    pub fn lend(&mut self, c: usize) -> Option<LentPage> {
        let ch = self.channels.get_mut(c)?;
        if ch.free.len() <= LEND_KEEP {
            return None;
        }
        // Fenced when it went back on the free stack (`push_free`): this thread's streaming
        // stores into it land before the writer's words.
        let p = ch.free.pop()?;
        // A free page has no reference: the lend's is its first.
        self.table.take_fresh(p);
        self.table.set_next(p, NO_PAGE);
        self.layouts[p as usize] = NO_LAYOUT;
        // Lent, not fill: the alarm does not look at it.
        self.lent_empty[p as usize] = true;
        ch.lent_empty += 1;
        Some(LentPage {
            table: Arc::clone(&self.table),
            page: p,
            source_id: ch.source_id,
            sealed: false,
            adopted_end: 0,
        })
    }

    /// Indexes on channel `c` the ROB fragment of `words` words (header included, written by
    /// the holder of `lent`) at word `offset` of the lent page, under extended L1ID `l1id`,
    /// and seals the page: it can no longer be written ([`LentPage::words_mut`] panics).
    /// As [`EventStore::ingest`]: a duplicate or an L1ID cleared before it came is counted
    /// and left unindexed (its words are dead until the page is free again); a full index
    /// refuses it ([`IngestError::Full`], nothing changed: retry later).
    ///
    /// # Panics
    ///
    /// When `lent` is not a page of this store's channel `c`, or the fragment does not lie
    /// inside it.
    pub fn adopt(
        &mut self,
        c: usize,
        lent: &mut LentPage,
        offset: usize,
        words: usize,
        l1id: u32,
    ) -> Result<Ingested, IngestError> {
        let p = lent.page;
        assert!(
            Arc::ptr_eq(&lent.table, &self.table)
                && usize::from(self.page_channel[p as usize]) == c
                && offset + words <= self.page_words,
            "adopt of a fragment outside channel {c}'s lent page {p}"
        );
        let ch = self.channels.get_mut(c).ok_or(IngestError::NoChannel(c))?;
        lent.sealed = true;
        let loc = Location {
            page: p,
            offset: offset as u32,
            words: words as u32,
        };
        // A vacant home slot holds no marker, but the run's clears may still name the L1ID.
        let home = if self.cleared.is_cleared(l1id) {
            None
        } else {
            ch.index.vacant_home(l1id)
        };
        if let Some(home) = home {
            ch.index.fill_home(home, l1id, loc);
        } else {
            if let Some(known) = known_l1id(ch, &self.cleared, l1id) {
                return Ok(known);
            }
            if ch.index.insert_absent(l1id, Slot::Stored(loc)).is_err() {
                count_full(ch, self.l1_front, self.pages_per_channel, self.alarm_pages);
                return Err(IngestError::Full);
            }
        }
        // Indexed: from here on a reply may read these words (a refused fragment, above, may
        // be offered again at the same offset).
        lent.adopted_end = lent.adopted_end.max(offset + words);
        // The fragment's hold; the page's first adds the store's shared reference beside the
        // lend's.
        let h = &mut self.holds[p as usize];
        if *h == 0 {
            self.table.acquire(p);
        }
        *h += 1;
        if std::mem::take(&mut self.lent_empty[p as usize]) {
            // The page's first fragment: fill, or ahead of the L1 (module docs).
            ch.lent_empty -= 1;
            note_fresh_pages(
                ch,
                self.runs_ahead,
                self.l1_front,
                l1id,
                1,
                self.pages_per_channel,
            );
        }
        ch.counters.fragments += 1;
        ch.counters.words += words as u64;
        note_l1id(ch, l1id);
        Ok(Ingested::Stored)
    }

    /// Indexes on channel `c` the ROD fragment of `rod_words` words that a card wrote at word
    /// `offset + ROB_HEADER_WORDS` of the lent page (now back on the store thread), under
    /// extended L1ID `l1id`, after writing its 8-word ROB header with `status` into the
    /// [`ROB_HEADER_WORDS`] before it (the card's headroom): the page DMA input
    /// (`inputs::page_dma`), a RobinNP's way of storing fragments where the card put them.
    /// Otherwise as [`EventStore::adopt`] (a refused fragment may be offered again).
    ///
    /// # Panics
    ///
    /// As [`EventStore::adopt`], and when the header would overlap a fragment already indexed
    /// on the page (`offset` before the end of the furthest one).
    pub fn adopt_rod(
        &mut self,
        c: usize,
        lent: &mut LentPage,
        offset: usize,
        rod_words: usize,
        l1id: u32,
        status: Status,
    ) -> Result<Ingested, IngestError> {
        let words = ROB_HEADER_WORDS + rod_words;
        let p = lent.page;
        assert!(
            Arc::ptr_eq(&lent.table, &self.table)
                && usize::from(self.page_channel[p as usize]) == c
                && offset >= lent.adopted_end
                && offset + words <= self.page_words,
            "ROB header of a fragment outside channel {c}'s lent page {p} or over an indexed one"
        );
        // Indexed first, the header written after: a fragment the store refuses (a full
        // index) keeps the card's words as they were (its begin word in the headroom's last
        // word), so the checks find it again when it is offered again. Written before, the
        // header replaced the begin word and the retry read a damaged unit: link errors and
        // dropped words in every run whose index filled before its pages (measured: the
        // endurance test's 16-word fragments, 26 to a page, 43,970 errors in 22 s).
        let ingested = self.adopt(c, lent, offset, words, l1id)?;
        if ingested == Ingested::Stored {
            // SAFETY: the lent page's holder (`&mut lent`, on this thread: it came back
            // through the card's queue, whose pop orders the card's writes before this) is the
            // page's one writer; these words lay past every fragment indexed on it (asserted)
            // until `adopt` indexed this one, on this thread, and no reply has been built from
            // it yet (replies are built on this thread, after this returns), so no other
            // reference to them exists while the slice lives.
            let header = unsafe { self.table.slice_mut(p, offset, ROB_HEADER_WORDS) };
            header.copy_from_slice(&rob_header(lent.source_id, words, status));
        }
        Ok(ingested)
    }

    /// Ends the lend of `lent` on the store thread: the page is free again once no adopted
    /// fragment and no reply holds it.
    pub fn take_back(&mut self, mut lent: LentPage) {
        let p = std::mem::replace(&mut lent.page, NO_PAGE);
        if p == NO_PAGE || !Arc::ptr_eq(&lent.table, &self.table) {
            // Not this store's (a bug of the caller's): its drop would free it elsewhere.
            lent.page = p;
            return;
        }
        let c = usize::from(self.page_channel[p as usize]);
        if std::mem::take(&mut self.lent_empty[p as usize]) {
            self.channels[c].lent_empty -= 1;
        }
        if self.table.release(p) {
            super::push_free(&mut self.channels[c].free, p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Lookup, StoreConfig};
    use rodeo_memory::{PagePool, PagePoolConfig};

    fn store(pages: usize) -> (PagePool, EventStore) {
        store_with(256, pages, 0)
    }

    /// One channel of `pages` pages of `page_bytes`, its index sized `index_capacity` (0: the
    /// store's default).
    fn store_with(
        page_bytes: usize,
        pages: usize,
        index_capacity: usize,
    ) -> (PagePool, EventStore) {
        let pool = PagePool::new(PagePoolConfig {
            page_bytes,
            pages,
            ..PagePoolConfig::default()
        })
        .unwrap();
        let mut config = StoreConfig::with_channels(1, 7, pages);
        config.index_capacity = index_capacity;
        let store = EventStore::new(&pool, &config).unwrap();
        (pool, store)
    }

    /// A ROB fragment of 20 words for `l1id` written into `lent` at `offset`, as the SW ROD
    /// sink does.
    fn write(lent: &mut LentPage, offset: usize, l1id: u32) {
        let header = lent.rob_header(20, Status::OK);
        let w = &mut lent.words_mut()[offset..offset + 20];
        w[..8].copy_from_slice(&header);
        for (i, x) in w[8..].iter_mut().enumerate() {
            *x = l1id * 100 + i as u32;
        }
        w[8 + 5] = l1id;
    }

    /// A lent page's fragments are answered where they lie; the page is free again only once
    /// it is taken back, its fragments cleared and their replies done, in any order.
    #[test]
    fn adopted_fragments_are_answered_in_place_and_the_page_comes_back() {
        let (_pool, mut st) = store(8);
        let mut lent = st.lend(0).expect("free pages");
        assert_eq!(st.counters(0).pages_in_use, 1, "a lent page is in use");
        write(&mut lent, 0, 1);
        write(&mut lent, 20, 2);
        write(&mut lent, 40, 2);
        assert_eq!(st.adopt(0, &mut lent, 0, 20, 1), Ok(Ingested::Stored));
        assert_eq!(st.adopt(0, &mut lent, 20, 20, 2), Ok(Ingested::Stored));
        assert_eq!(st.adopt(0, &mut lent, 40, 20, 2), Ok(Ingested::Duplicate));
        assert_eq!(st.lookup(0, 2), Lookup::Present);
        let mut refs = Vec::new();
        assert!(st.with_segments(0, 1, |r| refs.push(r)));
        let words: Vec<u32> = refs.iter().flat_map(|r| r.words().to_vec()).collect();
        assert_eq!(words.len(), 20);
        assert_eq!(words[..8], lent.rob_header(20, Status::OK));
        assert_eq!(words[8 + 5], 1);
        st.take_back(lent);
        assert_eq!(st.counters(0).pages_in_use, 1, "fragments still stored");
        st.clear([1, 2]);
        assert_eq!(
            st.counters(0).pages_in_use,
            1,
            "a reply still holds the page"
        );
        drop(refs);
        st.reclaim();
        assert_eq!(st.counters(0).pages_in_use, 0);
        // A page taken back with nothing adopted is free at once.
        let lent = st.lend(0).unwrap();
        st.take_back(lent);
        assert_eq!(st.counters(0).pages_in_use, 0);
    }

    /// A page the store indexed a fragment of is no longer written: replies may read it.
    #[test]
    #[should_panic(expected = "written after the store indexed a fragment of it")]
    fn an_adopted_page_is_sealed() {
        let (_pool, mut st) = store(8);
        let mut lent = st.lend(0).unwrap();
        write(&mut lent, 0, 1);
        assert_eq!(st.adopt(0, &mut lent, 0, 20, 1), Ok(Ingested::Stored));
        write(&mut lent, 20, 2);
    }

    /// Early clears and a full channel: an adopted fragment whose L1ID was cleared is dropped
    /// and counted; lending stops at the reserve; a lent page dropped away from the store
    /// comes back through `reclaim`.
    #[test]
    fn lending_keeps_a_reserve_and_a_dropped_lend_comes_back() {
        let (_pool, mut st) = store(8);
        st.clear([5]);
        let mut lent: Vec<LentPage> = std::iter::from_fn(|| st.lend(0)).collect();
        assert_eq!(lent.len(), 8 - LEND_KEEP, "one page kept from lending");
        write(&mut lent[0], 0, 5);
        assert_eq!(
            st.adopt(0, &mut lent[0], 0, 20, 5),
            Ok(Ingested::AlreadyCleared)
        );
        assert_eq!(st.counters(0).dropped_after_clear, 1);
        assert_eq!(st.lookup(0, 5), Lookup::Lost);
        // The copying path still has its reserve.
        assert_eq!(
            st.ingest(0, &[0, 0, 0, 0, 0, 6, 0, 0, 0], Status::OK),
            Ok(Ingested::Stored)
        );
        let gone = std::thread::spawn(move || drop(lent)).join();
        assert!(gone.is_ok());
        st.reclaim();
        assert_eq!(
            st.counters(0).pages_in_use,
            1,
            "only the copied fragment's page"
        );
    }

    /// A ROD fragment a card wrote behind a headroom gets its ROB header there and is answered
    /// as one ROB fragment; a header over an indexed fragment is refused.
    #[test]
    fn adopt_rod_writes_the_header_into_the_headroom() {
        let (_pool, mut st) = store(8);
        let mut lent = st.lend(0).expect("free pages");
        for (at, l1id) in [(0usize, 4u32), (20, 5)] {
            let w = &mut lent.words_mut()[at..at + 20];
            w[..8].fill(0xeeee_eeee);
            for (i, x) in w[8..].iter_mut().enumerate() {
                *x = l1id * 100 + i as u32;
            }
            w[8 + 5] = l1id;
        }
        let bad = Status::DATA_CORRUPTION;
        assert_eq!(
            st.adopt_rod(0, &mut lent, 0, 12, 4, Status::OK),
            Ok(Ingested::Stored)
        );
        assert_eq!(
            st.adopt_rod(0, &mut lent, 20, 12, 5, bad),
            Ok(Ingested::Stored)
        );
        for (l1id, status) in [(4, Status::OK), (5, bad)] {
            let mut words = Vec::new();
            assert!(st.with_segments(0, l1id, |r| words.extend_from_slice(r.words())));
            assert_eq!(words.len(), 20);
            assert_eq!(words[..8], lent.rob_header(20, status));
            assert_eq!(words[8 + 5], l1id);
        }
        let over = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = st.adopt_rod(0, &mut lent, 30, 2, 6, Status::OK);
        }));
        assert!(over.is_err(), "a header over fragment 5 is refused");
        st.take_back(lent);
    }

    /// A fragment refused for a full index is offered again at the same place once a clear
    /// made room, and stored.
    #[test]
    fn adopt_rod_refused_for_a_full_index_is_taken_at_the_same_offset_later() {
        // The smallest index: 7 entries (the table's load limit), a page of 12 fragments.
        let (_pool, mut st) = store_with(1024, 8, 1);
        let mut lent = st.lend(0).expect("free pages");
        for i in 0..12usize {
            lent.words_mut()[20 * i..20 * i + 8].fill(0xeeee_eeee);
            lent.words_mut()[20 * i + 8 + 5] = 10 + i as u32;
        }
        let mut refused = None;
        for i in 0..12usize {
            let l1id = 10 + i as u32;
            match st.adopt_rod(0, &mut lent, 20 * i, 12, l1id, Status::OK) {
                Ok(r) => assert_eq!(r, Ingested::Stored),
                Err(e) => {
                    assert_eq!(e, IngestError::Full);
                    refused = Some((i, l1id));
                    break;
                }
            }
        }
        let (i, l1id) = refused.expect("the index filled before the page");
        // The refused fragment's words are as the card wrote them: no header over its
        // headroom (where a card's begin word lies), so the checks find it again.
        assert_eq!(lent.words(20 * i, 8), [0xeeee_eeee; 8], "header written");
        st.clear([10]);
        let again = st.adopt_rod(0, &mut lent, 20 * i, 12, l1id, Status::OK);
        assert_eq!(again, Ok(Ingested::Stored));
        assert_eq!(st.lookup(0, l1id), Lookup::Present);
        st.take_back(lent);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! A lent page under loom: written by its holder on another thread, handed back through a
    //! queue, indexed where it lies and read by a reply frame on a third thread; loom reports a
    //! race on the page's access mark if any read is not ordered after the holder's writes,
    //! and the page comes back to its channel exactly once.
    use super::*;
    use crate::store::StoreConfig;
    use rodeo_memory::{BoundedQueue, FullPolicy, PagePool, PagePoolConfig};

    #[test]
    fn loom_a_lent_page_is_written_by_its_holder_then_read_in_place() {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(3);
        }
        builder.check(|| {
            let pool = PagePool::new(PagePoolConfig {
                page_bytes: 128,
                pages: 2,
                ..PagePoolConfig::default()
            })
            .unwrap();
            let mut st = EventStore::new(&pool, &StoreConfig::with_channels(1, 7, 2)).unwrap();
            let lent = st.lend(0).expect("a free page");
            let queue = Arc::new(BoundedQueue::new("test.lent", 1, FullPolicy::Refuse));
            let holder = {
                let queue = Arc::clone(&queue);
                loom::thread::spawn(move || {
                    let mut lent = lent;
                    let header = lent.rob_header(16, Status::OK);
                    let w = &mut lent.words_mut()[..16];
                    w[..8].copy_from_slice(&header);
                    w[8 + 5] = 5;
                    assert!(queue.push(lent).is_ok());
                })
            };
            let mut lent = loop {
                if let Some(l) = queue.pop() {
                    break l;
                }
                loom::thread::yield_now();
            };
            assert_eq!(st.adopt(0, &mut lent, 0, 16, 5), Ok(Ingested::Stored));
            st.take_back(lent);
            let mut refs = Vec::new();
            assert!(st.with_segments(0, 5, |r| refs.push(r)));
            let reader = loom::thread::spawn(move || {
                assert_eq!(refs[0].words()[8 + 5], 5);
                drop(refs);
            });
            st.clear([5]);
            reader.join().unwrap();
            holder.join().unwrap();
            assert_eq!(st.settle(0), 0, "the page came back");
        });
    }
}
