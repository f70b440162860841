//! The ROSTester as `rodeo tester`, the benches and the studies drive it: tester threads over
//! ZeroMQ or one tester on the direct link of an in-process node, configured by [`MixArgs`] (the
//! command line's request-mix options, a clap `Args` struct), and one flat result row
//! ([`Row`]).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rodeo_ros::cli_values;
use rodeo_ros::server::DirectClient;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{SocketKind, Transport};
use serde::Serialize;

use crate::config::TesterConfig;
use crate::report::TesterReport;
use crate::run as tester;

/// The request mix and the run's limits (shared with `bench ros`).
#[derive(Debug, Clone, clap::Args)]
pub struct MixArgs {
    /// Probability of an L2 (RoI) request per event.
    #[arg(long, default_value_t = 0.7, value_parser = cli_values::fraction)]
    pub l2_fraction: f64,
    /// ROBs per L2 request.
    #[arg(long, default_value_t = 4)]
    pub roi_size: usize,
    /// Probability of an event-building request (the ROBs not yet requested) per event.
    #[arg(long, default_value_t = 0.2, value_parser = cli_values::fraction)]
    pub eb_fraction: f64,
    /// L1IDs per Clear message.
    #[arg(long, default_value_t = 100,
          value_parser = cli_values::count(1..=100_000))]
    pub clear_group: usize,
    /// Requests in flight at most, per tester thread. The node's descriptors must cover
    /// every thread's and instance's (`rodeo ros --descriptors`, 1024 by default): a request
    /// beyond them that would wait is answered PENDING at once, and counted missing after the
    /// retries.
    #[arg(long, default_value_t = 256,
          value_parser = cli_values::count(1..=100_000))]
    pub max_outstanding: usize,
    /// Events per second at most, per tester thread.
    #[arg(long, value_name = "HZ", value_parser = cli_values::rate_hz)]
    pub max_rate: Option<f64>,
    /// Tester instances sharing the node (L1IDs interleave).
    #[arg(long, default_value_t = 1)]
    pub instances: u32,
    /// This instance, 0 .. instances-1.
    #[arg(long, default_value_t = 0)]
    pub instance: u32,
    /// Tester threads in this process (each a sub-instance).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: u32,
    /// Events per thread (default: run for --seconds).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    /// Events the testers completed (all their fragments received, cleared).
    pub events: Option<u64>,
    /// Wall-clock seconds of the run.
    #[arg(long, default_value_t = 5.0, value_parser = cli_values::seconds)]
    pub seconds: f64,
    /// Re-asks for FRAGMENT_PENDING fragments.
    #[arg(long, default_value_t = 3)]
    pub retries: u32,
    /// Seconds before a re-ask for FRAGMENT_PENDING fragments (protocol rule 3: "after a
    /// short delay"; a DCM's default, 1 ms). 0: at once; below 5 s (the drain timeout).
    #[arg(long, default_value_t = 0.001, value_parser = cli_values::seconds_or_zero)]
    pub retry_delay: f64,
    /// PRNG seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// One tester result row.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Events the testers completed (every fragment received, cleared).
    pub events: u64,
    /// Wall-clock seconds of the run.
    pub seconds: f64,
    /// Events (L1 accepts, i.e. deletes) per second.
    pub l1_rate_hz: f64,
    /// Data requests per second.
    pub requests_per_s: f64,
    /// L2 (RoI) requests sent.
    pub l2_requests: u64,
    /// Event-building requests sent.
    pub eb_requests: u64,
    /// Fragments received.
    pub fragments: u64,
    /// Fragment bytes received.
    pub bytes: u64,
    /// Fragment bytes received per second.
    pub bytes_per_s: f64,
    /// Median request latency.
    pub p50_latency_ns: u64,
    /// 90th percentile of the request latency.
    pub p90_latency_ns: u64,
    /// 99th percentile of the request latency.
    pub p99_latency_ns: u64,
    /// Longest request latency.
    pub max_latency_ns: u64,
    /// Fragments the node reported pending (asked again).
    pub pending_fragments: u64,
    /// Fragments the node reported lost.
    pub lost_fragments: u64,
    /// Replies that did not parse or did not match a request.
    pub bad_replies: u64,
    /// Requests still unanswered at the end.
    pub unanswered: u64,
    /// The run ended early: the node answered nothing for the drain timeout while requests
    /// waited.
    pub stopped_on_silence: bool,
    /// Clear messages sent.
    pub clears: u64,
    /// The slowest 250 ms interval's L1 rate (the median and fastest follow).
    pub interval_l1_rate_min_hz: f64,
    /// The median 250 ms interval's L1 rate.
    pub interval_l1_rate_median_hz: f64,
    /// The fastest 250 ms interval's L1 rate.
    pub interval_l1_rate_max_hz: f64,
    /// What an in-process node saw (absent against a node elsewhere).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeRow>,
}

