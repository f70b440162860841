//! A lock-free latency histogram with logarithmic (power-of-two) buckets.
//!
//! # State
//!
//! [`LogHistogram`] is a fixed array of [`BUCKETS`] `AtomicU64` counts, an `AtomicU64` sum of
//! the observations (nanoseconds) and nothing else: no allocation, no lock. Bucket `i` counts
//! the observations below `2^(MIN_SHIFT + i)` ns that did not fit in bucket `i - 1`; the last
//! bucket is the overflow (above about 17 s). [`LogHistogram::record_ns`] is one
//! `leading_zeros`, two relaxed `fetch_add`s: cheap enough for every event on the data path.
//!
//! # Ownership and readers
//!
//! The recording thread owns nothing: the histogram is shared (usually inside an `Arc`'d
//! counters struct) and any thread may record or read. A reader ([`LogHistogram::snapshot`])
//! loads each bucket once; since the loads are not one atomic step, a snapshot taken while
//! recording goes on may be off by the observations in flight, which monitoring tolerates (the
//! Prometheus writer makes the buckets cumulative, so the page is always consistent with
//! itself).

use std::sync::atomic::{AtomicU64, Ordering};

/// log2 of the first bucket's upper bound in nanoseconds (1.024 µs).
pub const MIN_SHIFT: u32 = 10;
/// Buckets, the last being the overflow: bounds 2^10 ns .. 2^34 ns (about 17 s), then +Inf.
pub const BUCKETS: usize = 26;

/// A lock-free histogram of durations in nanoseconds; see the module docs.
#[derive(Debug)]
pub struct LogHistogram {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

/// A copy of a histogram's counts at one moment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HistogramSnapshot {
    /// Per-bucket counts (not cumulative); the last is the overflow.
    pub counts: [u64; BUCKETS],
    /// Sum of the observations in nanoseconds.
    pub sum_ns: u64,
}

impl HistogramSnapshot {
    /// Observations counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The upper bound (ns) of the bucket holding the `q` quantile (0..=1), `None` if empty or
    /// in the overflow bucket.
    pub fn quantile_bound_ns(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let want = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return LogHistogram::bound_ns(i);
            }
        }
        None
    }
}

impl LogHistogram {
    /// An empty histogram.
    pub fn new() -> LogHistogram {
        LogHistogram::default()
    }

    /// The bucket index of `ns`.
    pub fn bucket_of(ns: u64) -> usize {
        let bits = 64 - ns.leading_zeros();
        (bits.saturating_sub(MIN_SHIFT) as usize).min(BUCKETS - 1)
    }

    /// The upper bound (exclusive, ns) of bucket `i`; `None` for the overflow bucket.
    pub fn bound_ns(i: usize) -> Option<u64> {
        (i < BUCKETS - 1).then(|| 1u64 << (MIN_SHIFT as usize + i))
    }

    /// The buckets' upper bounds in seconds (for the Prometheus `le` labels), overflow excluded.
    pub fn bounds_seconds() -> [f64; BUCKETS - 1] {
        std::array::from_fn(|i| (1u64 << (MIN_SHIFT as usize + i)) as f64 * 1e-9)
    }

    /// Records one observation of `ns` nanoseconds (lock-free, no allocation).
    #[inline]
    pub fn record_ns(&self, ns: u64) {
        self.counts[Self::bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Records a duration.
    #[inline]
    pub fn record(&self, d: std::time::Duration) {
        self.record_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The counts now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(LogHistogram::bucket_of(0), 0);
        assert_eq!(LogHistogram::bucket_of(1023), 0);
        assert_eq!(LogHistogram::bucket_of(1024), 1);
        assert_eq!(LogHistogram::bucket_of(2047), 1);
        assert_eq!(LogHistogram::bucket_of(2048), 2);
        assert_eq!(LogHistogram::bucket_of(u64::MAX), BUCKETS - 1);
        for i in 0..BUCKETS - 1 {
            let b = LogHistogram::bound_ns(i).unwrap();
            assert_eq!(LogHistogram::bucket_of(b - 1), i);
            assert_eq!(LogHistogram::bucket_of(b), i + 1);
        }
        assert_eq!(LogHistogram::bound_ns(BUCKETS - 1), None);
    }

    #[test]
    fn records_from_many_threads_without_losing_any() {
        let h = Arc::new(LogHistogram::new());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let h = Arc::clone(&h);
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        h.record_ns((i * 997 + t) % 5_000_000);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 40_000);
        let expect: u64 = (0..4u64)
            .flat_map(|t| (0..10_000u64).map(move |i| (i * 997 + t) % 5_000_000))
            .sum();
        assert_eq!(s.sum_ns, expect);
        let p50 = s.quantile_bound_ns(0.5).unwrap();
        assert!((1 << 20..=1 << 23).contains(&p50), "{p50}");
    }
}
