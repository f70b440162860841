//! The store's pages: borrowed from a [`PagePool`] when the store is built, managed as page
//! tokens (the RobinNP's model), shared with reply frames through per-page reference counts.
//!
//! # State
//!
//! - `handles`: the [`PageHandle`]s, untouched until the table is dropped (then every page goes
//!   back to the pool).
//! - `base`: each page's address, taken once, with write permission, when the handle was still
//!   exclusively ours.
//! - `refs[p]`: how many holders page `p` has: one for the store while it holds the page (its
//!   write cursor or a stored fragment is on it; the store counts those itself, without
//!   atomics), and one per reply frame in flight.
//! - `next[p]`: the page a fragment overflowing `p` continues on (a linked list, as the ROS
//!   index), written by the store thread before any reader can see the fragment.
//! - `returned`: page ids whose last reference was dropped on another thread (a sent reply); the
//!   store thread drains it into the channels' free stacks.
//!
//! # Rules
//!
//! 1. Only the store thread writes page bytes, and only words no [`PageRef`] covers: it writes
//!    at its cursor, past every stored fragment of the page, and a page is reused only after
//!    its count fell to zero. A page lent out (`lend`) has one writer instead, its holder,
//!    until it goes back to the store thread; none of its words is indexed before then.
//! 2. A [`PageRef`], or a segment the store holds for a reader (a store hold counts as the
//!    store's reference until it is released on the store thread), reads only the words of one
//!    stored fragment, which never change while the fragment's reference (or the reader's own)
//!    is held.
//! 3. The count's transition to zero happens exactly once per use of a page; whoever makes it
//!    returns the page token (directly on the store thread, through `returned` elsewhere).
//!
//! The atomics, `Arc` and the queue come from rodeo-memory's loom facade, and every write and
//! read of page words is recorded on the page's [`AccessMark`], so `--cfg loom` model-checks
//! rules 1-3 (the loom tests at the end of this file; scripts/test-all runs them).
//!
//! Memory ordering: the store thread's writes of a fragment happen before the reply that refers
//! to it is handed to ZeroMQ (a queue with its own synchronisation). The decrement that frees a
//! page is `AcqRel`, so every reader's last access happens before the page is reused.

use std::sync::Arc;

use rodeo_memory::sync::{AccessMark, AtomicU32, Ordering};
use rodeo_memory::{AllocError, BoundedQueue, FullPolicy, PageHandle, PagePool};
use rodeo_transport::socket::FrameOwner;

/// The pages of one store. See the module docs.
pub(crate) struct PageTable {
    handles: Box<[PageHandle]>,
    base: Box<[*mut u32]>,
    refs: Box<[AtomicU32]>,
    next: Box<[AtomicU32]>,
    /// Per page: the accesses of its words, for loom (zero-sized otherwise). One mark per
    /// page is coarser than rule 1 (the store may write past a fragment a reader holds): the
    /// loom tests write a page only in a fresh use, the hand-over that rule 3 orders.
    marks: Box<[AccessMark]>,
    page_words: usize,
    /// `refuse`: a slot per page and each page id in it at most once (rule 3), so never full.
    returned: BoundedQueue<u32>,
}

impl std::fmt::Debug for PageTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTable")
            .field("pages", &self.handles.len())
            .field("page_words", &self.page_words)
            .finish()
    }
}

// SAFETY: the raw page pointers are only dereferenced under the rules of the module docs (one
// writer, the store thread, on words no reader covers; readers on immutable words), and the
// handles keep the pages mapped for the table's lifetime.
unsafe impl Send for PageTable {}
// SAFETY: as for Send; shared access only reads immutable words or goes through atomics.
unsafe impl Sync for PageTable {}

/// No next page.
pub(crate) const NO_PAGE: u32 = u32::MAX;

