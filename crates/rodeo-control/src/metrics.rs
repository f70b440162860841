//! One metric vocabulary, whatever runs the partition: each application's live counters as a
//! typed [`AppMetrics`] (read through its [`Probe`](crate::application::Probe) in the embedded
//! partition, carried by heartbeats to the controller in process mode), and
//! [`write_partition_metrics`](crate::partition_metrics::write_partition_metrics), the one function that turns them into the Prometheus families
//! of `/metrics` (listed in docs/run-control.md).
//!
//! Every counter has one home: the application's own counter struct in its crate
//! (`SupervisorCounters`, `DcmCounters`, `LoggerCounters`, the readout node's `ServerStats`),
//! snapshotted here field by field; the family names are written in this file only.

use std::collections::BTreeMap;

use rodeo_memory::histogram::HistogramSnapshot;
use rodeo_memory::LogHistogram;
use serde::{Deserialize, Serialize};

use crate::prometheus::MetricsWriter;
use crate::summary::InputStatus;

/// The supervisor's live counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SupervisorMetrics {
    /// L1 accepts produced by the L1 source.
    pub l1_accepts: u64,
    /// L1 accepts the emulator's schedule could not send (the partition was busy: dead time).
    #[serde(default)]
    pub l1_missed: u64,
    /// Events accepted by a DCM.
    pub accepted: u64,
    /// Events rejected.
    pub rejected: u64,
    /// Events force-accepted after a reassignment.
    pub forced_accepts: u64,
    /// Events assigned and not yet decided (gauge).
    pub in_flight: u64,
    /// Free DCM slots known (credits, gauge).
    pub credits: u64,
    /// Assignment to decision.
    pub decision_latency: HistogramSnapshot,
    /// Messages that did not decode or were not expected (ignored).
    #[serde(default)]
    pub bad_messages: u64,
}

/// A DCM's live counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DcmMetrics {
    /// Processing slots configured.
    pub slots: u64,
    /// Events finished.
    pub events: u64,
    /// Events accepted (and logged).
    pub accepted: u64,
    /// Data requests sent.
    pub requests: u64,
    /// Bytes of ROB fragments received.
    pub bytes_received: u64,
    /// Slots busy now (gauge).
    pub busy_slots: u64,
    /// Data requests in flight (gauge).
    pub outstanding_requests: u64,
    /// Data requests queued behind the per-node limit (gauge).
    pub queued_requests: u64,
    /// Messages that did not decode.
    pub bad_messages: u64,
    /// Replies to unknown or expired transactions.
    pub stale_replies: u64,
    /// Sends that failed (retried).
    pub send_failures: u64,
    /// Data request sent to its answer read.
    pub request_latency: HistogramSnapshot,
    /// Assignment read to the trigger's verdict.
    pub decision_latency: HistogramSnapshot,
    /// Assignment read to the event done.
    pub build_latency: HistogramSnapshot,
    /// Events published for monitoring.
    #[serde(default)]
    pub sampled: u64,
    /// Samples dropped (the monitoring socket's queue full).
    #[serde(default)]
    pub sample_dropped: u64,
}

/// A logger's live counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggerMetrics {
    /// Events written to files.
    pub events_written: u64,
    /// Bytes of event records written.
    pub bytes_written: u64,
    /// 1 while every output directory is full (nothing is written), else 0.
    #[serde(default)]
    pub disk_full: u64,
    /// Moves to the next output directory.
    #[serde(default)]
    pub directory_moves: u64,
    /// Event messages refused because every output directory was full.
    #[serde(default)]
    pub events_refused: u64,
    /// Messages that did not decode or were not expected (ignored).
    #[serde(default)]
    pub bad_messages: u64,
}

/// A readout node's SW ROD input counters, by the names of their structs' fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwRodMetrics {
    /// The fragment builders' (`SwRodCounters`), summed over the node's ROBs.
    pub builder: BTreeMap<String, u64>,
    /// The builder-to-store links' (`SwRodLinkCounters`), summed over the node's ROBs.
    pub link: BTreeMap<String, u64>,
}

