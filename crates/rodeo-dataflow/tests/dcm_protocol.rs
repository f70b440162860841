//! A DCM alone, driven by scripted fake peers over ZeroMQ inproc: a fake supervisor (ROUTER:
//! reads Updates, sends Process/Build), a fake readout node (ROUTER: reads DataRequests,
//! answers as each test scripts) and a fake logger (ROUTER: reads Events, acknowledges when the
//! test says). One test per rule of `specs/dataflow-protocol.md` that involves the DCM (rules 1,
//! 2's Build, 3 and 5) and per corner they imply (a reply to an unknown transaction). No thread
//! of a real partition runs; every wait has a deadline.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_dataflow::dcm::{self, DcmConfig, DcmCounters, DcmSummary, ReadoutPeer};
use rodeo_dataflow::trigger::{AcceptFraction, TimeDistribution};
use rodeo_dataflow::AppHandle;
use rodeo_format::fragment::{FullEvent, RobBuilder, RobPayload, RodBuilder, SourceId, Status};
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{
    decode, encode_assignment, encode_data_reply, encode_event_ack, Message, Verdict,
};
use rodeo_transport::socket::{Frame, Received, Socket, SocketKind, Transport};

/// Longest any single expected message may take.
const WAIT: Duration = Duration::from_secs(5);
/// The fake readout node's ROBs.
const ROBS: [u32; 2] = [0x0011_0000, 0x0011_0001];

/// A ROB fragment of `source` for `l1id`, flagged `status` (two data words).
fn rob(source: u32, l1id: u32, status: Status) -> Vec<u32> {
    let data = [l1id, source];
    let pieces: [&[u32]; 1] = [&data];
    let st = [status.word()];
    let rod = RodBuilder {
        source_id: SourceId(source),
        extended_l1id: l1id,
        data: &pieces,
        ..RodBuilder::default()
    };
    let mut out = Vec::new();
    RobBuilder {
        source_id: SourceId(source),
        status: &st,
        payload: RobPayload::Rod(rod),
        ..RobBuilder::default()
    }
    .write_vec(&mut out)
    .unwrap();
    out
}

/// A ROUTER a fake peer binds; reads (peer, decoded message kind and fields) with deadlines.
struct Peer {
    socket: Socket,
    msg: Received,
    buf: Vec<u8>,
}

impl Peer {
    fn bind(t: &Transport, endpoint: &str) -> Peer {
        let socket = t.socket(SocketKind::Router).unwrap();
        socket.bind(&Endpoint::parse(endpoint).unwrap()).unwrap();
        Peer {
            socket,
            msg: Received::default(),
            buf: Vec::new(),
        }
    }

    /// The next message within `wait`: `true` if one came (in `self.msg`).
    fn recv(&mut self, wait: Duration) -> bool {
        self.socket
            .recv(&mut self.msg, wait.as_millis().max(1) as i64)
            .unwrap()
    }

    fn send_to(&mut self, peer: &[u8]) {
        self.socket.send_to(peer, [Frame::Copy(&self.buf)]).unwrap();
    }
}

/// An Update as the fake supervisor read it.
#[derive(Debug, Default)]
struct Update {
    credits: u32,
    decisions: Vec<(u64, Verdict)>,
}

/// A request as the fake readout node read it.
#[derive(Debug, Clone)]
struct Request {
    peer: Vec<u8>,
    transaction: u32,
    l1id: u32,
    robs: Vec<u32>,
}

struct Harness {
    handle: Option<AppHandle<DcmSummary>>,
    sv: Peer,
    ros: Peer,
    logger: Peer,
    /// The DCM's routing id at the supervisor, once it spoke.
    dcm_id: Vec<u8>,
    /// The context of every socket here (dropped last).
    _t: Transport,
}

impl Harness {
    fn start(test: &str, tune: impl FnOnce(&mut DcmConfig), fraction: f64) -> Harness {
        Harness::start_timed(test, tune, fraction, TimeDistribution::Zero)
    }

