//! `rodeo dump FILE`: a per-event and per-ROB summary of a raw-data file, hex words on request.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use rodeo_format::fragment::FullEvent;
use rodeo_format::rawfile::RawFileReader;

/// Arguments of `rodeo dump`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The raw-data file.
    file: PathBuf,
    /// Also print every fragment's words in hex.
    #[arg(long)]
    words: bool,
    /// Stop after this many events.
    #[arg(long)]
    limit: Option<u64>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut reader = RawFileReader::open(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let s = reader.start().clone();
    writeln!(
        out,
        "file {} (format {}, sequence {}, run {}, lumiblock {}, application {:?}, stream {:?})",
        args.file.display(),
        s.version,
        s.sequence,
        s.run,
        s.lumiblock,
        s.app_name,
        s.stream_name
    )?;
    let mut shown = 0u64;
    while let Some(next) = reader.next_event() {
        if args.limit.is_some_and(|l| shown >= l) {
            break;
        }
        let ev = next.with_context(|| format!("reading {}", args.file.display()))?;
        shown += 1;
        write!(
            out,
            "event {} at byte {}: {} words",
            ev.index,
            ev.offset,
            ev.words.len()
        )?;
        let e = match FullEvent::parse(ev.words) {
            Ok(e) => e,
            Err(err) => {
                writeln!(out, ", malformed: {err}")?;
                continue;
            }
        };
        let tags: Vec<String> = e
            .stream_tags()
            .filter_map(Result::ok)
            .map(|t| format!("{}:{}", t.stream_type, t.name))
            .collect();
        writeln!(
            out,
            ", global id {}, L1ID {:#010x}, BCID {}, run {}, status {:#010x}, checksum {:?}, streams [{}]",
            e.global_id(),
            e.extended_l1id(),
            e.bcid(),
            e.run_number(),
            e.status().word(),
            e.checksum_type(),
            tags.join(", ")
        )?;
        if args.words {
            hex(&mut out, e.words())?;
        }
        for rob in e.robs() {
            match rob {
                Ok(rob) => {
                    let rod = rob.rod();
                    writeln!(
                        out,
                        "  ROB {:#010x} ({:?}): {} words, status {:#010x}, L1ID {:#010x}, BCID {}, {} data words",
                        rob.source_id().word(),
                        rob.source_id().subdetector().system(),
                        rob.size_words(),
                        rob.status().word(),
                        rod.extended_l1id(),
                        rod.bcid(),
                        rod.data().len()
                    )?;
                }
                Err(err) => {
                    writeln!(out, "  malformed ROB: {err}")?;
                    break;
                }
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn hex(out: &mut impl std::io::Write, words: &[u32]) -> std::io::Result<()> {
    for (i, line) in words.chunks(8).enumerate() {
        write!(out, "    {:6}:", i * 8)?;
        for w in line {
            write!(out, " {w:08x}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}
