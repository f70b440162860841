//! Stopless recovery in every transport, under load (issue 37): the representative slice of the
//! chaos matrix that `cargo test` runs (the whole matrix is `scripts/chaos`; docs/faults.md
//! says which cases run where and why).
//!
//! - shared memory (the default): a readout node killed with -9 as often as the restart budget
//!   allows in one run (the same role again and again: each restart gets its predecessor's
//!   ports back); a readout node and a logger killed together, beside a busy core;
//! - tcp: a readout node killed (ipc is `cli_restart.rs`);
//! - stream: a readout node, then a logger killed (reconnection and hand-over of names);
//! - the controller killed with -9, five times: every application gone within 3 s, files
//!   closed;
//! - the run directory made read-only (`chattr +i`) mid-run: the run ends in order, non-zero,
//!   the reason naming the directory, the counts equal to the files' events.
//!
//! Every run here is short, paced, and waits on conditions with deadlines; the files are read
//! back with the raw-file reader, independently of the loggers' counts.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rodeo_files::rawfile::RawFileReader;
use rodeo_format::compress::decompress_event;
use rodeo_format::fragment::{FullEvent, Status};
use rodeo_testkit::cli::{Output, Running};
use rodeo_testkit::hog::BusyCore;
use rodeo_testkit::process::{apps_of, find_app};
use rodeo_testkit::{files_under, holds_within, rodeo, wait_for, wait_until};
use serde_json::Value;

/// One run at a time: each is a whole partition of processes on a 2-core machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A small paced partition in `kind`, restarts quick, a budget of `budget` restarts.
fn config(kind: &str, budget: u32, extra: &str) -> String {
    format!(
        "[transport]\nkind = \"{kind}\"\n{extra}\
         [l1]\nrate_hz = 3000.0\n\
         [ros]\nnodes = 1\nchannels = 4\nfragment_words = 100\n\
         [dcm]\nnodes = 2\nslots = 32\naccept_fraction = 0.3\n\
         [control]\nrestart_backoff_ms = 200\ndead_after_ms = 1500\n\
         max_restarts_per_run = {budget}\n"
    )
}

/// A `--processes` run of `seconds` with `config`, started in a temporary directory.
struct Run {
    child: Running,
    out: PathBuf,
    dir: tempfile::TempDir,
}

impl Run {
    fn start(config: &str, seconds: u32) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("p.toml");
        std::fs::write(&cfg, config).unwrap();
        let out = dir.path().join("out");
        let child = rodeo!()
            // Restarts make the verdict "degraded" (exit 3): accepted here, so a non-zero
            // exit is a failed run.
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
            .arg(&out)
            .spawn();
        wait_until("64 KiB of events on disk", Duration::from_secs(60), || {
            data_files(&out)
                .iter()
                .any(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 64 * 1024))
        });
        Run { child, out, dir }
    }

    fn marker(&self) -> String {
        self.out.to_str().unwrap().to_string()
    }

    /// Kills application `name` with SIGKILL.
    fn kill(&self, name: &str) {
        let marker = self.marker();
        let pid = wait_for(
            &format!("{name}'s process"),
            Duration::from_secs(30),
            || find_app(name, &marker),
        );
        // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    }

    /// Waits until the controller logged the `n`-th rejoin of the run.
    fn wait_rejoined(&self, n: usize) {
        self.child.wait_for_stderr(
            &format!("restart {n} to rejoin"),
            Duration::from_secs(60),
            |text| (text.matches("restarted and rejoined the run").count() >= n).then_some(()),
        );
    }

    /// The end: the output and the JSON balance sheet.
    fn finish(self, limit: Duration) -> (Output, Value, tempfile::TempDir) {
        let out = self.child.wait_with_deadline(limit);
        let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "no JSON balance sheet ({e}): {}\n{}",
                out.stdout, out.stderr
            )
        });
        (out, v, self.dir)
    }
}

/// The data files (closed or not) under `dir`.
fn data_files(dir: &Path) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".data"))
        .collect()
}

