//! `[l1]`: where L1 accepts come from (emulator, RoI builder, the readout, a trigger unit)
//! and the emulator's settings.

use serde::{Deserialize, Serialize};

use super::address::host_port;
use super::error::{num, Checks};

// The rate and timeout limits are the command line's too: one definition, in the readout crate
// below this one.
pub(crate) use rodeo_ros::cli_values::rate_ok;
pub use rodeo_ros::cli_values::{MAX_RATE_HZ, MAX_TIMEOUT_MS, MIN_RATE_HZ};

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

/// The fastest L1 a partition without RoIs runs at (measured: 100 kHz built every event
/// whole, 1 MHz did not).
const MAX_RATE_WITHOUT_ROIS_HZ: f64 = 100_000.0;

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
    /// Checks this section's own values, each error naming its field (checks across sections
    /// are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self, c: &mut Checks) {
        if self.mode == L1Mode::External {
            if let Err(why) = host_port(&self.external_listen, &["tcp"]) {
                c.bad(
                    "l1.external_listen",
                    format!("{:?} ({why})", self.external_listen),
                    "\"tcp://HOST:PORT\" with a port in 1..=65535 with l1.mode = \"external\"",
                );
            }
        }
        if !rate_ok(self.rate_hz) {
            c.bad(
                "l1.rate_hz",
                num(self.rate_hz),
                "a rate in Hz: 0 (unlimited) or 0.001..=1000000000",
            );
        }
        let [lo, hi] = self.rois_per_event;
        if lo > hi || hi > 16 {
            c.bad(
                "l1.rois_per_event",
                format!("[{lo}, {hi}]"),
                "[min, max] with min <= max <= 16",
            );
        } else if hi == 0
            && (self.rate_hz == 0.0 || self.rate_hz > MAX_RATE_WITHOUT_ROIS_HZ)
            && matches!(self.mode, L1Mode::Emulator | L1Mode::Roib)
        {
            // No RoI request waits for an event's data, so nothing paces an unlimited L1 to
            // the readout: 20,000 events built 1,052 partial in 6.6 s (0.2 s with RoIs; with
            // a rate of 20 or 100 kHz none, with 1 MHz 1,259; 2026-12-07).
            c.bad(
                "l1.rois_per_event",
                "[0, 0]",
                "at least one RoI in some events (max >= 1), or an l1.rate_hz of at most \
                 100000: with no RoI the DCMs decide before the readout holds an event's data \
                 and a faster L1 outruns the inputs (events built partial)",
            );
        }
        if self.roib_inputs == 0 || self.roib_inputs > 16 {
            c.bad("l1.roib_inputs", self.roib_inputs, "1..=16");
        }
        if self.roib_timeout_ms == 0 || self.roib_timeout_ms > MAX_TIMEOUT_MS {
            c.bad(
                "l1.roib_timeout_ms",
                self.roib_timeout_ms,
                "> 0 milliseconds, at most 86400000 (a day)",
            );
        }
        if self.l1id_wrap == 0 || self.l1id_wrap > 1 << 24 {
            c.bad("l1.l1id_wrap", self.l1id_wrap, "1..=16777216");
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::PartitionConfig;

    /// No RoI in any event with an unlimited L1 is refused (the L1 outran the readout and
    /// events were built partial); a rate, or RoIs in some events, pass.
    #[test]
    fn no_roi_at_all_needs_a_paced_l1() {
        let parse = |t: &str| PartitionConfig::from_toml(t, "l.toml").map_err(|e| e.to_string());
        let e = parse("[l1]\nrois_per_event = [0, 0]\n").unwrap_err();
        assert!(
            e.contains("l1.rois_per_event") && e.contains("rate_hz"),
            "{e}"
        );
        parse("[l1]\nrois_per_event = [0, 0]\nrate_hz = 20000.0\n").unwrap();
        assert!(parse("[l1]\nrois_per_event = [0, 0]\nrate_hz = 1000000.0\n").is_err());
        parse("[l1]\nrois_per_event = [0, 1]\n").unwrap();
    }
}