impl PageTable {
    /// Takes `pages` pages from `pool`.
    pub(crate) fn new(pool: &PagePool, pages: usize) -> Result<PageTable, AllocError> {
        let mut handles = Vec::with_capacity(pages);
        let mut base = Vec::with_capacity(pages);
        for _ in 0..pages {
            let mut h = pool.alloc()?;
            base.push(h.words_mut().as_mut_ptr());
            handles.push(h);
        }
        Ok(PageTable {
            handles: handles.into_boxed_slice(),
            base: base.into_boxed_slice(),
            refs: (0..pages).map(|_| AtomicU32::new(0)).collect(),
            next: (0..pages).map(|_| AtomicU32::new(NO_PAGE)).collect(),
            marks: (0..pages).map(|_| AccessMark::new()).collect(),
            page_words: pool.page_bytes() / 4,
            returned: BoundedQueue::new("ros.store.returned_pages", pages, FullPolicy::Refuse),
        })
    }

    /// Words per page.
    pub(crate) fn page_words(&self) -> usize {
        self.page_words
    }

    /// Gives the store its reference on a free page `p` (count 0: no one else can hold it, so
    /// a plain store does; it does not wait for earlier writes as an atomic add would).
    #[inline]
    pub(crate) fn take_fresh(&self, p: u32) {
        debug_assert_eq!(self.refs[p as usize].load(Ordering::Relaxed), 0);
        self.refs[p as usize].store(1, Ordering::Relaxed);
    }

    /// Adds a reference to page `p`.
    #[inline]
    pub(crate) fn acquire(&self, p: u32) {
        self.refs[p as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Drops a reference; true when it was the last (the caller now owns the page token).
    #[inline]
    pub(crate) fn release(&self, p: u32) -> bool {
        self.refs[p as usize].fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// References held on page `p` (for tests and checks).
    #[cfg(test)]
    pub(crate) fn refs(&self, p: u32) -> u32 {
        self.refs[p as usize].load(Ordering::Acquire)
    }

    /// The page a fragment continues on after `p`.
    #[inline]
    pub(crate) fn next(&self, p: u32) -> u32 {
        self.next[p as usize].load(Ordering::Relaxed)
    }

    /// Links `p` to `q` (store thread, before the fragment is indexed).
    #[inline]
    pub(crate) fn set_next(&self, p: u32, q: u32) {
        self.next[p as usize].store(q, Ordering::Relaxed);
    }

    /// Hands back page `p`, whose last reference this thread just dropped (rule 3: each page
    /// at most once in the queue, which has a slot per page, so the push cannot fail).
    pub(crate) fn push_returned(&self, p: u32) {
        let pushed = self.returned.push(p);
        debug_assert!(
            pushed.is_ok(),
            "ros.store.returned_pages has a slot per page"
        );
    }

    /// Takes a page id returned by another thread.
    pub(crate) fn pop_returned(&self) -> Option<u32> {
        self.returned.pop()
    }

    /// Writes `words` into page `p` at word `offset` (store thread only) with streaming
    /// stores ([`rodeo_memory::stream`]): the lines go to memory without being read into this
    /// core's cache first (most stored fragments are never read again, only cleared). Weakly
    /// ordered, and Rust asks for a fence before any other access to them, also on this
    /// thread: the store fences ([`rodeo_memory::stream::fence`]) before it reads or hands out
    /// a fragment (`with_segments`, `hold_segments`), before a page goes back on a free stack
    /// (`push_free`, once per `clear`, `reclaim` and `release_held` call), so whatever takes a
    /// free page (a write, a lend) comes after them, and before the store leaves the core
    /// thread.
    ///
    /// # Safety
    ///
    /// The caller is the store thread and no [`PageRef`] or stored fragment covers
    /// `offset..offset + words.len()` of page `p` (rule 1).
    #[inline]
    pub(crate) unsafe fn write_streaming(&self, p: u32, offset: usize, words: &[u32]) {
        assert!(offset + words.len() <= self.page_words, "write past a page");
        self.marks[p as usize].write();
        // SAFETY: in bounds (asserted); the range is exclusively the writer's (the caller's
        // contract), so no other reference to it exists while the slice lives; the pointer has
        // write permission (taken from words_mut).
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.base[p as usize].add(offset), words.len())
        };
        // SAFETY: the store fences before any other access to these words and before they
        // reach another thread (the doc comment above lists where).
        unsafe { rodeo_memory::stream::copy_words(dst, words) };
    }

    /// Hints the CPU to bring the cache line holding word `offset` of page `p` into cache
    /// (the store's next write there: the emulated input's header and trailer writes then
    /// do not wait for memory). Out of range: nothing. Never reads or writes memory.
    #[inline]
    pub(crate) fn prefetch(&self, p: u32, offset: usize) {
        let Some(&base) = self.base.get(p as usize) else {
            return;
        };
        if offset >= self.page_words {
            return;
        }
        rodeo_memory::cache::prefetch(base.wrapping_add(offset).cast_const());
    }

    /// A mutable view of `len` words of page `p` from `offset`, to fill in place.
    ///
    /// # Safety
    ///
    /// As [`PageTable::write`]; the slice must be dropped before the range is published.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut(&self, p: u32, offset: usize, len: usize) -> &mut [u32] {
        assert!(offset + len <= self.page_words, "slice past a page");
        self.marks[p as usize].write();
        // SAFETY: as in `write`.
        unsafe { std::slice::from_raw_parts_mut(self.base[p as usize].add(offset), len) }
    }

