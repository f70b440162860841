//! The partition configuration: one TOML file describes a whole run.
//!
//! Every section and field has a default, so an empty file (or none) is the built-in default
//! partition: one ROS with 12 emulated S-LINK channels, a supervisor with its L1 emulator,
//! 2 DCMs x 256 slots with an accept-fraction trigger, one logger, over inproc endpoints.
//! [`DEFAULT_TOML`] is that configuration written out with comments (`rodeo config default`).
//!
//! Unknown fields are errors (`deny_unknown_fields`), and [`PartitionConfig::validate`] checks
//! every value against what is allowed; both name the field (`dcm.slots`), the value, and what
//! would be accepted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The default partition, with comments: what `rodeo config default` prints.
pub const DEFAULT_TOML: &str = r#"# rodeo partition configuration. Every field is optional: a missing one takes the value shown.

[run]
# Run number (in file names and event headers).
number = 1
# Stop after this many L1 accepts (0: no limit; then `seconds` must be set).
events = 100000
# Stop after this many seconds (0: no limit).
seconds = 0.0
# Output directory; files go to <output>/run-<number>/.
output = "rodeo-output"

[transport]
# Endpoints: "inproc" (one process), "shm" (processes on one host, shared memory: what
# `--processes` uses when this says "inproc"), "ipc" (ZeroMQ between processes on one host),
# "tcp" (hosts).
kind = "inproc"
# ZeroMQ I/O threads (ipc/tcp).
io_threads = 1
# First tcp port; applications take consecutive ports from here.
base_port = 47000
# Host for tcp endpoints.
host = "127.0.0.1"
# ZeroMQ high-water mark of the supervisor's, DCMs' and loggers' sockets: messages queued per
# peer and direction (1..=10000000). At the mark a message sent on a DEALER is policy "block"
# (waits, bounded by the 1 s send timeout, then counted and retried); one sent on a ROUTER is
# policy "drop_newest" (dropped at once and counted). docs/architecture.md, table of queues.
high_water_mark = 100000
# Largest message any data socket of the partition accepts, in bytes (0: derived per socket
# from this configuration with a margin: a full event for a logger, a DataRequest for every
# channel or a Clear of one group for a readout node, ...). A larger message is refused
# before it is buffered and counted (rodeo_oversized_messages_total); set, it must hold the
# partition's largest message (a full event), 65536..=4294967295. The control channel takes
# the smaller of this and 1 MiB. docs/run-control.md, "Hostile peers".
max_message_bytes = 0
# ZeroMQ CURVE on every tcp socket of the partition (data plane and control channel): only
# applications holding the partition's keys (made per partition, handed to the applications
# with their configuration) get in; refused peers are counted
# (rodeo_transport_auth_refused_total) and logged. Default: true when kind = "tcp", false
# otherwise (the control channel, always tcp, is then plain). docs/run-control.md, "Security".
# curve = true

[l1]
# "emulator": the L1 emulator in the supervisor; "roib": accepts assembled by L1ID from
# several emulated Level-1 inputs (RoI builder), with a timeout and flow control; "readout":
# data-driven, the L1 accepts are the L1IDs every channel of every readout node has received
# (counted from 0 in the readout's wrap order; a test beam without a central trigger). With
# "readout" the run also ends when the inputs end (ros.input = "network" over tcp, or "file"
# without link_loop), so run.events and run.seconds may both be 0; rate_hz is ignored;
# "external": L1 accepts (extended L1ID, trigger type) from a trigger unit over TCP on
# external_listen, the partition's busy state sent back (docs/test-beam.md); the run also ends
# when the trigger unit closes its connection.
mode = "emulator"
# mode = "external": where the trigger unit connects.
external_listen = "tcp://127.0.0.1:47900"
# RoIB mode: number of Level-1 inputs, and how long an incomplete event waits for the rest.
roib_inputs = 3
roib_timeout_ms = 100
# L1 accept rate in Hz (0: as fast as free slots allow).
rate_hz = 0.0
# Fewest and most RoIs per event.
rois_per_event = [1, 2]
# L1ID wrap value (the readout's, 2^24 by default).
l1id_wrap = 16777216
# Seed of the RoI choices.
seed = 1

[supervisor]
# An event not decided within this time is reassigned as a forced accept.
event_timeout_ms = 10000
# A DCM silent for this long is declared dead and its events reassigned.
dcm_timeout_ms = 3000
# L1IDs per clear message.
clear_group = 100

[ros]
# Readout nodes (ROS), each with channels (one ROB each), fed as `input` says.
nodes = 1
# Channels (ROBs) per node.
channels = 12
# Data words per ROD fragment.
fragment_words = 200
# Sub-detector id of the ROBs (0x41: LAr EM barrel A); module ids count from 0 per node.
subdetector = 0x41
# What feeds each ROB: "dma" (an emulated S-LINK card writing fragments into superpages),
# "swrod" (a SW ROD fragment builder per ROB, fed by an emulated FELIX card), "replay" (an
# emulated S-LINK card per ROB replaying the ROD fragments of raw-data files: rodeo's container
# or EventStorage v2-v6; docs/file-formats.md), "network" (real data: per ROB a UDP or TCP
# receiver, `listen`) or "file" (per ROB a link capture file, `link_files`).
input = "dma"
# E-links per ROB for input = "swrod" (1..=2048, checked for both inputs; with "swrod" at most
# fragment_words / 5, each E-link carrying at least one payload word per event).
elinks = 4
# input = "replay": the files, in order. The ROBs of each event go to the channel whose ROB id
# ((subdetector << 16) | module) is their source id, after replay_source_map.
replay_files = []
# Fragments per second per ROB (0: as fast as the store takes them).
replay_rate_hz = 0.0
# Start again after the last event (else set run.events to the files' event count at most).
replay_loop = false
# "renumber": L1IDs 0, 1, 2, ... in file order, as the L1 emulator issues them; "keep": the
# files' L1IDs, which the L1 source then issues in the same order.
replay_l1id = "renumber"
# Source ids renamed before they pick their channel: [[id in the file, ROB id here], ...].
replay_source_map = []
# input = "network": one address per ROB (ros.nodes x ros.channels, node by node), where a
# front-end (or `rodeo gen link --send`) sends its S-LINK fragments: "tcp://HOST:PORT" (records:
# u32 length in bytes, then the fragment padded to 4 bytes; back-pressure) or "udp://HOST:PORT"
# (one fragment per datagram; losses show as L1ID sequence errors). docs/test-beam.md.
listen = []
# What the network input carries: "slink" (ROD fragments, checked as the S-LINK inputs are).
listen_mode = "slink"
# The fragments are framed by the S-LINK control words / followed by a CRC16 word.
listen_framing = false
listen_crc = false
# tcp: a ROB's input ends when its sender closes the connection (else it waits for another).
listen_end_on_close = true
# input = "file": one S-LINK link capture file per ROB (`rodeo gen link --mode slink -o`),
# played once, or looping with link_loop = true.
link_files = []
link_loop = false
# ZeroMQ high-water mark of each readout node's request server (ROUTER), in messages per peer
# (1..=10000000): requests beyond it are held back in the peer (policy "block"), replies beyond
# it are dropped and counted (policy "drop_newest"; the client asks again at its timeout).
high_water_mark = 10000

