//! `rodeo study sfi`: the DataCollection paper's Fig. 3. An event-building node (the SFI) pulls
//! every event from many data sources, one DataRequest per source in round-robin order, over
//! ZeroMQ inproc. The sources are emulated as the paper's FPGA ROS emulators were: a few
//! emulator threads (the plain fragment server of `rodeo bench ros`, prebuilt fragments of the
//! chosen size) each answering for many source ids. Measured: the message (fragment) rate and
//! the bandwidth into the SFI, per fragment size; the ratio of each size's message rate to the
//! smallest size's (the paper: 114 kHz at 1456 bytes over 131 kHz at 160 bytes, 0.87).
//!
//! Every point is measured `--rounds` times (5 by default), interleaved and probe-guarded as
//! [`super::rounds`] schedules it; rows hold the medians and the message rate's spread, and
//! the ratios are between medians.
//!
//! # Threads and shutdown
//!
//! The SFI loop runs on the calling thread; emulators run in a thread scope and stop on a flag
//! the SFI sets when its time is up (after waiting, bounded, for the replies in flight).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{decode, encode_data_request, Message};
use rodeo_transport::socket::{poll_readable, Frame, Received, Socket, SocketKind, Transport};
use serde::Serialize;

use super::plot::{line_chart, Chart, Series};
use super::rounds::{self, summarize};
use super::{field, Ctx};
use crate::plain::plain_loop;
use crate::report::Report;
use rodeo_ros::standalone::{InputKind, NodeArgs};

/// Emulator threads (the paper had 60 FPGA emulators for 1600 sources).
const EMULATORS: usize = 2;
/// Requests in flight at most (the SFI's credit).
const WINDOW: usize = 512;
/// Bytes of a fragment with no data words (ROB and ROD headers, status, trailer).
const EMPTY_FRAGMENT_BYTES: u32 = 4 * 21;

/// One run of one point.
#[derive(Debug, Clone)]
struct Run {
    fragment_bytes: u32,
    events: u64,
    messages: u64,
    seconds: f64,
    message_rate_hz: f64,
    bytes_per_s: f64,
    event_rate_hz: f64,
    bad_replies: u64,
}

/// A point summarised over its runs (a CSV row): medians and the message rate's spread.
#[derive(Debug, Serialize)]
struct Row {
    sources: usize,
    fragment_bytes: u32,
    /// Runs kept (one per round).
    runs: usize,
    /// Runs measured again because the probe said the host was slow.
    repeated_rounds: usize,
    /// Median over the kept runs of the probe over the best probe of the study.
    probe_ratio: f64,
    events: f64,
    messages: f64,
    seconds: f64,
    message_rate_hz: f64,
    /// (max - min) / median of the message rate over the runs.
    message_rate_spread: f64,
    message_rate_min_hz: f64,
    message_rate_max_hz: f64,
    bytes_per_s: f64,
    event_rate_hz: f64,
    event_bytes: u64,
    rate_ratio_to_smallest: f64,
    bad_replies: u64,
}

fn emulator_args(sources: usize, words: u32, first: u32) -> NodeArgs {
    NodeArgs {
        channels: sources,
        fragment_words: words,
        base_source_id: first,
        pages_per_channel: 1,
        input: InputKind::Firmware,
        descriptors: 1,
        ..crate::defaults()
    }
}

/// Measures one point: `sources` sources of `fragment_bytes`-byte fragments for `seconds`.
fn measure(
    t: &Transport,
    sources: usize,
    fragment_bytes: u32,
    seconds: f64,
) -> anyhow::Result<Run> {
    let words = fragment_bytes.saturating_sub(EMPTY_FRAGMENT_BYTES) / 4;
    let per = sources.div_ceil(EMULATORS);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> anyhow::Result<Run> {
        let mut socks = Vec::new();
        let mut handles = Vec::new();
        for e in 0..EMULATORS {
            let n = per.min(sources - (e * per).min(sources));
            let args = emulator_args(n, words, 0x0070_0000 + (e * per) as u32);
            // A fresh name per point: ZeroMQ frees a closed inproc name asynchronously.
            let ep = format!("inproc://study-sfi-{}-{e}", super::unique());
            let sock = t.socket(SocketKind::Router)?;
            sock.set_high_water_marks(100_000)?;
            sock.bind(&Endpoint::parse(&ep)?)?;
            let stop = &stop;
            handles
                .push(s.spawn(move || plain_loop(sock, &args, &|| stop.load(Ordering::Relaxed))));
            let d = t.socket(SocketKind::Dealer)?;
            d.set_high_water_marks(100_000)?;
            d.connect(&Endpoint::parse(&ep)?)?;
            socks.push(d);
        }
        let r = sfi_loop(&mut socks, sources, per, seconds);
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("emulator thread panicked"))??;
        }
        let (events, messages, bytes, bad, secs) = r?;
        Ok(Run {
            // As measured: reply fragment bytes over fragments.
            fragment_bytes: bytes
                .checked_div(messages)
                .map_or(EMPTY_FRAGMENT_BYTES + 4 * words, |b| b as u32),
            events,
            messages,
            seconds: secs,
            message_rate_hz: messages as f64 / secs,
            bytes_per_s: bytes as f64 / secs,
            event_rate_hz: events as f64 / secs,
            bad_replies: bad,
        })
    })
}

