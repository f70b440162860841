//! Output disks (docs/run-control.md, "Disks"): a run whose output fills a small tmpfs stops in
//! order within seconds (non-zero exit, an error saying the disk is full, the JSON balance
//! sheet, complete files that verify), in process mode and in one process, whether the
//! logger's margin check or the kernel's `ENOSPC` finds it; a run given two directories, the
//! first one small, moves on to the second and balances.
//!
//! The tmpfs are mounted by the test (root, or a user allowed to mount); where mounting is not
//! allowed each test says so on stderr and passes without running.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rodeo_dataflow::disks::free_space;
use rodeo_files::rawfile::RawFileReader;
use rodeo_format::compress::decompress_event;
use rodeo_format::fragment::FullEvent;
use rodeo_testkit::cli::{Output, Running};
use rodeo_testkit::{files_under, rodeo, wait_for};
use serde_json::Value;

/// A tmpfs of a given size mounted on a fresh directory, unmounted when dropped.
struct Tmpfs {
    _parent: tempfile::TempDir,
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `mib` MiB; `None` (with a note on stderr) where mounting is not allowed.
    fn mount(mib: u64, test: &str) -> Option<Tmpfs> {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("disk");
        std::fs::create_dir(&dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs {
                _parent: parent,
                dir,
            }),
            Ok(o) => {
                eprintln!(
                    "{test}: skipped: cannot mount a {mib} MiB tmpfs here ({}): run as root \
                     to test full disks",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("{test}: skipped: cannot run mount ({e})");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// Starts `rodeo run ARGS --json -q`.
fn start(args: &[&str]) -> Running {
    rodeo!()
        .arg("run")
        .args(args)
        .args(["--json", "-q"])
        .spawn()
}

/// The JSON balance sheet on stdout.
fn sheet(out: &Output) -> Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON balance sheet ({e}); stdout:\n{}\nstderr:\n{}",
            out.stdout, out.stderr
        )
    })
}

/// `rodeo verify` passes on every file of the sheet; returns the global ids read back (each
/// once).
fn verify_files(sheet: &Value) -> HashSet<u64> {
    // The finished files; one a logger gave up (`.writing`, no end record) is named by a
    // `files` problem of its own, checked by the callers.
    let files: Vec<&str> = sheet["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f.as_str().unwrap())
        .filter(|f| !f.ends_with(".writing"))
        .collect();
    if !files.is_empty() {
        let v = rodeo!().arg("verify").args(&files).output();
        assert!(
            v.status.success(),
            "rodeo verify failed: {}{}",
            v.stdout,
            v.stderr
        );
    }
    let mut ids = HashSet::new();
    let mut plain = Vec::new();
    for f in files {
        let mut reader = RawFileReader::open(f).unwrap();
        while let Some(event) = reader.next_event() {
            let event = event.unwrap();
            decompress_event(event.words, &mut plain).unwrap();
            let e = FullEvent::parse(&plain).unwrap();
            assert!(ids.insert(e.global_id()), "event {} twice", e.global_id());
        }
    }
    ids
}

/// The run stopped because its disk filled: non-zero exit within `limit` of the free space
/// reaching `full_below` bytes, the error and the sheet say "disk full", complete files
/// verify and hold exactly the events counted written.
fn assert_stops_on_full_disk(disk: &Path, child: Running, full_below: u64, limit: Duration) {
    let mut child = child;
    // The disk fills (bounded: the run would go on for a minute).
    let filled = wait_for("the disk to fill", Duration::from_secs(120), || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("rodeo run ended ({status}) before its disk filled");
        }
        let fs = free_space(disk).ok()?;
        (fs.available <= full_below).then(Instant::now)
    });
    let out = child.wait_with_deadline(limit);
    let late = filled.elapsed();
    let stderr = &out.stderr;
    assert!(
        !out.status.success(),
        "a run that could not write its events must fail; stderr:\n{stderr}"
    );
    assert!(
        stderr.contains("disk full") || stderr.contains("No space left on device"),
        "the error says the disk is full:\n{stderr}"
    );
    let s = sheet(&out);
    assert_eq!(s["balanced"], false, "{s}");
    let reason = s["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("disk full"), "reason: {reason}");
    assert!(
        s["seconds"].as_f64().unwrap() < 60.0,
        "the run stopped early: {s}"
    );
    let ids = verify_files(&s);
    assert_eq!(
        ids.len() as u64,
        s["events_verified"].as_u64().unwrap(),
        "complete files hold the events verified"
    );
    // Every unfinished file on disk is in the sheet, with a problem that names it.
    let listed: Vec<&str> = s["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    for f in files_under(disk) {
        let name = f.to_string_lossy().into_owned();
        if name.ends_with(".data.writing") {
            assert!(
                listed.contains(&name.as_str()),
                "{name} not in the sheet: {s}"
            );
            assert!(
                s["problems"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["kind"] == "files"
                        && p["where"].as_str().is_some_and(|w| w.contains(&name))),
                "no problem names {name}: {s}"
            );
        }
    }
    eprintln!(
        "run exited {late:?} after its disk filled: {} events written, {} in complete files",
        s["events_written"], s["events_verified"]
    );
}

