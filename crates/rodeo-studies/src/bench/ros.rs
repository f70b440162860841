//! `rodeo bench ros`: the ROS paper's laboratory method (section 7.1): a readout node with 24
//! channels of 400-word fragments, driven by the ROSTester with the paper's request mix (L2
//! fraction 0.7 with RoI size 4, EB fraction 0.2, clears in groups of 100), measuring the delete
//! (L1) rate the node sustains.
//!
//! # Transports
//!
//! - `direct` (default): node and tester threads in this process joined by the direct link
//!   (bounded lock-free queues of request and reply boxes, replies referencing the store's
//!   pages): the same core thread as every other transport, without ZeroMQ, so the figure is
//!   rodeo's data path. `inproc` is kept as the name of the ZeroMQ endpoint kind (a
//!   `rodeo run` partition and any ROUTER client use it), hence a new name for the new path.
//! - `inproc`: node and tester threads in this process, ZeroMQ inproc.
//! - `tcp`: the node is a second process (`rodeo ros`) on tcp loopback; the tester runs here.
//!
//! # Input
//!
//! The node's channels are the inline firmware-style generator writing into the store's pages
//! (`--payload headers` by default: header and trailer written per fragment, the data words
//! left in place), so the measurement is of rodeo's data path (index, requests, replies,
//! clears), not of the emulated card's memory bandwidth, as the paper's firmware generators
//! cost the host nothing. `--payload full` writes every word.
//!
//! # Baselines
//!
//! Every transport: `data_path_l1_rate_hz`, the store alone in one thread (input, lookups and
//! page references of the mix, clears), and `input_only_l1_rate_hz`, the input and clears
//! alone: what the emulated card costs the core thread per event.
//!
//! `direct`: in the same run, the same node over ZeroMQ inproc (`zmq_inproc_l1_rate_hz`,
//! `ratio_to_zmq_inproc`), and `ratio_to_data_path`.
//!
//! `inproc`, `tcp`: in the same run, the same tester against a plain ZeroMQ ROUTER that answers each
//! DataRequest with prebuilt fragments of the same size (one copy frame each) and ignores
//! clears: `transport_limit_hz`, the L1 rate the transport and the tester allow with no store
//! behind them. `ratio_to_transport` is the node's rate over it.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{SocketKind, Transport};
use serde::Serialize;
use serde_json::Value;

use crate::plain::plain_loop;
use crate::report::Report;
use rodeo_ros::standalone::{
    start_direct_node, start_node, summary, InputKind, NodeArgs, PayloadKind,
};
use rodeo_rostester::drive::{run_direct_tester, run_testers, MixArgs, Row as TesterRow};
use rodeo_rostester::TesterReport;

/// Arguments of `rodeo bench ros`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the node runs and how the tester reaches it: in this process over the direct link
    /// (`direct`) or ZeroMQ inproc (`inproc`), or in a second process over tcp loopback (`tcp`).
    #[arg(long, value_enum, default_value = "direct")]
    pub transport: BenchTransport,
    /// Seconds per measurement (default 5, or 1 with --quick).
    #[arg(long, value_name = "S", value_parser = rodeo_ros::cli_values::seconds)]
    pub seconds: Option<f64>,
    /// Short runs, for smoke tests.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Tester threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: u32,
    /// Requests in flight per tester thread.
    #[arg(long, default_value_t = 128,
          value_parser = rodeo_ros::cli_values::count(1..=100_000))]
    pub max_outstanding: usize,
    /// Store pages (4 KiB, two fragments each) per channel; default: just enough for every
    /// tester thread's requests in flight and clear group, so the pages stay in cache (the
    /// bench measures rates, not buffer depth; in a real node the card's DMA, not the CPU,
    /// writes a deep buffer).
    #[arg(long)]
    pub pages_per_channel: Option<usize>,
    /// ROB channels.
    #[arg(long, default_value_t = 24)]
    pub channels: usize,
    /// Data words per fragment.
    #[arg(long, default_value_t = 400)]
    pub fragment_words: u32,
    /// What the emulated input writes per fragment.
    #[arg(long, value_enum, default_value = "headers")]
    pub payload: PayloadKind,
    /// Skip the plain ZeroMQ baseline.
    #[arg(long)]
    pub no_baseline: bool,
    /// Let the kernel place the threads. By default, with the direct link on a machine with
    /// two CPUs or more, the node's core thread runs pinned to CPU 1 and the tester thread to
    /// CPU 0, as a readout node pins its threads (the other transports are not pinned).
    #[arg(long)]
    pub no_pin: bool,
    /// The `rodeo` executable that `--transport tcp` starts as the second process (`rodeo ros`);
    /// default: this process's own executable (right when called from the `rodeo` binary).
    #[arg(skip)]
    pub rodeo_exe: Option<PathBuf>,
}