    /// As [`Harness::start`], with the trigger holding each slot for `time`.
    fn start_timed(
        test: &str,
        tune: impl FnOnce(&mut DcmConfig),
        fraction: f64,
        time: TimeDistribution,
    ) -> Harness {
        let t = Transport::new(1).unwrap();
        let base = format!("inproc://dcm-{test}-{}", std::process::id());
        let sv = Peer::bind(&t, &format!("{base}-sv"));
        let ros = Peer::bind(&t, &format!("{base}-ros"));
        let logger = Peer::bind(&t, &format!("{base}-log"));
        let mut c = DcmConfig::new(
            "dcm-1",
            &format!("{base}-sv"),
            vec![ReadoutPeer {
                endpoint: format!("{base}-ros"),
                robs: ROBS.to_vec(),
            }],
            vec![format!("{base}-log")],
            4,
        );
        tune(&mut c);
        let trigger = AcceptFraction {
            fraction,
            stream: 0,
            shares: Vec::new(),
            time,
        };
        let handle =
            dcm::spawn(c, &t, Box::new(trigger), Arc::new(DcmCounters::default())).unwrap();
        Harness {
            handle: Some(handle),
            sv,
            ros,
            logger,
            dcm_id: Vec::new(),
            _t: t,
        }
    }

    /// The next Update within `wait`.
    fn update(&mut self, wait: Duration) -> Option<Update> {
        if !self.sv.recv(wait) {
            return None;
        }
        self.dcm_id = self.sv.msg.peer.clone();
        let Message::Update { credits, decisions } = decode(&self.sv.msg.bytes).unwrap().message
        else {
            panic!("the supervisor got something else than an Update");
        };
        Some(Update {
            credits,
            decisions: decisions.iter().map(|d| (d.global_id, d.verdict)).collect(),
        })
    }

    /// Reads Updates until their credits add up to `n` (bounded); returns the decisions seen.
    fn credits(&mut self, n: u32) -> Vec<(u64, Verdict)> {
        let t0 = Instant::now();
        let (mut got, mut decisions) = (0, Vec::new());
        while got < n {
            assert!(t0.elapsed() < WAIT, "only {got} of {n} credits");
            if let Some(u) = self.update(Duration::from_millis(100)) {
                got += u.credits;
                decisions.extend(u.decisions);
            }
        }
        decisions
    }

    /// Reads Updates until a decision about `global_id` (bounded).
    fn decision(&mut self, global_id: u64) -> Verdict {
        let t0 = Instant::now();
        loop {
            assert!(t0.elapsed() < WAIT, "no decision about {global_id}");
            if let Some(u) = self.update(Duration::from_millis(100)) {
                if let Some(&(_, v)) = u.decisions.iter().find(|(g, _)| *g == global_id) {
                    return v;
                }
            }
        }
    }

    /// Sends a Process (or Build) for `global_id` / `l1id` with both ROBs as RoIs.
    fn assign(&mut self, build: bool, global_id: u64, l1id: u32) {
        self.assign_rois(build, global_id, l1id, &ROBS);
    }

    /// As [`Harness::assign`], with the RoIs in `rois`.
    fn assign_rois(&mut self, build: bool, global_id: u64, l1id: u32, rois: &[u32]) {
        self.sv.buf.clear();
        encode_assignment(&mut self.sv.buf, build, 1, global_id, l1id, 7, 1, rois);
        let id = self.dcm_id.clone();
        self.sv.send_to(&id);
    }

    /// The next DataRequest within `wait`.
    fn request(&mut self, wait: Duration) -> Option<Request> {
        if !self.ros.recv(wait) {
            return None;
        }
        let d = decode(&self.ros.msg.bytes).unwrap();
        let Message::DataRequest { l1id, robs } = d.message else {
            panic!("the readout node got something else than a DataRequest");
        };
        Some(Request {
            peer: self.ros.msg.peer.clone(),
            transaction: d.header.transaction,
            l1id,
            robs: robs.iter().collect(),
        })
    }

