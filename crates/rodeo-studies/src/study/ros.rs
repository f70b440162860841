//! `rodeo study ros`: the ROS paper's laboratory method (section 7.1). A readout node of 24
//! channels is started in this process for each grid point (fragment size, EB fraction, L2
//! fraction, RoI size) and driven by the ROSTester as fast as it answers: the delete (L1) rate
//! it reaches is the maximum delete rate of that mix. From the points:
//!
//! - Figure 9: the inverse delete rate against the readout fraction, one line per fragment size
//!   (RoI size 4, L2 fraction 0.7, EB fraction 0.2 .. 0.5);
//! - the utilisation model ([`super::model`]) fitted on the training points' medians (every
//!   point but every fourth), and its predicted maximum delete rate on the held-out points, from
//!   each point's per-event request, fragment and byte counts (properties of the mix, not of the
//!   rate). Three bases: rates per CPU-second of the process (`delete_rate_per_cpu_s`, node and
//!   tester: the study's result, the basis that held best on a shared host), per CPU-second of
//!   the node's core thread (`delete_rate_per_node_cpu_s`) and per wall-clock second
//!   (`delete_rate_hz`, the paper's). `model.json` holds the process-CPU `parameters`,
//!   `holdout_max_relative_error` with its bootstrap spread and `model_ok` against the 15% goal;
//!   the other bases under `node_cpu_time` and `wall_clock`. The node's CPU at work (idle waits
//!   excluded, `node_busy_cpu_us_per_event`) is recorded beside them.
//!
//! Each point is measured `rounds` times as [`super::rounds`] schedules it: every round measures
//! every point once in a freshly shuffled order, the host probe runs between runs, and a run
//! whose probe says the host was slow is measured again (`repeated_rounds`, `probe_ratio`).
//! A point's row holds the medians over its runs and their spread. Each run starts its own
//! node on a fresh inproc name and stops it before the next.

use std::time::Duration;

use anyhow::Context;
use rodeo_transport::socket::Transport;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::model::{self, Rates};
use super::plot::{line_chart, Chart, Series};
use super::rounds::{self, quantile, summarize, SplitMix};
use super::{field, write_json, Ctx};
use crate::bench::probe::{process_cpu_seconds, HostLoad};
use crate::report::Report;
use rodeo_ros::standalone::{start_node, summary, InputKind, NodeArgs, PayloadKind};
use rodeo_rostester::drive::{run_testers, MixArgs};

/// Input links of the node (two RobinNP cards in the paper).
const LINKS: usize = 24;
/// The held-out share: every `HOLDOUT`-th point.
const HOLDOUT: usize = 4;
/// The model must predict held-out points within this relative error.
const TARGET: f64 = 0.15;

/// One grid point.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// Data words per ROD fragment.
    pub words: u32,
    /// EB request fraction.
    pub eb: f64,
    /// L2 request fraction.
    pub l2: f64,
    /// ROBs per L2 request.
    pub roi: usize,
}

/// The grid: Figure 9's points (RoI 4, L2 0.7, four sizes, EB 0.2 .. 0.5) and points with
/// RoI sizes 2 and 3 and another L2 fraction.
pub fn grid(quick: bool) -> Vec<Point> {
    let mut g = Vec::new();
    for words in [300, 350, 400, 450] {
        for eb in [0.2, 0.3, 0.4, 0.5] {
            g.push(Point {
                words,
                eb,
                l2: 0.7,
                roi: 4,
            });
        }
    }
    let (sizes, ebs, l2s): (&[u32], &[f64], &[f64]) = if quick {
        (&[300, 450], &[0.2, 0.5], &[0.5, 1.0])
    } else {
        (
            &[300, 350, 400, 450],
            &[0.2, 0.3, 0.4, 0.5],
            &[0.5, 0.7, 1.0],
        )
    };
    for &words in sizes {
        for &eb in ebs {
            for &l2 in l2s {
                for roi in [2, 3] {
                    g.push(Point { words, eb, l2, roi });
                }
            }
        }
    }
    g
}