/// The CPUs of (core thread, tester thread): with the direct link, unless `--no-pin` or the
/// machine has fewer than two CPUs.
fn pinning(a: &Args) -> Option<(usize, usize)> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (!a.no_pin && a.transport == BenchTransport::Direct && cpus >= 2).then_some((1, 0))
}

/// The bench's transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchTransport {
    /// Node and tester in this process, the direct link (no ZeroMQ).
    Direct,
    /// Node and tester in this process, ZeroMQ inproc.
    Inproc,
    /// Node in a second process, tcp loopback.
    Tcp,
}

#[derive(Debug, Serialize)]
struct Row {
    server: &'static str,
    transport: &'static str,
    #[serde(flatten)]
    tester: TesterRow,
    node_requests: u64,
    node_replies: u64,
    node_input_fragments: u64,
    node_timeouts: u64,
    /// CPU time of the node's core thread per event (busy polling included).
    core_cpu_ns_per_event: f64,
    /// CPU time of the tester thread(s) per event.
    tester_cpu_ns_per_event: f64,
}

impl Row {
    fn new(server: &'static str, transport: &'static str, r: &TesterReport, node: &Value) -> Row {
        let per_event = |ns: f64| {
            if r.events > 0 {
                ns / r.events as f64
            } else {
                0.0
            }
        };
        let n = |k: &str| node.get(k).and_then(Value::as_u64).unwrap_or(0);
        Row {
            server,
            transport,
            tester: TesterRow::from_report(r),
            node_requests: n("requests"),
            node_replies: n("replies"),
            node_input_fragments: n("input_fragments"),
            node_timeouts: n("timeouts"),
            core_cpu_ns_per_event: per_event(n("core_cpu_ns") as f64),
            tester_cpu_ns_per_event: per_event(r.cpu.as_nanos() as f64),
        }
    }
}

fn node_args(a: &Args) -> NodeArgs {
    NodeArgs {
        channels: a.channels,
        fragment_words: a.fragment_words,
        base_source_id: 0x0051_0000,
        pages_per_channel: a.pages_per_channel.unwrap_or_else(|| {
            let events = a.threads.max(1) as usize * (100 + a.max_outstanding);
            events.div_ceil(2) + 16
        }),
        input: InputKind::Firmware,
        payload: a.payload,
        core_cpu: pinning(a).map(|(core, _)| core),
        // Over ZeroMQ every tester thread's requests in flight may wait at once (beyond the
        // descriptors, a request that would wait is answered PENDING); the direct link bounds
        // its tester by the descriptors, kept at the default so its rows compare with earlier
        // ones.
        descriptors: if a.transport == BenchTransport::Direct {
            rodeo_ros::node::NodeConfig::default().descriptors
        } else {
            (a.threads.max(1) as usize)
                .saturating_mul(a.max_outstanding)
                .clamp(1024, 1_000_000)
        },
        ..crate::defaults()
    }
}

fn mix(a: &Args, seconds: f64) -> MixArgs {
    MixArgs {
        l2_fraction: 0.7,
        roi_size: 4,
        eb_fraction: 0.2,
        clear_group: 100,
        max_outstanding: a.max_outstanding,
        max_rate: None,
        instances: 1,
        instance: 0,
        threads: a.threads,
        events: None,
        seconds,
        retries: 3,
        retry_delay: 0.001,
        seed: 1,
    }
}

