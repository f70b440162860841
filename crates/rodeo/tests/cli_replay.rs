//! Replay: a partition whose readout node replays a file written by another run rebuilds the
//! same events: every ROB of every event, with the same source id and the same ROD data words,
//! with L1IDs renumbered (matched by order) or kept (matched by L1ID), from an EventStorage file
//! and from rodeo's container.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rodeo_files::datafile::DataFileReader;
use rodeo_testkit::rodeo;
use serde_json::Value;

/// A run with `toml` as its configuration; its JSON summary (the run must balance).
fn run(dir: &Path, name: &str, events: u64, toml: &str) -> Value {
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(&cfg, toml).unwrap();
    let out_dir = dir.join(name);
    let out = rodeo!()
        .args([
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--events",
            &events.to_string(),
            "--output",
            out_dir.to_str().unwrap(),
            "--json",
        ])
        .deadline(Duration::from_secs(120))
        .output();
    assert!(out.status.success(), "{}\n{}", out.stderr, out.stdout);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["balanced"], true, "{v}");
    v
}

/// One event as a replay must rebuild it: L1ID, then (source id, ROD data words) per ROB,
/// sorted by source id.
type Robs = Vec<(u32, Vec<u32>)>;

fn events_of(v: &Value) -> Vec<(u64, u32, Robs)> {
    let mut out = Vec::new();
    for f in v["files"].as_array().unwrap() {
        for e in DataFileReader::open(f.as_str().unwrap()).unwrap() {
            let e = e.unwrap();
            let mut robs: Robs = e
                .robs
                .iter()
                .map(|r| (r.source_id, e.data_words(r).to_vec()))
                .collect();
            robs.sort();
            out.push((e.global_id.unwrap(), e.l1id, robs));
        }
    }
    out
}

/// Where two events' ROBs differ, in a few words (never the whole payload).
fn diff(a: &Robs, b: &Robs) -> String {
    if a.len() != b.len() {
        return format!("{} ROBs vs {}", a.len(), b.len());
    }
    for ((sa, da), (sb, db)) in a.iter().zip(b) {
        if sa != sb {
            return format!("source {sa:#x} vs {sb:#x}");
        }
        if da != db {
            let at = da.iter().zip(db).position(|(x, y)| x != y);
            return format!(
                "ROB {sa:#x}: {} vs {} data words, first difference at {at:?}",
                da.len(),
                db.len()
            );
        }
    }
    "equal".into()
}

fn files(v: &Value) -> Vec<PathBuf> {
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| PathBuf::from(f.as_str().unwrap()))
        .collect()
}

fn replay_toml(files: &[PathBuf], l1id: &str, format: &str) -> String {
    let list: Vec<String> = files
        .iter()
        .map(|f| format!("{:?}", f.to_str().unwrap()))
        .collect();
    format!(
        "[ros]\ninput = \"replay\"\nreplay_files = [{}]\nreplay_l1id = \"{l1id}\"\n\
         [dcm]\naccept_fraction = 1.0\n[logger]\nformat = \"{format}\"\n",
        list.join(", ")
    )
}

#[test]
fn a_replayed_file_rebuilds_the_same_events() {
    let dir = tempfile::tempdir().unwrap();
    // The original: 30% of 3000 accepts, written as EventStorage.
    let original = run(
        dir.path(),
        "original",
        3000,
        "[dcm]\naccept_fraction = 0.3\n[logger]\nformat = \"eventstorage\"\n",
    );
    let written = events_of(&original);
    let n = written.len() as u64;
    assert!(n > 500, "{original}");
    let input = files(&original);

    // Renumbered: event k of the file is L1ID k, global id k of the replay.
    let renumbered = run(
        dir.path(),
        "renumbered",
        n,
        &replay_toml(&input, "renumber", "rodeo"),
    );
    assert_eq!(
        renumbered["events_written"].as_u64(),
        Some(n),
        "{renumbered}"
    );
    assert_eq!(renumbered["partial_events"], 0, "{renumbered}");
    let mut rebuilt = events_of(&renumbered);
    rebuilt.sort_by_key(|e| e.0);
    assert_eq!(rebuilt.len(), written.len());
    for (k, (orig, new)) in written.iter().zip(&rebuilt).enumerate() {
        assert_eq!(new.0, k as u64);
        assert_eq!(new.1, k as u32, "renumbered L1ID");
        assert!(new.2 == orig.2, "event {k}: {}", diff(&orig.2, &new.2));
    }

    // Kept: the files' L1IDs, issued by the L1 source in file order, from the renumbered
    // run's rodeo file this time (the other container).
    let kept = run(
        dir.path(),
        "kept",
        n,
        &replay_toml(&files(&renumbered), "keep", "eventstorage"),
    );
    assert_eq!(kept["events_written"].as_u64(), Some(n), "{kept}");
    let by_l1id: HashMap<u32, Robs> = events_of(&kept)
        .into_iter()
        .map(|(_, l1id, robs)| (l1id, robs))
        .collect();
    assert_eq!(by_l1id.len(), rebuilt.len());
    for (_, l1id, robs) in &rebuilt {
        let got = by_l1id
            .get(l1id)
            .unwrap_or_else(|| panic!("L1ID {l1id} missing"));
        assert!(got == robs, "L1ID {l1id}: {}", diff(robs, got));
    }

    // Kept from the original, whose accepted events' L1IDs are sparse: the gaps are no link
    // error (every fragment was flagged one, the run degraded unexplained, before a QA pass).
    let sparse = run(
        dir.path(),
        "sparse",
        n,
        &replay_toml(&input, "keep", "rodeo"),
    );
    assert_eq!(sparse["events_written"].as_u64(), Some(n), "{sparse}");
    assert_eq!(sparse["readout_nodes"][0]["input_errors"], 0, "{sparse}");
    assert_eq!(sparse["verdict"], "ok", "{sparse}");
}
