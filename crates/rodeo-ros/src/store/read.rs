//! Answering requests: what a channel holds for an L1ID ([`Lookup`]: present, pending or
//! lost), and the page segments of a stored fragment, handed out as counted [`PageRef`]s or
//! held by the store for the direct link's reader until it hands them back.

use std::sync::Arc;

use super::index::{Location, Slot};
use super::pages::{PageRef, PageTable};
use super::{hold, l1id_newer, unhold, EventStore, HeldSegment, Lookup};

impl EventStore {
    /// What channel `c` holds for `l1id`.
    #[inline]
    pub fn lookup(&self, c: usize, l1id: u32) -> Lookup {
        let ch = &self.channels[c];
        match ch.index.get(l1id) {
            Some(Slot::Stored(_)) => Lookup::Present,
            Some(Slot::ClearedEarly) => Lookup::Lost,
            None => match ch.last_l1id {
                Some(last) if !l1id_newer(l1id, last) => Lookup::Lost,
                _ => Lookup::Pending,
            },
        }
    }

    /// Appends the page segments of the fragment of (`c`, `l1id`) to `out`, the store holding
    /// each page itself (a plain counter, as for a stored fragment) until
    /// [`EventStore::release_held`]; returns false (and appends nothing) when it is not stored.
    /// For a reader that hands its segments back to this thread (the direct link): no atomic
    /// operation on either side.
    #[inline]
    pub(crate) fn hold_segments(
        &mut self,
        c: usize,
        l1id: u32,
        out: &mut Vec<HeldSegment>,
    ) -> bool {
        let Some(Slot::Stored(loc)) = self.channels[c].index.get(l1id) else {
            return false;
        };
        // The fragment's streamed words before the reader's thread sees the segments.
        rodeo_memory::stream::fence();
        for s in chain(&self.table, loc, self.page_words) {
            hold(&mut self.holds, &self.table, s.page);
            out.push(s);
        }
        true
    }

    /// Gives back the holds [`EventStore::hold_segments`] took; pages whose last holder that
    /// was go back to their channel's free stack.
    pub(crate) fn release_held(&mut self, segments: impl IntoIterator<Item = HeldSegment>) {
        // Pages freed here go back to the free stacks: streaming stores first (`push_free`).
        rodeo_memory::stream::fence();
        for s in segments {
            if unhold(&mut self.holds, &self.table, s.page) {
                let c = usize::from(self.page_channel[s.page as usize]);
                self.channels[c].free.push(s.page);
            }
        }
    }

    /// The page table, for readers of held segments.
    pub(crate) fn table(&self) -> &Arc<PageTable> {
        &self.table
    }

    /// Calls `f` with a [`PageRef`] per page segment of the fragment of (`c`, `l1id`); returns
    /// false (and calls nothing) when it is not stored.
    #[inline]
    pub fn with_segments(&self, c: usize, l1id: u32, mut f: impl FnMut(PageRef)) -> bool {
        let Some(Slot::Stored(loc)) = self.channels[c].index.get(l1id) else {
            return false;
        };
        // The fragment's streamed words before a reference can reach another thread.
        rodeo_memory::stream::fence();
        for s in chain(&self.table, loc, self.page_words) {
            f(PageRef::new(&self.table, s.page, s.offset, s.words));
        }
        true
    }

    /// A copy of the ROB fragment of (`c`, `l1id`), for tests and diagnostics.
    pub fn fragment_copy(&self, c: usize, l1id: u32) -> Option<Vec<u32>> {
        let mut out = Vec::new();
        self.with_segments(c, l1id, |r| out.extend_from_slice(r.words()))
            .then_some(out)
    }
}

/// The page segments of a stored fragment at `loc`, in order along its chain of pages. Each
/// page's successor is read when its segment is produced (and only when the fragment goes on),
/// so a caller may free the page it was handed before asking for the next.
#[inline(always)]
pub(super) fn chain(
    table: &PageTable,
    loc: Location,
    page_words: usize,
) -> impl Iterator<Item = HeldSegment> + '_ {
    let (mut page, mut offset, mut rest) = (loc.page, loc.offset as usize, loc.words as usize);
    std::iter::from_fn(move || {
        if rest == 0 {
            return None;
        }
        let n = rest.min(page_words - offset);
        let s = HeldSegment {
            page,
            offset: offset as u32,
            words: n as u32,
        };
        rest -= n;
        if rest > 0 {
            page = table.next(page);
        }
        offset = 0;
        Some(s)
    })
}
