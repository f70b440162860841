//! One output directory, one owner (issue 38, point 5), with real processes: a second `serve`
//! or `run` on a directory in use exits non-zero within 2 s naming the holder; three `rodeo
//! run` started at once on a fresh directory: each one either runs (balanced, a run number of
//! its own) or is refused naming the holder, never "table runs already exists"; and the
//! issue's two services on one directory, where the second used to take over the first one's
//! run and lose its events: now it is refused and the first one's run loses nothing.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use rodeo_testkit::cli::{Output, Running};
use rodeo_testkit::http::request as http;
use rodeo_testkit::{rodeo, wait_until};
use serde_json::Value;

const TOKEN: &str = "lock-token";

fn serve(out: &Path, config: &Path, processes: bool) -> (Running, SocketAddr) {
    let mut cmd = rodeo!();
    cmd.args(["serve", "--json", "--config"])
        .arg(config)
        .arg("--output")
        .arg(out)
        .args(["--http", "127.0.0.1:0"])
        .env("RODEO_TOKEN", TOKEN)
        .env("RODEO_LOG", "warn")
        .echo_stderr();
    if processes {
        cmd.arg("--processes");
    }
    let child = cmd.spawn();
    let addr = child.http_address(Duration::from_secs(60));
    (child, addr)
}

fn command(addr: SocketAddr, c: &str) -> (u16, String) {
    http(
        addr,
        "POST",
        "/api/command",
        Some(TOKEN),
        &format!("{{\"command\":\"{c}\"}}"),
    )
}

fn status(addr: SocketAddr) -> Value {
    serde_json::from_str(&http(addr, "GET", "/api/status", None, "").1).unwrap()
}

/// Runs `rodeo ARGS` to its end (at most 60 s); its output and how long it took.
fn rodeo_timed(args: &[&str]) -> (Output, Duration) {
    let t0 = Instant::now();
    let out = rodeo!()
        .args(args)
        .deadline(Duration::from_secs(60))
        .output();
    (out, t0.elapsed())
}

fn write_config(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("p.toml");
    std::fs::write(
        &p,
        "[run]\nevents = 0\nseconds = 3600.0\n[l1]\nrate_hz = 3000.0\n[dcm]\nslots = 16\n",
    )
    .unwrap();
    p
}

#[test]
fn a_second_serve_or_run_on_a_directory_in_use_is_refused_within_2s_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = write_config(dir.path());
    let (first, _addr) = serve(&out, &cfg, false);
    let holder = format!("pid {}", first.id());
    let out_s = out.to_str().unwrap();
    // Another partition whose loggers would write into the service's directory: its files
    // went into the service's next run directory, two runs under one number.
    let into = dir.path().join("into.toml");
    std::fs::write(&into, format!("[logger]\ndirectories = [{out_s:?}]\n")).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    let (into_s, elsewhere_s) = (into.to_str().unwrap(), elsewhere.to_str().unwrap());
    for args in [
        vec!["serve", "--output", out_s, "--http", "127.0.0.1:0"],
        vec!["run", "--output", out_s, "--events", "1000"],
        vec!["run", "--output", out_s, "--events", "1000", "--processes"],
        vec![
            "run",
            "--output",
            elsewhere_s,
            "--config",
            into_s,
            "--events",
            "1000",
        ],
    ] {
        let (o, took) = rodeo_timed(&args);
        let err = &o.stderr;
        o.assert_failure();
        assert!(took < Duration::from_secs(2), "{args:?} took {took:?}");
        assert!(
            err.contains(&holder) && err.contains("in use"),
            "{args:?}: {err}"
        );
        assert!(err.contains("rodeo serve"), "the holder's command: {err}");
    }
    // Nothing of theirs was written: only the first service's prepared run.
    let runs: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("run-"))
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
}

#[test]
fn three_runs_started_at_once_on_a_fresh_directory_each_runs_or_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fresh");
    // All three started before any is waited for: they race for the directory, its lock and
    // the creation of its run database.
    let started: Vec<Running> = (0..3)
        .map(|_| {
            rodeo!()
                .args([
                    "run",
                    "--events",
                    "20000",
                    "--rate",
                    "4000",
                    "--json",
                    // Three at once on two cores may fall behind the rate: not this test's
                    // question.
                    "--accept-degraded",
                    "--output",
                ])
                .arg(&out)
                .spawn()
        })
        .collect();
    let outputs: Vec<Output> = started
        .into_iter()
        .map(|r| r.wait_with_deadline(Duration::from_secs(120)))
        .collect();
    let (ok, refused): (Vec<&Output>, Vec<&Output>) =
        outputs.iter().partition(|o| o.status.success());
    assert!(!ok.is_empty(), "none ran: {outputs:?}");
    for o in &refused {
        assert!(o.stderr.contains("in use by pid"), "{}", o.stderr);
        assert!(
            o.stderr.contains("rodeo run"),
            "the holder's command: {}",
            o.stderr
        );
        // `--json` still gets one object: not made, and why.
        let said: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|_| panic!("{o:?}"));
        assert_eq!(said["made"], false, "{said}");
        assert_eq!(o.status.code(), Some(1), "{said}");
        assert!(
            said["error"]
                .as_str()
                .unwrap_or_default()
                .contains("in use by pid"),
            "{said}"
        );
    }
    let mut numbers = Vec::new();
    for o in &outputs {
        assert!(!o.stderr.contains("already exists"), "{}", o.stderr);
    }
    for o in &ok {
        let sheet: Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(sheet["balanced"], true, "{sheet}");
        assert_eq!(sheet["l1_accepts"], 20000, "{sheet}");
        numbers.push(sheet["run_number"].as_u64().unwrap());
    }
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), ok.len(), "a run number each: {numbers:?}");
    // The database has every run that ran, once.
    let runs: Value = serde_json::from_str(
        &rodeo_timed(&["runs", "--json", "--output", out.to_str().unwrap()])
            .0
            .stdout,
    )
    .unwrap();
    assert_eq!(runs["runs"].as_array().unwrap().len(), ok.len(), "{runs}");
}