/// A readout node's live counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RosMetrics {
    /// Data requests served.
    pub requests: u64,
    /// ROB fragments sent.
    pub fragments_sent: u64,
    /// Payload bytes of replies.
    pub bytes_sent: u64,
    /// L1IDs cleared.
    pub cleared_l1ids: u64,
    /// Requests waiting for fragments now (gauge).
    pub pending_now: u64,
    /// Fragments taken from the input.
    pub input_fragments: u64,
    /// Missing fragments answered FRAGMENT_LOST.
    pub lost_fragments: u64,
    /// Missing fragments answered FRAGMENT_PENDING.
    pub pending_fragments: u64,
    /// Parked requests answered at their timeout.
    pub timeouts: u64,
    /// Gaps in the clear sequence.
    pub clear_gaps: u64,
    /// The event store's fill (gauge): pages holding fragments not yet cleared (or held by
    /// replies) over all its pages; pages lent to DMA or ahead of the L1 not included.
    pub buffer_occupancy: f64,
    /// Pages lent (to DMA, or holding an emulated input's fragments ahead of the L1) over all
    /// the store's pages (gauge).
    #[serde(default)]
    pub buffer_lent: f64,
    /// Replies dropped because the requesting peer's queue was full (it does not read).
    pub send_dropped: u64,
    /// The same per peer (routing id as text; at most 64 peers, then `(other)`).
    pub send_dropped_by_peer: BTreeMap<String, u64>,
    /// DataRequests naming more distinct ROBs than the node has (dropped unanswered).
    pub rejected_requests: u64,
    /// Requests answered at once, flagged PENDING, because the pending queue was full (see
    /// `rodeo_ros::server`, back-pressure).
    #[serde(default)]
    pub pending_overflow: u64,
    /// Messages that did not decode.
    pub bad_messages: u64,
    /// The SW ROD input's counters (`[ros] input = "swrod"`).
    pub swrod: Option<SwRodMetrics>,
    /// Per ROB channel: fragments, held now, occupancy, errors by kind.
    #[serde(default)]
    pub channels: Vec<ChannelMetrics>,
    /// Per ROB channel, its input: state, counters, rate, live problem.
    #[serde(default)]
    pub inputs: Vec<InputStatus>,
}

/// One ROB channel of a readout node, as its core thread last published it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelMetrics {
    /// The channel's ROB source id.
    pub rob: u32,
    /// Fragments stored since the node started.
    pub fragments: u64,
    /// Fragments held now.
    pub stored: u64,
    /// The channel's fill: pages in use but not lent, over pages owned, 0.0 ..= 1.0.
    pub occupancy: f64,
    /// Pages lent now: to DMA with nothing stored yet, or holding an emulated input's
    /// fragments ahead of the L1 (rodeo_ros::store).
    #[serde(default)]
    pub lent_pages: u64,
    /// Fragments whose L1ID was already stored.
    pub duplicates: u64,
    /// Fragments dropped because their L1ID had been cleared before they arrived.
    pub dropped_after_clear: u64,
    /// Clears of L1IDs the channel never had.
    pub unknown_clears: u64,
    /// Ingest attempts refused for lack of room with no page ahead of the L1 (back-pressure:
    /// the input waited for the farm; an emulated card's run-ahead not included).
    pub backpressure: u64,
}

/// One application's live counters, by role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum AppMetrics {
    /// The supervisor's.
    Supervisor(Box<SupervisorMetrics>),
    /// A DCM's.
    Dcm(Box<DcmMetrics>),
    /// A logger's.
    Logger(LoggerMetrics),
    /// A readout node's.
    Ros(Box<RosMetrics>),
}

