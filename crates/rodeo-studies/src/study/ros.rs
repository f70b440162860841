//! `rodeo study ros`: the ROS paper's laboratory method (section 7.1). A readout node of 24
//! channels is started in this process for each grid point (fragment size, EB fraction, L2
//! fraction, RoI size) and driven by the ROSTester as fast as it answers: the delete (L1) rate
//! it reaches is the maximum delete rate of that mix. From the points:
//!
//! - Figure 9: the inverse delete rate against the readout fraction, one line per fragment size
//!   (RoI size 4, L2 fraction 0.7, EB fraction 0.2 .. 0.5);
//! - the utilisation model ([`super::model`]) fitted on the training points (every point but
//!   every fourth), and its predicted maximum delete rate on the held-out points, from each
//!   point's per-event request, fragment and byte counts (properties of the mix, not of the
//!   rate). Two bases: wall-clock rates (the paper's) and rates per CPU-second of this process
//!   (`delete_rate_per_cpu_s`), which a machine shared with other work leaves comparable.
//!   `model.json` holds the CPU-time `parameters` and `holdout_max_relative_error`, and the
//!   wall-clock fit under `wall_clock`.
//!
//! Each point is measured `rounds` times, the grid swept round by round (a change in the
//! machine's load spreads over every point), and the median kept: the median run by delete rate
//! for the wall-clock columns, the median CPU time per event for the CPU columns. Each run starts
//! its own node on a fresh inproc name and stops it before the next.

use std::time::Duration;

use rodeo_transport::socket::Transport;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::model::{self, Rates};
use super::plot::{line_chart, Chart, Series};
use super::{field, write_json, Ctx};
use crate::node::{start_node, summary, InputKind, NodeArgs, PayloadKind};
use crate::report::Report;
use crate::tester::{run_testers, MixArgs};

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

/// A measured grid point (a CSV row).
#[derive(Debug, Serialize)]
struct Row {
    fragment_words: u32,
    eb_fraction: f64,
    l2_fraction: f64,
    roi_size: usize,
    set: &'static str,
    events: u64,
    seconds: f64,
    delete_rate_hz: f64,
    inverse_delete_rate_us: f64,
    readout_fraction: f64,
    external_requests_per_s: f64,
    fragments_per_s: f64,
    kb_per_s: f64,
    requests_per_event: f64,
    fragments_per_event: f64,
    kb_per_event: f64,
    p50_latency_ns: u64,
    p99_latency_ns: u64,
    bad_replies: u64,
    node_timeouts: u64,
    /// (max - min) / max of the delete rate over the rounds.
    round_spread: f64,
    cpu_seconds: f64,
    cpu_us_per_event: f64,
    delete_rate_per_cpu_s: f64,
}

/// Runs one point: a fresh node, the tester for `seconds`, the node stopped.
fn measure(t: &Transport, p: Point, seconds: f64) -> anyhow::Result<(Row, u64)> {
    let max_outstanding: usize = 128;
    let node = NodeArgs {
        channels: LINKS,
        fragment_words: p.words,
        base_source_id: 0x0051_0000,
        // Room for the requests in flight and a clear group, as `bench ros` sizes it.
        pages_per_channel: (100 + max_outstanding).div_ceil(2) + 16,
        page_bytes: 4096,
        input: InputKind::Firmware,
        payload: PayloadKind::Headers,
        input_rate: None,
        elinks: 4,
        io_threads: 1,
        descriptors: 1024,
        pending_timeout_ms: 200,
        error_file: None,
        l1id_wrap: 1 << 24,
        core_cpu: None,
        max_message_bytes: None,
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
        seed: 1,
    };
    let cpu0 = cpu_seconds();
    let n = start_node(t, &node, &format!("inproc://study-ros-{}", super::unique()))?;
    let r = run_testers(t, n.endpoint(), &node.robs(), node.l1id_wrap, &mix);
    let stopped = n.stop();
    let cpu = cpu_seconds() - cpu0;
    let r = r?;
    let counters = summary(&stopped);
    let ev = r.events.max(1) as f64;
    let rate = r.l1_rate_hz();
    let requests = (r.l2_requests + r.eb_requests) as f64;
    let kb = r.bytes as f64 / 1000.0;
    let row = Row {
        fragment_words: p.words,
        eb_fraction: p.eb,
        l2_fraction: p.l2,
        roi_size: p.roi,
        set: "train",
        events: r.events,
        seconds: r.seconds,
        delete_rate_hz: rate,
        inverse_delete_rate_us: if rate > 0.0 { 1e6 / rate } else { 0.0 },
        readout_fraction: r.fragments as f64 / (ev * LINKS as f64),
        external_requests_per_s: r.requests_per_s(),
        fragments_per_s: r.fragments as f64 / r.seconds.max(1e-9),
        kb_per_s: kb / r.seconds.max(1e-9),
        requests_per_event: requests / ev,
        fragments_per_event: r.fragments as f64 / ev,
        kb_per_event: kb / ev,
        p50_latency_ns: r.latency.quantile(0.5),
        p99_latency_ns: r.latency.quantile(0.99),
        bad_replies: r.bad_replies,
        node_timeouts: counters["timeouts"].as_u64().unwrap_or(0),
        round_spread: 0.0,
        cpu_seconds: cpu,
        cpu_us_per_event: cpu * 1e6 / ev,
        delete_rate_per_cpu_s: if cpu > 0.0 { ev / cpu } else { 0.0 },
    };
    Ok((row, r.bad_replies))
}

