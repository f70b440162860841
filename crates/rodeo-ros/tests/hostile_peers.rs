//! Hostile and broken clients against a live readout node over tcp on 127.0.0.1: a client that
//! never reads its replies, requests naming one ROB 200,000 times or more ROBs than the node
//! has, a message larger than the node accepts, a flood of requests far ahead of the input. A
//! well-behaved client beside them keeps getting every answer. Every wait is bounded.

use std::time::{Duration, Instant};

use rodeo_ros::inputs::Payload;
use rodeo_ros::node::{NodeConfig, NodeInput, ReadoutNode};
use rodeo_ros::server::{default_max_message_bytes, DirectReply};
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{decode, encode_data_request, Message};
use rodeo_transport::socket::{Frame, Received, Socket, SocketKind, Transport};

const BASE: u32 = 0x0051_0000;
const CHANNELS: usize = 4;

fn config(max_message_bytes: Option<usize>) -> NodeConfig {
    NodeConfig {
        channels: CHANNELS,
        fragment_words: 100,
        base_source_id: BASE,
        pages_per_channel: 256,
        input: NodeInput::Firmware(Payload::Full),
        max_message_bytes,
        ..NodeConfig::default()
    }
}

fn dealer(t: &Transport, endpoint: &str, rcvhwm: Option<i32>) -> Socket {
    let s = t.socket(SocketKind::Dealer).unwrap();
    if let Some(h) = rcvhwm {
        s.set_high_water_marks(h as u32).unwrap();
    }
    // A send never waits long: a test must not hang.
    s.set_send_timeout(5000).unwrap();
    s.connect(&Endpoint::parse(endpoint).unwrap()).unwrap();
    s
}

fn send_request(s: &mut Socket, buf: &mut Vec<u8>, txn: u32, l1id: u32, robs: &[u32]) {
    buf.clear();
    encode_data_request(buf, txn, l1id, robs);
    s.send([Frame::Copy(buf)]).unwrap();
}

/// Waits up to `ms` for one reply: (transaction, l1id, fragments' sizes in bytes).
fn try_reply(s: &mut Socket, ms: i64) -> Option<(u32, u32, Vec<usize>)> {
    let mut msg = Received::default();
    if !s.recv(&mut msg, ms).unwrap() {
        return None;
    }
    let d = decode(&msg.bytes).unwrap();
    let Message::DataReply { l1id, fragments } = d.message else {
        panic!("not a reply: {:?}", d.header.kind);
    };
    Some((
        d.header.transaction,
        l1id,
        fragments.iter().map(<[u8]>::len).collect(),
    ))
}

/// Asks for `l1id`'s every ROB and checks the answer (10 s bound).
fn ask(s: &mut Socket, buf: &mut Vec<u8>, txn: u32, l1id: u32) {
    send_request(s, buf, txn, l1id, &[]);
    let (t, l, frags) = try_reply(s, 10_000).unwrap_or_else(|| panic!("no answer to {txn}"));
    assert_eq!((t, l), (txn, l1id));
    assert_eq!(frags.len(), CHANNELS);
}

/// Waits (bounded) until the node has stored `n` fragments.
fn wait_stored(node: &ReadoutNode, n: u64) {
    rodeo_testkit::wait_until(
        "the input to store fragments",
        Duration::from_secs(10),
        || node.stats().input_fragments >= n,
    );
}

#[test]
fn a_client_that_never_reads_does_not_stop_the_node_serving_others() {
    let t = Transport::new(1).unwrap();
    let node = ReadoutNode::start(&t, &config(None), "tcp://127.0.0.1:*").unwrap();
    let ep = node.endpoint().to_string();
    wait_stored(&node, 64 * CHANNELS as u64);

    // The bad client: a receive high-water mark of 1, 20,000 requests, never a read.
    let bad = std::thread::spawn({
        let t = t.clone();
        let ep = ep.clone();
        move || {
            let mut s = dealer(&t, &ep, Some(1));
            let mut buf = Vec::new();
            for i in 0..20_000u32 {
                send_request(&mut s, &mut buf, i, i % 64, &[]);
            }
            s
        }
    });
    // The good client, beside it: every answer, in time.
    let mut good = dealer(&t, &ep, None);
    let mut buf = Vec::new();
    let t0 = Instant::now();
    let mut txn = 0u32;
    while !bad.is_finished() || txn < 200 {
        ask(&mut good, &mut buf, txn, txn % 64);
        txn += 1;
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "bad client never done"
        );
    }
    let bad_socket = bad.join().unwrap();
    // Wait (bounded) until the node has read all 20,000 requests of the bad client.
    let t0 = Instant::now();
    while node.stats().requests < 20_000 + u64::from(txn) {
        ask(&mut good, &mut buf, txn, txn % 64);
        txn += 1;
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", node.stats());
    }
    let s = node.stats();
    assert!(s.send_dropped > 0, "nothing dropped: {s:?}");
    let drops = node.peer_drops().snapshot();
    assert_eq!(
        drops.len(),
        1,
        "only the bad client loses replies: {drops:?}"
    );

    // The bad client leaves: the node answers normally.
    drop(bad_socket);
    for _ in 0..100 {
        ask(&mut good, &mut buf, txn, txn % 64);
        txn += 1;
    }
    let t0 = Instant::now();
    let stopped = node.stop();
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "stop took {:?}",
        t0.elapsed()
    );
    // Per peer and in total agree; only the bad client lost replies.
    assert!(stopped.counters.send_dropped >= s.send_dropped);
    assert_eq!(stopped.peer_drops.len(), 1);
    assert_eq!(stopped.peer_drops[0].dropped, stopped.counters.send_dropped);
    assert_eq!(stopped.counters.send_errors, 0);
}

