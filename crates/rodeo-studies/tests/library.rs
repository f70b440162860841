//! The benches and studies are library calls: a caller builds their options with
//! `rodeo_studies::defaults()` and gets the report the command would print.

use rodeo_studies::bench::dma;
use rodeo_studies::study::{self, Name};

#[test]
fn a_bench_runs_without_the_command_line() {
    let mut args: dma::Args = rodeo_studies::defaults();
    // --quick: 0.2 s per point, long enough for the card threads to start on a loaded machine.
    args.quick = true;
    let report = dma::measure_report(args).unwrap();
    assert_eq!(report.bench, "dma");
    // --quick: two superpage sizes, one and two channels each.
    assert_eq!(report.rows.len(), 4);
    for row in &report.rows {
        let moved = row["bytes_per_s"].as_f64().unwrap();
        assert!(moved > 0.0, "no bytes moved: {row:?}");
        assert!(row["memcpy_bytes_per_s"].as_f64().unwrap() > 0.0);
        assert!(row["ratio_to_memcpy"].as_f64().is_some(), "{row:?}");
        assert_eq!(row["fill"], "payload");
    }
    assert!(report.fields["memcpy_64mib_bytes_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_study_writes_its_csv_summary_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let mut args: study::Args = rodeo_studies::defaults_with(&["dma"]);
    args.quick = true;
    args.output = dir.path().to_path_buf();
    assert_eq!(args.name, Name::Dma);
    let outcome = study::run(&args).unwrap();
    assert_eq!(outcome.report.bench, "study_dma");
    let out = dir.path().join("dma");
    for f in ["dma.csv", "summary.json"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        summary["rows"].as_array().unwrap().len(),
        outcome.report.rows.len()
    );
    let pngs = std::fs::read_dir(&out)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "png")
        })
        .count();
    assert!(pngs >= 1, "no plot written");
}
