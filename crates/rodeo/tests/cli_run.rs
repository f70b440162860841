//! `rodeo run` end to end: the default partition in one process balances, and its files hold
//! exactly the accepted events, each once, read back with the raw-file reader.

use std::collections::HashSet;
use std::time::Duration;

use rodeo_testkit::cli::Running;
use rodeo_testkit::process::{apps_of, find_app};
use rodeo_testkit::{files_under, holds_within, rodeo, wait_for, wait_until};

use rodeo_files::rawfile::RawFileReader;
use rodeo_format::compress::decompress_event;
use rodeo_format::fragment::FullEvent;
use serde_json::Value;

fn run(args: &[&str]) -> Value {
    let out = rodeo!().arg("run").args(args).arg("--json").output();
    assert!(
        out.status.success(),
        "rodeo run failed: {}\n{}",
        out.stderr,
        out.stdout
    );
    serde_json::from_str(&out.stdout).expect("one JSON object")
}

/// Reads every file of the summary; returns the global ids found (panics on a duplicate).
/// Compressed events are decompressed first.
fn global_ids(summary: &Value) -> HashSet<u64> {
    let mut ids = HashSet::new();
    let mut plain = Vec::new();
    for f in summary["files"].as_array().expect("files") {
        let path = f.as_str().unwrap();
        let mut reader = RawFileReader::open(path).unwrap();
        while let Some(event) = reader.next_event() {
            let event = event.unwrap();
            FullEvent::parse(event.words)
                .unwrap()
                .verify_checksum()
                .unwrap();
            decompress_event(event.words, &mut plain).unwrap();
            let e = FullEvent::parse(&plain).unwrap();
            e.verify_checksum().unwrap();
            assert!(e.validate_robs().unwrap() > 0, "an event without ROBs");
            assert!(
                ids.insert(e.global_id()),
                "event {} written twice",
                e.global_id()
            );
        }
    }
    ids
}

#[test]
fn default_partition_balances_and_writes_each_accepted_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let v = run(&["--events", "3000", "--output", dir.path().to_str().unwrap()]);
    assert_eq!(v["balanced"], true, "{v}");
    assert_eq!(v["l1_accepts"], 3000);
    let accepted = v["accepted"].as_u64().unwrap() + v["forced_accepts"].as_u64().unwrap();
    let rejected = v["rejected"].as_u64().unwrap();
    assert_eq!(accepted + rejected, 3000);
    // The default trigger accepts about 10%.
    assert!((150..600).contains(&accepted), "{v}");
    assert_eq!(v["events_written"].as_u64().unwrap(), accepted);
    let ids = global_ids(&v);
    assert_eq!(ids.len() as u64, accepted);
    assert!(ids.iter().all(|&g| g < 3000));
    assert!(v["l1_rate_hz"].as_f64().unwrap() > 0.0);
    assert!(v["seconds"].as_f64().unwrap() > 0.0);
    assert_run_directory_records_the_run(&v);
}

/// The run directory holds the configuration that ran and the balance sheet beside the data
/// files, and no runtime file (socket) is left anywhere under the output directory.
fn assert_run_directory_records_the_run(v: &Value) {
    let run_dir = std::path::Path::new(v["directory"].as_str().unwrap());
    let toml = std::fs::read_to_string(run_dir.join("partition.toml")).expect("partition.toml");
    assert!(
        toml.contains("[ros]"),
        "not a partition configuration: {toml}"
    );
    let record: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("summary.json")).expect("summary.json"))
            .expect("summary.json is JSON");
    assert_eq!(record, *v, "summary.json differs from what --json printed");
    let parent = run_dir.parent().unwrap();
    let mut stack = vec![parent.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                assert!(
                    p.extension().is_none_or(|x| x != "sock"),
                    "a socket file left in the output directory: {}",
                    p.display()
                );
            }
        }
    }
}

