//! An emulated S-LINK channel filling pool superpages at full speed; every fragment is parsed and
//! every data word checked, with superpages returned as they are read (back-pressure path).

use std::time::{Duration, Instant};

use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig};
use rodeo_cards::generator::{L1idCounter, SlinkConfig, SlinkGenerator, WordRange};
use rodeo_format::fragment::{RodFragment, SLINK_BEGIN, SLINK_END};
use rodeo_format::synth::check_counter;
use rodeo_memory::{RegionOptions, SuperpagePool, SuperpagePoolConfig};

const FRAGMENTS: u64 = 20_000;

fn run(framing: bool, wrap: u32) {
    let pool = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes: 64 * 1024,
        superpages: 4,
        region: RegionOptions::default(),
    })
    .unwrap();
    let cfg = SlinkConfig {
        framing,
        l1id_wrap: wrap,
        data_words: WordRange::uniform(0, 700),
        ..SlinkConfig::default()
    };
    let ch = EmulatedChannel::start(
        "slink-test",
        EmulatedConfig {
            queue_depth: 4,
            ..EmulatedConfig::default()
        },
        SlinkGenerator::new(cfg),
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
    let mut seen = 0u64;
    let mut sequence = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut words = Vec::new();
    while seen < FRAGMENTS {
        assert!(Instant::now() < deadline, "stalled: {:?}", ch.status());
        let Some(filled) = ch.pop_superpage() else {
            std::thread::yield_now();
            continue;
        };
        assert_eq!(filled.sequence, sequence);
        sequence += 1;
        words.clear();
        words.extend(
            filled
                .data()
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        let mut at = 0;
        let mut units = 0;
        while at < words.len() {
            // The fragment's end: from the S-LINK end control word when framed.
            let (start, end, next) = if framing {
                assert_eq!(words[at], SLINK_BEGIN, "fragment {seen}");
                let len = words[at + 1..]
                    .iter()
                    .position(|&w| w == SLINK_END)
                    .expect("end control word");
                (at + 1, at + 1 + len, at + 2 + len)
            } else {
                // Unframed: a ROD fragment has no length in its header; find the first trailer
                // whose counts (1 status word, ndata) match its position. The data is
                // deterministic, so this never mis-parses by chance from run to run.
                let mut end = None;
                for ndata in 0..=700usize {
                    let e = at + 13 + ndata;
                    if e <= words.len() && words[e - 2] as usize == ndata && words[e - 3] == 1 {
                        end = Some(e);
                        break;
                    }
                }
                let e = end.expect("trailer");
                (at, e, e)
            };
            let rod = RodFragment::parse(&words[start..end]).expect("ROD fragment");
            assert_eq!(rod.extended_l1id(), L1idCounter::expected(wrap, seen));
            assert_eq!(rod.status_words(), &[0]);
            assert_eq!(
                check_counter(rod.data(), rod.source_id().word(), rod.extended_l1id()),
                None,
                "fragment {seen}"
            );
            seen += 1;
            units += 1;
            at = next;
        }
        assert_eq!(units, filled.units);
        ch.push_superpage(filled.superpage).unwrap();
    }
    let st = ch.status();
    assert!(st.counters.units >= FRAGMENTS);
    assert!(stalls_while_held > 0, "four superpages never ran out");
    assert!(st.counters.stalls >= stalls_while_held);
}

#[test]
fn slink_framed_fragments_all_check() {
    run(true, 1000);
}

#[test]
fn slink_unframed_fragments_all_check() {
    run(false, 1 << 24);
}
