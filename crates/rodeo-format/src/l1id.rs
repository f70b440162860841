//! The extended L1ID and its wrap rule, shared by everything that counts events.
//!
//! The extended L1ID carries the 8-bit ECR counter in bits 31..24 and the L1ID in bits 23..0.
//! A channel's L1ID counts from 0 and wraps at a configured value (2^24 by default), when the
//! ECR counter increments (and itself wraps at 256). The emulated cards, the S-LINK checks and
//! the L1 source all follow this one rule, so they agree on every event's L1ID.

/// Default L1ID wrap value: the 24-bit L1ID of the extended L1ID.
pub const DEFAULT_L1ID_WRAP: u32 = 1 << 24;

/// The L1ID sequence of one channel: the L1ID counts from 0 and wraps at `wrap`, when the 8-bit
/// ECR counter (bits 31..24 of the extended L1ID) increments (and itself wraps at 256).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L1idCounter {
    wrap: u32,
    l1id: u32,
    ecr: u8,
    events: u64,
}

impl L1idCounter {
    /// A counter at L1ID 0, ECR 0, wrapping at `wrap` (clamped to `1..=2^24`).
    pub fn new(wrap: u32) -> L1idCounter {
        L1idCounter {
            wrap: wrap.clamp(1, DEFAULT_L1ID_WRAP),
            l1id: 0,
            ecr: 0,
            events: 0,
        }
    }

    /// The current extended L1ID: ECR in bits 31..24, L1ID in bits 23..0.
    pub fn extended(&self) -> u32 {
        (u32::from(self.ecr) << 24) | self.l1id
    }

    /// Events counted so far (64-bit, never wraps in practice).
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Moves to the next event.
    pub fn advance(&mut self) {
        self.events += 1;
        self.l1id += 1;
        if self.l1id >= self.wrap {
            self.l1id = 0;
            self.ecr = self.ecr.wrapping_add(1);
        }
    }

    /// Moves on by `n` events at once (as `n` calls of [`L1idCounter::advance`]).
    pub fn skip(&mut self, n: u64) {
        let events = self.events.saturating_add(n);
        let wrap = u64::from(self.wrap);
        let ecr = (events / wrap) as u8;
        self.l1id = (events % wrap) as u32;
        self.ecr = ecr;
        self.events = events;
    }

    /// The extended L1ID of event number `n` (from 0) of a channel wrapping at `wrap`: what a
    /// reader expects.
    pub fn expected(wrap: u32, n: u64) -> u32 {
        let wrap = u64::from(wrap.clamp(1, DEFAULT_L1ID_WRAP));
        (((n / wrap) as u8 as u32) << 24) | (n % wrap) as u32
    }
}

/// The event number (from 0) whose extended L1ID is `extended` on a channel wrapping at
/// `wrap`, of those the extended L1ID repeats every `256 x wrap` events the one nearest
/// `near`; `None` for an L1ID at or above the wrap, which no event has.
pub fn event_near(wrap: u32, extended: u32, near: u64) -> Option<u64> {
    let wrap = u64::from(wrap.clamp(1, DEFAULT_L1ID_WRAP));
    let low = u64::from(extended & 0x00FF_FFFF);
    if low >= wrap {
        return None;
    }
    let cycle = 256 * wrap;
    let base = u64::from(extended >> 24) * wrap + low;
    let ahead = (base + cycle - near % cycle) % cycle;
    Some(if ahead <= cycle / 2 {
        near + ahead
    } else {
        near.saturating_sub(cycle - ahead)
    })
}

/// The extended L1ID that follows `extended` on a channel wrapping at `wrap`.
pub fn next_extended_l1id(extended: u32, wrap: u32) -> u32 {
    let wrap = wrap.clamp(1, DEFAULT_L1ID_WRAP);
    let l1id = (extended & 0x00FF_FFFF) + 1;
    let ecr = extended >> 24;
    if l1id >= wrap {
        (ecr.wrapping_add(1) & 0xFF) << 24
    } else {
        (ecr << 24) | l1id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `event_near` inverts `expected` near any event, in every wrap, across ECR cycles.
    #[test]
    fn event_near_inverts_expected_near_the_event() {
        for wrap in [1, 3, 1000, DEFAULT_L1ID_WRAP] {
            let cycle = 256 * u64::from(wrap);
            for n in [0, 1, 999, 5_000, cycle - 1, cycle, 3 * cycle + 17] {
                let x = L1idCounter::expected(wrap, n);
                for near in [n, n.saturating_sub(100), n + 100] {
                    assert_eq!(event_near(wrap, x, near), Some(n), "wrap {wrap} n {n}");
                }
            }
        }
        assert_eq!(event_near(1000, 1000, 0), None);
    }

    #[test]
    fn skip_is_advance_repeated() {
        for wrap in [1, 3, 1000, DEFAULT_L1ID_WRAP] {
            let mut a = L1idCounter::new(wrap);
            let mut b = L1idCounter::new(wrap);
            for _ in 0..2500 {
                a.advance();
            }
            b.skip(1000);
            b.skip(1500);
            assert_eq!(a, b, "wrap {wrap}");
            assert_eq!(b.extended(), L1idCounter::expected(wrap, 2500));
        }
    }

    #[test]
    fn l1id_wraps_into_the_ecr() {
        let mut c = L1idCounter::new(3);
        let mut seen = Vec::new();
        for n in 0..7 {
            assert_eq!(c.extended(), L1idCounter::expected(3, n));
            seen.push(c.extended());
            c.advance();
        }
        assert_eq!(
            seen,
            [0, 1, 2, 1 << 24, (1 << 24) + 1, (1 << 24) + 2, 2 << 24]
        );
        assert_eq!(c.events(), 7);
    }

    #[test]
    fn next_l1id_wraps_into_ecr() {
        assert_eq!(next_extended_l1id(0, 10), 1);
        assert_eq!(next_extended_l1id(9, 10), 1 << 24);
        assert_eq!(next_extended_l1id(0xFF00_0009, 10), 0);
        assert_eq!(
            next_extended_l1id(0x00FF_FFFE, DEFAULT_L1ID_WRAP),
            0x00FF_FFFF
        );
        assert_eq!(next_extended_l1id(0x00FF_FFFF, DEFAULT_L1ID_WRAP), 1 << 24);
    }
}
