use rodeo_format::fragment::{RobFragment, RodBuilder, SourceId, Status};
use rodeo_memory::{PagePool, PagePoolConfig, RegionOptions};

use super::*;

fn pool(page_bytes: usize, pages: usize) -> PagePool {
    PagePool::new(PagePoolConfig {
        page_bytes,
        pages,
        region: RegionOptions::default(),
    })
    .unwrap()
}

/// A ROD fragment of `source` and `l1id` around `data`.
fn rod_of(source: u32, l1id: u32, data: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    RodBuilder {
        source_id: SourceId(source),
        extended_l1id: l1id,
        status: &[0],
        data: &[data],
        ..RodBuilder::default()
    }
    .write_vec(&mut out)
    .unwrap();
    out
}

/// A ROD fragment whose `ndata` data words depend on the L1ID.
fn rod(source: u32, l1id: u32, ndata: usize) -> Vec<u32> {
    let data: Vec<u32> = (0..ndata as u32).map(|i| l1id ^ i).collect();
    rod_of(source, l1id, &data)
}

#[test]
fn stored_fragments_are_rob_fragments_wrapping_the_rod() {
    let pool = pool(1024, 64);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(2, 0x100, 8)).unwrap();
    // Small, page-sized and page-spanning fragments.
    for (l1id, n) in [(0u32, 3usize), (1, 200), (2, 700), (3, 10)] {
        let r = rod(0x100, l1id, n);
        assert_eq!(s.ingest(0, &r, Status::OK), Ok(Ingested::Stored));
        let copy = s.fragment_copy(0, l1id).unwrap();
        let rob = RobFragment::parse(&copy).unwrap();
        assert_eq!(rob.source_id().word(), 0x100);
        assert_eq!(rob.rod().words(), &r[..]);
        assert_eq!(rob.rod().extended_l1id(), l1id);
    }
    assert_eq!(s.lookup(0, 3), Lookup::Present);
    assert_eq!(s.lookup(1, 3), Lookup::Pending, "channel 1 never saw it");
    assert_eq!(s.lookup(0, 4), Lookup::Pending);
    s.clear([1u32]);
    assert_eq!(
        s.lookup(0, 1),
        Lookup::Lost,
        "cleared and older than the last"
    );
}

#[test]
fn every_cleared_page_returns_and_occupancy_is_zero() {
    let pool = pool(512, 256);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(3, 1, 32)).unwrap();
    assert_eq!(pool.stats().in_use, 96);
    let mut l1 = 0u32;
    for round in 0..20 {
        let mut ids = Vec::new();
        for _ in 0..15 {
            for c in 0..3 {
                let r = rod(1 + c as u32, l1, (l1 as usize * 37 + round) % 300);
                assert_eq!(s.ingest(c, &r, Status::OK), Ok(Ingested::Stored));
            }
            ids.push(l1);
            l1 += 1;
        }
        // Hold a reply frame across the clear: its page must wait for it.
        let mut held = Vec::new();
        s.with_segments(1, ids[3], |r| held.push(r));
        assert!(!held.is_empty());
        assert_eq!(s.clear(ids.iter().copied()), 45);
        let before = s.reclaim();
        assert_eq!(before, 0, "nothing returned while the frame is held");
        drop(held);
        assert!(
            s.reclaim() <= 3,
            "at most the pages of one spanning fragment"
        );
    }
    for c in 0..3 {
        assert_eq!(s.settle(c), 0, "channel {c} still holds pages");
        assert_eq!(s.occupancy(c), 0.0);
        assert_eq!(s.counters(c).stored, 0);
    }
    drop(s);
    assert_eq!(pool.stats().in_use, 0, "every page back in the pool");
}

