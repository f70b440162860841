//! `rodeo bench <kind>`: measurements from the papers, reproduced on this machine in one run:
//! each a call into `rodeo_studies::bench` (`rodeo_run::profile` for the partition) returning
//! the report printed here; every comparison is measured in the same run.

use std::process::ExitCode;

use rodeo_studies::bench::{dma, logger, pool, queue, ros, swrod, transport};
use rodeo_studies::report::Report;

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
    /// The SW ROD talk's memory-pool table: allocation time of the rodeo pool, malloc and an
    /// eager pool, with 1 and 2 threads, and the cost of touching a cold versus a warm page.
    Pool(pool::Args),
    /// Emulated DMA channels filling pool superpages, against this machine's memcpy bandwidth.
    Dma(dma::Args),
    /// The ROS paper's method: a readout node under the ROSTester's request mix, against a
    /// plain ZeroMQ request/reply baseline with the same reply sizes.
    Ros(ros::Args),
    /// The SW ROD fragment builder (FELIX superpages into ROB fragments) against a memcpy.
    Swrod(swrod::Args),
    /// Message hand-over from a producer to a consumer: in-process channel, iceoryx2 shared
    /// memory, ZeroMQ ipc and tcp, plain tcp; 64 B to 96 KiB: msg/s, CPU per message.
    Transport(transport::Args),
    /// The consumer process of `rodeo bench transport` (started by it).
    #[command(hide = true)]
    TransportPeer(transport::PeerArgs),
    /// rodeo's in-process queue against the bare lock-free queue it wraps, in the same run.
    Queue(queue::Args),
    /// The logger's file writer alone (1 KiB to 1 MiB events, group commit, direct I/O),
    /// against dd-style direct writes to the same directory before and after.
    Logger(logger::Args),
    /// A run's CPU and wake-ups per L1 accept per thread of every process; messages per hop.
    Partition(rodeo_run::profile::Args),
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
        Kind::Partition(a) => {
            let mut report = Report::new("partition");
            crate::signal::install();
            crate::signal::abort_on_second();
            (report.fields, report.rows) =
                rodeo_run::profile::measure(&a, &crate::signal::interrupted)?;
            (report, a.json)
        }
    };
    report.print(json);
    Ok(ExitCode::SUCCESS)
}