#[test]
fn a_configuration_file_and_its_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    std::fs::write(
        &cfg,
        "[l1]\nmode = \"roib\"\nroib_inputs = 3\n[ros]\nnodes = 2\nchannels = 3\n\
         [dcm]\nnodes = 1\nslots = 16\naccept_fraction = 0.5\n[logger]\ncompression = \"zstd\"\n",
    )
    .unwrap();
    let v = run(&[
        "--config",
        cfg.to_str().unwrap(),
        "--events",
        "1000",
        "--output",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(v["balanced"], true, "{v}");
    assert_eq!(v["readout_nodes"].as_array().unwrap().len(), 2);
    assert_eq!(
        global_ids(&v).len() as u64,
        v["events_written"].as_u64().unwrap()
    );

    std::fs::write(&cfg, "[dcm]\nslots = 0\n").unwrap();
    let out = rodeo!()
        .args(["run", "--config", cfg.to_str().unwrap()])
        .output();
    assert!(!out.status.success());
    let err = &out.stderr;
    assert!(
        err.contains("dcm.slots") && err.contains("1..=4096"),
        "{err}"
    );
}

#[test]
fn readout_nodes_fed_by_swrod_fragment_builders() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("swrod.toml");
    std::fs::write(
        &cfg,
        "[ros]\nnodes = 2\nchannels = 2\ninput = \"swrod\"\nelinks = 3\n\
         [dcm]\naccept_fraction = 0.5\n",
    )
    .unwrap();
    let v = run(&[
        "--config",
        cfg.to_str().unwrap(),
        "--events",
        "1000",
        "--output",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(v["balanced"], true, "{v}");
    assert_eq!(v["partial_events"], 0, "{v}");
    let written = v["events_written"].as_u64().unwrap();
    assert!(written > 0, "{v}");
    assert_eq!(global_ids(&v).len() as u64, written);
    let nodes = v["readout_nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    for n in nodes {
        // Each written event holds a fragment of each of the node's two ROBs.
        assert!(n["swrod_built"].as_u64().unwrap() >= 2 * written, "{n}");
        assert!(n["swrod_error"].is_null(), "{n}");
    }
}

#[test]
fn processes_balance_like_the_embedded_run() {
    let dir = tempfile::tempdir().unwrap();
    let v = run(&[
        "--processes",
        "--events",
        "3000",
        "--output",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(v["balanced"], true, "{v}");
    assert_eq!(v["l1_accepts"], 3000);
    let written = v["events_written"].as_u64().unwrap();
    assert_eq!(
        written,
        v["accepted"].as_u64().unwrap() + v["forced_accepts"].as_u64().unwrap()
    );
    assert_eq!(global_ids(&v).len() as u64, written);
    assert_run_directory_records_the_run(&v);
}

#[test]
fn killing_a_dcm_process_loses_no_event() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    std::fs::write(
        &cfg,
        "[l1]\nrate_hz = 4000.0\n[supervisor]\ndcm_timeout_ms = 1000\nevent_timeout_ms = 5000\n\
         [dcm]\nnodes = 2\nslots = 8\naccept_fraction = 0.3\n",
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let child = rodeo!()
        .args([
            "run",
            "--processes",
            "--events",
            "16000",
            "--json",
            // A dead DCM and, on a busy machine, L1 accepts behind the schedule: degraded.
            "--accept-degraded",
            "--config",
        ])
        .arg(&cfg)
        .arg("--output")
        .arg(&out_dir)
        .spawn();
    // Once events are being written (the run is going), kill dcm-1 without warning.
    let marker = out_dir.to_str().unwrap().to_string();
    wait_until("events being written", Duration::from_secs(30), || {
        files_under(&out_dir)
            .iter()
            .any(|p| p.to_string_lossy().contains(".data"))
    });
    let pid = wait_for("dcm-1's process", Duration::from_secs(20), || {
        find_app("dcm-1", &marker)
    });
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let out = child.wait_with_deadline(Duration::from_secs(120));
    assert!(out.status.success(), "{}\n{}", out.stderr, out.stdout);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["balanced"], true, "{v}");
    assert_eq!(v["l1_accepts"], 16000);
    assert!(
        v["forced_accepts"].as_u64().unwrap() > 0,
        "the dead DCM's events came back as forced accepts: {v}"
    );
    let written = v["events_written"].as_u64().unwrap();
    assert_eq!(
        written,
        v["accepted"].as_u64().unwrap() + v["forced_accepts"].as_u64().unwrap()
    );
    assert_eq!(global_ids(&v).len() as u64, written);
    // Not "ok": the run lost a DCM (until 2026-12-03 only a note on stderr said so).
    assert_eq!(v["verdict"], "degraded", "{v}");
    let lost: Vec<&Value> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "dcm_lost")
        .collect();
    assert_eq!(lost.len(), 1, "{v}");
    assert_eq!(lost[0]["where"], "dcm-1", "{v}");
    assert!(
        lost[0]["text"].as_str().unwrap().contains("reassigned"),
        "{v}"
    );
}

/// Starts `rodeo run --processes --seconds 120` in `dir` (the partition of [`start_writing`]
/// with a 1 s `dcm_timeout_ms`) and waits until it writes.
fn partition_writing(
    dir: &std::path::Path,
    dead_after_ms: u64,
) -> (Running, std::path::PathBuf, String) {
    let extra = "[supervisor]\ndcm_timeout_ms = 1000\n";
    start_writing(dir, extra, dead_after_ms, &["--seconds", "120"])
}

/// Starts `rodeo run --processes ARGS` in `dir` (2 kHz, 2 DCMs, heartbeats every 200 ms,
/// applications that walk down after `dead_after_ms` without a word from the controller, plus
/// the TOML `extra`) and waits (bounded) until all five applications run and an event file is
/// complete (events flow end to end). Returns the controller, its output directory and the
/// marker that finds its applications.
fn start_writing(
    dir: &std::path::Path,
    extra: &str,
    dead_after_ms: u64,
    args: &[&str],
) -> (Running, std::path::PathBuf, String) {
    let cfg = dir.join("p.toml");
    std::fs::write(
        &cfg,
        format!(
            "[l1]\nrate_hz = 2000.0\n[dcm]\nnodes = 2\nslots = 8\n[control]\nheartbeat_ms = 200\n\
             dead_after_ms = {dead_after_ms}\n{extra}"
        ),
    )
    .unwrap();
    let out_dir = dir.join("out");
    let child = rodeo!()
        .args(["run", "--processes"])
        .args(args)
        .arg("--config")
        .arg(&cfg)
        .arg("--output")
        .arg(&out_dir)
        .spawn();
    let marker = out_dir.to_str().unwrap().to_string();
    wait_until(
        "the partition up and writing",
        Duration::from_secs(60),
        || {
            apps_of(&marker).len() == 5
                && files_under(&out_dir)
                    .iter()
                    .any(|p| p.to_string_lossy().contains(".data"))
        },
    );
    (child, out_dir, marker)
}

#[test]
fn killing_the_controller_leaves_no_application_running() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, out_dir, marker) = partition_writing(dir.path(), 3000);
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    child.status_with_deadline(Duration::from_secs(30));
    let all_gone = holds_within(Duration::from_secs(5), || apps_of(&marker).is_empty());
    assert!(
        all_gone,
        "applications left 5 s after the controller died: {:?}",
        apps_of(&marker)
    );
    // They stopped in order: the logger closed its files (none left `.writing`).
    let files = files_under(&out_dir);
    assert!(
        files
            .iter()
            .all(|p| !p.to_string_lossy().ends_with(".writing")),
        "{files:?}"
    );
}

