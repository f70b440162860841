//! A test beam's first day, end to end: a partition whose readout node takes real input over
//! TCP (`[ros] input = "network"`, S-LINK fragments) with the data-driven L1
//! (`[l1] mode = "readout"`), fed by `rodeo gen link --send tcp://...` senders as a detector's
//! front-ends would; the run ends when the senders end. Every deadline is bounded.

mod testbeam_common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_cards::corrupt::UnitSource;
use rodeo_cards::generator::{SlinkConfig, SlinkGenerator, WordRange};
use rodeo_cards::net::{LinkAddress, LinkSender};
use rodeo_testkit::cli::Running;
use rodeo_testkit::http::{get_ok, request};
use rodeo_testkit::{rodeo, wait_for};
use serde_json::Value;
use testbeam_common::{beam_config, free_port, received, run_json, send};

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
    let run = run_json(&config, &out).spawn();
    let deadline = Instant::now() + Duration::from_secs(120);
    let senders: Vec<_> = addresses
        .iter()
        .cloned()
        .enumerate()
        // The default sub-detector's ROBs, 0x00410000 and on.
        .map(|(i, a)| std::thread::spawn(move || send(&a, 0x0041_0000 + i as u32, UNITS, deadline)))
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

/// A detector still sending over UDP when `run.seconds` stops the run (UDP has no end): the
/// fragments after the last accept are cut by the stop, said on the sheet, and no problem (a
/// UDP run ended by its duration was degraded every time). One link runs 20 fragments ahead of
/// the other, so the stop always cuts some.
#[test]
fn a_stream_cut_by_the_stop_is_no_loss_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let addresses: Vec<String> = (0..2)
        .map(|_| {
            let port = std::net::UdpSocket::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            format!("udp://127.0.0.1:{port}")
        })
        .collect();
    let config = beam_config(dir.path(), &addresses, "events = 0\nseconds = 3");
    let (run, http) = run_with_http(&config, &dir.path().join("out"), "t");
    wait_for("RUNNING", Duration::from_secs(60), || {
        (status(http)["state"] == "RUNNING").then_some(())
    });
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let detector = {
        let stop = Arc::clone(&stop);
        let addresses = addresses.clone();
        std::thread::spawn(move || {
            let mut links = Link::connect_all(&addresses);
            for _ in 0..20 {
                links[0].send();
            }
            // About 1 kHz per link, until the run has ended (bounded: 60 s).
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                for link in &mut links {
                    let unit = link.source.next_unit().unwrap();
                    // The partition's sockets close at its end: a refused datagram ends it.
                    if link
                        .sender
                        .send(unit)
                        .and_then(|()| link.sender.flush())
                        .is_err()
                    {
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let v = sheet(run, Duration::from_secs(90));
    stop.store(true, Ordering::Relaxed);
    detector.join().unwrap();
    let node = &v["readout_nodes"][0];
    assert_eq!(node["unbuilt_fragments"], 0, "{v}");
    assert!(node["unbuilt_cut_by_stop"].as_u64().unwrap() >= 20, "{v}");
    assert!(
        node["inputs"][0]["fragments"].as_u64().unwrap() > 1000,
        "{v}"
    );
    // Every datagram the receivers counted was stored: the node reads its links in at the stop
    // (122-305 of two links' fragments at 20 kHz were left in their queues, unsaid).
    assert_eq!(node["stored"].as_u64(), Some(received(node)), "{v}");
    assert_eq!(node["received_not_stored"], 0, "{v}");
    assert_eq!(v["verdict"], "ok", "{v}");
    assert_eq!(v["problems"].as_array().map(Vec::len), Some(0), "{v}");
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
    let out = run_json(&config, &dir.path().join("out")).output();
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
    let out = run_json(&config, &dir.path().join("out")).output();
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
    // As docs/test-beam.md runs it: from a directory of one's own (the example's relative
    // `output` then lands there, never in the checkout).
    let run = rodeo!()
        .current_dir(dir.path())
        .arg("run")
        .arg("--config")
        .arg(&config)
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
    assert!(dir.path().join("beam-data/run-00000001").is_dir(), "{v}");
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
    // From a directory of one's own, as docs/test-beam.md says: ./ext-data is there.
    let run = rodeo!()
        .current_dir(dir.path())
        .arg("run")
        .arg("--config")
        .arg(&config)
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
    assert!(dir.path().join("ext-data/run-00000001").is_dir(), "{v}");
    // Two slots of 2 ms each cannot take 300 triggers at once: the unit was held.
    let held: u64 = said
        .split("busy seen on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("tlu.py said {said:?}"));
    assert!(held > 0, "{said}");
}

/// A run whose trigger unit never sends (nobody connects) ends at its time limit balanced,
/// but not `ok`: it read out nothing, and its sheet says so (`no_events`, exit 3).
#[test]
fn a_run_without_any_l1_accept_is_degraded_not_ok() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("silent.toml");
    let address = format!("tcp://127.0.0.1:{}", free_port());
    std::fs::write(
        &config,
        format!("[run]\nseconds = 2\n[l1]\nmode = \"external\"\nexternal_listen = \"{address}\"\n"),
    )
    .unwrap();
    let out = run_json(&config, &dir.path().join("out"))
        .spawn()
        .wait_with_deadline(Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(3), "{}", out.text());
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["l1_accepts"], 0, "{v}");
    assert_eq!(v["balanced"], true, "{v}");
    assert_eq!(v["verdict"], "degraded", "{v}");
    let kinds: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["no_events"], "{v}");
}

/// Waits (bounded) for the run `run` to end by itself; its `--json` sheet.
fn sheet(run: Running, limit: Duration) -> Value {
    let out = run.wait_with_deadline(limit);
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON sheet ({e}): {}\n{}", out.stdout, out.stderr))
}

/// `rodeo run --config CONFIG --http 127.0.0.1:0 --json` with `token`; the child and the
/// address it serves.
fn run_with_http(
    config: &std::path::Path,
    out: &std::path::Path,
    token: &str,
) -> (Running, SocketAddr) {
    let run = rodeo!()
        .arg("run")
        .arg("--config")
        .arg(config)
        .arg("--output")
        .arg(out)
        .args(["--http", "127.0.0.1:0", "--json"])
        .env("RODEO_TOKEN", token)
        .echo_stderr()
        .spawn();
    let addr = run.http_address(Duration::from_secs(60));
    (run, addr)
}

fn status(addr: SocketAddr) -> Value {
    serde_json::from_str(&get_ok(addr, "/api/status")).unwrap()
}

/// One S-LINK link of the test's detector: fragments of ROB `rob` with L1IDs from 0.
struct Link {
    sender: LinkSender,
    source: UnitSource<SlinkGenerator>,
}

impl Link {
    /// Connects at once (no retry: the partition is RUNNING, so it listens).
    fn connect(address: &str, rob: u32) -> Link {
        let cfg = SlinkConfig {
            source_id: rob,
            data_words: WordRange::uniform(16, 64),
            ..SlinkConfig::default()
        };
        Link {
            sender: LinkSender::connect(LinkAddress::parse(address).unwrap())
                .unwrap_or_else(|e| panic!("connect to {address} while RUNNING: {e}")),
            source: UnitSource::new(SlinkGenerator::new(cfg), 4 * cfg.fragment_words(64)),
        }
    }

    /// One link per address, ROB `0x00510000 + i` on the `i`th.
    fn connect_all(addresses: &[String]) -> Vec<Link> {
        addresses
            .iter()
            .enumerate()
            .map(|(i, a)| Link::connect(a, 0x0051_0000 + i as u32))
            .collect()
    }

    /// Sends the next fragment now (flushed).
    fn send(&mut self) {
        self.sender.send(self.source.next_unit().unwrap()).unwrap();
        self.sender.flush().unwrap();
    }
}

/// A detector at a steady `rate` Hz on two ROBs into `rodeo run --http`: both inputs waiting
/// once RUNNING, connected while it sends; 3 s after it starts at least 75% of what it sent is
/// built and written; its first link closes (closed, the run waits for the second), then the
/// second: the run ends by itself with every fragment sent written, both inputs closed and no
/// problem.
fn a_steady_detector_is_built_live(rate: f64) {
    let units = (rate * 5.0) as u64;
    let dir = tempfile::tempdir().unwrap();
    let addresses: Vec<String> = (0..2)
        .map(|_| format!("tcp://127.0.0.1:{}", free_port()))
        .collect();
    let config = beam_config(dir.path(), &addresses, "events = 0\nseconds = 0");
    let (run, http) = run_with_http(&config, &dir.path().join("out"), "t");
    // RUNNING means every input listens: each is waiting, no problem yet.
    let st = wait_for("RUNNING", Duration::from_secs(60), || {
        let v = status(http);
        (v["state"] == "RUNNING").then_some(v)
    });
    let inputs = st["inputs"].as_array().expect("inputs in /api/status");
    assert_eq!(inputs.len(), 2, "{st}");
    for (i, input) in inputs.iter().enumerate() {
        assert_eq!(input["state"], "waiting", "{input}");
        assert_eq!(input["node"], "ros-1", "{input}");
        assert_eq!(input["rob"], 0x0051_0000 + i as u64, "{input}");
        assert_eq!(input["address"], addresses[i].as_str(), "{input}");
        assert_eq!(input["fragments"], 0, "{input}");
    }
    let sent = Arc::new(AtomicU64::new(0));
    let (closed_first, close_second) = std::sync::mpsc::channel::<()>();
    let detector = {
        let sent = Arc::clone(&sent);
        let addresses = addresses.clone();
        std::thread::spawn(move || {
            let mut links = Link::connect_all(&addresses);
            let start = Instant::now();
            for n in 0..units {
                let due = start + Duration::from_secs_f64(n as f64 / rate);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait); // the detector's pace
                }
                for l in &mut links {
                    l.send();
                }
                sent.store(n + 1, Ordering::Release);
            }
            let second = links.pop().unwrap();
            drop(links);
            // The test looks at the first link closed, then lets the second go.
            let _ = close_second.recv_timeout(Duration::from_secs(120));
            drop(second);
        })
    };
    wait_until_sent(&sent, 1);
    let t0 = Instant::now();
    wait_for("both inputs connected", Duration::from_secs(20), || {
        let v = status(http);
        v["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["state"] == "connected")
            .then_some(())
    });
    // 3 s after the start (the moment the criterion names): what was sent is built and
    // written, give or take the last milliseconds.
    rodeo_testkit::wait_until("3 s of sending", Duration::from_secs(10), || {
        t0.elapsed() >= Duration::from_secs(3)
    });
    let v = status(http);
    let sent_at_3s = sent.load(Ordering::Acquire);
    let (built, written) = (
        v["l1_accepts"].as_u64().unwrap(),
        v["events_written"].as_u64().unwrap(),
    );
    eprintln!("{rate} Hz: after 3 s, {sent_at_3s} sent, {built} built, {written} written");
    assert!(
        sent_at_3s as f64 >= 2.0 * rate,
        "the detector lagged: {sent_at_3s} sent in 3 s"
    );
    assert!(
        built as f64 >= 0.75 * sent_at_3s as f64 && written as f64 >= 0.75 * sent_at_3s as f64,
        "{rate} Hz: {sent_at_3s} sent, {built} built, {written} written after 3 s: {v}"
    );
    for i in v["inputs"].as_array().unwrap() {
        assert!(
            i["rate_hz"].as_f64().unwrap() > 0.5 * rate && i["problem"].is_null(),
            "{i}"
        );
    }
    // The first link closes: closed, while the second keeps the run going.
    wait_for(
        "ROB 0 closed, ROB 1 connected",
        Duration::from_secs(60),
        || {
            let v = status(http);
            let i = v["inputs"].as_array().unwrap().clone();
            (i[0]["state"] == "closed" && i[1]["state"] == "connected" && v["state"] == "RUNNING")
                .then_some(())
        },
    );
    let _ = closed_first.send(());
    detector.join().unwrap();
    let sheet = sheet(run, Duration::from_secs(120));
    assert_eq!(sheet["balanced"], true, "{sheet}");
    assert_eq!(sheet["l1_accepts"], units, "{sheet}");
    assert_eq!(sheet["events_written"], units, "{sheet}");
    assert_eq!(sheet["partial_events"], 0, "{sheet}");
    let inputs = sheet["readout_nodes"][0]["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 2, "{sheet}");
    for i in inputs {
        assert_eq!(i["state"], "closed", "{i}");
        assert_eq!(i["fragments"], units, "{i}");
        assert!(i["problem"].is_null(), "{i}");
    }
}

fn wait_until_sent(sent: &AtomicU64, n: u64) {
    rodeo_testkit::wait_until("the detector to send", Duration::from_secs(60), || {
        sent.load(Ordering::Acquire) >= n
    });
}

#[test]
fn a_steady_200_hz_detector_is_built_live() {
    a_steady_detector_is_built_live(200.0);
}

#[test]
fn a_steady_500_hz_detector_is_built_live() {
    a_steady_detector_is_built_live(500.0);
}

/// A run whose inputs nobody connected to ends (by its time) with each input waiting and
/// named in its problem.
#[test]
fn an_input_that_never_connected_is_a_problem_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let addresses: Vec<String> = (0..2)
        .map(|_| format!("tcp://127.0.0.1:{}", free_port()))
        .collect();
    let config = beam_config(dir.path(), &addresses, "events = 0\nseconds = 2");
    let run = run_json(&config, &dir.path().join("out"))
        .echo_stderr()
        .spawn();
    let out = run.wait_with_deadline(Duration::from_secs(120));
    // Degraded, not ok: exit 3, each input named in the sheet's problems and `rodeo runs`.
    assert_eq!(out.status.code(), Some(3), "{}", out.text());
    let sheet: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(sheet["verdict"], "degraded", "{sheet}");
    let named: Vec<&str> = sheet["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "input")
        .filter_map(|p| p["where"].as_str())
        .collect();
    for (i, address) in addresses.iter().enumerate() {
        let place = format!("ros-1 ROB 0x{:08x} {address}", 0x0051_0000 + i);
        assert!(named.contains(&place.as_str()), "{place}: {sheet}");
    }
    let runs = rodeo!()
        .args(["runs", "--json", "--output"])
        .arg(dir.path().join("out"))
        .output();
    runs.assert_success();
    let r: Value = serde_json::from_str(&runs.stdout).unwrap();
    assert_eq!(r["runs"][0]["status"], "degraded", "{r}");
    let inputs = sheet["readout_nodes"][0]["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 2, "{sheet}");
    for (i, input) in inputs.iter().enumerate() {
        assert_eq!(input["state"], "waiting", "{input}");
        assert_eq!(
            input["problem"],
            format!(
                "ros-1 ROB 0x{:08x} {}: never connected",
                0x0051_0000 + i,
                addresses[i]
            ),
            "{input}"
        );
    }
}

/// A sender whose connection is reset mid-run (a crashed front-end): its input is lost, live
/// on /api/status and /metrics and in the run's summary, with the reason.
#[test]
fn a_sender_reset_mid_run_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let address = format!("tcp://127.0.0.1:{}", free_port());
    let config = beam_config(
        dir.path(),
        std::slice::from_ref(&address),
        "events = 0\nseconds = 0",
    );
    let (run, http) = run_with_http(&config, &dir.path().join("out"), "tok");
    wait_for("RUNNING", Duration::from_secs(60), || {
        (status(http)["state"] == "RUNNING").then_some(())
    });
    let mut link = Link::connect(&address, 0x0051_0000);
    for _ in 0..100 {
        link.send();
    }
    wait_for("100 fragments built", Duration::from_secs(60), || {
        (status(http)["l1_accepts"] == 100).then_some(())
    });
    let LinkSender::Tcp(w) = link.sender else {
        unreachable!("a tcp link")
    };
    rodeo_testkit::net::close_with_reset(w.into_inner().unwrap());
    let v = wait_for("the input lost", Duration::from_secs(60), || {
        let v = status(http);
        (v["inputs"][0]["state"] == "lost").then_some(v)
    });
    let problem = v["inputs"][0]["problem"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        problem.starts_with(&format!("ros-1 ROB 0x00510000 {address}: connection lost")),
        "{v}"
    );
    let (code, metrics) = request(http, "GET", "/metrics", None, "");
    assert_eq!(code, 200);
    assert!(
        metrics.contains(&format!(
            "rodeo_ros_input_state{{node=\"ros-1\",rob=\"0x00510000\",address=\"{address}\",state=\"lost\"}} 1"
        )),
        "{metrics}"
    );
    let (code, body) = request(
        http,
        "POST",
        "/api/command",
        Some("tok"),
        r#"{"command":"stop"}"#,
    );
    assert_eq!(code, 200, "{body}");
    let sheet = sheet(run, Duration::from_secs(120));
    assert_eq!(sheet["verdict"], "degraded", "{sheet}");
    let input = &sheet["readout_nodes"][0]["inputs"][0];
    assert_eq!(input["state"], "lost", "{sheet}");
    assert_eq!(input["fragments"], 100, "{sheet}");
    assert_eq!(input["problem"], problem.as_str(), "{sheet}");
}

/// `rodeo gen link --send` toward a partition still starting: started the moment its HTTP API
/// answers (before its inputs listen), it retries its connection (the default
/// `--retry-seconds`) and is not refused; one started once the status says RUNNING connects at
/// its first try (`--retry-seconds 0`), since RUNNING means every input listens. Every
/// fragment of both is written and the run ends by itself when both close.
#[test]
fn a_sender_started_as_the_api_answers_is_not_refused() {
    const UNITS: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let addresses: Vec<String> = (0..2)
        .map(|_| format!("tcp://127.0.0.1:{}", free_port()))
        .collect();
    let config = beam_config(dir.path(), &addresses, "events = 0\nseconds = 0");
    let (run, http) = run_with_http(&config, &dir.path().join("out"), "t");
    let sender = |address: &str, source: u32, retry: Option<&str>| {
        let mut cmd = rodeo!();
        cmd.args(["gen", "link", "--mode", "slink", "--units"])
            .arg(UNITS.to_string())
            .args(["--source-id", &source.to_string()])
            .args(["--data-words", "16..64", "--send", address])
            .deadline(Duration::from_secs(60));
        if let Some(r) = retry {
            cmd.args(["--retry-seconds", r]);
        }
        cmd.spawn()
    };
    // The API answers: the first sender starts now, whatever the partition's state.
    let early = sender(&addresses[0], 0x0051_0000, None);
    wait_for("RUNNING", Duration::from_secs(60), || {
        (status(http)["state"] == "RUNNING").then_some(())
    });
    let on_time = sender(&addresses[1], 0x0051_0001, Some("0"));
    for (name, s) in [
        ("the early sender", early),
        ("the sender at RUNNING", on_time),
    ] {
        let out = s.wait_with_deadline(Duration::from_secs(60));
        assert!(
            out.status.success(),
            "{name} failed (refused?): {}",
            out.stderr
        );
    }
    let sheet = sheet(run, Duration::from_secs(60));
    assert_eq!(sheet["balanced"], true, "{sheet}");
    assert_eq!(sheet["l1_accepts"], UNITS, "{sheet}");
    assert_eq!(sheet["events_written"], UNITS, "{sheet}");
    for i in sheet["readout_nodes"][0]["inputs"].as_array().unwrap() {
        assert_eq!(
            (&i["state"], &i["fragments"]),
            (&Value::from("closed"), &Value::from(UNITS)),
            "{i}"
        );
        assert!(i["problem"].is_null(), "{i}");
    }
}
