//! Trigger algorithms: what a data-collection node runs on the RoI data of an event.
//!
//! A [`TriggerAlgorithm`] gets the event's Level-1 information and the ROB fragments of its
//! regions of interest, and answers with a [`Verdict`]: reject, accept into a stream, or ask for
//! more ROBs first (the DCM fetches them and calls the algorithm again with everything it has).
//! It may also say how long the decision "took" ([`Outcome::hold`]): the built-in emulations use
//! it to model processing time without burning a core, the DCM holding the slot for that long
//! while it serves its other slots. A real algorithm computes and returns a zero hold.
//!
//! The trait is object-safe and `Send`, so a DCM holds a `Box<dyn TriggerAlgorithm>` made by a
//! factory per node; a Python callable can implement it through a small adapter.
//!
//! Built in: [`AcceptFraction`] (accepts a deterministic fraction of events by a hash of the
//! L1ID, with an emulated processing time drawn from a configured distribution, and routes the
//! accepted events to streams by configured shares).
//!
//! # Streams
//!
//! The verdict names the stream (an index into the partition's `logger.streams`): the DCM puts
//! that stream's tag into the built event and the logger writes it to that stream's files.
//! [`AcceptFraction`] picks the stream by `shares` (weights per stream, by a second hash of the
//! L1ID, so the choice is deterministic and independent of the accept decision); a Python or
//! Rust algorithm returns its own index.

use std::time::Duration;

use rodeo_format::fragment::RobFragment;

/// What the algorithm knows about the event before looking at data.
#[derive(Debug, Clone, Copy)]
pub struct EventInfo<'a> {
    /// Global event id.
    pub global_id: u64,
    /// Extended L1ID.
    pub l1id: u32,
    /// Bunch-crossing id.
    pub bcid: u32,
    /// L1 trigger type.
    pub trigger_type: u32,
    /// The RoI ROB ids.
    pub rois: &'a [u32],
}

/// The algorithm's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Reject: the event's data is cleared.
    Reject,
    /// Accept into the stream with this index (of the partition's stream list).
    Accept {
        /// Stream index.
        stream: u32,
    },
    /// Fetch these ROBs and ask again (the RoI was not enough to decide).
    NeedRobs(Vec<u32>),
}

/// A verdict and the emulated processing time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The decision.
    pub verdict: Verdict,
    /// How long the DCM holds the slot before acting on it (emulated processing time).
    pub hold: Duration,
}

/// A trigger algorithm; see the module docs.
pub trait TriggerAlgorithm: Send {
    /// Decides on one event given the ROB fragments fetched so far (the RoIs, plus any asked
    /// for with [`Verdict::NeedRobs`]).
    fn decide(&mut self, event: &EventInfo<'_>, robs: &[RobFragment<'_>]) -> Outcome;

    /// A short name for logs and summaries.
    fn name(&self) -> &str {
        "algorithm"
    }
}

/// A processing-time distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimeDistribution {
    /// No emulated time.
    Zero,
    /// Always this long.
    Fixed(Duration),
    /// Exponential with this mean (the seeds' L2 processing times are long-tailed).
    Exponential(Duration),
}

/// Accepts a fraction of events, chosen by a hash of the L1ID (so every node decides the same
/// way for the same event), with an emulated processing time.
#[derive(Debug, Clone)]
pub struct AcceptFraction {
    /// Fraction accepted (0..=1).
    pub fraction: f64,
    /// Stream index of accepted events when `shares` is empty.
    pub stream: u32,
    /// Share (weight) of the accepted events per stream index; empty: every accepted event
    /// goes to `stream`.
    pub shares: Vec<f64>,
    /// Emulated processing time.
    pub time: TimeDistribution,
}

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

impl AcceptFraction {
    /// Whether the event with this L1ID is accepted (deterministic).
    pub fn accepts(&self, l1id: u32) -> bool {
        unit(mix(u64::from(l1id))) < self.fraction
    }

    /// The stream of an accepted event with this L1ID (deterministic; by `shares`).
    pub fn stream_of(&self, l1id: u32) -> u32 {
        let total: f64 = self.shares.iter().filter(|w| **w > 0.0).sum();
        if total <= 0.0 {
            return self.stream;
        }
        let mut at = unit(mix(u64::from(l1id) ^ 0x57EA_0000_0000)) * total;
        let mut last = self.stream;
        for (i, &w) in self.shares.iter().enumerate() {
            if w <= 0.0 {
                continue;
            }
            last = i as u32;
            if at < w {
                return last;
            }
            at -= w;
        }
        last
    }
}

impl TriggerAlgorithm for AcceptFraction {
    fn decide(&mut self, event: &EventInfo<'_>, _robs: &[RobFragment<'_>]) -> Outcome {
        let verdict = if self.accepts(event.l1id) {
            Verdict::Accept {
                stream: self.stream_of(event.l1id),
            }
        } else {
            Verdict::Reject
        };
        let hold = match self.time {
            TimeDistribution::Zero => Duration::ZERO,
            TimeDistribution::Fixed(d) => d,
            TimeDistribution::Exponential(mean) => {
                let u = unit(mix(u64::from(event.l1id) ^ 0xD1CE)).max(1e-12);
                mean.mul_f64(-u.ln())
            }
        };
        Outcome { verdict, hold }
    }

    fn name(&self) -> &str {
        "accept-fraction"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_fraction_is_deterministic_and_close_to_the_fraction() {
        let mut a = AcceptFraction {
            fraction: 0.1,
            stream: 0,
            shares: Vec::new(),
            time: TimeDistribution::Exponential(Duration::from_micros(100)),
        };
        let mut accepted = 0;
        let mut total = Duration::ZERO;
        for l1id in 0..100_000u32 {
            let info = EventInfo {
                global_id: u64::from(l1id),
                l1id,
                bcid: 0,
                trigger_type: 1,
                rois: &[],
            };
            let o = a.decide(&info, &[]);
            assert_eq!(o, a.decide(&info, &[]));
            if matches!(o.verdict, Verdict::Accept { .. }) {
                accepted += 1;
            }
            total += o.hold;
        }
        assert!((9_000..11_000).contains(&accepted), "{accepted}");
        let mean = total / 100_000;
        assert!(
            mean > Duration::from_micros(90) && mean < Duration::from_micros(110),
            "{mean:?}"
        );
    }

    #[test]
    fn accepted_events_go_to_the_streams_by_their_shares() {
        let a = AcceptFraction {
            fraction: 1.0,
            stream: 0,
            shares: vec![0.7, 0.0, 0.3],
            time: TimeDistribution::Zero,
        };
        let mut counts = [0u32; 3];
        for l1id in 0..100_000u32 {
            counts[a.stream_of(l1id) as usize] += 1;
            assert_eq!(a.stream_of(l1id), a.stream_of(l1id));
        }
        assert_eq!(counts[1], 0);
        assert!((68_000..72_000).contains(&counts[0]), "{counts:?}");
        assert!((28_000..32_000).contains(&counts[2]), "{counts:?}");
        let one = AcceptFraction {
            shares: Vec::new(),
            stream: 1,
            ..a
        };
        assert_eq!(one.stream_of(7), 1);
    }
}
