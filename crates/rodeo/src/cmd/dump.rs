//! `rodeo dump FILE`: a per-event and per-ROB summary of a raw-data file, hex words on request,
//! or everything as one JSON object (`--json`).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use rodeo_format::fragment::FullEvent;
use rodeo_format::rawfile::RawFileReader;
use serde_json::{json, Value};

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
    /// Print one JSON object (the start record, every event with its ROBs, and the error that
    /// stopped reading, if any) instead of text; exit code 1 if the file is damaged.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.json {
        return run_json(&args);
    }
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

/// `dump --json`: everything the text output shows, as one JSON object.
fn run_json(args: &Args) -> anyhow::Result<ExitCode> {
    let mut reader = RawFileReader::open(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let s = reader.start().clone();
    let mut events = Vec::new();
    let mut error = Value::Null;
    while let Some(next) = reader.next_event() {
        if args.limit.is_some_and(|l| events.len() as u64 >= l) {
            break;
        }
        match next {
            Ok(ev) => events.push(event_json(ev.index, ev.offset, ev.checksum, ev.words)),
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
    let failed = !error.is_null();
    let out = json!({
        "file": args.file,
        "start": {
            "version": s.version,
            "sequence": s.sequence,
            "creation_time_ns": s.creation_time_ns,
            "run": s.run,
            "lumiblock": s.lumiblock,
            "app_name": s.app_name,
            "stream_name": s.stream_name,
        },
        "events": events,
        "error": error,
    });
    println!("{}", serde_json::to_string(&out)?);
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One event record as JSON: record fields, header fields and ROBs (or the parse error).
fn event_json(index: u64, offset: u64, record_adler32: u32, words: &[u32]) -> Value {
    let mut v = json!({
        "index": index,
        "offset": offset,
        "record_adler32": record_adler32,
        "size_words": words.len(),
    });
    let e = match FullEvent::parse(words) {
        Ok(e) => e,
        Err(err) => {
            v["error"] = Value::String(err.to_string());
            return v;
        }
    };
    let tags: Vec<Value> = e
        .stream_tags()
        .filter_map(Result::ok)
        .map(|t| json!({"name": t.name, "type": t.stream_type}))
        .collect();
    let mut robs = Vec::new();
    let mut rob_error = Value::Null;
    for rob in e.robs() {
        match rob {
            Ok(rob) => {
                let rod = rob.rod();
                robs.push(json!({
                    "source_id": rob.source_id().word(),
                    "status": rob.status().word(),
                    "size_words": rob.size_words(),
                    "checksum_type": format!("{:?}", rob.checksum_type()),
                    "extended_l1id": rod.extended_l1id(),
                    "bcid": rod.bcid(),
                    "run_number": rod.run_number(),
                    "data_words": rod.data().len(),
                }));
            }
            Err(err) => {
                rob_error = Value::String(err.to_string());
                break;
            }
        }
    }
    v["global_id"] = json!(e.global_id());
    v["extended_l1id"] = json!(e.extended_l1id());
    v["bcid"] = json!(e.bcid());
    v["run_number"] = json!(e.run_number());
    v["lumi_block"] = json!(e.lumi_block());
    v["status"] = json!(e.status().word());
    v["checksum_type"] = json!(format!("{:?}", e.checksum_type()));
    v["stream_tags"] = Value::Array(tags);
    v["robs"] = Value::Array(robs);
    if !rob_error.is_null() {
        v["error"] = rob_error;
    }
    v
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