#[test]
fn full_channel_refuses_without_dropping_and_raises_the_alarm() {
    let pool = pool(256, 64);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 7, 10)).unwrap();
    let mut l1 = 0;
    loop {
        match s.ingest(0, &rod(7, l1, 30), Status::OK) {
            Ok(Ingested::Stored) => l1 += 1,
            Err(IngestError::Full) => break,
            other => panic!("{other:?}"),
        }
        assert!(l1 < 100);
    }
    assert!(s.alarm(0));
    assert_eq!(s.counters(0).alarms, 1);
    assert_eq!(s.occupancy(0), 1.0);
    // Nothing stored so far was lost.
    for id in 0..l1 {
        assert_eq!(s.lookup(0, id), Lookup::Present);
    }
    // The refused fragment goes in once room is made.
    s.clear(0..l1 / 2);
    assert!(!s.alarm(0));
    assert_eq!(
        s.ingest(0, &rod(7, l1, 30), Status::OK),
        Ok(Ingested::Stored)
    );
}

#[test]
fn duplicates_early_clears_and_unknown_clears_are_counted() {
    let pool = pool(1024, 16);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 9, 8)).unwrap();
    s.ingest(0, &rod(9, 10, 5), Status::OK).unwrap();
    assert_eq!(
        s.ingest(0, &rod(9, 10, 5), Status::OK),
        Ok(Ingested::Duplicate)
    );
    // 12 has not arrived: remembered; 3 is older than the last (10): unknown.
    s.clear([12u32, 3]);
    assert_eq!(s.counters(0).unknown_clears, 1);
    assert_eq!(s.lookup(0, 12), Lookup::Lost);
    assert_eq!(
        s.ingest(0, &rod(9, 12, 5), Status::OK),
        Ok(Ingested::AlreadyCleared)
    );
    assert_eq!(s.counters(0).dropped_after_clear, 1);
    assert_eq!(s.counters(0).duplicates, 1);
    assert_eq!(s.counters(0).stored, 1);
}

/// What is stored at the end splits at the L1 front: fragments the L1 passed over (behind)
/// and fragments that came after the last clear (ahead, those some channel lacks counted
/// apart); early-clear markers are neither.
#[test]
fn stored_fragments_split_at_the_l1_front() {
    let at_end = |behind, ahead, ahead_incomplete| StoredAtEnd {
        behind,
        ahead,
        ahead_incomplete,
    };
    let pool = pool(1024, 32);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(2, 9, 16)).unwrap();
    assert_eq!(s.stored_around_l1_front(), at_end(0, 0, 0));
    for l1id in 0..6 {
        s.ingest(0, &rod(9, l1id, 5), Status::OK).unwrap();
    }
    s.ingest(1, &rod(10, 0, 5), Status::OK).unwrap();
    s.ingest(1, &rod(10, 4, 5), Status::OK).unwrap();
    // No front yet: everything is ahead; 1, 2, 3, 5 only on channel 0.
    assert_eq!(s.stored_around_l1_front(), at_end(0, 8, 4));
    // 1 is passed over; 2 and 3 are cleared; 4 (on both) and 5 came after.
    s.clear([0u32, 2, 3]);
    assert_eq!(s.stored_around_l1_front(), at_end(1, 3, 1));
    // 7's marker is no fragment; the front passes 4 and 5.
    s.clear([7u32]);
    assert_eq!(s.l1_front(), Some(7));
    assert_eq!(s.stored_around_l1_front(), at_end(4, 0, 0));
}

/// A clear further ahead of the input than the index holds is not remembered: it could only be
/// hostile or mistaken, and its marker would stay forever (random L1IDs filled the index and
/// took a node from 170 to 30 kHz). Within the index's reach an early clear still is.
#[test]
fn clears_far_ahead_of_the_input_leave_no_marker() {
    let pool = pool(1024, 16);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 9, 8)).unwrap();
    s.ingest(0, &rod(9, 10, 5), Status::OK).unwrap();
    let reach = 10 + s.channels[0].index.capacity() as u32;
    let far: Vec<u32> = (1..=1000u32).map(|i| reach + i * 7919).collect();
    s.clear(far.iter().copied());
    assert_eq!(s.counters(0).unknown_clears, 1000);
    assert_eq!(s.channels[0].index.len(), 1, "only the stored fragment");
    s.clear([reach]);
    assert_eq!(
        s.lookup(0, reach),
        Lookup::Lost,
        "remembered at the edge of reach"
    );
    assert_eq!(s.counters(0).unknown_clears, 1000);
    // The next ECR period (L1IDs from 0 again after a wrap): its first L1IDs are in reach,
    // its far ones are not.
    let next_ecr = 1u32 << 24;
    s.clear([next_ecr + 3, next_ecr + 0x0080_0000]);
    assert_eq!(s.lookup(0, next_ecr + 3), Lookup::Lost);
    assert_eq!(s.counters(0).unknown_clears, 1001);
}

