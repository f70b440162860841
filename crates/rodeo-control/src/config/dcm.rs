//! `[dcm]`: the data-collection nodes, their slots and their built-in trigger.

use serde::{Deserialize, Serialize};

use super::error::{num, Checks};

/// The longest mean emulated processing time, in microseconds (10 s; a drawn time is up to
/// about 40 times the mean, and a mean near the event timeout reassigns most events).
pub const MAX_PROCESSING_US: f64 = 1e7;
/// The most requests in flight per readout node a DCM may keep.
pub const MAX_OUTSTANDING: usize = 100_000;
/// The slots a DCM may have (`dcm.slots`).
pub(super) const SLOTS: std::ops::RangeInclusive<usize> = 1..=rodeo_dataflow::dcm::MAX_SLOTS;

/// Checksum names in the configuration.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumName {
    /// None.
    None,
    /// CRC16-CCITT.
    Crc16,
    /// Adler-32.
    Adler32,
}

/// `[dcm]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DcmSection {
    /// Nodes.
    pub nodes: usize,
    /// Slots per node.
    pub slots: usize,
    /// Accept fraction.
    pub accept_fraction: f64,
    /// Share of the accepted events per stream (empty: all to the first).
    pub stream_shares: Vec<f64>,
    /// Mean emulated processing time.
    pub processing_us: f64,
    /// Checksum of built events.
    pub checksum: ChecksumName,
    /// Requests in flight per readout node.
    pub max_outstanding: usize,
}

impl Default for DcmSection {
    fn default() -> Self {
        DcmSection {
            nodes: 2,
            slots: 256,
            accept_fraction: 0.1,
            stream_shares: Vec::new(),
            processing_us: 0.0,
            checksum: ChecksumName::Adler32,
            max_outstanding: 64,
        }
    }
}

impl DcmSection {
    /// Checks this section's own values, each error naming its field (checks across sections
    /// are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self, c: &mut Checks) {
        if self.nodes == 0 || self.nodes > 64 {
            c.bad("dcm.nodes", self.nodes, "1..=64");
        }
        if !SLOTS.contains(&self.slots) {
            c.bad("dcm.slots", self.slots, "1..=4096");
        }
        if !(0.0..=1.0).contains(&self.accept_fraction) {
            c.bad(
                "dcm.accept_fraction",
                num(self.accept_fraction),
                "a fraction in 0..=1",
            );
        }
        if !(0.0..=MAX_PROCESSING_US).contains(&self.processing_us) {
            c.bad(
                "dcm.processing_us",
                num(self.processing_us),
                "microseconds >= 0, at most 10000000 (10 s)",
            );
        }
        if self.max_outstanding == 0 || self.max_outstanding > MAX_OUTSTANDING {
            c.bad(
                "dcm.max_outstanding",
                self.max_outstanding,
                ">= 1, at most 100000",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::PartitionConfig;

    /// A DCM polls a socket per readout node and per logger: the number of DCMs beside them
    /// is no limit (20 + 40 + 4 nodes were refused while the check summed all three).
    #[test]
    fn many_dcms_beside_many_readout_nodes_make_a_valid_partition() {
        let text = "[ros]\nnodes = 20\n[dcm]\nnodes = 40\nslots = 48\n[logger]\nnodes = 4\n";
        let c = PartitionConfig::from_toml(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((c.ros.nodes, c.dcm.nodes, c.logger.nodes), (20, 40, 4));
    }
}
