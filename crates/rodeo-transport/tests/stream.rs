//! The stream transport over real sockets on 127.0.0.1: round trips, many peers, a peer that
//! does not read, bad frames, a peer that vanishes mid-frame, peers beyond the most a router
//! keeps. Every wait has a deadline (the
//! receive timeouts and [`rodeo_testkit::wait_for`]).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rodeo_transport::stream::wire::{encode_header, TAG};
use rodeo_transport::stream::{Dealer, FrameError, Limits, PeerId, Router, StreamError};

mod common;

const WAIT: Duration = Duration::from_secs(20);

fn router() -> Router {
    Router::bind("127.0.0.1:0", Limits::default()).unwrap()
}

fn dealer(r: &Router) -> Dealer {
    Dealer::connect(r.local_addr(), Limits::default(), WAIT).unwrap()
}

/// The next message on `r` within [`WAIT`], copied out.
fn next(r: &mut Router) -> (PeerId, Vec<u8>) {
    let m = r
        .recv(WAIT)
        .unwrap()
        .expect("a message within the deadline");
    (m.peer, m.bytes.to_vec())
}

fn until_stats(
    r: &mut Router,
    what: &str,
    cond: impl Fn(&rodeo_transport::stream::StreamStats) -> bool,
) {
    common::until_stats(r, what, WAIT, cond);
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn messages_of_every_size_round_trip_with_the_sender_named() {
    let mut r = router();
    let mut d = dealer(&r);
    for (i, len) in [0usize, 1, 12_288, 98_304, 3 << 20].into_iter().enumerate() {
        let body = pattern(len, i as u8);
        let (a, b) = body.split_at(len / 3);
        d.send(&[b"head", a, b], WAIT).unwrap();
        let (peer, got) = next(&mut r);
        assert_eq!(got.len(), len + 4);
        assert_eq!(&got[..4], b"head");
        assert!(got[4..] == body[..], "payload of {len} bytes changed");
        r.send_to(peer, &[b"re:", &got[..4]], WAIT).unwrap();
        assert_eq!(d.recv(WAIT).unwrap().unwrap(), b"re:head");
    }
    assert_eq!(d.stats().sent, 5);
    assert_eq!(r.stats().received, 5);
    assert_eq!(r.stats().sent, 5);
    // Nothing more: a receive times out with None.
    assert!(d.recv(Duration::from_millis(20)).unwrap().is_none());
}

#[test]
fn a_stream_of_large_messages_arrives_whole_and_in_order() {
    // Larger than the socket buffers together: the kernel takes messages in parts, and the
    // unsent tails must go out before the next message.
    let mut r = router();
    let addr = r.local_addr().to_string();
    let n = 300u32;
    let sender = std::thread::spawn(move || {
        let mut d = Dealer::connect(&addr, Limits::default(), WAIT).unwrap();
        let mut refused = 0u64;
        for i in 0..n {
            let body = pattern(256 * 1024 + i as usize, i as u8);
            // Half the messages without waiting (refusals are retried), half blocking.
            if i % 2 == 0 {
                let deadline = Instant::now() + WAIT;
                while !d.try_send(&[&i.to_le_bytes(), &body]).unwrap() {
                    refused += 1;
                    assert!(Instant::now() < deadline, "try_send refused for {WAIT:?}");
                    std::thread::yield_now();
                }
            } else {
                d.send(&[&i.to_le_bytes(), &body], WAIT).unwrap();
            }
        }
        assert!(d.flush(WAIT).unwrap());
        (d.stats(), refused)
    });
    for i in 0..n {
        let (_, got) = next(&mut r);
        assert_eq!(&got[..4], &i.to_le_bytes(), "message {i} out of order");
        assert!(
            got[4..] == pattern(256 * 1024 + i as usize, i as u8)[..],
            "message {i} changed"
        );
    }
    let (stats, refused) = sender.join().unwrap();
    assert_eq!(stats.sent, u64::from(n));
    assert_eq!(stats.refused_full, refused);
}

#[test]
fn many_peers_are_told_apart_and_each_gets_its_own_reply() {
    let mut r = router();
    let peers = 8u8;
    let mut dealers: Vec<Dealer> = (0..peers).map(|_| dealer(&r)).collect();
    for round in 0..50u8 {
        for (k, d) in dealers.iter_mut().enumerate() {
            d.send(&[&[k as u8, round]], WAIT).unwrap();
        }
    }
    let mut who = std::collections::HashMap::new();
    let mut rounds = vec![0u8; peers as usize];
    for _ in 0..(50 * peers as usize) {
        let (peer, got) = next(&mut r);
        let k = got[0];
        assert_eq!(
            *who.entry(k).or_insert(peer),
            peer,
            "dealer {k} seen as two peers"
        );
        assert_eq!(
            got[1], rounds[k as usize],
            "dealer {k}: messages out of order"
        );
        rounds[k as usize] += 1;
    }
    assert_eq!(r.peers().len(), peers as usize);
    for (&k, &peer) in &who {
        r.send_to(peer, &[&[k]], WAIT).unwrap();
    }
    for (k, d) in dealers.iter_mut().enumerate() {
        assert_eq!(d.recv(WAIT).unwrap().unwrap(), &[k as u8]);
    }
    assert_eq!(r.stats().peers_accepted, u64::from(peers));
    // A peer that left is closed and unknown afterwards.
    let gone = who[&0];
    drop(dealers.remove(0));
    until_stats(&mut r, "departed peer closed", |s| s.peers_closed == 1);
    assert!(matches!(
        r.try_send_to(gone, &[b"x"]),
        Err(StreamError::UnknownPeer { .. })
    ));
}

#[test]
fn a_peer_that_never_reads_costs_only_itself() {
    let small = Limits {
        socket_buffer: 64 * 1024,
        ..Limits::default()
    };
    let mut r = Router::bind("127.0.0.1:0", small).unwrap();
    let _idle = Dealer::connect(r.local_addr(), small, WAIT).unwrap();
    let mut reader = Dealer::connect(r.local_addr(), small, WAIT).unwrap();
    let (idle, active) = {
        reader.send(&[b"reader"], WAIT).unwrap();
        let (active, _) = next(&mut r);
        let idle = rodeo_testkit::wait_for("both peers accepted", WAIT, || {
            let _ = r.recv(Duration::from_millis(10)).unwrap();
            r.peers().into_iter().find(|p| *p != active)
        });
        (idle, active)
    };
    // Fill the idle peer's buffers: sends are refused at once, never wait.
    let chunk = vec![7u8; 64 * 1024];
    let mut queued = 0u64;
    let start = Instant::now();
    let mut refusals = 0u64;
    while refusals < 10 {
        assert!(
            queued < 100_000,
            "the idle peer took {queued} messages without refusing"
        );
        if r.try_send_to(idle, &[&chunk]).unwrap() {
            queued += 1;
        } else {
            refusals += 1;
        }
    }
    assert!(start.elapsed() < WAIT);
    assert_eq!(r.refused(idle), Some(refusals));
    assert_eq!(r.stats().refused_full, refusals);
    // The other peer is served as before.
    for i in 0..100u32 {
        assert!(r.try_send_to(active, &[&i.to_le_bytes()]).unwrap());
        assert_eq!(reader.recv(WAIT).unwrap().unwrap(), &i.to_le_bytes());
    }
    assert_eq!(r.refused(active), Some(0));
    // A blocking send to the idle peer gives up at its timeout (the kernel may still move a
    // little from the send buffer to the peer's receive buffer: a few may get through first).
    let mut through = 0;
    loop {
        match r.send_to(idle, &[&chunk], Duration::from_millis(50)) {
            Ok(()) => through += 1,
            Err(StreamError::Timeout { .. }) => break,
            Err(e) => panic!("expected a timeout, got {e}"),
        }
        assert!(through < 1000, "the idle peer took {through} more messages");
    }
}

#[test]
fn an_oversized_or_untagged_frame_is_refused_counted_and_its_peer_closed() {
    let limits = Limits {
        max_message: 1 << 20,
        ..Limits::default()
    };
    let mut r = Router::bind("127.0.0.1:0", limits).unwrap();
    let mut good = Dealer::connect(r.local_addr(), limits, WAIT).unwrap();
    let before = rodeo_transport::frame::oversized_count();

    // A header announcing 4 GiB: refused on the header, nothing of that size allocated.
    let mut big = TcpStream::connect(r.local_addr()).unwrap();
    big.write_all(&encode_header(u32::MAX)).unwrap();
    until_stats(&mut r, "oversized frame", |s| {
        s.oversized == 1 && s.peers_closed == 1
    });
    big.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(big.read(&mut b).unwrap_or(0), 0, "connection not closed");
    assert!(rodeo_transport::frame::oversized_count() > before);

    // A frame without the tag (an HTTP request, say).
    let mut http = TcpStream::connect(r.local_addr()).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    until_stats(&mut r, "untagged frame", |s| {
        s.malformed == 1 && s.peers_closed == 2
    });

    // The well-behaved peer is served throughout.
    good.send(&[b"still here"], WAIT).unwrap();
    assert_eq!(next(&mut r).1, b"still here");

    // A connecting side refuses an oversized frame from its router with a typed error.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut d = Dealer::connect(listener.local_addr().unwrap(), limits, WAIT).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    server.write_all(&encode_header(2 << 20)).unwrap();
    match d.recv(WAIT) {
        Err(StreamError::Frame {
            source: FrameError::TooLong { len, max },
            ..
        }) => assert_eq!((len, max), (2 << 20, 1 << 20)),
        other => panic!("expected a too-long frame error, got {other:?}"),
    }
    assert_eq!(d.stats().oversized, 1);
    assert!(matches!(d.recv(WAIT), Err(StreamError::Closed { .. })));
    // A message above the limit is refused before it is sent.
    let large = vec![0u8; (1 << 20) + 1];
    assert!(matches!(
        good.try_send(&[&large]),
        Err(StreamError::TooLarge { .. })
    ));
}

#[test]
fn a_peer_that_vanishes_mid_frame_is_counted_and_what_it_sent_whole_is_delivered() {
    let mut r = router();
    let mut raw = TcpStream::connect(r.local_addr()).unwrap();
    let mut bytes = encode_header(5).to_vec();
    bytes.extend_from_slice(b"whole");
    bytes.extend_from_slice(&encode_header(1000));
    bytes.extend_from_slice(&[1u8; 10]);
    raw.write_all(&bytes).unwrap();
    drop(raw);
    assert_eq!(next(&mut r).1, b"whole");
    until_stats(&mut r, "truncated frame", |s| {
        s.truncated == 1 && s.peers_closed == 1
    });
    assert!(r.peers().is_empty());

    // Cut inside the header, on the connecting side.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut d = Dealer::connect(listener.local_addr().unwrap(), Limits::default(), WAIT).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    server.write_all(&TAG).unwrap();
    drop(server);
    match d.recv(WAIT) {
        Err(StreamError::Frame {
            source: FrameError::Truncated { have, want },
            ..
        }) => assert_eq!((have, want), (4, 8)),
        other => panic!("expected a truncated frame error, got {other:?}"),
    }
    assert_eq!(d.stats().truncated, 1);
}

#[test]
fn peers_beyond_the_most_a_router_keeps_are_closed_counted_and_the_others_served() {
    let limits = Limits {
        max_peers: 3,
        ..Limits::default()
    };
    let mut r = Router::bind("127.0.0.1:0", limits).unwrap();
    let mut kept: Vec<Dealer> = (0..3)
        .map(|_| Dealer::connect(r.local_addr(), Limits::default(), WAIT).unwrap())
        .collect();
    for (i, d) in kept.iter_mut().enumerate() {
        assert!(d.send(&[&[i as u8]], WAIT).is_ok());
        let (_, bytes) = next(&mut r);
        assert_eq!(bytes.len(), 1);
    }
    // Ten more: each accepted and closed at once; reading it sees the end.
    let mut extra: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(r.local_addr()).unwrap())
        .collect();
    until_stats(&mut r, "ten peers refused", |s| s.peers_refused == 10);
    for s in &mut extra {
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).unwrap_or(0), 0, "a refused peer is closed");
    }
    // The three kept are served as before.
    assert!(kept[1].send(&[b"still here"], WAIT).is_ok());
    assert_eq!(next(&mut r).1, b"still here");
    assert_eq!(r.peers().len(), 3);
}