#[test]
fn two_services_on_one_directory_the_second_is_refused_and_the_first_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = write_config(dir.path());
    let (a, addr) = serve(&out, &cfg, true);
    assert_eq!(command(addr, "start").0, 200);
    wait_until("events written", Duration::from_secs(60), || {
        status(addr)["events_written"].as_u64().unwrap_or(0) > 200
    });
    // The second operator's service on the same disk, while the first one runs.
    let out_s = out.to_str().unwrap();
    let (b, took) = rodeo_timed(&[
        "serve",
        "--output",
        out_s,
        "--http",
        "127.0.0.1:0",
        "--processes",
    ]);
    b.assert_failure();
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(
        b.stderr.contains(&format!("pid {}", a.id())),
        "{}",
        b.stderr
    );
    // The first service's run goes on and ends whole.
    let before = status(addr)["events_written"].as_u64().unwrap();
    wait_until("more events written", Duration::from_secs(60), || {
        status(addr)["events_written"].as_u64().unwrap_or(0) > before + 200
    });
    let (code, body) = command(addr, "stop");
    assert_eq!(code, 200, "{body}");
    assert_eq!(command(addr, "shutdown").0, 200);
    let a = a.wait_with_deadline(Duration::from_secs(60));
    a.assert_success();
    let sheet: Value = serde_json::from_str(a.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(sheet["balanced"], true, "{sheet}");
    let accepted = sheet["accepted"].as_u64().unwrap() + sheet["forced_accepts"].as_u64().unwrap();
    assert!(accepted > 400, "{sheet}");
    assert_eq!(
        sheet["events_written"].as_u64().unwrap(),
        accepted,
        "{sheet}"
    );
    // Every acknowledged event is in a closed file that verifies; nothing left `.writing`.
    let run_dir = out.join("run-00000001");
    let mut good = 0u64;
    for f in std::fs::read_dir(&run_dir).unwrap().filter_map(Result::ok) {
        let name = f.file_name().to_string_lossy().to_string();
        assert!(!name.ends_with(".writing"), "{name} left open");
        if name.ends_with(".data") {
            good += rodeo_files::verify::check_file(&f.path()).good_events;
        }
    }
    assert_eq!(good, accepted, "events in the files");
    let runs: Value =
        serde_json::from_str(&rodeo_timed(&["runs", "--output", out_s, "--json"]).0.stdout)
            .unwrap();
    // "ok", or "degraded" by nothing but L1 accepts the busy machine could not send at the
    // configured rate (never triggered, so nothing lost: seen in CI beside other tests).
    let run = &runs["runs"][0];
    let rate_only = sheet["problems"].as_array().is_some_and(|ps| {
        ps.iter()
            .filter(|p| p["verdict"] != "ok")
            .all(|p| p["kind"] == "l1_missed")
    });
    assert!(
        run["status"] == "ok" || (run["status"] == "degraded" && rate_only),
        "{runs} {sheet}"
    );
    assert_eq!(run["events_written"].as_u64(), Some(accepted));
    // Now that the first is gone, the second service takes the directory: the next number.
    let (b, addr) = serve(&out, &cfg, false);
    assert_eq!(status(addr)["run_number"], 2);
    assert_eq!(command(addr, "shutdown").0, 200);
    b.wait_with_deadline(Duration::from_secs(60))
        .assert_success();
}

/// A `serve` whose HTTP address is taken cannot be run: it exits non-zero naming the address
/// and leaves no run behind (it left `run-00000001/`, which the next service recorded as a
/// crashed run and went on at run 2).
#[test]
fn a_serve_whose_address_is_taken_leaves_no_run_behind() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let out = dir.path().join("out");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (o, _) = rodeo_timed(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--http",
        &addr,
    ]);
    assert!(!o.status.success(), "{}", o.text());
    assert!(o.stderr.contains(&addr), "{}", o.text());
    let runs: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("run-"))
        .collect();
    assert!(runs.is_empty(), "left behind: {runs:?}");
    drop(taken);
}

/// A service whose loggers write into `[logger] directories` leaves no empty run directory
/// there when it shuts down with a run prepared, and comes up again on the same files (the
/// next start refused: "the run directory ... already exists").
#[test]
fn a_service_with_logger_directories_shuts_down_clean_and_comes_up_again() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let logs = dir.path().join("logs");
    let cfg = dir.path().join("p.toml");
    std::fs::write(
        &cfg,
        format!(
            "[run]\nevents = 0\nseconds = 3600.0\n[l1]\nrate_hz = 3000.0\n[dcm]\nslots = 16\n\
             [logger]\ndirectories = [{:?}]\n",
            logs.to_str().unwrap()
        ),
    )
    .unwrap();
    for round in 0..2 {
        let (child, addr) = serve(&out, &cfg, false);
        assert_eq!(command(addr, "shutdown").0, 200, "round {round}");
        child
            .wait_with_deadline(Duration::from_secs(60))
            .assert_success();
        let left: Vec<_> = std::fs::read_dir(&logs)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("run-"))
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "round {round}: {left:?}");
    }
}
