//! Property tests: random fragments round-trip through builder -> parse -> accessors; random
//! mutations never panic; a flipped payload bit is caught by the checksum.

use proptest::prelude::*;
use rodeo_format::checksum::ChecksumType;
use rodeo_format::fragment::*;

#[derive(Debug, Clone)]
struct RobSpec {
    source: u32,
    rob_status: Vec<u32>,
    checksum: ChecksumType,
    run: u32,
    l1id: u32,
    bcid: u16,
    tt: u8,
    det: u32,
    rod_status: Vec<u32>,
    after: bool,
    data: Vec<u32>,
    split: usize,
}

#[derive(Debug, Clone)]
struct EventSpec {
    status: Vec<u32>,
    checksum: ChecksumType,
    fixed: [u32; 9],
    global_id: u64,
    l1: Vec<u32>,
    l2: Vec<u32>,
    ef: Vec<u32>,
    tags: Vec<(String, String)>,
    robs: Vec<RobSpec>,
}

fn checksum_type() -> impl Strategy<Value = ChecksumType> {
    prop_oneof![
        Just(ChecksumType::None),
        Just(ChecksumType::Crc16),
        Just(ChecksumType::Adler32)
    ]
}

fn rob_spec() -> impl Strategy<Value = RobSpec> {
    (
        (
            any::<u32>(),
            prop::collection::vec(any::<u32>(), 0..3),
            checksum_type(),
        ),
        (
            any::<u32>(),
            any::<u32>(),
            0..0x1000u16,
            any::<u8>(),
            any::<u32>(),
        ),
        (prop::collection::vec(any::<u32>(), 0..4), any::<bool>()),
        (prop::collection::vec(any::<u32>(), 0..64), any::<usize>()),
    )
        .prop_map(
            |(
                (source, rob_status, checksum),
                (run, l1id, bcid, tt, det),
                (rod_status, after),
                (data, split),
            )| {
                let split = if data.is_empty() {
                    0
                } else {
                    split % (data.len() + 1)
                };
                RobSpec {
                    source,
                    rob_status,
                    checksum,
                    run,
                    l1id,
                    bcid,
                    tt,
                    det,
                    rod_status,
                    after,
                    data,
                    split,
                }
            },
        )
}

fn event_spec() -> impl Strategy<Value = EventSpec> {
    let list = || prop::collection::vec(any::<u32>(), 0..4);
    (
        (
            prop::collection::vec(any::<u32>(), 0..3),
            checksum_type(),
            any::<[u32; 9]>(),
            any::<u64>(),
        ),
        (list(), list(), list()),
        prop::collection::vec(("[a-zA-Z0-9_é]{1,12}", "[a-z]{0,8}"), 0..4),
        prop::collection::vec(rob_spec(), 0..6),
    )
        .prop_map(
            |((status, checksum, fixed, global_id), (l1, l2, ef), tags, robs)| EventSpec {
                status,
                checksum,
                fixed,
                global_id,
                l1,
                l2,
                ef,
                tags,
                robs,
            },
        )
}

fn build_rob(s: &RobSpec) -> Vec<u32> {
    let pieces: [&[u32]; 2] = [&s.data[..s.split], &s.data[s.split..]];
    let b = RobBuilder {
        source_id: SourceId(s.source),
        status: &s.rob_status,
        checksum: s.checksum,
        payload: RobPayload::Rod(RodBuilder {
            source_id: SourceId(s.source),
            minor_version: 0,
            run_number: s.run,
            extended_l1id: s.l1id,
            bcid: s.bcid,
            trigger_type: s.tt,
            detector_event_type: s.det,
            status: &s.rod_status,
            status_position: if s.after {
                StatusPosition::AfterData
            } else {
                StatusPosition::BeforeData
            },
            data: &pieces,
        }),
    };
    let mut out = Vec::new();
    let n = b.write_vec(&mut out).unwrap();
    assert_eq!(n, b.size_words().unwrap());
    out
}

fn build_event(s: &EventSpec) -> Vec<u32> {
    let robs: Vec<Vec<u32>> = s.robs.iter().map(build_rob).collect();
    let pieces: Vec<&[u32]> = robs.iter().map(Vec::as_slice).collect();
    let tags: Vec<StreamTag<'_>> = s
        .tags
        .iter()
        .map(|(n, t)| StreamTag {
            name: n,
            stream_type: t,
        })
        .collect();
    let f = s.fixed;
    let b = EventBuilder {
        source_id: SourceId(0x007C_0000),
        status: &s.status,
        checksum: s.checksum,
        bc_time_seconds: f[0],
        bc_time_nanoseconds: f[1],
        global_id: s.global_id,
        run_type: f[2],
        run_number: f[3],
        lumi_block: f[4],
        extended_l1id: f[5],
        bcid: f[6],
        l1_trigger_type: f[7],
        compression: 0,
        uncompressed_size: Some(f[8]),
        l1_info: &s.l1,
        l2_info: &s.l2,
        ef_info: &s.ef,
        stream_tags: &tags,
        robs: &pieces,
    };
    let mut out = vec![0; b.size_words().unwrap()];
    b.write_slice(&mut out).unwrap();
    out
}

