//! Faults in a `rodeo run --processes` run (issue 20, docs/run-control.md "Faults"): an
//! application killed with -9 while the run runs. A readout node or logger is restarted by the
//! controller and the run goes on (balanced, every accepted event in the files once); the
//! supervisor's death ends the run in order with its balance sheet and a non-zero exit.
//!
//! Each run is short (a few seconds) and waits on conditions with deadlines; the files are
//! read back with the raw-file reader, independently of the loggers' own counts.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rodeo_files::rawfile::RawFileReader;
use rodeo_format::compress::decompress_event;
use rodeo_format::fragment::{FullEvent, Status};
use rodeo_testkit::cli::Running;
use rodeo_testkit::process::{apps_under, find_app};
use rodeo_testkit::{files_under, rodeo, wait_for, wait_until};
use serde_json::Value;

/// A small partition over ZeroMQ ipc: two readout nodes, two DCMs, one logger, a steady L1.
const CONFIG: &str = "[transport]\nkind = \"ipc\"\n\
    [l1]\nrate_hz = 1500.0\n\
    [ros]\nnodes = 2\nchannels = 4\nfragment_words = 100\n\
    [dcm]\nnodes = 2\nslots = 32\naccept_fraction = 0.3\n\
    [control]\nrestart_backoff_ms = 200\ndead_after_ms = 1500\n";

/// One run at a time: each is a whole partition of processes, and the machine has few cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A `--processes` run of `seconds` in a temporary directory, started.
struct Run {
    child: Running,
    out_dir: PathBuf,
    _dir: tempfile::TempDir,
}

impl Run {
    fn start(seconds: &str) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("p.toml");
        std::fs::write(&cfg, CONFIG).unwrap();
        let out_dir = dir.path().join("out");
        let child = rodeo!()
            .args([
                "run",
                "--processes",
                "--seconds",
                seconds,
                "--json",
                "--config",
            ])
            .arg(&cfg)
            .arg("--output")
            .arg(&out_dir)
            .spawn();
        Run {
            child,
            out_dir,
            _dir: dir,
        }
    }

    /// Waits until events are being written, then kills `name`'s process with SIGKILL.
    fn kill_when_running(&self, name: &str) {
        let marker = self.out_dir.to_str().unwrap().to_string();
        wait_until("events being written", Duration::from_secs(30), || {
            data_files(&self.out_dir)
                .iter()
                .any(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 64 * 1024))
        });
        let pid = wait_for(
            &format!("{name}'s process"),
            Duration::from_secs(20),
            || find_app(name, &marker),
        );
        // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    }

    /// Waits (bounded) for the end; the exit status, the JSON balance sheet, stderr, and the
    /// temporary directory (the files go with it).
    fn finish(
        self,
        limit: Duration,
    ) -> (std::process::ExitStatus, Value, String, tempfile::TempDir) {
        let Run {
            child,
            out_dir,
            _dir,
        } = self;
        let out = child.wait_with_deadline(limit);
        let status = out.status;
        let stderr = out.stderr;
        let v: Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("no JSON balance sheet ({e}): {}\n{stderr}", out.stdout));
        let left: Vec<PathBuf> = files_under(&out_dir)
            .into_iter()
            .filter(|p| {
                let n = p.to_string_lossy();
                n.ends_with(".writing") || n.ends_with(".recovering")
            })
            .collect();
        assert!(left.is_empty(), "files left open: {left:?}\n{v}\n{stderr}");
        (status, v, stderr, _dir)
    }
}

/// The data files (closed or not) under `dir`.
fn data_files(dir: &Path) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".data"))
        .collect()
}

/// What the files of a balance sheet hold, read independently: global ids (each once, or the
/// test fails) and how many events are flagged PARTIAL_EVENT.
fn read_files(summary: &Value) -> (HashSet<u64>, u64) {
    let mut ids = HashSet::new();
    let mut partial = 0;
    let mut plain = Vec::new();
    for f in summary["files"].as_array().expect("files") {
        let path = f.as_str().unwrap();
        let mut reader = RawFileReader::open(path).unwrap();
        while let Some(event) = reader.next_event() {
            let event = event.unwrap_or_else(|e| panic!("{path}: {e}"));
            decompress_event(event.words, &mut plain).unwrap();
            let e = FullEvent::parse(&plain).unwrap();
            e.verify_checksum().unwrap();
            if e.status().contains(Status::EVENT_PARTIAL) {
                partial += 1;
            }
            assert!(
                ids.insert(e.global_id()),
                "event {} written twice",
                e.global_id()
            );
        }
    }
    (ids, partial)
}

