//! What a long-lived service keeps about its partition for the page: the rate and occupancy
//! history (`GET /api/history`, kept across page reloads), the alarms (`GET /api/alarms`), the
//! live histograms of the sampled events (`GET /api/histograms`, the service subscribing to its
//! own monitoring endpoint) and the recent log lines (`GET /api/log`). [`Observer::tick`] takes
//! one look (the service calls it about once a second).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use serde::Serialize;

use rodeo_control::alarms::{metric_value, AlarmSpec, Alarms};
use rodeo_control::lifecycle::State;
use rodeo_control::monitoring::{Forwarder, MonitoringSection, SampleSubscriber};
use rodeo_control::prometheus::MetricsWriter;
use rodeo_control::run_control::PartitionStatus;

/// Points of history kept (one a second: an hour).
pub const HISTORY_POINTS: usize = 3600;
/// Log lines kept.
pub const LOG_LINES: usize = 200;

static LOG: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps a log line for `GET /api/log` (the binary's log layer calls this for every event
/// that passes the filter); the oldest goes beyond [`LOG_LINES`].
pub fn push_log_line(line: String) {
    let mut l = lock(&LOG);
    if l.len() >= LOG_LINES {
        l.pop_front();
    }
    l.push_back(line);
}

/// The kept log lines, oldest first.
pub fn recent_log() -> Vec<String> {
    lock(&LOG).iter().cloned().collect()
}

/// One point of the history.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryPoint {
    /// Wall-clock time, milliseconds since 1970.
    pub t_ms: u64,
    /// The partition's state.
    pub state: State,
    /// The run number.
    pub run_number: u32,
    /// L1 accepts per second.
    pub l1_rate_hz: f64,
    /// Events built per second.
    pub event_rate_hz: f64,
    /// Events written per second.
    pub write_rate_hz: f64,
    /// Busy DCM slots over all DCM slots (0 to 1).
    pub dcm_occupancy: f64,
    /// The fullest readout node's buffer occupancy (0 to 1).
    pub ros_occupancy: f64,
}

/// Free bytes of the file system holding `dir` (`None` if it cannot be asked).
pub fn disk_free_bytes(dir: &Path) -> Option<f64> {
    rodeo_files::space::free_space(dir)
        .ok()
        .map(|f| f.available as f64)
}

/// The monitoring side of a service: the forwarder and the subscriber filling histograms.
struct Monitoring {
    section: MonitoringSection,
    /// Dropped before the forwarder (the subscriber's socket goes first).
    subscriber: Option<SampleSubscriber>,
    forwarder: Option<Forwarder>,
}

/// The service's observer (module docs).
pub struct Observer {
    output: PathBuf,
    history: Mutex<VecDeque<HistoryPoint>>,
    alarms: Mutex<Alarms>,
    monitoring: Mutex<Monitoring>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("output", &self.output)
            .finish()
    }
}

impl Observer {
    /// An observer of a partition writing to `output`, with `alarms`, and (when `monitoring`
    /// is on) the forwarder started and subscribed to.
    pub fn new(
        output: &Path,
        alarms: &[AlarmSpec],
        monitoring: &MonitoringSection,
    ) -> Result<Observer, rodeo_control::monitoring::ForwarderError> {
        let o = Observer {
            output: output.to_path_buf(),
            history: Mutex::new(VecDeque::new()),
            alarms: Mutex::new(Alarms::new(alarms)),
            monitoring: Mutex::new(Monitoring {
                section: MonitoringSection::default(),
                subscriber: None,
                forwarder: None,
            }),
        };
        o.reconfigure(alarms, monitoring)?;
        Ok(o)
    }

    /// A new configuration: its alarms, and its monitoring (the forwarder restarted if that
    /// changed).
    pub fn reconfigure(
        &self,
        alarms: &[AlarmSpec],
        monitoring: &MonitoringSection,
    ) -> Result<(), rodeo_control::monitoring::ForwarderError> {
        lock(&self.alarms).reconfigure(alarms);
        let mut m = lock(&self.monitoring);
        if m.section == *monitoring && (m.forwarder.is_some() || !monitoring.enabled()) {
            return Ok(());
        }
        m.subscriber = None;
        m.forwarder = None;
        m.section = monitoring.clone();
        if monitoring.enabled() {
            m.forwarder = Some(Forwarder::start(monitoring)?);
            m.subscriber = Some(SampleSubscriber::start(&monitoring.endpoint_connect())?);
        }
        Ok(())
    }

