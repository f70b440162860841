//! `rodeo bench transport --json` on short points: checks the shape of the report (every row,
//! its fields, the same-run ratios of the stream transport), never timings; and `--hosts`, the
//! consumer in another network namespace.

use rodeo_testkit::rodeo;
use serde_json::Value;

/// The `transport` of each row, in order.
fn transport_names(rows: &[Value]) -> Vec<&str> {
    rows.iter()
        .filter_map(|r| r["transport"].as_str())
        .collect()
}

#[test]
fn bench_transport_json_shape_with_the_stream_row_and_its_ratios() {
    // iceoryx2's default root; the iceoryx2_raw row keeps its records under rodeo's instead.
    let default_root = std::path::Path::new("/tmp/iceoryx2");
    let root_was_there = default_root.exists();
    let out = rodeo!()
        .args(["bench", "transport", "--json", "--bytes", "12288"])
        .args(["--seconds", "0.1"])
        .output();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("one JSON object");
    assert_eq!(v["bench"], "transport");
    let rows = v["rows"].as_array().expect("rows");
    let names = transport_names(rows);
    assert_eq!(
        names,
        [
            "direct",
            "iceoryx2",
            "iceoryx2_single",
            "iceoryx2_raw",
            "zmq_ipc",
            "zmq_tcp",
            "tcp",
            "stream_tcp",
            "stream_tls"
        ]
    );
    assert_eq!(v["across_hosts"], false);
    for row in rows {
        assert_eq!(row["message_bytes"], 12288, "{row}");
        assert!(row["messages"].as_u64().is_some_and(|n| n > 0), "{row}");
        for key in ["msg_per_s", "bytes_per_s", "cpu_ns_per_msg", "seconds"] {
            assert!(row[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {row}");
        }
        let processes = if row["transport"] == "direct" { 1 } else { 2 };
        assert_eq!(row["processes"], processes, "{row}");
        assert_eq!(row["across_hosts"], false, "{row}");
    }
    if !root_was_there {
        assert!(
            !default_root.exists(),
            "the bench left iceoryx2's default root /tmp/iceoryx2 behind"
        );
    }
    for key in [
        "stream_vs_tcp_12288",
        "stream_tls_vs_stream_tcp_12288",
        "stream_vs_zmq_tcp_12288",
        "shm_vs_zmq_ipc_12288",
        "shm_vs_iceoryx2_raw_12288",
    ] {
        assert!(
            v[key].as_f64().is_some_and(|x| x > 0.0),
            "{key} missing in {v}"
        );
    }
}

#[test]
fn bench_transport_stream_row_alone_has_no_ratio_to_rows_not_measured() {
    let out = rodeo!()
        .args(["bench", "transport", "--json", "--transport", "stream_tcp"])
        .args(["--bytes", "98304", "--seconds", "0.1"])
        .output();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("one JSON object");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["transport"], "stream_tcp");
    assert_eq!(rows[0]["message_bytes"], 98304);
    assert!(v.get("stream_vs_tcp_98304").is_none(), "{v}");
}

/// Why `--hosts` cannot run here (`None`: it can).
fn no_namespaces() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces need it)");
    }
    let ip = std::process::Command::new("ip")
        .arg("-V")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    if !ip.is_ok_and(|s| s.success()) {
        return Some("ip (iproute2) not found");
    }
    None
}

#[test]
fn bench_transport_hosts_runs_the_consumers_in_another_namespace_and_removes_it() {
    if let Some(why) = no_namespaces() {
        if std::env::var_os("CI").is_some() {
            panic!("--hosts cannot run on CI: {why}");
        }
        println!("skipped: {why}");
        return;
    }
    let out = rodeo!()
        .args([
            "bench",
            "transport",
            "--json",
            "--hosts",
            "--bytes",
            "12288",
        ])
        .args(["--seconds", "0.1"])
        .output();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("one JSON object");
    assert_eq!(v["across_hosts"], true);
    let rows = v["rows"].as_array().expect("rows");
    let names = transport_names(rows);
    assert_eq!(names, ["tcp", "zmq_tcp", "stream_tcp", "stream_tls"]);
    for row in rows {
        assert_eq!(row["across_hosts"], true, "{row}");
        assert!(row["messages"].as_u64().is_some_and(|n| n > 0), "{row}");
    }
    for key in ["stream_vs_tcp_12288", "stream_tls_vs_stream_tcp_12288"] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {v}");
    }
    // The namespace made for the bench is gone.
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let pid_tag = "rodeo-bt-";
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains(pid_tag),
        "left behind: {}",
        String::from_utf8_lossy(&list.stdout)
    );
    // A transport of one host only is refused with --hosts, naming the choices.
    let out = rodeo!()
        .args([
            "bench",
            "transport",
            "--json",
            "--hosts",
            "--transport",
            "iceoryx2",
        ])
        .output();
    assert!(!out.status.success());
    assert!(out.stderr.contains("stream_tls"), "{}", out.stderr);
}
