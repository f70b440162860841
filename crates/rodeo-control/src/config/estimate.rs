//! How much memory and how many threads a partition takes, application by application and
//! host by host ([`PartitionConfig::estimate`]), and the check of that against what the host
//! has ([`PartitionConfig::check_resources`]): a partition whose estimate exceeds the memory
//! the machine has available, or `run.memory_budget_bytes`, is refused with the estimate; one
//! with far more busy threads than cores is warned about, refused when absurd.
//!
//! What is counted, per application (the memory every one of them allocates and touches at
//! configure, or fills in the first seconds of a run):
//!
//! | application | memory | threads |
//! |---|---|---|
//! | readout node | store pages (`channels` x `ros.pages_per_channel` pages of 4 KiB), the input's superpages (DMA: 8 per channel of 64-256 KiB, as the fragment needs; replay: 8 x 256 KiB per channel; network and file: 8 x 128 KiB; SW ROD: 2 x 64 KiB and the builders' block pool, two windows of 512 blocks per ROB) | core thread; a card engine per 12 channels (DMA, replay), one per channel (network, file), one builder per core and the feed thread (SW ROD) |
//! | DCM | one event per slot (each slot's arena keeps the largest event it built), and the compression buffers | 1 |
//! | logger | a batch of 256 events waiting for the group commit, the four write buffers of each stream (4 MiB each: one fills while up to three wait for or are in the writer thread), the duplicate window (2 MiB) | 1 |
//! | supervisor | the events in flight | 1, and the RoI builder's inputs or the external trigger's reader |
//! | each process | its base (code, libraries, ZeroMQ), [`PROCESS_BASE_BYTES`]; with shared memory, the samples of 64 messages in flight per channel it reads or writes (replies of each readout node, events to a logger) | `transport.io_threads` ZeroMQ I/O threads with ipc and tcp (idle with inproc and shared memory) |
//! | the controller (`--processes`) | [`CONTROLLER_BYTES`] | |
//!
//! docs/configuration.md, "Configuration checks", compares the estimate with the RSS of real
//! runs.

use rodeo_dataflow::dedup::DEFAULT_WINDOW_IDS;
use rodeo_memory::machine::{cpus, MemInfo};
use rodeo_ros::node::CHANNELS_PER_CARD;

use super::error::{bad, ConfigError};
use super::readout::{
    StoreShape, DMA_SUPERPAGES_PER_CHANNEL, LINK_SUPERPAGES_PER_CHANNEL, LINK_SUPERPAGE_BYTES,
    REPLAY_SUPERPAGE_BYTES, SWROD_SUPERPAGES_PER_CHANNEL, SWROD_SUPERPAGE_BYTES, SWROD_WINDOW,
};
use super::ros::RosInput;
use super::{CompressionName, L1Mode, PartitionConfig, TransportKind};

/// The resident memory of a process before its application's own memory: code, libraries,
/// ZeroMQ's context, the allocator's arenas (measured: an idle `rodeo app` process).
pub const PROCESS_BASE_BYTES: u64 = 24 << 20;
/// Bytes per ROB fragment assumed for inputs whose fragments come from outside the
/// configuration (`replay`, `network`, `file`).
pub const OUTSIDE_FRAGMENT_BYTES: u64 = 1 << 10;
/// The controller's process (`rodeo run --processes`): its base, the control channel, the
/// status (measured: 18 MB).
pub const CONTROLLER_BYTES: u64 = 18 << 20;
/// Messages in flight per shared-memory channel whose samples a process touches: the DCMs'
/// requests in flight per readout node (`dcm.max_outstanding`, 64 by default) and as many
/// events towards a logger (each sample a power-of-two slice, `rodeo_transport::shm`).
const SHM_MESSAGES: u64 = 64;
/// Bytes the supervisor keeps per event in flight (assignment, deadline, RoIs), generously.
const SUPERVISOR_BYTES_PER_EVENT: u64 = 256;
/// Bytes of one request descriptor of a readout node besides its ROB ids (`node_estimate`).
const DESCRIPTOR_BYTES: u64 = 192;
/// Busy threads per core above which a host gets a warning.
pub const WARN_THREADS_PER_CORE: usize = 8;
/// Busy threads per core above which a partition is refused: far past any useful share of a
/// core, start-up alone (warming the memory) takes minutes and the run's rate is a fraction.
pub const MAX_THREADS_PER_CORE: usize = 64;

