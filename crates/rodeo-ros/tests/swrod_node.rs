//! A readout node fed by SW ROD fragment builders ([`NodeInput::SwRod`]): what it serves parses
//! as ROB fragments of the right ROB and L1ID with the builder's packets inside, and it stops
//! by itself in the order producers, builders, core thread, even with a full store nobody
//! clears, accounting for every fragment built.

use std::time::Duration;

use rodeo_format::fragment::{RobFragment, SourceId, Status};
use rodeo_ros::node::{NodeConfig, NodeInput, ReadoutNode};
use rodeo_ros::server::{DirectClient, DirectReply};
use rodeo_transport::socket::Transport;

const BASE: u32 = 0x0071_0000;
const ELINKS: usize = 4;

fn config(channels: usize, pages: usize) -> NodeConfig {
    NodeConfig {
        channels,
        fragment_words: 64,
        base_source_id: BASE,
        pages_per_channel: pages,
        page_bytes: 1024,
        input: NodeInput::SwRod {
            elinks: ELINKS,
            rate_hz: None,
            threads: 2,
        },
        // Wraps within the run: the ECR moves.
        l1id_wrap: 1000,
        // Generous: a loaded machine may hold the builder back a while.
        pending_timeout: Duration::from_secs(10),
        ..NodeConfig::default()
    }
}

/// Asks for ROB `rob` of `l1id` (transaction `txn`) and returns the served words; `slot`
/// holds the last reply (the next receive gives its box back to the link).
fn fetch(
    client: &mut DirectClient,
    slot: &mut Option<Box<DirectReply>>,
    txn: u32,
    l1id: u32,
    rob: u32,
) -> Vec<u32> {
    client.send_request(txn, l1id, &[rob]).unwrap();
    assert!(
        client.recv_timeout(slot, Duration::from_secs(30)),
        "no reply for {l1id:#x}"
    );
    let r = slot.as_ref().unwrap();
    assert_eq!(r.l1id(), Some(l1id));
    r.segments().flat_map(|s| s.iter().copied()).collect()
}

#[test]
fn served_fragments_are_the_builders_rob_fragments() {
    let channels = 3;
    let events = 2500u64;
    let (node, mut client) = ReadoutNode::start_direct(&config(channels, 512)).unwrap();
    let robs = node.robs().to_vec();
    assert_eq!(robs, [BASE, BASE + 1, BASE + 2]);
    let mut slot: Option<Box<DirectReply>> = None;
    let mut group = Vec::new();
    let mut sequence = 0;
    for n in 0..events {
        let l1id = rodeo_cards::generator::L1idCounter::expected(1000, n);
        for &rob in &robs {
            let words = fetch(&mut client, &mut slot, n as u32, l1id, rob);
            let rob_frag = RobFragment::parse(&words)
                .unwrap_or_else(|e| panic!("{l1id:#x} ROB {rob:#x}: {e} in {words:?}"));
            assert_eq!(rob_frag.words().len(), words.len(), "one fragment");
            assert_eq!(rob_frag.source_id(), SourceId(rob));
            assert_eq!(rob_frag.status(), Status::OK, "{l1id:#x}");
            let rod = rob_frag.rod();
            assert_eq!(rod.extended_l1id(), l1id);
            assert_eq!(
                rod.source_id(),
                SourceId(rob),
                "the builder's ROD source id"
            );
            // Every E-link's packet: 2 builder words, 2 packet header words, the payload.
            let payload = 64 / ELINKS - 4;
            assert_eq!(rod.data().len(), ELINKS * (4 + payload), "{l1id:#x}");
        }
        group.push(l1id);
        if group.len() == 100 {
            client.send_clear(sequence, &group).unwrap();
            sequence += 1;
            group.clear();
        }
    }
    let live = node
        .swrod_stats()
        .expect("a SW ROD node has SW ROD counters");
    assert!(live.link.fragments >= events * channels as u64, "{live:?}");
    // The shared monitor reads the same counters and outlives the node.
    let monitor = node.swrod_monitor().expect("a SW ROD node has a monitor");
    assert!(monitor.counters().link.fragments >= live.link.fragments);
    drop(slot);
    drop(client);
    let s = node.stop();
    let sw = s.swrod.expect("SW ROD counters in the final state");
    let after = monitor.counters();
    assert_eq!(after.link, sw.link, "{after:?} {sw:?}");
    assert!(
        after.builder.fragments <= sw.builder.fragments,
        "{after:?} {sw:?}"
    );
    let k = s.store.total_counters();
    assert_eq!(s.counters.lost_fragments, 0);
    assert_eq!(s.counters.replies, events * channels as u64);
    assert_eq!(k.cleared, events * channels as u64);
    assert_eq!((k.duplicates, sw.link.rejected, sw.link.skipped), (0, 0, 0));
    // Every fragment built was stored or counted dropped at shutdown.
    assert_eq!(
        sw.builder.fragments,
        k.fragments + sw.link.dropped_no_consumer,
        "{sw:?} {k:?}"
    );
    assert_eq!(
        (sw.builder.corrupt_packets, sw.builder.late_packets),
        (0, 0)
    );
    // The lazy FELIX cards wrote in the builder threads: their CPU time is counted, and is
    // part of the builders'.
    assert!(
        sw.card_cpu_ns > 0 && sw.card_cpu_ns <= sw.builder.cpu_ns,
        "{sw:?}"
    );
}

