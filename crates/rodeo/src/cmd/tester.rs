//! `rodeo tester`: the ROSTester. Drives a readout node (`--connect`, or one started in this
//! process) with the HLT's request mix and reports the delete (L1) rate, request rates, latency
//! percentiles and bytes, as a table, JSON (`--json`) or CSV (`--csv`).
//!
//! An in-process node is reached over the direct link by default (`--transport direct`:
//! bounded lock-free queues, zero-copy page references, no ZeroMQ; one tester thread), or over
//! ZeroMQ inproc (`--transport inproc`, any number of tester threads).

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;
use rodeo_ros::server::DirectClient;
use rodeo_rostester::{self as tester, TesterConfig, TesterReport};
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{SocketKind, Transport};
use serde::Serialize;

use super::ros::{start_direct_node, start_node, NodeArgs};
use crate::report::Report;

/// Arguments of `rodeo tester`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The node's request endpoint; without it a node is started in this process (inproc),
    /// configured by the node options below.
    #[arg(long, value_name = "ENDPOINT")]
    connect: Option<String>,
    /// How the tester reaches an in-process node (without --connect).
    #[arg(long, value_enum, default_value = "direct")]
    transport: InProcess,
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    mix: MixArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Print a CSV header and one row.
    #[arg(long, conflicts_with = "json")]
    csv: bool,
}

/// How a tester reaches a node in the same process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum InProcess {
    /// The direct link: typed requests and page references over lock-free queues.
    Direct,
    /// ZeroMQ inproc: the ROUTER path every other endpoint uses.
    Inproc,
}

/// The request mix and the run's limits (shared with `bench ros`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct MixArgs {
    /// Probability of an L2 (RoI) request per event.
    #[arg(long, default_value_t = 0.7)]
    pub(crate) l2_fraction: f64,
    /// ROBs per L2 request.
    #[arg(long, default_value_t = 4)]
    pub(crate) roi_size: usize,
    /// Probability of an event-building request (the ROBs not yet requested) per event.
    #[arg(long, default_value_t = 0.2)]
    pub(crate) eb_fraction: f64,
    /// L1IDs per Clear message.
    #[arg(long, default_value_t = 100)]
    pub(crate) clear_group: usize,
    /// Requests in flight at most, per tester thread.
    #[arg(long, default_value_t = 256)]
    pub(crate) max_outstanding: usize,
    /// Events per second at most, per tester thread.
    #[arg(long, value_name = "HZ")]
    pub(crate) max_rate: Option<f64>,
    /// Tester instances sharing the node (L1IDs interleave).
    #[arg(long, default_value_t = 1)]
    pub(crate) instances: u32,
    /// This instance, 0 .. instances-1.
    #[arg(long, default_value_t = 0)]
    pub(crate) instance: u32,
    /// Tester threads in this process (each a sub-instance).
    #[arg(long, default_value_t = 1)]
    pub(crate) threads: u32,
    /// Events per thread (default: run for --seconds).
    #[arg(long)]
    pub(crate) events: Option<u64>,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) seconds: f64,
    /// Re-asks for FRAGMENT_PENDING fragments.
    #[arg(long, default_value_t = 3)]
    pub(crate) retries: u32,
    /// PRNG seed.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

/// One tester result row.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) events: u64,
    pub(crate) seconds: f64,
    pub(crate) l1_rate_hz: f64,
    pub(crate) requests_per_s: f64,
    pub(crate) l2_requests: u64,
    pub(crate) eb_requests: u64,
    pub(crate) fragments: u64,
    pub(crate) bytes: u64,
    pub(crate) bytes_per_s: f64,
    pub(crate) p50_latency_ns: u64,
    pub(crate) p90_latency_ns: u64,
    pub(crate) p99_latency_ns: u64,
    pub(crate) max_latency_ns: u64,
    pub(crate) pending_fragments: u64,
    pub(crate) lost_fragments: u64,
    pub(crate) bad_replies: u64,
    pub(crate) unanswered: u64,
    pub(crate) clears: u64,
    /// The slowest, median and fastest 250 ms interval of the run (L1 rate).
    pub(crate) interval_l1_rate_min_hz: f64,
    pub(crate) interval_l1_rate_median_hz: f64,
    pub(crate) interval_l1_rate_max_hz: f64,
}

impl Row {
    pub(crate) fn from_report(r: &TesterReport) -> Row {
        Row {
            events: r.events,
            seconds: r.seconds,
            l1_rate_hz: r.l1_rate_hz(),
            requests_per_s: r.requests_per_s(),
            l2_requests: r.l2_requests,
            eb_requests: r.eb_requests,
            fragments: r.fragments,
            bytes: r.bytes,
            bytes_per_s: r.bytes_per_s(),
            p50_latency_ns: r.latency.quantile(0.5),
            p90_latency_ns: r.latency.quantile(0.9),
            p99_latency_ns: r.latency.quantile(0.99),
            max_latency_ns: r.latency.max(),
            pending_fragments: r.pending_fragments,
            lost_fragments: r.lost_fragments,
            bad_replies: r.bad_replies,
            unanswered: r.unanswered,
            clears: r.clears,
            interval_l1_rate_min_hz: r.interval_rate_hz(0.0),
            interval_l1_rate_median_hz: r.interval_rate_hz(0.5),
            interval_l1_rate_max_hz: r.interval_rate_hz(1.0),
        }
    }
}

