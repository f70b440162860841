//! A run that fails still has its balance sheet (issue 36, point 4): whatever ended it, the
//! JSON sheet has integer counts (the supervisor's from its last heartbeat, what was written
//! from the files) and `events_written` equals the events the files hold; the verdict is
//! `failed` with a reason naming the application, and the exit status is 2.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rodeo_files::verify::check_file;
use rodeo_testkit::cli::Running;
use rodeo_testkit::process::{apps_of, find_app};
use rodeo_testkit::{files_under, rodeo, wait_for, wait_until};
use serde_json::Value;

/// A `--processes` partition writing at 2 kHz for up to 120 s; returns it once it writes.
fn partition_writing(dir: &Path, extra: &str, bin: Option<&Path>) -> (Running, PathBuf, String) {
    let (mut cmd, out_dir) = partition_command(dir, extra, bin);
    let child = cmd.spawn();
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

/// The command of that partition (`extra` added to its `[control]` section, `bin` the program
/// if given), not started, and its output directory.
fn partition_command(
    dir: &Path,
    extra: &str,
    bin: Option<&Path>,
) -> (rodeo_testkit::cli::Rodeo, PathBuf) {
    let cfg = dir.join("p.toml");
    std::fs::write(
        &cfg,
        format!(
            "[l1]\nrate_hz = 2000.0\n[supervisor]\ndcm_timeout_ms = 1000\n\
             [dcm]\nnodes = 2\nslots = 8\n[control]\nheartbeat_ms = 200\n\
             dead_after_ms = 1500\n{extra}"
        ),
    )
    .unwrap();
    let out_dir = dir.join("out");
    let mut cmd = match bin {
        Some(b) => rodeo_testkit::cli::Rodeo::new(b),
        None => rodeo!(),
    };
    cmd.args([
        "run",
        "--processes",
        "--seconds",
        "120",
        "--json",
        "--config",
    ])
    .arg(&cfg)
    .arg("--output")
    .arg(&out_dir)
    .deadline(Duration::from_secs(150));
    (cmd, out_dir)
}

/// The events in the data files under `out` (read completely, as `rodeo verify` counts).
fn events_in_files(out: &Path) -> u64 {
    files_under(out)
        .iter()
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".data") || n.ends_with(".data.writing")
        })
        .map(|p| check_file(p).good_events)
        .sum()
}

/// The sheet a failed run printed: exit 2, verdict failed, integer counts that agree with the
/// files; returns it.
fn assert_failed_sheet(child: Running, out_dir: &Path, marker: &str) -> Value {
    let out = child.wait_with_deadline(Duration::from_secs(120));
    for a in apps_of(marker) {
        // SAFETY: kill(2) on a pid found as this test's partition's application.
        unsafe { libc::kill(a.pid, libc::SIGKILL) };
    }
    assert_eq!(out.status.code(), Some(2), "{}", out.text());
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("the JSON sheet");
    assert_eq!(v["verdict"], "failed", "{v}");
    assert!(v["reason"].as_str().is_some_and(|r| !r.is_empty()), "{v}");
    for key in [
        "l1_accepts",
        "accepted",
        "rejected",
        "events_written",
        "bytes_written",
        "restarts",
    ] {
        assert!(v[key].is_u64(), "{key} is not an integer: {v}");
    }
    assert!(v["l1_accepts"].as_u64() > Some(0), "{v}");
    assert!(v["seconds"].as_f64() > Some(0.0), "how long it ran: {v}");
    let in_files = events_in_files(out_dir);
    assert_eq!(v["events_written"].as_u64(), Some(in_files), "{v}");
    // The run database says the same.
    let runs = rodeo!()
        .args(["runs", "--json", "--output"])
        .arg(out_dir)
        .output();
    runs.assert_success();
    let r: Value = serde_json::from_str(&runs.stdout).unwrap();
    assert_eq!(
        r["runs"][0]["events_written"].as_u64(),
        Some(in_files),
        "{r}"
    );
    assert_eq!(r["runs"][0]["status"], "failed", "{r}");
    v
}

