//! Chaos suite: faults an operator meets, each against a `rodeo run --processes` partition that
//! must end balanced (or, where the fault ends the run, with a clear error and its balance
//! sheet), its files read back with the raw-file reader.
//!
//! Here: each role paused (SIGSTOP, then SIGCONT) for less than the dead-application limit, and
//! a corrupted link stream into a readout node's network input. kill -9 of each role and a full
//! disk have their own test files (see the faults table in docs/faults.md).

use std::collections::HashSet;
use std::time::Duration;

use rodeo_files::rawfile::RawFileReader;
use rodeo_format::fragment::FullEvent;
use rodeo_testkit::process::find_app;
use rodeo_testkit::{files_under, rodeo, wait_for, wait_until};
use serde_json::Value;

/// How long an application stays stopped: well past the DCM's request timeout and the
/// supervisor's keep-alive, below `dead_after_ms` (5 s here).
const PAUSE: Duration = Duration::from_secs(2);

/// Runs a small partition, pauses the application `name` once events are being written, and
/// checks that the run ends balanced with every accepted event written once.
fn pause_and_resume(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    std::fs::write(
        &cfg,
        "[l1]\nrate_hz = 3000.0\n[supervisor]\ndcm_timeout_ms = 4000\nevent_timeout_ms = 8000\n\
         [dcm]\nnodes = 2\nslots = 8\naccept_fraction = 0.3\n\
         [control]\nheartbeat_ms = 200\ndead_after_ms = 5000\n",
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let child = rodeo!()
        .args([
            "run",
            "--processes",
            "--events",
            "9000",
            "--json",
            // A pause may hold the L1 behind its schedule: degraded, said below.
            "--accept-degraded",
            "--config",
        ])
        .arg(&cfg)
        .arg("--output")
        .arg(&out_dir)
        .spawn();
    pause_once_writing(&out_dir, name, PAUSE);
    let out = child.wait_with_deadline(Duration::from_secs(120));
    let stderr = &out.stderr;
    assert!(out.status.success(), "{name} paused: {stderr}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["balanced"], true, "{name} paused: {v}");
    // Nothing lost without its count: at worst L1 accepts the paused partition could not take
    // on schedule, (a paused readout node) events built without its fragments, and (a pause
    // that outlasted an assignment's timeout on a loaded machine) forced accepts.
    for p in v["problems"].as_array().unwrap() {
        let kind = p["kind"].as_str().unwrap_or_default();
        assert!(
            ["l1_missed", "partial_events", "forced_accepts"].contains(&kind),
            "{name} paused: {v}"
        );
    }
    assert_ne!(v["verdict"], "failed", "{v}");
    assert_eq!(v["l1_accepts"], 9000, "{v}");
    let written = v["events_written"].as_u64().unwrap();
    assert_eq!(
        written,
        v["accepted"].as_u64().unwrap() + v["forced_accepts"].as_u64().unwrap(),
        "{v}"
    );
    assert_eq!(events_in_files(&v), written, "{v}");
}

/// Once the run writing into `out_dir` has events on disk, stops its application `name`
/// (SIGSTOP) for `pause`, then lets it go on (SIGCONT).
fn pause_once_writing(out_dir: &std::path::Path, name: &str, pause: Duration) {
    let marker = out_dir.to_str().unwrap().to_string();
    wait_until("events being written", Duration::from_secs(60), || {
        files_under(out_dir)
            .iter()
            .any(|p| p.to_string_lossy().contains(".data"))
    });
    let pid = wait_for(name, Duration::from_secs(20), || find_app(name, &marker));
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // The fault itself lasts `pause` (this sleep is the fault's duration, not
    // synchronisation).
    std::thread::sleep(pause);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
}

/// Reads every file of the balance sheet; returns how many distinct events they hold (panics
/// on a damaged event or one written twice).
fn events_in_files(summary: &Value) -> u64 {
    let mut ids = HashSet::new();
    for f in summary["files"].as_array().expect("files") {
        let mut reader = RawFileReader::open(f.as_str().unwrap()).unwrap();
        while let Some(event) = reader.next_event() {
            let event = event.unwrap();
            let e = FullEvent::parse(event.words).unwrap();
            e.verify_checksum().unwrap();
            assert!(ids.insert(e.global_id()), "event {} twice", e.global_id());
        }
    }
    ids.len() as u64
}

/// A port free now on 127.0.0.1 (the listener is closed again; the partition binds it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_corrupted_link_stream_is_counted_and_the_run_balances() {
    const UNITS: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let addresses: Vec<String> = (0..2)
        .map(|_| format!("tcp://127.0.0.1:{}", free_port()))
        .collect();
    let config = dir.path().join("beam.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nevents = 0\nseconds = 0\n[l1]\nmode = \"readout\"\nrois_per_event = [1, 1]\n\
             [ros]\nnodes = 1\nchannels = 2\ninput = \"network\"\nlisten = [\"{}\", \"{}\"]\n\
             listen_mode = \"slink\"\n[dcm]\nnodes = 1\naccept_fraction = 1.0\n",
            addresses[0], addresses[1]
        ),
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let run = rodeo!()
        .args(["run", "--json", "--accept-degraded", "--config"])
        .arg(&config)
        .arg("--output")
        .arg(&out_dir)
        .spawn();
    // Each sender corrupts 2% of its fragments, cycling through every error kind (bad
    // markers, size mismatches, short and lost fragments, duplicates, garbage). It retries
    // (bounded) until the partition listens.
    let senders: Vec<_> = addresses
        .iter()
        .cloned()
        .enumerate()
        // The default sub-detector's ROBs, 0x00410000 and on: a sender of another source is
        // a swapped cable (counted apart from the corruption).
        .map(|(i, address)| {
            std::thread::spawn(move || {
                wait_until(
                    "a corrupting sender to deliver its stream",
                    Duration::from_secs(60),
                    || {
                        rodeo!()
                            .args(["gen", "link", "--mode", "slink", "--units"])
                            .arg(UNITS.to_string())
                            .args(["--source-id", &(0x0041_0000 + i as u32).to_string()])
                            .args(["--data-words", "16..64", "--corrupt", "0.02", "--send"])
                            .arg(&address)
                            .output()
                            .status
                            .success()
                    },
                )
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let out = run.wait_with_deadline(Duration::from_secs(60));
    let stderr = &out.stderr;
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["balanced"], true, "{v}");
    // Counted losses: degraded, complete (every damaged event says so), never failed.
    assert_eq!(v["verdict"], "degraded", "{v}");
    assert_eq!(v["complete"], true, "{v}");
    assert!(v["input_errors"].as_u64().unwrap() > 0, "{v}");
    assert!(v["partial_events"].as_u64().unwrap() > 0, "{v}");
    let written = v["events_written"].as_u64().unwrap();
    assert_eq!(written, v["l1_accepts"].as_u64().unwrap(), "{v}");
    assert!(written >= UNITS - UNITS / 10, "{v}");
    assert_eq!(events_in_files(&v), written, "{v}");
}

#[test]
fn a_paused_readout_node_delays_the_run_but_loses_nothing() {
    pause_and_resume("ros-1");
}

#[test]
fn a_paused_logger_is_back_pressure_and_loses_nothing() {
    pause_and_resume("logger-1");
}

#[test]
fn a_paused_supervisor_delays_the_run_but_loses_nothing() {
    pause_and_resume("supervisor");
}

#[test]
fn a_paused_dcm_delays_its_events_but_loses_nothing() {
    pause_and_resume("dcm-1");
}

/// A readout node paused past the DCMs' request timeout (below the dead-application limit)
/// catches up with the run when it resumes: the clears of the events decided meanwhile (40,000
/// at 20 kHz, far beyond its channels' early-clear markers) are kept by its store
/// (`store::cleared`), so the fragments its input then makes of those events are dropped as
/// cleared. Without that they were stored and never cleared, the store filled, and every
/// later request waited for its timeout: 76,000 L1 accepts in 10 s instead of 200,000, the
/// L1 at 200 Hz to the run's end (a QA pass, 2026-12-08).
#[test]
fn a_readout_node_paused_past_the_request_timeout_catches_up_with_the_run() {
    const RATE: u64 = 20_000;
    const SECONDS: u64 = 8;
    let v = pause_a_readout_node(RATE, SECONDS, Duration::from_millis(2500));
    // The pause costs its own 2.5 s of events at most, not the rest of the run.
    let accepts = v["l1_accepts"].as_u64().unwrap();
    assert!(
        accepts >= RATE * SECONDS * 6 / 10,
        "{accepts} L1 accepts of {}: the node did not catch up\n{v}",
        RATE * SECONDS
    );
}

/// The same at the full L1 rate, paused 2.8 s: the node's inbox fills while it stands, and the
/// supervisor keeps the clears it cannot take (`supervisor::clears`, the backlog) and sends
/// them when the node resumes. It waited 1 s per clear (its whole loop with it), then dropped
/// it: a gap in the node's clears, their events' fragments stored for good, the store full,
/// the run FAILED ("received clears for 1165661 events, expected 1171361"; 4 of 4 runs of a
/// QA pass, 2026-12-08).
#[test]
fn a_readout_node_paused_at_the_full_rate_gets_every_clear() {
    let v = pause_a_readout_node(0, 8, Duration::from_millis(2800));
    assert_ne!(v["verdict"], "failed", "{v}");
    for p in v["problems"].as_array().unwrap() {
        assert_eq!(p["kind"], "partial_events", "{v}");
    }
}

/// A `--processes` run of `seconds` at `rate` Hz (0: the full rate) whose ros-1 is stopped
/// for `pause` once events are written; checks that it ends balanced, ros-1 having dropped
/// fragments of events cleared before they came, and returns its sheet.
fn pause_a_readout_node(rate: u64, seconds: u64, pause: Duration) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    std::fs::write(
        &cfg,
        format!(
            "[l1]\nrate_hz = {rate}.0\n[ros]\nnodes = 2\nchannels = 4\n\
             [dcm]\nnodes = 2\nslots = 64\n[control]\ndead_after_ms = 5000\n"
        ),
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let child = rodeo!()
        .args([
            "run",
            "--processes",
            "--json",
            "--accept-degraded",
            "--seconds",
        ])
        .arg(seconds.to_string())
        .arg("--config")
        .arg(&cfg)
        .arg("--output")
        .arg(&out_dir)
        .spawn();
    pause_once_writing(&out_dir, "ros-1", pause);
    let out = child.wait_with_deadline(Duration::from_secs(120));
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["balanced"], true, "{v}");
    let node = v["readout_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "ros-1")
        .unwrap();
    assert!(
        node["store_dropped_after_clear"].as_u64().unwrap() > 0,
        "{node}"
    );
    v
}
