//! The fragment limits `config check` enforces (`config/readout.rs`) hold against real
//! readout nodes: at the limit fragments are stored, one word past it none ever is. The
//! limits copy private values of rodeo-ros (superpage sizes, the SW ROD's largest packet); a
//! change there fails here.

use std::time::Duration;

use rodeo_control::config::{PartitionConfig, RosInput};
use rodeo_control::partition::Layout;
use rodeo_ros::node::{NodeConfig, ReadoutNode};
use rodeo_testkit::wait_until;

const LIMIT: Duration = Duration::from_secs(30);

/// The readout node the partition's layout makes for `config` (its first), one channel.
fn node_config(config: &PartitionConfig) -> NodeConfig {
    let mut nc = Layout::new(config).nodes.remove(0).2;
    nc.channels = 1;
    nc
}

fn partition(input: RosInput, fragment_words: u32, elinks: usize) -> PartitionConfig {
    let mut c = PartitionConfig::default();
    c.ros.input = input;
    c.ros.channels = 1;
    c.ros.fragment_words = fragment_words;
    c.ros.elinks = elinks;
    c.dcm.slots = 1;
    c.dcm.nodes = 1;
    c
}

#[test]
fn the_largest_dma_fragment_accepted_is_stored_and_one_word_more_never_is() {
    let max = PartitionConfig::max_dma_fragment_words();
    let ok = partition(RosInput::Dma, max, 4);
    ok.validate().unwrap();
    let (node, _client) = ReadoutNode::start_direct(&node_config(&ok)).unwrap();
    wait_until("a fragment of the largest size stored", LIMIT, || {
        node.stats().input_fragments >= 2
    });
    drop(node);

    let over = partition(RosInput::Dma, max + 1, 4);
    let e = over.validate().unwrap_err().to_string();
    assert!(
        e.contains("ros.fragment_words") && e.contains(&format!("at most {max}")),
        "{e}"
    );
    // Built anyway: the card cannot write it, its link goes down, nothing reaches the store.
    let (node, _client) = ReadoutNode::start_direct(&node_config(&over)).unwrap();
    wait_until("the card's link down", LIMIT, || node.progress().ended());
    assert_eq!(node.stats().input_fragments, 0);
}

#[test]
fn the_largest_swrod_fragment_accepted_is_built_and_one_more_packet_word_never_is() {
    let elinks = 4;
    // The largest accepted: find it from the check itself (packets of at most 16 KiB).
    let max = (1..=70_000u32)
        .rev()
        .find(|&w| partition(RosInput::Swrod, w, elinks).validate().is_ok())
        .expect("some SW ROD fragment size is accepted");
    let over = max + elinks as u32;
    let e = partition(RosInput::Swrod, over, elinks)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ros.fragment_words") && e.contains("largest packet"),
        "{e}"
    );
    for (words, built) in [(max, true), (over, false)] {
        let c = partition(RosInput::Swrod, words, elinks);
        let (node, _client) = ReadoutNode::start_direct(&node_config(&c)).unwrap();
        // Enough FELIX blocks read for several whole fragments.
        let blocks = 4 * (4 * words as u64).div_ceil(1000);
        wait_until("the builder reading blocks", LIMIT, || {
            node.swrod_stats()
                .is_some_and(|s| s.builder.blocks >= blocks || s.builder.fragments > 0)
        });
        let s = node.swrod_stats().unwrap();
        assert_eq!(s.builder.fragments > 0, built, "{words} words: {s:?}");
        node.stop();
    }
}