/// One run of one point: what the tester and the node measured.
#[derive(Debug, Clone)]
struct Run {
    events: u64,
    seconds: f64,
    delete_rate_hz: f64,
    readout_fraction: f64,
    requests_per_event: f64,
    fragments_per_event: f64,
    kb_per_event: f64,
    p50_latency_ns: f64,
    p99_latency_ns: f64,
    bad_replies: u64,
    node_timeouts: u64,
    /// CPU of the node's core thread per event, its idle waits excluded.
    node_busy_cpu_us_per_event: f64,
    /// CPU of the node's core thread per event.
    node_cpu_us_per_event: f64,
    /// CPU of the whole process (node, tester, ZeroMQ) per event.
    cpu_us_per_event: f64,
    /// CPU of the tester thread per event.
    tester_cpu_us_per_event: f64,
    /// Share of the host's CPUs that other processes used during the run.
    others_cpu_share: f64,
}

/// A grid point summarised over its runs (a CSV row): medians, with the spread of the
/// quantities the model is fitted to.
#[derive(Debug, Serialize)]
struct Row {
    fragment_words: u32,
    eb_fraction: f64,
    l2_fraction: f64,
    roi_size: usize,
    set: &'static str,
    /// Runs kept (one per round).
    runs: usize,
    /// Runs measured again because the probe said the host was slow.
    repeated_rounds: usize,
    /// Median over the kept runs of the probe over the best probe of the study.
    probe_ratio: f64,
    /// The lowest probe ratio of a kept run.
    probe_ratio_min: f64,
    /// Median over the kept runs of the share of the host's CPUs other processes used.
    others_cpu_share: f64,
    events: f64,
    seconds: f64,
    delete_rate_hz: f64,
    /// (max - min) / median of the delete rate over the runs.
    delete_rate_spread: f64,
    inverse_delete_rate_us: f64,
    readout_fraction: f64,
    external_requests_per_s: f64,
    fragments_per_s: f64,
    kb_per_s: f64,
    requests_per_event: f64,
    fragments_per_event: f64,
    kb_per_event: f64,
    p50_latency_ns: f64,
    p99_latency_ns: f64,
    bad_replies: u64,
    node_timeouts: u64,
    /// Node core-thread CPU per event.
    node_cpu_us_per_event: f64,
    node_cpu_spread: f64,
    /// Events per CPU-second of the node's core thread (1 / the median above).
    delete_rate_per_node_cpu_s: f64,
    /// Node core-thread CPU per event at work (its idle waits excluded).
    node_busy_cpu_us_per_event: f64,
    cpu_us_per_event: f64,
    cpu_spread: f64,
    delete_rate_per_cpu_s: f64,
    tester_cpu_us_per_event: f64,
}

/// Runs one point: a fresh node, the tester for `seconds`, the node stopped.
fn measure(t: &Transport, p: Point, seconds: f64) -> anyhow::Result<Run> {
    let max_outstanding: usize = 128;
    let node = NodeArgs {
        channels: LINKS,
        fragment_words: p.words,
        base_source_id: 0x0051_0000,
        // Room for the requests in flight and a clear group, as `bench ros` sizes it.
        pages_per_channel: (100 + max_outstanding).div_ceil(2) + 16,
        input: InputKind::Firmware,
        payload: PayloadKind::Headers,
        ..crate::defaults()
    };
    let mix = MixArgs {
        l2_fraction: p.l2,
        roi_size: p.roi,
        eb_fraction: p.eb,
        clear_group: 100,
        max_outstanding,
        max_rate: None,
        instances: 1,
        instance: 0,
        threads: 1,
        events: None,
        seconds,
        retries: 3,
        retry_delay: 0.001,
        seed: 1,
    };
    let n = start_node(t, &node, &format!("inproc://study-ros-{}", super::unique()))?;
    // Process CPU from the tester's start to the node's stop (the node's start-up, which
    // allocates and warms its pages, is not the mix's cost).
    let cpu0 = process_cpu_seconds();
    let host0 = HostLoad::now();
    let r = run_testers(t, n.endpoint(), &node.robs(), node.l1id_wrap, &mix);
    let stopped = n.stop();
    let cpu = process_cpu_seconds() - cpu0;
    let others = match (host0, HostLoad::now()) {
        (Some(a), Some(b)) => b.others_share_since(&a),
        _ => 0.0,
    };
    let r = r.with_context(|| format!("{p:?}"))?;
    let counters = summary(&stopped);
    let ev = r.events.max(1) as f64;
    let requests = (r.l2_requests + r.eb_requests) as f64;
    Ok(Run {
        events: r.events,
        seconds: r.seconds,
        delete_rate_hz: r.l1_rate_hz(),
        readout_fraction: r.fragments as f64 / (ev * LINKS as f64),
        requests_per_event: requests / ev,
        fragments_per_event: r.fragments as f64 / ev,
        kb_per_event: r.bytes as f64 / 1000.0 / ev,
        p50_latency_ns: r.latency.quantile(0.5) as f64,
        p99_latency_ns: r.latency.quantile(0.99) as f64,
        bad_replies: r.bad_replies,
        node_timeouts: counters["timeouts"].as_u64().unwrap_or(0),
        node_busy_cpu_us_per_event: stopped
            .core_cpu
            .saturating_sub(stopped.core_idle_cpu)
            .as_secs_f64()
            * 1e6
            / ev,
        node_cpu_us_per_event: stopped.core_cpu.as_secs_f64() * 1e6 / ev,
        cpu_us_per_event: cpu * 1e6 / ev,
        tester_cpu_us_per_event: r.cpu.as_secs_f64() * 1e6 / ev,
        others_cpu_share: others,
    })
}

