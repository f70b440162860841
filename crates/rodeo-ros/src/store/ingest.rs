//! Storing fragments: [`EventStore::ingest`] (copied with streaming stores: most fragments are
//! never read again, only cleared, so their lines are not read into the cache to be written;
//! the store fences them before it reads or hands out a fragment and before a page goes back on
//! a free stack, `pages::PageTable::write_streaming`), [`EventStore::ingest_with`] (written in
//! place) and [`EventStore::ingest_run`] (a card's run of same-sized fragments), all through
//! the inline common case (`place_fast`: the write page or one fresh page, the L1ID's index slot
//! free at home) or the general one (`ingest_general`: duplicates, early clears, collisions,
//! chains of pages, a full channel). Also the page layouts a card run reuses ([`Rewrite`]), the
//! stagger of a fresh page's first fragment and the prefetch of the next one's lines.

use rodeo_format::fragment::Status;

use super::index::{Location, Slot};
use super::pages::{PageTable, NO_PAGE};
use super::{
    count_full, hold, known_l1id, note_fresh_pages, note_l1id, push_free, raise_alarm, rob_header,
    unhold, Channel, EventStore, IngestError, Ingested, ROB_HEADER_WORDS, ROD_L1ID_WORD,
};

impl EventStore {
    /// Stores the ROD fragment `rod` of channel `c` with ROB status `status`, copying it into
    /// the channel's pages behind an 8-word ROB header (streaming stores, module docs). See the
    /// store's module docs for back-pressure.
    pub fn ingest(
        &mut self,
        c: usize,
        rod: &[u32],
        status: Status,
    ) -> Result<Ingested, IngestError> {
        let l1id = *rod
            .get(ROD_L1ID_WORD)
            .ok_or(IngestError::NoL1id(rod.len()))?;
        self.ingest_inner(
            c,
            l1id,
            rod.len(),
            status,
            // Streamed: warming the lines it writes would only read them for nothing.
            false,
            |table, mut page, mut offset, header| {
                // Header and ROD words, page by page along the chain.
                let mut rest: [&[u32]; 2] = [header, rod];
                let page_words = table.page_words();
                for part in &mut rest {
                    while !part.is_empty() {
                        if offset == page_words {
                            page = table.next(page);
                            offset = 0;
                        }
                        let n = part.len().min(page_words - offset);
                        // SAFETY: the store thread writes the words of a fragment being placed, past
                        // every stored fragment of these pages (pages::rule 1).
                        unsafe { table.write_streaming(page, offset, &part[..n]) };
                        offset += n;
                        *part = &part[n..];
                    }
                }
            },
        )
    }

    /// Stores a fragment of `rod_words` words and L1ID `l1id` written in place by `fill` (an
    /// emulated card writing straight into the page, as a DMA engine would). The ROB fragment
    /// must fit one page. `fill` gets exactly `rod_words` words.
    pub fn ingest_with(
        &mut self,
        c: usize,
        l1id: u32,
        rod_words: usize,
        status: Status,
        fill: impl FnOnce(&mut [u32]),
    ) -> Result<Ingested, IngestError> {
        if rod_words + ROB_HEADER_WORDS > self.table.page_words() {
            return Err(IngestError::TooLarge(rod_words));
        }
        self.ingest_inner(
            c,
            l1id,
            rod_words,
            status,
            true,
            |table, page, offset, header| {
                // SAFETY: as in `ingest`: the words being placed, exclusively the store thread's.
                let dst = unsafe { table.slice_mut(page, offset, ROB_HEADER_WORDS + rod_words) };
                dst[..ROB_HEADER_WORDS].copy_from_slice(header);
                fill(&mut dst[ROB_HEADER_WORDS..]);
            },
        )
    }

