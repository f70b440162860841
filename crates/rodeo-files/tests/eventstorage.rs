//! EventStorage files: the v5 writer against a reader written from the spec alone, the round
//! trip through rodeo's reader, hand-built v2 (BESIII) / v4 / v6 files, damaged files, and the
//! one reader of both containers.

mod spec_reader;

use std::io::Read as _;
use std::path::{Path, PathBuf};

use rodeo_files::datafile::{Container, DataFileError, DataFileReader};
use rodeo_files::eventstorage::{
    EsCompression, EsError, EsReader, EsWriter, EsWriterConfig, RunParameters,
};
use rodeo_files::rawfile::{RawFileConfig, RawFileWriter, FLAG_COMPRESSED};
use rodeo_files::verify::{check_file, FileVerdict};
use rodeo_format::checksum::ChecksumType;
use rodeo_format::compress::compress_event;
use rodeo_format::fragment::FullEvent;
use rodeo_format::synth::{EventSynth, SynthConfig};

/// `check_file`'s verdict on a file that must be good.
fn verified(p: &Path) -> FileVerdict {
    let v = check_file(p);
    assert!(v.ok, "{v:?}");
    v
}

fn events(n: u64, run: u32) -> Vec<Vec<u32>> {
    let mut synth = EventSynth::new(SynthConfig {
        robs: 6,
        run_number: run,
        checksum: ChecksumType::Adler32,
        ..SynthConfig::default()
    });
    (0..n)
        .map(|g| {
            let mut out = Vec::new();
            synth.event(g, &mut out).unwrap();
            out
        })
        .collect()
}

fn config(dir: &Path, run: u32) -> EsWriterConfig {
    let mut c = EsWriterConfig::new(dir, "data25_test", run, "physics", "Main", "rodeo-SFO-1");
    c.fsync_on_close = false;
    c.free_disk_margin_bytes = 0;
    c.lumiblock = 17;
    c.run = RunParameters {
        run_number: run,
        detector_mask: 0x0000_0002_0000_0001,
        beam_energy: 6800,
        ..RunParameters::default()
    };
    c
}

fn write(dir: &Path, c: EsWriterConfig, evs: &[Vec<u32>]) -> Vec<PathBuf> {
    let _ = dir;
    let mut w = EsWriter::create(c).unwrap();
    for e in evs {
        w.write_event(e).unwrap();
    }
    w.finish().unwrap().into_iter().map(|f| f.path).collect()
}

