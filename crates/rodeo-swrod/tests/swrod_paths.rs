//! The builder's fast paths against reference behaviour: split packets joined without the
//! reassembler must come out exactly as the general FELIX reassembler would deliver them, on
//! clean and on faulty streams; threads of more than 63 E-links (arrival bits outside the hot
//! slot) must keep every packet once and in E-link order.

mod swrod_common;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

use rodeo_format::felix::{
    check_packet, encode_packet, BlockDecoder, ElinkReassembler, SubchunkType, TrailerFlags,
    TrailerSize,
};
use rodeo_format::fragment::Status;
use rodeo_swrod::{DefaultFormat, PacketDecoder, SwRodConfig, SwRodCounters};
use swrod_common::*;

/// A small deterministic generator (64-bit LCG, high bits).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u32) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % u64::from(n)) as u32
    }
}

/// A delivered packet: (E-link, packet status bits, bytes).
type Packet = (u16, u16, Vec<u8>);

/// What the receiving thread must deliver, computed with the general reassembler and the
/// receiver's documented rules: clean whole packets go straight through, a block gap or a
/// damaged block flushes the E-link's open packet first, every other subchunk goes forwards
/// through the E-link's reassembler. Returns the packets and the sequence errors.
fn reference(blocks: &[Vec<u8>], elinks: &[u16]) -> (Vec<Packet>, u64) {
    let mut decoder = BlockDecoder::new();
    let mut reasm: HashMap<u16, ElinkReassembler> = elinks
        .iter()
        .map(|&e| (e, ElinkReassembler::new(e, 16 * 1024)))
        .collect();
    let mut last_seq: HashMap<u16, u8> = HashMap::new();
    let mut out = Vec::new();
    for b in blocks {
        let Ok(block) = decoder.decode(b) else {
            continue;
        };
        let h = block.header();
        let Some(r) = reasm.get_mut(&h.elink) else {
            continue;
        };
        let gap = last_seq
            .insert(h.elink, h.sequence)
            .is_some_and(|l| h.sequence != (l + 1) % 32);
        let damaged = block.damage().is_some();
        let subs: Vec<_> = block.subchunks().filter_map(Result::ok).collect();
        let whole = |s: &rodeo_format::felix::Subchunk<'_>| {
            s.kind == SubchunkType::Both && s.flags == TrailerFlags::NONE
        };
        for s in subs.iter().filter(|s| whole(s)) {
            out.push((h.elink, 0, s.payload.to_vec()));
        }
        let mut deliver = |ch: rodeo_format::felix::Chunk<'_>| {
            out.push((ch.elink, ch.flags.bits(), ch.data.to_vec()))
        };
        if gap || damaged {
            r.flush(&mut deliver);
        }
        for s in subs.iter().filter(|s| !whole(s)) {
            r.push_subchunk(s, &mut deliver);
        }
    }
    let seq = reasm.values().map(|r| r.counters().sequence_errors).sum();
    (out, seq)
}

/// Runs one receiving thread over `blocks` and compares it with [`reference`].
fn check_against_reference(elinks: &[u16], blocks: Vec<Vec<u8>>) -> SwRodCounters {
    let decoder = DefaultFormat {
        check_payload: true,
    };
    let (all, seq_errors) = reference(&blocks, elinks);
    let (mut expected, rejected): (Vec<Packet>, Vec<Packet>) = all
        .into_iter()
        .partition(|(e, _, bytes)| decoder.decode(*e, bytes).is_ok());
    let config = SwRodConfig {
        thread_elinks: vec![elinks.to_vec()],
        ..SwRodConfig::default()
    };
    let mut s = Stream::new(elinks);
    s.blocks = blocks;
    let rec = Recorder::default();
    let c = run_streams(
        &config,
        vec![player(&s)],
        &[0],
        &rec,
        config.block_bytes_for(4 * 400 + 8),
        &AtomicBool::new(false),
    );
    let seen = rec.seen.into_inner().unwrap();
    let mut got: Vec<Packet> = seen.iter().flat_map(|f| f.packets.clone()).collect();
    for f in &seen {
        for (e, _, bytes) in &f.packets {
            assert_eq!(check_packet(*e, bytes).unwrap().l1id, f.l1id);
        }
    }
    got.sort();
    expected.sort();
    assert_eq!(got.len(), expected.len(), "{c:?}");
    assert!(
        got == expected,
        "delivered packets differ from the reassembler's"
    );
    assert_eq!(c.corrupt_packets, rejected.len() as u64, "{c:?}");
    assert_eq!(c.sequence_errors, seq_errors, "{c:?}");
    let flagged = expected.iter().filter(|p| p.1 != 0).count() as u64;
    assert_eq!(c.flagged_packets, flagged, "{c:?}");
    assert_eq!(c.duplicate_packets + c.late_packets + c.overflow_packets, 0);
    c
}