    /// Answers `r` with every ROB it names (all of the node's for an empty list), each flagged
    /// `status`.
    fn answer(&mut self, r: &Request, status: Status) {
        let robs = if r.robs.is_empty() {
            ROBS.to_vec()
        } else {
            r.robs.clone()
        };
        let frags: Vec<Vec<u32>> = robs.iter().map(|&s| rob(s, r.l1id, status)).collect();
        let views: Vec<&[u32]> = frags.iter().map(Vec::as_slice).collect();
        self.ros.buf.clear();
        encode_data_reply(&mut self.ros.buf, r.transaction, r.l1id, &views);
        self.ros.send_to(&r.peer);
    }

    /// Answers every request for `wait` with good fragments.
    fn serve(&mut self, wait: Duration) -> u64 {
        let deadline = Instant::now() + wait;
        let mut n = 0;
        while let Some(r) = self.request(deadline.saturating_duration_since(Instant::now())) {
            self.answer(&r, Status::OK);
            n += 1;
        }
        n
    }

    /// The next Event the logger got within `wait`: (peer, stream, status, global id).
    fn event(&mut self, wait: Duration) -> Option<(Vec<u8>, u32, Status, u64)> {
        if !self.logger.recv(wait) {
            return None;
        }
        let (stream, words) = self.event_words();
        let ev = FullEvent::parse(&words).unwrap();
        Some((
            self.logger.msg.peer.clone(),
            stream,
            ev.status(),
            ev.global_id(),
        ))
    }

    /// The stream and the full event's words of the Event the logger got last.
    fn event_words(&self) -> (u32, Vec<u32>) {
        let d = decode(&self.logger.msg.bytes).unwrap();
        let Message::Event { stream, event } = d.message else {
            panic!("the logger got something else than an Event");
        };
        let words = event
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        (stream, words)
    }

    fn ack(&mut self, peer: &[u8], global_id: u64) {
        self.logger.buf.clear();
        encode_event_ack(&mut self.logger.buf, 1, &[global_id]);
        self.logger.send_to(peer);
    }

    fn stop(&mut self) -> DcmSummary {
        self.handle.take().unwrap().stop().unwrap()
    }
}

/// Serves requests until the logger has an event (bounded); returns it.
fn serve_until_event(h: &mut Harness) -> (Vec<u8>, u32, Status, u64) {
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < WAIT * 2, "no event reached the logger");
        if let Some(e) = h.event(Duration::from_millis(20)) {
            return e;
        }
        h.serve(Duration::from_millis(20));
    }
}

#[test]
fn rule1_a_dcm_announces_one_credit_per_slot() {
    let mut h = Harness::start("rule1", |c| c.slots = 5, 0.0);
    h.credits(5);
    // Heartbeats follow, without new credits while no slot was used.
    let t0 = Instant::now();
    let mut extra = 0;
    while t0.elapsed() < Duration::from_millis(600) {
        if let Some(u) = h.update(Duration::from_millis(100)) {
            extra += u.credits;
        }
    }
    assert_eq!(extra, 0);
    let s = h.stop();
    assert_eq!(s.assigned, 0);
}

#[test]
fn held_slots_are_decided_when_their_holds_end_each_one() {
    // Holds of different lengths in flight together (exponential, mean 30 ms): the DCM looks
    // over its slots only once the earliest timer is due, so each hold must re-arm the next.
    let mut h = Harness::start_timed(
        "hold",
        |c| c.slots = 4,
        0.0,
        TimeDistribution::Exponential(Duration::from_millis(30)),
    );
    h.credits(4);
    for k in 0..4u64 {
        h.assign(false, 40 + k, 400 + k as u32);
    }
    h.serve(Duration::from_millis(100));
    let mut decided = Vec::new();
    let t0 = Instant::now();
    while decided.len() < 4 {
        assert!(t0.elapsed() < WAIT, "decided only {decided:?}");
        if let Some(u) = h.update(Duration::from_millis(100)) {
            decided.extend(u.decisions);
        }
    }
    decided.sort_by_key(|d| d.0);
    assert_eq!(
        decided,
        (40..44).map(|g| (g, Verdict::Reject)).collect::<Vec<_>>()
    );
    let s = h.stop();
    assert_eq!((s.assigned, s.rejected), (4, 4));
}

