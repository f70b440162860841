//! Event sampling for monitoring, the partition side: the `[monitoring]` section, the
//! forwarder that gathers every DCM's samples onto the one endpoint subscribers connect to,
//! and a subscriber that keeps live histograms of the samples (what the page shows).
//!
//! # Topology
//!
//! Each DCM connects a PUB socket to the forwarder's *input* (an XSUB socket, bound by the
//! process that runs the partition: `rodeo run` or `rodeo serve`); the forwarder republishes
//! every message on `endpoint` (an XPUB socket). So one plain SUB socket connected to
//! `endpoint` receives the samples of every DCM, whichever process or host it runs on, and
//! subscriptions travel back up (with no subscriber, the DCMs' PUB sockets drop samples before
//! queueing them). The input defaults to the endpoint's port + 1 (tcp) or its path + `.in`
//! (ipc); `input` sets it (DCMs on other hosts need an address they can reach).
//!
//! # Slow subscribers
//!
//! XPUB keeps a queue of at most `queue` messages per subscriber and drops what does not fit,
//! for that subscriber only: the forwarder never waits, so neither do the DCMs. libzmq does not
//! count those drops; every sample carries its DCM's sequence number, so a subscriber counts
//! what it missed from the gaps ([`SampleHistograms::gaps`], `rodeo monitor`, and
//! `rodeo.Monitor.dropped` in Python).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::config::error::{num, Checks, ConfigError};

/// `[monitoring]`: event sampling (off while `endpoint` is empty).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MonitoringSection {
    /// Where subscribers connect (`tcp://HOST:PORT` or `ipc://PATH`); "" turns sampling off.
    pub endpoint: String,
    /// The forwarder's input the DCMs connect to ("": derived from `endpoint`, module docs).
    pub input: String,
    /// Fraction of the built events sampled (0 to 1). Unset: 0.01, or 1 when `max_rate_hz` is
    /// set (the rate alone then decides).
    pub fraction: Option<f64>,
    /// Most samples per second per DCM (0: no limit).
    pub max_rate_hz: f64,
    /// Samples queued per subscriber (and per DCM towards the forwarder) before drops.
    pub queue: u32,
}

impl Default for MonitoringSection {
    fn default() -> Self {
        MonitoringSection {
            endpoint: String::new(),
            input: String::new(),
            fraction: None,
            max_rate_hz: 0.0,
            queue: 16,
        }
    }
}

