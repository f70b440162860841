//! Fuzz target: full-event parsing, every accessor, ROB iteration, stream tags and checksum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rodeo_format::fragment::FullEvent;

fuzz_target!(|data: &[u8]| {
    let words: Vec<u32> = data
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let Ok(ev) = FullEvent::parse(&words) else {
        return;
    };
    let _ = (
        ev.global_id(),
        ev.run_number(),
        ev.extended_l1id(),
        ev.status(),
        ev.l1_info(),
        ev.ef_info(),
    );
    for tag in ev.stream_tags() {
        let _ = tag;
    }
    let mut n = 0usize;
    for rob in ev.robs() {
        let Ok(rob) = rob else { break };
        let rod = rob.rod();
        let _ = (
            rod.l1id(),
            rod.bcid(),
            rod.data().len(),
            rod.status_words().len(),
        );
        let _ = rob.verify_checksum();
        n += 1;
    }
    if let Ok(count) = ev.validate_robs() {
        assert_eq!(count, n, "validate_robs and robs() disagree");
    }
    let _ = ev.verify_checksum();
});
