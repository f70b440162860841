//! The L1ID index of one channel: an open-addressing hash table from extended L1ID to the
//! fragment's location, O(1) per insert, lookup and remove.
//!
//! # Layout
//!
//! A power-of-two array of [`Entry`]s, linear probing, slot = the L1ID's low 24 bits plus an
//! offset per ECR, masked to the table size (the ROS hashes the low 20 bits the same way).
//! Consecutive L1IDs land in consecutive slots, so a run of inserts, a group of clears and the
//! lookups of one request touch adjacent cache lines. The key is the whole extended L1ID (ECR
//! in bits 31..24): after an L1ID wrap or an ECR the same low bits come back with a different
//! key, and the two never alias; while both are present, probing separates them.
//!
//! The offset per ECR ([`L1idIndex::ecr_stride`], about 0.618 of the table, so successive ECR
//! periods start far apart) matters when ECRs come more often than the table is long: with
//! the slot from the low bits alone, a wrap of 1,024 L1IDs put every period on the same 1,024
//! slots of an 8,192-slot table, each period's L1IDs probing past the last one's, and the
//! readout node fell from ~200 kHz to 15 kHz (`rodeo tester --l1id-wrap 1024`).
//!
//! Insertion keeps Robin Hood order (an entry never sits further from its home than the one it
//! passed), so a lookup of an absent key stops early and removal is backward-shift deletion
//! that stops at the first entry already at its home: with consecutive L1IDs every entry is at
//! its home and every operation touches one or two slots. (Plain linear probing with backward
//! shift would walk the whole run of stored L1IDs on every clear.) No tombstones.
//! The table never grows: its capacity is part of the store's configuration, and a full table
//! is back-pressure like a full page stack.
//!
//! # Ownership
//!
//! Single owner (the store's thread); no atomics.

/// Where a stored fragment lies: its first page, word offset in it, total words (ROB fragment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Location {
    /// Store-wide page id of the first page.
    pub(crate) page: u32,
    /// Word offset of the fragment in its first page.
    pub(crate) offset: u32,
    /// Words of the whole ROB fragment (it continues on linked pages when it overflows).
    pub(crate) words: u32,
}

/// What an index slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A stored fragment.
    Stored(Location),
    /// A clear for an L1ID that had not arrived yet: the fragment is dropped when it comes.
    ClearedEarly,
}

/// A slot of the table, 16 bytes (four per cache line): `words == 0` marks an empty slot,
/// `page == CLEARED` an early clear.
#[derive(Debug, Clone, Copy)]
struct Entry {
    l1id: u32,
    page: u32,
    offset: u32,
    words: u32,
}

const CLEARED: u32 = u32::MAX;

const EMPTY: Entry = Entry {
    l1id: 0,
    page: 0,
    offset: 0,
    words: 0,
};

impl Entry {
    #[inline]
    fn used(&self) -> bool {
        self.words != 0
    }

    #[inline]
    fn slot(&self) -> Slot {
        if self.page == CLEARED {
            Slot::ClearedEarly
        } else {
            Slot::Stored(Location {
                page: self.page,
                offset: self.offset,
                words: self.words,
            })
        }
    }

    #[inline]
    fn new(l1id: u32, slot: Slot) -> Entry {
        match slot {
            // A stored fragment has at least a ROB header: words is never 0.
            Slot::Stored(l) => Entry {
                l1id,
                page: l.page,
                offset: l.offset,
                words: l.words.max(1),
            },
            Slot::ClearedEarly => Entry {
                l1id,
                page: CLEARED,
                offset: 0,
                words: 1,
            },
        }
    }
}

/// The index. See the module docs.
#[derive(Debug)]
pub(crate) struct L1idIndex {
    entries: Box<[Entry]>,
    mask: usize,
    len: usize,
    /// Entries allowed before the table counts as full (load factor 7/8).
    limit: usize,
    /// Slots each ECR moves the home of L1ID 0 by (odd, about 0.618 of the table).
    ecr_stride: usize,
}

impl L1idIndex {
    /// A table with room for at least `capacity` entries.
    pub(crate) fn new(capacity: usize) -> L1idIndex {
        let want = capacity.max(4).saturating_mul(8) / 7 + 1;
        let size = want.next_power_of_two();
        L1idIndex {
            entries: vec![EMPTY; size].into_boxed_slice(),
            mask: size - 1,
            len: 0,
            limit: size / 8 * 7,
            ecr_stride: Self::ecr_stride(size),
        }
    }

