//! The partition layout and the run's balance sheet; [`run_embedded`] runs every application
//! of a [`PartitionConfig`] in this process, as threads, over inproc endpoints (or ipc/tcp
//! when the configuration says so), through [`crate::embedded::EmbeddedPartition`].
//!
//! # Order
//!
//! Start: loggers, readout nodes, DCMs, supervisor (which owns the L1 source), so that nothing
//! sends to an application that is not there yet. Stop: the supervisor first — no new events,
//! every assigned event decided, the last clears sent — then the DCMs, the loggers (closing
//! their files) and the readout nodes: the dataflow drains before anything stops.
//!
//! # The balance sheet (protocol rule 6)
//!
//! At the end, [`RunSummary`] holds the counts and [`RunSummary::balanced`] checks them: every
//! L1 accept decided once (accepted + rejected + forced = L1 accepts), every readout node told
//! to clear every event, the loggers wrote exactly the accepted and forced events. A mismatch
//! is listed in [`RunSummary::problems`] and is an error, never a warning.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rodeo_dataflow::dcm::{DcmConfig, DcmCounters, ReadoutNode as DcmReadout};
use rodeo_dataflow::l1source::L1SourceConfig;
use rodeo_dataflow::logger::{LoggerConfig, LoggerCounters};
use rodeo_dataflow::roib::RoibConfig;
use rodeo_dataflow::supervisor::{SupervisorConfig, SupervisorCounters};
use rodeo_dataflow::trigger::{AcceptFraction, TimeDistribution};
use rodeo_dataflow::DataflowError;
use rodeo_format::checksum::ChecksumType;
use rodeo_ros::node::{NodeConfig, NodeError, NodeInput};
use rodeo_transport::socket::TransportError;

use crate::config::{
    ChecksumName, CompressionName, L1Mode, PartitionConfig, RosInput, TransportKind,
};

/// Why a partition could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionError {
    /// The ZeroMQ context could not be created.
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    /// A readout node failed to start.
    #[error("{name}: {source}")]
    Node {
        /// The node.
        name: String,
        /// The error.
        #[source]
        source: NodeError,
    },
    /// A dataflow application failed.
    #[error(transparent)]
    Dataflow(#[from] DataflowError),
    /// A lifecycle transition failed (the error names the application).
    #[error(transparent)]
    Transition(#[from] crate::lifecycle::TransitionError),
    /// The output directory could not be made.
    #[error("output directory {}: {source}", path.display())]
    Output {
        /// The directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Live counters of a running partition, for progress displays and monitoring.
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// The supervisor's.
    pub supervisor: Arc<SupervisorCounters>,
    /// The loggers' (summed by the reader).
    pub loggers: Vec<Arc<LoggerCounters>>,
    /// The DCMs'.
    pub dcms: Vec<Arc<DcmCounters>>,
}

impl LiveCounters {
    /// Events written by all loggers so far.
    pub fn events_written(&self) -> u64 {
        self.loggers
            .iter()
            .map(|l| l.events_written.load(Ordering::Relaxed))
            .sum()
    }
}

/// What one readout node reports at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSummary {
    /// Node name.
    pub name: String,
    /// Data requests answered.
    pub requests: u64,
    /// L1IDs cleared (received in clears).
    pub cleared: u64,
    /// Gaps in the clear sequence.
    pub clear_gaps: u64,
    /// Fragments stored from the input.
    pub stored: u64,
    /// Fragments still stored at the end (not yet cleared: the emulated inputs run ahead).
    pub stored_now: u64,
    /// Fragments the SW ROD fragment builders built (`[ros] input = "swrod"`; 0 otherwise).
    pub swrod_built: u64,
    /// The SW ROD input's first error at the stop (a builder that failed), if any: also a
    /// problem of the run ([`RunSummary::problems`]).
    pub swrod_error: Option<String>,
}

/// The end of a run: counts, balance, files.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Run number.
    pub run: u32,
    /// L1 accepts.
    pub l1_accepts: u64,
    /// Accepted by the trigger.
    pub accepted: u64,
    /// Rejected.
    pub rejected: u64,
    /// Forced accepts.
    pub forced_accepts: u64,
    /// Events written by the loggers.
    pub events_written: u64,
    /// Duplicates dropped by the loggers.
    pub duplicates: u64,
    /// Bytes of event records written.
    pub bytes_written: u64,
    /// Events built without some fragments.
    pub partial_events: u64,
    /// Per readout node.
    pub nodes: Vec<NodeSummary>,
    /// Seconds from the first L1 accept to the supervisor's end.
    pub seconds: f64,
    /// L1 accepts per second.
    pub l1_rate_hz: f64,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// The output directory of the run.
    pub output: PathBuf,
    /// Every imbalance found (empty: balanced).
    pub problems: Vec<String>,
}

