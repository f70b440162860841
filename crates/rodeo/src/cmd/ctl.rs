//! `rodeo ctl COMMAND [--url URL]`: run control from another shell, over the HTTP API of a
//! `rodeo serve` or `rodeo run --http` (`status`, `runs`, or a lifecycle command such as
//! `start`, `stop`, `shutdown`; the token from `--token` or `RODEO_TOKEN`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

/// Arguments of `rodeo ctl`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// `status`, `runs`, `config get`, `config put FILE`, `alarms`, `ack NAME`, or a lifecycle
    /// command: `start`, `stop`, `shutdown`, ...
    command: String,
    /// The words after `config` (`get`, or `put FILE`) or after `ack` (the alarm's name).
    rest: Vec<String>,
    /// The service's address (`http://HOST:PORT`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The command token (default: the RODEO_TOKEN environment variable).
    #[arg(long)]
    token: Option<String>,
    /// Seconds to wait for the answer (a `stop` waits for the run to drain).
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let host = args
        .url
        .strip_prefix("http://")
        .context("--url must start with http:// (e.g. http://127.0.0.1:8080)")?
        .trim_end_matches('/');
    let rest: Vec<&str> = args.rest.iter().map(String::as_str).collect();
    let (method, path, body) = match (args.command.as_str(), &rest[..]) {
        ("status", []) => ("GET", "/api/status", String::new()),
        ("runs", []) => ("GET", "/api/runs", String::new()),
        ("alarms", []) => ("GET", "/api/alarms", String::new()),
        ("config", ["get"]) => ("GET", "/api/config", String::new()),
        ("config", ["put", file]) => (
            "PUT",
            "/api/config",
            std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?,
        ),
        ("config", _) => anyhow::bail!("use `rodeo ctl config get` or `rodeo ctl config put FILE`"),
        ("ack", [name]) => (
            "POST",
            "/api/alarms/ack",
            serde_json::json!({ "name": name }).to_string(),
        ),
        (c, [_, ..]) => anyhow::bail!("`{c}` takes no further arguments"),
        (c, []) => ("POST", "/api/command", format!("{{\"command\":\"{c}\"}}")),
    };
    let token = args
        .token
        .or_else(|| std::env::var("RODEO_TOKEN").ok())
        .filter(|t| !t.is_empty());
    if method != "GET" && token.is_none() {
        anyhow::bail!("a command needs the token: --token T or RODEO_TOKEN");
    }
    let mut s = TcpStream::connect(host).with_context(|| format!("cannot connect to {host}"))?;
    s.set_read_timeout(Some(Duration::from_secs(args.timeout)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let (Some(t), false) = (&token, method == "GET") {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes())
        .with_context(|| format!("cannot send to {host}"))?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .with_context(|| format!("no answer from {host}"))?;
    let code: u16 = out
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("not an HTTP answer from {host}"))?;
    let answer = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    println!("{answer}");
    Ok(if (200..300).contains(&code) {
        ExitCode::SUCCESS
    } else {
        eprintln!("rodeo ctl: {method} {path}: HTTP {code}");
        ExitCode::FAILURE
    })
}