    /// Stores a run of fragments of `rod_words` ROD words each on channel `c`, as a card's DMA
    /// engine fills its pages: the L1ID of each comes from `next_l1id`, and
    /// `fill(l1id, dst, rewrite)` writes its ROD words in place (`dst` is exactly `rod_words`
    /// long). With [`Rewrite::Changed`], `dst` already holds the fragment this channel's runs
    /// last wrote there with the same size and status (see the module docs): `fill` must leave
    /// it as a full write would, but need write only the words that differ from that one; with
    /// [`Rewrite::Full`] it writes every word it wants read. Stops after `limit`
    /// fragments or at the first one the store refuses (full channel, or one of the other
    /// [`IngestError`]s); that one is not consumed. Returns how many L1IDs were consumed
    /// (stored, or dropped as duplicates or already cleared, as [`EventStore::ingest_with`]
    /// does) and the error that stopped the run. The ROB fragment must fit one page.
    pub fn ingest_run(
        &mut self,
        c: usize,
        rod_words: usize,
        status: Status,
        limit: usize,
        mut next_l1id: impl FnMut() -> u32,
        mut fill: impl FnMut(u32, &mut [u32], Rewrite),
    ) -> (usize, Option<IngestError>) {
        let words = ROB_HEADER_WORDS + rod_words;
        if words > self.page_words {
            return (0, Some(IngestError::TooLarge(rod_words)));
        }
        let layout = layout_key(words, status);
        for done in 0..limit {
            let l1id = next_l1id();
            if let Some((page, offset, source, same)) =
                self.place_fast(c, l1id, words, layout, true)
            {
                // SAFETY: as in `ingest`: the words just placed, exclusively the store thread's.
                let dst = unsafe { self.table.slice_mut(page, offset, words) };
                let (header, rod) = dst.split_at_mut(ROB_HEADER_WORDS);
                if same {
                    // The slot holds this layout's fragment: its ROB header is already right.
                    fill(l1id, rod, Rewrite::Changed);
                } else {
                    header.copy_from_slice(&rob_header(source, words, status));
                    fill(l1id, rod, Rewrite::Full);
                }
                continue;
            }
            let fill = &mut fill;
            let write = move |table: &PageTable, page: u32, offset: usize, header: &[u32]| {
                // SAFETY: as above.
                let dst = unsafe { table.slice_mut(page, offset, words) };
                dst[..ROB_HEADER_WORDS].copy_from_slice(header);
                fill(l1id, &mut dst[ROB_HEADER_WORDS..], Rewrite::Full);
            };
            if let Err(e) = self.ingest_general(c, l1id, rod_words, status, true, write) {
                return (done, Some(e));
            }
        }
        (limit, None)
    }

    /// Every case of an ingest: the common one inline ([`EventStore::place_fast`]), the rest
    /// through [`EventStore::ingest_general`].
    #[inline(always)]
    fn ingest_inner(
        &mut self,
        c: usize,
        l1id: u32,
        rod_words: usize,
        status: Status,
        prefetch: bool,
        write: impl FnOnce(&PageTable, u32, usize, &[u32]),
    ) -> Result<Ingested, IngestError> {
        let words = ROB_HEADER_WORDS + rod_words;
        match self.place_fast(c, l1id, words, NO_LAYOUT, prefetch) {
            Some((page, offset, source, _)) => {
                write(
                    &self.table,
                    page,
                    offset,
                    &rob_header(source, words, status),
                );
                Ok(Ingested::Stored)
            }
            None => self.ingest_general(c, l1id, rod_words, status, prefetch, write),
        }
    }