#[test]
fn a_full_150_mib_tmpfs_stops_a_process_run_in_order() {
    let Some(t) = Tmpfs::mount(150, "a_full_150_mib_tmpfs_stops_a_process_run_in_order") else {
        return;
    };
    let out = t.dir.join("out");
    let child = start(&[
        "--processes",
        "--seconds",
        "60",
        "-o",
        out.to_str().unwrap(),
    ]);
    // The default margin is 64 MiB: the logger stops writing there, before the kernel refuses.
    assert_stops_on_full_disk(&t.dir, child, 72 << 20, Duration::from_secs(30));
}

#[test]
fn enospc_from_the_kernel_stops_a_single_process_run() {
    let Some(t) = Tmpfs::mount(40, "enospc_from_the_kernel_stops_a_single_process_run") else {
        return;
    };
    let out = t.dir.join("out");
    // No margin: the kernel's ENOSPC is what stops the writes.
    let cfg = t.dir.join("../partition.toml");
    std::fs::write(&cfg, "[logger]\nmin_free_bytes = 0\n").unwrap();
    let child = start(&[
        "-c",
        cfg.to_str().unwrap(),
        "--seconds",
        "60",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_stops_on_full_disk(&t.dir, child, 1 << 20, Duration::from_secs(30));
}

#[test]
fn a_small_first_directory_moves_the_run_to_the_second_and_it_balances() {
    let Some(small) = Tmpfs::mount(
        32,
        "a_small_first_directory_moves_the_run_to_the_second_and_it_balances",
    ) else {
        return;
    };
    let big = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let cfg = out.path().join("partition.toml");
    std::fs::write(
        &cfg,
        format!(
            "[logger]\ndirectories = [{:?}, {:?}]\nmin_free_bytes = {}\n",
            small.dir.display().to_string(),
            big.path().display().to_string(),
            12 << 20
        ),
    )
    .unwrap();
    let child = start(&[
        "-c",
        cfg.to_str().unwrap(),
        "--events",
        "50000",
        "-o",
        out.path().to_str().unwrap(),
    ]);
    let o = child.wait_with_deadline(Duration::from_secs(120));
    let s = sheet(&o);
    assert!(o.status.success(), "stderr:\n{}\n{s}", o.stderr);
    assert_eq!(s["balanced"], true, "{s}");
    let files: Vec<&str> = s["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    let in_small = files
        .iter()
        .filter(|f| f.starts_with(small.dir.to_str().unwrap()));
    let in_big = files
        .iter()
        .filter(|f| f.starts_with(big.path().to_str().unwrap()));
    assert!(
        in_small.count() >= 1,
        "files in the small directory: {files:?}"
    );
    assert!(
        in_big.count() >= 1,
        "files in the second directory: {files:?}"
    );
    let ids = verify_files(&s);
    assert_eq!(ids.len() as u64, s["events_written"].as_u64().unwrap());
    assert_eq!(
        s["events_written"].as_u64().unwrap(),
        s["accepted"].as_u64().unwrap() + s["forced_accepts"].as_u64().unwrap()
    );
}
