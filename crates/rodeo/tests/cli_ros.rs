//! `rodeo ros`, `rodeo tester` and `rodeo bench ros` as a user runs them: real processes, tcp on
//! 127.0.0.1. Checks shapes and balances, never timings.

use std::time::Duration;

use rodeo_testkit::cli::Running;
use rodeo_testkit::rodeo;
use serde_json::Value;

/// The first line `rodeo ros` prints on stdout (waited for, bounded).
fn first_line(ros: &Running) -> String {
    ros.wait_for_stdout("the first line", Duration::from_secs(60), |out| {
        out.lines().next().map(String::from)
    })
}

/// What `rodeo ros` printed on stdout after its first line, once it ended: its summary.
fn after_first_line(stdout: &str) -> &str {
    stdout.split_once('\n').map_or("", |(_, rest)| rest)
}

#[test]
fn tester_against_a_ros_process_balances() {
    let ros = rodeo!()
        .args(["ros", "--listen", "tcp://127.0.0.1:0", "--json"])
        .args(["--channels", "4", "--fragment-words", "100"])
        .args(["--pages-per-channel", "256", "--seconds", "60"])
        .spawn();
    let line = first_line(&ros);
    let ep = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let t = rodeo!()
        .args(["tester", "--connect", &ep, "--channels", "4", "--json"])
        .args([
            "--events",
            "2000",
            "--seconds",
            "30",
            "--max-outstanding",
            "32",
        ])
        .output();
    assert!(t.status.success(), "{}", t.stderr);
    let v: Value = serde_json::from_str(&t.stdout).unwrap();
    let row = &v["rows"][0];
    assert_eq!(row["events"], 2000, "{v}");
    assert_eq!(row["bad_replies"], 0);
    assert_eq!(row["unanswered"], 0);
    let requests = row["l2_requests"].as_u64().unwrap() + row["eb_requests"].as_u64().unwrap();
    // SAFETY: kill() on our own child's pid; no memory is involved.
    unsafe {
        libc::kill(ros.id() as libc::pid_t, libc::SIGTERM);
    }
    let out = ros.wait_with_deadline(Duration::from_secs(60));
    let rest = after_first_line(&out.stdout);
    assert!(out.status.success());
    let s: Value = serde_json::from_str(rest.trim()).unwrap();
    assert_eq!(s["requests"].as_u64(), Some(requests), "{s}");
    assert_eq!(s["replies"].as_u64(), Some(requests));
    assert_eq!(s["cleared_l1ids"].as_u64(), Some(2000));
    assert_eq!(s["bad_messages"], 0);
}

#[test]
fn tester_in_process_prints_csv() {
    tester_csv("direct");
}

#[test]
fn tester_in_process_over_zeromq_inproc_prints_csv() {
    tester_csv("inproc");
}

fn tester_csv(transport: &str) {
    let t = rodeo!()
        .args(["tester", "--channels", "6", "--fragment-words", "50"])
        .args(["--transport", transport])
        .args(["--pages-per-channel", "128", "--events", "500", "--csv"])
        .output();
    assert!(t.status.success(), "{}", t.stderr);
    let text = t.stdout;
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let vals: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(head.len(), vals.len());
    let at = |k: &str| vals[head.iter().position(|h| *h == k).unwrap()];
    assert_eq!(at("events"), "500");
    assert_eq!(at("bad_replies"), "0");
    assert!(head.contains(&"p99_latency_ns"));
}

fn bench(transport: &str) {
    let out = rodeo!()
        .args(["bench", "ros", "--quick", "--json", "--seconds", "0.3"])
        .args(["--transport", transport])
        .output();
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["bench"], "ros");
    let baseline = if transport == "direct" {
        "zmq_inproc_l1_rate_hz"
    } else {
        "transport_limit_hz"
    };
    for k in [
        "l1_rate_hz",
        baseline,
        "data_path_l1_rate_hz",
        "input_only_l1_rate_hz",
        "core_cpu_ns_per_event",
        "tester_cpu_ns_per_event",
    ] {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {v}");
    }
    assert!(v["target_met"].is_boolean());
    // The rate over time: 250 ms intervals, summarised.
    let steps = v["interval_l1_rates_hz"]
        .as_array()
        .expect("interval rates");
    assert!(!steps.is_empty(), "{v}");
    let q = |k: &str| v[k].as_f64().unwrap_or(-1.0);
    assert!(
        0.0 <= q("interval_l1_rate_min_hz")
            && q("interval_l1_rate_min_hz") <= q("interval_l1_rate_median_hz")
            && q("interval_l1_rate_median_hz") <= q("interval_l1_rate_max_hz"),
        "{v}"
    );
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        for k in [
            "l1_rate_hz",
            "requests_per_s",
            "bytes_per_s",
            "p50_latency_ns",
            "p99_latency_ns",
        ] {
            assert!(r[k].as_f64().is_some_and(|x| x >= 0.0), "{k}: {r}");
        }
        assert_eq!(r["bad_replies"], 0, "{r}");
    }
}