#[test]
fn v5_writer_output_is_what_the_spec_says_event_for_event() {
    let dir = tempfile::tempdir().unwrap();
    let evs = events(25, 348_885);
    let paths = write(dir.path(), config(dir.path(), 348_885), &evs);
    assert_eq!(paths.len(), 1);
    let name = paths[0].file_name().unwrap().to_str().unwrap();
    assert_eq!(
        name,
        "data25_test.00348885.physics_Main.daq.RAW._lb0017._rodeo-SFO-1._0001.data"
    );
    let bytes = std::fs::read(&paths[0]).unwrap();
    let f = spec_reader::read_v5(&bytes).unwrap();
    assert_eq!(f.run_number, 348_885);
    assert_eq!(f.detector_mask, 0x0000_0002_0000_0001);
    assert_eq!(f.app_name, "rodeo-SFO-1");
    assert_eq!(
        f.file_name_core,
        "data25_test.00348885.physics_Main.daq.RAW._lb0017._rodeo-SFO-1"
    );
    assert!(f.free_strings[0].starts_with("GUID=") && f.free_strings[0].len() == 41);
    assert_eq!(
        spec_reader::free(&f, "Stream").as_deref(),
        Some("physics_Main")
    );
    assert_eq!(
        spec_reader::free(&f, "Project").as_deref(),
        Some("data25_test")
    );
    assert_eq!(spec_reader::free(&f, "LumiBlock").as_deref(), Some("17"));
    assert_eq!(spec_reader::free(&f, "Compression"), None);
    assert_eq!(f.blocks.len(), evs.len(), "accepted event count");
    for (i, (block, e)) in f.blocks.iter().zip(&evs).enumerate() {
        assert_eq!(&spec_reader::words(block), e, "event {i}");
    }
    assert_eq!(f.block_numbers, (1..=25).collect::<Vec<u32>>());
    assert_eq!((f.end_events_in_file, f.end_events_in_run), (25, 25));
    assert_eq!(f.end_status, 1, "the last file of the run");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".writing"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn v5_zlib_blocks_inflate_with_plain_zlib() {
    let dir = tempfile::tempdir().unwrap();
    let evs = events(10, 7);
    let mut c = config(dir.path(), 7);
    c.compression = EsCompression::Zlib { level: 6 };
    let paths = write(dir.path(), c, &evs);
    let bytes = std::fs::read(&paths[0]).unwrap();
    let f = spec_reader::read_v5(&bytes).unwrap();
    assert_eq!(
        spec_reader::free(&f, "Compression").as_deref(),
        Some("zlib")
    );
    let mut stored = 0;
    for (block, e) in f.blocks.iter().zip(&evs) {
        assert_eq!(block.len() % 4, 0, "blocks are padded to words");
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(&block[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(&spec_reader::words(&out), e);
        stored += block.len();
    }
    assert!(stored < evs.iter().map(|e| e.len() * 4).sum::<usize>());
    // And rodeo's own reader restores them too.
    let back: Vec<Vec<u32>> = DataFileReader::open(&paths[0])
        .unwrap()
        .map(|e| e.unwrap().words)
        .collect();
    assert_eq!(back, evs);
}

#[test]
fn v5_round_trip_through_the_data_file_reader() {
    let dir = tempfile::tempdir().unwrap();
    let evs = events(12, 99);
    let mut c = config(dir.path(), 99);
    c.max_events_per_file = 5;
    let paths = write(dir.path(), c, &evs);
    assert_eq!(paths.len(), 3, "12 events, 5 per file");
    let mut all = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let r = DataFileReader::open(p).unwrap();
        let info = r.info().clone();
        assert_eq!(info.container, Container::EventStorage);
        assert_eq!((info.version, info.run_number), (5, 99));
        assert_eq!(info.file_number, i as u32 + 1);
        assert_eq!(info.lumiblock, Some(17));
        assert_eq!(info.stream, "physics_Main");
        for e in r {
            all.push(e.unwrap());
        }
        let s = verified(p);
        assert_eq!(s.events_by_eformat[5], s.good_events);
        assert_eq!(s.container, Some(Container::EventStorage));
        // Status 1 only on the run's last file.
        let es = EsReader::open(p).unwrap();
        let mut es = es;
        for b in es.by_ref() {
            b.unwrap();
        }
        let sum = es.summary().unwrap();
        assert_eq!(sum.status, u32::from(i == 2));
    }
    assert_eq!(all.len(), evs.len());
    for (e, w) in all.iter().zip(&evs) {
        let fe = FullEvent::parse(w).unwrap();
        assert_eq!(&e.words, w);
        assert_eq!((e.eformat, e.run_number), (5, 99));
        assert_eq!(e.l1id, fe.extended_l1id());
        let ids: Vec<u32> = fe.robs().map(|r| r.unwrap().source_id().0).collect();
        let got: Vec<u32> = e.robs.iter().map(|r| r.source_id).collect();
        assert_eq!(got, ids);
        for (r, rob) in e.robs.iter().zip(fe.robs()) {
            let rob = rob.unwrap();
            assert_eq!(e.rob_words(r), rob.words());
            assert_eq!(e.data_words(r), rob.rod().data());
        }
    }
}

#[test]
fn zstd_events_of_rodeo_are_written_plain() {
    let dir = tempfile::tempdir().unwrap();
    let evs = events(3, 5);
    let mut w = EsWriter::create(config(dir.path(), 5)).unwrap();
    let mut packed = Vec::new();
    for e in &evs {
        compress_event(e, &mut packed).unwrap();
        assert_ne!(&packed, e);
        w.write_event(&packed).unwrap();
    }
    let paths = w.finish().unwrap();
    let f = spec_reader::read_v5(&std::fs::read(&paths[0].path).unwrap()).unwrap();
    for (block, e) in f.blocks.iter().zip(&evs) {
        assert_eq!(
            &spec_reader::words(block),
            e,
            "compression field 0, ROBs in place"
        );
    }
}

// ---- hand-built files of other versions, from the spec ----

fn le(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn string(s: &str) -> Vec<u32> {
    let mut b = s.as_bytes().to_vec();
    while b.len() % 4 != 0 {
        b.push(b' ');
    }
    let mut w = vec![s.len() as u32];
    w.extend(
        b.chunks(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    w
}

/// A fragment with the generic header and `word6` (v3: specific count; v4: checksum type).
fn frag(
    marker: u32,
    version: u32,
    source: u32,
    word6: u32,
    spec: &[u32],
    payload: &[u32],
) -> Vec<u32> {
    let header = 7 + spec.len() as u32;
    let mut w = vec![
        marker,
        header + payload.len() as u32,
        header,
        version,
        source,
        0,
        word6,
    ];
    w.extend_from_slice(spec);
    w.extend_from_slice(payload);
    w
}

fn rob(version: u32, source: u32, run: u32, l1id: u32, data: &[u32]) -> Vec<u32> {
    let mut rod = vec![0xEE12_34EE, 9, 0x0300_0000, source, run, l1id, 0, 0, 0];
    rod.extend_from_slice(data);
    rod.extend_from_slice(&[0, data.len() as u32, 0]);
    frag(0xDD12_34DD, version, source, 0, &[], &rod)
}

/// A BESIII event: full event (10 specific words) > sub-detector > ROS > ROBs (pybes3 layout).
fn besiii_event(evt_no: u32, run: u32, l1id: u32) -> Vec<u32> {
    let mut mdc = rob(0x0300_0000, 0x00A1_0001, run, l1id, &[0x40000 | evt_no]);
    mdc.extend(rob(0x0300_0000, 0x00A1_0002, run, l1id, &[]));
    let ros_mdc = frag(
        0xCC12_34CC,
        0x0300_0000,
        0x00A1_0000,
        3,
        &[run, 0, l1id],
        &mdc,
    );
    let sd_mdc = frag(0xBB12_34BB, 0x0300_0000, 0x00A1_0000, 0, &[], &ros_mdc);
    let emc = rob(0x0300_0000, 0x00A3_0001, run, l1id, &[1, 2, 3]);
    let ros_emc = frag(
        0xCC12_34CC,
        0x0300_0000,
        0x00A3_0000,
        3,
        &[run, 0, l1id],
        &emc,
    );
    let sd_emc = frag(0xBB12_34BB, 0x0300_0000, 0x00A3_0000, 0, &[], &ros_emc);
    let mut payload = sd_mdc;
    payload.extend(sd_emc);
    let spec = [1_250_000_000, evt_no, run, l1id, 0, 0, 0, 0, 0, 0];
    frag(0xAA12_34AA, 0x0300_0000, 0, 10, &spec, &payload)
}

/// An EventStorage file of `version` (2-4: no free strings, 9-word run parameters) holding
/// `events`; `end` adds the end record.
fn es_file(version: u32, run: u32, events: &[Vec<u32>], end: bool) -> Vec<u8> {
    let mut w = vec![0x1234_AAAA, 8, version, 1, 19_062_009, 73_541, 0, 0];
    w.push(0x1234_AABB);
    w.extend(string("BESIII-EF"));
    w.extend(string("run_0012345_All_file001"));
    if version >= 5 {
        w.extend([0x1234_AABC, 1]);
        w.extend(string("Stream=physics_Main"));
    }
    let masks = match version {
        6 => 4,
        5 => 2,
        _ => 1,
    };
    w.extend([0x1234_BBBB, 8 + masks, run, 0, 1, 0]);
    w.extend(std::iter::repeat_n(0xFF, masks as usize));
    w.extend([0, 0]);
    for (i, e) in events.iter().enumerate() {
        w.extend([0x1234_CCCC, 4, i as u32 + 1, e.len() as u32 * 4]);
        w.extend_from_slice(e);
    }
    if end {
        let n = events.len() as u32;
        w.extend([
            0x1234_DDDD,
            10,
            19_062_009,
            80_000,
            n,
            0,
            n,
            0,
            1,
            0x1234_EEEE,
        ]);
    }
    le(&w)
}

fn save(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn besiii_v2_file_reads_through_sub_detector_and_ros_levels() {
    let dir = tempfile::tempdir().unwrap();
    let evs: Vec<Vec<u32>> = (0..4)
        .map(|i| besiii_event(100 + i, 12_345, 7 + i))
        .collect();
    let p = save(
        dir.path(),
        "run_0012345_All_file001_SFO-1.raw",
        &es_file(2, 12_345, &evs, true),
    );
    let r = DataFileReader::open(&p).unwrap();
    assert_eq!(r.info().container, Container::EventStorage);
    assert_eq!((r.info().version, r.info().run_number), (2, 12_345));
    assert_eq!(r.info().app_name, "BESIII-EF");
    let got: Vec<_> = r.map(|e| e.unwrap()).collect();
    assert_eq!(got.len(), 4);
    for (i, e) in got.iter().enumerate() {
        assert_eq!((e.eformat, e.run_number, e.l1id), (3, 12_345, 7 + i as u32));
        assert_eq!(e.global_id, Some(100 + i as u64));
        let ids: Vec<u32> = e.robs.iter().map(|r| r.source_id).collect();
        assert_eq!(ids, [0x00A1_0001, 0x00A1_0002, 0x00A3_0001]);
        assert_eq!(e.data_words(&e.robs[0]), &[0x40000 | (100 + i as u32)]);
        assert_eq!(e.data_words(&e.robs[2]), &[1, 2, 3]);
    }
    let s = verified(&p);
    assert_eq!((s.good_events, s.robs, s.events_by_eformat[3]), (4, 12, 4));
    assert_eq!(s.version, Some(2));
}

#[test]
fn atlas_v4_and_v6_files_read() {
    let dir = tempfile::tempdir().unwrap();
    // eformat 4: ROBs directly in the event, checksum type word, run at specific word 4 and
    // L1ID at word 6 (athena v40_FullEventFragment).
    let v4: Vec<Vec<u32>> = (0..3)
        .map(|i| {
            let robs = [
                rob(0x0400_0000, 0x0011_0001, 42, 0x0100_0000 + i, &[i, i]),
                rob(0x0400_0000, 0x0021_0005, 42, 0x0100_0000 + i, &[]),
            ]
            .concat();
            let spec = [0, 0, 1000 + i, 0, 42, 3, 0x0100_0000 + i, 0, 0, 0, 0, 0, 0];
            frag(0xAA12_34AA, 0x0400_0000, 0x007C_0000, 0, &spec, &robs)
        })
        .collect();
    let p = save(dir.path(), "v4.data", &es_file(4, 42, &v4, true));
    let got: Vec<_> = DataFileReader::open(&p)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(got.len(), 3);
    for (i, e) in got.iter().enumerate() {
        assert_eq!(
            (e.eformat, e.run_number, e.l1id),
            (4, 42, 0x0100_0000 + i as u32)
        );
        assert_eq!(e.robs.len(), 2);
        assert_eq!(e.robs[1].source_id, 0x0021_0005);
    }
    // Version 6: 12-word run parameters with a 4-word detector mask, eformat 5 events.
    let evs = events(2, 42);
    let p = save(dir.path(), "v6.data", &es_file(6, 42, &evs, true));
    let r = EsReader::open(&p).unwrap();
    let ff = 0xFFu128;
    assert_eq!(
        r.info().run.detector_mask,
        ff | ff << 32 | ff << 64 | ff << 96
    );
    let got: Vec<_> = DataFileReader::open(&p)
        .unwrap()
        .map(|e| e.unwrap().words)
        .collect();
    assert_eq!(got, evs);
}

#[test]
fn damaged_files_give_every_event_before_the_damage_and_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let evs: Vec<Vec<u32>> = (0..5).map(|i| besiii_event(i, 1, i)).collect();
    let whole = es_file(2, 1, &evs, true);
    // Where each data separator starts.
    let header_len = whole.len() - 40 - evs.iter().map(|e| 16 + e.len() * 4).sum::<usize>();
    let mut starts = vec![header_len];
    for e in &evs {
        starts.push(starts.last().unwrap() + 16 + e.len() * 4);
    }
    // Cut inside event 3: events 0..3 come back, then a typed error at event 3's offset.
    let cut = starts[3] + 30;
    let p = save(dir.path(), "cut.data", &whole[..cut]);
    let mut ok = 0;
    let mut err = None;
    for e in DataFileReader::open(&p).unwrap() {
        match e {
            Ok(_) => ok += 1,
            Err(e) => err = Some(e),
        }
    }
    assert_eq!(ok, 3);
    let err = err.unwrap();
    assert_eq!(err.offset(), Some(starts[3] as u64));
    assert_eq!(err.events_recovered(), Some(3));
    assert!(
        matches!(err, DataFileError::EventStorage(EsError::Truncated { .. })),
        "{err}"
    );
    // No end record: all events, then NoEndRecord at the file's end.
    let p = save(dir.path(), "noend.data", &es_file(2, 1, &evs, false));
    let r: Vec<_> = DataFileReader::open(&p).unwrap().collect();
    assert_eq!(r.iter().filter(|e| e.is_ok()).count(), 5);
    let last = r.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(
        last,
        DataFileError::EventStorage(EsError::NoEndRecord { .. })
    ));
    // A ROB size running past its ROS inside event 1: event 0, then an event error there.
    let mut bad = evs.clone();
    bad[1][18] += 1000; // the sub-detector's size word
    let p = save(dir.path(), "badsize.data", &es_file(2, 1, &bad, true));
    let r: Vec<_> = DataFileReader::open(&p).unwrap().collect();
    assert_eq!(r.len(), 2);
    let e = r[1].as_ref().unwrap_err();
    assert_eq!(e.offset(), Some(starts[1] as u64));
    assert!(e.to_string().contains("runs past its parent"), "{e}");
    // Every prefix of the file: an error or a clean end, never a panic; offsets inside the file.
    for n in (0..whole.len()).step_by(7) {
        let p = save(dir.path(), "prefix.data", &whole[..n]);
        match DataFileReader::open(&p) {
            Ok(r) => {
                for e in r {
                    if let Err(e) = e {
                        assert!(e.offset().unwrap_or(0) <= n as u64);
                    }
                }
            }
            Err(e) => assert!(e.offset().unwrap_or(0) <= n as u64),
        }
    }
}

#[test]
fn rodeo_container_reads_through_the_same_reader() {
    let dir = tempfile::tempdir().unwrap();
    let evs = events(4, 3);
    let mut c = RawFileConfig::new(dir.path(), 3, "app", "physics_Main");
    c.fsync_on_close = false;
    c.free_disk_margin_bytes = 0;
    let mut w = RawFileWriter::create(c).unwrap();
    let mut packed = Vec::new();
    for (i, e) in evs.iter().enumerate() {
        if i % 2 == 1 {
            compress_event(e, &mut packed).unwrap();
            w.write_event(&packed, FLAG_COMPRESSED).unwrap();
        } else {
            w.write_event(e, 0).unwrap();
        }
    }
    let p = w.finish().unwrap().remove(0).path;
    let r = DataFileReader::open(&p).unwrap();
    assert_eq!(r.info().container, Container::Rodeo);
    assert_eq!(r.info().run_number, 3);
    let got: Vec<_> = r.map(|e| e.unwrap()).collect();
    for (i, (e, w)) in got.iter().zip(&evs).enumerate() {
        assert_eq!(&e.words, w, "event {i} restored");
        assert_eq!(e.stored_compressed, i % 2 == 1);
        assert_eq!(e.robs.len(), 6);
    }
    assert_eq!(verified(&p).good_events, 4);
    // Not a data file at all.
    let p = save(dir.path(), "junk", b"hello world, not a file");
    assert!(matches!(
        DataFileReader::open(&p),
        Err(DataFileError::NotADataFile { .. })
    ));
}

/// A ROB whose ROD has `status` words before (position 0) or after (1) its data.
fn rob_with_status(
    source: u32,
    l1id: u32,
    data: &[u32],
    status: &[u32],
    position: u32,
) -> Vec<u32> {
    let mut rod = vec![
        0xEE12_34EE,
        9,
        0x0300_0007,
        source,
        5,
        l1id,
        0x123,
        0x8,
        0x77,
    ];
    let (before, after): (&[u32], &[u32]) = if position == 0 {
        (status, &[])
    } else {
        (&[], status)
    };
    rod.extend_from_slice(before);
    rod.extend_from_slice(data);
    rod.extend_from_slice(after);
    rod.extend_from_slice(&[status.len() as u32, data.len() as u32, position]);
    frag(0xDD12_34DD, 0x0300_0000, source, 0, &[], &rod)
}

/// Per ROB: source id and ROD data words.
type RobData = Vec<(u32, Vec<u32>)>;

/// Every event of a file as (run number, L1ID, its ROBs): what a conversion must keep.
fn rob_contents(p: &Path) -> Vec<(u32, u32, RobData)> {
    DataFileReader::open(p)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let robs = e
                .robs
                .iter()
                .map(|r| (r.source_id, e.data_words(r).to_vec()))
                .collect();
            (e.run_number, e.l1id & 0x00FF_FFFF, robs)
        })
        .collect()
}

#[test]
fn convert_round_trips_between_the_containers() {
    use rodeo_files::convert::{convert_file, ConvertCompression, ConvertOptions};
    let dir = tempfile::tempdir().unwrap();
    let evs = events(15, 4242);
    let mut c = RawFileConfig::new(dir.path(), 4242, "SFO-1", "physics_Main");
    c.fsync_on_close = false;
    c.free_disk_margin_bytes = 0;
    let mut w = RawFileWriter::create(c).unwrap();
    for e in &evs {
        w.write_event(e, 0).unwrap();
    }
    let rodeo_in = w.finish().unwrap()[0].path.clone();
    for (compression, back_compression) in [
        (ConvertCompression::None, ConvertCompression::None),
        (ConvertCompression::Zlib, ConvertCompression::Zstd),
    ] {
        let sub = dir.path().join(format!("{compression:?}"));
        std::fs::create_dir(&sub).unwrap();
        let mut o = ConvertOptions::new(Container::EventStorage);
        o.compression = compression;
        o.fsync = false;
        let es = convert_file(&rodeo_in, &sub.join("out.data"), &o).unwrap();
        assert_eq!((es.events, es.lifted, es.robs), (15, 0, 90));
        // The spec-only reader accepts it, event for event.
        let f = spec_reader::read_v5(&std::fs::read(&es.output).unwrap()).unwrap();
        assert_eq!(f.blocks.len(), 15);
        assert_eq!(f.run_number, 4242);
        assert_eq!(
            spec_reader::free(&f, "Stream").as_deref(),
            Some("physics_Main")
        );
        verified(&es.output);
        // And back into rodeo's container: the same events, word for word.
        let mut o = ConvertOptions::new(Container::Rodeo);
        o.compression = back_compression;
        o.fsync = false;
        let back = convert_file(&es.output, &sub, &o).unwrap();
        assert_eq!(back.events, 15);
        verified(&back.output);
        let got: Vec<Vec<u32>> = DataFileReader::open(&back.output)
            .unwrap()
            .map(|e| e.unwrap().words)
            .collect();
        assert_eq!(got, evs);
        // The same output again is refused, not overwritten.
        assert!(convert_file(&es.output, &back.output, &o).is_err());
    }
    // Codecs of the other container are refused before anything is written.
    let mut o = ConvertOptions::new(Container::EventStorage);
    o.compression = ConvertCompression::Zstd;
    let e = convert_file(&rodeo_in, &dir.path().join("x.data"), &o).unwrap_err();
    assert!(
        e.to_string().contains("zstd") && e.to_string().contains("zlib"),
        "{e}"
    );
    assert!(!dir.path().join("x.data").exists());
}

/// A conversion killed earlier left its work directory: the next one into the same output
/// takes it over (its process is gone); a live one's is refused. A link or file that appears
/// at the output is never replaced, and an input of no readable event leaves no output.
#[test]
fn convert_recovers_a_killed_conversion_and_never_replaces_the_output() {
    use rodeo_files::convert::{convert_file, ConvertError, ConvertOptions};
    let dir = tempfile::tempdir().unwrap();
    let mut c = RawFileConfig::new(dir.path(), 7, "SFO-1", "physics_Main");
    c.fsync_on_close = false;
    c.free_disk_margin_bytes = 0;
    let mut w = RawFileWriter::create(c).unwrap();
    for e in &events(5, 7) {
        w.write_event(e, 0).unwrap();
    }
    let input = w.finish().unwrap()[0].path.clone();
    let mut o = ConvertOptions::new(Container::EventStorage);
    o.fsync = false;
    // A stale work directory (no process 4294967 on Linux: pid_max is below it).
    let out = dir.path().join("a.data");
    let stale = dir.path().join(".a.data.converting");
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join(".pid"), "4294967").unwrap();
    std::fs::write(stale.join("half.data.writing"), [0u8; 100]).unwrap();
    assert_eq!(convert_file(&input, &out, &o).unwrap().events, 5);
    assert!(!stale.exists());
    // A live one's (ours: pid and start time) is refused, naming the process; a pid alone
    // (another process may have it now) is not a live owner.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let start = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_string();
    let busy = dir.path().join(".b.data.converting");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join(".pid"), format!("{} {start}", std::process::id())).unwrap();
    let e = convert_file(&input, &dir.path().join("b.data"), &o).unwrap_err();
    assert!(
        e.to_string().contains("is converting into the same output"),
        "{e}"
    );
    // Into a directory: a file that appeared under the output's name stays as it was, and a
    // killed conversion's work directory there is removed.
    let into = dir.path().join("into");
    std::fs::create_dir(&into).unwrap();
    let first = convert_file(&input, &into, &o).unwrap().output;
    std::fs::rename(&first, dir.path().join("moved.data")).unwrap();
    std::fs::write(&first, "precious").unwrap();
    let killed = into.join(".rodeo-convert.4294967.converting");
    std::fs::create_dir(&killed).unwrap();
    std::fs::write(killed.join(".pid"), "4294967 1").unwrap();
    let e = convert_file(&input, &into, &o).unwrap_err();
    assert!(matches!(e, ConvertError::Exists { .. }), "{e}");
    assert_eq!(std::fs::read_to_string(&first).unwrap(), "precious");
    let left: Vec<_> = std::fs::read_dir(&into).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "only the file: {left:?}");
    // A dangling link at the output stays as it was.
    let link = dir.path().join("c.data");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
    let e = convert_file(&input, &link, &o).unwrap_err();
    assert!(matches!(e, ConvertError::Exists { .. }), "{e}");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(!dir.path().join(".c.data.converting").exists());
    // Not one readable event: no output.
    let first = DataFileReader::open(&input)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .offset;
    let cut = dir.path().join("cut.data");
    std::fs::write(&cut, &std::fs::read(&input).unwrap()[..first as usize + 12]).unwrap();
    let none = dir.path().join("none.data");
    let e = convert_file(&cut, &none, &o).unwrap_err();
    assert!(matches!(e, ConvertError::Open { .. }), "{e}");
    assert!(!none.exists(), "{e}");
    assert!(!dir.path().join(".none.data.converting").exists());
}

