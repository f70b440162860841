//! `rodeo bench swrod`: the SW ROD fragment builder over pre-generated FELIX input, against a
//! plain memcpy of the same input.
//!
//! # Workload
//!
//! Per point (E-links, packet payload bytes, receiving threads): the E-links are split into one
//! contiguous group per thread, and each group gets its own emulated FELIX card
//! ([`FelixGenerator`] on an [`EmulatedChannel`]) that fills 1 MiB pool superpages with 1 KiB
//! blocks of default-format packets, one per E-link per L1ID, **before** the timed part (the
//! card's DMA is not what is measured). The filled superpages are then replayed through a
//! [`DmaChannel`] that hands them out in order (`Replay`), and the builder
//! ([`FragmentBuilder`], one receiving thread per group, one block pool per thread, a
//! [`CountingSink`]) is timed from start to its return, which includes starting the threads,
//! building every fragment and returning every block (the counting sink keeps no fragment, so
//! the builder gives the blocks back through its pool caches). Nothing else runs in the timed
//! part: no generation, no consumer work beyond counting. Repeated `--reps` times over the same
//! superpages with a fresh run each time; rows give the best repetition and the median.
//!
//! # Baseline
//!
//! In the same run, `memcpy_bytes_per_s`: the same threads copy the same superpages into a
//! destination of the same size (pre-faulted), best of `--reps`. `memcpy_ratio` is the builder's
//! input bytes/s over that: the builder reads every byte once and writes every packet once, so
//! 1.0 would mean the builder costs no more than moving the data.
//!
//! # On a shared machine
//!
//! `cpu_ns_per_packet` is measured with the receiving threads' own CPU clocks, so time the
//! machine gave to other processes does not count; `dedicated_cores_packets_per_s` is
//! `threads / cpu_ns_per_packet`, the rate the same code would sustain with its cores to itself
//! (cache and memory-bandwidth interference from the other processes still count against it).

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use rodeo_cards::dma::{
    ChannelCounters, ChannelStatus, DmaChannel, EmulatedChannel, EmulatedConfig, Filled,
};
use rodeo_cards::generator::{FelixConfig, FelixGenerator, WordRange};
use rodeo_memory::{
    ChunkPool, PoolConfig, RegionOptions, Superpage, SuperpagePool, SuperpagePoolConfig,
};
use rodeo_swrod::{CountingSink, DefaultFormat, FragmentBuilder, SwRodConfig, SwRodCounters};
use serde::Serialize;
use serde_json::Value;

use crate::report::Report;

const SUPERPAGE: usize = 1 << 20;
const ELINKS: &[usize] = &[12, 48, 120, 192];
const PAYLOADS: &[usize] = &[8, 40, 64];
const THREADS: &[usize] = &[1, 2];

/// Arguments of `rodeo bench swrod`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// E-links (split evenly among the threads); sweeps 12..192 when not given.
    #[arg(long, value_name = "N")]
    pub elinks: Option<usize>,
    /// Packet payload bytes (a multiple of 4; the packet adds an 8-byte header); sweeps 8..64
    /// when not given.
    #[arg(long, value_name = "B", value_parser = rodeo_ros::cli_values::count(4..=16_384))]
    pub packet_bytes: Option<usize>,
    /// Receiving threads (1..=8); sweeps 1 and 2 when not given.
    #[arg(long, value_name = "T")]
    pub threads: Option<usize>,
    /// Packets of input per point (generated before timing).
    #[arg(long, default_value_t = 4_000_000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub packets: u64,
    /// Timed repetitions per point (best and median reported).
    #[arg(long, default_value_t = 5, value_parser = rodeo_ros::cli_values::count(1..=1000))]
    pub reps: usize,
    /// Pin receiving thread i to CPU i.
    #[arg(long)]
    pub pin: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One measured point.
#[derive(Debug, Serialize)]
struct Row {
    elinks: usize,
    packet_bytes: usize,
    threads: usize,
    packets_per_s: f64,
    median_packets_per_s: f64,
    fragments_per_s: f64,
    bytes_per_s: f64,
    ns_per_packet: f64,
    cpu_ns_per_packet: f64,
    dedicated_cores_packets_per_s: f64,
    memcpy_bytes_per_s: f64,
    memcpy_ratio: f64,
    input_bytes: u64,
    packets: u64,
    fragments: u64,
    incomplete_fragments: u64,
    dropped_packets: u64,
    slot_waits: u64,
    pool_waits: u64,
}

/// A DMA channel that replays superpages filled beforehand, in their fill order, then reports
/// its link down. `rewind` makes the superpages pushed back ready again, for the next run.
struct Replay {
    ready: Mutex<VecDeque<Filled<Superpage>>>,
    returned: Mutex<Vec<Superpage>>,
    /// Per superpage index: (sequence, bytes used, units).
    meta: Vec<Option<(u64, usize, u64)>>,
    bytes: u64,
}

