//! Memory flat over time: the resident size (VmRSS) of every application of a
//! `rodeo run --processes` is sampled early and late in the run, and may not grow by more than
//! half of what a leak of 36 bytes per event written (the size of the logger's former
//! `HashSet` of every global id) would add between the two samples, with a floor for the
//! allocator's noise. The run is short (CI stays fast); the figure of the issue (logger RSS
//! between 15 s and 55 s of a 60 s run) was measured by hand: docs/architecture.md, "Memory
//! over a run".

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rodeo_testkit::{holds_within, rodeo, wait_for};

/// The `rodeo app` processes whose parent is `parent`: name -> pid.
fn apps_of(parent: u32) -> BTreeMap<String, u32> {
    let mut apps = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the command name may hold spaces, the ')' ends it.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        if args.get(1) != Some(&&b"app"[..]) {
            continue;
        }
        if let Some(i) = args.iter().position(|a| *a == b"--name") {
            if let Some(name) = args.get(i + 1) {
                apps.insert(String::from_utf8_lossy(name).into_owned(), pid);
            }
        }
    }
    apps
}

/// VmRSS of `pid` in bytes (`None`: gone).
fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn application_memory_stays_flat_over_a_run() {
    const SECONDS: f64 = 22.0;
    let out = tempfile::tempdir().unwrap();
    // Every event accepted and small: many events written (a per-event leak shows) at a
    // modest disk rate.
    let cfg = out.path().join("endurance.toml");
    std::fs::write(
        &cfg,
        "[ros]\nchannels = 2\nfragment_words = 16\n[dcm]\naccept_fraction = 1.0\n",
    )
    .unwrap();
    let mut child = rodeo!()
        .args(["run", "--processes", "--seconds", &SECONDS.to_string()])
        .arg("-c")
        .arg(&cfg)
        .arg("-o")
        .arg(out.path())
        .args(["--json", "-q"])
        .spawn();
    let parent = child.id();
    // Every application up (the default partition has five).
    let apps = wait_for("the applications to start", Duration::from_secs(30), || {
        let a = apps_of(parent);
        (a.len() >= 5).then_some(a)
    });
    let t0 = Instant::now();
    let sample = |apps: &BTreeMap<String, u32>| -> BTreeMap<String, u64> {
        apps.iter()
            .filter_map(|(n, &p)| Some((n.clone(), rss(p)?)))
            .collect()
    };
    // Early: past the warm-up (pools touched, first files open); late: near the end.
    let early_at = Duration::from_secs(6);
    let late_at = Duration::from_secs_f64(SECONDS - 4.0);
    assert!(!holds_within(early_at, || matches!(
        child.try_wait(),
        Ok(Some(_))
    )));
    let early = sample(&apps);
    assert!(!holds_within(late_at - early_at, || matches!(
        child.try_wait(),
        Ok(Some(_))
    )));
    let late = sample(&apps);
    let span = t0.elapsed().as_secs_f64() - early_at.as_secs_f64();
    let output = child.wait_or_stop(Duration::from_secs(60));
    let done = !output.stopped_at_deadline;
    assert!(done, "the run did not end");
    assert!(output.status.success(), "{}", output.stderr);
    let sheet: serde_json::Value = serde_json::from_str(&output.stdout).unwrap();
    let written = sheet["events_written"].as_u64().unwrap() as f64;
    let run_s = sheet["seconds"].as_f64().unwrap();
    // Events written between the two samples, at the run's mean rate.
    let between = written / run_s * (late_at - early_at).as_secs_f64().min(span);
    let leak = 36.0 * between;
    let bound = (leak / 2.0).max(2.0 * 1024.0 * 1024.0) as u64;
    assert!(
        leak > bound as f64,
        "the run wrote too few events ({written} in {run_s:.1} s) for a 36 B/event leak to \
         show above {bound} bytes: the test cannot tell"
    );
    let mut report = Vec::new();
    for (name, &e) in &early {
        let Some(&l) = late.get(name) else { continue };
        let growth = l.saturating_sub(e);
        report.push(format!("{name}: {e} -> {l} (+{growth})"));
        assert!(
            growth <= bound,
            "{name} grew {growth} bytes in {span:.1} s ({e} -> {l}); a 36 B/event leak would \
             add {leak:.0} over the {between:.0} events written; bound {bound}"
        );
    }
    eprintln!(
        "RSS over {span:.1} s, {between:.0} events (bound {bound} bytes):\n  {}",
        report.join("\n  ")
    );
}