#[test]
fn convert_lifts_eformat_3_and_4_robs_into_eformat_5_events() {
    use rodeo_files::convert::{convert_file, ConvertOptions};
    use rodeo_format::fragment::FullEvent;
    let dir = tempfile::tempdir().unwrap();
    // BESIII v2 (eformat 3 through sub-detector and ROS levels), with one more event whose
    // RODs carry status words before and after their data.
    let mut evs: Vec<Vec<u32>> = (0..4)
        .map(|i| besiii_event(100 + i, 12_345, 7 + i))
        .collect();
    let robs = [
        rob_with_status(0x00A1_0007, 11, &[9, 8, 7], &[0xAB], 0),
        rob_with_status(0x00A1_0008, 11, &[6], &[0xCD, 0xEF], 1),
    ]
    .concat();
    let ros = frag(
        0xCC12_34CC,
        0x0300_0000,
        0x00A1_0000,
        3,
        &[12_345, 0, 11],
        &robs,
    );
    let sd = frag(0xBB12_34BB, 0x0300_0000, 0x00A1_0000, 0, &[], &ros);
    let spec = [1_250_000_000, 104, 12_345, 11, 0, 0, 0, 0, 0, 0];
    evs.push(frag(0xAA12_34AA, 0x0300_0000, 0, 10, &spec, &sd));
    let v2 = save(dir.path(), "besiii.raw", &es_file(2, 12_345, &evs, true));
    // ATLAS v4 (eformat 4, ROBs directly in the event).
    let v4evs: Vec<Vec<u32>> = (0..3)
        .map(|i| {
            let robs = [
                rob(0x0400_0000, 0x0011_0001, 42, 0x0100_0000 + i, &[i, i]),
                rob(0x0400_0000, 0x0021_0005, 42, 0x0100_0000 + i, &[]),
            ]
            .concat();
            let spec = [0, 0, 1000 + i, 0, 42, 3, 0x0100_0000 + i, 0, 0, 0, 0, 0, 0];
            frag(0xAA12_34AA, 0x0400_0000, 0x007C_0000, 0, &spec, &robs)
        })
        .collect();
    let v4 = save(dir.path(), "v4.data", &es_file(4, 42, &v4evs, true));
    for (input, events) in [(&v2, 5u64), (&v4, 3)] {
        for format in [Container::EventStorage, Container::Rodeo] {
            let out = dir.path().join(format!(
                "{}.{}.data",
                input.file_stem().unwrap().to_str().unwrap(),
                format.name()
            ));
            let mut o = ConvertOptions::new(format);
            o.fsync = false;
            let s = convert_file(input, &out, &o).unwrap();
            assert_eq!((s.events, s.lifted), (events, events));
            let v = verified(&out);
            assert_eq!(v.events_by_eformat[5], events, "{v:?}");
            // Run numbers, L1IDs, ROB source ids and ROD data words survive the lifting.
            assert_eq!(rob_contents(&out), rob_contents(input));
            for e in DataFileReader::open(&out).unwrap() {
                let e = e.unwrap();
                assert_eq!(e.eformat, 5);
                let fe = FullEvent::parse(&e.words).unwrap();
                assert_eq!(fe.validate_robs().unwrap(), e.robs.len());
            }
        }
    }
    // The ROD status words kept their place.
    let out = dir.path().join("besiii.rodeo.data");
    let last = DataFileReader::open(&out).unwrap().last().unwrap().unwrap();
    assert_eq!(last.global_id, Some(104));
    let fe = FullEvent::parse(&last.words).unwrap();
    let robs: Vec<_> = fe.robs().map(|r| r.unwrap()).collect();
    assert_eq!(robs[0].rod().status_words(), &[0xAB]);
    assert_eq!(robs[0].rod().data(), &[9, 8, 7]);
    assert_eq!(robs[1].rod().status_words(), &[0xCD, 0xEF]);
    assert_eq!(robs[1].rod().data(), &[6]);
    assert_eq!(
        (robs[1].rod().bcid(), robs[1].rod().run_number()),
        (0x123, 5)
    );
}