impl Replay {
    fn new(filled: Vec<Filled<Superpage>>) -> Replay {
        let mut meta = Vec::new();
        let mut bytes = 0;
        for f in &filled {
            let i = f.superpage.index() as usize;
            if meta.len() <= i {
                meta.resize(i + 1, None);
            }
            meta[i] = Some((f.sequence, f.bytes_used, f.units));
            bytes += f.bytes_used as u64;
        }
        Replay {
            ready: Mutex::new(filled.into()),
            returned: Mutex::new(Vec::new()),
            meta,
            bytes,
        }
    }

    fn rewind(&self) {
        let mut back: Vec<Filled<Superpage>> = self
            .returned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .filter_map(|sp| {
                let (sequence, bytes_used, units) =
                    self.meta.get(sp.index() as usize).copied()??;
                Some(Filled {
                    superpage: sp,
                    bytes_used,
                    units,
                    sequence,
                    unit_bytes: 0,
                })
            })
            .collect();
        back.sort_by_key(|f| f.sequence);
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(back);
    }

    fn data(&self) -> Vec<(usize, *const u8)> {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|f| (f.bytes_used, f.data().as_ptr()))
            .collect()
    }
}

impl DmaChannel<Superpage> for Replay {
    fn push_superpage(&self, superpage: Superpage) -> Result<(), Superpage> {
        self.returned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(superpage);
        Ok(())
    }

    fn pop_superpage(&self) -> Option<Filled<Superpage>> {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    fn transfer_queue_available(&self) -> usize {
        usize::MAX
    }

    fn status(&self) -> ChannelStatus {
        ChannelStatus {
            link_up: false,
            transfer_queue_len: 0,
            ready_queue_len: self.ready.lock().map(|q| q.len()).unwrap_or(0),
            counters: ChannelCounters::default(),
        }
    }
}

/// Generates the input of one channel: `l1ids` events on `elinks` into 1 MiB superpages.
fn generate(elinks: Vec<u16>, payload_words: u32, l1ids: u64) -> anyhow::Result<Replay> {
    let per_packet = 8 + 4 * payload_words as u64 + 4;
    let bytes = l1ids * elinks.len() as u64 * per_packet * 21 / 20 + 4 * SUPERPAGE as u64;
    let n = (bytes as usize).div_ceil(SUPERPAGE);
    let pool = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes: SUPERPAGE,
        superpages: n,
        region: RegionOptions::default(),
    })
    .context("superpage pool for the input")?;
    let gen = FelixGenerator::new(&FelixConfig {
        elinks,
        payload_words: WordRange::fixed(payload_words),
        ..FelixConfig::default()
    })?;
    let mut card = EmulatedChannel::start(
        "swrod-card",
        EmulatedConfig {
            queue_depth: n,
            ..EmulatedConfig::default()
        },
        gen,
    )?;
    for _ in 0..n {
        let sp = pool.alloc().context("superpage")?;
        card.push_superpage(sp)
            .map_err(|_| anyhow::anyhow!("transfer queue full"))?;
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut filled = Vec::with_capacity(n);
    while filled.len() < n {
        match card.pop_superpage() {
            Some(f) => filled.push(f),
            None => {
                anyhow::ensure!(Instant::now() < deadline, "the card never filled the input");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    card.stop();
    Ok(Replay::new(filled))
}

/// Best copy bandwidth of the replay inputs, one thread per channel.
fn memcpy_pass(inputs: &[Replay], reps: usize) -> f64 {
    let total: u64 = inputs.iter().map(|r| r.bytes).sum();
    let mut dsts: Vec<Vec<u8>> = inputs.iter().map(|r| vec![1u8; r.bytes as usize]).collect();
    let sources: Vec<Vec<(usize, usize)>> = inputs
        .iter()
        .map(|r| r.data().into_iter().map(|(n, p)| (n, p as usize)).collect())
        .collect();
    let mut best = 0f64;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        std::thread::scope(|s| {
            for (dst, src) in dsts.iter_mut().zip(&sources) {
                s.spawn(move || {
                    let mut at = 0;
                    for &(n, p) in src {
                        // SAFETY: `p` points at `n` initialised bytes of a superpage held by
                        // its Replay (in the ready queue, untouched) for the whole pass.
                        let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, n) };
                        dst[at..at + n].copy_from_slice(black_box(bytes));
                        at += n;
                    }
                    black_box(&dst);
                });
            }
        });
        best = best.max(total as f64 / t.elapsed().as_secs_f64());
    }
    best
}

