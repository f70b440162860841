//! Raw-data files: round trip, rotation, naming, refusal on a full disk.

use std::path::Path;

use rodeo_files::rawfile::{
    file_name, verify_file, RawFileConfig, RawFileError, RawFileReader, RawFileWriter,
};
use rodeo_format::checksum::{adler32, words_as_bytes, ADLER32_INIT};

fn fragment(i: u32) -> Vec<u32> {
    (0..(i * 37) % 300).map(|j| i * 100_000 + j).collect()
}

fn config(dir: &Path) -> RawFileConfig {
    let mut c = RawFileConfig::new(dir, 1234, "SFO-1", "physics");
    c.free_disk_margin_bytes = 0;
    c.fsync_on_close = false;
    c
}

#[test]
fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.fsync_on_close = true;
    cfg.lumiblock = 7;
    let mut w = RawFileWriter::create(cfg).unwrap();
    let mut locations = Vec::new();
    for i in 0..50 {
        locations.push(w.write_event(&fragment(i), i % 2).unwrap());
    }
    let stats = w.stats();
    let closed = w.finish().unwrap();
    assert_eq!(closed.len(), 1);
    let f = &closed[0];
    assert_eq!(f.path, dir.path().join("00001234.physics.SFO-1.0001.data"));
    assert_eq!(f.events, 50);
    assert_eq!(stats.events, 50);
    assert_eq!(std::fs::metadata(&f.path).unwrap().len(), f.file_bytes);

    let mut r = RawFileReader::open(&f.path).unwrap();
    let start = r.start().clone();
    assert_eq!((start.run, start.lumiblock, start.sequence), (1234, 7, 1));
    assert_eq!(
        (start.app_name.as_str(), start.stream_name.as_str()),
        ("SFO-1", "physics")
    );
    assert!(start.creation_time_ns > 0);
    let mut n = 0;
    while let Some(e) = r.next_event() {
        let e = e.unwrap();
        let i = e.index as u32;
        assert_eq!(e.words, &fragment(i)[..]);
        assert_eq!(e.flags, i % 2);
        assert_eq!(e.offset, locations[i as usize].offset);
        assert_eq!(locations[i as usize].index, u64::from(i));
        n += 1;
    }
    assert_eq!(n, 50);
    let summary = verify_file(&f.path).unwrap();
    assert_eq!(summary.events, 50);
    assert_eq!(summary.adler, f.adler);
    assert_eq!(summary.event_bytes, f.event_bytes);
    // The end record's checksum is the plain Adler-32 of the event records' bytes.
    let bytes = std::fs::read(&f.path).unwrap();
    let first = locations[0].offset as usize;
    let records = &bytes[first..bytes.len() - 36];
    assert_eq!(records.len() as u64, f.event_bytes);
    assert_eq!(adler32(ADLER32_INIT, records), f.adler);
    let tail: Vec<u32> = bytes[bytes.len() - 36..]
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(
        tail,
        vec![
            0x1234_DDDD,
            9,
            50,
            0,
            f.event_bytes as u32,
            0,
            f.adler,
            0,
            0xDDDD_1234
        ]
    );
    let owned: Vec<_> = RawFileReader::open(&f.path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(owned.len(), 50);
    assert_eq!(owned[3].words, fragment(3));
}

#[test]
fn pieces_give_the_same_record_as_the_joined_fragment() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RawFileWriter::create(config(dir.path())).unwrap();
    let (a, b, c) = (fragment(5), fragment(0), fragment(9));
    let joined: Vec<u32> = [&a[..], &b[..], &c[..]].concat();
    w.write_event_pieces(&[&a, &b, &c], 0).unwrap();
    w.write_event(&joined, 0).unwrap();
    let closed = w.finish().unwrap();
    let events: Vec<_> = RawFileReader::open(&closed[0].path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].words, joined);
    assert_eq!(events[0].words, events[1].words);
    assert_eq!(
        events[0].checksum,
        adler32(ADLER32_INIT, words_as_bytes(&joined))
    );
}

#[test]
fn a_summed_record_carries_the_given_checksum_and_a_wrong_one_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RawFileWriter::create(config(dir.path())).unwrap();
    let (good, bad) = (fragment(7), fragment(8));
    let sum = adler32(ADLER32_INIT, words_as_bytes(&good));
    w.write_event_summed(&good, 0, sum).unwrap();
    // A fragment damaged after its writer summed it: the record keeps the writer's checksum.
    let damaged_sum = adler32(ADLER32_INIT, words_as_bytes(&bad)) ^ 1;
    w.write_event_summed(&bad, 0, damaged_sum).unwrap();
    let closed = w.finish().unwrap();
    let mut r = RawFileReader::open(&closed[0].path).unwrap();
    let first = r.next_event().unwrap().unwrap();
    assert_eq!((first.words, first.checksum), (&good[..], sum));
    match r.next_event() {
        Some(Err(RawFileError::Checksum { index, .. })) => assert_eq!(index, 1),
        other => panic!("expected a checksum error on the second event, got {other:?}"),
    }
    assert!(verify_file(&closed[0].path).is_err());
}