/// The checks every run that survived a fault passes: degraded (exit 3) by its restart and
/// counted losses only, balanced, the files hold exactly the accepted and forced events, each
/// once.
fn assert_survived(status: std::process::ExitStatus, v: &Value, stderr: &str) -> u64 {
    assert_eq!(status.code(), Some(3), "exit {status}\n{v}\n{stderr}");
    assert_eq!(v["verdict"], "degraded", "{v}\n{stderr}");
    for p in v["problems"].as_array().unwrap() {
        let kind = p["kind"].as_str().unwrap_or_default();
        assert!(
            ["restarts", "partial_events", "l1_missed"].contains(&kind),
            "{kind}: {v}\n{stderr}"
        );
    }
    assert_eq!(v["balanced"], true, "{v}\n{stderr}");
    assert_eq!(v["restarts"], 1, "{v}\n{stderr}");
    let written = v["events_written"].as_u64().unwrap();
    assert_eq!(
        written,
        v["accepted"].as_u64().unwrap() + v["forced_accepts"].as_u64().unwrap(),
        "{v}"
    );
    let (ids, partial) = read_files(v);
    assert_eq!(ids.len() as u64, written, "{v}");
    partial
}

#[test]
fn a_readout_node_killed_is_restarted_and_the_run_goes_on_with_partial_events() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let run = Run::start("9");
    run.kill_when_running("ros-1");
    let (status, v, stderr, _dir) = run.finish(Duration::from_secs(60));
    let partial_in_files = assert_survived(status, &v, &stderr);
    let partial = v["partial_events"].as_u64().unwrap();
    assert!(partial > 0, "events built without ros-1: {v}");
    assert!(
        partial_in_files > 0 && partial_in_files <= partial,
        "{partial_in_files} partial events in the files, {partial} built: {v}"
    );
    // The node came back: events after its rejoin are complete again, so far fewer than all
    // events are partial.
    let l1 = v["l1_accepts"].as_u64().unwrap();
    assert!(partial < l1 / 2, "{partial} of {l1} events partial: {v}");
}

#[test]
fn a_logger_killed_is_restarted_and_every_accepted_event_is_in_the_files_once() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let run = Run::start("9");
    run.kill_when_running("logger-1");
    let (status, v, stderr, _dir) = run.finish(Duration::from_secs(60));
    assert_survived(status, &v, &stderr);
    assert!(
        v["recovered_events"].as_u64().unwrap() > 0,
        "the file left open was recovered: {v}"
    );
    assert!(
        v["files"].as_array().unwrap().len() >= 2,
        "the recovered file and the restarted logger's: {v}"
    );
}

#[test]
fn the_supervisor_killed_ends_the_run_in_order_with_its_balance_sheet() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let run = Run::start("30");
    run.kill_when_running("supervisor");
    // Within seconds, not at the end of the 30 s the run was given.
    let (status, v, stderr, _dir) = run.finish(Duration::from_secs(20));
    assert!(!status.success(), "{v}\n{stderr}");
    assert_eq!(v["balanced"], false, "{v}");
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("supervisor died"), "{reason}\n{v}");
    assert!(reason.contains("in flight"), "{reason}");
    assert!(v["in_flight_at_stop"].is_u64(), "{v}");
    assert!(stderr.contains("supervisor died"), "{stderr}");
    // Whatever the loggers wrote is in closed files, read back whole.
    let (ids, _) = read_files(&v);
    assert_eq!(
        ids.len() as u64,
        v["events_written"].as_u64().unwrap(),
        "{v}"
    );
    assert!(!ids.is_empty(), "{v}");
}

