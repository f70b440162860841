//! `rodeo study slice`: the Level-2 SCI paper's vertical-slice scenarios, with a readout node
//! of three ROBs (in process, real event store) in the role of the ROBs and ZeroMQ requesters
//! in the role of the FEX/Global chain. Time per event (run time over events) and event latency
//! (request to last reply) against the message size:
//!
//! - `pipeline`: one stream, 1 .. N events in flight (the ROSTester, one RoI of one ROB);
//! - `event_parallelism`: 1 .. 3 streams (tester threads), one event in flight each;
//! - `fragment_building`: one RoI spread over 1 .. 3 ROBs, one request for all of them, the
//!   same aggregate size (each ROB sends 1/k of it);
//! - `roi_parallelism`: 1 .. 3 RoIs per event, each one ROB, requested in parallel as separate
//!   requests; the event ends with the last reply (the Global waiting for every FEX).
//!
//! The first three run the ROSTester with the matching mix; the last a small driver here,
//! since the tester sends one L2 request per event. Each point starts and stops its own node.
//!
//! Every point is measured `--rounds` times (5 by default), interleaved and probe-guarded as
//! [`super::rounds`] schedules it; rows hold the medians (time per event, latencies) and the
//! time per event's spread.

use std::time::{Duration, Instant};

use anyhow::Context;
use rodeo_cards::generator::L1idCounter;
use rodeo_rostester::Histogram;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{decode, encode_clear, encode_data_request, Message};
use rodeo_transport::socket::{Frame, Received, SocketKind, Transport};
use serde::Serialize;

use super::plot::{line_chart, Chart, Series};
use super::rounds::{self, summarize};
use super::{field, Ctx};
use crate::report::Report;
use rodeo_ros::standalone::{start_node, InputKind, NodeArgs, PayloadKind};
use rodeo_rostester::drive::{run_testers, MixArgs};

/// What one run of a point gives: events, seconds, event latency, bytes per reply, bad replies.
type Measured = (u64, f64, Histogram, u64, u64);

/// ROBs of the slice (the paper had three).
const ROBS: usize = 3;
/// Bytes of a ROB fragment with no data words.
const EMPTY_FRAGMENT_BYTES: u32 = 4 * 21;

/// A point summarised over its runs (a CSV row): medians, and the spread of the time per
/// event.
#[derive(Debug, Serialize)]
struct Row {
    scenario: &'static str,
    /// Events in flight, streams, ROBs per RoI or RoIs per event.
    degree: usize,
    message_bytes: u64,
    /// Runs kept (one per round).
    runs: usize,
    /// Runs measured again because the probe said the host was slow.
    repeated_rounds: usize,
    /// Median over the kept runs of the probe over the best probe of the study.
    probe_ratio: f64,
    events: f64,
    seconds: f64,
    time_per_event_ns: f64,
    /// (max - min) / median of the time per event over the runs.
    time_per_event_spread: f64,
    p50_latency_ns: f64,
    p99_latency_ns: f64,
    bad_replies: u64,
}

/// The scenarios, in the order of the rows.
const SCENARIOS: [&str; 4] = [
    "pipeline",
    "event_parallelism",
    "fragment_building",
    "roi_parallelism",
];

fn node_args(words: u32) -> NodeArgs {
    let frag = u64::from(words) * 4 + u64::from(EMPTY_FRAGMENT_BYTES);
    let pages_per_fragment = frag.div_ceil(4096) as usize;
    NodeArgs {
        channels: ROBS,
        fragment_words: words,
        base_source_id: 0x0042_0000,
        // Room for every stream's clear group and events in flight, so the input never stalls.
        pages_per_channel: 400 * pages_per_fragment + 16,
        input: InputKind::Firmware,
        payload: PayloadKind::Headers,
        ..crate::defaults()
    }
}

fn words_for(bytes: u32) -> u32 {
    bytes.saturating_sub(EMPTY_FRAGMENT_BYTES) / 4
}

