//! Faults in a `rodeo run --processes` run (issue 20, docs/faults.md "Faults"): an
//! application killed with -9 while the run runs. A readout node or logger is restarted by the
//! controller and the run goes on (balanced, every accepted event in the files once); the
//! supervisor's death ends the run in order with its balance sheet and a non-zero exit.
//!
//! Each run is short (a few seconds) and waits on conditions with deadlines; the files are
//! read back with the raw-file reader, independently of the loggers' own counts.

use std::collections::HashSet;
use std::net::SocketAddr;
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
        signal(pid, libc::SIGKILL);
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
            ["restarts", "partial_events", "l1_missed", "forced_accepts"].contains(&kind),
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

/// A `rodeo serve --processes` service on a temporary directory, token "tok", its HTTP API up.
struct Service {
    child: Running,
    addr: SocketAddr,
    out_dir: PathBuf,
    _dir: tempfile::TempDir,
}

impl Service {
    /// Starts a service on the configuration `toml`. `log` is its `RODEO_LOG` (its stderr is
    /// then kept, not echoed); `None` echoes its stderr to the test's.
    fn start(toml: &str, log: Option<&str>) -> Service {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("p.toml");
        std::fs::write(&cfg, toml).unwrap();
        let out_dir = dir.path().join("out");
        let mut rodeo = rodeo!();
        rodeo
            .args(["serve", "--processes", "--http", "127.0.0.1:0", "--config"])
            .arg(&cfg)
            .arg("--output")
            .arg(&out_dir)
            .env("RODEO_TOKEN", "tok");
        match log {
            Some(log) => rodeo.env("RODEO_LOG", log),
            None => rodeo.echo_stderr(),
        };
        let child = rodeo.spawn();
        let addr = child.http_address(Duration::from_secs(60));
        Service {
            child,
            addr,
            out_dir,
            _dir: dir,
        }
    }

    /// `POST /api/command` with the operator's token: the status code and the body.
    fn command(&self, c: &str) -> (u16, String) {
        command(self.addr, c)
    }

    /// `GET /api/status`.
    fn status(&self) -> Value {
        serde_json::from_str(&rodeo_testkit::http::get_ok(self.addr, "/api/status")).unwrap()
    }

    /// `GET /api/runs/N`: the run's record.
    fn record(&self, number: u64) -> Value {
        let body = rodeo_testkit::http::get_ok(self.addr, &format!("/api/runs/{number}"));
        serde_json::from_str(&body).unwrap()
    }

    /// The process of application `name`, once it exists.
    fn app(&self, name: &str) -> rodeo_testkit::process::App {
        wait_for(
            &format!("{name}'s process"),
            Duration::from_secs(20),
            || {
                apps_under(self.child.id())
                    .into_iter()
                    .find(|a| a.name == name)
            },
        )
    }

    /// Shuts the service down and checks that it exits with success.
    fn shutdown(mut self) {
        let (code, body) = self.command("shutdown");
        assert_eq!(code, 200, "{body}");
        let exit = wait_for("the service's exit", Duration::from_secs(30), || {
            self.child.try_wait().unwrap()
        });
        assert!(exit.success(), "{exit}");
    }
}

/// `POST /api/command` to the service at `addr` with the operator's token.
fn command(addr: SocketAddr, c: &str) -> (u16, String) {
    let body = format!("{{\"command\":\"{c}\"}}");
    rodeo_testkit::http::request(addr, "POST", "/api/command", Some("tok"), &body)
}

/// The kinds of the problems in a run's record (`summary.problems[].kind`).
fn problem_kinds(run: &Value) -> Vec<String> {
    run["summary"]["problems"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["kind"].as_str().map(str::to_string))
        .collect()
}

/// Sends signal `sig` to `pid`.
fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

#[test]
fn a_restart_counts_in_metrics_and_raises_the_restart_alarm_of_a_service() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let toml = format!(
        "{CONFIG}[[alarms]]\nname = \"app-restarted\"\nmetric = \"rodeo_run_restarts\"\n\
         above = 0.0\n"
    );
    let service = Service::start(&toml, None);
    let metrics = || rodeo_testkit::http::get_ok(service.addr, "/metrics");
    assert_eq!(service.command("start").0, 200);
    wait_until("events being written", Duration::from_secs(30), || {
        data_files(&service.out_dir)
            .iter()
            .any(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 64 * 1024))
    });
    assert!(
        metrics().contains("rodeo_app_restarts_total{app=\"ros-1\",role=\"ros\"} 0"),
        "no restart yet"
    );
    signal(service.app("ros-1").pid, libc::SIGKILL);
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
    assert_eq!(service.command("stop").0, 200);
    // The run's record says the restart; `serve` brings a fresh partition up for the next
    // run, so between runs both counts read 0.
    let run = service.record(1);
    assert_eq!(run["balanced"], true, "{run}");
    assert_eq!(run["summary"]["restarts"], 1, "{run}");
    let m = metrics();
    assert!(m.contains("rodeo_run_restarts 0"), "{m}");
    service.shutdown();
}

