//! `rodeo run --http` and `rodeo serve` end to end (the issue's acceptance check, shortened):
//! a real `rodeo run` process serves RUNNING status and metrics, refuses a stop without the
//! token, stops cleanly with it, balances, and writes its `--trace`; served runs without an end
//! condition last until `stop`.

use rodeo_testkit::http::request as http;
use std::net::SocketAddr;
use std::time::Duration;

use rodeo_testkit::cli::Running;
use rodeo_testkit::{rodeo, wait_for};
use serde_json::Value;

#[test]
fn run_http_serves_status_and_metrics_and_stops_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let (child, addr) = spawn_with_http(
        &[
            "run",
            "--accept-degraded",
            "--seconds",
            "300",
            "--rate",
            "5000",
            "--http",
            "127.0.0.1:0",
            "--json",
            "--trace-every",
            "50",
            "--output",
            dir.path().to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ],
        "secret-1",
    );
    let status = wait_for("RUNNING with events", Duration::from_secs(60), || {
        let (code, body) = http(addr, "GET", "/api/status", None, "");
        assert_eq!(code, 200);
        let v: Value = serde_json::from_str(&body).unwrap();
        (v["state"] == "RUNNING" && v["events_written"].as_u64() > Some(0)).then_some(v)
    });
    assert_eq!(status["run_number"], 1);
    let (code, metrics) = http(addr, "GET", "/metrics", None, "");
    assert_eq!(code, 200);
    let samples: Vec<&str> = metrics
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(samples.len() >= 20, "{} samples", samples.len());
    assert!(samples
        .iter()
        .any(|l| l.starts_with("rodeo_dcm_events_total{")));
    assert!(samples
        .iter()
        .any(|l| l.starts_with("rodeo_event_build_latency_seconds_bucket{")));
    assert!(samples
        .iter()
        .any(|l| l.starts_with("rodeo_file_bytes_written_total{")));

    let stop = r#"{"command":"stop"}"#;
    assert_eq!(http(addr, "POST", "/api/command", None, stop).0, 401);
    assert_eq!(
        http(addr, "POST", "/api/command", Some("secret-2"), stop).0,
        401
    );
    let (code, body) = http(addr, "POST", "/api/command", Some("secret-1"), stop);
    assert_eq!(code, 200, "{body}");

    // The run goes down and ends by itself, balanced.
    let summary = wait_for_summary(child);
    assert_eq!(summary["balanced"], true, "{summary}");
    assert!(
        summary["seconds"].as_f64().unwrap() < 290.0,
        "stopped by HTTP, not by time"
    );

    // The trace: stage instants of sampled events (multiples of 50), and spans.
    let t: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().unwrap();
    for stage in [
        "l1_accept",
        "assigned",
        "request_sent",
        "request_answered",
        "decided",
        "done",
    ] {
        assert!(
            events.iter().any(|e| e["name"] == stage),
            "no {stage} in the trace"
        );
    }
    assert!(events
        .iter()
        .filter(|e| e["ph"] == "i")
        .all(|e| e["args"]["global_id"].as_u64().unwrap() % 50 == 0));
    assert!(events.iter().any(|e| e["ph"] == "b"));
}

#[test]
fn control_log_sets_per_module_levels_and_rodeo_log_wins() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    let run = |log: &str, env: Option<&str>| {
        std::fs::write(
            &cfg,
            format!("[run]\nevents = 2000\n[control]\nlog = \"{log}\"\n"),
        )
        .unwrap();
        let mut c = rodeo!();
        c.args(["run", "--json", "--config"])
            .arg(&cfg)
            .arg("--output")
            .arg(dir.path());
        c.env_remove("RODEO_LOG");
        if let Some(e) = env {
            c.env("RODEO_LOG", e);
        }
        c.output()
    };
    let out = run("warn,rodeo_control=info", None);
    assert!(out.status.success());
    let err = &out.stderr;
    assert!(
        err.contains("partition command") && err.contains("run started"),
        "{err}"
    );
    // stderr is a pipe here: log lines carry no colour codes.
    assert!(
        !out.stderr.contains('\x1b'),
        "an escape byte in a log written to a pipe: {err}"
    );
    // RODEO_LOG wins over the configuration.
    let out = run("warn,rodeo_control=info", Some("error"));
    assert!(out.status.success());
    assert!(!out.stderr.contains("partition command"));
    // A bad filter is an error naming the field.
    let out = run("rodeo_control=loud", None);
    assert!(!out.status.success());
    assert!(out.stderr.contains("control.log"));
}

