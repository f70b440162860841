//! Raw-data files: recovery from truncation and corruption; garbage never panics.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use rodeo_files::rawfile::{
    verify_file, EventLocation, RawFileConfig, RawFileError, RawFileReader, RawFileWriter,
    RecordKind, FORMAT_VERSION,
};
use rodeo_format::checksum::{adler32, words_as_bytes, ADLER32_INIT};

fn fragment(i: u32) -> Vec<u32> {
    (0..20 + (i * 53) % 400).map(|j| i ^ (j << 8)).collect()
}

/// Writes `n` events; returns the file, its bytes and each event's location and record size.
fn write_file(dir: &Path, n: u32) -> (PathBuf, Vec<u8>, Vec<(EventLocation, u64)>) {
    let mut cfg = RawFileConfig::new(dir, 7, "test", "debug");
    cfg.free_disk_margin_bytes = 0;
    cfg.fsync_on_close = false;
    let mut w = RawFileWriter::create(cfg).unwrap();
    let mut locs = Vec::new();
    for i in 0..n {
        let f = fragment(i);
        locs.push((w.write_event(&f, 0).unwrap(), 16 + 4 * f.len() as u64));
    }
    let path = w.finish().unwrap().remove(0).path;
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes, locs)
}

/// Reads `path`: the valid events' indices and the error that ended reading, if any.
fn read_all(path: &Path) -> (Vec<u64>, Option<RawFileError>) {
    let mut r = match RawFileReader::open(path) {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut ok = Vec::new();
    while let Some(e) = r.next_event() {
        match e {
            Ok(e) => {
                assert_eq!(e.words, &fragment(e.index as u32)[..]);
                ok.push(e.index);
            }
            Err(e) => return (ok, Some(e)),
        }
    }
    (ok, None)
}

#[test]
fn truncated_file_recovers_every_complete_event() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bytes, locs) = write_file(dir.path(), 30);
    let cut = bytes.len() * 2 / 3;
    let copy = dir.path().join("cut.data");
    std::fs::write(&copy, &bytes[..cut]).unwrap();
    let complete = locs
        .iter()
        .filter(|(l, size)| l.offset + size <= cut as u64)
        .count();
    let (ok, err) = read_all(&copy);
    assert_eq!(ok, (0..complete as u64).collect::<Vec<_>>());
    let (next, size) = locs[complete];
    match err {
        Some(
            ref e @ RawFileError::Truncated {
                record,
                offset,
                needed,
                file_len,
                events,
            },
        ) => {
            assert_eq!(record, RecordKind::Event(complete as u64));
            assert_eq!(offset, next.offset);
            assert_eq!(needed, size);
            assert_eq!(file_len, cut as u64);
            assert_eq!(events, complete as u64);
            assert_eq!(e.offset(), Some(next.offset));
            let msg = e.to_string();
            assert!(
                msg.contains(&format!(
                    "file ends at byte {cut} inside event record {complete} at byte {}",
                    next.offset
                )),
                "{msg}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    // A cut exactly between records: no end record.
    std::fs::write(&copy, &bytes[..next.offset as usize]).unwrap();
    let (ok, err) = read_all(&copy);
    assert_eq!(ok.len(), complete);
    assert!(matches!(err, Some(RawFileError::NoEndRecord { .. })));
    // A cut inside the end record.
    std::fs::write(&copy, &bytes[..bytes.len() - 5]).unwrap();
    let (ok, err) = read_all(&copy);
    assert_eq!(ok.len(), 30);
    assert!(matches!(
        err,
        Some(RawFileError::Truncated {
            record: RecordKind::End,
            ..
        })
    ));
}

#[test]
fn flipped_payload_bit_is_a_checksum_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes, locs) = write_file(dir.path(), 20);
    let (loc, _) = locs[7];
    let at = loc.offset as usize + 16 + 4 * 5 + 1;
    bytes[at] ^= 0x10;
    let copy = dir.path().join("flip.data");
    std::fs::write(&copy, &bytes).unwrap();
    let (ok, err) = read_all(&copy);
    assert_eq!(ok, (0..7).collect::<Vec<_>>());
    let original = adler32(ADLER32_INIT, words_as_bytes(&fragment(7)));
    match err {
        Some(
            ref e @ RawFileError::Checksum {
                index,
                offset,
                expected,
                found,
            },
        ) => {
            assert_eq!((index, offset), (7, loc.offset));
            assert_eq!(expected, original);
            assert_ne!(found, expected);
            let msg = e.to_string();
            assert!(msg.contains("event record 7"), "{msg}");
            assert!(msg.contains(&format!("{expected:#010x}")), "{msg}");
            assert!(msg.contains(&format!("{found:#010x}")), "{msg}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(verify_file(&copy).is_err());
}

#[test]
fn corrupted_marker_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes, locs) = write_file(dir.path(), 10);
    let (loc, _) = locs[5];
    let at = loc.offset as usize;
    bytes[at..at + 4].copy_from_slice(&0xdead_beef_u32.to_le_bytes());
    let copy = dir.path().join("marker.data");
    std::fs::write(&copy, &bytes).unwrap();
    let (ok, err) = read_all(&copy);
    assert_eq!(ok.len(), 5);
    let e = err.unwrap();
    assert!(matches!(
        e,
        RawFileError::BadMarker {
            index: 5,
            found: 0xdead_beef,
            ..
        }
    ));
    assert_eq!(e.events_recovered(), Some(5));
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "event record 5 at byte {}: marker 0x1234cccc",
            loc.offset
        )),
        "{msg}"
    );
    assert!(msg.contains("found 0xdeadbeef"), "{msg}");
}

