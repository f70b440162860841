//! The ROSTester asks again for FRAGMENT_PENDING fragments after `retry_delay` (protocol rule
//! 3: "after a short delay"), not at once, against a scripted readout node (a ROUTER socket in
//! this test) that answers each event's first request PENDING. Every wait has a deadline.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rodeo_format::fragment::Status;
use rodeo_ros::store::empty_rob;
use rodeo_rostester::{self as tester, TesterConfig};
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{decode, encode_data_reply, Message};
use rodeo_transport::socket::{Frame, Received, SocketKind, Transport};

const ROB: u32 = 0x0053_0000;
const EVENTS: u64 = 3;

/// Each event's first request answered PENDING, its re-ask answered with the fragment: the
/// re-ask comes no sooner than the delay, and the tester finishes every event with nothing
/// missing.
#[test]
fn a_pending_fragment_is_asked_again_after_the_delay() {
    scripted_pending_then_present(Duration::from_millis(40));
}

/// A zero delay asks again at once, with the same outcome.
#[test]
fn a_zero_delay_asks_again_at_once() {
    scripted_pending_then_present(Duration::ZERO);
}

fn scripted_pending_then_present(delay: Duration) {
    let t = Transport::new(1).unwrap();
    let mut node = t.socket(SocketKind::Router).unwrap();
    let ep = node
        .bind(&Endpoint::parse("tcp://127.0.0.1:*").unwrap())
        .unwrap();
    let cfg = TesterConfig {
        robs: vec![ROB],
        l2_fraction: 1.0,
        roi_size: 1,
        eb_fraction: 0.0,
        clear_group: 1,
        max_outstanding: 2,
        events: Some(EVENTS),
        duration: Some(Duration::from_secs(20)),
        retries: 3,
        retry_delay: delay,
        ..TesterConfig::default()
    };
    let report = std::thread::scope(|s| {
        let tester = s.spawn(|| {
            let mut sock = t.socket(SocketKind::Dealer).unwrap();
            sock.connect(&Endpoint::parse(&ep).unwrap()).unwrap();
            tester::run(&mut sock, &cfg, &AtomicBool::new(false)).unwrap()
        });
        let (mut msg, mut buf) = (Received::default(), Vec::new());
        let mut first_answer: Option<(u32, Instant)> = None;
        let mut reasks = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while reasks < EVENTS {
            assert!(Instant::now() < deadline, "the tester stopped asking");
            if !node.recv(&mut msg, 100).unwrap() {
                continue;
            }
            let d = decode(&msg.bytes).unwrap();
            let Message::DataRequest { l1id, .. } = d.message else {
                continue; // clears
            };
            let status = match first_answer {
                Some((l, at)) if l == l1id => {
                    let waited = at.elapsed();
                    assert!(waited >= delay, "asked again after {waited:?}");
                    reasks += 1;
                    Status::OK
                }
                _ => {
                    first_answer = Some((l1id, Instant::now()));
                    Status::ROB_FRAGMENT_PENDING
                }
            };
            let frag = empty_rob(ROB, l1id, status);
            buf.clear();
            encode_data_reply(&mut buf, d.header.transaction, l1id, &[&frag]);
            node.send_to(&msg.peer, [Frame::Copy(&buf)]).unwrap();
        }
        tester.join().unwrap()
    });
    assert_eq!(report.events, EVENTS);
    assert_eq!(report.pending_fragments, 0, "{report:?}");
    assert_eq!(report.fragments, EVENTS);
    assert_eq!((report.bad_replies, report.unanswered), (0, 0));
}
