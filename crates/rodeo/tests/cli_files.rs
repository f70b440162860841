//! `rodeo gen events`, `rodeo verify` and `rodeo dump` on real files: good files pass, and each
//! kind of damage is rejected with a message that says where and what.

use std::path::{Path, PathBuf};

use rodeo_testkit::cli::Output;
use rodeo_testkit::rodeo;

/// Generates one file of `count` events and returns its path.
fn gen(dir: &Path, count: u64, checksum: &str) -> PathBuf {
    let out = rodeo!()
        .args([
            "gen",
            "events",
            "--count",
            &count.to_string(),
            "--robs",
            "8",
            "--checksum",
            checksum,
            "--output",
            dir.to_str().unwrap(),
            "--json",
        ])
        .output();
    assert!(out.status.success(), "gen failed: {}", out.text());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["events"], count);
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 1);
    PathBuf::from(files[0].as_str().unwrap())
}

/// Byte offsets of the event records of a file, read with `rodeo verify`-independent means:
/// walk the records by their size words.
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut at = word(4) as usize * 4;
    let mut offsets = Vec::new();
    while word(at) == 0x1234_CCCC {
        offsets.push(at);
        at += word(at + 4) as usize * 4;
    }
    offsets
}

#[test]
fn verify_accepts_generated_files_for_every_checksum() {
    let dir = tempfile::tempdir().unwrap();
    for (i, c) in ["none", "crc16", "adler32"].iter().enumerate() {
        let f = gen(&dir.path().join(i.to_string()), 50, c);
        let out = rodeo!().args(["verify", f.to_str().unwrap()]).output();
        assert!(out.status.success(), "{}", out.text());
        assert!(out.text().contains("OK, 50 events"), "{}", out.text());
        // "OK" says when the events carry no checksum of their own.
        let unsummed = out.text().contains("50 events without an event checksum");
        assert_eq!(unsummed, *c == "none", "{}", out.text());
    }
}

#[test]
fn verify_rejects_a_flipped_payload_bit() {
    let dir = tempfile::tempdir().unwrap();
    let f = gen(dir.path(), 30, "adler32");
    let mut bytes = std::fs::read(&f).unwrap();
    let recs = record_offsets(&bytes);
    // A bit in the middle of event 12's fragment (well inside the ROB payloads).
    let at = recs[12] + (recs[13] - recs[12]) / 2;
    bytes[at] ^= 0x10;
    let bad = dir.path().join("flipped.data");
    std::fs::write(&bad, &bytes).unwrap();
    let out = rodeo!().args(["verify", bad.to_str().unwrap()]).output();
    assert_eq!(out.status.code(), Some(1), "{}", out.text());
    let t = out.text();
    assert!(t.contains("FAILED"), "{t}");
    assert!(
        t.contains("event record 12") || t.contains("event 12"),
        "{t}"
    );
    assert!(t.contains("expected") && t.contains("found"), "{t}");
    assert!(t.contains("12 good events"), "{t}");
}

#[test]
fn verify_rejects_a_truncated_copy_naming_the_recoverable_events() {
    let dir = tempfile::tempdir().unwrap();
    let f = gen(dir.path(), 30, "adler32");
    let bytes = std::fs::read(&f).unwrap();
    let cut = bytes.len() * 2 / 3;
    let recs = record_offsets(&bytes);
    // An event is recoverable when the next record starts at or before the cut.
    let complete = (0..recs.len())
        .filter(|&i| recs.get(i + 1).is_some_and(|&n| n <= cut))
        .count();
    let bad = dir.path().join("truncated.data");
    std::fs::write(&bad, &bytes[..cut]).unwrap();
    let out = rodeo!().args(["verify", bad.to_str().unwrap()]).output();
    assert_eq!(out.status.code(), Some(1), "{}", out.text());
    let t = out.text();
    assert!(
        t.contains(&format!("{complete} good events")),
        "expected {complete} recoverable events: {t}"
    );
    assert!(
        t.contains(&format!("{cut}")),
        "the message should name the file length {cut}: {t}"
    );
}