    /// The common case of an ingest: a ROB fragment of `words` words that fits the channel's
    /// write page or one fresh page, whose L1ID's index slot is free at home (in-order
    /// L1IDs). Places and indexes it, and returns its page, word offset and the channel's
    /// source id: the caller writes the words there before anything looks the L1ID up (the
    /// store has one thread). Anything else (no such channel, duplicates, early clears,
    /// collisions, fragments spanning pages, a full channel, an L1ID the run's clears named)
    /// changes nothing and returns
    /// `None`: ask [`EventStore::ingest_general`].
    ///
    /// `layout` is the card run's [`layout_key`] (`NO_LAYOUT` for any other writer); the last
    /// value returned says whether the slot still holds a fragment of that layout (see the
    /// module docs), so only the words that change need writing. With `prefetch`, the next
    /// fragment's lines are warmed ([`prefetch_next`]); a streaming writer asks for none.
    #[inline(always)]
    fn place_fast(
        &mut self,
        c: usize,
        l1id: u32,
        words: usize,
        layout: u64,
        prefetch: bool,
    ) -> Option<(u32, usize, u32, bool)> {
        let pw = self.page_words;
        let ch = self.channels.get_mut(c)?;
        if words > pw || self.cleared.is_cleared(l1id) {
            return None;
        }
        let home = ch.index.vacant_home(l1id)?;
        let fits = ch.write_page != NO_PAGE && ch.write_offset + words <= pw;
        if !fits && ch.free.is_empty() {
            return None;
        }
        let table = &*self.table;
        let holds = &mut self.holds;
        if !fits {
            // Leave the current page (drop the cursor's hold) for a fresh one.
            stamp_left_page(ch, &mut self.layouts, pw);
            if ch.write_page != NO_PAGE && unhold(holds, table, ch.write_page) {
                // Free again (every fragment of it cleared): see `push_free`.
                push_free(&mut ch.free, ch.write_page);
            }
            let p = ch.free.pop()?;
            hold(holds, table, p);
            table.set_next(p, NO_PAGE);
            ch.write_page = p;
            ch.write_offset = first_offset(p, words, pw);
            // Being filled under `layout` (stamped when left full); its slots still hold that
            // layout if it was stamped so.
            let was = std::mem::replace(&mut self.layouts[p as usize], NO_LAYOUT);
            ch.write_same = layout != NO_LAYOUT && was == layout;
            ch.write_layout = layout;
            note_fresh_pages(
                ch,
                self.runs_ahead,
                self.l1_front,
                l1id,
                1,
                self.pages_per_channel,
            );
        } else if ch.write_layout != layout {
            // Another writer in this page: its slots follow no one layout any more.
            ch.write_layout = NO_LAYOUT;
            ch.write_same = false;
        }
        let (page, offset) = (ch.write_page, ch.write_offset);
        hold(holds, table, page);
        ch.write_offset = offset + words;
        ch.index.fill_home(
            home,
            l1id,
            Location {
                page,
                offset: offset as u32,
                words: words as u32,
            },
        );
        if prefetch {
            prefetch_next(table, ch, &self.layouts, words, pw, layout);
        }
        ch.counters.fragments += 1;
        ch.counters.words += words as u64;
        note_l1id(ch, l1id);
        if !fits {
            raise_alarm(ch, self.l1_front, self.pages_per_channel, self.alarm_pages);
        }
        Some((page, offset, ch.source_id, ch.write_same))
    }

    /// Every case of an ingest (the common one is [`EventStore::place_fast`]); `prefetch` as
    /// there.
    #[inline(never)]
    fn ingest_general(
        &mut self,
        c: usize,
        l1id: u32,
        rod_words: usize,
        status: Status,
        prefetch: bool,
        write: impl FnOnce(&PageTable, u32, usize, &[u32]),
    ) -> Result<Ingested, IngestError> {
        let table = &*self.table;
        let holds = &mut self.holds;
        let page_words = table.page_words();
        let ch = self.channels.get_mut(c).ok_or(IngestError::NoChannel(c))?;
        if let Some(known) = known_l1id(ch, &self.cleared, l1id) {
            return Ok(known);
        }
        let words = ROB_HEADER_WORDS + rod_words;
        let room = if ch.write_page == NO_PAGE {
            0
        } else {
            page_words - ch.write_offset
        };
        let fresh = if words <= room {
            0
        } else {
            words.div_ceil(page_words)
        };
        if ch.free.len() < fresh || ch.index.is_full() {
            count_full(ch, self.l1_front, self.pages_per_channel, self.alarm_pages);
            return Err(IngestError::Full);
        }
        let header = rob_header(ch.source_id, words, status);
        let layouts = &mut self.layouts;
        let (first, offset) = if fresh == 0 {
            (ch.write_page, ch.write_offset)
        } else {
            // Leave the current page (drop the cursor's hold) and chain fresh pages.
            stamp_left_page(ch, layouts, page_words);
            if ch.write_page != NO_PAGE && unhold(holds, table, ch.write_page) {
                // Free again (every fragment of it cleared): see `push_free`.
                push_free(&mut ch.free, ch.write_page);
            }
            let first = ch.free.pop().expect("checked above");
            let mut prev = first;
            hold(holds, table, first);
            table.set_next(first, NO_PAGE);
            layouts[first as usize] = NO_LAYOUT;
            for _ in 1..fresh {
                let p = ch.free.pop().expect("checked above");
                layouts[p as usize] = NO_LAYOUT;
                hold(holds, table, p);
                table.set_next(p, NO_PAGE);
                table.set_next(prev, p);
                prev = p;
            }
            note_fresh_pages(
                ch,
                self.runs_ahead,
                self.l1_front,
                l1id,
                fresh,
                self.pages_per_channel,
            );
            // The last page becomes the write page: the cursor holds it.
            hold(holds, table, prev);
            ch.write_page = prev;
            ch.write_offset = 0;
            (first, 0)
        };
        if fresh == 0 {
            hold(holds, table, first);
        }
        // The write page now holds a fragment of no card run's layout.
        ch.write_layout = NO_LAYOUT;
        ch.write_same = false;
        write(table, first, offset, &header);
        ch.write_offset = if fresh == 0 {
            offset + words
        } else {
            // Words on the last page of the chain: 1 ..= page_words.
            words - (fresh - 1) * page_words
        };
        let loc = Location {
            page: first,
            offset: offset as u32,
            words: words as u32,
        };
        // The index had no entry (checked above) and is not full: the insert succeeds.
        let _ = ch.index.insert_absent(l1id, Slot::Stored(loc));
        if prefetch {
            prefetch_next(table, ch, layouts, words, page_words, NO_LAYOUT);
        }
        ch.counters.fragments += 1;
        ch.counters.words += words as u64;
        note_l1id(ch, l1id);
        raise_alarm(ch, self.l1_front, self.pages_per_channel, self.alarm_pages);
        Ok(Ingested::Stored)
    }
}

