//! The supervisor alone, driven by scripted fake peers over ZeroMQ inproc: fake DCMs (DEALER
//! sockets with their own routing ids) send Updates and read assignments, fake readout nodes
//! (ROUTER sockets) read the clears. One test per rule of `specs/dataflow-protocol.md` that
//! involves the supervisor (rules 1, 2, 5, 6) and per corner the rules imply: a late decision
//! after a reassignment, a duplicate decision, a DCM that restarts under its old name. No
//! thread of a real partition runs; every wait has a deadline.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_dataflow::l1source::L1SourceConfig;
use rodeo_dataflow::supervisor::{self, SupervisorConfig, SupervisorCounters, SupervisorSummary};
use rodeo_dataflow::AppHandle;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{decode, encode_update, Decision, Message, Verdict};
use rodeo_transport::socket::{Frame, Received, Socket, SocketKind, Transport};

/// Longest any single expected message may take.
const WAIT: Duration = Duration::from_secs(5);

/// An assignment as a fake DCM saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Got {
    global_id: u64,
    l1id: u32,
    build: bool,
}

struct FakeDcm {
    socket: Socket,
    buf: Vec<u8>,
    msg: Received,
    txn: u32,
}

impl FakeDcm {
    fn connect(t: &Transport, endpoint: &str, name: &str) -> FakeDcm {
        let socket = t.socket(SocketKind::Dealer).unwrap();
        socket.set_identity(name.as_bytes()).unwrap();
        socket.set_send_timeout(2000).unwrap();
        socket.connect(&Endpoint::parse(endpoint).unwrap()).unwrap();
        FakeDcm {
            socket,
            buf: Vec::new(),
            msg: Received::default(),
            txn: 0,
        }
    }

    /// Sends an Update: `credits` new credits and these decisions.
    fn update(&mut self, credits: u32, decisions: &[(u64, u32, Verdict)]) {
        let d: Vec<Decision> = decisions
            .iter()
            .map(|&(global_id, l1id, verdict)| Decision {
                global_id,
                l1id,
                verdict,
            })
            .collect();
        self.buf.clear();
        self.txn += 1;
        encode_update(&mut self.buf, self.txn, credits, &d);
        self.socket.send([Frame::Copy(&self.buf)]).unwrap();
    }

    /// The next assignment within `wait`, if any.
    fn next(&mut self, wait: Duration) -> Option<Got> {
        let ms = wait.as_millis().max(1) as i64;
        if !self.socket.recv(&mut self.msg, ms).unwrap() {
            return None;
        }
        let (a, build) = match decode(&self.msg.bytes).unwrap().message {
            Message::Process(a) => (a, false),
            Message::Build(a) => (a, true),
            other => panic!("a DCM got {other:?}"),
        };
        Some(Got {
            global_id: a.global_id,
            l1id: a.l1id,
            build,
        })
    }

    /// Exactly `n` assignments (each within [`WAIT`]).
    fn take(&mut self, n: usize) -> Vec<Got> {
        (0..n)
            .map(|i| {
                self.next(WAIT)
                    .unwrap_or_else(|| panic!("assignment {i} of {n} never came"))
            })
            .collect()
    }
}

/// A fake readout node: reads Clears (sequence number, L1IDs) and KeepAlives.
struct FakeRos {
    socket: Socket,
    msg: Received,
    endpoint: String,
}

#[derive(Debug, PartialEq, Eq)]
enum ToRos {
    Clear { sequence: u32, l1ids: Vec<u32> },
    KeepAlive,
}

impl FakeRos {
    fn bind(t: &Transport, endpoint: &str) -> FakeRos {
        let socket = t.socket(SocketKind::Router).unwrap();
        socket.bind(&Endpoint::parse(endpoint).unwrap()).unwrap();
        FakeRos {
            socket,
            msg: Received::default(),
            endpoint: endpoint.to_string(),
        }
    }