#[test]
fn verify_rejects_a_corrupted_event_marker() {
    let dir = tempfile::tempdir().unwrap();
    let f = gen(dir.path(), 30, "crc16");
    let mut bytes = std::fs::read(&f).unwrap();
    let recs = record_offsets(&bytes);
    bytes[recs[7]..recs[7] + 4].copy_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
    let bad = dir.path().join("marker.data");
    std::fs::write(&bad, &bytes).unwrap();
    let out = rodeo!().args(["verify", bad.to_str().unwrap()]).output();
    assert_eq!(out.status.code(), Some(1), "{}", out.text());
    let t = out.text();
    assert!(t.contains(&format!("byte {}", recs[7])), "{t}");
    assert!(t.contains("0xdeadbeef") && t.contains("0x1234cccc"), "{t}");
    assert!(t.contains("7 good events"), "{t}");
}

#[test]
fn dump_shows_events_and_robs() {
    let dir = tempfile::tempdir().unwrap();
    let f = gen(dir.path(), 3, "adler32");
    let out = rodeo!()
        .args(["dump", f.to_str().unwrap(), "--words", "--limit", "2"])
        .output();
    assert!(out.status.success(), "{}", out.text());
    let t = out.text();
    assert_eq!(t.matches("\nevent ").count(), 2, "{t}");
    assert_eq!(t.matches("  ROB 0x").count(), 16, "{t}");
    assert!(t.contains("aa1234aa"), "hex words missing: {t}");
    // Names for people, not Rust debug text.
    assert!(t.contains("(Pixel)"), "{t}");
    assert!(!t.contains("Some("), "debug text in the dump: {t}");
}

#[test]
fn dump_json_lists_events_and_robs_and_the_error_of_a_truncated_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = gen(dir.path(), 12, "crc16");
    let out = rodeo!()
        .args(["dump", f.to_str().unwrap(), "--json"])
        .output();
    assert!(out.status.success(), "{}", out.text());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let events = v["events"].as_array().unwrap();
    assert_eq!(events.len(), 12);
    assert!(v["error"].is_null());
    let bytes = std::fs::read(&f).unwrap();
    let recs = record_offsets(&bytes);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["global_id"], i as u64);
        assert_eq!(e["offset"], recs[i] as u64);
        let robs = e["robs"].as_array().unwrap();
        assert_eq!(robs.len(), 8);
        let words: u64 = robs.iter().map(|r| r["size_words"].as_u64().unwrap()).sum();
        assert!(words < e["size_words"].as_u64().unwrap());
        assert_eq!(robs[0]["checksum_type"], "Crc16");
    }
    // Cut inside record 5: five events, then the error naming the record's offset.
    let bad = dir.path().join("cut.data");
    std::fs::write(&bad, &bytes[..recs[5] + 20]).unwrap();
    let out = rodeo!()
        .args(["dump", bad.to_str().unwrap(), "--json"])
        .output();
    assert_eq!(out.status.code(), Some(1), "{}", out.text());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["events"].as_array().unwrap().len(), 5);
    assert_eq!(v["error"]["offset"], recs[5] as u64);
    assert_eq!(v["error"]["events_recovered"], 5);
    // A file that does not open is an object with its error, and the next file is dumped
    // (it stopped the dump before the good file, 2026-12-07); `--limit` holds.
    let missing = dir.path().join("missing.data");
    let out = rodeo!()
        .args(["dump", "--json", "--limit", "3"])
        .args([&missing, &f])
        .output();
    assert_eq!(out.status.code(), Some(1), "{}", out.text());
    let lines: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert!(lines[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("missing.data"));
    assert_eq!(lines[1]["events"].as_array().unwrap().len(), 3);
    assert!(lines[1]["error"].is_null() && lines[1]["container"].is_string());
    // Any command that fails with `--json` says why on stdout as one object too.
    let out = rodeo!()
        .args(["convert", "--json", "--format", "rodeo"])
        .arg(&missing)
        .arg(dir.path().join("o.data"))
        .output();
    assert!(!out.status.success(), "{}", out.text());
    let v: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.text()));
    assert!(v["error"].as_str().unwrap().contains("missing.data"), "{v}");
}

