//! `verify::check_file`: a good file passes with every event and ROB counted; a flipped byte
//! inside an event is found, with the good events before it and the byte offset of the damage.

use std::path::Path;

use rodeo_files::rawfile::{RawFileConfig, RawFileWriter};
use rodeo_files::verify::check_file;
use rodeo_format::synth::{EventSynth, SynthConfig};

const EVENTS: u64 = 20;
const ROBS: usize = 8;

/// Writes `EVENTS` synthetic events of `ROBS` ROBs; returns the file and each event's record
/// offset.
fn write_file(dir: &Path) -> (std::path::PathBuf, Vec<u64>) {
    let mut cfg = RawFileConfig::new(dir, 77, "SFO-1", "physics");
    cfg.free_disk_margin_bytes = 0;
    cfg.fsync_on_close = false;
    let mut w = RawFileWriter::create(cfg).unwrap();
    let mut synth = EventSynth::new(SynthConfig {
        robs: ROBS,
        run_number: 77,
        stream: ("physics".into(), "physics".into()),
        ..SynthConfig::default()
    });
    let mut words = Vec::new();
    let mut offsets = Vec::new();
    for i in 0..EVENTS {
        synth.event(i, &mut words).unwrap();
        offsets.push(w.write_event(&words, 0).unwrap().offset);
    }
    let closed = w.finish().unwrap();
    (closed[0].path.clone(), offsets)
}

#[test]
fn a_good_file_passes_with_every_event_and_rob() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_file(dir.path());
    let v = check_file(&path);
    assert!(v.ok, "{v:?}");
    assert_eq!(v.good_events, EVENTS);
    assert_eq!(v.robs, EVENTS * ROBS as u64);
    assert!(v.event_bytes > 0);
    assert_eq!((v.error_offset, v.error), (None, None));
}

#[test]
fn a_flipped_byte_stops_the_check_at_the_damaged_event() {
    let dir = tempfile::tempdir().unwrap();
    let (path, offsets) = write_file(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    // A byte well inside event 12's payload (its record header is 16 bytes, then the event).
    let damaged = offsets[12] as usize + 16 + 400;
    bytes[damaged] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();
    let v = check_file(&path);
    assert!(!v.ok);
    assert_eq!(v.good_events, 12, "{v:?}");
    let at = v.error_offset.expect("the offset of the damage");
    assert!(
        at >= offsets[12] && at < offsets[13],
        "{at} not inside event 12: {v:?}"
    );
    assert!(v.error.is_some());
}

#[test]
fn a_missing_file_is_a_verdict_not_a_panic() {
    let v = check_file(Path::new("/nonexistent/rodeo/file.data"));
    assert!(!v.ok);
    assert_eq!(v.good_events, 0);
    assert!(v.error.is_some());
}

/// Writes the same synthetic events as EventStorage v5 (optionally zlib blocks).
fn write_es_file(
    dir: &Path,
    compression: rodeo_files::eventstorage::EsCompression,
) -> std::path::PathBuf {
    use rodeo_files::eventstorage::{EsWriter, EsWriterConfig};
    let mut cfg = EsWriterConfig::new(dir, "data_test", 77, "physics", "Main", "SFO-1");
    cfg.free_disk_margin_bytes = 0;
    cfg.fsync_on_close = false;
    cfg.compression = compression;
    let mut w = EsWriter::create(cfg).unwrap();
    let mut synth = EventSynth::new(SynthConfig {
        robs: ROBS,
        run_number: 77,
        ..SynthConfig::default()
    });
    let mut words = Vec::new();
    for i in 0..EVENTS {
        synth.event(i, &mut words).unwrap();
        w.write_event(&words).unwrap();
    }
    w.finish().unwrap()[0].path.clone()
}

#[test]
fn eventstorage_files_pass_and_a_damaged_one_stops_at_the_damage() {
    use rodeo_files::datafile::Container;
    use rodeo_files::eventstorage::EsCompression;
    let dir = tempfile::tempdir().unwrap();
    for (i, c) in [EsCompression::None, EsCompression::Zlib { level: 1 }]
        .into_iter()
        .enumerate()
    {
        let sub = dir.path().join(i.to_string());
        std::fs::create_dir(&sub).unwrap();
        let path = write_es_file(&sub, c);
        let v = check_file(&path);
        assert!(v.ok, "{v:?}");
        assert_eq!(v.container, Some(Container::EventStorage));
        assert_eq!(v.version, Some(5));
        assert_eq!((v.good_events, v.events_by_eformat[5]), (EVENTS, EVENTS));
        assert_eq!(v.robs, EVENTS * ROBS as u64);
    }
    // A flipped byte in the middle of an uncompressed file: the events before it are good and
    // the offset lies past them.
    let path = write_es_file(dir.path(), EsCompression::None);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();
    let v = check_file(&path);
    assert!(!v.ok);
    assert!(v.good_events > 0 && v.good_events < EVENTS, "{v:?}");
    let at = v.error_offset.expect("an offset");
    assert!(
        at <= mid as u64 + 4 && at > 0,
        "{at} vs damage at {mid}: {v:?}"
    );
    // Truncated: the complete events, the file length named.
    std::fs::write(&path, &bytes[..mid]).unwrap();
    let v = check_file(&path);
    assert!(!v.ok && v.good_events < EVENTS, "{v:?}");
}

/// The file's bytes with its version-2 start record replaced by a version-1 record (no
/// checksum) holding the same fields, except the run number `run`.
fn as_version_1(bytes: &[u8], run: u32) -> Vec<u8> {
    use rodeo_files::rawfile::FileStart;
    let size_words = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let word = |i: usize| u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
    let name = |at: usize| {
        let len = word(at) as usize;
        let s = String::from_utf8(bytes[(at + 1) * 4..(at + 1) * 4 + len].to_vec()).unwrap();
        (s, at + 1 + len.div_ceil(4))
    };
    let (app_name, next) = name(8);
    let (stream_name, _) = name(next);
    let start = FileStart {
        version: 1,
        sequence: word(3),
        creation_time_ns: u64::from(word(4)) | (u64::from(word(5)) << 32),
        run,
        lumiblock: word(7),
        app_name,
        stream_name,
    };
    let mut out = Vec::new();
    start.encode(&mut out);
    out.extend_from_slice(&bytes[size_words * 4..]);
    out
}

#[test]
fn a_flipped_byte_in_the_start_record_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_file(dir.path());
    let good = std::fs::read(&path).unwrap();
    assert!(check_file(&path).start_record_checked);
    // The run number (byte 24), the sequence (12), the lumiblock (28), a letter of the
    // application name (36).
    for at in [24usize, 12, 28, 36] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let v = check_file(&path);
        assert!(!v.ok, "byte {at} flipped: {v:?}");
        assert_eq!(v.error_offset, Some(0), "{v:?}");
        assert!(
            v.error.as_deref().unwrap().contains("start record"),
            "{v:?}"
        );
    }
}