/// One application's share of the estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct AppEstimate {
    /// Its name (`ros-1`, `dcm-2`, ...).
    pub name: String,
    /// Its host (`None`: this host).
    pub host: Option<String>,
    /// What it allocates, by part (name, bytes); the process base included when it is a
    /// process of its own.
    pub parts: Vec<(&'static str, u64)>,
    /// Threads that work (not counting threads that only wait for commands).
    pub threads: usize,
}

impl AppEstimate {
    /// Its bytes, all parts together.
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|(_, b)| b).sum()
    }
}

/// A partition's estimate: every application, and whether they are processes of their own.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Every application, in the layout's order.
    pub apps: Vec<AppEstimate>,
    /// One process per application (any transport but inproc), or one for all.
    pub processes: bool,
    /// This host's process besides the applications: the embedded partition's one process
    /// (its base), or the controller (`rodeo run --processes`, `rodeo serve --processes`).
    pub shared: AppEstimate,
}

impl Estimate {
    /// The hosts, this host (`None`) first.
    pub fn hosts(&self) -> Vec<Option<String>> {
        let mut v: Vec<Option<String>> = vec![None];
        for a in &self.apps {
            if !v.contains(&a.host) {
                v.push(a.host.clone());
            }
        }
        v
    }

    /// The applications on `host`, and on this host the partition's or the controller's
    /// process.
    fn on<'a>(&'a self, host: &'a Option<String>) -> impl Iterator<Item = &'a AppEstimate> {
        let shared = host.is_none().then_some(&self.shared);
        self.apps
            .iter()
            .filter(move |a| &a.host == host)
            .chain(shared)
    }

    /// Bytes on `host` (`None`: this host).
    pub fn host_bytes(&self, host: &Option<String>) -> u64 {
        self.on(host).map(AppEstimate::bytes).sum()
    }

    /// Busy threads on `host`.
    pub fn host_threads(&self, host: &Option<String>) -> usize {
        self.on(host).map(|a| a.threads).sum()
    }

    /// Every part on `host`, summed over its applications by name, largest first
    /// (`store pages 805306368`, ...).
    pub fn host_parts(&self, host: &Option<String>) -> Vec<(&'static str, u64)> {
        let mut parts: Vec<(&'static str, u64)> = Vec::new();
        for (name, b) in self.on(host).flat_map(|a| a.parts.iter()) {
            match parts.iter_mut().find(|(n, _)| n == name) {
                Some(p) => p.1 += b,
                None => parts.push((name, *b)),
            }
        }
        parts.sort_by_key(|p| std::cmp::Reverse(p.1));
        parts
    }

    /// The largest process on `host` (an application, or the embedded partition's one).
    pub fn largest_process(&self, host: &Option<String>) -> (String, u64) {
        if host.is_none() && !self.processes {
            return ("the partition (one process)".into(), self.host_bytes(host));
        }
        self.on(host)
            .map(|a| (a.name.clone(), a.bytes()))
            .max_by_key(|(_, b)| *b)
            .unwrap_or_default()
    }

    /// `host`'s figures in one line: bytes, the largest parts, the largest process, threads.
    pub fn describe(&self, host: &Option<String>) -> String {
        let parts: Vec<String> = self
            .host_parts(host)
            .iter()
            .filter(|(_, b)| *b > 0)
            .take(4)
            .map(|(n, b)| format!("{n} {}", human(*b)))
            .collect();
        let (big, big_bytes) = self.largest_process(host);
        format!(
            "about {} ({}; largest process {big}: {}), {} busy threads",
            human(self.host_bytes(host)),
            parts.join(", "),
            human(big_bytes),
            self.host_threads(host)
        )
    }
}

/// `bytes` for people: `12.9 GB`, `88.0 MB`, `512 kB`.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.0} kB", b / 1e3)
    }
}