#[test]
fn convert_to_eventstorage_and_back_keeps_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let f = gen(dir.path(), 20, "crc16");
    let es = dir.path().join("events.es.data");
    let out = rodeo!()
        .args([
            "convert",
            f.to_str().unwrap(),
            es.to_str().unwrap(),
            "--format",
            "eventstorage",
            "--compression",
            "zlib",
            "--json",
        ])
        .output();
    assert!(out.status.success(), "{}", out.text());
    let s: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (s["events"].as_u64(), s["robs"].as_u64()),
        (Some(20), Some(160))
    );
    let out = rodeo!().args(["verify", es.to_str().unwrap()]).output();
    assert!(out.text().contains("OK, 20 events"), "{}", out.text());
    assert!(out.text().contains("eventstorage 5"), "{}", out.text());
    let back = dir.path().join("back.data");
    let out = rodeo!()
        .args([
            "convert",
            es.to_str().unwrap(),
            back.to_str().unwrap(),
            "--format",
            "rodeo",
        ])
        .output();
    assert!(out.status.success(), "{}", out.text());
    let dump = |p: &Path| -> serde_json::Value {
        let out = rodeo!()
            .args(["dump", "--json", p.to_str().unwrap()])
            .output();
        assert!(out.status.success(), "{}", out.text());
        serde_json::from_str(&out.stdout).unwrap()
    };
    let (a, b) = (dump(&f), dump(&back));
    assert_eq!(b["container"], "rodeo");
    let strip = |v: &serde_json::Value| -> Vec<(u64, u64, Vec<u64>)> {
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let robs = e["robs"].as_array().unwrap();
                (
                    e["global_id"].as_u64().unwrap(),
                    e["l1id"].as_u64().unwrap(),
                    robs.iter()
                        .map(|r| r["source_id"].as_u64().unwrap())
                        .collect(),
                )
            })
            .collect()
    };
    assert_eq!(strip(&a), strip(&b));
    assert_eq!(strip(&a).len(), 20);
    // zstd into EventStorage is refused with the reason.
    let out = rodeo!()
        .args([
            "convert",
            f.to_str().unwrap(),
            dir.path().join("x.data").to_str().unwrap(),
            "--format",
            "eventstorage",
            "--compression",
            "zstd",
        ])
        .output();
    assert!(!out.status.success());
    assert!(out.text().contains("zlib"), "{}", out.text());
}

/// A real BESIII file (EventStorage v2, eformat 3; `crates/rodeo-files/tests/data/README.md`).
fn besiii_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../rodeo-files/tests/data/besiii_run0091668_pybes3.raw")
}