/// Runs the bench as `a` describes it and returns its report.
pub fn measure_report(a: &Args) -> anyhow::Result<Report> {
    let seconds = a.seconds.unwrap_or(if a.quick { 1.0 } else { 5.0 });
    let node = node_args(a);
    let robs = node.robs();
    let mix = mix(a, seconds);
    let t = Transport::new(1)?;
    let tname = match a.transport {
        BenchTransport::Direct => "direct",
        BenchTransport::Inproc => "inproc",
        BenchTransport::Tcp => "tcp",
    };
    let mut report = Report::new("ros");
    let data_path = data_path_rate(&node, seconds.min(2.0), true)?;
    let input_only = data_path_rate(&node, seconds.min(2.0), false)?;
    // What writing every word would cost (the 38 GB/s of 1 MHz x 24 x 400 words).
    let input_full = data_path_rate(
        &NodeArgs {
            payload: PayloadKind::Full,
            ..node.clone()
        },
        seconds.min(1.0),
        false,
    )?;
    // The machine's own shared-memory rate just before and just after the measured run
    // (probe.rs): when the host moves the CPUs, both it and the ROS figures drop.
    let probe_time = Duration::from_secs_f64(seconds.min(2.0) * 0.15);
    let probe_before = super::probe::shared_ring_rate(probe_time, pinning(a));
    // The node.
    // Whether both threads ran where they were asked to (the kernel may refuse a CPU).
    let mut pinned = false;
    let (tester, counters) = match a.transport {
        BenchTransport::Direct => {
            let (n, mut client) = start_direct_node(&node)?;
            let tester_cpu = pinning(a).map(|(_, t)| t);
            // The tester in a thread of its own, so that pinning it leaves this one free.
            let (tester_pinned, r) = std::thread::scope(|s| {
                s.spawn(|| {
                    let ok = tester_cpu.is_some_and(rodeo_memory::cpu::pin_to_cpu);
                    (
                        ok,
                        run_direct_tester(&mut client, &robs, node.l1id_wrap, &mix),
                    )
                })
                .join()
                .map_err(|_| anyhow::anyhow!("the tester thread panicked"))
            })?;
            let r = r?;
            drop(client);
            let stopped = n.stop();
            pinned = tester_pinned && stopped.core_pinned;
            (r, summary(&stopped))
        }
        BenchTransport::Inproc => {
            let n = start_node(&t, &node, "inproc://bench-ros")?;
            let r = run_testers(&t, n.endpoint(), &robs, node.l1id_wrap, &mix)?;
            let stopped = n.stop();
            (r, summary(&stopped))
        }
        BenchTransport::Tcp => {
            let mut child = Child::spawn(a.rodeo_exe.as_deref(), &node, false)?;
            let r = run_testers(&t, &child.endpoint, &robs, node.l1id_wrap, &mix)?;
            (r, child.finish()?)
        }
    };
    let probe_after = super::probe::shared_ring_rate(probe_time, pinning(a));
    let ros_rate = tester.l1_rate_hz();
    let main_row = Row::new("ros", tname, &tester, &counters);
    // The rate if each thread had a core of its own at the CPU cost per event measured here.
    let cpu_bound = {
        let worst = main_row
            .core_cpu_ns_per_event
            .max(main_row.tester_cpu_ns_per_event);
        if worst > 0.0 {
            1e9 / worst
        } else {
            0.0
        }
    };
    let (core_ns, tester_ns) = (
        main_row.core_cpu_ns_per_event,
        main_row.tester_cpu_ns_per_event,
    );
    report.push_row(&main_row)?;
    // The plain ZeroMQ baseline (for direct: the same node over ZeroMQ inproc).
    let mut limit = 0.0;
    if !a.no_baseline {
        let r = match a.transport {
            BenchTransport::Direct => {
                let n = start_node(&t, &node, "inproc://bench-ros")?;
                let r = run_testers(&t, n.endpoint(), &robs, node.l1id_wrap, &mix)?;
                let counters = summary(&n.stop());
                report.push_row(&Row::new("ros", "inproc", &r, &counters))?;
                r
            }
            BenchTransport::Inproc => {
                let stop = AtomicBool::new(false);
                std::thread::scope(|s| -> anyhow::Result<_> {
                    let sock = t.socket(SocketKind::Router)?;
                    sock.bind(&Endpoint::parse("inproc://bench-ros-plain")?)?;
                    let (node_ref, stop_ref) = (&node, &stop);
                    let server = s.spawn(move || {
                        plain_loop(sock, node_ref, &|| stop_ref.load(Ordering::Relaxed))
                    });
                    let r =
                        run_testers(&t, "inproc://bench-ros-plain", &robs, node.l1id_wrap, &mix);
                    stop.store(true, Ordering::Relaxed);
                    let _ = server.join();
                    r
                })?
            }
            BenchTransport::Tcp => {
                let mut child = Child::spawn(a.rodeo_exe.as_deref(), &node, true)?;
                let r = run_testers(&t, &child.endpoint, &robs, node.l1id_wrap, &mix)?;
                child.finish()?;
                r
            }
        };
        limit = r.l1_rate_hz();
        if a.transport != BenchTransport::Direct {
            report.push_row(&Row::new("plain_zmq", tname, &r, &Value::Null))?;
        }
    }
    let target = match a.transport {
        BenchTransport::Direct | BenchTransport::Inproc => 1.0e6,
        BenchTransport::Tcp => 2.0e5,
    };
    let ratio = if limit > 0.0 { ros_rate / limit } else { 0.0 };
    let over = |x: f64| if x > 0.0 { ros_rate / x } else { 0.0 };
    let met = ros_rate >= target || (a.transport == BenchTransport::Tcp && ratio >= 0.8);
    let f = &mut report.fields;
    f.insert("transport".into(), tname.into());
    f.insert("channels".into(), a.channels.into());
    f.insert("fragment_words".into(), a.fragment_words.into());
    f.insert("pages_per_channel".into(), node.pages_per_channel.into());
    f.insert("pinned".into(), pinned.into());
    f.insert("l1_rate_hz".into(), ros_rate.into());
    // The rate over time (250 ms intervals): a host that moves this machine's CPUs changes it
    // within a run (docs/benchmarks.md).
    f.insert(
        "interval_l1_rates_hz".into(),
        tester.interval_rates_hz().into(),
    );
    for (name, q) in [("min", 0.0), ("median", 0.5), ("max", 1.0)] {
        f.insert(
            format!("interval_l1_rate_{name}_hz"),
            tester.interval_rate_hz(q).into(),
        );
    }
    f.insert("probe_before_per_s".into(), probe_before.into());
    f.insert("probe_after_per_s".into(), probe_after.into());
    f.insert("data_path_l1_rate_hz".into(), data_path.into());
    f.insert("ratio_to_data_path".into(), over(data_path).into());
    f.insert("input_only_l1_rate_hz".into(), input_only.into());
    f.insert(
        "input_ns_per_event".into(),
        (if input_only > 0.0 {
            1e9 / input_only
        } else {
            0.0
        })
        .into(),
    );
    f.insert("core_cpu_ns_per_event".into(), core_ns.into());
    f.insert("tester_cpu_ns_per_event".into(), tester_ns.into());
    f.insert("cpu_bound_l1_rate_hz".into(), cpu_bound.into());
    f.insert("input_full_payload_l1_rate_hz".into(), input_full.into());
    f.insert(
        "input_full_payload_bytes_per_s".into(),
        (input_full * a.channels as f64 * (f64::from(a.fragment_words) + 21.0) * 4.0).into(),
    );
    if a.transport == BenchTransport::Direct {
        f.insert("zmq_inproc_l1_rate_hz".into(), limit.into());
        f.insert("ratio_to_zmq_inproc".into(), ratio.into());
    } else {
        f.insert("transport_limit_hz".into(), limit.into());
        f.insert("ratio_to_transport".into(), ratio.into());
    }
    f.insert("target_l1_rate_hz".into(), target.into());
    f.insert("target_met".into(), met.into());
    report.add_target(
        &format!("ROS L1 rate over {tname}"),
        format!("{:.1} kHz", ros_rate / 1e3),
        if a.transport == BenchTransport::Tcp {
            format!(
                ">= {:.0} kHz, or >= 80% of the transport's limit ({:.1} kHz; here {:.0}%)",
                target / 1e3,
                limit / 1e3,
                100.0 * ratio
            )
        } else {
            format!(">= {:.0} kHz", target / 1e3)
        },
        met,
    );
    Ok(report)
}

