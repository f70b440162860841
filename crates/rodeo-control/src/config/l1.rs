//! `[l1]`: where L1 accepts come from (emulator, RoI builder, the readout, a trigger unit)
//! and the emulator's settings.

use serde::{Deserialize, Serialize};

use super::error::{bad, ConfigError};

/// Where L1 accepts come from.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum L1Mode {
    /// The L1 emulator inside the supervisor.
    Emulator,
    /// The RoI builder over emulated Level-1 inputs.
    Roib,
    /// Data-driven: the L1IDs complete on every channel of the readout.
    Readout,
    /// From a trigger unit outside, over TCP.
    External,
}

/// `[l1]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct L1Config {
    /// Emulator, RoIB, readout or external.
    pub mode: L1Mode,
    /// [`L1Mode::External`]: the TCP address the trigger unit connects to.
    pub external_listen: String,
    /// RoIB inputs.
    pub roib_inputs: usize,
    /// RoIB assembly timeout.
    pub roib_timeout_ms: u64,
    /// Rate in Hz (0: unlimited).
    pub rate_hz: f64,
    /// Fewest and most RoIs.
    pub rois_per_event: [u32; 2],
    /// L1ID wrap.
    pub l1id_wrap: u32,
    /// Seed.
    pub seed: u64,
}

impl Default for L1Config {
    fn default() -> Self {
        L1Config {
            mode: L1Mode::Emulator,
            external_listen: "tcp://127.0.0.1:47900".into(),
            roib_inputs: 3,
            roib_timeout_ms: 100,
            rate_hz: 0.0,
            rois_per_event: [1, 2],
            l1id_wrap: 1 << 24,
            seed: 1,
        }
    }
}

impl L1Config {
    /// Checks this section's own values; the error names the first bad field (checks across
    /// sections are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.mode == L1Mode::External
            && self
                .external_listen
                .strip_prefix("tcp://")
                .and_then(|a| a.rsplit_once(':'))
                .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            return Err(bad(
                "l1.external_listen",
                format!("{:?}", self.external_listen),
                "\"tcp://HOST:PORT\" with l1.mode = \"external\"",
            ));
        }
        if !self.rate_hz.is_finite() || self.rate_hz < 0.0 {
            return Err(bad(
                "l1.rate_hz",
                self.rate_hz,
                "a rate >= 0 (0: unlimited)",
            ));
        }
        let [lo, hi] = self.rois_per_event;
        if lo > hi || hi > 16 {
            return Err(bad(
                "l1.rois_per_event",
                format!("[{lo}, {hi}]"),
                "[min, max] with min <= max <= 16",
            ));
        }
        if self.roib_inputs == 0 || self.roib_inputs > 16 {
            return Err(bad("l1.roib_inputs", self.roib_inputs, "1..=16"));
        }
        if self.roib_timeout_ms == 0 {
            return Err(bad("l1.roib_timeout_ms", 0, "> 0 milliseconds"));
        }
        if self.l1id_wrap == 0 || self.l1id_wrap > 1 << 24 {
            return Err(bad("l1.l1id_wrap", self.l1id_wrap, "1..=16777216"));
        }
        Ok(())
    }
}
