//! FELIX error handling: flags, TIMEOUT, sequence errors, damaged blocks.

use rodeo_format::felix::{
    BlockDecoder, BlockHeader, ChunkFlags, ElinkEncoder, FelixError, Reassembler, SubchunkType,
    TrailerFlags, TrailerSize,
};

type Chunks = Vec<(Vec<u8>, ChunkFlags)>;

fn run(blocks: &[Vec<u8>]) -> (Chunks, Reassembler) {
    let mut out = Vec::new();
    let mut r = Reassembler::default();
    for b in blocks {
        let _ = r.push_block(b, |c| out.push((c.data.to_vec(), c.flags)));
    }
    r.flush(|c| out.push((c.data.to_vec(), c.flags)));
    (out, r)
}

fn encoder(trailer: TrailerSize) -> (ElinkEncoder, Vec<Vec<u8>>) {
    (ElinkEncoder::new(7, trailer, 1024).unwrap(), Vec::new())
}

#[test]
fn flags_and_timeouts_reach_the_chunk() {
    for trailer in [TrailerSize::Bits16, TrailerSize::Bits32] {
        let (mut enc, mut blocks) = encoder(trailer);
        let crc = TrailerFlags {
            crc_error: true,
            ..TrailerFlags::NONE
        };
        let err = TrailerFlags {
            error: true,
            ..TrailerFlags::NONE
        };
        enc.push_chunk_flagged(&[1; 10], crc, |b: &[u8]| blocks.push(b.to_vec()));
        enc.push_chunk_flagged(&[2; 3000], err, |b: &[u8]| blocks.push(b.to_vec()));
        enc.push_chunk_timeout(&[3; 2500], |b: &[u8]| blocks.push(b.to_vec()));
        enc.push_chunk(&[4; 5], |b: &[u8]| blocks.push(b.to_vec()));
        enc.flush(|b: &[u8]| blocks.push(b.to_vec()));
        let (out, r) = run(&blocks);
        assert_eq!(out.len(), 4);
        assert_eq!(out[0], (vec![1; 10], ChunkFlags::CRC_ERROR));
        assert_eq!(out[1], (vec![2; 3000], ChunkFlags::ERROR));
        assert_eq!(
            out[2],
            (vec![3; 2500], ChunkFlags::TIMEOUT | ChunkFlags::TRUNCATED)
        );
        assert_eq!(out[3], (vec![4; 5], ChunkFlags::NONE));
        let c = r.counters();
        assert_eq!(
            (c.crc_errors, c.errors, c.timeouts, c.truncations),
            (1, 1, 1, 1)
        );
        assert_eq!(c.flagged_chunks, 3);
    }
}

#[test]
fn sequence_errors_are_counted_and_flagged() {
    let (mut enc, mut blocks) = encoder(TrailerSize::Bits32);
    let none = TrailerFlags::NONE;
    let mut sink = |b: &[u8]| blocks.push(b.to_vec());
    // Orphan MIDDLE then LAST: one chunk, flagged.
    enc.push_subchunk(SubchunkType::Middle, &[1, 2], none, &mut sink)
        .unwrap();
    enc.push_subchunk(SubchunkType::Last, &[3], none, &mut sink)
        .unwrap();
    // FIRST, then FIRST again while open: the first is delivered flagged.
    enc.push_subchunk(SubchunkType::First, &[4], none, &mut sink)
        .unwrap();
    enc.push_subchunk(SubchunkType::First, &[5], none, &mut sink)
        .unwrap();
    enc.push_subchunk(SubchunkType::Last, &[6], none, &mut sink)
        .unwrap();
    enc.push_subchunk(SubchunkType::OutOfBand, &[], none, &mut sink)
        .unwrap();
    enc.push_subchunk(SubchunkType::Reserved, &[9, 9, 9], none, &mut sink)
        .unwrap();
    // An open chunk at the end of the run.
    enc.push_subchunk(SubchunkType::First, &[7], none, &mut sink)
        .unwrap();
    assert!(enc
        .push_subchunk(SubchunkType::Both, &[0; 1021], none, &mut sink)
        .is_err());
    enc.flush(&mut sink);
    let (out, r) = run(&blocks);
    assert_eq!(
        out,
        vec![
            (vec![1, 2, 3], ChunkFlags::SEQUENCE),
            (vec![4], ChunkFlags::SEQUENCE),
            (vec![5, 6], ChunkFlags::NONE),
            (vec![7], ChunkFlags::INCOMPLETE | ChunkFlags::TRUNCATED),
        ]
    );
    let c = r.counters();
    assert_eq!(c.sequence_errors, 2);
    assert_eq!((c.out_of_band, c.reserved), (1, 1));
}

#[test]
fn damaged_and_bad_blocks() {
    let (mut enc, mut blocks) = encoder(TrailerSize::Bits16);
    enc.push_chunk(&[1; 100], |b: &[u8]| blocks.push(b.to_vec()));
    enc.push_chunk(&[2; 100], |b: &[u8]| blocks.push(b.to_vec()));
    enc.flush(|b: &[u8]| blocks.push(b.to_vec()));
    let mut block = blocks[0].clone();
    // The first subchunk's trailer sits at byte 104; make it claim 1000 bytes.
    let word = u16::from_le_bytes([block[104], block[105]]);
    assert_eq!(word >> 13, 3);
    block[104..106].copy_from_slice(&((word & !0x3FF) | 1000).to_le_bytes());
    // The backward parse still finds the second subchunk; the first overruns the header.
    let mut dec = BlockDecoder::new();
    let parsed = dec.decode(&block).unwrap();
    let items: Vec<_> = parsed.subchunks().collect();
    assert!(matches!(
        items[0],
        Err(FelixError::SubchunkOverrun {
            elink: 7,
            offset: 104,
            length: 1000,
            ..
        })
    ));
    assert_eq!(items[1].as_ref().unwrap().payload, &[2; 100][..]);

    let mut bad_marker = blocks[0].clone();
    bad_marker[3] = 0;
    let (out, r) = run(&[bad_marker, block, vec![0; 100]]);
    assert_eq!(out, vec![(vec![2; 100], ChunkFlags::NONE)]);
    let c = r.counters();
    assert_eq!((c.bad_blocks, c.damaged_blocks), (2, 1));

    let h = BlockHeader::parse(&blocks[0]).unwrap();
    assert_eq!(
        (h.elink, h.sequence, h.trailer),
        (7, 0, TrailerSize::Bits16)
    );
}

#[test]
fn oversize_chunks_are_cut() {
    let (mut enc, mut blocks) = encoder(TrailerSize::Bits32);
    enc.push_chunk(&[5; 5000], |b: &[u8]| blocks.push(b.to_vec()));
    enc.flush(|b: &[u8]| blocks.push(b.to_vec()));
    let mut r = Reassembler::new(3000);
    let mut out = Vec::new();
    for b in &blocks {
        r.push_block(b, |c| out.push((c.data.len(), c.flags)))
            .unwrap();
    }
    assert_eq!(
        out,
        vec![(3000, ChunkFlags::OVERSIZE | ChunkFlags::TRUNCATED)]
    );
    let c = r.counters();
    assert_eq!((c.oversize_chunks, c.dropped_bytes), (1, 2000));
}