#[test]
fn rotation_by_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_events_per_file = 10;
    let mut w = RawFileWriter::create(cfg).unwrap();
    for i in 0..35 {
        let loc = w.write_event(&fragment(i), 0).unwrap();
        assert_eq!(loc.sequence, 1 + i / 10);
    }
    assert_eq!(w.stats().rotations_by_count, 3);
    let closed = w.finish().unwrap();
    let counts: Vec<u64> = closed.iter().map(|f| f.events).collect();
    assert_eq!(counts, vec![10, 10, 10, 5]);
    for (k, f) in closed.iter().enumerate() {
        let s = verify_file(&f.path).unwrap();
        assert_eq!(s.start.sequence, k as u32 + 1);
        assert_eq!(s.events, f.events);
        let name = file_name(1234, "physics", "SFO-1", k as u32 + 1);
        assert_eq!(f.path.file_name().unwrap().to_str().unwrap(), name);
    }
}

#[test]
fn rotation_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_file_bytes = 4096;
    let mut w = RawFileWriter::create(cfg).unwrap();
    let frag: Vec<u32> = (0..100).collect();
    for _ in 0..30 {
        w.write_event(&frag, 0).unwrap();
    }
    // One event bigger than the limit still gets written, alone.
    let big: Vec<u32> = (0..2000).collect();
    w.write_event(&big, 0).unwrap();
    w.write_event(&frag, 0).unwrap();
    let stats = w.stats();
    let closed = w.finish().unwrap();
    // 9 records of 416 bytes fit in 4096 with the start and end records: 9, 9, 9, 3, big, 1.
    assert_eq!(stats.rotations_by_size, 5, "{stats:?}");
    let mut total = 0;
    for f in &closed {
        let len = std::fs::metadata(&f.path).unwrap().len();
        assert!(
            len <= 4096 || f.events == 1,
            "{} bytes, {} events",
            len,
            f.events
        );
        total += verify_file(&f.path).unwrap().events;
    }
    assert_eq!(total, 32);
    assert_eq!(closed[closed.len() - 2].events, 1);
    assert_eq!(stats.files_opened, closed.len() as u64);
}

#[test]
fn writing_suffix_then_rename() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RawFileWriter::create(config(dir.path())).unwrap();
    let writing = w.current_path().unwrap().to_path_buf();
    let final_path = dir.path().join("00001234.physics.SFO-1.0001.data");
    assert_eq!(
        writing.file_name().unwrap().to_str().unwrap(),
        "00001234.physics.SFO-1.0001.data.writing"
    );
    assert!(writing.exists());
    assert!(!final_path.exists());
    w.write_event(&[1, 2, 3], 0).unwrap();
    w.finish().unwrap();
    assert!(!writing.exists());
    assert!(final_path.exists());

    // A second writer for the same run and stream refuses to overwrite.
    match RawFileWriter::create(config(dir.path())) {
        Err(RawFileError::AlreadyExists { path }) => assert_eq!(path, final_path),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn dropped_writer_leaves_a_recoverable_writing_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RawFileWriter::create(config(dir.path())).unwrap();
    for i in 0..5 {
        w.write_event(&fragment(i), 0).unwrap();
    }
    let writing = w.current_path().unwrap().to_path_buf();
    drop(w);
    let mut r = RawFileReader::open(&writing).unwrap();
    let mut n = 0;
    let err = loop {
        match r.next_event() {
            Some(Ok(_)) => n += 1,
            Some(Err(e)) => break e,
            None => panic!("no error at the end of an unclosed file"),
        }
    };
    assert_eq!(n, 5);
    assert!(matches!(err, RawFileError::NoEndRecord { events: 5, .. }));
    assert!(err.to_string().contains("not closed cleanly"));
    assert!(r.next_event().is_none());
}