#[test]
fn rule5_a_rejected_event_frees_its_slot_at_once() {
    let mut h = Harness::start("reject", |c| c.slots = 1, 0.0);
    h.credits(1);
    h.assign(false, 10, 100);
    h.serve(Duration::from_millis(200));
    assert_eq!(h.decision(10), Verdict::Reject);
    // Nothing went to the logger.
    assert!(h.event(Duration::from_millis(100)).is_none());
    let s = h.stop();
    assert_eq!((s.assigned, s.rejected), (1, 1));
}

#[test]
fn rule5_an_accepted_event_is_reported_only_after_the_logger_acknowledged_it() {
    let mut h = Harness::start("ack", |c| c.slots = 1, 1.0);
    h.credits(1);
    h.assign(false, 11, 101);
    let (peer, stream, status, gid) = serve_until_event(&mut h);
    assert_eq!((stream, gid), (0, 11));
    assert!(status.is_ok(), "{status:?}");
    // Not acknowledged yet: heartbeats come, without the decision or a credit.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(600) {
        if let Some(u) = h.update(Duration::from_millis(100)) {
            assert!(u.decisions.is_empty() && u.credits == 0, "{u:?}");
        }
    }
    h.ack(&peer, 11);
    assert_eq!(h.decision(11), Verdict::Accept);
    let s = h.stop();
    assert_eq!((s.accepted, s.events_sent), (1, 1));
}

#[test]
fn rule2_a_build_is_fetched_whole_and_force_accepted_without_the_algorithm() {
    // The algorithm rejects everything: a Build is accepted all the same.
    let mut h = Harness::start("build", |c| c.slots = 1, 0.0);
    h.credits(1);
    h.assign(true, 12, 102);
    let r = h.request(WAIT).expect("a request for the Build");
    assert!(
        r.robs.is_empty() || r.robs.len() == ROBS.len(),
        "a Build fetches every ROB: {r:?}"
    );
    h.answer(&r, Status::OK);
    let (peer, _, status, gid) = serve_until_event(&mut h);
    assert_eq!(gid, 12);
    assert!(status.contains(Status::EVENT_FORCED_ACCEPT), "{status:?}");
    h.ack(&peer, 12);
    assert_eq!(h.decision(12), Verdict::ForcedAccept);
    let s = h.stop();
    assert_eq!((s.builds, s.forced), (1, 1));
}

#[test]
fn rule3_a_pending_fragment_is_asked_again_then_the_event_is_built_partial() {
    let mut h = Harness::start(
        "pending",
        |c| {
            c.slots = 1;
            c.max_retries = 3;
            c.retry_delay = Duration::from_millis(5);
        },
        1.0,
    );
    h.credits(1);
    h.assign(false, 13, 103);
    // ROB 1 is always pending; ROB 0 is there.
    let mut asked_for_pending = 0;
    let t0 = Instant::now();
    let (peer, _, status, _) = loop {
        assert!(t0.elapsed() < WAIT * 2, "never built");
        if let Some(e) = h.event(Duration::from_millis(10)) {
            break e;
        }
        let Some(r) = h.request(Duration::from_millis(20)) else {
            continue;
        };
        let robs = if r.robs.is_empty() {
            ROBS.to_vec()
        } else {
            r.robs.clone()
        };
        let frags: Vec<Vec<u32>> = robs
            .iter()
            .map(|&s| {
                if s == ROBS[1] {
                    asked_for_pending += 1;
                    rob(s, r.l1id, Status::ROB_FRAGMENT_PENDING)
                } else {
                    rob(s, r.l1id, Status::OK)
                }
            })
            .collect();
        let views: Vec<&[u32]> = frags.iter().map(Vec::as_slice).collect();
        h.ros.buf.clear();
        encode_data_reply(&mut h.ros.buf, r.transaction, r.l1id, &views);
        h.ros.send_to(&r.peer);
    };
    assert!(status.contains(Status::EVENT_PARTIAL), "{status:?}");
    // Asked once, then again up to max_retries times (RoI fetch and the accepted event's
    // fetch may each ask; never more than the bound allows).
    assert!(
        (2..=2 * (1 + 3)).contains(&asked_for_pending),
        "{asked_for_pending}"
    );
    h.ack(&peer, 13);
    assert_eq!(h.decision(13), Verdict::Accept);
    let s = h.stop();
    assert_eq!(s.partial, 1);
    assert!(s.retries >= 3, "{s:?}");
}