/// The SFI: returns (events built, fragments received, fragment bytes, bad replies, seconds).
fn sfi_loop(
    socks: &mut [Socket],
    sources: usize,
    per: usize,
    seconds: f64,
) -> anyhow::Result<(u64, u64, u64, u64, f64)> {
    // Outstanding fragments per event in flight, indexed by L1ID modulo the ring.
    const RING: usize = 4096;
    let mut missing = vec![0u32; RING];
    let mut buf = Vec::with_capacity(64);
    let mut msg = Received::default();
    let (mut l1id, mut next_source) = (0u32, 0usize);
    let mut tally = Tally::default();
    let mut in_flight = 0usize;
    let (mut oldest, mut started) = (0u32, false);
    let start = Instant::now();
    let deadline = Duration::from_secs_f64(seconds);
    loop {
        let generating = start.elapsed() < deadline;
        if !generating && in_flight == 0 {
            break;
        }
        anyhow::ensure!(
            start.elapsed() < deadline + Duration::from_secs(10),
            "SFI: replies missing after the run"
        );
        // Requests, round robin over the sources, while there is credit and ring space.
        while generating && in_flight < WINDOW && (l1id.wrapping_sub(oldest) as usize) < RING - 1 {
            if next_source == 0 {
                missing[l1id as usize % RING] = sources as u32;
                started = true;
            }
            let e = next_source / per;
            let source = 0x0070_0000 + next_source as u32;
            buf.clear();
            encode_data_request(&mut buf, l1id, l1id, &[source]);
            socks[e].send([Frame::Copy(&buf)])?;
            in_flight += 1;
            next_source += 1;
            if next_source == sources {
                next_source = 0;
                l1id = l1id.wrapping_add(1);
            }
        }
        let mut got = false;
        for s in socks.iter_mut() {
            while s.try_recv(&mut msg)? {
                got = true;
                in_flight -= 1;
                tally.reply(&msg, &mut missing);
            }
        }
        while started && oldest != l1id && missing[oldest as usize % RING] == 0 {
            oldest = oldest.wrapping_add(1);
        }
        if !got {
            // Nothing waiting: sleep until any emulator's socket has a reply (at most 1 ms).
            let refs: Vec<&Socket> = socks.iter().collect();
            poll_readable(&refs, 1)?;
        }
    }
    Ok((
        tally.events,
        tally.messages,
        tally.bytes,
        tally.bad,
        start.elapsed().as_secs_f64().max(1e-9),
    ))
}

/// What the SFI counted.
#[derive(Debug, Default)]
struct Tally {
    events: u64,
    messages: u64,
    bytes: u64,
    bad: u64,
}

impl Tally {
    /// Accounts one reply: its fragment, and the event when it was the event's last.
    fn reply(&mut self, msg: &Received, missing: &mut [u32]) {
        match decode(&msg.bytes).map(|d| d.message) {
            Ok(Message::DataReply { l1id, fragments }) if fragments.len() == 1 => {
                self.messages += 1;
                self.bytes += fragments.iter().map(|f| f.len() as u64).sum::<u64>();
                let n = missing.len();
                let m = &mut missing[l1id as usize % n];
                *m = m.saturating_sub(1);
                if *m == 0 {
                    self.events += 1;
                }
            }
            _ => self.bad += 1,
        }
    }
}