    /// The words `offset..offset + len` of page `p`.
    ///
    /// # Safety
    ///
    /// The range holds a stored fragment (or part of one) that is referenced for the lifetime
    /// of the returned slice (rule 2).
    #[inline]
    pub(crate) unsafe fn slice(&self, p: u32, offset: usize, len: usize) -> &[u32] {
        assert!(offset + len <= self.page_words, "read past a page");
        self.marks[p as usize].read();
        // SAFETY: in bounds; the words are immutable while referenced (caller's contract).
        unsafe { std::slice::from_raw_parts(self.base[p as usize].add(offset), len) }
    }
}

/// A counted reference to part of one page: the zero-copy frame of a reply. Dropping it
/// releases the page reference; the last release hands the page back to the store.
pub struct PageRef {
    table: Arc<PageTable>,
    page: u32,
    offset: u32,
    words: u32,
}

impl std::fmt::Debug for PageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageRef")
            .field("page", &self.page)
            .field("offset", &self.offset)
            .field("words", &self.words)
            .finish()
    }
}

impl PageRef {
    /// A new reference (the caller, the store thread, holds one on the page already, so the
    /// words are live).
    pub(crate) fn new(table: &Arc<PageTable>, page: u32, offset: u32, words: u32) -> PageRef {
        table.acquire(page);
        PageRef {
            table: Arc::clone(table),
            page,
            offset,
            words,
        }
    }

    /// The referenced words.
    pub fn words(&self) -> &[u32] {
        // SAFETY: this ref holds a reference on the page covering exactly these fragment words
        // (rule 2), for as long as `self` lives.
        unsafe {
            self.table
                .slice(self.page, self.offset as usize, self.words as usize)
        }
    }
}

impl FrameOwner for PageRef {
    fn frame_bytes(&self) -> &[u8] {
        let w = self.words();
        // SAFETY: any initialised u32 slice is a valid byte slice of 4x the length.
        unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), w.len() * 4) }
    }
}

