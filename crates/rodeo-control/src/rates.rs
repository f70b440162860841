//! Rates for the status: the partition's L1, decision and write rates and each application's
//! main rate, from counter samples at least half a second apart (0 while not running).

use std::time::{Duration, Instant};

use crate::metrics::AppMetrics;

/// The partition's totals at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// L1 accepts (the supervisor's).
    pub l1_accepts: u64,
    /// Events decided (accepted + rejected + forced, the supervisor's).
    pub decided: u64,
    /// Events written (all loggers).
    pub written: u64,
}

impl Totals {
    /// The totals of these applications' counters.
    pub fn of<'a>(apps: impl Iterator<Item = &'a AppMetrics>) -> Totals {
        let mut t = Totals::default();
        for m in apps {
            match m {
                AppMetrics::Supervisor(s) => {
                    t.l1_accepts += s.l1_accepts;
                    t.decided += s.accepted + s.rejected + s.forced_accepts;
                }
                AppMetrics::Logger(l) => t.written += l.events_written,
                AppMetrics::Dcm(_) | AppMetrics::Ros(_) => {}
            }
        }
        t
    }
}

/// Rates from the last two samples; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Rates {
    last: Option<(Instant, Totals, Vec<u64>)>,
    /// L1 accepts per second.
    pub l1_hz: f64,
    /// Events decided per second.
    pub decided_hz: f64,
    /// Events written per second.
    pub written_hz: f64,
    /// Each application's main rate ([`AppMetrics::main_count`] per second), in order.
    pub app_hz: Vec<f64>,
}

/// The shortest interval between two samples.
const MIN_INTERVAL: Duration = Duration::from_millis(500);

impl Rates {
    /// Takes a sample at `now` of the totals and of each application's main count; the rates
    /// change once the interval since the last sample reaches half a second, or at once when
    /// the partition is not running (then they are 0).
    pub fn sample(&mut self, now: Instant, running: bool, totals: Totals, counts: &[u64]) {
        let due = match &self.last {
            None => true,
            Some((t, ..)) => now.duration_since(*t) >= MIN_INTERVAL || !running,
        };
        if !due {
            return;
        }
        let (dt, old, old_counts) = match &self.last {
            Some((t, o, c)) => (now.duration_since(*t).as_secs_f64(), *o, c.clone()),
            None => (0.0, totals, counts.to_vec()),
        };
        let rate = |new: u64, old: u64| {
            if running && dt > 0.0 {
                new.saturating_sub(old) as f64 / dt
            } else {
                0.0
            }
        };
        self.l1_hz = rate(totals.l1_accepts, old.l1_accepts);
        self.decided_hz = rate(totals.decided, old.decided);
        self.written_hz = rate(totals.written, old.written);
        self.app_hz = counts
            .iter()
            .enumerate()
            .map(|(i, c)| rate(*c, old_counts.get(i).copied().unwrap_or(*c)))
            .collect();
        self.last = Some((now, totals, counts.to_vec()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_samples_half_a_second_apart_and_are_zero_when_stopped() {
        let t0 = Instant::now();
        let mut r = Rates::default();
        let tot = |l1| Totals {
            l1_accepts: l1,
            decided: l1 / 2,
            written: l1 / 10,
        };
        r.sample(t0, true, tot(0), &[0, 0]);
        assert_eq!(r.l1_hz, 0.0);
        // Too soon: nothing changes.
        r.sample(t0 + Duration::from_millis(100), true, tot(50), &[5, 50]);
        assert_eq!(r.l1_hz, 0.0);
        r.sample(t0 + Duration::from_secs(1), true, tot(1000), &[100, 1000]);
        assert!((r.l1_hz - 1000.0).abs() < 1e-6, "{r:?}");
        assert!((r.decided_hz - 500.0).abs() < 1e-6);
        assert!((r.written_hz - 100.0).abs() < 1e-6);
        assert_eq!(r.app_hz.len(), 2);
        assert!((r.app_hz[0] - 100.0).abs() < 1e-6);
        r.sample(
            t0 + Duration::from_millis(1100),
            false,
            tot(1000),
            &[100, 1000],
        );
        assert_eq!((r.l1_hz, r.app_hz[1]), (0.0, 0.0));
    }
}