#[test]
fn bench_ros_inproc_json_shape() {
    bench("inproc");
}

#[test]
fn bench_ros_direct_json_shape() {
    bench("direct");
}

#[test]
fn bench_ros_tcp_json_shape() {
    bench("tcp");
}

/// The tester's JSON after a successful run of `events` events, checked balanced: every
/// request answered, no bad reply, no lost fragment, some fragments moved.
fn balanced_tester_row(t: &rodeo_testkit::cli::Output, events: u64) -> Value {
    assert!(t.status.success(), "{}", t.stderr);
    let v: Value = serde_json::from_str(&t.stdout).unwrap();
    let row = &v["rows"][0];
    assert_eq!(row["events"], events, "{v}");
    assert_eq!(row["bad_replies"], 0, "{v}");
    assert_eq!(row["lost_fragments"], 0, "{v}");
    assert_eq!(row["unanswered"], 0, "{v}");
    assert!(row["fragments"].as_u64().unwrap() > 0, "{v}");
    v
}

/// `rodeo tester --input swrod`: an in-process node fed by SW ROD fragment builders answers
/// every request of the mix, nothing lost, nothing bad.
#[test]
fn tester_in_process_with_the_sw_rod_input_balances() {
    let t = rodeo!()
        .args([
            "tester",
            "--input",
            "swrod",
            "--elinks",
            "6",
            "--channels",
            "4",
        ])
        .args(["--fragment-words", "120", "--pages-per-channel", "256"])
        // Generous: a loaded machine may hold the builders back a while.
        .args(["--pending-timeout-ms", "10000", "--seconds", "60"])
        .args(["--events", "4000", "--json"])
        .output();
    let v = balanced_tester_row(&t, 4000);
    let row = &v["rows"][0];
    assert_eq!(row["clears"], 40, "{v}");
    // The in-process node's own figures: its SW ROD sinks wrote into lent store pages.
    let node = |k: &str| row[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    assert!(node("node_swrod_fragments") >= 4 * 4000, "{v}");
    assert!(node("node_swrod_in_place") > 0, "{v}");
    assert!(
        node("node_swrod_in_place") <= node("node_swrod_fragments"),
        "{v}"
    );
    assert!(
        node("node_core_cpu_ns") >= node("node_core_idle_cpu_ns"),
        "{v}"
    );
    // The whole process's CPU over the run: the builders' threads worked in it, and its share
    // per event is that CPU over the 4,000 events.
    let process = node("node_process_cpu_ns");
    assert!(process > 0, "{v}");
    let per_event = row["node_cpu_us_per_event"].as_f64().unwrap();
    let want = process as f64 / 4000.0 / 1e3;
    assert!(
        (per_event - want).abs() <= want * 1e-9,
        "{per_event} != {want}: {v}"
    );
}

/// `rodeo tester --input dma-pages`: the cards write into the store's pages, every request of
/// the mix is answered, nothing lost or bad; a fragment size whose units would waste most of a
/// page is refused with what to use instead.
#[test]
fn tester_in_process_with_the_page_dma_input_balances_and_refuses_a_wasteful_size() {
    let t = rodeo!()
        .args(["tester", "--input", "dma-pages", "--channels", "4"])
        .args(["--fragment-words", "200", "--pages-per-channel", "256"])
        .args(["--pending-timeout-ms", "10000", "--seconds", "60"])
        .args(["--events", "4000", "--json"])
        .output();
    balanced_tester_row(&t, 4000);
    let refused = rodeo!()
        .args(["tester", "--input", "dma-pages", "--channels", "2"])
        .args(["--fragment-words", "350", "--seconds", "5", "--json"])
        .output();
    assert!(!refused.status.success(), "{}", refused.stdout);
    assert!(
        refused.stderr.contains("page DMA input") && refused.stderr.contains("--input dma"),
        "{}",
        refused.stderr
    );
}

/// `rodeo ros --input swrod` prints the builders' and links' counters with the node's, and
/// every fragment built is stored or counted dropped at shutdown.
#[test]
fn ros_with_the_sw_rod_input_reports_builder_counters() {
    let out = rodeo!()
        .args(["ros", "--listen", "tcp://127.0.0.1:0", "--input", "swrod"])
        .args(["--channels", "2", "--elinks", "3", "--fragment-words", "60"])
        .args(["--pages-per-channel", "64", "--page-bytes", "1024"])
        .args(["--seconds", "0.5", "--json"])
        .output();
    assert!(out.status.success(), "{}", out.stderr);
    let text = out.stdout;
    let last = text.lines().last().unwrap();
    let s: Value = serde_json::from_str(last).unwrap();
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("no {k} in {s}"));
    assert!(n("swrod_fragments") > 0, "{s}");
    assert_eq!(n("swrod_corrupt_packets"), 0, "{s}");
    assert_eq!(
        n("swrod_fragments"),
        n("stored_fragments") + n("swrod_link_dropped_no_consumer"),
        "{s}"
    );
    assert_eq!(n("input_stalls"), n("swrod_link_sink_waits"), "{s}");
}

