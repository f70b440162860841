//! The Python trigger adapter with a real embedded interpreter: verdicts, ROB bytes, errors,
//! several DCM threads at once, and loading from a file.

use std::sync::atomic::Ordering;

use rodeo_dataflow::trigger::{EventInfo, TriggerAlgorithm, Verdict};
use rodeo_format::checksum::ChecksumType;
use rodeo_format::fragment::RobFragment;
use rodeo_format::synth::{EventSynth, SynthConfig};
use rodeo_pytrigger::{load_source, PyTriggerLoader};

/// Three ROB fragments of `l1id` as the synthetic generator makes them.
fn robs(l1id: u32) -> Vec<Vec<u32>> {
    let mut s = EventSynth::new(SynthConfig {
        robs: 3,
        checksum: ChecksumType::Adler32,
        ..SynthConfig::default()
    });
    (0..3)
        .map(|i| {
            let mut out = Vec::new();
            s.rob(i, l1id, 7, &mut out).unwrap();
            out
        })
        .collect()
}

fn decide(loader: &PyTriggerLoader, l1id: u32, rois: &[u32], words: &[Vec<u32>]) -> Verdict {
    let frags: Vec<RobFragment<'_>> = words
        .iter()
        .map(|w| RobFragment::parse(w).unwrap())
        .collect();
    let info = EventInfo {
        global_id: u64::from(l1id) + 1000,
        l1id,
        bcid: 7,
        trigger_type: 1,
        rois,
    };
    loader.make().decide(&info, &frags).verdict
}

const ALGO: &str = r#"
import struct

def decide(event):
    # Check what Python sees against what Rust sent: every ROB's bytes parse, its source id
    # (word 4 of a ROB header) is the dict key, and the L1ID agrees.
    for sid, b in event.robs.items():
        words = struct.unpack("<%dI" % (len(b) // 4), b)
        assert words[0] == 0xDD1234DD, hex(words[0])
        assert words[4] == sid
    if event.l1id % 4 == 0:
        return True
    if event.l1id % 4 == 1:
        return None
    if event.l1id % 4 == 2:
        return 3
    if len(event.robs) < 3:
        return [0x1234]
    return False
"#;

#[test]
fn verdicts_follow_the_return_values() {
    let loader = load_source("algo", ALGO, "decide").unwrap();
    let w = robs(8);
    assert_eq!(decide(&loader, 8, &[1], &w), Verdict::Accept { stream: 0 });
    assert_eq!(decide(&loader, 9, &[1], &w), Verdict::Reject);
    assert_eq!(decide(&loader, 10, &[1], &w), Verdict::Accept { stream: 3 });
    assert_eq!(
        decide(&loader, 11, &[1], &w[..1]),
        Verdict::NeedRobs(vec![0x1234])
    );
    assert_eq!(decide(&loader, 11, &[1], &w), Verdict::Reject);
    let s = loader.stats();
    assert_eq!(s.calls.load(Ordering::Relaxed), 5);
    assert_eq!(s.accepts.load(Ordering::Relaxed), 2);
    assert_eq!(s.rejects.load(Ordering::Relaxed), 2);
    assert_eq!(s.more_robs.load(Ordering::Relaxed), 1);
    assert_eq!(s.errors.load(Ordering::Relaxed), 0);
}

#[test]
fn exceptions_and_bad_answers_keep_the_event_and_are_counted() {
    let code = "def decide(event):\n    if event.l1id == 1:\n        raise RuntimeError('boom')\n    return 'yes'\n";
    let loader = load_source("bad", code, "decide").unwrap();
    let w = robs(1);
    assert_eq!(decide(&loader, 1, &[], &w), Verdict::Accept { stream: 0 });
    assert_eq!(decide(&loader, 2, &[], &w), Verdict::Accept { stream: 0 });
    assert_eq!(loader.stats().errors.load(Ordering::Relaxed), 2);
}

#[test]
fn several_dcm_threads_share_one_callable() {
    let code = "calls = 0\ndef decide(event):\n    global calls\n    calls += 1\n    return event.l1id % 2 == 0\n";
    let loader = load_source("shared", code, "decide").unwrap();
    std::thread::scope(|s| {
        for t in 0..3u32 {
            let loader = &loader;
            s.spawn(move || {
                let w = robs(t);
                for i in 0..200u32 {
                    let l1 = t * 1000 + i;
                    let v = decide(loader, l1, &[], &w);
                    let want = if l1 % 2 == 0 {
                        Verdict::Accept { stream: 0 }
                    } else {
                        Verdict::Reject
                    };
                    assert_eq!(v, want);
                }
            });
        }
    });
    assert_eq!(loader.stats().calls.load(Ordering::Relaxed), 600);
    assert_eq!(loader.stats().accepts.load(Ordering::Relaxed), 300);
}

#[test]
fn loads_from_a_file_and_reports_bad_specs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mytrig.py");
    std::fs::write(
        &path,
        "def decide(event):\n    return len(event.rois) > 1\n",
    )
    .unwrap();
    let spec = format!("{}:decide", path.display());
    let loader = PyTriggerLoader::load(&spec).unwrap();
    let w = robs(5);
    assert_eq!(
        decide(&loader, 5, &[1, 2], &w),
        Verdict::Accept { stream: 0 }
    );
    assert_eq!(decide(&loader, 5, &[1], &w), Verdict::Reject);

    let e = PyTriggerLoader::load("nocolon").unwrap_err().to_string();
    assert!(e.contains("FILE.py:FUNCTION"), "{e}");
    let e = PyTriggerLoader::load(&format!("{}:missing", path.display()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing"), "{e}");
    let e = PyTriggerLoader::load("/nonexistent/x.py:decide")
        .unwrap_err()
        .to_string();
    assert!(e.contains("x.py"), "{e}");
    let syntax = dir.path().join("broken.py");
    std::fs::write(&syntax, "def decide(:\n").unwrap();
    let e = PyTriggerLoader::load(&format!("{}:decide", syntax.display()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("SyntaxError"), "{e}");
}