fn measure(elinks: usize, payload: usize, threads: usize, args: &Args) -> anyhow::Result<Row> {
    anyhow::ensure!(payload % 4 == 0, "--packet-bytes must be a multiple of 4");
    anyhow::ensure!((1..=8).contains(&threads), "--threads must be 1..=8");
    anyhow::ensure!(
        (threads..=2048).contains(&elinks),
        "--elinks must be at least the thread count and at most 2048"
    );
    let groups: Vec<Vec<u16>> = (0..threads)
        .map(|t| {
            ((t * elinks / threads)..((t + 1) * elinks / threads))
                .map(|e| e as u16)
                .collect()
        })
        .collect();
    let l1ids = args.packets.div_ceil(elinks as u64).max(1);
    let inputs = groups
        .iter()
        .map(|g| generate(g.clone(), (payload / 4) as u32, l1ids))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let input_bytes: u64 = inputs.iter().map(|r| r.bytes).sum();
    let memcpy = memcpy_pass(&inputs, args.reps);
    let config = SwRodConfig {
        thread_elinks: groups,
        cpus: if args.pin {
            (0..threads).collect()
        } else {
            Vec::new()
        },
        ..SwRodConfig::default()
    };
    let chunk = config.block_bytes_for(payload + 8);
    // One block pool per thread: a block only ever cycles through its own thread's caches.
    let pools = (0..threads)
        .map(|_| {
            ChunkPool::new(PoolConfig {
                chunk_bytes: chunk,
                chunks_per_region: 2 * config.window,
                max_regions: 1,
                initial_regions: 1,
                region: RegionOptions::default(),
            })
            .context("block pool")
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let builder = FragmentBuilder::new(&config, &pools, DefaultFormat::default())?;
    let chans: Vec<Vec<&Replay>> = inputs.iter().map(|r| vec![r]).collect();
    let stop = AtomicBool::new(false);
    let mut runs = Vec::new();
    for _ in 0..args.reps.max(1) {
        for r in &inputs {
            r.rewind();
        }
        let sink = CountingSink::new();
        let t = Instant::now();
        let c = builder.run(&chans, &sink, &stop)?;
        let dt = t.elapsed().as_secs_f64();
        runs.push((dt, c));
    }
    let mut rates: Vec<f64> = runs.iter().map(|(dt, c)| c.packets as f64 / dt).collect();
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    let (dt, c) = runs
        .iter()
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .copied()
        .context("no run")?;
    let bytes_per_s = input_bytes as f64 / dt;
    Ok(Row {
        elinks,
        packet_bytes: payload,
        threads,
        packets_per_s: c.packets as f64 / dt,
        median_packets_per_s: median,
        fragments_per_s: c.fragments as f64 / dt,
        bytes_per_s,
        ns_per_packet: dt * 1e9 / c.packets.max(1) as f64,
        cpu_ns_per_packet: cpu_ns_per_packet(&c),
        dedicated_cores_packets_per_s: threads as f64 * 1e9 / cpu_ns_per_packet(&c).max(1e-3),
        memcpy_bytes_per_s: memcpy,
        memcpy_ratio: bytes_per_s / memcpy,
        input_bytes,
        packets: c.packets,
        fragments: c.fragments,
        incomplete_fragments: c.incomplete_fragments,
        dropped_packets: c.corrupt_packets
            + c.duplicate_packets
            + c.late_packets
            + c.overflow_packets,
        slot_waits: c.slot_waits,
        pool_waits: c.pool_waits,
    })
}

/// CPU time of the receiving threads per packet (the threads' own clocks: time the machine
/// gave to other processes is not counted).
fn cpu_ns_per_packet(c: &SwRodCounters) -> f64 {
    c.cpu_ns as f64 / c.packets.max(1) as f64
}

fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs the measurement grid that `args` selects and returns its report.
pub fn measure_report(args: &Args) -> anyhow::Result<Report> {
    let elinks: Vec<usize> = args.elinks.map_or(ELINKS.to_vec(), |e| vec![e]);
    let payloads: Vec<usize> = args.packet_bytes.map_or(PAYLOADS.to_vec(), |p| vec![p]);
    let threads: Vec<usize> = args.threads.map_or(THREADS.to_vec(), |t| vec![t]);
    let mut report = Report::new("swrod");
    if let Some(l) = loadavg() {
        report
            .fields
            .insert("loadavg_1m_start".into(), Value::from(l));
    }
    report.fields.insert("pinned".into(), Value::from(args.pin));
    let mut target = None;
    for &e in &elinks {
        for &p in &payloads {
            for &t in &threads {
                let row = measure(e, p, t, args)?;
                if (e, p, t) == (120, 40, 2) {
                    target = Some((row.packets_per_s >= 1e8, row.packets_per_s));
                }
                report.push_row(&row)?;
            }
        }
    }
    if let Some(l) = loadavg() {
        report
            .fields
            .insert("loadavg_1m_end".into(), Value::from(l));
    }
    report
        .fields
        .insert("target_packets_per_s".into(), Value::from(1e8));
    if let Some((met, rate)) = target {
        report.fields.insert("target_met".into(), Value::from(met));
        report.add_target(
            "SW ROD packet rate (120 E-links, 40-byte payloads, 2 threads)",
            format!("{:.1} M packets/s", rate / 1e6),
            ">= 100 M packets/s".into(),
            met,
        );
    }
    Ok(report)
}
