//! Shared-memory sockets with batching on (`Socket::set_batching`): small messages go out
//! together, in order, at the sender's next receive, poll or flush; with real threads and
//! real shared memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::shm;
use rodeo_transport::socket::{poll_readable, Frame, Received, Socket, SocketKind, Transport};

static SEQ: AtomicU64 = AtomicU64::new(0);
/// Tests that read the process's back-pressure count take turns.
static COUNTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn unique(tag: &str) -> String {
    format!(
        "rodeo-test-{}-{}-{tag}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

fn socket(t: &Transport, kind: SocketKind, id: &str) -> Socket {
    let s = t.socket(kind).unwrap();
    if !id.is_empty() {
        s.set_identity(id.as_bytes()).unwrap();
    }
    s.set_send_timeout(5000).unwrap();
    s.set_batching(true);
    s
}

/// A router with batching on, bound to a fresh `shm://` name made from `tag`, and its endpoint.
fn bound_router(t: &Transport, tag: &str) -> (Socket, Endpoint) {
    let ep = Endpoint::parse(&format!("shm://{}", unique(tag))).unwrap();
    let s = socket(t, SocketKind::Router, "");
    s.bind(&ep).unwrap();
    (s, ep)
}

/// A dealer with batching on and identity `id`, connected to `ep`.
fn connected_dealer(t: &Transport, ep: &Endpoint, id: &str) -> Socket {
    let s = socket(t, SocketKind::Dealer, id);
    s.connect(ep).unwrap();
    s
}

fn message(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i + k) as u8).collect()
}

#[test]
fn small_messages_wait_for_the_senders_flush_and_arrive_in_order_with_large_ones() {
    let t = Transport::new(1).unwrap();
    let (mut server, ep) = bound_router(&t, "order");
    let mut client = connected_dealer(&t, &ep, "dcm-1");
    // Small ones, a large one (not batched: the batch goes before it), small ones again, and
    // more than one batch's worth.
    let mut sent = Vec::new();
    for i in 0..300 {
        let len = match i {
            100 => 6000,
            _ => 40 + i % 50,
        };
        sent.push(message(i, len));
    }
    for m in &sent[..100] {
        client.send([Frame::Copy(m)]).unwrap();
    }
    let mut msg = Received::default();
    // Nothing is out yet: the 100 small ones wait in one batch.
    assert!(!server.try_recv(&mut msg).unwrap());
    for m in &sent[100..] {
        client.send([Frame::Copy(m)]).unwrap();
    }
    client.flush();
    let mut got = Vec::new();
    while got.len() < sent.len() {
        assert!(server.recv(&mut msg, 5000).unwrap(), "got {}", got.len());
        assert_eq!(msg.peer, b"dcm-1");
        got.push(msg.bytes.clone());
    }
    assert_eq!(got, sent);
    // Replies: batched per peer, out at the router's next poll.
    for i in 0..50 {
        server
            .try_send_to(b"dcm-1", [Frame::Copy(&message(i, 8))])
            .unwrap();
    }
    assert!(!client.try_recv(&mut msg).unwrap());
    assert_eq!(poll_readable(&[&server], 0).unwrap(), 0);
    for i in 0..50 {
        assert!(client.recv(&mut msg, 5000).unwrap());
        assert_eq!(msg.bytes, message(i, 8));
    }
    assert!(!client.try_recv(&mut msg).unwrap());
}

/// A server answering a batch of requests one by one sends its replies together: a receive
/// that takes the next message of the batch being read does not publish what waits; the
/// receive after the batch's last message does, in order.
#[test]
fn replies_to_a_batch_of_requests_wait_until_the_batch_is_read() {
    let t = Transport::new(1).unwrap();
    let (mut server, ep) = bound_router(&t, "held");
    let mut client = connected_dealer(&t, &ep, "dcm-1");
    for i in 0..3 {
        client.send([Frame::Copy(&message(i, 40))]).unwrap();
    }
    client.flush();
    let mut req = Received::default();
    let mut rep = Received::default();
    for i in 0..3 {
        assert!(server.recv(&mut req, 5000).unwrap(), "request {i}");
        assert_eq!(req.bytes, message(i, 40));
        // The replies before this one still wait: this receive read the batch being read.
        assert!(
            !client.try_recv(&mut rep).unwrap(),
            "a reply out before request {i}'s"
        );
        let reply = message(100 + i, 2300);
        server.try_send_to(b"dcm-1", [Frame::Copy(&reply)]).unwrap();
    }
    assert!(
        !client.try_recv(&mut rep).unwrap(),
        "out before the batch was read"
    );
    // The batch is read: this receive finds nothing and publishes the replies.
    assert!(!server.try_recv(&mut req).unwrap());
    for i in 0..3 {
        assert!(client.recv(&mut rep, 5000).unwrap(), "reply {i}");
        assert_eq!(rep.bytes, message(100 + i, 2300));
    }
    assert!(!client.try_recv(&mut rep).unwrap());
}