/// Splits `tcp://HOST:PORT` into host and port.
fn tcp_parts(endpoint: &str) -> Option<(&str, u16)> {
    let rest = endpoint.strip_prefix("tcp://")?;
    let (host, port) = rest.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

/// A host a socket may connect to in place of a wildcard bind address.
fn connectable(host: &str) -> &str {
    if host == "*" || host == "0.0.0.0" {
        "127.0.0.1"
    } else {
        host
    }
}

impl MonitoringSection {
    /// Whether sampling is on.
    pub fn enabled(&self) -> bool {
        !self.endpoint.is_empty()
    }

    /// The fraction in effect (see the field).
    pub fn effective_fraction(&self) -> f64 {
        self.fraction
            .unwrap_or(if self.max_rate_hz > 0.0 { 1.0 } else { 0.01 })
    }

    /// The forwarder's input endpoint as bound.
    pub fn input_bind(&self) -> String {
        if !self.input.is_empty() {
            return self.input.clone();
        }
        match tcp_parts(&self.endpoint) {
            Some((host, port)) => format!("tcp://{host}:{}", port.saturating_add(1)),
            None => format!("{}.in", self.endpoint),
        }
    }

    /// The forwarder's input endpoint as the DCMs connect to it.
    pub fn input_connect(&self) -> String {
        let bind = self.input_bind();
        match tcp_parts(&bind) {
            Some((host, port)) => format!("tcp://{}:{port}", connectable(host)),
            None => bind,
        }
    }

    /// `endpoint` as a subscriber on this host connects to it (a wildcard host made local).
    pub fn endpoint_connect(&self) -> String {
        match tcp_parts(&self.endpoint) {
            Some((host, port)) => format!("tcp://{}:{port}", connectable(host)),
            None => self.endpoint.clone(),
        }
    }

    /// Checks the section; each error names its field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut c = Checks::new();
        self.check(&mut c);
        c.finish()
    }

    /// The checks of [`MonitoringSection::validate`], adding to `c`.
    pub(crate) fn check(&self, c: &mut Checks) {
        // The values are checked with sampling off too: a value that would be refused once
        // an endpoint is set is not a valid configuration now either (NaN passed unnoticed
        // until an operator turned sampling on).
        if let Some(f) = self.fraction {
            if !(0.0..=1.0).contains(&f) {
                c.bad("monitoring.fraction", num(f), "a fraction from 0 to 1");
            }
        }
        if !(0.0..=1e9).contains(&self.max_rate_hz) {
            c.bad(
                "monitoring.max_rate_hz",
                num(self.max_rate_hz),
                "samples per second per DCM, >= 0 (0: no limit), at most 1000000000",
            );
        }
        if self.queue == 0 || self.queue > 100_000 {
            c.bad("monitoring.queue", self.queue, "1 to 100000 messages");
        }
        if !self.enabled() {
            return;
        }
        let endpoint_ok = |e: &str| {
            tcp_parts(e).is_some_and(|(h, p)| !h.is_empty() && p > 0)
                || e.strip_prefix("ipc://").is_some_and(|p| !p.is_empty())
        };
        if !endpoint_ok(&self.endpoint) {
            c.bad(
                "monitoring.endpoint",
                format!("{:?}", self.endpoint),
                "\"tcp://HOST:PORT\" (port 1..65534) or \"ipc://PATH\", or \"\" for no sampling",
            );
        } else if self.input.is_empty()
            && tcp_parts(&self.endpoint).is_some_and(|(_, p)| p == 65535)
        {
            c.bad(
                "monitoring.endpoint",
                format!("{:?}", self.endpoint),
                "a port below 65535 (the forwarder's input takes the next one), or set \
                 monitoring.input",
            );
        }
        if !self.input.is_empty() && !endpoint_ok(&self.input) {
            c.bad(
                "monitoring.input",
                format!("{:?}", self.input),
                "\"tcp://HOST:PORT\" (port 1..=65535) or \"ipc://PATH\", or \"\" (derived from \
                 endpoint)",
            );
        }
        if self.input_bind() == self.endpoint {
            c.bad(
                "monitoring.input",
                format!("{:?}", self.input),
                "an endpoint other than monitoring.endpoint",
            );
        }
    }

    /// What each DCM gets (`None`: sampling off).
    pub fn sample_config(&self) -> Option<rodeo_dataflow::dcm::SampleConfig> {
        self.enabled().then(|| rodeo_dataflow::dcm::SampleConfig {
            endpoint: self.input_connect(),
            fraction: self.effective_fraction(),
            max_rate_hz: self.max_rate_hz,
            queue: self.queue,
        })
    }
}

/// Why the forwarder could not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "monitoring forwarder: cannot {what} {endpoint}: {detail} (free it or change [monitoring])"
)]
pub struct ForwarderError {
    what: &'static str,
    endpoint: String,
    detail: String,
}

/// The forwarder (module docs): runs on its own thread until dropped.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    forwarded: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
    /// The socket files of its `ipc://` endpoints, removed when it is dropped.
    ipc_files: Vec<std::path::PathBuf>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder").finish()
    }
}

