//! A standalone readout node as `rodeo ros`, `rodeo tester`, the benches and the studies build
//! it: emulated inputs, the event store and the request server, described by [`NodeArgs`] (whose
//! fields are also the command line's options, a clap `Args` struct), and its final counters as
//! one JSON object ([`summary`]).

use std::path::PathBuf;
use std::time::Duration;

use rodeo_transport::socket::Transport;
use serde_json::{json, Value};

use crate::cli_values;
use crate::inputs::Payload;
use crate::node::{NodeConfig, NodeError, NodeInput, ReadoutNode};
use crate::server::{DirectClient, Stopped};

/// How a readout node is built (shared by `ros`, `tester` and `bench ros`).
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// ROB channels, one emulated S-LINK input each (1..=64).
    #[arg(long, default_value_t = 4,
          value_parser = cli_values::count(1..=cli_values::MAX_CHANNELS as u64))]
    pub channels: usize,
    /// Data words per ROD fragment.
    #[arg(long, default_value_t = 400, value_name = "W")]
    pub fragment_words: u32,
    /// Source (ROB) id of channel 0; channel i has this + i.
    #[arg(long, default_value = "0x00510000", value_parser = parse_u32)]
    pub base_source_id: u32,
    /// Store pages per channel (1..=4194304).
    #[arg(long, default_value_t = 1024, value_parser = cli_values::count(1..=1 << 22))]
    pub pages_per_channel: usize,
    /// Store page size in bytes (64..=16777216, a multiple of 8).
    #[arg(long, default_value_t = 4096, value_parser = cli_values::count(64..=1 << 24))]
    pub page_bytes: usize,
    /// Input: emulated cards through DMA superpages and the S-LINK checks (`dma`), emulated
    /// cards writing straight into the store's pages, checked there, as a RobinNP does
    /// (`dma-pages`: fragments whose whole units fill 80% of a page), the inline
    /// firmware-style generator writing into the store's pages (`firmware`), or per ROB a SW
    /// ROD fragment builder fed by an emulated FELIX card (`swrod`, see --elinks).
    #[arg(long, value_enum, default_value = "dma")]
    pub input: InputKind,
    /// With `--input firmware`: write the whole fragment (`full`) or headers only (`headers`,
    /// the card's DMA modelled as free for the host).
    #[arg(long, value_enum, default_value = "full")]
    pub payload: PayloadKind,
    /// Fragments per second per channel at most (`--input dma`; with `--input swrod` events
    /// per second per ROB, about; default unlimited).
    #[arg(long, value_name = "HZ", value_parser = cli_values::rate_hz)]
    pub input_rate: Option<f64>,
    /// With `--input swrod`: E-links per ROB (1..=2048), one packet each per event; the
    /// packets share `--fragment-words` (each carries W / N - 4 payload words, at least 1).
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = cli_values::count(1..=rodeo_format::felix::ELINK_COUNT as u64))]
    pub elinks: usize,
    /// With `--input swrod`: builder threads of the node's SW ROD, shared by all its ROBs
    /// (0: one per core; at most 256).
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = cli_values::count(0..=256))]
    pub swrod_threads: usize,
    /// ZeroMQ I/O threads (0..=64; 0 serves inproc endpoints only).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub io_threads: u32,
    /// Request descriptors: requests waiting for their data at most (beyond them, a request
    /// that would wait is answered PENDING at once).
    #[arg(long, default_value_t = 1024,
          value_parser = cli_values::count(1..=1_000_000))]
    pub descriptors: usize,
    /// How long a request waits for missing fragments, in milliseconds.
    #[arg(long, default_value_t = 200, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..=cli_values::MAX_TIMEOUT_MS))]
    pub pending_timeout_ms: u64,
    /// File receiving unreadable fragments (rate-limited to 10 per second).
    #[arg(long, value_name = "PATH")]
    pub error_file: Option<PathBuf>,
    /// L1ID wrap value of the emulated inputs (the ECR increments): 4..=16777216.
    #[arg(long, default_value_t = 1 << 24,
          value_parser = clap::value_parser!(u32).range(i64::from(cli_values::MIN_L1ID_WRAP)..=1 << 24))]
    pub l1id_wrap: u32,
    /// Pin the node's core thread to this CPU, with its emulated S-LINK cards' engine threads
    /// (default: the kernel places them).
    #[arg(long, value_name = "CPU")]
    pub core_cpu: Option<usize>,
    /// Largest incoming message, in bytes; a peer sending a larger one is disconnected
    /// (default: from the protocol, a DataRequest for every channel or a Clear of 100000
    /// L1IDs, about 400 kB).
    #[arg(long, value_name = "BYTES",
          value_parser = cli_values::count(1024..=1 << 30))]
    pub max_message_bytes: Option<usize>,
}

/// Input kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InputKind {
    /// Emulated card threads, superpages, S-LINK checks.
    Dma,
    /// Emulated card threads writing into the store's pages (RobinNP-style: no copy), S-LINK
    /// checks; fragments whose whole units fill at least 80% of a store page.
    DmaPages,
    /// Inline generator writing straight into store pages.
    Firmware,
    /// Per ROB a SW ROD fragment builder fed by an emulated FELIX card (`--elinks` E-links).
    Swrod,
}

/// Payload modes of the firmware input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PayloadKind {
    /// Header, counter data, trailer.
    Full,
    /// Header and trailer only.
    Headers,
}

impl NodeArgs {
    /// The ROB ids of the node.
    pub fn robs(&self) -> Vec<u32> {
        (0..self.channels as u32)
            .map(|c| self.base_source_id + c)
            .collect()
    }
}

