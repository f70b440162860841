//! The events the run's clears have named, for fragments that come after their clear.
//!
//! A channel's early-clear markers (`Slot::ClearedEarly`) reach only an index's worth of L1IDs
//! ahead of the channel's newest fragment: a marker further ahead could only come from a
//! hostile or mistaken clear, and would be kept forever. But an input may lag the run by far
//! more than that: a readout node stopped for two seconds (SIGSTOP, a machine swapping) takes
//! the clears of 40,000 events at 20 kHz when it resumes, while its input resumes where it
//! stopped. Without a marker those events' fragments were stored when they came, no clear
//! ever named them again, the store filled, and every later request waited for its timeout:
//! the partition's L1 rate fell from 200 kHz to 200 Hz for the rest of the run (a QA pass,
//! 2026-12-08).
//!
//! [`ClearedEvents`] follows the clears themselves, independent of any input: every event in
//! `[start, through)` has been cleared, and a window of [`WINDOW`] bits beyond `through` holds
//! the events cleared out of order (an event decided late keeps `through` behind it while the
//! events after it are cleared). A fragment of an event it names is dropped when it comes
//! (`dropped_after_clear`), as for an early clear's marker. It claims nothing it has not seen:
//! an event before the first clear's, or beyond the window, is not known as cleared.
//!
//! A clear beyond the window moves it on only when the window is at least half marked (the
//! run's clears have moved on past an event whose clear never came: a clear lost on the way,
//! or an event in flight longer than the window) and only by up to a window at a time; the
//! events passed over unmarked are counted (`passed_uncleared`). A lone clear far ahead (a
//! flipped bit, a mistaken peer) finds the window nearly empty and is only counted
//! (`beyond_window`): it does not make the store drop the run's fragments. A peer allowed to
//! send clears (the supervisor's socket; CURVE keeps others out of a partition) releases what
//! it names anyway, and by naming half a window of events ahead it moves the window past
//! events it did not name (counted in `passed_uncleared`, their fragments then dropped as
//! they come): the record widens what such a peer can do by up to a window, no further.
//!
//! The window is at most a quarter of the extended L1IDs' cycle (256 times the L1ID wrap), so
//! that an L1ID names one event around the watermark: with a small `l1.l1id_wrap` (32: 2,048
//! events) an input that lags the run by more than that cannot be told apart from one ahead
//! of it, here as in the store's index, and the record helps only within that distance.
//!
//! Events are numbered from the extended L1IDs with the run's L1ID wrap (`rodeo_format::l1id`);
//! within one ECR the number is a subtraction, across one `event_near`.

use rodeo_format::l1id::{event_near, next_extended_l1id};

/// Events the window holds beyond `through`: about five seconds of a run at 200 kHz
/// (128 KiB of bits).
pub(super) const WINDOW: u64 = 1 << 20;

const LOW: u32 = 0x00FF_FFFF;

/// The events the clears have named (module docs).
#[derive(Debug)]
pub(super) struct ClearedEvents {
    wrap: u32,
    /// The event the first clear is numbered near (the node's first event).
    hint: u64,
    /// The first event known: every event from here to `through` was cleared. `None` until
    /// the first clear.
    start: Option<u64>,
    through: u64,
    /// The extended L1ID of event `through`.
    through_l1id: u32,
    /// Events the window holds: [`WINDOW`], or a quarter of the extended L1IDs' cycle (256
    /// times the wrap, rounded down to a power of two) when that is less, so that an L1ID
    /// names one event in and around it.
    window: u64,
    /// Event `e` in `through..through + window` is cleared when bit `e % window` is set.
    bits: Box<[u64]>,
    /// Bits set.
    marked: u64,
    /// Events the window passed over without their clear (counted, module docs).
    passed_uncleared: u64,
    /// Clears too far beyond the window to be marked.
    beyond_window: u64,
}

