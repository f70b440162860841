//! `[run]`: the run's number, its end (events or seconds) and where its files go.

use serde::{Deserialize, Serialize};

use super::error::{bad, ConfigError};

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
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            number: 1,
            events: 100_000,
            seconds: 0.0,
            output: "rodeo-output".into(),
        }
    }
}

impl RunConfig {
    /// Checks this section's own values; the error names the first bad field (checks across
    /// sections are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !self.seconds.is_finite() || self.seconds < 0.0 {
            return Err(bad("run.seconds", self.seconds, "a number of seconds >= 0"));
        }
        if self.output.is_empty() {
            return Err(bad("run.output", "\"\"", "a directory path"));
        }
        Ok(())
    }
}
