//! `rodeo bench dma`: emulated DMA-channel throughput into pool superpages, against memcpy.
//!
//! # Workload
//!
//! For each superpage size (32 KiB .. 64 MiB; fewer with `--quick`) and for 1 and 2 channels,
//! every channel gets its own [`SuperpagePool`] (mapped and warmed before the point starts), its
//! own [`EmulatedChannel`] (one card: one DMA engine thread) and its own reader thread that pops
//! each filled superpage, reads its first word (so the data is "read"), notes the time and
//! pushes it straight back. After a short warm-up, the rate is measured over `--seconds` (1 s;
//! 0.2 s with `--quick`): the bytes of the superpages the reader popped between its first and
//! its last pop of that interval, over the time between the two (not the counters sampled at
//! two instants, which are off by up to a superpage: 64 MiB, 1% of a second's bytes).
//!
//! # What the card does: `--generator` and `--fill`
//!
//! - S-LINK, `payload` (the default, and the throughput figure): a DMA engine moves bytes from
//!   the card's FIFO into host memory. The emulated card does the same: it holds one ROD
//!   fragment of 4 KiB data ([`SlinkGenerator`]'s, generated once when the card starts) in a
//!   card-side source buffer and, per unit, copies it into the superpage and patches the words
//!   that change (extended L1ID and BCID). Every byte of every unit is moved, and the move is a
//!   memcpy: `bytes_per_s` is the bytes copied into superpages.
//! - S-LINK, `headers-only`: the card writes each fragment's header, status and trailer words
//!   and leaves the data words as the previous fill left them, as a firmware generator
//!   rewriting only the words that change would. `bytes_per_s` is then the header and trailer
//!   bytes actually written (52 per fragment); the superpage bytes the fragments cover are in
//!   `covered_bytes_not_moved_per_s`, which measures superpage bookkeeping, not bytes moved.
//! - FELIX (`--generator felix`, `payload` only): [`FelixGenerator`], 8 E-links, packets of 62
//!   payload words, 1 KiB blocks: each packet is generated into its E-link's block, each full
//!   block copied into the superpage (generation and a copy: more work than the copy alone).
//!
//! # Baseline
//!
//! Per row, on the row's own superpages (the same memory, the same huge pages, the same
//! footprint the card writes): `memcpy_bytes_per_s`, one thread per channel, all at once, each
//! copying the card's unit (the 4,148-byte fragment, or the 1 KiB FELIX block) from a source
//! buffer of that size (hot in cache, as the card's FIFO is) back to back into every superpage
//! of its channel, as many whole units as fit, as the card fills them. That is the card's copy
//! without the card's work around it (queues, L1ID patching, packet encoding), so a card cannot
//! honestly beat it. The baseline is measured just before the point and again just after it
//! (`memcpy_before_bytes_per_s`, `memcpy_after_bytes_per_s`), each the best pass of at least
//! 10 and 300 ms per thread (with 5 passes and 100 ms, the best pass of a busy machine's
//! shared memory bus was often not the copy's speed: rows at 1.01-1.19), a pass's rate being its bytes per second of the copying thread's own
//! CPU time (a 256 MiB pass outlasts a time slice: on a shared machine its wall-clock rate
//! would be the scheduler's share, not the copy's speed, and a card that got a larger share
//! during its second would come out faster than memcpy), summed over the threads;
//! `memcpy_bytes_per_s` is the better of the two. On a quiet machine CPU and wall-clock time
//! agree. `ratio_to_memcpy` is a row's `bytes_per_s` (wall clock) over it: at most 1, since a
//! card moves at most its CPU time's worth; `cpu_ratio_to_memcpy` compares the card's bytes
//! per second of its own CPU with memcpy's, a figure the machine's load does not move. At top level,
//! `memcpy_64mib_bytes_per_s`: one thread copying a 64 MiB buffer into another (the former
//! single baseline) and `max_ratio_to_memcpy`, the largest row's ratio.
//!
//! `card_cpu_per_s` is the CPU time the emulated cards' engine threads used per second of the
//! point (cores busy with the emulation), from `EmulatedChannel::card_cpu_ns`.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig, Fill, Generator};
use rodeo_cards::generator::{FelixConfig, FelixGenerator, SlinkConfig, SlinkGenerator, WordRange};
use rodeo_memory::{RegionOptions, Superpage, SuperpagePool, SuperpagePoolConfig};
use serde::Serialize;
use serde_json::Value;

