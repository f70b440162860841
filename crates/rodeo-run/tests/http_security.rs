//! The HTTP API's security over the real server on 127.0.0.1: HTTPS with a CA made at test time
//! (a client verifies it; plain HTTP, a stalled handshake and an untrusted client get nothing
//! and hold nobody up), the roles (operator, expert) and their audit trail, and a handler that
//! panics answered 500 by a worker that goes on.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_control::config::PartitionConfig;
use rodeo_control::embedded::EmbeddedPartition;
use rodeo_control::lifecycle::{Command, State, TransitionError};
use rodeo_control::prometheus::MetricsWriter;
use rodeo_control::run_control::{PartitionStatus, RunControl};
use rodeo_run::http::client::{request, Answer};
use rodeo_run::http::{tls, HttpConfig, HttpServer};
use rodeo_run::rundb::RunDb;
use rodeo_testkit::tls::make_pki;
use serde_json::Value;

const OPERATOR: &str = "op-token-1";
const EXPERT: &str = "expert-token-1";

fn config(output: &Path) -> PartitionConfig {
    let mut c = PartitionConfig::default();
    c.run.output = output.display().to_string();
    c.run.events = 0;
    c.run.seconds = 600.0;
    c.l1.rate_hz = 1000.0;
    c.dcm.slots = 8;
    c
}

