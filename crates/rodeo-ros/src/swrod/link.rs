//! Making a SW ROD link ([`swrod_link`]: a [`StoreSink`] for the builder and a [`SwRodInput`]
//! for the core thread, joined by a [`Link`]), and polling one link per store channel as one
//! [`Input`] ([`SwRodInputs`]).

use std::sync::Arc;

use rodeo_swrod::SwRodConfig;

use super::batch::{BATCH_FRAGMENTS, BATCH_WORDS};
use super::counters::SwRodLinkCounters;
use super::handover::Link;
use super::sink::StoreSink;
use super::window::SwRodInput;
use crate::server::input::Input;
use crate::store::EventStore;

/// Batches of a link: one being filled, one being stored, and the rest in between, enough to
/// carry a builder without waiting while the core thread is off its core for a scheduler time
/// slice or two (a ROB fills about a batch a millisecond at 30 kHz). With 3 the builders waited
/// for a free batch at 0.42-0.46 of the events and, beside a busy core, the ROSTester ran at
/// 0.45-0.57x the DMA-fed node's rate; with 12, 0.01-0.04 waits per event and 0.71-0.79x
/// (docs/benchmarks-history.md, 2026-12-02 fifth session). Their lent pages stay within a
/// quarter of the channel (`window.rs`, `LENT_SHARE`).
pub(super) const BATCHES: usize = 12;

/// Makes a link between a builder configured by `config` and store channel `channel`: a
/// reorder window twice the builder's window of L1IDs in flight, and batches (`extra` more
/// than the minimum of [`BATCHES`]), each starting with room for about [`BATCH_WORDS`] ROD
/// words or [`BATCH_FRAGMENTS`] fragments of `words` ROD words, whichever is less.
pub fn swrod_link(
    channel: usize,
    config: &SwRodConfig,
    extra: usize,
    words: usize,
) -> (StoreSink, SwRodInput) {
    let window = 2 * config.window.max(1).next_power_of_two();
    let batch_words = (BATCH_FRAGMENTS * words.max(1)).min(BATCH_WORDS + words);
    let link = Arc::new(Link::new(BATCHES + extra, batch_words));
    (
        StoreSink::new(Arc::clone(&link)),
        SwRodInput::new(link, channel, window, config),
    )
}

/// Several [`SwRodInput`]s (one per store channel) polled as one [`Input`].
#[derive(Debug)]
pub struct SwRodInputs {
    inputs: Vec<SwRodInput>,
}

impl SwRodInputs {
    /// Polls `inputs` in turn, each with its own budget.
    pub fn new(inputs: Vec<SwRodInput>) -> SwRodInputs {
        SwRodInputs { inputs }
    }

    /// The links' counters, summed.
    pub fn counters(&self) -> SwRodLinkCounters {
        let mut total = SwRodLinkCounters::default();
        for i in &self.inputs {
            total.add(&i.counters());
        }
        total
    }
}

impl Input for SwRodInputs {
    fn poll(&mut self, store: &mut EventStore) -> u64 {
        self.inputs.iter_mut().map(|i| i.poll(store)).sum()
    }

    /// The times a sink waited for a free batch (the store held the builder back).
    fn stalls(&self) -> u64 {
        self.counters().sink_waits
    }

    fn release(&mut self, store: &mut EventStore) {
        for i in &mut self.inputs {
            i.release(store);
        }
    }
}
