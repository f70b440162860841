//! `rodeo study NAME`: each study writes its CSV, summary.json and PNG plots; tiny grids and
//! short points, so only the shape of the output is checked, never a rate.

use std::path::Path;

use rodeo_testkit::rodeo;
use serde_json::Value;

/// Runs `rodeo study ARGS --json` into `dir`; returns its report and whether it exited with
/// success (a study whose check failed, e.g. a model missing its goal, exits with 1 and still
/// prints its report).
fn study_status(dir: &Path, args: &[&str]) -> (Value, bool) {
    let out = rodeo!()
        .arg("study")
        .args(args)
        .args(["--json", "--output"])
        .arg(dir)
        .output();
    let code = out.status.code();
    assert!(
        code == Some(0) || code == Some(1),
        "rodeo study {args:?}: {code:?} {}",
        out.stderr
    );
    let v = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rodeo study {args:?}: not one JSON object ({e}): {}",
            out.stderr
        )
    });
    (v, code == Some(0))
}

/// Runs a study that must succeed.
fn study(dir: &Path, args: &[&str]) -> Value {
    let (v, ok) = study_status(dir, args);
    assert!(ok, "rodeo study {args:?} failed: {v}");
    v
}

/// The interleaved, probe-guarded schedule's fields: in the report and in every row.
fn schedule_fields(v: &Value, header: &[String]) {
    for key in [
        "rounds",
        "repeated_rounds",
        "slow_rounds_kept",
        "probe_best_per_s",
        "probe_slow_ratio",
        "wall_seconds",
    ] {
        assert!(v[key].is_number(), "{key} in the report: {v}");
    }
    for col in ["runs", "repeated_rounds", "probe_ratio"] {
        assert!(header.iter().any(|h| h == col), "{col} in {header:?}");
    }
}

/// Checks the files of study `name` and returns its CSV header and rows.
fn files(dir: &Path, name: &str, pngs: &[&str]) -> (Vec<String>, usize) {
    let d = dir.join(name);
    let summary: Value =
        serde_json::from_slice(&std::fs::read(d.join("summary.json")).expect("summary.json"))
            .expect("summary is JSON");
    assert_eq!(summary["bench"], format!("study_{name}"));
    let csv = std::fs::read_to_string(d.join(format!("{name}.csv"))).expect("csv");
    let mut lines = csv.lines();
    let header: Vec<String> = lines
        .next()
        .expect("header")
        .split(',')
        .map(String::from)
        .collect();
    let rows = lines.count();
    assert_eq!(rows, summary["rows"].as_array().expect("rows").len());
    for png in pngs {
        let bytes = std::fs::read(d.join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{png} is not a PNG"
        );
        assert!(bytes.len() > 5000, "{png} is nearly empty");
    }
    (header, rows)
}

#[test]
fn ros_study_fits_the_model_on_a_tiny_grid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (v, ok) = study_status(
        dir.path(),
        &[
            "ros",
            "--quick",
            "--seconds",
            "0.15",
            "--rounds",
            "2",
            "--max-points",
            "8",
        ],
    );
    assert_eq!(v["points"], 8);
    assert_eq!(v["bad_replies"], 0);
    // A tiny grid need not meet the goal, but the verdict says which it is, and the exit
    // status follows it.
    let model_ok = v["model_ok"].as_bool().expect("model_ok");
    assert_eq!(ok, model_ok, "exit status follows model_ok: {v}");
    assert_eq!(v["heldout_error_goal"], 0.15);
    assert_eq!(v["basis"], "process_cpu_time");
    let verdict = v["verdict"].as_str().expect("verdict");
    assert_eq!(verdict.starts_with("FAILED"), !model_ok, "{verdict}");
    for key in [
        "holdout_max_relative_error",
        "holdout_error_p10",
        "holdout_error_median",
        "holdout_error_p90",
        "node_holdout_max_relative_error",
        "wall_holdout_max_relative_error",
    ] {
        assert!(v[key].as_f64().is_some_and(f64::is_finite), "{key}: {v}");
    }
    assert_eq!(v["rounds"], 2);
    let (header, rows) = files(
        dir.path(),
        "ros",
        &[
            "fig9_inverse_delete_rate.png",
            "fig9_cpu_per_event.png",
            "model_prediction.png",
            "model_prediction_cpu.png",
            "fig9_node_cpu_per_event.png",
            "model_prediction_node.png",
        ],
    );
    assert_eq!(rows, 8);
    schedule_fields(&v, &header);
    for col in [
        "delete_rate_hz",
        "delete_rate_spread",
        "readout_fraction",
        "wall_predicted",
        "cpu_relative_error",
        "node_cpu_us_per_event",
        "node_cpu_spread",
        "node_busy_cpu_us_per_event",
        "node_relative_error",
    ] {
        assert!(header.iter().any(|h| h == col), "{col} in {header:?}");
    }
    for row in v["rows"].as_array().expect("rows") {
        assert_eq!(row["runs"], 2, "every point kept once per round: {row}");
    }
    let model: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("ros/model.json")).expect("model.json"),
    )
    .expect("model is JSON");
    for name in ["t_ext_s", "t_int_s", "t_del_s", "t_kb_s"] {
        let t = model["parameters"][name].as_f64().expect(name);
        assert!(t >= 0.0 && t.is_finite(), "{name} = {t}");
        assert!(model["wall_clock"]["parameters"][name].as_f64().is_some());
    }
    assert_eq!(model["holdout_points"], 2);
    assert!(model["holdout_max_relative_error"]
        .as_f64()
        .is_some_and(f64::is_finite));
    assert_eq!(model["model_ok"], v["model_ok"]);
    assert_eq!(model["heldout_error_goal"], 0.15);
    assert_eq!(model["holdout_error_bootstrap"]["draws"], 200);
    for basis in ["node_cpu_time", "wall_clock"] {
        assert!(model[basis]["model_ok"].is_boolean(), "{basis}");
    }
    assert!(model["measurement"]["repeated_rounds"].is_number());
}