fn call(url: &str, ca: &Path, method: &str, path: &str, token: Option<&str>, body: &str) -> Answer {
    request(
        url,
        Some(ca),
        method,
        path,
        token,
        body,
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{method} {path} on {url}: {e}"))
}

#[test]
fn https_with_a_private_ca_serves_the_roles_and_records_them() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), &["127.0.0.1", "localhost"]);
    RunDb::open_in(dir.path()).unwrap();
    let p = Arc::new(EmbeddedPartition::new(
        config(&dir.path().join("out")),
        None,
    ));
    let control: Arc<dyn RunControl> = p.clone();
    let server = HttpServer::start(
        "127.0.0.1:0",
        control,
        HttpConfig {
            token: Some(OPERATOR.into()),
            expert_token: Some(EXPERT.into()),
            tls: Some(tls::server_config(&pki.cert, &pki.key).unwrap()),
            runs_db: Some(dir.path().join(rodeo_run::rundb::FILE_NAME)),
            io_timeout: Duration::from_secs(2),
            ..HttpConfig::default()
        },
    )
    .unwrap();
    let addr = server.local_addr();
    let url = format!("https://{addr}");
    let ca = pki.ca.as_path();

    // Verified by the CA, by IP address and by name.
    let a = call(&url, ca, "GET", "/api/status", None, "");
    assert_eq!(a.status, 200, "{}", a.body);
    let by_name = format!("https://localhost:{}", addr.port());
    assert_eq!(
        call(&by_name, ca, "GET", "/api/status", None, "").status,
        200
    );
    // A client that does not trust the CA (the system's roots) gets no answer.
    let untrusted = request(
        &url,
        None,
        "GET",
        "/api/status",
        None,
        "",
        Duration::from_secs(10),
    );
    assert!(untrusted.is_err(), "{untrusted:?}");
    // Plain HTTP on the HTTPS port: no HTTP answer, the connection ends.
    let mut plain = TcpStream::connect(addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    plain
        .write_all(b"GET /api/status HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(
        !got.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );

    // A handshake that stalls holds nobody up and is cut at the deadline.
    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .unwrap();
    for _ in 0..3 {
        let t0 = Instant::now();
        assert_eq!(call(&url, ca, "GET", "/api/status", None, "").status, 200);
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }
    stalled
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let t0 = Instant::now();
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest);
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "not cut: {:?}",
        t0.elapsed()
    );

    // Roles over HTTPS: the operator commands, only the expert changes the configuration.
    let init = r#"{"command":"initialize"}"#;
    assert_eq!(
        call(&url, ca, "POST", "/api/command", None, init).status,
        401
    );
    let a = call(&url, ca, "POST", "/api/command", Some(OPERATOR), init);
    assert_eq!((a.status, p.state()), (200, State::Initial), "{}", a.body);
    let a = call(
        &url,
        ca,
        "PUT",
        "/api/config",
        Some(OPERATOR),
        "[dcm]\nslots = 4\n",
    );
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.body.contains("expert role"), "{}", a.body);
    // The embedded partition does not change its configuration: past the role check, 405.
    let a = call(
        &url,
        ca,
        "PUT",
        "/api/config",
        Some(EXPERT),
        "[dcm]\nslots = 4\n",
    );
    assert_eq!(a.status, 405, "{}", a.body);
    let a = call(
        &url,
        ca,
        "POST",
        "/api/command",
        Some(EXPERT),
        r#"["shutdown"]"#,
    );
    assert_eq!(a.status, 400, "a JSON array is no command: {}", a.body);
    let a = call(
        &url,
        ca,
        "POST",
        "/api/command",
        Some(EXPERT),
        r#"{"command":"shutdown"}"#,
    );
    assert_eq!((a.status, p.state()), (200, State::None), "{}", a.body);

    // The audit trail: every one of those, accepted or refused, newest first.
    let a = call(&url, ca, "GET", "/api/audit", None, "");
    assert_eq!(a.status, 200, "{}", a.body);
    let audit: Value = serde_json::from_str(&a.body).unwrap();
    let rows: Vec<(String, String, u64, bool)> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["role"].as_str().unwrap().to_string(),
                e["action"].as_str().unwrap().to_string(),
                e["status"].as_u64().unwrap(),
                e["tls"].as_bool().unwrap(),
            )
        })
        .collect();
    let expect = [
        ("expert", "command shutdown", 200),
        ("expert", "command (not a command)", 400),
        ("expert", "config", 405),
        ("operator", "config", 403),
        ("operator", "command initialize", 200),
        ("unauthenticated", "command initialize", 401),
    ];
    assert_eq!(rows.len(), expect.len(), "{audit}");
    for (row, (role, action, status)) in rows.iter().zip(expect) {
        assert_eq!(row.0, role, "{audit}");
        assert!(row.1.starts_with(action), "{audit}");
        assert_eq!(row.2, status, "{audit}");
        assert!(row.3, "over https: {audit}");
    }
    assert!(audit["audit"][0]["peer"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    assert!(!a.body.contains(OPERATOR) && !a.body.contains(EXPERT));
    assert_eq!(server.counters().unauthorized.load(Ordering::Relaxed), 1);
    assert_eq!(server.counters().forbidden.load(Ordering::Relaxed), 1);
}

/// A partition whose commands and metrics panic: what a bug in a handler looks like.
struct Exploding(EmbeddedPartition);

impl RunControl for Exploding {
    fn status(&self) -> PartitionStatus {
        self.0.status()
    }
    fn command(&self, _: Command) -> Result<State, TransitionError> {
        panic!("a command handler that panics");
    }
    fn config_toml(&self) -> String {
        self.0.config_toml()
    }
    fn write_metrics(&self, _: &mut MetricsWriter) {
        let v: Vec<u8> = Vec::new();
        let _ = v[usize::from(v.is_empty())];
    }
}

fn plain(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: &str) -> Answer {
    request(
        &format!("http://{addr}"),
        None,
        method,
        path,
        token,
        body,
        Duration::from_secs(30),
    )
    .unwrap()
}

#[test]
fn a_panicking_handler_is_a_500_and_the_only_worker_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let control: Arc<dyn RunControl> =
        Arc::new(Exploding(EmbeddedPartition::new(config(dir.path()), None)));
    let server = HttpServer::start(
        "127.0.0.1:0",
        control,
        HttpConfig {
            token: Some(OPERATOR.into()),
            workers: 1,
            ..HttpConfig::default()
        },
    )
    .unwrap();
    let addr = server.local_addr();
    for _ in 0..3 {
        let a = plain(addr, "GET", "/metrics", None, "");
        assert_eq!(a.status, 500, "{}", a.body);
        assert!(a.body.contains("the service goes on"), "{}", a.body);
        let a = plain(
            addr,
            "POST",
            "/api/command",
            Some(OPERATOR),
            r#"{"command":"start"}"#,
        );
        assert_eq!(a.status, 500, "{}", a.body);
        // The same single worker answers the next request.
        assert_eq!(plain(addr, "GET", "/api/status", None, "").status, 200);
    }
    assert_eq!(server.counters().panics.load(Ordering::Relaxed), 6);
}
