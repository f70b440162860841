//! The fragment builder on bad input: missing packets (window move and timeout), duplicates,
//! late packets, BCID disagreement, corrupt and lost blocks, a stopping sink, bad configurations.
//! Every fault is flagged where the issue says and counted; good packets still land exactly once.

mod swrod_common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rodeo_format::felix::check_packet;
use rodeo_format::fragment::Status;
use rodeo_swrod::{DefaultFormat, FragmentBuilder, SwRodConfig, SwRodCounters, SwRodError};
use swrod_common::*;

const LOST: Status = Status(Status::TIMEOUT.0 | Status::ROB_FRAGMENT_LOST.0);

/// Checks that no packet appears twice and every packet is intact; returns (E-link, L1ID) counts.
fn census(seen: &[Seen]) -> HashMap<(u16, u32), u32> {
    let mut count = HashMap::new();
    for f in seen {
        for (elink, st, bytes) in &f.packets {
            assert_eq!(*st, 0, "packet status in {f:?}");
            let h = check_packet(*elink, bytes).expect("intact packet");
            assert_eq!(h.l1id, f.l1id);
            *count.entry((*elink, h.l1id)).or_insert(0) += 1;
        }
    }
    assert!(count.values().all(|&n| n == 1), "a packet landed twice");
    count
}

fn one_per_l1id(seen: &[Seen], events: u32) -> HashMap<u32, Seen> {
    let by: HashMap<u32, Seen> = seen.iter().map(|f| (f.l1id, f.clone())).collect();
    assert_eq!(by.len(), seen.len(), "two fragments for one L1ID");
    assert_eq!(by.len() as u32, events);
    by
}

#[test]
fn missing_packet_is_built_when_the_window_moves_past_it() {
    const EVENTS: u32 = 700;
    let elinks = [1u16, 2, 3];
    let config = SwRodConfig {
        thread_elinks: vec![elinks.to_vec()],
        window: 512,
        timeout: Duration::from_secs(3600),
        ..SwRodConfig::default()
    };
    let mut s = Stream::new(&elinks);
    for n in 0..EVENTS {
        for i in 0..3 {
            if !(n == 10 && i == 2) {
                s.packet(i, n, 5, 40);
            }
        }
    }
    s.flush();
    let rec = Recorder::default();
    let c = run_streams(
        &config,
        vec![player(&s)],
        &[0],
        &rec,
        4096,
        &AtomicBool::new(false),
    );
    let seen = rec.seen.into_inner().unwrap();
    let by = one_per_l1id(&seen, EVENTS);
    let f = &by[&10];
    assert_eq!(f.status, LOST, "{f:?}");
    assert_eq!(f.missing, vec![3]);
    assert_eq!(f.packets.len(), 2);
    assert!(by.iter().all(|(&l, f)| l == 10 || f.status == Status::OK));
    assert_eq!(census(&seen).len(), 3 * EVENTS as usize - 1);
    assert!(c.window_moves >= 1, "{c:?}");
    assert_eq!(
        (c.timeouts, c.incomplete_fragments, c.missing_packets),
        (0, 1, 1),
        "{c:?}"
    );
}

#[test]
fn missing_packet_is_built_at_its_timeout() {
    let elinks = [1u16, 2];
    let config = SwRodConfig {
        thread_elinks: vec![elinks.to_vec()],
        timeout: Duration::from_millis(50),
        ..SwRodConfig::default()
    };
    let mut s = Stream::new(&elinks);
    for n in 0..20u32 {
        s.packet(0, n, 5, 3);
        if n != 19 {
            s.packet(1, n, 5, 3);
        }
    }
    s.flush();
    // The link stays up (empty blocks of E-link 1), so only the timeout can build L1ID 19.
    let idle = s.empty_block(0);
    let p = Player {
        data: s.bytes(),
        pos: 0,
        idle: Some(idle),
    };
    let rec = Recorder::default();
    let stop = AtomicBool::new(false);
    let c = std::thread::scope(|scope| {
        scope.spawn(|| {
            rodeo_testkit::holds_within(Duration::from_secs(30), || {
                rec.seen.lock().unwrap().len() >= 20
            });
            stop.store(true, Ordering::Relaxed);
        });
        run_streams(&config, vec![p], &[0], &rec, 4096, &stop)
    });
    let seen = rec.seen.into_inner().unwrap();
    let by = one_per_l1id(&seen, 20);
    assert_eq!(by[&19].status, LOST);
    assert_eq!(by[&19].missing, vec![2]);
    assert_eq!(c.timeouts, 1, "{c:?}");
    assert_eq!((c.window_moves, c.end_of_run_parts), (0, 0), "{c:?}");
    assert!(c.blocks > 10, "the idle link kept sending: {c:?}");
    assert_eq!(census(&seen).len(), 39);
}

