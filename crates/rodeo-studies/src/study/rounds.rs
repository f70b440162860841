//! How a study measures on a shared host: every point `rounds` times, the points interleaved,
//! each measurement bracketed by a fixed CPU probe, a measurement taken while the probe says
//! the host was slow measured again, and each point summarised by its median and spread.
//!
//! - **Interleaving.** Round `r` measures every point once, in an order shuffled afresh for
//!   that round ([`order`]): no point is measured twice in a row and no configuration's runs
//!   sit in one block, so a neighbour's burst of load lands on different points each round
//!   instead of on all runs of one point.
//! - **Probe.** Before the first measurement and after every measurement the probe runs (the
//!   caller's closure; the studies use [`crate::bench::probe::shared_ring_rate`], a fixed
//!   two-thread shared-memory workload whose rate moves with the host, not with rodeo). A
//!   measurement's probe value is the lower of the probes just before and just after it.
//! - **Repeat.** When that value is below [`Plan::slow_ratio`] times the best the host has
//!   given so far (the 90th percentile of the probes seen: a robust best, which one freak probe
//!   does not raise out of reach; [`reference`]), the measurement is taken again (at most [`Plan::max_repeats`] times, and only while
//!   the study's time budget allows); of the attempts the one with the best probe is kept and
//!   the discarded ones are counted ([`Sample::repeats`]). A repeat is preceded by a fresh
//!   probe (the host may have recovered).
//! - **Summary.** [`summarize`] gives a point's median over its kept runs and their spread.
//!
//! Nothing here measures by itself: the probe and the measurement are the caller's closures,
//! so a test can hand it a probe that reports a slow host and see the run repeated.

use std::time::{Duration, Instant};

use serde_json::{Map, Value};

/// How the runs of a study are scheduled.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Measurements kept per point.
    pub rounds: usize,
    /// A measurement whose probe is below this fraction of the [`reference`] is repeated.
    pub slow_ratio: f64,
    /// Repeats of one measurement at most.
    pub max_repeats: usize,
    /// No repeat once the projected duration of the whole schedule (elapsed plus the remaining
    /// measurements at the mean duration so far) would pass this.
    pub budget: Option<Duration>,
    /// Seed of the per-round point order.
    pub seed: u64,
}

impl Plan {
    /// `rounds` rounds, repeats below 70% of the reference probe, at most 2 repeats per
    /// measurement, no time budget.
    pub fn new(rounds: usize) -> Plan {
        Plan {
            rounds,
            slow_ratio: 0.7,
            max_repeats: 2,
            budget: None,
            seed: 0x5eed,
        }
    }
}

/// One kept measurement of a point.
#[derive(Debug, Clone)]
pub struct Sample<T> {
    /// What the measurement returned.
    pub value: T,
    /// The round it belongs to.
    pub round: usize,
    /// The probe's value for it: the lower of the probes just before and just after.
    pub probe: f64,
    /// Attempts discarded before this one was kept because the probe said the host was slow.
    pub repeats: usize,
}

/// Every point's kept measurements and what the probe saw.
#[derive(Debug)]
pub struct Schedule<T> {
    /// Per point (in the caller's order), its kept samples in round order.
    pub samples: Vec<Vec<Sample<T>>>,
    /// The best probe value seen over the whole schedule.
    pub best_probe: f64,
    /// The [`reference`] of all the schedule's probes (what [`Schedule::probe_ratio`] divides
    /// by).
    pub reference_probe: f64,
    /// Every probe value, in the order taken.
    pub probes: Vec<f64>,
    /// The attempts measured again, as (point, the attempt): kept for the record.
    pub discarded: Vec<(usize, Sample<T>)>,
    /// Measurements taken again because the probe said the host was slow.
    pub repeated: usize,
    /// Measurements kept although their probe was slow (repeat limit or time budget reached).
    pub slow_kept: usize,
    /// Wall-clock duration of the whole schedule.
    pub elapsed: Duration,
}

impl<T> Schedule<T> {
    /// A sample's probe value over the reference probe of the whole schedule (1 = the host as
    /// fast as it was at its best; 0 when no probe ran).
    pub fn probe_ratio(&self, s: &Sample<T>) -> f64 {
        if self.reference_probe > 0.0 {
            s.probe / self.reference_probe
        } else {
            0.0
        }
    }

    /// For each point: the median probe ratio of its kept samples, and its repeats in total.
    pub fn point_probe(&self, point: usize) -> (f64, usize) {
        let ratios: Vec<f64> = self.samples[point]
            .iter()
            .map(|s| self.probe_ratio(s))
            .collect();
        let repeats = self.samples[point].iter().map(|s| s.repeats).sum();
        (summarize(&ratios).median, repeats)
    }
}