impl ClearedEvents {
    /// For a run whose L1IDs wrap at `wrap` and whose clears begin near event `first_event`.
    pub(super) fn new(wrap: u32, first_event: u64) -> ClearedEvents {
        let cycle = 256 * u64::from(wrap.clamp(1, rodeo_format::l1id::DEFAULT_L1ID_WRAP));
        // A power of two (an event's bit by a mask, no division on the ingest path).
        let quarter = (cycle / 4).max(64);
        let window = WINDOW.min(1 << (63 - quarter.leading_zeros()));
        ClearedEvents {
            window,
            wrap,
            hint: first_event,
            start: None,
            through: 0,
            through_l1id: 0,
            bits: vec![0; window.div_ceil(64) as usize].into_boxed_slice(),
            marked: 0,
            passed_uncleared: 0,
            beyond_window: 0,
        }
    }

    /// The event number of `l1id`, near `through` (near the hint before the first clear);
    /// `None` for an L1ID the wrap does not have.
    #[inline(always)]
    fn event_of(&self, l1id: u32) -> Option<u64> {
        if self.start.is_none() {
            return event_near(self.wrap, l1id, self.hint);
        }
        if l1id >> 24 == self.through_l1id >> 24 && l1id & LOW < self.wrap {
            let d = i64::from(l1id & LOW) - i64::from(self.through_l1id & LOW);
            return Some(self.through.saturating_add_signed(d));
        }
        event_near(self.wrap, l1id, self.through)
    }

    #[inline(always)]
    fn bit(&self, e: u64) -> bool {
        let i = (e & (self.window - 1)) as usize;
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    /// Notes that the L1IDs of one clear were cleared: the first clear starts the record at
    /// its oldest event (an event older than that, decided later, is not recorded: its
    /// fragments, if they come after their clear, are stored as before).
    pub(super) fn mark_all(&mut self, l1ids: &[u32]) {
        if self.start.is_none() {
            let oldest = l1ids
                .iter()
                .filter_map(|&l1id| Some((event_near(self.wrap, l1id, self.hint)?, l1id)))
                .min();
            let Some((e, l1id)) = oldest else {
                return;
            };
            // The first clear must be near where the node's inputs begin: a first clear far
            // from it (a hostile peer before the run's own) would leave the run's clears all
            // behind the record.
            if e.abs_diff(self.hint) >= self.window {
                self.beyond_window += l1ids.len() as u64;
                return;
            }
            self.start = Some(e);
            self.through = e;
            self.through_l1id = l1id;
        }
        for &l1id in l1ids {
            self.mark(l1id);
        }
    }

    /// Notes that `l1id` was cleared (the record started).
    fn mark(&mut self, l1id: u32) {
        let Some(e) = self.event_of(l1id) else {
            return;
        };
        if e < self.through {
            return;
        }
        if e >= self.through + self.window {
            if e >= self.through + 2 * self.window || self.marked < self.window / 2 {
                self.beyond_window += 1;
                return;
            }
            let to = e - self.window + 1;
            while self.through < to {
                if !self.take_through() {
                    self.passed_uncleared += 1;
                }
            }
        }
        let i = (e & (self.window - 1)) as usize;
        let (word, mask) = (i / 64, 1u64 << (i % 64));
        if self.bits[word] & mask == 0 {
            self.bits[word] |= mask;
            self.marked += 1;
        }
        while self.marked > 0 && self.bit(self.through) {
            self.take_through();
        }
    }

    /// Moves `through` on by one event, taking its bit; whether it was set.
    fn take_through(&mut self) -> bool {
        let i = (self.through & (self.window - 1)) as usize;
        let (word, mask) = (i / 64, 1u64 << (i % 64));
        let was = self.bits[word] & mask != 0;
        if was {
            self.bits[word] &= !mask;
            self.marked -= 1;
        }
        self.through += 1;
        self.through_l1id = next_extended_l1id(self.through_l1id, self.wrap);
        was
    }

    /// Whether a clear has named `l1id` (module docs: only what it has seen).
    #[inline(always)]
    pub(super) fn is_cleared(&self, l1id: u32) -> bool {
        let Some(start) = self.start else {
            return false;
        };
        let Some(e) = self.event_of(l1id) else {
            return false;
        };
        if e < self.through {
            return e >= start;
        }
        e < self.through + self.window && self.bit(e)
    }

    /// Events the window passed over without their clear.
    pub(super) fn passed_uncleared(&self) -> u64 {
        self.passed_uncleared
    }

    /// Clears too far beyond the window to be marked.
    pub(super) fn beyond_window(&self) -> u64 {
        self.beyond_window
    }
}

#[cfg(test)]
mod tests {
    use rodeo_format::l1id::L1idCounter;