#[test]
fn a_frozen_controller_leaves_no_application_running() {
    // SIGSTOP of the controller closes no pipe: the applications must notice its silence
    // (no ping for control.dead_after_ms) and walk themselves down, files closed.
    let dir = tempfile::tempdir().unwrap();
    let dead_after_ms = 1500;
    let (mut child, out_dir, marker) = partition_writing(dir.path(), dead_after_ms);
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) }, 0);
    // dead_after_ms, then the walk-down (the supervisor's drain ends at dcm_timeout_ms of its
    // DCMs' silence), with a margin for a loaded machine.
    let all_gone = holds_within(Duration::from_millis(dead_after_ms + 8_000), || {
        apps_of(&marker).is_empty()
    });
    let left = apps_of(&marker);
    // Clean up whatever the outcome: SIGKILL ends a stopped process too.
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    child.status_with_deadline(Duration::from_secs(30));
    for a in &left {
        // SAFETY: kill(2) on a pid found as this test's partition's application.
        unsafe { libc::kill(a.pid, libc::SIGKILL) };
    }
    assert!(
        all_gone,
        "applications left {dead_after_ms} ms + 8 s after the controller froze: {left:?}"
    );
    // They stopped in order: the logger closed its files (none left `.writing`).
    let files = files_under(&out_dir);
    assert!(
        files
            .iter()
            .all(|p| !p.to_string_lossy().ends_with(".writing")),
        "{files:?}"
    );
    assert!(
        files.iter().any(|p| p.to_string_lossy().ends_with(".data")),
        "{files:?}"
    );
}