use crate::report::Report;
use crate::study::rounds::summarize;

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// Arguments of `rodeo bench dma`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Fewer superpage sizes and shorter points (0.2 s), for smoke tests.
    #[arg(long)]
    pub quick: bool,
    /// Seconds measured per point (default 1, or 0.2 with `--quick`).
    #[arg(long, value_name = "S", value_parser = rodeo_ros::cli_values::seconds)]
    pub seconds: Option<f64>,
    /// The card's generator mode.
    #[arg(long, value_enum, default_value = "slink")]
    pub generator: Mode,
    /// What the card writes: every payload byte (the throughput figure), or headers only
    /// (S-LINK; rows then say how few bytes were written, see the module docs).
    #[arg(long, value_enum, default_value = "payload")]
    pub fill: FillMode,
    /// Measurements of every point, the points interleaved (each repetition sweeps them in a
    /// new order); a row gives the median over them and their spread. Default 3 (1 with
    /// `--quick`): a single second of a cache-sized point can land a few percent either side
    /// of its baseline on a shared machine; the median of three does not.
    #[arg(long, value_name = "N", value_parser = rodeo_ros::cli_values::count(1..=1000))]
    pub repeat: Option<usize>,
}

/// Generator mode of the emulated cards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// S-LINK mode: ROD fragments of 4 KiB data, copied from the card's FIFO.
    Slink,
    /// FELIX mode: 8 E-links, packets of 62 payload words, 1 KiB blocks (encoded per packet).
    Felix,
}

impl Mode {
    /// The generator's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Slink => "slink",
            Mode::Felix => "felix",
        }
    }
}

/// What the emulated card writes into a superpage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FillMode {
    /// Every byte of every unit: the bytes moved.
    Payload,
    /// S-LINK fragments' header, status and trailer words only: not a throughput.
    HeadersOnly,
}

impl FillMode {
    /// The mode's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            FillMode::Payload => "payload",
            FillMode::HeadersOnly => "headers-only",
        }
    }
}

/// Data words of the benchmark's S-LINK fragments.
const SLINK_DATA_WORDS: u32 = 1024;

/// The S-LINK fragments' words a headers-only card writes: 9 header words, the status word and
/// 3 trailer words.
const HEADER_ONLY_WORDS: usize = 13;

/// An S-LINK card that writes only each fragment's header, status and trailer words (the words
/// a firmware generator would change from one event to the next), leaving the data words as
/// they were: what `--fill headers-only` measures. The layout is [`SlinkGenerator`]'s without
/// framing.
struct HeadersOnly {
    source_id: u32,
    l1id: u32,
}

/// An S-LINK card's DMA engine: one ROD fragment (generated once, in the card's FIFO) copied
/// into the superpage per unit, its extended L1ID and BCID words patched: what `--fill payload`
/// measures. Every byte is moved, by a memcpy of the fragment.
struct FifoCard {
    /// The fragment the card moves: [`SlinkGenerator`]'s first, without framing.
    fifo: Box<[u8]>,
    l1id: u32,
}

/// Byte offsets of the ROD header's extended L1ID and BCID words.
const L1ID_AT: usize = 4 * 5;
const BCID_AT: usize = 4 * 6;

impl FifoCard {
    fn new(source_id: u32) -> FifoCard {
        FifoCard {
            fifo: slink_fragment(source_id),
            l1id: 0,
        }
    }
}