#[test]
fn rule3_requests_per_readout_node_are_bounded() {
    let mut h = Harness::start(
        "bound",
        |c| {
            c.slots = 8;
            c.max_outstanding = 2;
        },
        0.0,
    );
    h.credits(8);
    for i in 0..8u64 {
        h.assign(false, 100 + i, 200 + i as u32);
    }
    // Unanswered: no more than two requests arrive (absence shown by a bounded wait).
    let mut held = Vec::new();
    while let Some(r) = h.request(Duration::from_millis(300)) {
        held.push(r);
        assert!(held.len() <= 2, "{} requests in flight", held.len());
    }
    assert_eq!(held.len(), 2);
    // Each answer lets exactly one more through, until all eight events were asked for.
    let mut l1ids: HashMap<u32, u32> = HashMap::new();
    let mut answered = 0;
    while let Some(r) = held.pop() {
        *l1ids.entry(r.l1id).or_default() += 1;
        h.answer(&r, Status::OK);
        answered += 1;
        if let Some(next) = h.request(Duration::from_millis(500)) {
            held.push(next);
        }
        assert!(held.len() <= 2);
        assert!(answered <= 16, "too many requests");
    }
    assert_eq!(l1ids.len(), 8, "{l1ids:?}");
    let s = h.stop();
    assert_eq!(s.rejected, 8);
}

/// Requests queued for a node keep their order: the room a reply frees goes to the oldest
/// queued request, not to one the reply itself causes (an accepted event's request for the rest
/// of its fragments), although that one is made before the turn fills the room.
#[test]
fn queued_requests_keep_their_order_when_a_reply_frees_room() {
    let mut h = Harness::start(
        "order",
        |c| {
            c.slots = 4;
            c.max_outstanding = 1;
        },
        1.0,
    );
    h.credits(2);
    // RoIs of the first ROB only: an accepted event then asks for the second.
    h.assign_rois(false, 100, 200, &ROBS[..1]);
    h.assign_rois(false, 101, 201, &ROBS[..1]);
    let first = h
        .request(Duration::from_millis(500))
        .expect("the first event's request");
    assert_eq!((first.l1id, first.robs.as_slice()), (200, &ROBS[..1]));
    assert!(
        h.request(Duration::from_millis(300)).is_none(),
        "a second request in flight over max_outstanding = 1"
    );
    // The answer accepts event 200, whose request for the rest of its fragments comes after
    // event 201's RoI request, queued before it.
    h.answer(&first, Status::OK);
    let second = h
        .request(Duration::from_millis(500))
        .expect("the queued request");
    assert_eq!(
        (second.l1id, second.robs.as_slice()),
        (201, &ROBS[..1]),
        "the oldest queued request goes first"
    );
    h.answer(&second, Status::OK);
    let third = h
        .request(Duration::from_millis(500))
        .expect("event 200's rest");
    assert_eq!((third.l1id, third.robs.as_slice()), (200, &ROBS[1..]));
    h.answer(&third, Status::OK);
    let fourth = h
        .request(Duration::from_millis(500))
        .expect("event 201's rest");
    assert_eq!((fourth.l1id, fourth.robs.as_slice()), (201, &ROBS[1..]));
    h.answer(&fourth, Status::OK);
    let mut built: Vec<u64> = (0..2)
        .map(|_| {
            h.event(Duration::from_millis(500))
                .expect("a built event")
                .3
        })
        .collect();
    built.sort_unstable();
    assert_eq!(built, [100, 101]);
    h.stop();
}

