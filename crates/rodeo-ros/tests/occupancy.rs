//! A readout node's occupancy as a shifter reads it (issue 39): the emulated S-LINK cards fill
//! every free page ahead of the L1, and those pages count as lent, not as the store's fill; a
//! healthy node at a low rate shows a low fill and no back-pressure; a node whose clears stop
//! while the L1 goes on fills to 100%, raises its alarm and counts back-pressure.

use std::time::Duration;

use rodeo_ros::node::{NodeConfig, NodeInput, ReadoutNode};
use rodeo_ros::server::{ChannelFigures, DirectReply};

const WAIT: Duration = Duration::from_secs(60);
const PAGES: u64 = 64;

fn config() -> NodeConfig {
    NodeConfig {
        channels: 2,
        // 72-word ROB fragments in 256-word pages: three a page, within the index (four).
        fragment_words: 64,
        pages_per_channel: PAGES as usize,
        page_bytes: 1024,
        input: NodeInput::Dma { rate_hz: None },
        // A request for an event not stored is answered (flagged) after this.
        pending_timeout: Duration::from_secs(1),
        ..NodeConfig::default()
    }
}

/// Waits until every channel's published figures satisfy `f`; returns them.
fn wait_figures(
    node: &ReadoutNode,
    what: &str,
    f: impl Fn(usize, &ChannelFigures) -> bool,
) -> Vec<ChannelFigures> {
    let stats = node.channel_stats();
    rodeo_testkit::wait_until(what, WAIT, || {
        stats.snapshot().iter().enumerate().all(|(i, c)| f(i, c))
    });
    stats.snapshot()
}

#[test]
fn a_healthy_node_lends_its_pages_ahead_and_stopped_clears_fill_it() {
    let (node, mut client) = ReadoutNode::start_direct(&config()).unwrap();
    let robs = node.robs().to_vec();
    // Nobody named an event yet: the cards filled every page ahead of the L1.
    let first = wait_figures(&node, "the cards to fill every page", |_, c| {
        c.pages_in_use == PAGES && c.full_ahead > 0
    });
    for c in &first {
        assert_eq!((c.lent_pages, c.full, c.alarms), (PAGES, 0, 0), "{c:?}");
        assert_eq!(c.occupancy(), 0.0, "{c:?}");
    }

    // A healthy run at a low rate: every event asked for and cleared, in groups of 10; the
    // cards refill what was cleared, ahead of the L1 again.
    let mut slot: Option<Box<DirectReply>> = None;
    let events = 100u32;
    for group in 0..events / 10 {
        let ids: Vec<u32> = (group * 10..group * 10 + 10).collect();
        for &l1id in &ids {
            client.send_request(l1id, l1id, &robs).unwrap();
            assert!(client.recv_timeout(&mut slot, WAIT), "no reply for {l1id}");
            assert_eq!(slot.as_ref().and_then(|r| r.l1id()), Some(l1id));
        }
        client.send_clear(group, &ids).unwrap();
    }
    // The 33 pages of events 0..=98 free again (three fragments a page) and refilled: the last
    // clear was processed.
    let healthy = wait_figures(&node, "the cards to refill the cleared pages", |i, c| {
        c.pages_in_use == PAGES && c.fragments >= first[i].fragments + u64::from(events) - 1
    });
    for c in &healthy {
        // At most the page holding the last event cleared and the next ones is fill.
        assert!(c.occupancy() < 0.05, "{c:?}");
        assert!(c.lent_pages >= PAGES - 2, "{c:?}");
        assert_eq!((c.full, c.alarms), (0, 0), "no back-pressure: {c:?}");
    }

    // The clears stop, the L1 goes on: every event the cards stored is asked for, and one
    // more (not stored: answered flagged after the pending timeout).
    let most = healthy.iter().map(|c| c.stored).max().unwrap() as u32;
    for l1id in events..=events + most {
        client.send_request(l1id, l1id, &robs).unwrap();
        assert!(client.recv_timeout(&mut slot, WAIT), "no reply for {l1id}");
    }
    let stuck = wait_figures(&node, "the store full of named events", |_, c| {
        c.full > 0 && c.alarms > 0
    });
    for c in &stuck {
        assert_eq!((c.pages_in_use, c.lent_pages), (PAGES, 0), "{c:?}");
        assert_eq!(c.occupancy(), 1.0, "{c:?}");
    }
    drop(slot);
    drop(client);
    let s = node.stop();
    let k = s.store.total_counters();
    assert!(k.full > 0 && k.full_ahead > 0, "{k:?}");
    assert_eq!(k.cleared, u64::from(events) * robs.len() as u64, "{k:?}");
}