/// [`SlinkGenerator`]'s first fragment of the benchmark's size for `source_id`.
fn slink_fragment(source_id: u32) -> Box<[u8]> {
    let config = SlinkConfig {
        source_id,
        data_words: WordRange::fixed(SLINK_DATA_WORDS),
        ..SlinkConfig::default()
    };
    let mut fragment = vec![0u8; 4 * config.fragment_words(SLINK_DATA_WORDS)];
    let fill = SlinkGenerator::new(config).fill(&mut fragment, 1);
    debug_assert_eq!(fill.bytes, fragment.len());
    fragment.into_boxed_slice()
}

impl Generator for FifoCard {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let unit = self.fifo.len();
        let mut fill = Fill::default();
        for out in buf.chunks_exact_mut(unit) {
            if fill.units >= max_units {
                break;
            }
            out.copy_from_slice(&self.fifo);
            let l1id = self.l1id;
            out[L1ID_AT..L1ID_AT + 4].copy_from_slice(&l1id.to_le_bytes());
            out[BCID_AT..BCID_AT + 4].copy_from_slice(&(l1id.wrapping_mul(7) % 3564).to_le_bytes());
            self.l1id = (self.l1id + 1) & 0x00FF_FFFF;
            fill.bytes += unit;
            fill.units += 1;
        }
        fill
    }
}

impl Generator for HeadersOnly {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let words = 4 * (HEADER_ONLY_WORDS + SLINK_DATA_WORDS as usize);
        let mut fill = Fill::default();
        while fill.units < max_units {
            let Some(out) = buf.get_mut(fill.bytes..fill.bytes + words) else {
                break;
            };
            let l1id = self.l1id;
            let head = [
                rodeo_format::fragment::ROD_MARKER,
                9,
                rodeo_format::fragment::ROD_FORMAT_VERSION,
                self.source_id,
                1,
                l1id,
                l1id.wrapping_mul(7) % 3564,
                1,
                0,
                0,
            ];
            for (w, b) in head.iter().zip(out.chunks_exact_mut(4)) {
                b.copy_from_slice(&w.to_le_bytes());
            }
            let tail = [1, SLINK_DATA_WORDS, 0];
            let at = out.len() - 12;
            for (w, b) in tail.iter().zip(out[at..].chunks_exact_mut(4)) {
                b.copy_from_slice(&w.to_le_bytes());
            }
            self.l1id = (self.l1id + 1) & 0x00FF_FFFF;
            fill.bytes += words;
            fill.units += 1;
        }
        fill
    }
}

fn start_channel(
    mode: Mode,
    fill: FillMode,
    c: usize,
    config: EmulatedConfig,
) -> anyhow::Result<EmulatedChannel<Superpage>> {
    let name = format!("card{c}");
    let source_id = 0x0011_0000 | c as u32;
    Ok(match (mode, fill) {
        (Mode::Slink, FillMode::HeadersOnly) => {
            EmulatedChannel::start(&name, config, HeadersOnly { source_id, l1id: 0 })?
        }
        (Mode::Felix, FillMode::HeadersOnly) => {
            anyhow::bail!("--fill headers-only is an S-LINK mode: use --generator slink")
        }
        (Mode::Slink, FillMode::Payload) => {
            EmulatedChannel::start(&name, config, FifoCard::new(source_id))?
        }
        (Mode::Felix, FillMode::Payload) => {
            EmulatedChannel::start(&name, config, FelixGenerator::new(&FelixConfig::default())?)?
        }
    })
}