#[test]
fn verify_cross_checks_the_run_parameters_against_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let evs: Vec<Vec<u32>> = (0..3).map(|i| besiii_event(i, 12_345, i)).collect();
    // The run-parameters record says run 12346, the events 12345.
    let p = save(
        dir.path(),
        "other-run.data",
        &es_file(2, 12_346, &evs, true),
    );
    let v = check_file(&p);
    assert!(!v.ok, "{v:?}");
    assert_eq!(v.good_events, 0);
    let e = v.error.unwrap();
    assert!(
        e.contains("run number 12345") && e.contains("run 12346"),
        "the message names the field and both values: {e}"
    );
    // The reader itself reads such a file (the disagreement is verify's to find).
    assert_eq!(DataFileReader::open(&p).unwrap().count(), 3);
    // `convert` refuses it as `verify` does, and writes nothing (it converted the file, exit
    // status 0, into one that verify failed).
    use rodeo_files::convert::{convert_file, ConvertError, ConvertOptions};
    let out = dir.path().join("converted.data");
    let o = ConvertOptions::new(Container::Rodeo);
    let e = convert_file(&p, &out, &o).unwrap_err();
    assert!(
        matches!(e, ConvertError::Unverifiable { index: 0, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("run 12346"), "{e}");
    assert!(!out.exists());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "no work directory left: {left:?}");
    // The same file with the right run number passes, and converts.
    let p = save(dir.path(), "same-run.data", &es_file(2, 12_345, &evs, true));
    assert_eq!(verified(&p).good_events, 3);
    assert_eq!(convert_file(&p, &out, &o).unwrap().events, 3);
}

