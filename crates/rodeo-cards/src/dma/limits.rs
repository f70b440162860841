//! The unit-rate and bandwidth limits of an emulated channel ([`super::EmulatedConfig`]): token
//! buckets refilled from the elapsed time, capped at 10 ms worth.

use std::time::Instant;

use super::{EmulatedConfig, Fill};

/// A token bucket: refilled from elapsed time at `per_s`, capped at 10 ms worth.
pub(super) struct Bucket {
    per_s: f64,
    tokens: f64,
}

impl Bucket {
    fn new(per_s: Option<f64>) -> Option<Bucket> {
        per_s
            .filter(|r| *r > 0.0)
            .map(|per_s| Bucket { per_s, tokens: 0.0 })
    }

    fn refill(&mut self, seconds: f64) {
        let cap = (self.per_s * 0.01).max(1.0);
        self.tokens = (self.tokens + seconds * self.per_s).min(cap);
    }
}

/// The unit-rate and bandwidth limits of a channel.
pub(super) struct Limits {
    units: Option<Bucket>,
    bytes: Option<Bucket>,
    /// When the last grant was computed: the engine's clock for the turn.
    pub(super) last: Instant,
    /// Bytes of the last unit written, to turn a byte budget into a unit count.
    unit_bytes: f64,
}

impl Limits {
    pub(super) fn new(config: &EmulatedConfig) -> Option<Limits> {
        let units = Bucket::new(config.max_units_per_s);
        let bytes = Bucket::new(config.max_bytes_per_s);
        (units.is_some() || bytes.is_some()).then(|| Limits {
            units,
            bytes,
            last: Instant::now(),
            unit_bytes: 1.0,
        })
    }

    /// Units that may be written now (0: wait).
    pub(super) fn grant(&mut self) -> u64 {
        let now = Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        let mut n = u64::MAX;
        if let Some(u) = &mut self.units {
            u.refill(dt);
            n = n.min(u.tokens.max(0.0) as u64);
        }
        if let Some(b) = &mut self.bytes {
            b.refill(dt);
            n = if b.tokens <= 0.0 {
                0
            } else {
                n.min(((b.tokens / self.unit_bytes) as u64).max(1))
            };
        }
        n
    }

    pub(super) fn charge(&mut self, fill: Fill) {
        if let Some(u) = &mut self.units {
            u.tokens -= fill.units as f64;
        }
        if let Some(b) = &mut self.bytes {
            b.tokens -= fill.bytes as f64;
        }
        if fill.units > 0 {
            self.unit_bytes = (fill.bytes as f64 / fill.units as f64).max(1.0);
        }
    }
}