fn check_rob(r: &RobFragment<'_>, s: &RobSpec) {
    assert_eq!(r.source_id().word(), s.source);
    assert_eq!(r.status_words(), &s.rob_status[..]);
    assert_eq!(r.checksum_type(), s.checksum);
    r.verify_checksum().unwrap();
    let rod = r.rod();
    assert_eq!(rod.run_number(), s.run);
    assert_eq!(rod.extended_l1id(), s.l1id);
    assert_eq!(rod.bcid(), s.bcid);
    assert_eq!(rod.trigger_type(), s.tt);
    assert_eq!(rod.detector_event_type(), s.det);
    assert_eq!(rod.status_words(), &s.rod_status[..]);
    assert_eq!(rod.data(), &s.data[..]);
}

/// Exercises every accessor of whatever parses; must never panic.
fn touch(words: &[u32]) {
    if let Ok(e) = FullEvent::parse(words) {
        let _ = (
            e.global_id(),
            e.l1_info(),
            e.l2_info(),
            e.ef_info(),
            e.payload(),
        );
        for t in e.stream_tags() {
            let _ = t;
        }
        for r in e.robs().flatten() {
            let _ = (r.rod().data(), r.rod().status_words(), r.verify_checksum());
        }
        let _ = e.verify_checksum();
    }
    if let Ok(r) = RobFragment::parse(words) {
        let _ = (r.rod().data(), r.rod().status_words(), r.verify_checksum());
    }
    if let Ok(r) = RodFragment::parse(words) {
        let _ = (r.data(), r.status_words());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn event_round_trip(s in event_spec()) {
        let words = build_event(&s);
        let e = FullEvent::parse(&words).unwrap();
        prop_assert_eq!(e.size_words(), words.len());
        prop_assert_eq!(e.status_words(), &s.status[..]);
        prop_assert_eq!(e.checksum_type(), s.checksum);
        let f = s.fixed;
        prop_assert_eq!(
            [e.bc_time_seconds(), e.bc_time_nanoseconds(), e.run_type(), e.run_number(), e.lumi_block(),
             e.extended_l1id(), e.bcid(), e.l1_trigger_type(), e.uncompressed_size()],
            f
        );
        prop_assert_eq!(e.global_id(), s.global_id);
        prop_assert_eq!(e.l1_info(), &s.l1[..]);
        prop_assert_eq!(e.l2_info(), &s.l2[..]);
        prop_assert_eq!(e.ef_info(), &s.ef[..]);
        let tags: Vec<(String, String)> = e
            .stream_tags()
            .map(|t| t.map(|t| (t.name.to_owned(), t.stream_type.to_owned())))
            .collect::<Result<_, _>>()
            .unwrap();
        prop_assert_eq!(tags, s.tags.clone());
        let robs: Vec<RobFragment<'_>> = e.robs().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(robs.len(), s.robs.len());
        for (r, spec) in robs.iter().zip(&s.robs) {
            check_rob(r, spec);
        }
        e.verify_checksum().unwrap();
    }

    #[test]
    fn mutations_never_panic(
        s in event_spec(),
        edits in prop::collection::vec((any::<usize>(), any::<u32>(), 0..3u8), 1..6),
        cut in any::<usize>(),
    ) {
        let mut words = build_event(&s);
        for (at, value, how) in edits {
            let i = at % words.len();
            match how {
                0 => words[i] ^= 1 << (value % 32),
                1 => words[i] = value,
                _ => words[i] = value % 64,
            }
        }
        touch(&words);
        let cut = cut % (words.len() + 1);
        touch(&words[..cut]);
        touch(&words[cut..]);
    }

    #[test]
    fn garbage_never_panics(words in prop::collection::vec(
        prop_oneof![any::<u32>(), 0..40u32, Just(FULL_EVENT_MARKER), Just(ROB_MARKER), Just(ROD_MARKER), Just(FORMAT_VERSION), Just(ROD_FORMAT_VERSION)],
        0..200,
    )) {
        touch(&words);
    }

    #[test]
    fn flipped_payload_bit_is_caught(s in rob_spec(), at in any::<usize>(), bit in 0..32u32) {
        prop_assume!(s.checksum != ChecksumType::None);
        let mut words = build_rob(&s);
        let (start, end) = {
            let r = RobFragment::parse(&words).unwrap();
            (r.header_size(), r.size_words() - 1)
        };
        let i = start + at % (end - start);
        words[i] ^= 1 << bit;
        // The flip may break the ROD trailer (a parse error) or not (a checksum error): either way
        // it is caught.
        if let Ok(r) = RobFragment::parse(&words) {
            let e = r.verify_checksum().unwrap_err();
            let is_mismatch = matches!(e.error(), ErrorKind::ChecksumMismatch { .. });
            prop_assert!(is_mismatch);
        }
    }

    #[test]
    fn flipped_event_payload_bit_is_caught(s in event_spec(), at in any::<usize>(), bit in 0..32u32) {
        prop_assume!(s.checksum != ChecksumType::None && !s.robs.is_empty());
        let mut words = build_event(&s);
        let (start, end) = {
            let e = FullEvent::parse(&words).unwrap();
            (e.header_size(), e.size_words() - 1)
        };
        words[start + at % (end - start)] ^= 1 << bit;
        let e = FullEvent::parse(&words).unwrap();
        prop_assert!(e.verify_checksum().is_err());
    }
}