/// An event whose checksum is bad fails `verify`, and `convert` refuses the file the same
/// way, naming the event, writing nothing (it copied such events with exit status 0).
#[test]
fn convert_refuses_an_event_that_verify_fails() {
    use rodeo_files::convert::{convert_file, ConvertError, ConvertOptions};
    let dir = tempfile::tempdir().unwrap();
    let mut evs = events(4, 77);
    // A data word of event 2, after its headers: its ROB's checksum no longer holds.
    let n = evs[2].len();
    evs[2][n - 20] ^= 0x1;
    let sub = dir.path().join("in");
    std::fs::create_dir(&sub).unwrap();
    let input = write(&sub, config(&sub, 77), &evs).pop().unwrap();
    assert!(!check_file(&input).ok);
    let out = dir.path().join("out.data");
    let e = convert_file(&input, &out, &ConvertOptions::new(Container::Rodeo)).unwrap_err();
    assert!(
        matches!(e, ConvertError::Unverifiable { index: 2, .. }),
        "{e}"
    );
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the input's directory"
    );
    // A record damaged in rodeo's container (its Adler-32 fails): the events before it are
    // converted and the conversion fails, saying how many (it said nothing, exit status 0).
    let mut c = RawFileConfig::new(&sub, 77, "test", "physics_Main");
    c.fsync_on_close = false;
    let mut w = RawFileWriter::create(c).unwrap();
    for e in &events(4, 77) {
        w.write_event(e, 0).unwrap();
    }
    let raw = w.finish().unwrap().pop().unwrap().path;
    let mut bytes = std::fs::read(&raw).unwrap();
    let at = bytes.len() * 3 / 4;
    bytes[at] ^= 0x40;
    std::fs::write(&raw, bytes).unwrap();
    assert!(!check_file(&raw).ok);
    let e = convert_file(&raw, &out, &ConvertOptions::new(Container::Rodeo)).unwrap_err();
    match e {
        ConvertError::Read { events, .. } => assert!((1..4).contains(&events), "{events}"),
        e => panic!("{e}"),
    }
    assert!(out.exists());
}

