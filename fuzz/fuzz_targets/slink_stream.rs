//! Fuzz target: S-LINK streams through the checker, with every framing and CRC setting, as an
//! event store sees a corrupt link. Every word must be accounted for exactly once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rodeo_format::slink::{SlinkCheckConfig, SlinkChecker, SlinkItem};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let words: Vec<u32> = rest
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let mut checker = SlinkChecker::new(SlinkCheckConfig {
        framing: sel & 1 != 0,
        crc: sel & 2 != 0,
        l1id_wrap: u32::from(sel >> 2) + 1,
    });
    let mut covered = 0usize;
    checker.check(&words, |item| match item {
        SlinkItem::Fragment(f) => covered += f.rod.len(),
        SlinkItem::Dropped(d) => covered += d.words.len(),
    });
    assert!(covered <= words.len());
    assert_eq!(checker.counters().words, words.len() as u64);
});
