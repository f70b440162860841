//! One SW ROD serving many ROBs on a fixed pool of builder threads ([`BuilderPool`]): every
//! ROB's fragments are built as by a builder of its own, its faults (missing packet at the
//! window move, duplicate and late packets, BCID disagreement) flagged and counted per ROB,
//! with the ROBs sharing one block pool and fewer threads than ROBs.

mod swrod_common;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig};
use rodeo_format::fragment::{SourceId, Status};
use rodeo_swrod::{BuilderPool, DefaultFormat, FragmentBuilder, RobRun, SwRodConfig};
use swrod_common::*;

const LOST: Status = Status(Status::TIMEOUT.0 | Status::ROB_FRAGMENT_LOST.0);
const EVENTS: u32 = 700;
const ROBS: usize = 5;

/// ROB `r`'s stream: 3 E-links, `EVENTS` events, and the ROB's fault.
fn stream(r: usize) -> Stream {
    let elinks = [1u16, 2, 3];
    let mut s = Stream::new(&elinks);
    for n in 0..EVENTS {
        for i in 0..3 {
            match r {
                1 if n == 10 && i == 2 => continue, // missing packet
                3 if n == 7 && i == 1 => {
                    s.packet(i, n, 101, 4); // BCID disagreement
                    continue;
                }
                _ => {}
            }
            s.packet(i, n, 100, 4);
            if r == 2 && n == 5 && i == 0 {
                s.packet(i, n, 100, 4); // duplicate while L1ID 5 waits for E-links 2, 3
            }
        }
    }
    s.flush();
    s
}

/// `ROBS` ROBs with source ids from `base`, each of 3 E-links and a window no test outruns.
fn rob_configs(base: u32) -> Vec<SwRodConfig> {
    (0..ROBS)
        .map(|r| SwRodConfig {
            source_id: SourceId(base + r as u32),
            thread_elinks: vec![vec![1, 2, 3]],
            window: 512,
            timeout: Duration::from_secs(3600),
            ..SwRodConfig::default()
        })
        .collect()
}

#[test]
fn a_pool_of_two_threads_builds_five_robs_with_their_faults_counted_per_rob() {
    let configs = rob_configs(0x0071_0000);
    // One block pool shared by every ROB.
    let pools = vec![pool(4096)];
    let builders: Vec<FragmentBuilder<'_, DefaultFormat>> = configs
        .iter()
        .map(|c| {
            FragmentBuilder::new(
                c,
                &pools,
                DefaultFormat {
                    check_payload: true,
                },
            )
            .unwrap()
        })
        .collect();
    // One card (one engine thread) for the five channels.
    let config = EmulatedConfig {
        queue_depth: 4,
        ..EmulatedConfig::default()
    };
    let cards: Vec<EmulatedChannel<Vec<u8>>> = EmulatedChannel::start_card(
        "felix-pool",
        (0..ROBS).map(|r| (config, player(&stream(r)))).collect(),
    )
    .unwrap();
    for ch in &cards {
        for _ in 0..4 {
            ch.push_superpage(vec![0u8; 4 * BLOCK]).unwrap();
        }
    }
    let recorders: Vec<Recorder> = (0..ROBS).map(|_| Recorder::default()).collect();
    let robs: Vec<RobRun<'_, '_, _, _, _>> = (0..ROBS)
        .map(|r| RobRun {
            builder: &builders[r],
            channels: vec![&cards[r]],
            sink: &recorders[r],
        })
        .collect();
    let pool_threads = BuilderPool::new(2, Vec::new());
    assert_eq!(pool_threads.thread_of(3, ROBS), 1);
    let results = pool_threads.run(&robs, &AtomicBool::new(false)).unwrap();
    let counters: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    for (r, rec) in recorders.into_iter().enumerate() {
        let seen = rec.seen.into_inner().unwrap();
        assert_eq!(seen.len() as u32, EVENTS, "ROB {r}: one fragment per L1ID");
        let mut l1ids: Vec<u32> = seen.iter().map(|f| f.l1id).collect();
        l1ids.sort_unstable();
        l1ids.dedup();
        assert_eq!(
            l1ids.len() as u32,
            EVENTS,
            "ROB {r}: two fragments for an L1ID"
        );
        let c = &counters[r];
        for f in &seen {
            let want = match (r, f.l1id) {
                (1, 10) => LOST,
                (3, 7) => Status::BCID_CHECK_FAIL,
                _ => Status::OK,
            };
            assert_eq!(f.status, want, "ROB {r} L1ID {}", f.l1id);
        }
        let lost = u64::from(r == 1);
        assert_eq!(
            (c.incomplete_fragments, c.missing_packets),
            (lost, lost),
            "ROB {r}: {c:?}"
        );
        assert_eq!(c.duplicate_packets, u64::from(r == 2), "ROB {r}: {c:?}");
        assert_eq!(c.bcid_mismatches, u64::from(r == 3), "ROB {r}: {c:?}");
        assert_eq!(c.packets, 3 * u64::from(EVENTS) - lost, "ROB {r}: {c:?}");
        // The live counters of each builder are its own ROB's.
        assert_eq!(builders[r].counters().packets, c.packets, "ROB {r}");
        // A card thread wrote the superpages, not the pool's pops.
        assert_eq!(c.input_cpu_ns, 0, "ROB {r}");
    }
}