[dcm]
# Data-collection nodes and processing slots per node. Slots are events in flight: each
# costs only its state (no thread), and many of them hide the wake-up latency of the
# messages, which is what limits a node on a small machine.
nodes = 2
slots = 256
# Fraction of events the built-in trigger accepts (deterministic per L1ID).
accept_fraction = 0.1
# How the built-in trigger shares the accepted events among logger.streams: one weight per
# stream, in order (e.g. [0.9, 0.1]: 90% physics, 10% calibration; by a hash of the L1ID).
# Empty: every accepted event goes to the first stream. Python/Rust triggers choose their own.
stream_shares = []
# Emulated processing time per event, mean in microseconds (exponential; 0: none).
processing_us = 0.0
# Checksum of built events: "none", "crc16" or "adler32".
checksum = "adler32"
# Most data requests in flight per readout node.
max_outstanding = 64

[logger]
# Loggers, and the streams they write.
nodes = 1
streams = ["physics_Main"]
# Rotate files at this size.
max_file_mib = 1024
# The files' container: "rodeo" (rodeo's own, a checksum per record; docs/file-formats.md) or
# "eventstorage" (ATLAS EventStorage version 5 with ATLAS file names, what offline software
# reads; stream names "<type>_<name>").
format = "rodeo"
# Compression: "none"; "zstd" with format = "rodeo" (event payloads, compression type 1; the
# header stays readable); "zlib" with format = "eventstorage" (data blocks, the ATLAS readers'
# codec). Other pairs are refused.
compression = "none"
# EventStorage project tag: the first part of the file names and the Project= free string.
project = "data_test"
# zstd level with compression = "zstd" (the DCMs compress, in parallel): 1 by measurement
# (docs/benchmarks.md); negative levels are faster, higher ones smaller and slower.
zstd_level = 1
# After the run, re-read every file completely (records, checksums, every event down to its
# RODs) as `rodeo verify` does. Off: the loggers' own check counts (each record's Adler-32
# computed as its bytes are written, the end record and size of each closed file read back).
verify_after = false
# Output directories ("disks", as the SFO's), used in order: each logger writes into
# <directory>/run-<number>/ of the first one with room, moves to the next when it is full, and
# when every one is full stops writing (back-pressure) and the run stops in order with a
# clear error (docs/run-control.md, "Disks"). Empty: run.output.
directories = []
# Room each output directory keeps free: the larger of these two (bytes, and a fraction of
# its file system). Free space is checked every 4 MiB written and at each file rotation.
min_free_bytes = 67108864
min_free_fraction = 0.0

[control]
# Serve the HTTP API, /metrics and the web page on this address during `rodeo run`
# (e.g. "127.0.0.1:8080"; "": off unless --http is given).
http = ""
# Bearer token that POST /api/command requires. The RODEO_TOKEN environment variable wins;
# with neither, every command over HTTP is refused (401).
token = ""
# Log levels per module, in tracing's filter syntax ("warn,rodeo_control=info");
# the RODEO_LOG environment variable wins.
log = "warn"
# With `rodeo run --trace FILE`: keep the time stamps of one event in this many.
trace_every = 100
# Process mode (`rodeo run --processes`): the controller listens for its applications on
# tcp://<address>:<a port the system picks>; with [hosts], an address the hosts can reach.
address = "127.0.0.1"
# Each application sends a heartbeat this often; one silent for `dead_after_ms` is dead.
heartbeat_ms = 250
dead_after_ms = 3000
# How long an application may take to say hello after it was spawned, and to run a command.
spawn_timeout_ms = 20000
command_timeout_ms = 60000
# Process mode: a readout node or logger that dies during a run is started again (after
# `restart_backoff_ms`), configured and started into the running run; at most
# `max_restarts_per_run` restarts per run, then a death puts the partition in ERROR as without
# restarts. A dead DCM is not restarted (the supervisor reassigns its events); the
# supervisor's death ends the run in order (docs/run-control.md, "Faults").
restart = true
max_restarts_per_run = 3
restart_backoff_ms = 500
# How applications on other hosts are started: this command and options, then the host, then
# `<remote_rodeo> app ROLE --name NAME --control ENDPOINT --exit-on-stdin-eof`.
ssh = ["ssh", "-o", "BatchMode=yes"]
remote_rodeo = "rodeo"

# Applications on other hosts (process mode; endpoints must then be tcp): name = "host".
# The host is both where ssh goes and the address the application's endpoint binds.
[hosts]
# "dcm-2" = "10.200.0.3"
"#;

pub use crate::config_error::ConfigError;

/// Whether `path` can take files: an existing directory this process may write in, or a path
/// whose nearest existing parent is one (made when used). `Err((path checked, what is wrong))`.
fn check_writable_dir(out: &std::path::Path) -> Result<(), (String, String)> {
    let mut at = out;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => {
                return probe_writable(at).map_err(|e| match e {
                    ConfigError::Output { path, reason } => (path, reason),
                    other => (at.display().to_string(), other.to_string()),
                })
            }
            Ok(_) => {
                return Err((
                    at.display().to_string(),
                    if at == out {
                        "exists and is not a directory".into()
                    } else {
                        "a parent of the output path is not a directory".into()
                    },
                ))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                at = match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => std::path::Path::new("."),
                };
            }
            Err(e) => return Err((at.display().to_string(), format!("cannot be read: {e}"))),
        }
    }
}