/// A tester point: `in_flight` events per stream, `streams` threads, `roi` ROBs per request.
fn tester_point(
    t: &Transport,
    words: u32,
    in_flight: usize,
    streams: u32,
    roi: usize,
    seconds: f64,
) -> anyhow::Result<(u64, f64, Histogram, u64, u64)> {
    let node = node_args(words);
    let mix = MixArgs {
        l2_fraction: 1.0,
        roi_size: roi,
        eb_fraction: 0.0,
        clear_group: 100,
        // The tester starts an event only with two free request slots.
        max_outstanding: in_flight + 1,
        max_rate: None,
        instances: 1,
        instance: 0,
        threads: streams,
        events: None,
        seconds,
        retries: 3,
        retry_delay: 0.001,
        seed: 7,
    };
    let n = start_node(
        t,
        &node,
        &format!("inproc://study-slice-{}", super::unique()),
    )?;
    let r = run_testers(t, n.endpoint(), &node.robs(), node.l1id_wrap, &mix);
    n.stop();
    let r = r?;
    Ok((
        r.events,
        r.seconds,
        r.latency.clone(),
        r.bytes / r.replies.max(1),
        r.bad_replies,
    ))
}

/// RoI parallelism: `rois` requests per event, one ROB each, one event at a time.
fn roi_parallel_point(
    t: &Transport,
    words: u32,
    rois: usize,
    seconds: f64,
) -> anyhow::Result<(u64, f64, Histogram, u64, u64)> {
    let node_args = node_args(words);
    let node = start_node(
        t,
        &node_args,
        &format!("inproc://study-slice-rp-{}", super::unique()),
    )?;
    let robs = node_args.robs();
    let r = (|| -> anyhow::Result<_> {
        let mut sock = t.socket(SocketKind::Dealer)?;
        sock.set_high_water_marks(10_000)?;
        sock.connect(&Endpoint::parse(node.endpoint())?)?;
        let mut hist = Histogram::default();
        let (mut buf, mut msg) = (Vec::with_capacity(256), Received::default());
        let mut clears = Vec::with_capacity(100);
        let (mut events, mut bytes, mut replies, mut bad, mut seq) = (0u64, 0u64, 0u64, 0u64, 0u32);
        let start = Instant::now();
        while start.elapsed().as_secs_f64() < seconds {
            let l1id = L1idCounter::expected(node_args.l1id_wrap, events);
            let t0 = Instant::now();
            for (i, rob) in robs.iter().take(rois).enumerate() {
                buf.clear();
                encode_data_request(&mut buf, i as u32, l1id, &[*rob]);
                sock.send([Frame::Copy(&buf)])?;
            }
            let mut got = 0;
            while got < rois {
                anyhow::ensure!(sock.recv(&mut msg, 5000)?, "no reply within 5 s");
                got += 1;
                replies += 1;
                match decode(&msg.bytes) {
                    Ok(d) if matches!(d.message, Message::DataReply { l1id: id, ref fragments } if id == l1id && fragments.len() == 1) =>
                    {
                        bytes += u64::from(d.header.payload_bytes);
                    }
                    _ => bad += 1,
                }
            }
            hist.record(t0.elapsed().as_nanos() as u64);
            events += 1;
            clears.push(l1id);
            if clears.len() == 100 {
                buf.clear();
                encode_clear(&mut buf, seq, &clears);
                sock.send([Frame::Copy(&buf)])?;
                seq = seq.wrapping_add(1);
                clears.clear();
            }
        }
        let secs = start.elapsed().as_secs_f64();
        if !clears.is_empty() {
            buf.clear();
            encode_clear(&mut buf, seq, &clears);
            sock.send([Frame::Copy(&buf)])?;
        }
        Ok((events, secs, hist, bytes / replies.max(1), bad))
    })();
    std::thread::sleep(Duration::from_millis(20));
    node.stop();
    r
}