    fn next(&mut self, wait: Duration) -> Option<ToRos> {
        if !self
            .socket
            .recv(&mut self.msg, wait.as_millis() as i64)
            .unwrap()
        {
            return None;
        }
        let d = decode(&self.msg.bytes).unwrap();
        Some(match d.message {
            Message::Clear { l1ids } => ToRos::Clear {
                sequence: d.header.transaction,
                l1ids: l1ids.iter().collect(),
            },
            Message::KeepAlive => ToRos::KeepAlive,
            other => panic!("a readout node got {other:?}"),
        })
    }

    /// Clears until `n` L1IDs were cleared (KeepAlives skipped), each message within [`WAIT`].
    fn clears(&mut self, n: usize) -> Vec<(u32, Vec<u32>)> {
        let mut out = Vec::new();
        let mut seen = 0;
        while seen < n {
            match self.next(WAIT) {
                Some(ToRos::Clear { sequence, l1ids }) => {
                    seen += l1ids.len();
                    out.push((sequence, l1ids));
                }
                Some(ToRos::KeepAlive) => {}
                None => panic!("only {seen} of {n} L1IDs cleared: {out:?}"),
            }
        }
        out
    }
}

/// A supervisor with its own inproc names (tests run in parallel in one process).
struct Harness {
    t: Transport,
    endpoint: String,
    handle: Option<AppHandle<SupervisorSummary>>,
    counters: Arc<SupervisorCounters>,
}

fn unique(test: &str) -> String {
    format!("inproc://sv-{test}-{}", std::process::id())
}

impl Harness {
    /// Binds `ros` fake readout nodes, then starts a supervisor with `events` L1 accepts (as
    /// fast as credits allow), adjusted by `tune`.
    fn start(
        test: &str,
        ros: usize,
        events: u64,
        tune: impl FnOnce(&mut SupervisorConfig),
    ) -> (Harness, Vec<FakeRos>) {
        let t = Transport::new(1).unwrap();
        let base = unique(test);
        let nodes: Vec<FakeRos> = (0..ros)
            .map(|i| FakeRos::bind(&t, &format!("{base}-ros-{i}")))
            .collect();
        let endpoint = format!("{base}-sv");
        let mut c = SupervisorConfig::new(
            "supervisor",
            &endpoint,
            nodes.iter().map(|n| n.endpoint.clone()).collect(),
        );
        c.l1 = L1SourceConfig {
            events: Some(events),
            roi_robs: vec![0x0011_0000, 0x0011_0001],
            ..L1SourceConfig::default()
        };
        c.drain_timeout = Duration::from_secs(5);
        tune(&mut c);
        let counters = Arc::new(SupervisorCounters::default());
        let handle = supervisor::spawn(c, &t, counters.clone()).unwrap();
        (
            Harness {
                t,
                endpoint,
                handle: Some(handle),
                counters,
            },
            nodes,
        )
    }

    fn dcm(&self, name: &str) -> FakeDcm {
        FakeDcm::connect(&self.t, &self.endpoint, name)
    }

    /// Stops the supervisor and returns its summary (bounded by its drain timeout).
    fn stop(&mut self) -> SupervisorSummary {
        self.handle.take().unwrap().stop().unwrap()
    }
}

/// Waits (bounded) until `f` holds.
fn wait_until(what: &str, f: impl FnMut() -> bool) {
    rodeo_testkit::wait_until(what, WAIT * 2, f);
}

#[test]
fn rule1_an_event_is_assigned_only_against_a_credit() {
    let (mut h, _ros) = Harness::start("rule1", 1, 100, |_| {});
    let mut dcm = h.dcm("dcm-1");
    dcm.update(3, &[]);
    let got = dcm.take(3);
    assert!(got.iter().all(|g| !g.build));
    // No fourth without a fourth credit. (Absence can only be shown by waiting: a bounded
    // wait, long against the microseconds an assignment takes.)
    assert_eq!(dcm.next(Duration::from_millis(300)), None);
    dcm.update(1, &[]);
    assert_eq!(dcm.take(1).len(), 1);
    assert_eq!(dcm.next(Duration::from_millis(100)), None);
    // Decisions alone bring no new assignment.
    let d: Vec<_> = got
        .iter()
        .map(|g| (g.global_id, g.l1id, Verdict::Reject))
        .collect();
    dcm.update(0, &d);
    assert_eq!(dcm.next(Duration::from_millis(200)), None);
    drop(dcm);
    let s = h.stop();
    assert_eq!(s.rejected, 3);
}

