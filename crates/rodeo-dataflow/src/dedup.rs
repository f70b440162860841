//! [`DedupWindow`]: the logger's bounded duplicate detector over global event ids.
//!
//! # Why not a set of every id
//!
//! A logger must drop the second copy of an event (a reassigned event that its slow first DCM
//! finished after all), so it remembers the global ids it wrote. A `HashSet<u64>` of every id
//! of the run costs ~36 bytes per event: a 10-hour run needs gigabytes, and a time-based
//! expiry queue beside it doubles that. The ids have structure that a set ignores: the
//! supervisor assigns them in increasing order, and they reach a logger out of order only
//! within a bounded span (events in flight, and reassignments within the supervisor's event
//! timeout).
//!
//! # State
//!
//! - `low`, the low-water mark: below it the detector cannot tell (an id there is new to it,
//!   and counted late).
//! - a ring of `capacity` bits (a power of two): the bit of id `i`, for `low <= i < low +
//!   capacity`, is at position `i % capacity` and says whether `i` was inserted.
//! - `high`: one past the highest id tracked (the window's leading edge).
//!
//! An insert of an id at or past `low + capacity` slides the window forward: `low` becomes
//! `id + 1 - capacity`, and the bits of the ids that fell below `low` are cleared for reuse.
//! The memory is the ring, allocated and touched
//! once at construction ([`DedupWindow::new`]): nothing grows with the run.
//!
//! # What the bound costs, and hostile ids
//!
//! - An id that arrives more than `capacity` ids behind the newest is reported new (and
//!   counted, [`DedupWindow::late`]): the detector no longer knows whether it was seen, and an
//!   event written twice is counted by the file checks, while one dropped as a duplicate would
//!   be acknowledged and lost for good. The logger's default window is [`DEFAULT_WINDOW_IDS`]
//!   ids (2 MiB of bits): at a 100 kHz L1 rate that is 160 s of ids, far longer than any
//!   reassignment (the supervisor's event timeout, 10 s by default), so a genuine repeat is
//!   never that late. Until 2026-12-04 such an id counted as a duplicate: two forged events
//!   far ahead (a confirmed jump) or one forged event before the run's first made every
//!   genuine id of the run a "duplicate", dropped and acknowledged.
//! - An id more than half a window ahead of the newest tracked id (a corrupt or hostile event
//!   header, e.g. `u64::MAX`) does not move the window: one such id would otherwise push every
//!   genuine id below `low`, where all would count as duplicates. It is reported new, not
//!   remembered, and counted ([`DedupWindow::far_ahead`]). A genuine jump (a long stretch of
//!   rejected events) shows up as a second far-ahead id within half a window of the first:
//!   then the window moves to take both. So a single stray id costs nothing, no input can make
//!   the detector allocate, and a repeat can be missed only for ids that jumped ahead alone.

/// Ids the logger's window spans by default: 2^24 (2 MiB of bits).
pub const DEFAULT_WINDOW_IDS: u64 = 1 << 24;

/// A bounded duplicate detector over ids assigned in increasing order and seen out of order
/// within a window (module docs).
#[derive(Debug, Clone)]
pub struct DedupWindow {
    /// One bit per id of the window, as a ring.
    bits: Vec<u64>,
    /// `capacity - 1` (capacity is a power of two).
    mask: u64,
    /// Below this the detector cannot tell (module docs).
    low: u64,
    /// One past the highest id tracked (`low` when nothing was inserted yet).
    high: u64,
    /// Whether any id was inserted (the first one anchors the window).
    anchored: bool,
    /// The last far-ahead id, waiting for a second one to confirm a jump.
    jump: Option<u64>,
    /// Ids found below the window, reported new (module docs).
    late: u64,
    /// Far-ahead ids reported new without being remembered.
    far_ahead: u64,
}

impl Default for DedupWindow {
    fn default() -> Self {
        DedupWindow::new(DEFAULT_WINDOW_IDS)
    }
}

impl DedupWindow {
    /// A detector spanning `ids` ids (rounded up to a power of two, at least 64), its memory
    /// allocated and touched now (`ids / 8` bytes).
    pub fn new(ids: u64) -> DedupWindow {
        let cap = ids.clamp(64, 1 << 40).next_power_of_two();
        let words = (cap / 64) as usize;
        let mut bits = vec![0u64; words];
        // Touch every page now, so the resident size does not creep up as the ring fills
        // (the allocator hands out untouched zero pages).
        for w in bits.iter_mut().step_by(512) {
            // SAFETY: `w` is a valid, aligned, exclusive reference into `bits`.
            unsafe { std::ptr::write_volatile(w, 0) };
        }
        DedupWindow {
            bits,
            mask: cap - 1,
            low: 0,
            high: 0,
            anchored: false,
            jump: None,
            late: 0,
            far_ahead: 0,
        }
    }

