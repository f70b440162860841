//! The partition's layout: every application of a [`PartitionConfig`], named, with its
//! endpoint and its configuration, derived from the configuration alone so that the embedded
//! partition and every `rodeo app` process agree; and the [`Role`] each application has.
//!
//! # Order
//!
//! [`Layout::app_order`]: loggers, readout nodes, DCMs, supervisor (which owns the L1 source).
//! Upward commands go in that order, so nothing sends to an application that is not there yet;
//! downward ones in the reverse order: the supervisor first (no new events, every assigned
//! event decided, the last clears sent), so the dataflow drains before anything stops.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use rodeo_dataflow::dcm::{DcmConfig, ReadoutPeer};
use rodeo_dataflow::l1source::L1SourceConfig;
use rodeo_dataflow::l1source::ReadoutFeed;
use rodeo_dataflow::logger::{FileFormat, LoggerCompression, LoggerConfig};
use rodeo_dataflow::roib::RoibConfig;
use rodeo_dataflow::supervisor::SupervisorConfig;
use rodeo_dataflow::trigger::{AcceptFraction, TimeDistribution};
use rodeo_files::replay::L1idMode;
use rodeo_format::checksum::ChecksumType;
use rodeo_ros::inputs::{FileInput, NetworkInput};
use rodeo_ros::node::{NodeConfig, NodeInput, ReplayInput};

use crate::config::{
    ChecksumName, CompressionName, CpuPlan, FormatName, L1Mode, PartitionConfig, ReplayL1id,
    RosInput, TransportKind,
};

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
            // The runtime directory's name (`rodeo-<hash of output dir and run>`) makes the
            // shared-memory services unique to the partition and run.
            TransportKind::Shm => format!(
                "shm://{}/{name}",
                self.ipc_dir
                    .file_name()
                    .map_or_else(|| "rodeo".into(), |n| n.to_string_lossy())
            ),
            TransportKind::Tcp | TransportKind::Stream => {
                let p = self.next_port;
                self.next_port = self.next_port.wrapping_add(1);
                // An application placed on another host binds that host's address.
                let host = self.hosts.get(name).unwrap_or(&self.host);
                let scheme = if self.kind == TransportKind::Tcp {
                    "tcp"
                } else {
                    "stream"
                };
                format!("{scheme}://{host}:{p}")
            }
        }
    }
}

/// The runtime directory of the run whose output directory is `output`: `rodeo-<hash>` under
/// the system's temporary directory, the hash (64-bit FNV-1a) taken over the output path
/// resolved on this host ([`resolve_path`](crate::config::resolve_path): absolute, links and
/// `..` resolved), so that the applications of one run agree without talking, and two runs
/// share it only when they share an output directory, which its lock refuses. Over the path as
/// written, two partitions with the default relative `rodeo-output` in two working
/// directories shared one, and the first to end removed the other's sockets (a QA pass).
fn runtime_dir(output: &std::path::Path) -> PathBuf {
    let output = crate::config::resolve_path(output);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in output.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    std::env::temp_dir().join(format!("rodeo-{h:016x}"))
}

/// Node `node`'s share of a per-ROB list (`channels` entries from `node * channels`).
fn per_node(list: &[String], node: usize, channels: usize) -> Vec<String> {
    list.iter()
        .skip(node * channels)
        .take(channels)
        .cloned()
        .collect()
}