#[test]
fn rule1_credits_of_several_dcms_are_served_round_robin() {
    let (mut h, _ros) = Harness::start("rule1rr", 1, 100, |_| {});
    let mut a = h.dcm("dcm-1");
    let mut b = h.dcm("dcm-2");
    a.update(2, &[]);
    b.update(2, &[]);
    let ga = a.take(2);
    let gb = b.take(2);
    let ids: HashSet<u64> = ga.iter().chain(&gb).map(|g| g.global_id).collect();
    assert_eq!(ids.len(), 4, "each event to one DCM only");
    drop((a, b));
    h.stop();
}

/// Gives `dcm` one credit at a time, rejecting the new events it gets, until a Build comes;
/// returns it (bounded by [`WAIT`]).
fn credit_until_build(dcm: &mut FakeDcm) -> Got {
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < WAIT * 2, "no Build came");
        dcm.update(1, &[]);
        let g = dcm.take(1)[0];
        if g.build {
            return g;
        }
        dcm.update(0, &[(g.global_id, g.l1id, Verdict::Reject)]);
    }
}

#[test]
fn rule2_an_event_not_decided_in_time_is_reassigned_as_a_build() {
    let (mut h, _ros) = Harness::start("rule2t", 1, 1_000_000, |c| {
        c.event_timeout = Duration::from_millis(300);
        c.dcm_timeout = Duration::from_secs(30);
    });
    let mut slow = h.dcm("dcm-slow");
    slow.update(1, &[]);
    let held = slow.take(1)[0];
    let mut other = h.dcm("dcm-other");
    let got = credit_until_build(&mut other);
    assert_eq!(
        got,
        Got {
            build: true,
            ..held
        }
    );
    other.update(0, &[(got.global_id, got.l1id, Verdict::ForcedAccept)]);
    drop((slow, other));
    let s = h.stop();
    assert_eq!(s.timeouts, 1);
    assert_eq!(s.reassignments, 1);
    assert_eq!(s.forced_accepts, 1);
}

#[test]
fn rule2_a_dcm_silent_for_dcm_timeout_is_dead_and_its_events_reassigned() {
    let (mut h, _ros) = Harness::start("rule2d", 1, 100, |c| {
        c.dcm_timeout = Duration::from_millis(300);
        c.event_timeout = Duration::from_secs(30);
    });
    let mut dying = h.dcm("dcm-dying");
    dying.update(2, &[]);
    let held: HashSet<u64> = dying.take(2).iter().map(|g| g.global_id).collect();
    drop(dying); // silent from now on
    let mut alive = h.dcm("dcm-alive");
    // Keep this one alive with empty Updates while waiting for the Builds.
    let mut builds = HashSet::new();
    alive.update(2, &[]);
    let t0 = Instant::now();
    while builds.len() < 2 {
        assert!(t0.elapsed() < WAIT, "builds: {builds:?}");
        match alive.next(Duration::from_millis(100)) {
            Some(g) if g.build => {
                builds.insert(g.global_id);
                alive.update(1, &[(g.global_id, g.l1id, Verdict::ForcedAccept)]);
            }
            Some(g) => alive.update(1, &[(g.global_id, g.l1id, Verdict::Reject)]),
            None => alive.update(0, &[]),
        }
    }
    assert_eq!(builds, held);
    drop(alive);
    let s = h.stop();
    assert_eq!(s.dead_dcms, 1);
    assert!(s.forced_accepts >= 2, "{s:?}");
}

