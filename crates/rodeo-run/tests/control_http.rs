//! The embedded partition under run control, over the real HTTP server on 127.0.0.1: the
//! token check, illegal transitions (409 naming the state), a failing transition (ERROR naming
//! the application), the metrics page, and the web page in headless Chromium.

use rodeo_testkit::http::request as http;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_control::config::PartitionConfig;
use rodeo_control::embedded::EmbeddedPartition;
use rodeo_control::lifecycle::State;
use rodeo_control::run_control::RunControl;
use rodeo_run::http::{HttpConfig, HttpServer};
use serde_json::Value;

const TOKEN: &str = "t0ken-for-tests";

fn command(addr: SocketAddr, auth: Option<&str>, body: &str) -> (u16, Value) {
    let (code, text) = http(addr, "POST", "/api/command", auth, body);
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn config(output: &Path) -> PartitionConfig {
    let mut c = PartitionConfig::default();
    c.run.output = output.display().to_string();
    c.run.events = 0;
    c.run.seconds = 600.0;
    c.l1.rate_hz = 2000.0;
    c.dcm.slots = 16;
    c
}

fn serve(c: PartitionConfig) -> (Arc<EmbeddedPartition>, HttpServer) {
    let p = Arc::new(EmbeddedPartition::new(c, None));
    let control: Arc<dyn RunControl> = p.clone();
    let server = HttpServer::start(
        "127.0.0.1:0",
        control,
        HttpConfig {
            token: Some(TOKEN.into()),
            ..HttpConfig::default()
        },
    )
    .unwrap();
    (p, server)
}

fn status(addr: SocketAddr) -> Value {
    let (code, body) = http(addr, "GET", "/api/status", None, "");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn commands_need_the_token_and_illegal_ones_name_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let (p, server) = serve(config(dir.path()));
    let addr = server.local_addr();
    assert_eq!(status(addr)["state"], "NONE");

    // No token, a wrong one, another scheme: 401, nothing changes.
    for auth in [None, Some("wrong"), Some("")] {
        let (code, _) = command(addr, auth, r#"{"command":"initialize"}"#);
        assert_eq!(code, 401);
    }
    assert_eq!(p.state(), State::None);
    // Bad JSON and unknown commands: 400.
    assert_eq!(command(addr, Some(TOKEN), "stop").0, 400);
    assert_eq!(command(addr, Some(TOKEN), r#"{"command":"halt"}"#).0, 400);
    // Illegal: 409 naming the state.
    let (code, body) = command(addr, Some(TOKEN), r#"{"command":"start"}"#);
    assert_eq!(code, 409);
    assert!(body["error"].as_str().unwrap().contains("NONE"), "{body}");

    // Up to RUNNING step by step, over HTTP.
    for (c, s) in [
        ("initialize", "INITIAL"),
        ("configure", "CONFIGURED"),
        ("connect", "CONNECTED"),
        ("start", "RUNNING"),
    ] {
        let (code, body) = command(addr, Some(TOKEN), &format!(r#"{{"command":"{c}"}}"#));
        assert_eq!(
            (code, body["state"].as_str()),
            (200, Some(s)),
            "{c}: {body}"
        );
    }
    let (code, body) = command(addr, Some(TOKEN), r#"{"command":"configure"}"#);
    assert_eq!(code, 409);
    assert!(
        body["error"].as_str().unwrap().contains("RUNNING"),
        "{body}"
    );
    let st = status(addr);
    assert!(
        st["apps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["state"] == "RUNNING"),
        "{st}"
    );
    // Data flows: wait (bounded) for some L1 accepts.
    wait_until("100 L1 accepts", Duration::from_secs(60), || {
        status(addr)["l1_accepts"].as_u64().unwrap() >= 100
    });
    // Metrics: counters and histograms, every family typed.
    let (code, metrics) = http(addr, "GET", "/metrics", None, "");
    assert_eq!(code, 200);
    let samples = metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    assert!(samples >= 20, "{samples} samples");
    assert!(metrics.contains("# TYPE rodeo_l1_accepts_total counter"));
    assert!(metrics.contains("# TYPE rodeo_dcm_request_latency_seconds histogram"));
    assert!(metrics.contains("rodeo_dcm_request_latency_seconds_bucket{app=\"dcm-1\",le=\"+Inf\"}"));
    assert!(metrics.contains("rodeo_partition_state{state=\"RUNNING\"} 1"));
    let (code, toml) = http(addr, "GET", "/api/config", None, "");
    assert_eq!(code, 200);
    assert!(
        PartitionConfig::from_toml(&toml, "served").is_ok(),
        "{toml}"
    );
    assert_eq!(http(addr, "GET", "/nope", None, "").0, 404);
    assert_eq!(http(addr, "DELETE", "/api/status", None, "").0, 405);

    // Down, over HTTP: stop drains, the balance sheet adds up.
    for (c, s) in [
        ("stop", "CONNECTED"),
        ("disconnect", "CONFIGURED"),
        ("unconfigure", "INITIAL"),
        ("shutdown", "NONE"),
    ] {
        let (code, body) = command(addr, Some(TOKEN), &format!(r#"{{"command":"{c}"}}"#));
        assert_eq!(
            (code, body["state"].as_str()),
            (200, Some(s)),
            "{c}: {body}"
        );
    }
    let summary = p.take_summary().expect("a balance sheet after disconnect");
    assert!(summary.l1_accepts >= 100);
    assert!(summary.balanced(), "{:?}", summary.problems);
}

#[test]
fn a_failing_transition_puts_the_partition_in_error_naming_the_application() {
    let dir = tempfile::tempdir().unwrap();
    // The output "directory" is under a regular file: the loggers' directory cannot be made.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let (p, server) = serve(config(&file.join("sub")));
    let addr = server.local_addr();
    assert_eq!(
        command(addr, Some(TOKEN), r#"{"command":"initialize"}"#).0,
        200
    );
    let (code, body) = command(addr, Some(TOKEN), r#"{"command":"configure"}"#);
    assert_eq!(code, 500, "{body}");
    assert_eq!(body["application"], "logger-1");
    assert_eq!(body["state"], "ERROR");
    let st = status(addr);
    assert_eq!(st["state"], "ERROR");
    assert!(
        st["error"].as_str().unwrap().starts_with("logger-1:"),
        "{st}"
    );
    let logger = &st["apps"].as_array().unwrap()[0];
    assert_eq!(
        (logger["name"].as_str(), logger["state"].as_str()),
        (Some("logger-1"), Some("ERROR"))
    );
    assert!(!st["recent_errors"].as_array().unwrap().is_empty());
    // From ERROR only shutdown.
    assert_eq!(
        command(addr, Some(TOKEN), r#"{"command":"connect"}"#).0,
        409
    );
    assert_eq!(
        command(addr, Some(TOKEN), r#"{"command":"shutdown"}"#).0,
        200
    );
    assert_eq!(p.state(), State::None);
    // run() reports the same failure, naming the application.
    let e = EmbeddedPartition::new(config(&file.join("sub")), None)
        .run(|_, _| {})
        .unwrap_err();
    assert_eq!(e.who(), "logger-1");
}

/// Headless Chromium, if present: `--dump-dom` after the page's script ran (virtual time).
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

fn dump_dom(browser: &str, url: &str) -> String {
    let out = std::process::Command::new("timeout")
        .args([
            "120",
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=5000",
            "--dump-dom",
            url,
        ])
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_web_page_shows_the_state_in_chromium() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have chromium (.ci/run installs it)"
        );
        eprintln!("skipped: no chromium on this machine (apt-get install chromium)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (p, server) = serve(config(dir.path()));
    let url = format!("http://{}/", server.local_addr());
    for c in ["initialize", "configure", "connect", "start"] {
        p.command(c.parse().unwrap()).unwrap();
    }
    wait_until("data flowing", Duration::from_secs(60), || {
        p.status().l1_accepts > 0
    });
    let dom = dump_dom(browser, &url);
    assert!(dom.contains("data-state=\"RUNNING\""), "{dom}");
    assert!(
        dom.contains("<tr data-app=\"dcm-1\"><td>dcm-1</td><td>dcm</td><td>RUNNING</td>"),
        "{dom}"
    );
    // The producers table: a row per readout input, with its state.
    assert!(dom.contains("<table id=\"producers\">"), "{dom}");
    assert!(dom.contains("<tr data-input="), "no producer rows: {dom}");
    assert!(
        !dom.contains("<b id=\"started\">-</b>"),
        "no start time: {dom}"
    );
    // Stopped through the HTTP API with the token, as the page's stop button does.
    let (code, _) = command(server.local_addr(), Some(TOKEN), r#"{"command":"stop"}"#);
    assert_eq!(code, 200);
    let dom = dump_dom(browser, &url);
    assert!(dom.contains("data-state=\"CONNECTED\""), "{dom}");
    assert!(
        dom.contains("<td>supervisor</td><td>supervisor</td><td>CONNECTED</td>"),
        "{dom}"
    );
    let l1: u64 = p.status().l1_accepts;
    assert!(
        dom.contains(&format!("<b id=\"l1\">{l1}</b>")),
        "page shows {l1} L1 accepts: {dom}"
    );
    for c in ["disconnect", "unconfigure", "shutdown"] {
        p.command(c.parse().unwrap()).unwrap();
    }
}

#[test]
fn the_token_is_never_served_and_a_trickling_client_is_cut_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.control.token = "secret-in-config".into();
    let p = Arc::new(EmbeddedPartition::new(c, None));
    let control: Arc<dyn RunControl> = p.clone();
    let server = HttpServer::start(
        "127.0.0.1:0",
        control,
        HttpConfig {
            token: Some(TOKEN.into()),
            workers: 1,
            io_timeout: Duration::from_millis(800),
            ..HttpConfig::default()
        },
    )
    .unwrap();
    let addr = server.local_addr();
    let (code, body) = http(addr, "GET", "/api/config", None, "");
    assert_eq!(code, 200);
    assert!(!body.contains("secret-in-config"), "{body}");
    assert!(body.contains("(hidden)"), "{body}");

    // One byte every 200 ms: each read is quick, the request never ends. The only worker must
    // give up at the connection's deadline (408), not serve this client forever.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let start = Instant::now();
    let request = b"GET /api/status HTTP/1.1\r\nHost: slow\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    for b in request.iter() {
        // Stop writing once the answer is there (writing to a closed connection could reset
        // it and lose the answer).
        s.set_nonblocking(true).unwrap();
        let answered = matches!(s.peek(&mut [0u8; 1]), Ok(n) if n > 0);
        s.set_nonblocking(false).unwrap();
        if answered || s.write_all(std::slice::from_ref(b)).is_err() {
            break;
        }
        // The slow client's pace (the behaviour under test, not a synchronisation).
        std::thread::sleep(Duration::from_millis(200));
        if start.elapsed() > Duration::from_secs(4) {
            break;
        }
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 408"), "{out:?}");
    assert!(start.elapsed() < Duration::from_secs(10));
    // The worker is free again.
    assert_eq!(http(addr, "GET", "/api/status", None, "").0, 200);
}

use rodeo_testkit::wait_until;

#[test]
fn a_thousand_idle_connections_do_not_lock_an_operator_out() {
    let dir = tempfile::tempdir().unwrap();
    let p = Arc::new(EmbeddedPartition::new(config(dir.path()), None));
    let control: Arc<dyn RunControl> = p.clone();
    let server = HttpServer::start(
        "127.0.0.1:0",
        control,
        HttpConfig {
            token: Some(TOKEN.into()),
            // Long enough that none of the idle connections expires during the test.
            io_timeout: Duration::from_secs(60),
            ..HttpConfig::default()
        },
    )
    .unwrap();
    let addr = server.local_addr();
    // 1,000 connections that send nothing, and 20 that send half a request head.
    let mut idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    for _ in 0..20 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /api/status HTTP/1.1\r\nHost: sl")
            .unwrap();
        idle.push(s);
    }
    // The operator: status and a command, each answered within a second.
    for _ in 0..5 {
        let t0 = Instant::now();
        let (code, _) = http(addr, "GET", "/api/status", None, "");
        assert_eq!(code, 200);
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }
    let t0 = Instant::now();
    let (code, v) = command(addr, Some(TOKEN), r#"{"command":"initialize"}"#);
    assert_eq!(code, 200, "{v}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(server.counters().evicted.load(Ordering::Relaxed), 0);
    drop(idle);
    p.command("shutdown".parse().unwrap()).unwrap();
}

#[test]
fn beyond_max_connections_the_oldest_idle_one_is_closed_and_a_new_client_served() {
    let dir = tempfile::tempdir().unwrap();
    let p = Arc::new(EmbeddedPartition::new(config(dir.path()), None));
    let control: Arc<dyn RunControl> = p.clone();
    let server = HttpServer::start(
        "127.0.0.1:0",
        control,
        HttpConfig {
            io_timeout: Duration::from_secs(60),
            max_connections: 50,
            ..HttpConfig::default()
        },
    )
    .unwrap();
    let addr = server.local_addr();
    let mut idle: Vec<TcpStream> = (0..50).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // The reader has taken all 50 (accepts are asynchronous to connect).
    wait_until("50 connections accepted", Duration::from_secs(10), || {
        let (code, _) = http(addr, "GET", "/api/status", None, "");
        code == 200 && server.counters().evicted.load(Ordering::Relaxed) >= 1
    });
    // Each answered status request took a slot and evicted the oldest idle connection: the
    // first idle one is closed (read gives EOF), the operator was served.
    idle[0]
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut b = [0u8; 16];
    assert_eq!(
        idle[0].read(&mut b).unwrap_or(0),
        0,
        "the oldest was not closed"
    );
    idle.clear();
}