#[test]
fn damaged_end_record_and_trailing_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes, _) = write_file(dir.path(), 4);
    assert_eq!(verify_file(&path).unwrap().events, 4);
    let end = bytes.len() - 36;
    let copy = dir.path().join("end.data");

    let mut bad = bytes.clone();
    bad[end + 8] = 9; // event count
    std::fs::write(&copy, &bad).unwrap();
    let (ok, err) = read_all(&copy);
    assert_eq!(ok.len(), 4);
    assert!(matches!(
        err,
        Some(RawFileError::BadEndRecord {
            field: "number of event records",
            expected: 4,
            found: 9,
            ..
        })
    ));

    let mut bad = bytes.clone();
    bad[end + 24] ^= 1; // running Adler-32
    std::fs::write(&copy, &bad).unwrap();
    assert!(matches!(
        verify_file(&copy),
        Err(RawFileError::BadEndRecord {
            field: "Adler-32 of event records",
            ..
        })
    ));

    let mut bad = bytes.clone();
    bad.extend_from_slice(&[0; 8]);
    std::fs::write(&copy, &bad).unwrap();
    assert!(matches!(
        verify_file(&copy),
        Err(RawFileError::TrailingBytes { bytes: 8, .. })
    ));

    let mut bad = bytes.clone();
    bad[0] ^= 1;
    std::fs::write(&copy, &bad).unwrap();
    assert!(matches!(
        RawFileReader::open(&copy),
        Err(RawFileError::BadStart {
            field: "marker",
            ..
        })
    ));
}

#[test]
fn huge_declared_size_does_not_allocate() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes, locs) = write_file(dir.path(), 3);
    let at = locs[1].0.offset as usize + 4;
    bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let copy = dir.path().join("huge.data");
    std::fs::write(&copy, &bytes).unwrap();
    let (ok, err) = read_all(&copy);
    assert_eq!(ok.len(), 1);
    // Past the largest event a record may hold: refused before the file's length is
    // looked at (a sparse file is as long as it likes).
    assert!(matches!(
        err,
        Some(RawFileError::RecordTooLarge {
            size_words: u32::MAX,
            index: 1,
            ..
        })
    ));
}

/// The start record's size in bytes (its size word).
fn start_len(bytes: &[u8]) -> usize {
    u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize * 4
}

#[test]
fn the_writer_writes_a_checksummed_version_2_start_record() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes, _) = write_file(dir.path(), 2);
    let r = RawFileReader::open(&path).unwrap();
    assert_eq!(r.start().version, FORMAT_VERSION);
    assert_eq!(FORMAT_VERSION, 2);
    assert!(r.start().checksummed());
    // The last word of the record is the Adler-32 of every byte before it.
    let n = start_len(&bytes);
    let stored = u32::from_le_bytes(bytes[n - 4..n].try_into().unwrap());
    assert_eq!(stored, adler32(ADLER32_INIT, &bytes[..n - 4]));
    // Encoding the fields read gives the same bytes.
    let mut again = Vec::new();
    r.start().encode(&mut again);
    assert_eq!(again, bytes[..n]);
}