/// The global ids of the events in the sheet's files, read independently (each once, or the
/// test fails).
fn ids_in_files(v: &Value) -> HashSet<u64> {
    let mut ids = HashSet::new();
    let mut plain = Vec::new();
    for f in v["files"].as_array().expect("files") {
        let path = f.as_str().unwrap();
        let mut reader = RawFileReader::open(path).unwrap();
        while let Some(event) = reader.next_event() {
            let event = event.unwrap_or_else(|e| panic!("{path}: {e}"));
            decompress_event(event.words, &mut plain).unwrap();
            let e = FullEvent::parse(&plain).unwrap();
            e.verify_checksum().unwrap();
            assert!(ids.insert(e.global_id()), "event {} twice", e.global_id());
        }
    }
    ids
}

/// A run that survived its faults: exit 0 (degraded accepted), balanced, `restarts` restarts, every accepted event
/// in the files once, no file left open.
fn assert_survived(out: &Output, v: &Value, restarts: u64, dir: &Path) {
    assert!(
        out.status.success(),
        "exit {}\n{v}\n{}",
        out.status,
        out.stderr
    );
    assert_eq!(v["balanced"], true, "{v}\n{}", out.stderr);
    assert_eq!(v["verdict"], "degraded", "{v}\n{}", out.stderr);
    assert_eq!(v["restarts"], restarts, "{v}\n{}", out.stderr);
    let written = v["events_written"].as_u64().unwrap();
    assert_eq!(
        written,
        v["accepted"].as_u64().unwrap() + v["forced_accepts"].as_u64().unwrap(),
        "{v}"
    );
    assert_eq!(ids_in_files(v).len() as u64, written, "{v}");
    let open: Vec<PathBuf> = files_under(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".writing"))
        .collect();
    assert!(open.is_empty(), "files left open: {open:?}");
}

#[test]
fn shm_a_readout_node_killed_as_often_as_the_budget_allows_rejoins_each_time() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    const BUDGET: u32 = 3;
    let run = Run::start(&config("shm", BUDGET, ""), 16);
    // Some heartbeats (every 250 ms) of the first life in the run, for its counts.
    std::thread::sleep(Duration::from_millis(1500));
    for k in 1..=BUDGET as usize {
        run.kill("ros-1");
        run.wait_rejoined(k);
    }
    let (out, v, dir) = run.finish(Duration::from_secs(90));
    assert_survived(&out, &v, u64::from(BUDGET), dir.path());
    assert!(v["partial_events"].as_u64().unwrap() > 0, "{v}");
    // Its earlier lives' counts, to their last heartbeats, are on the sheet beside its last
    // life's (they were on none): the first life's at least, 1.5 s into the run.
    let node = &v["readout_nodes"][0];
    assert_eq!(node["restarted"], true, "{node}");
    let earlier = &node["earlier_lives"];
    assert_eq!(earlier["lives"], u64::from(BUDGET), "{node}");
    for count in ["stored", "requests", "cleared"] {
        assert!(earlier[count].as_u64().unwrap() > 0, "{count}: {node}");
    }
}

#[test]
fn shm_a_readout_node_and_a_logger_killed_together_beside_a_busy_core_both_rejoin() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let hog = BusyCore::start();
    let run = Run::start(&config("shm", 3, ""), 12);
    run.kill("ros-1");
    run.kill("logger-1");
    run.wait_rejoined(2);
    let (out, v, dir) = run.finish(Duration::from_secs(90));
    assert!(hog.spins() > 0);
    drop(hog);
    assert_survived(&out, &v, 2, dir.path());
    assert!(v["recovered_events"].as_u64().unwrap() > 0, "{v}");
}

#[test]
fn shm_a_logger_killed_twice_accounts_for_the_files_of_all_its_lives() {
    // The soak found it: the third life recovered the second's open file but did not count
    // the file the second had recovered (closed) from the first; the sheet fell short.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let run = Run::start(&config("shm", 3, ""), 14);
    run.kill("logger-1");
    run.wait_rejoined(1);
    let marker = run.marker();
    wait_until(
        "the second life writes 16 KiB",
        Duration::from_secs(30),
        || {
            data_files(&run.out).iter().any(|p| {
                p.to_string_lossy().ends_with(".0002.data.writing")
                    && std::fs::metadata(p).is_ok_and(|m| m.len() > 16 * 1024)
            }) && find_app("logger-1", &marker).is_some()
        },
    );
    run.kill("logger-1");
    run.wait_rejoined(2);
    let (out, v, dir) = run.finish(Duration::from_secs(90));
    assert_survived(&out, &v, 2, dir.path());
    assert!(v["recovered_events"].as_u64().unwrap() > 0, "{v}");
    // The restarts' problem names the logger (its `where` was null: only readout nodes were).
    let restarts = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "restarts")
        .unwrap();
    assert_eq!(restarts["where"], "logger-1", "{restarts}");
}

