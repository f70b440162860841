//! `rodeo bench swrod --json` on a tiny input: checks the shape of the report, never timings.

use rodeo_testkit::rodeo;
use serde_json::Value;

#[test]
fn bench_swrod_json_shape() {
    let out = rodeo!()
        .args(["bench", "swrod", "--elinks", "12", "--packet-bytes", "8"])
        .args(["--packets", "20000", "--reps", "1", "--json"])
        .output();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("one JSON object");
    assert_eq!(v["bench"], "swrod");
    let rows = v["rows"].as_array().expect("rows");
    // --threads not given: 1 and 2 threads.
    let threads: Vec<u64> = rows
        .iter()
        .map(|r| r["threads"].as_u64().unwrap())
        .collect();
    assert_eq!(threads, [1, 2]);
    for row in rows {
        assert_eq!(row["elinks"], 12);
        assert_eq!(row["packet_bytes"], 8);
        for key in [
            "packets_per_s",
            "fragments_per_s",
            "bytes_per_s",
            "memcpy_ratio",
            "ns_per_packet",
        ] {
            assert!(row[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {row}");
        }
        // Every generated packet went through the builder and none was dropped.
        assert!(row["packets"].as_u64().unwrap() >= 20_000, "{row}");
        assert_eq!(row["dropped_packets"], 0, "{row}");
    }
}