/// Every readout input of `apps`' readout nodes, in their order (the status's `inputs`).
pub fn inputs_of<'a>(apps: impl IntoIterator<Item = &'a AppMetrics>) -> Vec<InputStatus> {
    apps.into_iter()
        .filter_map(|m| match m {
            AppMetrics::Ros(r) => Some(r.inputs.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect()
}

impl AppMetrics {
    /// The counter that is the application's main rate: L1 accepts, events finished, events
    /// written, requests served.
    pub fn main_count(&self) -> u64 {
        match self {
            AppMetrics::Supervisor(s) => s.l1_accepts,
            AppMetrics::Dcm(d) => d.events,
            AppMetrics::Logger(l) => l.events_written,
            AppMetrics::Ros(r) => r.requests,
        }
    }

    /// Messages the application dropped as malformed (a broken or hostile peer on its
    /// sockets: `rodeo_errors_total{kind="bad_message"}`).
    pub fn bad_messages(&self) -> u64 {
        match self {
            AppMetrics::Supervisor(s) => s.bad_messages,
            AppMetrics::Dcm(d) => d.bad_messages,
            AppMetrics::Logger(l) => l.bad_messages,
            AppMetrics::Ros(r) => r.bad_messages,
        }
    }
}

/// One family of `/metrics`: its name, its Prometheus type and its labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The family's name (a histogram's samples add `_bucket`, `_sum`, `_count`).
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// Its label names (a histogram's buckets add `le`).
    pub labels: &'static [&'static str],
}

const fn fam(name: &'static str, kind: &'static str, labels: &'static [&'static str]) -> Family {
    Family { name, kind, labels }
}

const APP: &[&str] = &["app"];
const NONE: &[&str] = &[];
const QUEUE: &[&str] = &["queue", "policy"];
/// The labels of a readout input's families (`input_metrics.rs`).
const INPUT: &[&str] = &["node", "rob", "address"];

/// Every family [`write_partition_metrics`](crate::partition_metrics::write_partition_metrics) writes, in its order; the SW ROD input's
/// (`[ros] input = "swrod"`) besides: [`swrod_families`]. A test writes them all and compares.
pub const METRIC_FAMILIES: &[Family] = &[
    fam("rodeo_partition_state", "gauge", &["state"]),
    fam("rodeo_app_state", "gauge", &["app", "role", "state"]),
    fam("rodeo_app_heartbeat_age_seconds", "gauge", &["app", "role"]),
    fam("rodeo_app_restarts_total", "counter", &["app", "role"]),
    fam("rodeo_run_restarts", "gauge", NONE),
    fam("rodeo_run_number", "gauge", NONE),
    fam("rodeo_run_seconds", "gauge", NONE),
    fam("rodeo_control_bad_messages_total", "counter", NONE),
    fam("rodeo_shm_backpressure_total", "counter", NONE),
    fam("rodeo_shm_undelivered_total", "counter", NONE),
    fam("rodeo_oversized_messages_total", "counter", NONE),
    fam("rodeo_transport_auth_refused_total", "counter", NONE),
    fam("rodeo_l1_accepts_total", "counter", APP),
    fam("rodeo_events_decided_total", "counter", &["app", "verdict"]),
    fam("rodeo_supervisor_events_in_flight", "gauge", APP),
    fam("rodeo_supervisor_credits", "gauge", APP),
    fam("rodeo_l1_missed_total", "counter", APP),
    fam("rodeo_decision_latency_seconds", "histogram", APP),
    fam("rodeo_dcm_events_total", "counter", APP),
    fam("rodeo_dcm_accepted_total", "counter", APP),
    fam("rodeo_dcm_sampled_total", "counter", APP),
    fam("rodeo_dcm_sample_dropped_total", "counter", APP),
    fam("rodeo_dcm_requests_total", "counter", APP),
    fam("rodeo_dcm_received_bytes_total", "counter", APP),
    fam("rodeo_dcm_busy_slots", "gauge", APP),
    fam("rodeo_dcm_slots", "gauge", APP),
    fam("rodeo_dcm_outstanding_requests", "gauge", APP),
    fam("rodeo_dcm_queued_requests", "gauge", APP),
    fam("rodeo_dcm_request_latency_seconds", "histogram", APP),
    fam("rodeo_dcm_decision_latency_seconds", "histogram", APP),
    fam("rodeo_event_build_latency_seconds", "histogram", APP),
    fam("rodeo_logger_events_written_total", "counter", APP),
    fam("rodeo_file_bytes_written_total", "counter", APP),
    fam("rodeo_logger_disk_full", "gauge", APP),
    fam("rodeo_logger_directory_moves_total", "counter", APP),
    fam("rodeo_logger_events_refused_total", "counter", APP),
    fam("rodeo_ros_requests_total", "counter", APP),
    fam("rodeo_ros_fragments_sent_total", "counter", APP),
    fam("rodeo_ros_sent_bytes_total", "counter", APP),
    fam("rodeo_ros_cleared_total", "counter", APP),
    fam("rodeo_ros_pending_requests", "gauge", APP),
    fam("rodeo_ros_send_dropped_total", "counter", APP),
    fam(
        "rodeo_ros_peer_send_dropped_total",
        "counter",
        &["app", "peer"],
    ),
    fam("rodeo_ros_buffer_occupancy_ratio", "gauge", APP),
    fam("rodeo_ros_buffer_lent_ratio", "gauge", APP),
    fam(
        "rodeo_ros_channel_fragments_total",
        "counter",
        &["app", "rob"],
    ),
    fam(
        "rodeo_ros_channel_stored_fragments",
        "gauge",
        &["app", "rob"],
    ),
    fam(
        "rodeo_ros_channel_occupancy_ratio",
        "gauge",
        &["app", "rob"],
    ),
    fam("rodeo_ros_channel_lent_pages", "gauge", &["app", "rob"]),
    fam(
        "rodeo_ros_channel_backpressure_total",
        "counter",
        &["app", "rob"],
    ),
    fam(
        "rodeo_ros_channel_errors_total",
        "counter",
        &["app", "rob", "kind"],
    ),
    fam(
        "rodeo_ros_input_state",
        "gauge",
        &["node", "rob", "address", "state"],
    ),
    fam("rodeo_ros_input_fragments_total", "counter", INPUT),
    fam("rodeo_ros_input_bytes_total", "counter", INPUT),
    fam("rodeo_ros_input_errors_total", "counter", INPUT),
    fam("rodeo_ros_input_last_data_age_seconds", "gauge", INPUT),
    fam("rodeo_ros_input_rate_hz", "gauge", INPUT),
    fam("rodeo_ros_input_problem", "gauge", INPUT),
    fam("rodeo_errors_total", "counter", &["app", "kind"]),
    fam("rodeo_queue_capacity", "gauge", QUEUE),
    fam("rodeo_queue_depth", "gauge", QUEUE),
    fam("rodeo_queue_full_events_total", "counter", QUEUE),
    fam("rodeo_queue_dropped_total", "counter", QUEUE),
];