/// Every application of a partition, named and configured: what the embedded runner starts as
/// threads and what `rodeo app` starts one per process. Derived from the configuration alone,
/// so every process computes the same endpoints.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The run's output directory (`<output>/run-<number>`): data files, `partition.toml`,
    /// `summary.json`; nothing that lives only while the run does.
    pub output: PathBuf,
    /// The run's runtime directory: the ipc endpoints' socket files, made by
    /// [`Layout::make_runtime_dir`] when an application is configured and removed by
    /// [`Layout::remove_runtime_dir`] at the end of the run. Under the system's temporary
    /// directory, named after the output directory and the run number, so every process of the
    /// run derives the same one (and socket paths stay short: ipc paths are limited to 107 bytes).
    pub runtime: PathBuf,
    /// The transport kind of the endpoints.
    pub transport: TransportKind,
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
    /// A replay that keeps its files' L1IDs: the files whose L1IDs the supervisor's L1 source
    /// issues, in order (read when the supervisor is configured); empty otherwise.
    pub replay_l1id_files: Vec<PathBuf>,
    /// With `run.cpu_plan = "auto"`: the CPUs every thread of the partition but the readout
    /// nodes' core threads runs on (each node's `core_cpu` is its own CPU). `None`: no plan.
    pub shared_cpus: Option<Vec<usize>>,
}

/// The CPU plan for `nodes` readout nodes on a host whose process may use `cpus` (increasing):
/// per node the CPU of its core thread (the last ones), and the CPUs left for every other
/// thread; `None` when no CPU would be left.
pub fn cpu_plan(cpus: &[usize], nodes: usize) -> Option<(Vec<usize>, Vec<usize>)> {
    if nodes == 0 || cpus.len() <= nodes {
        return None;
    }
    let (shared, cores) = cpus.split_at(cpus.len() - nodes);
    Some((cores.iter().rev().copied().collect(), shared.to_vec()))
}

/// `run.cpu_plan` of `config` on this host ([`cpu_plan`] over the process's CPUs): per readout
/// node its core thread's CPU, and the CPUs of every other thread. One host's partition only
/// (the plan counts this host's readout nodes); not with the SW ROD input, whose builder threads
/// (one per CPU) want every CPU.
pub fn partition_cpu_plan(config: &PartitionConfig) -> Option<(Vec<usize>, Vec<usize>)> {
    (config.run.cpu_plan == CpuPlan::Auto
        && config.hosts.is_empty()
        && config.ros.input != RosInput::Swrod)
        .then(|| cpu_plan(rodeo_memory::cpu::process_cpus(), config.ros.nodes))
        .flatten()
}

impl Layout {
    /// For an application restarted into a running run at event `events` (the L1 accepts so
    /// far): every readout node's emulated inputs start there, so the node rejoins at the
    /// current L1ID (requests for older events are then answered FRAGMENT_LOST, their clears
    /// counted as unknown).
    pub fn rejoin_at(&mut self, events: u64) {
        for (_, _, nc) in &mut self.nodes {
            nc.first_event = events;
        }
    }

    /// Every endpoint the partition binds, with the application that binds it: loggers,
    /// readout nodes, the supervisor (DCMs only connect).
    pub fn endpoints(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = Vec::new();
        v.extend(
            self.loggers
                .iter()
                .map(|l| (l.name.clone(), l.endpoint.clone())),
        );
        v.extend(self.nodes.iter().map(|(n, ep, _)| (n.clone(), ep.clone())));
        v.push((
            self.supervisor.name.clone(),
            self.supervisor.endpoint.clone(),
        ));
        v
    }

    /// Every application's name and role, in dependency order (module docs).
    pub fn app_order(&self) -> Vec<(String, Role)> {
        let mut v: Vec<(String, Role)> = Vec::new();
        v.extend(self.loggers.iter().map(|l| (l.name.clone(), Role::Logger)));
        v.extend(self.nodes.iter().map(|(n, ..)| (n.clone(), Role::Ros)));
        v.extend(self.dcms.iter().map(|d| (d.name.clone(), Role::Dcm)));
        v.push((self.supervisor.name.clone(), Role::Supervisor));
        v
    }

