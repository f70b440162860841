//! A SW ROD link's batch: the fragments one hand-over carries from the sink to the core thread,
//! each written into a store page lent to the batch, or into the batch's own words when no
//! lent page has room ([`Batch`], [`Room`]); and the constants that size it.

use rodeo_format::fragment::Status;
use rodeo_swrod::ROB_HEADER_WORDS;

use crate::store::{EventStore, LentPage, ROD_L1ID_WORD};

/// Fragments a batch holds at most before the sink hands it over.
pub const BATCH_FRAGMENTS: usize = 64;
/// ROD words a batch holds before the sink hands it over (32 KiB: half a superpage's worth).
pub const BATCH_WORDS: usize = 8 * 1024;

/// Lent store pages a batch carries at most: 64 KiB of the usual 4 KiB pages, about what a
/// SW ROD superpage completes.
pub(super) const BATCH_PAGES_BYTES: usize = 64 * 1024;

/// `Frag::page` of a fragment copied into the batch's own words.
pub(super) const SPILLED: u32 = u32::MAX;

/// Where one fragment of a batch lies.
#[derive(Debug, Clone, Copy)]
pub(super) struct Frag {
    /// Index into the batch's lent pages, or [`SPILLED`].
    pub(super) page: u32,
    /// In a page: the word offset of its ROB header; spilled: where its ROD words start in
    /// the batch's words.
    pub(super) start: u32,
    /// In a page: the ROB fragment's words (header included); spilled: its ROD words.
    pub(super) len: u32,
    /// The builder's status.
    pub(super) status: Status,
    /// Its extended L1ID (ROD word 5), read by the sink while writing it; `None`: too short.
    pub(super) l1id: Option<u32>,
}

/// Fragments on their way, each either written by the sink straight into one of the batch's
/// lent store pages, header included (the core thread then indexes it where it lies), or,
/// when no lent page has room (none lent, or a fragment larger than a page), as ROD words
/// back to back in the batch's own `words` (the core thread copies it into the store).
#[derive(Debug, Default)]
pub(super) struct Batch {
    /// Store pages lent to this batch by the core thread, filled in order.
    pub(super) pages: Vec<LentPage>,
    /// Pages written into; the last of them may have room left at `offset`.
    pub(super) used: usize,
    pub(super) offset: usize,
    pub(super) words: Vec<u32>,
    pub(super) frags: Vec<Frag>,
    /// Fragments written into lent pages.
    pub(super) in_place: u64,
}

/// Where the sink may write a fragment.
pub(super) enum Room {
    /// In lent page `.0` at word `.1`.
    Page(usize, usize),
    /// The lent pages are full: hand the batch over and take the next.
    PagesFull,
    /// No lent page could hold it: copy it into the batch's words.
    Spill,
}

impl Batch {
    /// An empty batch with room for about `words` ROD words.
    pub(super) fn with_capacity(words: usize) -> Batch {
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
    pub(super) fn rod(&self, f: &Frag) -> &[u32] {
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
    pub(super) fn room(&mut self, words: usize) -> Room {
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

    /// Gives every lent page of the batch back to `store` (the input stopping).
    pub(super) fn take_back_pages(&mut self, store: &mut EventStore) {
        for lent in self.pages.drain(..) {
            store.take_back(lent);
        }
    }

    /// Empties the batch (its lent pages kept, to be written from the start).
    pub(super) fn clear(&mut self) {
        self.words.clear();
        self.frags.clear();
        self.used = 0;
        self.offset = 0;
        self.in_place = 0;
    }

    pub(super) fn is_full(&self) -> bool {
        self.frags.len() >= BATCH_FRAGMENTS || self.words.len() >= BATCH_WORDS
    }
}

/// `pieces` less the builder's ROB header (its first [`ROB_HEADER_WORDS`] words, which may
/// span pieces): the ROD fragment's words, piece by piece.
pub(super) fn rod_pieces<'a>(
    pieces: impl Iterator<Item = &'a [u32]>,
) -> impl Iterator<Item = &'a [u32]> {
    let mut skip = ROB_HEADER_WORDS;
    pieces.map(move |piece| {
        let n = skip.min(piece.len());
        skip -= n;
        &piece[n..]
    })
}

/// Copies the ROD words of `pieces` ([`rod_pieces`]) into `dst`, at most what it has room
/// for; returns the words written.
pub(super) fn gather<'a>(pieces: impl Iterator<Item = &'a [u32]>, dst: &mut [u32]) -> usize {
    let mut at = 0;
    for piece in rod_pieces(pieces) {
        let m = piece.len().min(dst.len() - at);
        dst[at..at + m].copy_from_slice(&piece[..m]);
        at += m;
    }
    at
}

/// The L1ID of a ROD fragment's words, if it has one.
pub(super) fn l1id_of(words: &[u32]) -> Option<u32> {
    words.get(ROD_L1ID_WORD).copied()
}