/// A port free now (the partition takes it as base_port and the few after it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn tcp_a_readout_node_killed_is_restarted_and_the_run_balances() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port();
    let extra = format!("host = \"127.0.0.1\"\nbase_port = {port}\n");
    let run = Run::start(&config("tcp", 3, &extra), 10);
    run.kill("ros-1");
    run.wait_rejoined(1);
    let (out, v, dir) = run.finish(Duration::from_secs(90));
    assert_survived(&out, &v, 1, dir.path());
}

#[test]
fn stream_a_readout_node_then_a_logger_killed_are_restarted_and_the_run_balances() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port();
    let extra = format!("trusted_network = true\nhost = \"127.0.0.1\"\nbase_port = {port}\n");
    let run = Run::start(&config("stream", 3, &extra), 12);
    // The DCMs' connections to the dead node end; they connect again to its successor, which
    // takes their names over from their hellos. Then the logger: the DCMs' events queue while
    // it is away and go out, in order, to the restarted one.
    run.kill("ros-1");
    run.wait_rejoined(1);
    run.kill("logger-1");
    run.wait_rejoined(2);
    let (out, v, dir) = run.finish(Duration::from_secs(90));
    assert_survived(&out, &v, 2, dir.path());
    assert!(v["recovered_events"].as_u64().unwrap() > 0, "{v}");
}

/// The runs' ipc runtime directories under the temporary directory: the test holds ONE_AT_A_TIME, and cargo runs one test binary at a time.
fn runtime_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| rodeo_control::leftovers::is_runtime_name(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs
}

/// Rounds 2 and 4 over ipc: there the applications walking down also remove the run's runtime
/// directory (the socket files), which the killed controller cannot.
#[test]
fn applications_leave_within_3_s_of_the_controllers_kill_9_five_times_of_five() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for round in 1..=5 {
        let kind = if round % 2 == 0 { "ipc" } else { "shm" };
        let before = runtime_dirs();
        let mut run = Run::start(&config(kind, 3, ""), 60);
        let marker = run.marker();
        if kind == "ipc" {
            assert!(
                runtime_dirs().iter().any(|d| !before.contains(d)),
                "round {round}: an ipc run has a runtime directory"
            );
        }
        assert_eq!(
            apps_of(&marker).len(),
            5,
            "round {round}: the partition is up"
        );
        let t0 = Instant::now();
        run.child.signal(libc::SIGKILL);
        let gone = holds_within(Duration::from_secs(3), || apps_of(&marker).is_empty());
        let took = t0.elapsed();
        eprintln!("round {round}: every application gone {took:?} after the controller's kill -9");
        let left = apps_of(&marker);
        for a in &left {
            // SAFETY: kill(2) with a pid read from /proc (a test that failed cleans up).
            unsafe { libc::kill(a.pid, libc::SIGKILL) };
        }
        assert!(
            gone,
            "round {round}: {left:?} still running {took:?} after the controller's kill -9"
        );
        // Their files closed on the way out.
        let open: Vec<PathBuf> = data_files(&run.out)
            .into_iter()
            .filter(|p| p.to_string_lossy().ends_with(".writing"))
            .collect();
        assert!(open.is_empty(), "round {round}: files left open: {open:?}");
        // New ones only: a controller's start may remove stale ones older tests left.
        let new = || -> Vec<PathBuf> {
            runtime_dirs()
                .into_iter()
                .filter(|d| !before.contains(d))
                .collect()
        };
        let clean = holds_within(Duration::from_secs(5), || new().is_empty());
        assert!(
            clean,
            "round {round} ({kind}): runtime directories left: {:?}",
            new()
        );
        let _ = run.child.status_with_deadline(Duration::from_secs(10));
    }
}

/// `chattr -i` of a directory when dropped (a failed test must not leave it immutable).
struct Mutable(PathBuf);

