//! An emulated FELIX channel filling pool superpages at full speed; every block is reassembled,
//! every packet checked word by word, and each E-link's L1ID sequence verified, with superpages
//! returned as they are read (back-pressure path).

use std::time::{Duration, Instant};

use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig};
use rodeo_cards::generator::{FelixConfig, FelixGenerator, L1idCounter, WordRange};
use rodeo_format::felix::{check_packet, Reassembler};
use rodeo_memory::{RegionOptions, SuperpagePool, SuperpagePoolConfig};

const L1IDS: u64 = 2_000;
const WRAP: u32 = 500;

#[test]
fn felix_blocks_reassemble_and_check() {
    let pool = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes: 32 * 1024,
        superpages: 3,
        region: RegionOptions::default(),
    })
    .unwrap();
    let elinks: Vec<u16> = vec![0, 1, 2, 0x40, 0x41, 0x7FF, 0x123, 0x300];
    let cfg = FelixConfig {
        elinks: elinks.clone(),
        payload_words: WordRange::uniform(0, 400),
        l1id_wrap: WRAP,
        ..FelixConfig::default()
    };
    let ch = EmulatedChannel::start(
        "felix-test",
        EmulatedConfig {
            queue_depth: 3,
            ..EmulatedConfig::default()
        },
        FelixGenerator::new(&cfg).unwrap(),
    )
    .unwrap();
    let mut pushed = 0u64;
    while let Ok(sp) = pool.alloc() {
        ch.push_superpage(sp).unwrap();
        pushed += 1;
    }
    // Hold every superpage until the card has filled them all and stalled for want of an empty
    // one: the back-pressure path, exercised deterministically (not left to the scheduler).
    rodeo_testkit::wait_until(
        "the card to fill the pool and stall",
        Duration::from_secs(30),
        || ch.status().counters.superpages >= pushed && ch.status().counters.stalls > 0,
    );
    let stalls_while_held = ch.status().counters.stalls;
    let mut reassembler = Reassembler::default();
    let mut next = vec![0u64; elinks.len()];
    let mut bad = 0u64;
    let mut sequence = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while next.iter().any(|&n| n < L1IDS) {
        assert!(Instant::now() < deadline, "stalled: {:?}", ch.status());
        let Some(filled) = ch.pop_superpage() else {
            std::thread::yield_now();
            continue;
        };
        assert_eq!(filled.sequence, sequence);
        sequence += 1;
        assert_eq!(filled.data().len() % 1024, 0);
        assert_eq!(filled.data().len() as u64 / 1024, filled.units);
        for block in filled.data().chunks_exact(1024) {
            reassembler
                .push_block(block, |c| {
                    let Some(i) = elinks.iter().position(|&e| e == c.elink) else {
                        bad += 1;
                        return;
                    };
                    match check_packet(c.elink, c.data) {
                        Ok(h)
                            if c.flags.is_empty()
                                && h.l1id == L1idCounter::expected(WRAP, next[i]) =>
                        {
                            next[i] += 1
                        }
                        _ => bad += 1,
                    }
                })
                .expect("block decodes");
        }
        ch.push_superpage(filled.superpage).unwrap();
    }
    assert_eq!(bad, 0);
    let c = reassembler.counters();
    assert_eq!(c.block_gaps, 0);
    assert_eq!(c.sequence_errors, 0);
    assert_eq!(c.bad_blocks + c.damaged_blocks, 0);
    assert!(stalls_while_held > 0, "three superpages never ran out");
    assert!(ch.status().counters.stalls >= stalls_while_held);
}
