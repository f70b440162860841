//! `rodeo bench dma`: emulated DMA-channel throughput into pool superpages, against memcpy.
//!
//! # Workload
//!
//! For each superpage size (32 KiB .. 64 MiB; fewer with `--quick`) and for 1 and 2 channels,
//! every channel gets its own [`SuperpagePool`] (mapped and warmed before the point starts), its
//! own [`EmulatedChannel`] (the card thread) running the **S-LINK-mode** generator by default
//! ([`SlinkGenerator`]: whole ROD fragments of 4 KiB data, counter payload written in one pass
//! straight into the superpage, as a card's DMA engine writes it once; `--generator felix` runs
//! the FELIX-mode [`FelixGenerator`] instead), and its own reader thread
//! that pops each filled superpage, reads its first word (so the data is "read") and pushes it
//! straight back. After a short warm-up, the channel byte counters are sampled over `--seconds`
//! (1 s; 0.2 s with `--quick`); rows give total and per-channel bytes/s.
//!
//! # Baseline
//!
//! In the same run, `memcpy_bytes_per_s`: one thread copying a 64 MiB buffer into another
//! (`copy_from_slice`), best of several repetitions. `ratio_to_memcpy` is a row's total over it;
//! the readout issue's target is a ratio of at least 0.5 with 2 channels. The comparison is of
//! bytes delivered: a card only writes its bytes while memcpy reads and writes each one, so a
//! ratio above 1 is possible (and small superpage pools stay in cache).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig};
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
    #[arg(long, value_name = "S")]
    pub seconds: Option<f64>,
    /// The card's generator mode.
    #[arg(long, value_enum, default_value = "slink")]
    pub generator: Mode,
    /// Measurements of every point, the points interleaved (each repetition sweeps them in a
    /// new order); a row gives the median over them and their spread.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: usize,
}

/// Generator mode of the emulated cards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// S-LINK mode: ROD fragments of 4 KiB data written in one pass.
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

fn start_channel(
    mode: Mode,
    c: usize,
    config: EmulatedConfig,
) -> anyhow::Result<EmulatedChannel<Superpage>> {
    let name = format!("card{c}");
    Ok(match mode {
        Mode::Slink => EmulatedChannel::start(
            &name,
            config,
            SlinkGenerator::new(SlinkConfig {
                source_id: 0x0011_0000 | c as u32,
                data_words: WordRange::fixed(1024),
                ..SlinkConfig::default()
            }),
        )?,
        Mode::Felix => {
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
    bytes_per_s: f64,
    per_channel_bytes_per_s: f64,
    min_channel_bytes_per_s: f64,
    ratio_to_memcpy: f64,
    superpages_per_s: f64,
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

/// Superpages per channel pool: enough to keep card and reader busy, at most 256 MiB.
fn superpages_for(size: usize) -> usize {
    (256 * MIB / size).clamp(4, 32)
}

/// Measures one point; returns per-channel bytes/s and the stall count.
fn measure(
    mode: Mode,
    size: usize,
    channels: usize,
    seconds: f64,
) -> anyhow::Result<(Vec<f64>, u64, u64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut chans = Vec::new();
    for c in 0..channels {
        let n = superpages_for(size);
        let pool = SuperpagePool::new(SuperpagePoolConfig {
            superpage_bytes: size,
            superpages: n,
            region: RegionOptions::default(),
        })
        .context("creating a superpage pool")?;
        let ch = Arc::new(start_channel(
            mode,
            c,
            EmulatedConfig {
                queue_depth: n,
                ..EmulatedConfig::default()
            },
        )?);
        while let Ok(sp) = pool.alloc() {
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
                    let mut idle = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        match ch.pop_superpage() {
                            Some(filled) => {
                                idle = 0;
                                black_box(filled.data().first());
                                // The superpage came from this channel, so it fits back.
                                let _ = ch.push_superpage(filled.superpage);
                            }
                            None if idle < 8 => {
                                idle += 1;
                                std::thread::yield_now();
                            }
                            None => std::thread::sleep(Duration::from_micros(20)),
                        }
                    }
                })?
        };
        chans.push((ch, reader, pool));
    }
    // Warm-up: let every channel fill a few superpages first.
    std::thread::sleep(Duration::from_secs_f64((seconds / 5.0).min(0.1)));
    let before: Vec<_> = chans.iter().map(|(ch, ..)| ch.status().counters).collect();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let after: Vec<_> = chans.iter().map(|(ch, ..)| ch.status().counters).collect();
    let dt = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut stalls = 0;
    let mut superpages = 0;
    let rates = before
        .iter()
        .zip(&after)
        .map(|(b, a)| {
            stalls += a.stalls - b.stalls;
            superpages += a.superpages - b.superpages;
            (a.bytes - b.bytes) as f64 / dt
        })
        .collect();
    for (ch, reader, _pool) in chans {
        let _ = reader.join();
        // The channel (and its card thread) stops when its last Arc goes.
        drop(ch);
    }
    Ok((rates, stalls, superpages))
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
    anyhow::ensure!(args.repeat >= 1, "--repeat must be at least 1");
    let points: Vec<(usize, usize)> = sizes
        .iter()
        .flat_map(|&size| [1, 2].map(|channels| (size, channels)))
        .collect();
    // Per point and repetition: (total bytes/s, slowest channel, superpages/s, stalls).
    let mut runs: Vec<Vec<(f64, f64, f64, u64)>> = vec![Vec::new(); points.len()];
    let mut memcpys = Vec::new();
    for rep in 0..args.repeat {
        memcpys.push(memcpy_bandwidth(64 * MIB, if args.quick { 3 } else { 8 }));
        for i in crate::study::rounds::order(points.len(), rep, 0xd3a) {
            let (size, channels) = points[i];
            let (rates, stalls, superpages) = measure(args.generator, size, channels, seconds)?;
            runs[i].push((
                rates.iter().sum(),
                rates.iter().copied().fold(f64::INFINITY, f64::min),
                superpages as f64 / seconds,
                stalls,
            ));
        }
    }
    let memcpy = summarize(&memcpys).median;
    let mut report = Report::new("dma");
    report
        .fields
        .insert("memcpy_bytes_per_s".into(), Value::from(memcpy));
    report
        .fields
        .insert("repeat".into(), Value::from(args.repeat));
    report.fields.insert(
        "statistic".into(),
        "median over repetitions, points interleaved".into(),
    );
    let mut best_2ch = 0f64;
    for (&(size, channels), rs) in points.iter().zip(&runs) {
        let total = summarize(&rs.iter().map(|r| r.0).collect::<Vec<_>>());
        if channels == 2 {
            best_2ch = best_2ch.max(total.median / memcpy);
        }
        let mut stalls: Vec<u64> = rs.iter().map(|r| r.3).collect();
        stalls.sort_unstable();
        report.push_row(&Row {
            superpage_bytes: size,
            channels,
            generator: args.generator.name(),
            bytes_per_s: total.median,
            per_channel_bytes_per_s: total.median / channels as f64,
            min_channel_bytes_per_s: summarize(&rs.iter().map(|r| r.1).collect::<Vec<_>>()).median,
            ratio_to_memcpy: total.median / memcpy,
            superpages_per_s: summarize(&rs.iter().map(|r| r.2).collect::<Vec<_>>()).median,
            stalls: stalls[stalls.len() / 2],
            repeats: rs.len(),
            bytes_per_s_spread: total.spread,
        })?;
    }
    report
        .fields
        .insert("best_ratio_2ch".into(), Value::from(best_2ch));
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
