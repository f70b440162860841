//! A fixed log-linear latency histogram: 8 sub-buckets per power of two, no allocation after
//! construction, percentiles within 12.5%.

/// Latency histogram in nanoseconds.
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Box<[u64]>,
    count: u64,
    max: u64,
}

const SUB: u32 = 8;

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram {
            buckets: vec![0; (64 * SUB) as usize].into_boxed_slice(),
            count: 0,
            max: 0,
        }
    }

    fn bucket(v: u64) -> usize {
        if v < u64::from(SUB) {
            return v as usize;
        }
        let exp = 63 - v.leading_zeros(); // >= 3
        let sub = (v >> (exp - 3)) & u64::from(SUB - 1);
        ((exp - 2) * SUB) as usize + sub as usize
    }

    fn lower_bound(b: usize) -> u64 {
        let b = b as u64;
        if b < u64::from(SUB) {
            return b;
        }
        let exp = b / u64::from(SUB) + 2;
        let sub = b % u64::from(SUB);
        (1u64 << exp) | (sub << (exp - 3))
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.buckets[Self::bucket(v)] += 1;
        self.count += 1;
        self.max = self.max.max(v);
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest value recorded.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0.0 ..= 1.0): the lower bound of its bucket; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::lower_bound(b).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_bucket() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v * 100);
        }
        let p50 = h.quantile(0.5) as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.13, "{p50}");
        let p99 = h.quantile(0.99) as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.13, "{p99}");
        assert_eq!(h.max(), 1_000_000);
        assert_eq!(Histogram::new().quantile(0.5), 0);
        for v in [0u64, 1, 7, 8, 9, 15, 16, 1 << 40, u64::MAX] {
            let b = Histogram::bucket(v);
            assert!(Histogram::lower_bound(b) <= v, "{v}");
        }
    }
}