/// An input far behind the run (its node paused past the DCMs' timeout) finds the events
/// cleared meanwhile, beyond its markers' reach, dropped as cleared when their fragments come,
/// by single ingests and card runs alike: they were stored, never cleared again, and the store
/// filled (a QA pass, 2026-12-08).
#[test]
fn fragments_of_events_cleared_far_ahead_of_the_input_are_dropped_when_they_come() {
    let pool = pool(1024, 16);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 9, 8)).unwrap();
    for l1id in 0..3 {
        s.ingest(0, &rod(9, l1id, 5), Status::OK).unwrap();
    }
    let reach = s.channels[0].index.capacity() as u32;
    let decided = 40 * reach;
    // The run decided events 0 to `decided` while the input stood at 2.
    s.clear(0..decided);
    assert_eq!(s.counters(0).cleared, 3);
    for l1id in 3..decided / 2 {
        assert_eq!(
            s.ingest(0, &rod(9, l1id, 5), Status::OK).unwrap(),
            Ingested::AlreadyCleared
        );
    }
    let rod_words = rod(9, 0, 5).len();
    let mut next = decided / 2;
    let (done, err) = s.ingest_run(
        0,
        rod_words,
        Status::OK,
        (decided / 2 + 10) as usize,
        || {
            next += 1;
            next - 1
        },
        |l1id, words, _| words.copy_from_slice(&rod(9, l1id, 5)),
    );
    assert_eq!((done, err), ((decided / 2 + 10) as usize, None));
    assert_eq!(
        s.counters(0).dropped_after_clear,
        u64::from(decided - 3),
        "every fragment of a decided event"
    );
    // The ten after the decided ones are stored, and the store holds nothing else.
    assert_eq!(s.counters(0).stored, 10);
    assert_eq!(s.lookup(0, decided), Lookup::Present);
    assert_eq!(s.clears_unrecorded(), (0, 0));
}

#[test]
fn l1id_wrap_and_ecr_index_correctly() {
    let pool = pool(1024, 32);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 5, 16)).unwrap();
    // L1IDs wrapping at 4 with the ECR in bits 31..24.
    let ids: Vec<u32> = (0..12u32).map(|n| ((n / 4) << 24) | (n % 4)).collect();
    for &id in &ids {
        s.ingest(0, &rod(5, id, 8), Status::OK).unwrap();
    }
    for &id in &ids {
        let f = s.fragment_copy(0, id).unwrap();
        assert_eq!(RobFragment::parse(&f).unwrap().rod().extended_l1id(), id);
    }
    // (ECR 2, L1ID 3) is the newest; (ECR 0, L1ID 3) is older.
    assert_eq!(s.last_l1id(0), Some((2 << 24) | 3));
    s.clear(ids[..4].iter().copied());
    assert_eq!(s.lookup(0, 3), Lookup::Lost);
    assert_eq!(s.lookup(0, 3 << 24), Lookup::Pending);
}

#[test]
fn status_bits_reach_the_rob_header_and_ingest_with_fills_in_place() {
    let pool = pool(1024, 16);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 5, 8)).unwrap();
    let r = rod(5, 1, 4);
    s.ingest(0, &r, Status::ROB_L1ID_SEQUENCE).unwrap();
    let f = s.fragment_copy(0, 1).unwrap();
    assert!(RobFragment::parse(&f)
        .unwrap()
        .status()
        .contains(Status::ROB_L1ID_SEQUENCE));
    let r2 = rod(5, 2, 4);
    s.ingest_with(0, 2, r2.len(), Status::OK, |d| d.copy_from_slice(&r2))
        .unwrap();
    let f = s.fragment_copy(0, 2).unwrap();
    assert_eq!(RobFragment::parse(&f).unwrap().rod().words(), &r2[..]);
    assert_eq!(
        s.ingest_with(0, 3, 1000, Status::OK, |_| {}),
        Err(IngestError::TooLarge(1000))
    );
}

