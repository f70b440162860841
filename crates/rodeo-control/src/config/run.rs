//! `[run]`: the run's number, its end (events or seconds), where its files go and the memory
//! it may take.

use serde::{Deserialize, Serialize};

use super::error::{num, Checks};

/// The longest `run.seconds`: a year (a larger number is a typing error, and a run limit past
/// it never comes).
pub const MAX_RUN_SECONDS: f64 = 365.0 * 86_400.0;

/// `[run]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// Run number.
    pub number: u32,
    /// L1 accepts to produce (0: no limit).
    pub events: u64,
    /// Seconds to run (0: no limit).
    pub seconds: f64,
    /// Output directory.
    pub output: String,
    /// The memory the partition may take on each host, in bytes (0: what the machine has
    /// available); `rodeo config check` and `rodeo run` refuse a larger estimate
    /// ([`super::PartitionConfig::estimate`]).
    pub memory_budget_bytes: u64,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            number: 1,
            events: 100_000,
            seconds: 0.0,
            output: "rodeo-output".into(),
            memory_budget_bytes: 0,
        }
    }
}

impl RunConfig {
    /// Checks this section's own values, each error naming its field (checks across sections
    /// are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self, c: &mut Checks) {
        if !(0.0..=MAX_RUN_SECONDS).contains(&self.seconds) {
            c.bad(
                "run.seconds",
                num(self.seconds),
                "a number of seconds >= 0 (0: no limit), at most 31536000 (a year)",
            );
        }
        if self.output.is_empty() {
            c.bad("run.output", "\"\"", "a directory path");
        }
        if self.memory_budget_bytes != 0 && self.memory_budget_bytes < 64 << 20 {
            c.bad(
                "run.memory_budget_bytes",
                self.memory_budget_bytes,
                "0 (what the machine has available) or at least 67108864 (64 MiB)",
            );
        }
    }
}
