//! `rodeo config`: the partition configuration: print the default, check a file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use rodeo_control::config::{PartitionConfig, TransportKind, DEFAULT_TOML};
use rodeo_control::partition::Layout;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{SocketKind, Transport};

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
    /// Check a configuration file: unknown fields and bad values are named, with what is
    /// allowed.
    Check {
        /// The TOML file.
        file: PathBuf,
        /// Also try to bind every endpoint of the partition on this host (tcp ports, ipc
        /// paths) and say which fail; applications placed on other hosts are not tried.
        #[arg(long)]
        bind: bool,
    },
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Default => {
            print!("{DEFAULT_TOML}");
            Ok(ExitCode::SUCCESS)
        }
        What::Check { file, bind } => {
            let config = rodeo_run::setup::load_config(Some(&file))?;
            config
                .check_output()
                .with_context(|| format!("{}", file.display()))?;
            config
                .check_directories()
                .with_context(|| format!("{}", file.display()))?;
            if bind && !try_binds(&config)? {
                anyhow::bail!(
                    "{}: some endpoints cannot be bound on this host (listed above): free them \
                     or change transport.base_port / run.output",
                    file.display()
                );
            }
            println!("{}: OK", file.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Binds every endpoint of `config`'s layout that this host would bind (all at once, as a run
/// holds them), printing one line each; true when every one that was tried bound.
fn try_binds(config: &PartitionConfig) -> anyhow::Result<bool> {
    let layout = Layout::new(config);
    let transport = Transport::new(1)?;
    let mut held = Vec::new();
    let mut ok = true;
    for (name, ep) in layout.endpoints() {
        if let Some(host) = config.hosts.get(&name) {
            println!("{name}: {ep}: on host {host}, not tried here");
            continue;
        }
        match config.transport.kind {
            TransportKind::Inproc => {
                println!("{name}: {ep}: in process, nothing to bind");
                continue;
            }
            TransportKind::Ipc => {
                let dir = layout.output.as_path();
                if !dir.is_dir() {
                    println!(
                        "{name}: {ep}: not tried, {} does not exist yet (the run creates it)",
                        dir.display()
                    );
                    continue;
                }
            }
            TransportKind::Tcp | TransportKind::Shm => {}
        }
        let socket = transport.socket(SocketKind::Router)?;
        match Endpoint::parse(&ep)
            .map_err(anyhow::Error::from)
            .and_then(|e| socket.bind(&e).map_err(anyhow::Error::from))
        {
            Ok(_) => {
                println!("{name}: {ep}: binds");
                held.push(socket);
            }
            Err(e) => {
                println!("{name}: {ep}: FAILS: {e:#}");
                ok = false;
            }
        }
    }
    Ok(ok)
}