/// Two threads; thread 1 never gets a packet of the last L1ID (its only E-link's is lost) while
/// both links stay up: thread 1 must close that event on the timeout, counting from when it saw
/// thread 0's completion mark, and the fragment lists thread 1's E-link as missing.
#[test]
fn two_threads_one_without_any_packet_times_out() {
    let config = SwRodConfig {
        thread_elinks: vec![vec![1], vec![2]],
        timeout: Duration::from_millis(50),
        ..SwRodConfig::default()
    };
    let mut a = Stream::new(&[1]);
    let mut b = Stream::new(&[2]);
    for n in 0..20u32 {
        a.packet(0, n, 5, 3);
        if n != 19 {
            b.packet(0, n, 5, 3);
        }
    }
    a.flush();
    b.flush();
    let idle_a = a.empty_block(0);
    let idle_b = b.empty_block(0);
    let players = vec![
        Player {
            data: a.bytes(),
            pos: 0,
            idle: Some(idle_a),
        },
        Player {
            data: b.bytes(),
            pos: 0,
            idle: Some(idle_b),
        },
    ];
    let rec = Recorder::default();
    let stop = AtomicBool::new(false);
    let c = std::thread::scope(|scope| {
        scope.spawn(|| {
            rodeo_testkit::holds_within(Duration::from_secs(30), || {
                rec.seen.lock().unwrap().len() >= 20
            });
            stop.store(true, Ordering::Relaxed);
        });
        run_streams(&config, players, &[0, 1], &rec, 4096, &stop)
    });
    let seen = rec.seen.into_inner().unwrap();
    let by = one_per_l1id(&seen, 20);
    assert_eq!(by[&19].status, LOST);
    assert_eq!(by[&19].missing, vec![2]);
    assert!(by.iter().all(|(&l1, f)| l1 == 19 || f.status.is_ok()));
    assert_eq!(c.timeouts, 1, "{c:?}");
    assert_eq!((c.window_moves, c.end_of_run_parts), (0, 0), "{c:?}");
    assert_eq!(census(&seen).len(), 39);
}

/// Builds `s` on one thread with `config` and checks that each of `events` L1IDs came out
/// once, whole and OK, with its two packets (each packet once, intact); returns the counters.
fn two_elinks_built_whole(config: &SwRodConfig, s: &Stream, events: u32) -> SwRodCounters {
    let rec = Recorder::default();
    let c = run_streams(
        config,
        vec![player(s)],
        &[0],
        &rec,
        4096,
        &AtomicBool::new(false),
    );
    let seen = rec.seen.into_inner().unwrap();
    let by = one_per_l1id(&seen, events);
    assert!(by
        .values()
        .all(|f| f.status == Status::OK && f.packets.len() == 2));
    assert_eq!(census(&seen).len(), 2 * events as usize);
    c
}

#[test]
fn duplicate_and_late_packets_are_dropped_and_counted() {
    let elinks = [1u16, 2];
    let config = SwRodConfig {
        thread_elinks: vec![elinks.to_vec()],
        cpus: vec![0],
        ..SwRodConfig::default()
    };
    let mut s = Stream::new(&elinks);
    for n in 0..10u32 {
        s.packet(0, n, 5, 2);
        if n == 5 {
            s.packet(0, n, 5, 2); // duplicate, while L1ID 5 waits for E-link 2
        }
        s.packet(1, n, 5, 2);
    }
    s.flush(); // E-link 1's block first, then E-link 2's
    s.packet(0, 2, 5, 2); // late: L1ID 2 is built by now
    s.flush();
    let c = two_elinks_built_whole(&config, &s, 10);
    assert_eq!((c.duplicate_packets, c.late_packets), (1, 1), "{c:?}");
    assert_eq!(c.packets, 20);
    assert_eq!(c.pin_failures, 0, "pinning to CPU 0 failed");
}

#[test]
fn bcid_disagreement_sets_bcid_check_fail() {
    // Thread 0 has E-links 1 and 2 (they disagree at L1ID 3), thread 1 has E-link 3 (it
    // disagrees with thread 0 at L1ID 6).
    let config = SwRodConfig {
        thread_elinks: vec![vec![1, 2], vec![3]],
        ..SwRodConfig::default()
    };
    let mut a = Stream::new(&[1, 2]);
    let mut b = Stream::new(&[3]);
    for n in 0..10u32 {
        a.packet(0, n, 100, 4);
        a.packet(1, n, if n == 3 { 101 } else { 100 }, 4);
        b.packet(0, n, if n == 6 { 102 } else { 100 }, 4);
    }
    a.flush();
    b.flush();
    let rec = Recorder::default();
    let c = run_streams(
        &config,
        vec![player(&a), player(&b)],
        &[0, 1],
        &rec,
        4096,
        &AtomicBool::new(false),
    );
    let seen = rec.seen.into_inner().unwrap();
    let by = one_per_l1id(&seen, 10);
    for (l1, f) in &by {
        let want = if *l1 == 3 || *l1 == 6 {
            Status::BCID_CHECK_FAIL
        } else {
            Status::OK
        };
        assert_eq!(f.status, want, "L1ID {l1}");
        assert_eq!(f.packets.len(), 3);
    }
    assert_eq!(c.bcid_mismatches, 2, "{c:?}");
    assert_eq!(census(&seen).len(), 30);
}

