//! The fragment builder on good input: every packet lands in exactly one fragment, in E-link
//! order, with the right L1ID across L1ID wraps, with 1 and 2 receiving threads.

mod swrod_common;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

use rodeo_cards::generator::L1idCounter;
use rodeo_format::felix::check_packet;
use rodeo_format::fragment::Status;
use rodeo_swrod::{SwRodConfig, SwRodCounters};
use swrod_common::*;

const EVENTS: u64 = 1500;
const WRAP: u32 = 400;

fn sizes(elink: u16, n: u64) -> u32 {
    // Sizes from 0 to ~300 words: some packets fill blocks, some split into FIRST/MIDDLE/LAST.
    ((u64::from(elink) * 7919 + n * 104_729) % 301) as u32
}

/// Builds `threads` streams, one per group of E-links, and checks every fragment.
fn build_and_check(
    groups: Vec<Vec<u16>>,
    owner: Vec<usize>,
    threads: usize,
    first_l1id: u32,
    window: usize,
) -> SwRodCounters {
    build_and_check_by(groups, owner, threads, first_l1id, window, false)
}

/// As [`build_and_check`]; with `runs` the sink takes the fragments a run at a time
/// (`FragmentSink::inspect_run`), and the runs are checked too.
fn build_and_check_by(
    groups: Vec<Vec<u16>>,
    owner: Vec<usize>,
    threads: usize,
    first_l1id: u32,
    window: usize,
    runs: bool,
) -> SwRodCounters {
    let mut thread_elinks = vec![Vec::new(); threads];
    for (g, &t) in groups.iter().zip(&owner) {
        thread_elinks[t].extend_from_slice(g);
    }
    let config = SwRodConfig {
        thread_elinks: thread_elinks.clone(),
        l1id_wrap: WRAP,
        first_l1id,
        window,
        ..SwRodConfig::default()
    };
    let mut streams: Vec<Stream> = groups.iter().map(|g| Stream::new(g)).collect();
    let mut l1 = L1idCounter::new(WRAP);
    let start = (first_l1id >> 24) as u64 * u64::from(WRAP) + u64::from(first_l1id & 0xFF_FFFF);
    let mut expected = Vec::new();
    for n in 0..EVENTS {
        let ext = L1idCounter::expected(WRAP, start + n);
        expected.push(ext);
        for (s, g) in streams.iter_mut().zip(&groups) {
            for (i, &e) in g.iter().enumerate() {
                s.packet(i, ext, (ext % 3564) as u16, sizes(e, n));
            }
        }
        l1.advance();
    }
    for s in &mut streams {
        s.flush();
    }
    let recorder = Recorder {
        runs: runs.then(Default::default),
        ..Recorder::default()
    };
    let chunk = config.block_bytes_for(4 * 301 + 8);
    let players = streams.iter().map(player).collect();
    let c = run_streams(
        &config,
        players,
        &owner,
        &recorder,
        chunk,
        &AtomicBool::new(false),
    );
    if let Some(runs) = &recorder.runs {
        let runs = runs.lock().unwrap();
        assert_eq!(runs.iter().sum::<usize>() as u64, EVENTS, "{runs:?}");
        assert!(runs.iter().all(|&n| (1..=64).contains(&n)), "{runs:?}");
        assert!(runs.iter().any(|&n| n > 1), "runs of one: {runs:?}");
    }
    let seen = recorder.seen.into_inner().unwrap();
    let all: Vec<u16> = thread_elinks.concat();
    assert_eq!(seen.len() as u64, EVENTS, "{c:?}");
    assert_eq!(c.fragments, EVENTS);
    assert_eq!(c.packets, EVENTS * all.len() as u64);
    assert_eq!(
        (
            c.corrupt_packets,
            c.duplicate_packets,
            c.late_packets,
            c.incomplete_fragments
        ),
        (0, 0, 0, 0),
        "{c:?}"
    );
    let mut count: HashMap<(u16, u32), u32> = HashMap::new();
    let mut l1ids: Vec<u32> = Vec::new();
    for f in &seen {
        assert_eq!(f.status, Status::OK, "{f:?}");
        assert!(f.missing.is_empty());
        // E-link order: thread 0's E-links in configured order, then thread 1's.
        let order: Vec<u16> = f.packets.iter().map(|p| p.0).collect();
        assert_eq!(order, all, "L1ID {:#x}", f.l1id);
        // Scatter-gather: header + one data piece per thread + trailer.
        assert_eq!(f.nonempty_data, threads);
        assert_eq!(f.pieces, threads + 2);
        for (elink, st, bytes) in &f.packets {
            assert_eq!(*st, 0);
            let h = check_packet(*elink, bytes).unwrap();
            assert_eq!(h.l1id, f.l1id);
            *count.entry((*elink, h.l1id)).or_default() += 1;
        }
        l1ids.push(f.l1id);
    }
    l1ids.sort_unstable();
    let mut want = expected.clone();
    want.sort_unstable();
    assert_eq!(l1ids, want, "one fragment per L1ID");
    assert_eq!(count.len(), EVENTS as usize * all.len());
    assert!(count.values().all(|&n| n == 1), "a packet landed twice");
    assert!(
        expected.iter().any(|&e| e >> 24 >= 3),
        "the test crosses ECRs"
    );
    c
}

#[test]
fn one_thread_every_packet_once_in_elink_order() {
    build_and_check(vec![vec![3, 0x7FF, 0x40, 1, 2]], vec![0], 1, 0, 1024);
}