/// A reply from one readout node carrying a fragment of a ROB the configuration gives to
/// another node is refused and counted: it neither goes into the event nor takes the place of
/// the genuine fragment (the first copy of a ROB won, the later genuine one was dropped).
#[test]
fn a_fragment_of_another_nodes_rob_is_refused_and_counted() {
    const FOREIGN: u32 = 0x0022_0000;
    let mut h = Harness::start(
        "foreign",
        |c| {
            c.slots = 1;
            // A second node that never answers (its endpoint is never bound).
            c.readout.push(ReadoutPeer {
                endpoint: format!("inproc://dcm-foreign-nobody-{}", std::process::id()),
                robs: vec![FOREIGN],
            });
        },
        0.0,
    );
    h.credits(1);
    h.assign(false, 15, 105);
    let r = loop {
        let r = h.request(WAIT).expect("a request to the first node");
        if r.robs.iter().all(|id| ROBS.contains(id)) {
            break r;
        }
    };
    let mut frags: Vec<Vec<u32>> = r.robs.iter().map(|&s| rob(s, r.l1id, Status::OK)).collect();
    frags.push(rob(FOREIGN, r.l1id, Status::OK));
    let views: Vec<&[u32]> = frags.iter().map(Vec::as_slice).collect();
    h.ros.buf.clear();
    encode_data_reply(&mut h.ros.buf, r.transaction, r.l1id, &views);
    h.ros.send_to(&r.peer);
    assert_eq!(h.decision(15), Verdict::Reject);
    let s = h.stop();
    assert_eq!(s.bad_messages, 1, "{s:?}");
}

#[test]
fn a_reply_to_an_unknown_transaction_is_dropped_and_counted() {
    let mut h = Harness::start("stale", |c| c.slots = 1, 0.0);
    h.credits(1);
    h.assign(false, 14, 104);
    let r = h.request(WAIT).expect("a request");
    // A reply with a transaction id the DCM never used, then the right one.
    let bogus = Request {
        transaction: r.transaction ^ 0x5A5A_0000,
        ..r.clone()
    };
    h.answer(&bogus, Status::OK);
    h.answer(&r, Status::OK);
    h.serve(Duration::from_millis(100));
    assert_eq!(h.decision(14), Verdict::Reject);
    let s = h.stop();
    assert!(s.stale_replies >= 1, "{s:?}");
    assert_eq!(s.rejected, 1);
}

