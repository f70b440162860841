//! `rodeo gen link`: a FELIX or S-LINK link stream, recorded to a link capture file or sent to a
//! network input channel, optionally with every error kind of links.md injected.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rodeo_cards::corrupt::{Corruptor, StreamShape, UnitSource};
use rodeo_cards::dma::Generator;
use rodeo_cards::generator::{
    FelixConfig, FelixGenerator, SlinkConfig, SlinkGenerator, WordRange, DEFAULT_L1ID_WRAP,
};
use rodeo_cards::net::{LinkAddress, LinkSender};
use rodeo_files::linkfile::{LinkFileHeader, LinkFileWriter, LinkMode};
use rodeo_format::felix::TrailerSize;
use serde_json::{json, Map, Value};

use rodeo_ros::standalone::parse_u32;

use crate::progress;

/// Link kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModeArg {
    /// FELIX to-host blocks of E-link packets (default packet format).
    Felix,
    /// S-LINK ROD fragments (the firmware generator's rules).
    Slink,
}

/// FELIX trailer width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TrailerArg {
    /// 16-bit trailers (marker 0xABCD).
    #[value(name = "16")]
    Bits16,
    /// 32-bit trailers (marker 0xABCE).
    #[value(name = "32")]
    Bits32,
}

/// Arguments of `rodeo gen link`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("sink").required(true).args(["output", "send"])))]
pub(crate) struct LinkArgs {
    /// Link kind.
    #[arg(long, value_enum)]
    mode: ModeArg,
    /// Units to produce before corruption (FELIX blocks or ROD fragments).
    #[arg(long, default_value_t = 10_000)]
    units: u64,
    /// Write a link capture file (replayed by the file-player channel).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Send to a network input channel: udp://HOST:PORT (one datagram per unit) or
    /// tcp://HOST:PORT (length-prefixed records).
    #[arg(long, value_name = "ADDRESS")]
    send: Option<String>,
    /// Units per second when sending (0: as fast as the network takes them). Paced, each unit
    /// leaves at once (no batching), as a front-end's would.
    #[arg(long, default_value_t = 0.0, value_parser = rodeo_ros::cli_values::rate_hz_or_zero)]
    rate: f64,
    /// When sending over TCP: keep trying to connect for this long while the receiver is not
    /// listening yet (a partition still starting), every 100 ms.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS",
          value_parser = rodeo_ros::cli_values::seconds_or_zero)]
    retry_seconds: f64,
    /// Fraction of units corrupted (0..1), cycling through every error kind that applies.
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION",
          value_parser = rodeo_ros::cli_values::fraction)]
    corrupt: f64,
    /// FELIX: number of E-links (numbered 0, 1, ...; 1..=2048, the 11-bit E-link numbers).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=2048))]
    elinks: u16,
    /// FELIX: payload words per packet, N or MIN..MAX (uniform).
    #[arg(long, default_value = "62", value_parser = parse_range)]
    payload_words: WordRange,
    /// FELIX: block size in bytes (a multiple of 1024).
    #[arg(long, default_value_t = 1024)]
    block_size: usize,
    /// FELIX: trailer width in bits.
    #[arg(long, value_enum, default_value = "32")]
    trailer_bits: TrailerArg,
    /// S-LINK: data words per fragment, N or MIN..MAX (uniform).
    #[arg(long, default_value = "256", value_parser = parse_range)]
    data_words: WordRange,
    /// S-LINK: frame fragments with the begin/end control words.
    #[arg(long)]
    framing: bool,
    /// S-LINK: follow each fragment with a CRC16 word.
    #[arg(long)]
    crc: bool,
    /// S-LINK: source identifier.
    #[arg(long, default_value_t = 0x0011_0001, value_parser = parse_u32)]
    source_id: u32,
    /// The L1ID wraps at this value, then the ECR byte increments.
    #[arg(long, default_value_t = DEFAULT_L1ID_WRAP)]
    l1id_wrap: u32,
    /// Seed of sizes and corruption.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_range(s: &str) -> Result<WordRange, String> {
    let n = |v: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|e| format!("{v:?} is not a word count: {e}"))
    };
    match s.split_once("..") {
        Some((a, b)) => {
            let (a, b) = (n(a)?, n(b)?);
            if a > b {
                return Err(format!(
                    "range {s:?}: the minimum is larger than the maximum"
                ));
            }
            Ok(WordRange::uniform(a, b))
        }
        None => Ok(WordRange::fixed(n(s)?)),
    }
}

/// Refuses `--units` whose file (at most `unit_max` bytes per unit) would take more than the
/// share of the free space where `path` goes that [`rodeo_files::space::room_near`] allows: the
/// command would otherwise write until the disk is full, and the partition's own files with it.
fn check_room(path: &std::path::Path, units: u64, unit_max: u64) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let Some(room) = rodeo_files::space::room_near(dir) else {
        return Ok(());
    };
    let need = units.saturating_mul(unit_max);
    anyhow::ensure!(
        need <= room.allowed,
        "--units {units}: the link file may take {need} bytes ({unit_max} per unit at most) in \
         {}, which has {} bytes free; give at most --units {} ({:.0}% of the free space) \
         or another --output directory",
        dir.display(),
        room.free,
        room.allowed / unit_max.max(1),
        rodeo_files::space::MAX_FREE_SHARE * 100.0,
    );
    Ok(())
}

enum Sink {
    File(LinkFileWriter),
    Net(LinkSender),
}