/// Packets of random sizes on every E-link: many are cut at block ends (FIRST + LAST, some
/// with MIDDLE pieces), so the kept-piece path and the reassembler both work.
fn random_stream(elinks: &[u16], events: u32, trailer: TrailerSize, seed: u64) -> Stream {
    let mut rng = Lcg(seed);
    let mut s = Stream::with_trailer(elinks, trailer);
    for n in 0..events {
        for i in 0..elinks.len() {
            let words = match rng.next(4) {
                0 => rng.next(8),
                1 | 2 => rng.next(60),
                _ => rng.next(400),
            };
            s.packet(i, n, (n % 3564) as u16, words);
        }
    }
    s.flush();
    s
}

#[test]
fn split_packets_match_the_reassembler_on_clean_streams() {
    for (trailer, seed) in [(TrailerSize::Bits32, 1), (TrailerSize::Bits16, 2)] {
        let elinks = [5u16, 6, 7];
        let s = random_stream(&elinks, 300, trailer, seed);
        let c = check_against_reference(&elinks, s.blocks);
        assert_eq!(c.packets, 900, "{c:?}");
        assert_eq!((c.corrupt_packets, c.flagged_packets), (0, 0));
    }
}

#[test]
fn split_packets_match_the_reassembler_on_faulty_streams() {
    let elinks = [1u16, 2, 3, 4];
    let mut rng = Lcg(7);
    let mut s = Stream::new(&elinks);
    let mut buf = vec![0u8; 1 << 16];
    for n in 0..400u32 {
        for (i, &e) in elinks.iter().enumerate() {
            let words = if rng.next(2) == 0 {
                rng.next(40)
            } else {
                rng.next(300)
            };
            let len = encode_packet(&mut buf, e, n, 7, words).unwrap();
            let packet = &buf[..len];
            let blocks = &mut s.blocks;
            let enc = &mut s.encoders[i];
            let mut sink = |b: &[u8]| blocks.push(b.to_vec());
            match rng.next(40) {
                // A flag on the packet's last piece (CRC error, error, truncation, busy).
                0..=3 => {
                    let flags = match rng.next(4) {
                        0 => TrailerFlags {
                            crc_error: true,
                            ..TrailerFlags::NONE
                        },
                        1 => TrailerFlags {
                            error: true,
                            ..TrailerFlags::NONE
                        },
                        2 => TrailerFlags {
                            truncation: true,
                            ..TrailerFlags::NONE
                        },
                        _ => TrailerFlags {
                            busy: true,
                            ..TrailerFlags::NONE
                        },
                    };
                    enc.push_chunk_flagged(packet, flags, &mut sink);
                }
                // Ends in a truncating TIMEOUT subchunk.
                4 => enc.push_chunk_timeout(packet, &mut sink),
                // A lone FIRST piece: the next packet's FIRST is a sequence error.
                5 => {
                    let cut = len.min(1 + rng.next(60) as usize);
                    enc.push_subchunk(
                        SubchunkType::First,
                        &packet[..cut],
                        TrailerFlags::NONE,
                        &mut sink,
                    )
                    .unwrap();
                }
                // An orphan LAST piece, then nothing for this event.
                6 => {
                    let cut = len.min(1 + rng.next(60) as usize);
                    enc.push_subchunk(
                        SubchunkType::Last,
                        &packet[..cut],
                        TrailerFlags::NONE,
                        &mut sink,
                    )
                    .unwrap();
                }
                // Out-of-band subchunk, then the packet.
                7 => {
                    enc.push_subchunk(SubchunkType::OutOfBand, &[], TrailerFlags::NONE, &mut sink)
                        .unwrap();
                    enc.push_chunk(packet, &mut sink);
                }
                // The packet is missing.
                8 => {}
                _ => enc.push_chunk(packet, &mut sink),
            }
        }
    }
    s.flush();
    // Block faults: lose some blocks, damage some (a trailer claiming more than the block).
    let mut blocks = std::mem::take(&mut s.blocks);
    let mut k = 0;
    blocks.retain(|_| {
        k += 1;
        k % 53 != 0
    });
    for b in blocks.iter_mut().skip(11).step_by(97) {
        let mut end = BLOCK;
        while end > 8 && u32::from_le_bytes(b[end - 4..end].try_into().unwrap()) == 0 {
            end -= 4;
        }
        let word = u32::from_le_bytes(b[end - 4..end].try_into().unwrap());
        b[end - 4..end].copy_from_slice(&((word & 0xFFFF_0000) | 0xFFF0).to_le_bytes());
    }
    let c = check_against_reference(&elinks, blocks);
    assert!(c.flagged_packets > 0, "{c:?}");
    assert!(c.sequence_errors > 0, "{c:?}");
    assert!(c.corrupt_packets > 0, "{c:?}");
    assert!(c.block_gaps > 0 && c.damaged_blocks > 0, "{c:?}");
}

