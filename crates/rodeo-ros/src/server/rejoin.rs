//! A readout node restarted into a running run ("stopless recovery"): releasing the fragments
//! no clear will ever name.
//!
//! The node's inputs start at the event the controller chose (`NodeConfig::first_event`,
//! a little ahead of the L1). The events decided while the node was gone were cleared to
//! nobody: if its inputs made fragments of any of them, no clear would ever release those,
//! they would fill the store, the inputs would stop, and every later request would wait and
//! end PENDING (every later event partial). So a rejoined node takes each clear as news of
//! where the run is: every L1ID older than the clear's first L1ID by more than [`MARGIN`]
//! (events still in flight that far behind are rare) and not newer than what every channel
//! has received is released as if cleared, from the node's first L1ID on, once. A request
//! for a fragment released that way is answered FRAGMENT_LOST, as for any older absent
//! fragment. A node that was not restarted never does this: its clears name every event.
//!
//! The L1IDs are walked as consecutive extended L1IDs, which they are with the default wrap
//! (2^24, the ECR counting on above it). With another wrap the walk also names L1IDs that do
//! not exist; clearing those is counted as an unknown clear, harmless.

use crate::store::{l1id_newer, EventStore};

/// How far behind a clear's first L1ID the sweep stops.
pub const MARGIN: u32 = 2048;

/// Most L1IDs released in one sweep (the rest at the next clear).
const MAX_SWEEP: u32 = 1 << 16;

/// After a clear whose first L1ID is `first`: releases the L1IDs from `*from` up to
/// `first - MARGIN` and up to the oldest channel's last L1ID (module docs), and moves `*from`
/// on. Nothing without `*from` (a node that was not restarted).
pub(super) fn sweep_stale(store: &mut EventStore, from: &mut Option<u32>, first: u32) -> u64 {
    let Some(start) = *from else {
        return 0;
    };
    let mut upto = first.wrapping_sub(MARGIN);
    for c in 0..store.channels() {
        match store.last_l1id(c) {
            // A channel that has received nothing yet: no fragment to release, and clearing
            // ahead of it would only leave markers.
            None => return 0,
            Some(last) => {
                let end = last.wrapping_add(1);
                if l1id_newer(upto, end) {
                    upto = end;
                }
            }
        }
    }
    if !l1id_newer(upto, start) {
        return 0;
    }
    let n = upto.wrapping_sub(start).min(MAX_SWEEP);
    let released = store.clear((0..n).map(|k| start.wrapping_add(k)));
    *from = Some(start.wrapping_add(n));
    released
}