#[test]
fn corrupt_and_lost_blocks_never_derail_other_elinks() {
    let elinks = [1u16, 2, 3];
    let config = SwRodConfig {
        thread_elinks: vec![elinks.to_vec()],
        ..SwRodConfig::default()
    };
    let mut s = Stream::new(&elinks);
    for n in 0..60u32 {
        for i in 0..3 {
            s.packet(i, n, 9, 60);
        }
    }
    s.flush();
    let elink_of = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]) & 0x7FF;
    let mut blocks = std::mem::take(&mut s.blocks);
    // Damage E-link 2's fourth block: its last trailer claims more bytes than the block holds.
    let i2 = blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| elink_of(b) == 2)
        .nth(3)
        .unwrap()
        .0;
    let b = &mut blocks[i2];
    let mut end = BLOCK;
    while u32::from_le_bytes(b[end - 4..end].try_into().unwrap()) == 0 {
        end -= 4;
    }
    b[end - 4..end].copy_from_slice(&((3u32 << 29) | 0xFFFF).to_le_bytes());
    // Lose E-link 3's sixth block.
    let i3 = blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| elink_of(b) == 3)
        .nth(5)
        .unwrap()
        .0;
    blocks.remove(i3);
    // A block with a bad marker and a block of an E-link nobody reads.
    let mut bad = blocks[0].clone();
    bad[2..4].copy_from_slice(&0x1234u16.to_le_bytes());
    blocks.insert(7, bad);
    let mut foreign = blocks[1].clone();
    foreign[..2].copy_from_slice(&0x99u16.to_le_bytes());
    blocks.insert(9, foreign);
    s.blocks = blocks;
    let rec = Recorder::default();
    let c = run_streams(
        &config,
        vec![player(&s)],
        &[0],
        &rec,
        4096,
        &AtomicBool::new(false),
    );
    let seen = rec.seen.into_inner().unwrap();
    let by = one_per_l1id(&seen, 60);
    let count = census(&seen);
    // E-link 1 is untouched: every one of its packets is there.
    assert!((0..60).all(|n| count.get(&(1, n)) == Some(&1)));
    let mut incomplete = 0;
    for f in by.values() {
        if f.status == Status::OK {
            assert_eq!(f.packets.len(), 3);
            continue;
        }
        incomplete += 1;
        assert!(f.status.contains(LOST), "{f:?}");
        assert!(
            !f.missing.is_empty() && f.missing.iter().all(|&e| e == 2 || e == 3),
            "{f:?}"
        );
        assert_eq!(f.packets.len() + f.missing.len(), 3);
    }
    assert!(incomplete > 0 && incomplete < 20, "{incomplete} incomplete");
    assert_eq!(
        (
            c.bad_blocks,
            c.foreign_blocks,
            c.damaged_blocks,
            c.block_gaps
        ),
        (1, 1, 1, 1),
        "{c:?}"
    );
    assert_eq!(c.lost_blocks, 1);
    assert_eq!(c.incomplete_fragments, incomplete);
    assert_eq!(c.packets + c.missing_packets, 180, "{c:?}");
}

#[test]
fn a_sink_can_stop_the_run() {
    let elinks = [1u16];
    let config = SwRodConfig {
        thread_elinks: vec![elinks.to_vec()],
        ..SwRodConfig::default()
    };
    let mut s = Stream::new(&elinks);
    for n in 0..50u32 {
        s.packet(0, n, 1, 1);
    }
    s.flush();
    let idle = s.empty_block(0);
    let p = Player {
        data: s.bytes(),
        pos: 0,
        idle: Some(idle), // the link never ends by itself
    };
    let rec = Recorder {
        stop_after: Some(5),
        ..Recorder::default()
    };
    let c = run_streams(&config, vec![p], &[0], &rec, 4096, &AtomicBool::new(false));
    let seen = rec.seen.into_inner().unwrap();
    assert!(seen.len() >= 5);
    assert_eq!(c.fragments, seen.len() as u64);
    census(&seen);
}

