//! Shared-memory sockets (`shm://`): the ROUTER/DEALER shape over iceoryx2, with real threads
//! and real shared memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::shm;
use rodeo_transport::socket::{poll_readable, Frame, Received, Socket, SocketKind, Transport};

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A name no other test (nor another run of this test binary) uses.
fn unique(tag: &str) -> String {
    format!(
        "rodeo-test-{}-{}-{tag}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

fn router(t: &Transport, name: &str) -> Socket {
    let s = t.socket(SocketKind::Router).unwrap();
    s.bind(&Endpoint::parse(&format!("shm://{name}")).unwrap())
        .unwrap();
    assert!(s.is_shm());
    s
}

fn dealer(t: &Transport, name: &str, id: &str) -> Socket {
    let s = t.socket(SocketKind::Dealer).unwrap();
    if !id.is_empty() {
        s.set_identity(id.as_bytes()).unwrap();
    }
    s.set_send_timeout(5000).unwrap();
    s.connect(&Endpoint::parse(&format!("shm://{name}")).unwrap())
        .unwrap();
    s
}

#[test]
fn request_and_reply_by_identity_with_zero_copy_frames() {
    let t = Transport::new(1).unwrap();
    let name = unique("rr");
    let mut server = router(&t, &name);
    let mut a = dealer(&t, &name, "dcm-1");
    let mut b = dealer(&t, &name, "");
    a.send([
        Frame::Copy(b"head"),
        Frame::ZeroCopy(Box::new(b"-tail".to_vec())),
    ])
    .unwrap();
    b.send([Frame::Copy(b"from-b")]).unwrap();
    let mut msg = Received::default();
    let mut got = Vec::new();
    for _ in 0..2 {
        assert!(server.recv(&mut msg, 5000).unwrap());
        got.push((msg.peer.clone(), msg.bytes.clone()));
    }
    assert_eq!(got[0], (b"dcm-1".to_vec(), b"head-tail".to_vec()));
    assert_eq!(got[1].1, b"from-b".to_vec());
    assert!(got[1].0.starts_with(b"anon-"));
    // Replies go to the peer that asked, each to its own.
    server
        .try_send_to(&got[1].0, [Frame::Copy(b"to-b")])
        .unwrap();
    server
        .try_send_to(b"dcm-1", [Frame::Copy(b"to-a")])
        .unwrap();
    assert!(a.recv(&mut msg, 5000).unwrap());
    assert_eq!(msg.bytes, b"to-a");
    assert!(msg.peer.is_empty());
    assert!(b.recv(&mut msg, 5000).unwrap());
    assert_eq!(msg.bytes, b"to-b");
    // An unknown peer is unroutable, not a silent drop.
    let e = server
        .try_send_to(b"nobody", [Frame::Copy(b"x")])
        .unwrap_err();
    assert!(e.is_unroutable(), "{e}");
    assert!(!a.try_recv(&mut msg).unwrap());
}

#[test]
fn a_waiting_receiver_wakes_on_a_message_from_another_thread() {
    let t = Transport::new(1).unwrap();
    let name = unique("wake");
    let mut server = router(&t, &name);
    let client = dealer(&t, &name, "dcm-2");
    let sender = std::thread::spawn(move || {
        let mut client = client;
        for i in 0u32..1000 {
            client.send([Frame::Copy(&i.to_le_bytes())]).unwrap();
        }
        client
    });
    let mut msg = Received::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut next = 0u32;
    while next < 1000 && Instant::now() < deadline {
        // Waits through poll_readable (the DCM's way) and recv (everybody else's).
        if next % 2 == 0 {
            if poll_readable(&[&server], 1000).unwrap() == 0 {
                continue;
            }
            while server.try_recv(&mut msg).unwrap() {
                assert_eq!(msg.bytes, next.to_le_bytes());
                next += 1;
            }
        } else if server.recv(&mut msg, 1000).unwrap() {
            assert_eq!(msg.bytes, next.to_le_bytes());
            next += 1;
        }
    }
    assert_eq!(next, 1000, "every message arrives, in order");
    sender.join().unwrap();
}

/// `Socket` is `Send` with single-threaded iceoryx2 ports inside (`unsafe impl Send for
/// ShmSocket`): both ends move to other threads and back between messages, the router opening
/// its reply outbox on one thread and using it on others, and every message arrives in order.
#[test]
fn shm_socket_moves_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<Socket>();
    let t = Transport::new(1).unwrap();
    let name = unique("move");
    let mut server = router(&t, &name);
    let mut client = dealer(&t, &name, "mover");
    fn round(server: &mut Socket, client: &mut Socket, i: u32) {
        let mut msg = Received::default();
        for k in 0..100u32 {
            client
                .send([Frame::Copy(&(i * 1000 + k).to_le_bytes())])
                .unwrap();
        }
        for k in 0..100u32 {
            assert!(server.recv(&mut msg, 5000).unwrap(), "round {i}");
            assert_eq!(msg.bytes, (i * 1000 + k).to_le_bytes());
            let peer = msg.peer.clone();
            server.send_to(&peer, [Frame::Copy(b"ack")]).unwrap();
        }
        let mut reply = Received::default();
        for _ in 0..100 {
            assert!(client.recv(&mut reply, 5000).unwrap(), "round {i}");
            assert_eq!(reply.bytes, b"ack");
        }
    }
    round(&mut server, &mut client, 0);
    for i in 1..=4u32 {
        // Both to one new thread, then each to a thread of its own.
        let (s, c) = std::thread::spawn(move || {
            round(&mut server, &mut client, i);
            (server, client)
        })
        .join()
        .unwrap();
        let (server2, client2) = (s, c);
        let sender = std::thread::spawn(move || {
            let mut client = client2;
            for k in 0..100u32 {
                client.send([Frame::Copy(&k.to_le_bytes())]).unwrap();
            }
            client
        });
        let receiver = std::thread::spawn(move || {
            let mut server = server2;
            let mut m = Received::default();
            for k in 0..100u32 {
                assert!(server.recv(&mut m, 5000).unwrap());
                assert_eq!(m.bytes, k.to_le_bytes());
            }
            server
        });
        client = sender.join().unwrap();
        server = receiver.join().unwrap();
    }
    round(&mut server, &mut client, 9);
}

#[test]
fn a_full_inbox_is_back_pressure_and_nothing_is_lost() {
    let t = Transport::new(1).unwrap();
    let name = unique("full");
    let mut server = router(&t, &name);
    let mut client = dealer(&t, &name, "dcm-3");
    let before = shm::backpressure_count();
    // The server stalls: the client fills its inbox until a send would block.
    let mut sent = 0u64;
    loop {
        match client.try_send([Frame::Copy(&sent.to_le_bytes()), Frame::Copy(&[7u8; 1000])]) {
            Ok(()) => sent += 1,
            Err(e) => {
                assert!(e.is_would_block(), "{e}");
                break;
            }
        }
        assert!(sent <= 100_000, "an inbox is bounded");
    }
    assert!(sent >= 1, "at least one message fits");
    assert!(shm::backpressure_count() > before, "the refusal is counted");
    // A blocking send waits for room: the server drains from another thread meanwhile.
    let drain = std::thread::spawn(move || {
        let mut msg = Received::default();
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.len() as u64 <= sent && Instant::now() < deadline {
            if server.recv(&mut msg, 100).unwrap() {
                seen.push(u64::from_le_bytes(msg.bytes[..8].try_into().unwrap()));
                assert_eq!(msg.bytes.len(), 1008);
            }
        }
        seen
    });
    client
        .send([Frame::Copy(&sent.to_le_bytes()), Frame::Copy(&[7u8; 1000])])
        .unwrap();
    let seen = drain.join().unwrap();
    assert_eq!(
        seen,
        (0..=sent).collect::<Vec<_>>(),
        "nothing lost, in order"
    );
}

#[test]
fn two_partitions_with_the_same_application_names_do_not_collide() {
    let t = Transport::new(1).unwrap();
    let (p1, p2) = (unique("part-a"), unique("part-b"));
    let mut s1 = router(&t, &format!("{p1}/ros-1"));
    let mut s2 = router(&t, &format!("{p2}/ros-1"));
    let mut c1 = dealer(&t, &format!("{p1}/ros-1"), "dcm-1");
    let mut c2 = dealer(&t, &format!("{p2}/ros-1"), "dcm-1");
    c1.send([Frame::Copy(b"one")]).unwrap();
    c2.send([Frame::Copy(b"two")]).unwrap();
    let mut msg = Received::default();
    assert!(s1.recv(&mut msg, 5000).unwrap());
    assert_eq!(msg.bytes, b"one");
    assert!(s2.recv(&mut msg, 5000).unwrap());
    assert_eq!(msg.bytes, b"two");
    s1.try_send_to(b"dcm-1", [Frame::Copy(b"r1")]).unwrap();
    s2.try_send_to(b"dcm-1", [Frame::Copy(b"r2")]).unwrap();
    assert!(c1.recv(&mut msg, 5000).unwrap());
    assert_eq!(msg.bytes, b"r1");
    assert!(c2.recv(&mut msg, 5000).unwrap());
    assert_eq!(msg.bytes, b"r2");
    assert!(!s1.try_recv(&mut msg).unwrap());
    assert!(!c1.try_recv(&mut msg).unwrap());
}

#[test]
fn oversized_messages_are_dropped_and_counted() {
    let t = Transport::new(1).unwrap();
    let name = unique("max");
    let server = t.socket(SocketKind::Router).unwrap();
    server.set_max_message_size(16).unwrap();
    server
        .bind(&Endpoint::parse(&format!("shm://{name}")).unwrap())
        .unwrap();
    let mut server = server;
    let mut client = dealer(&t, &name, "dcm-4");
    client.send([Frame::Copy(&[1u8; 17])]).unwrap();
    client.send([Frame::Copy(&[2u8; 16])]).unwrap();
    let mut msg = Received::default();
    assert!(server.recv(&mut msg, 5000).unwrap());
    assert_eq!(msg.bytes, [2u8; 16]);
    assert_eq!(server.dropped_count(), 1);
    // The process-wide count that /metrics exports saw it too.
    assert!(rodeo_transport::socket::oversized_count() >= 1);
    // A message far above the limit (4 MiB, the sender's segment grows for it) is dropped the
    // same way, no panic, and the socket goes on.
    client.send([Frame::Copy(&vec![3u8; 4 << 20])]).unwrap();
    client.send([Frame::Copy(&[4u8; 8])]).unwrap();
    assert!(server.recv(&mut msg, 5000).unwrap());
    assert_eq!(msg.bytes, [4u8; 8]);
    assert_eq!(server.dropped_count(), 2);
}

#[test]
fn a_peer_that_stopped_reading_costs_one_send_timeout_not_one_per_message() {
    let t = Transport::new(1).unwrap();
    let name = unique("stalled");
    let mut server = router(&t, &name);
    let mut client = t.socket(SocketKind::Dealer).unwrap();
    client.set_identity(b"dcm-9").unwrap();
    client.set_send_timeout(300).unwrap();
    client
        .connect(&Endpoint::parse(&format!("shm://{name}")).unwrap())
        .unwrap();
    // The server never reads: fill its inbox.
    while client.try_send([Frame::Copy(&[1u8; 1000])]).is_ok() {}
    // One blocking send waits out its timeout ...
    let t0 = Instant::now();
    let e = client.send([Frame::Copy(&[2u8; 1000])]).unwrap_err();
    assert!(e.is_would_block(), "{e}");
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    assert!(client.is_stalled());
    // ... the next ones fail at once while the peer stays full.
    let t1 = Instant::now();
    for _ in 0..20 {
        assert!(client.send([Frame::Copy(&[3u8; 1000])]).is_err());
    }
    assert!(
        t1.elapsed() < Duration::from_millis(250),
        "20 sends to a stalled peer took {:?}",
        t1.elapsed()
    );
    // The peer reads again: the next send gets through and sends wait again.
    let mut msg = Received::default();
    while server.recv(&mut msg, 50).unwrap() {}
    client.send([Frame::Copy(&[4u8; 10])]).unwrap();
    assert!(!client.is_stalled());
}

#[test]
fn empty_segments_left_by_a_killed_process_are_removed_and_fresh_ones_kept() {
    let old = format!("/dev/shm/iox2_rodeo_test_old_{}", std::process::id());
    let fresh = format!("/dev/shm/iox2_rodeo_test_fresh_{}", std::process::id());
    let f = std::fs::File::create(&old).unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(60))
        .unwrap();
    drop(f);
    std::fs::File::create(&fresh).unwrap();
    assert!(shm::remove_abandoned_segments() >= 1);
    assert!(
        !std::path::Path::new(&old).exists(),
        "an old empty segment is removed"
    );
    assert!(
        std::path::Path::new(&fresh).exists(),
        "one being created now is kept"
    );
    std::fs::remove_file(&fresh).unwrap();
}