    /// The home offset between successive ECR periods in a table of `size` slots: the golden
    /// ratio of it, odd, so that periods start as far apart as a sequence of them can (each
    /// new one splits the largest gap left).
    fn ecr_stride(size: usize) -> usize {
        ((size as u64 * 0x9E37_79B9) >> 32) as usize | 1
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The stored fragments (early-clear markers left out) whose L1ID `pick` takes: a walk
    /// of the whole table, for the end of a run.
    pub(crate) fn count_stored(&self, mut pick: impl FnMut(u32) -> bool) -> usize {
        self.entries
            .iter()
            .filter(|e| e.used() && e.page != CLEARED && pick(e.l1id))
            .count()
    }

    /// The entries it holds at most.
    pub(crate) fn capacity(&self) -> usize {
        self.limit
    }

    /// True when no further insert fits.
    pub(crate) fn is_full(&self) -> bool {
        self.len >= self.limit
    }

    #[inline]
    fn home(&self, l1id: u32) -> usize {
        let ecr = (l1id >> 24) as usize;
        ((l1id & 0x00FF_FFFF) as usize).wrapping_add(ecr.wrapping_mul(self.ecr_stride)) & self.mask
    }

    /// Probe distance of an entry for `l1id` sitting at slot `i`.
    #[inline]
    fn dist(&self, i: usize, l1id: u32) -> usize {
        i.wrapping_sub(self.home(l1id)) & self.mask
    }

    #[inline]
    fn find(&self, l1id: u32) -> Option<usize> {
        let mut i = self.home(l1id);
        let mut d = 0;
        loop {
            let e = &self.entries[i];
            if !e.used() {
                return None;
            }
            if e.l1id == l1id {
                return Some(i);
            }
            // Robin Hood order: a richer entry here means the key is absent.
            if self.dist(i, e.l1id) < d {
                return None;
            }
            i = (i + 1) & self.mask;
            d += 1;
        }
    }

    /// The slot of `l1id`, if present.
    #[inline]
    pub(crate) fn get(&self, l1id: u32) -> Option<Slot> {
        self.find(l1id).map(|i| self.entries[i].slot())
    }

    /// Inserts `l1id`; returns the slot already there instead if the key is present, or
    /// `Err(())` when the table is full.
    #[cfg(test)]
    pub(crate) fn insert(&mut self, l1id: u32, slot: Slot) -> Result<Option<Slot>, ()> {
        if let Some(i) = self.find(l1id) {
            return Ok(Some(self.entries[i].slot()));
        }
        self.insert_absent(l1id, slot).map(|()| None)
    }

    /// The slot where `l1id` would go directly: its home, when that is empty and the table is
    /// not full. An empty home means the key is absent (Robin Hood order keeps every key's
    /// cluster contiguous from its home). `None`: ask [`L1idIndex::get`] and
    /// [`L1idIndex::insert_absent`] instead.
    #[inline]
    pub(crate) fn vacant_home(&self, l1id: u32) -> Option<usize> {
        let i = self.home(l1id);
        (self.len < self.limit && !self.entries[i].used()).then_some(i)
    }

    /// Fills the slot `i` that [`L1idIndex::vacant_home`] returned for `l1id` (nothing changed
    /// the table since) with a stored fragment.
    #[inline]
    pub(crate) fn fill_home(&mut self, i: usize, l1id: u32, loc: Location) {
        debug_assert!(!self.entries[i].used() && self.home(l1id) == i);
        self.entries[i] = Entry {
            l1id,
            page: loc.page,
            offset: loc.offset,
            words: loc.words.max(1),
        };
        self.len += 1;
    }

    /// Inserts `l1id`, which the caller knows is absent; `Err(())` when the table is full.
    #[inline]
    pub(crate) fn insert_absent(&mut self, l1id: u32, slot: Slot) -> Result<(), ()> {
        if self.len >= self.limit {
            return Err(());
        }
        let mut cur = Entry::new(l1id, slot);
        let mut i = self.home(l1id);
        let mut d = 0;
        loop {
            if !self.entries[i].used() {
                self.entries[i] = cur;
                self.len += 1;
                return Ok(());
            }
            let ed = self.dist(i, self.entries[i].l1id);
            if ed < d {
                // Take the richer entry's place; carry it on.
                std::mem::swap(&mut cur, &mut self.entries[i]);
                d = ed;
            }
            i = (i + 1) & self.mask;
            d += 1;
        }
    }

    /// Removes `l1id` in the common case of a clear: a stored fragment at its home slot whose
    /// removal shifts nothing (the next slot is empty or holds an entry at its own home).
    /// `None`: nothing changed; ask [`L1idIndex::remove`], which handles every case.
    #[inline]
    pub(crate) fn take_home(&mut self, l1id: u32) -> Option<Location> {
        let i = self.home(l1id);
        let e = self.entries[i];
        if !e.used() || e.l1id != l1id || e.page == CLEARED {
            return None;
        }
        let next = (i + 1) & self.mask;
        let n = self.entries[next];
        if n.used() && self.dist(next, n.l1id) != 0 {
            return None;
        }
        self.entries[i] = EMPTY;
        self.len -= 1;
        Some(Location {
            page: e.page,
            offset: e.offset,
            words: e.words,
        })
    }

    /// Removes `l1id`; returns what it held.
    #[inline]
    pub(crate) fn remove(&mut self, l1id: u32) -> Option<Slot> {
        let mut hole = self.find(l1id)?;
        let removed = self.entries[hole].slot();
        self.len -= 1;
        // Backward shift: pull the following entries back one slot until an empty slot or an
        // entry already at its home (Robin Hood order makes that the end of the cluster).
        loop {
            let next = (hole + 1) & self.mask;
            let e = self.entries[next];
            if !e.used() || self.dist(next, e.l1id) == 0 {
                self.entries[hole] = EMPTY;
                return Some(removed);
            }
            self.entries[hole] = e;
            hole = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(p: u32) -> Slot {
        Slot::Stored(Location {
            page: p,
            offset: 0,
            words: 1,
        })
    }

    #[test]
    fn insert_get_remove_across_ecr_and_wrap() {
        let mut ix = L1idIndex::new(16);
        // Same low bits, different ECR: two keys.
        assert_eq!(ix.insert(5, loc(1)), Ok(None));
        assert_eq!(ix.insert((1 << 24) | 5, loc(2)), Ok(None));
        assert_eq!(ix.get(5), Some(loc(1)));
        assert_eq!(ix.get((1 << 24) | 5), Some(loc(2)));
        assert_eq!(
            ix.insert(5, loc(9)),
            Ok(Some(loc(1))),
            "duplicate reports the old"
        );
        assert_eq!(ix.remove(5), Some(loc(1)));
        assert_eq!(ix.get(5), None);
        assert_eq!(ix.get((1 << 24) | 5), Some(loc(2)));
        assert_eq!(ix.len(), 1);
    }

    /// The largest probe distance of any entry (0: every entry at its home).
    fn max_probe(ix: &L1idIndex) -> usize {
        (0..ix.entries.len())
            .filter(|&i| ix.entries[i].used())
            .map(|i| ix.dist(i, ix.entries[i].l1id))
            .max()
            .unwrap_or(0)
    }

    /// ECRs more often than the table is long (a wrap of 64 L1IDs, a 1,024-slot table): each
    /// period starts elsewhere, so the periods in flight do not pile onto the same slots.
    /// With the home from the low bits alone, the eighth period's L1IDs probed 448 slots.
    #[test]
    fn short_ecr_periods_keep_their_entries_at_home() {
        let mut ix = L1idIndex::new(800);
        assert_eq!(ix.entries.len(), 1024);
        let wrap = 64u32;
        let key = |n: u32| ((n / wrap) << 24) | (n % wrap);
        // Eight periods in flight, then the oldest cleared as the next arrive.
        for n in 0..8 * wrap {
            assert_eq!(ix.insert(key(n), loc(n)), Ok(None));
        }
        assert_eq!(max_probe(&ix), 0, "every entry at its home");
        for n in 8 * wrap..300 * wrap {
            assert_eq!(ix.remove(key(n - 8 * wrap)), Some(loc(n - 8 * wrap)));
            assert_eq!(ix.insert(key(n), loc(n)), Ok(None));
        }
        assert!(max_probe(&ix) <= 8, "{}", max_probe(&ix));
        assert_eq!(ix.len(), 8 * wrap as usize);
        assert_eq!(ix.get(key(300 * wrap - 1)), Some(loc(300 * wrap - 1)));
    }

    #[test]
    fn matches_a_model_under_random_operations() {
        let mut ix = L1idIndex::new(64);
        let mut model = std::collections::HashMap::new();
        let mut x = 12345u64;
        for _ in 0..20000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Keys collide on their low bits often: few low values, several ECRs.
            let key = ((x >> 8) as u32 & 0x3F) | (((x >> 20) as u32 & 3) << 24);
            if x & 1 == 0 {
                match ix.insert(key, loc(key)) {
                    Ok(prev) => {
                        assert_eq!(prev.is_some(), model.contains_key(&key));
                        model.entry(key).or_insert(key);
                    }
                    Err(()) => assert!(model.len() >= ix.limit),
                }
            } else {
                assert_eq!(ix.remove(key).is_some(), model.remove(&key).is_some());
            }
            assert_eq!(ix.len(), model.len());
        }
        for (&k, &v) in &model {
            assert_eq!(ix.get(k), Some(loc(v)));
        }
    }

    /// The key of ECR `ecr` whose home is `l1id`'s.
    fn same_home(ix: &L1idIndex, l1id: u32, ecr: u32) -> u32 {
        let low = (ix.home(l1id).wrapping_sub(ecr as usize * ix.ecr_stride) & ix.mask) as u32;
        let key = (ecr << 24) | low;
        assert_eq!(ix.home(key), ix.home(l1id));
        key
    }

    #[test]
    fn the_home_fast_path_agrees_with_the_general_insert() {
        let mut ix = L1idIndex::new(16);
        // Consecutive L1IDs: each goes home.
        for l1id in 0..10 {
            let i = ix.vacant_home(l1id).expect("home is free");
            ix.fill_home(
                i,
                l1id,
                Location {
                    page: l1id,
                    offset: 0,
                    words: 4,
                },
            );
        }
        assert_eq!(ix.len(), 10);
        // A stored key and a key whose home is taken by another (a later ECR's L1ID with the
        // same home) are not vacant at home.
        assert_eq!(ix.vacant_home(3), None);
        let other = same_home(&ix, 3, 1);
        assert_eq!(ix.vacant_home(other), None);
        assert_eq!(ix.insert(other, loc(99)), Ok(None));
        // Removing 3 shifts `other` home: its home is still not vacant, and both lookups hold.
        assert!(ix.remove(3).is_some());
        assert_eq!(ix.get(other), Some(loc(99)));
        assert_eq!(ix.vacant_home(3), None);
        for l1id in (0..10).filter(|&l| l != 3) {
            assert!(matches!(ix.get(l1id), Some(Slot::Stored(l)) if l.page == l1id));
        }
        // The clear fast path takes only what needs no shift; the general remove does the rest.
        assert!(ix.take_home(9).is_some(), "9 is at home, slot 10 is empty");
        assert_eq!(ix.get(9), None);
        assert_eq!(ix.take_home(9), None, "already gone");
        let third = same_home(&ix, 4, 2);
        assert_eq!(ix.insert(third, loc(7)), Ok(None)); // displaced past 4, which is at home
        assert_eq!(
            ix.take_home(4),
            None,
            "removing 4 must shift the displaced entry back"
        );
        assert!(ix.remove(4).is_some());
        assert_eq!(ix.get(third), Some(loc(7)));
        // A full table offers no home.
        let mut small = L1idIndex::new(4);
        let mut n = 0;
        while let Some(i) = small.vacant_home(n) {
            small.fill_home(
                i,
                n,
                Location {
                    page: 0,
                    offset: 0,
                    words: 1,
                },
            );
            n += 1;
        }
        assert!(small.is_full());
    }

    /// Counting walks stored fragments only: early-clear markers are not fragments.
    #[test]
    fn count_stored_leaves_markers_out() {
        let mut ix = L1idIndex::new(64);
        for l1id in 0..10 {
            ix.insert(l1id, loc(l1id)).unwrap();
        }
        ix.insert(20, Slot::ClearedEarly).unwrap();
        assert_eq!(ix.len(), 11);
        assert_eq!(ix.count_stored(|_| true), 10);
        assert_eq!(ix.count_stored(|l1id| l1id >= 5), 5);
    }

    #[test]
    fn full_table_refuses() {
        let mut ix = L1idIndex::new(4);
        let mut n = 0;
        while ix.insert(n, loc(n)).is_ok() {
            n += 1;
            assert!(n < 100);
        }
        assert!(ix.is_full());
        assert!(ix.remove(0).is_some());
        assert_eq!(ix.insert(1000, loc(0)), Ok(None));
    }
}
