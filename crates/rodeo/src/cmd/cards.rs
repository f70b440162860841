//! `rodeo cards`: the configured cards, their channels and links, with status and counters.
//!
//! Starts the cards (the built-in set: an emulated FELIX card and a RobinNP-like S-LINK card,
//! plus a file player or network input when asked), reads every channel for `--seconds` with a
//! checking reader per card (superpages decoded as the receiving side would, then recycled), and
//! prints per channel: link state, queue depths, counters, rates, and every decoding problem by
//! kind. Like `roc-list-cards` and `roc-status` in the ALICE utilities, in one command.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rodeo_cards::card::{Card, CardSpec, ChannelSource, ChannelSpec};
use rodeo_cards::dma::EmulatedConfig;
use rodeo_cards::monitor::LinkMonitor;
use rodeo_cards::net::LinkAddress;
use rodeo_files::linkfile::LinkMode;
use rodeo_format::slink::SlinkCheckConfig;
use rodeo_memory::{RegionOptions, SuperpagePool, SuperpagePoolConfig};
use serde_json::{json, Map, Value};

use super::gen_link::ModeArg;

/// Arguments of `rodeo cards`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Seconds to run the cards before reporting.
    #[arg(long, default_value_t = 1.0, value_parser = rodeo_ros::cli_values::seconds)]
    seconds: f64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Leave out the built-in emulated cards.
    #[arg(long)]
    no_defaults: bool,
    /// Add a file-player channel replaying this link capture file (`rodeo gen link --output`).
    #[arg(long, value_name = "FILE")]
    play: Option<PathBuf>,
    /// Replay the file in a loop.
    #[arg(long = "loop", requires = "play")]
    looping: bool,
    /// Add a network input channel: udp://HOST:PORT or tcp://HOST:PORT.
    #[arg(long, value_name = "ADDRESS")]
    listen: Option<String>,
    /// What the network input carries.
    #[arg(long, value_enum, default_value = "felix", requires = "listen")]
    listen_mode: ModeArg,
    /// Network input: FELIX block size.
    #[arg(long, default_value_t = 1024, requires = "listen")]
    block_size: usize,
    /// Network input: S-LINK fragments are framed by control words.
    #[arg(long, requires = "listen")]
    framing: bool,
    /// Network input: S-LINK fragments carry a CRC word.
    #[arg(long, requires = "listen")]
    crc: bool,
}

/// Superpage size of the cards' pools.
const SUPERPAGE_BYTES: usize = 256 * 1024;
/// Superpages per channel.
const SUPERPAGES_PER_CHANNEL: usize = 4;

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.seconds > 0.0 && args.seconds.is_finite(),
        "--seconds {} must be a positive number",
        args.seconds
    );
    let mut specs = if args.no_defaults {
        Vec::new()
    } else {
        CardSpec::defaults()
    };
    let mut extra = Vec::new();
    if let Some(path) = &args.play {
        extra.push(ChannelSpec {
            source: ChannelSource::File {
                path: path.clone(),
                looping: args.looping,
            },
            config: EmulatedConfig::default(),
        });
    }
    if let Some(addr) = &args.listen {
        extra.push(ChannelSpec {
            source: ChannelSource::Net {
                address: LinkAddress::parse(addr)?,
                mode: match args.listen_mode {
                    ModeArg::Felix => LinkMode::Felix,
                    ModeArg::Slink => LinkMode::Slink,
                },
                block_size: args.block_size,
                slink: SlinkCheckConfig {
                    framing: args.framing,
                    crc: args.crc,
                    ..SlinkCheckConfig::default()
                },
                end_with_sender: false,
            },
            config: EmulatedConfig::default(),
        });
    }
    if !extra.is_empty() {
        specs.push(CardSpec {
            name: "input0".into(),
            channels: extra,
        });
    }
    anyhow::ensure!(
        !specs.is_empty(),
        "no card to show: drop --no-defaults, or add --play FILE or --listen ADDRESS"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let mut running = Vec::new();
    // Rates count from the first card's start: its counters run from there.
    let start = Instant::now();
    for spec in &specs {
        let card =
            Arc::new(Card::start(spec).with_context(|| format!("starting card {}", spec.name))?);
        let pool = SuperpagePool::new(SuperpagePoolConfig {
            superpage_bytes: SUPERPAGE_BYTES,
            superpages: SUPERPAGES_PER_CHANNEL * spec.channels.len(),
            region: RegionOptions::default(),
        })
        .with_context(|| format!("allocating superpages for card {}", spec.name))?;
        for c in card.channels() {
            rodeo_cards::card::check_unit_fits(c, SUPERPAGE_BYTES)
                .map_err(|e| anyhow::anyhow!("card {}: {e}", spec.name))?;
            for _ in 0..SUPERPAGES_PER_CHANNEL {
                let sp = pool.alloc().context("superpage pool too small")?;
                if c.channel.push_superpage(sp).is_err() {
                    break;
                }
            }
        }
        let reader = {
            let card = Arc::clone(&card);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("{}-reader", spec.name))
                .spawn(move || read_card(&card, &stop))
                .context("starting a reader thread")?
        };
        running.push((card, reader, pool));
    }
    // Every input is bound and reading: a sender may start now (scripts and tests wait for
    // this line).
    eprintln!("rodeo cards: {} card(s) running", running.len());
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let seconds = start.elapsed().as_secs_f64();
    let reports: Vec<_> = running.iter().map(|(card, ..)| card.report()).collect();
    // What the emulation cost: the CPU time of each card's engine threads over the run.
    let cpus: Vec<u64> = running.iter().map(|(card, ..)| card.cpu_ns()).collect();
    stop.store(true, Ordering::Relaxed);
    let mut cards = Vec::new();
    for (((card, reader, _pool), report), cpu_ns) in running.into_iter().zip(reports).zip(cpus) {
        let monitors = reader
            .join()
            .map_err(|_| anyhow::anyhow!("the reader of card {} panicked", card.name()))?;
        let channels: Vec<Value> = report
            .iter()
            .zip(&monitors)
            .map(|(r, m)| {
                let errors: Map<String, Value> = m
                    .counts()
                    .into_iter()
                    .skip(3)
                    .filter(|(name, v)| *v > 0 && is_problem(name))
                    .map(|(name, v)| (name.to_string(), json!(v)))
                    .collect();
                let c = r.status.counters;
                json!({
                    "channel": r.channel,
                    "link": r.link,
                    "link_up": r.status.link_up,
                    "transfer_queue": r.status.transfer_queue_len,
                    "ready_queue": r.status.ready_queue_len,
                    "superpages": c.superpages,
                    "units": c.units,
                    "bytes": c.bytes,
                    "bytes_per_s": c.bytes as f64 / seconds,
                    "units_per_s": c.units as f64 / seconds,
                    "stalls": c.stalls,
                    "stall_ns": c.stall_ns,
                    "good": m.good(),
                    "bad": m.bad(),
                    "net_dropped_units": r.net_dropped_units,
                    "net_kernel_dropped_units": r.net_kernel_dropped_units,
                    "input_state": r.net_state.map(|s| s.name()),
                    "errors": errors,
                })
            })
            .collect();
        cards.push(json!({
            "name": card.name(),
            "engine_threads": card.threads(),
            "cpu_ns": cpu_ns,
            "cpu_per_s": cpu_ns as f64 * 1e-9 / seconds,
            "channels": channels,
        }));
    }
    if args.json {
        outln!("{}", json!({"seconds": seconds, "cards": cards}));
    } else {
        print_table(&cards, seconds);
    }
    Ok(ExitCode::SUCCESS)
}