#[test]
fn empty_rob_parses_with_its_flags() {
    let w = empty_rob(0x42, 17, Status::ROB_FRAGMENT_PENDING);
    let rob = RobFragment::parse(&w).unwrap();
    assert!(rob.status().contains(Status::ROB_FRAGMENT_PENDING));
    assert_eq!(rob.rod().extended_l1id(), 17);
    assert_eq!(rob.source_id().word(), 0x42);
}

/// `ingest_run` (the card's path, many fragments per call) stores exactly what `ingest` would,
/// takes its unusual cases through the general path, and stops at a full channel without
/// consuming the refused L1ID.
#[test]
fn ingest_run_matches_single_ingests_and_stops_at_full() {
    let pool = pool(1024, 64);
    let mut run = EventStore::new(&pool, &StoreConfig::with_channels(1, 0x200, 4)).unwrap();
    let mut one = EventStore::new(&pool, &StoreConfig::with_channels(1, 0x200, 4)).unwrap();
    let ndata = 100; // ROB fragments of 8 + 113 words: two per 256-word page.
                     // L1IDs 0..3, then a duplicate of 2 (general path), then 4.. until the channel is full.
    let ids = [0u32, 1, 2, 3, 2, 4, 5, 6, 7, 8, 9, 10];
    let mut at = 0;
    let (consumed, err) = run.ingest_run(
        0,
        rod(0x200, 0, ndata).len(),
        Status::OK,
        ids.len(),
        || {
            let l = ids[at];
            at += 1;
            l
        },
        |l1id, d, _| d.copy_from_slice(&rod(0x200, l1id, ndata)),
    );
    assert_eq!(err, Some(IngestError::Full));
    // 4 pages of two fragments, the cursor page included: 8 fragments stored, and the
    // duplicate consumed (dropped, counted); the refused L1ID was asked for but not consumed.
    assert_eq!(consumed, 9);
    assert_eq!(at, 10);
    assert_eq!(run.counters(0).duplicates, 1);
    assert_eq!(run.counters(0).fragments, 8);
    for &l in &ids[..consumed] {
        let r = rod(0x200, l, ndata);
        let _ = one.ingest(0, &r, Status::OK);
    }
    let refused = rod(0x200, ids[consumed], ndata);
    assert_eq!(one.ingest(0, &refused, Status::OK), Err(IngestError::Full));
    for l1id in 0..8 {
        assert_eq!(
            run.fragment_copy(0, l1id),
            one.fragment_copy(0, l1id),
            "L1ID {l1id}"
        );
        assert!(run.fragment_copy(0, l1id).is_some());
    }
    assert_eq!(run.counters(0), one.counters(0));
    // Clearing everything frees every page on both paths alike.
    run.clear(0..8);
    one.clear(0..8);
    assert_eq!((run.settle(0), one.settle(0)), (0, 0));
    // Fragments larger than a page are refused by the run path, which writes in place.
    let (n, e) = run.ingest_run(0, 300, Status::OK, 1, || 20, |_, _, _| {});
    assert_eq!((n, e), (0, Some(IngestError::TooLarge(300))));
}

/// A ROD fragment whose only L1ID-dependent word is the L1ID (word 5), as the emulated card's.
fn rod_fixed(source: u32, l1id: u32, ndata: usize) -> Vec<u32> {
    let data: Vec<u32> = (0..ndata as u32).collect();
    rod_of(source, l1id, &data)
}