pub(crate) fn run(args: LinkArgs) -> anyhow::Result<ExitCode> {
    let trailer = match args.trailer_bits {
        TrailerArg::Bits16 => TrailerSize::Bits16,
        TrailerArg::Bits32 => TrailerSize::Bits32,
    };
    let mode = match args.mode {
        ModeArg::Felix => LinkMode::Felix,
        ModeArg::Slink => LinkMode::Slink,
    };
    let shape = StreamShape {
        mode,
        framing: args.framing,
        crc: args.crc,
        block_size: args.block_size,
        trailer,
    };
    let header = LinkFileHeader {
        mode,
        block_size: if mode == LinkMode::Felix {
            args.block_size as u32
        } else {
            0
        },
        framing: args.framing,
        crc: args.crc,
        l1id_wrap: args.l1id_wrap,
    };
    let slink = SlinkConfig {
        source_id: args.source_id,
        data_words: args.data_words,
        l1id_wrap: args.l1id_wrap,
        framing: args.framing,
        crc: args.crc,
        seed: args.seed,
        ..SlinkConfig::default()
    };
    // The largest unit in bytes: a FELIX block, or the largest framed ROD fragment.
    let unit_max = match args.mode {
        ModeArg::Felix => args.block_size,
        ModeArg::Slink => 4 * slink.fragment_words(args.data_words.max),
    };
    if let Some(path) = &args.output {
        check_room(path, args.units, unit_max as u64)?;
    }
    let mut sink = match (&args.output, &args.send) {
        (Some(path), _) => Sink::File(
            LinkFileWriter::create(path, &header)
                .with_context(|| format!("cannot write the link file {}", path.display()))?,
        ),
        (None, Some(addr)) => {
            let address = LinkAddress::parse(addr)?;
            let retry = Duration::try_from_secs_f64(args.retry_seconds).map_err(|_| {
                anyhow::anyhow!(
                    "--retry-seconds {} is not a time: give seconds >= 0",
                    args.retry_seconds
                )
            })?;
            Sink::Net(
                LinkSender::connect_retrying(address, retry).with_context(|| {
                    format!(
                        "cannot connect to {address} (tried for {} s; is the partition running?)",
                        args.retry_seconds
                    )
                })?,
            )
        }
        (None, None) => anyhow::bail!("give --output FILE or --send ADDRESS"),
    };
    let corruptor = Corruptor::new(shape, args.corrupt, args.seed ^ 0xC0FF_EE00);
    let summary = match args.mode {
        ModeArg::Felix => {
            let g = FelixGenerator::new(&FelixConfig {
                elinks: (0..args.elinks).collect(),
                payload_words: args.payload_words,
                block_size: args.block_size,
                trailer,
                l1id_wrap: args.l1id_wrap,
                seed: args.seed,
            })
            .context("invalid FELIX configuration")?;
            let max = g.block_size();
            produce(&args, UnitSource::new(g, max), corruptor, &mut sink)?
        }
        ModeArg::Slink => produce(
            &args,
            UnitSource::new(SlinkGenerator::new(slink), unit_max),
            corruptor,
            &mut sink,
        )?,
    };
    match sink {
        Sink::File(w) => {
            w.finish().context("cannot close the link file")?;
        }
        Sink::Net(mut s) => s.flush().context("cannot flush the connection")?,
    }
    if args.json {
        outln!("{}", Value::Object(summary));
    } else {
        for (k, v) in &summary {
            match v {
                Value::Object(m) => {
                    outln!("{k}:");
                    for (kk, vv) in m {
                        outln!("  {kk}: {vv}");
                    }
                }
                v => outln!("{k}: {v}"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn produce<G: Generator>(
    args: &LinkArgs,
    mut source: UnitSource<G>,
    mut corruptor: Corruptor,
    sink: &mut Sink,
) -> anyhow::Result<Map<String, Value>> {
    let bar = progress::bar(args.units, "units");
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut failure = None;
    for n in 0..args.units {
        let Some(unit) = source.next_unit() else {
            break;
        };
        corruptor.process(unit, |u| {
            if failure.is_some() {
                return;
            }
            bytes += u.len() as u64;
            let r = match sink {
                Sink::File(w) => w.write_unit(u).map_err(anyhow::Error::from),
                // Paced: the unit leaves now, not when the buffer fills.
                Sink::Net(s) if args.rate > 0.0 => s
                    .send(u)
                    .and_then(|()| s.flush())
                    .map_err(anyhow::Error::from),
                Sink::Net(s) => s.send(u).map_err(anyhow::Error::from),
            };
            if let Err(e) = r {
                failure = Some(e);
            }
        });
        if let Some(e) = failure.take() {
            return Err(e.context(format!("writing unit {n}")));
        }
        if args.rate > 0.0 {
            let due = Duration::from_secs_f64((n + 1) as f64 / args.rate);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        if n % 1024 == 0 {
            bar.set_position(n);
        }
    }
    bar.finish_and_clear();
    let (units_in, units_out) = corruptor.units();
    let injected: Map<String, Value> = corruptor
        .report()
        .into_iter()
        .map(|(k, n)| (k.name().to_string(), json!(n)))
        .collect();
    let mut m = Map::new();
    m.insert(
        "mode".into(),
        json!(match args.mode {
            ModeArg::Felix => "felix",
            ModeArg::Slink => "slink",
        }),
    );
    m.insert("units_generated".into(), json!(units_in));
    m.insert("units_written".into(), json!(units_out));
    m.insert("bytes_written".into(), json!(bytes));
    m.insert("seconds".into(), json!(start.elapsed().as_secs_f64()));
    m.insert(
        "destination".into(),
        json!(match (&args.output, &args.send) {
            (Some(p), _) => p.display().to_string(),
            (None, Some(a)) => a.clone(),
            _ => String::new(),
        }),
    );
    m.insert("injected".into(), Value::Object(injected));
    Ok(m)
}