    /// How many ids the window spans.
    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// The low-water mark: below it the detector cannot tell.
    pub fn low_water_mark(&self) -> u64 {
        self.low
    }

    /// Ids inserted below the window, reported new (module docs).
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Far-ahead ids reported new but not remembered (module docs).
    pub fn far_ahead(&self) -> u64 {
        self.far_ahead
    }

    /// Bytes of memory the detector holds (constant).
    pub fn memory_bytes(&self) -> usize {
        self.bits.len() * 8
    }

    /// Whether `id` counts as seen: inserted and still in the window (below it, it does not).
    pub fn contains(&self, id: u64) -> bool {
        if !self.anchored || id < self.low {
            return false;
        }
        if id >= self.high {
            return false;
        }
        self.bit(id)
    }

    /// Inserts `id`; `true` if it is new (or below the window: counted late), `false` if it
    /// was inserted before and is still in the window (a duplicate).
    pub fn insert(&mut self, id: u64) -> bool {
        if !self.anchored {
            self.anchored = true;
            self.low = id.saturating_sub(self.mask / 2);
            self.high = self.low;
        }
        if id < self.low {
            self.late += 1;
            return true;
        }
        let half = self.capacity() / 2;
        if id >= self.high.saturating_add(half) {
            // Far ahead of everything tracked: only a second id near it moves the window.
            match self.jump {
                Some(j) if j.abs_diff(id) < half => {
                    self.jump = None;
                    let top = j.max(id);
                    self.advance_to(top);
                    self.set(j);
                }
                _ => {
                    self.jump = Some(id);
                    self.far_ahead += 1;
                    return true;
                }
            }
        }
        self.advance_to(id);
        if self.bit(id) {
            return false;
        }
        self.set(id);
        true
    }

    /// Forgets `id` (its write was lost, so a later copy must count as new); an id outside the
    /// window is left as it counts.
    pub fn remove(&mut self, id: u64) {
        if self.anchored && id >= self.low && id < self.high {
            let pos = id & self.mask;
            self.bits[(pos / 64) as usize] &= !(1u64 << (pos % 64));
        }
    }

    /// Moves the window so that it spans `id` (nothing when it already does).
    fn advance_to(&mut self, id: u64) {
        if id < self.high {
            return;
        }
        let cap = self.capacity();
        let new_low = id.saturating_add(1).saturating_sub(cap).max(self.low);
        if new_low > self.low {
            if new_low - self.low >= cap {
                self.bits.fill(0);
            } else {
                self.clear_range(self.low, new_low);
            }
            self.low = new_low;
        }
        self.high = id.saturating_add(1);
    }

    /// Clears the bits of ids `from..to` (fewer than `capacity` of them).
    fn clear_range(&mut self, from: u64, to: u64) {
        let mut i = from;
        while i < to {
            let pos = i & self.mask;
            let word = (pos / 64) as usize;
            let bit = pos % 64;
            if bit == 0 && to - i >= 64 {
                self.bits[word] = 0;
                i += 64;
            } else {
                self.bits[word] &= !(1u64 << bit);
                i += 1;
            }
        }
    }

    fn bit(&self, id: u64) -> bool {
        let pos = id & self.mask;
        self.bits[(pos / 64) as usize] & (1u64 << (pos % 64)) != 0
    }

