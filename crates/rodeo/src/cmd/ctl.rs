//! `rodeo ctl COMMAND [--url URL] [--json]`: run control from another shell, over the HTTP API
//! of a `rodeo serve` or `rodeo run --http` (`status`, `runs`, `audit`, or a lifecycle command
//! such as `start`, `stop`, `shutdown`); `status`, `runs` and `alarms` as tables
//! (`rodeo_run::ctl_tables`) unless `--json`. The operator's token from `--token` or `RODEO_TOKEN`, the
//! expert's from `--expert-token` or `RODEO_EXPERT_TOKEN`; `https://` URLs verify the
//! server's certificate (`--ca FILE` for a private CA). The client is `rodeo_run::http::client`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `rodeo ctl`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// `status`, `runs [BEFORE]` (100 runs a page: the newest, or those before run BEFORE),
    /// `audit`, `config get`, `config put FILE`, `alarms`, `ack NAME`, `comment RUN TEXT`, `conditions [KEY=VALUE...]`, or a lifecycle command: `start`,
    /// `stop`, `shutdown`, ...
    command: String,
    /// The words after `config` (`get`, or `put FILE`), `ack` (the alarm's name), `comment`
    /// or `runs`.
    rest: Vec<String>,
    /// The service's address (`http://HOST:PORT`, or `https://HOST:PORT`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The operator's token (default: the RODEO_TOKEN environment variable).
    #[arg(long)]
    token: Option<String>,
    /// The expert's token, for `config put` (default: the RODEO_EXPERT_TOKEN environment
    /// variable).
    #[arg(long)]
    expert_token: Option<String>,
    /// The CA certificate (PEM) that signed the server's certificate, for an https:// URL
    /// (default: the system's trusted roots).
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// Seconds to wait for the answer (a `stop` waits for the run to drain).
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// With `start`: the run's comment.
    #[arg(long)]
    comment: Option<String>,
    /// With `start`: the run's type (physics, calibration, cosmics...).
    #[arg(long)]
    run_type: Option<String>,
    /// With `start`: who is on shift.
    #[arg(long)]
    shifter: Option<String>,
    /// Print the API's JSON answer as it came (`status`, `runs`, `alarms` print tables).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rest: Vec<&str> = args.rest.iter().map(String::as_str).collect();
    let words = rodeo_control::config::RunWords {
        comment: args.comment.unwrap_or_default(),
        run_type: args.run_type.unwrap_or_default(),
        shifter: args.shifter.unwrap_or_default(),
    };
    let (method, path, body) = rodeo_run::ctl_tables::request_for(&args.command, &rest, &words)?;
    let from_env = |v: Option<String>, var: &str| {
        v.or_else(|| std::env::var(var).ok())
            .filter(|t| !t.is_empty())
    };
    let operator = from_env(args.token, "RODEO_TOKEN");
    let expert = from_env(args.expert_token, "RODEO_EXPERT_TOKEN");
    // The least role that does it: the expert's token only for the configuration.
    let token = match (method, path.as_str()) {
        ("GET", _) => None,
        ("PUT", _) => expert.or(operator),
        _ => operator.or(expert),
    };
    if method != "GET" && token.is_none() {
        anyhow::bail!(
            "this needs a token: --token T or RODEO_TOKEN (the operator's), --expert-token T \
             or RODEO_EXPERT_TOKEN (the expert's, for config put)"
        );
    }
    let answer = rodeo_run::http::client::request(
        &args.url,
        args.ca.as_deref(),
        method,
        &path,
        token.as_deref(),
        &body,
        Duration::from_secs(args.timeout),
    )?;
    let ok = (200..300).contains(&answer.status);
    // status, runs and alarms as tables for people (the answer as it came with --json).
    match rodeo_run::ctl_tables::render(&args.command, &answer.body).filter(|_| ok && !args.json) {
        Some(lines) => lines.iter().for_each(|l| outln!("{l}")),
        None => outln!("{}", answer.body),
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("rodeo ctl: {method} {path}: HTTP {}", answer.status);
        ExitCode::FAILURE
    })
}