/// Runs `mix.threads` tester threads against `endpoint`; returns the merged report.
pub(crate) fn run_testers(
    t: &Transport,
    endpoint: &str,
    robs: &[u32],
    l1id_wrap: u32,
    mix: &MixArgs,
) -> anyhow::Result<TesterReport> {
    anyhow::ensure!(
        mix.instance < mix.instances,
        "--instance must be below --instances"
    );
    anyhow::ensure!(
        robs.len() <= tester::MAX_ROBS,
        "at most {} ROBs",
        tester::MAX_ROBS
    );
    let ep = Endpoint::parse(endpoint)?;
    let threads = mix.threads.max(1);
    let stop = AtomicBool::new(false);
    let results: Vec<anyhow::Result<TesterReport>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|j| {
                let (ep, stop) = (&ep, &stop);
                let cfg = tester_config(robs, l1id_wrap, mix, j);
                s.spawn(move || -> anyhow::Result<TesterReport> {
                    let mut sock = t.socket(SocketKind::Dealer)?;
                    sock.set_high_water_marks(100_000)?;
                    sock.connect(ep)?;
                    Ok(tester::run(&mut sock, &cfg, stop)?)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("tester thread panicked")))
            })
            .collect()
    });
    let mut merged = TesterReport::default();
    for r in results {
        merged.merge(&r?);
    }
    Ok(merged)
}

/// The library's tester configuration for thread `j` of `mix.threads`.
pub(crate) fn tester_config(robs: &[u32], l1id_wrap: u32, mix: &MixArgs, j: u32) -> TesterConfig {
    let threads = mix.threads.max(1);
    TesterConfig {
        robs: robs.to_vec(),
        l2_fraction: mix.l2_fraction,
        roi_size: mix.roi_size,
        eb_fraction: mix.eb_fraction,
        clear_group: mix.clear_group,
        max_outstanding: mix.max_outstanding,
        max_rate: mix.max_rate,
        instances: mix.instances * threads,
        instance: mix.instance * threads + j,
        events: mix.events,
        duration: Some(Duration::from_secs_f64(mix.seconds)),
        l1id_wrap,
        seed: mix.seed,
        retries: mix.retries,
        drain_timeout: Duration::from_secs(5),
        clear_flush: Duration::from_millis(20),
    }
}

/// Runs one tester on the direct link of an in-process node (one thread: the link has one
/// client).
pub(crate) fn run_direct_tester(
    client: &mut DirectClient,
    robs: &[u32],
    l1id_wrap: u32,
    mix: &MixArgs,
) -> anyhow::Result<TesterReport> {
    anyhow::ensure!(
        mix.threads <= 1,
        "the direct link serves one tester thread; use --transport inproc for --threads > 1"
    );
    anyhow::ensure!(
        mix.instance < mix.instances,
        "--instance must be below --instances"
    );
    anyhow::ensure!(
        robs.len() <= tester::MAX_ROBS,
        "at most {} ROBs",
        tester::MAX_ROBS
    );
    let cfg = tester_config(robs, l1id_wrap, mix, 0);
    Ok(tester::run_direct(client, &cfg, &AtomicBool::new(false))?)
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let t = Transport::new(args.node.io_threads)?;
    let robs = args.node.robs();
    let report = match &args.connect {
        Some(ep) => run_testers(&t, ep, &robs, args.node.l1id_wrap, &args.mix)?,
        None if args.transport == InProcess::Direct => {
            let (node, mut client) = start_direct_node(&args.node).context("in-process node")?;
            let r = run_direct_tester(&mut client, &robs, args.node.l1id_wrap, &args.mix)?;
            drop(client);
            drop(node);
            r
        }
        None => {
            let node = start_node(&t, &args.node, "inproc://rodeo-tester-node")
                .context("in-process node")?;
            let r = run_testers(&t, node.endpoint(), &robs, args.node.l1id_wrap, &args.mix)?;
            drop(node);
            r
        }
    };
    let row = Row::from_report(&report);
    if args.csv {
        let v = serde_json::to_value(&row)?;
        let m = v.as_object().context("row")?;
        println!("{}", m.keys().cloned().collect::<Vec<_>>().join(","));
        println!(
            "{}",
            m.values()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
    } else {
        let mut rep = Report::new("tester");
        rep.push_row(&row)?;
        rep.print(args.json);
    }
    Ok(if report.bad_replies == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