#[test]
fn sigterm_ends_a_ros_process_within_a_second_beside_a_client_that_never_reads() {
    use rodeo_transport::endpoint::Endpoint;
    use rodeo_transport::message::{decode, encode_data_request, Message};
    use rodeo_transport::socket::{Frame, Received, SocketKind, Transport};
    use std::time::Instant;

    let ros = rodeo!()
        .args(["ros", "--listen", "tcp://127.0.0.1:0", "--json"])
        .args([
            "--channels",
            "4",
            "--fragment-words",
            "100",
            "--input",
            "firmware",
        ])
        .args(["--pages-per-channel", "256", "--seconds", "60"])
        .spawn();
    let line = first_line(&ros);
    let ep = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let t = Transport::new(1).unwrap();
    let connect = |hwm: Option<u32>| {
        let s = t.socket(SocketKind::Dealer).unwrap();
        if let Some(h) = hwm {
            s.set_high_water_marks(h).unwrap();
        }
        s.set_send_timeout(5000).unwrap();
        s.connect(&Endpoint::parse(&ep).unwrap()).unwrap();
        s
    };
    // The bad client: 20,000 requests, never a read.
    let mut bad = connect(Some(1));
    let mut buf = Vec::new();
    for i in 0..20_000u32 {
        buf.clear();
        encode_data_request(&mut buf, i, i % 32, &[]);
        bad.send([Frame::Copy(&buf)]).unwrap();
    }
    // The good client is answered every time.
    let mut good = connect(None);
    let mut msg = Received::default();
    for i in 0..200u32 {
        buf.clear();
        encode_data_request(&mut buf, i, i % 32, &[]);
        good.send([Frame::Copy(&buf)]).unwrap();
        assert!(
            good.recv(&mut msg, 10_000).unwrap(),
            "request {i} unanswered"
        );
        let d = decode(&msg.bytes).unwrap();
        assert!(matches!(d.message, Message::DataReply { .. }));
        assert_eq!(d.header.transaction, i);
    }
    // SIGTERM with the bad client still connected: gone within a second.
    let t0 = Instant::now();
    // SAFETY: kill() on our own child's pid; no memory is involved.
    unsafe {
        libc::kill(ros.id() as libc::pid_t, libc::SIGTERM);
    }
    let out = ros.wait_with_deadline(Duration::from_secs(5));
    let status = out.status;
    let took = t0.elapsed();
    assert!(status.success());
    assert!(took < Duration::from_secs(1), "SIGTERM took {took:?}");
    let rest = after_first_line(&out.stdout);
    let s: Value = serde_json::from_str(rest.trim()).unwrap();
    assert!(s["send_dropped"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(
        s["send_dropped_by_peer"].as_object().unwrap().len(),
        1,
        "{s}"
    );
    drop(bad);
}

/// Values no type refuses (non-finite, huge, zero) are refused by the option's parser, naming
/// the option, before anything starts: until 2026-12-03 `--seconds nan` or `1e300` panicked in
/// `Duration::from_secs_f64`, `--descriptors 18446744073709551615` aborted allocating, and
/// `--max-outstanding 0` or `--events 0` ran nothing and exited 0.
#[test]
fn hostile_option_values_are_refused_naming_the_option() {
    for (cmd, option, value) in [
        (&["tester"][..], "--seconds", "nan"),
        (&["tester"][..], "--seconds", "1e300"),
        (&["tester"][..], "--descriptors", "18446744073709551615"),
        (&["tester"][..], "--clear-group", "18446744073709551615"),
        (&["tester"][..], "--max-outstanding", "0"),
        (&["tester"][..], "--events", "0"),
        (&["tester"][..], "--eb-fraction", "nan"),
        (&["tester"][..], "--l2-fraction", "1.5"),
        (&["tester"][..], "--max-rate", "inf"),
        (&["tester"][..], "--input-rate", "nan"),
        (
            &["tester"][..],
            "--pending-timeout-ms",
            "18446744073709551615",
        ),
        (&["bench", "ros"][..], "--seconds", "nan"),
        (&["bench", "dma"][..], "--seconds", "1e300"),
        (&["bench", "transport"][..], "--seconds", "nan"),
        (&["cards"][..], "--seconds", "inf"),
        (&["monitor", "tcp://127.0.0.1:9"][..], "--seconds", "1e300"),
        (&["bench", "logger"][..], "--mib", "18446744073709551615"),
        (&["bench", "logger"][..], "--batch", "0"),
        (
            &["bench", "transport"][..],
            "--bytes",
            "18446744073709551615",
        ),
        (&["bench", "swrod"][..], "--packets", "18446744073709551615"),
        (&["bench", "swrod"][..], "--reps", "0"),
        (&["bench", "pool"][..], "--repeat", "18446744073709551615"),
        // Ran as one E-link, silently.
        (
            &["gen", "link", "--mode", "felix", "--units", "1"][..],
            "--elinks",
            "0",
        ),
        // A 400 GB mmap failure, named after the memory and not the option.
        (&["tester"][..], "--channels", "100000"),
        // Lost fragments: two events in flight shared an extended L1ID.
        (&["tester"][..], "--l1id-wrap", "2"),
        (&["tester"][..], "--io-threads", "100000"),
        (&["tester"][..], "--pages-per-channel", "0"),
        (&["study", "ros"][..], "--rounds", "1000000"),
    ] {
        let o = rodeo!().args(cmd).args([option, value]).output();
        let what = format!("{cmd:?} {option} {value}");
        assert_eq!(o.status.code(), Some(2), "{what}: {}", o.text());
        assert!(
            o.stderr.contains("invalid value") && o.stderr.contains(option),
            "{what}: {}",
            o.text()
        );
        assert!(!o.stderr.contains("panicked"), "{what}: {}", o.text());
    }
    // A logger bench that would take most of its disk (16 TiB a row) is refused before it
    // writes anything: it must not fill the disk others write to.
    let dir = tempfile::tempdir().unwrap();
    let o = rodeo!()
        .args(["bench", "logger", "--mib", "16777216", "--dir"])
        .arg(dir.path())
        .output();
    assert!(!o.status.success(), "{}", o.text());
    assert!(o.stderr.contains("bytes free"), "{}", o.text());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // A link file of 2^32 units (4 TiB) likewise: it wrote until the disk was full.
    let file = dir.path().join("huge.link");
    let o = rodeo!()
        .args([
            "gen",
            "link",
            "--mode",
            "felix",
            "--units",
            "4294967296",
            "-o",
        ])
        .arg(&file)
        .output();
    assert_eq!(o.status.code(), Some(2), "{}", o.text());
    assert!(o.stderr.contains("--units 4294967296"), "{}", o.text());
    assert!(!file.exists(), "nothing written");
    // A limit the direct link cannot apply is refused, not ignored.
    let o = rodeo!()
        .args(["tester", "--seconds", "1", "--max-message-bytes", "2048"])
        .output();
    assert_eq!(o.status.code(), Some(2), "{}", o.text());
    assert!(o.stderr.contains("--transport inproc"), "{}", o.text());
    // A cause is said once: the memory error named its mmap failure twice.
    let o = rodeo!()
        .args(["tester", "--seconds", "1", "--channels", "64"])
        .args(["--pages-per-channel", "4194304", "--page-bytes", "16777216"])
        .output();
    assert_eq!(o.status.code(), Some(2), "{}", o.text());
    assert_eq!(o.stderr.matches("mmap of").count(), 1, "{}", o.text());
}

/// A tester whose node never answers (a listener that never speaks ZeroMQ) ends by itself and
/// says so: exit status 1 and the unanswered requests on stderr (it printed a rate and exited
/// 0), within the drain timeout of silence rather than after its whole `--seconds` (it sent
/// into the void for 300 s).
#[test]
fn a_tester_whose_node_never_answers_fails() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = format!("tcp://{}", silent.local_addr().unwrap());
    let began = std::time::Instant::now();
    let t = rodeo!()
        .args(["tester", "--connect", &ep, "--seconds", "300", "--json"])
        .deadline(Duration::from_secs(120))
        .output();
    assert!(began.elapsed() < Duration::from_secs(60), "{}", t.text());
    assert_eq!(t.status.code(), Some(1), "{}", t.text());
    assert!(t.stderr.contains("unanswered"), "{}", t.text());
    assert!(t.stderr.contains("answered nothing"), "{}", t.text());
    let v: Value = serde_json::from_str(&t.stdout).unwrap();
    let row = &v["rows"][0];
    assert!(row["unanswered"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(row["fragments"], 0, "{v}");
    assert_eq!(row["stopped_on_silence"], true, "{v}");
    assert!(row["seconds"].as_f64().unwrap() < 60.0, "{v}");
}
