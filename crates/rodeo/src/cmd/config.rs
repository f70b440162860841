//! `rodeo config`: the partition configuration: print the default, check a file.

use std::path::PathBuf;
use std::process::ExitCode;

use rodeo_control::binds::{try_binds, BindOutcome};
use rodeo_control::config::{human, read_config_file, Machine, PartitionConfig, DEFAULT_TOML};
use rodeo_run::lock::OutputLock;
use rodeo_run::run::{Mode, Run};

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
        /// The partition will run as separate processes (`rodeo run --processes`, `rodeo serve
        /// --processes`): what that mode refuses is an error (without this flag, a warning),
        /// and its data transport (shared memory on one host) is the one checked.
        #[arg(long)]
        processes: bool,
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
            processes,
        } => {
            let text = read_config_file(&file)?;
            let name = file.display().to_string();
            let report = PartitionConfig::check_text(&text, &name, &Machine::this_host(), served);
            let mut warnings = report.warnings.clone();
            let mut errors = report.error_lines();
            // The configuration the estimate and the binds are of: as `--processes` takes it
            // with that flag.
            let mut checked = report.config.clone();
            if let Some(config) = &report.config {
                warnings.extend(held_directories(config));
            }
            if let (true, Some(config)) = (report.accepted(), &report.config) {
                let (w, e, adapted) = as_processes(config, processes);
                warnings.extend(w);
                errors.extend(e);
                if processes {
                    checked = Some(adapted);
                }
            }
            for w in &warnings {
                eprintln!("rodeo: warning: {w}");
            }
            for e in &errors {
                eprintln!("rodeo: error: {e}");
            }
            let mut binds_ok = true;
            if let (true, Some(config)) = (bind, &checked) {
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
                if let Some(config) = &checked {
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

/// The checks of an accepted configuration as `--processes` takes it
/// ([`Run::adapt_to_mode`]: its refusals, its data transport, then every field and this host's
/// resources again): `(warnings, errors, the configuration as adapted)`. With `processes`
/// (or `[hosts]`, which only `--processes` runs) its refusals are errors; without it they are
/// warnings that say they hold for `--processes` only, so that a file `config
/// check` accepts is not refused by the first `--processes` run or `serve --processes` that
/// takes it.
fn as_processes(
    config: &PartitionConfig,
    processes: bool,
) -> (Vec<String>, Vec<String>, PartitionConfig) {
    let mut adapted = config.clone();
    let machine = Machine::this_host();
    let refusals: Vec<String> = match Run::adapt_to_mode(&mut adapted, Mode::Processes) {
        Err(e) => vec![format!("{e:#}")],
        Ok(()) => match adapted
            .validate()
            .and_then(|()| adapted.check_resources_on(&machine))
        {
            Err(e) => e.errors().iter().map(ToString::to_string).collect(),
            // Its warnings are the ones already given, for another transport at most.
            Ok(_) => Vec::new(),
        },
    };
    if processes {
        (Vec::new(), refusals, adapted)
    } else if !config.hosts.is_empty() {
        // Only `--processes` runs a partition over `[hosts]`: what it refuses cannot run.
        let errors = refusals
            .into_iter()
            .map(|r| format!("[hosts] is run with --processes only, which refuses: {r}"))
            .collect();
        let warning = format!(
            "[hosts] places {} application(s) on other hosts with --processes only: without \
             it `rodeo run` runs every application here, in its one process",
            config.hosts.len()
        );
        (vec![warning], errors, adapted)
    } else {
        let warnings = refusals
            .into_iter()
            .map(|r| format!("refused with --processes (run or serve): {r}"))
            .collect();
        (warnings, Vec::new(), adapted)
    }
}

/// A warning for each output or logger directory another process holds now (a running
/// service or run: every run there is refused while it does), naming the holder. A warning,
/// not an error: the holder may be gone by the time the file is run.
fn held_directories(config: &PartitionConfig) -> Vec<String> {
    let output = std::path::Path::new(&config.run.output);
    let loggers = config.logger.directories.iter().map(std::path::Path::new);
    std::iter::once(output)
        .chain(loggers)
        .filter_map(|dir| {
            let (held, holder) = OutputLock::holder_of(dir)?;
            let inside = if held == rodeo_control::config::resolve_path(dir) {
                String::new()
            } else {
                format!(" (inside {})", held.display())
            };
            Some(format!(
                "{}{inside} is held now by {holder}: a run there is refused while it holds it",
                dir.display()
            ))
        })
        .collect()
}