/// Lazy cards that do not time themselves write in the pool threads' pops: each ROB's
/// `input_cpu_ns` is their writing, the ROBs of a thread together within its CPU time.
#[test]
fn a_pool_counts_the_writing_of_untimed_lazy_cards_per_rob() {
    let configs = rob_configs(0x0072_0000);
    let pools = vec![pool(4096)];
    let builders: Vec<FragmentBuilder<'_, DefaultFormat>> = configs
        .iter()
        .map(|c| FragmentBuilder::new(c, &pools, DefaultFormat::default()).unwrap())
        .collect();
    let config = EmulatedConfig {
        queue_depth: 4,
        ..EmulatedConfig::default()
    };
    // Every ROB's stream whole (ROB 0's: no fault), so that every fragment completes.
    let cards: Vec<EmulatedChannel<Vec<u8>>> = (0..ROBS)
        .map(|_| EmulatedChannel::start_lazy_untimed(config, player(&stream(0))))
        .collect();
    for ch in &cards {
        for _ in 0..4 {
            ch.push_superpage(vec![0u8; 4 * BLOCK]).unwrap();
        }
    }
    let recorders: Vec<Recorder> = (0..ROBS).map(|_| Recorder::default()).collect();
    let robs: Vec<RobRun<'_, '_, _, _, _>> = (0..ROBS)
        .map(|r| RobRun {
            builder: &builders[r],
            channels: vec![&cards[r]],
            sink: &recorders[r],
        })
        .collect();
    let results = BuilderPool::new(2, Vec::new())
        .run(&robs, &AtomicBool::new(false))
        .unwrap();
    let counters: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    for (r, c) in counters.iter().enumerate() {
        assert_eq!(c.fragments, u64::from(EVENTS), "ROB {r}: {c:?}");
        assert!(c.input_cpu_ns > 0, "ROB {r}: the writing is counted: {c:?}");
        assert!(
            c.input_cpu_ns <= cards[r].reader_write_ns(),
            "ROB {r}: at most the writes' wall time: {c:?}"
        );
        assert_eq!(cards[r].card_cpu_ns(), 0, "ROB {r}: the card times nothing");
    }
    // Per pool thread (ROB r on thread r % 2), its ROBs' writing within its CPU time.
    for t in 0..2 {
        let mine = counters.iter().skip(t).step_by(2);
        let (input, cpu): (u64, u64) =
            mine.fold((0, 0), |(i, p), c| (i + c.input_cpu_ns, p + c.cpu_ns));
        assert!(input <= cpu, "thread {t}: {input} > {cpu}");
    }
}

#[test]
fn a_pooled_rob_must_have_one_receiving_thread() {
    let config = SwRodConfig {
        thread_elinks: vec![vec![1], vec![2]],
        ..SwRodConfig::default()
    };
    let pools = vec![pool(4096)];
    let builder = FragmentBuilder::new(&config, &pools, DefaultFormat::default()).unwrap();
    let rec = Recorder::default();
    let none: Vec<&EmulatedChannel<Vec<u8>>> = Vec::new();
    let robs = [RobRun {
        builder: &builder,
        channels: none,
        sink: &rec,
    }];
    let err = BuilderPool::new(1, Vec::new())
        .run(&robs, &AtomicBool::new(false))
        .unwrap_err();
    assert!(err.to_string().contains("one"), "{err}");
}