#[test]
fn sfi_slice_pool_dma_studies_write_their_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v = study(
        dir.path(),
        &["sfi", "--quick", "--seconds", "0.1", "--rounds", "2"],
    );
    assert_eq!(v["bad_replies"], 0);
    let (header, rows) = files(
        dir.path(),
        "sfi",
        &["sfi_message_rate.png", "sfi_bandwidth.png"],
    );
    assert_eq!(rows, 3);
    assert!(header.iter().any(|h| h == "message_rate_hz"));
    assert!(header.iter().any(|h| h == "message_rate_spread"));
    schedule_fields(&v, &header);
    for row in v["rows"].as_array().expect("rows") {
        assert_eq!(row["sources"], 1600);
        // A median over the runs.
        assert!(row["messages"].as_f64().is_some_and(|m| m > 0.0), "{row}");
        assert_eq!(row["runs"], 2, "{row}");
    }

    let v = study(
        dir.path(),
        &["slice", "--quick", "--seconds", "0.05", "--rounds", "1"],
    );
    assert_eq!(v["bad_replies"], 0);
    let (header, rows) = files(
        dir.path(),
        "slice",
        &[
            "slice_pipeline_time.png",
            "slice_event_parallelism_latency.png",
            "slice_fragment_building_time.png",
            "slice_roi_parallelism_time.png",
        ],
    );
    assert_eq!(rows, 3 * (3 + 3 + 3 + 3));
    schedule_fields(&v, &header);
    assert!(header.iter().any(|h| h == "time_per_event_spread"));

    let v = study(
        dir.path(),
        &["dma", "--quick", "--seconds", "0.05", "--rounds", "2"],
    );
    let (header, _) = files(dir.path(), "dma", &["dma_throughput.png"]);
    assert_eq!(v["repeat"], 2);
    assert!(header.iter().any(|h| h == "bytes_per_s_spread"));
    for row in v["rows"].as_array().expect("rows") {
        assert_eq!(row["repeats"], 2, "{row}");
    }
}

/// `rodeo study swrod` on its first three points (4 ROBs x 100 words: the S-LINK reference,
/// then the SW ROD with 4 and 16 E-links): rows for both inputs, the ratio to the reference,
/// the node's figures, both plots; every point balanced.
#[test]
fn swrod_study_writes_rates_against_elinks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v = study(
        dir.path(),
        &["swrod", "--quick", "--seconds", "0.3", "--max-points", "3"],
    );
    assert_eq!(v["all_balanced"], true, "{v}");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{v}");
    assert_eq!(rows[0]["input"], "dma", "{v}");
    for (row, elinks) in rows[1..].iter().zip([4, 16]) {
        assert_eq!(row["input"], "swrod", "{v}");
        assert_eq!(row["elinks"], elinks, "{v}");
        assert_eq!(row["packet_payload_bytes"], 4 * (100 / elinks - 4), "{v}");
        assert!(row["l1_rate_hz"].as_f64().unwrap() > 0.0, "{v}");
        assert!(row["ratio_to_dma"].as_f64().unwrap() > 0.0, "{v}");
        assert!(row["node_swrod_fragments"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(row["lost_fragments"], 0, "{v}");
    }
    let (header, n) = files(
        dir.path(),
        "swrod",
        &["swrod_rate.png", "swrod_packets.png"],
    );
    assert_eq!(n, 3);
    for col in ["robs", "elinks", "packets_per_s", "node_swrod_in_place"] {
        assert!(header.iter().any(|h| h == col), "{col} in {header:?}");
    }
}