/// Channel `ch` leaves its write page: the page keeps the layout it was being filled with only
/// when every slot of that layout was written (the next one would not fit), else none. Pages
/// being filled hold no layout (`place_fast`), so a page left early, by any path, never tells
/// a later run that slots it never wrote hold its fragments.
#[inline(always)]
pub(super) fn stamp_left_page(ch: &Channel, layouts: &mut [u64], page_words: usize) {
    let Some(stamp) = layouts.get_mut(ch.write_page as usize) else {
        return;
    };
    let words = (ch.write_layout & 0xFFFF_FFFF) as usize;
    let complete = ch.write_layout != NO_LAYOUT && ch.write_offset + words > page_words;
    *stamp = if complete { ch.write_layout } else { NO_LAYOUT };
}

/// The next fragment of channel `ch` most likely has this size (`words`) and layout (`layout`)
/// and goes where the cursor is now (or at the first offset of the next free page): warms, for
/// writing, the lines it will write then, so that those writes do not stall on memory. A slot
/// that holds that layout already gets only its ROD L1ID and BCID rewritten (one line); any
/// other gets its header and trailer lines.
#[inline(always)]
pub(super) fn prefetch_next(
    table: &PageTable,
    ch: &Channel,
    layouts: &[u64],
    words: usize,
    page_words: usize,
    layout: u64,
) {
    let (np, no, same) = if ch.write_offset + words <= page_words {
        (
            ch.write_page,
            ch.write_offset,
            ch.write_same && ch.write_layout == layout,
        )
    } else {
        match ch.free.last() {
            Some(&p) => (
                p,
                first_offset(p, words, page_words),
                layout != NO_LAYOUT && layouts.get(p as usize) == Some(&layout),
            ),
            None => (NO_PAGE, 0, false),
        }
    };
    if np == NO_PAGE {
        return;
    }
    if same {
        table.prefetch(np, no + ROB_HEADER_WORDS + ROD_L1ID_WORD);
    } else {
        table.prefetch(np, no);
        table.prefetch(np, no + 16);
        table.prefetch(np, (no + words).min(page_words) - 1);
    }
}

/// Where the first fragment goes in fresh page `p`, for fragments of `words` words in pages of
/// `page_words`: staggered by a few cache lines from page to page, within the room that
/// fragments of this size leave unused at a page's end anyway (so no page holds fewer of
/// them). Without it every page's first header sits at offset 0, and the header lines of all
/// the store's pages compete for the same few cache sets.
#[inline(always)]
pub(super) fn first_offset(p: u32, words: usize, page_words: usize) -> usize {
    let spare = page_words % words;
    // 16 words = one 64-byte line; eight colours.
    let want = (p as usize % 8) * 16;
    want.min(spare & !15)
}

/// No card-run layout (see the module docs).
pub(super) const NO_LAYOUT: u64 = 0;

/// A card run's page layout: fragment size (ROB header included, never zero) and status.
#[inline]
fn layout_key(words: usize, status: Status) -> u64 {
    (u64::from(status.word()) << 32) | (words as u64 & 0xFFFF_FFFF)
}

/// What a card run's `fill` is asked to write ([`EventStore::ingest_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewrite {
    /// Every word: the slot holds anything.
    Full,
    /// Only the words that differ from the fragment this channel's runs last wrote in this
    /// slot with the same size and status, which the slot still holds.
    Changed,
}