#[test]
fn a_batch_a_full_inbox_refuses_waits_and_nothing_is_lost() {
    let _turn = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    let t = Transport::new(1).unwrap();
    let (mut server, ep) = bound_router(&t, "full");
    let total = 200_000usize;
    let receiver = std::thread::spawn(move || {
        // Start late, so the inbox fills first.
        std::thread::sleep(Duration::from_millis(200));
        let mut msg = Received::default();
        let mut n = 0usize;
        let deadline = Instant::now() + Duration::from_secs(60);
        while n < total && Instant::now() < deadline {
            if server.recv(&mut msg, 100).unwrap() {
                assert_eq!(msg.bytes, message(n, 64), "message {n}");
                n += 1;
            }
        }
        n
    });
    let mut client = connected_dealer(&t, &ep, "sender");
    let before = shm::backpressure_count();
    for i in 0..total {
        client.send([Frame::Copy(&message(i, 64))]).unwrap();
        if i % 64 == 63 {
            client.flush();
        }
    }
    client.flush_wait().unwrap();
    assert_eq!(receiver.join().unwrap(), total);
    assert!(shm::backpressure_count() > before, "the full inbox was met");
}

#[test]
fn a_waiting_poll_flushes_its_own_batch_so_two_peers_never_wait_on_each_other() {
    let t = Transport::new(1).unwrap();
    let (server, ep) = bound_router(&t, "pingpong");
    let echo = std::thread::spawn(move || {
        let mut server = server;
        let mut msg = Received::default();
        let mut n = 0u32;
        while n < 1000 {
            // Only polls and try_recv: the replies go out with the next poll.
            if poll_readable(&[&server], 2000).unwrap() == 0 {
                break;
            }
            while server.try_recv(&mut msg).unwrap() {
                let peer = msg.peer.clone();
                server
                    .try_send_to(&peer, [Frame::Copy(&msg.bytes)])
                    .unwrap();
                n += 1;
            }
        }
        n
    });
    let mut client = connected_dealer(&t, &ep, "pinger");
    let mut msg = Received::default();
    for i in 0..1000u32 {
        client.send([Frame::Copy(&i.to_le_bytes())]).unwrap();
        assert_eq!(poll_readable(&[&client], 2000).unwrap(), 1, "reply {i}");
        assert!(client.try_recv(&mut msg).unwrap());
        assert_eq!(msg.bytes, i.to_le_bytes());
    }
    assert_eq!(echo.join().unwrap(), 1000);
}

#[test]
fn a_batch_whose_receiver_left_is_dropped_and_counted() {
    let t = Transport::new(1).unwrap();
    let (server, ep) = bound_router(&t, "gone");
    let mut client = connected_dealer(&t, &ep, "orphan");
    let before = shm::undelivered_count();
    for i in 0..10 {
        client.send([Frame::Copy(&message(i, 16))]).unwrap();
    }
    drop(server);
    let _ = shm::cleanup_dead_nodes();
    let began = Instant::now();
    client.flush();
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "no wait for nobody"
    );
    assert_eq!(shm::undelivered_count() - before, 10);
}

#[test]
fn a_peer_that_never_reads_holds_only_its_own_batch_and_its_router_does_not_spin() {
    let _turn = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    let t = Transport::new(1).unwrap();
    let (mut server, ep) = bound_router(&t, "stuck");
    let mut stuck = connected_dealer(&t, &ep, "stuck");
    let mut good = connected_dealer(&t, &ep, "good");
    let mut msg = Received::default();
    for d in [&mut stuck, &mut good] {
        d.send([Frame::Copy(b"hello")]).unwrap();
        d.flush();
    }
    for _ in 0..2 {
        assert!(server.recv(&mut msg, 5000).unwrap());
    }
    // Fill the stuck peer's inbox, then more: the router is refused, never blocked.
    let mut refused = 0u64;
    for i in 0..200_000usize {
        match server.try_send_to(b"stuck", [Frame::Copy(&message(i, 64))]) {
            Ok(()) => {}
            Err(e) if e.is_would_block() => refused += 1,
            Err(e) => panic!("{e}"),
        }
        if i % 64 == 63 {
            server.flush();
        }
        if refused > 1000 {
            break;
        }
    }
    assert!(refused > 1000, "a full peer refuses its sender");
    // The other peer is served as before.
    server
        .try_send_to(b"good", [Frame::Copy(b"reply")])
        .unwrap();
    server.flush();
    assert!(good.recv(&mut msg, 5000).unwrap());
    assert_eq!(msg.bytes, b"reply");
    // After the first 20 ms of refusals the router's waits are its own again: a 300 ms poll
    // with the stuck batch still waiting tries it once and sleeps, not once a millisecond
    // (each try at the full inbox counts one refusal).
    std::thread::sleep(Duration::from_millis(30));
    let before = shm::backpressure_count();
    let began = Instant::now();
    assert_eq!(poll_readable(&[&server], 300).unwrap(), 0);
    assert!(began.elapsed() >= Duration::from_millis(250));
    let tries = shm::backpressure_count() - before;
    assert!(
        tries <= 3,
        "{tries} tries of the stuck batch in one 300 ms poll"
    );
}