#[test]
fn refuses_to_start_below_the_free_space_margin() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.free_disk_margin_bytes = u64::MAX;
    match RawFileWriter::create(cfg) {
        Err(e @ RawFileError::DiskSpace { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(dir.path().to_str().unwrap()), "{msg}");
            assert!(msg.contains(&u64::MAX.to_string()), "{msg}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn rejects_bad_names_and_rotates_on_lumiblock() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.stream_name = "a.b".into();
    assert!(matches!(
        RawFileWriter::create(cfg),
        Err(RawFileError::Config { .. })
    ));

    let mut w = RawFileWriter::create(config(dir.path())).unwrap();
    w.rotate(3).unwrap(); // nothing written yet: the empty file is replaced
    w.write_event(&[1], 0).unwrap();
    w.rotate(4).unwrap();
    w.write_event(&[2], 0).unwrap();
    let closed = w.finish().unwrap();
    let lbs: Vec<(u32, u32)> = closed
        .iter()
        .map(|f| {
            let s = verify_file(&f.path).unwrap().start;
            (s.sequence, s.lumiblock)
        })
        .collect();
    assert_eq!(lbs, vec![(1, 3), (2, 4)]);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn a_closed_file_is_cross_checked_on_disk_without_reading_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RawFileWriter::create(config(dir.path())).unwrap();
    for i in 0..10u32 {
        w.write_event(&vec![i; 1000 + i as usize], 0).unwrap();
    }
    let closed = w.finish().unwrap();
    assert_eq!(closed.len(), 1);
    closed[0].check_on_disk().unwrap();

    // A flipped byte of the end record's Adler-32 is found.
    let c = &closed[0];
    let mut bytes = std::fs::read(&c.path).unwrap();
    let at = bytes.len() - 12;
    bytes[at] ^= 1;
    std::fs::write(&c.path, &bytes).unwrap();
    let e = c.check_on_disk().unwrap_err();
    assert!(e.to_string().contains("adler32"), "{e}");

    // A file cut short is found by its size.
    bytes.truncate(bytes.len() - 4);
    std::fs::write(&c.path, &bytes).unwrap();
    let e = c.check_on_disk().unwrap_err();
    assert!(e.to_string().contains("file size"), "{e}");
}

#[test]
fn group_commit_tickets_go_on_across_files_and_each_covers_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.fsync_on_close = true;
    cfg.max_events_per_file = 7;
    // A small buffer: commits, full buffers and rotations interleave.
    cfg.buffer_bytes = 8192;
    let mut w = RawFileWriter::create(cfg).unwrap();
    assert_eq!(w.synced().unwrap(), 0);
    let mut tickets = Vec::new();
    let mut closed_seen = 0;
    for i in 0..40 {
        let asked_before = tickets.last().map(|&(t, _)| t);
        w.write_event(&fragment(i), 0).unwrap();
        // A ticket asked in a file closed since is done: the close synced it.
        if w.stats().files_closed > closed_seen {
            closed_seen = w.stats().files_closed;
            if let Some(t) = asked_before {
                assert!(w.synced().unwrap() >= t, "ticket {t} of a closed file");
            }
        }
        if i % 3 == 2 {
            let t = w.start_sync().unwrap();
            assert!(tickets.last().is_none_or(|&(l, _)| t > l), "tickets grow");
            tickets.push((t, i + 1));
        }
    }
    let (last, events) = *tickets.last().unwrap();
    w.wait_synced(last).unwrap();
    assert!(w.synced().unwrap() >= last);
    // Every event given before the last ticket is in the files: read them back.
    let open = w.current_path().unwrap().to_path_buf();
    let closed: Vec<_> = w.closed_files().iter().map(|c| c.path.clone()).collect();
    let mut read = 0u32;
    for path in closed.iter().chain([&open]) {
        for e in RawFileReader::open(path).unwrap().take_while(Result::is_ok) {
            assert_eq!(e.unwrap().words, fragment(read));
            read += 1;
        }
    }
    assert!(
        read >= events,
        "{read} events on disk, {events} before the last ticket"
    );
    w.finish().unwrap();
}

/// Each closed file's whole-file Adler-32, computed as the bytes went into the buffer, is the
/// Adler-32 of the file as it lies on disk (what `rodeo run`'s file records hold), with direct
/// I/O and without, for files of several events, of one event and of none.
#[test]
fn the_whole_file_checksum_is_that_of_the_bytes_on_disk() {
    for direct in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path());
        cfg.max_events_per_file = 7;
        cfg.direct_io = direct;
        let mut w = RawFileWriter::create(cfg.clone()).unwrap();
        for i in 0..15 {
            w.write_event(&fragment(i), i % 3).unwrap();
        }
        let mut closed = w.finish().unwrap();
        cfg.run += 1;
        closed.extend(RawFileWriter::create(cfg).unwrap().finish().unwrap());
        let events: Vec<u64> = closed.iter().map(|f| f.events).collect();
        assert_eq!(events, vec![7, 7, 1, 0], "direct I/O {direct}");
        for f in &closed {
            let bytes = std::fs::read(&f.path).unwrap();
            assert_eq!(bytes.len() as u64, f.file_bytes);
            assert_eq!(
                f.file_adler,
                adler32(ADLER32_INIT, &bytes),
                "{} (direct I/O {direct})",
                f.path.display()
            );
        }
    }
}
