//! `[dcm]`: the data-collection nodes, their slots and their built-in trigger.

use serde::{Deserialize, Serialize};

use super::error::{bad, ConfigError};

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
    /// Checks this section's own values; the error names the first bad field (checks across
    /// sections are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.nodes == 0 || self.nodes > 64 {
            return Err(bad("dcm.nodes", self.nodes, "1..=64"));
        }
        if self.slots == 0 || self.slots > 4096 {
            return Err(bad("dcm.slots", self.slots, "1..=4096"));
        }
        if !(0.0..=1.0).contains(&self.accept_fraction) {
            return Err(bad(
                "dcm.accept_fraction",
                self.accept_fraction,
                "a fraction in 0..=1",
            ));
        }
        if !self.processing_us.is_finite() || self.processing_us < 0.0 {
            return Err(bad(
                "dcm.processing_us",
                self.processing_us,
                "microseconds >= 0",
            ));
        }
        if self.max_outstanding == 0 {
            return Err(bad("dcm.max_outstanding", 0, ">= 1"));
        }
        Ok(())
    }
}