#[test]
fn a_machine_frozen_longer_than_dead_after_ends_no_application() {
    // The whole machine stalls (a VM's CPUs held for seconds: the kernel logged a 14.7 s
    // stall on this machine): the controller and every application stop together, for longer
    // than dead_after_ms. The applications come back first, before the controller could ping:
    // their own stall is not the controller's silence, and nobody leaves.
    let dir = tempfile::tempdir().unwrap();
    let args = ["--seconds", "10", "--json"];
    let (child, _out_dir, marker) = start_writing(dir.path(), "", 1500, &args);
    let apps = apps_of(&marker);
    let controller = child.id() as i32;
    let signal_all = |pids: &[i32], sig: i32| {
        for &pid in pids {
            // SAFETY: kill(2) on our own child or one of its applications, valid signal.
            unsafe { libc::kill(pid, sig) };
        }
    };
    let app_pids: Vec<i32> = apps.iter().map(|a| a.pid).collect();
    signal_all(&[controller], libc::SIGSTOP);
    signal_all(&app_pids, libc::SIGSTOP);
    // The freeze is the fault itself: longer than dead_after_ms and than the supervisor's
    // dcm_timeout_ms (3000).
    std::thread::sleep(Duration::from_millis(4000));
    signal_all(&app_pids, libc::SIGCONT);
    // The applications run alone for a while, as a machine's CPUs come back one by one.
    std::thread::sleep(Duration::from_millis(300));
    signal_all(&[controller], libc::SIGCONT);
    let out = child.wait_with_deadline(Duration::from_secs(90));
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", out.stdout, out.stderr));
    assert_eq!(v["balanced"], true, "{v}\n{}", out.stderr);
    assert_eq!(v["restarts"], 0, "{v}\n{}", out.stderr);
    assert!(
        !out.stderr.contains("no message from the controller"),
        "an application judged the controller dead: {}",
        out.stderr
    );
    assert!(out.stderr.contains("was held up"), "{}", out.stderr);
    // Ok, or degraded only because the L1 could not keep its paced rate across the freeze.
    for p in v["problems"].as_array().into_iter().flatten() {
        assert_eq!(p["kind"], "l1_missed", "{v}");
    }
}

/// `rodeo config check FILE [--bind]` on `text`: (success, stdout + stderr).
fn config_check(dir: &std::path::Path, text: &str, bind: bool) -> (bool, String) {
    let cfg = dir.join("check.toml");
    std::fs::write(&cfg, text).unwrap();
    let mut cmd = rodeo!();
    cmd.args(["config", "check"]).arg(&cfg);
    if bind {
        cmd.arg("--bind");
    }
    let out = cmd.output();
    let text = out.text();
    (out.status.success(), text)
}

