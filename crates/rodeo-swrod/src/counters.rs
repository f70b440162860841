//! The builder's counters: one plain struct a receiving thread increments without atomics, and
//! its shared mirror that the thread publishes into (relaxed stores, once per superpage) so that
//! metrics can read a live snapshot at any time.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[doc = $doc:literal])+ $name:ident, )+) => {
        /// Counters of a fragment builder (64-bit, monotonic during a run). Summed over threads
        /// by [`FragmentBuilder::counters`](super::FragmentBuilder::counters) and returned by
        /// [`FragmentBuilder::run`](super::FragmentBuilder::run).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct SwRodCounters {
            $( $(#[doc = $doc])+ pub $name: u64, )+
        }

        const FIELDS: usize = [$( stringify!($name), )+].len();

        impl SwRodCounters {
            /// Adds every counter of `other`.
            pub fn add(&mut self, other: &SwRodCounters) {
                $( self.$name += other.$name; )+
            }

            /// `(name, value)` pairs, for metrics and reports.
            pub fn fields(&self) -> [(&'static str, u64); FIELDS] {
                [$( (stringify!($name), self.$name), )+]
            }

            fn to_array(self) -> [u64; FIELDS] {
                [$( self.$name, )+]
            }

            fn from_array(a: [u64; FIELDS]) -> SwRodCounters {
                let mut it = a.into_iter();
                SwRodCounters { $( $name: it.next().unwrap_or(0), )+ }
            }
        }
    };
}

counters! {
    /// Superpages read.
    superpages,
    /// FELIX blocks read.
    blocks,
    /// Blocks rejected: unknown start-of-block marker.
    bad_blocks,
    /// Bytes at the end of a superpage that do not make a whole block.
    bad_bytes,
    /// Blocks of an E-link this thread is not configured for.
    foreign_blocks,
    /// Blocks whose backward parse stopped at an impossible trailer.
    damaged_blocks,
    /// Block sequence-number gaps.
    block_gaps,
    /// Blocks lost, summed over the gaps.
    lost_blocks,
    /// Subchunk sequence errors (orphan MIDDLE/LAST, FIRST while a chunk was open).
    sequence_errors,
    /// Out-of-band subchunks: not packets, their payload skipped.
    out_of_band_subchunks,
    /// Subchunks of the reserved type: their payload skipped.
    reserved_subchunks,
    /// Packets cut at the longest packet a thread reassembles (flagged, the rest dropped).
    oversize_packets,
    /// Bytes dropped past that bound.
    oversize_dropped_bytes,
    /// Packets placed into fragments.
    packets,
    /// Bytes of the packets placed into fragments, padded to words (without the 2-word packet
    /// headers). Packets and bytes are counted when a thread closes its part of an event.
    packet_bytes,
    /// Packets placed with a non-zero packet status (error, CRC, truncation flags).
    flagged_packets,
    /// Packets the decoder rejected, or whose L1ID is out of range: dropped.
    corrupt_packets,
    /// Second packets of an E-link for an L1ID still being built: dropped.
    duplicate_packets,
    /// Packets whose L1ID was already built: dropped.
    late_packets,
    /// Packets that did not fit the thread's memory block: dropped.
    overflow_packets,
    /// Packets whose BCID disagrees with the fragment's.
    bcid_mismatches,
    /// Fragments handed to the sink.
    fragments,
    /// Fragments with at least one E-link missing (TIMEOUT + FRAGMENT_LOST).
    incomplete_fragments,
    /// E-link packets missing from built fragments.
    missing_packets,
    /// Thread parts closed by the timeout.
    timeouts,
    /// Thread parts closed because the L1ID window moved past them.
    window_moves,
    /// Thread parts closed at the end of the run (input ended or stop).
    end_of_run_parts,
    /// Thread parts whose packets arrived out of E-link order and were reordered.
    reordered_parts,
    /// Times a thread waited for the pool (back-pressure from the consumer).
    pool_waits,
    /// Times a thread waited for a slower thread to free a window slot.
    slot_waits,
    /// Receiving threads the kernel refused to pin to their CPU.
    pin_failures,
    /// CPU time the receiving threads used, in nanoseconds (set when a run ends).
    cpu_ns,
    /// Time the ROB's lazy cards spent writing superpages in its pops, in nanoseconds: their
    /// wall time (vDSO reads), a thread's ROBs together never more than its CPU time over the
    /// same turns (preempted while writing, the wall time is scaled down to it), so in sum
    /// over a [`BuilderPool`](crate::BuilderPool) thread's ROBs a part of their `cpu_ns`;
    /// live (unlike `cpu_ns`, set when the run ends); 0 on a builder's own threads and for
    /// channels that time themselves.
    input_cpu_ns,
}

/// The shared mirror of one thread's counters.
#[derive(Debug)]
pub(crate) struct SharedCounters([AtomicU64; FIELDS]);

impl SharedCounters {
    pub(crate) fn new() -> SharedCounters {
        SharedCounters(std::array::from_fn(|_| AtomicU64::new(0)))
    }

    /// Publishes a thread's current values (only that thread writes this mirror).
    pub(crate) fn publish(&self, c: &SwRodCounters) {
        for (a, v) in self.0.iter().zip(c.to_array()) {
            a.store(v, Ordering::Relaxed);
        }
    }

    pub(crate) fn load(&self) -> SwRodCounters {
        SwRodCounters::from_array(std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed)))
    }
}
