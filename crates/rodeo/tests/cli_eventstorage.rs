//! `rodeo run` with `[logger] format = "eventstorage"`: the files it writes are EventStorage
//! version 5 as a reader written from `specs/eventstorage.md` alone reads them (the spec-only
//! reader of rodeo-format's tests, shared by path: it uses std only, no rodeo code), event for
//! event with the accepted count; zlib blocks inflate with plain zlib; `rodeo dump` and
//! `rodeo verify` read them; zstd with EventStorage is refused naming the field.

#[path = "../../rodeo-files/tests/spec_reader/mod.rs"]
mod spec_reader;

use std::collections::HashSet;
use std::io::Read as _;
use std::path::Path;
use std::time::Duration;

use rodeo_testkit::rodeo;
use serde_json::Value;

/// A run of `events` L1 accepts with `logger` lines in `[logger]`; its JSON summary.
fn run(dir: &Path, events: u32, logger: &str) -> Value {
    let cfg = dir.join("p.toml");
    std::fs::write(
        &cfg,
        format!("[dcm]\naccept_fraction = 0.3\n[logger]\nmax_file_mib = 1\n{logger}"),
    )
    .unwrap();
    let out = rodeo!()
        .args([
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--events",
            &events.to_string(),
            "--output",
            dir.to_str().unwrap(),
            "--json",
        ])
        .deadline(Duration::from_secs(120))
        .output();
    assert!(out.status.success(), "{}", out.text());
    serde_json::from_str(&out.stdout).expect("one JSON object")
}

/// The eformat 5 global id of a full event read as plain words (after the 6 generic header
/// words, the status words and the checksum type: bunch-crossing seconds and nanoseconds,
/// then the global id low and high), checked against the marker and the size word; std only,
/// like the spec reader.
fn global_id(words: &[u32]) -> u64 {
    assert_eq!(words[0], 0xAA12_34AA, "full event marker");
    assert_eq!(words[1] as usize, words.len(), "full event size word");
    assert_eq!(words[3] >> 24, 5, "eformat 5");
    let fixed = 7 + words[5] as usize;
    u64::from(words[fixed + 2]) | (u64::from(words[fixed + 3]) << 32)
}

/// Reads every file of the run with the spec-only reader; returns the global ids of all the
/// blocks (inflated when `zlib`), checking file names, free strings and block numbering.
fn read_with_spec_reader(v: &Value, zlib: bool) -> Vec<u64> {
    let files = v["files"].as_array().expect("files");
    assert!(!files.is_empty(), "{v}");
    let run = v["run_number"].as_u64().expect("run_number") as u32;
    let mut ids = Vec::new();
    let mut block_number = 0u32;
    for f in files {
        let path = Path::new(f.as_str().unwrap());
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with(&format!(
                "data_test.{run:08}.physics_Main.daq.RAW._lb0000._logger-1._"
            )) && name.ends_with(".data"),
            "ATLAS file name: {name}"
        );
        let bytes = std::fs::read(path).unwrap();
        let s = spec_reader::read_v5(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.run_number, run);
        assert_eq!(s.app_name, "logger-1");
        assert_eq!(
            spec_reader::free(&s, "Stream").as_deref(),
            Some("physics_Main")
        );
        assert_eq!(
            spec_reader::free(&s, "Project").as_deref(),
            Some("data_test")
        );
        assert_eq!(spec_reader::free(&s, "LumiBlock").as_deref(), Some("0"));
        assert!(spec_reader::free(&s, "GUID").is_some_and(|g| g.len() == 36));
        assert_eq!(
            spec_reader::free(&s, "Compression").as_deref(),
            zlib.then_some("zlib")
        );
        assert_eq!(s.end_events_in_file as usize, s.blocks.len());
        for (b, n) in s.blocks.iter().zip(&s.block_numbers) {
            block_number += 1;
            assert_eq!(*n, block_number, "block numbers count the run's events");
            let words = if zlib {
                let mut plain = Vec::new();
                flate2::read::ZlibDecoder::new(&b[..])
                    .read_to_end(&mut plain)
                    .unwrap();
                spec_reader::words(&plain)
            } else {
                spec_reader::words(b)
            };
            ids.push(global_id(&words));
        }
    }
    ids
}

#[test]
fn eventstorage_runs_are_read_by_the_spec_only_reader_with_the_accepted_count() {
    for (i, compression) in ["none", "zlib"].iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let v = run(
            dir.path(),
            4000 + 1000 * i as u32,
            &format!(
                "format = \"eventstorage\"\ncompression = \"{compression}\"\n\
                 [run]\ncomment = \"HV scan, 1500 V\"\nrun_type = \"calibration\"\n"
            ),
        );
        assert_eq!(v["balanced"], true, "{v}");
        let accepted = v["accepted"].as_u64().unwrap() + v["forced_accepts"].as_u64().unwrap();
        assert_eq!(v["events_written"].as_u64().unwrap(), accepted, "{v}");
        let ids = read_with_spec_reader(&v, *compression == "zlib");
        assert_eq!(ids.len() as u64, accepted, "accepted count");
        let unique: HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len(), "each event once");
        let l1 = v["l1_accepts"].as_u64().unwrap();
        assert!(ids.iter().all(|&g| g < l1), "global ids are L1 accepts");
        // rodeo's own tools read the same files.
        let f = v["files"][0].as_str().unwrap();
        let out = rodeo!()
            .args(["verify", "--json", f])
            .deadline(Duration::from_secs(60))
            .output();
        assert!(out.status.success(), "{}", out.text());
        let verdict: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(verdict["container"], "eventstorage");
        assert_eq!(verdict["version"], 5);
        let out = rodeo!()
            .args(["dump", "--json", f])
            .deadline(Duration::from_secs(60))
            .output();
        assert!(out.status.success(), "{}", out.text());
        let d: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(d["container"], "eventstorage");
        // The run's words are free strings of every file (no shifter given: none written).
        let strings = d["eventstorage"]["free_strings"].to_string();
        assert!(strings.contains("\"Comment=HV scan, 1500 V\""), "{strings}");
        assert!(strings.contains("\"RunType=calibration\""), "{strings}");
        assert!(!strings.contains("Shifter="), "{strings}");
        assert_eq!(v["run_type"], "calibration");
        let events = d["events"].as_array().unwrap();
        assert_eq!(
            events.len() as u64,
            verdict["good_events"].as_u64().unwrap()
        );
        for e in events {
            assert_eq!(e["eformat"], 5);
            assert_eq!(e["robs"].as_array().unwrap().len(), 12, "{e}");
            assert!(e["l1id"].is_u64() && e["run_number"] == 1);
        }
    }
}

#[test]
fn zstd_with_eventstorage_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    std::fs::write(
        &cfg,
        "[logger]\nformat = \"eventstorage\"\ncompression = \"zstd\"\n",
    )
    .unwrap();
    let out = rodeo!()
        .args(["run", "--config", cfg.to_str().unwrap(), "--events", "10"])
        .deadline(Duration::from_secs(30))
        .output();
    assert!(!out.status.success());
    let t = out.text();
    assert!(
        t.contains("logger.compression") && t.contains("zstd") && t.contains("zlib"),
        "{t}"
    );
}
