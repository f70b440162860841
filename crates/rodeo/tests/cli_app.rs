//! `rodeo app` on its own: an application whose controller is there but never speaks (frozen
//! before its first ping reached the application) leaves by itself after `--dead-after-ms`,
//! which the controller passes to every application it starts.

use std::time::{Duration, Instant};

use rodeo_testkit::rodeo;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{SocketKind, Transport};

#[test]
fn an_application_whose_controller_never_pings_leaves_after_dead_after_ms() {
    // A controller's socket that takes the connection and never answers: a controller frozen
    // from the start (SIGSTOP before its first ping).
    let t = Transport::new(1).unwrap();
    let frozen = t.socket(SocketKind::Router).unwrap();
    let ep = frozen
        .bind(&Endpoint::parse("tcp://127.0.0.1:*").unwrap())
        .unwrap();
    let t0 = Instant::now();
    // Its stdin stays open (null is not a closed pipe here: no --exit-on-stdin-eof), so only
    // the controller's silence can end it; past the deadline the test fails.
    let out = rodeo!()
        .args([
            "app",
            "ros",
            "--name",
            "ros-1",
            "--control",
            &ep,
            "--heartbeat-ms",
            "100",
            "--dead-after-ms",
            "800",
        ])
        .deadline(Duration::from_secs(30))
        .output();
    let took = t0.elapsed();
    assert!(out.status.success(), "{}: {}", out.command, out.stderr);
    assert!(
        out.stderr.contains("no message from the controller"),
        "{}",
        out.stderr
    );
    assert!(
        took >= Duration::from_millis(800),
        "left after {took:?}, before the controller's silence reached 800 ms"
    );
    drop(frozen);
}
