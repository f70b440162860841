//! `rodeo bench partition --json` on a short run: the report's shape, a CPU figure above zero,
//! every thread named, the run's verdict, and nothing left in the temporary directory; never
//! a time.

use std::time::Duration;

use rodeo_testkit::{files_under, rodeo};
use serde_json::Value;

#[test]
fn bench_partition_json_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let out = rodeo!()
        .args(["bench", "partition", "--events", "20000", "--json"])
        .env("TMPDIR", tmp.path())
        .deadline(Duration::from_secs(120))
        .output();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("one JSON object");
    assert_eq!(v["bench"], "partition");
    assert_eq!(v["mode"], "embedded");
    assert!(
        ["ok", "degraded"].contains(&v["verdict"].as_str().unwrap_or("")),
        "{v}"
    );
    assert_eq!(v["balanced"], true, "{v}");
    assert_eq!(v["l1_accepts"], 20_000, "{v}");
    for key in ["cpu_us_per_l1", "rusage_cpu_us_per_l1", "wakeups_per_l1"] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {v}");
    }
    // The hops of the default partition: every event's data requested and logged.
    assert_eq!(v["counters_l1_accepts"], 20_000, "{v}");
    for key in [
        "dcm_data_requests_per_l1",
        "ros_fragments_sent_per_l1",
        "dcm_received_bytes_per_l1",
        "logger_events_written_per_l1",
    ] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {v}");
    }
    let rows = v["rows"].as_array().expect("rows");
    let threads: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "thread").collect();
    assert!(threads.len() >= 4, "{v}");
    for r in &threads {
        assert!(r["thread"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
        assert!(
            r["application"].as_str().is_some_and(|s| !s.is_empty()),
            "{r}"
        );
        assert!(r["cpu_ns"].as_u64().is_some(), "{r}");
        assert!(r["wakeups_per_l1"].as_f64().is_some(), "{r}");
    }
    // The bench's own main thread, and the applications' threads by their names.
    assert!(threads.iter().any(|r| r["application"] == "bench"), "{v}");
    let apps: Vec<&str> = rows
        .iter()
        .filter(|r| r["kind"] == "application")
        .filter_map(|r| r["application"].as_str())
        .collect();
    for app in ["supervisor", "dcm-1", "ros-1"] {
        assert!(apps.contains(&app), "{app} not in {apps:?}");
    }
    // The application rows sum the threads.
    let sum = |kind: &str| -> u64 {
        rows.iter()
            .filter(|r| r["kind"] == kind)
            .map(|r| r["cpu_ns"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(sum("thread"), sum("application"));
    assert_eq!(sum("thread"), v["cpu_ns"].as_u64().unwrap());
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// SIGTERM in the middle of the bench's run (embedded, and with `--processes` where the
/// applications are processes of their own): the run stops as `rodeo run` stops, the bench
/// fails with a message that says so (an interrupted run is not a figure), and its temporary
/// directory is gone; within a deadline.
#[test]
fn an_interrupted_bench_stops_its_run_and_leaves_nothing_behind() {
    for mode in [&[][..], &["--processes"][..]] {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = rodeo!()
            .args([
                "bench",
                "partition",
                "--events",
                "100000000",
                "--rate",
                "20000",
            ])
            .args(mode)
            .env("TMPDIR", tmp.path())
            .spawn();
        // The run is going once its output directory holds an event file.
        rodeo_testkit::wait_until(
            "the bench's run writing events",
            Duration::from_secs(60),
            || {
                files_under(tmp.path())
                    .iter()
                    .any(|p| p.to_string_lossy().contains(".data"))
            },
        );
        child.signal(libc::SIGTERM);
        let out = child.wait_with_deadline(Duration::from_secs(60));
        assert!(!out.status.success(), "{mode:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("interrupted after"),
            "{mode:?}: {}",
            out.stderr
        );
        let left = files_under(tmp.path());
        assert!(left.is_empty(), "{mode:?}: left behind: {left:?}");
        let dirs: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert!(dirs.is_empty(), "{mode:?}: left behind: {dirs:?}");
    }
}