/// The order of the points in round `round`: a permutation of `0..points`, different for every
/// round (Fisher-Yates with a SplitMix64 stream seeded by `seed` and the round). When a round
/// would start with the point the previous round ended with, its first two are swapped.
pub fn order(points: usize, round: usize, seed: u64) -> Vec<usize> {
    let shuffled = |r: usize| {
        let mut v: Vec<usize> = (0..points).collect();
        let mut rng = SplitMix(seed ^ (r as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for i in (1..points).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        v
    };
    let mut v = shuffled(round);
    if round > 0 && points > 1 && shuffled(round - 1).last() == v.first() {
        v.swap(0, 1);
    }
    v
}

/// A small deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// The probe value the host counts as "at its best": the 90th percentile of `probes` (the
/// largest of fewer than ten), so that a single freak probe does not set the bar.
pub fn reference(probes: &[f64]) -> f64 {
    quantile(probes, 0.9)
}

/// Measures `points` points as `plan` says: `measure(point, round)` for every point in every
/// round, in [`order`], `probe()` before the first and after every measurement, repeating a
/// measurement whose probe is slow. Errors of `measure` end the schedule.
pub fn run<T, P, M>(
    points: usize,
    plan: &Plan,
    mut probe: P,
    mut measure: M,
) -> anyhow::Result<Schedule<T>>
where
    P: FnMut() -> f64,
    M: FnMut(usize, usize) -> anyhow::Result<T>,
{
    anyhow::ensure!(plan.rounds >= 1, "at least one round");
    let start = Instant::now();
    let mut samples: Vec<Vec<Sample<T>>> = (0..points).map(|_| Vec::new()).collect();
    // Two probes first: the host's state before anything is measured, and a reference to
    // compare the first measurements with.
    let mut probes = vec![probe()];
    let mut before = probe();
    probes.push(before);
    let mut discarded = Vec::new();
    let (mut repeated, mut slow_kept, mut done) = (0usize, 0usize, 0usize);
    let total = points * plan.rounds;
    for round in 0..plan.rounds {
        for point in order(points, round, plan.seed) {
            let mut attempts: Vec<Sample<T>> = Vec::new();
            loop {
                let value = measure(point, round)?;
                let after = probe();
                probes.push(after);
                let p = before.min(after);
                before = after;
                done += 1;
                attempts.push(Sample {
                    value,
                    round,
                    probe: p,
                    repeats: attempts.len(),
                });
                let best = reference(&probes);
                let slow = best > 0.0 && p < plan.slow_ratio * best;
                if !slow {
                    break;
                }
                let in_budget = plan.budget.is_none_or(|b| {
                    let mean = start.elapsed().as_secs_f64() / done as f64;
                    let remaining = (total + repeated + 1).saturating_sub(done) as f64;
                    start.elapsed().as_secs_f64() + mean * remaining <= b.as_secs_f64()
                });
                if attempts.len() > plan.max_repeats || !in_budget {
                    slow_kept += 1;
                    break;
                }
                repeated += 1;
                // A fresh probe before the repeat: the slow one just taken would otherwise be
                // the repeat's "before" and condemn it too.
                before = probe();
                probes.push(before);
            }
            let repeats = attempts.len() - 1;
            let keep = attempts
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.probe.total_cmp(&b.1.probe))
                .map_or(0, |(i, _)| i);
            let mut kept = attempts.swap_remove(keep);
            kept.repeats = repeats;
            discarded.extend(attempts.into_iter().map(|a| (point, a)));
            samples[point].push(kept);
        }
    }
    for s in &mut samples {
        s.sort_by_key(|x| x.round);
    }
    Ok(Schedule {
        samples,
        best_probe: probes.iter().copied().fold(0.0, f64::max),
        reference_probe: reference(&probes),
        probes,
        discarded,
        repeated,
        slow_kept,
        elapsed: start.elapsed(),
    })
}

/// The time a study's `--quick` may take, repeats included (5 minutes, less the fits, the
/// plots and the process's start): repeats stop when they would push the schedule past it.
pub const QUICK_BUDGET: Duration = Duration::from_secs(270);

/// The studies' host probe for runs of `run_seconds`: [`crate::bench::probe::shared_ring_rate`]
/// for a tenth of a run (20 .. 100 ms), its threads wherever the kernel puts them.
pub fn host_probe(run_seconds: f64) -> impl FnMut() -> f64 {
    let time = probe_time(run_seconds);
    move || crate::bench::probe::shared_ring_rate(time, None)
}

/// How long [`host_probe`] probes for runs of `run_seconds`.
pub fn probe_time(run_seconds: f64) -> Duration {
    Duration::from_secs_f64((run_seconds * 0.1).clamp(0.02, 0.1))
}

/// The plan of a study: `rounds` rounds, within [`QUICK_BUDGET`] when `quick`.
pub fn study_plan(rounds: usize, quick: bool) -> Plan {
    Plan {
        budget: quick.then_some(QUICK_BUDGET),
        ..Plan::new(rounds)
    }
}

/// Adds what the schedule did to a report's top-level fields: `rounds`, `repeated_rounds`,
/// `slow_rounds_kept`, `probe_best_per_s`, `probe_reference_per_s`, `probe_slow_ratio`,
/// `wall_seconds`.
pub fn record_fields<T>(fields: &mut Map<String, Value>, plan: &Plan, s: &Schedule<T>) {
    fields.insert("rounds".into(), plan.rounds.into());
    fields.insert("repeated_rounds".into(), s.repeated.into());
    fields.insert("slow_rounds_kept".into(), s.slow_kept.into());
    fields.insert("probe_best_per_s".into(), s.best_probe.into());
    fields.insert("probe_reference_per_s".into(), s.reference_probe.into());
    fields.insert("probe_slow_ratio".into(), plan.slow_ratio.into());
    fields.insert("wall_seconds".into(), s.elapsed.as_secs_f64().into());
}

/// The median of a set of measurements and how far they spread.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Summary {
    /// The median (the mean of the middle two for an even count; 0 for none).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// (max - min) / median (0 when the median is 0).
    pub spread: f64,
}

