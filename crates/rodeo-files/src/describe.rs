//! Data files as JSON: a file's metadata and its events with their ROBs, in the one shape
//! `rodeo dump --json` prints (docs/file-formats.md).

use std::path::Path;

use rodeo_format::fragment::FullEvent;
use serde_json::{json, Value};

use crate::datafile::{FileEvent, FileInfo};

/// A file's metadata: what every container has (container, version, run number, ...), then
/// rodeo's start record as `start` or EventStorage's records as `eventstorage`.
pub fn file_json(path: &Path, info: &FileInfo) -> Value {
    let mut out = json!({
        "file": path,
        "container": info.container.name(),
        "version": info.version,
        "run_number": info.run_number,
        "lumiblock": info.lumiblock,
        "file_number": info.file_number,
        "app_name": info.app_name,
        "stream": info.stream,
        "compression": info.compression,
    });
    metadata_json(info, &mut out);
    out
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
pub fn event_json(ev: &FileEvent) -> Value {
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