/// A card run that writes only the L1ID word when told the slot holds its layout; counts the
/// fills of each kind.
fn card_run(
    s: &mut EventStore,
    l1ids: std::ops::Range<u32>,
    ndata: usize,
    status: Status,
    counts: &mut [u64; 2],
) -> (usize, Option<IngestError>) {
    let mut next = l1ids.start;
    let n = l1ids.len();
    s.ingest_run(
        0,
        rod_fixed(0x300, 0, ndata).len(),
        status,
        n,
        || {
            next += 1;
            next - 1
        },
        |l1id, d, rewrite| match rewrite {
            Rewrite::Full => {
                counts[0] += 1;
                d.copy_from_slice(&rod_fixed(0x300, l1id, ndata));
            }
            Rewrite::Changed => {
                counts[1] += 1;
                d[5] = l1id;
            }
        },
    )
}

/// A stored fragment reads back as the fragment `rod_fixed` would write in full.
fn assert_stored(s: &EventStore, l1id: u32, ndata: usize, status: Status) {
    let copy = s.fragment_copy(0, l1id).expect("stored");
    let rob = RobFragment::parse(&copy).unwrap();
    assert_eq!(rob.status(), status, "L1ID {l1id}");
    assert_eq!(
        &copy[ROB_HEADER_WORDS..],
        &rod_fixed(0x300, l1id, ndata)[..],
        "L1ID {l1id}"
    );
}

/// Card runs refilling their own pages write only what changes, and every fragment still
/// reads back as written in full; any other writer in a page, another size or another status
/// makes the next fill of that page a full one.
#[test]
fn card_runs_rewrite_only_what_changes_and_readers_see_whole_fragments() {
    let pool = pool(1024, 64);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 0x300, 4)).unwrap();
    let ndata = 100; // ROB fragments of 8 + 113 words: two per 256-word page.
    let mut counts = [0u64; 2];
    // First fill: every slot written in full.
    assert_eq!(
        card_run(&mut s, 0..8, ndata, Status::OK, &mut counts),
        (8, None)
    );
    assert_eq!(counts, [8, 0]);
    (0..8).for_each(|l| assert_stored(&s, l, ndata, Status::OK));
    s.clear(0..8);
    // Second fill of the same pages: only the L1IDs change.
    assert_eq!(
        card_run(&mut s, 8..16, ndata, Status::OK, &mut counts),
        (8, None)
    );
    assert_eq!(counts, [8, 8]);
    (8..16).for_each(|l| assert_stored(&s, l, ndata, Status::OK));
    s.clear(8..16);
    // Another writer (a copy of another size) into a page: that page's later slots, and its
    // next fill, are written in full.
    assert_eq!(
        card_run(&mut s, 16..17, ndata, Status::OK, &mut counts),
        (1, None)
    );
    let other = rod_fixed(0x300, 17, 50);
    assert_eq!(s.ingest(0, &other, Status::OK), Ok(Ingested::Stored));
    assert_eq!(
        card_run(&mut s, 18..24, ndata, Status::OK, &mut counts),
        (6, None)
    );
    (18..24).for_each(|l| assert_stored(&s, l, ndata, Status::OK));
    assert_eq!(
        s.fragment_copy(0, 17).unwrap()[ROB_HEADER_WORDS..],
        other[..]
    );
    s.clear(16..24);
    // The next round uses all four pages: the mixed one's two slots are written in full.
    let before = counts;
    assert_eq!(
        card_run(&mut s, 24..32, ndata, Status::OK, &mut counts),
        (8, None)
    );
    assert_eq!(
        counts[0] - before[0],
        2,
        "the page another writer used is filled in full"
    );
    (24..32).for_each(|l| assert_stored(&s, l, ndata, Status::OK));
    s.clear(24..32);
    // Another status: full fills (the ROB header's status word differs).
    let flagged = Status::OK | Status::ROB_FRAGMENT_PENDING;
    let before = counts;
    assert_eq!(
        card_run(&mut s, 32..40, ndata, flagged, &mut counts),
        (8, None)
    );
    assert_eq!(counts[1], before[1], "no slot holds the flagged layout yet");
    (32..40).for_each(|l| assert_stored(&s, l, ndata, flagged));
    s.clear(32..40);
    // Many more rounds, sizes alternating: whatever mix of fills, the fragments are whole.
    for round in 0..40u32 {
        let n = if round % 3 == 0 { 60 } else { ndata };
        let base = 40 + round * 8;
        assert_eq!(
            card_run(&mut s, base..base + 6, n, Status::OK, &mut counts).1,
            None
        );
        (base..base + 6).for_each(|l| assert_stored(&s, l, n, Status::OK));
        s.clear(base..base + 6);
    }
    assert!(
        counts[1] > 100,
        "refills of the same layout rewrite little: {counts:?}"
    );
    assert_eq!(s.settle(0), 0);
}