/// Runs the vertical-slice study: its four scenarios over fragment size.
pub fn run(ctx: &Ctx) -> anyhow::Result<(Report, bool)> {
    let seconds = ctx.seconds.unwrap_or(if ctx.quick { 0.5 } else { 2.0 });
    let sizes: &[u32] = if ctx.quick {
        &[256, 1024, 4096]
    } else {
        &[256, 512, 1024, 2048, 4096, 8192, 16384]
    };
    let depths: &[usize] = if ctx.quick {
        &[1, 2, 4]
    } else {
        &[1, 2, 3, 4, 8]
    };
    let t = Transport::new(1)?;
    let mut report = Report::new("slice");
    // The points: (scenario, degree, message size), in the order of the rows.
    let mut points: Vec<(&'static str, usize, u32)> = Vec::new();
    for &size in sizes {
        for scenario in SCENARIOS {
            let degrees: Vec<usize> = if scenario == "pipeline" {
                depths.to_vec()
            } else {
                (1..=ROBS).collect()
            };
            points.extend(degrees.into_iter().map(|d| (scenario, d, size)));
        }
    }
    // Every point `rounds` times, interleaved, probe-guarded (rounds.rs).
    let plan = rounds::study_plan(ctx.rounds.unwrap_or(5), ctx.quick);
    let schedule = rounds::run(
        points.len(),
        &plan,
        rounds::host_probe(seconds),
        |i, round| {
            let (scenario, d, size) = points[i];
            let r = match scenario {
                "pipeline" => tester_point(&t, words_for(size), d, 1, 1, seconds),
                "event_parallelism" => tester_point(&t, words_for(size), 1, d as u32, 1, seconds),
                "fragment_building" => {
                    tester_point(&t, words_for(size / d as u32), 1, 1, d, seconds)
                }
                _ => roi_parallel_point(&t, words_for(size), d, seconds),
            }
            .with_context(|| format!("{scenario} {d}, {size} bytes"))?;
            if i == 0 {
                eprintln!("study slice: round {}/{}", round + 1, plan.rounds);
            }
            Ok(r)
        },
    )?;
    let mut bad = 0;
    for (i, &(scenario, degree, _)) in points.iter().enumerate() {
        let runs: Vec<&Measured> = schedule.samples[i].iter().map(|s| &s.value).collect();
        let med = |f: &dyn Fn(&Measured) -> f64| {
            summarize(&runs.iter().map(|r| f(r)).collect::<Vec<_>>())
        };
        let per_event = med(&|m| m.1 * 1e9 / m.0.max(1) as f64);
        let (probe_ratio, repeats) = schedule.point_probe(i);
        let row = Row {
            scenario,
            degree,
            message_bytes: med(&|m| m.3 as f64).median as u64,
            runs: runs.len(),
            repeated_rounds: repeats,
            probe_ratio,
            events: med(&|m| m.0 as f64).median,
            seconds: med(&|m| m.1).median,
            time_per_event_ns: per_event.median,
            time_per_event_spread: per_event.spread,
            p50_latency_ns: med(&|m| m.2.quantile(0.5) as f64).median,
            p99_latency_ns: med(&|m| m.2.quantile(0.99) as f64).median,
            bad_replies: runs.iter().map(|m| m.4).sum(),
        };
        bad += row.bad_replies;
        report.push_row(&row)?;
    }
    for (scenario, what) in [
        ("pipeline", "events in flight"),
        ("event_parallelism", "streams"),
        ("fragment_building", "ROBs per RoI"),
        ("roi_parallelism", "RoIs per event"),
    ] {
        let rows: Vec<_> = report
            .rows
            .iter()
            .filter(|r| r.get("scenario").and_then(|v| v.as_str()) == Some(scenario))
            .collect();
        let mut degrees: Vec<f64> = rows.iter().map(|r| field(r, "degree")).collect();
        degrees.sort_by(f64::total_cmp);
        degrees.dedup();
        for (stat, label) in [
            ("time_per_event_ns", "time per event (us)"),
            ("p50_latency_ns", "median latency (us)"),
        ] {
            let series: Vec<Series> = degrees
                .iter()
                .map(|&d| Series {
                    label: format!("{d} {what}"),
                    points: rows
                        .iter()
                        .filter(|r| field(r, "degree") == d)
                        // Reply payload: for fragment building, the k fragments of the RoI.
                        .map(|r| (field(r, "message_bytes") / 1024.0, field(r, stat) / 1e3))
                        .collect(),
                    line: true,
                })
                .collect();
            let short = if stat == "time_per_event_ns" {
                "time"
            } else {
                "latency"
            };
            let title = format!("{scenario}: {label} vs message size");
            line_chart(
                &ctx.dir.join(format!("slice_{scenario}_{short}.png")),
                &Chart {
                    title: &title,
                    x_label: "message size (KiB, reply payload)",
                    y_label: label,
                    log_x: true,
                    log_y: false,
                },
                &series,
            )?;
        }
    }
    let f = &mut report.fields;
    f.insert("robs".into(), ROBS.into());
    f.insert("seconds_per_point".into(), seconds.into());
    rounds::record_fields(f, &plan, &schedule);
    f.insert("bad_replies".into(), bad.into());
    Ok((report, bad == 0))
}
