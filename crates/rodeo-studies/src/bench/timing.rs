//! Cheap timing for benchmarks: a tick counter calibrated against `Instant`, and a fixed
//! log-linear histogram that never allocates while recording.

use std::time::Instant;

/// Reads the tick counter: the TSC on x86-64, nanoseconds since the first call elsewhere.
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions; every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Name of the tick source, for the report.
pub const CLOCK: &str = if cfg!(target_arch = "x86_64") {
    "rdtsc"
} else {
    "instant"
};

/// Converts ticks to nanoseconds by comparing the tick counter with `Instant` over the run.
#[derive(Debug, Clone, Copy)]
pub struct Calibration {
    start: Instant,
    start_ticks: u64,
}

impl Calibration {
    /// Starts calibrating the tick counter against the monotonic clock.
    pub fn start() -> Calibration {
        Calibration {
            start: Instant::now(),
            start_ticks: ticks(),
        }
    }

    /// Nanoseconds per tick measured from `start` until now (call after the run, seconds later).
    pub fn ns_per_tick(&self) -> f64 {
        let ns = self.start.elapsed().as_nanos() as f64;
        let t = ticks().wrapping_sub(self.start_ticks) as f64;
        if t <= 0.0 {
            1.0
        } else {
            ns / t
        }
    }
}

/// Sub-buckets per power of two (relative precision 1/16).
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Values below this are counted exactly.
const LINEAR: usize = 2 * SUB;
const BUCKETS: usize = LINEAR + (64 - SUB_BITS as usize - 1) * SUB;

/// A log-linear histogram of tick counts: exact below 32, then 16 buckets per power of two.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    count: u64,
    sum: u128,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram {
            counts: Box::new([0; BUCKETS]),
            count: 0,
            sum: 0,
            max: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < LINEAR as u64 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros(); // >= SUB_BITS + 1
        let shift = e - SUB_BITS;
        let mantissa = (v >> shift) as usize - SUB; // 0..SUB
        LINEAR + (e - SUB_BITS - 1) as usize * SUB + mantissa
    }

    /// Midpoint of bucket `i`.
    fn value(i: usize) -> f64 {
        if i < LINEAR {
            return i as f64;
        }
        let e = (i - LINEAR) / SUB + SUB_BITS as usize + 1;
        let mantissa = (i - LINEAR) % SUB + SUB;
        let shift = e - SUB_BITS as usize;
        let low = (mantissa as u64) << shift;
        low as f64 + ((1u64 << shift) as f64 - 1.0) / 2.0
    }

    #[inline]
    /// Counts one value.
    pub fn record(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
        self.count += 1;
        self.sum += u128::from(v);
        self.max = self.max.max(v);
    }

    /// Adds another histogram's counts to this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The mean of the values counted.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The largest value counted.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value below which a fraction `q` of the samples lie (bucket midpoint).
    pub fn quantile(&self, q: f64) -> f64 {
        let rank = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i).min(self.max as f64);
            }
        }
        self.max as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_close() {
        let mut last = 0;
        for v in (0..100_000u64).chain([u64::MAX / 3, u64::MAX]) {
            let i = Histogram::index(v);
            assert!(i >= last && i < BUCKETS, "v={v} i={i}");
            last = i;
            let mid = Histogram::value(i);
            assert!(
                (mid - v as f64).abs() <= (v as f64) / 16.0 + 1.0,
                "v={v} mid={mid}"
            );
        }
    }

    #[test]
    fn quantiles() {
        let mut h = Histogram::new();
        for v in 1..=1000 {
            h.record(v);
        }
        assert_eq!(h.count(), 1000);
        assert_eq!(h.max(), 1000);
        assert!((h.mean() - 500.5).abs() < 1e-9);
        let p99 = h.quantile(0.99);
        assert!((p99 - 990.0).abs() < 40.0, "{p99}");
    }
}
