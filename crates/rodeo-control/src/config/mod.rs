//! The partition configuration: one TOML file describes a whole run.
//!
//! Every section and field has a default, so an empty file (or none) is the built-in default
//! partition: one ROS with 12 emulated S-LINK channels, a supervisor with its L1 emulator,
//! 2 DCMs x 256 slots with an accept-fraction trigger, one logger, over inproc endpoints.
//! [`DEFAULT_TOML`] is that configuration written out with comments (`rodeo config default`).
//!
//! Unknown fields are errors (`deny_unknown_fields`), and [`PartitionConfig::validate`] checks
//! every value against what is allowed; both name the field (`dcm.slots`), the value, and what
//! would be accepted, in words (`parse`: "a whole number >= 0", not "u64"), every error of the
//! file at once, one per line ([`ConfigError::Many`]). Beyond the ranges of single values the
//! checks refuse what cannot run correctly: a fragment larger than what carries it, more events
//! in flight than a readout channel holds (`readout`), a port outside 1..=65535, an alarm on a
//! metric the partition does not have; [`PartitionConfig::check_resources`] (`estimate`) the
//! memory and threads the partition takes on its hosts.
//!
//! One file per section (`run`, `transport`, `l1`, `supervisor`, `ros`, `dcm`, `logger`,
//! `control`): its type, its defaults and the checks of its own values; `[monitoring]` and
//! `[[alarms]]` are [`crate::monitoring`]'s and [`crate::alarms`]'s. Here: the whole
//! [`PartitionConfig`], its TOML, and the checks across sections. Beside them: `limits`, the
//! message size limits derived from a partition ([`MessageLimits`]); `output`, the host checks
//! of the output directories ([`PartitionConfig::check_output`]); `readout`, what the readout
//! nodes are built with and the limits that follow; `estimate`, memory and threads;
//! `address`, ports and hosts; `parse`, the TOML read with errors in words; `error`,
//! [`ConfigError`] and [`Checks`]; `default.toml`, the commented default ([`DEFAULT_TOML`]).

use std::collections::BTreeMap;

use rodeo_dataflow::dcm::MAX_PEERS;
use serde::{Deserialize, Serialize};

/// What a token reads as wherever a configuration is shown (`GET /api/config`, the run
/// database); a `PUT` that sends it back keeps the token.
pub const HIDDEN_TOKEN: &str = "(hidden)";

use error::num;

mod address;
mod alarm_metrics;
mod binds_here;
mod control;
mod dcm;
pub(crate) mod error;
mod estimate;
mod file;
mod input_files;
mod l1;
mod limits;
mod logger;
mod output;
mod parse;
mod readout;
mod report;
mod ros;
mod run;
mod supervisor;
mod transport;

pub use alarm_metrics::metric_known;
pub use control::ControlSection;
pub use dcm::{ChecksumName, DcmSection, MAX_OUTSTANDING, MAX_PROCESSING_US};
pub use error::{Checks, ConfigError};
pub use estimate::{
    human, AppEstimate, Estimate, Machine, CONTROLLER_BYTES, MAX_THREADS_PER_CORE,
    OUTSIDE_FRAGMENT_BYTES, PROCESS_BASE_BYTES, WARN_THREADS_PER_CORE,
};
pub use file::{read_config_file, ConfigFileError, MAX_CONFIG_FILE_BYTES};
pub use l1::{L1Config, L1Mode, MAX_RATE_HZ, MAX_TIMEOUT_MS, MIN_RATE_HZ};
pub use limits::{MessageLimits, EXTERNAL_FRAGMENT_BYTES, MIN_MESSAGE_LIMIT};
pub use logger::{CompressionName, FormatName, LoggerSection};
pub use output::{check_run_database_path, output_entry_of, resolve_path};
pub use parse::MAX_FIELD_ERRORS;
pub use readout::{
    StoreShape, DMA_SUPERPAGES_PER_CHANNEL, DMA_SUPERPAGE_BYTES, LINK_SUPERPAGES_PER_CHANNEL,
    LINK_SUPERPAGE_BYTES, REPLAY_SUPERPAGE_BYTES, SWROD_SUPERPAGES_PER_CHANNEL,
    SWROD_SUPERPAGE_BYTES, SWROD_WINDOW,
};
pub use report::CheckReport;
pub use ros::{
    DmaInto, ListenMode, ReplayL1id, RosInput, RosSection, DEFAULT_PAGES_PER_CHANNEL,
    MAX_PAGES_PER_CHANNEL, MIN_PAGES_PER_CHANNEL,
};
pub use run::{
    hides_text, CpuPlan, RunConfig, RunWords, MAX_COMMENT_BYTES, MAX_RUN_SECONDS, MAX_WORD_BYTES,
};
pub use supervisor::SupervisorSection;
pub use transport::{TransportConfig, TransportKind};