#[test]
fn a_restart_counts_in_metrics_and_raises_the_restart_alarm_of_a_service() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    let toml = format!(
        "{CONFIG}[[alarms]]\nname = \"app-restarted\"\nmetric = \"rodeo_run_restarts\"\n\
         above = 0.0\n"
    );
    std::fs::write(&cfg, toml).unwrap();
    let out_dir = dir.path().join("out");
    let mut child = rodeo!()
        .args(["serve", "--processes", "--http", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--output")
        .arg(&out_dir)
        .env("RODEO_TOKEN", "tok")
        .echo_stderr()
        .spawn();
    let addr = child.http_address(Duration::from_secs(60));
    let command = |c: &str| {
        rodeo_testkit::http::request(
            addr,
            "POST",
            "/api/command",
            Some("tok"),
            &format!("{{\"command\":\"{c}\"}}"),
        )
    };
    let metrics = || rodeo_testkit::http::get_ok(addr, "/metrics");
    assert_eq!(command("start").0, 200);
    wait_until("events being written", Duration::from_secs(30), || {
        data_files(&out_dir)
            .iter()
            .any(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 64 * 1024))
    });
    assert!(
        metrics().contains("rodeo_app_restarts_total{app=\"ros-1\",role=\"ros\"} 0"),
        "no restart yet"
    );
    let pid = wait_for("ros-1's process", Duration::from_secs(20), || {
        apps_under(child.id())
            .into_iter()
            .find(|a| a.name == "ros-1")
            .map(|a| a.pid)
    });
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_until(
        "the restart counted and its alarm raised",
        Duration::from_secs(30),
        || {
            let m = metrics();
            m.contains("rodeo_app_restarts_total{app=\"ros-1\",role=\"ros\"} 1")
                && m.contains("rodeo_run_restarts 1")
                && m.contains("rodeo_alarm_active{name=\"app-restarted\"} 1")
        },
    );
    assert_eq!(command("stop").0, 200);
    // The run's record says the restart; `serve` brings a fresh partition up for the next
    // run, so between runs both counts read 0.
    let run: Value =
        serde_json::from_str(&rodeo_testkit::http::get_ok(addr, "/api/runs/1")).unwrap();
    assert_eq!(run["balanced"], true, "{run}");
    assert_eq!(run["summary"]["restarts"], 1, "{run}");
    let m = metrics();
    assert!(m.contains("rodeo_run_restarts 0"), "{m}");
    assert_eq!(command("shutdown").0, 200);
    let status = wait_for("the service's exit", Duration::from_secs(30), || {
        child.try_wait().unwrap()
    });
    assert!(status.success(), "{status}");
}