    use super::*;

    const WRAP: u32 = 1 << 24;

    /// Clears in order and out of order: every event named is known as cleared, nothing else.
    #[test]
    fn the_events_cleared_are_known_and_no_others() {
        let mut c = ClearedEvents::new(WRAP, 0);
        assert!(!c.is_cleared(5));
        c.mark_all(&[1, 0, 3]);
        assert!(c.is_cleared(0) && c.is_cleared(1) && c.is_cleared(3));
        assert!(!c.is_cleared(2) && !c.is_cleared(4));
        assert_eq!(c.through, 2);
        c.mark_all(&[2]);
        assert_eq!(c.through, 4);
        assert_eq!(c.marked, 0);
    }

    /// A resumed input's events, cleared 40,000 at a time while it lagged, are all known.
    #[test]
    fn an_input_far_behind_the_clears_finds_its_events_cleared() {
        let mut c = ClearedEvents::new(WRAP, 0);
        c.mark_all(&(0..40_000).collect::<Vec<u32>>());
        assert!((0..40_000).all(|l1id| c.is_cleared(l1id)));
        assert!(!c.is_cleared(40_000));
    }

    /// Across the L1ID wrap (an ECR), events number on.
    #[test]
    fn clears_across_the_wrap_count_on() {
        let wrap = 1000;
        let mut c = ClearedEvents::new(wrap, 990);
        let l1ids: Vec<u32> = (990..1010)
            .map(|e| L1idCounter::expected(wrap, e))
            .collect();
        c.mark_all(&l1ids);
        assert_eq!(c.through, 1010);
        assert!(c.is_cleared(L1idCounter::expected(wrap, 995)));
        assert!(c.is_cleared(L1idCounter::expected(wrap, 1005)));
        assert!(!c.is_cleared(L1idCounter::expected(wrap, 1010)));
        assert!(
            !c.is_cleared(L1idCounter::expected(wrap, 980)),
            "before the first clear"
        );
    }

    /// With a small L1ID wrap the window is a quarter of the extended L1IDs' cycle, and the
    /// record still follows the clears across the wraps.
    #[test]
    fn a_small_wrap_narrows_the_window() {
        let wrap = 32;
        let mut c = ClearedEvents::new(wrap, 0);
        assert_eq!(c.window, 256 * 32 / 4);
        let l1ids: Vec<u32> = (0..5000).map(|e| L1idCounter::expected(wrap, e)).collect();
        c.mark_all(&l1ids);
        assert_eq!(c.through, 5000);
        assert!(c.is_cleared(L1idCounter::expected(wrap, 4990)));
        assert!(!c.is_cleared(L1idCounter::expected(wrap, 5001)));
    }

    /// A first clear far from where the inputs begin starts nothing: the run's own clears
    /// then start the record.
    #[test]
    fn a_first_clear_far_from_the_inputs_start_is_not_taken() {
        let mut c = ClearedEvents::new(WRAP, 0);
        c.mark_all(&[0x00F0_0000]);
        assert_eq!(c.beyond_window(), 1);
        c.mark_all(&[0]);
        assert!(c.is_cleared(0) && !c.is_cleared(0x00F0_0000));
    }

    /// A lone clear far ahead is counted and changes nothing; clears that move on past an
    /// event whose clear never came move the window on, counting what they passed.
    #[test]
    fn only_the_run_s_clears_move_the_window_past_a_missing_clear() {
        let mut c = ClearedEvents::new(WRAP, 0);
        c.mark_all(&[0]);
        c.mark_all(&[0x00FF_0000]);
        assert_eq!(c.beyond_window(), 1);
        assert!(!c.is_cleared(0x00FF_0000) && !c.is_cleared(1));
        // Event 1's clear is lost; the run's clears go on past the window's end.
        let end = 2 + WINDOW as u32 + 10;
        c.mark_all(&(2..end).collect::<Vec<u32>>());
        assert_eq!(c.passed_uncleared(), 1);
        assert_eq!(c.through, u64::from(end));
        assert!(c.is_cleared(1), "passed over: taken as cleared");
        assert!(c.is_cleared(end - 1) && !c.is_cleared(end));
    }
}
