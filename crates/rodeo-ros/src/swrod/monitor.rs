//! Reading a SW ROD input's live counters: [`SwRodMonitor`], a cheap shared handle for
//! monitors, and the sums it and the running feed read.

use std::sync::{Arc, Mutex};

use rodeo_swrod::SwRodCounters;

use super::counters::{SwRodInputCounters, SwRodLinkCounters};
use super::sink::StoreSink;

/// A cheap shared handle on a SW ROD input's live counters ([`crate::node::ReadoutNode::swrod_monitor`]):
/// the builders' as last published by the `swrod` thread (every 20 ms) and the links' atomics.
/// Reading takes the publication lock for a copy (never on a hot path).
#[derive(Debug, Clone)]
pub struct SwRodMonitor {
    pub(super) live: Arc<Mutex<Vec<SwRodCounters>>>,
    pub(super) sinks: Vec<StoreSink>,
}

impl SwRodMonitor {
    /// The builders' and links' counters, summed over the ROBs (`unread_*` are zero: known
    /// only at the stop, in [`crate::server::Stopped::swrod`]).
    pub fn counters(&self) -> SwRodInputCounters {
        swrod_counters(&self.live, &self.sinks)
    }
}

/// The links' counters, summed over the ROBs' sinks.
pub(super) fn link_counters(sinks: &[StoreSink]) -> SwRodLinkCounters {
    let mut total = SwRodLinkCounters::default();
    for s in sinks {
        total.add(&s.counters());
    }
    total
}

/// The builders' counters as last published in `live` and the links' of `sinks`, summed over
/// the ROBs (nothing unread: known only at the stop).
pub(super) fn swrod_counters(
    live: &Mutex<Vec<SwRodCounters>>,
    sinks: &[StoreSink],
) -> SwRodInputCounters {
    let mut builder = SwRodCounters::default();
    for c in live.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        builder.add(c);
    }
    SwRodInputCounters {
        builder,
        link: link_counters(sinks),
        unread_blocks: 0,
        unread_bytes: 0,
        card_cpu_ns: builder.input_cpu_ns,
    }
}