#[test]
fn a_request_naming_one_rob_200000_times_gets_one_fragment() {
    let t = Transport::new(1).unwrap();
    // A limit that lets the 800 kB request through, to show the reply stays bounded.
    let node = ReadoutNode::start(&t, &config(Some(1 << 20)), "tcp://127.0.0.1:*").unwrap();
    wait_stored(&node, 8 * CHANNELS as u64);
    let mut c = dealer(&t, node.endpoint(), None);
    let mut buf = Vec::new();
    let robs = vec![BASE + 1; 200_000];
    send_request(&mut c, &mut buf, 7, 3, &robs);
    let (txn, l1id, frags) = try_reply(&mut c, 10_000).expect("no reply");
    assert_eq!((txn, l1id), (7, 3));
    assert_eq!(frags.len(), 1, "one fragment per distinct ROB");
    // 8 header words, then the ROD's 9 header, 100 data and 3 trailer words, and the ROD's
    // S-LINK-free layout: bounded by one fragment whatever the request listed.
    assert!(frags[0] < 1024, "{frags:?}");
    let s = node.stats();
    assert_eq!(s.duplicate_robs, 199_999);

    // More distinct ROB ids than the node has channels: dropped unanswered, counted.
    let too_many: Vec<u32> = (0..CHANNELS as u32 + 1).map(|i| BASE + i).collect();
    send_request(&mut c, &mut buf, 8, 3, &too_many);
    // Known and unknown ids, repeated: each once in the reply, the unknown one LOST.
    send_request(
        &mut c,
        &mut buf,
        9,
        3,
        &[BASE, 0xdead, BASE, 0xdead, BASE + 2],
    );
    let (txn, _, frags) = try_reply(&mut c, 10_000).expect("no reply");
    assert_eq!(txn, 9, "the over-long request was not answered");
    assert_eq!(frags.len(), 3);
    // The counters of a reply are written after it is sent: read them once stopped.
    let s = node.stop().counters;
    assert_eq!(s.rejected_requests, 1);
    assert_eq!(s.duplicate_robs, 199_999 + 2);
    assert_eq!(s.unknown_robs, 1);
    assert_eq!(s.replies, 2);
}

#[test]
fn a_message_above_the_limit_is_refused_and_the_client_is_served_after() {
    let t = Transport::new(1).unwrap();
    let node = ReadoutNode::start(&t, &config(None), "tcp://127.0.0.1:*").unwrap();
    wait_stored(&node, 8 * CHANNELS as u64);
    // The default limit: a Clear of the largest group, far below 200,000 ROB ids.
    let limit = default_max_message_bytes(CHANNELS);
    assert!((400_000..800_000).contains(&limit), "{limit}");
    let mut c = dealer(&t, node.endpoint(), None);
    let mut buf = Vec::new();
    send_request(&mut c, &mut buf, 1, 3, &vec![BASE; 200_000]);
    // ZeroMQ closes the connection before buffering it: no reply.
    assert!(try_reply(&mut c, 500).is_none());
    // The client reconnects by itself and is served; the node never saw the request.
    let t0 = Instant::now();
    let mut txn = 2;
    loop {
        send_request(&mut c, &mut buf, txn, 3, &[]);
        if let Some((got, _, frags)) = try_reply(&mut c, 1000) {
            assert_eq!(got, txn);
            assert_eq!(frags.len(), CHANNELS);
            break;
        }
        txn += 1;
        assert!(t0.elapsed() < Duration::from_secs(20), "never served again");
    }
    let s = node.stats();
    assert_eq!(
        s.duplicate_robs, 0,
        "the oversized request reached the core"
    );
    node.stop();
}

