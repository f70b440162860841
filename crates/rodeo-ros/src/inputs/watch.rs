//! Watching a node's inputs ([`InputWatch`]): per ROB channel what feeds it (a network
//! receiver, a card channel, or the store's own figures for the inline and SW ROD inputs),
//! read without touching the core thread, turned into [`InputStatus`] records with their
//! state, rate and problem.
//!
//! # States
//!
//! A network input's state is its receiver's ([`rodeo_cards::net::LinkState`]); one connected
//! but silent (waiting and getting nothing, not held back by a full store) for longer than the
//! node's silence time is reported `lost`. A card channel (emulated, file, replay) is `waiting`
//! until it has written, `connected` while it writes, `ended` once its link is down (a file
//! played to its end) or the node stopped (an emulator stopped at the run's end).
//!
//! # Problems
//!
//! [`InputWatch::snapshot`] judges each input now (live); [`InputWatch::at_run_end`] by the
//! end-of-run rules: an input that never delivered, was lost, lost a connection during the
//! run, stayed silent longer than the silence time (during the run or at its end), or closed
//! before the run's end without that close being its end (`listen_end_on_close = false`, or
//! closed longer than the silence time before the end). docs/run-control.md, "Inputs".

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rodeo_cards::dma::StatusReader;
use rodeo_cards::net::{LinkState, NetCounters};

use super::status::{InputState, InputStatus};
use crate::server::ChannelStats;

/// Per channel, S-LINK check errors the DMA input found (published per superpage read).
#[derive(Debug)]
pub(crate) struct LaneErrors(Box<[AtomicU64]>);

impl LaneErrors {
    pub(crate) fn new(channels: usize) -> LaneErrors {
        LaneErrors((0..channels).map(|_| AtomicU64::new(0)).collect())
    }

    pub(crate) fn set(&self, channel: usize, errors: u64) {
        if let Some(a) = self.0.get(channel) {
            a.store(errors, Ordering::Relaxed);
        }
    }

    fn get(&self, channel: usize) -> u64 {
        self.0.get(channel).map_or(0, |a| a.load(Ordering::Relaxed))
    }
}

/// What feeds one channel, as the watch reads it.
#[derive(Debug, Clone)]
pub(crate) enum ProbeSource {
    /// A network receiver.
    Net {
        /// Its counters and state.
        counters: Arc<NetCounters>,
        /// A clean close ends the input (`listen_end_on_close`).
        end_on_close: bool,
    },
    /// A card channel: emulated, file player, replay.
    Channel(StatusReader),
    /// The inline generator or a SW ROD link: the store's per-channel figures.
    Store,
}

/// One channel's input, as an input's builder describes it.
#[derive(Debug, Clone)]
pub(crate) struct LaneProbe {
    /// `tcp://…`, a file, `replay:…`, `emulated`.
    pub(crate) address: String,
    /// Where its figures come from.
    pub(crate) source: ProbeSource,
}

impl LaneProbe {
    /// `n` channels fed by what the store alone counts (`address` for each).
    pub(crate) fn store(n: usize, address: &str) -> Vec<LaneProbe> {
        (0..n)
            .map(|_| LaneProbe {
                address: address.to_string(),
                source: ProbeSource::Store,
            })
            .collect()
    }
}

/// Per channel, what the rate and age need from earlier reads.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    fragments: u64,
    rate_hz: f64,
    /// When the fragment count last changed (card channels' data age).
    changed: Option<Instant>,
    seen: u64,
}

/// How long a rate is averaged over (at least).
const RATE_WINDOW: Duration = Duration::from_secs(1);

/// A cheap shared handle on a node's inputs; see the module docs.
#[derive(Debug, Clone)]
pub struct InputWatch {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    robs: Vec<u32>,
    lanes: Vec<LaneProbe>,
    errors: Option<Arc<LaneErrors>>,
    silence: Option<Duration>,
    /// The start of the run (first the node's start): how long an input has been waiting.
    started: Mutex<Instant>,
    stopped: AtomicBool,
    store: Mutex<Option<Arc<ChannelStats>>>,
    samples: Mutex<Vec<Sample>>,
}

/// One channel read now.
struct Reading {
    state: InputState,
    fragments: u64,
    bytes: u64,
    errors: u64,
    age: Option<Duration>,
}