/// Creates and removes a probe file in `dir`: can this process write there?
fn probe_writable(dir: &std::path::Path) -> Result<(), ConfigError> {
    let probe = dir.join(format!(".rodeo-write-check-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(ConfigError::Output {
            path: dir.display().to_string(),
            reason: format!("is a directory this process cannot write in: {e}"),
        }),
    }
}

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

/// Transport kinds.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// In one process.
    Inproc,
    /// Unix-domain sockets between processes on one host.
    Ipc,
    /// TCP.
    Tcp,
    /// Shared memory (iceoryx2) between processes on one host: the default of `--processes`
    /// when every application runs on this host.
    Shm,
}

/// `[transport]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// Endpoint kind.
    pub kind: TransportKind,
    /// ZeroMQ I/O threads.
    pub io_threads: u32,
    /// First tcp port.
    pub base_port: u16,
    /// Host of tcp endpoints.
    pub host: String,
    /// ZeroMQ high-water mark of the supervisor's, DCMs' and loggers' sockets, in messages.
    pub high_water_mark: u32,
    /// Largest incoming message of every data socket, in bytes; 0: derived per socket
    /// ([`PartitionConfig::message_limits`]).
    pub max_message_bytes: u64,
    /// CURVE on every tcp socket of the partition; unset: on when `kind` is tcp
    /// ([`TransportConfig::curve_enabled`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curve: Option<bool>,
}

impl TransportConfig {
    /// Whether the partition's tcp sockets (data plane and control channel) authenticate with
    /// CURVE: `curve` if given, else true for `kind = "tcp"`.
    pub fn curve_enabled(&self) -> bool {
        self.curve.unwrap_or(self.kind == TransportKind::Tcp)
    }
}

/// The largest message each kind of data socket of a partition accepts, in bytes
/// ([`PartitionConfig::message_limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLimits {
    /// A logger's ROUTER: Event messages (a full event).
    pub logger: usize,
    /// A readout node's ROUTER: a DataRequest for every channel, a Clear of one group.
    pub ros: usize,
    /// The supervisor's sockets: Updates from the DCMs (credits and decisions).
    pub supervisor: usize,
    /// A DCM's sockets: a DataReply of a whole readout node, assignments, EventAcks.
    pub dcm: usize,
}

impl MessageLimits {
    /// The largest of the four.
    pub fn largest(&self) -> usize {
        self.logger.max(self.ros).max(self.supervisor).max(self.dcm)
    }
}

/// The smallest `transport.max_message_bytes` accepted (also the floor of a derived limit).
pub const MIN_MESSAGE_LIMIT: usize = 64 << 10;
/// Bytes assumed per ROB fragment when its size comes from outside the configuration (inputs
/// `replay`, `network`, `file`): 1 MiB, far above any detector's fragment.
pub const EXTERNAL_FRAGMENT_BYTES: usize = 1 << 20;

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            kind: TransportKind::Inproc,
            io_threads: 1,
            base_port: 47000,
            host: "127.0.0.1".into(),
            high_water_mark: rodeo_dataflow::DEFAULT_HIGH_WATER_MARK,
            max_message_bytes: 0,
            curve: None,
        }
    }
}

/// Where L1 accepts come from.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum L1Mode {
    /// The L1 emulator inside the supervisor.
    Emulator,
    /// The RoI builder over emulated Level-1 inputs.
    Roib,
    /// Data-driven: the L1IDs complete on every channel of the readout.
    Readout,
    /// From a trigger unit outside, over TCP.
    External,
}

/// `[l1]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct L1Config {
    /// Emulator, RoIB, readout or external.
    pub mode: L1Mode,
    /// [`L1Mode::External`]: the TCP address the trigger unit connects to.
    pub external_listen: String,
    /// RoIB inputs.
    pub roib_inputs: usize,
    /// RoIB assembly timeout.
    pub roib_timeout_ms: u64,
    /// Rate in Hz (0: unlimited).
    pub rate_hz: f64,
    /// Fewest and most RoIs.
    pub rois_per_event: [u32; 2],
    /// L1ID wrap.
    pub l1id_wrap: u32,
    /// Seed.
    pub seed: u64,
}

impl Default for L1Config {
    fn default() -> Self {
        L1Config {
            mode: L1Mode::Emulator,
            external_listen: "tcp://127.0.0.1:47900".into(),
            roib_inputs: 3,
            roib_timeout_ms: 100,
            rate_hz: 0.0,
            rois_per_event: [1, 2],
            l1id_wrap: 1 << 24,
            seed: 1,
        }
    }
}

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
}

impl Default for SupervisorSection {
    fn default() -> Self {
        SupervisorSection {
            event_timeout_ms: 10_000,
            dcm_timeout_ms: 3_000,
            clear_group: 100,
        }
    }
}

/// `[ros]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RosSection {
    /// Nodes.
    pub nodes: usize,
    /// Channels per node.
    pub channels: usize,
    /// Data words per fragment.
    pub fragment_words: u32,
    /// Sub-detector id.
    pub subdetector: u8,
    /// What feeds each ROB.
    pub input: RosInput,
    /// E-links per ROB for [`RosInput::Swrod`].
    pub elinks: usize,
    /// Files replayed by [`RosInput::Replay`].
    pub replay_files: Vec<String>,
    /// Replay rate per ROB (0: unpaced).
    pub replay_rate_hz: f64,
    /// Replay the files again after the last event.
    pub replay_loop: bool,
    /// L1IDs of the replay.
    pub replay_l1id: ReplayL1id,
    /// Source ids renamed for the replay: `[id in the file, ROB id here]`.
    pub replay_source_map: Vec<[u32; 2]>,
    /// [`RosInput::Network`]: one address per ROB (`udp://` or `tcp://HOST:PORT`).
    pub listen: Vec<String>,
    /// What the network input carries.
    pub listen_mode: ListenMode,
    /// Network S-LINK fragments are framed by control words.
    pub listen_framing: bool,
    /// Network S-LINK fragments carry a CRC word.
    pub listen_crc: bool,
    /// TCP: a ROB's input ends when its sender closes the connection.
    pub listen_end_on_close: bool,
    /// [`RosInput::File`]: one S-LINK link capture file per ROB.
    pub link_files: Vec<String>,
    /// Play the link files in a loop.
    pub link_loop: bool,
    /// ZeroMQ high-water mark of each readout node's request server, in messages.
    pub high_water_mark: u32,
}