#[test]
fn config_check_refuses_what_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = format!("[run]\noutput = {:?}\n", out.display().to_string());
    let ok = format!("{run}[transport]\nkind = \"tcp\"\nbase_port = 65533\n");
    let (good, text) = config_check(dir.path(), &ok, false);
    assert!(good, "{text}");
    // It says where the readout's cards write (the default fragments: the store's pages).
    assert!(
        text.contains("readout input: emulated S-LINK cards writing into store pages"),
        "{text}"
    );
    // Three endpoints (logger, readout node, supervisor) from 65535: past the last port.
    for port in [65535, 65534, 0] {
        let bad = format!("{run}[transport]\nkind = \"tcp\"\nbase_port = {port}\n");
        let (good, text) = config_check(dir.path(), &bad, false);
        assert!(!good, "base_port {port} passed: {text}");
        assert!(
            text.contains("transport.base_port") && text.contains("1..=65535"),
            "{text}"
        );
    }
    // inproc never binds ports: any base_port is fine there.
    let (good, text) = config_check(
        dir.path(),
        &format!("{run}[transport]\nbase_port = 0\n"),
        false,
    );
    assert!(good, "{text}");

    // An output path that is a file, or below one.
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    for p in [file.clone(), file.join("below")] {
        let text = format!("[run]\noutput = {:?}\n", p.display().to_string());
        let (good, msg) = config_check(dir.path(), &text, false);
        assert!(!good, "{msg}");
        assert!(
            msg.contains("run.output") && msg.contains("not a directory"),
            "{msg}"
        );
    }

    // A free-space margin no output directory has: refused by `config check`, and by
    // `rodeo run` before it opens its output directory (no run number, no process started).
    let greedy = format!("{run}[logger]\nmin_free_bytes = 9223372036854775807\n");
    let (good, msg) = config_check(dir.path(), &greedy, false);
    assert!(!good, "{msg}");
    assert!(
        msg.contains("logger.min_free_bytes") && msg.contains("bytes free of"),
        "{msg}"
    );
    let cfg = dir.path().join("greedy.toml");
    std::fs::write(&cfg, &greedy).unwrap();
    let o = rodeo!()
        .args(["run", "--events", "1000", "--config"])
        .arg(&cfg)
        .output();
    assert!(!o.status.success(), "{}", o.text());
    assert!(o.stderr.contains("logger.min_free_bytes"), "{}", o.text());
    assert!(!out.exists(), "{}", o.text());
    // What only `--processes` cannot run (the data-driven L1 reads the readout nodes in the
    // supervisor's process): refused before the output directory is opened too (until
    // 2026-12-03 it was left with `runs.sqlite` and its lock).
    let cfg = dir.path().join("readout.toml");
    std::fs::write(&cfg, format!("{run}[l1]\nmode = \"readout\"\n")).unwrap();
    let o = rodeo!()
        .args(["run", "--processes", "--events", "1000", "--config"])
        .arg(&cfg)
        .output();
    assert!(!o.status.success(), "{}", o.text());
    assert!(o.stderr.contains("without --processes"), "{}", o.text());
    assert!(!out.exists(), "{}", o.text());

    // --bind: a port held by someone else is named.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    // The logger binds base_port; the readout node and the supervisor the next two.
    let text = format!("{run}[transport]\nkind = \"tcp\"\nbase_port = {port}\n");
    let (good, msg) = config_check(dir.path(), &text, true);
    assert!(!good, "{msg}");
    assert!(
        msg.contains(&format!("logger-1: tcp://127.0.0.1:{port}: FAILS")),
        "{msg}"
    );
    drop(held);
    // The same ports free: every endpoint binds (a free range found by asking the kernel).
    let free = (0..50)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        })
        .find(|&p| {
            p < 65000 && (1..3).all(|i| std::net::TcpListener::bind(("127.0.0.1", p + i)).is_ok())
        })
        .expect("no three free consecutive ports");
    let text = format!("{run}[transport]\nkind = \"tcp\"\nbase_port = {free}\n");
    let (good, msg) = config_check(dir.path(), &text, true);
    assert!(good, "{msg}");
    assert_eq!(msg.matches(": binds").count(), 3, "{msg}");
}