#[test]
fn a_data_block_longer_than_its_event_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut evs: Vec<Vec<u32>> = (0..3).map(|i| besiii_event(i, 7, i)).collect();
    // Event 1's block carries one word after the event (its size word unchanged).
    evs[1].push(0);
    let p = save(dir.path(), "trailing.data", &es_file(2, 7, &evs, true));
    let r: Vec<_> = DataFileReader::open(&p).unwrap().collect();
    assert_eq!(r.len(), 2, "event 0, then the error");
    let e = r[1].as_ref().unwrap_err();
    assert_eq!(e.events_recovered(), Some(1));
    assert!(e.to_string().contains("1 words after the event"), "{e}");
    let v = check_file(&p);
    assert!(!v.ok && v.good_events == 1, "{v:?}");
}

#[test]
fn damaged_metadata_records_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let evs: Vec<Vec<u32>> = (0..2).map(|i| besiii_event(i, 7, i)).collect();
    let good = es_file(5, 7, &evs, true);
    let word = |b: &[u8], i: usize| u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
    let find = |marker: u32| {
        (0..good.len() / 4)
            .find(|&i| word(&good, i) == marker)
            .unwrap()
    };
    let put =
        |b: &mut Vec<u8>, i: usize, w: u32| b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    let cases: [(&str, usize, u32, &str); 6] = [
        ("version", 2, 7, "format version"),
        ("start size", 1, 9, "record size"),
        ("string length", find(0x1234_AABB) + 1, u32::MAX, "bytes"),
        (
            "free-string count",
            find(0x1234_AABC) + 1,
            u32::MAX,
            "strings cannot fit",
        ),
        (
            "run-parameters size",
            find(0x1234_BBBB) + 1,
            3,
            "record size 3",
        ),
        ("end marker", find(0x1234_EEEE), 0, "closing marker"),
    ];
    for (what, at, value, says) in cases {
        let mut b = good.clone();
        put(&mut b, at, value);
        let p = save(dir.path(), "damaged.data", &b);
        let v = check_file(&p);
        assert!(!v.ok, "{what}: {v:?}");
        let e = v.error.unwrap();
        assert!(e.contains(says), "{what}: {e}");
        assert!(
            v.error_offset.is_some_and(|o| o <= b.len() as u64),
            "{what}"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Bytes of a v5 file changed at random: an error or a clean read, never a panic; every
    /// error offset lies inside the file and every event before it is whole.
    #[test]
    fn mutated_eventstorage_files_never_panic(
        flips in proptest::collection::vec((proptest::prelude::any::<usize>(), 1..=255u8), 1..6),
        cut in proptest::prelude::any::<usize>(),
        do_cut in proptest::prelude::any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let evs: Vec<Vec<u32>> = (0..3).map(|i| besiii_event(i, 7, i)).collect();
        let mut b = es_file(5, 7, &evs, true);
        for (pos, xor) in flips {
            let i = pos % b.len();
            b[i] ^= xor;
        }
        if do_cut {
            b.truncate(cut % b.len());
        }
        let p = save(dir.path(), "mutated.data", &b);
        let len = b.len() as u64;
        if let Ok(r) = DataFileReader::open(&p) {
            for e in r {
                match e {
                    Ok(e) => proptest::prop_assert!(e.offset < len),
                    Err(e) => {
                        proptest::prop_assert!(e.offset().is_none_or(|o| o <= len), "{e}");
                    }
                }
            }
        }
        let v = check_file(&p);
        proptest::prop_assert!(v.error_offset.is_none_or(|o| o <= len), "{v:?}");
    }
}

/// An input that is not a raw-data file converts nothing and says so: no output, no work
/// directory next to it (it said "the output is left as OUT" of a file that was never made).
#[test]
fn an_input_that_does_not_open_leaves_nothing() {
    use rodeo_files::convert::{convert_file, ConvertError, ConvertOptions};
    let dir = tempfile::tempdir().unwrap();
    let input = save(dir.path(), "junk.data", &[0u8; 4096]);
    let output = dir.path().join("out.data");
    for format in [Container::Rodeo, Container::EventStorage] {
        let e = convert_file(&input, &output, &ConvertOptions::new(format)).unwrap_err();
        assert!(matches!(e, ConvertError::Open { .. }), "{e}");
        assert!(e.to_string().contains("nothing was converted"), "{e}");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["junk.data"], "{format:?}");
    }
}