/// Runs the SFI study: event building from many emulated sources, rates and bandwidth.
pub fn run(ctx: &Ctx) -> anyhow::Result<(Report, bool)> {
    let seconds = ctx.seconds.unwrap_or(if ctx.quick { 1.0 } else { 3.0 });
    let sizes: &[u32] = if ctx.quick {
        &[160, 640, 1456]
    } else {
        &[160, 320, 640, 1024, 1456]
    };
    let source_counts: &[usize] = if ctx.quick {
        &[1600]
    } else {
        &[100, 400, 1600]
    };
    let t = Transport::new(1)?;
    let mut report = Report::new("sfi");
    let points: Vec<(usize, u32)> = source_counts
        .iter()
        .flat_map(|&n| sizes.iter().map(move |&b| (n, b)))
        .collect();
    // Every point `rounds` times, interleaved, probe-guarded (rounds.rs).
    let plan = rounds::study_plan(ctx.rounds.unwrap_or(5), ctx.quick);
    let schedule = rounds::run(
        points.len(),
        &plan,
        rounds::host_probe(seconds),
        |i, round| {
            let (sources, size) = points[i];
            let r = measure(&t, sources, size, seconds)
                .with_context(|| format!("{sources} sources, {size} bytes"))?;
            eprintln!(
                "study sfi: round {}/{}, {sources} sources, {} bytes: {:.0} messages/s",
                round + 1,
                plan.rounds,
                r.fragment_bytes,
                r.message_rate_hz
            );
            Ok(r)
        },
    )?;
    let mut bad = 0;
    let mut base = 0.0;
    for (i, &(sources, size)) in points.iter().enumerate() {
        let runs: Vec<&Run> = schedule.samples[i].iter().map(|s| &s.value).collect();
        let med = |f: fn(&Run) -> f64| summarize(&runs.iter().map(|r| f(r)).collect::<Vec<_>>());
        let rate = med(|r| r.message_rate_hz);
        if size == sizes[0] {
            base = rate.median;
        }
        let (probe_ratio, repeats) = schedule.point_probe(i);
        let words = size.saturating_sub(EMPTY_FRAGMENT_BYTES) / 4;
        let row = Row {
            sources,
            fragment_bytes: med(|r| f64::from(r.fragment_bytes)).median as u32,
            runs: runs.len(),
            repeated_rounds: repeats,
            probe_ratio,
            events: med(|r| r.events as f64).median,
            messages: med(|r| r.messages as f64).median,
            seconds: med(|r| r.seconds).median,
            message_rate_hz: rate.median,
            message_rate_spread: rate.spread,
            message_rate_min_hz: rate.min,
            message_rate_max_hz: rate.max,
            bytes_per_s: med(|r| r.bytes_per_s).median,
            event_rate_hz: med(|r| r.event_rate_hz).median,
            event_bytes: sources as u64 * u64::from(EMPTY_FRAGMENT_BYTES + 4 * words),
            rate_ratio_to_smallest: if base > 0.0 { rate.median / base } else { 0.0 },
            bad_replies: runs.iter().map(|r| r.bad_replies).sum(),
        };
        bad += row.bad_replies;
        report.push_row(&row)?;
    }
    let mut rate = Vec::new();
    let mut bw = Vec::new();
    for &sources in source_counts {
        let rows: Vec<_> = report
            .rows
            .iter()
            .filter(|r| field(r, "sources") == sources as f64)
            .collect();
        rate.push(Series {
            label: format!("{sources} sources: message rate (kHz)"),
            points: rows
                .iter()
                .map(|r| {
                    (
                        field(r, "fragment_bytes"),
                        field(r, "message_rate_hz") / 1e3,
                    )
                })
                .collect(),
            line: true,
        });
        bw.push(Series {
            label: format!("{sources} sources: bandwidth (MB/s)"),
            points: rows
                .iter()
                .map(|r| (field(r, "fragment_bytes"), field(r, "bytes_per_s") / 1e6))
                .collect(),
            line: true,
        });
    }
    for (file, title, y, series) in [
        (
            "sfi_message_rate.png",
            "SFI message rate vs fragment size",
            "kHz",
            rate,
        ),
        (
            "sfi_bandwidth.png",
            "SFI input bandwidth vs fragment size",
            "MB/s",
            bw,
        ),
    ] {
        line_chart(
            &ctx.dir.join(file),
            &Chart {
                title,
                x_label: "fragment size (bytes)",
                y_label: y,
                log_x: false,
                log_y: false,
            },
            &series,
        )?;
    }
    let f = &mut report.fields;
    f.insert("emulator_threads".into(), EMULATORS.into());
    f.insert("window_requests".into(), WINDOW.into());
    f.insert("seconds_per_point".into(), seconds.into());
    rounds::record_fields(f, &plan, &schedule);
    f.insert("bad_replies".into(), bad.into());
    Ok((report, bad == 0))
}