impl Forwarder {
    /// Binds the input and the endpoint of `m` and starts forwarding.
    pub fn start(m: &MonitoringSection) -> Result<Forwarder, ForwarderError> {
        let ctx = zmq::Context::new();
        let err = |what, endpoint: &str| {
            let endpoint = endpoint.to_string();
            move |source: zmq::Error| ForwarderError {
                what,
                endpoint,
                detail: source.to_string(),
            }
        };
        // ZeroMQ unlinks an ipc path before it binds: what is there must be a socket nobody
        // listens on (a file at the path was deleted, and a live service's socket taken over,
        // before a QA pass).
        for e in [m.input_bind(), m.endpoint.clone()] {
            if let Some(path) = e.strip_prefix("ipc://") {
                rodeo_transport::socket::check_ipc_bind(path).map_err(|detail| ForwarderError {
                    what: "bind",
                    endpoint: e.clone(),
                    detail,
                })?;
            }
        }
        let input = m.input_bind();
        let xsub = ctx
            .socket(zmq::XSUB)
            .map_err(err("create a socket for", &input))?;
        let xpub = ctx
            .socket(zmq::XPUB)
            .map_err(err("create a socket for", &m.endpoint))?;
        for s in [&xsub, &xpub] {
            s.set_linger(0).map_err(err("set linger on", &m.endpoint))?;
        }
        let hwm = i32::try_from(m.queue).unwrap_or(i32::MAX);
        xpub.set_sndhwm(hwm)
            .map_err(err("set sndhwm on", &m.endpoint))?;
        xsub.set_rcvhwm(hwm.saturating_mul(4))
            .map_err(err("set rcvhwm on", &input))?;
        xsub.set_maxmsgsize(MAX_SAMPLE_BYTES)
            .map_err(err("set maxmsgsize on", &input))?;
        xsub.bind(&input).map_err(err("bind", &input))?;
        xpub.bind(&m.endpoint).map_err(err("bind", &m.endpoint))?;
        let stop = Arc::new(AtomicBool::new(false));
        let forwarded = Arc::new(AtomicU64::new(0));
        let (st, fw) = (stop.clone(), forwarded.clone());
        let thread = std::thread::Builder::new()
            .name("monitor-forwarder".into())
            .spawn(move || forward(&xsub, &xpub, &st, &fw))
            .map_err(|e| ForwarderError {
                what: "start a thread for",
                endpoint: m.endpoint.clone(),
                detail: e.to_string(),
            })?;
        let ipc_files = [input.as_str(), m.endpoint.as_str()]
            .iter()
            .filter_map(|e| e.strip_prefix("ipc://"))
            .map(std::path::PathBuf::from)
            .collect();
        Ok(Forwarder {
            stop,
            forwarded,
            thread: Some(thread),
            ipc_files,
        })
    }

