//! Tests of [`super`]: real ZeroMQ sockets (inproc, ipc, tcp) and shared memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::*;

struct Counted(Vec<u8>, Arc<AtomicU64>);
impl FrameOwner for Counted {
    fn frame_bytes(&self) -> &[u8] {
        &self.0
    }
}
impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}

fn round_trip(endpoint: &str) {
    let t = Transport::new(1).unwrap();
    let server = t.socket(SocketKind::Router).unwrap();
    let bound = server.bind(&Endpoint::parse(endpoint).unwrap()).unwrap();
    let mut server = server;
    let mut client = t.socket(SocketKind::Dealer).unwrap();
    client.connect(&Endpoint::parse(&bound).unwrap()).unwrap();
    let dropped = Arc::new(AtomicU64::new(0));
    client
        .send([
            Frame::Copy(b"head"),
            Frame::ZeroCopy(Box::new(Counted(b"-page-".to_vec(), dropped.clone()))),
            Frame::ZeroCopy(Box::new(b"tail".to_vec())),
        ])
        .unwrap();
    let mut msg = Received::default();
    assert!(
        server.recv(&mut msg, 5000).unwrap(),
        "no message within 5 s on {bound}"
    );
    assert_eq!(msg.bytes, b"head-page-tail");
    assert_eq!(msg.frames, 3);
    assert!(!msg.peer.is_empty());
    let peer = msg.peer.clone();
    server.send_to(&peer, [Frame::Copy(b"reply")]).unwrap();
    let mut reply = Received::default();
    assert!(client.recv(&mut reply, 5000).unwrap());
    assert_eq!(reply.bytes, b"reply");
    assert!(reply.peer.is_empty());
    // The zero-copy owner is released once ZeroMQ is done with it.
    rodeo_testkit::wait_until(
        "ZeroMQ to release the zero-copy owner",
        std::time::Duration::from_secs(10),
        || dropped.load(Ordering::SeqCst) >= 1,
    );
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

#[test]
fn inproc_round_trip_with_zero_copy() {
    round_trip("inproc://socket-test");
}

#[test]
fn tcp_round_trip_with_zero_copy() {
    round_trip("tcp://127.0.0.1:*");
}

/// A ROUTER bound to `endpoint` and a DEALER connected to it, in one transport (returned
/// first: it must outlive the sockets).
fn inproc_pair(endpoint: &str) -> (Transport, Socket, Socket) {
    let t = Transport::new(1).unwrap();
    let server = t.socket(SocketKind::Router).unwrap();
    server.bind(&Endpoint::parse(endpoint).unwrap()).unwrap();
    let client = t.socket(SocketKind::Dealer).unwrap();
    client.connect(&Endpoint::parse(endpoint).unwrap()).unwrap();
    (t, server, client)
}

#[test]
fn try_recv_returns_false_when_empty_and_a_message_when_queued() {
    let (_t, mut server, mut client) = inproc_pair("inproc://try-recv");
    let mut msg = Received::default();
    assert!(!server.try_recv(&mut msg).unwrap());
    client
        .send([Frame::Copy(b"a"), Frame::Copy(b"bc")])
        .unwrap();
    let t0 = std::time::Instant::now();
    while !server.try_recv(&mut msg).unwrap() {
        assert!(t0.elapsed().as_secs() < 5);
        std::thread::yield_now();
    }
    assert_eq!(msg.bytes, b"abc");
    assert_eq!(msg.frames, 2);
    assert!(!msg.peer.is_empty());
}

/// A DEALER's joined send (a DCM's event to its logger) arrives as one frame, which the
/// ROUTER's waiting receive in place keeps uncopied.
#[test]
fn a_joined_send_arrives_as_one_frame_read_in_place() {
    let (_t, mut server, mut client) = inproc_pair("inproc://joined-send");
    let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    client
        .send_joined([&b"header"[..], &body[..], &b""[..], b"end"])
        .unwrap();
    let mut got = Received::default();
    assert!(
        server.recv_in_place(&mut got, 10_000).unwrap(),
        "no message in 10 s"
    );
    assert!(!got.peer.is_empty());
    assert_eq!(got.frames, 1);
    assert!(got.bytes.is_empty(), "one frame, read where ZeroMQ put it");
    let mut want = b"header".to_vec();
    want.extend_from_slice(&body);
    want.extend_from_slice(b"end");
    assert_eq!(got.data(), &want[..]);
    // Nothing queued: the wait ends at its timeout, with nothing.
    assert!(!server.recv_in_place(&mut got, 10).unwrap());
}

#[test]
fn a_joined_reply_is_one_frame_and_a_receive_in_place_keeps_it_uncopied() {
    let (_t, mut server, mut client) = inproc_pair("inproc://joined");
    let wait = std::time::Duration::from_secs(10);
    // A ROUTER receiving in place: the routing id apart, the one frame kept.
    client.send([Frame::Copy(b"request")]).unwrap();
    let mut req = Received::default();
    rodeo_testkit::wait_until("the request", wait, || {
        server.try_recv_in_place(&mut req).unwrap()
    });
    assert!(!req.peer.is_empty());
    assert_eq!((req.data(), req.frames), (&b"request"[..], 1));
    assert!(req.bytes.is_empty(), "a one-frame message is not copied");
    let peer = req.peer.clone();
    // Pieces joined into one frame, received in place.
    let body: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    server
        .try_send_to_joined(&peer, [&b"head"[..], &body, b"tail"])
        .unwrap();
    let mut got = Received::default();
    rodeo_testkit::wait_until("the joined reply", wait, || {
        client.try_recv_in_place(&mut got).unwrap()
    });
    assert_eq!(got.frames, 1);
    assert!(got.bytes.is_empty());
    let mut want = b"head".to_vec();
    want.extend_from_slice(&body);
    want.extend_from_slice(b"tail");
    assert_eq!(got.data(), &want[..]);
    // Several frames are joined into `bytes`, in place or not.
    server
        .send_to(&peer, [Frame::Copy(b"a"), Frame::Copy(b"bc")])
        .unwrap();
    rodeo_testkit::wait_until("the two-frame message", wait, || {
        client.try_recv_in_place(&mut got).unwrap()
    });
    assert_eq!(
        (got.data(), &got.bytes[..], got.frames),
        (&b"abc"[..], &b"abc"[..], 2)
    );
    // A copying receive after one in place: `data` is the copy.
    server.try_send_to_joined(&peer, [&b"xyz"[..]]).unwrap();
    assert!(client.recv(&mut got, 5000).unwrap());
    assert_eq!((got.data(), &got.bytes[..]), (&b"xyz"[..], &b"xyz"[..]));
    // A peer that is gone: refused at once, as try_send_to is.
    let e = server
        .try_send_to_joined(b"nobody", [&b"x"[..]])
        .unwrap_err();
    assert!(e.is_unroutable(), "{e}");
}

#[test]
fn recv_times_out() {
    let t = Transport::new(1).unwrap();
    let mut s = t.socket(SocketKind::Dealer).unwrap();
    s.connect(&Endpoint::parse("inproc://nobody").unwrap())
        .unwrap();
    let mut msg = Received::default();
    assert!(!s.recv(&mut msg, 10).unwrap());
}

#[test]
fn router_reports_unknown_peer() {
    let t = Transport::new(1).unwrap();
    let mut s = t.socket(SocketKind::Router).unwrap();
    s.bind(&Endpoint::parse("inproc://router-unknown").unwrap())
        .unwrap();
    let dropped = Arc::new(AtomicU64::new(0));
    let err = s.send_to(
        b"ghost",
        [Frame::ZeroCopy(Box::new(Counted(vec![1], dropped.clone())))],
    );
    assert!(err.is_err());
    // The owner of a frame that could not be sent is released, not leaked.
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

#[test]
fn try_send_to_a_peer_that_does_not_read_fails_at_once_and_releases_the_frames() {
    let t = Transport::new(1).unwrap();
    let mut server = t.socket(SocketKind::Router).unwrap();
    server.set_high_water_marks(4).unwrap();
    let bound = server
        .bind(&Endpoint::parse("tcp://127.0.0.1:*").unwrap())
        .unwrap();
    let mut client = t.socket(SocketKind::Dealer).unwrap();
    client.set_high_water_marks(1).unwrap();
    client.connect(&Endpoint::parse(&bound).unwrap()).unwrap();
    client.send([Frame::Copy(b"hello")]).unwrap();
    let mut msg = Received::default();
    assert!(server.recv(&mut msg, 5000).unwrap());
    let peer = msg.peer.clone();
    let released = Arc::new(AtomicU64::new(0));
    let (mut sent, mut refused) = (0u64, 0u64);
    let t0 = std::time::Instant::now();
    // 64 KiB replies: the socket buffers fill after a few MB at most.
    while refused == 0 {
        assert!(
            t0.elapsed().as_secs() < 10,
            "never refused after {sent} sends"
        );
        let owner = Box::new(Counted(vec![7u8; 65536], released.clone()));
        match server.try_send_to(&peer, [Frame::Copy(b"h"), Frame::ZeroCopy(owner)]) {
            Ok(()) => sent += 1,
            Err(e) => {
                assert!(e.is_would_block(), "{e}");
                refused += 1;
            }
        }
    }
    // The refused reply's owner was dropped before try_send_to returned.
    assert!(released.load(Ordering::SeqCst) >= refused);
    // An unknown peer is unroutable, at once.
    let e = server
        .try_send_to(b"nobody", [Frame::Copy(b"x")])
        .unwrap_err();
    assert!(e.is_unroutable(), "{e}");
    // A DEALER without a peer does not wait either.
    let mut lonely = t.socket(SocketKind::Dealer).unwrap();
    let e = lonely.try_send([Frame::Copy(b"x")]).unwrap_err();
    assert!(e.is_would_block(), "{e}");
}

#[test]
fn a_message_over_the_limit_in_several_frames_is_dropped_and_counted() {
    let t = Transport::new(1).unwrap();
    let mut server = t.socket(SocketKind::Router).unwrap();
    server.set_max_message_size(100).unwrap();
    server
        .bind(&Endpoint::parse("inproc://max-frames").unwrap())
        .unwrap();
    let mut client = t.socket(SocketKind::Dealer).unwrap();
    client
        .connect(&Endpoint::parse("inproc://max-frames").unwrap())
        .unwrap();
    let before = oversized_count();
    // Each frame below the limit (libzmq takes them), together above it.
    let part = [7u8; 60];
    client
        .send([Frame::Copy(&part), Frame::Copy(&part), Frame::Copy(&part)])
        .unwrap();
    client
        .send([Frame::Copy(&part[..40]), Frame::Copy(&part)])
        .unwrap();
    let mut msg = Received::default();
    assert!(server.recv(&mut msg, 5000).unwrap());
    assert_eq!(
        msg.bytes.len(),
        100,
        "the message at the limit is taken whole"
    );
    assert_eq!(msg.frames, 2);
    assert_eq!(server.dropped_count(), 1);
    assert!(oversized_count() > before);
    assert!(!server.try_recv(&mut msg).unwrap());
}

#[test]
fn poll_readable_names_the_sockets_with_messages() {
    let t = Transport::new(1).unwrap();
    let a = t.socket(SocketKind::Router).unwrap();
    a.bind(&Endpoint::parse("inproc://poll-a").unwrap())
        .unwrap();
    let b = t.socket(SocketKind::Router).unwrap();
    b.bind(&Endpoint::parse("inproc://poll-b").unwrap())
        .unwrap();
    assert_eq!(poll_readable(&[&a, &b], 0).unwrap(), 0);
    let mut client = t.socket(SocketKind::Dealer).unwrap();
    client
        .connect(&Endpoint::parse("inproc://poll-b").unwrap())
        .unwrap();
    client.send([Frame::Copy(b"x")]).unwrap();
    assert_eq!(poll_readable(&[&a, &b], 5000).unwrap(), 0b10);
}

/// A short timeout is waited, not skipped: 20 polls of 1 ms with nothing to read take at
/// least 20 ms, on ZeroMQ and on shared memory (the remaining wait was rounded down to 0 ms,
/// and a DCM whose 1 ms timer was due polled in a loop that never slept).
#[test]
fn poll_readable_waits_a_one_millisecond_timeout() {
    let t = Transport::new(1).unwrap();
    let z = t.socket(SocketKind::Router).unwrap();
    z.bind(&Endpoint::parse("inproc://poll-wait").unwrap())
        .unwrap();
    let s = t.socket(SocketKind::Router).unwrap();
    s.bind(
        &Endpoint::parse(&format!(
            "shm://rodeo-test-{}-poll-wait",
            std::process::id()
        ))
        .unwrap(),
    )
    .unwrap();
    for socket in [&z, &s] {
        let t0 = std::time::Instant::now();
        for _ in 0..20 {
            assert_eq!(poll_readable(&[socket], 1).unwrap(), 0);
        }
        let took = t0.elapsed();
        assert!(
            took >= std::time::Duration::from_millis(20),
            "20 polls of 1 ms took {took:?} (shm: {})",
            socket.is_shm()
        );
    }
}

#[test]
fn a_pub_socket_on_a_stream_endpoint_is_refused_with_what_to_do() {
    let t = Transport::new(1).unwrap();
    let s = t.socket(SocketKind::Pub).unwrap();
    let e = s
        .bind(&Endpoint::parse("stream://127.0.0.1:*").unwrap())
        .unwrap_err();
    assert!(matches!(e, TransportError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("tcp://"), "{e}");
}
