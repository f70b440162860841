//! The RoI builder (RoIB): L1 accepts assembled from several Level-1 inputs by L1ID.
//!
//! In ATLAS the RoIB receives, per L1 accept, one fragment from each Level-1 source (the CTP,
//! the calorimeter and muon triggers) and hands the supervisor one record with every region of
//! interest. [`Roib`] does that with emulated inputs: each input is a thread running the same
//! deterministic [`L1Source`] (so all agree on L1ID, BCID and the event's RoIs) and sending its
//! share of the RoIs (RoI `k` of an event belongs to input `k % inputs`) into its own bounded
//! queue.
//!
//! # Assembly and timeout
//!
//! Events are assembled in order. The next event is complete when every input's queue head
//! carries it; an input whose head is a later event has lost this one's fragment (it never
//! comes), an empty input may still deliver. An event still incomplete `timeout` after the
//! first of its fragments was seen is assembled from what arrived and counted as incomplete.
//!
//! # Flow control
//!
//! The supervisor takes an accept only against a free DCM slot. While it takes none the
//! queues fill, and an input with a full queue stops (XOFF, counted in [`RoibCounters::busy`]):
//! the Level-1 sees the busy, nothing is dropped.
//!
//! # Shutdown
//!
//! The inputs stop after the configured number of events, or when the RoIB is dropped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rodeo_memory::{BackoffSpec, BoundedQueue, FullPolicy};

use crate::l1source::{L1Accept, L1Source, L1SourceConfig, Pacer};

/// Configuration of the RoIB.
#[derive(Debug, Clone, PartialEq)]
pub struct RoibConfig {
    /// Number of Level-1 inputs (at least 1).
    pub inputs: usize,
    /// An event incomplete this long after its first fragment is assembled without the rest.
    pub timeout: Duration,
    /// Fragments each input queue holds before the input is busy.
    pub queue_depth: usize,
    /// Emulated loss: this fraction of each input's fragments is never sent (for tests of the
    /// timeout; 0 in a real run).
    pub loss_fraction: f64,
}

impl Default for RoibConfig {
    fn default() -> RoibConfig {
        RoibConfig {
            inputs: 3,
            timeout: Duration::from_millis(100),
            queue_depth: 1024,
            loss_fraction: 0.0,
        }
    }
}

/// Counters of the RoIB (64-bit).
#[derive(Debug, Default)]
pub struct RoibCounters {
    /// Fragments received from the inputs.
    pub fragments: AtomicU64,
    /// Accepts assembled.
    pub assembled: AtomicU64,
    /// Of those, assembled at the timeout without every input.
    pub incomplete: AtomicU64,
    /// Times an input found its queue full and waited (XOFF).
    pub busy: AtomicU64,
}

struct Input {
    queue: Arc<BoundedQueue<L1Accept>>,
    thread: Option<JoinHandle<()>>,
}

/// The RoI builder; see the module docs.
pub struct Roib {
    config: RoibConfig,
    inputs: Vec<Input>,
    stop: Arc<AtomicBool>,
    counters: Arc<RoibCounters>,
    next: u64,
    events: Option<u64>,
    first_seen: Option<Instant>,
    rois: Vec<u32>,
    /// Each input's oldest fragment not yet used.
    heads: Vec<Option<L1Accept>>,
    /// The L1 sequence every input follows, stepped once per assembled event.
    shadow: L1Source,
}

impl std::fmt::Debug for Roib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Roib")
            .field("inputs", &self.inputs.len())
            .field("next", &self.next)
            .finish()
    }
}

fn lost(global_id: u64, input: usize, fraction: f64) -> bool {
    if fraction <= 0.0 {
        return false;
    }
    let mut z = global_id
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(input as u64);
    z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    ((z >> 11) as f64 / (1u64 << 53) as f64) < fraction
}

impl Roib {
    /// Starts the emulated inputs, each running `l1` (rate, event count, RoIs, seed).
    pub fn start(config: RoibConfig, l1: &L1SourceConfig) -> std::io::Result<Roib> {
        let n = config.inputs.max(1);
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(RoibCounters::default());
        let mut inputs = Vec::with_capacity(n);
        for i in 0..n {
            // `block` (an XOFF to the input): paced producers, so the back-off sleeps at once.
            let queue = Arc::new(BoundedQueue::new(
                "dataflow.roib.input",
                config.queue_depth,
                FullPolicy::Block(BackoffSpec::PACED),
            ));
            let (q, s, c) = (Arc::clone(&queue), Arc::clone(&stop), Arc::clone(&counters));
            let l1 = l1.clone();
            let loss = config.loss_fraction;
            let thread = std::thread::Builder::new()
                .name(format!("roib-input{i}"))
                .spawn(move || run_input(i, n, l1, loss, &q, &s, &c))?;
            inputs.push(Input {
                queue,
                thread: Some(thread),
            });
        }
        Ok(Roib {
            config,
            inputs,
            stop,
            counters,
            next: 0,
            events: l1.events,
            first_seen: None,
            rois: Vec::with_capacity(crate::l1source::MAX_ROIS),
            heads: vec![None; n],
            shadow: L1Source::new(l1.clone()),
        })
    }

    /// The counters.
    pub fn counters(&self) -> &RoibCounters {
        &self.counters
    }

    /// Accepts assembled so far.
    pub fn produced(&self) -> u64 {
        self.next
    }

    /// Whether the configured number of events has been assembled.
    pub fn is_done(&self) -> bool {
        self.events.is_some_and(|n| self.next >= n)
    }