/// Counters that name problems (the rest count traffic).
fn is_problem(name: &str) -> bool {
    !matches!(name, "blocks" | "chunks" | "fragments" | "timeouts")
}

/// Pops every channel of the card in turn, decodes what arrived, gives the superpage back.
fn read_card(card: &Card, stop: &AtomicBool) -> Vec<LinkMonitor> {
    let mut monitors: Vec<LinkMonitor> = card
        .channels()
        .iter()
        .map(|c| LinkMonitor::for_mode(c.mode, c.block_size, c.slink))
        .collect();
    let mut backoff = rodeo_memory::Backoff::new(rodeo_memory::BackoffSpec::IDLE);
    while !stop.load(Ordering::Relaxed) {
        let mut idle = true;
        for (c, m) in card.channels().iter().zip(&mut monitors) {
            if let Some(filled) = c.channel.pop_superpage() {
                idle = false;
                m.consume(filled.data());
                // The superpage came from this channel's queue, so it fits back.
                let _ = c.channel.push_superpage(filled.superpage);
            }
        }
        if idle {
            backoff.wait();
        } else {
            backoff.reset();
        }
    }
    monitors
}

fn print_table(cards: &[Value], seconds: f64) {
    outln!("cards after {seconds:.2} s:");
    for card in cards {
        outln!(
            "{}  ({} engine thread(s), {:.1}% of a core)",
            card["name"].as_str().unwrap_or("?"),
            card["engine_threads"],
            100.0 * card["cpu_per_s"].as_f64().unwrap_or(0.0)
        );
        let Some(channels) = card["channels"].as_array() else {
            continue;
        };
        for ch in channels {
            let errors = ch["errors"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            outln!(
                "  ch{:<2} {:4}  {:>9} units {:>9.1} MB/s {:>7} stalls  good {:>9} bad {:>6}  {}",
                ch["channel"],
                if ch["link_up"].as_bool() == Some(true) {
                    "up"
                } else {
                    "down"
                },
                ch["units"],
                ch["bytes_per_s"].as_f64().unwrap_or(0.0) / 1e6,
                ch["stalls"],
                ch["good"],
                ch["bad"],
                if errors.is_empty() {
                    "no errors".into()
                } else {
                    errors
                },
            );
            match ch["input_state"].as_str() {
                Some(state) => outln!("        {} ({state})", ch["link"].as_str().unwrap_or("")),
                None => outln!("        {}", ch["link"].as_str().unwrap_or("")),
            }
        }
    }
}