#[test]
fn wide_threads_keep_every_packet_once_in_elink_order() {
    // Thread 0 reads 130 E-links: 63 arrival bits in the hot slot, 67 in two side words.
    // Per event the E-links' blocks come in one of four orders: forward; the side E-links
    // first; the side E-links reversed; everything reversed. Thread 1 reads two E-links.
    const EVENTS: u32 = 120;
    let wide: Vec<u16> = (0..130u16).map(|e| e * 3 + 1).collect();
    let narrow = vec![0x700u16, 0x701];
    let mut a = Stream::new(&wide);
    let mut b = Stream::new(&narrow);
    let n_wide = wide.len();
    for n in 0..EVENTS {
        let order: Vec<usize> = match n % 4 {
            0 => (0..n_wide).collect(),
            1 => (63..n_wide).chain(0..63).collect(),
            2 => (0..63).chain((63..n_wide).rev()).collect(),
            _ => (0..n_wide).rev().collect(),
        };
        for i in order {
            a.packet(i, n, 3, (i as u32 + n) % 9);
            a.flush_one(i);
        }
        for i in 0..narrow.len() {
            b.packet(i, n, 3, 4);
        }
    }
    b.flush();
    let config = SwRodConfig {
        thread_elinks: vec![wide.clone(), narrow.clone()],
        ..SwRodConfig::default()
    };
    let rec = Recorder::default();
    let c = run_streams(
        &config,
        vec![player(&a), player(&b)],
        &[0, 1],
        &rec,
        config.block_bytes_for(8 + 4 * 8),
        &AtomicBool::new(false),
    );
    let seen = rec.seen.into_inner().unwrap();
    assert_eq!(seen.len() as u32, EVENTS, "{c:?}");
    let all: Vec<u16> = wide.iter().chain(&narrow).copied().collect();
    for f in &seen {
        assert_eq!(f.status, Status::OK, "{f:?}");
        let order: Vec<u16> = f.packets.iter().map(|p| p.0).collect();
        assert_eq!(order, all, "L1ID {:#x}", f.l1id);
        for (e, st, bytes) in &f.packets {
            assert_eq!(*st, 0);
            assert_eq!(check_packet(*e, bytes).unwrap().l1id, f.l1id);
        }
    }
    assert_eq!(c.packets, u64::from(EVENTS) * all.len() as u64);
    // Three orders in four put a packet after one of a higher E-link.
    assert_eq!(c.reordered_parts, u64::from(EVENTS) * 3 / 4, "{c:?}");
    assert_eq!(c.incomplete_fragments, 0);
}

#[test]
fn wide_threads_list_missing_elinks_on_both_sides_of_the_hot_slot() {
    // 100 E-links on one thread; in event 7 local E-links 10 and 80 send nothing.
    let elinks: Vec<u16> = (0..100u16).collect();
    let mut s = Stream::new(&elinks);
    for n in 0..40u32 {
        for i in 0..elinks.len() {
            if !(n == 7 && (i == 10 || i == 80)) {
                s.packet(i, n, 2, 3);
            }
        }
    }
    s.flush();
    let config = SwRodConfig {
        thread_elinks: vec![elinks.clone()],
        window: 512,
        ..SwRodConfig::default()
    };
    let rec = Recorder::default();
    let c = run_streams(
        &config,
        vec![player(&s)],
        &[0],
        &rec,
        config.block_bytes_for(8 + 12),
        &AtomicBool::new(false),
    );
    let seen = rec.seen.into_inner().unwrap();
    assert_eq!(seen.len(), 40);
    for f in &seen {
        if f.l1id == 7 {
            assert!(f.status.contains(Status::ROB_FRAGMENT_LOST), "{f:?}");
            assert_eq!(f.missing, vec![10, 80]);
            assert_eq!(f.packets.len(), 98);
        } else {
            assert_eq!(f.status, Status::OK, "{f:?}");
            assert_eq!(f.packets.len(), 100);
        }
    }
    assert_eq!((c.incomplete_fragments, c.missing_packets), (1, 2), "{c:?}");
}