    /// Makes the runtime directory when the endpoints need one (ipc); idempotent, so every
    /// application of the run may call it.
    pub fn make_runtime_dir(&self) -> std::io::Result<()> {
        if self.transport != TransportKind::Ipc {
            return Ok(());
        }
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.runtime)
    }

    /// Removes the runtime directory and its socket files (the run has ended); a directory
    /// already gone is not an error.
    pub fn remove_runtime_dir(&self) -> std::io::Result<()> {
        match std::fs::remove_dir_all(&self.runtime) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The layout of `config`.
    pub fn new(config: &PartitionConfig) -> Layout {
        let output =
            PathBuf::from(&config.run.output).join(format!("run-{:08}", config.run.number));
        let runtime = runtime_dir(&output);
        // `[transport] max_message_bytes`, or per socket what this partition can send it.
        let limits = config.message_limits();
        let mut eps = Endpoints {
            kind: config.transport.kind,
            host: config.transport.host.clone(),
            hosts: config.hosts.clone(),
            next_port: config.transport.base_port,
            ipc_dir: runtime.clone(),
        };
        let mut loggers = Vec::new();
        for i in 0..config.logger.nodes {
            let name = format!("logger-{}", i + 1);
            let ep = eps.make(&name);
            // `[logger] directories`: files go to <directory>/run-NNNNNNNN/, in order.
            let mut dirs = config
                .logger
                .directories
                .iter()
                .map(|d| PathBuf::from(d).join(format!("run-{:08}", config.run.number)));
            let first = dirs.next().unwrap_or_else(|| output.clone());
            let mut lc = LoggerConfig::new(&name, &ep, first, config.run.number);
            lc.more_directories = dirs.collect();
            lc.margin = rodeo_dataflow::disks::DiskMargin {
                min_free_bytes: config.logger.min_free_bytes,
                min_free_fraction: config.logger.min_free_fraction,
            };
            lc.streams = config.logger.streams.clone();
            lc.max_file_bytes = config.logger.max_file_mib << 20;
            lc.high_water_mark = config.transport.high_water_mark;
            lc.max_message_bytes = Some(limits.logger);
            lc.format = match config.logger.format {
                FormatName::Rodeo => FileFormat::Rodeo,
                FormatName::Eventstorage => FileFormat::EventStorage,
            };
            lc.compression = match config.logger.compression {
                CompressionName::None => LoggerCompression::None,
                CompressionName::Zstd => LoggerCompression::Zstd,
                CompressionName::Zlib => LoggerCompression::Zlib,
            };
            lc.project = config.logger.project.clone();
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
                pages_per_channel: config.ros.pages_per_channel,
                base_source_id: (u32::from(config.ros.subdetector) << 16)
                    | (i * config.ros.channels) as u32,
                l1id_wrap: config.l1.l1id_wrap,
                input: match config.ros.input {
                    RosInput::Dma if config.dma_into_pages() => {
                        NodeInput::DmaPages { rate_hz: None }
                    }
                    RosInput::Dma => NodeInput::Dma { rate_hz: None },
                    RosInput::Swrod => NodeInput::SwRod {
                        elinks: config.ros.elinks,
                        rate_hz: None,
                        // One per core, shared by the node's ROBs.
                        threads: 0,
                    },
                    RosInput::Replay => NodeInput::Replay(ReplayInput {
                        files: config.ros.replay_files.iter().map(PathBuf::from).collect(),
                        rate_hz: (config.ros.replay_rate_hz > 0.0)
                            .then_some(config.ros.replay_rate_hz),
                        looping: config.ros.replay_loop,
                        l1id: match config.ros.replay_l1id {
                            ReplayL1id::Keep => L1idMode::Keep,
                            ReplayL1id::Renumber => L1idMode::Renumber,
                        },
                        source_map: config
                            .ros
                            .replay_source_map
                            .iter()
                            .map(|[a, b]| (*a, *b))
                            .collect(),
                    }),
                    RosInput::Network => NodeInput::Network(NetworkInput {
                        listen: per_node(&config.ros.listen, i, config.ros.channels),
                        framing: config.ros.listen_framing,
                        crc: config.ros.listen_crc,
                        end_with_sender: config.ros.listen_end_on_close,
                    }),
                    RosInput::File => NodeInput::Files(FileInput {
                        files: per_node(&config.ros.link_files, i, config.ros.channels)
                            .into_iter()
                            .map(PathBuf::from)
                            .collect(),
                        looping: config.ros.link_loop,
                    }),
                },
                // What this partition's clients can send (a DataRequest for every channel, a
                // Clear of one group) with a margin, or the configured limit. Anything larger
                // is refused before it is buffered.
                max_message_bytes: Some(limits.ros),
                high_water_mark: config.ros.high_water_mark,
                // 0 (or a value the checks refuse): never judged silent.
                input_silence: Duration::try_from_secs_f64(config.ros.input_silence_seconds)
                    .ok()
                    .filter(|d| !d.is_zero()),
                // Every DCM's requests in flight may wait here at once (a request beyond the
                // descriptors that would wait is answered PENDING, `rodeo_ros::server`).
                descriptors: config.node_descriptors(),
                ..NodeConfig::default()
            };
            all_robs.extend(nc.robs());
            readout.push(ReadoutPeer {
                endpoint: ep.clone(),
                robs: nc.robs(),
            });
            nodes.push((name, ep, nc));
        }
        // Every event written carries every ROB, or the partial flag (the loggers check).
        for lc in &mut loggers {
            lc.expected_robs = all_robs.len();
            lc.free_strings = config.run.words().free_strings();
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
                dc.high_water_mark = config.transport.high_water_mark;
                dc.max_message_bytes = Some(limits.dcm);
                dc.checksum = match config.dcm.checksum {
                    ChecksumName::None => ChecksumType::None,
                    ChecksumName::Crc16 => ChecksumType::Crc16,
                    ChecksumName::Adler32 => ChecksumType::Adler32,
                };
                dc.run_number = config.run.number;
                dc.streams = config.logger.streams.clone();
                // rodeo's zstd events are compressed in the DCMs, in parallel; the logger
                // writes them as they come (it compresses only what arrives uncompressed).
                dc.compress = config.logger.format == FormatName::Rodeo
                    && config.logger.compression == CompressionName::Zstd;
                dc.compress_level = config.logger.zstd_level;
                dc.sample = config.monitoring.sample_config();
                dc
            })
            .collect();
        let mut sc = SupervisorConfig::new(
            "supervisor",
            &sup_ep,
            readout.iter().map(|r| r.endpoint.clone()).collect(),
        );
        sc.high_water_mark = config.transport.high_water_mark;
        sc.max_message_bytes = Some(limits.supervisor);
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
        if config.l1.mode == L1Mode::External {
            sc.external = Some(config.l1.external_listen.clone());
            sc.l1.rate_hz = None;
        }
        if config.l1.mode == L1Mode::Readout {
            // The nodes' progress is added when the supervisor starts, in their process.
            sc.readout = Some(ReadoutFeed::default());
            sc.l1.rate_hz = None;
        }
        sc.event_timeout = Duration::from_millis(config.supervisor.event_timeout_ms);
        sc.dcm_timeout = Duration::from_millis(config.supervisor.dcm_timeout_ms);
        sc.clear_group = config.supervisor.clear_group;
        sc.start_timeout = Duration::from_millis(config.supervisor.start_timeout_ms);
        let trigger = AcceptFraction {
            fraction: config.dcm.accept_fraction,
            stream: 0,
            shares: config.dcm.stream_shares.clone(),
            time: if config.dcm.processing_us > 0.0 {
                TimeDistribution::Exponential(Duration::from_secs_f64(
                    config.dcm.processing_us * 1e-6,
                ))
            } else {
                TimeDistribution::Zero
            },
        };
        let replay_l1id_files =
            if config.ros.input == RosInput::Replay && config.ros.replay_l1id == ReplayL1id::Keep {
                config.ros.replay_files.iter().map(PathBuf::from).collect()
            } else {
                Vec::new()
            };
        let shared_cpus = partition_cpu_plan(config).map(|(cores, shared)| {
            for ((_, _, nc), core) in nodes.iter_mut().zip(cores) {
                nc.core_cpu = Some(core);
            }
            shared
        });
        Layout {
            output,
            runtime,
            transport: config.transport.kind,
            loggers,
            nodes,
            dcms,
            supervisor: sc,
            trigger,
            replay_l1id_files,
            shared_cpus,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// The runtime directory follows the output directory as resolved, not as written: a
    /// relative path and the same path made absolute, or named through a symbolic link, give
    /// one; two output directories give two.
    #[test]
    fn the_runtime_directory_is_keyed_on_the_resolved_output_directory() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let of = |p: PathBuf| super::runtime_dir(&p);
        assert_eq!(
            of(real.join("run-00000001")),
            of(dir.path().join("link/run-00000001"))
        );
        assert_eq!(
            of(real.join("run-00000001")),
            of(dir.path().join("real/../real/./run-00000001"))
        );
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            of(PathBuf::from("rodeo-output/run-00000001")),
            of(cwd.join("rodeo-output/run-00000001"))
        );
        assert_ne!(
            of(real.join("run-00000001")),
            of(dir.path().join("other/run-00000001"))
        );
    }

    /// The plan's split: the last CPUs to the nodes' core threads, the rest shared; none when
    /// nothing would be left.
    #[test]
    fn the_cpu_plan_keeps_a_cpu_for_the_rest() {
        assert_eq!(super::cpu_plan(&[0, 1], 1), Some((vec![1], vec![0])));
        assert_eq!(
            super::cpu_plan(&[0, 2, 5, 7], 2),
            Some((vec![7, 5], vec![0, 2]))
        );
        assert_eq!(super::cpu_plan(&[0, 1], 2), None);
        assert_eq!(super::cpu_plan(&[3], 1), None);
        assert_eq!(super::cpu_plan(&[0, 1], 0), None);
    }

    /// The layout carries the plan: with "auto" on a host of two CPUs or more the node's core
    /// CPU is the last and the others share the rest; "off", the SW ROD input and a partition
    /// over hosts carry none.
    #[test]
    fn the_layout_carries_the_cpu_plan_only_where_it_applies() {
        use crate::config::{CpuPlan, PartitionConfig, RosInput};
        let cpus = rodeo_memory::cpu::process_cpus();
        let c = PartitionConfig::default();
        assert_eq!(c.run.cpu_plan, CpuPlan::Auto);
        let l = super::Layout::new(&c);
        if cpus.len() >= 2 {
            assert_eq!(l.nodes[0].2.core_cpu, cpus.last().copied());
            assert_eq!(l.shared_cpus.as_deref(), Some(&cpus[..cpus.len() - 1]));
        } else {
            assert_eq!((l.nodes[0].2.core_cpu, l.shared_cpus), (None, None));
        }
        let mut off = c.clone();
        off.run.cpu_plan = CpuPlan::Off;
        let mut swrod = c.clone();
        swrod.ros.input = RosInput::Swrod;
        let mut hosts = c.clone();
        hosts.hosts.insert("dcm-1".into(), "10.0.0.2".into());
        for other in [off, swrod, hosts] {
            let l = super::Layout::new(&other);
            assert_eq!((l.nodes[0].2.core_cpu, l.shared_cpus), (None, None));
        }
    }

    use super::*;
    use crate::config::DmaInto;

    #[test]
    fn every_socket_gets_a_limit_that_holds_its_largest_message() {
        use rodeo_transport::message::{clear_bytes, data_request_bytes};
        let mut c = PartitionConfig::default();
        let l = Layout::new(&c);
        let big = c.largest_messages();
        // A full event: every ROB of every node, 200 data words each, with headers.
        let robs = c.ros.nodes * c.ros.channels;
        assert!(big.logger > robs * 200 * 4, "{big:?}");
        assert!(big.ros >= clear_bytes(c.supervisor.clear_group));
        assert!(big.ros >= data_request_bytes(c.ros.channels));
        assert!(l.loggers[0].max_message_bytes.unwrap() >= 2 * big.logger);
        assert!(l.nodes[0].2.max_message_bytes.unwrap() >= 2 * big.ros);
        assert!(l.dcms[0].max_message_bytes.unwrap() >= 2 * big.dcm);
        assert!(l.supervisor.max_message_bytes.unwrap() >= 2 * big.supervisor);
        // Set: one value for every socket.
        c.transport.max_message_bytes = 8 << 20;
        let l = Layout::new(&c);
        assert_eq!(l.loggers[0].max_message_bytes, Some(8 << 20));
        assert_eq!(l.dcms[1].max_message_bytes, Some(8 << 20));
        assert_eq!(c.control_message_limit(1 << 20), 1 << 20);
        c.transport.max_message_bytes = 512 << 10;
        assert_eq!(c.control_message_limit(1 << 20), 512 << 10);
    }

    #[test]
    fn the_layout_feeds_the_nodes_as_configured() {
        let mut c = PartitionConfig::default();
        // The default fragments fill a store page: the cards write into the store's pages.
        let dma = Layout::new(&c);
        assert!(matches!(dma.nodes[0].2.input, NodeInput::DmaPages { .. }));
        c.ros.dma_into = DmaInto::Superpages;
        let dma = Layout::new(&c);
        assert!(matches!(dma.nodes[0].2.input, NodeInput::Dma { .. }));
        // 350 words fill 73% of a page: "auto" takes the superpages.
        c.ros.dma_into = DmaInto::Auto;
        c.ros.fragment_words = 350;
        let dma = Layout::new(&c);
        assert!(matches!(dma.nodes[0].2.input, NodeInput::Dma { .. }));
        c.ros.dma_into = DmaInto::Pages;
        c.ros.fragment_words = 400;
        let dma = Layout::new(&c);
        assert!(matches!(dma.nodes[0].2.input, NodeInput::DmaPages { .. }));
        c.ros.dma_into = DmaInto::Auto;
        c.ros.input = RosInput::Swrod;
        c.ros.elinks = 7;
        let sw = Layout::new(&c);
        assert!(sw.nodes.iter().all(|(_, _, nc)| matches!(
            nc.input,
            NodeInput::SwRod {
                elinks: 7,
                rate_hz: None,
                threads: 0,
            }
        )));
    }
}

/// An application's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A logger (SFO).
    Logger,
    /// A readout node (ROS).
    Ros,
    /// A data-collection node (DCM).
    Dcm,
    /// The supervisor with its L1 source.
    Supervisor,
}

impl Role {
    /// The role's name (`logger`, `ros`, `dcm`, `supervisor`).
    pub fn name(self) -> &'static str {
        match self {
            Role::Logger => "logger",
            Role::Ros => "ros",
            Role::Dcm => "dcm",
            Role::Supervisor => "supervisor",
        }
    }

    /// The role of an application name (`logger-1`, `ros-2`, `dcm-3`, `supervisor`).
    pub fn of_name(name: &str) -> Option<Role> {
        if name == "supervisor" {
            return Some(Role::Supervisor);
        }
        let (prefix, n) = name.rsplit_once('-')?;
        n.parse::<u32>().ok()?;
        prefix.parse().ok()
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "logger" => Ok(Role::Logger),
            "ros" => Ok(Role::Ros),
            "dcm" => Ok(Role::Dcm),
            "supervisor" => Ok(Role::Supervisor),
            _ => Err(format!(
                "unknown role {s:?}: expected logger, ros, dcm or supervisor"
            )),
        }
    }
}
