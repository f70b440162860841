//! A run's record has one shape: the same fields whether the run ended OK, failed, crashed or
//! was recovered from the `summary.json` it left (issue 35).

use std::collections::BTreeSet;
use std::path::Path;

use rodeo_control::summary::{NodeSummary, RunSummary};
use rodeo_run::output::OutputDir;
use rodeo_run::sheet::{RunSheet, RunStatus};
use serde_json::{json, Value};

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

fn run_dir(output: &Path, n: u32) -> std::path::PathBuf {
    let dir = output.join(format!("run-{n:08}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn ok_failed_crashed_and_recovered_runs_have_the_same_record_fields() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    {
        let mut output = OutputDir::open(out, "test").unwrap();
        // 1: a run that ended in order and balanced.
        let summary = RunSummary {
            run: 1,
            l1_accepts: 10,
            accepted: 1,
            rejected: 9,
            output: run_dir(out, 1),
            nodes: vec![NodeSummary {
                name: "ros-1".into(),
                ..NodeSummary::default()
            }],
            ..RunSummary::default()
        };
        let ok = RunSheet::from_summary(&summary, 0.0, None, false);
        assert_eq!(ok.status, RunStatus::Ok, "{:?}", ok.problems);
        output.record(&ok, String::new(), Some(1), "test", Vec::new());
        // 2: a run that failed on the way.
        let failed = RunSheet::failed(2, run_dir(out, 2), "ros-1 died".into(), &[], &[]);
        output.record(&failed, String::new(), Some(2), "test", Vec::new());
    }
    // 3: a run directory without a record or a sheet (its process was killed); 4: one with
    // the sheet an older rodeo wrote before it died (a failure's short shape).
    run_dir(out, 3);
    let four = run_dir(out, 4);
    std::fs::write(
        four.join("summary.json"),
        json!({"run_number": 4, "balanced": false, "reason": "x", "problems": ["x"],
               "files": []})
        .to_string(),
    )
    .unwrap();
    let output = OutputDir::open(out, "test").unwrap();
    let db = output.db();
    let records: Vec<Value> = (1..=4).map(|n| db.get(n).unwrap().unwrap()).collect();
    let statuses: Vec<&str> = records
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["ok", "failed", "crashed", "failed"]);
    assert_eq!(records[3]["started_by"], "recovered");
    for r in &records[1..] {
        assert_eq!(
            keys(r),
            keys(&records[0]),
            "the record of run {}",
            r["run_number"]
        );
        assert_eq!(
            keys(&r["summary"]),
            keys(&records[0]["summary"]),
            "the sheet of run {}",
            r["run_number"]
        );
    }
    // The listing (`rodeo runs --json`, `GET /api/runs`) too.
    let listed = db.list().unwrap();
    assert_eq!(listed.len(), 4);
    for r in &listed {
        assert_eq!(keys(r), keys(&listed[0]));
    }
    // Counts nobody made are null, not 0; what the files prove is a number.
    assert!(records[1]["summary"]["l1_accepts"].is_null());
    assert_eq!(records[2]["summary"]["events_written"], 0);
    assert_eq!(records[0]["summary"]["l1_accepts"], 10);
}

#[test]
fn a_second_owner_of_an_output_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let _first = OutputDir::open(tmp.path(), "rodeo serve --output here").unwrap();
    let e = OutputDir::open(tmp.path(), "rodeo run").unwrap_err();
    let text = format!("{e:#}");
    assert!(text.contains("rodeo serve --output here"), "{text}");
    assert!(text.contains("in use"), "{text}");
}