    /// The next assembled accept, if it is complete or timed out; `None` otherwise (try again).
    pub fn next_accept(&mut self) -> Option<L1Accept> {
        if self.is_done() {
            return None;
        }
        let g = self.next;
        let mut waiting = false;
        for (input, head) in self.inputs.iter().zip(self.heads.iter_mut()) {
            // Skip anything older than the event being built (cannot happen in order).
            while head.is_none_or(|a| a.global_id < g) {
                match input.queue.pop() {
                    Some(a) => {
                        self.counters.fragments.fetch_add(1, Ordering::Relaxed);
                        *head = Some(a);
                    }
                    None => {
                        *head = None;
                        break;
                    }
                }
            }
            // No head: this input may still deliver. A later event at the head: it lost ours.
            if head.is_none() {
                waiting = true;
            }
        }
        if waiting {
            let now = Instant::now();
            let first = *self.first_seen.get_or_insert(now);
            if now.duration_since(first) < self.config.timeout {
                return None;
            }
        }
        // Assemble from every input whose head is this event; the L1ID comes from the shared
        // L1 sequence (so an event every input lost still gets its accept and its clear).
        let truth = self.shadow.next_accept()?;
        self.rois.clear();
        let mut got = 0;
        for head in &mut self.heads {
            if let Some(a) = head.filter(|a| a.global_id == g) {
                got += 1;
                for &r in a.rois() {
                    if !self.rois.contains(&r) {
                        self.rois.push(r);
                    }
                }
                *head = None;
            }
        }
        self.first_seen = None;
        self.next += 1;
        self.counters.assembled.fetch_add(1, Ordering::Relaxed);
        if got < self.inputs.len() {
            self.counters.incomplete.fetch_add(1, Ordering::Relaxed);
        }
        Some(L1Accept::new(
            g,
            truth.l1id,
            truth.bcid,
            truth.trigger_type,
            &self.rois,
        ))
    }
}

impl Drop for Roib {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for i in &mut self.inputs {
            if let Some(t) = i.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// One emulated Level-1 input: the shared L1 sequence, this input's share of each event's RoIs.
fn run_input(
    index: usize,
    inputs: usize,
    l1: L1SourceConfig,
    loss: f64,
    queue: &BoundedQueue<L1Accept>,
    stop: &AtomicBool,
    counters: &RoibCounters,
) {
    let mut pacer = Pacer::new(l1.rate_hz);
    let mut source = L1Source::new(l1);
    let mut share = Vec::with_capacity(crate::l1source::MAX_ROIS);
    while !stop.load(Ordering::Acquire) {
        if pacer.available() == 0 {
            std::thread::sleep(Duration::from_secs_f64(pacer.wait_s().clamp(1e-5, 1e-3)));
            continue;
        }
        let Some(a) = source.next_accept() else {
            return;
        };
        pacer.take(1);
        if lost(a.global_id, index, loss) {
            continue;
        }
        share.clear();
        share.extend(
            a.rois()
                .iter()
                .enumerate()
                .filter(|(k, _)| k % inputs == index)
                .map(|(_, &r)| r),
        );
        let fragment = L1Accept::new(a.global_id, a.l1id, a.bcid, a.trigger_type, &share);
        let mut waited = false;
        let pushed = queue.push_or(fragment, || {
            if !waited {
                counters.busy.fetch_add(1, Ordering::Relaxed);
                waited = true;
            }
            stop.load(Ordering::Acquire)
        });
        if pushed.is_err() {
            return; // stopped while the queue was full
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l1(events: u64) -> L1SourceConfig {
        L1SourceConfig {
            events: Some(events),
            roi_robs: (1..=20).collect(),
            rois_per_event: (2, 4),
            l1id_wrap: 50,
            ..L1SourceConfig::default()
        }
    }

    fn drain(roib: &mut Roib) -> Vec<L1Accept> {
        let mut out = Vec::new();
        rodeo_testkit::wait_until("the RoIB to finish", Duration::from_secs(30), || {
            while let Some(a) = roib.next_accept() {
                out.push(a);
            }
            roib.is_done()
        });
        out
    }

    #[test]
    fn assembles_what_the_emulator_would_give() {
        let mut roib = Roib::start(
            RoibConfig {
                inputs: 3,
                queue_depth: 8,
                ..RoibConfig::default()
            },
            &l1(500),
        )
        .unwrap();
        let got = drain(&mut roib);
        let mut reference = L1Source::new(l1(500));
        for a in &got {
            let r = reference.next_accept().unwrap();
            assert_eq!((a.global_id, a.l1id, a.bcid), (r.global_id, r.l1id, r.bcid));
            let (mut x, mut y) = (a.rois().to_vec(), r.rois().to_vec());
            x.sort_unstable();
            y.sort_unstable();
            assert_eq!(x, y, "event {}", a.global_id);
        }
        assert_eq!(got.len(), 500);
        let c = roib.counters();
        assert_eq!(c.incomplete.load(Ordering::Relaxed), 0);
        // Queues of 8 for 500 events drained by this slow loop: the inputs had to wait.
        assert!(c.busy.load(Ordering::Relaxed) > 0, "no flow control seen");
    }

    #[test]
    fn lost_fragments_time_out_into_incomplete_accepts() {
        let mut roib = Roib::start(
            RoibConfig {
                inputs: 2,
                timeout: Duration::from_millis(5),
                loss_fraction: 0.05,
                ..RoibConfig::default()
            },
            &l1(400),
        )
        .unwrap();
        let got = drain(&mut roib);
        assert_eq!(got.len(), 400);
        assert!(got.iter().enumerate().all(|(i, a)| a.global_id == i as u64));
        let incomplete = roib.counters().incomplete.load(Ordering::Relaxed);
        assert!(incomplete > 0 && incomplete < 100, "{incomplete}");
    }
}
