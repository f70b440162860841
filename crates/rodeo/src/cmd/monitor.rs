//! `rodeo monitor URL`: subscribes to a partition's sampled events (`[monitoring] endpoint`)
//! and prints a live summary every second (samples per second, mean event size, ROBs per
//! event, samples missed), until Ctrl-C, `--seconds` or `--events`; then the totals (one JSON
//! object with `--json`). Whether it ever reached the endpoint is known from the socket's own
//! connection events: a monitor that never connected (nothing serves the endpoint) says so and
//! exits 1, not 0 with "0 events".

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use rodeo_control::monitoring::decode_sample;

/// Arguments of `rodeo monitor`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The monitoring endpoint (`tcp://HOST:PORT` or `ipc://PATH`, the `[monitoring] endpoint`
    /// of the partition; a wildcard host `*` means this host).
    url: String,
    /// Stop after this many seconds (0: until Ctrl-C).
    #[arg(long, default_value_t = 0.0, value_parser = rodeo_ros::cli_values::seconds_or_zero)]
    seconds: f64,
    /// Stop after this many samples (0: no limit).
    #[arg(long, default_value_t = 0)]
    events: u64,
    /// Print only the totals at the end, as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Running totals of what was received.
#[derive(Default)]
struct Totals {
    samples: u64,
    bytes: u64,
    robs: u64,
    missed: u64,
    bad: u64,
    last_seq: std::collections::BTreeMap<String, u64>,
    /// Connections to the endpoint made and lost (the SUB socket's monitor events).
    connections: u64,
    disconnections: u64,
}

impl Totals {
    /// Counts the connection events the SUB socket's monitor has queued on `pair`.
    fn count_connections(&mut self, pair: &zmq::Socket) {
        while let Ok(frames) = pair.recv_multipart(zmq::DONTWAIT) {
            // Frame 0: the event (16 bits, native order) and a 32-bit value; frame 1: the
            // endpoint.
            let Some(&[a, b]) = frames.first().and_then(|f| f.get(..2)) else {
                continue;
            };
            let event = u16::from_ne_bytes([a, b]);
            if event == zmq::SocketEvent::CONNECTED.to_raw() {
                self.connections += 1;
            } else if event == zmq::SocketEvent::DISCONNECTED.to_raw() {
                self.disconnections += 1;
            }
        }
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.url.starts_with("tcp://") && !args.url.starts_with("ipc://") {
        anyhow::bail!(
            "{}: give the monitoring endpoint as tcp://HOST:PORT or ipc://PATH",
            args.url
        );
    }
    let url = args.url.replacen("tcp://*:", "tcp://127.0.0.1:", 1);
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).context("cannot create a SUB socket")?;
    sub.set_linger(0)?;
    sub.set_rcvhwm(1000)?;
    sub.set_rcvtimeo(100)?;
    sub.set_subscribe(b"")?;
    // The socket's connection events, read on a pair socket: connected before the SUB socket
    // connects, so the first connection is not missed.
    let events = zmq::SocketEvent::CONNECTED.to_raw() as i32
        | zmq::SocketEvent::DISCONNECTED.to_raw() as i32;
    sub.monitor("inproc://rodeo-monitor-events", events)
        .context("cannot watch the SUB socket's connections")?;
    let pair = ctx
        .socket(zmq::PAIR)
        .context("cannot create a PAIR socket")?;
    pair.set_linger(0)?;
    pair.connect("inproc://rodeo-monitor-events")
        .context("cannot read the SUB socket's connection events")?;
    sub.connect(&url)
        .with_context(|| format!("cannot connect to {url}"))?;
    crate::signal::install();
    let start = Instant::now();
    let mut t = Totals::default();
    let mut interval = (Instant::now(), 0u64, 0u64, 0u64);
    loop {
        if crate::signal::interrupted()
            || (args.seconds > 0.0 && start.elapsed().as_secs_f64() >= args.seconds)
            || (args.events > 0 && t.samples >= args.events)
        {
            break;
        }
        if let Ok(frames) = sub.recv_multipart(0) {
            match decode_sample(&frames) {
                Ok(s) => {
                    t.samples += 1;
                    t.bytes += s.bytes as u64;
                    t.robs += s.robs.len() as u64;
                    if let Some(last) = t.last_seq.insert(s.dcm.clone(), s.seq) {
                        if s.seq > last {
                            t.missed += s.seq - last - 1;
                        }
                    }
                }
                Err(e) => {
                    t.bad += 1;
                    if !args.json {
                        eprintln!("rodeo monitor: {e}");
                    }
                }
            }
        }
        let dt = interval.0.elapsed();
        if dt >= Duration::from_secs(1) {
            t.count_connections(&pair);
            let n = t.samples - interval.1;
            if !args.json && t.connections == 0 {
                outln!(
                    "{:7.1} s  not connected: nothing serves {url} yet",
                    start.elapsed().as_secs_f64()
                );
            } else if !args.json {
                let mean = |a: u64| if n > 0 { a as f64 / n as f64 } else { 0.0 };
                outln!(
                    "{:7.1} s  {:8.1} events/s  mean {:9.0} bytes  {:5.1} ROBs/event  missed {}",
                    start.elapsed().as_secs_f64(),
                    n as f64 / dt.as_secs_f64(),
                    mean(t.bytes - interval.2),
                    mean(t.robs - interval.3),
                    t.missed
                );
            }
            interval = (Instant::now(), t.samples, t.bytes, t.robs);
        }
    }
    t.count_connections(&pair);
    let secs = start.elapsed().as_secs_f64();
    let per = |a: u64| {
        if t.samples > 0 {
            a as f64 / t.samples as f64
        } else {
            0.0
        }
    };
    let totals = serde_json::json!({
        "endpoint": url,
        "seconds": secs,
        "events": t.samples,
        "events_per_second": if secs > 0.0 { t.samples as f64 / secs } else { 0.0 },
        "mean_event_bytes": per(t.bytes),
        "robs_per_event": per(t.robs),
        "missed": t.missed,
        "bad_messages": t.bad,
        "dcms": t.last_seq.keys().collect::<Vec<_>>(),
        "connected": t.connections > 0,
        "connections": t.connections,
        "disconnections": t.disconnections,
    });
    if args.json {
        outln!("{totals}");
    } else {
        eprintln!(
            "rodeo monitor: {} events in {secs:.1} s, mean {:.0} bytes, {:.1} ROBs/event, {} missed",
            t.samples,
            per(t.bytes),
            per(t.robs),
            t.missed
        );
    }
    if t.connections == 0 {
        eprintln!(
            "rodeo monitor: never connected to {url} in {secs:.1} s: nothing serves it. Is a \
             partition running with `[monitoring] endpoint = \"{}\"`, and is the address this \
             host can reach?",
            args.url
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
