//! `rodeo app ROLE --name NAME --control ENDPOINT`: one application of a partition in this
//! process, under lifecycle control (`rodeo_control::app_process`).
//!
//! `rodeo run --processes` (the controller, `rodeo_control::controller`) starts one of these
//! per application, on this host or over ssh. The process connects to the controller's control
//! endpoint, says hello in INITIAL, and from then on the controller's commands move it through
//! the lifecycle (the configuration comes with `configure`, so a remote host needs no file);
//! it sends a heartbeat every `--heartbeat-ms`. It leaves after `shutdown`, on SIGTERM/SIGINT,
//! or — with `--exit-on-stdin-eof` — when its stdin closes (the controller or its ssh went
//! away), walking itself down first. The messages are in docs/run-control.md.
//!
//! With `--keys-stdin` (the controller's partition has `transport.curve`), the first line of
//! stdin is the partition's CURVE keys (`rodeo_transport::curve`): read before anything
//! connects, never on the command line. Every tcp socket of the process, the control channel
//! included, then authenticates with them.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rodeo_control::app_process::{serve, AppControl, Role};
use rodeo_transport::curve::PartitionKeys;
use rodeo_transport::socket::Transport;

/// Arguments of `rodeo app`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Which application: logger, ros, dcm or supervisor.
    #[arg(value_parser = role_parser())]
    role: Role,
    /// The application's name in the partition (e.g. dcm-2); the supervisor's is `supervisor`.
    #[arg(long)]
    name: String,
    /// The controller's control endpoint (tcp://HOST:PORT).
    #[arg(long, value_name = "ENDPOINT")]
    control: String,
    /// A partition configuration to use when `configure` brings none.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Heartbeat period in milliseconds.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    heartbeat_ms: u64,
    /// The controller is judged dead (frozen, or its host gone) after this long without a
    /// message from it, until its first ping says how long (what the controller passes:
    /// `[control] dead_after_ms`). Without it, only a ping starts the count.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    dead_after_ms: Option<u64>,
    /// Leave (walking down first) when stdin closes: the controller went away.
    #[arg(long)]
    exit_on_stdin_eof: bool,
    /// Serve this application's own HTTP API (status, commands with the token, /metrics)
    /// on ADDR, e.g. 127.0.0.1:0. Commands sent here bypass the controller: for experts.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Read the partition's CURVE keys from the first line of stdin (what the controller
    /// writes there) and authenticate every tcp socket with them.
    #[arg(long)]
    keys_stdin: bool,
    #[command(flatten)]
    tls: super::TlsArgs,
}

/// The roles as clap values (listed in `--help`), parsed into the partition's [`Role`].
fn role_parser() -> impl clap::builder::TypedValueParser<Value = Role> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(["logger", "ros", "dcm", "supervisor"])
        .try_map(|s| s.parse::<Role>())
}

/// How long an application whose controller is gone waits for the run's other applications to
/// close their ipc endpoints before it leaves their runtime directory to the next controller.
const RUNTIME_DIR_WAIT: Duration = Duration::from_millis(500);

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::signal::install();
    crate::signal::install_hangup();
    let config = match &args.config {
        Some(p) => Some(rodeo_run::setup::load_config(Some(p))?),
        None => None,
    };
    let io_threads = config.as_ref().map_or(1, |c| c.transport.io_threads);
    let transport = if args.keys_stdin {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("--keys-stdin: cannot read the CURVE keys from stdin")?;
        let keys = PartitionKeys::from_line(&line)
            .context("--keys-stdin: the first line of stdin is not the partition's keys")?;
        Transport::with_curve(io_threads, keys)?
    } else {
        Transport::new(io_threads)?
    };
    let role = args.role;
    let section = config
        .as_ref()
        .map(|c| c.control.clone())
        .unwrap_or_default();
    let app = Arc::new(AppControl::new(role, &args.name, transport, config));
    let _server = match args.http {
        Some(addr) => rodeo_run::http::serve_section(
            &rodeo_control::config::ControlSection {
                http: addr,
                ..section
            },
            app.clone(),
            None,
            args.tls.files().as_ref(),
        )?,
        None => None,
    };
    let eof = Arc::new(AtomicBool::new(false));
    if args.exit_on_stdin_eof {
        let flag = Arc::clone(&eof);
        std::thread::Builder::new()
            .name("stdin-watch".into())
            .spawn(move || {
                let mut buf = [0u8; 256];
                let mut stdin = std::io::stdin();
                // Read until end of file (or an error): then the controller is gone.
                while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
                flag.store(true, Ordering::SeqCst);
            })
            .context("cannot start the stdin watcher")?;
    }
    let served = serve(
        &app,
        &args.control,
        Duration::from_millis(args.heartbeat_ms),
        args.dead_after_ms.map(Duration::from_millis),
        || crate::signal::interrupted() || eof.load(Ordering::SeqCst),
    )
    .with_context(|| format!("{}: control channel {}", args.name, args.control))?;
    if served.bad_frames > 0 {
        eprintln!(
            "{}: {} control frames did not decode",
            args.name, served.bad_frames
        );
    }
    if served.controller_silent || eof.load(Ordering::SeqCst) {
        // The controller is gone (or frozen): it will not remove the run's ipc socket files.
        // The applications walking down do, the last of them to close its endpoints.
        if let Some(dir) = app.ipc_runtime_dir() {
            drop(_server);
            // Our sockets close with the transport's context (libzmq unlinks the files).
            drop(app);
            if !rodeo_control::leftovers::remove_runtime_dir_when_unused(&dir, RUNTIME_DIR_WAIT) {
                eprintln!(
                    "{}: the runtime directory {} is still in use; the next controller's start \
                     removes it once nothing listens there",
                    args.name,
                    dir.display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
