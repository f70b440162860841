//! Per-event stage time stamps ([`rodeo_dataflow::trace`]) written as a Chrome/Perfetto trace
//! (the JSON "Trace Event Format": open it in `ui.perfetto.dev` or `chrome://tracing`).
//!
//! Each application is a thread of process 1 (named by metadata events); each stage time stamp
//! is an instant event on its application's thread, with the event's global id in `args`; and
//! each event is an async span (`b`/`e`, id = global id) from its first to its last stage, so
//! the viewer draws every sampled event's life as one bar.

use std::collections::BTreeMap;

use rodeo_dataflow::trace::TraceRecord;
use serde_json::{json, Value};

/// The trace of `records` (application name, record) as a Trace Event Format object.
pub fn to_json(records: &[(String, TraceRecord)]) -> Value {
    let mut tids: BTreeMap<&str, usize> = BTreeMap::new();
    for (app, _) in records {
        let n = tids.len();
        tids.entry(app.as_str()).or_insert(n + 1);
    }
    let mut events = Vec::with_capacity(records.len() + 2 * tids.len());
    events.push(
        json!({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "rodeo partition"}}),
    );
    for (app, tid) in &tids {
        events.push(
            json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": app}}),
        );
    }
    let us = |ns: u64| ns as f64 / 1e3;
    let mut spans: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (app, r) in records {
        events.push(json!({
            "name": r.stage.name(),
            "cat": "stage",
            "ph": "i",
            "s": "t",
            "ts": us(r.t_ns),
            "pid": 1,
            "tid": tids.get(app.as_str()).copied().unwrap_or(0),
            "args": {"global_id": r.global_id, "detail": r.detail},
        }));
        let e = spans.entry(r.global_id).or_insert((r.t_ns, r.t_ns));
        e.0 = e.0.min(r.t_ns);
        e.1 = e.1.max(r.t_ns);
    }
    for (gid, (first, last)) in spans {
        let name = format!("event {gid}");
        events.push(json!({"name": name, "cat": "event", "ph": "b", "id": gid, "ts": us(first), "pid": 1, "tid": 0}));
        events.push(json!({"name": name, "cat": "event", "ph": "e", "id": gid, "ts": us(last), "pid": 1, "tid": 0}));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns"})
}

#[cfg(test)]
mod tests {
    use super::*;
    use rodeo_dataflow::trace::Stage;

    #[test]
    fn stages_become_instants_and_events_spans() {
        let r = |gid, t_ns, stage| TraceRecord {
            global_id: gid,
            t_ns,
            stage,
            detail: 0,
        };
        let v = to_json(&[
            ("supervisor".into(), r(0, 1000, Stage::L1Accept)),
            ("dcm-1".into(), r(0, 5000, Stage::Decided)),
            ("supervisor".into(), r(0, 9000, Stage::Done)),
        ]);
        let ev = v["traceEvents"].as_array().unwrap();
        let instants: Vec<_> = ev.iter().filter(|e| e["ph"] == "i").collect();
        assert_eq!(instants.len(), 3);
        assert_eq!(instants[1]["name"], "decided");
        assert_eq!(instants[1]["ts"], 5.0);
        let b = ev.iter().find(|e| e["ph"] == "b").unwrap();
        let e = ev.iter().find(|e| e["ph"] == "e").unwrap();
        assert_eq!((b["ts"].as_f64(), e["ts"].as_f64()), (Some(1.0), Some(9.0)));
        assert_eq!(ev.iter().filter(|e| e["name"] == "thread_name").count(), 2);
    }
}