#[test]
fn two_threads_every_packet_once_in_elink_order() {
    build_and_check(
        vec![vec![0, 1, 2, 0x123, 5], vec![0x200, 0x41, 7]],
        vec![0, 1],
        2,
        0,
        1024,
    );
}

#[test]
fn runs_carry_every_fragment_once_in_order_of_assembly() {
    for threads in [1, 2] {
        let owner: Vec<usize> = (0..threads).collect();
        let groups = [vec![0, 1, 2, 0x123, 5], vec![0x200, 0x41, 7]];
        build_and_check_by(groups[..threads].to_vec(), owner, threads, 0, 1024, true);
    }
}

#[test]
fn a_thread_a_window_ahead_waits_for_the_assembly() {
    // Thread 0 reads one E-link, thread 1 twelve: thread 0 reads far fewer blocks per event and
    // runs ahead until its ring of parts is a whole (smallest) window ahead of the assembly,
    // where it must wait for thread 1 while both assemble their share of the events. Whether it
    // gets that far ahead depends on how the two threads are scheduled (beside other tests on
    // a 2-core machine thread 1 may keep up), so the run is repeated until a wait happened, at
    // most five times; every run is checked in full.
    let mut runs = Vec::new();
    for _ in 0..5 {
        let c = build_and_check(vec![vec![0], (1..=12).collect()], vec![0, 1], 2, 0, 512);
        let waited = c.slot_waits > 0;
        runs.push(c);
        if waited {
            return;
        }
    }
    panic!("thread 0 never waited in {} runs: {runs:?}", runs.len());
}

#[test]
fn one_thread_reads_two_channels() {
    // The two cards play at full speed, unthrottled by a trigger, so one runs ahead of the
    // other by up to the whole run: the window must cover that skew.
    build_and_check(vec![vec![0, 1, 2], vec![8, 9]], vec![0, 0], 1, 0, 4096);
}

#[test]
fn two_threads_start_mid_cycle_and_cross_the_wrap() {
    // First event near the wrap of ECR 5: the run crosses into ECR 6 and beyond.
    build_and_check(
        vec![vec![0, 1, 2], vec![3, 4]],
        vec![0, 1],
        2,
        (5 << 24) | (WRAP - 7),
        1024,
    );
}

#[test]
fn packets_arriving_out_of_elink_order_are_reordered() {
    // E-link blocks in reverse E-link order: packets of an L1ID arrive last E-link first.
    let elinks = [10u16, 11, 12, 13];
    let config = SwRodConfig {
        thread_elinks: vec![elinks.to_vec()],
        ..SwRodConfig::default()
    };
    let mut s = Stream::new(&elinks);
    for n in 0..200u32 {
        for i in (0..elinks.len()).rev() {
            s.packet(i, n, 1, 10);
            s.flush_one(i);
        }
    }
    let recorder = Recorder::default();
    let chunk = config.block_bytes_for(64);
    let c = run_streams(
        &config,
        vec![player(&s)],
        &[0],
        &recorder,
        chunk,
        &AtomicBool::new(false),
    );
    if let Some(runs) = &recorder.runs {
        let runs = runs.lock().unwrap();
        assert_eq!(runs.iter().sum::<usize>() as u64, EVENTS, "{runs:?}");
        assert!(runs.iter().all(|&n| (1..=64).contains(&n)), "{runs:?}");
        assert!(runs.iter().any(|&n| n > 1), "runs of one: {runs:?}");
    }
    let seen = recorder.seen.into_inner().unwrap();
    assert_eq!(seen.len(), 200);
    assert_eq!(c.reordered_parts, 200, "{c:?}");
    for f in &seen {
        let order: Vec<u16> = f.packets.iter().map(|p| p.0).collect();
        assert_eq!(order, elinks);
        for (e, _, b) in &f.packets {
            check_packet(*e, b).unwrap();
        }
    }
}

#[test]
fn sixteen_bit_trailers() {
    let elinks = [4u16, 5, 6];
    let config = SwRodConfig {
        thread_elinks: vec![elinks.to_vec()],
        ..SwRodConfig::default()
    };
    let mut s = Stream::with_trailer(&elinks, rodeo_format::felix::TrailerSize::Bits16);
    for n in 0..300u32 {
        for i in 0..elinks.len() {
            // Up to ~1.2 KB: pieces of at most 1023 bytes, so packets split across subchunks.
            s.packet(i, n, 2, (n * 13 + i as u32 * 101) % 300);
        }
    }
    s.flush();
    let recorder = Recorder::default();
    let chunk = config.block_bytes_for(1300);
    let c = run_streams(
        &config,
        vec![player(&s)],
        &[0],
        &recorder,
        chunk,
        &AtomicBool::new(false),
    );
    if let Some(runs) = &recorder.runs {
        let runs = runs.lock().unwrap();
        assert_eq!(runs.iter().sum::<usize>() as u64, EVENTS, "{runs:?}");
        assert!(runs.iter().all(|&n| (1..=64).contains(&n)), "{runs:?}");
        assert!(runs.iter().any(|&n| n > 1), "runs of one: {runs:?}");
    }
    let seen = recorder.seen.into_inner().unwrap();
    assert_eq!(seen.len(), 300);
    assert_eq!(c.packets, 900, "{c:?}");
    for f in &seen {
        assert_eq!(f.status, Status::OK);
        let order: Vec<u16> = f.packets.iter().map(|p| p.0).collect();
        assert_eq!(order, elinks);
        for (e, _, b) in &f.packets {
            assert_eq!(check_packet(*e, b).unwrap().l1id, f.l1id);
        }
    }
}