#[test]
fn a_late_decision_after_reassignment_is_counted_and_the_event_decided_once() {
    let (mut h, _ros) = Harness::start("late", 1, 1_000_000, |c| {
        c.event_timeout = Duration::from_millis(200);
        c.dcm_timeout = Duration::from_secs(30);
    });
    let mut slow = h.dcm("dcm-slow");
    slow.update(1, &[]);
    let held = slow.take(1)[0];
    let mut other = h.dcm("dcm-other");
    let build = credit_until_build(&mut other);
    assert_eq!(build.global_id, held.global_id);
    // The slow DCM answers after all: late, ignored.
    slow.update(0, &[(held.global_id, held.l1id, Verdict::Accept)]);
    other.update(0, &[(build.global_id, build.l1id, Verdict::ForcedAccept)]);
    wait_until("the forced accept read", || {
        h.counters
            .forced_accepts
            .load(std::sync::atomic::Ordering::Relaxed)
            == 1
    });
    drop((slow, other));
    let s = h.stop();
    assert_eq!(s.late_decisions, 1, "{s:?}");
    assert_eq!((s.accepted, s.forced_accepts), (0, 1));
}

#[test]
fn a_duplicate_decision_is_counted_once() {
    let (mut h, mut ros) = Harness::start("dup", 1, 1_000_000, |c| c.clear_group = 1);
    let mut dcm = h.dcm("dcm-1");
    dcm.update(1, &[]);
    let g = dcm.take(1)[0];
    dcm.update(0, &[(g.global_id, g.l1id, Verdict::Accept)]);
    dcm.update(0, &[(g.global_id, g.l1id, Verdict::Accept)]);
    // An assignment after the duplicate shows it was read (one pipe, in order).
    dcm.update(1, &[]);
    dcm.take(1);
    let clears = ros[0].clears(1);
    assert_eq!(clears, vec![(0, vec![g.l1id])]);
    // No second clear for the same L1ID (a bounded wait: absence is shown by waiting).
    assert_eq!(ros[0].next(Duration::from_millis(200)), None);
    drop(dcm);
    let s = h.stop();
    assert_eq!((s.accepted, s.late_decisions), (1, 1));
}

#[test]
fn rule5_clears_go_to_every_readout_node_in_groups_with_consecutive_sequence_numbers() {
    let (mut h, mut ros) = Harness::start("rule5", 2, 25, |c| {
        c.clear_group = 10;
        c.clear_flush = Duration::from_millis(50);
    });
    let mut dcm = h.dcm("dcm-1");
    dcm.update(25, &[]);
    let got = dcm.take(25);
    let decisions: Vec<_> = got
        .iter()
        .map(|g| (g.global_id, g.l1id, Verdict::Reject))
        .collect();
    dcm.update(0, &decisions);
    let want: HashSet<u32> = got.iter().map(|g| g.l1id).collect();
    for node in &mut ros {
        let clears = node.clears(25);
        let sizes: Vec<usize> = clears.iter().map(|(_, l)| l.len()).collect();
        // Two full groups, then the rest flushed after the idle interval.
        assert_eq!(sizes, vec![10, 10, 5], "{clears:?}");
        let seqs: Vec<u32> = clears.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, vec![0, 1, 2]);
        let l1ids: HashSet<u32> = clears.iter().flat_map(|(_, l)| l.clone()).collect();
        assert_eq!(l1ids, want);
    }
    drop(dcm);
    let s = h.stop();
    assert_eq!((s.cleared, s.clear_messages), (25, 3));
}

#[test]
fn rule5_a_keepalive_goes_out_when_no_clear_did_for_the_interval() {
    let (mut h, mut ros) = Harness::start("keepalive", 1, 1_000_000, |c| {
        c.keepalive = Duration::from_millis(100);
    });
    assert_eq!(ros[0].next(WAIT), Some(ToRos::KeepAlive));
    assert_eq!(ros[0].next(WAIT), Some(ToRos::KeepAlive));
    let s = h.stop();
    assert!(s.keepalives >= 2, "{s:?}");
}