impl RunSummary {
    /// Whether the run balanced (rule 6).
    pub fn balanced(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Endpoint names of one partition.
struct Endpoints {
    kind: TransportKind,
    host: String,
    hosts: std::collections::BTreeMap<String, String>,
    next_port: u16,
    ipc_dir: PathBuf,
}

impl Endpoints {
    fn make(&mut self, name: &str) -> String {
        match self.kind {
            TransportKind::Inproc => format!("inproc://{name}"),
            TransportKind::Ipc => format!("ipc://{}/{name}.sock", self.ipc_dir.display()),
            TransportKind::Tcp => {
                let p = self.next_port;
                self.next_port = self.next_port.wrapping_add(1);
                // An application placed on another host binds that host's address.
                let host = self.hosts.get(name).unwrap_or(&self.host);
                format!("tcp://{host}:{p}")
            }
        }
    }
}

/// Every application of a partition, named and configured: what the embedded runner starts as
/// threads and what `rodeo app` starts one per process. Derived from the configuration alone,
/// so every process computes the same endpoints.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The run's output directory (`<output>/run-<number>`).
    pub output: PathBuf,
    /// Loggers.
    pub loggers: Vec<LoggerConfig>,
    /// Readout nodes: name, endpoint, configuration.
    pub nodes: Vec<(String, String, NodeConfig)>,
    /// DCMs.
    pub dcms: Vec<DcmConfig>,
    /// The supervisor (with its L1 source).
    pub supervisor: SupervisorConfig,
    /// The trigger every DCM runs.
    pub trigger: AcceptFraction,
}

impl Layout {
    /// The layout of `config`.
    pub fn new(config: &PartitionConfig) -> Layout {
        let output =
            PathBuf::from(&config.run.output).join(format!("run-{:08}", config.run.number));
        let mut eps = Endpoints {
            kind: config.transport.kind,
            host: config.transport.host.clone(),
            hosts: config.hosts.clone(),
            next_port: config.transport.base_port,
            ipc_dir: output.clone(),
        };
        let mut loggers = Vec::new();
        for i in 0..config.logger.nodes {
            let name = format!("logger-{}", i + 1);
            let ep = eps.make(&name);
            let mut lc = LoggerConfig::new(&name, &ep, output.clone(), config.run.number);
            lc.streams = config.logger.streams.clone();
            lc.max_file_bytes = config.logger.max_file_mib << 20;
            lc.compress = config.logger.compression == CompressionName::Zstd;
            loggers.push(lc);
        }
        // ROB ids: (subdetector << 16) | module, modules counting across nodes.
        let mut nodes = Vec::new();
        let mut readout = Vec::new();
        let mut all_robs = Vec::new();
        for i in 0..config.ros.nodes {
            let name = format!("ros-{}", i + 1);
            let ep = eps.make(&name);
            let nc = NodeConfig {
                channels: config.ros.channels,
                fragment_words: config.ros.fragment_words,
                base_source_id: (u32::from(config.ros.subdetector) << 16)
                    | (i * config.ros.channels) as u32,
                l1id_wrap: config.l1.l1id_wrap,
                input: match config.ros.input {
                    RosInput::Dma => NodeInput::Dma { rate_hz: None },
                    RosInput::Swrod => NodeInput::SwRod {
                        elinks: config.ros.elinks,
                        rate_hz: None,
                    },
                },
                ..NodeConfig::default()
            };
            all_robs.extend(nc.robs());
            readout.push(DcmReadout {
                endpoint: ep.clone(),
                robs: nc.robs(),
            });
            nodes.push((name, ep, nc));
        }
        let sup_ep = eps.make("supervisor");
        let logger_endpoints: Vec<String> = loggers.iter().map(|l| l.endpoint.clone()).collect();
        let dcms = (0..config.dcm.nodes)
            .map(|i| {
                let name = format!("dcm-{}", i + 1);
                let mut dc = DcmConfig::new(
                    &name,
                    &sup_ep,
                    readout.clone(),
                    logger_endpoints.clone(),
                    config.dcm.slots,
                );
                dc.max_outstanding = config.dcm.max_outstanding;
                dc.checksum = match config.dcm.checksum {
                    ChecksumName::None => ChecksumType::None,
                    ChecksumName::Crc16 => ChecksumType::Crc16,
                    ChecksumName::Adler32 => ChecksumType::Adler32,
                };
                dc.run_number = config.run.number;
                dc.streams = config.logger.streams.clone();
                dc
            })
            .collect();
        let mut sc = SupervisorConfig::new(
            "supervisor",
            &sup_ep,
            readout.iter().map(|r| r.endpoint.clone()).collect(),
        );
        sc.l1 = L1SourceConfig {
            rate_hz: (config.l1.rate_hz > 0.0).then_some(config.l1.rate_hz),
            events: (config.run.events > 0).then_some(config.run.events),
            roi_robs: all_robs,
            rois_per_event: (config.l1.rois_per_event[0], config.l1.rois_per_event[1]),
            l1id_wrap: config.l1.l1id_wrap,
            seed: config.l1.seed,
            ..L1SourceConfig::default()
        };
        sc.roib = (config.l1.mode == L1Mode::Roib).then(|| RoibConfig {
            inputs: config.l1.roib_inputs,
            timeout: Duration::from_millis(config.l1.roib_timeout_ms),
            ..RoibConfig::default()
        });
        sc.event_timeout = Duration::from_millis(config.supervisor.event_timeout_ms);
        sc.dcm_timeout = Duration::from_millis(config.supervisor.dcm_timeout_ms);
        sc.clear_group = config.supervisor.clear_group;
        let trigger = AcceptFraction {
            fraction: config.dcm.accept_fraction,
            stream: 0,
            time: if config.dcm.processing_us > 0.0 {
                TimeDistribution::Exponential(Duration::from_secs_f64(
                    config.dcm.processing_us * 1e-6,
                ))
            } else {
                TimeDistribution::Zero
            },
        };
        Layout {
            output,
            loggers,
            nodes,
            dcms,
            supervisor: sc,
            trigger,
        }
    }
}

/// Runs the partition of `config` to its end (event count or seconds) in this process,
/// calling `tick` about every 200 ms with the live counters and elapsed seconds: an
/// [`EmbeddedPartition`](crate::embedded::EmbeddedPartition) driven up to RUNNING and down
/// again (see there for the order).
pub fn run_embedded(
    config: &PartitionConfig,
    tick: impl FnMut(&LiveCounters, f64),
) -> Result<RunSummary, PartitionError> {
    let p = crate::embedded::EmbeddedPartition::new(config.clone(), None);
    Ok(p.run(tick)?)
}

/// Fills [`RunSummary::problems`] with every imbalance of rule 6.
pub fn check_balance(s: &mut RunSummary, undecided: u64) {
    let decided = s.accepted + s.rejected + s.forced_accepts;
    if undecided > 0 {
        s.problems.push(format!(
            "{undecided} events were still undecided when the supervisor stopped"
        ));
    }
    if decided != s.l1_accepts {
        s.problems.push(format!(
            "L1 accepts {} != accepted {} + rejected {} + forced {} = {decided}",
            s.l1_accepts, s.accepted, s.rejected, s.forced_accepts
        ));
    }
    if s.events_written != s.accepted + s.forced_accepts {
        s.problems.push(format!(
            "events written {} != accepted {} + forced {}",
            s.events_written, s.accepted, s.forced_accepts
        ));
    }
    for n in &s.nodes {
        if n.cleared != s.l1_accepts {
            s.problems.push(format!(
                "{} received clears for {} events, expected {}",
                n.name, n.cleared, s.l1_accepts
            ));
        }
        if let Some(e) = &n.swrod_error {
            s.problems
                .push(format!("{}: SW ROD fragment builder failed: {e}", n.name));
        }
        if n.clear_gaps != 0 {
            s.problems.push(format!(
                "{} saw {} gaps in the clear sequence",
                n.name, n.clear_gaps
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn balanced_summary() -> RunSummary {
        RunSummary {
            l1_accepts: 10,
            accepted: 4,
            rejected: 6,
            events_written: 4,
            nodes: vec![NodeSummary {
                name: "ros-1".into(),
                cleared: 10,
                ..NodeSummary::default()
            }],
            ..RunSummary::default()
        }
    }

    #[test]
    fn a_builder_error_at_the_stop_is_a_problem_of_the_run() {
        let mut s = balanced_summary();
        check_balance(&mut s, 0);
        assert!(s.balanced(), "{:?}", s.problems);

        let mut s = balanced_summary();
        s.nodes[0].swrod_error = Some("builder 2 panicked".into());
        check_balance(&mut s, 0);
        assert!(!s.balanced());
        assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
        assert!(
            s.problems[0].contains("ros-1") && s.problems[0].contains("builder 2 panicked"),
            "{:?}",
            s.problems
        );
    }

    #[test]
    fn the_layout_feeds_the_nodes_as_configured() {
        let mut c = PartitionConfig::default();
        let dma = Layout::new(&c);
        assert!(matches!(dma.nodes[0].2.input, NodeInput::Dma { .. }));
        c.ros.input = RosInput::Swrod;
        c.ros.elinks = 7;
        let sw = Layout::new(&c);
        assert!(sw.nodes.iter().all(|(_, _, nc)| matches!(
            nc.input,
            NodeInput::SwRod {
                elinks: 7,
                rate_hz: None
            }
        )));
    }
}