/// What this machine has: memory available and in total (`/proc/meminfo`), cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    /// `MemAvailable` (None: unknown).
    pub available_bytes: Option<u64>,
    /// `MemTotal` (None: unknown).
    pub total_bytes: Option<u64>,
    /// Cores this process may run on.
    pub cpus: usize,
    /// The memory limit of this process's cgroups (None: none), which in a container is lower
    /// than `MemTotal` and `MemAvailable` (the host's).
    pub cgroup_limit_bytes: Option<u64>,
}

impl Machine {
    /// This host, now.
    pub fn this_host() -> Machine {
        let m = MemInfo::read();
        Machine {
            available_bytes: m.available_bytes,
            total_bytes: m.total_bytes,
            cpus: cpus(),
            cgroup_limit_bytes: rodeo_memory::machine::cgroup_memory_limit(),
        }
    }
}

impl PartitionConfig {
    /// Bytes of one full event (every ROB of every node, headers included), and of what an
    /// event leaves in a DCM slot's arena.
    fn event_bytes(&self) -> (u64, u64) {
        let rob = self
            .stored_fragment_words()
            .map_or(OUTSIDE_FRAGMENT_BYTES, |w| 4 * w as u64);
        let robs = self.ros.robs() as u64;
        let event = 4 * 64 + robs * rob;
        // Rejected events bring only their RoIs; an accepted one fills the arena, and in a
        // long run every slot builds one.
        let arena = if self.dcm.accept_fraction > 0.0 {
            event
        } else {
            u64::from(self.l1.rois_per_event[1]).min(robs) * rob
        };
        (event, arena)
    }

    /// Request descriptors of each readout node: every DCM's requests in flight to it at once
    /// (one per processing slot at most, and at most `dcm.max_outstanding`), at least the
    /// node's default (1,024), at most 1,000,000 (`rodeo ros --descriptors`' range). Beyond
    /// its descriptors a node answers a request that would wait PENDING at once
    /// (`rodeo_ros::server`), so a partition never makes one.
    pub fn node_descriptors(&self) -> usize {
        let per_dcm = self.dcm.max_outstanding.min(self.dcm.slots.max(1));
        self.dcm.nodes.saturating_mul(per_dcm).clamp(
            rodeo_ros::node::NodeConfig::default().descriptors,
            1_000_000,
        )
    }