/// The default partition, with comments: what `rodeo config default` prints (`default.toml`).
pub const DEFAULT_TOML: &str = include_str!("default.toml");

/// A whole partition.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PartitionConfig {
    /// `[run]`.
    pub run: RunConfig,
    /// `[transport]`.
    pub transport: TransportConfig,
    /// `[l1]`.
    pub l1: L1Config,
    /// `[supervisor]`.
    pub supervisor: SupervisorSection,
    /// `[ros]`.
    pub ros: RosSection,
    /// `[dcm]`.
    pub dcm: DcmSection,
    /// `[logger]`.
    pub logger: LoggerSection,
    /// `[control]`.
    pub control: ControlSection,
    /// `[hosts]`: application name -> host (applications not named run on this host).
    pub hosts: BTreeMap<String, String>,
    /// `[monitoring]`: event sampling ([`crate::monitoring`]).
    pub monitoring: crate::monitoring::MonitoringSection,
    /// `[[alarms]]`: conditions raised on the page, in /metrics and the log
    /// ([`crate::alarms`]).
    pub alarms: Vec<crate::alarms::AlarmSpec>,
}

impl PartitionConfig {
    /// Parses and validates TOML; `source_name` names it in errors. Every error found is
    /// named: every field toml cannot take (then the values are not checked), or else every
    /// value [`PartitionConfig::validate`] refuses.
    pub fn from_toml(text: &str, source_name: &str) -> Result<PartitionConfig, ConfigError> {
        let config = parse::parse(text, source_name)?;
        config.validate()?;
        Ok(config)
    }

    /// How many endpoints the partition binds (tcp: consecutive ports from
    /// `transport.base_port`): one per logger, one per readout node, the supervisor's.
    pub fn endpoint_count(&self) -> usize {
        self.logger
            .nodes
            .saturating_add(self.ros.nodes)
            .saturating_add(1)
    }

    /// The configuration as TOML (what a parent hands to its `rodeo app` processes).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// The configuration as TOML for anyone who may read it (`GET /api/config`): the tokens
    /// (`control.token`, `control.expert_token`) are replaced by `"(hidden)"`.
    pub fn to_toml_public(&self) -> String {
        let mut c = self.clone();
        for t in [&mut c.control.token, &mut c.control.expert_token] {
            if !t.is_empty() {
                *t = HIDDEN_TOKEN.into();
            }
        }
        c.to_toml()
    }

    /// `text`, a partition's TOML as found on disk (a run directory's `partition.toml`, which
    /// holds the tokens), with `control.token` and `control.expert_token` shown as
    /// `"(hidden)"`, as [`to_toml_public`](Self::to_toml_public) does; text without a token is
    /// returned as it is, text that does not parse as TOML as nothing (it may hold one).
    pub fn hide_tokens(text: &str) -> String {
        let Ok(mut table) = text.parse::<toml::Table>() else {
            return String::new();
        };
        let mut hidden = false;
        if let Some(control) = table.get_mut("control").and_then(toml::Value::as_table_mut) {
            for key in ["token", "expert_token"] {
                if let Some(v) = control.get_mut(key) {
                    if v.as_str() != Some("") && v.as_str() != Some(HIDDEN_TOKEN) {
                        *v = toml::Value::String(HIDDEN_TOKEN.into());
                        hidden = true;
                    }
                }
            }
        }
        if !hidden {
            return text.to_string();
        }
        toml::to_string(&table).unwrap_or_default()
    }