/// The small partition of [`CONFIG`] on the default transport (shared memory).
fn shm_config() -> String {
    CONFIG.replace("[transport]\nkind = \"ipc\"\n", "")
}

#[test]
fn shm_an_application_killed_between_runs_of_a_service_is_back_for_the_next_run() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // A DCM killed with another alive is survivable while the run runs, but a prepared
    // partition must be whole when it starts.
    let service = Service::start(&shm_config(), None);
    for victim in ["dcm-2", "logger-1"] {
        let before = wait_for(
            &format!("{victim} prepared"),
            Duration::from_secs(60),
            || {
                (service.status()["state"] == "CONNECTED")
                    .then(|| {
                        apps_under(service.child.id())
                            .into_iter()
                            .find(|a| a.name == victim)
                    })
                    .flatten()
            },
        );
        signal(before.pid, libc::SIGKILL);
        wait_until(
            &format!("{victim}'s death seen while prepared"),
            Duration::from_secs(20),
            || {
                service.status()["apps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["name"] == victim && a["state"] == "ERROR")
            },
        );
        let (code, body) = service.command("start");
        assert_eq!(code, 200, "{body}");
        wait_until("events being written", Duration::from_secs(30), || {
            service.status()["events_written"].as_u64().unwrap_or(0) > 500
        });
        let now = apps_under(service.child.id());
        let again = now.iter().find(|a| a.name == victim);
        assert!(
            again.is_some_and(|a| a.pid != before.pid),
            "{victim} is not back with a new process: {now:?}"
        );
        let number = service.status()["run_number"].as_u64().unwrap();
        let (code, body) = service.command("stop");
        assert_eq!(code, 200, "{body}");
        let run = service.record(number);
        assert_eq!(run["balanced"], true, "{run}");
        assert_eq!(run["summary"]["restarts"], 0, "{run}");
        // Ok, or degraded only because a busy machine could not keep the paced L1 rate.
        assert!(
            problem_kinds(&run).iter().all(|k| k == "l1_missed"),
            "{run}"
        );
    }
    service.shutdown();
}

#[test]
fn shm_a_readout_node_killed_during_the_stop_ends_the_run_in_order_and_balanced() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let service = Service::start(&shm_config(), Some("warn,rodeo_run::http=info"));
    wait_until("the run prepared", Duration::from_secs(60), || {
        service.status()["state"] == "CONNECTED"
    });
    assert_eq!(service.command("start").0, 200);
    wait_until("events being written", Duration::from_secs(30), || {
        service.status()["events_written"].as_u64().unwrap_or(0) > 500
    });
    let number = service.status()["run_number"].as_u64().unwrap();
    let ros = service.app("ros-1");
    // Frozen first, so that it cannot finish its part of the stop; killed once the stop is
    // under way: its death is seen during the stop, too late for a restart.
    signal(ros.pid, libc::SIGSTOP);
    let addr = service.addr;
    let stop = std::thread::spawn(move || command(addr, "stop"));
    wait_until("the stop received", Duration::from_secs(20), || {
        let text = service.child.stderr_so_far();
        text.contains("command over HTTP") && text.contains("stop")
    });
    signal(ros.pid, libc::SIGKILL);
    let (code, body) = stop.join().unwrap();
    assert_eq!(code, 200, "{body}\n{}", service.child.stderr_so_far());
    let run = service.record(number);
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
    let kinds = problem_kinds(&run);
    assert!(kinds.iter().any(|k| k == "died_at_stop"), "{kinds:?}");
    assert!(!kinds.iter().any(|k| k == "balance"), "{run}");
    // The next run is prepared whole again.
    wait_until("the next run prepared", Duration::from_secs(60), || {
        service.status()["state"] == "CONNECTED"
    });
    service.shutdown();
}