/// Waits (bounded) for `rodeo run --accept-degraded` to end after a stop; checks it succeeded,
/// that its only problem, if any, is L1 accepts that fell behind the paced rate (a debug build
/// beside other tests on two cores may miss some; these tests are about the controller), and
/// returns its JSON summary.
fn wait_for_summary(child: Running) -> Value {
    let out = child.wait_with_deadline(Duration::from_secs(120));
    let exit = out.status;
    let out = out.stdout;
    assert!(exit.success(), "{out}");
    let summary: Value = serde_json::from_str(out.trim()).unwrap();
    for p in summary["problems"].as_array().into_iter().flatten() {
        assert_eq!(p["kind"], "l1_missed", "{summary}");
    }
    summary
}

/// Starts `rodeo ARGS` with RODEO_TOKEN set; returns the child and the HTTP address it printed.
fn spawn_with_http(args: &[&str], token: &str) -> (Running, SocketAddr) {
    let child = rodeo!()
        .args(args)
        .env("RODEO_TOKEN", token)
        .echo_stderr()
        .spawn();
    let addr = child.http_address(Duration::from_secs(60));
    (child, addr)
}

#[test]
fn processes_mode_serves_the_controller_and_stops_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let (child, addr) = spawn_with_http(
        &[
            "run",
            "--accept-degraded",
            "--processes",
            "--seconds",
            "300",
            "--rate",
            "5000",
            "--http",
            "127.0.0.1:0",
            "--json",
            "--output",
            out_dir,
        ],
        "proc-token",
    );
    let status = wait_for("RUNNING with L1 accepts", Duration::from_secs(60), || {
        let (code, body) = http(addr, "GET", "/api/status", None, "");
        assert_eq!(code, 200);
        let v: Value = serde_json::from_str(&body).unwrap();
        (v["state"] == "RUNNING" && v["l1_accepts"].as_u64() > Some(0)).then_some(v)
    });
    // Every application is a process with its own pid and heartbeat.
    let apps = status["apps"].as_array().unwrap();
    assert!(apps.len() >= 4, "{status}");
    assert!(apps.iter().all(|a| a["pid"].as_u64().is_some()), "{status}");
    assert!(apps.iter().all(|a| a["state"] == "RUNNING"), "{status}");
    let (code, metrics) = http(addr, "GET", "/metrics", None, "");
    assert_eq!(code, 200);
    assert!(metrics.contains("# TYPE "), "{metrics}");

    let stop = r#"{"command":"stop"}"#;
    assert_eq!(http(addr, "POST", "/api/command", None, stop).0, 401);
    let (code, body) = http(addr, "POST", "/api/command", Some("proc-token"), stop);
    assert_eq!(code, 200, "{body}");
    let summary = wait_for_summary(child);
    assert_eq!(summary["balanced"], true, "{summary}");
    assert!(summary["seconds"].as_f64().unwrap() < 290.0);
}

