//! What a tester run measured ([`TesterReport`]): counts, latency histogram, CPU time and the
//! events of each [`INTERVAL`], with the rates derived from them and the merge of several
//! instances' reports.

use std::time::Duration;

use crate::histogram::Histogram;

/// What a tester run measured.
#[derive(Debug, Clone, Default)]
pub struct TesterReport {
    /// Events fully handled and cleared.
    pub events: u64,
    /// Seconds from the first event to the last clear.
    pub seconds: f64,
    /// L2 requests sent (retries included).
    pub l2_requests: u64,
    /// EB requests sent.
    pub eb_requests: u64,
    /// Replies received.
    pub replies: u64,
    /// Fragments received (present ones).
    pub fragments: u64,
    /// Reply payload bytes received.
    pub bytes: u64,
    /// Fragments answered FRAGMENT_PENDING after every retry.
    pub pending_fragments: u64,
    /// Fragments answered FRAGMENT_LOST.
    pub lost_fragments: u64,
    /// Replies that did not decode, did not match a request, or held wrong fragments.
    pub bad_replies: u64,
    /// Requests still unanswered at the end.
    pub unanswered: u64,
    /// The run ended early: the node answered nothing for `drain_timeout` while requests
    /// waited (dead, stuck, or never there).
    pub stopped_on_silence: bool,
    /// Clear messages sent.
    pub clears: u64,
    /// Request latency (send to reply), nanoseconds.
    pub latency: Histogram,
    /// CPU time the tester thread(s) used (waiting included).
    pub cpu: Duration,
    /// Events handled in each [`INTERVAL`] of the run, in order (the last one partial): the
    /// rate over time, to tell a steady run from one whose machine changed under it.
    pub intervals: Vec<u64>,
}

/// The length of one of [`TesterReport::intervals`].
pub const INTERVAL: Duration = Duration::from_millis(250);

impl TesterReport {
    /// Delete (L1) rate in Hz.
    pub fn l1_rate_hz(&self) -> f64 {
        rate(self.events, self.seconds)
    }

    /// Requests per second.
    pub fn requests_per_s(&self) -> f64 {
        rate(self.l2_requests + self.eb_requests, self.seconds)
    }

    /// Reply bytes per second.
    pub fn bytes_per_s(&self) -> f64 {
        rate(self.bytes, self.seconds)
    }

    /// The delete (L1) rate of each whole interval, in Hz (the last, partial one left out
    /// unless it is the only one: a run shorter than an interval gives its own rate).
    pub fn interval_rates_hz(&self) -> Vec<f64> {
        let secs = INTERVAL.as_secs_f64();
        if let [n] = self.intervals[..] {
            let over = if self.seconds > 0.0 && self.seconds < secs {
                self.seconds
            } else {
                secs
            };
            return vec![n as f64 / over];
        }
        let whole = self.intervals.len().saturating_sub(1);
        self.intervals[..whole]
            .iter()
            .map(|&n| n as f64 / secs)
            .collect()
    }

    /// The `q`-quantile (0: slowest, 0.5: median, 1: fastest) of [`Self::interval_rates_hz`]
    /// (nearest rank); 0 without intervals.
    pub fn interval_rate_hz(&self, q: f64) -> f64 {
        let mut r = self.interval_rates_hz();
        r.sort_by(f64::total_cmp);
        let at = ((r.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize;
        r.get(at).copied().unwrap_or(0.0)
    }

    /// Adds another instance's report (rates then refer to the longest run).
    pub fn merge(&mut self, o: &TesterReport) {
        if self.intervals.len() < o.intervals.len() {
            self.intervals.resize(o.intervals.len(), 0);
        }
        for (a, b) in self.intervals.iter_mut().zip(&o.intervals) {
            *a += b;
        }
        self.events += o.events;
        self.seconds = self.seconds.max(o.seconds);
        self.l2_requests += o.l2_requests;
        self.eb_requests += o.eb_requests;
        self.replies += o.replies;
        self.fragments += o.fragments;
        self.bytes += o.bytes;
        self.pending_fragments += o.pending_fragments;
        self.lost_fragments += o.lost_fragments;
        self.bad_replies += o.bad_replies;
        self.unanswered += o.unanswered;
        self.stopped_on_silence |= o.stopped_on_silence;
        self.clears += o.clears;
        self.latency.merge(&o.latency);
        self.cpu += o.cpu;
    }
}

fn rate(n: u64, s: f64) -> f64 {
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Interval rates leave out the last, partial interval; their quantiles are nearest-rank;
    /// merged reports add their series interval by interval.
    #[test]
    fn interval_rates_and_their_quantiles() {
        let mut r = TesterReport {
            intervals: vec![10, 30, 20, 5],
            ..TesterReport::default()
        };
        assert_eq!(r.interval_rates_hz(), vec![40.0, 120.0, 80.0]);
        assert_eq!(r.interval_rate_hz(0.0), 40.0);
        assert_eq!(r.interval_rate_hz(0.5), 80.0);
        assert_eq!(r.interval_rate_hz(1.0), 120.0);
        r.merge(&TesterReport {
            intervals: vec![1, 1, 1, 1, 1],
            ..TesterReport::default()
        });
        assert_eq!(r.intervals, vec![11, 31, 21, 6, 1]);
        let empty = TesterReport::default();
        assert!(empty.interval_rates_hz().is_empty());
        assert_eq!(empty.interval_rate_hz(0.5), 0.0);
        // A run shorter than one interval: its one partial interval is kept.
        let short = TesterReport {
            intervals: vec![3],
            seconds: 0.1,
            ..TesterReport::default()
        };
        assert!((short.interval_rates_hz()[0] - 30.0).abs() < 1e-9);
    }
}
