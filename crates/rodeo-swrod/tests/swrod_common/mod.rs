//! Shared helpers of the fragment-builder tests: streams of FELIX blocks built packet by packet
//! (with faults injected by the test), an emulated card that plays them, and a sink that records
//! every fragment as parsed words.

#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::Duration;

use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig, Fill, Generator};
use rodeo_format::felix::{encode_packet, BlockHeader, ElinkEncoder, TrailerSize};
use rodeo_format::fragment::{RobFragment, Status};
use rodeo_memory::{ChunkPool, PoolConfig, RegionOptions};
use rodeo_swrod::{
    DefaultFormat, Flow, Fragment, FragmentBuilder, FragmentSink, SwRodConfig, SwRodCounters,
};

pub const BLOCK: usize = 1024;

/// The blocks of one DMA channel, built packet by packet.
pub struct Stream {
    pub encoders: Vec<ElinkEncoder>,
    pub blocks: Vec<Vec<u8>>,
    packet: Vec<u8>,
}

impl Stream {
    pub fn new(elinks: &[u16]) -> Stream {
        Stream::with_trailer(elinks, TrailerSize::Bits32)
    }

    pub fn with_trailer(elinks: &[u16], trailer: TrailerSize) -> Stream {
        Stream {
            encoders: elinks
                .iter()
                .map(|&e| ElinkEncoder::new(e, trailer, BLOCK).unwrap())
                .collect(),
            blocks: Vec::new(),
            packet: vec![0; 1 << 18],
        }
    }

    /// Pushes the default-format packet of E-link index `i`.
    pub fn packet(&mut self, i: usize, l1id: u32, bcid: u16, words: u32) {
        let enc = &mut self.encoders[i];
        let len = encode_packet(&mut self.packet, enc.elink(), l1id, bcid, words).unwrap();
        let blocks = &mut self.blocks;
        enc.push_chunk(&self.packet[..len], |b| blocks.push(b.to_vec()));
    }

    /// Pushes raw chunk bytes on E-link index `i`.
    pub fn chunk(&mut self, i: usize, bytes: &[u8]) {
        let blocks = &mut self.blocks;
        self.encoders[i].push_chunk(bytes, |b| blocks.push(b.to_vec()));
    }

    /// Flushes the partial block of E-link index `i`.
    pub fn flush_one(&mut self, i: usize) {
        let blocks = &mut self.blocks;
        self.encoders[i].flush(|b| blocks.push(b.to_vec()));
    }

    /// Flushes every E-link's partial block.
    pub fn flush(&mut self) {
        for i in 0..self.encoders.len() {
            self.flush_one(i);
        }
    }

    /// An empty block (null subchunks only) of E-link index `i`, with its next sequence number.
    pub fn empty_block(&mut self, i: usize) -> Vec<u8> {
        let enc = &mut self.encoders[i];
        let mut b = vec![0u8; BLOCK];
        b[..4].copy_from_slice(
            &BlockHeader {
                elink: enc.elink(),
                sequence: enc.sequence(),
                trailer: TrailerSize::Bits32,
            }
            .to_bytes(),
        );
        let next = enc.sequence() + 1;
        enc.set_sequence(next);
        b
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.blocks.concat()
    }
}

/// Plays prepared blocks, then (optionally) keeps the link up with empty blocks of one E-link.
pub struct Player {
    pub data: Vec<u8>,
    pub pos: usize,
    pub idle: Option<Vec<u8>>,
}

impl Generator for Player {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let mut f = Fill::default();
        while f.units < max_units && buf.len() - f.bytes >= BLOCK {
            let block = if self.pos < self.data.len() {
                let b = &self.data[self.pos..self.pos + BLOCK];
                self.pos += BLOCK;
                b
            } else if let Some(idle) = &mut self.idle {
                buf[f.bytes..f.bytes + BLOCK].copy_from_slice(idle);
                f.bytes += BLOCK;
                f.units += 1;
                // The next idle block carries the next sequence number.
                let w0 = u16::from_le_bytes([idle[0], idle[1]]);
                let seq = ((w0 >> 11) + 1) % 32;
                idle[..2].copy_from_slice(&((w0 & 0x7FF) | (seq << 11)).to_le_bytes());
                continue;
            } else {
                break;
            };
            buf[f.bytes..f.bytes + BLOCK].copy_from_slice(block);
            f.bytes += BLOCK;
            f.units += 1;
        }
        f
    }

    fn is_finished(&self) -> bool {
        self.idle.is_none() && self.pos >= self.data.len()
    }
}