/// A node restarted into a running run (`first_event`, as the controller chooses it) starts
/// its FELIX inputs and builders there: past the builder's largest window move (2^20 events),
/// which a node starting at 0 would have taken for a damaged L1ID.
#[test]
fn a_rejoined_node_builds_from_the_event_it_was_given() {
    let wrap = 1 << 24;
    let first = 3_000_000u64;
    let events = 300u64;
    let mut c = config(2, 512);
    c.l1id_wrap = wrap;
    c.first_event = first;
    let (node, mut client) = ReadoutNode::start_direct(&c).unwrap();
    let robs = node.robs().to_vec();
    let mut slot: Option<Box<DirectReply>> = None;
    let mut group = Vec::new();
    for n in first..first + events {
        let l1id = rodeo_cards::generator::L1idCounter::expected(wrap, n);
        for &rob in &robs {
            let words = fetch(&mut client, &mut slot, n as u32, l1id, rob);
            let rob_frag = RobFragment::parse(&words)
                .unwrap_or_else(|e| panic!("{l1id:#x} ROB {rob:#x}: {e} in {words:?}"));
            assert_eq!(rob_frag.status(), Status::OK, "{l1id:#x}");
            assert_eq!(rob_frag.rod().extended_l1id(), l1id);
        }
        group.push(l1id);
        if group.len() == 100 {
            client.send_clear(n as u32, &group).unwrap();
            group.clear();
        }
    }
    drop(slot);
    drop(client);
    let s = node.stop();
    let sw = s.swrod.unwrap();
    assert_eq!(s.counters.lost_fragments, 0);
    assert_eq!(
        (sw.builder.corrupt_packets, sw.builder.late_packets),
        (0, 0),
        "{sw:?}"
    );
    assert_eq!((sw.link.rejected, sw.link.skipped), (0, 0), "{sw:?}");
}

#[test]
fn a_full_store_nobody_clears_still_stops() {
    let t = Transport::new(1).unwrap();
    let node = ReadoutNode::start(&t, &config(2, 64), "inproc://swrod-node-full").unwrap();
    // The builders fill the store, then wait: back-pressure, seen in the live counters.
    rodeo_testkit::wait_until(
        "the store to fill (the builders' sink waiting)",
        Duration::from_secs(60),
        || {
            let c = node.swrod_stats().unwrap();
            c.link.sink_waits > 0 && node.stats().input_fragments >= 2 * 64
        },
    );
    let s = node.stop();
    let sw = s.swrod.unwrap();
    let k = s.store.total_counters();
    // Nobody named an event: the store's refusals are the emulated links' run-ahead of the
    // L1, not back-pressure (rodeo_ros::store, "Occupancy").
    assert!(k.full_ahead > 0, "{k:?}");
    assert!(sw.link.dropped_no_consumer > 0, "{sw:?}");
    assert_eq!(
        sw.builder.fragments,
        k.fragments + sw.link.dropped_no_consumer,
        "{sw:?} {k:?}"
    );
    // The FELIX channels are lazy (written when a builder pops): while the builders waited
    // nothing was written, so no block is left unread at the stop.
    assert_eq!((sw.unread_blocks, sw.unread_bytes), (0, 0), "{sw:?}");
    assert_eq!(s.input_stalls, sw.link.sink_waits);
}

#[test]
fn bad_sw_rod_configurations_are_refused() {
    let mut c = config(1, 16);
    c.input = NodeInput::SwRod {
        elinks: 0,
        rate_hz: None,
        threads: 0,
    };
    assert!(ReadoutNode::start_direct(&c).is_err());
    c.input = NodeInput::SwRod {
        elinks: 3000,
        rate_hz: Some(10.0),
        threads: 1,
    };
    assert!(ReadoutNode::start_direct(&c).is_err());
}