    /// Samples forwarded so far.
    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(Ordering::Relaxed)
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The sockets are closed (their thread ended): their ipc files go too, only if they
        // are still sockets (every run left both behind, `<endpoint>` and `<endpoint>.in`).
        for path in &self.ipc_files {
            use std::os::unix::fs::FileTypeExt as _;
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// The forwarder's loop: samples down (never waiting: XPUB drops per subscriber), subscriptions
/// up; looks at `stop` at least every 100 ms.
fn forward(xsub: &zmq::Socket, xpub: &zmq::Socket, stop: &AtomicBool, forwarded: &AtomicU64) {
    while !stop.load(Ordering::Relaxed) {
        let mut items = [
            xsub.as_poll_item(zmq::POLLIN),
            xpub.as_poll_item(zmq::POLLIN),
        ];
        if zmq::poll(&mut items, 100).is_err() {
            continue;
        }
        let (down, up) = (items[0].is_readable(), items[1].is_readable());
        if down {
            // At most a bounded batch per wake-up, so `stop` is seen under any load.
            for _ in 0..1000 {
                match xsub.recv_multipart(zmq::DONTWAIT) {
                    Ok(parts) => {
                        if xpub.send_multipart(parts, zmq::DONTWAIT).is_ok() {
                            forwarded.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) => break,
                }
            }
        }
        if up {
            while let Ok(parts) = xpub.recv_multipart(zmq::DONTWAIT) {
                let _ = xsub.send_multipart(parts, zmq::DONTWAIT);
            }
        }
    }
}

/// One decoded sample: its header and the full event's sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The DCM that published it.
    pub dcm: String,
    /// That DCM's sequence number.
    pub seq: u64,
    /// The full event's size in bytes.
    pub bytes: usize,
    /// The run number in the event's header.
    pub run_number: u32,
    /// (source id, size in bytes) of each ROB fragment.
    pub robs: Vec<(u32, usize)>,
}

/// Why a message is not a sample.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SampleError {
    /// Not two frames, or the header is not the expected JSON.
    #[error("not a rodeo sample: {0}")]
    Framing(String),
    /// The last frame is not a full event fragment.
    #[error("the sample's event: {0}")]
    Event(String),
}

/// Decodes a message (its frames) into a [`Sample`]: checks the header, the full-event
/// marker, the size word against the frame's length and the ROB headers.
pub fn decode_sample(frames: &[Vec<u8>]) -> Result<Sample, SampleError> {
    #[derive(Deserialize)]
    struct Header {
        dcm: String,
        seq: u64,
        bytes: usize,
    }
    // Exactly the two frames a DCM sends.
    let [head, event] = frames else {
        return Err(SampleError::Framing(format!("{} frame(s)", frames.len())));
    };
    let h: Header =
        serde_json::from_slice(head).map_err(|e| SampleError::Framing(e.to_string()))?;
    if event.len() != h.bytes || event.len() % 4 != 0 {
        return Err(SampleError::Event(format!(
            "{} bytes, the header says {}",
            event.len(),
            h.bytes
        )));
    }
    let words: Vec<u32> = event
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let ev = rodeo_format::fragment::FullEvent::parse(&words)
        .map_err(|e| SampleError::Event(e.to_string()))?;
    if words.get(1).map(|&w| w as usize) != Some(words.len()) {
        return Err(SampleError::Event(format!(
            "size word {:?} for {} words",
            words.get(1),
            words.len()
        )));
    }
    let mut robs = Vec::new();
    if ev.compression() == 0 {
        for r in ev.robs() {
            let r = r.map_err(|e| SampleError::Event(e.to_string()))?;
            robs.push((r.source_id().word(), 4 * r.words().len()));
        }
    }
    Ok(Sample {
        dcm: h.dcm,
        seq: h.seq,
        bytes: event.len(),
        run_number: ev.run_number(),
        robs,
    })
}

/// Most event sizes kept, and most ROB sizes per source id.
const KEEP_EVENTS: usize = 2000;
const KEEP_ROBS: usize = 500;
/// Most source ids, and DCMs, kept apart: the samples come from a socket anyone who reaches
/// it can write to, and each new id would otherwise grow the histograms (and the page's
/// `GET /api/histograms`) for good. Further ones are counted (`untracked_robs`,
/// `untracked_dcms`).
pub const MAX_SOURCE_IDS: usize = 2048;
/// See [`MAX_SOURCE_IDS`].
pub const MAX_DCMS: usize = 1024;
/// Largest frame of a sample taken by the forwarder's input and the subscriber (a whole event:
/// ATLAS's are 1-2 MB); a larger one ends the sender's connection (ZeroMQ's `maxmsgsize`,
/// which bounds each frame, not a message of many: the forwarder's input belongs on loopback
/// or the partition's private network).
pub const MAX_SAMPLE_BYTES: i64 = 64 << 20;

/// Live histograms of the samples of one run, as a subscriber sees them.
///
/// The sizes, the DCMs' sequence numbers and the per-run counts belong to the run in
/// `run_number`: a sample of a later run starts that run's histograms afresh (so does
/// [`SampleHistograms::set_run`], told the partition's run by the service), and one of an
/// earlier run (still in flight when the next began) is counted in `other_run`, not kept. The
/// `*_total` counts run over the subscriber's life (its Prometheus counters).
#[derive(Debug, Default, Clone)]
pub struct SampleHistograms {
    /// The run the histograms are of (`None`: no sample and no run told yet).
    pub run_number: Option<u32>,
    /// Samples of this run received.
    pub samples: u64,
    /// Samples of this run missed (gaps in a DCM's sequence numbers).
    pub gaps: u64,
    /// Samples of an earlier run than `run_number`, received since it began (not kept).
    pub other_run: u64,
    /// Samples received over the subscriber's life.
    pub samples_total: u64,
    /// Samples missed over the subscriber's life.
    pub gaps_total: u64,
    /// Messages that were not samples (over the subscriber's life).
    pub bad: u64,
    /// ROB sizes of source ids past [`MAX_SOURCE_IDS`], not kept.
    pub untracked_robs: u64,
    /// Samples of DCMs past [`MAX_DCMS`], whose gaps are not counted.
    pub untracked_dcms: u64,
    /// The last sequence number seen per DCM.
    last_seq: BTreeMap<String, u64>,
    /// The most recent event sizes (bytes).
    event_bytes: VecDeque<u32>,
    /// The most recent ROB sizes (bytes) per source id.
    rob_bytes: BTreeMap<u32, VecDeque<u32>>,
}

impl SampleHistograms {
    /// The partition's run is `run`: the histograms of another run are cleared (the totals
    /// kept).
    pub fn set_run(&mut self, run: u32) {
        if self.run_number != Some(run) {
            *self = SampleHistograms {
                run_number: Some(run),
                samples_total: self.samples_total,
                gaps_total: self.gaps_total,
                bad: self.bad,
                ..SampleHistograms::default()
            };
        }
    }

