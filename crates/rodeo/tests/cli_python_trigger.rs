//! `rodeo run --trigger FILE.py:FUNC`: a Python callable decides every event of a real run.
//! With the `python` feature the run balances and the files hold exactly the events the
//! callable accepted; without it the option is refused with how to build it.

use rodeo_testkit::rodeo;

#[cfg(feature = "python")]
#[test]
fn a_python_callable_decides_every_event_of_the_run() {
    use rodeo_files::rawfile::RawFileReader;
    use rodeo_format::fragment::FullEvent;

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("mytrigger.py");
    // Accepts one L1ID in three, after checking the RoI data it was given.
    std::fs::write(
        &script,
        r#"
import struct

def decide(event):
    for sid, b in event.robs.items():
        words = struct.unpack("<%dI" % (len(b) // 4), b)
        assert words[0] == 0xDD1234DD and words[4] == sid
    assert event.robs, "no RoI data"
    return event.l1id % 3 == 0
"#,
    )
    .unwrap();
    let out = rodeo!()
        .args(["run", "--events", "3000", "--json", "--output"])
        .arg(dir.path().join("out"))
        .arg("--trigger")
        .arg(format!("{}:decide", script.display()))
        .output();
    assert!(out.status.success(), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["balanced"], true, "{v}");
    let t = &v["python_trigger"];
    assert_eq!(t["errors"], 0, "{v}");
    let decided = v["accepted"].as_u64().unwrap() + v["rejected"].as_u64().unwrap();
    assert_eq!(t["calls"].as_u64().unwrap(), decided, "{v}");
    assert_eq!(t["accepts"], v["accepted"], "{v}");
    assert!(v["rejected"].as_u64().unwrap() > v["accepted"].as_u64().unwrap());

    // Every event written was accepted by the callable (or forced by the supervisor).
    let mut written = 0u64;
    for f in v["files"].as_array().unwrap() {
        let mut r = RawFileReader::open(f.as_str().unwrap()).unwrap();
        while let Some(e) = r.next_event() {
            let e = e.unwrap();
            let ev = FullEvent::parse(e.words).unwrap();
            let forced = ev.status().0 != 0;
            assert!(
                ev.extended_l1id() % 3 == 0 || forced,
                "event {:#x} written",
                ev.extended_l1id()
            );
            written += 1;
        }
    }
    assert_eq!(written, v["events_written"].as_u64().unwrap());
    assert!(written > 0);
}

#[cfg(not(feature = "python"))]
#[test]
fn without_the_python_feature_the_trigger_option_says_how_to_build() {
    let dir = tempfile::tempdir().unwrap();
    let out = rodeo!()
        .args([
            "run",
            "--events",
            "10",
            "--trigger",
            "t.py:decide",
            "--output",
        ])
        .arg(dir.path())
        .output();
    assert!(!out.status.success());
    let err = &out.stderr;
    assert!(err.contains("--features python"), "{err}");
}
