//! What a DCM counts: [`DcmCounters`], live and shared with whoever watches the node, and
//! [`DcmSummary`], the totals of a run returned when the DCM stops.

use std::sync::atomic::AtomicU64;

use rodeo_memory::LogHistogram;

use crate::trace::TraceLog;

/// Live counters of a DCM.
#[derive(Debug, Default)]
pub struct DcmCounters {
    /// Events finished (decided and, if accepted, acknowledged).
    pub events: AtomicU64,
    /// Events accepted (including forced).
    pub accepted: AtomicU64,
    /// Data requests sent.
    pub requests: AtomicU64,
    /// Bytes of ROB fragments received.
    pub bytes_received: AtomicU64,
    /// Slots busy.
    pub busy_slots: AtomicU64,
    /// Data requests in flight to the readout nodes (gauge).
    pub outstanding_requests: AtomicU64,
    /// Data requests queued behind the per-node limit of requests in flight (gauge).
    pub queued_requests: AtomicU64,
    /// Messages that did not decode or were not expected.
    pub bad_messages: AtomicU64,
    /// Replies and acknowledgements for events no longer here.
    pub stale_replies: AtomicU64,
    /// Sends that failed (peer gone or stuck).
    pub send_failures: AtomicU64,
    /// Events published for monitoring (`[monitoring]`).
    pub sampled: AtomicU64,
    /// Samples dropped because the monitoring socket's queue was full.
    pub sample_dropped: AtomicU64,
    /// Data request latency: request sent to reply read, per request.
    pub request_latency: LogHistogram,
    /// Decision latency: assignment read to the trigger's verdict.
    pub decision_latency: LogHistogram,
    /// Event build latency: assignment read to the event done (acknowledged by the logger).
    pub build_latency: LogHistogram,
    /// Sampled per-event time stamps.
    pub trace: TraceLog,
}

/// What a DCM did in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DcmSummary {
    /// Events assigned (Process + Build).
    pub assigned: u64,
    /// Of those, Build (forced accept).
    pub builds: u64,
    /// Rejected.
    pub rejected: u64,
    /// Accepted by the algorithm.
    pub accepted: u64,
    /// Forced accepts built.
    pub forced: u64,
    /// Built without some fragments (PARTIAL_EVENT).
    pub partial: u64,
    /// Data requests sent (re-asks included).
    pub requests: u64,
    /// Re-asks for pending fragments.
    pub retries: u64,
    /// ROB fragments received.
    pub fragments: u64,
    /// Replies for unknown or finished transactions (dropped).
    pub stale_replies: u64,
    /// Messages that did not decode, or assignments without a free slot.
    pub bad_messages: u64,
    /// Events sent to loggers.
    pub events_sent: u64,
    /// Events unfinished at stop (left to the supervisor).
    pub unfinished: u64,
    /// Sends that failed (peer gone or stuck past the send timeout).
    pub send_failures: u64,
    /// Bytes of built events given to the compressor (`compress`).
    #[serde(default)]
    pub compress_in_bytes: u64,
    /// Bytes of the compressed events it made.
    #[serde(default)]
    pub compress_out_bytes: u64,
    /// Nanoseconds the DCM thread spent compressing.
    #[serde(default)]
    pub compress_ns: u64,
    /// Events the compressor refused (sent uncompressed).
    #[serde(default)]
    pub compress_failures: u64,
    /// Requests a readout node did not answer within `dcm::faults::REQUEST_TIMEOUT` (its
    /// fragments missing, the event partial; the node then counts as down).
    #[serde(default)]
    pub request_timeouts: u64,
    /// Requests not sent because their node was down (the event built without its ROBs).
    #[serde(default)]
    pub skipped_requests: u64,
    /// Times a readout node went down (a request timed out or a send failed).
    #[serde(default)]
    pub nodes_down: u64,
    /// Events sent to a logger again after no acknowledgement came within
    /// `dcm::faults::ACK_TIMEOUT` (a logger that died with them; the restarted one drops the
    /// copies it already holds).
    #[serde(default)]
    pub events_resent: u64,
}