    /// One look: `status` and the metrics text `metrics` of the partition now.
    pub fn tick(&self, status: &PartitionStatus, metrics: &str, now: Instant) {
        let sum_of = |name: &str| metric_value(metrics, name).unwrap_or(0.0);
        let slots = sum_of("rodeo_dcm_slots");
        let busy = sum_of("rodeo_dcm_busy_slots");
        let ros = metrics
            .lines()
            .filter(|l| l.starts_with("rodeo_ros_buffer_occupancy_ratio"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .fold(0.0, f64::max);
        let point = HistoryPoint {
            t_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            state: status.state,
            run_number: status.run_number,
            l1_rate_hz: status.l1_rate_hz,
            event_rate_hz: status.event_rate_hz,
            write_rate_hz: status.write_rate_hz,
            dcm_occupancy: if slots > 0.0 { busy / slots } else { 0.0 },
            ros_occupancy: ros,
        };
        {
            let mut h = lock(&self.history);
            if h.len() >= HISTORY_POINTS {
                h.pop_front();
            }
            h.push_back(point);
        }
        // The histograms are of the running run; after it they stay until the next starts.
        let gaps = lock(&self.monitoring).subscriber.as_ref().map(|s| {
            if status.state == State::Running && status.run_number != 0 {
                s.set_run(status.run_number);
            }
            s.run_gaps() as f64
        });
        let disk = disk_free_bytes(&self.output);
        let value = |m: &str| -> Option<f64> {
            match m {
                "l1_rate_hz" => Some(status.l1_rate_hz),
                "event_rate_hz" => Some(status.event_rate_hz),
                "write_rate_hz" => Some(status.write_rate_hz),
                "disk_free_bytes" => disk,
                "monitor_gaps" => gaps,
                other => metric_value(metrics, other),
            }
        };
        let running = status.state == State::Running;
        lock(&self.alarms).evaluate(&value, running, now);
    }

    /// `history`, `alarms`, `histograms` or `log` as JSON (`None`: no such view).
    pub fn view(&self, what: &str) -> Option<serde_json::Value> {
        Some(match what {
            "history" => {
                // Copied under the lock, the JSON made after: the observer's tick waits for
                // the lock, not for an hour of points to be written out.
                let h = lock(&self.history).clone();
                serde_json::json!({ "interval_ms": 1000, "points": h })
            }
            "alarms" => lock(&self.alarms).to_json(),
            "histograms" => {
                let m = lock(&self.monitoring);
                match &m.subscriber {
                    Some(s) => {
                        let mut j = s.to_json();
                        j["endpoint"] = m.section.endpoint.clone().into();
                        j
                    }
                    None => serde_json::json!({
                        "samples": 0, "gaps": 0, "bad": 0, "event_bytes": [], "rob_bytes": {},
                        "endpoint": null,
                    }),
                }
            }
            "log" => serde_json::json!({ "lines": recent_log() }),
            _ => return None,
        })
    }

    /// Acknowledges alarm `name`.
    pub fn acknowledge(&self, name: &str) -> Result<(), String> {
        lock(&self.alarms).acknowledge(name)
    }

    /// The alarms' and the monitoring's metrics.
    pub fn write_metrics(&self, w: &mut MetricsWriter) {
        lock(&self.alarms).write_metrics(w);
        let m = lock(&self.monitoring);
        if let (Some(f), Some(s)) = (&m.forwarder, &m.subscriber) {
            let (samples, gaps) = s.counts();
            w.counter(
                "rodeo_monitor_forwarded_total",
                "Samples the monitoring forwarder republished.",
                &[(&[], f.forwarded())],
            );
            w.counter(
                "rodeo_monitor_received_total",
                "Samples the service's own subscriber received (of any run).",
                &[(&[], samples)],
            );
            w.counter(
                "rodeo_monitor_missed_total",
                "Samples the service's own subscriber missed (gaps in the DCMs' sequence numbers).",
                &[(&[], gaps)],
            );
        }
    }
}