/// CPU seconds (user + system) used by this process so far.
fn cpu_seconds() -> f64 {
    // SAFETY: rusage is a C struct of integers, for which all-zero bytes are a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn per_event(row: &Map<String, Value>) -> [f64; 4] {
    [
        field(row, "requests_per_event"),
        field(row, "fragments_per_event"),
        1.0,
        field(row, "kb_per_event"),
    ]
}

/// Runs the ROS study: the grid of points, the fitted utilisation model, the plots.
pub fn run(ctx: &Ctx) -> anyhow::Result<(Report, bool)> {
    let mut points = grid(ctx.quick);
    if let Some(n) = ctx.max_points {
        points.truncate(n.max(HOLDOUT));
    }
    let t = Transport::new(1)?;
    let rounds = ctx.rounds.unwrap_or(if ctx.quick { 9 } else { 5 });
    let seconds = ctx.seconds.unwrap_or(if ctx.quick { 0.8 } else { 3.0 });
    let mut report = Report::new("ros");
    let mut bad = 0;
    // Every point is measured `rounds` times, the grid swept round by round so that a change of
    // the machine's load spreads over all points; the median run (by delete rate) is kept.
    let mut runs: Vec<Vec<Row>> = points.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (i, &p) in points.iter().enumerate() {
            let (row, b) = measure(&t, p, seconds)?;
            bad += b;
            eprintln!(
                "study ros: round {}/{rounds}, point {}/{}: {} words, EB {:.1}, L2 {:.1}, RoI {}: {:.0} Hz",
                round + 1,
                i + 1,
                points.len(),
                p.words,
                p.eb,
                p.l2,
                p.roi,
                row.delete_rate_hz
            );
            runs[i].push(row);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for (i, mut rs) in runs.into_iter().enumerate() {
        rs.sort_by(|a, b| a.delete_rate_hz.total_cmp(&b.delete_rate_hz));
        let spread = match (rs.first(), rs.last()) {
            (Some(lo), Some(hi)) if hi.delete_rate_hz > 0.0 => {
                (hi.delete_rate_hz - lo.delete_rate_hz) / hi.delete_rate_hz
            }
            _ => 0.0,
        };
        let mut cpu: Vec<f64> = rs.iter().map(|r| r.cpu_us_per_event).collect();
        cpu.sort_by(f64::total_cmp);
        let mut row = rs.swap_remove(rs.len() / 2);
        row.round_spread = spread;
        // CPU cost per event: its own median over the rounds.
        row.cpu_us_per_event = cpu[cpu.len() / 2];
        row.delete_rate_per_cpu_s = if row.cpu_us_per_event > 0.0 {
            1e6 / row.cpu_us_per_event
        } else {
            0.0
        };
        if i % HOLDOUT == HOLDOUT - 1 {
            row.set = "holdout";
        }
        report.push_row(&row)?;
    }
    let wall = fit_basis(&mut report.rows, "delete_rate_hz", "wall")?;
    let cpu = fit_basis(&mut report.rows, "delete_rate_per_cpu_s", "cpu")?;
    let holdout = report
        .rows
        .iter()
        .filter(|r| r.get("set").and_then(Value::as_str) == Some("holdout"))
        .count();
    let model_json = json!({
        "model": "U = f_ext*t_ext + f_int*t_int + f_del*t_del + S*t_kB",
        "units": {"f_ext": "requests/s", "f_int": "fragments/s", "f_del": "deletes/s", "S": "kB/s (1000 bytes)", "times": "seconds"},
        "basis": "cpu_time",
        "basis_note": "rates per CPU-second of the process (node and tester): U = 1 is one CPU busy; the wall-clock fit, the paper's, is under wall_clock",
        "parameters": cpu.json(),
        "training_points": report.rows.len() - holdout,
        "fit": "non-negative least squares on the training points, then again without those whose relative error exceeds max(3 x the median, 5%)",
        "training_points_used": cpu.used,
        "holdout_points": holdout,
        "holdout_max_relative_error": cpu.holdout_err,
        "training_max_relative_error": cpu.train_err,
        "target_relative_error": TARGET,
        "example_400w_eb02_l207_roi4_deletes_per_cpu_s": example(&report.rows, &cpu.params, 0.7, 4.0),
        "example_400w_eb02_l214_roi2_deletes_per_cpu_s": example(&report.rows, &cpu.params, 1.4, 2.0),
        "wall_clock": {
            "parameters": wall.json(),
            "holdout_max_relative_error": wall.holdout_err,
            "training_max_relative_error": wall.train_err,
            "training_points_used": wall.used,
            "example_400w_eb02_l207_roi4_max_delete_rate_hz": example(&report.rows, &wall.params, 0.7, 4.0),
            "example_400w_eb02_l214_roi2_max_delete_rate_hz": example(&report.rows, &wall.params, 1.4, 2.0),
        },
    });
    write_json(&ctx.dir.join("model.json"), &model_json)?;
    plots(ctx, &report.rows, &wall.params, &cpu.params)?;
    let f = &mut report.fields;
    f.insert("links".into(), LINKS.into());
    f.insert("seconds_per_point".into(), seconds.into());
    f.insert("rounds".into(), rounds.into());
    f.insert("points".into(), points.len().into());
    let ns = |name: &str| name.replace("_s", "_ns");
    for (name, v) in model::NAMES.iter().zip(cpu.params) {
        f.insert(format!("cpu_{}", ns(name)), (v * 1e9).into());
    }
    f.insert("holdout_max_relative_error".into(), cpu.holdout_err.into());
    f.insert("training_max_relative_error".into(), cpu.train_err.into());
    for (name, v) in model::NAMES.iter().zip(wall.params) {
        f.insert(format!("wall_{}", ns(name)), (v * 1e9).into());
    }
    f.insert(
        "wall_holdout_max_relative_error".into(),
        wall.holdout_err.into(),
    );
    f.insert("target_met".into(), (cpu.holdout_err <= TARGET).into());
    f.insert(
        "wall_target_met".into(),
        (wall.holdout_err <= TARGET).into(),
    );
    f.insert("bad_replies".into(), bad.into());
    Ok((report, bad == 0))
}

/// A fit of the model on one basis and how well it predicts.
struct Fit {
    params: [f64; 4],
    /// Training points the final fit used.
    used: usize,
    train_err: f64,
    holdout_err: f64,
}

impl Fit {
    fn json(&self) -> Value {
        let mut m = Map::new();
        for (name, v) in model::NAMES.iter().zip(self.params) {
            m.insert((*name).into(), v.into());
        }
        Value::Object(m)
    }
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
    let train_rows: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].get("set").and_then(Value::as_str) == Some("train"))
        .collect();
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
        if row.get("set").and_then(Value::as_str) == Some("holdout") {
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
        let a = cpu_seconds();
        let mut x = 1u64;
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let b = cpu_seconds();
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