    fn set(&mut self, id: u64) {
        let pos = id & self.mask;
        self.bits[(pos / 64) as usize] |= 1u64 << (pos % 64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn new_then_duplicate() {
        let mut d = DedupWindow::new(1024);
        assert!(!d.contains(5));
        assert!(d.insert(5));
        assert!(d.contains(5));
        assert!(!d.insert(5));
        assert!(d.insert(4));
        assert!(d.insert(6));
        assert!(!d.contains(7));
        d.remove(5);
        assert!(!d.contains(5));
        assert!(d.insert(5));
    }

    #[test]
    fn slides_and_counts_late_ids_as_new() {
        let mut d = DedupWindow::new(64);
        for id in 1000..1100 {
            assert!(d.insert(id));
        }
        // The window is 64 ids wide: 1099 - 63 = 1036 is the low-water mark.
        assert_eq!(d.low_water_mark(), 1036);
        assert!(
            !d.contains(1000),
            "below the window the detector cannot tell"
        );
        assert!(d.insert(1001), "written (counted late), never dropped");
        assert_eq!(d.late(), 1);
        assert!(d.contains(1050));
        assert!(!d.contains(1100));
    }

    #[test]
    fn a_stray_id_far_ahead_does_not_move_the_window() {
        let mut d = DedupWindow::new(1 << 16);
        for id in 0..5000u64 {
            assert!(d.insert(id * 3));
        }
        assert!(d.insert(u64::MAX));
        assert!(d.insert(u64::MAX / 2));
        assert_eq!(d.far_ahead(), 2);
        // Genuine ids go on being told apart.
        assert!(d.insert(15_001));
        assert!(!d.insert(15_001));
        assert!(!d.insert(300));
        assert_eq!(d.late(), 0);
        assert_eq!(d.memory_bytes(), (1 << 16) / 8);
    }

    #[test]
    fn a_confirmed_jump_moves_the_window() {
        let mut d = DedupWindow::new(1 << 10);
        assert!(d.insert(10));
        let far = 10 + (1 << 20);
        assert!(d.insert(far));
        assert!(d.insert(far + 7));
        assert!(
            !d.insert(far),
            "the first far id is remembered once confirmed"
        );
        assert!(!d.insert(far + 7));
        assert!(d.insert(far + 8));
        assert!(!d.contains(10), "the old ids are below the window now");
    }

    /// Forged ids (a confirmed jump from two far-ahead ones, or one before the run's first)
    /// cannot make the genuine ids duplicates: below the window they are new, counted late,
    /// and written (they were dropped and acknowledged, the rest of the run lost).
    #[test]
    fn forged_ids_far_ahead_never_make_genuine_ids_duplicates() {
        let mut d = DedupWindow::new(1 << 10);
        for id in 0..100 {
            assert!(d.insert(id));
        }
        assert!(d.insert(1 << 40) && d.insert((1 << 40) + 1));
        for id in 100..200 {
            assert!(d.insert(id), "genuine id {id} after a forged jump");
        }
        assert_eq!(d.late(), 100);
        let mut first = DedupWindow::new(1 << 10);
        assert!(first.insert(1 << 40));
        for id in 0..100 {
            assert!(first.insert(id), "genuine id {id} after a forged first id");
        }
    }

    #[test]
    fn memory_is_fixed_whatever_the_input() {
        let mut d = DedupWindow::new(1 << 12);
        let before = d.memory_bytes();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            d.insert(x);
        }
        for id in 0..1_000_000u64 {
            d.insert(id * 1000);
        }
        assert_eq!(d.memory_bytes(), before);
    }

    proptest! {
        /// Within the window the detector answers as a set of every id would: ids increase
        /// overall but arrive shuffled within a span smaller than the window, and repeat.
        /// Inserts stay within half a window ahead of the newest id inserted: one further
        /// ahead is a far-ahead id, reported new and not remembered until a second confirms
        /// the jump (module docs; `a_confirmed_jump_moves_the_window` tests that), which a set
        /// does not model. (Probes, which insert nothing, once let the front run ahead and
        /// an insert land more than half a window ahead: the set remembered it, the window,
        /// as documented, did not.)
        #[test]
        fn matches_a_set_within_the_window(
            steps in proptest::collection::vec((0u64..40, -200i64..200, any::<bool>()), 1..2000),
            start in 0u64..1_000_000,
        ) {
            let window = 1u64 << 10;
            let mut d = DedupWindow::new(window);
            let mut model = HashSet::new();
            let mut front = start + 200;
            let mut newest: Option<u64> = None;
            for (advance, jitter, probe) in steps {
                front += advance;
                let id = front.saturating_add_signed(jitter).max(start);
                // Only ids the window still spans are promised to match the model.
                let spanned = newest.is_none_or(|n| id + window / 2 > n);
                if probe {
                    if spanned {
                        prop_assert_eq!(d.contains(id), model.contains(&id), "contains({})", id);
                    }
                } else if spanned {
                    let id = newest.map_or(id, |n| id.min(n + window / 2));
                    prop_assert_eq!(d.insert(id), model.insert(id), "insert({})", id);
                    newest = Some(newest.map_or(id, |n| n.max(id)));
                }
            }
            prop_assert_eq!(d.late(), 0);
            prop_assert_eq!(d.far_ahead(), 0);
        }
    }
}
