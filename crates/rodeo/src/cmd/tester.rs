//! `rodeo tester`: the ROSTester. Drives a readout node (`--connect`, or one started in this
//! process) with the HLT's request mix and reports the delete (L1) rate, request rates, latency
//! percentiles and bytes, as a table, JSON (`--json`) or CSV (`--csv`).
//!
//! An in-process node is reached over the direct link by default (`--transport direct`:
//! bounded lock-free queues, zero-copy page references, no ZeroMQ; one tester thread), or over
//! ZeroMQ inproc (`--transport inproc`, any number of tester threads).

use std::process::ExitCode;

use anyhow::Context;
use rodeo_memory::cpu::process_cpu_time;
use rodeo_ros::standalone::{start_direct_node, start_node, NodeArgs};
use rodeo_rostester::drive::{run_direct_tester, run_testers, MixArgs, NodeRow, Row};
use rodeo_studies::report::Report;
use rodeo_transport::socket::Transport;

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

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    // The direct link carries typed requests, not messages: a limit would be ignored.
    anyhow::ensure!(
        args.node.max_message_bytes.is_none()
            || args.connect.is_some()
            || args.transport == InProcess::Inproc,
        "--max-message-bytes limits the node's ZeroMQ messages; the in-process node is reached \
         over the direct link, which has none: add --transport inproc, or leave the option out"
    );
    let t = Transport::new(args.node.io_threads)?;
    let robs = args.node.robs();
    let (report, node) = match &args.connect {
        Some(ep) => (
            run_testers(&t, ep, &robs, args.node.l1id_wrap, &args.mix)?,
            None,
        ),
        None if args.transport == InProcess::Direct => {
            let (node, mut client) = start_direct_node(&args.node).context("in-process node")?;
            let cpu0 = process_cpu_time();
            let r = run_direct_tester(&mut client, &robs, args.node.l1id_wrap, &args.mix)?;
            let cpu = process_cpu_time().saturating_sub(cpu0);
            drop(client);
            let row = NodeRow::from_stopped(&node.stop()).with_process_cpu(cpu, r.events);
            (r, Some(row))
        }
        None => {
            // Requests beyond the node's descriptors that would wait are answered PENDING
            // (`rodeo_ros::server`): the tester would count missing fragments of its own making.
            // (A tester thread keeps at most 65,535 requests in flight.)
            let in_flight = (args.mix.threads.max(1) as usize)
                .saturating_mul(args.mix.max_outstanding.min(usize::from(u16::MAX)));
            anyhow::ensure!(
                in_flight <= args.node.descriptors,
                "--threads x --max-outstanding = {in_flight} requests in flight, more than the \
                 node's --descriptors {}: raise --descriptors to {in_flight} (at most \
                 1000000), or lower --threads or --max-outstanding",
                args.node.descriptors
            );
            let node = start_node(&t, &args.node, "inproc://rodeo-tester-node")
                .context("in-process node")?;
            let cpu0 = process_cpu_time();
            let r = run_testers(&t, node.endpoint(), &robs, args.node.l1id_wrap, &args.mix)?;
            let cpu = process_cpu_time().saturating_sub(cpu0);
            let row = NodeRow::from_stopped(&node.stop()).with_process_cpu(cpu, r.events);
            (r, Some(row))
        }
    };
    let mut row = Row::from_report(&report);
    row.node = node;
    if args.csv {
        let v = serde_json::to_value(&row)?;
        let m = v.as_object().context("row")?;
        outln!("{}", m.keys().cloned().collect::<Vec<_>>().join(","));
        outln!(
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
    Ok(verdict(&report))
}

/// Exit status 0 only when every request was answered with its fragments; otherwise 1, with
/// what went wrong on stderr. A tester whose node never answered (`--connect` to nothing)
/// printed a rate and exited 0.
fn verdict(report: &rodeo_rostester::TesterReport) -> ExitCode {
    let faults: Vec<String> = [
        (report.bad_replies, "bad replies"),
        (report.unanswered, "requests unanswered at the end"),
        (report.lost_fragments, "fragments answered lost"),
        (
            report.pending_fragments,
            "fragments still pending after every retry",
        ),
    ]
    .into_iter()
    .filter(|&(n, _)| n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if report.replies == 0 && report.events > 0 {
        eprintln!("rodeo tester: no reply at all: is the node there?");
    }
    if report.stopped_on_silence {
        eprintln!(
            "rodeo tester: the node answered nothing for the drain timeout while requests \
             waited: the run ended early after {:.1} s",
            report.seconds
        );
    }
    if faults.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("rodeo tester: {}", faults.join(", "));
        ExitCode::FAILURE
    }
}