fn rodeo_json(args: &[&str]) -> Value {
    let out = rodeo!().args(args).output();
    assert!(out.status.success(), "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

#[test]
fn every_run_is_recorded_in_the_run_database_and_served_at_api_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let first = rodeo_json(&["run", "--events", "2000", "--output", out_dir, "--json"]);
    assert_eq!(first["run_number"], 1);
    // A run directory that a crash left without a record: found, verified, recorded.
    std::fs::create_dir(dir.path().join("run-00000005")).unwrap();
    // A second run serves the database over HTTP while it runs; it takes number 6.
    let (child, addr) = spawn_with_http(
        &[
            "run",
            "--accept-degraded",
            "--seconds",
            "300",
            "--rate",
            "2000",
            "--http",
            "127.0.0.1:0",
            "--output",
            out_dir,
            "--json",
        ],
        "tok",
    );
    let (code, body) = http(addr, "GET", "/api/runs", None, "");
    assert_eq!(code, 200, "{body}");
    let served: Value = serde_json::from_str(&body).unwrap();
    let numbers: Vec<u64> = served["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![5, 1], "newest first: {served}");
    assert_eq!(served["runs"][0]["status"], "crashed");
    assert_eq!(served["runs"][1]["status"], "ok");
    assert_eq!(served["runs"][1]["l1_accepts"], 2000);
    let files = served["runs"][1]["files"].as_array().unwrap();
    assert!(!files.is_empty());
    assert!(files.iter().all(|f| f["size_bytes"].as_u64().unwrap() > 0));
    // The records (the logger's sums, the files not read back) are those of the bytes on disk.
    for f in files {
        let bytes = std::fs::read(f["path"].as_str().unwrap()).unwrap();
        assert_eq!(f["size_bytes"].as_u64(), Some(bytes.len() as u64), "{f}");
        let sum = rodeo_format::checksum::adler32(rodeo_format::checksum::ADLER32_INIT, &bytes);
        assert_eq!(f["adler32"].as_u64(), Some(u64::from(sum)), "{f}");
    }
    let (code, one) = http(addr, "GET", "/api/runs/1", None, "");
    assert_eq!(code, 200);
    let one: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(one["summary"]["events_written"], first["events_written"]);
    assert!(one["config_toml"].as_str().unwrap().contains("[l1]"));
    assert_eq!(http(addr, "GET", "/api/runs/99", None, "").0, 404);
    let (code, body) = http(addr, "GET", "/api/runs/4294967296", None, "");
    assert_eq!(code, 400);
    assert!(body.contains("from 0 to 4294967295"), "{body}");
    // Stop the second run once it runs; it is recorded too, and the CLI agrees with the API.
    // With its first L1 accepts: a run stopped before any is degraded (`no_events`).
    wait_for("the second run RUNNING", Duration::from_secs(60), || {
        let (_, body) = http(addr, "GET", "/api/status", None, "");
        let v: Value = serde_json::from_str(&body).unwrap();
        (v["state"] == "RUNNING" && v["l1_accepts"].as_u64() > Some(0)).then_some(())
    });
    let (code, _) = http(
        addr,
        "POST",
        "/api/command",
        Some("tok"),
        r#"{"command":"stop"}"#,
    );
    assert_eq!(code, 200);
    let second = wait_for_summary(child);
    assert_eq!(second["run_number"], 6);
    let listed = rodeo_json(&["runs", "--output", out_dir, "--json"]);
    let runs = listed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["run_number"], 6);
    assert_eq!(runs[0]["balanced"], true);
    assert_eq!(runs[1..], served["runs"].as_array().unwrap()[..]);
}

#[test]
fn serve_runs_many_runs_with_consecutive_numbers_and_goes_on_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let cfg = dir.path().join("p.toml");
    std::fs::write(
        &cfg,
        "[run]\nevents = 0\nseconds = 0\n[l1]\nrate_hz = 3000.0\n",
    )
    .unwrap();
    // No end condition: refused for a run nobody can stop, accepted for a served one.
    let check = rodeo!().args(["config", "check"]).arg(&cfg).output();
    assert_eq!(check.status.code(), Some(2), "{}", check.text());
    assert!(check.stderr.contains("until stop"), "{}", check.text());
    rodeo!()
        .args(["config", "check", "--served"])
        .arg(&cfg)
        .output()
        .assert_success();
    let cfg = cfg.to_str().unwrap();
    let serve = |expect_first: u64| {
        let (child, addr) = spawn_with_http(
            &[
                "serve",
                "--config",
                cfg,
                "--output",
                out_dir,
                "--http",
                "127.0.0.1:0",
            ],
            "tok",
        );
        for i in 0..3u64 {
            let (code, body) = http(
                addr,
                "POST",
                "/api/command",
                Some("tok"),
                r#"{"command":"start"}"#,
            );
            assert_eq!(code, 200, "start {i}: {body}");
            // Wait (bounded) until events flow, then stop.
            let st = wait_for("events flowing", Duration::from_secs(30), || {
                let (_, st) = http(addr, "GET", "/api/status", None, "");
                let st: Value = serde_json::from_str(&st).unwrap();
                (st["l1_accepts"].as_u64().unwrap_or(0) > 100).then_some(st)
            });
            assert_eq!(st["run_number"], expect_first + i, "{st}");
            if i == 0 {
                // Runs until stop: still RUNNING, and taking events, a second later.
                let l1 = st["l1_accepts"].as_u64().unwrap();
                let ended = rodeo_testkit::holds_within(Duration::from_secs(1), || {
                    let (_, now) = http(addr, "GET", "/api/status", None, "");
                    let now: Value = serde_json::from_str(&now).unwrap();
                    now["state"] != "RUNNING"
                });
                assert!(!ended, "a run without an end condition ended by itself");
                let (_, now) = http(addr, "GET", "/api/status", None, "");
                let now: Value = serde_json::from_str(&now).unwrap();
                assert!(now["l1_accepts"].as_u64().unwrap() > l1, "{now}");
            }
            let (code, body) = http(
                addr,
                "POST",
                "/api/command",
                Some("tok"),
                r#"{"command":"stop"}"#,
            );
            assert_eq!(code, 200, "stop {i}: {body}");
            assert!(body.contains("CONNECTED"), "{body}");
        }
        // The same from another shell: `rodeo ctl`.
        let url = format!("http://{addr}");
        let st = rodeo_json(&["ctl", "status", "--url", &url, "--json"]);
        assert_eq!(st["state"], "CONNECTED", "{st}");
        assert_eq!(st["run_number"], expect_first + 3);
        let runs = rodeo_json(&["ctl", "runs", "--url", &url, "--json"]);
        let refused = rodeo!()
            .args(["ctl", "start", "--url", &url, "--token", "wrong"])
            .output();
        assert!(!refused.status.success());
        // SIGTERM: down in order, exit 0.
        // SAFETY: kill(2) on our own child's pid with a valid signal number.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let mut child = child;
        let status = wait_for("serve to end", Duration::from_secs(30), || {
            child.try_wait().unwrap()
        });
        assert!(status.success(), "{status}");
        runs
    };
    let first = serve(1);
    let numbers: Vec<u64> = first["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![3, 2, 1]);
    assert!(first["runs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["balanced"] == true && r["status"] == "ok"));
    // A new service on the same directory goes on from run 4 (the run the first one had
    // prepared when it was stopped was never started: not a run, its directory removed).
    let second = serve(4);
    assert_eq!(second["runs"][0]["run_number"], 6, "{second}");
    let listed = rodeo_json(&["runs", "--output", out_dir, "--json"]);
    let numbers: Vec<u64> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![6, 5, 4, 3, 2, 1]);
    assert_eq!(
        listed["runs"].as_array().unwrap()[..3],
        second["runs"].as_array().unwrap()[..3]
    );
}

/// A service whose next run cannot be prepared (its link capture gone when the run ended)
/// waits in NONE holding the next number, says why (status, a refused start), and `PUT
/// /api/config` prepares that number once the capture is back, or the next free one when
/// something made its directory meanwhile. It held the ended run's number, so the PUT prepared run 1 again, refused
/// ("the run directory ... already exists"), and only `shutdown` got out (a QA pass).
#[test]
fn a_next_run_that_cannot_be_prepared_leaves_its_number_to_the_next_put() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("link0.bin");
    rodeo!()
        .args(["gen", "link", "--mode", "slink", "--units", "20000"])
        .args(["--source-id", &0x0051_0000u32.to_string(), "-o"])
        .arg(&capture)
        .output()
        .assert_success();
    // Served until stop, the L1 emulator at 1 kHz: the capture lasts 20 s.
    let toml = format!(
        "[run]\nevents = 0\nseconds = 0\n[l1]\nrate_hz = 1000.0\n\
         [ros]\nnodes = 1\nchannels = 1\ninput = \"file\"\nlink_files = [{:?}]\n",
        capture.to_str().unwrap()
    );
    let cfg = dir.path().join("p.toml");
    std::fs::write(&cfg, &toml).unwrap();
    let out_dir = dir.path().join("out");
    let child = rodeo!()
        .args(["serve", "--config", cfg.to_str().unwrap(), "--output"])
        .arg(&out_dir)
        .args(["--http", "127.0.0.1:0"])
        .env("RODEO_TOKEN", "tok")
        .env("RODEO_EXPERT_TOKEN", "tok-expert")
        .echo_stderr()
        .spawn();
    let addr = child.http_address(Duration::from_secs(60));
    let status = || -> Value {
        let (_, st) = http(addr, "GET", "/api/status", None, "");
        serde_json::from_str(&st).unwrap()
    };
    let command = |c: &str| {
        http(
            addr,
            "POST",
            "/api/command",
            Some("tok"),
            &format!("{{\"command\":\"{c}\"}}"),
        )
    };
    assert_eq!(command("start").0, 200);
    wait_for("events flowing", Duration::from_secs(30), || {
        (status()["l1_accepts"].as_u64().unwrap_or(0) > 50).then_some(())
    });
    let kept = std::fs::read(&capture).unwrap();
    std::fs::remove_file(&capture).unwrap();
    // The stop ends run 1 and fails to prepare run 2 (its capture is gone).
    let (code, body) = command("stop");
    assert_ne!(code, 200, "{body}");
    assert!(body.contains("link0.bin"), "{body}");
    let st = status();
    assert_eq!(st["state"], "NONE", "{st}");
    assert_eq!(st["run_number"], 2, "{st}");
    // Why is in the status (it was on the service's stderr only, the ended run's applications
    // and counts shown under the new number) and in a refused start.
    assert!(
        st["error"]
            .as_str()
            .unwrap_or("")
            .contains("could not be prepared"),
        "{st}"
    );
    assert_eq!(st["apps"].as_array().map(Vec::len), Some(0), "{st}");
    assert_eq!(st["l1_accepts"], 0, "{st}");
    let (code, body) = command("start");
    assert_ne!(code, 200, "{body}");
    assert!(body.contains("could not be prepared"), "{body}");
    std::fs::write(&capture, kept).unwrap();
    // Something makes run 2's directory meanwhile: the PUT takes the next free number (every
    // PUT failed, "run 2 was taken before").
    std::fs::create_dir(out_dir.join("run-00000002")).unwrap();
    let (code, body) = http(addr, "PUT", "/api/config", Some("tok-expert"), &toml);
    assert_eq!(code, 200, "{body}");
    let st = status();
    assert_eq!(st["state"], "CONNECTED", "{st}");
    assert_eq!(st["run_number"], 3, "{st}");
    assert_eq!(st["error"], Value::Null, "{st}");
    assert_eq!(command("start").0, 200);
    assert_eq!(status()["run_number"], 3);
    assert_eq!(command("stop").0, 200);
    assert_eq!(command("shutdown").0, 200);
    let out = child.wait_with_deadline(Duration::from_secs(30));
    assert!(out.status.success(), "{}", out.stderr);
    // Run 4, prepared and shut down unstarted, lost nothing: its capture's read-ahead is no
    // "never stored" warning (it was, at every shutdown of a served link-file partition).
    let after_last_stop = out.stderr.rsplit("run 3").next().unwrap_or("");
    assert!(
        !after_last_stop.contains("were never stored"),
        "{}",
        out.stderr
    );
    let runs = rodeo_json(&["runs", "--output", out_dir.to_str().unwrap(), "--json"]);
    let numbers: Vec<u64> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_number"].as_u64().unwrap())
        .collect();
    // Run 2's directory was made by something else: no run of the service.
    assert_eq!(numbers, vec![3, 1], "{runs}");
}

/// `PUT /api/config` to `serve --processes` with what that mode refuses (the data-driven L1
/// in its own process) is a bad request, 400 with the reason, the partition untouched: it was
/// a 500 "configure failed in serve" after the prepared run had been given up (a QA pass).
#[test]
fn a_put_that_processes_mode_refuses_is_a_bad_request() {
    let dir = tempfile::tempdir().unwrap();
    let toml = "[run]\nevents = 0\nseconds = 0\n[l1]\nrate_hz = 1000.0\n";
    let cfg = dir.path().join("p.toml");
    std::fs::write(&cfg, toml).unwrap();
    let out_dir = dir.path().join("out");
    let child = rodeo!()
        .args([
            "serve",
            "--processes",
            "--config",
            cfg.to_str().unwrap(),
            "--output",
        ])
        .arg(&out_dir)
        .args(["--http", "127.0.0.1:0"])
        .env("RODEO_TOKEN", "tok")
        .env("RODEO_EXPERT_TOKEN", "tok-expert")
        .spawn();
    let addr = child.http_address(Duration::from_secs(60));
    let status = || -> Value {
        let (_, st) = http(addr, "GET", "/api/status", None, "");
        serde_json::from_str(&st).unwrap()
    };
    wait_for("the first run prepared", Duration::from_secs(60), || {
        (status()["state"] == "CONNECTED").then_some(())
    });
    let readout = format!("{toml}mode = \"readout\"\n");
    let (code, body) = http(addr, "PUT", "/api/config", Some("tok-expert"), &readout);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("l1.mode = \\\"readout\\\""), "{body}");
    let st = status();
    assert_eq!(st["state"], "CONNECTED", "{st}");
    assert_eq!(st["run_number"], 1, "{st}");
    let (code, body) = http(
        addr,
        "POST",
        "/api/command",
        Some("tok"),
        "{\"command\":\"shutdown\"}",
    );
    assert_eq!(code, 200, "{body}");
    let out = child.wait_with_deadline(Duration::from_secs(30));
    assert!(out.status.success(), "{}", out.stderr);
}