/// The median, range and relative spread of `values` (non-finite values are left out).
pub fn summarize(values: &[f64]) -> Summary {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Summary::default();
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let (min, max) = (v[0], v[n - 1]);
    Summary {
        median,
        min,
        max,
        spread: if median != 0.0 {
            (max - min) / median.abs()
        } else {
            0.0
        },
    }
}

/// The `q` quantile (0..=1, nearest rank) of `values` (0 for none).
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    v[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_measures_every_point_once_in_a_new_order() {
        let orders: Vec<Vec<usize>> = (0..5).map(|r| order(12, r, 7)).collect();
        for o in &orders {
            let mut s = o.clone();
            s.sort_unstable();
            assert_eq!(s, (0..12).collect::<Vec<_>>());
        }
        assert!(orders.windows(2).all(|w| w[0] != w[1]));
        assert!(orders.windows(2).all(|w| w[0].last() != w[1].first()));
        assert_eq!(order(12, 3, 7), orders[3], "the order is reproducible");
    }

    #[test]
    fn a_slow_probe_repeats_the_measurement_and_keeps_the_better_attempt() {
        // Probe values in call order: two at the start, then one after every measurement (and
        // one before a repeat). The third measurement is followed by a slow probe (the host was
        // busy): it is measured again, between two good probes.
        let mut probes = vec![100.0, 100.0, 100.0, 100.0, 30.0, 100.0, 100.0].into_iter();
        let mut calls = 0;
        let s = run(
            3,
            &Plan::new(1),
            || probes.next().unwrap_or(100.0),
            |p, _| {
                calls += 1;
                Ok((p, calls))
            },
        )
        .unwrap();
        assert_eq!(calls, 4, "one measurement taken twice");
        assert_eq!(s.repeated, 1);
        assert_eq!(s.slow_kept, 0);
        assert_eq!(s.probes.len(), 7);
        assert_eq!(s.discarded.len(), 1);
        assert_eq!(s.discarded[0].1.value.1, 3, "the slow attempt is on record");
        let repeated: Vec<&Sample<(usize, i32)>> = s
            .samples
            .iter()
            .flatten()
            .filter(|x| x.repeats == 1)
            .collect();
        assert_eq!(repeated.len(), 1);
        // The kept attempt is the fourth call, the one with the good probe.
        assert_eq!(repeated[0].value.1, 4);
        assert_eq!(s.probe_ratio(repeated[0]), 1.0);
        assert!(s.samples.iter().all(|p| p.len() == 1));
    }

    #[test]
    fn a_host_slow_throughout_is_kept_after_the_repeat_limit() {
        let mut n = 0;
        let s = run(
            2,
            &Plan {
                max_repeats: 1,
                ..Plan::new(2)
            },
            || {
                n += 1;
                if n <= 2 {
                    100.0
                } else {
                    10.0
                }
            },
            |_, r| Ok(r),
        )
        .unwrap();
        assert_eq!(s.samples.iter().map(Vec::len).sum::<usize>(), 4);
        assert_eq!(s.repeated, 4);
        assert_eq!(s.slow_kept, 4);
        assert!(s.samples.iter().flatten().all(|x| x.repeats == 1));
    }

    #[test]
    fn summary_is_median_and_spread() {
        let s = summarize(&[4.0, 1.0, 2.0, f64::NAN, 3.0, 10.0]);
        assert_eq!(s.median, 3.0);
        assert_eq!((s.min, s.max), (1.0, 10.0));
        assert_eq!(s.spread, 3.0);
        assert_eq!(summarize(&[]).median, 0.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
    }
}
