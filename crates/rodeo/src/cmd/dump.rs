//! `rodeo dump FILE...`: a per-event and per-ROB summary of a raw-data file of either container
//! (rodeo's own or EventStorage v2-v6, eformat 3, 4 or 5 events), hex words on request, or
//! everything as one JSON object (`--json`).
//!
//! Files are opened through `rodeo_files::datafile::DataFileReader`, which tells the
//! containers apart by their first record. Every event shows its run number, L1ID and ROBs
//! with their source ids, whatever its version; eformat 5 events show their header fields too.
//! Compressed events are shown restored (`stored_compressed`). A damaged file shows every
//! complete event before the damage and the byte offset where reading stopped. Several files
//! are dumped one after the other (with `--json`, one object per file and line).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use rodeo_files::datafile::DataFileReader;
use rodeo_files::describe::{event_json, file_json};
use rodeo_format::fragment::FullEvent;
use serde_json::{json, Value};

/// Arguments of `rodeo dump`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The raw-data files (rodeo's container or EventStorage v2-v6).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Also print every fragment's words in hex.
    #[arg(long)]
    words: bool,
    /// Stop after this many events of each file.
    #[arg(long)]
    limit: Option<u64>,
    /// Print one JSON object per file and line (the file's metadata, every event with its ROBs,
    /// and the error that stopped reading, if any) instead of text; exit code 1 if a file is
    /// damaged.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut code = ExitCode::SUCCESS;
    for file in &args.files {
        let done = if args.json {
            run_json(file, &args)?
        } else {
            run_text(file, &args)?
        };
        if done != ExitCode::SUCCESS {
            code = done;
        }
    }
    Ok(code)
}

/// The text dump of one file.
fn run_text(file: &Path, args: &Args) -> anyhow::Result<ExitCode> {
    let mut reader =
        DataFileReader::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let i = reader.info().clone();
    writeln!(
        out,
        "file {} ({} format {}, file {}, run {}, lumiblock {}, application {:?}, stream {:?}, compression {})",
        file.display(),
        i.container.name(),
        i.version,
        i.file_number,
        i.run_number,
        i.lumiblock.map_or_else(|| "-".to_string(), |l| l.to_string()),
        i.app_name,
        i.stream,
        i.compression,
    )?;
    if let Some(es) = &i.eventstorage {
        writeln!(out, "  free strings: {:?}", es.free_strings)?;
    }
    let limit = args.limit.unwrap_or(u64::MAX);
    for next in reader
        .by_ref()
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
    {
        let ev = next.with_context(|| format!("reading {}", file.display()))?;
        write!(
            out,
            "event {} at byte {}: eformat {}, {} words{}",
            ev.index,
            ev.offset,
            ev.eformat,
            ev.words.len(),
            if ev.stored_compressed {
                " (stored compressed)"
            } else {
                ""
            }
        )?;
        if ev.eformat == 5 {
            let e = match FullEvent::parse(&ev.words) {
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
                            "  ROB {:#010x} ({}): {} words, status {:#010x}, L1ID {:#010x}, BCID {}, {} data words",
                            rob.source_id().word(),
                            rob.source_id()
                                .subdetector()
                                .system()
                                .map_or("unknown sub-detector", |s| s.name()),
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
        } else {
            writeln!(
                out,
                ", event number {}, L1ID {:#010x}, run {}, {} ROBs",
                ev.global_id
                    .map_or_else(|| "-".to_string(), |g| g.to_string()),
                ev.l1id,
                ev.run_number,
                ev.robs.len()
            )?;
            if args.words {
                hex(&mut out, &ev.words)?;
            }
            for rob in &ev.robs {
                writeln!(
                    out,
                    "  ROB {:#010x}: {} words, ROD {} words, {} data words",
                    rob.source_id, rob.size, rob.rod_size, rob.data_len
                )?;
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `dump --json` of one file: everything the text output shows, as one JSON object on one
/// line, written as it is read (each event serialised and written in turn: the whole file's
/// events held as one value took 4.7 KB of memory per event, 1.4 GB for a 40 MB file). A file
/// that does not open is an object with its `error` too, and the next file is dumped.
fn run_json(file: &Path, args: &Args) -> anyhow::Result<ExitCode> {
    let mut reader = match DataFileReader::open(file) {
        Ok(r) => r,
        Err(e) => {
            let error = json!({
                "file": file.display().to_string(),
                "events": [],
                "error": {"message": format!("cannot read {}: {e}", file.display())},
            });
            outln!("{error}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let info = reader.info().clone();
    let head = serde_json::to_string(&file_json(file, &info))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // The file's fields, then the events and the error in the same object.
    let fields = head.strip_suffix('}').unwrap_or("{");
    let sep = if fields.len() > 1 { "," } else { "" };
    write!(out, "{fields}{sep}\"events\":[")?;
    let mut error = Value::Null;
    let mut written = 0u64;
    for next in reader.by_ref() {
        if args.limit.is_some_and(|l| written >= l) {
            break;
        }
        match next {
            Ok(ev) => {
                if written > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut out, &event_json(&ev))?;
                written += 1;
            }
            Err(e) => {
                error = json!({
                    "message": e.to_string(),
                    "offset": e.offset(),
                    "events_recovered": e.events_recovered(),
                });
                break;
            }
        }
    }
    write!(out, "],\"error\":")?;
    serde_json::to_writer(&mut out, &error)?;
    writeln!(out, "}}")?;
    out.flush()?;
    Ok(if error.is_null() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
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