#[test]
fn a_real_besiii_file_dumps_verifies_and_converts() {
    let f = besiii_file();
    let out = rodeo!()
        .args(["dump", "--json", f.to_str().unwrap()])
        .output();
    assert!(out.status.success(), "{}", out.text());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (v["container"].as_str(), v["version"].as_u64()),
        (Some("eventstorage"), Some(2))
    );
    assert!(v["error"].is_null(), "{}", v["error"]);
    let events = v["events"].as_array().unwrap();
    // What pybes3 0.5.6 reads (python/tests/test_eventstorage.py compares them with it).
    let l1ids = [
        199_781u64, 199_784, 199_785, 199_787, 199_788, 199_786, 199_790, 199_789, 199_793, 199_794,
    ];
    assert_eq!(events.len(), l1ids.len());
    for (e, l1id) in events.iter().zip(l1ids) {
        assert_eq!(e["eformat"], 3);
        assert_eq!(e["run_number"], 91_668);
        assert_eq!(e["l1id"], l1id);
        assert_eq!(e["global_id"], l1id, "BESIII event number");
        assert_eq!(e["robs"].as_array().unwrap().len(), 42);
    }
    let out = rodeo!()
        .args(["verify", "--json", f.to_str().unwrap()])
        .output();
    assert!(out.status.success(), "{}", out.text());
    let verdict: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (verdict["good_events"].as_u64(), verdict["robs"].as_u64()),
        (Some(10), Some(420))
    );
    // Lifted to eformat 5 in an EventStorage v5 file, which verifies with every ROB.
    let dir = tempfile::tempdir().unwrap();
    let v5 = dir.path().join("besiii.v5.data");
    let out = rodeo!()
        .args([
            "convert",
            f.to_str().unwrap(),
            v5.to_str().unwrap(),
            "--format",
            "eventstorage",
            "--json",
        ])
        .output();
    assert!(out.status.success(), "{}", out.text());
    let s: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (s["events"].as_u64(), s["lifted"].as_u64()),
        (Some(10), Some(10))
    );
    let out = rodeo!().args(["verify", v5.to_str().unwrap()]).output();
    assert!(
        out.text().contains("OK, 10 events, 420 ROBs"),
        "{}",
        out.text()
    );
    assert!(
        out.text().contains("eventstorage 5, eformat 5"),
        "{}",
        out.text()
    );
}