/// What an in-process node saw during a tester run: where its time and its fragments went.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct NodeRow {
    /// Requests that waited in the node's pending queue (their data had not arrived).
    pub node_parked_requests: u64,
    /// Times the node's input stalled on a full store.
    pub node_input_stalls: u64,
    /// Fragments dropped because their L1ID was cleared before they arrived.
    pub node_dropped_after_clear: u64,
    /// CPU time of the node's core thread.
    pub node_core_cpu_ns: u64,
    /// Of that, the time it polled with nothing to do.
    pub node_core_idle_cpu_ns: u64,
    /// SW ROD input: CPU time of the fragment builders' threads (emulated cards included).
    pub node_swrod_builder_cpu_ns: u64,
    /// SW ROD input: times a sink found the store's side without room.
    pub node_swrod_sink_waits: u64,
    /// SW ROD input: fragments the sinks handed to the store's side.
    pub node_swrod_fragments: u64,
    /// SW ROD input: of those, the fragments written straight into store pages.
    pub node_swrod_in_place: u64,
    /// Store pages in use at the end, summed over channels.
    pub node_pages_in_use: u64,
    /// CPU time of the whole process while the tester ran (every thread: the node's core
    /// thread, its inputs' threads and emulated cards, the tester), from the process CPU
    /// clock; the node's start-up and warm-up before the first request and its stop after the
    /// last reply are not in it ([`NodeRow::with_process_cpu`]).
    pub node_process_cpu_ns: u64,
    /// [`NodeRow::node_process_cpu_ns`] per event the tester completed, in microseconds: what
    /// a node costs per event on whatever cores it got, which a wall-clock rate beside other
    /// load does not say (0 without events).
    pub node_cpu_us_per_event: f64,
}

impl NodeRow {
    /// The row of a stopped node.
    pub fn from_stopped(s: &rodeo_ros::server::Stopped) -> NodeRow {
        let store = s.store.total_counters();
        let sw = s.swrod.unwrap_or_default();
        NodeRow {
            node_parked_requests: s.counters.parked,
            node_input_stalls: s.input_stalls,
            node_dropped_after_clear: store.dropped_after_clear,
            node_core_cpu_ns: s.core_cpu.as_nanos() as u64,
            node_core_idle_cpu_ns: s.core_idle_cpu.as_nanos() as u64,
            node_swrod_builder_cpu_ns: sw.builder.cpu_ns,
            node_swrod_sink_waits: sw.link.sink_waits,
            node_swrod_fragments: sw.link.fragments,
            node_swrod_in_place: sw.link.in_place,
            node_pages_in_use: store.pages_in_use,
            node_process_cpu_ns: 0,
            node_cpu_us_per_event: 0.0,
        }
    }

    /// The row with the process's CPU time over the tester's run (`cpu`, the difference of
    /// two readings of [`rodeo_memory::cpu::process_cpu_time`] around it) and its share per
    /// event of the `events` the tester completed.
    pub fn with_process_cpu(mut self, cpu: Duration, events: u64) -> NodeRow {
        let cpu_ns = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
        self.node_process_cpu_ns = cpu_ns;
        self.node_cpu_us_per_event = if events == 0 {
            0.0
        } else {
            cpu_ns as f64 / events as f64 / 1e3
        };
        self
    }
}

impl Row {
    /// The row of a tester report.
    pub fn from_report(r: &TesterReport) -> Row {
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
            stopped_on_silence: r.stopped_on_silence,
            clears: r.clears,
            interval_l1_rate_min_hz: r.interval_rate_hz(0.0),
            interval_l1_rate_median_hz: r.interval_rate_hz(0.5),
            interval_l1_rate_max_hz: r.interval_rate_hz(1.0),
            node: None,
        }
    }
}

/// Runs `mix.threads` tester threads against `endpoint`; returns the merged report.
pub fn run_testers(
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
    check_retry_delay(mix)?;
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
pub fn tester_config(robs: &[u32], l1id_wrap: u32, mix: &MixArgs, j: u32) -> TesterConfig {
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
        retry_delay: Duration::from_secs_f64(mix.retry_delay),
        drain_timeout: DRAIN_TIMEOUT,
        clear_flush: Duration::from_millis(20),
    }
}

/// Runs one tester on the direct link of an in-process node (one thread: the link has one
/// client).
pub fn run_direct_tester(
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
    check_retry_delay(mix)?;
    let cfg = tester_config(robs, l1id_wrap, mix, 0);
    Ok(tester::run_direct(client, &cfg, &AtomicBool::new(false))?)
}

/// The end of a run waits for the re-asks still due, and the drain for replies at most
/// [`DRAIN_TIMEOUT`]: a re-ask's delay must be shorter.
fn check_retry_delay(mix: &MixArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        mix.retry_delay < DRAIN_TIMEOUT.as_secs_f64(),
        "--retry-delay {} s: below the tester's drain timeout ({} s) needed",
        mix.retry_delay,
        DRAIN_TIMEOUT.as_secs()
    );
    Ok(())
}

/// How long a tester waits for replies in flight at the end, and for a node silent while
/// requests wait.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