/// A page left before all its slots were written under a layout keeps no layout: a later run
/// of that layout gets it written in full, whether the page was left by the cursor's release
/// (`settle`) or by a larger fragment that did not fit (review findings).
#[test]
fn a_page_left_part_filled_is_refilled_in_full() {
    let pool = pool(1024, 64);
    let ndata = 100; // 121-word ROB fragments: two per 256-word page.
                     // Left by settle with one slot of two written.
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 0x300, 4)).unwrap();
    let mut counts = [0u64; 2];
    assert_eq!(
        card_run(&mut s, 0..1, ndata, Status::OK, &mut counts),
        (1, None)
    );
    s.clear(0..1);
    assert_eq!(s.settle(0), 0);
    assert_eq!(
        card_run(&mut s, 1..3, ndata, Status::OK, &mut counts),
        (2, None)
    );
    assert_eq!(counts, [3, 0], "no slot of a part-filled page is a rewrite");
    (1..3).for_each(|l| assert_stored(&s, l, ndata, Status::OK));
    s.clear(1..3);
    // Left by a 221-word copy that did not fit after one slot of two.
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 0x300, 4)).unwrap();
    let mut counts = [0u64; 2];
    assert_eq!(
        card_run(&mut s, 0..1, ndata, Status::OK, &mut counts),
        (1, None)
    );
    let big = rod_fixed(0x300, 1, 200);
    assert_eq!(s.ingest(0, &big, Status::OK), Ok(Ingested::Stored));
    s.clear(0..2);
    for round in 0..6u32 {
        let base = 2 + round * 2;
        assert_eq!(
            card_run(&mut s, base..base + 2, ndata, Status::OK, &mut counts),
            (2, None)
        );
        (base..base + 2).for_each(|l| assert_stored(&s, l, ndata, Status::OK));
        s.clear(base..base + 2);
    }
    assert!(counts[1] > 0, "whole pages are still rewritten: {counts:?}");
}

/// The store holds one shared reference per page however many fragments it stores there; reply
/// frames add theirs; the page is free only when both are gone, whichever goes last.
#[test]
fn a_page_is_shared_once_by_the_store_and_once_per_frame() {
    let pool = pool(1024, 16);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 7, 4)).unwrap();
    for l1id in 0..2 {
        assert_eq!(
            s.ingest(0, &rod(7, l1id, 50), Status::OK),
            Ok(Ingested::Stored)
        );
    }
    let page = s.channels[0].write_page;
    // The cursor and two fragments: three store holds, one shared reference.
    assert_eq!(s.holds[page as usize], 3);
    assert_eq!(s.table.refs(page), 1);
    let mut frames = Vec::new();
    assert!(s.with_segments(0, 1, |r| frames.push(r)));
    assert_eq!(s.table.refs(page), 2);
    // Cleared and the cursor gone: the frame alone keeps the page.
    s.clear([0u32, 1]);
    assert_eq!(s.settle(0), 1);
    assert_eq!(s.table.refs(page), 1);
    assert_eq!(s.holds[page as usize], 0);
    drop(frames);
    assert_eq!(s.reclaim(), 1);
    assert_eq!(s.settle(0), 0);
    assert_eq!(s.table.refs(page), 0);
}