impl InputWatch {
    /// A watch over `lanes` (one per ROB of `robs`), silent inputs judged after `silence`
    /// (`None`: never).
    pub(crate) fn new(
        robs: Vec<u32>,
        lanes: Vec<LaneProbe>,
        errors: Option<Arc<LaneErrors>>,
        silence: Option<Duration>,
    ) -> InputWatch {
        let now = Instant::now();
        let samples = vec![
            Sample {
                at: now,
                fragments: 0,
                rate_hz: 0.0,
                changed: None,
                seen: 0,
            };
            lanes.len()
        ];
        InputWatch {
            inner: Arc::new(Inner {
                robs,
                lanes,
                errors,
                silence,
                started: Mutex::new(now),
                stopped: AtomicBool::new(false),
                store: Mutex::new(None),
                samples: Mutex::new(samples),
            }),
        }
    }

    /// The store's per-channel figures, for the inputs the store alone counts.
    pub(crate) fn set_store(&self, stats: Arc<ChannelStats>) {
        *lock(&self.inner.store) = Some(stats);
    }

    /// The node stopped: its card channels have ended.
    pub(crate) fn set_stopped(&self) {
        self.inner.stopped.store(true, Ordering::Release);
    }

    /// A run starts now: an input waits for its first data from here.
    pub fn run_started(&self) {
        *lock(&self.inner.started) = Instant::now();
    }

    /// The silence time inputs are judged by (`None`: never judged silent).
    pub fn silence(&self) -> Option<Duration> {
        self.inner.silence
    }

    /// Every input now, each with its problem as of now (`node` names the node in the
    /// records and problems).
    pub fn snapshot(&self, node: &str) -> Vec<InputStatus> {
        self.read(node, false)
    }

    /// Every input with its problem by the end-of-run rules (module docs): what the node's
    /// summary keeps, taken when the run ends.
    pub fn at_run_end(&self, node: &str) -> Vec<InputStatus> {
        self.read(node, true)
    }

    fn read(&self, node: &str, end: bool) -> Vec<InputStatus> {
        let inner = &*self.inner;
        let now = Instant::now();
        let waited = now.saturating_duration_since(*lock(&inner.started));
        let stopped = inner.stopped.load(Ordering::Acquire);
        let store = lock(&inner.store)
            .as_ref()
            .map(|s| s.snapshot())
            .unwrap_or_default();
        let mut samples = lock(&inner.samples);
        let mut out = Vec::with_capacity(inner.lanes.len());
        for (c, lane) in inner.lanes.iter().enumerate() {
            let slink_errors = inner.errors.as_ref().map_or(0, |e| e.get(c));
            let mut r = match &lane.source {
                ProbeSource::Net { counters, .. } => {
                    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
                    let state = match counters.state() {
                        LinkState::Waiting => InputState::Waiting,
                        LinkState::Connected if self.silent(counters.silence()) => InputState::Lost,
                        LinkState::Connected => InputState::Connected,
                        LinkState::Closed => InputState::Closed,
                        LinkState::Lost => InputState::Lost,
                    };
                    Reading {
                        state,
                        fragments: ld(&counters.units),
                        bytes: ld(&counters.bytes),
                        errors: ld(&counters.dropped_units)
                            + ld(&counters.kernel_dropped_units)
                            + ld(&counters.broken_connections)
                            + slink_errors,
                        age: counters.last_data_age(),
                    }
                }
                ProbeSource::Channel(status) => {
                    let s = status.status();
                    let state = if !s.link_up || stopped {
                        InputState::Ended
                    } else if s.counters.units == 0 {
                        InputState::Waiting
                    } else {
                        InputState::Connected
                    };
                    Reading {
                        state,
                        fragments: s.counters.units,
                        bytes: s.counters.bytes,
                        errors: slink_errors,
                        age: None,
                    }
                }
                ProbeSource::Store => {
                    let fragments = store.get(c).map_or(0, |f| f.fragments);
                    let state = if stopped {
                        InputState::Ended
                    } else if fragments == 0 {
                        InputState::Waiting
                    } else {
                        InputState::Connected
                    };
                    Reading {
                        state,
                        fragments,
                        bytes: 0,
                        errors: slink_errors,
                        age: None,
                    }
                }
            };
            let rate_hz = match samples.get_mut(c) {
                Some(s) => {
                    if r.fragments != s.seen {
                        s.seen = r.fragments;
                        s.changed = Some(now);
                    }
                    let dt = now.saturating_duration_since(s.at);
                    if dt >= RATE_WINDOW {
                        s.rate_hz =
                            r.fragments.saturating_sub(s.fragments) as f64 / dt.as_secs_f64();
                        s.at = now;
                        s.fragments = r.fragments;
                    }
                    if r.age.is_none() && r.fragments > 0 {
                        r.age = s.changed.map(|t| now.saturating_duration_since(t));
                    }
                    s.rate_hz
                }
                None => 0.0,
            };
            let rob = inner.robs.get(c).copied().unwrap_or(0);
            let problem = self
                .problem(lane, &r, waited, end)
                .map(|what| format!("{node} ROB 0x{rob:08x} {}: {what}", lane.address));
            out.push(InputStatus {
                node: node.to_string(),
                rob,
                address: lane.address.clone(),
                state: r.state,
                fragments: r.fragments,
                bytes: r.bytes,
                errors: r.errors,
                last_data_age_ms: r.age.map(|a| a.as_millis() as u64),
                rate_hz,
                problem,
            });
        }
        out
    }