/// `[ros] listen_mode`: the framing of a network input.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ListenMode {
    /// S-LINK ROD fragments.
    Slink,
    /// FELIX blocks of E-link packets.
    Felix,
}

/// `[ros] replay_l1id`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReplayL1id {
    /// The files' L1IDs.
    Keep,
    /// 0, 1, 2, ... in file order.
    Renumber,
}

impl Default for RosSection {
    fn default() -> Self {
        RosSection {
            nodes: 1,
            channels: 12,
            fragment_words: 200,
            subdetector: 0x41,
            input: RosInput::Dma,
            elinks: 4,
            replay_files: Vec::new(),
            replay_rate_hz: 0.0,
            replay_loop: false,
            replay_l1id: ReplayL1id::Renumber,
            replay_source_map: Vec::new(),
            listen: Vec::new(),
            listen_mode: ListenMode::Slink,
            listen_framing: false,
            listen_crc: false,
            listen_end_on_close: true,
            link_files: Vec::new(),
            link_loop: false,
            high_water_mark: 10_000,
        }
    }
}

/// What feeds a readout node's ROBs (`[ros] input`).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RosInput {
    /// Emulated S-LINK card threads writing fragments into superpages.
    Dma,
    /// Per ROB one SW ROD fragment builder fed by an emulated FELIX card.
    Swrod,
    /// Per ROB an emulated S-LINK card replaying raw-data files.
    Replay,
    /// Per ROB a network receiver (UDP or TCP) of S-LINK fragments.
    Network,
    /// Per ROB an S-LINK link capture file.
    File,
}

/// Checksum names in the configuration.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumName {
    /// None.
    None,
    /// CRC16-CCITT.
    Crc16,
    /// Adler-32.
    Adler32,
}

/// `[dcm]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DcmSection {
    /// Nodes.
    pub nodes: usize,
    /// Slots per node.
    pub slots: usize,
    /// Accept fraction.
    pub accept_fraction: f64,
    /// Share of the accepted events per stream (empty: all to the first).
    pub stream_shares: Vec<f64>,
    /// Mean emulated processing time.
    pub processing_us: f64,
    /// Checksum of built events.
    pub checksum: ChecksumName,
    /// Requests in flight per readout node.
    pub max_outstanding: usize,
}

impl Default for DcmSection {
    fn default() -> Self {
        DcmSection {
            nodes: 2,
            slots: 256,
            accept_fraction: 0.1,
            stream_shares: Vec::new(),
            processing_us: 0.0,
            checksum: ChecksumName::Adler32,
            max_outstanding: 64,
        }
    }
}

/// `[logger]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LoggerSection {
    /// Nodes.
    pub nodes: usize,
    /// Stream names.
    pub streams: Vec<String>,
    /// File rotation size.
    pub max_file_mib: u64,
    /// The files' container.
    pub format: FormatName,
    /// Compression (a codec of `format`).
    pub compression: CompressionName,
    /// EventStorage project tag.
    pub project: String,
    /// zstd level of `compression = "zstd"` (the DCMs compress).
    pub zstd_level: i32,
    /// After the run, re-read every file completely (`rodeo_files::verify::check_file`)
    /// instead of trusting the loggers' check (record checksums computed as the bytes are
    /// written, end record and size read back). Off by default.
    pub verify_after: bool,
    /// Output directories, used in order (each gets `run-NNNNNNNN/`); empty: `run.output`.
    pub directories: Vec<String>,
    /// Bytes each output directory keeps free.
    pub min_free_bytes: u64,
    /// Fraction (0 to 1) of its file system each output directory keeps free.
    pub min_free_fraction: f64,
}

/// The logger's file formats in the configuration.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FormatName {
    /// rodeo's own container.
    Rodeo,
    /// ATLAS EventStorage version 5.
    Eventstorage,
}

/// Compression names in the configuration.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CompressionName {
    /// Payloads as they are.
    None,
    /// zstd (compression type 1), rodeo's container.
    Zstd,
    /// zlib data blocks, EventStorage.
    Zlib,
}

impl Default for LoggerSection {
    fn default() -> Self {
        LoggerSection {
            nodes: 1,
            streams: vec!["physics_Main".into()],
            max_file_mib: 1024,
            format: FormatName::Rodeo,
            compression: CompressionName::None,
            project: "data_test".into(),
            zstd_level: rodeo_format::compress::DEFAULT_ZSTD_LEVEL,
            verify_after: false,
            directories: Vec::new(),
            min_free_bytes: rodeo_dataflow::disks::DEFAULT_MIN_FREE_BYTES,
            min_free_fraction: 0.0,
        }
    }
}

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

/// `[control]`: run control and observability (HTTP API, logs, traces) and how the
/// controller runs applications as processes.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ControlSection {
    /// HTTP listen address ("": none).
    pub http: String,
    /// Bearer token for commands ("": only `RODEO_TOKEN`).
    pub token: String,
    /// Per-module log levels (tracing filter syntax).
    pub log: String,
    /// Trace sampling: one event in this many.
    pub trace_every: u64,
    /// The address the controller listens on (tcp, system-chosen port).
    pub address: String,
    /// Heartbeat period of every application.
    pub heartbeat_ms: u64,
    /// An application silent this long is dead.
    pub dead_after_ms: u64,
    /// How long a spawned application may take to say hello.
    pub spawn_timeout_ms: u64,
    /// How long one command may take in one application.
    pub command_timeout_ms: u64,
    /// Process mode: restart a readout node or logger that dies during a run.
    pub restart: bool,
    /// Restarts per run at most (then a death fails the partition).
    pub max_restarts_per_run: u32,
    /// Wait this long after a death before the restart (and between failed attempts).
    pub restart_backoff_ms: u64,
    /// The ssh command and its options (the host follows them).
    pub ssh: Vec<String>,
    /// The rodeo executable on the other hosts.
    pub remote_rodeo: String,
}