/// One measured point.
#[derive(Debug, Serialize)]
struct Row {
    superpage_bytes: usize,
    channels: usize,
    generator: &'static str,
    /// `payload` or `headers-only`.
    fill: &'static str,
    /// Bytes the cards actually wrote into superpages per second.
    bytes_per_s: f64,
    /// Bytes of superpage the written units cover per second: the same as `bytes_per_s` with
    /// `payload`; with `headers-only` superpage bookkeeping, not bytes moved.
    covered_bytes_not_moved_per_s: f64,
    per_channel_bytes_per_s: f64,
    min_channel_bytes_per_s: f64,
    /// The row's memcpy baseline (module docs): the card's unit copied into the row's own
    /// superpages, one thread per channel; the better of `memcpy_before_bytes_per_s` and
    /// `memcpy_after_bytes_per_s`.
    memcpy_bytes_per_s: f64,
    /// The baseline measured just before the point.
    memcpy_before_bytes_per_s: f64,
    /// The baseline measured just after the point.
    memcpy_after_bytes_per_s: f64,
    /// `bytes_per_s / memcpy_bytes_per_s`.
    ratio_to_memcpy: f64,
    superpages_per_s: f64,
    units_per_s: f64,
    /// CPU seconds per second the cards' engine threads used (cores busy emulating).
    card_cpu_per_s: f64,
    /// `bytes_per_s / card_cpu_per_s`: bytes written per second of the cards' CPU (what a
    /// card would write on a core of its own; on a loaded machine `bytes_per_s` is less).
    bytes_per_card_cpu_s: f64,
    /// `bytes_per_card_cpu_s` over one thread's share of the baseline
    /// (`memcpy_bytes_per_s / channels`): the card's bytes per CPU second against memcpy's,
    /// a figure the machine's load does not move.
    cpu_ratio_to_memcpy: f64,
    stalls: u64,
    /// Measurements of the point (the statistics are medians over them).
    repeats: usize,
    /// (max - min) / median of `bytes_per_s` over the repetitions.
    bytes_per_s_spread: f64,
}

/// Best single-thread memcpy bandwidth of a `len`-byte buffer over `reps` copies.
fn memcpy_bandwidth(len: usize, reps: usize) -> f64 {
    let src: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let mut dst = vec![0u8; len];
    dst.copy_from_slice(&src); // fault the destination in first
    let mut best = 0f64;
    for _ in 0..reps {
        let t = Instant::now();
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
        best = best.max(len as f64 / t.elapsed().as_secs_f64());
    }
    best
}

/// The unit a card of `mode` moves: its bytes (the baseline's source) and length.
fn card_unit(mode: Mode) -> anyhow::Result<Box<[u8]>> {
    Ok(match mode {
        Mode::Slink => slink_fragment(0x0011_0000),
        Mode::Felix => {
            let g = FelixGenerator::new(&FelixConfig::default())?;
            (0..g.block_size()).map(|i| i as u8).collect()
        }
    })
}