    /// Counts one sample and keeps its sizes (see the type's docs for a sample of another
    /// run).
    pub fn add(&mut self, s: &Sample) {
        self.samples_total += 1;
        match self.run_number {
            Some(run) if s.run_number < run => {
                self.other_run += 1;
                return;
            }
            Some(run) if s.run_number == run => {}
            _ => self.set_run(s.run_number),
        }
        self.samples += 1;
        let known = self.last_seq.contains_key(&s.dcm);
        if !known && self.last_seq.len() >= MAX_DCMS {
            self.untracked_dcms += 1;
        } else if let Some(last) = self.last_seq.insert(s.dcm.clone(), s.seq) {
            // A sequence number not after the last: the DCM restarted; no gap.
            if s.seq > last {
                self.gaps += s.seq - last - 1;
                self.gaps_total += s.seq - last - 1;
            }
        }
        push_bounded(&mut self.event_bytes, s.bytes as u32, KEEP_EVENTS);
        for &(id, n) in &s.robs {
            if let Some(q) = self.rob_bytes.get_mut(&id) {
                push_bounded(q, n as u32, KEEP_ROBS);
            } else if self.rob_bytes.len() >= MAX_SOURCE_IDS {
                self.untracked_robs += 1;
            } else {
                self.rob_bytes.insert(id, VecDeque::from([n as u32]));
            }
        }
    }

    /// The histograms as JSON: counts, and the recent sizes to bin (`event_bytes`, and
    /// `rob_bytes` keyed by source id in hex).
    pub fn to_json(&self) -> serde_json::Value {
        let robs: serde_json::Map<String, serde_json::Value> = self
            .rob_bytes
            .iter()
            .map(|(id, v)| (format!("0x{id:08x}"), serde_json::json!(v)))
            .collect();
        serde_json::json!({
            "run_number": self.run_number,
            "samples": self.samples,
            "gaps": self.gaps,
            "other_run": self.other_run,
            "samples_total": self.samples_total,
            "gaps_total": self.gaps_total,
            "bad": self.bad,
            "untracked_robs": self.untracked_robs,
            "untracked_dcms": self.untracked_dcms,
            "event_bytes": self.event_bytes,
            "rob_bytes": robs,
        })
    }
}

fn push_bounded(q: &mut VecDeque<u32>, v: u32, keep: usize) {
    if q.len() == keep {
        q.pop_front();
    }
    q.push_back(v);
}

/// A subscriber to the partition's own samples, filling [`SampleHistograms`] on its thread
/// until dropped.
pub struct SampleSubscriber {
    stop: Arc<AtomicBool>,
    histograms: Arc<Mutex<SampleHistograms>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SampleSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleSubscriber").finish()
    }
}