/// The store alone, in this thread, no transport: per event 24 fragments written by the
/// firmware input, the mix's fragments looked up and referenced as a reply would (about 2.8 for
/// the L2 request, 0.2 x the rest for EB; skipped without `requests`), and clears by 100.
/// Events per second.
fn data_path_rate(node: &NodeArgs, seconds: f64, requests: bool) -> anyhow::Result<f64> {
    use rodeo_cards::generator::L1idCounter;
    use rodeo_memory::{PagePool, PagePoolConfig, RegionOptions};
    use rodeo_ros::inputs::{FirmwareInput, Payload};
    use rodeo_ros::server::Input;
    use rodeo_ros::store::{EventStore, StoreConfig};
    let pool = PagePool::new(PagePoolConfig {
        page_bytes: node.page_bytes,
        pages: node.channels * node.pages_per_channel,
        region: RegionOptions {
            huge_pages: rodeo_memory::HugePages::Transparent,
            ..RegionOptions::default()
        },
    })?;
    let mut store = EventStore::new(
        &pool,
        &StoreConfig::with_channels(node.channels, node.base_source_id, node.pages_per_channel),
    )?;
    let payload = if node.payload == PayloadKind::Full {
        Payload::Full
    } else {
        Payload::HeadersOnly
    };
    let mut input = FirmwareInput::new(
        &store,
        node.fragment_words as usize,
        node.l1id_wrap,
        payload,
    );
    let wrap = node.l1id_wrap;
    let mut refs = Vec::with_capacity(64);
    let (mut cleared, mut x) = (0u64, 0x9E37_79B9u32);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        input.poll(&mut store);
        for n in (cleared..cleared + 100).filter(|_| requests) {
            let l1id = L1idCounter::expected(wrap, n);
            // The mix: 70% L2 (4 ROBs), 20% EB (the rest), by a cheap xorshift.
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let robs = if x % 10 < 7 { 4 } else { 0 } + if x % 5 == 0 { 20 } else { 0 };
            for c in 0..robs.min(node.channels) {
                store.with_segments((c + n as usize) % node.channels, l1id, |r| refs.push(r));
            }
            refs.clear();
        }
        store.reclaim();
        store.clear((cleared..cleared + 100).map(|n| L1idCounter::expected(wrap, n)));
        cleared += 100;
    }
    Ok(cleared as f64 / start.elapsed().as_secs_f64())
}

