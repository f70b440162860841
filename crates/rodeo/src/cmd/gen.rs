//! `rodeo gen`: synthetic data for tests, replays and benchmarks (`gen link` lives in
//! `gen_link.rs`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use rodeo_files::rawfile::{RawFileConfig, RawFileWriter};
use rodeo_format::checksum::ChecksumType;
use rodeo_format::synth::{EventSynth, SynthConfig};
use serde::Serialize;

use crate::progress;

/// Arguments of `rodeo gen`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Write synthetic full events (realistic ROB mix, counter payloads) to raw-data files.
    Events(EventsArgs),
    /// Produce a FELIX or S-LINK link stream into a link capture file or to a network input
    /// channel, optionally with every error kind injected (`--corrupt FRACTION`).
    Link(super::gen_link::LinkArgs),
}

/// The checksum type of generated fragments.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ChecksumArg {
    /// No checksum word.
    None,
    /// CRC16-CCITT.
    Crc16,
    /// Adler-32 (the default: cheapest in software).
    Adler32,
}

impl From<ChecksumArg> for ChecksumType {
    fn from(c: ChecksumArg) -> ChecksumType {
        match c {
            ChecksumArg::None => ChecksumType::None,
            ChecksumArg::Crc16 => ChecksumType::Crc16,
            ChecksumArg::Adler32 => ChecksumType::Adler32,
        }
    }
}

/// Arguments of `rodeo gen events`.
#[derive(Debug, clap::Args)]
pub(crate) struct EventsArgs {
    /// Number of events to write.
    #[arg(long, default_value_t = 1000)]
    pub(crate) count: u64,
    /// Directory for the files (created if missing).
    #[arg(long, short)]
    pub(crate) output: PathBuf,
    /// ROB fragments per event.
    #[arg(long, default_value_t = 16)]
    pub(crate) robs: usize,
    /// Checksum of every ROB fragment and event.
    #[arg(long, value_enum, default_value_t = ChecksumArg::Adler32)]
    pub(crate) checksum: ChecksumArg,
    /// Run number.
    #[arg(long, default_value_t = 1)]
    pub(crate) run: u32,
    /// Stream name.
    #[arg(long, default_value = "physics_Main")]
    pub(crate) stream: String,
    /// Rotate files at this size in MiB.
    #[arg(long, default_value_t = 1024)]
    pub(crate) max_file_mib: u64,
    /// Rotate files after this many events (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub(crate) events_per_file: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What `gen events` wrote.
#[derive(Debug, Serialize)]
pub(crate) struct GenSummary {
    pub(crate) events: u64,
    pub(crate) event_bytes: u64,
    pub(crate) files: Vec<PathBuf>,
    pub(crate) seconds: f64,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Events(a) => {
            let json = a.json;
            let s = gen_events(&a)?;
            if json {
                outln!("{}", serde_json::to_string(&s)?);
            } else {
                outln!(
                    "wrote {} events ({:.1} MB) in {:.2} s into {} file(s):",
                    s.events,
                    s.event_bytes as f64 / 1e6,
                    s.seconds,
                    s.files.len()
                );
                for f in &s.files {
                    outln!("  {}", f.display());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        What::Link(a) => super::gen_link::run(a),
    }
}

/// Writes `args.count` synthetic events through the raw-file writer.
pub(crate) fn gen_events(args: &EventsArgs) -> anyhow::Result<GenSummary> {
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("cannot create output directory {}", args.output.display()))?;
    let mut cfg = RawFileConfig::new(&args.output, args.run, "rodeo-gen", &args.stream);
    cfg.max_file_bytes = args.max_file_mib.max(1) << 20;
    if args.events_per_file > 0 {
        cfg.max_events_per_file = args.events_per_file;
    }
    let mut writer = RawFileWriter::create(cfg).context("cannot start the raw-file writer")?;
    let mut synth = EventSynth::new(SynthConfig {
        robs: args.robs,
        checksum: args.checksum.into(),
        run_number: args.run,
        stream: (args.stream.clone(), "physics".into()),
        ..SynthConfig::default()
    });
    let bar = progress::bar(args.count, "events");
    let start = std::time::Instant::now();
    let mut words = Vec::new();
    for gid in 0..args.count {
        synth
            .event(gid, &mut words)
            .context("building a synthetic event")?;
        writer
            .write_event(&words, 0)
            .with_context(|| format!("writing event {gid}"))?;
        if gid % 256 == 0 {
            bar.set_position(gid);
        }
    }
    bar.finish_and_clear();
    let stats = writer.stats();
    let files = writer.finish().context("closing the output files")?;
    Ok(GenSummary {
        events: stats.events,
        event_bytes: stats.event_bytes,
        files: files.into_iter().map(|f| f.path).collect(),
        seconds: start.elapsed().as_secs_f64(),
    })
}