/// A fragment as the sink saw it, parsed back from its pieces.
#[derive(Debug, Clone)]
pub struct Seen {
    pub l1id: u32,
    pub status: Status,
    pub missing: Vec<u32>,
    /// (E-link, packet status, packet bytes)
    pub packets: Vec<(u16, u16, Vec<u8>)>,
    pub pieces: usize,
    pub nonempty_data: usize,
}

/// Records every fragment it is given; with `runs` it takes the builder's runs
/// (`inspect_run`) and notes each run's length, else one fragment at a time (`fragment`).
#[derive(Default)]
pub struct Recorder {
    pub seen: Mutex<Vec<Seen>>,
    pub stop_after: Option<usize>,
    pub runs: Option<Mutex<Vec<usize>>>,
}

impl<'p> FragmentSink<'p> for Recorder {
    fn fragment(&self, f: Fragment<'p>) -> Flow {
        self.record(&f)
    }

    fn inspect_run(&self, fragments: &[Fragment<'p>]) -> Option<Flow> {
        let runs = self.runs.as_ref()?;
        runs.lock().unwrap().push(fragments.len());
        let mut flow = Flow::Continue;
        for f in fragments {
            if self.record(f) == Flow::Stop {
                flow = Flow::Stop;
            }
        }
        Some(flow)
    }
}

impl Recorder {
    fn record(&self, f: &Fragment<'_>) -> Flow {
        let words = f.to_vec();
        assert_eq!(words.len(), f.size_words());
        let rob = RobFragment::parse(&words).expect("a valid ROB fragment");
        assert_eq!(rob.status(), f.status());
        let rod = rob.rod();
        assert_eq!(rod.extended_l1id(), f.l1id());
        let status_words = rod.status_words();
        assert_eq!(status_words[0], f.status().word());
        assert_eq!(&status_words[1..], f.missing_elinks());
        let data = rod.data();
        let bytes: Vec<u8> = data.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut packets = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let w0 = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
            let elink = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
            let len = (w0 & 0xFFFF) as usize;
            assert!(
                len >= 8 && at + len <= bytes.len(),
                "bad packet header {w0:#x}"
            );
            packets.push((
                elink as u16,
                (w0 >> 16) as u16,
                bytes[at + 8..at + len].to_vec(),
            ));
            at += len;
        }
        assert_eq!(packets.len() as u32, f.packets());
        let nonempty_data = (0..8).filter(|&t| !f.data(t).is_empty()).count();
        let seen = Seen {
            l1id: f.l1id(),
            status: f.status(),
            missing: f.missing_elinks().to_vec(),
            packets,
            pieces: f.pieces().count(),
            nonempty_data,
        };
        let mut v = self.seen.lock().unwrap();
        v.push(seen);
        match self.stop_after {
            Some(n) if v.len() >= n => Flow::Stop,
            _ => Flow::Continue,
        }
    }
}

pub fn pool(chunk_bytes: usize) -> ChunkPool {
    ChunkPool::new(PoolConfig {
        chunk_bytes,
        chunks_per_region: 4096,
        max_regions: 4,
        initial_regions: 1,
        region: RegionOptions::default(),
    })
    .unwrap()
}

/// Runs a builder over one channel per stream (`owner[i]` is the thread reading stream `i`).
pub fn run_streams(
    config: &SwRodConfig,
    streams: Vec<Player>,
    owner: &[usize],
    recorder: &Recorder,
    chunk_bytes: usize,
    stop: &AtomicBool,
) -> SwRodCounters {
    // One block pool per thread (the recommended set-up).
    let pools: Vec<ChunkPool> = (0..config.thread_elinks.len())
        .map(|_| pool(chunk_bytes))
        .collect();
    let builder = FragmentBuilder::new(
        config,
        &pools,
        DefaultFormat {
            check_payload: true,
        },
    )
    .unwrap();
    let channels: Vec<EmulatedChannel<Vec<u8>>> = streams
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let live = p.idle.is_some();
            let ch = EmulatedChannel::start(
                &format!("card{i}"),
                EmulatedConfig {
                    queue_depth: 4,
                    max_units_per_s: live.then_some(2000.0),
                    ..EmulatedConfig::default()
                },
                p,
            )
            .unwrap();
            for _ in 0..4 {
                ch.push_superpage(vec![0u8; 4 * BLOCK]).unwrap();
            }
            ch
        })
        .collect();
    let mut inputs: Vec<Vec<&EmulatedChannel<Vec<u8>>>> = vec![Vec::new(); builder.threads()];
    for (ch, &t) in channels.iter().zip(owner) {
        inputs[t].push(ch);
    }
    let _ = Duration::ZERO;
    builder.run(&inputs, recorder, stop).unwrap()
}

pub fn player(stream: &Stream) -> Player {
    Player {
        data: stream.bytes(),
        pos: 0,
        idle: None,
    }
}