/// A `rodeo ros` child process on tcp loopback.
struct Child {
    child: std::process::Child,
    endpoint: String,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Child {
    fn spawn(exe: Option<&std::path::Path>, node: &NodeArgs, plain: bool) -> anyhow::Result<Child> {
        let exe = match exe {
            Some(p) => p.to_path_buf(),
            None => std::env::current_exe().context("current exe")?,
        };
        let mut cmd = Command::new(exe);
        cmd.args(["ros", "--listen", "tcp://127.0.0.1:0", "--json"])
            .args(["--channels", &node.channels.to_string()])
            .args(["--fragment-words", &node.fragment_words.to_string()])
            .args(["--descriptors", &node.descriptors.to_string()])
            .args(["--input", "firmware"])
            .args([
                "--payload",
                if node.payload == PayloadKind::Full {
                    "full"
                } else {
                    "headers"
                },
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if plain {
            cmd.arg("--plain-baseline");
        }
        let mut child = cmd.spawn().context("start rodeo ros")?;
        let mut stdout = BufReader::new(child.stdout.take().context("child stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let endpoint = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("unexpected first line from rodeo ros: {line:?}"))?
            .to_string();
        Ok(Child {
            child,
            endpoint,
            stdout,
        })
    }

    /// Stops the child (SIGTERM) and returns its JSON summary.
    fn finish(&mut self) -> anyhow::Result<Value> {
        let pid = libc::pid_t::try_from(self.child.id()).context("pid")?;
        // SAFETY: kill() with our own child's pid and SIGTERM has no memory-safety preconditions.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let mut rest = String::new();
        let t0 = Instant::now();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest)?;
        let status = self.child.wait()?;
        anyhow::ensure!(status.success(), "rodeo ros exited with {status}");
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(30),
            "rodeo ros slow to stop"
        );
        Ok(serde_json::from_str(rest.trim()).unwrap_or(Value::Null))
    }
}