/// Families a service writes beside the partition's: the alarms' ([`crate::alarms::Alarms`]),
/// the monitoring's (with `[monitoring]`, `rodeo_run::observe`) and the HTTP server's
/// (`rodeo_run::http`).
pub const SERVICE_FAMILIES: &[Family] = &[
    fam("rodeo_alarm_active", "gauge", &["name"]),
    fam("rodeo_alarm_raised_total", "counter", &["name"]),
    fam("rodeo_monitor_forwarded_total", "counter", NONE),
    fam("rodeo_monitor_received_total", "counter", NONE),
    fam("rodeo_monitor_missed_total", "counter", NONE),
    fam("rodeo_http_responses_total", "counter", &["class"]),
    fam("rodeo_http_unauthorized_total", "counter", NONE),
];

/// The SW ROD input's families (`[ros] input = "swrod"`, counters labelled `app`): one per
/// builder counter (`rodeo_ros_swrod_<counter>_total`) and per link counter
/// (`rodeo_ros_swrod_link_<counter>_total`), by the names of their structs' fields.
pub fn swrod_families() -> Vec<String> {
    let c = rodeo_ros::swrod::SwRodInputCounters::default();
    let builder = c
        .builder
        .fields()
        .map(|(f, _)| format!("rodeo_ros_swrod_{f}_total"));
    let link = c
        .link
        .fields()
        .map(|(f, _)| format!("rodeo_ros_swrod_link_{f}_total"));
    builder.into_iter().chain(link).collect()
}

/// A histogram snapshot of a live histogram.
pub(crate) fn histogram(h: &LogHistogram) -> HistogramSnapshot {
    h.snapshot()
}

