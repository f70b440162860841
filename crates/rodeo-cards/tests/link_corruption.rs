//! Corrupted link streams (every error kind of links.md, injected by the `Corruptor`) recorded to
//! link files, replayed by the file-player channel into pool superpages, and decoded by the
//! receiving side's decoders: every injected error is counted under its kind, nothing panics,
//! and the clean units still decode.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_cards::corrupt::{CorruptionKind, Corruptor, StreamShape, UnitSource};
use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig, Generator};
use rodeo_cards::generator::{FelixConfig, FelixGenerator, SlinkConfig, SlinkGenerator, WordRange};
use rodeo_cards::monitor::LinkMonitor;
use rodeo_cards::player::FilePlayer;
use rodeo_files::linkfile::{LinkFile, LinkFileHeader, LinkFileWriter, LinkMode};
use rodeo_format::felix::TrailerSize;
use rodeo_format::slink::SlinkCheckConfig;
use rodeo_memory::{RegionOptions, SuperpagePool, SuperpagePoolConfig};

const UNITS: u64 = 6_000;

/// Records `UNITS` units of `source`, corrupting a fraction, into a link file.
fn record<G: Generator>(
    dir: &std::path::Path,
    header: LinkFileHeader,
    shape: StreamShape,
    mut source: UnitSource<G>,
    fraction: f64,
) -> (Arc<LinkFile>, Corruptor) {
    let path = dir.join("stream.rlnk");
    let mut w = LinkFileWriter::create(&path, &header).unwrap();
    let mut c = Corruptor::new(shape, fraction, 42);
    for _ in 0..UNITS {
        let unit = source.next_unit().expect("generator runs forever");
        c.process(unit, |u| w.write_unit(u).unwrap());
    }
    w.finish().unwrap();
    (Arc::new(LinkFile::read(&path).unwrap()), c)
}

/// Plays the file once through a channel into 64 KiB pool superpages; monitors the output.
fn play(file: Arc<LinkFile>, mut monitor: LinkMonitor) -> LinkMonitor {
    let pool = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes: 64 * 1024,
        superpages: 4,
        region: RegionOptions::default(),
    })
    .unwrap();
    let units = file.units();
    let ch = EmulatedChannel::start(
        "player",
        EmulatedConfig {
            queue_depth: 4,
            ..EmulatedConfig::default()
        },
        FilePlayer::new(file, false).unwrap(),
    )
    .unwrap();
    while let Ok(sp) = pool.alloc() {
        ch.push_superpage(sp).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    while seen < units {
        assert!(
            Instant::now() < deadline,
            "player stalled: {:?}",
            ch.status()
        );
        let filled = rodeo_testkit::wait_for(
            "the player's next superpage",
            deadline.saturating_duration_since(Instant::now()),
            || ch.pop_superpage(),
        );
        seen += filled.units;
        monitor.consume(filled.data());
        ch.push_superpage(filled.superpage).unwrap();
    }
    assert_eq!(seen, units);
    monitor
}

fn count(monitor: &LinkMonitor, name: &str) -> u64 {
    monitor
        .counts()
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, v)| v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

