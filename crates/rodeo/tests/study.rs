//! `rodeo study NAME`: each study writes its CSV, summary.json and PNG plots; tiny grids and
//! short points, so only the shape of the output is checked, never a rate.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn study(dir: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_rodeo"))
        .arg("study")
        .args(args)
        .args(["--json", "--output"])
        .arg(dir)
        .output()
        .expect("run rodeo");
    assert!(
        out.status.success(),
        "rodeo study {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
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
    let v = study(
        dir.path(),
        &[
            "ros",
            "--quick",
            "--seconds",
            "0.15",
            "--rounds",
            "1",
            "--max-points",
            "8",
        ],
    );
    assert_eq!(v["points"], 8);
    assert_eq!(v["bad_replies"], 0);
    let (header, rows) = files(
        dir.path(),
        "ros",
        &[
            "fig9_inverse_delete_rate.png",
            "fig9_cpu_per_event.png",
            "model_prediction.png",
            "model_prediction_cpu.png",
        ],
    );
    assert_eq!(rows, 8);
    for col in [
        "delete_rate_hz",
        "readout_fraction",
        "wall_predicted",
        "cpu_relative_error",
    ] {
        assert!(header.iter().any(|h| h == col), "{col} in {header:?}");
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
}

#[test]
fn sfi_slice_pool_dma_studies_write_their_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v = study(dir.path(), &["sfi", "--quick", "--seconds", "0.1"]);
    assert_eq!(v["bad_replies"], 0);
    let (header, rows) = files(
        dir.path(),
        "sfi",
        &["sfi_message_rate.png", "sfi_bandwidth.png"],
    );
    assert_eq!(rows, 3);
    assert!(header.iter().any(|h| h == "message_rate_hz"));
    for row in v["rows"].as_array().expect("rows") {
        assert_eq!(row["sources"], 1600);
        assert!(row["messages"].as_u64().is_some_and(|m| m > 0), "{row}");
    }

    let v = study(
        dir.path(),
        &["slice", "--quick", "--seconds", "0.05", "--rounds", "1"],
    );
    assert_eq!(v["bad_replies"], 0);
    let (_, rows) = files(
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

    study(dir.path(), &["dma", "--quick", "--seconds", "0.05"]);
    files(dir.path(), "dma", &["dma_throughput.png"]);
}