#[test]
fn a_damaged_start_record_is_refused_and_can_be_salvaged() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut bytes, _) = write_file(dir.path(), 4);
    bytes[24] ^= 0x01; // the run number's low byte
    let copy = dir.path().join("start.data");
    std::fs::write(&copy, &bytes).unwrap();
    let e = RawFileReader::open(&copy).unwrap_err();
    assert!(matches!(e, RawFileError::StartChecksum { .. }), "{e}");
    assert_eq!(e.offset(), Some(0));
    assert!(e.to_string().contains("run number"), "{e}");
    // Salvaging: the same fields (the damaged run number among them), the error, every event.
    let (r, damaged) = RawFileReader::open_salvaging(&copy).unwrap();
    assert!(matches!(damaged, Some(RawFileError::StartChecksum { .. })));
    assert_eq!(r.start().run, 7 ^ 1);
    assert_eq!(
        r.map(|e| e.unwrap().index).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    // An intact file salvages with no error.
    std::fs::create_dir(dir.path().join("b")).unwrap();
    let (_, intact, _) = write_file(&dir.path().join("b"), 1);
    std::fs::write(&copy, &intact).unwrap();
    assert!(RawFileReader::open_salvaging(&copy).unwrap().1.is_none());
}

#[test]
fn version_1_start_records_are_read_unchecked_but_their_padding_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes, _) = write_file(dir.path(), 3);
    let r2 = RawFileReader::open(&path).unwrap();
    let mut start = r2.start().clone();
    start.version = 1;
    let mut v1 = Vec::new();
    start.encode(&mut v1);
    v1.extend_from_slice(&bytes[start_len(&bytes)..]);
    let copy = dir.path().join("v1.data");
    std::fs::write(&copy, &v1).unwrap();
    let s = verify_file(&copy).unwrap();
    assert_eq!(
        (s.start.version, s.start.checksummed(), s.events),
        (1, false, 3)
    );
    assert_eq!(s.start.run, 7);
    // "test" fills its 4 bytes; "debug" has 3 pad bytes: the first one after the name.
    let pad = 4 * (8 + 1 + 1 + 1) + 5;
    assert_eq!(&v1[pad - 5..pad], b"debug");
    v1[pad] = b' ';
    std::fs::write(&copy, &v1).unwrap();
    let e = RawFileReader::open(&copy).unwrap_err();
    assert!(
        matches!(
            e,
            RawFileError::BadStart {
                field: "stream name padding",
                found: 0x20,
                ..
            }
        ),
        "{e}"
    );
    // A version word of 1 on a version-2 record (one word too many for version 1).
    let mut b = bytes.clone();
    b[8] = 1;
    std::fs::write(&copy, &b).unwrap();
    assert!(matches!(
        RawFileReader::open(&copy).unwrap_err(),
        RawFileError::BadStart {
            field: "record size in words",
            ..
        }
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any change of one byte of a version-2 start record is refused when the file is opened
    /// (Adler-32 finds every single-byte change), whichever field it hits.
    #[test]
    fn any_changed_start_record_byte_is_refused(pos in any::<usize>(), xor in 1..=255u8) {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut bytes, _) = write_file(dir.path(), 2);
        let at = pos % start_len(&bytes);
        bytes[at] ^= xor;
        let path = dir.path().join("start.data");
        std::fs::write(&path, &bytes).unwrap();
        let e = RawFileReader::open(&path).unwrap_err();
        prop_assert!(
            matches!(
                e,
                RawFileError::StartChecksum { .. }
                    | RawFileError::BadStart { .. }
                    | RawFileError::BadString { .. }
                    | RawFileError::Truncated { record: RecordKind::Start, .. }
            ),
            "byte {at} ^ {xor:#x}: {e}"
        );
    }

    #[test]
    fn random_garbage_never_panics(garbage in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garbage.data");
        std::fs::write(&path, &garbage).unwrap();
        let _ = verify_file(&path);
        let (_, err) = read_all_lenient(&path);
        prop_assert!(err.is_some());
    }

    #[test]
    fn mutated_files_never_panic(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
        do_cut in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut bytes, _) = write_file(dir.path(), 6);
        for (pos, xor) in flips {
            let i = pos % bytes.len();
            bytes[i] ^= xor;
        }
        if do_cut {
            bytes.truncate(cut % bytes.len());
        }
        let path = dir.path().join("mutated.data");
        std::fs::write(&path, &bytes).unwrap();
        let _ = verify_file(&path);
        let _ = read_all_lenient(&path);
    }
}

/// Like `read_all` without checking event contents (for arbitrary input).
fn read_all_lenient(path: &Path) -> (u64, Option<RawFileError>) {
    let Ok(r) = RawFileReader::open(path) else {
        return (0, Some(RawFileReader::open(path).unwrap_err()));
    };
    let mut n = 0;
    for e in r {
        match e {
            Ok(_) => n += 1,
            Err(e) => return (n, Some(e)),
        }
    }
    (n, None)
}