fn slink(framing: bool, crc: bool) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SlinkConfig {
        framing,
        crc,
        data_words: WordRange::uniform(8, 400),
        l1id_wrap: 1000,
        ..SlinkConfig::default()
    };
    let shape = StreamShape {
        mode: LinkMode::Slink,
        framing,
        crc,
        block_size: 0,
        trailer: TrailerSize::Bits32,
    };
    let header = LinkFileHeader {
        mode: LinkMode::Slink,
        block_size: 0,
        framing,
        crc,
        l1id_wrap: cfg.l1id_wrap,
    };
    let max = 4 * cfg.fragment_words(400);
    let (file, c) = record(
        dir.path(),
        header,
        shape,
        UnitSource::new(SlinkGenerator::new(cfg), max),
        0.05,
    );
    let check = SlinkCheckConfig {
        framing,
        crc,
        l1id_wrap: cfg.l1id_wrap,
    };
    // The whole stream at once: every kind is counted exactly.
    let mut whole = LinkMonitor::slink(check);
    let bytes: Vec<u8> = file.iter().flatten().copied().collect();
    whole.consume(&bytes);
    // Through the player channel, superpage by superpage: a fragment cut by a superpage end
    // (missing end word) may also count as truncated, so counts are at least the injected ones.
    let played = play(Arc::clone(&file), LinkMonitor::slink(check));

    use CorruptionKind::*;
    let n = |k| c.injected(k);
    for k in c.kinds() {
        assert!(n(*k) > 0, "{k:?} never injected");
    }
    // (counter, exact count over the whole stream, lower bound when played superpage by
    // superpage).
    let expect: Vec<(&str, u64, u64)> = if framing {
        let crc_errors = if crc { n(CrcError) } else { 0 };
        vec![
            ("missing_begin", n(MissingBegin), n(MissingBegin)),
            ("missing_end", n(MissingEnd), n(MissingEnd)),
            ("bad_markers", n(BadMarker), n(BadMarker)),
            ("format_errors", n(SizeMismatch), n(SizeMismatch)),
            ("short_fragments", n(Short), n(Short)),
            ("crc_errors", crc_errors, crc_errors),
            ("duplicates", n(Duplicate), n(Duplicate)),
            (
                "l1id_sequence_errors",
                n(Lost) + n(Short),
                n(Lost) + n(Short),
            ),
            ("garbage_spans", n(Garbage), n(Garbage)),
        ]
    } else {
        // Unframed, a bad marker or garbage merges into the previous fragment: a size error
        // (and a CRC error, the CRC word being misplaced). At the head of a superpage there is
        // no previous fragment: it is dropped as garbage there instead.
        let merged = n(BadMarker) + n(Garbage);
        let crc_errors = if crc { n(CrcError) } else { 0 };
        vec![
            ("format_errors", n(SizeMismatch) + merged, n(SizeMismatch)),
            ("short_fragments", n(Short), n(Short)),
            (
                "crc_errors",
                crc_errors + if crc { merged } else { 0 },
                crc_errors,
            ),
            ("duplicates", n(Duplicate), n(Duplicate)),
            // A merged bad-marker fragment's L1ID is never seen: the next one is out of sequence.
            (
                "l1id_sequence_errors",
                n(Lost) + n(Short) + n(BadMarker),
                n(Lost) + n(Short),
            ),
        ]
    };
    for (name, exact, at_least) in &expect {
        assert_eq!(count(&whole, name), *exact, "{name} (whole stream)");
        assert!(count(&played, name) >= *at_least, "{name} (played)");
    }
    if !framing {
        let merged = n(BadMarker) + n(Garbage);
        let played_merged = count(&played, "format_errors") + count(&played, "garbage_spans");
        assert!(played_merged >= n(SizeMismatch) + merged);
    }
    // Every fragment without an injected error decodes with a good counter payload.
    let corrupted: u64 = c.report().iter().map(|(_, v)| v).sum();
    assert!(
        whole.good() >= UNITS - 2 * corrupted,
        "good {}",
        whole.good()
    );
    assert_eq!(count(&whole, "undecodable_bytes"), 0);
}

#[test]
fn slink_framed_with_crc_counts_every_kind() {
    slink(true, true);
}

#[test]
fn slink_framed_counts_every_kind() {
    slink(true, false);
}

#[test]
fn slink_unframed_with_crc_counts_every_kind() {
    slink(false, true);
}

#[test]
fn felix_counts_every_kind() {
    for trailer in [TrailerSize::Bits32, TrailerSize::Bits16] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = FelixConfig {
            elinks: vec![0, 1, 2, 0x41, 0x7FF],
            payload_words: WordRange::uniform(0, 150),
            trailer,
            ..FelixConfig::default()
        };
        let shape = StreamShape {
            mode: LinkMode::Felix,
            framing: false,
            crc: false,
            block_size: cfg.block_size,
            trailer,
        };
        let header = LinkFileHeader {
            mode: LinkMode::Felix,
            block_size: cfg.block_size as u32,
            framing: false,
            crc: false,
            l1id_wrap: cfg.l1id_wrap,
        };
        let gen = FelixGenerator::new(&cfg).unwrap();
        let (file, c) = record(
            dir.path(),
            header,
            shape,
            UnitSource::new(gen, cfg.block_size),
            0.05,
        );
        let played = play(file, LinkMonitor::felix(cfg.block_size));
        use CorruptionKind::*;
        let n = |k| c.injected(k);
        for k in c.kinds() {
            assert!(n(*k) > 0, "{k:?} never injected");
        }
        let at_least = [
            ("bad_blocks", n(BadBlockHeader) + n(GarbageBlock)),
            ("block_gaps", n(LostBlock)),
            ("damaged_blocks", n(DamagedTrailer)),
            ("crc_errors", n(CrcFlag)),
            ("errors", n(ErrorFlag)),
            ("truncations", n(Truncation)),
            ("timeouts", n(Truncation)),
            ("sequence_errors", n(OrphanMiddle)),
        ];
        for (name, value) in at_least {
            assert!(
                count(&played, name) >= value,
                "{trailer:?} {name}: counted {} < injected {value}",
                count(&played, name)
            );
        }
        // Flags are counted once per flagged subchunk: exact.
        assert_eq!(count(&played, "crc_errors"), n(CrcFlag));
        assert_eq!(count(&played, "errors"), n(ErrorFlag));
        assert!(played.good() > 0 && played.bad() > 0);
    }
}