impl SampleSubscriber {
    /// Connects a SUB socket to `endpoint` (a forwarder's; ZeroMQ connects in the background).
    pub fn start(endpoint: &str) -> Result<SampleSubscriber, ForwarderError> {
        let ctx = zmq::Context::new();
        let err = |what| {
            let endpoint = endpoint.to_string();
            move |source: zmq::Error| ForwarderError {
                what,
                endpoint,
                detail: source.to_string(),
            }
        };
        let sub = ctx
            .socket(zmq::SUB)
            .map_err(err("create a SUB socket for"))?;
        sub.set_linger(0).map_err(err("set linger on"))?;
        sub.set_rcvhwm(64).map_err(err("set rcvhwm on"))?;
        sub.set_maxmsgsize(MAX_SAMPLE_BYTES)
            .map_err(err("set maxmsgsize on"))?;
        sub.set_rcvtimeo(100)
            .map_err(err("set a receive timeout on"))?;
        sub.set_subscribe(b"").map_err(err("subscribe to"))?;
        sub.connect(endpoint).map_err(err("connect to"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let histograms = Arc::new(Mutex::new(SampleHistograms::default()));
        let (st, h) = (stop.clone(), histograms.clone());
        let thread = std::thread::Builder::new()
            .name("monitor-subscriber".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    let Ok(frames) = sub.recv_multipart(0) else {
                        continue;
                    };
                    let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
                    match decode_sample(&frames) {
                        Ok(s) => h.add(&s),
                        Err(_) => h.bad += 1,
                    }
                }
            })
            .map_err(|e| ForwarderError {
                what: "start a thread for",
                endpoint: endpoint.to_string(),
                detail: e.to_string(),
            })?;
        Ok(SampleSubscriber {
            stop,
            histograms,
            thread: Some(thread),
        })
    }

    /// The histograms so far, as JSON (copied under the lock, the JSON made after: the
    /// subscriber's thread does not wait for it).
    pub fn to_json(&self) -> serde_json::Value {
        let copy = self
            .histograms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        copy.to_json()
    }

    /// Samples received and missed over the subscriber's life.
    pub fn counts(&self) -> (u64, u64) {
        let h = self.histograms.lock().unwrap_or_else(|p| p.into_inner());
        (h.samples_total, h.gaps_total)
    }

    /// Samples missed in the current run (the `monitor_gaps` alarm's value).
    pub fn run_gaps(&self) -> u64 {
        self.histograms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .gaps
    }

    /// The partition's run is `run` ([`SampleHistograms::set_run`]).
    pub fn set_run(&self, run: u32) {
        self.histograms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_run(run);
    }
}

impl Drop for SampleSubscriber {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_is_derived_from_the_endpoint() {
        let m = MonitoringSection {
            endpoint: "tcp://*:5600".into(),
            ..MonitoringSection::default()
        };
        assert_eq!(m.input_bind(), "tcp://*:5601");
        assert_eq!(m.input_connect(), "tcp://127.0.0.1:5601");
        assert_eq!(m.endpoint_connect(), "tcp://127.0.0.1:5600");
        assert!((m.effective_fraction() - 0.01).abs() < 1e-12);
        let ipc = MonitoringSection {
            endpoint: "ipc:///tmp/x.sock".into(),
            max_rate_hz: 10.0,
            ..MonitoringSection::default()
        };
        assert_eq!(ipc.input_bind(), "ipc:///tmp/x.sock.in");
        assert_eq!(ipc.effective_fraction(), 1.0);
    }

