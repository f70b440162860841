//! A shared-memory receiver killed with -9 and started again as often as its partition's
//! restart budget allows (issue 37, point 1): every new life gets the inbox back (its dead
//! predecessor's subscriber, listener and publishers cleaned up before it makes its own: no
//! `ExceedsMaxSupportedSubscribers`), and the sender that stayed reaches each one.
//!
//! The receiver is a real process: this test binary run again with [`CHILD_ENV`] set, which
//! makes [`child_router`] bind the inbox and echo until it is killed.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::shm::{self, ShmLimits};
use rodeo_transport::socket::{Frame, Received, SocketKind, Transport};

/// Set in the child: the inbox it binds.
const CHILD_ENV: &str = "RODEO_TEST_SHM_CHILD_INBOX";

/// What the partition of this test is: a receiver and a sender, restarted up to 4 times.
const LIMITS: ShmLimits = ShmLimits {
    apps: 2,
    restarts: 4,
};

/// The child's part (does nothing in a normal test run): binds the inbox named in
/// [`CHILD_ENV`], says `bound`, and echoes every message to its sender until it is killed.
#[test]
fn child_router() {
    let Ok(name) = std::env::var(CHILD_ENV) else {
        return;
    };
    shm::set_limits(LIMITS);
    let t = Transport::new(1).unwrap();
    let s = t.socket(SocketKind::Router).unwrap();
    s.bind(&Endpoint::parse(&format!("shm://{name}")).unwrap())
        .unwrap();
    println!("bound");
    let mut s = s;
    let mut msg = Received::default();
    // Killed with -9 by the test; the deadline only bounds a child the test forgot.
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if s.recv(&mut msg, 100).unwrap() {
            let peer = msg.peer.clone();
            let _ = s.try_send_to(&peer, [Frame::Copy(&msg.bytes)]);
        }
    }
}

/// Starts the child bound to `name`; returns it once it said `bound` (within 30 s).
fn start_child(name: &str) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_router", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            // libtest may print `test child_router ... ` on the same line before it.
            if line.trim_end().ends_with("bound") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the receiver did not bind its inbox within 30 s");
    }
    child
}

#[test]
fn a_receiver_killed_and_restarted_up_to_the_budget_gets_its_inbox_back_each_time() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    shm::set_limits(LIMITS);
    let name = format!("rodeo-test-{}-restarts/ros-1", std::process::id());
    let t = Transport::new(1).unwrap();
    let client = t.socket(SocketKind::Dealer).unwrap();
    client.set_identity(b"dcm-1").unwrap();
    client.set_send_timeout(200).unwrap();
    client
        .connect(&Endpoint::parse(&format!("shm://{name}")).unwrap())
        .unwrap();
    let mut client = client;
    let mut msg = Received::default();
    // The first life and one per restart of the budget.
    for life in 0..=LIMITS.restarts {
        let mut child = start_child(&name);
        let ping = format!("life {life}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut answered = false;
        while !answered && Instant::now() < deadline {
            // A send may fail while the new life's ports are being connected: ask again.
            let _ = client.send([Frame::Copy(ping.as_bytes())]);
            while client.recv(&mut msg, 100).unwrap() {
                answered |= msg.bytes == ping.as_bytes();
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(answered, "life {life} of the receiver never answered");
    }
    // What the last life left is removed (the next process of a partition would do it).
    drop(client);
    shm::clean_dead_nodes(Duration::from_secs(2));
}
