//! The run-control interface: what the HTTP API, the web page and the controller see of a
//! partition or of one application, whatever runs it (threads in this process, local processes,
//! processes on other hosts).
//!
//! [`RunControl`] is implemented by the embedded partition, by each `rodeo app` process and by
//! the controller that drives processes; the HTTP server serves any of them.

use serde::{Deserialize, Serialize};

use crate::lifecycle::{Command, State, TransitionError};
use crate::prometheus::MetricsWriter;

/// The state of one application, as the status endpoint reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppStatus {
    /// The application's name (`dcm-1`, `ros-1`, …).
    pub name: String,
    /// Its role (`supervisor`, `dcm`, `ros`, `logger`, `swrod`).
    pub role: String,
    /// Its lifecycle state.
    pub state: State,
    /// Why it is in ERROR (or the last failure), if any.
    pub error: Option<String>,
    /// The host it runs on (`None`: this process).
    pub host: Option<String>,
    /// Its process id, when it is a process.
    pub pid: Option<u32>,
    /// Milliseconds since its last heartbeat (`None`: not monitored by heartbeat).
    pub heartbeat_age_ms: Option<u64>,
    /// Its main rate now (events, requests or fragments per second, by role).
    pub rate_hz: f64,
}

/// The state of a partition, as `GET /api/status` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionStatus {
    /// The partition's name.
    pub partition: String,
    /// The partition's lifecycle state (the controller's).
    pub state: State,
    /// Why the partition is in ERROR, naming the application that failed.
    pub error: Option<String>,
    /// The run number (0 before the first start).
    pub run_number: u32,
    /// Seconds since the run started (0 when not running).
    pub run_seconds: f64,
    /// L1 accepts per second now.
    pub l1_rate_hz: f64,
    /// Events built (decided) per second now.
    pub event_rate_hz: f64,
    /// Events written per second now.
    pub write_rate_hz: f64,
    /// L1 accepts since the start of the run.
    pub l1_accepts: u64,
    /// Events written since the start of the run.
    pub events_written: u64,
    /// Every application.
    pub apps: Vec<AppStatus>,
    /// Recent errors, newest last (bounded).
    pub recent_errors: Vec<String>,
}

/// Something that can be controlled and watched: a partition or one application.
///
/// Implementations are shared between the HTTP server's threads and their owner, so every
/// method takes `&self`; commands are serialised inside the implementation.
pub trait RunControl: Send + Sync {
    /// The status now.
    fn status(&self) -> PartitionStatus;

    /// Runs a lifecycle command to its end (for `stop`: after the dataflow drained) and
    /// returns the new state, or why it was refused or failed.
    fn command(&self, command: Command) -> Result<State, TransitionError>;

    /// The configuration in effect, as TOML.
    fn config_toml(&self) -> String;

    /// Writes the metrics in Prometheus text format.
    fn write_metrics(&self, out: &mut MetricsWriter);
}
