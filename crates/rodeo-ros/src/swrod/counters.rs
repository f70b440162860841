//! The counters of a SW ROD input: its links' ([`SwRodLinkCounters`]) and, with its builders'
//! and cards', the input's ([`SwRodInputCounters`]).

use rodeo_swrod::SwRodCounters;

/// Counters of a [`super::swrod_link`] (64-bit, monotonic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwRodLinkCounters {
    /// Fragments the sink handed to the core thread.
    pub fragments: u64,
    /// Of those, the fragments the sink wrote straight into a lent store page (the core
    /// thread indexed them where they lay); the rest it copied into the store.
    pub in_place: u64,
    /// Times the sink found no free batch and waited, or reported no room so that its
    /// builder stopped reading its cards (back-pressure from the store; once per episode).
    pub sink_waits: u64,
    /// Fragments dropped because the core thread's input was gone, or still queued or waiting
    /// in the reorder window when it went (shutdown only).
    pub dropped_no_consumer: u64,
    /// Fragments the store refused for good: no readable L1ID, or no such channel (a
    /// configuration error). Duplicates and fragments already cleared are the store's counts.
    pub rejected: u64,
    /// Fragments behind the L1ID the window waited for, stored as they came.
    pub out_of_order: u64,
    /// Second copies of an L1ID waiting in the window, dropped.
    pub duplicates: u64,
    /// L1IDs the window stopped waiting for (a fragment came a whole window later).
    pub skipped: u64,
}

impl SwRodLinkCounters {
    /// Adds every counter of `other`.
    pub fn add(&mut self, other: &SwRodLinkCounters) {
        self.fragments += other.fragments;
        self.in_place += other.in_place;
        self.sink_waits += other.sink_waits;
        self.dropped_no_consumer += other.dropped_no_consumer;
        self.rejected += other.rejected;
        self.out_of_order += other.out_of_order;
        self.duplicates += other.duplicates;
        self.skipped += other.skipped;
    }

    /// `(name, value)` pairs, for metrics and reports.
    pub fn fields(&self) -> [(&'static str, u64); 8] {
        [
            ("fragments", self.fragments),
            ("in_place", self.in_place),
            ("sink_waits", self.sink_waits),
            ("dropped_no_consumer", self.dropped_no_consumer),
            ("rejected", self.rejected),
            ("out_of_order", self.out_of_order),
            ("duplicates", self.duplicates),
            ("skipped", self.skipped),
        ]
    }
}

/// The counters of a SW ROD input: its builders' and its links', each summed over the ROBs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwRodInputCounters {
    /// The fragment builders' counters.
    pub builder: SwRodCounters,
    /// The links' counters.
    pub link: SwRodLinkCounters,
    /// FELIX blocks the cards had handed over and no builder read before the node stopped:
    /// dropped at shutdown (known once the builders have stopped; zero before).
    pub unread_blocks: u64,
    /// Bytes of those blocks.
    pub unread_bytes: u64,
    /// Time the emulated FELIX cards spent writing superpages, in nanoseconds: the
    /// builders' `input_cpu_ns` (lazy untimed channels write in the builder pool's threads:
    /// the writes' wall time, never more than those threads' CPU time; part of
    /// `builder.cpu_ns` once the builders have stopped; live, as `input_cpu_ns`).
    pub card_cpu_ns: u64,
}
