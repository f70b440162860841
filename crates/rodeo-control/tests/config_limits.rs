//! The fragment limits `config check` enforces (`config/readout.rs`) hold against real
//! readout nodes: at the limit fragments are stored, one word past it the node refuses to be
//! built (with the same limit), as `config check` refuses the partition. The
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
    // The node refuses it too (the ROSTester's and `rodeo ros`'s nodes are not checked by
    // `config check`): before, it was built, the card's link went down at once and the node
    // served every request PENDING, with no error.
    let e = ReadoutNode::start_direct(&node_config(&over))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("at most {max} ")), "{e}");
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
    let c = partition(RosInput::Swrod, max, elinks);
    let (node, _client) = ReadoutNode::start_direct(&node_config(&c)).unwrap();
    wait_until("a fragment of the largest size built", LIMIT, || {
        node.swrod_stats().is_some_and(|s| s.builder.fragments > 0)
    });
    node.stop();
    // One packet word more: the node refuses it (before, it was built and no fragment ever
    // completed).
    let c = partition(RosInput::Swrod, over, elinks);
    let e = ReadoutNode::start_direct(&node_config(&c))
        .unwrap_err()
        .to_string();
    assert!(e.contains("largest packet"), "{e}");
}