#[test]
fn the_direct_link_bounds_replies_the_same_way() {
    let (node, mut client) = ReadoutNode::start_direct(&config(None)).unwrap();
    wait_stored(&node, 8 * CHANNELS as u64);
    let robs = vec![BASE + 2; 200_000];
    client.send_request(1, 5, &robs).unwrap();
    let mut slot: Option<Box<DirectReply>> = None;
    assert!(
        client.recv_timeout(&mut slot, Duration::from_secs(10)),
        "no reply"
    );
    let mut fragments = 0;
    slot.as_ref().unwrap().for_each_fragment(|_| fragments += 1);
    assert_eq!(fragments, 1);
    // Given back to the core, which releases its pages.
    client.try_recv(&mut slot);
    assert_eq!(node.stats().duplicate_robs, 199_999);
    node.stop();
}

/// A client asking for events far ahead of the input (here: ones that never come) parks as
/// many requests as the node has descriptors, and more: the node keeps reading. Another
/// client's requests for stored events are answered at once and its clear is read, the
/// flood's excess is answered PENDING and counted. Before, the node read nothing, clears
/// included, until the flood's requests timed out (here 60 s). The other client's request
/// that must wait takes its fair share of the queue: the flood's newest parked request gives
/// way (before the fair share, the waiting request was the one answered PENDING).
#[test]
fn a_client_asking_far_ahead_does_not_hold_the_node() {
    const DESCRIPTORS: usize = 32;
    const FLOOD: u32 = 200;
    let t = Transport::new(1).unwrap();
    let cfg = NodeConfig {
        descriptors: DESCRIPTORS,
        pending_timeout: Duration::from_secs(60),
        ..config(None)
    };
    let node = ReadoutNode::start(&t, &cfg, "tcp://127.0.0.1:*").unwrap();
    wait_stored(&node, 64 * CHANNELS as u64);
    let mut bad = dealer(&t, node.endpoint(), None);
    let mut buf = Vec::new();
    // A quarter of the L1ID period ahead: pending, not lost, and never stored in this test.
    for i in 0..FLOOD {
        send_request(&mut bad, &mut buf, i, 0x0040_0000 + i, &[]);
    }
    rodeo_testkit::wait_until(
        "the node to read the whole flood",
        Duration::from_secs(10),
        || node.stats().requests >= u64::from(FLOOD),
    );
    let s = node.stats();
    assert_eq!(s.pending_now, DESCRIPTORS as u64, "{s:?}");
    // The other client: served at once, its clear read.
    let mut good = dealer(&t, node.endpoint(), None);
    let t0 = Instant::now();
    for txn in 0..20u32 {
        ask(&mut good, &mut buf, 1000 + txn, txn);
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    buf.clear();
    rodeo_transport::message::encode_clear(&mut buf, 0, &[0, 1, 2]);
    good.send([Frame::Copy(&buf)]).unwrap();
    rodeo_testkit::wait_until("the clear to be read", Duration::from_secs(5), || {
        node.stats().clears == 1
    });
    // The flood's excess was answered, every missing fragment flagged PENDING.
    let mut answered = 0u32;
    while let Some((txn, l1id, frags)) = try_reply(&mut bad, 2000) {
        assert_eq!(l1id, 0x0040_0000 + txn);
        assert_eq!(frags.len(), CHANNELS);
        answered += 1;
        if answered == FLOOD - DESCRIPTORS as u32 {
            break;
        }
    }
    assert_eq!(answered, FLOOD - DESCRIPTORS as u32);
    // The other client's request that must wait, while the flood holds the queue: it waits
    // (its fair share), and the flood's newest parked request gives way, answered PENDING.
    send_request(&mut good, &mut buf, 5000, 0x0041_0000, &[]);
    let (txn, l1id, frags) = try_reply(&mut bad, 5000).expect("the flood's newest gives way");
    assert_eq!((txn, l1id), (DESCRIPTORS as u32 - 1, 0x0040_0000 + txn));
    assert_eq!(frags.len(), CHANNELS);
    assert!(
        try_reply(&mut good, 300).is_none(),
        "the waiting request was answered"
    );
    // More of the flood: answered at once, the other client's request still parked.
    for i in FLOOD..FLOOD + 10 {
        send_request(&mut bad, &mut buf, i, 0x0040_0000 + i, &[]);
    }
    for _ in 0..10 {
        let (txn, _, _) = try_reply(&mut bad, 5000).expect("the flood answered at once");
        assert!((FLOOD..FLOOD + 10).contains(&txn), "{txn}");
    }
    assert_eq!(node.stats().pending_now, DESCRIPTORS as u64);
    let t0 = Instant::now();
    let stopped = node.stop();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let c = stopped.counters;
    assert_eq!(
        c.pending_overflow,
        u64::from(FLOOD) - DESCRIPTORS as u64 + 11
    );
    assert_eq!(c.parked, DESCRIPTORS as u64 + 1);
    // Every request answered exactly once: the parked ones at the stop, flagged.
    assert_eq!(c.replies, u64::from(FLOOD) + 10 + 21);
    assert_eq!(
        c.pending_fragments,
        (u64::from(FLOOD) + 10 + 1) * CHANNELS as u64,
        "{c:?}"
    );
}