    /// The readout node's memory parts and threads.
    fn node_estimate(&self) -> (Vec<(&'static str, u64)>, usize) {
        let r = &self.ros;
        let ch = r.channels as u64;
        // Per descriptor: the struct, the peer's routing id (64 B), the ROB ids, its queue
        // entry, and the allocator's headers, generously.
        let descriptors = self.node_descriptors() as u64 * (DESCRIPTOR_BYTES + 4 * ch);
        let store = StoreShape::of_partition(&self.ros).channel_bytes() as u64 * ch;
        let cards = r.channels.div_ceil(CHANNELS_PER_CARD);
        let (superpages, blocks, input_threads) = match r.input {
            // The cards write into store pages (counted above).
            RosInput::Dma if self.dma_into_pages() => (0, 0, cards),
            RosInput::Dma => (
                ch * (DMA_SUPERPAGES_PER_CHANNEL * self.dma_superpage_bytes()) as u64,
                0,
                cards,
            ),
            RosInput::Replay => (
                ch * (DMA_SUPERPAGES_PER_CHANNEL * REPLAY_SUPERPAGE_BYTES) as u64,
                0,
                cards,
            ),
            RosInput::Network | RosInput::File => (
                ch * (LINK_SUPERPAGES_PER_CHANNEL * LINK_SUPERPAGE_BYTES) as u64,
                0,
                r.channels,
            ),
            RosInput::Swrod => (
                ch * (SWROD_SUPERPAGES_PER_CHANNEL * SWROD_SUPERPAGE_BYTES) as u64,
                ch * (2 * SWROD_WINDOW) as u64 * self.swrod_block_bytes().unwrap_or(0) as u64,
                // One builder per core (the layout's `threads: 0`) and the feed thread.
                cpus() + 1,
            ),
        };
        (
            vec![
                ("store pages", store),
                ("superpages", superpages),
                ("SW ROD blocks", blocks),
                ("request descriptors", descriptors),
            ],
            1 + input_threads,
        )
    }

    /// The estimate of every application (module docs).
    pub fn estimate(&self) -> Estimate {
        let processes = self.transport.kind != TransportKind::Inproc;
        let base = if processes { PROCESS_BASE_BYTES } else { 0 };
        // ZeroMQ's I/O threads work for ipc and tcp; with shared memory only the control
        // channel uses them.
        let io = match self.transport.kind {
            TransportKind::Ipc | TransportKind::Tcp => self.transport.io_threads as usize,
            // The stream transport does its I/O in the application's own threads.
            TransportKind::Inproc | TransportKind::Shm | TransportKind::Stream => 0,
        };
        let (event, arena) = self.event_bytes();
        let in_flight = self.events_in_flight() as u64;
        // Shared memory: the samples of the messages in flight, each a power-of-two slice,
        // touched by sender and receiver.
        let shm = |bytes: u64| {
            if self.transport.kind == TransportKind::Shm {
                SHM_MESSAGES * bytes.next_power_of_two()
            } else {
                0
            }
        };
        let reply = event.saturating_sub(4 * 64) / self.ros.nodes.max(1) as u64;
        let mut apps = Vec::new();
        for name in self.app_names() {
            let host = self.hosts.get(&name).cloned();
            let (mut parts, threads) = match name.split('-').next().unwrap_or("") {
                "ros" => {
                    let (mut parts, threads) = self.node_estimate();
                    parts.push(("shared-memory queues", self.dcm.nodes as u64 * shm(reply)));
                    (parts, threads)
                }
                "dcm" => {
                    let slots = self.dcm.slots as u64 * arena;
                    let compress = if self.logger.compression == CompressionName::Zstd {
                        2 * event
                    } else {
                        0
                    };
                    let queues = self.ros.nodes as u64 * shm(reply) + shm(event);
                    (
                        vec![
                            ("DCM event arenas", slots),
                            ("compression", compress),
                            ("shared-memory queues", queues),
                        ],
                        1,
                    )
                }
                "logger" => {
                    let batch = rodeo_dataflow::logger::LoggerConfig::new(
                        "logger",
                        "inproc://logger",
                        std::path::PathBuf::new(),
                        1,
                    )
                    .batch as u64;
                    let write =
                        rodeo_files::rawfile::RawFileConfig::new("", 1, "", "").buffer_bytes as u64;
                    (
                        vec![
                            ("logger batches", batch.min(in_flight.max(1)) * event),
                            (
                                "logger buffers",
                                // Per stream: one write buffer fills while the others wait
                                // for or are in `rodeo_files::rawfile`'s writer thread.
                                self.logger.streams.len() as u64
                                    * rodeo_files::rawfile::WRITE_BUFFERS_PER_FILE as u64
                                    * write
                                    + DEFAULT_WINDOW_IDS / 8,
                            ),
                        ],
                        1,
                    )
                }
                _ => {
                    let extra = match self.l1.mode {
                        L1Mode::Roib => self.l1.roib_inputs,
                        L1Mode::External => 1,
                        L1Mode::Emulator | L1Mode::Readout => 0,
                    };
                    (
                        vec![("events in flight", in_flight * SUPERVISOR_BYTES_PER_EVENT)],
                        1 + extra,
                    )
                }
            };
            parts.push(("process base", base));
            apps.push(AppEstimate {
                name,
                host,
                parts,
                threads: threads + io,
            });
        }
        let shared = if processes {
            AppEstimate {
                name: "controller".into(),
                host: None,
                parts: vec![("controller", CONTROLLER_BYTES)],
                threads: 0,
            }
        } else {
            AppEstimate {
                name: "partition".into(),
                host: None,
                parts: vec![("process base", PROCESS_BASE_BYTES)],
                threads: io,
            }
        };
        Estimate {
            apps,
            processes,
            shared,
        }
    }

    /// The estimate checked against this machine ([`Machine::this_host`]): see
    /// [`PartitionConfig::check_resources_on`].
    pub fn check_resources(&self) -> Result<Vec<String>, ConfigError> {
        self.check_resources_on(&Machine::this_host())
    }

    /// The estimate checked against `machine` (this host) and `run.memory_budget_bytes`
    /// (every host): an error when a host's memory exceeds the budget (0: this host's
    /// available memory) or when this host's busy threads exceed [`MAX_THREADS_PER_CORE`] per
    /// core; otherwise the warnings (threads above [`WARN_THREADS_PER_CORE`] per core, memory
    /// above half of what is available), one line each. Call it on a configuration that
    /// passed [`PartitionConfig::validate`].
    pub fn check_resources_on(&self, machine: &Machine) -> Result<Vec<String>, ConfigError> {
        let e = self.estimate();
        let mut warnings = Vec::new();
        let budget = self.run.memory_budget_bytes;
        for host in e.hosts() {
            let need = e.host_bytes(&host);
            let here = host.is_none();
            // What this host has at most: its memory, or its cgroups' limit when lower (a
            // budget above it was taken as it was: 51.6 GB passed on a 24 GiB host).
            let physical = match (machine.total_bytes, machine.cgroup_limit_bytes) {
                (Some(t), Some(c)) => Some(t.min(c)),
                (t, c) => t.or(c),
            }
            .filter(|_| here);
            let cgroup = match machine.cgroup_limit_bytes {
                Some(c) if here && machine.total_bytes.is_none_or(|t| c < t) => {
                    format!(", its memory cgroup's limit {}", human(c))
                }
                _ => String::new(),
            };
            let (limit, what) = match (budget, machine.available_bytes) {
                (1.., _) if physical.is_some_and(|p| p < budget) => {
                    let p = physical.unwrap_or(budget);
                    (
                        p,
                        format!(
                            "run.memory_budget_bytes = {budget} is more than this host has: {} \
                             (MemTotal {}{cgroup})",
                            human(p),
                            machine.total_bytes.map_or("?".into(), human)
                        ),
                    )
                }
                (1.., _) => (budget, format!("run.memory_budget_bytes = {budget}")),
                (0, Some(avail)) if here => {
                    let limit = machine.cgroup_limit_bytes.map_or(avail, |c| avail.min(c));
                    (
                        limit,
                        format!(
                            "this host has {} available (MemAvailable) of {} (MemTotal){cgroup}",
                            human(avail),
                            machine.total_bytes.map_or("?".into(), human)
                        ),
                    )
                }
                _ => continue,
            };
            let name = host.as_deref().unwrap_or("this host");
            if need > limit {
                let allowed = format!(
                    "the partition needs {} on {name}: {}; {what}. Make it smaller \
                     (ros.nodes, ros.channels, ros.fragment_words, dcm.slots, dcm.nodes), \
                     place applications on other hosts ([hosts]) or raise \
                     run.memory_budget_bytes",
                    human(need),
                    e.describe(&host)
                );
                return Err(bad("run.memory_budget_bytes", budget, allowed));
            }
            if need > limit / 2 {
                warnings.push(format!(
                    "memory: the partition needs {} on {name}, more than half of the limit \
                     ({what}): {}",
                    human(need),
                    e.describe(&host)
                ));
            }
        }
        let threads = e.host_threads(&None);
        let cores = machine.cpus.max(1);
        let busiest: Vec<String> = {
            let mut apps: Vec<&AppEstimate> = e.on(&None).filter(|a| a.threads > 0).collect();
            apps.sort_by_key(|a| std::cmp::Reverse(a.threads));
            apps.iter()
                .take(3)
                .map(|a| format!("{} {}", a.name, a.threads))
                .collect()
        };
        let parts = format!(
            "{threads} busy threads on this host's {cores} cores (most: {})",
            busiest.join(", ")
        );
        if threads > MAX_THREADS_PER_CORE * cores {
            return Err(bad(
                "ros.nodes",
                self.ros.nodes,
                format!(
                    "a partition this host can run: {parts}, more than {MAX_THREADS_PER_CORE} \
                     per core. Make it smaller (ros.nodes, ros.channels, dcm.nodes) or place \
                     applications on other hosts ([hosts])"
                ),
            ));
        }
        if threads > WARN_THREADS_PER_CORE * cores {
            warnings.push(format!(
                "threads: {parts}: more than {WARN_THREADS_PER_CORE} per core, the rate will \
                 be a fraction of what the partition can do"
            ));
        }
        warnings.extend(self.margin_warning());
        Ok(warnings)
    }

    /// A free-space margin too small for the loggers to see a full disk before the kernel
    /// does: what a run then leaves (2026-12-07, `min_free_bytes` 0 to 4 MiB on a 30-60 MiB
    /// disk: the open file unfinished, no `summary.json`, no record in the run database).
    fn margin_warning(&self) -> Option<String> {
        // The file writer's own buffer size, as the memory estimate above takes it.
        let buffer = rodeo_files::rawfile::RawFileConfig::new("", 1, "", "").buffer_bytes as u64;
        let l = &self.logger;
        let streams = (l.streams.len() as u64).max(1);
        let floor = (l.nodes as u64)
            .saturating_mul(rodeo_dataflow::disks::CHECK_EVERY_BYTES + buffer * streams)
            .saturating_add(buffer);
        (l.min_free_bytes < floor && l.min_free_fraction == 0.0).then(|| {
            format!(
                "disk: logger.min_free_bytes = {} is below {} ({} logger(s) x (the {} between \
                 free-space checks + {} of write buffers per stream) + room for the end \
                 records and the run's summary): the kernel's \"no space left\" may stop the \
                 writes first, leaving the open file unfinished and the run unrecorded",
                l.min_free_bytes,
                human(floor),
                l.nodes,
                human(rodeo_dataflow::disks::CHECK_EVERY_BYTES),
                human(buffer)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(avail_gb: u64, cpus: usize) -> Machine {
        Machine {
            available_bytes: Some(avail_gb << 30),
            total_bytes: Some(avail_gb << 30),
            cpus,
            cgroup_limit_bytes: None,
        }
    }

    /// The default margin (64 MiB) says nothing; one the kernel's ENOSPC would beat is
    /// warned of, naming the field and the floor.
    #[test]
    fn a_margin_below_the_checks_and_buffers_is_warned_of() {
        let mut c = PartitionConfig::default();
        assert_eq!(c.margin_warning(), None);
        c.logger.min_free_bytes = 4 << 20;
        let w = c.margin_warning().expect("a warning");
        assert!(
            w.contains("logger.min_free_bytes = 4194304") && w.contains("12.6 MB"),
            "{w}"
        );
        let warnings = c.check_resources_on(&machine(16, 2)).unwrap();
        assert!(
            warnings.iter().any(|x| x.starts_with("disk:")),
            "{warnings:?}"
        );
        c.logger.min_free_fraction = 0.1;
        assert_eq!(c.margin_warning(), None, "the fraction may set the margin");
    }

    #[test]
    fn the_default_partition_is_mostly_its_readout_nodes_store_and_superpages() {
        let c = PartitionConfig::default();
        let e = c.estimate();
        assert!(!e.processes);
        let here = e.host_bytes(&None);
        // 12 channels x 2 MiB of pages, 12 x 8 x 64 KiB of superpages (the default fragments'),
        // and the rest.
        let store = 12 * (2 << 20);
        let superpages = 12 * 8 * (64 << 10);
        assert_eq!(c.dma_superpage_bytes(), 64 << 10);
        assert!(here > store + superpages, "{here}");
        assert!(here < store + superpages + (64 << 20), "{here}");
        assert!(e.host_parts(&None).contains(&("store pages", store)));
        // Core thread, one card engine, two DCMs, the logger, the supervisor (inproc: ZeroMQ's
        // I/O thread idles).
        assert_eq!(e.host_threads(&None), 6);
        assert!(c.check_resources_on(&machine(16, 2)).unwrap().is_empty());
    }

    #[test]
    fn a_partition_beyond_the_memory_available_or_the_budget_is_refused_with_its_estimate() {
        let mut c = PartitionConfig::default();
        c.ros.nodes = 32;
        c.ros.channels = 64;
        c.ros.pages_per_channel = 1024;
        // The cards' superpages counted (with "auto" these fragments go into store pages).
        c.ros.dma_into = crate::config::DmaInto::Superpages;
        let e = c.estimate();
        // 2048 channels: 8 GiB of store pages and 1 GiB of superpages (64 KiB ones).
        assert!(e.host_bytes(&None) > 9 << 30, "{}", e.host_bytes(&None));
        let err = c
            .check_resources_on(&machine(8, 64))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("run.memory_budget_bytes")
                && err.contains("the partition needs 11.1 GB")
                && err.contains("store pages 8.6 GB")
                && err.contains("this host has 8.6 GB available"),
            "{err}"
        );
        // Within the machine, beyond a budget: refused naming it.
        c.run.memory_budget_bytes = 4 << 30;
        let err = c
            .check_resources_on(&machine(64, 64))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("run.memory_budget_bytes = 4294967296"),
            "{err}"
        );
        // Most of the machine: a warning.
        c.run.memory_budget_bytes = 0;
        let w = c.check_resources_on(&machine(20, 64)).unwrap();
        assert!(w.len() == 1 && w[0].starts_with("memory:"), "{w:?}");
        // A budget above the machine's memory does not raise it (51.6 GB passed on 24 GiB).
        c.run.memory_budget_bytes = 60_000_000_000;
        let err = c
            .check_resources_on(&machine(8, 64))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("run.memory_budget_bytes = 60000000000 is more than this host has"),
            "{err}"
        );
        c.check_resources_on(&machine(20, 64)).unwrap();
        // A memory cgroup's limit below the host's memory is the limit (a container).
        let boxed = Machine {
            cgroup_limit_bytes: Some(3 << 30),
            ..machine(20, 64)
        };
        for budget in [0, 60_000_000_000] {
            c.run.memory_budget_bytes = budget;
            let err = c.check_resources_on(&boxed).unwrap_err().to_string();
            assert!(
                err.contains("its memory cgroup's limit 3.2 GB"),
                "{budget}: {err}"
            );
        }
    }

    #[test]
    fn threads_far_beyond_the_cores_are_refused_and_beyond_them_warned_about() {
        let mut c = PartitionConfig::default();
        c.ros.nodes = 32;
        c.ros.channels = 64;
        // 32 nodes x (core + 6 card engines), 2 DCMs, logger, supervisor.
        assert_eq!(c.estimate().host_threads(&None), 228);
        let err = c
            .check_resources_on(&machine(64, 2))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("228 busy threads on this host's 2 cores"),
            "{err}"
        );
        // 8 nodes x (core + card engine), 2 DCMs, logger, supervisor: 20 on 2 cores.
        c.ros.nodes = 8;
        c.ros.channels = 12;
        let w = c.check_resources_on(&machine(64, 2)).unwrap();
        assert!(
            w.iter().any(|w| w.starts_with("threads: 20 busy threads")),
            "{w:?}"
        );
        c.ros.nodes = 4;
        assert!(c.check_resources_on(&machine(64, 2)).unwrap().is_empty());
    }

    #[test]
    fn processes_count_their_base_and_other_hosts_their_own_memory() {
        let mut c = PartitionConfig::default();
        c.transport.kind = TransportKind::Tcp;
        c.hosts.insert("dcm-2".into(), "10.0.0.2".into());
        let e = c.estimate();
        assert!(e.processes);
        assert_eq!(e.hosts(), vec![None, Some("10.0.0.2".into())]);
        let other = e.host_bytes(&Some("10.0.0.2".into()));
        assert!(other >= PROCESS_BASE_BYTES, "{other}");
        assert_eq!(e.largest_process(&None).0, "ros-1");
        // Other hosts are checked against a budget only.
        c.run.memory_budget_bytes = 64 << 20;
        let err = c
            .check_resources_on(&machine(64, 8))
            .unwrap_err()
            .to_string();
        assert!(err.contains("on this host"), "{err}");
        assert_eq!(human(12_900_000_000), "12.9 GB");
    }
}