/// The DCM keeps each reply whole and files its fragments where they lie (no copy into an
/// arena): every built event carries each ROB once, word for word, when its fragments came in
/// two replies (ROB 1 answered PENDING first, then asked again, with a second copy of ROB 0 the
/// DCM must ignore), when a reply is split over two frames as a readout node's large reply is
/// (joined on receipt), and event after event in the one slot, whose kept replies are recycled
/// for the next receives.
#[test]
fn kept_replies_build_every_event_word_for_word() {
    let mut h = Harness::start(
        "kept",
        |c| {
            c.slots = 1;
            c.retry_delay = Duration::from_millis(1);
        },
        1.0,
    );
    h.credits(1);
    let mut replies = 0u32;
    for n in 0..16u64 {
        let (gid, l1id) = (200 + n, 300 + n as u32);
        h.assign(false, gid, l1id);
        let mut rob1_asked = false;
        let t0 = Instant::now();
        let peer = loop {
            assert!(t0.elapsed() < WAIT * 2, "event {gid} never built");
            if let Some((peer, _, _, got)) = h.event(Duration::from_millis(5)) {
                assert_eq!(got, gid);
                break peer;
            }
            let Some(r) = h.request(Duration::from_millis(20)) else {
                continue;
            };
            let mut robs = if r.robs.is_empty() {
                ROBS.to_vec()
            } else {
                r.robs.clone()
            };
            if rob1_asked {
                // A copy of a fragment the slot has already: ignored.
                robs.push(ROBS[0]);
            }
            let frags: Vec<Vec<u32>> = robs
                .iter()
                .map(|&s| {
                    let pending = s == ROBS[1] && !rob1_asked;
                    rob(
                        s,
                        r.l1id,
                        if pending {
                            Status::ROB_FRAGMENT_PENDING
                        } else {
                            Status::OK
                        },
                    )
                })
                .collect();
            rob1_asked |= robs.contains(&ROBS[1]);
            let views: Vec<&[u32]> = frags.iter().map(Vec::as_slice).collect();
            h.ros.buf.clear();
            encode_data_reply(&mut h.ros.buf, r.transaction, r.l1id, &views);
            replies += 1;
            if replies % 2 == 0 {
                // Two frames, cut inside the first fragment at a word boundary.
                let cut = 4 * (h.ros.buf.len() / 8);
                let (a, b) = h.ros.buf.split_at(cut);
                h.ros
                    .socket
                    .send_to(&r.peer, [Frame::Copy(a), Frame::Copy(b)])
                    .unwrap();
            } else {
                h.ros.send_to(&r.peer);
            }
        };
        let (_, words) = h.event_words();
        let ev = FullEvent::parse(&words).unwrap();
        assert!(!ev.status().contains(Status::EVENT_PARTIAL), "{gid}");
        let mut got: Vec<(u32, Vec<u32>)> = ev
            .robs()
            .map(|r| {
                let r = r.unwrap();
                (r.source_id().word(), r.words().to_vec())
            })
            .collect();
        got.sort();
        let want: Vec<(u32, Vec<u32>)> = ROBS
            .iter()
            .map(|&s| (s, rob(s, l1id, Status::OK)))
            .collect();
        assert_eq!(got, want, "event {gid}: every ROB once, word for word");
        h.ack(&peer, gid);
        assert_eq!(h.decision(gid), Verdict::Accept);
    }
    assert!(replies >= 32, "two replies per event: {replies}");
    let s = h.stop();
    assert_eq!((s.accepted, s.partial), (16, 0));
}

/// A DCM whose supervisor is not there yet (a partition's processes start in any order; a
/// supervisor restarts) tries its Update again about every `UPDATE_RETRY`, not on every turn
/// of its loop: it spun at 100% of a core before. The failed tries are counted, and in 300 ms
/// they stay far below a spinning loop's hundreds of thousands.
#[test]
fn a_dcm_without_its_supervisor_retries_its_update_without_spinning() {
    let t = Transport::new(1).unwrap();
    let base = format!("inproc://dcm-nosv-{}", std::process::id());
    let _ros = Peer::bind(&t, &format!("{base}-ros"));
    let _logger = Peer::bind(&t, &format!("{base}-log"));
    // Shared memory: a send into an inbox nobody made fails at once (ZeroMQ would queue it).
    let supervisor = format!("shm://rodeo-test-{}-nosv", std::process::id());
    let c = DcmConfig::new(
        "dcm-1",
        &supervisor,
        vec![ReadoutPeer {
            endpoint: format!("{base}-ros"),
            robs: ROBS.to_vec(),
        }],
        vec![format!("{base}-log")],
        4,
    );
    let trigger = AcceptFraction {
        fraction: 0.0,
        stream: 0,
        shares: Vec::new(),
        time: TimeDistribution::Zero,
    };
    let counters = Arc::new(DcmCounters::default());
    let handle = dcm::spawn(c, &t, Box::new(trigger), Arc::clone(&counters)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let tries = counters.send_failures.load(Ordering::Relaxed);
    let summary = handle.stop().unwrap();
    assert!(tries >= 1, "the DCM never tried to reach its supervisor");
    let most = 2 * (300 / dcm::UPDATE_RETRY.as_millis() as u64) + 100;
    assert!(
        tries <= most,
        "{tries} failed Updates in 300 ms (at most {most} expected)"
    );
    assert!(summary.send_failures >= tries);
}