#[test]
fn fragments_a_sink_does_not_keep_return_their_blocks_through_the_caches() {
    // Two threads and a counting sink, which hands every fragment back: each block goes to the
    // assembling thread's cache of its own pool, and from there to its pool in batches. The
    // pools are tiny (64 blocks each: as many as one cache may hold), so a thread regularly
    // needs blocks that sit in the other thread's cache, where they would stay while the other
    // thread waits for it (a deadlock): it flags its pool as starved and the other thread gives
    // them back. A watchdog turns a hang into a failure.
    use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig};
    use rodeo_memory::{ChunkPool, PoolConfig, RegionOptions};
    use rodeo_swrod::{CountingSink, FragmentBuilder};
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    const EVENTS: u32 = 3000;
    let groups = [vec![1u16, 2, 3], vec![4u16, 5]];
    let streams: Vec<Stream> = groups
        .iter()
        .map(|g| {
            let mut s = Stream::new(g);
            for n in 0..EVENTS {
                for i in 0..g.len() {
                    s.packet(i, n, 1, (n + i as u32) % 20);
                }
            }
            s.flush();
            s
        })
        .collect();
    let config = SwRodConfig {
        thread_elinks: groups.to_vec(),
        window: 1024,
        ..SwRodConfig::default()
    };
    let pools: Vec<ChunkPool> = (0..2)
        .map(|_| {
            ChunkPool::new(PoolConfig {
                chunk_bytes: config.block_bytes_for(8 + 4 * 20),
                chunks_per_region: 64,
                max_regions: 1,
                initial_regions: 1,
                region: RegionOptions::default(),
            })
            .unwrap()
        })
        .collect();
    let builder = FragmentBuilder::new(&config, &pools, DefaultFormat::default()).unwrap();
    let channels: Vec<EmulatedChannel<Vec<u8>>> = streams
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let ch = EmulatedChannel::start(
                &format!("card{i}"),
                EmulatedConfig {
                    queue_depth: 4,
                    ..EmulatedConfig::default()
                },
                player(s),
            )
            .unwrap();
            for _ in 0..4 {
                ch.push_superpage(vec![0u8; 4 * BLOCK]).unwrap();
            }
            ch
        })
        .collect();
    let inputs: Vec<Vec<&EmulatedChannel<Vec<u8>>>> = channels.iter().map(|c| vec![c]).collect();
    let sink = CountingSink::new();
    let done = std::sync::atomic::AtomicBool::new(false);
    let c = std::thread::scope(|s| {
        s.spawn(|| {
            // A watchdog: a hung builder aborts the test process instead of hanging CI.
            if !rodeo_testkit::holds_within(Duration::from_secs(120), || {
                done.load(Ordering::Relaxed)
            }) {
                eprintln!("the builder hung waiting for blocks");
                std::process::abort();
            }
        });
        let c = builder
            .run(&inputs, &sink, &AtomicBool::new(false))
            .unwrap();
        done.store(true, Ordering::Relaxed);
        c
    });
    let counts = sink.counts();
    assert_eq!(counts.fragments, u64::from(EVENTS), "{c:?}");
    assert_eq!(counts.packets, 5 * u64::from(EVENTS));
    assert_eq!(c.packets, 5 * u64::from(EVENTS));
    assert_eq!(counts.flagged, 0, "{c:?}");
    // Every block is back in its pool: none leaked in a cache.
    for p in &pools {
        let st = p.stats();
        assert_eq!(st.in_use, 0, "{st:?}");
        assert_eq!(st.allocations, st.frees, "{st:?}");
    }
    eprintln!("pool waits: {}", c.pool_waits);
}
