//! `rodeo bench dma --quick --json`: checks the shape of the report, never timings.

use rodeo_testkit::rodeo;
use serde_json::Value;

#[test]
fn bench_dma_json_shape() {
    check("slink");
    check("felix");
}

fn check(generator: &str) {
    let out = rodeo!()
        .args(["bench", "dma", "--quick", "--json", "--seconds", "0.05"])
        .args(["--generator", generator])
        .output();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("one JSON object");
    assert_eq!(v["bench"], "dma");
    assert!(
        v["memcpy_64mib_bytes_per_s"]
            .as_f64()
            .is_some_and(|x| x > 0.0),
        "{v}"
    );
    assert!(v["max_ratio_to_memcpy"].is_number(), "{v}");
    assert!(v["best_ratio_2ch"].is_number());
    assert!(v["target_met"].is_boolean());
    let rows = v["rows"].as_array().expect("rows");
    let mut seen = Vec::new();
    for row in rows {
        for key in [
            "bytes_per_s",
            "per_channel_bytes_per_s",
            "memcpy_bytes_per_s",
            "ratio_to_memcpy",
            "card_cpu_per_s",
        ] {
            assert!(
                row[key].as_f64().is_some_and(|x| x >= 0.0),
                "{key} in {row}"
            );
        }
        assert_eq!(row["generator"], generator);
        seen.push((
            row["superpage_bytes"].as_u64().expect("superpage_bytes"),
            row["channels"].as_u64().expect("channels"),
        ));
    }
    for size in [32 * 1024, 2 * 1024 * 1024] {
        for channels in [1, 2] {
            assert!(
                seen.contains(&(size, channels)),
                "{size} x {channels} in {seen:?}"
            );
        }
    }
}