#[test]
fn shm_an_application_killed_between_runs_of_a_service_is_back_for_the_next_run() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    // The default transport (shared memory); a DCM killed with another alive is survivable
    // while the run runs, but a prepared partition must be whole when it starts.
    let toml = CONFIG.replace("[transport]\nkind = \"ipc\"\n", "");
    std::fs::write(&cfg, toml).unwrap();
    let out_dir = dir.path().join("out");
    let mut child = rodeo!()
        .args(["serve", "--processes", "--http", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--output")
        .arg(&out_dir)
        .env("RODEO_TOKEN", "tok")
        .echo_stderr()
        .spawn();
    let addr = child.http_address(Duration::from_secs(60));
    let command = |c: &str| {
        rodeo_testkit::http::request(
            addr,
            "POST",
            "/api/command",
            Some("tok"),
            &format!("{{\"command\":\"{c}\"}}"),
        )
    };
    let status = || -> Value {
        serde_json::from_str(&rodeo_testkit::http::get_ok(addr, "/api/status")).unwrap()
    };
    for victim in ["dcm-2", "logger-1"] {
        let before = wait_for(
            &format!("{victim} prepared"),
            Duration::from_secs(60),
            || {
                let st = status();
                (st["state"] == "CONNECTED")
                    .then(|| {
                        apps_under(child.id())
                            .into_iter()
                            .find(|a| a.name == victim)
                    })
                    .flatten()
            },
        );
        // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
        assert_eq!(unsafe { libc::kill(before.pid, libc::SIGKILL) }, 0);
        wait_until(
            &format!("{victim}'s death seen while prepared"),
            Duration::from_secs(20),
            || {
                let st = status();
                st["apps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["name"] == victim && a["state"] == "ERROR")
            },
        );
        let (code, body) = command("start");
        assert_eq!(code, 200, "{body}");
        wait_until("events being written", Duration::from_secs(30), || {
            status()["events_written"].as_u64().unwrap_or(0) > 500
        });
        let now = apps_under(child.id());
        let again = now.iter().find(|a| a.name == victim);
        assert!(
            again.is_some_and(|a| a.pid != before.pid),
            "{victim} is not back with a new process: {now:?}"
        );
        let number = status()["run_number"].as_u64().unwrap();
        let (code, body) = command("stop");
        assert_eq!(code, 200, "{body}");
        let run: Value = serde_json::from_str(&rodeo_testkit::http::get_ok(
            addr,
            &format!("/api/runs/{number}"),
        ))
        .unwrap();
        assert_eq!(run["balanced"], true, "{run}");
        assert_eq!(run["status"], "ok", "{run}");
        assert_eq!(run["summary"]["restarts"], 0, "{run}");
    }
    assert_eq!(command("shutdown").0, 200);
    let status = wait_for("the service's exit", Duration::from_secs(30), || {
        child.try_wait().unwrap()
    });
    assert!(status.success(), "{status}");
}

#[test]
fn shm_a_readout_node_killed_during_the_stop_ends_the_run_in_order_and_balanced() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    std::fs::write(&cfg, CONFIG.replace("[transport]\nkind = \"ipc\"\n", "")).unwrap();
    let out_dir = dir.path().join("out");
    let mut child = rodeo!()
        .args(["serve", "--processes", "--http", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--output")
        .arg(&out_dir)
        .env("RODEO_TOKEN", "tok")
        .env("RODEO_LOG", "warn,rodeo_run::http=info")
        .spawn();
    let addr = child.http_address(Duration::from_secs(60));
    let command = move |c: &str| {
        rodeo_testkit::http::request(
            addr,
            "POST",
            "/api/command",
            Some("tok"),
            &format!("{{\"command\":\"{c}\"}}"),
        )
    };
    let status = || -> Value {
        serde_json::from_str(&rodeo_testkit::http::get_ok(addr, "/api/status")).unwrap()
    };
    wait_until("the run prepared", Duration::from_secs(60), || {
        status()["state"] == "CONNECTED"
    });
    assert_eq!(command("start").0, 200);
    wait_until("events being written", Duration::from_secs(30), || {
        status()["events_written"].as_u64().unwrap_or(0) > 500
    });
    let number = status()["run_number"].as_u64().unwrap();
    let ros = wait_for("ros-1's process", Duration::from_secs(20), || {
        apps_under(child.id())
            .into_iter()
            .find(|a| a.name == "ros-1")
    });
    // Frozen first, so that it cannot finish its part of the stop; killed once the stop is
    // under way: its death is seen during the stop, too late for a restart.
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(ros.pid, libc::SIGSTOP) }, 0);
    let stop = std::thread::spawn(move || command("stop"));
    wait_until("the stop received", Duration::from_secs(20), || {
        child.stderr_so_far().contains("command over HTTP")
            && child.stderr_so_far().contains("stop")
    });
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(ros.pid, libc::SIGKILL) }, 0);
    let (code, body) = stop.join().unwrap();
    assert_eq!(code, 200, "{body}\n{}", child.stderr_so_far());
    let run: Value = serde_json::from_str(&rodeo_testkit::http::get_ok(
        addr,
        &format!("/api/runs/{number}"),
    ))
    .unwrap();
    assert_eq!(run["balanced"], true, "{run}");
    assert_eq!(run["status"], "degraded", "{run}");
    let sheet = &run["summary"];
    let nodes = sheet["readout_nodes"].as_array().expect("readout nodes");
    let ros1 = nodes.iter().find(|n| n["name"] == "ros-1").expect("ros-1");
    assert_eq!(ros1["died_at_stop"], true, "{run}");
    assert!(
        ros1["requests"].as_u64().unwrap() > 0,
        "its last heartbeat's counts: {run}"
    );
    let kinds: Vec<&str> = sheet["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"died_at_stop"), "{kinds:?}");
    assert!(!kinds.contains(&"balance"), "{run}");
    // The next run is prepared whole again.
    wait_until("the next run prepared", Duration::from_secs(60), || {
        status()["state"] == "CONNECTED"
    });
    assert_eq!(command("shutdown").0, 200);
    let exit = wait_for("the service's exit", Duration::from_secs(30), || {
        child.try_wait().unwrap()
    });
    assert!(exit.success(), "{exit}");
}