/// What `--processes` refuses (the data-driven L1 in its own process) is a warning of `config
/// check`, an error of `config check --processes`, and the same refusal from `run
/// --processes`: the check refuses what the run would (it passed without a word, 2026-12-07).
#[test]
fn config_check_processes_refuses_what_a_processes_run_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let text = format!(
        "[run]\noutput = {:?}\nevents = 1000\n[l1]\nmode = \"readout\"\n",
        out.display().to_string()
    );
    let cfg = dir.path().join("readout.toml");
    std::fs::write(&cfg, &text).unwrap();
    let plain = rodeo!().args(["config", "check"]).arg(&cfg).output();
    assert!(plain.status.success(), "{}", plain.text());
    assert!(
        plain
            .stderr
            .contains("warning: refused with --processes (run or serve): l1.mode = \"readout\""),
        "{}",
        plain.text()
    );
    let checked = rodeo!()
        .args(["config", "check", "--processes"])
        .arg(&cfg)
        .output();
    assert_eq!(checked.status.code(), Some(2), "{}", checked.text());
    assert!(
        checked.stderr.contains("error: l1.mode = \"readout\""),
        "{}",
        checked.text()
    );
    let run = rodeo!()
        .args(["run", "--processes", "-q", "--config"])
        .arg(&cfg)
        .output();
    assert!(!run.status.success(), "{}", run.text());
    assert!(
        run.stderr.contains("l1.mode = \"readout\""),
        "{}",
        run.text()
    );
    assert!(!out.exists(), "a refused run left its output directory");
    // The default partition passes both ways, its estimate as processes with the flag.
    let default = dir.path().join("default.toml");
    let d = rodeo!().args(["config", "default"]).output();
    std::fs::write(&default, &d.stdout).unwrap();
    let ok = rodeo!()
        .args(["config", "check", "--processes"])
        .arg(&default)
        .output();
    assert!(ok.status.success(), "{}", ok.text());
    assert!(!ok.text().contains("(one process)"), "{}", ok.text());
    // With [hosts], which only --processes runs, its refusal is an error without the flag.
    let hosts = format!("{text}[transport]\nkind = \"tcp\"\n[hosts]\n\"dcm-1\" = \"10.9.9.9\"\n");
    std::fs::write(&cfg, &hosts).unwrap();
    let o = rodeo!().args(["config", "check"]).arg(&cfg).output();
    assert_eq!(o.status.code(), Some(2), "{}", o.text());
    assert!(
        o.stderr
            .contains("error: [hosts] is run with --processes only, which refuses: l1.mode"),
        "{}",
        o.text()
    );
    // A file list the input does not read: said (the run took emulated data, "ok").
    let unread = format!(
        "[run]\noutput = {:?}\nevents = 1000\n[ros]\ninput = \"swrod\"\nlink_files = [\"/etc/hostname\"]\n",
        out.display().to_string()
    );
    std::fs::write(&cfg, &unread).unwrap();
    let o = rodeo!().args(["config", "check"]).arg(&cfg).output();
    assert!(o.status.success(), "{}", o.text());
    assert!(
        o.stderr.contains(
            "warning: ros.link_files lists 1 entry that ros.input = \"swrod\" does not read"
        ),
        "{}",
        o.text()
    );
}

#[test]
fn config_check_names_every_error_on_its_own_line_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = format!("[run]\noutput = {:?}\n", out.display().to_string());
    // Values out of range: every one named, one line each, exit status 2.
    let text = format!(
        "{run}[ros]\nfragment_words = 65536\n[dcm]\nprocessing_us = 1e300\nnodes = 60\n\
         slots = 4096\n[[alarms]]\nname = \"lost\"\nmetric = \"rodeo_lost_total\"\nabove = 0.0\n"
    );
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, &text).unwrap();
    let o = rodeo!().args(["config", "check"]).arg(&cfg).output();
    let err = &o.stderr;
    assert_eq!(o.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("rodeo: error:"))
        .collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(lines[0].contains("`dcm.processing_us` = 1e300"), "{err}");
    assert!(
        lines[1].contains("`ros.fragment_words` = 65536") && lines[1].contains("at most 65521"),
        "{err}"
    );
    assert!(lines[2].contains("`alarms.metric`"), "{err}");
    assert!(err.contains("refused, 3 errors"), "{err}");
    // The in-flight check waits for valid values; fixed, it is named.
    let (good, msg) = config_check(
        dir.path(),
        &format!("{run}[dcm]\nnodes = 60\nslots = 4096\n"),
        false,
    );
    assert!(!good && msg.contains("events in flight"), "{msg}");
    // Types in words, with the line.
    let (good, msg) = config_check(dir.path(), "[dcm]\nslots = -1\nnodes = \"two\"\n", false);
    assert!(!good, "{msg}");
    assert!(
        msg.contains("line 2: `dcm.slots` = -1: a whole number >= 0 is needed")
            && msg.contains("line 3: `dcm.nodes` = \"two\": a whole number >= 0 is needed"),
        "{msg}"
    );
    assert!(!msg.contains("usize"), "{msg}");

    // --bind tries the network input's addresses too: a held port is named.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let text = format!(
        "{run}[ros]\nchannels = 1\ninput = \"network\"\nlisten = [\"tcp://127.0.0.1:{port}\"]\n"
    );
    let (good, msg) = config_check(dir.path(), &text, false);
    assert!(good, "{msg}");
    let (good, msg) = config_check(dir.path(), &text, true);
    assert!(!good, "{msg}");
    assert!(
        msg.contains(&format!(
            "ros.listen[0] (ros-1): tcp://127.0.0.1:{port}: FAILS"
        )),
        "{msg}"
    );
    drop(held);
    let (good, msg) = config_check(dir.path(), &text, true);
    assert!(good, "{msg}");
    // Port 99999 is refused before anything is bound.
    let (good, msg) = config_check(dir.path(), &text.replace(&port.to_string(), "99999"), true);
    assert!(
        !good && msg.contains("port 99999 is outside 1..=65535"),
        "{msg}"
    );
}