/// The in-process queues of this process ([`rodeo_memory::queue::snapshot`]): per queue name
/// (summed over its instances) its capacity, depth, pushes that found it full and items
/// dropped, labelled with the full policy.
pub fn write_queue_metrics(w: &mut MetricsWriter) {
    let queues = rodeo_memory::queue::snapshot();
    let labels: Vec<[(&str, &str); 2]> = queues
        .iter()
        .map(|q| [("queue", q.name), ("policy", q.policy)])
        .collect();
    let gauge = |f: fn(&rodeo_memory::queue::QueueSnapshot) -> u64| -> Vec<(&[(&str, &str)], f64)> {
        queues
            .iter()
            .zip(&labels)
            .map(|(q, l)| (&l[..], f(q) as f64))
            .collect()
    };
    let counter =
        |f: fn(&rodeo_memory::queue::QueueSnapshot) -> u64| -> Vec<(&[(&str, &str)], u64)> {
            queues
                .iter()
                .zip(&labels)
                .map(|(q, l)| (&l[..], f(q)))
                .collect()
        };
    w.gauge(
        "rodeo_queue_capacity",
        "Items the in-process queues of this name can hold (summed over their instances).",
        &gauge(|q| q.capacity),
    );
    w.gauge(
        "rodeo_queue_depth",
        "Items in the in-process queues of this name now.",
        &gauge(|q| q.depth),
    );
    w.counter(
        "rodeo_queue_full_events_total",
        "Pushes that found an in-process queue full (then blocked, dropped or refused, as its policy says).",
        &counter(|q| q.full_events),
    );
    w.counter(
        "rodeo_queue_dropped_total",
        "Items dropped by a full queue of policy drop_newest.",
        &counter(|q| q.dropped),
    );
}

/// One sample per application: `(app label, value)`.
/// One counter of a channel.
type ChannelCount = fn(&ChannelMetrics) -> u64;

