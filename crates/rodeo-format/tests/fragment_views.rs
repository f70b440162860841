//! Fragment views and builders: round trips, typed errors with offsets, checksums.

use rodeo_format::checksum::ChecksumType;
use rodeo_format::fragment::*;

const DATA: [u32; 5] = [1, 2, 3, 4, 5];

fn rod<'a>(data: &'a [&'a [u32]]) -> RodBuilder<'a> {
    static STATUS: [u32; 2] = [0x20, 0x40_0000];
    RodBuilder {
        source_id: SourceId::new(SubDetector::LAR_EM_BARREL_A, 7),
        minor_version: 3,
        run_number: 1234,
        extended_l1id: 0x0A00_0042,
        bcid: 0x123,
        trigger_type: 0x81,
        detector_event_type: 9,
        status: &STATUS,
        status_position: StatusPosition::AfterData,
        data,
    }
}

fn rob(checksum: ChecksumType, module: u16) -> Vec<u32> {
    let mut out = Vec::new();
    let pieces: [&[u32]; 2] = [&DATA[..2], &DATA[2..]];
    let b = RobBuilder {
        source_id: SourceId::new(SubDetector::LAR_EM_BARREL_A, module),
        status: &[Status::ROB_FRAGMENT_PENDING.word()],
        checksum,
        payload: RobPayload::Rod(rod(&pieces)),
    };
    let n = b.write_vec(&mut out).unwrap();
    assert_eq!(n, out.len());
    assert_eq!(n, b.size_words().unwrap());
    out
}

fn event(robs: &[&[u32]], checksum: ChecksumType) -> Vec<u32> {
    let tags = [
        StreamTag {
            name: "Main",
            stream_type: "physics",
        },
        StreamTag {
            name: "Λ",
            stream_type: "",
        },
    ];
    let b = EventBuilder {
        source_id: SourceId::new(SubDetector::TDAQ_EVENT_FILTER, 0),
        status: &[Status::EVENT_PARTIAL.word()],
        checksum,
        bc_time_seconds: 1_700_000_000,
        bc_time_nanoseconds: 999,
        global_id: 0x1_2345_6789,
        run_type: 2,
        run_number: 1234,
        lumi_block: 17,
        extended_l1id: 0x0A00_0042,
        bcid: 0x123,
        l1_trigger_type: 0x81,
        compression: 0,
        uncompressed_size: None,
        l1_info: &[1, 2, 3],
        l2_info: &[],
        ef_info: &[7],
        stream_tags: &tags,
        robs,
    };
    let mut buf = vec![0; b.size_words().unwrap()];
    assert_eq!(b.write_slice(&mut buf).unwrap(), buf.len());
    buf
}

#[test]
fn rod_round_trip() {
    let mut out = vec![0; 40];
    let pieces: [&[u32]; 1] = [&DATA];
    let b = rod(&pieces);
    let n = b.write_slice(&mut out).unwrap();
    let r = RodFragment::parse(&out[..n]).unwrap();
    assert_eq!(r.source_id(), SourceId(0x0041_0007));
    assert_eq!(r.minor_version(), 3);
    assert_eq!(r.run_number(), 1234);
    assert_eq!(r.ecr(), 0x0A);
    assert_eq!(r.l1id(), 0x42);
    assert_eq!(r.bcid(), 0x123);
    assert_eq!(r.trigger_type(), 0x81);
    assert_eq!(r.detector_event_type(), 9);
    assert_eq!(r.data(), &DATA);
    assert_eq!(r.status_words(), &[0x20, 0x40_0000]);
    assert_eq!(r.status_position(), StatusPosition::AfterData);
    let mut small = [0u32; 10];
    let e = b.write_slice(&mut small).unwrap_err();
    assert!(matches!(
        e.error(),
        ErrorKind::BufferTooSmall {
            needed: 19,
            available: 10
        }
    ));
}

#[test]
fn rob_round_trip_and_checksums() {
    for ck in [
        ChecksumType::None,
        ChecksumType::Crc16,
        ChecksumType::Adler32,
    ] {
        let words = rob(ck, 3);
        let r = RobFragment::parse(&words).unwrap();
        assert_eq!(r.checksum_type(), ck);
        assert_eq!(r.status(), Status::ROB_FRAGMENT_PENDING);
        assert_eq!(r.rod().data(), &DATA);
        assert_eq!(r.source_id().module(), 3);
        r.verify_checksum().unwrap();
        // The same ROB from pieces of a pre-built ROD.
        let mut rodw = Vec::new();
        let pieces: [&[u32]; 1] = [&DATA];
        rod(&pieces).write_vec(&mut rodw).unwrap();
        let mut again = Vec::new();
        RobBuilder {
            source_id: r.source_id(),
            status: r.status_words(),
            checksum: ck,
            payload: RobPayload::Pieces(&[&rodw[..4], &rodw[4..]]),
        }
        .write_vec(&mut again)
        .unwrap();
        assert_eq!(again, words);
        if ck != ChecksumType::None {
            let mut bad = words.clone();
            bad[12] ^= 1 << 9;
            let e = RobFragment::parse(&bad)
                .unwrap()
                .verify_checksum()
                .unwrap_err();
            let ErrorKind::ChecksumMismatch {
                expected, computed, ..
            } = *e.error()
            else {
                panic!("{e}")
            };
            assert_eq!(expected, *words.last().unwrap());
            assert_ne!(expected, computed);
        }
    }
}

#[test]
fn event_round_trip() {
    let r1 = rob(ChecksumType::Adler32, 1);
    let r2 = rob(ChecksumType::Crc16, 2);
    let words = event(&[&r1, &r2[..5], &r2[5..]], ChecksumType::Crc16);
    let e = FullEvent::parse(&words).unwrap();
    assert_eq!(e.source_id().word(), 0x007C_0000);
    assert_eq!(e.status(), Status::EVENT_PARTIAL);
    assert_eq!(e.global_id(), 0x1_2345_6789);
    assert_eq!(e.bc_time_seconds(), 1_700_000_000);
    assert_eq!(e.bc_time_nanoseconds(), 999);
    assert_eq!(e.run_type(), 2);
    assert_eq!(e.run_number(), 1234);
    assert_eq!(e.lumi_block(), 17);
    assert_eq!(e.extended_l1id(), 0x0A00_0042);
    assert_eq!(e.bcid(), 0x123);
    assert_eq!(e.l1_trigger_type(), 0x81);
    assert_eq!(e.compression(), 0);
    assert_eq!(e.uncompressed_size() as usize, r1.len() + r2.len());
    assert_eq!(e.l1_info(), &[1, 2, 3]);
    assert_eq!(e.l2_info(), &[] as &[u32]);
    assert_eq!(e.ef_info(), &[7]);
    let tags: Vec<_> = e.stream_tags().map(Result::unwrap).collect();
    assert_eq!(tags.len(), 2);
    assert_eq!((tags[0].name, tags[0].stream_type), ("Main", "physics"));
    assert_eq!((tags[1].name, tags[1].stream_type), ("Λ", ""));
    let robs: Vec<_> = e.robs().map(Result::unwrap).collect();
    assert_eq!(robs.len(), 2);
    assert_eq!(robs[1].words(), &r2[..]);
    assert_eq!(e.validate_robs().unwrap(), 2);
    e.verify_checksum().unwrap();
}

#[test]
fn corrupt_rob_reported_with_offset_in_event() {
    let r1 = rob(ChecksumType::None, 1);
    let r2 = rob(ChecksumType::None, 2);
    let mut words = event(&[&r1, &r2], ChecksumType::None);
    let e = FullEvent::parse(&words).unwrap();
    let second = e.header_size() + r1.len();
    // Break the second ROB's ROD trailer.
    words[second + r2.len() - 2] += 1;
    let e = FullEvent::parse(&words).unwrap();
    let mut it = e.robs();
    assert!(it.next().unwrap().is_ok());
    let err = it.next().unwrap().unwrap_err();
    assert_eq!(err.kind(), FragmentKind::Rod);
    assert_eq!(err.offset(), second + 8);
    assert!(matches!(err.error(), ErrorKind::RodTrailer { .. }));
    assert!(it.next().is_none());
    // A ROB whose size overruns the event.
    words[second + 1] = 1_000_000;
    let err = FullEvent::parse(&words)
        .unwrap()
        .validate_robs()
        .unwrap_err();
    assert_eq!((err.kind(), err.offset()), (FragmentKind::Rob, second));
    assert!(matches!(err.error(), ErrorKind::Truncated { .. }));
}

#[test]
fn markers_swapped_and_legacy() {
    let words = rob(ChecksumType::None, 1);
    let swapped: Vec<u32> = words.iter().map(|w| w.swap_bytes()).collect();
    let e = RobFragment::parse(&swapped).unwrap_err();
    assert!(matches!(
        e.error(),
        ErrorKind::ByteSwapped {
            expected: ROB_MARKER,
            ..
        }
    ));
    let e = FullEvent::parse(&[LEGACY_ROS_MARKER, 0, 0]).unwrap_err();
    assert!(matches!(e.error(), ErrorKind::UnsupportedLegacy { .. }));
    let e = FullEvent::parse(&words).unwrap_err();
    assert!(matches!(
        e.error(),
        ErrorKind::BadMarker {
            expected: FULL_EVENT_MARKER,
            found: ROB_MARKER
        }
    ));
    assert!(RobFragment::parse(&[]).is_err());
}

#[test]
fn header_errors() {
    let good = rob(ChecksumType::Adler32, 1);
    let mut w = good.clone();
    w[3] = 0x0400_0000;
    assert!(matches!(
        RobFragment::parse(&w).unwrap_err().error(),
        ErrorKind::BadVersion { .. }
    ));
    let mut w = good.clone();
    w[7] = 9;
    let e = RobFragment::parse(&w).unwrap_err();
    assert_eq!(e.word(), Some(7));
    assert!(matches!(
        e.error(),
        ErrorKind::UnknownChecksumType { found: 9 }
    ));
    let mut w = good.clone();
    w[5] = u32::MAX;
    assert!(matches!(
        RobFragment::parse(&w).unwrap_err().error(),
        ErrorKind::BadHeaderSize { .. }
    ));
    let e = RobFragment::parse(&good[..good.len() - 1]).unwrap_err();
    assert!(matches!(e.error(), ErrorKind::Truncated { .. }));
    let mut w = good.clone();
    w[8 + 1] = 10;
    let e = RobFragment::parse(&w).unwrap_err();
    assert_eq!(
        (e.kind(), e.offset(), e.word()),
        (FragmentKind::Rod, 8, Some(9))
    );
    println!("{e}");
}

#[test]
fn compressed_payload_is_not_iterated() {
    let r1 = rob(ChecksumType::None, 1);
    let mut b = EventBuilder {
        compression: 1,
        uncompressed_size: Some(1000),
        robs: &[&r1],
        ..EventBuilder::default()
    };
    let mut w = Vec::new();
    b.write_vec(&mut w).unwrap();
    let e = FullEvent::parse(&w).unwrap();
    assert_eq!(e.uncompressed_size(), 1000);
    assert!(matches!(
        e.validate_robs().unwrap_err().error(),
        ErrorKind::Compressed { compression: 1 }
    ));
    let bad = [StreamTag {
        name: "",
        stream_type: "x",
    }];
    b.stream_tags = &bad;
    assert!(b.size_words().is_err());
}

#[test]
fn an_event_written_around_its_pieces_is_the_event_written_whole() {
    for checksum in [
        ChecksumType::None,
        ChecksumType::Crc16,
        ChecksumType::Adler32,
    ] {
        let r1 = rob(checksum, 1);
        let r2 = rob(ChecksumType::None, 2);
        let robs: [&[u32]; 3] = [&r1, &r2, &r1[..3]];
        let b = EventBuilder {
            source_id: SourceId::new(SubDetector::TDAQ_EVENT_FILTER, 0),
            status: &[Status::EVENT_PARTIAL.word()],
            checksum,
            global_id: 77,
            l1_info: &[1, 2, 3],
            stream_tags: &[StreamTag {
                name: "Main",
                stream_type: "physics",
            }],
            robs: &robs,
            ..EventBuilder::default()
        };
        let mut whole = Vec::new();
        let size = b.write_vec(&mut whole).unwrap();
        let (mut head, mut tail) = (vec![9], vec![9]);
        assert_eq!(b.write_around(&mut head, &mut tail).unwrap(), size);
        let mut gathered = head.clone();
        for p in robs {
            gathered.extend_from_slice(p);
        }
        gathered.extend_from_slice(&tail);
        assert_eq!(gathered, whole, "{checksum:?}");
        assert_eq!(
            tail.len(),
            usize::from(checksum != ChecksumType::None),
            "{checksum:?}"
        );
    }
}