#[test]
fn sigint_stops_a_single_process_run_in_order_with_its_balance_sheet() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let cfg = dir.path().join("p.toml");
    std::fs::write(&cfg, "[l1]\nrate_hz = 5000.0\n").unwrap();
    let child = rodeo!()
        .args(["run", "--accept-degraded", "--seconds", "30", "--json"])
        .arg("--config")
        .arg(&cfg)
        .arg("--output")
        .arg(&out_dir)
        .spawn();
    // Wait (bounded) until events are being written, then interrupt.
    wait_until("a file being written", Duration::from_secs(30), || {
        files_under(&out_dir)
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".writing"))
    });
    let interrupted = std::time::Instant::now();
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    // The same request delivered again at once, as `timeout` does (the process, then its
    // process group): not an operator's second interrupt, which aborts (it did: no sheet).
    std::thread::sleep(Duration::from_millis(50));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_deadline(Duration::from_secs(60));
    let took = interrupted.elapsed();
    assert!(out.status.success(), "{:?}: {}", out.status, out.stderr);
    assert!(
        took < std::time::Duration::from_secs(15),
        "stop took {took:?}"
    );
    let v: Value = serde_json::from_str(&out.stdout).expect("the balance sheet as JSON");
    assert_eq!(v["balanced"], true, "{v}");
    // Ok, or degraded only because a busy machine held the paced L1 back.
    for p in v["problems"].as_array().into_iter().flatten() {
        assert_eq!(p["kind"], "l1_missed", "{v}");
    }
    assert!(v["seconds"].as_f64().unwrap() < 29.0, "{v}");
    // Not a fault, but a run shorter than its 30 s: the sheet says so.
    assert_eq!(v["stopped_early"], true, "{v}");
    assert_eq!(v["events_verified"], v["events_written"]);
    let files = files_under(&out_dir);
    assert!(
        files
            .iter()
            .all(|p| !p.to_string_lossy().ends_with(".writing")),
        "{files:?}"
    );
    assert!(files
        .iter()
        .any(|p| p.to_string_lossy().ends_with("summary.json")));
    assert!(out.stderr.contains("interrupted"));
}

#[test]
fn a_run_number_that_exists_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("run-00000001")).unwrap();
    let t0 = std::time::Instant::now();
    let out = rodeo!()
        .args(["run", "--seconds", "20", "--run-number", "1", "--output"])
        .arg(dir.path())
        .output();
    assert!(!out.status.success());
    let err = &out.stderr;
    assert!(
        err.contains("already exists") && err.contains("next free number (2)"),
        "{err}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(10),
        "it ran first"
    );
    // A recorded run whose directory is gone: its number is refused too (the new run
    // replaced its record in the run database without a word).
    let run = |n: Option<&str>| {
        let mut c = rodeo!();
        c.args(["run", "--events", "500", "--quiet", "--output"])
            .arg(dir.path());
        if let Some(n) = n {
            c.args(["--run-number", n]);
        }
        c.output()
    };
    run(None).assert_success();
    std::fs::remove_dir_all(dir.path().join("run-00000002")).unwrap();
    let out = run(Some("2"));
    assert_eq!(out.status.code(), Some(1), "{}", out.text());
    assert!(
        out.stderr.contains("run 2 is recorded in") && out.stderr.contains("next free number (3)"),
        "{}",
        out.text()
    );
    // With the largest number taken, a free number below it is still taken when given (every
    // --run-number was refused for want of a next one).
    run(Some("4294967295")).assert_success();
    run(Some("5")).assert_success();
}

/// `rodeo runs` on an empty run database says so and leaves the file as it is (it wrote the
/// schema into it).
#[test]
fn listing_an_empty_run_database_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite");
    std::fs::write(&db, b"").unwrap();
    let out = rodeo!()
        .args(["runs", "--json", "--output"])
        .arg(dir.path())
        .output();
    assert!(!out.status.success(), "{}", out.text());
    assert!(out.stderr.contains("is empty (0 bytes)"), "{}", out.text());
    let v: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.text()));
    assert!(v["error"].as_str().unwrap().contains("empty"), "{v}");
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0);
}