#[test]
fn rule6_at_stop_every_accept_is_decided_and_cleared() {
    let (mut h, mut ros) = Harness::start("rule6", 1, 40, |c| c.clear_group = 7);
    let mut dcm = h.dcm("dcm-1");
    dcm.update(4, &[]);
    let mut done = 0;
    while done < 40 {
        let g = dcm.take(1)[0];
        let v = match g.global_id % 3 {
            0 => Verdict::Reject,
            _ => Verdict::Accept,
        };
        dcm.update(1, &[(g.global_id, g.l1id, v)]);
        done += 1;
    }
    let handle = h.handle.take().unwrap();
    // 40 accepts and an event count: the supervisor ends by itself once all are decided.
    let s = handle.join().unwrap();
    assert_eq!(s.l1_accepts, 40);
    assert_eq!(s.accepted + s.rejected + s.forced_accepts, 40);
    assert_eq!(s.cleared, 40);
    assert_eq!(s.undecided, 0);
    assert!(s.balanced(), "{s:?}");
    let cleared: usize = ros[0].clears(40).iter().map(|(_, l)| l.len()).sum();
    assert_eq!(cleared, 40);
}

#[test]
fn a_dcm_restarting_under_its_name_gets_work_again_after_being_declared_dead() {
    let (mut h, _ros) = Harness::start("restart", 1, 1_000_000, |c| {
        c.dcm_timeout = Duration::from_millis(200);
    });
    let in_flight = || {
        h.counters
            .in_flight
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let mut first = h.dcm("dcm-1");
    first.update(1, &[]);
    let held = first.take(1)[0];
    wait_until("the event in flight", || in_flight() == 1);
    drop(first);
    // Declared dead: its event taken back (no longer in flight, waiting for reassignment).
    wait_until("declared dead", || in_flight() == 0);
    // The restarted process: same routing id, fresh credits; its old event comes back to it
    // as a Build (it is the only DCM), ahead of new events.
    let mut again = h.dcm("dcm-1");
    again.update(1, &[]);
    let got = again.take(1)[0];
    assert_eq!(
        got,
        Got {
            build: true,
            ..held
        }
    );
    again.update(0, &[(got.global_id, got.l1id, Verdict::ForcedAccept)]);
    // An assignment after the decision shows the decision was read (one pipe, in order).
    again.update(1, &[]);
    let next = again.take(1)[0];
    again.update(0, &[(next.global_id, next.l1id, Verdict::Reject)]);
    again.update(1, &[]);
    again.take(1);
    drop(again);
    let s = h.stop();
    // Dead twice: before its restart, and again once the test dropped it (the stop's drain).
    assert_eq!(s.dead_dcms, 2, "{s:?}");
    assert_eq!((s.forced_accepts, s.rejected), (1, 1), "{s:?}");
}

/// The table of DCM identities is bounded; when it is full, a new DCM takes the place of one
/// declared dead (identities made up by the thousand kept every later DCM out for the rest of
/// the run), and is refused only while none is.
#[test]
fn a_full_table_of_dcms_gives_a_dead_ones_place_to_a_new_one() {
    let (mut h, _ros) = Harness::start("fulltable", 1, 1_000_000, |c| {
        c.dcm_timeout = Duration::from_millis(200);
        c.max_dcms = 2;
    });
    let mut a = h.dcm("dcm-a");
    let mut b = h.dcm("dcm-b");
    a.update(0, &[]);
    b.update(0, &[]);
    // A third while both live: refused (counted bad), no work for it.
    let mut c = h.dcm("dcm-c");
    c.update(1, &[]);
    assert_eq!(c.next(Duration::from_millis(100)), None);
    drop((a, b));
    // Both declared dead: the third takes a place and gets work.
    let t0 = Instant::now();
    let got = loop {
        assert!(t0.elapsed() < WAIT * 2, "the new DCM never got work");
        c.update(1, &[]);
        if let Some(g) = c.next(Duration::from_millis(100)) {
            break g;
        }
    };
    c.update(0, &[(got.global_id, got.l1id, Verdict::Reject)]);
    drop(c);
    let s = h.stop();
    assert!(s.bad_messages >= 1, "{s:?}");
    assert!(s.dead_dcms >= 2, "{s:?}");
}

/// A start in which no DCM ever offers a slot ends by itself, with an error that says why,
/// instead of waiting at 0 L1 accepts until someone stops the run: with no DCM at all, and
/// with a DCM that is heard (heartbeats) but whose credits never came.
#[test]
fn a_start_in_which_no_dcm_offers_a_slot_fails_the_run_in_time() {
    for with_dcm in [false, true] {
        let test = if with_dcm {
            "noslot-heard"
        } else {
            "noslot-none"
        };
        let (mut h, _ros) = Harness::start(test, 1, 1_000, |c| {
            c.start_timeout = Duration::from_millis(400);
        });
        let mut dcm = with_dcm.then(|| h.dcm("dcm-silent"));
        let t0 = Instant::now();
        let handle = h.handle.take().unwrap();
        while !handle.is_finished() {
            assert!(
                t0.elapsed() < WAIT * 2,
                "{test}: the supervisor still waits"
            );
            if let Some(d) = dcm.as_mut() {
                // A heartbeat without credits, as a DCM whose first Update was lost sends.
                d.update(0, &[]);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let err = handle.join().expect_err("the run must fail").to_string();
        assert!(err.contains("no DCM offered a processing slot"), "{err}");
        let heard = if with_dcm {
            "dcm-silent, each with 0 slots"
        } else {
            "none"
        };
        assert!(err.contains(&format!("DCMs heard: {heard}")), "{err}");
        assert_eq!(
            h.counters
                .l1_accepts
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
    }
}

/// A DCM that offers its slots a little late (within the start timeout) gets events as ever.
#[test]
fn slots_offered_within_the_start_timeout_start_the_run() {
    let (mut h, _ros) = Harness::start("slot-late", 1, 5, |c| {
        c.start_timeout = Duration::from_millis(1_000);
    });
    let mut dcm = h.dcm("dcm-late");
    std::thread::sleep(Duration::from_millis(300));
    dcm.update(5, &[]);
    let mut got = Vec::new();
    while got.len() < 5 {
        got.push(dcm.next(WAIT).expect("an assignment"));
    }
    // Past the start timeout the run goes on: the supervisor only checks before a first slot.
    std::thread::sleep(Duration::from_millis(1_000));
    let decisions: Vec<(u64, u32, Verdict)> = got
        .iter()
        .map(|g| (g.global_id, g.l1id, Verdict::Reject))
        .collect();
    dcm.update(0, &decisions);
    let s = h.stop();
    assert_eq!(s.l1_accepts, 5);
    assert_eq!(s.rejected, 5);
}

/// Credits are free slots: an Update announcing more than a DCM can have (4 billion: a 32 GiB
/// queue) is counted as a bad message and dropped whole; the DCM's sound Updates go on being
/// served.
#[test]
fn an_update_with_more_credits_than_a_dcm_has_slots_is_refused() {
    let (mut h, _ros) = Harness::start("credits", 1, 100, |_| {});
    let mut dcm = h.dcm("dcm-1");
    dcm.update(u32::MAX, &[]);
    dcm.update(rodeo_dataflow::dcm::MAX_SLOTS as u32 + 1, &[]);
    dcm.update(2, &[]);
    assert_eq!(dcm.take(2).len(), 2);
    assert_eq!(
        dcm.next(Duration::from_millis(300)),
        None,
        "only the sound credits"
    );
    wait_until("two bad messages counted", || {
        h.counters
            .bad_messages
            .load(std::sync::atomic::Ordering::Relaxed)
            == 2
    });
    drop(dcm);
    let s = h.stop();
    assert_eq!(s.bad_messages, 2);
}
