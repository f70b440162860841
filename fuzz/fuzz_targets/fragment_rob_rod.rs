//! Fuzz target: ROB and ROD parsing on their own, as a readout node sees fragments from a link.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rodeo_format::fragment::{RobFragment, RodFragment};

fuzz_target!(|data: &[u8]| {
    let words: Vec<u32> = data
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if let Ok(rob) = RobFragment::parse(&words) {
        let _ = (rob.source_id(), rob.status(), rob.payload().len());
        let _ = rob.verify_checksum();
        let rod = rob.rod();
        let _ = (rod.extended_l1id(), rod.data().len());
    }
    if let Ok(rod) = RodFragment::parse(&words) {
        let _ = (
            rod.l1id(),
            rod.bcid(),
            rod.trigger_type(),
            rod.data().len(),
            rod.status_words().len(),
        );
    }
});