#[test]
fn version_1_files_still_verify_marked_unchecked_and_are_cross_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_file(dir.path());
    let good = std::fs::read(&path).unwrap();
    std::fs::write(&path, as_version_1(&good, 77)).unwrap();
    let v = check_file(&path);
    assert!(v.ok, "{v:?}");
    assert_eq!((v.version, v.start_record_checked), (Some(1), false));
    assert_eq!(v.good_events, EVENTS);
    // An unchecked start record whose run number disagrees with every event's.
    std::fs::write(&path, as_version_1(&good, 78)).unwrap();
    let v = check_file(&path);
    assert!(!v.ok);
    let e = v.error.unwrap();
    assert!(e.contains("run number 77") && e.contains("run 78"), "{e}");
}

#[test]
fn an_event_record_longer_than_its_event_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = RawFileConfig::new(dir.path(), 77, "SFO-1", "physics");
    cfg.free_disk_margin_bytes = 0;
    cfg.fsync_on_close = false;
    let mut w = RawFileWriter::create(cfg).unwrap();
    let mut synth = EventSynth::new(SynthConfig {
        robs: 2,
        run_number: 77,
        ..SynthConfig::default()
    });
    let mut words = Vec::new();
    for i in 0..3 {
        synth.event(i, &mut words).unwrap();
        if i == 2 {
            // One word after the event inside its record (its checksum computed on the way).
            words.push(0);
        }
        w.write_event(&words, 0).unwrap();
    }
    let path = w.finish().unwrap().remove(0).path;
    let v = check_file(&path);
    assert!(!v.ok, "{v:?}");
    assert_eq!(v.good_events, 2);
    assert!(
        v.error
            .as_deref()
            .unwrap()
            .contains("1 words after the event"),
        "{v:?}"
    );
}

#[test]
fn a_start_record_of_another_run_than_the_events_fails_the_check() {
    // A checksummed (version 2) start record that is intact but names another run than its
    // events (a writer given the wrong run): the cross-check finds it.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = RawFileConfig::new(dir.path(), 78, "SFO-1", "physics");
    cfg.free_disk_margin_bytes = 0;
    cfg.fsync_on_close = false;
    let mut w = RawFileWriter::create(cfg).unwrap();
    let mut synth = EventSynth::new(SynthConfig {
        robs: 2,
        run_number: 77,
        ..SynthConfig::default()
    });
    let mut words = Vec::new();
    synth.event(0, &mut words).unwrap();
    w.write_event(&words, 0).unwrap();
    let path = w.finish().unwrap().remove(0).path;
    let v = check_file(&path);
    assert!(!v.ok && v.start_record_checked, "{v:?}");
    assert_eq!(v.good_events, 0);
    let e = v.error.unwrap();
    assert!(e.contains("run number 77") && e.contains("run 78"), "{e}");
}