/// The number after `key` in `line` (`"... 88.2 kHz ..."` with key `" kHz"`: 88.2).
fn number_before(line: &str, key: &str) -> f64 {
    let end = line
        .find(key)
        .unwrap_or_else(|| panic!("{key:?} in {line:?}"));
    let start = line[..end]
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |i| i + 1);
    line[start..end]
        .parse()
        .unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

#[test]
fn the_text_sheet_says_verified_only_for_files_read_back_and_each_rate_with_its_time() {
    let dir = tempfile::tempdir().unwrap();
    for (verify_after, word) in [
        (false, "checked as written"),
        (true, "read back and verified"),
    ] {
        let out_dir = dir.path().join(format!("out-{verify_after}"));
        let mut cmd = rodeo!();
        cmd.args(["run", "--events", "20000", "--quiet", "--output"])
            .arg(&out_dir);
        if verify_after {
            cmd.arg("--verify-after");
        }
        let out = cmd.output();
        out.assert_success();
        let text = &out.stdout;
        let written = text
            .lines()
            .find(|l| l.trim_start().starts_with("written:"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(written.contains(word), "{written}");
        if !verify_after {
            assert!(!text.contains("verified"), "{text}");
        }
        // "L1: N accepts, R kHz over the T s from the first to the last...": R = (N - 1) / T.
        let l1 = text
            .lines()
            .find(|l| l.trim_start().starts_with("L1:"))
            .unwrap_or_else(|| panic!("{text}"));
        let n = number_before(l1, " accepts");
        let rate = number_before(l1, " kHz over") * 1e3;
        let span = number_before(l1, " s from the first");
        let expected = (n - 1.0) / span;
        // Both printed rounded (0.1 kHz, 0.01 s): agree within that.
        assert!(
            (rate - expected).abs() <= 50.0 + expected * 0.006 / span.max(0.01),
            "{l1}: {rate} Hz against {expected} Hz"
        );
        assert!(text.trim_end().ends_with("verdict: OK"), "{text}");
    }
}

/// A note added to a run after the fact is listed with it; a reader that went away (`rodeo
/// runs | head -1`, a pager quit early) ends the listing commands quietly with exit 0: never a
/// panic on a closed pipe.
#[test]
fn runs_take_notes_and_a_closed_pipe_ends_the_listings_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    rodeo!()
        .args(["run", "--events", "200", "--json", "--output"])
        .arg(&out_dir)
        .output()
        .assert_success();
    let out_arg = out_dir.to_str().unwrap();
    rodeo!()
        .args([
            "runs",
            "--output",
            out_arg,
            "note",
            "1",
            "beam lost",
            "at 3 s",
        ])
        .output()
        .assert_success();
    let missing = rodeo!()
        .args(["runs", "note", "99", "no such run", "--output", out_arg])
        .output();
    assert_eq!(missing.status.code(), Some(2), "{}", missing.text());
    assert!(missing.stderr.contains("no run 99"), "{}", missing.text());
    let listed = rodeo!()
        .args(["runs", "--json", "--output", out_arg])
        .output();
    let v: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(
        v["runs"][0]["comments"][0]["text"], "beam lost at 3 s",
        "{v}"
    );
    let table = rodeo!().args(["runs", "--output", out_arg]).output();
    assert!(
        table.stdout.contains("(beam lost at 3 s)"),
        "{}",
        table.stdout
    );
    for args in [
        vec!["runs", "--output", out_arg],
        vec!["runs", "--json", "--output", out_arg],
        vec!["config", "default"],
        vec!["info"],
    ] {
        // The pipe's reader is closed before rodeo writes: its first write fails (EPIPE).
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(rodeo_testkit::rodeo_bin!())
            .args(&args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "rodeo {args:?}: {err}");
        assert!(!err.contains("panicked"), "rodeo {args:?}: {err}");
    }
    // And as a shell runs it, with head reading one line.
    let shell = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; '{}' runs --output '{out_arg}' | head -1",
            rodeo_testkit::rodeo_bin!()
        ))
        .output()
        .unwrap();
    assert!(shell.status.success(), "{shell:?}");
    assert!(String::from_utf8_lossy(&shell.stdout).starts_with("   run  verdict"));
}
