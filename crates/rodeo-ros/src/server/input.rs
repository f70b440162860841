//! What feeds the store inside the core thread: the [`Input`] trait the core thread polls.
//! The inputs themselves (DMA channels through the S-LINK checks, the inline firmware-style
//! generator, network and file channels, the SW ROD builders) are in [`crate::inputs`] and
//! [`crate::swrod`].
//!
//! # Back-pressure
//!
//! Every input stops at the first fragment the store refuses
//! ([`crate::store::IngestError::Full`]) and retries it on the next poll; an input fed by a
//! card then stops reading it, and the card stalls once its queues are full: XOFF to the link.

use rodeo_format::slink::SlinkCounters;

use crate::store::EventStore;

/// A source of fragments polled by the core thread.
pub trait Input: Send + 'static {
    /// Moves what is ready into `store`; returns the fragments consumed (stored or dropped).
    fn poll(&mut self, store: &mut EventStore) -> u64;
    /// Counters of the S-LINK checks (zero for inputs that do not check).
    fn slink_counters(&self) -> SlinkCounters {
        SlinkCounters::default()
    }
    /// Back-pressure events seen by the card (stalls), if the input knows them.
    fn stalls(&self) -> u64 {
        0
    }
    /// True once the input has nothing more to deliver and everything it delivered was read
    /// (every link down, nothing left in its queues); false for inputs that never end.
    fn finished(&self) -> bool {
        false
    }
    /// True once channel `c`'s link is down and everything it delivered was read (its newest
    /// L1ID is final); by default, when the whole input has [`Input::finished`].
    fn channel_ended(&self, c: usize) -> bool {
        let _ = c;
        self.finished()
    }
    /// The core thread is stopping (before its last answers): asks the input's producers to
    /// end once they have handed over what they hold; true when the input then ends by
    /// itself ([`Input::finished`]) and the core thread should read it until it has (bounded
    /// by [`END_LINKS_LIMIT`]). For data from outside, counted as received where it arrived (a
    /// network receiver's datagrams): stored, or counted where it is dropped, never left in a
    /// queue. False (the default): the input is not read any more.
    fn end_links(&mut self) -> bool {
        false
    }
    /// After [`Input::end_links`]' reading: the units the links still hold, counted by their
    /// card (superpages handed over and not read, and the unread rest of the one being read),
    /// which are then given up. Exact in units whatever the checks found (a damaged unit is not
    /// one fragment, so the fragments' count cannot tell). 0 by default.
    fn units_left(&mut self) -> u64 {
        0
    }
    /// The core thread is stopping (after its last poll): gives back to `store` what the input
    /// holds of it (store pages lent to it), so that the stopped store counts them free.
    fn release(&mut self, store: &mut EventStore) {
        let _ = store;
    }
}

/// How long the core thread reads an input whose links it ended at the stop
/// ([`Input::end_links`]) at most: a receiver hands over within a turn of its engine, and the
/// reader drains eight superpages a channel in milliseconds.
pub(crate) const END_LINKS_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the core thread goes on reading such an input that gives it nothing: a store that
/// refuses fragments (full, and nothing clears it any more at the stop) would otherwise hold
/// every node's stop for [`END_LINKS_LIMIT`], one node after the other (a QA pass: 9 nodes of
/// full stores stopped in 16 s). An engine's last hand-over comes within a turn (a receiver
/// waits on its socket at most `FLUSH_INTERVAL`, 5 ms).
pub(crate) const END_LINKS_IDLE: std::time::Duration = std::time::Duration::from_millis(100);

/// Fragments taken per channel per poll, so one busy channel cannot starve requests.
pub(crate) const POLL_BUDGET: usize = 256;
