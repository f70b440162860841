//! The stream transport with TLS, over real sockets on 127.0.0.1: messages of every size and
//! bursts arrive whole and in order; a peer of another partition, or one that does not speak
//! TLS, is refused, counted and closed while the partition's peers go on; the partition's
//! sockets (`stream://` with the partition's keys) encrypt end to end. Every wait has a
//! deadline.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rodeo_transport::curve::PartitionKeys;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::frame::{Frame, Received};
use rodeo_transport::socket::{SocketKind, Transport};
use rodeo_transport::stream::{Dealer, Limits, Router, StreamStats, TlsContext, TlsKeys};

mod common;

const WAIT: Duration = Duration::from_secs(20);

fn context() -> TlsContext {
    TlsKeys::generate().unwrap().context().unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

fn until_stats(r: &mut Router, what: &str, cond: impl Fn(&StreamStats) -> bool) {
    common::until_stats(r, what, WAIT, cond);
}

#[test]
fn tls_messages_of_every_size_and_a_burst_arrive_whole_in_order_and_replies_return() {
    let ctx = context();
    let mut r = Router::bind_tls("127.0.0.1:0", Limits::default(), Some(ctx.clone())).unwrap();
    let addr = r.local_addr().to_string();
    let sizes = [0usize, 1, 8, 1000, 16 * 1024, 100_000, 3 << 20];
    let n = 300u32;
    // The dealer in its own thread, as in its own process: the handshake needs both sides.
    let dealer = std::thread::spawn(move || {
        let mut d =
            Dealer::connect_tls(addr.as_str(), Limits::default(), WAIT, Some(&ctx)).unwrap();
        // The first ones are sent before the handshake is done: they wait for it, in order.
        for (i, &len) in sizes.iter().enumerate() {
            d.send(&[&pattern(len, i as u8)], WAIT).unwrap();
        }
        let got = d.recv(WAIT).unwrap().expect("the reply").to_vec();
        assert_eq!(&got[..6], b"reply ");
        assert_eq!(&got[6..], &pattern(200_000, 7)[..]);
        // A burst of 96 KiB messages, read while it is sent (partial writes, records across
        // messages, the receive buffer full with bytes still decrypted in TLS).
        for i in 0..n {
            let mut m = pattern(96 * 1024, i as u8);
            m[..4].copy_from_slice(&i.to_le_bytes());
            d.send(&[&m], WAIT).unwrap();
        }
        assert!(d.flush(WAIT).unwrap());
        d.stats()
    });
    let mut peer = None;
    for (i, &len) in sizes.iter().enumerate() {
        let m = r
            .recv(WAIT)
            .unwrap()
            .expect("a message within the deadline");
        assert_eq!(
            m.bytes,
            &pattern(len, i as u8)[..],
            "message {i} of {len} bytes"
        );
        peer = Some(m.peer);
    }
    r.send_to(peer.unwrap(), &[b"reply ", &pattern(200_000, 7)], WAIT)
        .unwrap();
    for i in 0..n {
        let m = r
            .recv(WAIT)
            .unwrap()
            .expect("a burst message within the deadline");
        assert_eq!(m.bytes.len(), 96 * 1024);
        assert_eq!(u32::from_le_bytes(m.bytes[..4].try_into().unwrap()), i);
        assert_eq!(m.bytes[4..], pattern(96 * 1024, i as u8)[4..]);
    }
    let stats = dealer.join().unwrap();
    assert_eq!(stats.sent, sizes.len() as u64 + u64::from(n));
    assert_eq!(stats.received, 1);
    assert_eq!(r.stats().tls_refused, 0);
}

#[test]
fn a_peer_of_another_partition_or_without_tls_is_refused_counted_and_the_others_served() {
    let ctx = context();
    let mut r = Router::bind_tls("127.0.0.1:0", Limits::default(), Some(ctx.clone())).unwrap();
    let addr = r.local_addr().to_string();

    // Another partition's certificate: the handshake fails on both sides.
    let other = context();
    let a = addr.clone();
    let stranger = std::thread::spawn(move || {
        let mut d = Dealer::connect_tls(a.as_str(), Limits::default(), WAIT, Some(&other)).unwrap();
        // The send itself may already meet the refusal (it moves the handshake on).
        let sent = d.send(&[b"let me in"], WAIT);
        let deadline = Instant::now() + WAIT;
        while sent.is_ok() {
            match d.recv(Duration::from_millis(50)) {
                Err(_) => break,
                Ok(Some(m)) => panic!("the stranger got {} bytes", m.len()),
                Ok(None) => assert!(Instant::now() < deadline, "the stranger not refused"),
            }
        }
        d.stats()
    });
    until_stats(&mut r, "the stranger refused", |s| s.tls_refused == 1);
    assert_eq!(stranger.join().unwrap().tls_refused, 1);

    // Plain TCP with rodeo's framing: not TLS, refused.
    let mut plain = TcpStream::connect(&addr).unwrap();
    let mut frame = rodeo_transport::stream::wire::encode_header(5).to_vec();
    frame.extend_from_slice(b"plain");
    plain.write_all(&frame).unwrap();
    until_stats(&mut r, "the plain peer refused", |s| s.tls_refused == 2);
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    // The router answers with an alert, then closes: the read ends.
    let _ = plain.read_to_end(&mut rest);
    assert!(!rest.windows(5).any(|w| w == b"plain"));

    // The partition's own peer is served.
    let good = std::thread::spawn(move || {
        let mut d =
            Dealer::connect_tls(addr.as_str(), Limits::default(), WAIT, Some(&ctx)).unwrap();
        d.send(&[b"still here"], WAIT).unwrap();
        assert!(d.flush(WAIT).unwrap());
        // Stay until the router has it (a close right away could cut the handshake).
        let _ = d.recv(Duration::from_secs(2));
    });
    let m = r.recv(WAIT).unwrap().expect("the good peer's message");
    assert_eq!(m.bytes, b"still here");
    assert_eq!(r.stats().peers_accepted, 3);
    good.join().unwrap();
}

#[test]
fn the_partitions_stream_sockets_encrypt_with_its_keys_and_refuse_another_partition() {
    let keys = PartitionKeys::generate().unwrap().with_tls().unwrap();
    // The keys survive the line the controller writes to each application's stdin.
    let keys = PartitionKeys::from_line(&keys.to_line()).unwrap();
    let t = Transport::with_curve(1, keys.clone()).unwrap();
    assert!(t.stream_encrypted());
    let mut server = t.socket(SocketKind::Router).unwrap();
    let bound = server
        .bind(&Endpoint::parse("stream://127.0.0.1:*").unwrap())
        .unwrap();
    let ep = Endpoint::parse(&bound).unwrap();
    let secret: &[u8] = b"fragment 0123456789 with a marker: RODEO-SECRET";
    // Each peer in its own thread, as in its own process: it sends, then waits for a reply,
    // which moves its side of the handshake on.
    let peer = |t: Transport, body: &'static [u8], expect_reply: bool| {
        let ep = ep.clone();
        std::thread::spawn(move || {
            let mut c = t.socket(SocketKind::Dealer).unwrap();
            c.set_identity(b"dcm-1").unwrap();
            c.connect(&ep).unwrap();
            let sent = c.send([Frame::Copy(body)]);
            // Another partition's send may already meet the refusal.
            if expect_reply {
                sent.unwrap();
            }
            let mut m = Received::default();
            let got = c
                .recv(&mut m, if expect_reply { 20_000 } else { 1500 })
                .unwrap();
            assert_eq!(got, expect_reply, "a reply: {:?}", m.data());
            if got {
                assert_eq!(m.data(), b"ack");
            }
        })
    };
    let client = peer(t.clone(), secret, true);
    let mut m = Received::default();
    assert!(
        server.recv(&mut m, 20_000).unwrap(),
        "no message within 20 s"
    );
    assert_eq!(m.peer, b"dcm-1");
    assert_eq!(m.data(), secret);
    server.send_to(b"dcm-1", [Frame::Copy(b"ack")]).unwrap();
    client.join().unwrap();

    // A socket of another partition connects, sends, and nothing of it arrives.
    let other =
        Transport::with_curve(1, PartitionKeys::generate().unwrap().with_tls().unwrap()).unwrap();
    let intruder = peer(other, b"forged decision", false);
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        if server.recv(&mut m, 100).unwrap() {
            panic!("a message of another partition arrived: {:?}", m.data());
        }
    }
    intruder.join().unwrap();
    assert!(rodeo_transport::curve::refused_count() >= 1);
}

