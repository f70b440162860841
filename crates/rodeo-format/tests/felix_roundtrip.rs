//! FELIX block streams: encode random chunks on several E-links, decode, compare.

use proptest::prelude::*;
use rodeo_format::felix::{
    check_packet, encode_packet, packet_len, ChunkFlags, ElinkEncoder, Reassembler, TrailerSize,
};

const ELINKS: [u16; 4] = [0, 5, 0x123, 0x7FF];

fn chunk_bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(7)))
        .collect()
}

/// Encodes `chunks` (E-link index, bytes, flush after?) and returns the emitted blocks in order.
fn encode(
    trailer: TrailerSize,
    block_size: usize,
    chunks: &[(usize, Vec<u8>, bool)],
) -> Vec<Vec<u8>> {
    let mut encoders: Vec<ElinkEncoder> = ELINKS
        .iter()
        .map(|&e| ElinkEncoder::new(e, trailer, block_size).unwrap())
        .collect();
    let mut blocks = Vec::new();
    for (link, data, flush) in chunks {
        let enc = &mut encoders[*link];
        let bound = enc.max_blocks_for(data.len());
        let before = blocks.len();
        enc.push_chunk(data, |b: &[u8]| blocks.push(b.to_vec()));
        assert!(blocks.len() - before <= bound, "max_blocks_for too small");
        if *flush {
            enc.flush(|b: &[u8]| blocks.push(b.to_vec()));
        }
    }
    for enc in &mut encoders {
        enc.flush(|b: &[u8]| blocks.push(b.to_vec()));
    }
    for b in &blocks {
        assert_eq!(b.len(), block_size);
    }
    blocks
}

type PerLink = Vec<Vec<(Vec<u8>, ChunkFlags)>>;

fn decode(blocks: &[Vec<u8>]) -> (PerLink, Reassembler) {
    let mut out = vec![Vec::new(); ELINKS.len()];
    let mut r = Reassembler::default();
    for b in blocks {
        let _ = r.push_block(b, |c| {
            let link = ELINKS.iter().position(|&e| e == c.elink).unwrap();
            out[link].push((c.data.to_vec(), c.flags));
        });
    }
    r.flush(|c| {
        let link = ELINKS.iter().position(|&e| e == c.elink).unwrap();
        out[link].push((c.data.to_vec(), c.flags));
    });
    (out, r)
}

fn chunk_strategy() -> impl Strategy<Value = (usize, Vec<u8>, bool)> {
    let len = prop_oneof![
        3 => 0usize..64,
        3 => 64usize..1100,
        1 => 1100usize..5000,
        1 => Just(0usize),
    ];
    (
        0..ELINKS.len(),
        len,
        any::<u8>(),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(link, len, seed, flush)| (link, chunk_bytes(len, seed), flush))
}

fn trailer_strategy() -> impl Strategy<Value = TrailerSize> {
    prop_oneof![Just(TrailerSize::Bits16), Just(TrailerSize::Bits32)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(
        trailer in trailer_strategy(),
        block_size in prop_oneof![Just(1024usize), Just(2048usize)],
        chunks in proptest::collection::vec(chunk_strategy(), 0..40),
    ) {
        let blocks = encode(trailer, block_size, &chunks);
        let (out, r) = decode(&blocks);
        for (link, got) in out.iter().enumerate() {
            let want: Vec<(Vec<u8>, ChunkFlags)> = chunks
                .iter()
                .filter(|c| c.0 == link)
                .map(|c| (c.1.clone(), ChunkFlags::NONE))
                .collect();
            prop_assert_eq!(got, &want, "E-link {}", ELINKS[link]);
        }
        let c = r.counters();
        prop_assert_eq!(c.blocks, blocks.len() as u64);
        prop_assert_eq!(c.chunks, chunks.len() as u64);
        prop_assert_eq!(c.sequence_errors + c.block_gaps + c.bad_blocks + c.damaged_blocks, 0);
        prop_assert_eq!(c.flagged_chunks, 0);
    }

    #[test]
    fn lost_block_is_counted(
        trailer in trailer_strategy(),
        sizes in proptest::collection::vec(0usize..700, 20..60),
        drop_at in 1usize..1000,
    ) {
        let chunks: Vec<(usize, Vec<u8>, bool)> =
            sizes.iter().map(|&n| (1, chunk_bytes(n, n as u8), false)).collect();
        let mut blocks = encode(trailer, 1024, &chunks);
        prop_assume!(blocks.len() >= 3);
        let drop_at = 1 + drop_at % (blocks.len() - 2);
        blocks.remove(drop_at);
        let (out, r) = decode(&blocks);
        let c = r.counters();
        prop_assert_eq!(c.block_gaps, 1);
        prop_assert_eq!(c.lost_blocks, 1);
        prop_assert!(out[1].len() < chunks.len() || c.flagged_chunks > 0);
        // Every chunk that is not flagged is one of the originals.
        for (data, flags) in &out[1] {
            if flags.is_empty() {
                prop_assert!(chunks.iter().any(|c| &c.1 == data));
            }
        }
    }

    #[test]
    fn garbage_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..2100),
        valid_header in any::<bool>(),
        wide in any::<bool>(),
    ) {
        let mut bytes = bytes;
        if valid_header && bytes.len() >= 4 {
            bytes[2] = if wide { 0xCE } else { 0xCD };
            bytes[3] = 0xAB;
        }
        let mut r = Reassembler::new(4096);
        let mut total = 0usize;
        for _ in 0..3 {
            let _ = r.push_block(&bytes, |c| total += c.data.len());
        }
        r.flush(|c| total += c.data.len());
        prop_assert!(r.counters().chunk_bytes == total as u64);
    }

    #[test]
    fn corrupted_blocks_never_panic(
        trailer in trailer_strategy(),
        sizes in proptest::collection::vec(0usize..3000, 1..20),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let chunks: Vec<(usize, Vec<u8>, bool)> =
            sizes.iter().map(|&n| (2, chunk_bytes(n, 1), false)).collect();
        let mut blocks = encode(trailer, 1024, &chunks);
        for (pos, xor) in flips {
            let b = pos % blocks.len();
            let i = (pos / 7) % 1024;
            blocks[b][i] ^= xor;
        }
        let mut r = Reassembler::default();
        for b in &blocks {
            let _ = r.push_block(b, |c| assert!(c.data.len() <= 1 << 20));
        }
        r.flush(|_| {});
    }
}

#[test]
fn packets_survive_the_link() {
    let mut enc = ElinkEncoder::new(0x42, TrailerSize::Bits32, 2048).unwrap();
    let mut buf = vec![0u8; packet_len(2000)];
    let mut blocks = Vec::new();
    for l1id in 0..200u32 {
        let words = (l1id * 37) % 2000;
        let n = encode_packet(&mut buf, 0x42, l1id, (l1id % 4096) as u16, words).unwrap();
        enc.push_chunk(&buf[..n], |b: &[u8]| blocks.push(b.to_vec()));
    }
    enc.flush(|b: &[u8]| blocks.push(b.to_vec()));
    let mut r = Reassembler::default();
    let mut next = 0u32;
    for b in &blocks {
        r.push_block(b, |c| {
            assert!(c.flags.is_empty());
            let h = check_packet(c.elink, c.data).unwrap();
            assert_eq!(h.l1id, next);
            next += 1;
        })
        .unwrap();
    }
    assert_eq!(next, 200);
}
