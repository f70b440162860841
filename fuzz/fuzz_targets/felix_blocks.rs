//! Fuzz target: FELIX blocks through the block decoder, the per-E-link reassembler and the
//! default packet decoder, as a SW ROD sees a corrupt link. Block sizes of 1 and 2 KiB.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rodeo_format::felix::{check_packet, decode_packet, BlockDecoder, Reassembler};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let block = if sel & 1 == 0 { 1024 } else { 2048 };
    let mut dec = BlockDecoder::new();
    let mut re = Reassembler::new(64 * 1024);
    for b in rest.chunks(block) {
        if let Ok(blk) = dec.decode(b) {
            for sc in blk.subchunks() {
                let _ = sc;
            }
        }
        let _ = re.push_block(b, |chunk| {
            let _ = decode_packet(chunk.data);
            let _ = check_packet(chunk.elink, chunk.data);
        });
    }
    re.flush(|chunk| {
        let _ = decode_packet(chunk.data);
    });
    let _ = re.counters();
});