/// Starts a readout node as `args` describe it, serving on `endpoint`.
pub fn start_node(t: &Transport, a: &NodeArgs, endpoint: &str) -> Result<ReadoutNode, NodeError> {
    ReadoutNode::start(t, &node_config(a), endpoint)
}

/// Starts a readout node as `args` describe it, serving one in-process client over the
/// direct link (no ZeroMQ).
pub fn start_direct_node(a: &NodeArgs) -> Result<(ReadoutNode, DirectClient), NodeError> {
    ReadoutNode::start_direct(&node_config(a))
}

/// The library's node configuration for `args`.
pub fn node_config(a: &NodeArgs) -> NodeConfig {
    let input = match a.input {
        InputKind::Firmware => NodeInput::Firmware(match a.payload {
            PayloadKind::Full => Payload::Full,
            PayloadKind::Headers => Payload::HeadersOnly,
        }),
        InputKind::Dma => NodeInput::Dma {
            rate_hz: a.input_rate,
        },
        InputKind::DmaPages => NodeInput::DmaPages {
            rate_hz: a.input_rate,
        },
        InputKind::Swrod => NodeInput::SwRod {
            elinks: a.elinks,
            rate_hz: a.input_rate,
            threads: a.swrod_threads,
        },
    };
    NodeConfig {
        channels: a.channels,
        fragment_words: a.fragment_words,
        base_source_id: a.base_source_id,
        pages_per_channel: a.pages_per_channel,
        page_bytes: a.page_bytes,
        input,
        l1id_wrap: a.l1id_wrap,
        descriptors: a.descriptors,
        pending_timeout: Duration::from_millis(a.pending_timeout_ms),
        error_file: a.error_file.clone(),
        core_cpu: a.core_cpu,
        max_message_bytes: a.max_message_bytes,
        first_event: 0,
        ..NodeConfig::default()
    }
}

/// The final counters of a stopped node as JSON.
pub fn summary(s: &Stopped) -> Value {
    let c = &s.counters;
    let k = s.store.total_counters();
    let mut v = json!({
        "requests": c.requests,
        "replies": c.replies,
        "fragments_sent": c.fragments_sent,
        "bytes_sent": c.bytes_sent,
        "pending_fragments": c.pending_fragments,
        "lost_fragments": c.lost_fragments,
        "parked": c.parked,
        "timeouts": c.timeouts,
        "clears": c.clears,
        "cleared_l1ids": c.cleared_l1ids,
        "clear_gaps": c.clear_gaps,
        "bad_messages": c.bad_messages,
        "unexpected_messages": c.unexpected_messages,
        "unknown_robs": c.unknown_robs,
        "send_errors": c.send_errors,
        "send_dropped": c.send_dropped,
        "send_dropped_by_peer": s.peer_drops.iter().map(|p| (p.peer.clone(), json!(p.dropped))).collect::<serde_json::Map<_, _>>(),
        "rejected_requests": c.rejected_requests,
        "pending_overflow": c.pending_overflow,
        "duplicate_robs": c.duplicate_robs,
        "input_fragments": c.input_fragments,
        "core_pinned": s.core_pinned,
        "stored_fragments": k.fragments,
        "stored_now": k.stored,
        "released_fragments": k.cleared,
        "duplicates": k.duplicates,
        "dropped_after_clear": k.dropped_after_clear,
        "unknown_clears": k.unknown_clears,
        "store_full_events": k.full,
        "store_full_ahead_events": k.full_ahead,
        "occupancy_alarms": k.alarms,
        "slink_flagged": s.slink.flagged_fragments,
        "slink_dropped_fragments": s.slink.dropped_fragments(),
        "slink_garbage_spans": s.slink.garbage_spans,
        "slink_sequence_errors": s.slink.l1id_sequence_errors,
        "slink_source_mismatches": s.slink.source_mismatches,
        "slink_sized_fragments": s.slink.sized_fragments,
        "input_stalls": s.input_stalls,
        "core_cpu_ns": u64::try_from(s.core_cpu.as_nanos()).unwrap_or(u64::MAX),
        "core_idle_cpu_ns": u64::try_from(s.core_idle_cpu.as_nanos()).unwrap_or(u64::MAX),
    });
    // What the store's record of the run's clears could not take (`EventStore::clears_unrecorded`).
    let (passed, beyond) = s.store.clears_unrecorded();
    v["clears_passed_uncleared"] = json!(passed);
    v["clears_beyond_window"] = json!(beyond);
    // The SW ROD input: its builders' counters (`swrod_*`) and its links' (`swrod_link_*`).
    if let (Some(sw), Value::Object(m)) = (&s.swrod, &mut v) {
        for (k, n) in sw.builder.fields() {
            m.insert(format!("swrod_{k}"), Value::from(n));
        }
        for (k, n) in sw.link.fields() {
            m.insert(format!("swrod_link_{k}"), Value::from(n));
        }
        // What the cards had handed over and no builder read when the node stopped, and the
        // CPU time their (lazy) writing took inside the builder threads.
        m.insert("swrod_unread_blocks".into(), Value::from(sw.unread_blocks));
        m.insert("swrod_unread_bytes".into(), Value::from(sw.unread_bytes));
        m.insert("swrod_card_cpu_ns".into(), Value::from(sw.card_cpu_ns));
    }
    if let (Some(e), Value::Object(m)) = (&s.swrod_error, &mut v) {
        m.insert("swrod_error".into(), Value::from(e.as_str()));
    }
    v
}

/// Parses a 32-bit number written in decimal or as `0x` hex (source ids).
pub fn parse_u32(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => t.parse(),
    };
    r.map_err(|e| format!("{s:?} is not a 32-bit number (decimal or 0x hex): {e}"))
}
