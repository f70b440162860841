//! Status words: bits 15..0 generic, bits 31..16 specific to the fragment kind.
//!
//! [`Status`] is a small bit-set newtype over the word. The constants are whole-word values:
//! generic bits as they are, ROB-specific (`ROB_*`) and full-event-specific (`EVENT_*`) bits
//! already shifted into bits 31..16. A specific bit means different things in a ROB and in a full
//! event, so test `ROB_*` bits only on ROB status words and `EVENT_*` bits only on events.

use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign};

/// A status word.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Status(pub u32);

const fn specific(bit: u32) -> Status {
    Status(bit << 16)
}

impl Status {
    /// No bit set: all is well.
    pub const OK: Status = Status(0);

    /// Generic: BCID check failed.
    pub const BCID_CHECK_FAIL: Status = Status(0x1);
    /// Generic: L1ID check failed.
    pub const L1ID_CHECK_FAIL: Status = Status(0x2);
    /// Generic: timeout.
    pub const TIMEOUT: Status = Status(0x4);
    /// Generic: data corruption.
    pub const DATA_CORRUPTION: Status = Status(0x8);
    /// Generic: internal overflow.
    pub const INTERNAL_OVERFLOW: Status = Status(0x10);
    /// Generic: dummy fragment.
    pub const DUMMY_FRAGMENT: Status = Status(0x20);

    /// ROB: trigger-type sync error.
    pub const ROB_TRIGGER_TYPE_SYNC: Status = specific(0x1);
    /// ROB: fragment size error.
    pub const ROB_FRAGMENT_SIZE: Status = specific(0x2);
    /// ROB: data-block error.
    pub const ROB_DATA_BLOCK: Status = specific(0x4);
    /// ROB: control-word error.
    pub const ROB_CONTROL_WORD: Status = specific(0x8);
    /// ROB: missing begin-of-fragment.
    pub const ROB_MISSING_BOF: Status = specific(0x10);
    /// ROB: missing end-of-fragment.
    pub const ROB_MISSING_EOF: Status = specific(0x20);
    /// ROB: invalid header marker.
    pub const ROB_INVALID_MARKER: Status = specific(0x40);
    /// ROB: format error.
    pub const ROB_FORMAT_ERROR: Status = specific(0x80);
    /// ROB: duplicate event.
    pub const ROB_DUPLICATE_EVENT: Status = specific(0x100);
    /// ROB: L1ID sequence error.
    pub const ROB_L1ID_SEQUENCE: Status = specific(0x200);
    /// ROB: transmission (CRC) error.
    pub const ROB_TRANSMISSION: Status = specific(0x400);
    /// ROB: truncation.
    pub const ROB_TRUNCATION: Status = specific(0x800);
    /// ROB: short fragment.
    pub const ROB_SHORT_FRAGMENT: Status = specific(0x1000);
    /// ROB: FRAGMENT_LOST, the data will never come.
    pub const ROB_FRAGMENT_LOST: Status = specific(0x2000);
    /// ROB: FRAGMENT_PENDING, not yet arrived, may still come.
    pub const ROB_FRAGMENT_PENDING: Status = specific(0x4000);
    /// ROB: discard mode.
    pub const ROB_DISCARD_MODE: Status = specific(0x8000);

    /// Full event: processing timeout.
    pub const EVENT_PROCESSING_TIMEOUT: Status = specific(0x100);
    /// Full event: recovered event.
    pub const EVENT_RECOVERED: Status = specific(0x800);
    /// Full event: FORCED_ACCEPT, accepted without a decision after a timeout or failed node.
    pub const EVENT_FORCED_ACCEPT: Status = specific(0x2000);
    /// Full event: PARTIAL_EVENT, some fragments missing.
    pub const EVENT_PARTIAL: Status = specific(0x8000);

    /// The status word.
    pub const fn word(self) -> u32 {
        self.0
    }

    /// The generic half (bits 15..0).
    pub const fn generic(self) -> u16 {
        self.0 as u16
    }

    /// The specific half (bits 31..16), unshifted.
    pub const fn specific(self) -> u16 {
        (self.0 >> 16) as u16
    }

    /// True if no bit is set.
    pub const fn is_ok(self) -> bool {
        self.0 == 0
    }

    /// True if every bit of `other` is set in `self`.
    pub const fn contains(self, other: Status) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if any bit of `other` is set in `self`.
    pub const fn intersects(self, other: Status) -> bool {
        self.0 & other.0 != 0
    }

    /// Sets the bits of `other`.
    pub fn insert(&mut self, other: Status) {
        self.0 |= other.0;
    }

    /// Clears the bits of `other`.
    pub fn remove(&mut self, other: Status) {
        self.0 &= !other.0;
    }
}

impl BitOr for Status {
    type Output = Status;
    fn bitor(self, rhs: Status) -> Status {
        Status(self.0 | rhs.0)
    }
}

impl BitOrAssign for Status {
    fn bitor_assign(&mut self, rhs: Status) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for Status {
    type Output = Status;
    fn bitand(self, rhs: Status) -> Status {
        Status(self.0 & rhs.0)
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Status({:#010x})", self.0)
    }
}

impl From<u32> for Status {
    fn from(w: u32) -> Status {
        Status(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits() {
        let mut s = Status::TIMEOUT | Status::ROB_FRAGMENT_LOST;
        assert_eq!(s.word(), 0x2000_0004);
        assert!(s.contains(Status::TIMEOUT));
        assert!(!s.contains(Status::TIMEOUT | Status::DUMMY_FRAGMENT));
        assert_eq!(s.generic(), 0x4);
        assert_eq!(s.specific(), 0x2000);
        s.remove(Status::TIMEOUT);
        assert_eq!(s, Status::ROB_FRAGMENT_LOST);
        assert_eq!(Status::EVENT_PARTIAL.word(), 0x8000_0000);
        assert!(Status::OK.is_ok());
    }
}