/// Adler-32 (RFC 1950), written here so the test does not lean on rodeo's own.
fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in bytes {
        a = (a + u32::from(x)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

fn le_word(bytes: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap())
}

/// The file's bytes with the start record rewritten by hand in the layout of `version` (1: the
/// old layout, no checksum; 2: with its Adler-32 as last word), holding run number `run` and
/// the other fields of the original (a version-2 record as `rodeo gen` writes it).
fn with_start(bytes: &[u8], version: u32, run: u32) -> Vec<u8> {
    let size = le_word(bytes, 1) as usize;
    assert_eq!(le_word(bytes, 2), 2, "the writer writes version 2");
    // Fixed words 3..8 (sequence, time, run, lumiblock), then the two strings, then the
    // checksum word.
    let mut words: Vec<u32> = (3..8).map(|i| le_word(bytes, i)).collect();
    words[3] = run;
    let strings = &bytes[32..(size - 1) * 4];
    let body_words = 3 + words.len() + strings.len() / 4 + usize::from(version == 2);
    let mut out = Vec::new();
    for w in [0x1234_AAAA, body_words as u32, version] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(strings);
    if version == 2 {
        let sum = adler32(&out);
        out.extend_from_slice(&sum.to_le_bytes());
    }
    assert_eq!(out.len(), body_words * 4);
    out.extend_from_slice(&bytes[size * 4..]);
    out
}

fn verify_json(f: &Path) -> (Output, serde_json::Value) {
    let out = rodeo!()
        .args(["verify", "--json", f.to_str().unwrap()])
        .output();
    let v = serde_json::from_str(&out.stdout).unwrap();
    (out, v)
}

#[test]
fn verify_rejects_a_flipped_run_number_in_the_start_record() {
    let dir = tempfile::tempdir().unwrap();
    let f = gen(dir.path(), 20, "crc16");
    let out = rodeo!().args(["verify", f.to_str().unwrap()]).output();
    assert!(out.status.success(), "{}", out.text());
    assert!(
        out.text().contains("start record checksummed"),
        "{}",
        out.text()
    );
    let (_, v) = verify_json(&f);
    assert_eq!(
        (v["version"].as_u64(), v["start_record_checked"].as_bool()),
        (Some(2), Some(true))
    );
    // Byte 24 is the low byte of the run number.
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[24] ^= 0x01;
    let bad = dir.path().join("run-flipped.data");
    std::fs::write(&bad, &bytes).unwrap();
    let out = rodeo!().args(["verify", bad.to_str().unwrap()]).output();
    assert_eq!(out.status.code(), Some(1), "{}", out.text());
    let t = out.text();
    assert!(t.contains("run-flipped.data: FAILED at byte 0"), "{t}");
    assert!(
        t.contains("file start record") && t.contains("Adler-32"),
        "{t}"
    );
    let (_, v) = verify_json(&bad);
    assert_eq!(
        (v["ok"].as_bool(), v["error_offset"].as_u64()),
        (Some(false), Some(0))
    );
    // `dump` refuses it too.
    let out = rodeo!().args(["dump", bad.to_str().unwrap()]).output();
    assert!(!out.status.success(), "{}", out.text());
    assert!(out.text().contains("Adler-32"), "{}", out.text());
}

#[test]
fn version_1_files_still_verify_marked_unchecked() {
    let dir = tempfile::tempdir().unwrap();
    let f = gen(dir.path(), 20, "adler32");
    let bytes = std::fs::read(&f).unwrap();
    let run = le_word(&bytes, 6);
    let v1 = dir.path().join("old-layout.data");
    std::fs::write(&v1, with_start(&bytes, 1, run)).unwrap();
    let out = rodeo!().args(["verify", v1.to_str().unwrap()]).output();
    assert!(out.status.success(), "{}", out.text());
    let t = out.text();
    assert!(t.contains("OK, 20 events") && t.contains("rodeo 1"), "{t}");
    assert!(t.contains("v1 file: start record unchecked"), "{t}");
    let (_, v) = verify_json(&v1);
    assert_eq!(
        (
            v["ok"].as_bool(),
            v["version"].as_u64(),
            v["start_record_checked"].as_bool()
        ),
        (Some(true), Some(1), Some(false))
    );
    // dump reads it, and convert writes the current version from it.
    let out = rodeo!()
        .args(["dump", v1.to_str().unwrap(), "--json"])
        .output();
    assert!(out.status.success(), "{}", out.text());
    let d: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(d["events"].as_array().unwrap().len(), 20);
    let converted = dir.path().join("converted.data");
    let out = rodeo!()
        .args([
            "convert",
            v1.to_str().unwrap(),
            converted.to_str().unwrap(),
            "--format",
            "rodeo",
        ])
        .output();
    assert!(out.status.success(), "{}", out.text());
    let (out, v) = verify_json(&converted);
    assert!(out.status.success(), "{}", out.text());
    assert_eq!(
        (
            v["good_events"].as_u64(),
            v["version"].as_u64(),
            v["start_record_checked"].as_bool()
        ),
        (Some(20), Some(2), Some(true))
    );
}

#[test]
fn verify_rejects_a_start_record_whose_run_disagrees_with_the_events() {
    let dir = tempfile::tempdir().unwrap();
    let f = gen(dir.path(), 10, "crc16");
    let bytes = std::fs::read(&f).unwrap();
    let run = le_word(&bytes, 6);
    // An unchecked version-1 record, and a version-2 record whose checksum is right: both are
    // refused by the cross-check with the events.
    for version in [1, 2] {
        let bad = dir.path().join(format!("other-run-v{version}.data"));
        std::fs::write(&bad, with_start(&bytes, version, run + 1)).unwrap();
        let out = rodeo!().args(["verify", bad.to_str().unwrap()]).output();
        assert_eq!(out.status.code(), Some(1), "{}", out.text());
        let t = out.text();
        assert!(
            t.contains(&format!("other-run-v{version}.data: FAILED")),
            "{t}"
        );
        assert!(
            t.contains(&format!("run number {run}"))
                && t.contains(&format!("start record's run {}", run + 1)),
            "names the field and both values: {t}"
        );
        assert!(t.contains("0 good events"), "{t}");
    }
}
