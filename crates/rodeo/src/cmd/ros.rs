//! `rodeo ros`: a standalone readout node. Emulated S-LINK channels (L1IDs from 0), or with
//! `--input swrod` one SW ROD fragment builder per ROB fed by emulated FELIX E-links, feed the
//! event store; the request server answers DataRequest and Clear on a ROUTER endpoint until
//! interrupted (or for `--seconds`), then prints its counters.
//!
//! The first line on stdout is `listening on ENDPOINT` with the port resolved, so scripts and
//! tests can start it on `tcp://127.0.0.1:0` and read where to connect.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rodeo_ros::node::ReadoutNode;
use rodeo_ros::standalone::{start_node, summary, NodeArgs};
use rodeo_studies::plain::plain_loop;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{SocketKind, Transport};
use serde_json::Value;

/// Arguments of `rodeo ros`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Request endpoint to bind: tcp://HOST:PORT (port 0 or * picks one), ipc:///PATH.
    #[arg(long, value_name = "ENDPOINT")]
    listen: String,
    #[command(flatten)]
    node: NodeArgs,
    /// Stop after this many seconds (default: serve until interrupted).
    #[arg(long, value_name = "S", value_parser = rodeo_ros::cli_values::seconds)]
    seconds: Option<f64>,
    /// Print the final counters as one JSON object.
    #[arg(long)]
    json: bool,
    /// Print a status line on stderr every second.
    #[arg(long)]
    verbose: bool,
    /// Serve the plain ZeroMQ baseline of `rodeo bench ros` instead of a readout node.
    #[arg(long, hide = true)]
    plain_baseline: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::signal::install();
    let t = Transport::new(args.node.io_threads)?;
    if args.plain_baseline {
        return serve_plain(&t, &args.listen, &args.node, args.seconds);
    }
    let node = start_node(&t, &args.node, &args.listen)?;
    outln!("listening on {}", node.endpoint());
    std::io::stdout().flush()?;
    let start = Instant::now();
    let built = |n: &ReadoutNode| n.swrod_stats().map_or(0, |c| c.builder.fragments);
    let mut last = (Instant::now(), node.stats(), built(&node));
    while !crate::signal::interrupted()
        && args
            .seconds
            .is_none_or(|s| start.elapsed().as_secs_f64() < s)
    {
        std::thread::sleep(Duration::from_millis(50));
        if args.verbose && last.0.elapsed() >= Duration::from_secs(1) {
            let (now, now_built) = (node.stats(), built(&node));
            let dt = last.0.elapsed().as_secs_f64();
            let swrod = match node.swrod_stats() {
                Some(c) => format!(
                    "  built fragments/s {:.0}  sink waits {}",
                    (now_built - last.2) as f64 / dt,
                    c.link.sink_waits
                ),
                None => String::new(),
            };
            eprintln!(
                "requests/s {:.0}  clears/s {:.0}  input fragments/s {:.0}  pending {}{swrod}",
                (now.requests - last.1.requests) as f64 / dt,
                (now.cleared_l1ids - last.1.cleared_l1ids) as f64 / dt,
                (now.input_fragments - last.1.input_fragments) as f64 / dt,
                now.pending_now
            );
            last = (Instant::now(), now, now_built);
        }
    }
    let stopped = node.stop();
    let v = summary(&stopped);
    if args.json {
        outln!("{v}");
    } else if let Value::Object(m) = v {
        for (k, v) in m {
            outln!("{k}: {v}");
        }
    }
    if let Some(e) = &stopped.swrod_error {
        // A builder that failed stopped its ROB's fragments: the run is not a good one.
        eprintln!("error: the SW ROD input failed: {e}");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `rodeo ros --plain-baseline`: the plain ZeroMQ server in its own process.
fn serve_plain(
    t: &Transport,
    listen: &str,
    node: &NodeArgs,
    seconds: Option<f64>,
) -> anyhow::Result<ExitCode> {
    let sock = t.socket(SocketKind::Router)?;
    sock.set_high_water_marks(rodeo_ros::server::DEFAULT_HIGH_WATER_MARK)?;
    let ep = sock.bind(&Endpoint::parse(listen)?)?;
    outln!("listening on {ep}");
    std::io::Write::flush(&mut std::io::stdout())?;
    let start = Instant::now();
    let served = plain_loop(sock, node, &|| {
        crate::signal::interrupted() || seconds.is_some_and(|s| start.elapsed().as_secs_f64() >= s)
    })?;
    outln!("{{\"requests\":{served}}}");
    Ok(ExitCode::SUCCESS)
}
