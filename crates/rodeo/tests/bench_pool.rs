//! `rodeo bench pool --json` on a tiny workload: checks the shape of the report, never timings.

use rodeo_testkit::rodeo;
use serde_json::Value;

#[test]
fn bench_pool_json_shape() {
    let out = rodeo!()
        .args([
            "bench",
            "pool",
            "--json",
            "--quick",
            "--live-mib",
            "4",
            "--touch-mib",
            "1",
            "--repeat",
            "1",
        ])
        .output();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("one JSON object");
    assert_eq!(v["bench"], "pool");
    assert_eq!(v["chunk_bytes"], 4096);
    assert_eq!(v["live_bytes"], 4 << 20);
    for key in [
        "max_ratio_eager_over_rodeo_1t",
        "max_ratio_eager_over_rodeo_2t",
        "max_ratio_malloc_over_rodeo_1t",
        "max_ratio_malloc_over_rodeo_2t",
        "avg_ratio_first_touch_cold_over_warm",
        "rodeo_warmup_ms",
    ] {
        assert!(v[key].is_number(), "{key} missing in {v}");
    }
    assert!(v["targets_met"].is_boolean());
    let rows = v["rows"].as_array().expect("rows");
    let mut seen = Vec::new();
    for row in rows {
        for key in ["avg_ns", "p99_ns", "max_ns"] {
            assert!(
                row[key].as_f64().is_some_and(|x| x >= 0.0),
                "{key} in {row}"
            );
        }
        assert!(row["allocations"].as_u64().is_some_and(|n| n > 0), "{row}");
        assert!(row["preemptions"].is_u64(), "{row}");
        seen.push((
            row["allocator"].as_str().expect("allocator").to_string(),
            row["threads"].as_u64().expect("threads"),
        ));
    }
    for allocator in ["rodeo", "rodeo_nocache", "malloc", "eager"] {
        for threads in [1, 2] {
            assert!(
                seen.contains(&(allocator.to_string(), threads)),
                "row {allocator}/{threads} missing: {seen:?}"
            );
        }
    }
    for allocator in ["first_touch_cold", "first_touch_warm"] {
        assert!(seen.contains(&(allocator.to_string(), 1)), "{allocator}");
    }
    // 4 MiB live of 4 KiB chunks, allocate 2 / free 1: two allocations per live chunk.
    let rodeo = rows
        .iter()
        .find(|r| r["allocator"] == "rodeo")
        .expect("rodeo row");
    assert_eq!(rodeo["allocations"], 2 * 1024);
}