#[test]
fn bad_configurations_are_typed_errors() {
    let pool = pool(4096);
    let check = |config: SwRodConfig| {
        assert!(matches!(
            FragmentBuilder::new(
                &config,
                std::slice::from_ref(&pool),
                DefaultFormat::default()
            ),
            Err(SwRodError::Config(_))
        ));
    };
    check(SwRodConfig {
        thread_elinks: vec![],
        ..SwRodConfig::default()
    });
    check(SwRodConfig {
        thread_elinks: vec![vec![1, 2], vec![2]],
        ..SwRodConfig::default()
    });
    check(SwRodConfig {
        thread_elinks: vec![vec![0x800]],
        ..SwRodConfig::default()
    });
    check(SwRodConfig {
        window: 1000,
        ..SwRodConfig::default()
    });
    check(SwRodConfig {
        window: 256,
        ..SwRodConfig::default()
    });
    check(SwRodConfig {
        l1id_wrap: 0,
        ..SwRodConfig::default()
    });
    check(SwRodConfig {
        felix_block_bytes: 1000,
        ..SwRodConfig::default()
    });
    check(SwRodConfig {
        thread_elinks: vec![(0..1500).collect()],
        ..SwRodConfig::default()
    });
    let builder = FragmentBuilder::new(
        &SwRodConfig::default(),
        std::slice::from_ref(&pool),
        DefaultFormat::default(),
    )
    .unwrap();
    assert!(matches!(
        FragmentBuilder::new(&SwRodConfig::default(), &[], DefaultFormat::default()),
        Err(SwRodError::Config(_))
    ));
    let none: Vec<Vec<&rodeo_cards::dma::EmulatedChannel<Vec<u8>>>> = Vec::new();
    assert!(matches!(
        builder.run(&none, &Recorder::default(), &AtomicBool::new(false)),
        Err(SwRodError::Inputs { .. })
    ));
}

/// A packet whose L1ID has a flipped ECR bit lies a billion events ahead: it moved the window
/// that far, one empty event at a time, and every real packet after it was late. Further than
/// any loss of data, it is counted corrupt and dropped, and the ROB's events are built whole.
#[test]
fn a_packet_a_billion_events_ahead_is_corrupt_not_a_window_move() {
    let elinks = [1u16, 2];
    let config = SwRodConfig {
        thread_elinks: vec![elinks.to_vec()],
        ..SwRodConfig::default()
    };
    let mut s = Stream::new(&elinks);
    for n in 0..20u32 {
        if n == 10 {
            s.packet(0, 0x4000_0000 | n, 5, 2);
        }
        s.packet(0, n, 5, 2);
        s.packet(1, n, 5, 2);
    }
    s.flush();
    let c = two_elinks_built_whole(&config, &s, 20);
    assert_eq!(
        (c.corrupt_packets, c.window_moves, c.late_packets),
        (1, 0, 0),
        "{c:?}"
    );
    assert_eq!(c.packets, 40);
}

/// Subchunks that are not packets (out-of-band, the reserved type) are skipped, as the FELIX
/// rules say, and counted where the node's metrics read them (they were counted only inside
/// the E-link's reassembler, which no metric reads); the packets around them are built whole.
#[test]
fn skipped_subchunks_are_counted_in_the_builders_counters() {
    use rodeo_format::felix::{SubchunkType, Trailer, TrailerFlags, TrailerSize};
    let elinks = [1u16, 2];
    let config = SwRodConfig {
        thread_elinks: vec![elinks.to_vec()],
        ..SwRodConfig::default()
    };
    let mut s = Stream::new(&elinks);
    let send = |s: &mut Stream, events: std::ops::Range<u32>| {
        for n in events {
            s.packet(0, n, 5, 2);
            s.packet(1, n, 5, 2);
        }
        s.flush();
    };
    send(&mut s, 0..5);
    for kind in [SubchunkType::OutOfBand, SubchunkType::Reserved] {
        // An E-link's block with one 16-byte subchunk of `kind` at its end.
        let mut b = s.empty_block(0);
        let t = TrailerSize::Bits32.encode(Trailer {
            kind,
            length: 16,
            flags: TrailerFlags::NONE,
        });
        b[BLOCK - 20..BLOCK - 4].fill(0xAB);
        b[BLOCK - 4..].copy_from_slice(&t.to_le_bytes());
        s.blocks.push(b);
    }
    send(&mut s, 5..10);
    let c = two_elinks_built_whole(&config, &s, 10);
    assert_eq!(
        (c.out_of_band_subchunks, c.reserved_subchunks),
        (1, 1),
        "{c:?}"
    );
    assert_eq!((c.corrupt_packets, c.sequence_errors), (0, 0), "{c:?}");
}