#[test]
fn a_frozen_controller_leaves_a_sheet_with_the_counts_and_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let (child, out_dir, marker) = partition_writing(dir.path(), "", None);
    let pid = child.id() as i32;
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // Its applications notice the silence (dead_after_ms) and walk themselves down.
    wait_until("the applications gone", Duration::from_secs(20), || {
        apps_of(&marker).is_empty()
    });
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    assert_failed_sheet(child, &out_dir, &marker);
}

#[test]
fn a_killed_supervisor_leaves_a_sheet_with_the_counts_and_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let (child, out_dir, marker) = partition_writing(dir.path(), "", None);
    let pid = wait_for("the supervisor's process", Duration::from_secs(20), || {
        find_app("supervisor", &marker)
    });
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let v = assert_failed_sheet(child, &out_dir, &marker);
    let why = v["reason"].as_str().unwrap_or_default();
    assert!(why.contains("supervisor"), "{v}");
}

#[test]
fn a_failed_restart_leaves_a_sheet_naming_the_application() {
    let dir = tempfile::tempdir().unwrap();
    // A copy of the binary that goes away once the partition runs: a restart of a dead
    // application then fails (the controller cannot start the program again).
    let bin = dir.path().join("rodeo-copy");
    std::fs::copy(rodeo_testkit::rodeo_bin!(), &bin).unwrap();
    let (child, out_dir, marker) = partition_writing(dir.path(), "", Some(&bin));
    std::fs::remove_file(&bin).unwrap();
    let pid = wait_for("ros-1's process", Duration::from_secs(20), || {
        find_app("ros-1", &marker)
    });
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let v = assert_failed_sheet(child, &out_dir, &marker);
    let why = v["reason"].as_str().unwrap_or_default();
    assert!(why.contains("ros-1"), "{v}");
}

/// A logger that dies with no restart to come fails the run at once: the partition's
/// teardown does not wait for the events the logger can never write (it waited out the 10 s
/// command timeout in silence), and the reason says what happened, not a failed `start`.
#[test]
fn a_dead_logger_without_restarts_ends_the_run_within_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let (child, out_dir, marker) = partition_writing(dir.path(), "restart = false\n", None);
    let pid = wait_for("logger-1's process", Duration::from_secs(20), || {
        find_app("logger-1", &marker)
    });
    let killed = std::time::Instant::now();
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let v = assert_failed_sheet(child, &out_dir, &marker);
    let took = killed.elapsed();
    let why = v["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("logger-1") && why.contains("went to ERROR while RUNNING"),
        "{v}"
    );
    assert!(!why.contains("start failed"), "{v}");
    // Death seen at the process's exit, teardown with the drain's 1 s grace: a few seconds
    // even on a loaded machine, against the 10 s command timeout it used to wait out.
    assert!(
        took < Duration::from_secs(8),
        "the run ended {took:?} after the kill: {v}"
    );
}

/// A run whose restarts ran out fails with the restarts it had on its sheet (it said 0 after
/// the controller had restarted the node: the count read only while RUNNING).
#[test]
fn a_run_out_of_restarts_counts_them_on_its_failed_sheet() {
    let dir = tempfile::tempdir().unwrap();
    let (child, out_dir, marker) =
        partition_writing(dir.path(), "max_restarts_per_run = 1\n", None);
    let first = wait_for("ros-1's process", Duration::from_secs(20), || {
        find_app("ros-1", &marker)
    });
    // Well into the run (a death before the partition is RUNNING is not restarted).
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(first, libc::SIGKILL) }, 0);
    // Restarted (a new process that rejoined the run), then killed again: none left.
    let second = wait_for("ros-1 restarted", Duration::from_secs(60), || {
        find_app("ros-1", &marker).filter(|&p| p != first)
    });
    // Its node runs (the core thread is there) once the restart's start is done.
    wait_until("the restart rejoined", Duration::from_secs(60), || {
        std::fs::read_dir(format!("/proc/{second}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "ros-core")
            })
    });
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(second, libc::SIGKILL) }, 0);
    let v = assert_failed_sheet(child, &out_dir, &marker);
    assert_eq!(v["restarts"], 1, "{v}");
}

