//! `[supervisor]`: the supervisor's timeouts and clear groups.

use serde::{Deserialize, Serialize};

use super::error::Checks;
use super::l1::MAX_TIMEOUT_MS;

/// The shortest event timeout: an event's decision waits for its data requests, the DCM's
/// queue and its processing, and below a second ordinary latency on a busy host fires the
/// timeout (measured: 20 ms left 46 of 20,000 events partial on a quiet 2-core host, 50 ms some
/// beside a busy core with `--processes`; docs/configuration.md, "Configuration checks").
pub(super) const MIN_EVENT_TIMEOUT_MS: u64 = 1_000;

/// `[supervisor]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorSection {
    /// Event timeout.
    pub event_timeout_ms: u64,
    /// Dead-DCM timeout.
    pub dcm_timeout_ms: u64,
    /// Clear group size.
    pub clear_group: usize,
    /// A run in which no DCM offered a processing slot within this time of the start fails.
    pub start_timeout_ms: u64,
}

impl Default for SupervisorSection {
    fn default() -> Self {
        SupervisorSection {
            event_timeout_ms: 10_000,
            dcm_timeout_ms: 3_000,
            clear_group: 100,
            start_timeout_ms: 60_000,
        }
    }
}

impl SupervisorSection {
    /// Checks this section's own values, each error naming its field (checks across sections
    /// are [`super::PartitionConfig::validate`]'s).
    pub(super) fn validate(&self, c: &mut Checks) {
        if self.event_timeout_ms < MIN_EVENT_TIMEOUT_MS || self.event_timeout_ms > MAX_TIMEOUT_MS {
            c.bad(
                "supervisor.event_timeout_ms",
                self.event_timeout_ms,
                ">= 1000 ms (an event's decision waits for its data and the DCM's queue: a \
                 shorter timeout fires on ordinary latency and the events come out partial), \
                 at most 86400000 (a day)",
            );
        }
        if self.dcm_timeout_ms < 500 || self.dcm_timeout_ms > MAX_TIMEOUT_MS {
            c.bad(
                "supervisor.dcm_timeout_ms",
                self.dcm_timeout_ms,
                ">= 500 ms (twice the DCM heartbeat at least), at most 86400000 (a day)",
            );
        }
        if self.start_timeout_ms < 1_000 || self.start_timeout_ms > MAX_TIMEOUT_MS {
            c.bad(
                "supervisor.start_timeout_ms",
                self.start_timeout_ms,
                ">= 1000 ms (DCMs need a moment to connect), at most 86400000 (a day)",
            );
        }
        if self.clear_group == 0 || self.clear_group > 100_000 {
            c.bad("supervisor.clear_group", self.clear_group, "1..=100000");
        }
    }
}