    #[test]
    fn bad_values_name_their_field() {
        let field = |m: MonitoringSection| match m.validate() {
            Err(ConfigError::Value { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let base = MonitoringSection {
            endpoint: "tcp://127.0.0.1:5600".into(),
            ..MonitoringSection::default()
        };
        assert!(base.validate().is_ok());
        assert!(MonitoringSection::default().validate().is_ok());
        for (m, f) in [
            (
                MonitoringSection {
                    endpoint: "udp://x:1".into(),
                    ..base.clone()
                },
                "monitoring.endpoint",
            ),
            (
                MonitoringSection {
                    fraction: Some(1.5),
                    ..base.clone()
                },
                "monitoring.fraction",
            ),
            (
                MonitoringSection {
                    max_rate_hz: -1.0,
                    ..base.clone()
                },
                "monitoring.max_rate_hz",
            ),
            (
                MonitoringSection {
                    queue: 0,
                    ..base.clone()
                },
                "monitoring.queue",
            ),
            (
                MonitoringSection {
                    input: "tcp://127.0.0.1:5600".into(),
                    ..base.clone()
                },
                "monitoring.input",
            ),
        ] {
            assert_eq!(field(m), f);
        }
        // With sampling off (no endpoint) the values are still checked.
        assert!(MonitoringSection::default().validate().is_ok());
        for (m, f) in [
            (
                MonitoringSection {
                    max_rate_hz: f64::NAN,
                    ..MonitoringSection::default()
                },
                "monitoring.max_rate_hz",
            ),
            (
                MonitoringSection {
                    max_rate_hz: -1.0,
                    ..MonitoringSection::default()
                },
                "monitoring.max_rate_hz",
            ),
            (
                MonitoringSection {
                    fraction: Some(f64::INFINITY),
                    ..MonitoringSection::default()
                },
                "monitoring.fraction",
            ),
            (
                MonitoringSection {
                    queue: 0,
                    ..MonitoringSection::default()
                },
                "monitoring.queue",
            ),
        ] {
            assert_eq!(field(m), f);
        }
    }

    /// A forwarder on ipc endpoints leaves no socket file behind when dropped (every run left
    /// `<endpoint>` and `<endpoint>.in`), and removes nothing that is not a socket.
    #[test]
    fn a_forwarder_leaves_no_ipc_socket_file() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("mon.sock");
        let m = MonitoringSection {
            endpoint: format!("ipc://{}", sock.display()),
            ..MonitoringSection::default()
        };
        let f = Forwarder::start(&m).unwrap();
        let input = dir.path().join("mon.sock.in");
        assert!(sock.exists() && input.exists());
        drop(f);
        assert!(!sock.exists() && !input.exists());
        // A plain file at the endpoint's path is not the forwarder's: left alone.
        let m = MonitoringSection {
            endpoint: format!("ipc://{}", dir.path().join("other").display()),
            ..MonitoringSection::default()
        };
        let f = Forwarder::start(&m).unwrap();
        std::fs::remove_file(dir.path().join("other")).unwrap();
        std::fs::write(dir.path().join("other"), b"data").unwrap();
        drop(f);
        assert!(dir.path().join("other").exists());
        // A forwarder never binds over a file, nor over a live forwarder's socket (ZeroMQ
        // unlinks the path first: a file there was deleted, a live service's socket taken
        // over, before a QA pass).
        let e = Forwarder::start(&m).unwrap_err().to_string();
        assert!(e.contains("not a socket"), "{e}");
        assert_eq!(std::fs::read(dir.path().join("other")).unwrap(), b"data");
        let m = MonitoringSection {
            endpoint: format!("ipc://{}", sock.display()),
            ..MonitoringSection::default()
        };
        let live = Forwarder::start(&m).unwrap();
        let e = Forwarder::start(&m).unwrap_err().to_string();
        assert!(e.contains("a process listens"), "{e}");
        drop(live);
        drop(Forwarder::start(&m).unwrap());
    }

    #[test]
    fn gaps_in_a_dcms_sequence_are_counted() {
        let mut h = SampleHistograms::default();
        for (dcm, seq) in [
            ("dcm-1", 0),
            ("dcm-1", 1),
            ("dcm-2", 5),
            ("dcm-1", 4),
            ("dcm-2", 6),
        ] {
            h.add(&Sample {
                dcm: dcm.into(),
                seq,
                bytes: 100,
                run_number: 1,
                robs: vec![(0x11_0001, 40)],
            });
        }
        assert_eq!((h.samples, h.gaps), (5, 2));
        let j = h.to_json();
        assert_eq!(
            j["rob_bytes"]["0x00110001"].as_array().map(Vec::len),
            Some(5)
        );
    }

    /// Source ids and DCM names past their limits are counted, not kept: a sender that makes
    /// up a new one per sample cannot grow the histograms without end.
    #[test]
    fn made_up_source_ids_and_dcms_are_counted_not_kept() {
        let mut h = SampleHistograms::default();
        for i in 0..(MAX_SOURCE_IDS + MAX_DCMS) as u32 {
            h.add(&Sample {
                dcm: format!("dcm-{i}"),
                seq: 0,
                bytes: 100,
                run_number: 1,
                robs: vec![(i, 40)],
            });
        }
        assert_eq!(h.rob_bytes.len(), MAX_SOURCE_IDS);
        assert_eq!(h.last_seq.len(), MAX_DCMS);
        assert_eq!(h.untracked_robs, MAX_DCMS as u64);
        assert_eq!(h.untracked_dcms, MAX_SOURCE_IDS as u64);
        // A kept source id still takes its sizes.
        h.add(&Sample {
            dcm: "dcm-0".into(),
            seq: 1,
            bytes: 100,
            run_number: 1,
            robs: vec![(0, 48)],
        });
        assert_eq!(h.rob_bytes[&0].len(), 2);
        assert_eq!(h.to_json()["untracked_robs"], MAX_DCMS as u64);
    }

    /// The histograms are of one run: the next run's first sample (or the service telling
    /// the run) clears them, a late sample of the run before is counted, not kept; the
    /// lifetime totals run on.
    #[test]
    fn each_run_has_its_own_histograms() {
        let sample = |run, seq, bytes| Sample {
            dcm: "dcm-1".into(),
            seq,
            bytes,
            run_number: run,
            robs: vec![(0x11_0001, 40)],
        };
        let mut h = SampleHistograms::default();
        for seq in [0, 1, 3] {
            h.add(&sample(7, seq, 100));
        }
        assert_eq!((h.run_number, h.samples, h.gaps), (Some(7), 3, 1));
        // Run 8 begins: its DCM numbers from 0 again, no gap counted.
        h.add(&sample(8, 0, 200));
        h.add(&sample(7, 4, 100));
        assert_eq!(
            (h.run_number, h.samples, h.gaps, h.other_run),
            (Some(8), 1, 0, 1)
        );
        assert_eq!((h.samples_total, h.gaps_total), (5, 1));
        let j = h.to_json();
        assert_eq!(j["event_bytes"], serde_json::json!([200]));
        assert_eq!(j["run_number"], 8);
        // The service says run 9 (no sample of it yet): empty histograms of run 9.
        h.set_run(9);
        h.add(&sample(8, 1, 200));
        let j = h.to_json();
        assert_eq!(j["event_bytes"], serde_json::json!([]));
        assert_eq!(
            (j["samples"].as_u64(), j["other_run"].as_u64()),
            (Some(0), Some(1))
        );
        assert_eq!(j["samples_total"], 6);
    }
}
