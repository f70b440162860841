//! A test beam's first day, end to end: a partition whose readout node takes real input over
//! TCP (`[ros] input = "network"`, S-LINK fragments) with the data-driven L1
//! (`[l1] mode = "readout"`), fed by `rodeo gen link --send tcp://...` senders as a detector's
//! front-ends would; the run ends when the senders end. Every deadline is bounded.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rodeo_testkit::rodeo;
use serde_json::Value;

/// A port free now on 127.0.0.1 (the listener is closed again; the partition binds it).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits for `child` (a Python helper) until `deadline`; kills it and panics past it.
fn wait_until(child: &mut Child, deadline: Instant, what: &str) -> std::process::ExitStatus {
    let limit = deadline.saturating_duration_since(Instant::now());
    let mut status = None;
    if !rodeo_testkit::holds_within(limit, || {
        status = child.try_wait().unwrap();
        status.is_some()
    }) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what} did not finish in time");
    }
    status.expect("the child ended")
}

/// Sends `units` S-LINK fragments to `address`, retrying the connection until the partition
/// listens (bounded by `deadline`).
fn send(address: &str, units: u64, deadline: Instant) {
    let mut stderr = String::new();
    let sent =
        rodeo_testkit::holds_within(deadline.saturating_duration_since(Instant::now()), || {
            let out = rodeo!()
                .args(["gen", "link", "--mode", "slink", "--units"])
                .arg(units.to_string())
                .args(["--data-words", "16..64", "--send", address])
                .output();
            stderr = out.stderr;
            out.status.success()
        });
    assert!(sent, "gen link --send {address} kept failing: {}", stderr);
}

#[test]
fn network_input_with_data_driven_l1_writes_every_event_the_senders_sent() {
    const UNITS: u64 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port()];
    let addresses: Vec<String> = ports
        .iter()
        .map(|p| format!("tcp://127.0.0.1:{p}"))
        .collect();
    let config = dir.path().join("beam.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[run]
events = 0
seconds = 0
[l1]
mode = "readout"
rois_per_event = [1, 1]
[ros]
nodes = 1
channels = 2
input = "network"
listen = ["{}", "{}"]
listen_mode = "slink"
[dcm]
nodes = 1
accept_fraction = 1.0
"#,
            addresses[0], addresses[1]
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let run = rodeo!()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--output")
        .arg(&out)
        .arg("--json")
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(120);
    let senders: Vec<_> = addresses
        .iter()
        .cloned()
        .map(|a| std::thread::spawn(move || send(&a, UNITS, deadline)))
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let output = run.wait_with_deadline(deadline.saturating_duration_since(Instant::now()));
    let status = output.status;
    assert!(
        status.success(),
        "rodeo run failed: {}\n{}",
        output.stderr,
        output.stdout
    );
    let v: Value = serde_json::from_str(&output.stdout).expect("one JSON object");
    assert_eq!(v["balanced"], true, "{v}");
    assert_eq!(v["l1_accepts"], UNITS, "{v}");
    assert_eq!(v["accepted"], UNITS, "{v}");
    assert_eq!(v["events_written"], UNITS, "{v}");
    assert_eq!(v["events_verified"], UNITS, "{v}");
    assert_eq!(v["partial_events"], 0, "{v}");

    // Every event holds the fragments of both ROBs, whole.
    let mut events = 0u64;
    for f in v["files"].as_array().unwrap() {
        let d = rodeo!()
            .args(["dump", "--json"])
            .arg(f.as_str().unwrap())
            .output();
        assert!(d.status.success(), "{}", d.stderr);
        let d: Value = serde_json::from_str(&d.stdout).unwrap();
        for e in d["events"].as_array().unwrap() {
            let robs = e["robs"].as_array().unwrap();
            assert_eq!(robs.len(), 2, "{e}");
            for r in robs {
                assert_eq!(r["status"], 0, "{e}");
            }
            events += 1;
        }
    }
    assert_eq!(events, UNITS);
}

#[test]
fn dump_shows_the_robs_of_zstd_compressed_events() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("z.toml");
    std::fs::write(
        &config,
        "[run]\nevents = 50\n[ros]\nchannels = 3\n[dcm]\nnodes = 1\naccept_fraction = 1.0\n\
         [logger]\ncompression = \"zstd\"\n",
    )
    .unwrap();
    let out = rodeo!()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--output")
        .arg(dir.path().join("out"))
        .arg("--json")
        .output();
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let file = v["files"][0].as_str().unwrap().to_string();
    let d = rodeo!().arg("dump").arg(&file).output();
    let text = &d.stdout;
    assert!(d.status.success(), "{}", d.stderr);
    assert!(
        !text.contains("malformed") && !text.contains("Some("),
        "{text}"
    );
    assert_eq!(text.matches("(stored compressed)").count(), 50, "{text}");
    assert_eq!(text.matches("  ROB 0x").count(), 150, "{text}");
}