fn per_event(row: &Map<String, Value>) -> [f64; 4] {
    [
        field(row, "requests_per_event"),
        field(row, "fragments_per_event"),
        1.0,
        field(row, "kb_per_event"),
    ]
}

/// A basis: (CSV prefix, rate column, the rate of one run, name in `model.json`).
type Basis = (&'static str, &'static str, fn(&Run) -> f64, &'static str);

/// The bases the model is fitted on: (CSV prefix, rate column, the rate of one run, name in
/// `model.json`). The first is the study's result; the others are reported beside it.
const BASES: [Basis; 3] = [
    (
        "cpu",
        "delete_rate_per_cpu_s",
        |r| per_us(r.cpu_us_per_event),
        "process_cpu_time",
    ),
    (
        "node",
        "delete_rate_per_node_cpu_s",
        |r| per_us(r.node_cpu_us_per_event),
        "node_cpu_time",
    ),
    ("wall", "delete_rate_hz", |r| r.delete_rate_hz, "wall_clock"),
];

/// Events per second for a cost of `us` microseconds per event (0 for none).
fn per_us(us: f64) -> f64 {
    if us > 0.0 {
        1e6 / us
    } else {
        0.0
    }
}

/// Bootstrap draws for the spread of the held-out error.
const DRAWS: usize = 200;

/// The point's row from its kept runs.
fn point_row(p: Point, set: &'static str, runs: &[Run], probe: (f64, f64, usize)) -> Row {
    let med = |f: fn(&Run) -> f64| summarize(&runs.iter().map(f).collect::<Vec<_>>());
    let rate = med(|r| r.delete_rate_hz);
    let node = med(|r| r.node_cpu_us_per_event);
    let cpu = med(|r| r.cpu_us_per_event);
    let (req, frags, kb) = (
        med(|r| r.requests_per_event).median,
        med(|r| r.fragments_per_event).median,
        med(|r| r.kb_per_event).median,
    );
    Row {
        fragment_words: p.words,
        eb_fraction: p.eb,
        l2_fraction: p.l2,
        roi_size: p.roi,
        set,
        runs: runs.len(),
        repeated_rounds: probe.2,
        probe_ratio: probe.0,
        probe_ratio_min: probe.1,
        others_cpu_share: med(|r| r.others_cpu_share).median,
        events: med(|r| r.events as f64).median,
        seconds: med(|r| r.seconds).median,
        delete_rate_hz: rate.median,
        delete_rate_spread: rate.spread,
        inverse_delete_rate_us: per_us(rate.median),
        readout_fraction: med(|r| r.readout_fraction).median,
        external_requests_per_s: req * rate.median,
        fragments_per_s: frags * rate.median,
        kb_per_s: kb * rate.median,
        requests_per_event: req,
        fragments_per_event: frags,
        kb_per_event: kb,
        p50_latency_ns: med(|r| r.p50_latency_ns).median,
        p99_latency_ns: med(|r| r.p99_latency_ns).median,
        bad_replies: runs.iter().map(|r| r.bad_replies).sum(),
        node_timeouts: runs.iter().map(|r| r.node_timeouts).sum(),
        node_cpu_us_per_event: node.median,
        node_cpu_spread: node.spread,
        delete_rate_per_node_cpu_s: per_us(node.median),
        node_busy_cpu_us_per_event: med(|r| r.node_busy_cpu_us_per_event).median,
        cpu_us_per_event: cpu.median,
        cpu_spread: cpu.spread,
        delete_rate_per_cpu_s: per_us(cpu.median),
        tester_cpu_us_per_event: med(|r| r.tester_cpu_us_per_event).median,
    }
}

/// Writes `ros_runs.csv`: every run of every point, the kept ones and those measured again
/// because the probe said the host was slow, with the probe and the host's load beside it.
fn write_runs(ctx: &Ctx, points: &[Point], s: &rounds::Schedule<Run>) -> anyhow::Result<()> {
    let kept = s
        .samples
        .iter()
        .enumerate()
        .flat_map(|(i, v)| v.iter().map(move |x| (i, x, true)));
    let discarded = s.discarded.iter().map(|(i, x)| (*i, x, false));
    let mut all: Vec<(usize, &rounds::Sample<Run>, bool)> = kept.chain(discarded).collect();
    all.sort_by_key(|(i, x, _)| (*i, x.round));
    let rows: Vec<Map<String, Value>> = all
        .into_iter()
        .map(|(i, x, kept)| {
            let (p, r) = (points[i], &x.value);
            let v = json!({
                "point": i,
                "fragment_words": p.words,
                "eb_fraction": p.eb,
                "l2_fraction": p.l2,
                "roi_size": p.roi,
                "set": if i % HOLDOUT == HOLDOUT - 1 { "holdout" } else { "train" },
                "round": x.round,
                "kept": kept,
                "probe_ratio": s.probe_ratio(x),
                "others_cpu_share": r.others_cpu_share,
                "events": r.events,
                "delete_rate_hz": r.delete_rate_hz,
                "node_busy_cpu_us_per_event": r.node_busy_cpu_us_per_event,
                "node_cpu_us_per_event": r.node_cpu_us_per_event,
                "cpu_us_per_event": r.cpu_us_per_event,
                "tester_cpu_us_per_event": r.tester_cpu_us_per_event,
            });
            match v {
                Value::Object(m) => m,
                _ => Map::new(),
            }
        })
        .collect();
    super::write_csv(&ctx.dir.join("ros_runs.csv"), &rows)
}

/// Whether a row is a held-out point.
fn is_holdout(row: &Map<String, Value>) -> bool {
    row.get("set").and_then(Value::as_str) == Some("holdout")
}

/// Runs the ROS study: the grid of points, the fitted utilisation model, the plots.
pub fn run(ctx: &Ctx) -> anyhow::Result<(Report, bool)> {
    let mut points = grid(ctx.quick);
    if let Some(n) = ctx.max_points {
        points.truncate(n.max(HOLDOUT));
    }
    let t = Transport::new(1)?;
    let n_rounds = ctx.rounds.unwrap_or(if ctx.quick { 9 } else { 5 });
    let seconds = ctx.seconds.unwrap_or(if ctx.quick { 0.5 } else { 3.0 });
    let probe_time = rounds::probe_time(seconds);
    // --quick stays under 5 minutes: repeats stop when they would push the study past it.
    let plan = rounds::study_plan(n_rounds, ctx.quick);
    // One run before the grid, not kept: the first run of a process pays for warming up.
    if let Some(&p) = points.first() {
        measure(&t, p, seconds.min(0.5))?;
    }
    let n_points = points.len();
    let schedule = rounds::run(n_points, &plan, rounds::host_probe(seconds), |i, round| {
        let p = points[i];
        let run = measure(&t, p, seconds)?;
        eprintln!(
                "study ros: round {}/{n_rounds}, point {}/{n_points}: {} words, EB {:.1}, L2 {:.1}, RoI {}: {:.0} Hz, process CPU {:.2} us/event",
                round + 1,
                i + 1,
                p.words,
                p.eb,
                p.l2,
                p.roi,
                run.delete_rate_hz,
                run.cpu_us_per_event,
            );
        std::thread::sleep(Duration::from_millis(20));
        Ok(run)
    })?;
    write_runs(ctx, &points, &schedule)?;
    let mut report = Report::new("ros");
    let mut runs: Vec<Vec<Run>> = Vec::new();
    for (i, &p) in points.iter().enumerate() {
        let samples = &schedule.samples[i];
        let ratios: Vec<f64> = samples.iter().map(|s| schedule.probe_ratio(s)).collect();
        let (probe_median, repeats) = schedule.point_probe(i);
        let set = if i % HOLDOUT == HOLDOUT - 1 {
            "holdout"
        } else {
            "train"
        };
        let rs: Vec<Run> = samples.iter().map(|s| s.value.clone()).collect();
        report.push_row(&point_row(
            p,
            set,
            &rs,
            (probe_median, summarize(&ratios).min, repeats),
        ))?;
        runs.push(rs);
    }
    let bad: u64 = runs.iter().flatten().map(|r| r.bad_replies).sum();
    let mut fits = Vec::new();
    for (prefix, key, rate, _) in BASES {
        let mut fit = fit_basis(&mut report.rows, key, prefix)?;
        fit.bootstrap = bootstrap_holdout(&report.rows, &runs, rate);
        fits.push(fit);
    }
    let holdout = report.rows.iter().filter(|r| is_holdout(r)).count();
    let primary = &fits[0];
    let model_ok = primary.ok();
    let verdict = primary.verdict(BASES[0].3);
    let mut model_json = json!({
        "model": "U = f_ext*t_ext + f_int*t_int + f_del*t_del + S*t_kB",
        "units": {"f_ext": "requests/s", "f_int": "fragments/s", "f_del": "deletes/s", "S": "kB/s (1000 bytes)", "times": "seconds"},
        "basis": BASES[0].3,
        "basis_note": "rates per CPU-second of the process (node, tester, ZeroMQ): U = 1 is one CPU busy; the node core-thread CPU fit and the wall-clock fit (the paper's) are under node_cpu_time and wall_clock",
        "model_ok": model_ok,
        "heldout_error_goal": TARGET,
        "verdict": verdict,
        "parameters": primary.json(),
        "training_points": report.rows.len() - holdout,
        "fit": "non-negative least squares on the training points' medians, then again without those whose relative error exceeds max(3 x the median, 5%)",
        "training_points_used": primary.used,
        "holdout_points": holdout,
        "holdout_max_relative_error": primary.holdout_err,
        "holdout_error_bootstrap": primary.bootstrap_json(),
        "training_max_relative_error": primary.train_err,
        "example_400w_eb02_l207_roi4_deletes_per_cpu_s": example(&report.rows, &primary.params, 0.7, 4.0),
        "example_400w_eb02_l214_roi2_deletes_per_cpu_s": example(&report.rows, &primary.params, 1.4, 2.0),
        "measurement": {
            "rounds": n_rounds,
            "seconds_per_run": seconds,
            "order": "every round measures every point once, in a freshly shuffled order",
            "probe": "shared_ring_rate before the first and after every run; a run whose probe is below probe_slow_ratio x the best probe is measured again (at most max_repeats times, within the time budget)",
            "probe_seconds": probe_time.as_secs_f64(),
            "probe_best_per_s": schedule.best_probe,
            "probe_slow_ratio": plan.slow_ratio,
            "max_repeats": plan.max_repeats,
            "repeated_rounds": schedule.repeated,
            "slow_rounds_kept": schedule.slow_kept,
            "wall_seconds": schedule.elapsed.as_secs_f64(),
        },
    });
    for ((_, _, _, name), fit) in BASES.iter().zip(&fits).skip(1) {
        model_json[*name] = json!({
            "parameters": fit.json(),
            "model_ok": fit.ok(),
            "holdout_max_relative_error": fit.holdout_err,
            "holdout_error_bootstrap": fit.bootstrap_json(),
            "training_max_relative_error": fit.train_err,
            "training_points_used": fit.used,
            "example_400w_eb02_l207_roi4_max_delete_rate_hz": example(&report.rows, &fit.params, 0.7, 4.0),
            "example_400w_eb02_l214_roi2_max_delete_rate_hz": example(&report.rows, &fit.params, 1.4, 2.0),
        });
    }
    write_json(&ctx.dir.join("model.json"), &model_json)?;
    plots(
        ctx,
        &report.rows,
        &fits[2].params,
        &fits[1].params,
        &fits[0].params,
    )?;
    let f = &mut report.fields;
    f.insert("links".into(), LINKS.into());
    f.insert("seconds_per_point".into(), seconds.into());
    f.insert("points".into(), points.len().into());
    f.insert("basis".into(), BASES[0].3.into());
    f.insert("model_ok".into(), model_ok.into());
    f.insert("heldout_error_goal".into(), TARGET.into());
    f.insert("verdict".into(), verdict.into());
    let ns = |name: &str| name.replace("_s", "_ns");
    for ((prefix, _, _, _), fit) in BASES.iter().zip(&fits) {
        for (name, v) in model::NAMES.iter().zip(fit.params) {
            f.insert(format!("{prefix}_{}", ns(name)), (v * 1e9).into());
        }
        let p = |s: &str| {
            if *prefix == BASES[0].0 {
                s.to_string()
            } else {
                format!("{prefix}_{s}")
            }
        };
        f.insert(p("holdout_max_relative_error"), fit.holdout_err.into());
        for (q, name) in [(0.1, "p10"), (0.5, "median"), (0.9, "p90")] {
            f.insert(
                p(&format!("holdout_error_{name}")),
                quantile(&fit.bootstrap, q).into(),
            );
        }
        f.insert(p("training_max_relative_error"), fit.train_err.into());
        if *prefix != BASES[0].0 {
            f.insert(format!("{prefix}_model_ok"), fit.ok().into());
        }
    }
    rounds::record_fields(f, &plan, &schedule);
    f.insert("bad_replies".into(), bad.into());
    Ok((report, bad == 0 && model_ok))
}

/// A fit of the model on one basis and how well it predicts.
struct Fit {
    params: [f64; 4],
    /// Training points the final fit used.
    used: usize,
    train_err: f64,
    holdout_err: f64,
    /// The held-out error of fits to resampled runs (bootstrap).
    bootstrap: Vec<f64>,
}

impl Fit {
    fn json(&self) -> Value {
        let mut m = Map::new();
        for (name, v) in model::NAMES.iter().zip(self.params) {
            m.insert((*name).into(), v.into());
        }
        Value::Object(m)
    }

    /// Whether the held-out error meets the goal.
    fn ok(&self) -> bool {
        self.holdout_err <= TARGET
    }

    fn bootstrap_json(&self) -> Value {
        json!({
            "draws": self.bootstrap.len(),
            "p10": quantile(&self.bootstrap, 0.1),
            "median": quantile(&self.bootstrap, 0.5),
            "p90": quantile(&self.bootstrap, 0.9),
        })
    }

    /// One sentence saying whether the fit is a result.
    fn verdict(&self, basis: &str) -> String {
        let pct = |x: f64| format!("{:.1}%", x * 100.0);
        if self.ok() {
            format!(
                "{basis} model predicts every held-out point within {} (goal {}; bootstrap p10-p90 {}-{})",
                pct(self.holdout_err),
                pct(TARGET),
                pct(quantile(&self.bootstrap, 0.1)),
                pct(quantile(&self.bootstrap, 0.9)),
            )
        } else {
            format!(
                "FAILED: the {basis} model misses a held-out point by {} (goal {}): its fitted times are not a result",
                pct(self.holdout_err),
                pct(TARGET),
            )
        }
    }
}

/// The held-out error of the model fitted to bootstrap resamples of the runs: each draw takes,
/// for every point, as many runs as it has, drawn with replacement, fits the training points'
/// medians and returns the largest held-out error against the held-out points' medians.
fn bootstrap_holdout(
    rows: &[Map<String, Value>],
    runs: &[Vec<Run>],
    rate: fn(&Run) -> f64,
) -> Vec<f64> {
    let mut rng = SplitMix(0xb0_07);
    let mut errs = Vec::with_capacity(DRAWS);
    for _ in 0..DRAWS {
        let (mut train, mut held) = (Vec::new(), Vec::new());
        for (row, rs) in rows.iter().zip(runs) {
            if rs.is_empty() {
                continue;
            }
            let draw: Vec<f64> = (0..rs.len())
                .map(|_| rate(&rs[rng.below(rs.len())]))
                .collect();
            let d = summarize(&draw).median;
            let e = per_event(row);
            let r = Rates {
                f_ext: e[0] * d,
                f_int: e[1] * d,
                f_del: d,
                s_kb: e[3] * d,
            };
            if is_holdout(row) {
                held.push(r);
            } else {
                train.push(r);
            }
        }
        if let Some((t, _)) = model::fit_trimmed(&train) {
            errs.push(
                held.iter()
                    .map(|r| model::relative_error(&t, r))
                    .fold(0.0, f64::max),
            );
        }
    }
    errs
}

/// Fits the model to the training rows with `rate_key` as the delete rate (the other rates
/// follow from the per-event counts), predicts every row, and adds `{prefix}_predicted` and
/// `{prefix}_relative_error` columns.
fn fit_basis(rows: &mut [Map<String, Value>], rate_key: &str, prefix: &str) -> anyhow::Result<Fit> {
    let rates = |row: &Map<String, Value>| {
        let d = field(row, rate_key);
        let e = per_event(row);
        Rates {
            f_ext: e[0] * d,
            f_int: e[1] * d,
            f_del: d,
            s_kb: e[3] * d,
        }
    };
    let train_rows: Vec<usize> = (0..rows.len()).filter(|&i| !is_holdout(&rows[i])).collect();
    let train: Vec<Rates> = train_rows.iter().map(|&i| rates(&rows[i])).collect();
    let (params, used) = model::fit_trimmed(&train)
        .ok_or_else(|| anyhow::anyhow!("the {prefix} model fit failed"))?;
    for (&i, &u) in train_rows.iter().zip(&used) {
        rows[i].insert(format!("{prefix}_fit_used"), u.into());
    }
    let (mut holdout_err, mut train_err) = (0.0f64, 0.0f64);
    for row in rows.iter_mut() {
        let pred = model::max_delete_rate(&params, &per_event(row));
        let meas = field(row, rate_key);
        let err = if meas > 0.0 {
            (pred - meas).abs() / meas
        } else {
            f64::INFINITY
        };
        if is_holdout(row) {
            holdout_err = holdout_err.max(err);
        } else {
            train_err = train_err.max(err);
        }
        let u = model::utilisation(&params, &rates(row));
        row.insert(format!("{prefix}_predicted"), pred.into());
        row.insert(format!("{prefix}_relative_error"), err.into());
        row.insert(format!("{prefix}_utilisation"), u.into());
        if !row.contains_key(&format!("{prefix}_fit_used")) {
            row.insert(format!("{prefix}_fit_used"), false.into());
        }
    }
    Ok(Fit {
        params,
        used: used.iter().filter(|&&u| u).count(),
        train_err,
        holdout_err,
        bootstrap: Vec::new(),
    })
}

/// The paper's example (400 words, EB 0.2, L2 `l2`, RoI `roi`): the predicted maximum rate.
fn example(rows: &[Map<String, Value>], params: &[f64; 4], l2: f64, roi: f64) -> f64 {
    let frags = l2 * (1.0 - 0.2) * roi + 0.2 * LINKS as f64;
    model::max_delete_rate(
        params,
        &[l2 + 0.2, frags, 1.0, frags * kb_per_fragment(rows, 400)],
    )
}

/// Mean kB per fragment measured at `words` (0 if no such point).
fn kb_per_fragment(rows: &[Map<String, Value>], words: u32) -> f64 {
    let (mut kb, mut n) = (0.0, 0.0);
    for r in rows
        .iter()
        .filter(|r| field(r, "fragment_words") == f64::from(words))
    {
        kb += field(r, "kb_per_event");
        n += field(r, "fragments_per_event");
    }
    if n > 0.0 {
        kb / n
    } else {
        0.0
    }
}

fn plots(
    ctx: &Ctx,
    rows: &[Map<String, Value>],
    wall: &[f64; 4],
    cpu: &[f64; 4],
    node: &[f64; 4],
) -> anyhow::Result<()> {
    let fig9_rows = |words: u32| {
        let mut v: Vec<&Map<String, Value>> = rows
            .iter()
            .filter(|r| {
                field(r, "fragment_words") == f64::from(words)
                    && field(r, "roi_size") == 4.0
                    && field(r, "l2_fraction") == 0.7
            })
            .collect();
        v.sort_by(|a, b| field(a, "readout_fraction").total_cmp(&field(b, "readout_fraction")));
        v
    };
    // Figure 9: inverse delete rate against readout fraction, RoI 4, L2 0.7, one line per size;
    // the same in CPU time per event.
    for (file, title, y_label, key, params) in [
        (
            "fig9_inverse_delete_rate.png",
            "Inverse delete rate vs readout fraction (RoI 4, L2 0.7, EB 0.2-0.5)",
            "1 / delete rate (us)",
            "delete_rate_hz",
            wall,
        ),
        (
            "fig9_cpu_per_event.png",
            "CPU time per event vs readout fraction (RoI 4, L2 0.7, EB 0.2-0.5)",
            "CPU us per event (node + tester)",
            "delete_rate_per_cpu_s",
            cpu,
        ),
        (
            "fig9_node_cpu_per_event.png",
            "Node core-thread CPU per event vs readout fraction (RoI 4, L2 0.7, EB 0.2-0.5)",
            "node CPU us per event",
            "delete_rate_per_node_cpu_s",
            node,
        ),
    ] {
        let mut series = Vec::new();
        for words in [300u32, 350, 400, 450] {
            let rs = fig9_rows(words);
            series.push(Series {
                label: format!("{words} words, measured"),
                points: rs
                    .iter()
                    .map(|r| (field(r, "readout_fraction"), 1e6 / field(r, key)))
                    .collect(),
                line: false,
            });
            series.push(Series {
                label: format!("{words} words, model"),
                points: rs
                    .iter()
                    .map(|r| {
                        (
                            field(r, "readout_fraction"),
                            1e6 / model::max_delete_rate(params, &per_event(r)),
                        )
                    })
                    .collect(),
                line: true,
            });
        }
        line_chart(
            &ctx.dir.join(file),
            &Chart {
                title,
                x_label: "readout fraction",
                y_label,
                log_x: false,
                log_y: false,
            },
            &series,
        )?;
    }
    // Prediction against measurement, training and held-out points, both bases.
    for (file, title, key, prefix, unit) in [
        (
            "model_prediction.png",
            "Wall-clock model: predicted vs measured maximum delete rate",
            "delete_rate_hz",
            "wall",
            "kHz",
        ),
        (
            "model_prediction_cpu.png",
            "CPU-time model: predicted vs measured deletes per CPU-second",
            "delete_rate_per_cpu_s",
            "cpu",
            "k per CPU-s",
        ),
        (
            "model_prediction_node.png",
            "Node CPU-time model: predicted vs measured deletes per node CPU-second",
            "delete_rate_per_node_cpu_s",
            "node",
            "k per node CPU-s",
        ),
    ] {
        let pred_key = format!("{prefix}_predicted");
        let mut sets = Vec::new();
        for set in ["train", "holdout"] {
            sets.push(Series {
                label: format!("{set} points"),
                points: rows
                    .iter()
                    .filter(|r| r.get("set").and_then(Value::as_str) == Some(set))
                    .map(|r| (field(r, key) / 1e3, field(r, &pred_key) / 1e3))
                    .collect(),
                line: false,
            });
        }
        let hi = rows
            .iter()
            .map(|r| field(r, key).max(field(r, &pred_key)) / 1e3)
            .fold(0.0, f64::max);
        sets.push(Series {
            label: "prediction = measurement".into(),
            points: vec![(0.0, 0.0), (hi, hi)],
            line: true,
        });
        let (x_label, y_label) = (format!("measured ({unit})"), format!("predicted ({unit})"));
        line_chart(
            &ctx.dir.join(file),
            &Chart {
                title,
                x_label: &x_label,
                y_label: &y_label,
                log_x: false,
                log_y: false,
            },
            &sets,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_advances_with_work() {
        let a = process_cpu_seconds();
        let mut x = 1u64;
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let b = process_cpu_seconds();
        assert!(a > 0.0 && b > a, "{a} {b}");
    }

    #[test]
    fn grid_holds_the_papers_axes() {
        let g = grid(true);
        for words in [300, 350, 400, 450] {
            assert!(g
                .iter()
                .any(|p| p.words == words && p.roi == 4 && p.eb == 0.5));
        }
        for roi in [2, 3, 4] {
            assert!(g.iter().any(|p| p.roi == roi));
        }
        assert!(grid(false).len() > g.len());
    }
}
