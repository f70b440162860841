//! `rodeo dump FILE`: a per-event and per-ROB summary of a raw-data file of either container
//! (rodeo's own or EventStorage v2-v6, eformat 3, 4 or 5 events), hex words on request, or
//! everything as one JSON object (`--json`).
//!
//! Files are opened through `rodeo_files::datafile::DataFileReader`, which tells the
//! containers apart by their first record. Every event shows its run number, L1ID and ROBs
//! with their source ids, whatever its version; eformat 5 events show their header fields too.
//! Compressed events are shown restored (`stored_compressed`). A damaged file shows every
//! complete event before the damage and the byte offset where reading stopped.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use rodeo_files::datafile::{DataFileReader, FileEvent, FileInfo};
use rodeo_format::fragment::FullEvent;
use serde_json::{json, Value};

/// Arguments of `rodeo dump`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The raw-data file (rodeo's container or EventStorage v2-v6).
    file: PathBuf,
    /// Also print every fragment's words in hex.
    #[arg(long)]
    words: bool,
    /// Stop after this many events.
    #[arg(long)]
    limit: Option<u64>,
    /// Print one JSON object (the file's metadata, every event with its ROBs, and the error that
    /// stopped reading, if any) instead of text; exit code 1 if the file is damaged.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.json {
        return run_json(&args);
    }
    let mut reader = DataFileReader::open(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let i = reader.info().clone();
    writeln!(
        out,
        "file {} ({} format {}, file {}, run {}, lumiblock {}, application {:?}, stream {:?}, compression {})",
        args.file.display(),
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
        let ev = next.with_context(|| format!("reading {}", args.file.display()))?;
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

/// `dump --json`: everything the text output shows, as one JSON object.
fn run_json(args: &Args) -> anyhow::Result<ExitCode> {
    let mut reader = DataFileReader::open(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let info = reader.info().clone();
    let mut events = Vec::new();
    let mut error = Value::Null;
    for next in reader.by_ref() {
        if args.limit.is_some_and(|l| events.len() as u64 >= l) {
            break;
        }
        match next {
            Ok(ev) => events.push(event_json(&ev)),
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
    let mut out = json!({
        "file": args.file,
        "container": info.container.name(),
        "version": info.version,
        "run_number": info.run_number,
        "lumiblock": info.lumiblock,
        "file_number": info.file_number,
        "app_name": info.app_name,
        "stream": info.stream,
        "compression": info.compression,
        "events": events,
        "error": error,
    });
    metadata_json(&info, &mut out);
    println!("{}", serde_json::to_string(&out)?);
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The container's own metadata: rodeo's start record as `start`, EventStorage's records as
/// `eventstorage`.
fn metadata_json(info: &FileInfo, out: &mut Value) {
    if let Some(s) = &info.rodeo {
        out["start"] = json!({
            "version": s.version,
            "sequence": s.sequence,
            "creation_time_ns": s.creation_time_ns,
            "run": s.run,
            "lumiblock": s.lumiblock,
            "app_name": s.app_name,
            "stream_name": s.stream_name,
            "checksummed": s.checksummed(),
        });
    }
    if let Some(es) = &info.eventstorage {
        out["eventstorage"] = json!({
            "version": es.version,
            "file_number": es.file_number,
            "date": es.date,
            "time": es.time,
            "size_limit_blocks": es.size_limit_blocks,
            "size_limit_mb": es.size_limit_mb,
            "app_name": es.app_name,
            "file_name_core": es.file_name_core,
            "free_strings": es.free_strings,
            "run_parameters": {
                "run_number": es.run.run_number,
                "max_events": es.run.max_events,
                "rec_enable": es.run.rec_enable,
                "trigger_type": es.run.trigger_type,
                // 128 bits do not fit a JSON number every reader accepts.
                "detector_mask": format!("{:#x}", es.run.detector_mask),
                "beam_type": es.run.beam_type,
                "beam_energy": es.run.beam_energy,
            },
        });
    }
}

/// One event as JSON: what every version has (run number, `l1id`, ROBs with source ids), then
/// for eformat 5 the header fields and each ROB's (or the parse error).
fn event_json(ev: &FileEvent) -> Value {
    let mut v = json!({
        "index": ev.index,
        "offset": ev.offset,
        "eformat": ev.eformat,
        "size_words": ev.words.len(),
        "stored_compressed": ev.stored_compressed,
        "run_number": ev.run_number,
        "l1id": ev.l1id,
        "global_id": ev.global_id,
    });
    if let Some(a) = ev.record_adler32 {
        v["record_adler32"] = json!(a);
    }
    if ev.eformat != 5 {
        let robs: Vec<Value> = ev
            .robs
            .iter()
            .map(|r| {
                json!({
                    "source_id": r.source_id,
                    "size_words": r.size,
                    "rod_size_words": r.rod_size,
                    "data_words": r.data_len,
                })
            })
            .collect();
        v["robs"] = Value::Array(robs);
        return v;
    }
    let e = match FullEvent::parse(&ev.words) {
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
                    "rod_size_words": rod.words().len(),
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
    v["extended_l1id"] = json!(e.extended_l1id());
    v["bcid"] = json!(e.bcid());
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