#[test]
fn a_tls_peer_that_never_reads_is_refused_after_its_buffers_and_the_others_served() {
    let ctx = context();
    let mut r = Router::bind_tls("127.0.0.1:0", Limits::default(), Some(ctx.clone())).unwrap();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let router_addr = r.local_addr().to_string();
    let spawn = |name: &'static [u8], reads: bool, stop: Option<std::sync::mpsc::Receiver<()>>| {
        let addr = router_addr.clone();
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            let mut d =
                Dealer::connect_tls(addr.as_str(), Limits::default(), WAIT, Some(&ctx)).unwrap();
            d.send(&[name], WAIT).unwrap();
            assert!(d.flush(WAIT).unwrap());
            if reads {
                let m = d.recv(WAIT).unwrap().expect("a message").to_vec();
                assert_eq!(m, b"for the reader");
            } else if let Some(stop) = stop {
                // Connected, then never reads again until the test ends.
                let _ = stop.recv_timeout(WAIT * 2);
            }
        })
    };
    let stalled = spawn(b"stalled", false, Some(stop_rx));
    let mut stalled_peer = None;
    while stalled_peer.is_none() {
        let m = r.recv(WAIT).unwrap().expect("the stalled peer's hello");
        assert_eq!(m.bytes, b"stalled");
        stalled_peer = Some(m.peer);
    }
    let stalled_peer = stalled_peer.unwrap();
    // Non-blocking sends to the peer that does not read: refused once its socket buffers
    // (and one message in TLS) are full, long before memory is at stake.
    let big = pattern(64 * 1024, 3);
    let mut accepted = 0u32;
    while r.try_send_to(stalled_peer, &[&big]).unwrap() {
        accepted += 1;
        assert!(
            accepted < 2000,
            "still accepted after {accepted} messages of 64 KiB"
        );
    }
    assert!(accepted > 0);
    assert_eq!(r.refused(stalled_peer), Some(1));
    // Another peer is served meanwhile.
    let reader = spawn(b"reader", true, None);
    let m = r.recv(WAIT).unwrap().expect("the reader's hello");
    assert_eq!(m.bytes, b"reader");
    let peer = m.peer;
    r.send_to(peer, &[b"for the reader"], WAIT).unwrap();
    reader.join().unwrap();
    assert!(!r.try_send_to(stalled_peer, &[&big]).unwrap());
    stop_tx.send(()).unwrap();
    stalled.join().unwrap();
}
