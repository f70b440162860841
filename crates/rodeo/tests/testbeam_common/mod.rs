//! Shared helpers of the test-beam tests (`cli_testbeam.rs`, `cli_testbeam_sheet.rs`): free
//! ports, senders of S-LINK fragments (`rodeo gen link --send`), the test-beam partition's
//! configuration and `rodeo run --json`.

#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::time::{Duration, Instant};

use rodeo_testkit::cli::{Output, Running};
use rodeo_testkit::rodeo;
use serde_json::Value;

/// A port free now on 127.0.0.1 (the listener is closed again; the partition binds it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends `units` S-LINK fragments to `address` with `rodeo gen link --send`, which retries
/// its connection until the partition listens (bounded by `deadline`).
pub fn send(address: &str, source: u32, units: u64, deadline: Instant) {
    let retry = deadline
        .saturating_duration_since(Instant::now())
        .as_secs_f64();
    let out = rodeo!()
        .args(["gen", "link", "--mode", "slink", "--units"])
        .arg(units.to_string())
        .args(["--data-words", "16..64", "--send", address])
        .args(["--source-id", &source.to_string()])
        .args(["--retry-seconds", &format!("{retry:.1}")])
        .output();
    assert!(
        out.status.success(),
        "gen link --send {address} failed: {}",
        out.stderr
    );
}

/// `rodeo run --config CONFIG --output OUT --json`, to run or spawn.
pub fn run_json(config: &std::path::Path, out: &std::path::Path) -> rodeo_testkit::cli::Rodeo {
    let mut r = rodeo!();
    r.arg("run")
        .arg("--config")
        .arg(config)
        .arg("--output")
        .arg(out)
        .arg("--json");
    r
}

/// The test-beam partition of docs/test-beam.md with one node of `addresses.len()` ROBs fed
/// over the network, every event kept; `run` is the `[run]` section's body.
pub fn beam_config(dir: &std::path::Path, addresses: &[String], run: &str) -> std::path::PathBuf {
    let listen: Vec<String> = addresses.iter().map(|a| format!("{a:?}")).collect();
    let config = dir.join("beam.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\n{run}\n[l1]\nmode = \"readout\"\nrois_per_event = [1, 1]\n[ros]\nnodes = 1\n\
             channels = {}\nsubdetector = 0x51\ninput = \"network\"\nlisten = [{}]\n\
             [dcm]\nnodes = 1\naccept_fraction = 1.0\n",
            addresses.len(),
            listen.join(", ")
        ),
    )
    .unwrap();
    config
}

/// A data-driven run of two TCP inputs (ROBs 0x00510000 and 0x00510001, ended by their
/// senders) started: its directory (kept while the run lives), the inputs' addresses, the run
/// and a deadline 120 s away.
pub fn two_tcp_inputs() -> (tempfile::TempDir, Vec<String>, Running, Instant) {
    let dir = tempfile::tempdir().unwrap();
    let addresses: Vec<String> = (0..2)
        .map(|_| format!("tcp://127.0.0.1:{}", free_port()))
        .collect();
    let config = beam_config(dir.path(), &addresses, "events = 0\nseconds = 0");
    let run = run_json(&config, &dir.path().join("out")).spawn();
    let deadline = Instant::now() + Duration::from_secs(120);
    (dir, addresses, run, deadline)
}

/// A data-driven run of two TCP inputs ([`two_tcp_inputs`]) ended by its senders, each
/// `(source id, fragments)`: its JSON sheet and exit code.
pub fn two_tcp_senders(senders: [(u32, u64); 2]) -> (Value, Option<i32>) {
    let (_dir, addresses, run, deadline) = two_tcp_inputs();
    let threads: Vec<_> = addresses
        .iter()
        .cloned()
        .zip(senders)
        .map(|(a, (source, n))| std::thread::spawn(move || send(&a, source, n, deadline)))
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let out = run.wait_with_deadline(deadline.saturating_duration_since(Instant::now()));
    (json_sheet(&out), out.status.code())
}

/// The `--json` sheet a finished `rodeo run` printed (panics showing its output without one).
pub fn json_sheet(out: &Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON sheet ({e}): {}\n{}", out.stdout, out.stderr))
}

/// The text of the sheet's problem of `kind` (panics showing the sheet without one).
pub fn problem_text<'a>(v: &'a Value, kind: &str) -> &'a str {
    v["problems"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["kind"] == kind)
        .and_then(|p| p["text"].as_str())
        .unwrap_or_else(|| panic!("no {kind} problem: {v}"))
}

/// The fragments a readout node's inputs (its `readout_nodes` row) received, summed.
pub fn received(node: &Value) -> u64 {
    node["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| i["fragments"].as_u64().unwrap_or(0))
        .sum()
}
