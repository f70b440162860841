//! A ZeroMQ peer that stops reading costs its sender one send timeout, not one per message
//! (the shared-memory twin of this test is in shm.rs).

use std::time::{Duration, Instant};

use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{Frame, Received, SocketKind, Transport};

#[test]
fn a_zeromq_peer_that_stopped_reading_costs_one_send_timeout() {
    let t = Transport::new(1).unwrap();
    let ep = Endpoint::parse(&format!("inproc://stalled-{}", std::process::id())).unwrap();
    let mut server = t.socket(SocketKind::Router).unwrap();
    server.set_high_water_marks(4).unwrap();
    server.bind(&ep).unwrap();
    let mut client = t.socket(SocketKind::Dealer).unwrap();
    client.set_high_water_marks(4).unwrap();
    client.set_send_timeout(300).unwrap();
    client.connect(&ep).unwrap();
    let mut queued = 0;
    while client.try_send([Frame::Copy(b"fill")]).is_ok() {
        queued += 1;
        assert!(queued < 1000, "the queues are bounded");
    }
    let t0 = Instant::now();
    let e = client.send([Frame::Copy(b"late")]).unwrap_err();
    assert!(e.is_would_block(), "{e}");
    assert!(t0.elapsed() >= Duration::from_millis(250));
    assert!(client.is_stalled());
    let t1 = Instant::now();
    for _ in 0..20 {
        assert!(client.send([Frame::Copy(b"more")]).is_err());
    }
    assert!(
        t1.elapsed() < Duration::from_millis(250),
        "20 sends to a stalled peer took {:?}",
        t1.elapsed()
    );
    let mut msg = Received::default();
    let mut read = 0;
    while server.recv(&mut msg, 100).unwrap() {
        read += 1;
    }
    assert_eq!(read, queued, "what was queued arrives, nothing else");
    client.send([Frame::Copy(b"again")]).unwrap();
    assert!(!client.is_stalled());
}