/// ROB ids map to channels by subtraction when they are consecutive and by lookup otherwise;
/// both refuse ids the node does not have, including ones just outside the range.
#[test]
fn channel_of_consecutive_and_scattered_source_ids() {
    let pool = pool(1024, 16);
    let s = EventStore::new(&pool, &StoreConfig::with_channels(3, 0x10, 2)).unwrap();
    assert_eq!(
        [0x0f, 0x10, 0x11, 0x12, 0x13, 0].map(|r| s.channel_of(r)),
        [None, Some(0), Some(1), Some(2), None, None]
    );
    let top = EventStore::new(&pool, &StoreConfig::with_channels(2, u32::MAX - 1, 2)).unwrap();
    assert_eq!(
        [u32::MAX - 2, u32::MAX - 1, u32::MAX, 0].map(|r| top.channel_of(r)),
        [None, Some(0), Some(1), None]
    );
    let config = StoreConfig {
        source_ids: vec![7, 3, 9],
        ..StoreConfig::with_channels(3, 0, 2)
    };
    let scattered = EventStore::new(&pool, &config).unwrap();
    assert_eq!(
        [7, 3, 9, 8, 4].map(|r| scattered.channel_of(r)),
        [Some(0), Some(1), Some(2), None, None]
    );
}

/// Fresh pages start their first fragment a few cache lines in, differently from page to page,
/// but never so far that a page holds fewer fragments of that size.
#[test]
fn staggered_first_offsets_keep_every_page_full() {
    for pw in [256usize, 1024] {
        for words in [20usize, 100, 200, 421, 500, pw - 3, pw] {
            let offsets: Vec<usize> = (0..16).map(|p| first_offset(p, words, pw)).collect();
            for &o in &offsets {
                assert_eq!(o % 16, 0, "line-aligned");
                assert_eq!((pw - o) / words, pw / words, "pw {pw} words {words} at {o}");
            }
            if pw % words >= 112 {
                assert!(offsets.iter().any(|&o| o > 0), "staggered: {offsets:?}");
            }
        }
    }
}

/// Stores fragments of 30 data words on channel 0 from `*l1` on until the store refuses one.
fn fill_until_full(s: &mut EventStore, l1: &mut u32) {
    loop {
        match s.ingest(0, &rod(7, *l1, 30), Status::OK) {
            Ok(Ingested::Stored) => *l1 += 1,
            Err(IngestError::Full) => break,
            other => panic!("{other:?}"),
        }
        assert!(*l1 < 10_000);
    }
}

/// An emulated input runs ahead of the L1: every free page it fills before the dataflow names
/// its events counts as lent, not as the store's fill, and its refusals are not back-pressure.
/// When the L1 goes on but the clears stop, the fill reaches 100%, the alarm is raised and the
/// refusals are back-pressure.
#[test]
fn pages_ahead_of_the_l1_are_lent_and_stopped_clears_fill_the_store() {
    let pool = pool(256, 64);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 7, 32)).unwrap();
    s.set_runs_ahead(true);
    let mut l1 = 0;
    fill_until_full(&mut s, &mut l1);
    // 256-byte pages, 47-word ROB fragments: one a page; the index (4 a page) has room.
    let k = s.counters(0);
    assert_eq!((k.pages_in_use, k.lent_pages), (32, 32), "{k:?}");
    assert_eq!(s.occupancy(0), 0.0, "nothing the L1 named");
    assert_eq!((k.full, k.full_ahead, k.alarms), (0, 1, 0), "{k:?}");

    // A healthy run at a low rate: the L1 names a few events, the farm clears them, the card
    // refills the freed pages ahead of the L1.
    let mut front = 0u32;
    for _ in 0..5 {
        for id in front..front + 3 {
            s.note_l1(id);
            assert_eq!(s.lookup(0, id), Lookup::Present);
        }
        let held = s.counters(0);
        assert!(held.lent_pages < 32, "the events named are fill: {held:?}");
        s.clear(front..front + 3);
        front += 3;
        fill_until_full(&mut s, &mut l1);
        let k = s.counters(0);
        assert_eq!(k.pages_in_use, 32);
        assert!(s.occupancy(0) <= 1.0 / 32.0, "{k:?}");
        assert!(k.lent_pages >= 31, "{k:?}");
        assert_eq!((k.full, k.alarms), (0, 0), "{k:?}");
    }
    assert_eq!(s.l1_front(), Some(front - 1));

    // The clears stop, the L1 goes on: every page holds an event the dataflow named.
    for id in front..l1 {
        s.note_l1(id);
    }
    assert_eq!(s.occupancy(0), 1.0);
    assert_eq!(s.counters(0).lent_pages, 0);
    let refused = l1;
    fill_until_full(&mut s, &mut l1);
    assert_eq!(l1, refused, "nothing more stored");
    let k = s.counters(0);
    assert_eq!(
        (k.full, k.alarms),
        (1, 1),
        "back-pressure, and the alarm: {k:?}"
    );
    assert!(s.alarm(0));
    // Cleared again, the fill drops and the alarm with it.
    s.clear(front..l1);
    assert!(
        s.occupancy(0) <= 1.0 / 32.0,
        "at most the write cursor's page"
    );
    assert!(!s.alarm(0));
}

