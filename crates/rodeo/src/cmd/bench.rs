//! `rodeo bench <kind>`: measurements from the papers, reproduced on this machine in one run.
//!
//! Each kind is a subcommand with its own arguments; the measurement is a call into
//! `rodeo_studies::bench`, which returns the report this command prints. Every comparison it
//! prints is measured in the same run, so a ratio stays meaningful on a noisy machine.

use std::process::ExitCode;

use rodeo_studies::bench::{dma, logger, pool, queue, ros, swrod, transport};

use clap::Subcommand;

/// Arguments of `rodeo bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    kind: Kind,
}

/// What to measure.
#[derive(Debug, Subcommand)]
enum Kind {
    /// The SW ROD talk's memory-pool table: allocation time (avg, p99, max) of the rodeo pool,
    /// malloc and an eager (boost::pool-like) pool, with 1 and 2 threads, and the cost of
    /// touching a cold versus a warm page.
    Pool(pool::Args),
    /// Emulated DMA channels (S-LINK-mode card threads) filling pool superpages: throughput per
    /// superpage size with 1 and 2 channels, against this machine's memcpy bandwidth.
    Dma(dma::Args),
    /// The ROS paper's method: a readout node (24 channels, 400-word fragments) driven by the
    /// ROSTester's request mix; the L1 (delete) rate it sustains, in process or over tcp, against
    /// a plain ZeroMQ request/reply baseline with the same reply sizes.
    Ros(ros::Args),
    /// The SW ROD fragment builder: E-link packets from pre-generated FELIX superpages into ROB
    /// fragments (packets/s, fragments/s, bytes/s), against a memcpy of the same input.
    Swrod(swrod::Args),
    /// Message hand-over between a producer and a consumer (two processes for the cross-process
    /// ones): direct in-process channel, iceoryx2 shared memory, ZeroMQ ipc and tcp, plain tcp;
    /// 64 B to 96 KiB: msg/s, bytes/s, CPU ns per message.
    Transport(transport::Args),
    /// The consumer process of `rodeo bench transport` (started by it).
    #[command(hide = true)]
    TransportPeer(transport::PeerArgs),
    /// rodeo's in-process queue (`rodeo_memory::BoundedQueue`) against the bare lock-free queue
    /// it wraps, in the same run: ns per push+pop on one thread and per hand-over between two.
    Queue(queue::Args),
    /// The logger's file writer alone: synthetic events of 1 KiB to 1 MiB written with the
    /// logger's group commit (direct I/O, and buffered for comparison), against dd-style
    /// direct writes (4 MiB blocks, O_DIRECT) to the same directory before and after.
    Logger(logger::Args),
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (report, json) = match args.kind {
        Kind::Pool(a) => {
            let json = a.json;
            (pool::measure_report(a)?, json)
        }
        Kind::Dma(a) => {
            let json = a.json;
            (dma::measure_report(a)?, json)
        }
        Kind::Ros(a) => (ros::measure_report(&a)?, a.json),
        Kind::Swrod(a) => (swrod::measure_report(&a)?, a.json),
        Kind::Transport(a) => (transport::measure_report(&a)?, a.json),
        Kind::TransportPeer(a) => {
            transport::peer(&a)?;
            return Ok(ExitCode::SUCCESS);
        }
        Kind::Logger(a) => (logger::measure_report(&a)?, a.json),
        Kind::Queue(a) => (queue::measure_report(&a)?, a.json),
    };
    report.print(json);
    Ok(ExitCode::SUCCESS)
}
