//! The ROSTester against a real node over inproc and tcp: the mix is honoured, every request is
//! answered once, every event is cleared, and the node ends empty.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rodeo_memory::{PagePool, PagePoolConfig, RegionOptions};
use rodeo_ros::inputs::{FirmwareInput, Payload};
use rodeo_ros::server::{RequestServer, ServerConfig};
use rodeo_ros::store::{EventStore, StoreConfig};
use rodeo_rostester::{self as tester, TesterConfig};
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::socket::{SocketKind, Transport};

const BASE: u32 = 0x0052_0000;

fn run(endpoint: &str, instances: u32) {
    let channels = 6;
    let events_per_instance = 3000u64;
    let total = events_per_instance * u64::from(instances);
    let t = Transport::new(1).unwrap();
    let pool = PagePool::new(PagePoolConfig {
        page_bytes: 4096,
        pages: channels * 128,
        region: RegionOptions::default(),
    })
    .unwrap();
    let store = EventStore::new(&pool, &StoreConfig::with_channels(channels, BASE, 128)).unwrap();
    let input = FirmwareInput::new(&store, 200, 1 << 24, Payload::Full).with_limit(total);
    let server = RequestServer::start(
        &t,
        &ServerConfig {
            endpoint: endpoint.into(),
            ..ServerConfig::default()
        },
        store,
        Box::new(input),
    )
    .unwrap();
    let ep = server.endpoint().to_string();
    let reports: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..instances)
            .map(|i| {
                let t = t.clone();
                let ep = ep.clone();
                s.spawn(move || {
                    let mut sock = t.socket(SocketKind::Dealer).unwrap();
                    sock.connect(&Endpoint::parse(&ep).unwrap()).unwrap();
                    let cfg = TesterConfig {
                        robs: (0..channels as u32).map(|c| BASE + c).collect(),
                        instances,
                        instance: i,
                        events: Some(events_per_instance),
                        duration: Some(Duration::from_secs(60)),
                        max_outstanding: 64,
                        ..TesterConfig::default()
                    };
                    tester::run(&mut sock, &cfg, &AtomicBool::new(false)).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut r = reports[0].clone();
    for o in &reports[1..] {
        r.merge(o);
    }
    assert_eq!(r.events, total);
    assert_eq!(r.bad_replies, 0);
    assert_eq!(r.unanswered, 0);
    assert_eq!(r.lost_fragments, 0);
    // The mix: about 70% of events have an L2 request, about 20% an EB request.
    let l2 = r.l2_requests as f64 / total as f64;
    assert!((0.6..0.8).contains(&l2), "L2 fraction {l2}");
    let eb = r.eb_requests as f64 / total as f64;
    assert!((0.12..0.28).contains(&eb), "EB fraction {eb}");
    rodeo_testkit::wait_until("every clear received", Duration::from_secs(20), || {
        server.stats().cleared_l1ids >= total
    });
    let mut stopped = server.stop();
    assert_eq!(stopped.counters.replies, r.replies, "one reply per request");
    assert_eq!(stopped.counters.requests, r.l2_requests + r.eb_requests);
    rodeo_testkit::wait_until("every page given back", Duration::from_secs(20), || {
        stopped.store.reclaim();
        (0..channels).all(|c| stopped.store.settle(c) == 0)
    });
    assert_eq!(stopped.store.total_counters().stored, 0);
}

#[test]
fn tester_inproc_two_instances() {
    run("inproc://ros-tester", 2);
}

#[test]
fn tester_tcp_one_instance() {
    run("tcp://127.0.0.1:*", 1);
}

/// The direct in-process link: the same mix and invariants (every request answered once, every
/// event cleared, every page back, occupancy zero), with fragments that span pages so replies
/// carry several segments per fragment.
fn run_direct(data_words: usize, pages_per_channel: usize) {
    let channels = 5;
    let events = 4000u64;
    let pool = PagePool::new(PagePoolConfig {
        page_bytes: 4096,
        pages: channels * pages_per_channel,
        region: RegionOptions::default(),
    })
    .unwrap();
    let store = EventStore::new(
        &pool,
        &StoreConfig::with_channels(channels, BASE, pages_per_channel),
    )
    .unwrap();
    let input = FirmwareInput::new(&store, data_words, 1 << 24, Payload::Full).with_limit(events);
    let (server, mut client) = RequestServer::start_direct(
        &ServerConfig {
            descriptors: 48,
            ..ServerConfig::default()
        },
        store,
        Box::new(input),
    )
    .unwrap();
    assert_eq!(server.endpoint(), "direct");
    let cfg = TesterConfig {
        robs: (0..channels as u32).map(|c| BASE + c).collect(),
        events: Some(events),
        duration: Some(Duration::from_secs(60)),
        // More than the link takes: the tester bounds itself by the link's capacity.
        max_outstanding: 64,
        ..TesterConfig::default()
    };
    let r = tester::run_direct(&mut client, &cfg, &AtomicBool::new(false)).unwrap();
    assert_eq!(r.events, events);
    assert_eq!(r.bad_replies, 0);
    assert_eq!(r.unanswered, 0);
    assert_eq!(r.lost_fragments, 0);
    assert_eq!(r.pending_fragments, 0);
    assert!(r.fragments > 0);
    // The interval series accounts for every event, one entry per interval of the run.
    assert_eq!(r.intervals.iter().sum::<u64>(), r.events);
    let spans = (r.seconds / tester::INTERVAL.as_secs_f64()).floor() as usize + 1;
    assert!(
        r.intervals.len().abs_diff(spans) <= 1,
        "{} intervals in {} s",
        r.intervals.len(),
        r.seconds
    );
    let l2 = r.l2_requests as f64 / events as f64;
    assert!((0.6..0.8).contains(&l2), "L2 fraction {l2}");
    rodeo_testkit::wait_until("every clear received", Duration::from_secs(20), || {
        server.stats().cleared_l1ids >= events
    });
    // Nothing is answered twice: no reply waits beyond those the tester read.
    assert!(!client.recv_timeout(&mut None, Duration::from_millis(100)));
    let mut stopped = server.stop();
    assert_eq!(stopped.counters.replies, r.replies, "one reply per request");
    assert_eq!(stopped.counters.requests, r.l2_requests + r.eb_requests);
    assert_eq!(stopped.counters.send_errors, 0);
    assert_eq!(
        stopped.counters.fragments_sent, r.fragments,
        "every fragment sent arrived"
    );
    drop(client);
    rodeo_testkit::wait_until("every page given back", Duration::from_secs(20), || {
        stopped.store.reclaim();
        (0..channels).all(|c| stopped.store.settle(c) == 0)
    });
    assert_eq!(stopped.store.total_counters().stored, 0);
    for c in 0..channels {
        assert_eq!(stopped.store.occupancy(c), 0.0, "channel {c} not empty");
    }
}

#[test]
fn tester_direct_link() {
    run_direct(200, 64);
}

#[test]
fn tester_direct_link_fragments_spanning_pages() {
    run_direct(1500, 128);
}

/// A paced tester whose events are further apart than its drain timeout is not taken for one
/// whose node went silent: the wait for a reply starts with the request, not with the last
/// reply, so every event is handled and the run is not ended early.
#[test]
fn a_paced_tester_slower_than_its_drain_timeout_runs_to_its_end() {
    let channels = 2;
    let events = 4u64;
    let pool = PagePool::new(PagePoolConfig {
        page_bytes: 4096,
        pages: channels * 16,
        region: RegionOptions::default(),
    })
    .unwrap();
    let store = EventStore::new(&pool, &StoreConfig::with_channels(channels, BASE, 16)).unwrap();
    let input = FirmwareInput::new(&store, 50, 1 << 24, Payload::Full).with_limit(events);
    let (server, mut client) =
        RequestServer::start_direct(&ServerConfig::default(), store, Box::new(input)).unwrap();
    let cfg = TesterConfig {
        robs: (0..channels as u32).map(|c| BASE + c).collect(),
        events: Some(events),
        duration: Some(Duration::from_secs(60)),
        max_rate: Some(2.0),
        // Every request takes its reply well within this; the events are 500 ms apart.
        drain_timeout: Duration::from_millis(300),
        l2_fraction: 1.0,
        ..TesterConfig::default()
    };
    let r = tester::run_direct(&mut client, &cfg, &AtomicBool::new(false)).unwrap();
    assert!(!r.stopped_on_silence, "{r:?}");
    assert_eq!(r.events, events, "{r:?}");
    assert_eq!(r.unanswered, 0, "{r:?}");
    assert!(r.seconds > 1.0, "paced at 2 Hz: {r:?}");
    drop(client);
    drop(server.stop());
}
