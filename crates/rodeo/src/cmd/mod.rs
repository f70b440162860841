//! Command-line interface: one module per subcommand, each with its own arguments struct.

mod app;
mod bench;
mod cards;
mod config;
mod convert;
mod ctl;
mod dump;
mod gen;
mod gen_link;
pub(crate) mod info;
mod list_runs;
mod monitor;
mod ros;
mod run;
mod serve;
mod study;
mod tester;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// rodeo: software readout and dataflow for trigger and data acquisition.
///
/// Readout cards (real or emulated) feed fragment builders and event stores; a supervisor assigns
/// events to data-collection nodes that run the trigger and build accepted events; loggers write
/// them to files. `rodeo run` runs the main job, a whole partition, on a built-in default
/// configuration (`rodeo config default` shows it).
#[derive(Debug, Parser)]
#[command(
    name = "rodeo",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run rodeo's main job: a whole partition (readout, supervisor, data collection, logger)
    /// on the built-in default configuration or a TOML file.
    Run(run::Args),
    /// The partition configuration: print the commented default, check a file.
    Config(config::Args),
    /// One application of a partition in this process (what `rodeo run --processes` starts).
    App(app::Args),
    /// Generate synthetic data: full events into raw-data files, or link streams (`gen link`).
    Gen(gen::Args),
    /// Show the events and ROBs of a raw-data file (rodeo's or EventStorage v2-v6).
    Dump(dump::Args),
    /// Convert a raw-data file between rodeo's container and EventStorage v5 (old eformat 3/4
    /// events lifted to eformat 5).
    Convert(convert::Args),
    /// Check raw-data files (rodeo's or EventStorage v2-v6): structure, every checksum, the end
    /// record.
    Verify(verify::Args),
    /// Print what this build of rodeo is and what the machine offers it.
    Info(info::Args),
    /// A partition that stays up: start and stop as many runs as you like over HTTP, each
    /// recorded in the run database.
    Serve(serve::Args),
    /// Run control from another shell: `rodeo ctl start|stop|shutdown|status|runs --url URL`.
    Ctl(ctl::Args),
    /// Subscribe to a partition's sampled events (`[monitoring] endpoint`) and print a live
    /// summary: events per second, mean size, ROBs per event.
    Monitor(monitor::Args),
    /// List the runs recorded in an output directory's run database (`runs.sqlite`).
    Runs(list_runs::Args),
    /// A standalone readout node: emulated S-LINK channels, event store, request server.
    Ros(ros::Args),
    /// The ROSTester: drive a readout node with the HLT's request mix and measure it.
    Tester(tester::Args),
    /// Measure this machine as the papers did (`rodeo bench pool`, ...).
    Bench(bench::Args),
    /// Characterise this machine as the papers did: `rodeo study ros|sfi|slice|pool|dma|swrod`
    /// writes CSV, a JSON summary and PNG plots (ROS utilisation model, SFI rates, the
    /// Level-2 vertical slice, the memory and DMA tables).
    Study(study::Args),
    /// Start the readout cards (emulated FELIX and S-LINK, file player, network input) and
    /// show every channel's link, queues, counters and decoding errors.
    Cards(cards::Args),
}

/// `--tls-cert FILE --tls-key FILE` of the commands that serve the HTTP API.
#[derive(Debug, clap::Args)]
pub(crate) struct TlsArgs {
    /// Serve the HTTP API over HTTPS with this certificate chain (PEM, the server's own
    /// first), with --tls-key. Without it, plain HTTP takes tokens from this host only.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The files, when both are given.
    pub(crate) fn files(&self) -> Option<rodeo_run::http::HttpsFiles> {
        Some(rodeo_run::http::HttpsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
        })
    }
}

/// Runs the parsed command; the exit code says whether what it checked was good.
pub(crate) fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Config(args) => config::run(args),
        Command::App(args) => app::run(args),
        Command::Gen(args) => gen::run(args),
        Command::Dump(args) => dump::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Info(args) => info::run(args),
        Command::Runs(args) => list_runs::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Ctl(args) => ctl::run(args),
        Command::Monitor(args) => monitor::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Ros(args) => ros::run(args),
        Command::Tester(args) => tester::run(args),
        Command::Cards(args) => cards::run(args),
        Command::Study(args) => study::run(args),
    }
}
