//! The test-beam partition's balance sheet for a detector's inputs (`[ros] input = "network"`
//! and link files, with the data-driven L1): what one link sent beyond another, swapped cables,
//! a sender that ends first, link files of unequal length and an L1ID sent twice are each
//! counted on the sheet and named, and the run ends by itself. Every deadline is bounded.

mod testbeam_common;

use std::time::{Duration, Instant};

use rodeo_cards::corrupt::UnitSource;
use rodeo_cards::generator::{SlinkConfig, SlinkGenerator, WordRange};
use rodeo_cards::net::{LinkAddress, LinkSender};
use rodeo_testkit::rodeo;
use serde_json::Value;
use testbeam_common::{
    beam_config, free_port, json_sheet, problem_text, received, run_json, send, two_tcp_inputs,
    two_tcp_senders,
};

/// Fragments one link sent beyond what the other did are never built: the run ends when
/// both senders close, degraded, the unbuilt fragments counted and the node named.
#[test]
fn fragments_received_and_never_built_are_a_problem_of_the_run() {
    let (v, code) = two_tcp_senders([(0x0051_0000, 300), (0x0051_0001, 200)]);
    assert_eq!(code, Some(3), "{v}");
    assert_eq!(v["verdict"], "degraded", "{v}");
    assert_eq!(v["l1_accepts"], 200, "{v}");
    assert_eq!(v["readout_nodes"][0]["unbuilt_fragments"], 100, "{v}");
    let unbuilt: Vec<&Value> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "unbuilt_fragments")
        .collect();
    assert_eq!(unbuilt.len(), 1, "{v}");
    assert_eq!(unbuilt[0]["count"], 100, "{v}");
    assert_eq!(unbuilt[0]["where"], "ros-1", "{v}");
}

/// Two cables swapped (each link's fragments carry the other's ROB): every fragment is
/// flagged and counted, the sheet names them (they ran "ok" before, found by a QA pass).
#[test]
fn swapped_links_are_flagged_and_named() {
    let (v, _) = two_tcp_senders([(0x0051_0001, 200), (0x0051_0000, 200)]);
    assert_eq!(v["verdict"], "degraded", "{v}");
    assert_eq!(v["readout_nodes"][0]["input_source_mismatches"], 400, "{v}");
    // The inputs' own error counts add up to the node's.
    let per_input: u64 = v["readout_nodes"][0]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["errors"].as_u64().unwrap())
        .sum();
    assert_eq!(
        Some(per_input),
        v["readout_nodes"][0]["input_errors"].as_u64(),
        "{v}"
    );
    assert!(
        problem_text(&v, "input_errors").contains("400 fragments of another source"),
        "{v}"
    );
}

/// A sender that ends first while the other's tail does not fit the store: the run ends by
/// itself once the L1 has every L1ID the first sent (no later event can be built), the
/// other's extra fragments unbuilt, a problem. Before, that sender waited on back-pressure
/// forever and the run never ended (found by a QA pass).
#[test]
fn a_sender_that_ends_first_ends_the_run_when_no_later_event_can_be_built() {
    let dir = tempfile::tempdir().unwrap();
    let addresses: Vec<String> = (0..2)
        .map(|_| format!("tcp://127.0.0.1:{}", free_port()))
        .collect();
    let config = beam_config(dir.path(), &addresses, "events = 0\nseconds = 0");
    // 16 pages of 4 KiB a channel: a few hundred fragments, far fewer than the long tail.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("[ros]\n", "[ros]\npages_per_channel = 16\n"),
    )
    .unwrap();
    let run = run_json(&config, &dir.path().join("out")).spawn();
    let deadline = Instant::now() + Duration::from_secs(120);
    // The long sender fails when the partition closes its connection: not asserted.
    let long = rodeo!()
        .args(["gen", "link", "--mode", "slink", "--units", "20000"])
        .args(["--data-words", "16..64", "--source-id", "0x00510001"])
        .args(["--send", &addresses[1], "--retry-seconds", "60"])
        .spawn();
    send(&addresses[0], 0x0051_0000, 300, deadline);
    let out = run.wait_with_deadline(Duration::from_secs(60));
    drop(long);
    let v = json_sheet(&out);
    assert_eq!(v["l1_accepts"], 300, "{v}");
    assert_eq!(v["verdict"], "degraded", "{v}");
    let node = &v["readout_nodes"][0];
    assert!(node["unbuilt_fragments"].as_u64().unwrap() > 0, "{v}");
}

