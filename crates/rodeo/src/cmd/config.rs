//! `rodeo config`: the partition configuration: print the default, check a file.

use std::path::PathBuf;
use std::process::ExitCode;

use rodeo_control::binds::{try_binds, BindOutcome};
use rodeo_control::config::{human, read_config_file, Machine, PartitionConfig, DEFAULT_TOML};

/// Arguments of `rodeo config`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Print the built-in default partition as commented TOML (a starting point for a file).
    Default,
    /// Check a configuration file: every unknown field, value of the wrong type and bad value
    /// is named, one per line, with what is allowed; what cannot run on this host (output
    /// directories, the memory and threads the partition takes) too. Exit 0 when accepted
    /// (warnings printed), 2 when refused.
    Check {
        /// The TOML file.
        file: PathBuf,
        /// Also try to bind every address the partition binds on this host (its endpoints,
        /// `ros.listen`, `l1.external_listen`, `control.http`, `[monitoring]`), all at once,
        /// then release them, and say which fail; applications placed on other hosts are not
        /// tried.
        #[arg(long)]
        bind: bool,
        /// Also print the memory and threads estimate of every application, one line each.
        #[arg(long)]
        estimate: bool,
        /// The partition will be served (`rodeo serve`, `rodeo run --http`): its runs may have
        /// no end condition (no run.events or run.seconds) and last until `stop`.
        #[arg(long)]
        served: bool,
    },
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Default => {
            out!("{DEFAULT_TOML}");
            Ok(ExitCode::SUCCESS)
        }
        What::Check {
            file,
            bind,
            estimate,
            served,
        } => {
            let text = read_config_file(&file)?;
            let name = file.display().to_string();
            let report = PartitionConfig::check_text(&text, &name, &Machine::this_host(), served);
            for w in &report.warnings {
                eprintln!("rodeo: warning: {w}");
            }
            let errors = report.error_lines();
            for e in &errors {
                eprintln!("rodeo: error: {e}");
            }
            let mut binds_ok = true;
            if let (true, Some(config)) = (bind, &report.config) {
                for t in try_binds(config) {
                    binds_ok &= !matches!(t.outcome, BindOutcome::Fails(_));
                    outln!("{t}");
                }
                if !binds_ok {
                    eprintln!(
                        "rodeo: error: {name}: some addresses cannot be bound on this host \
                         (listed above): free them or change them (transport.base_port, \
                         ros.listen, l1.external_listen, control.http, [monitoring], \
                         run.output)"
                    );
                }
            }
            if errors.is_empty() && binds_ok {
                if let Some(config) = &report.config {
                    let e = config.estimate();
                    if estimate {
                        for a in e.apps.iter().chain([&e.shared]) {
                            let parts: Vec<String> = a
                                .parts
                                .iter()
                                .filter(|(_, b)| *b > 0)
                                .map(|(n, b)| format!("{n} {}", human(*b)))
                                .collect();
                            outln!(
                                "{}: {} ({}); busy threads: {}",
                                a.name,
                                human(a.bytes()),
                                parts.join(", "),
                                a.threads
                            );
                        }
                    }
                    for host in e.hosts() {
                        let on = host.as_deref().unwrap_or("this host");
                        outln!("{name}: estimate on {on}: {}", e.describe(&host));
                    }
                    if let Some(path) = config.dma_path() {
                        outln!("{name}: readout input: {path}");
                    }
                }
                outln!("{name}: OK");
                Ok(ExitCode::SUCCESS)
            } else {
                if !errors.is_empty() {
                    eprintln!(
                        "rodeo: {name}: refused, {} error{}",
                        errors.len(),
                        if errors.len() == 1 { "" } else { "s" }
                    );
                }
                Ok(ExitCode::from(2))
            }
        }
    }
}