/// A real input (network, files) does not run ahead: what it stores is fill at once, and a
/// full store is back-pressure. Pages lent to a writer (the SW ROD's DMA) are lent until a
/// fragment is adopted on them, whatever the input.
#[test]
fn a_real_input_fills_what_it_stores_and_lent_pages_stay_apart() {
    let pool = pool(256, 64);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 7, 16)).unwrap();
    let mut l1 = 0;
    fill_until_full(&mut s, &mut l1);
    let k = s.counters(0);
    assert_eq!((k.pages_in_use, k.lent_pages), (16, 0), "{k:?}");
    assert_eq!(s.occupancy(0), 1.0);
    assert_eq!((k.full, k.full_ahead, k.alarms), (1, 0, 1), "{k:?}");
    s.clear(0..l1);
    s.settle(0);
    assert_eq!(s.occupancy(0), 0.0);

    let lent: Vec<LentPage> = (0..4).map(|_| s.lend(0).unwrap()).collect();
    let k = s.counters(0);
    assert_eq!((k.pages_in_use, k.lent_pages), (4, 4), "{k:?}");
    assert_eq!(s.occupancy(0), 0.0, "lent to DMA, holding nothing");
    for page in lent {
        s.take_back(page);
    }
    let k = s.counters(0);
    assert_eq!((k.pages_in_use, k.lent_pages), (0, 0), "{k:?}");
    // A lend dropped away from the store comes back through reclaim, no longer lent.
    let page = s.lend(0).unwrap();
    std::thread::spawn(move || drop(page)).join().unwrap();
    s.reclaim();
    assert_eq!(s.counters(0).lent_pages, 0);
}

/// One corrupted L1ID far ahead does not make the L1IDs before it LOST (nor the channel's
/// newest); a real jump is the newest once the next fragment goes on past it.
#[test]
fn a_corrupted_l1id_far_ahead_does_not_make_the_gap_lost() {
    let pool = pool(1024, 64);
    let mut s = EventStore::new(&pool, &StoreConfig::with_channels(1, 5, 64)).unwrap();
    for id in 0..3 {
        s.ingest(0, &rod(5, id, 8), Status::OK).unwrap();
    }
    // L1ID 4300 instead of 3, then the sequence goes on.
    s.ingest(0, &rod(5, 4300, 8), Status::OK).unwrap();
    assert_eq!(s.last_l1id(0), Some(2));
    assert_eq!(s.lookup(0, 3), Lookup::Pending, "3 may still come");
    for id in 4..6 {
        s.ingest(0, &rod(5, id, 8), Status::OK).unwrap();
    }
    assert_eq!(s.last_l1id(0), Some(5));
    assert_eq!(s.lookup(0, 3), Lookup::Lost, "passed by the real sequence");
    assert_eq!(s.lookup(0, 100), Lookup::Pending);
    // A real jump (data lost at the source): the next fragment confirms it.
    s.ingest(0, &rod(5, 20_000, 8), Status::OK).unwrap();
    assert_eq!(s.last_l1id(0), Some(5));
    s.ingest(0, &rod(5, 20_001, 8), Status::OK).unwrap();
    assert_eq!(s.last_l1id(0), Some(20_001));
    assert_eq!(s.lookup(0, 100), Lookup::Lost);
}