    /// Longer than the silence time (never, without one).
    fn silent(&self, d: Duration) -> bool {
        self.inner.silence.is_some_and(|t| d > t)
    }

    /// What makes this input a problem, if anything: live (`end` false) or by the end-of-run
    /// rules (module docs).
    fn problem(
        &self,
        lane: &LaneProbe,
        r: &Reading,
        waited: Duration,
        end: bool,
    ) -> Option<String> {
        let secs = |d: Duration| format!("{:.1} s", d.as_secs_f64());
        let limit = self
            .inner
            .silence
            .map(|t| format!(" (ros.input_silence_seconds = {})", t.as_secs_f64()))
            .unwrap_or_default();
        let ProbeSource::Net {
            counters,
            end_on_close,
        } = &lane.source
        else {
            // Card channels and the store's inputs: only an input that never delivered in
            // longer than the silence time (a run stopped at once is no card's fault).
            return (r.fragments == 0 && self.silent(waited)).then(|| {
                if end {
                    "delivered nothing".to_string()
                } else {
                    format!("delivered nothing in {}", secs(waited))
                }
            });
        };
        let udp = lane.address.starts_with("udp://");
        let lost_before = counters.broken_connections.load(Ordering::Relaxed);
        let raw = counters.state();
        match r.state {
            InputState::Waiting if end || self.silent(waited) => {
                let what = if udp {
                    "received nothing"
                } else {
                    "never connected"
                };
                Some(if end {
                    what.to_string()
                } else {
                    format!("{what} in {}{limit}", secs(waited))
                })
            }
            InputState::Lost if raw == LinkState::Lost => Some(format!(
                "connection lost: {}",
                counters
                    .lost_reason()
                    .unwrap_or_else(|| "no reason recorded".into())
            )),
            InputState::Lost => Some(format!("silent for {}{limit}", secs(counters.silence()))),
            InputState::Closed => {
                let ago = counters.state_age().unwrap_or_default();
                if !end_on_close && end {
                    Some(format!(
                        "the sender closed its connection {} before the run's end and none \
                         came back (ros.listen_end_on_close = false)",
                        secs(ago)
                    ))
                } else if self.silent(ago) {
                    Some(format!(
                        "the sender closed its connection {} {}{limit}",
                        secs(ago),
                        if end { "before the run's end" } else { "ago" }
                    ))
                } else if end && lost_before > 0 {
                    Some(format!(
                        "{lost_before} connection(s) lost during the run (last: {})",
                        counters.lost_reason().unwrap_or_default()
                    ))
                } else {
                    None
                }
            }
            InputState::Connected if end && r.fragments == 0 => {
                Some("connected but sent nothing".to_string())
            }
            InputState::Connected if end && lost_before > 0 => Some(format!(
                "{lost_before} connection(s) lost during the run (last: {})",
                counters.lost_reason().unwrap_or_default()
            )),
            InputState::Connected if end && self.silent(counters.longest_silence()) => {
                Some(format!(
                    "silent for up to {} during the run{limit}",
                    secs(counters.longest_silence())
                ))
            }
            _ => None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