/// The readout nodes' per-channel families, labelled `app` and `rob` (`0x00410000`).
pub(crate) fn write_channels(w: &mut MetricsWriter, nodes: &[(&str, &RosMetrics)]) {
    let robs: Vec<(&str, String, &ChannelMetrics)> = nodes
        .iter()
        .flat_map(|(n, s)| {
            s.channels
                .iter()
                .map(move |c| (*n, format!("0x{:08x}", c.rob), c))
        })
        .collect();
    let labels = |extra: Option<(&'static str, &'static str)>| -> Vec<Vec<(&str, &str)>> {
        robs.iter()
            .map(|(n, rob, _)| {
                let mut l = vec![("app", *n), ("rob", rob.as_str())];
                l.extend(extra);
                l
            })
            .collect()
    };
    let plain = labels(None);
    let counts = |f: ChannelCount| -> Vec<(&[(&str, &str)], u64)> {
        plain
            .iter()
            .zip(&robs)
            .map(|(l, (_, _, c))| (&l[..], f(c)))
            .collect()
    };
    w.counter(
        "rodeo_ros_channel_fragments_total",
        "Fragments stored per ROB channel.",
        &counts(|c| c.fragments),
    );
    let held: Vec<(&[(&str, &str)], f64)> = counts(|c| c.stored)
        .into_iter()
        .map(|(l, v)| (l, v as f64))
        .collect();
    w.gauge(
        "rodeo_ros_channel_stored_fragments",
        "Fragments a ROB channel holds now (stored, not yet cleared).",
        &held,
    );
    let occ: Vec<(&[(&str, &str)], f64)> = plain
        .iter()
        .zip(&robs)
        .map(|(l, (_, _, c))| (&l[..], c.occupancy))
        .collect();
    w.gauge(
        "rodeo_ros_channel_occupancy_ratio",
        "A ROB channel's fill: its pages holding fragments not yet cleared, over its pages \
         (pages lent to DMA or ahead of the L1 not included).",
        &occ,
    );
    let lent: Vec<(&[(&str, &str)], f64)> = counts(|c| c.lent_pages)
        .into_iter()
        .map(|(l, v)| (l, v as f64))
        .collect();
    w.gauge(
        "rodeo_ros_channel_lent_pages",
        "A ROB channel's pages lent: to DMA with nothing stored yet, or holding an emulated \
         input's fragments ahead of the L1.",
        &lent,
    );
    w.counter(
        "rodeo_ros_channel_backpressure_total",
        "Fragments a ROB channel could not take for lack of room while none of its pages was \
         ahead of the L1 (its input waited for the farm).",
        &counts(|c| c.backpressure),
    );
    let kinds: [(&'static str, ChannelCount); 3] = [
        ("duplicate", |c| c.duplicates),
        ("dropped_after_clear", |c| c.dropped_after_clear),
        ("unknown_clear", |c| c.unknown_clears),
    ];
    let by_kind: Vec<Vec<Vec<(&str, &str)>>> = kinds
        .iter()
        .map(|(k, _)| labels(Some(("kind", k))))
        .collect();
    let mut errors: Vec<(&[(&str, &str)], u64)> = Vec::new();
    for ((_, f), ls) in kinds.iter().zip(&by_kind) {
        errors.extend(ls.iter().zip(&robs).map(|(l, (_, _, c))| (&l[..], f(c))));
    }
    w.counter(
        "rodeo_ros_channel_errors_total",
        "Fragment errors per ROB channel by kind: a duplicate L1ID, a fragment arriving after \
         its clear, a clear of an L1ID the channel never had.",
        &errors,
    );
}

fn per_app<'a, T>(
    apps: &[(&'a str, &T)],
    f: impl Fn(&T) -> u64,
) -> Vec<([(&'a str, &'a str); 1], u64)> {
    apps.iter().map(|(n, m)| ([("app", *n)], f(m))).collect()
}

fn counter(w: &mut MetricsWriter, name: &str, help: &str, v: &[([(&str, &str); 1], u64)]) {
    let s: Vec<(&[(&str, &str)], u64)> = v.iter().map(|(l, x)| (&l[..], *x)).collect();
    w.counter(name, help, &s);
}

fn gauge(w: &mut MetricsWriter, name: &str, help: &str, v: &[([(&str, &str); 1], u64)]) {
    let s: Vec<(&[(&str, &str)], f64)> = v.iter().map(|(l, x)| (&l[..], *x as f64)).collect();
    w.gauge(name, help, &s);
}

pub(crate) fn write_histograms(
    w: &mut MetricsWriter,
    name: &str,
    help: &str,
    hists: &[(&str, &HistogramSnapshot)],
) {
    w.family(name, "histogram", help);
    let bounds = LogHistogram::bounds_seconds();
    for (app, h) in hists {
        w.histogram(
            name,
            &[("app", app)],
            &bounds,
            &h.counts,
            h.sum_ns as f64 * 1e-9,
        );
    }
}

pub(crate) fn write_supervisor(w: &mut MetricsWriter, sup: &[(&str, &SupervisorMetrics)]) {
    counter(
        w,
        "rodeo_l1_accepts_total",
        "L1 accepts produced by the L1 source.",
        &per_app(sup, |s| s.l1_accepts),
    );
    let mut decided = Vec::new();
    for (n, s) in sup {
        for (verdict, v) in [
            ("accept", s.accepted),
            ("reject", s.rejected),
            ("forced_accept", s.forced_accepts),
        ] {
            decided.push(([("app", *n), ("verdict", verdict)], v));
        }
    }
    let d: Vec<(&[(&str, &str)], u64)> = decided.iter().map(|(l, v)| (&l[..], *v)).collect();
    w.counter(
        "rodeo_events_decided_total",
        "Events decided, by verdict.",
        &d,
    );
    gauge(
        w,
        "rodeo_supervisor_events_in_flight",
        "Events assigned and not yet decided.",
        &per_app(sup, |s| s.in_flight),
    );
    gauge(
        w,
        "rodeo_supervisor_credits",
        "Free DCM slots known to the supervisor (credits).",
        &per_app(sup, |s| s.credits),
    );
    counter(
        w,
        "rodeo_l1_missed_total",
        "L1 accepts the emulator's schedule could not send because the partition was busy \
         (dead time: missed / (accepts + missed)).",
        &per_app(sup, |s| s.l1_missed),
    );
    let h: Vec<(&str, &HistogramSnapshot)> =
        sup.iter().map(|(n, s)| (*n, &s.decision_latency)).collect();
    write_histograms(
        w,
        "rodeo_decision_latency_seconds",
        "Assignment to decision, at the supervisor.",
        &h,
    );
}

pub(crate) fn write_dcms(w: &mut MetricsWriter, dcms: &[(&str, &DcmMetrics)]) {
    counter(
        w,
        "rodeo_dcm_events_total",
        "Events finished by the DCM.",
        &per_app(dcms, |d| d.events),
    );
    counter(
        w,
        "rodeo_dcm_accepted_total",
        "Events accepted (and logged) by the DCM.",
        &per_app(dcms, |d| d.accepted),
    );
    counter(
        w,
        "rodeo_dcm_sampled_total",
        "Events the DCM published for monitoring ([monitoring]).",
        &per_app(dcms, |d| d.sampled),
    );
    counter(
        w,
        "rodeo_dcm_sample_dropped_total",
        "Samples the DCM dropped because its monitoring queue was full (never waited for).",
        &per_app(dcms, |d| d.sample_dropped),
    );
    counter(
        w,
        "rodeo_dcm_requests_total",
        "Data requests sent to readout nodes.",
        &per_app(dcms, |d| d.requests),
    );
    counter(
        w,
        "rodeo_dcm_received_bytes_total",
        "Bytes of ROB fragments received.",
        &per_app(dcms, |d| d.bytes_received),
    );
    gauge(
        w,
        "rodeo_dcm_busy_slots",
        "Processing slots busy (events in the DCM).",
        &per_app(dcms, |d| d.busy_slots),
    );
    gauge(
        w,
        "rodeo_dcm_slots",
        "Processing slots configured per DCM.",
        &per_app(dcms, |d| d.slots),
    );
    gauge(
        w,
        "rodeo_dcm_outstanding_requests",
        "Data requests in flight (pending answers).",
        &per_app(dcms, |d| d.outstanding_requests),
    );
    gauge(
        w,
        "rodeo_dcm_queued_requests",
        "Data requests queued behind the per-node limit of requests in flight (queue depth).",
        &per_app(dcms, |d| d.queued_requests),
    );
    for (name, help, f) in [
        (
            "rodeo_dcm_request_latency_seconds",
            "Data request sent to its answer read, per request.",
            (|d: &DcmMetrics| &d.request_latency) as fn(&DcmMetrics) -> &HistogramSnapshot,
        ),
        (
            "rodeo_dcm_decision_latency_seconds",
            "Assignment read to the trigger's verdict, in the DCM.",
            |d: &DcmMetrics| &d.decision_latency,
        ),
        (
            "rodeo_event_build_latency_seconds",
            "Assignment read to the event done (logged if accepted), in the DCM.",
            |d: &DcmMetrics| &d.build_latency,
        ),
    ] {
        let h: Vec<(&str, &HistogramSnapshot)> = dcms.iter().map(|(n, d)| (*n, f(d))).collect();
        write_histograms(w, name, help, &h);
    }
}

pub(crate) fn write_loggers(w: &mut MetricsWriter, loggers: &[(&str, &LoggerMetrics)]) {
    counter(
        w,
        "rodeo_logger_events_written_total",
        "Events written to files.",
        &per_app(loggers, |l| l.events_written),
    );
    counter(
        w,
        "rodeo_file_bytes_written_total",
        "Bytes of event records written to files.",
        &per_app(loggers, |l| l.bytes_written),
    );
    gauge(
        w,
        "rodeo_logger_disk_full",
        "1 while every output directory of the logger is full (nothing is written).",
        &per_app(loggers, |l| l.disk_full),
    );
    counter(
        w,
        "rodeo_logger_directory_moves_total",
        "Moves to the next output directory (the one before was full).",
        &per_app(loggers, |l| l.directory_moves),
    );
    counter(
        w,
        "rodeo_logger_events_refused_total",
        "Event messages refused (not written, not acknowledged): every output directory full.",
        &per_app(loggers, |l| l.events_refused),
    );
}

pub(crate) fn write_nodes(w: &mut MetricsWriter, nodes: &[(&str, &RosMetrics)]) {
    counter(
        w,
        "rodeo_ros_requests_total",
        "Data requests served by the readout node.",
        &per_app(nodes, |s| s.requests),
    );
    counter(
        w,
        "rodeo_ros_fragments_sent_total",
        "ROB fragments sent.",
        &per_app(nodes, |s| s.fragments_sent),
    );
    counter(
        w,
        "rodeo_ros_sent_bytes_total",
        "Payload bytes of replies.",
        &per_app(nodes, |s| s.bytes_sent),
    );
    counter(
        w,
        "rodeo_ros_cleared_total",
        "L1IDs cleared.",
        &per_app(nodes, |s| s.cleared_l1ids),
    );
    gauge(
        w,
        "rodeo_ros_pending_requests",
        "Requests waiting for fragments now.",
        &per_app(nodes, |s| s.pending_now),
    );
    counter(
        w,
        "rodeo_ros_send_dropped_total",
        "Replies dropped because the requesting peer's queue was full (a client that does not \
         read; it sees a lost reply).",
        &per_app(nodes, |s| s.send_dropped),
    );
    let by_peer: Vec<([(&str, &str); 2], u64)> = nodes
        .iter()
        .flat_map(|(n, s)| {
            s.send_dropped_by_peer
                .iter()
                .map(move |(p, v)| ([("app", *n), ("peer", p.as_str())], *v))
        })
        .collect();
    let by_peer: Vec<(&[(&str, &str)], u64)> = by_peer.iter().map(|(l, v)| (&l[..], *v)).collect();
    w.counter(
        "rodeo_ros_peer_send_dropped_total",
        "Replies dropped per peer whose queue was full (routing id; at most 64 peers per node, \
         the rest as \"(other)\").",
        &by_peer,
    );
    let occ: Vec<([(&str, &str); 1], f64)> = nodes
        .iter()
        .map(|(n, s)| ([("app", *n)], s.buffer_occupancy))
        .collect();
    let s: Vec<(&[(&str, &str)], f64)> = occ.iter().map(|(l, x)| (&l[..], *x)).collect();
    w.gauge(
        "rodeo_ros_buffer_occupancy_ratio",
        "The readout node's event store fill: pages holding fragments not yet cleared, over \
         its pages (pages lent to DMA or ahead of the L1 not included).",
        &s,
    );
    let lent: Vec<([(&str, &str); 1], f64)> = nodes
        .iter()
        .map(|(n, s)| ([("app", *n)], s.buffer_lent))
        .collect();
    let s: Vec<(&[(&str, &str)], f64)> = lent.iter().map(|(l, x)| (&l[..], *x)).collect();
    w.gauge(
        "rodeo_ros_buffer_lent_ratio",
        "The readout node's event store pages lent (to DMA, or ahead of the L1), over its pages.",
        &s,
    );
    write_channels(w, nodes);
    crate::input_metrics::write_inputs(w, nodes.iter().flat_map(|(_, s)| &s.inputs));
    // The SW ROD inputs: the builders' counters (`rodeo_ros_swrod_<counter>_total`) and their
    // links' (`rodeo_ros_swrod_link_<counter>_total`), summed over each node's ROBs.
    let sw: Vec<(&str, &SwRodMetrics)> = nodes
        .iter()
        .filter_map(|(n, s)| s.swrod.as_ref().map(|m| (*n, m)))
        .collect();
    if let Some((_, first)) = sw.first() {
        for field in first.builder.keys() {
            let v: Vec<([(&str, &str); 1], u64)> = sw
                .iter()
                .map(|(n, m)| ([("app", *n)], m.builder.get(field).copied().unwrap_or(0)))
                .collect();
            counter(
                w,
                &format!("rodeo_ros_swrod_{field}_total"),
                &format!("SW ROD fragment builders' {field}, summed over the node's ROBs."),
                &v,
            );
        }
        for field in first.link.keys() {
            let v: Vec<([(&str, &str); 1], u64)> = sw
                .iter()
                .map(|(n, m)| ([("app", *n)], m.link.get(field).copied().unwrap_or(0)))
                .collect();
            counter(
                w,
                &format!("rodeo_ros_swrod_link_{field}_total"),
                &format!("SW ROD builder-to-store links' {field}, summed over the node's ROBs."),
                &v,
            );
        }
    }
}
