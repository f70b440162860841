//! Clears: releasing the cleared L1IDs' fragments on every channel (their pages go back to
//! the free stack once no reply holds them), remembering clears that come before their
//! fragment, and settling an idle channel's write page.

use super::index::{Location, Slot};
use super::ingest::stamp_left_page;
use super::pages::{PageTable, NO_PAGE};
use super::read::chain;
use super::{l1id_newer, lent_pages_passed, push_free, raise_alarm, unhold, EventStore};

impl EventStore {
    /// Releases `l1ids` on every channel. Returns the fragments released.
    pub fn clear(&mut self, l1ids: impl IntoIterator<Item = u32>) -> u64 {
        let table = &*self.table;
        let rejoining = self.rejoining;
        let holds = &mut self.holds;
        let pw = table.page_words();
        let mut released = 0;
        // Pages this call frees go back to the free stacks: this thread's streaming stores into
        // them land first (`push_free`; once for the whole call).
        rodeo_memory::stream::fence();
        self.clear_ids.clear();
        self.clear_ids.extend(l1ids);
        // Every L1ID is noted as cleared, for a fragment that comes later however far behind
        // its input is (`cleared`); the L1 front moves to the newest L1ID cleared.
        self.cleared.mark_all(&self.clear_ids);
        for &l1id in &self.clear_ids {
            if self.l1_front.is_none_or(|f| l1id_newer(l1id, f)) {
                self.l1_front = Some(l1id);
            }
        }
        let front = self.l1_front;
        // Channel by channel: a group of consecutive L1IDs then walks adjacent index slots.
        for ch in &mut self.channels {
            for &l1id in &self.clear_ids {
                // The common case first: stored at home, nothing to shift.
                if let Some(loc) = ch.index.take_home(l1id) {
                    release_fragment(holds, table, &mut ch.free, loc, pw);
                    ch.counters.cleared += 1;
                    released += 1;
                    continue;
                }
                match ch.index.remove(l1id) {
                    Some(Slot::Stored(loc)) => {
                        release_fragment(holds, table, &mut ch.free, loc, pw);
                        ch.counters.cleared += 1;
                        released += 1;
                    }
                    Some(Slot::ClearedEarly) => {
                        // Cleared twice before it arrived: keep the marker.
                        let _ = ch.index.insert_absent(l1id, Slot::ClearedEarly);
                    }
                    None => {
                        // An early clear is for an L1ID the input has not delivered yet, at
                        // most an index's worth of L1IDs ahead of it (the input lags the
                        // trigger by the events in flight, which the index holds): a marker
                        // further ahead could only be a hostile or mistaken clear, and kept
                        // forever (100 clears of random L1IDs took a node from 170 to 30 kHz).
                        let cap = ch.index.capacity() as u32;
                        let soon = ch
                            .last_l1id
                            .is_none_or(|last| within_reach(l1id, last, cap));
                        if !soon
                            || rejoining
                            || ch.index.insert_absent(l1id, Slot::ClearedEarly).is_err()
                        {
                            ch.counters.unknown_clears += 1;
                        }
                    }
                }
            }
        }
        let per = self.pages_per_channel;
        for ch in &mut self.channels {
            // Pages the front passed are fill now (their fragments are the L1's).
            let fill = (per - ch.free.len()) - lent_pages_passed(ch, front, per);
            if ch.alarm && fill < self.alarm_pages {
                ch.alarm = false;
            } else {
                raise_alarm(ch, front, per, self.alarm_pages);
            }
        }
        released
    }

    /// Pages in use on channel `c` after the pages other threads let go of are taken back
    /// ([`EventStore::reclaim`]) and the write cursor's page is released if it holds no
    /// fragment (an idle, fully cleared channel then shows zero).
    pub fn settle(&mut self, c: usize) -> usize {
        self.reclaim();
        let table = &*self.table;
        let ch = &mut self.channels[c];
        // Only the cursor holds it: no stored fragment.
        if ch.write_page != NO_PAGE && self.holds[ch.write_page as usize] == 1 {
            let p = ch.write_page;
            stamp_left_page(ch, &mut self.layouts, table.page_words());
            ch.write_page = NO_PAGE;
            ch.write_offset = 0;
            if unhold(&mut self.holds, table, p) {
                push_free(&mut ch.free, p);
            }
        }
        self.pages_per_channel - ch.free.len()
    }
}

/// Whether `l1id`, not stored yet, may be an early clear of a channel whose newest L1ID is
/// `last`: newer, and at most `cap` L1IDs ahead, or (in a later ECR period, whose L1IDs
/// restart at 0 after a wrap of any length) at most `cap` into that period.
fn within_reach(l1id: u32, last: u32, cap: u32) -> bool {
    const LOW: u32 = 0x00FF_FFFF;
    l1id_newer(l1id, last)
        && (l1id.wrapping_sub(last) <= cap || (l1id >> 24 != last >> 24 && l1id & LOW <= cap))
}

/// Drops the store's holds of a cleared fragment at `loc`: one per page it touches; pages
/// whose last reference that was go back on `free` (the caller fenced its streaming stores
/// first, `push_free`).
#[inline(always)]
pub(super) fn release_fragment(
    holds: &mut [u32],
    table: &PageTable,
    free: &mut Vec<u32>,
    loc: Location,
    page_words: usize,
) {
    for s in chain(table, loc, page_words) {
        if unhold(holds, table, s.page) {
            free.push(s.page);
        }
    }
}