/// Two link files of 1,000 and 500 fragments into the data-driven L1: 500 events built, the
/// first file's other 500 counted as unbuilt (the run said "ok" with them unsaid).
#[test]
fn link_files_of_unequal_length_leave_their_extra_fragments_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut links = Vec::new();
    for (i, units) in [1000, 500].into_iter().enumerate() {
        let path = dir.path().join(format!("l{i}.bin"));
        let out = rodeo!()
            .args(["gen", "link", "--mode", "slink", "--units"])
            .arg(units.to_string())
            .args(["--source-id", &(0x0051_0000 + i as u32).to_string()])
            .arg("-o")
            .arg(&path)
            .output();
        assert!(out.status.success(), "{}", out.stderr);
        links.push(format!("{:?}", path.to_str().unwrap()));
    }
    let config = dir.path().join("files.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nevents = 0\n[l1]\nmode = \"readout\"\nrois_per_event = [1, 1]\n[ros]\n\
             channels = 2\ninput = \"file\"\nlink_files = [{}]\n[dcm]\nnodes = 1\n\
             accept_fraction = 1.0\n",
            links.join(", ")
        ),
    )
    .unwrap();
    let out = run_json(&config, &dir.path().join("out"))
        .deadline(Duration::from_secs(120))
        .output();
    let v = json_sheet(&out);
    assert_eq!(v["l1_accepts"], 500, "{v}");
    assert_eq!(v["readout_nodes"][0]["unbuilt_fragments"], 500, "{v}");
    assert_eq!(v["readout_nodes"][0]["unbuilt_cut_by_stop"], 0, "{v}");
    assert_eq!(v["verdict"], "degraded", "{v}");
    assert_eq!(out.status.code(), Some(3), "{v}");
}

/// A detector that sends one L1ID twice (fragment 50 of the first link repeated): the store
/// keeps the first and drops the second, and the sheet says so (`store_duplicates`), so that
/// what the inputs received closes: received = stored + store_duplicates +
/// store_dropped_after_clear + received_not_stored. The duplicates were in no field of the
/// sheet before.
#[test]
fn an_l1id_sent_twice_is_dropped_once_and_closes_the_node_s_inputs() {
    let (_dir, addresses, run, deadline) = two_tcp_inputs();
    let second = {
        let a = addresses[1].clone();
        std::thread::spawn(move || send(&a, 0x0051_0001, 200, deadline))
    };
    let cfg = SlinkConfig {
        source_id: 0x0051_0000,
        data_words: WordRange::uniform(16, 64),
        ..SlinkConfig::default()
    };
    let mut source = UnitSource::new(SlinkGenerator::new(cfg), 4 * cfg.fragment_words(64));
    let mut sender = LinkSender::connect_retrying(
        LinkAddress::parse(&addresses[0]).unwrap(),
        Duration::from_secs(60),
    )
    .expect("the partition listens within 60 s");
    for i in 0..200 {
        let unit = source.next_unit().unwrap().to_vec();
        sender.send(&unit).unwrap();
        if i == 50 {
            sender.send(&unit).unwrap();
        }
    }
    sender.flush().unwrap();
    drop(sender);
    second.join().unwrap();
    let out = run.wait_with_deadline(deadline.saturating_duration_since(Instant::now()));
    let v = json_sheet(&out);
    assert_eq!(v["l1_accepts"], 200, "{v}");
    assert_eq!(v["events_written"], 200, "{v}");
    let node = &v["readout_nodes"][0];
    assert_eq!(node["store_duplicates"], 1, "{v}");
    // The duplicate is a link error of the detector's, named in the run's problem.
    assert_eq!(v["verdict"], "degraded", "{v}");
    assert!(
        problem_text(&v, "input_errors")
            .contains("1 fragment(s) of an L1ID already stored, dropped"),
        "{v}"
    );
    let received = received(node);
    assert_eq!(received, 401, "{v}");
    let n = |k: &str| node[k].as_u64().unwrap_or_else(|| panic!("no {k}: {v}"));
    assert_eq!(
        n("stored")
            + n("store_duplicates")
            + n("store_dropped_after_clear")
            + n("received_not_stored"),
        received,
        "{v}"
    );
}
