//! `rodeo ctl status|runs|alarms` against a served partition (issue 39): aligned tables for
//! people, every column of every row where its title is, and the API's JSON with `--json`.

use std::time::Duration;

use rodeo_testkit::cli::Output;
use rodeo_testkit::http::request as http;
use rodeo_testkit::{rodeo, wait_for};
use serde_json::Value;

/// Checks that in every line after the header, each left-aligned column starts where its
/// title starts and each right-aligned one ends where its title ends.
fn assert_aligned(lines: &[&str], left: &[&str], right: &[&str]) {
    let header = lines[0];
    let at = |t: &str| {
        header
            .find(t)
            .unwrap_or_else(|| panic!("no column {t:?} in {header:?}"))
    };
    for line in &lines[1..] {
        let b = line.as_bytes();
        let blank = |i: usize| i >= b.len() || b[i] == b' ';
        for t in left {
            let i = at(t);
            assert!(
                !blank(i) && (i == 0 || blank(i - 1)),
                "{t:?} does not start at {i}:\n{header}\n{line}"
            );
        }
        for t in right {
            let end = at(t) + t.len();
            assert!(
                !blank(end - 1) && blank(end),
                "{t:?} does not end at {end}:\n{header}\n{line}"
            );
        }
    }
}

#[test]
fn ctl_prints_aligned_tables_and_json_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    std::fs::write(
        &cfg,
        "[run]\nevents = 0\nseconds = 0\n[l1]\nrate_hz = 2000.0\n",
    )
    .unwrap();
    let child = rodeo!()
        .args(["serve", "--config"])
        .arg(&cfg)
        .arg("--output")
        .arg(dir.path())
        .args(["--http", "127.0.0.1:0"])
        .env("RODEO_TOKEN", "tok")
        .echo_stderr()
        .spawn();
    let addr = child.http_address(Duration::from_secs(60));
    let url = format!("http://{addr}");
    let ctl = |args: &[&str]| -> Output {
        let out = rodeo!()
            .arg("ctl")
            .args(args)
            .args(["--url", &url])
            .env("RODEO_TOKEN", "tok")
            .deadline(Duration::from_secs(120))
            .output();
        out.assert_success();
        out
    };
    ctl(&["start"]);
    wait_for("events flowing", Duration::from_secs(60), || {
        let (_, st) = http(addr, "GET", "/api/status", None, "");
        let st: Value = serde_json::from_str(&st).ok()?;
        (st["l1_accepts"].as_u64().unwrap_or(0) > 100).then_some(())
    });

    let status = ctl(&["status"]);
    assert!(
        serde_json::from_str::<Value>(&status.stdout).is_err(),
        "a table, not JSON: {}",
        status.stdout
    );
    let lines: Vec<&str> = status.stdout.lines().collect();
    let blocks: Vec<&[&str]> = lines.split(|l| l.is_empty()).collect();
    assert!(
        blocks.len() >= 3,
        "run, applications, inputs:\n{}",
        status.stdout
    );
    let (run, apps, inputs) = (blocks[0], blocks[1], blocks[2]);
    // The run's line (no words given: no line of them).
    assert_eq!(run.len(), 2, "{}", status.stdout);
    assert!(run[1].contains("RUNNING"), "{}", run[1]);
    assert_aligned(
        run,
        &["partition", "state"],
        &[
            "run",
            "run time",
            "L1 accepts",
            "L1 rate (Hz)",
            "events written",
        ],
    );
    // The default partition: a supervisor, 2 DCMs, a readout node, a logger.
    assert!(apps.len() >= 6, "{}", status.stdout);
    assert!(apps[1..].iter().all(|l| l.contains("RUNNING")), "{apps:#?}");
    assert_aligned(
        apps,
        &["application", "role", "state", "host", "error"],
        &["pid", "restarts", "rate (Hz)"],
    );
    assert!(
        inputs.len() >= 2 && inputs[0].starts_with("node"),
        "{inputs:#?}"
    );
    let rows = inputs
        .iter()
        .take_while(|l| !l.starts_with("recent error"))
        .copied()
        .collect::<Vec<_>>();
    assert_aligned(
        &rows,
        &["node", "ROB", "address", "input"],
        &["fragments", "bytes", "errors", "rate (Hz)"],
    );
    let json: Value = serde_json::from_str(&ctl(&["status", "--json"]).stdout).unwrap();
    assert_eq!(json["state"], "RUNNING", "{json}");

    // Conditions from the shell: posted, then listed as a table.
    ctl(&["conditions", "hv_volts=1500", "beam=pi+ 120 GeV"]);
    let conditions = ctl(&["conditions"]);
    let lines: Vec<&str> = conditions.stdout.lines().collect();
    assert!(lines[0].starts_with("condition"), "{}", conditions.stdout);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("hv_volts") && l.contains(" 1500 ")),
        "{}",
        conditions.stdout
    );

    // Two runs recorded, newest first, as `rodeo runs` prints them; the second started with
    // its words from the shell.
    ctl(&["stop"]);
    ctl(&[
        "start",
        "--comment",
        "HV scan",
        "--run-type",
        "calibration",
        "--shifter",
        "A. Shifter",
    ]);
    let status = ctl(&["status"]);
    assert!(
        status.stdout.contains("calibration") && status.stdout.contains("HV scan"),
        "{}",
        status.stdout
    );
    ctl(&["stop"]);
    let runs = ctl(&["runs"]);
    let lines: Vec<&str> = runs.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", runs.stdout);
    assert!(lines[1].trim_start().starts_with("2 "), "{}", lines[1]);
    assert_aligned(
        &lines,
        &["verdict", "started (UTC)"],
        &[
            "run", "duration", "L1", "accepted", "written", "MB", "files",
        ],
    );
    let listed = rodeo!().args(["runs", "--output"]).arg(dir.path()).output();
    listed.assert_success();
    assert_eq!(listed.stdout, runs.stdout, "the same table as `rodeo runs`");
    assert!(
        lines[1].contains("[calibration]") && lines[1].contains("(HV scan)"),
        "{}",
        lines[1]
    );
    let json: Value = serde_json::from_str(&ctl(&["runs", "--json"]).stdout).unwrap();
    assert_eq!(json["runs"].as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!(json["runs"][0]["shifter"], "A. Shifter", "{json}");
    assert_eq!(
        json["runs"][0]["conditions"],
        Value::Array(Vec::new()),
        "{json}"
    );
    let keys: Vec<&str> = json["runs"][1]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["key"].as_str())
        .collect();
    assert!(
        keys.contains(&"beam") && keys.contains(&"hv_volts"),
        "{json}"
    );

    // No alarm configured: the header alone; the JSON lists none.
    let alarms = ctl(&["alarms"]);
    assert!(
        alarms.stdout.starts_with("alarm  state"),
        "{}",
        alarms.stdout
    );
    let json: Value = serde_json::from_str(&ctl(&["alarms", "--json"]).stdout).unwrap();
    assert_eq!(json["alarms"], Value::Array(Vec::new()), "{json}");

    ctl(&["shutdown"]);
    let out = child.wait_with_deadline(Duration::from_secs(60));
    assert!(out.status.success(), "{}", out.stderr);
}