impl Default for ControlSection {
    fn default() -> Self {
        ControlSection {
            http: String::new(),
            token: String::new(),
            log: "warn".into(),
            trace_every: 100,
            address: "127.0.0.1".into(),
            heartbeat_ms: 250,
            dead_after_ms: 3000,
            spawn_timeout_ms: 20_000,
            command_timeout_ms: 60_000,
            restart: true,
            max_restarts_per_run: 3,
            restart_backoff_ms: 500,
            ssh: vec!["ssh".into(), "-o".into(), "BatchMode=yes".into()],
            remote_rodeo: "rodeo".into(),
        }
    }
}

impl ControlSection {
    /// The command token: `RODEO_TOKEN` if set and not empty, else the configuration's (`None`:
    /// no token, commands are refused).
    pub fn effective_token(&self) -> Option<String> {
        std::env::var("RODEO_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| (!self.token.is_empty()).then(|| self.token.clone()))
    }
}

impl PartitionConfig {
    /// Parses and validates TOML; `source_name` names it in errors.
    pub fn from_toml(text: &str, source_name: &str) -> Result<PartitionConfig, ConfigError> {
        let config: PartitionConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            source_name: source_name.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// How many endpoints the partition binds (tcp: consecutive ports from
    /// `transport.base_port`): one per logger, one per readout node, the supervisor's.
    pub fn endpoint_count(&self) -> usize {
        self.logger.nodes + self.ros.nodes + 1
    }

    /// The largest message each kind of data socket legitimately receives in this partition,
    /// in bytes, without margin: a full event of every ROB (`ros.fragment_words` words each,
    /// or [`EXTERNAL_FRAGMENT_BYTES`] for inputs whose fragments come from outside) with its
    /// headers, a node's DataReply, a DataRequest for every channel, a Clear of one group, an
    /// Update or EventAck for every slot of a DCM (four times over: decisions kept while the
    /// supervisor does not read).
    pub fn largest_messages(&self) -> MessageLimits {
        use rodeo_transport::message::{clear_bytes, data_request_bytes, HEADER_BYTES};
        let r = &self.ros;
        let rob = match r.input {
            RosInput::Dma | RosInput::Swrod => {
                // ROB header with status words, ROD header and trailer: 64 words is generous.
                (r.fragment_words as usize + 64) * 4
            }
            RosInput::Replay | RosInput::Network | RosInput::File => EXTERNAL_FRAGMENT_BYTES,
        };
        let event = HEADER_BYTES + 4 + 64 * 4 + r.nodes * r.channels * rob;
        let reply = HEADER_BYTES + 8 + r.channels * rob;
        let decisions = 4 * self.dcm.slots + 4096;
        let update = HEADER_BYTES + 8 + 16 * decisions;
        let ack = HEADER_BYTES + 4 + 8 * decisions;
        let assignment = HEADER_BYTES + 24 + 4 * r.nodes * r.channels;
        MessageLimits {
            logger: event,
            ros: data_request_bytes(r.channels).max(clear_bytes(self.supervisor.clear_group)),
            supervisor: update,
            dcm: reply.max(ack).max(assignment),
        }
    }

    /// The limit each kind of data socket applies to incoming messages: with
    /// `transport.max_message_bytes` set, that value for every socket; else per socket twice
    /// its [`PartitionConfig::largest_messages`] plus 64 KiB (at least [`MIN_MESSAGE_LIMIT`]).
    pub fn message_limits(&self) -> MessageLimits {
        if let Ok(n @ 1..) = usize::try_from(self.transport.max_message_bytes) {
            return MessageLimits {
                logger: n,
                ros: n,
                supervisor: n,
                dcm: n,
            };
        }
        let m = self.largest_messages();
        let margin = |b: usize| b.saturating_mul(2).saturating_add(64 << 10);
        MessageLimits {
            logger: margin(m.logger),
            ros: margin(m.ros),
            supervisor: margin(m.supervisor),
            dcm: margin(m.dcm),
        }
    }

    /// The limit of the control channel's sockets: 1 MiB (a configuration and a heartbeat
    /// are a few KiB), or `transport.max_message_bytes` when that is smaller.
    pub fn control_message_limit(&self, channel_limit: usize) -> usize {
        match usize::try_from(self.transport.max_message_bytes) {
            Ok(n @ 1..) => channel_limit.min(n),
            _ => channel_limit,
        }
    }

    /// Checks on this host that `run.output` can take the run's files: an existing path must be
    /// a directory this process may write in; a path that does not exist yet needs its nearest
    /// existing parent to be one (the run creates the rest). Writability is tried, not guessed
    /// from mode bits: a probe file is created and removed.
    pub fn check_output(&self) -> Result<(), ConfigError> {
        let out = std::path::Path::new(&self.run.output);
        let mut at = out;
        loop {
            match std::fs::metadata(at) {
                Ok(m) if m.is_dir() => return probe_writable(at),
                Ok(_) => {
                    return Err(ConfigError::Output {
                        path: at.display().to_string(),
                        reason: if at == out {
                            "exists and is not a directory".into()
                        } else {
                            "a parent of the output path is not a directory".into()
                        },
                    })
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
                {
                    at = match at.parent() {
                        Some(p) if !p.as_os_str().is_empty() => p,
                        _ => std::path::Path::new("."),
                    };
                }
                Err(e) => {
                    return Err(ConfigError::Output {
                        path: at.display().to_string(),
                        reason: format!("cannot be read: {e}"),
                    })
                }
            }
        }
    }

    /// Checks on this host that every `logger.directories` entry can take files, as
    /// [`PartitionConfig::check_output`] does for `run.output` (exists and writable, or
    /// creatable); the error names the entry.
    pub fn check_directories(&self) -> Result<(), ConfigError> {
        for entry in &self.logger.directories {
            check_writable_dir(std::path::Path::new(entry)).map_err(|(path, reason)| {
                ConfigError::Directory {
                    entry: entry.clone(),
                    path,
                    reason,
                }
            })?;
        }
        Ok(())
    }

    /// The configuration as TOML (what a parent hands to its `rodeo app` processes).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// The configuration as TOML for anyone who may read it (`GET /api/config`): the command
    /// token is replaced by `"(hidden)"`.
    pub fn to_toml_public(&self) -> String {
        let mut c = self.clone();
        if !c.control.token.is_empty() {
            c.control.token = "(hidden)".into();
        }
        c.to_toml()
    }

    /// Checks every value; the error names the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        fn bad(field: &'static str, value: impl ToString, allowed: &'static str) -> ConfigError {
            ConfigError::Value {
                field,
                value: value.to_string(),
                allowed,
            }
        }
        let r = &self.run;
        let inputs_end = self.l1.mode == L1Mode::External
            || self.l1.mode == L1Mode::Readout
                && match self.ros.input {
                    RosInput::File => !self.ros.link_loop,
                    RosInput::Network => {
                        self.ros.listen_end_on_close
                            && self.ros.listen.iter().all(|a| a.starts_with("tcp://"))
                    }
                    _ => false,
                };
        if r.events == 0 && r.seconds <= 0.0 && !inputs_end {
            return Err(bad(
                "run.events",
                r.events,
                "give run.events > 0 or run.seconds > 0 (a run must end; only l1.mode = \
                 \"readout\" with inputs that end, ros.input = \"file\" without link_loop or \
                 \"network\" over tcp with listen_end_on_close, or l1.mode = \"external\", \
                 may have neither)",
            ));
        }
        if !r.seconds.is_finite() || r.seconds < 0.0 {
            return Err(bad("run.seconds", r.seconds, "a number of seconds >= 0"));
        }
        if r.output.is_empty() {
            return Err(bad("run.output", "\"\"", "a directory path"));
        }
        if self.transport.kind == TransportKind::Tcp {
            // Consecutive ports from base_port, one per endpoint; port 0 would mean "any port"
            // (nobody could find it) and past 65535 the numbers wrap.
            let t = &self.transport;
            let last = u32::from(t.base_port) + self.endpoint_count() as u32 - 1;
            if t.base_port == 0 || last > 65535 {
                return Err(bad(
                    "transport.base_port",
                    format!(
                        "{} (the partition binds {} consecutive ports: {}..={last})",
                        t.base_port,
                        self.endpoint_count(),
                        t.base_port
                    ),
                    "1..=65535 for every port: base_port >= 1 and base_port + endpoints - 1 \
                     <= 65535 (one endpoint per logger, per readout node, and the supervisor's)",
                ));
            }
        }
        for (field, hwm) in [
            ("transport.high_water_mark", self.transport.high_water_mark),
            ("ros.high_water_mark", self.ros.high_water_mark),
        ] {
            if hwm == 0 || hwm > 10_000_000 {
                return Err(bad(field, hwm, "1..=10000000 messages"));
            }
        }
        if self.transport.curve_enabled() && !rodeo_transport::curve::available() {
            return Err(bad(
                "transport.curve",
                format!(
                    "true{}",
                    if self.transport.curve.is_none() {
                        " (the default with kind = \"tcp\")"
                    } else {
                        ""
                    }
                ),
                "false: this build's libzmq has no CURVE (build it with libsodium: \
                 third_party/zmq-sys/README.md)",
            ));
        }
        if self.transport.io_threads == 0 || self.transport.io_threads > 16 {
            return Err(bad(
                "transport.io_threads",
                self.transport.io_threads,
                "1..=16",
            ));
        }
        let l1 = &self.l1;
        if l1.mode == L1Mode::External
            && l1
                .external_listen
                .strip_prefix("tcp://")
                .and_then(|a| a.rsplit_once(':'))
                .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            return Err(bad(
                "l1.external_listen",
                format!("{:?}", l1.external_listen),
                "\"tcp://HOST:PORT\" with l1.mode = \"external\"",
            ));
        }
        if !l1.rate_hz.is_finite() || l1.rate_hz < 0.0 {
            return Err(bad("l1.rate_hz", l1.rate_hz, "a rate >= 0 (0: unlimited)"));
        }
        let [lo, hi] = l1.rois_per_event;
        if lo > hi || hi > 16 {
            return Err(bad(
                "l1.rois_per_event",
                format!("[{lo}, {hi}]"),
                "[min, max] with min <= max <= 16",
            ));
        }
        if l1.roib_inputs == 0 || l1.roib_inputs > 16 {
            return Err(bad("l1.roib_inputs", l1.roib_inputs, "1..=16"));
        }
        if l1.roib_timeout_ms == 0 {
            return Err(bad("l1.roib_timeout_ms", 0, "> 0 milliseconds"));
        }
        if l1.l1id_wrap == 0 || l1.l1id_wrap > 1 << 24 {
            return Err(bad("l1.l1id_wrap", l1.l1id_wrap, "1..=16777216"));
        }
        let s = &self.supervisor;
        if s.event_timeout_ms == 0 {
            return Err(bad("supervisor.event_timeout_ms", 0, "> 0 milliseconds"));
        }
        if s.dcm_timeout_ms < 500 {
            return Err(bad(
                "supervisor.dcm_timeout_ms",
                s.dcm_timeout_ms,
                ">= 500 ms (twice the DCM heartbeat at least)",
            ));
        }
        if s.clear_group == 0 || s.clear_group > 100_000 {
            return Err(bad("supervisor.clear_group", s.clear_group, "1..=100000"));
        }
        let ros = &self.ros;
        if ros.nodes == 0 || ros.nodes > 32 {
            return Err(bad("ros.nodes", ros.nodes, "1..=32"));
        }
        if ros.channels == 0 || ros.channels > 64 {
            return Err(bad("ros.channels", ros.channels, "1..=64"));
        }
        if ros.fragment_words == 0 || ros.fragment_words > 1 << 20 {
            return Err(bad("ros.fragment_words", ros.fragment_words, "1..=1048576"));
        }
        if ros.elinks == 0 || ros.elinks > 2048 {
            return Err(bad("ros.elinks", ros.elinks, "1..=2048"));
        }
        if ros.input == RosInput::Swrod {
            // Each E-link's packet: the fragment's share less 4 words, 1..=65535 payload words.
            let share = ros.fragment_words as usize / ros.elinks;
            if share < 5 {
                return Err(bad(
                    "ros.elinks",
                    ros.elinks,
                    "at most ros.fragment_words / 5 with ros.input = \"swrod\"",
                ));
            }
            if share - 4 > 0xFFFF {
                return Err(bad(
                    "ros.fragment_words",
                    ros.fragment_words,
                    "at most 65539 x ros.elinks with ros.input = \"swrod\" (FELIX packets)",
                ));
            }
            // The fragment builder's window of 512 L1IDs needs a cycle of 256 x 8 at least.
            if self.l1.l1id_wrap < 8 {
                return Err(bad(
                    "l1.l1id_wrap",
                    self.l1.l1id_wrap,
                    ">= 8 with ros.input = \"swrod\" (the fragment builder's window)",
                ));
            }
        }
        if ros.input == RosInput::Replay
            && (ros.replay_files.is_empty() || ros.replay_files.iter().any(|f| f.is_empty()))
        {
            return Err(bad(
                "ros.replay_files",
                format!("{:?}", ros.replay_files),
                "at least one raw-data file path with ros.input = \"replay\"",
            ));
        }
        if !ros.replay_rate_hz.is_finite() || ros.replay_rate_hz < 0.0 {
            return Err(bad(
                "ros.replay_rate_hz",
                ros.replay_rate_hz,
                "fragments per second >= 0 (0: unpaced)",
            ));
        }
        let mut mapped = std::collections::HashSet::new();
        for [from, to] in &ros.replay_source_map {
            if !mapped.insert(*from) {
                return Err(bad(
                    "ros.replay_source_map",
                    format!("[{from:#x}, {to:#x}]"),
                    "each file source id mapped once",
                ));
            }
        }
        let robs = ros.nodes * ros.channels;
        if ros.input == RosInput::Network {
            if ros.listen.len() != robs {
                return Err(bad(
                    "ros.listen",
                    format!(
                        "{:?} ({} addresses for {robs} ROBs)",
                        ros.listen,
                        ros.listen.len()
                    ),
                    "one address per ROB (ros.nodes x ros.channels, node by node) with ros.input \
                     = \"network\"",
                ));
            }
            let mut seen = std::collections::HashSet::new();
            for a in &ros.listen {
                if !(a.starts_with("tcp://") || a.starts_with("udp://")) || !seen.insert(a) {
                    return Err(bad(
                        "ros.listen",
                        format!("{a:?}"),
                        "\"tcp://HOST:PORT\" or \"udp://HOST:PORT\", each address once",
                    ));
                }
            }
            if ros.listen_mode == ListenMode::Felix {
                return Err(bad(
                    "ros.listen_mode",
                    "\"felix\"",
                    "\"slink\": a partition's network input takes S-LINK fragments for now \
                     (FELIX blocks: `rodeo cards --listen ADDRESS --listen-mode felix`)",
                ));
            }
        }
        if ros.input == RosInput::File
            && (ros.link_files.len() != robs || ros.link_files.iter().any(|f| f.is_empty()))
        {
            return Err(bad(
                "ros.link_files",
                format!("{:?}", ros.link_files),
                "one S-LINK link capture file per ROB (ros.nodes x ros.channels, node by node) \
                 with ros.input = \"file\"",
            ));
        }
        let d = &self.dcm;
        if d.nodes == 0 || d.nodes > 64 {
            return Err(bad("dcm.nodes", d.nodes, "1..=64"));
        }
        if d.slots == 0 || d.slots > 4096 {
            return Err(bad("dcm.slots", d.slots, "1..=4096"));
        }
        if !(0.0..=1.0).contains(&d.accept_fraction) {
            return Err(bad(
                "dcm.accept_fraction",
                d.accept_fraction,
                "a fraction in 0..=1",
            ));
        }
        if !d.processing_us.is_finite() || d.processing_us < 0.0 {
            return Err(bad(
                "dcm.processing_us",
                d.processing_us,
                "microseconds >= 0",
            ));
        }
        if d.max_outstanding == 0 {
            return Err(bad("dcm.max_outstanding", 0, ">= 1"));
        }
        let l = &self.logger;
        if !d.stream_shares.is_empty()
            && (d.stream_shares.len() != l.streams.len()
                || d.stream_shares.iter().any(|w| !w.is_finite() || *w < 0.0)
                || d.stream_shares.iter().sum::<f64>() <= 0.0)
        {
            return Err(bad(
                "dcm.stream_shares",
                format!("{:?} for streams {:?}", d.stream_shares, l.streams),
                "one weight >= 0 per logger.streams entry, not all 0 (or [] for all to the \
                 first stream)",
            ));
        }
        if l.nodes == 0 || l.nodes > 16 {
            return Err(bad("logger.nodes", l.nodes, "1..=16"));
        }
        if l.streams.is_empty() {
            return Err(bad("logger.streams", "[]", "at least one stream name"));
        }
        // Stream names become parts of file names: no path separator, no leading dot, no dot
        // at all (rodeo's file names use dots between their fields).
        for st in &l.streams {
            let ok = !st.is_empty()
                && st.len() <= 255
                && st
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(bad(
                    "logger.streams",
                    format!("{st:?}"),
                    "1 to 255 ASCII letters, digits, '_' or '-' (a stream name is part of its \
                     files' names)",
                ));
            }
        }
        if l.max_file_mib == 0 {
            return Err(bad("logger.max_file_mib", 0, ">= 1"));
        }
        if !l.min_free_fraction.is_finite() || !(0.0..1.0).contains(&l.min_free_fraction) {
            return Err(bad(
                "logger.min_free_fraction",
                l.min_free_fraction,
                "a fraction of the disk >= 0 and < 1 (0: only logger.min_free_bytes)",
            ));
        }
        for (i, d) in l.directories.iter().enumerate() {
            if d.is_empty() || d.contains('\0') {
                return Err(bad(
                    "logger.directories",
                    format!("{d:?}"),
                    "directory paths, not empty, without NUL",
                ));
            }
            if l.directories[..i].contains(d) {
                return Err(bad(
                    "logger.directories",
                    format!("{d:?} twice"),
                    "each directory once (they are used in order)",
                ));
            }
        }
        if !(-7..=22).contains(&l.zstd_level) {
            return Err(bad(
                "logger.zstd_level",
                l.zstd_level,
                "-7..=22 (zstd's levels: 1 the default, negative faster, higher smaller)",
            ));
        }
        match (l.format, l.compression) {
            (FormatName::Eventstorage, CompressionName::Zstd) => {
                return Err(bad(
                    "logger.compression",
                    "\"zstd\"",
                    "\"zlib\" or \"none\" with logger.format = \"eventstorage\" (ATLAS readers \
                     decompress zlib only; zstd needs logger.format = \"rodeo\")",
                ))
            }
            (FormatName::Rodeo, CompressionName::Zlib) => {
                return Err(bad(
                    "logger.compression",
                    "\"zlib\"",
                    "\"zstd\" or \"none\" with logger.format = \"rodeo\" (zlib is \
                     EventStorage's codec: logger.format = \"eventstorage\")",
                ))
            }
            _ => {}
        }
        if l.format == FormatName::Eventstorage {
            use rodeo_files::eventstorage::valid_name_part;
            if !valid_name_part(&l.project) {
                return Err(bad(
                    "logger.project",
                    format!("{:?}", l.project),
                    "1 to 255 ASCII letters, digits, '-' or '_' (part of the EventStorage file names)",
                ));
            }
            for st in &l.streams {
                let (t, n) = rodeo_files::eventstorage::split_stream(st);
                if !valid_name_part(t) || t.contains('_') || !valid_name_part(n) {
                    return Err(bad(
                        "logger.streams",
                        format!("{st:?}"),
                        "\"<type>_<name>\" (or a name alone, of type physics) of ASCII letters, \
                         digits, '-' and '_' with logger.format = \"eventstorage\"",
                    ));
                }
            }
        }
        let c = &self.control;
        if !c.http.is_empty() && c.http.parse::<std::net::SocketAddr>().is_err() {
            return Err(bad(
                "control.http",
                format!("{:?}", c.http),
                "an address with a port, e.g. \"127.0.0.1:8080\" (\"\": off)",
            ));
        }
        if c.trace_every == 0 {
            return Err(bad("control.trace_every", 0, ">= 1"));
        }
        if c.token
            .chars()
            .any(|ch| ch.is_whitespace() || ch.is_control())
        {
            return Err(bad(
                "control.token",
                "(hidden)",
                "no spaces or control characters",
            ));
        }
        let t = &self.transport;
        if t.max_message_bytes != 0 {
            let need = self.largest_messages().largest().max(MIN_MESSAGE_LIMIT);
            if t.max_message_bytes < need as u64 || t.max_message_bytes > u64::from(u32::MAX) {
                return Err(bad(
                    "transport.max_message_bytes",
                    format!(
                        "{} (this partition's largest message, a full event of ros.nodes x \
                         ros.channels ROBs, needs {need})",
                        t.max_message_bytes
                    ),
                    "0 (derived from the partition) or at least the partition's largest message \
                     and 65536, at most 4294967295",
                ));
            }
        }
        if ros.nodes + d.nodes + l.nodes > 62 {
            return Err(bad(
                "dcm.nodes",
                d.nodes,
                "ros.nodes + logger.nodes + 2 must stay <= 64 (one socket each per DCM)",
            ));
        }
        let c = &self.control;
        if c.address.is_empty() || c.address.contains(char::is_whitespace) {
            return Err(bad(
                "control.address",
                format!("{:?}", c.address),
                "an address of this host",
            ));
        }
        if c.heartbeat_ms < 10 || c.heartbeat_ms > 60_000 {
            return Err(bad("control.heartbeat_ms", c.heartbeat_ms, "10..=60000"));
        }
        if c.dead_after_ms < 2 * c.heartbeat_ms {
            return Err(bad(
                "control.dead_after_ms",
                c.dead_after_ms,
                ">= twice control.heartbeat_ms",
            ));
        }
        if c.spawn_timeout_ms == 0 {
            return Err(bad("control.spawn_timeout_ms", 0, "> 0 milliseconds"));
        }
        if c.command_timeout_ms == 0 {
            return Err(bad("control.command_timeout_ms", 0, "> 0 milliseconds"));
        }
        if c.max_restarts_per_run > 1000 {
            return Err(bad(
                "control.max_restarts_per_run",
                c.max_restarts_per_run,
                "0..=1000",
            ));
        }
        if c.restart_backoff_ms > 600_000 {
            return Err(bad(
                "control.restart_backoff_ms",
                c.restart_backoff_ms,
                "0..=600000 milliseconds",
            ));
        }
        if c.ssh.is_empty() || c.ssh[0].is_empty() {
            return Err(bad(
                "control.ssh",
                format!("{:?}", c.ssh),
                "the ssh command, then its options",
            ));
        }
        if c.remote_rodeo.is_empty() {
            return Err(bad(
                "control.remote_rodeo",
                "\"\"",
                "a path or command name",
            ));
        }
        let names = self.app_names();
        for (app, host) in &self.hosts {
            if !names.iter().any(|n| n == app) {
                return Err(bad(
                    "hosts",
                    format!("{app:?} = {host:?}"),
                    "keys are application names of this partition (logger-N, ros-N, dcm-N, supervisor)",
                ));
            }
            if host.is_empty() || host.contains(char::is_whitespace) || host.starts_with('-') {
                return Err(bad(
                    "hosts",
                    format!("{app:?} = {host:?}"),
                    "a host name or address (no spaces, not starting with '-')",
                ));
            }
        }
        if !self.hosts.is_empty() && self.transport.kind != TransportKind::Tcp {
            return Err(bad(
                "transport.kind",
                format!("{:?}", self.transport.kind).to_lowercase(),
                "\"tcp\" when [hosts] places applications on other hosts",
            ));
        }
        self.monitoring.validate()?;
        crate::alarms::validate(&self.alarms)?;
        Ok(())
    }

    /// Every application's name, in the order they come up: loggers, readout nodes, DCMs,
    /// the supervisor.
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
#[path = "config_tests.rs"]
mod tests;