/// A logger frozen as the run stops: its death (silence for `dead_after_ms`) tells the
/// supervisor's drain to give up, and the run ends within seconds, failed, its unfinished
/// file named (the drain waited its whole 30 s timeout for events no logger could write).
#[test]
fn a_logger_frozen_at_the_stop_ends_the_run_within_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cmd, out_dir) = partition_command(dir.path(), "restart = false\n", None);
    let child = cmd
        .args(["--http", "127.0.0.1:0"])
        .env("RODEO_TOKEN", "tok")
        .spawn();
    let http = child.http_address(Duration::from_secs(60));
    let marker = out_dir.to_str().unwrap().to_string();
    let logger = wait_for("logger-1 writing", Duration::from_secs(60), || {
        let writing = files_under(&out_dir)
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".data.writing"));
        find_app("logger-1", &marker).filter(|_| writing)
    });
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
    assert_eq!(unsafe { libc::kill(logger, libc::SIGSTOP) }, 0);
    let asked = std::time::Instant::now();
    let (code, body) = rodeo_testkit::http::request(
        http,
        "POST",
        "/api/command",
        Some("tok"),
        r#"{"command":"stop"}"#,
    );
    // Answered when the stop ended: refused (409) when the death put the partition in
    // ERROR first.
    assert!(code == 200 || code == 409, "{code} {body}");
    let v = assert_failed_sheet(child, &out_dir, &marker);
    let took = asked.elapsed();
    // Death after 1.5 s, the drain's 1 s grace, the teardown, which kills the stopped
    // process at once: well under the 30 s drain timeout even on a loaded machine (9.4 s
    // quiet with `rodeo run --seconds 5`; 14.8 s while the teardown gave it its 5 s grace).
    assert!(took < Duration::from_secs(13), "{took:?}: {v}");
    let named = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["kind"] == "files" || p["text"].as_str().unwrap_or("").contains("logger-1"));
    assert!(named, "{v}");
}

/// A run that cannot be made (its HTTP address is in use) is not a failed run: exit status 1
/// as documented, no sheet (`--json` prints an object naming the error), no run number taken.
/// It took run 1's directory and exited 2, and the next run recorded run 1 as "crashed".
#[test]
fn a_run_that_cannot_serve_its_http_address_takes_no_run_number() {
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out = dir.path().join("out");
    for processes in [false, true] {
        let mut cmd = rodeo!();
        cmd.args([
            "run", "--events", "1000", "--json", "--quiet", "--http", &addr,
        ]);
        if processes {
            cmd.arg("--processes");
        }
        let o = cmd.arg("--output").arg(&out).output();
        assert_eq!(o.status.code(), Some(1), "{}", o.text());
        assert!(o.stderr.contains("Address already in use"), "{}", o.text());
        // No sheet: one object saying why, so that `| jq` finds the reason.
        let said: Value =
            serde_json::from_str(&o.stdout).unwrap_or_else(|_| panic!("{}", o.text()));
        assert_eq!(said["made"], false, "{}", o.text());
        assert!(
            said["run_number"].is_null() && said["verdict"].is_null(),
            "{}",
            o.text()
        );
        let error = said["error"].as_str().unwrap_or_default();
        assert!(error.contains("Address already in use"), "{}", o.text());
        assert!(!out.join("run-00000001").exists(), "{}", o.text());
    }
    drop(busy);
    let o = rodeo!()
        .args(["run", "--events", "1000", "--json", "--quiet", "--output"])
        .arg(&out)
        .output();
    let sheet: Value = serde_json::from_str(&o.stdout).unwrap_or_else(|_| panic!("{}", o.text()));
    assert_eq!(sheet["run_number"], 1, "{}", o.text());
    assert_eq!(sheet["verdict"], "ok", "{}", o.text());
}