/// The memcpy baseline of a row (module docs): per channel a thread copying `unit` back to back
/// into every superpage of `pages[c]`, as many whole units as fit, all threads at once; at
/// least 10 passes and 300 ms each; per thread the best pass's bytes per second of the thread's
/// own CPU time (what the copy moves on a core of its own, however loaded the machine: a pass
/// of a 256 MiB footprint lasts longer than a time slice, so on a shared machine its wall-clock
/// rate is the scheduler's, not the copy's), summed over the threads.
fn memcpy_baseline(pages: &mut [Vec<Superpage>], unit: &[u8]) -> f64 {
    std::thread::scope(|s| {
        let handles: Vec<_> = pages
            .iter_mut()
            .map(|sps| {
                s.spawn(move || {
                    let src = unit.to_vec();
                    let pass = |sps: &mut [Superpage]| -> usize {
                        let mut bytes = 0;
                        for sp in sps.iter_mut() {
                            for out in sp.chunks_exact_mut(src.len()) {
                                out.copy_from_slice(black_box(&src));
                                bytes += src.len();
                            }
                            black_box(&mut **sp);
                        }
                        bytes
                    };
                    pass(sps); // the superpages and the source in the state the card finds them
                    let mut best = 0f64;
                    let start = Instant::now();
                    let mut passes = 0;
                    while passes < 10 || start.elapsed() < Duration::from_millis(300) {
                        let cpu = rodeo_memory::cpu::thread_cpu_time();
                        let bytes = pass(sps);
                        let cpu = rodeo_memory::cpu::thread_cpu_time().saturating_sub(cpu);
                        best = best.max(bytes as f64 / cpu.as_secs_f64().max(1e-9));
                        passes += 1;
                    }
                    best
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
    })
}

/// Superpages per channel pool: enough to keep card and reader busy, at most 256 MiB.
fn superpages_for(size: usize) -> usize {
    (256 * MIB / size).clamp(4, 32)
}

/// One point's measurement, summed over its channels.
struct Point {
    /// Per channel: superpage bytes covered per second.
    rates: Vec<f64>,
    stalls: u64,
    superpages: u64,
    units: u64,
    /// CPU time of the cards' engine threads, in nanoseconds.
    card_cpu_ns: u64,
    /// The baseline on the point's superpages, before and after it.
    memcpy_before: f64,
    memcpy_after: f64,
}

/// Every superpage of each pool (the pools hand out the same memory each time).
fn take_all(pools: &[SuperpagePool]) -> Vec<Vec<Superpage>> {
    pools
        .iter()
        .map(|p| std::iter::from_fn(|| p.alloc().ok()).collect())
        .collect()
}

/// A reader's pops: when, and how many bytes the superpage held.
type Pops = Vec<(Instant, usize)>;

/// The rate of the superpages popped in `from..to`: the bytes of every pop after the first
/// of the interval, up to its last, over the time between the two; `None` with fewer than two
/// pops in the interval.
fn pop_rate(pops: &[(Instant, usize)], from: Instant, to: Instant) -> Option<f64> {
    let inside: Vec<&(Instant, usize)> = pops
        .iter()
        .filter(|(t, _)| *t >= from && *t <= to)
        .collect();
    let (first, last) = (inside.first()?, inside.last()?);
    let dt = last.0.duration_since(first.0).as_secs_f64();
    if inside.len() < 2 || dt <= 0.0 {
        return None;
    }
    let bytes: usize = inside[1..].iter().map(|(_, b)| b).sum();
    Some(bytes as f64 / dt)
}

/// Measures one point, its baseline on the same superpages just before and just after it.
fn measure(
    mode: Mode,
    fill: FillMode,
    size: usize,
    channels: usize,
    seconds: f64,
) -> anyhow::Result<Point> {
    let n = superpages_for(size);
    let pools = (0..channels)
        .map(|_| {
            SuperpagePool::new(SuperpagePoolConfig {
                superpage_bytes: size,
                superpages: n,
                region: RegionOptions::default(),
            })
            .context("creating a superpage pool")
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let unit = card_unit(mode)?;
    let mut pages = take_all(&pools);
    let memcpy_before = memcpy_baseline(&mut pages, &unit);
    let stop = Arc::new(AtomicBool::new(false));
    let mut chans = Vec::new();
    for (c, sps) in pages.into_iter().enumerate() {
        let ch = Arc::new(start_channel(
            mode,
            fill,
            c,
            EmulatedConfig {
                queue_depth: n,
                ..EmulatedConfig::default()
            },
        )?);
        for sp in sps {
            if ch.push_superpage(sp).is_err() {
                break;
            }
        }
        let reader = {
            let ch = Arc::clone(&ch);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("reader{c}"))
                .spawn(move || {
                    // An idle reader yields a few times, then sleeps: on a machine with as
                    // many cores as channels, a spinning reader would steal its card's core.
                    let mut idle = rodeo_memory::Backoff::new(rodeo_memory::BackoffSpec {
                        spins: 0,
                        yields: 8,
                        min_sleep_us: 20,
                        max_sleep_us: 20,
                    });
                    let mut pops: Pops = Vec::with_capacity(1 << 16);
                    while !stop.load(Ordering::Relaxed) {
                        match ch.pop_superpage() {
                            Some(filled) => {
                                idle.reset();
                                black_box(filled.data().first());
                                pops.push((Instant::now(), filled.bytes_used));
                                // The superpage came from this channel, so it fits back.
                                let _ = ch.push_superpage(filled.superpage);
                            }
                            None => idle.wait(),
                        }
                    }
                    pops
                })?
        };
        chans.push((ch, reader));
    }
    // Warm-up: let every channel fill a few superpages first.
    std::thread::sleep(Duration::from_secs_f64((seconds / 5.0).min(0.1)));
    let cpu = |chans: &[(Arc<EmulatedChannel<Superpage>>, _)]| -> u64 {
        chans.iter().map(|(ch, _)| ch.card_cpu_ns()).sum()
    };
    let cpu_before = cpu(&chans);
    let before: Vec<_> = chans.iter().map(|(ch, _)| ch.status().counters).collect();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let t1 = Instant::now();
    let after: Vec<_> = chans.iter().map(|(ch, _)| ch.status().counters).collect();
    let card_cpu_ns = cpu(&chans).saturating_sub(cpu_before);
    let dt = t1.duration_since(t0).as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut stalls = 0;
    let mut superpages = 0;
    let mut units = 0;
    let mut rates = Vec::with_capacity(channels);
    for ((ch, reader), (b, a)) in chans.into_iter().zip(before.iter().zip(&after)) {
        stalls += a.stalls - b.stalls;
        superpages += a.superpages - b.superpages;
        units += a.units - b.units;
        let pops = reader
            .join()
            .map_err(|_| anyhow::anyhow!("a reader thread panicked"))?;
        // Too few superpages popped to time (a very slow card): the counters' rate.
        let rate = pop_rate(&pops, t0, t1).unwrap_or((a.bytes - b.bytes) as f64 / dt);
        rates.push(rate);
        // The channel (and its card thread) stops as it goes; its superpages go back to
        // their pool.
        drop(ch);
    }
    let mut pages = take_all(&pools);
    let memcpy_after = memcpy_baseline(&mut pages, &unit);
    Ok(Point {
        rates,
        stalls,
        superpages,
        units,
        card_cpu_ns,
        memcpy_before,
        memcpy_after,
    })
}

/// Runs the measurement and returns its report (also used by `rodeo study dma`).
pub fn measure_report(args: Args) -> anyhow::Result<Report> {
    let seconds = args.seconds.unwrap_or(if args.quick { 0.2 } else { 1.0 });
    anyhow::ensure!(seconds > 0.0, "--seconds must be positive");
    let sizes: &[usize] = if args.quick {
        &[32 * KIB, 2 * MIB]
    } else {
        &[32 * KIB, 128 * KIB, 512 * KIB, 2 * MIB, 8 * MIB, 64 * MIB]
    };
    let repeat = args.repeat.unwrap_or(if args.quick { 1 } else { 3 });
    anyhow::ensure!(repeat >= 1, "--repeat must be at least 1");
    let points: Vec<(usize, usize)> = sizes
        .iter()
        .flat_map(|&size| [1, 2].map(|channels| (size, channels)))
        .collect();
    // Per point and repetition: covered bytes/s (total, slowest channel), superpages/s,
    // units/s, stalls, and the point's memcpy baseline, measured right before it.
    struct Run {
        covered: f64,
        slowest: f64,
        superpages: f64,
        units: f64,
        stalls: u64,
        memcpy: f64,
        memcpy_before: f64,
        memcpy_after: f64,
        card_cpu: f64,
    }
    let mut runs: Vec<Vec<Run>> = (0..points.len()).map(|_| Vec::new()).collect();
    let mut memcpys = Vec::new();
    for rep in 0..repeat {
        memcpys.push(memcpy_bandwidth(64 * MIB, if args.quick { 3 } else { 8 }));
        for i in crate::study::rounds::order(points.len(), rep, 0xd3a) {
            let (size, channels) = points[i];
            let p = measure(args.generator, args.fill, size, channels, seconds)?;
            runs[i].push(Run {
                covered: p.rates.iter().sum(),
                slowest: p.rates.iter().copied().fold(f64::INFINITY, f64::min),
                superpages: p.superpages as f64 / seconds,
                units: p.units as f64 / seconds,
                stalls: p.stalls,
                memcpy: p.memcpy_before.max(p.memcpy_after),
                memcpy_before: p.memcpy_before,
                memcpy_after: p.memcpy_after,
                card_cpu: p.card_cpu_ns as f64 * 1e-9 / seconds,
            });
        }
    }
    let memcpy = summarize(&memcpys).median;
    let mut report = Report::new("dma");
    report
        .fields
        .insert("memcpy_64mib_bytes_per_s".into(), Value::from(memcpy));
    report
        .fields
        .insert("fill".into(), Value::from(args.fill.name()));
    report.fields.insert("repeat".into(), Value::from(repeat));
    report.fields.insert(
        "statistic".into(),
        "median over repetitions, points interleaved".into(),
    );
    let median = |rs: &[Run], f: &dyn Fn(&Run) -> f64| {
        summarize(&rs.iter().map(f).collect::<Vec<_>>()).median
    };
    let mut best_2ch = 0f64;
    let mut max_ratio = 0f64;
    for (&(size, channels), rs) in points.iter().zip(&runs) {
        let covered = summarize(&rs.iter().map(|r| r.covered).collect::<Vec<_>>());
        // Bytes actually written: all of them, or the header and trailer words per unit.
        let written_share = match args.fill {
            FillMode::Payload => 1.0,
            FillMode::HeadersOnly => {
                HEADER_ONLY_WORDS as f64 / (HEADER_ONLY_WORDS + SLINK_DATA_WORDS as usize) as f64
            }
        };
        let written = covered.median * written_share;
        let row_memcpy = median(rs, &|r| r.memcpy);
        let ratio = written / row_memcpy;
        max_ratio = max_ratio.max(ratio);
        if channels == 2 {
            best_2ch = best_2ch.max(ratio);
        }
        let mut stalls: Vec<u64> = rs.iter().map(|r| r.stalls).collect();
        stalls.sort_unstable();
        report.push_row(&Row {
            superpage_bytes: size,
            channels,
            generator: args.generator.name(),
            fill: args.fill.name(),
            bytes_per_s: written,
            covered_bytes_not_moved_per_s: covered.median,
            per_channel_bytes_per_s: written / channels as f64,
            min_channel_bytes_per_s: median(rs, &|r| r.slowest) * written_share,
            memcpy_bytes_per_s: row_memcpy,
            memcpy_before_bytes_per_s: median(rs, &|r| r.memcpy_before),
            memcpy_after_bytes_per_s: median(rs, &|r| r.memcpy_after),
            ratio_to_memcpy: ratio,
            superpages_per_s: median(rs, &|r| r.superpages),
            units_per_s: median(rs, &|r| r.units),
            card_cpu_per_s: median(rs, &|r| r.card_cpu),
            bytes_per_card_cpu_s: written / median(rs, &|r| r.card_cpu).max(1e-9),
            cpu_ratio_to_memcpy: written
                / median(rs, &|r| r.card_cpu).max(1e-9)
                / (row_memcpy / channels as f64),
            stalls: stalls[stalls.len() / 2],
            repeats: rs.len(),
            bytes_per_s_spread: covered.spread,
        })?;
    }
    report
        .fields
        .insert("best_ratio_2ch".into(), Value::from(best_2ch));
    report
        .fields
        .insert("max_ratio_to_memcpy".into(), Value::from(max_ratio));
    report
        .fields
        .insert("target_met".into(), Value::from(best_2ch >= 0.5));
    report.add_target(
        "2-channel DMA throughput as a share of memcpy",
        format!("{:.0}%", 100.0 * best_2ch),
        ">= 50%".into(),
        best_2ch >= 0.5,
    );
    Ok(report)
}
