//! `rodeo app ROLE --config FILE --name NAME`: one application of a partition in this process.
//!
//! `rodeo run --processes` starts one of these per application, all from the same resolved
//! configuration file, so each computes the same endpoints (`rodeo_control::partition::Layout`).
//! The supervisor runs to the end of the run; every other role runs until SIGTERM or SIGINT.
//! At the end each prints one JSON line with its summary on stdout (the parent reads it).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rodeo_control::partition::Layout;
use rodeo_dataflow::dcm::{self, DcmCounters};
use rodeo_dataflow::logger::{self, LoggerCounters};
use rodeo_dataflow::supervisor::{self, SupervisorCounters};
use rodeo_readout::node::ReadoutNode;
use rodeo_transport::socket::Transport;
use serde_json::json;

/// The application roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Role {
    /// A logger (SFO).
    Logger,
    /// A readout node (ROS).
    Ros,
    /// A data-collection node (DCM).
    Dcm,
    /// The supervisor with its L1 source.
    Supervisor,
}

/// Arguments of `rodeo app`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Which application.
    #[arg(value_enum)]
    role: Role,
    /// The resolved partition configuration (as `rodeo run --processes` writes it).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The application's name in the partition (e.g. dcm-2); the supervisor's is `supervisor`.
    #[arg(long)]
    name: String,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::signal::install();
    let config = super::run::load_config(Some(&args.config))?;
    let layout = Layout::new(&config);
    let transport = Transport::new(config.transport.io_threads)?;
    let wait_for_signal = || {
        while !crate::signal::interrupted() {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let not_found = || {
        anyhow::anyhow!(
            "no {:?} named {:?} in the configuration",
            args.role,
            args.name
        )
    };
    let out = match args.role {
        Role::Logger => {
            let lc = layout
                .loggers
                .iter()
                .find(|l| l.name == args.name)
                .ok_or_else(not_found)?;
            std::fs::create_dir_all(&layout.output)?;
            let h = logger::spawn(lc.clone(), &transport, Arc::new(LoggerCounters::default()))?;
            wait_for_signal();
            let s = h.stop()?;
            json!({
                "role": "logger", "name": args.name,
                "events_written": s.events_written, "bytes_written": s.bytes_written,
                "duplicates": s.duplicates, "bad_messages": s.bad_messages, "files": s.files,
            })
        }
        Role::Ros => {
            let (_, ep, nc) = layout
                .nodes
                .iter()
                .find(|(n, ..)| *n == args.name)
                .ok_or_else(not_found)?;
            let node = ReadoutNode::start(&transport, nc, ep)
                .with_context(|| format!("starting {}", args.name))?;
            wait_for_signal();
            let s = node.stop();
            let k = s.store.total_counters();
            json!({
                "role": "ros", "name": args.name,
                "requests": s.counters.requests, "cleared": s.counters.cleared_l1ids,
                "clear_gaps": s.counters.clear_gaps, "stored": k.fragments, "stored_now": k.stored,
            })
        }
        Role::Dcm => {
            let dc = layout
                .dcms
                .iter()
                .find(|d| d.name == args.name)
                .ok_or_else(not_found)?;
            let h = dcm::spawn(
                dc.clone(),
                &transport,
                Box::new(layout.trigger.clone()),
                Arc::new(DcmCounters::default()),
            )?;
            wait_for_signal();
            let s = h.stop()?;
            json!({
                "role": "dcm", "name": args.name,
                "assigned": s.assigned, "builds": s.builds, "accepted": s.accepted,
                "rejected": s.rejected, "forced": s.forced, "partial": s.partial,
                "unfinished": s.unfinished,
            })
        }
        Role::Supervisor => {
            let h = supervisor::spawn(
                layout.supervisor.clone(),
                &transport,
                Arc::new(SupervisorCounters::default()),
            )?;
            while !h.is_finished() {
                if crate::signal::interrupted() {
                    h.request_stop();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let s = h.join()?;
            json!({
                "role": "supervisor", "name": args.name,
                "l1_accepts": s.l1_accepts, "accepted": s.accepted, "rejected": s.rejected,
                "forced_accepts": s.forced_accepts, "undecided": s.undecided,
                "reassignments": s.reassignments, "dead_dcms": s.dead_dcms,
                "late_decisions": s.late_decisions, "cleared": s.cleared,
            })
        }
    };
    println!("{out}");
    Ok(ExitCode::SUCCESS)
}