    /// Checks every value: an error naming each bad field (one, or [`ConfigError::Many`]).
    /// Each section checks its own values; the checks across sections are here, in between.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut c = Checks::new();
        self.run.validate(&mut c);
        self.check_base_port(&mut c);
        self.check_high_water_marks(&mut c);
        self.transport.validate(&mut c);
        self.l1.validate(&mut c);
        self.supervisor.validate(&mut c);
        self.ros.validate(self.l1.l1id_wrap, &mut c);
        self.dcm.validate(&mut c);
        self.check_stream_shares(&mut c);
        self.check_processing_time(&mut c);
        self.check_l1id_cycle(&mut c);
        self.logger.validate(&mut c);
        self.control.validate(&mut c);
        self.check_readout(&mut c);
        self.check_message_limit(&mut c);
        self.check_dcm_sockets(&mut c);
        self.check_hosts(&mut c);
        self.monitoring.check(&mut c);
        crate::alarms::check(&self.alarms, &mut c);
        self.check_alarm_metrics(&mut c);
        c.finish()
    }

    /// That a run of this partition ends by itself: by `run.events`, `run.seconds`, or inputs
    /// that end. Required where nobody can stop it (`rodeo run` without an HTTP API, `rodeo
    /// config check` without `--served`); a served run (`rodeo serve`, `rodeo run --http`, or
    /// `[control] http` set) may have no end condition and lasts until `stop`.
    pub fn check_ends_by_itself(&self) -> Result<(), ConfigError> {
        let mut c = Checks::new();
        if self.control.http.is_empty() {
            self.check_run_end(&mut c);
        }
        c.finish()
    }

    /// `run.events`: the run must end, by its events, its seconds or inputs that end.
    fn check_run_end(&self, c: &mut Checks) {
        let r = &self.run;
        let inputs_end = self.l1.mode == L1Mode::External
            || self.l1.mode == L1Mode::Readout
                && match self.ros.input {
                    RosInput::File => true,
                    RosInput::Network => {
                        self.ros.listen_end_on_close
                            && self.ros.listen.iter().all(|a| a.starts_with("tcp://"))
                    }
                    _ => false,
                };
        if r.events == 0 && r.seconds <= 0.0 && !inputs_end {
            c.bad(
                "run.events",
                r.events,
                "give run.events > 0 or run.seconds > 0 (a run nobody can stop must end by \
                 itself; only l1.mode = \"readout\" with inputs that end, ros.input = \"file\" \
                 or \"network\" over tcp with listen_end_on_close, or \
                 l1.mode = \"external\", may have neither), or serve it (rodeo serve, rodeo run \
                 --http, [control] http): it then lasts until stop",
            );
        }
    }

    /// `transport.base_port`: with tcp, room for one port per endpoint.
    fn check_base_port(&self, c: &mut Checks) {
        if self.transport.uses_ports() {
            // Consecutive ports from base_port, one per endpoint; port 0 would mean "any port"
            // (nobody could find it) and past 65535 the numbers wrap.
            let t = &self.transport;
            let last = u64::from(t.base_port) + self.endpoint_count() as u64 - 1;
            if t.base_port == 0 || last > 65535 {
                c.bad(
                    "transport.base_port",
                    format!(
                        "{} (the partition binds {} consecutive ports: {}..={last})",
                        t.base_port,
                        self.endpoint_count(),
                        t.base_port
                    ),
                    "1..=65535 for every port: base_port >= 1 and base_port + endpoints - 1 \
                     <= 65535 (one endpoint per logger, per readout node, and the supervisor's)",
                );
            }
        }
    }

    /// `transport.high_water_mark` and `ros.high_water_mark`: one range for both, and the
    /// transport's at least `dcm.slots`.
    fn check_high_water_marks(&self, c: &mut Checks) {
        for (field, hwm) in [
            ("transport.high_water_mark", self.transport.high_water_mark),
            ("ros.high_water_mark", self.ros.high_water_mark),
        ] {
            if hwm == 0 || hwm > 10_000_000 {
                c.bad(field, hwm, "1..=10000000 messages");
            }
        }
        // The supervisor sends one message per assignment and may send a DCM one for each
        // of its slots at once: a queue that cannot hold them drops the rest, and those
        // events wait for the event timeout before they go elsewhere (measured, 3000 events:
        // 0.2 s at 256, 10 s at 100, 21 s at 64). Over ipc and tcp ZeroMQ's sending pipe
        // learns what its reader took only every half high-water mark, so it may refuse with
        // half the mark unread: twice the slots there (ipc, 256 slots, `--processes`, 100,000
        // events: 135-139 assignments dropped at 256, none at 384 or 512; 2026-12-07).
        let (hwm, slots) = (self.transport.high_water_mark, self.dcm.slots);
        let (floor, what) = match self.transport.kind {
            TransportKind::Ipc | TransportKind::Tcp => (
                2 * slots,
                "twice dcm.slots over ipc and tcp, where ZeroMQ's queue counts what its reader \
                 took only every half high-water mark",
            ),
            _ => (slots, "dcm.slots"),
        };
        // Only between values their own ranges accept: one error per bad field.
        if hwm != 0 && (hwm as usize) < floor && dcm::SLOTS.contains(&slots) {
            c.bad(
                "transport.high_water_mark",
                hwm,
                format!(
                    "at least {floor} ({what}; dcm.slots is {slots}): the supervisor may send a \
                     DCM an assignment for every slot at once, and one its queue cannot hold is \
                     dropped and given again as a forced accept after \
                     supervisor.event_timeout_ms"
                ),
            );
        }
        // A readout node's replies to one DCM: up to dcm.max_outstanding requests in flight,
        // a reply beyond the mark dropped (asked again at the DCM's timeout, else the event is
        // built partial). Over ipc and tcp, twice that, for the same reason: tcp, 20,000
        // events, max_outstanding 64: 6,232 and 10,455 partial at a mark of 1, 59 at 64 (ipc:
        // 62), none at 128 (2026-12-07).
        let (ros_hwm, outstanding) = (self.ros.high_water_mark, self.dcm.max_outstanding);
        let zeromq_pipes = matches!(self.transport.kind, TransportKind::Ipc | TransportKind::Tcp);
        if zeromq_pipes
            && ros_hwm != 0
            && (ros_hwm as usize) < 2 * outstanding
            && !c.has("dcm.max_outstanding")
        {
            c.bad(
                "ros.high_water_mark",
                ros_hwm,
                format!(
                    "at least {} over ipc and tcp (twice dcm.max_outstanding, {outstanding}: a \
                     DCM may have that many requests in flight to a node, and ZeroMQ's queue \
                     counts what its reader took only every half high-water mark): a reply the \
                     queue cannot hold is dropped, and its event built partial",
                    2 * outstanding
                ),
            );
        }
    }

    /// `dcm.stream_shares`: one weight per `logger.streams` entry.
    fn check_stream_shares(&self, c: &mut Checks) {
        let d = &self.dcm;
        let l = &self.logger;
        if !d.stream_shares.is_empty()
            && (d.stream_shares.len() != l.streams.len()
                || d.stream_shares.iter().any(|w| !(0.0..=1e9).contains(w))
                || d.stream_shares.iter().sum::<f64>() <= 0.0)
        {
            c.bad(
                "dcm.stream_shares",
                format!("{:?} for streams {:?}", d.stream_shares, l.streams),
                "one weight in 0..=1000000000 per logger.streams entry, not all 0 (or [] for \
                 all to the first stream)",
            );
        }
    }

    /// `dcm.processing_us` against `supervisor.event_timeout_ms`: a mean processing time at
    /// the event timeout reassigns most events.
    fn check_processing_time(&self, c: &mut Checks) {
        let mean_ms = self.dcm.processing_us / 1e3;
        if !c.has_any(&["dcm.processing_us", "supervisor.event_timeout_ms"])
            && mean_ms * 4.0 >= self.supervisor.event_timeout_ms as f64
        {
            c.bad(
                "dcm.processing_us",
                num(self.dcm.processing_us),
                "a mean below a quarter of supervisor.event_timeout_ms (the processing time is \
                 drawn from an exponential distribution: near the timeout most events would \
                 be reassigned)",
            );
        }
    }

    /// `l1.l1id_wrap` against the L1IDs alive at once: the extended L1ID (ECR in bits
    /// 31..24) repeats every `l1id_wrap x 256` events, and "newer" is the signed distance of
    /// two of them, so every L1ID alive must be within half that cycle of the newest. Alive:
    /// the fragments a readout channel holds (emulated cards, replays and files write ahead of
    /// the L1 until the store is full; every event in flight holds one too, one per DCM slot)
    /// and a clear group not yet sent. Counting the events in flight alone let wraps of 5 to
    /// 10 through on the default partition, whose store holds 2,044 fragments a channel: 20,000
    /// events built 618 to 1,015 partial (`--processes`, wrap 10: 673); with 160 pages a
    /// channel, wrap 8 and 10 built none (2026-12-07).
    fn check_l1id_cycle(&self, c: &mut Checks) {
        if c.has_any(&[
            "l1.l1id_wrap",
            "dcm.slots",
            "dcm.nodes",
            "supervisor.clear_group",
            "ros.pages_per_channel",
            "ros.fragment_words",
        ]) {
            return;
        }
        let in_flight = self.events_in_flight() as u64;
        let stored = self.l1ids_stored_ahead() as u64;
        let alive = in_flight
            .max(stored)
            .saturating_add(self.supervisor.clear_group as u64);
        let half_cycle = u64::from(self.l1.l1id_wrap) * 128;
        if half_cycle <= alive {
            c.bad(
                "l1.l1id_wrap",
                format!(
                    "{} (half the extended L1ID cycle is {half_cycle} events; {alive} L1IDs may \
                     be alive at once: the larger of the {stored} fragments a readout channel \
                     holds ahead of the L1 and the {in_flight} events in flight (dcm.nodes x \
                     dcm.slots), + supervisor.clear_group)",
                    self.l1.l1id_wrap
                ),
                format!(
                    "at least {} here: l1id_wrap x 128 must exceed the L1IDs alive, or two \
                     fragments alive at once share an extended L1ID and events are built \
                     partial (or fewer ros.pages_per_channel and dcm.slots)",
                    alive / 128 + 1
                ),
            );
        }
    }

    /// The L1IDs a readout channel may hold ahead of the L1: the fragments its store holds
    /// when its input writes ahead (emulated cards, replays, files: until the store is full;
    /// the SW ROD input's and replays' fragment sizes vary, so the index's entries); none for
    /// a detector's network input, which the data-driven L1 follows.
    fn l1ids_stored_ahead(&self) -> usize {
        let store = StoreShape::of_partition(&self.ros);
        match self.ros.input {
            RosInput::Network => 0,
            RosInput::Dma => self
                .stored_fragment_words()
                .map_or(store.index_per_channel, |w| store.fragments_per_channel(w)),
            RosInput::Swrod | RosInput::Replay | RosInput::File => store.index_per_channel,
        }
    }

    /// `transport.max_message_bytes`: when set, it holds the partition's largest message.
    fn check_message_limit(&self, c: &mut Checks) {
        let t = &self.transport;
        if t.max_message_bytes != 0 {
            let need = self.largest_messages().largest().max(MIN_MESSAGE_LIMIT);
            if t.max_message_bytes < need as u64 || t.max_message_bytes > u64::from(u32::MAX) {
                c.bad(
                    "transport.max_message_bytes",
                    format!(
                        "{} (this partition's largest message, a full event of ros.nodes x \
                         ros.channels ROBs, needs {need})",
                        t.max_message_bytes
                    ),
                    "0 (derived from the partition) or at least the partition's largest message \
                     and 65536, at most 4294967295",
                );
            }
        }
    }

    /// `ros.nodes + logger.nodes`: a DCM polls a socket per readout node and per logger, at
    /// most [`MAX_PEERS`] (the readout and logger ranges keep within it; this says so if
    /// they grow). The number of DCMs does not count.
    fn check_dcm_sockets(&self, c: &mut Checks) {
        let (ros, l) = (&self.ros, &self.logger);
        if c.has_any(&["ros.nodes", "logger.nodes"]) {
            return;
        }
        // Each DCM talks to every readout node and logger; the DCMs' own count is not in it.
        // Saturating: counts of any size TOML allows must not wrap.
        if ros.nodes.saturating_add(l.nodes) > MAX_PEERS {
            c.bad(
                "ros.nodes",
                ros.nodes,
                format!(
                    "ros.nodes + logger.nodes must stay <= {MAX_PEERS} (a DCM polls a socket \
                     for each)"
                ),
            );
        }
    }

    /// `[hosts]`: application names of this partition, host names, and tcp endpoints.
    fn check_hosts(&self, c: &mut Checks) {
        for (app, host) in &self.hosts {
            if !self.is_app_name(app) {
                c.bad(
                    "hosts",
                    format!("{app:?} = {host:?}"),
                    "keys are application names of this partition (logger-N, ros-N, dcm-N, supervisor)",
                );
            }
            // One colon: HOST:PORT (an IPv6 address has several).
            let port = host.matches(':').count() == 1;
            if host.is_empty()
                || host.contains(char::is_whitespace)
                || host.starts_with('-')
                || port
            {
                c.bad(
                    "hosts",
                    format!("{app:?} = {host:?}"),
                    "a host name or address (no spaces, not starting with '-', no port: the \
                     partition's ports come from transport.base_port)",
                );
            }
        }
        if !self.hosts.is_empty() && !self.transport.uses_ports() {
            c.bad(
                "transport.kind",
                format!("{:?}", self.transport.kind).to_lowercase(),
                "\"tcp\" or \"stream\" when [hosts] places applications on other hosts",
            );
        }
    }

    /// Whether `name` is one of [`PartitionConfig::app_names`], without making the list: the
    /// checks ask it of a configuration whose node counts may be any size TOML allows (they
    /// are refused by their own sections, and the list of four billion names must not be made
    /// on the way to saying so).
    pub fn is_app_name(&self, name: &str) -> bool {
        if name == "supervisor" {
            return true;
        }
        let Some((role, n)) = name.rsplit_once('-') else {
            return false;
        };
        let nodes = match role {
            "logger" => self.logger.nodes,
            "ros" => self.ros.nodes,
            "dcm" => self.dcm.nodes,
            _ => return false,
        };
        // The number as `app_names` writes it: decimal digits, no sign, no leading zero.
        let canonical =
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0');
        canonical && n.parse::<usize>().is_ok_and(|i| (1..=nodes).contains(&i))
    }

    /// The application names as ranges, for messages: `logger-1, ros-1..ros-4, dcm-1..dcm-2,
    /// supervisor` (short whatever the counts).
    pub fn app_name_ranges(&self) -> String {
        let range = |role: &str, n: usize| match n {
            0 => None,
            1 => Some(format!("{role}-1")),
            n => Some(format!("{role}-1..{role}-{n}")),
        };
        [
            range("logger", self.logger.nodes),
            range("ros", self.ros.nodes),
            range("dcm", self.dcm.nodes),
            Some("supervisor".to_string()),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    }

    /// Every application's name, in the order they come up: loggers, readout nodes, DCMs,
    /// the supervisor. For a configuration that passed [`PartitionConfig::validate`] (at most
    /// a hundred or so names); ask [`PartitionConfig::is_app_name`] of one that may not have.
    pub fn app_names(&self) -> Vec<String> {
        let mut v: Vec<String> = (1..=self.logger.nodes)
            .map(|i| format!("logger-{i}"))
            .collect();
        v.extend((1..=self.ros.nodes).map(|i| format!("ros-{i}")));
        v.extend((1..=self.dcm.nodes).map(|i| format!("dcm-{i}")));
        v.push("supervisor".into());
        v
    }
}

#[cfg(test)]
mod tests;
