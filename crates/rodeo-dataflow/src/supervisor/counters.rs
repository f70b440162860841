//! What the supervisor counts: [`SupervisorCounters`], live and shared with whoever watches
//! it, and [`SupervisorSummary`], the counts of a run, which must balance (rule 6).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rodeo_memory::LogHistogram;

use crate::trace::TraceLog;

/// How long a drain that is told to give up ([`SupervisorCounters::abandon_drain`]) still
/// waits for the events that can be decided.
pub const ABANDON_GRACE: Duration = Duration::from_secs(1);

/// Live counters of the supervisor (64-bit, readable while it runs).
#[derive(Debug, Default)]
pub struct SupervisorCounters {
    /// Set by the controller before the stop when the run stops because an application
    /// cannot go on (a logger whose disks are full): the drain ends after [`ABANDON_GRACE`]
    /// instead of waiting `drain_timeout` for events that can no longer be decided (they are
    /// counted as undecided).
    pub abandon_drain: std::sync::atomic::AtomicBool,
    /// L1 accepts produced.
    pub l1_accepts: AtomicU64,
    /// L1 accepts the emulator's schedule could not send, live (the L1's dead time: the
    /// partition was busy; 0 for the other L1 sources).
    pub l1_missed: AtomicU64,
    /// Events accepted by a DCM.
    pub accepted: AtomicU64,
    /// Events rejected.
    pub rejected: AtomicU64,
    /// Events force-accepted after a reassignment.
    pub forced_accepts: AtomicU64,
    /// Events assigned and not yet decided.
    pub in_flight: AtomicU64,
    /// Free slots known (credits).
    pub credits: AtomicU64,
    /// Decision latency: assignment sent to decision received.
    pub decision_latency: LogHistogram,
    /// Sampled per-event time stamps (L1 accept, done).
    pub trace: TraceLog,
    /// Messages that did not decode or were not expected (ignored), live.
    pub bad_messages: AtomicU64,
}

/// The counts of a run: these must balance (rule 6).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SupervisorSummary {
    /// L1 accepts produced.
    pub l1_accepts: u64,
    /// Accepted.
    pub accepted: u64,
    /// Rejected.
    pub rejected: u64,
    /// Forced accepts (reassigned events).
    pub forced_accepts: u64,
    /// Events still undecided when the drain timed out (0 in a good run).
    pub undecided: u64,
    /// Reassignments (an event may be reassigned more than once).
    pub reassignments: u64,
    /// Of those, after the event timeout.
    pub timeouts: u64,
    /// DCMs declared dead.
    pub dead_dcms: u64,
    /// Decisions for events no longer assigned to their sender (ignored).
    pub late_decisions: u64,
    /// Messages that did not decode or were not expected (ignored).
    pub bad_messages: u64,
    /// L1IDs sent in clears (to each readout node).
    pub cleared: u64,
    /// Clear messages sent (to each readout node).
    pub clear_messages: u64,
    /// KeepAlive messages sent (to each readout node).
    pub keepalives: u64,
    /// DCMs seen.
    pub dcms: u64,
    /// Sends to readout nodes that failed (node gone or stuck past the send timeout).
    pub send_failures: u64,
    /// Assignments not sent because the DCM's queue was full (it does not read): never
    /// waited for; the event is reassigned at its timeout or the DCM's death.
    #[serde(default)]
    pub assignments_dropped: u64,
    /// Nanoseconds from the first L1 accept to the last, on the supervisor's clock (0 with
    /// fewer than two): the run's L1 rate is `(l1_accepts - 1) / l1_span_ns`, free of the
    /// start-up and drain around the accepts and of the controller's poll period.
    #[serde(default)]
    pub l1_span_ns: u64,
    /// L1 accepts the emulator's schedule asked for that fell behind it by more than its
    /// catch-up time and were not sent: the partition could not take the configured rate.
    #[serde(default)]
    pub l1_missed: u64,
}

impl SupervisorSummary {
    /// Whether every L1 accept was decided exactly once and cleared.
    pub fn balanced(&self) -> bool {
        self.undecided == 0
            && self.l1_accepts == self.accepted + self.rejected + self.forced_accepts
            && self.cleared == self.l1_accepts
    }
}