impl Drop for Mutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_run_directory_made_read_only_mid_run_ends_the_run_in_order_with_its_counts() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let run = Run::start(&config("shm", 3, ""), 30);
    let run_dir = run.out.join("run-00000001");
    let made = std::process::Command::new("chattr")
        .arg("+i")
        .arg(&run_dir)
        .output();
    let _undo = Mutable(run_dir.clone());
    match made {
        Ok(o) if o.status.success() => {}
        other => {
            // chattr needs root and a file system with the immutable flag (ext4, xfs, btrfs).
            eprintln!("skipped: chattr +i refused here ({other:?})");
            return;
        }
    }
    let t0 = Instant::now();
    let (out, v, dir) = run.finish(Duration::from_secs(60));
    // Dropped in this order (a tuple's fields go first to last): the directory made mutable
    // again, then the temporary directory removed. The other way round the removal failed on
    // the immutable run directory and the tree stayed in /tmp.
    let _cleanup = (_undo, dir);
    // In order and soon (not at the end of the 30 s it was given), non-zero.
    assert!(!out.status.success(), "{v}\n{}", out.stderr);
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(run_dir.to_str().unwrap()) && reason.contains("cannot be written"),
        "{reason}\n{v}"
    );
    // Integer counts, equal to what the files hold (the last file keeps its .writing name:
    // the directory cannot take the rename).
    let written = v["events_written"].as_u64().expect("an integer count");
    assert!(written > 0, "{v}");
    assert_eq!(ids_in_files(&v).len() as u64, written, "{v}");
    assert_eq!(v["restarts"], 0, "no restart spun on the directory: {v}");
}

/// A logger killed, then the run stopped (SIGINT) while its restart waits out the back-off:
/// the restart is given up, and the supervisor's drain does not wait for the events the
/// DCMs hold for the dead logger. It waited out its whole 30 s drain (a QA pass: 33 s from
/// the interrupt to the sheet).
#[test]
fn shm_a_stop_while_a_dead_logger_waits_for_its_restart_does_not_wait_out_the_drain() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let config =
        config("shm", 3, "").replace("restart_backoff_ms = 200", "restart_backoff_ms = 60000");
    let run = Run::start(&config, 60);
    run.kill("logger-1");
    run.child.wait_for_stderr(
        "the logger's restart scheduled",
        Duration::from_secs(30),
        |text| text.contains("logger-1 will be restarted").then_some(()),
    );
    let pid = run.child.id() as i32;
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    let sent = unsafe { libc::kill(pid, libc::SIGINT) };
    assert_eq!(sent, 0);
    // The deadline is the check: the drain alone would take 30 s.
    let (_out, v, _dir) = run.finish(Duration::from_secs(20));
    assert!(
        v["reason"].as_str().unwrap_or("").contains("logger-1"),
        "{v}"
    );
}

/// A readout node killed at the full L1 rate rejoins and follows the run: its emulated inputs
/// move on to where the run's clears say it is (`rodeo_ros::inputs::follow`), so the run's
/// last events are whole again. Its inputs began where the node's restart was decided, the
/// run was 100,000 events further on when they did, the node never caught up and 98-100% of
/// the run's events were partial, to its end (a QA pass).
#[test]
fn shm_a_readout_node_killed_at_the_full_rate_follows_the_run_after_its_restart() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // The default partition, its L1 as fast as it goes.
    let config = "[control]\nrestart_backoff_ms = 200\ndead_after_ms = 1500\n";
    let run = Run::start(config, 8);
    run.kill("ros-1");
    run.wait_rejoined(1);
    let (out, v, dir) = run.finish(Duration::from_secs(90));
    assert_survived(&out, &v, 1, dir.path());
    // The last events written, in file order: whole (none flagged partial).
    let mut last: Vec<bool> = Vec::new();
    let mut plain = Vec::new();
    for f in v["files"].as_array().expect("files") {
        let mut reader = RawFileReader::open(f.as_str().unwrap()).unwrap();
        while let Some(event) = reader.next_event() {
            decompress_event(event.unwrap().words, &mut plain).unwrap();
            let e = FullEvent::parse(&plain).unwrap();
            last.push(e.status().contains(Status::EVENT_PARTIAL));
        }
    }
    let tail = &last[last.len().saturating_sub(200)..];
    let partial = tail.iter().filter(|&&p| p).count();
    assert!(
        partial == 0,
        "{partial} of the last {} events partial: the node did not catch up\n{v}",
        tail.len()
    );
}