impl Drop for PageRef {
    fn drop(&mut self) {
        if self.table.release(self.page) {
            self.table.push_returned(self.page);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rodeo_memory::PagePoolConfig;

    fn pool(page_bytes: usize, pages: usize) -> PagePool {
        PagePool::new(PagePoolConfig {
            page_bytes,
            pages,
            ..PagePoolConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn prefetch_is_a_hint_anywhere_and_changes_nothing() {
        let pool = pool(256, 4);
        let table = PageTable::new(&pool, 2).unwrap();
        let words: Vec<u32> = (0..64).collect();
        // SAFETY: this test is the only user of the table; nothing references page 0.
        unsafe { table.write_streaming(0, 0, &words) };
        rodeo_memory::stream::fence();
        // In range, at the last word, past the page, and on a page that does not exist.
        for (p, offset) in [(0, 0), (0, 63), (0, 64), (1, 10), (7, 0), (NO_PAGE, 5)] {
            table.prefetch(p, offset);
        }
        // SAFETY: page 0's words were written above and nothing writes them meanwhile.
        let back = unsafe { table.slice_mut(0, 0, 64) }.to_vec();
        assert_eq!(back, words);
    }

    /// Streamed words are read back whole after the fence by the writing thread, and by
    /// another thread through a page reference; unaligned starts and odd lengths
    /// (the streaming copy's single-word ends) included.
    #[test]
    fn streamed_words_are_seen_by_the_writer_and_after_the_fence_by_a_reader() {
        let pool = pool(1024, 2);
        let table = Arc::new(PageTable::new(&pool, 2).unwrap());
        let words: Vec<u32> = (0..256).map(|i| 0xA000_0000 | i).collect();
        for (offset, len) in [(0, 256), (1, 7), (3, 130), (255, 1), (10, 0)] {
            // SAFETY: this test is the only user of page 0; no reference covers it.
            unsafe { table.write_streaming(0, offset, &words[..len]) };
            rodeo_memory::stream::fence();
            // SAFETY: the words just written, nothing else writes them meanwhile.
            let back = unsafe { table.slice_mut(0, offset, len) }.to_vec();
            assert_eq!(back, &words[..len], "offset {offset}, {len} words");
        }
        // SAFETY: as above.
        unsafe { table.write_streaming(1, 0, &words) };
        rodeo_memory::stream::fence();
        table.take_fresh(1);
        let r = PageRef::new(&table, 1, 0, 256);
        let seen = std::thread::spawn(move || r.words().to_vec())
            .join()
            .unwrap();
        assert_eq!(seen, words);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Rules 1-3 under loom: the store writes a fragment, a reply frame ([`PageRef`]) reads it
    //! on another thread and drops, the store drops its own reference; exactly one of the two
    //! gets the page token (the store directly, or through `returned`), and the store's next
    //! write of the page is ordered after the reader's last read (else loom reports a race on
    //! the page's access mark).
    use super::*;
    use rodeo_memory::PagePoolConfig;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(3);
        }
        builder.check(f);
    }

    #[test]
    fn loom_the_last_reference_returns_the_page_once_and_reuse_follows_the_reads() {
        model(|| {
            let pool = PagePool::new(PagePoolConfig {
                page_bytes: 64,
                pages: 1,
                ..PagePoolConfig::default()
            })
            .unwrap();
            let table = Arc::new(PageTable::new(&pool, 1).unwrap());
            table.take_fresh(0);
            // SAFETY: the page is fresh: nothing references it.
            unsafe { table.write_streaming(0, 0, &[1, 2, 3, 4]) };
            rodeo_memory::stream::fence();
            let frame = PageRef::new(&table, 0, 0, 4);
            let reader = loom::thread::spawn(move || {
                assert_eq!(frame.words(), &[1, 2, 3, 4]);
                drop(frame);
            });
            // The store lets go of the page (its fragment cleared).
            let direct = table.release(0);
            let mut returned = 0;
            if !direct {
                // The reader has the last reference: wait for the token to come back.
                loop {
                    if let Some(p) = table.pop_returned() {
                        assert_eq!(p, 0);
                        returned += 1;
                        break;
                    }
                    loom::thread::yield_now();
                }
            }
            // Reuse: a fresh use of the page, ordered after every read (rule 1).
            table.take_fresh(0);
            // SAFETY: the count fell to zero and the token is ours (rule 3).
            unsafe { table.write_streaming(0, 0, &[5, 6, 7, 8]) };
            reader.join().unwrap();
            assert_eq!(
                u32::from(direct) + returned,
                1,
                "the token came back exactly once"
            );
            assert_eq!(table.pop_returned(), None);
        });
    }
}
