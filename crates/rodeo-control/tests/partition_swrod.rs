//! A partition whose readout nodes are fed by SW ROD fragment builders (`[ros] input =
//! "swrod"`), end to end in one process: the run balances, every accepted event is in the
//! files with every ROB's fragment, none is partial, and the builders' counters are on the
//! metrics page.

use std::collections::HashSet;

use rodeo_control::config::{PartitionConfig, RosInput};
use rodeo_control::embedded::EmbeddedPartition;
use rodeo_control::prometheus::MetricsWriter;
use rodeo_control::run_control::RunControl;
use rodeo_files::rawfile::RawFileReader;
use rodeo_format::compress::decompress_event;
use rodeo_format::fragment::FullEvent;

const EVENTS: u64 = 1500;
const NODES: usize = 2;
const CHANNELS: usize = 3;

/// The value of the sample `name{app="<app>"}` on the metrics page, if there is one.
fn sample(metrics: &str, name: &str, app: &str) -> Option<f64> {
    let prefix = format!("{name}{{app=\"{app}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn a_swrod_fed_partition_builds_stores_and_balances() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = PartitionConfig::default();
    c.run.output = dir.path().display().to_string();
    c.run.events = EVENTS;
    c.ros.nodes = NODES;
    c.ros.channels = CHANNELS;
    c.ros.input = RosInput::Swrod;
    c.ros.elinks = 4;
    c.dcm.accept_fraction = 0.5;
    c.validate().unwrap();

    let p = EmbeddedPartition::new(c, None);
    let summary = p.run(|_, _| {}).expect("the run");
    assert!(summary.balanced(), "{:?}", summary.problems);
    assert_eq!(summary.l1_accepts, EVENTS);
    let accepted = summary.accepted + summary.forced_accepts;
    assert!(accepted > 0, "{summary:?}");
    assert_eq!(summary.events_written, accepted);
    assert_eq!(summary.partial_events, 0, "{summary:?}");
    assert_eq!(summary.nodes.len(), NODES);
    for n in &summary.nodes {
        assert_eq!(n.swrod_error, None, "{n:?}");
        // Every written event holds one fragment of each of the node's ROBs, built by them.
        assert!(
            n.swrod_built >= summary.events_written * CHANNELS as u64,
            "{n:?}"
        );
        assert!(
            n.stored >= summary.events_written * CHANNELS as u64,
            "{n:?}"
        );
    }

    // The files: every accepted event once, with every ROB of the partition.
    let mut ids = HashSet::new();
    let mut plain = Vec::new();
    for f in &summary.files {
        let mut reader = RawFileReader::open(f).unwrap();
        while let Some(event) = reader.next_event() {
            let event = event.unwrap();
            decompress_event(event.words, &mut plain).unwrap();
            let e = FullEvent::parse(&plain).unwrap();
            e.verify_checksum().unwrap();
            assert_eq!(e.validate_robs().unwrap(), NODES * CHANNELS);
            assert!(ids.insert(e.global_id()), "event {} twice", e.global_id());
        }
    }
    assert_eq!(ids.len() as u64, accepted);

    // The metrics keep the builders' and links' last counters after the run.
    let mut w = MetricsWriter::new();
    p.write_metrics(&mut w);
    let m = w.finish();
    for node in 1..=NODES {
        let app = format!("ros-{node}");
        let built = sample(&m, "rodeo_ros_swrod_fragments_total", &app);
        assert!(built.is_some_and(|b| b > 0.0), "{app}:\n{m}");
        let linked = sample(&m, "rodeo_ros_swrod_link_fragments_total", &app);
        assert!(linked.is_some_and(|l| l > 0.0), "{app}:\n{m}");
        assert!(
            sample(&m, "rodeo_ros_swrod_packets_total", &app).is_some(),
            "{m}"
        );
        assert_eq!(
            sample(&m, "rodeo_ros_swrod_link_rejected_total", &app),
            Some(0.0),
            "{m}"
        );
    }
    assert!(
        m.contains("# TYPE rodeo_ros_swrod_fragments_total counter"),
        "{m}"
    );
}