#[test]
fn accepted_events_are_shared_among_the_streams_each_in_its_own_files() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("s.toml");
    std::fs::write(
        &config,
        "[run]\nevents = 4000\n[ros]\nchannels = 2\n[dcm]\nnodes = 1\naccept_fraction = 0.5\n\
         stream_shares = [0.75, 0.25]\n[logger]\nstreams = [\"physics_Main\", \"calibration_Beam\"]\n",
    )
    .unwrap();
    let out = rodeo!()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--output")
        .arg(dir.path().join("out"))
        .arg("--json")
        .output();
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["balanced"], true, "{v}");
    let mut per_stream = std::collections::BTreeMap::new();
    for f in v["files"].as_array().unwrap() {
        let d = rodeo!()
            .args(["dump", "--json"])
            .arg(f.as_str().unwrap())
            .output();
        let d: Value = serde_json::from_str(&d.stdout).unwrap();
        let stream = d["stream"].as_str().unwrap().to_string();
        for e in d["events"].as_array().unwrap() {
            // Each event's stream tag names the stream whose file holds it.
            assert_eq!(e["stream_tags"][0]["name"], stream.as_str(), "{e}");
            *per_stream.entry(stream.clone()).or_insert(0u64) += 1;
        }
    }
    let main = per_stream["physics_Main"];
    let calib = per_stream["calibration_Beam"];
    assert_eq!(main + calib, v["accepted"].as_u64().unwrap());
    // 3:1 by a hash of the L1ID: about 1500 and 500 of some 2000.
    assert!(calib > 300 && main > 2 * calib, "{per_stream:?}");
}

/// The worked example of docs/test-beam.md: the Python "detector" of
/// docs/examples/test-beam/detector.py feeding the example partition over TCP.
#[test]
fn the_test_beam_example_detector_fills_the_example_partition() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3 to run docs/examples/test-beam/detector.py");
        return;
    }
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/test-beam");
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port()];
    let addresses: Vec<String> = ports
        .iter()
        .map(|p| format!("tcp://127.0.0.1:{p}"))
        .collect();
    let text = std::fs::read_to_string(example.join("beam.toml"))
        .unwrap()
        .replace("tcp://127.0.0.1:47710", &addresses[0])
        .replace("tcp://127.0.0.1:47711", &addresses[1]);
    let config = dir.path().join("beam.toml");
    std::fs::write(&config, text).unwrap();
    let run = rodeo!()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--output")
        .arg(dir.path().join("beam-data"))
        .arg("--json")
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut detector = Command::new("python3")
        .arg(example.join("detector.py"))
        .args(["--events", "500"])
        .args(&addresses)
        .spawn()
        .unwrap();
    assert!(wait_until(&mut detector, deadline, "detector.py").success());
    let output = run.wait_with_deadline(deadline.saturating_duration_since(Instant::now()));
    let status = output.status;
    assert!(status.success(), "{}", output.stderr);
    let v: Value = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(v["balanced"], true, "{v}");
    assert_eq!(v["events_verified"], 500, "{v}");
    assert_eq!(v["partial_events"], 0, "{v}");
}

/// `[l1] mode = "external"` with the reference trigger unit of docs/examples/test-beam/tlu.py:
/// every trigger it sends becomes an L1 accept, and with few slots it sees the partition busy.
#[test]
fn an_external_trigger_unit_drives_the_run_and_sees_it_busy() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3 to run docs/examples/test-beam/tlu.py");
        return;
    }
    let tlu = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/examples/test-beam/tlu.py");
    let dir = tempfile::tempdir().unwrap();
    let address = format!("tcp://127.0.0.1:{}", free_port());
    // The example of docs/examples/test-beam/ext.toml, on a free port.
    let example = std::fs::read_to_string(tlu.with_file_name("ext.toml")).unwrap();
    assert!(example.contains("tcp://127.0.0.1:47900"), "{example}");
    let config = dir.path().join("ext.toml");
    std::fs::write(&config, example.replace("tcp://127.0.0.1:47900", &address)).unwrap();
    let run = rodeo!()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--output")
        .arg(dir.path().join("out"))
        .arg("--json")
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut unit = Command::new("python3")
        .arg(&tlu)
        .args(["--triggers", "300", &address])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(&mut unit, deadline, "tlu.py").success());
    let said = String::from_utf8(unit.wait_with_output().unwrap().stdout).unwrap();
    let output = run.wait_with_deadline(deadline.saturating_duration_since(Instant::now()));
    let status = output.status;
    assert!(status.success(), "{}", output.stderr);
    let v: Value = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(v["balanced"], true, "{v}");
    assert_eq!(v["l1_accepts"], 300, "{v}");
    // Two slots of 2 ms each cannot take 300 triggers at once: the unit was held.
    let held: u64 = said
        .split("busy seen on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("tlu.py said {said:?}"));
    assert!(held > 0, "{said}");
}
