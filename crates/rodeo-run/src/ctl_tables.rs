//! `rodeo ctl status|runs|alarms` for people: the API's JSON answers (`GET /api/status`,
//! `/api/runs`, `/api/alarms`) as aligned tables. Each table's columns are as wide as their
//! widest cell (header included), two spaces apart, numbers right-aligned, the last column
//! open; `rodeo ctl ... --json` prints the answer as it came instead.
//!
//! - status: the run (partition, number, state, run time, L1 accepts, rates, events written;
//!   its run type, shifter and comment below when given), then one row per application (name, role, state, pid, host, restarts, rate, error), then
//!   one row per readout input when the answer lists `inputs`;
//! - runs: [`crate::runs_table`]'s table, the one `rodeo runs` prints;
//! - alarms: name, state (active, acknowledged, clear), metric, condition, value, since.
//!
//! Also the request each `rodeo ctl` command makes ([`request_for`]), so the binary only
//! parses arguments and prints.

use serde_json::Value;

use crate::runs_table;

/// A column: its title and whether its cells are right-aligned (numbers).
type Column = (&'static str, bool);

/// The lines of the table for `command` (`status`, `runs` or `alarms`) from the API's answer
/// `body`; `None` for another command or a body that is not the JSON object expected (the
/// caller then prints the body as it came).
pub fn render(command: &str, body: &str) -> Option<Vec<String>> {
    let v: Value = serde_json::from_str(body).ok()?;
    match command {
        "status" if v.get("apps").is_some() => Some(status(&v)),
        "runs" => v.get("runs")?.as_array().map(|r| {
            let mut lines = runs(r);
            // A page of runs: say how to see the older ones.
            if let Some(next) = v.get("next_before").and_then(Value::as_u64) {
                lines.push(format!(
                    "(older runs: rodeo ctl runs {next}, the runs before run {next})"
                ));
            }
            lines
        }),
        "alarms" => v.get("alarms")?.as_array().map(|a| alarms(a)),
        "conditions" => v.get("latest")?.as_object().map(conditions),
        _ => None,
    }
}

/// The status as tables: the run, the applications, the inputs (when listed), a blank line
/// between them; the partition's error and recent errors after, one a line.
pub fn status(s: &Value) -> Vec<String> {
    let mut out = table(
        &[
            ("partition", false),
            ("run", true),
            ("state", false),
            ("run time", true),
            ("L1 accepts", true),
            ("L1 rate (Hz)", true),
            ("built (Hz)", true),
            ("written (Hz)", true),
            ("events written", true),
        ],
        &[vec![
            text(&s["partition"]),
            count(&s["run_number"]),
            text(&s["state"]),
            s["run_seconds"]
                .as_f64()
                .map_or("-".into(), runs_table::format_duration),
            count(&s["l1_accepts"]),
            rate(&s["l1_rate_hz"]),
            rate(&s["event_rate_hz"]),
            rate(&s["write_rate_hz"]),
            count(&s["events_written"]),
        ]],
    );
    // The run's words (run type, shifter, comment), when it has any.
    let words: Vec<String> = [
        ("run type", "run_type"),
        ("shifter", "shifter"),
        ("comment", "comment"),
    ]
    .iter()
    .filter_map(|(title, key)| {
        s["words"][key]
            .as_str()
            .filter(|w| !w.is_empty())
            .map(|w| format!("{title}: {}", text(&Value::from(w))))
    })
    .collect();
    if !words.is_empty() {
        out.push(words.join("  "));
    }
    let apps: Vec<Vec<String>> = items(&s["apps"])
        .iter()
        .map(|a| {
            vec![
                text(&a["name"]),
                text(&a["role"]),
                text(&a["state"]),
                count(&a["pid"]),
                text(&a["host"]),
                count(&a["restarts"]),
                rate(&a["rate_hz"]),
                text(&a["error"]),
            ]
        })
        .collect();
    out.push(String::new());
    out.extend(table(
        &[
            ("application", false),
            ("role", false),
            ("state", false),
            ("pid", true),
            ("host", false),
            ("restarts", true),
            ("rate (Hz)", true),
            ("error", false),
        ],
        &apps,
    ));
    if let Some(inputs) = s["inputs"].as_array().filter(|i| !i.is_empty()) {
        let rows: Vec<Vec<String>> = inputs
            .iter()
            .map(|i| {
                vec![
                    text(&i["node"]),
                    i["rob"]
                        .as_u64()
                        .map_or("-".into(), |r| format!("0x{r:08x}")),
                    text(&i["address"]),
                    text(&i["state"]),
                    count(&i["fragments"]),
                    count(&i["bytes"]),
                    count(&i["errors"]),
                    i["last_data_age_ms"]
                        .as_f64()
                        .map_or("-".into(), |ms| format!("{:.1} s", ms / 1e3)),
                    rate(&i["rate_hz"]),
                    text(&i["problem"]),
                ]
            })
            .collect();
        out.push(String::new());
        out.extend(table(
            &[
                ("node", false),
                ("ROB", false),
                ("address", false),
                ("input", false),
                ("fragments", true),
                ("bytes", true),
                ("errors", true),
                ("last data", true),
                ("rate (Hz)", true),
                ("problem", false),
            ],
            &rows,
        ));
    }
    if let Some(e) = s["error"].as_str() {
        out.push(format!("error: {e}"));
    }
    for e in items(&s["recent_errors"]) {
        out.push(format!("recent error: {}", text(e)));
    }
    out
}

/// The runs of `GET /api/runs` (or `rodeo runs --json`) as [`crate::runs_table`] prints them.
pub fn runs(runs: &[Value]) -> Vec<String> {
    std::iter::once(runs_table::header())
        .chain(runs.iter().map(runs_table::line))
        .collect()
}

/// The alarms of `GET /api/alarms`: name, state (`active`, `acknowledged`: active and seen by
/// an operator, `clear`), metric, condition, the value last looked at, and since when it is
/// raised (UTC; `-` when clear).
pub fn alarms(alarms: &[Value]) -> Vec<String> {
    let rows: Vec<Vec<String>> = alarms
        .iter()
        .map(|a| {
            let active = a["active"].as_bool().unwrap_or(false);
            let state = match (active, a["acknowledged"].as_bool().unwrap_or(false)) {
                (false, _) => "clear",
                (true, false) => "active",
                (true, true) => "acknowledged",
            };
            let since = a["raised_at_ms"]
                .as_u64()
                .filter(|ms| active && *ms > 0)
                .map_or("-".into(), |ms| {
                    rodeo_files::eventstorage::utc_text(ms / 1000)
                });
            vec![
                text(&a["name"]),
                state.into(),
                text(&a["metric"]),
                text(&a["condition"]),
                a["value"].as_f64().map_or("-".into(), number),
                since,
            ]
        })
        .collect();
    table(
        &[
            ("alarm", false),
            ("state", false),
            ("metric", false),
            ("condition", false),
            ("value", true),
            ("since (UTC)", false),
        ],
        &rows,
    )
}

/// The latest conditions of `GET /api/conditions` (`latest`): key, value, when posted (UTC),
/// in which run.
pub fn conditions(latest: &serde_json::Map<String, Value>) -> Vec<String> {
    let rows: Vec<Vec<String>> = latest
        .iter()
        .map(|(k, c)| {
            vec![
                k.clone(),
                text(&c["value"]),
                c["at_ns"].as_u64().map_or("-".into(), |ns| {
                    rodeo_files::eventstorage::utc_text(ns / 1_000_000_000)
                }),
                count(&c["run_number"]),
            ]
        })
        .collect();
    table(
        &[
            ("condition", false),
            ("value", true),
            ("posted (UTC)", false),
            ("run", true),
        ],
        &rows,
    )
}

/// The lines of a table: a header, then `rows`; each column as wide as its widest cell, two
/// spaces between columns, the last column not padded, no trailing blanks.
fn table(columns: &[Column], rows: &[Vec<String>]) -> Vec<String> {
    let width = |i: usize| {
        rows.iter()
            .filter_map(|r| r.get(i))
            .map(|c| c.chars().count())
            .chain([columns[i].0.chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..columns.len()).map(width).collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, ((_, right), cell)) in columns.iter().zip(cells).enumerate() {
            let w = widths[i];
            if i > 0 {
                out.push_str("  ");
            }
            if *right {
                out.push_str(&format!("{cell:>w$}"));
            } else if i + 1 < columns.len() {
                out.push_str(&format!("{cell:<w$}"));
            } else {
                out.push_str(cell);
            }
        }
        out.trim_end().to_string()
    };
    std::iter::once(line(&mut columns.iter().map(|c| c.0)))
        .chain(rows.iter().map(|r| line(&mut r.iter().map(String::as_str))))
        .collect()
}

/// The elements of a JSON array (none for anything else).
fn items(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// A string as it is, `-` for null or absent, anything else as JSON text; one line.
fn text(v: &Value) -> String {
    let s = match v {
        Value::Null => "-".to_string(),
        Value::String(s) if s.is_empty() => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    s.replace(['\n', '\r'], " ")
}

/// A whole number, `-` when absent.
fn count(v: &Value) -> String {
    v.as_u64().map_or_else(|| text(v), |n| n.to_string())
}

/// A rate with one decimal, `-` when absent.
fn rate(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |r| format!("{r:.1}"))
}

/// A value as a person reads it: whole numbers without decimals, others with three.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// The method, path and body of `rodeo ctl COMMAND REST...` (`status`, `runs [BEFORE]`, `audit`,
/// `alarms`, `config get`, `config put FILE` (the file read here), `ack NAME`, `comment RUN
/// TEXT...`, `conditions [KEY=VALUE...]`, or a lifecycle command: `start` with the run's
/// `words`, checked), or why the words are not a command.
pub fn request_for(
    command: &str,
    rest: &[&str],
    words: &rodeo_control::config::RunWords,
) -> anyhow::Result<(&'static str, String, String)> {
    let get = |path: &str| ("GET", path.to_string(), String::new());
    if !words.is_empty() {
        if command != "start" || !rest.is_empty() {
            anyhow::bail!("--comment, --run-type and --shifter go with `start` only");
        }
        words.check().map_err(anyhow::Error::msg)?;
        let mut body = serde_json::to_value(words)?;
        body["command"] = "start".into();
        return Ok(("POST", "/api/command".into(), body.to_string()));
    }
    Ok(match (command, rest) {
        ("conditions", []) => get("/api/conditions"),
        ("conditions", pairs) => ("POST", "/api/conditions".into(), conditions_body(pairs)?),
        ("status", []) => get("/api/status"),
        ("runs", []) => get("/api/runs"),
        ("runs", [before]) => {
            let n: u32 = before.parse().map_err(|_| {
                anyhow::anyhow!(
                    "`rodeo ctl runs RUN` lists the runs before run RUN, a number, not {before:?}"
                )
            })?;
            get(&format!("/api/runs?before={n}"))
        }
        ("audit", []) => get("/api/audit"),
        ("alarms", []) => get("/api/alarms"),
        ("config", ["get"]) => get("/api/config"),
        ("config", ["put", file]) => (
            "PUT",
            "/api/config".into(),
            rodeo_control::config::read_config_file(std::path::Path::new(file))?,
        ),
        ("config", _) => anyhow::bail!("use `rodeo ctl config get` or `rodeo ctl config put FILE`"),
        ("ack", [name]) => (
            "POST",
            "/api/alarms/ack".into(),
            serde_json::json!({ "name": name }).to_string(),
        ),
        ("comment", [run, text @ ..]) if !text.is_empty() => (
            "POST",
            format!("/api/runs/{run}/comment"),
            serde_json::json!({ "text": text.join(" ") }).to_string(),
        ),
        (c, [_, ..]) => anyhow::bail!("`{c}` takes no further arguments"),
        (c, []) => (
            "POST",
            "/api/command".into(),
            serde_json::json!({ "command": c }).to_string(),
        ),
    })
}

/// `KEY=VALUE` pairs as the JSON object of `POST /api/conditions`: a value that reads as an
/// integer or a finite number is that number, `true`/`false` a boolean, anything else a string (the server
/// checks keys and values).
fn conditions_body(pairs: &[&str]) -> anyhow::Result<String> {
    let mut body = serde_json::Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            anyhow::bail!(
                "conditions are KEY=VALUE pairs (hv_volts=1500 beam=\"pi+ 120 GeV\"), not {pair:?}"
            );
        };
        let v = match (value.parse::<i64>(), value.parse::<f64>(), value) {
            (Ok(n), _, _) => serde_json::json!(n),
            (_, Ok(x), _) if x.is_finite() => serde_json::json!(x),
            (_, _, "true") => Value::Bool(true),
            (_, _, "false") => Value::Bool(false),
            _ => Value::String(value.to_string()),
        };
        body.insert(key.to_string(), v);
    }
    Ok(Value::Object(body).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rodeo_control::config::RunWords;
    use serde_json::json;

    /// Where each header title starts (left-aligned) or ends (right-aligned) in `header`.
    fn check_aligned(lines: &[String], left: &[&str], right: &[&str]) {
        let header = &lines[0];
        for line in &lines[1..] {
            for t in left {
                let at = header.find(t).unwrap_or_else(|| panic!("{t} in {header}"));
                // A left-aligned cell starts where its title does: a blank before it.
                assert!(at == 0 || &line[at - 1..at] == " ", "{t}: {line}");
                assert_ne!(&line[at..at + 1], " ", "{t}: {line}");
            }
            for t in right {
                let end = header.find(t).unwrap() + t.len();
                assert_ne!(&line[end - 1..end], " ", "{t}: {line}");
                assert!(
                    line.len() == end || &line[end..end + 1] == " ",
                    "{t}: {line}"
                );
            }
        }
    }

    fn status_json() -> Value {
        json!({
            "partition": "rodeo", "state": "RUNNING", "error": null, "run_number": 12,
            "run_seconds": 125.4, "l1_rate_hz": 5000.04, "event_rate_hz": 4999.5,
            "write_rate_hz": 500.0, "l1_accepts": 627_000, "events_written": 62_700,
            "restarts": 0,
            "words": {"comment": "beam off", "run_type": "", "shifter": "A. Person"},
            "apps": [
                {"name": "supervisor", "role": "supervisor", "state": "RUNNING", "error": null,
                 "host": null, "pid": null, "heartbeat_age_ms": null, "rate_hz": 5000.0,
                 "restarts": 0},
                {"name": "dcm-1", "role": "dcm", "state": "RUNNING", "error": null,
                 "host": "node07.cern.ch", "pid": 123456, "heartbeat_age_ms": 12,
                 "rate_hz": 2500.25, "restarts": 2},
                {"name": "ros-1", "role": "ros", "state": "ERROR",
                 "error": "died (signal 9)\nrestarted", "host": null, "pid": 7,
                 "heartbeat_age_ms": 12, "rate_hz": 0.0, "restarts": 0}
            ],
            "recent_errors": ["ros-1 died"],
            "inputs": [
                {"node": "ros-1", "rob": 0x0041_0000u32, "address": "tcp://127.0.0.1:5001",
                 "state": "connected", "fragments": 1_000_000, "bytes": 400_000_000,
                 "errors": 0, "last_data_age_ms": 3, "rate_hz": 5000.0, "problem": null},
                {"node": "ros-1", "rob": 0x0041_0001u32, "address": "tcp://127.0.0.1:5002",
                 "state": "waiting", "fragments": 0, "bytes": 0, "errors": 0,
                 "last_data_age_ms": null, "rate_hz": 0.0,
                 "problem": "ros-1 ROB 0x00410001 tcp://127.0.0.1:5002: never connected"}
            ]
        })
    }

    #[test]
    fn the_status_is_three_aligned_tables() {
        let lines = status(&status_json());
        let blocks: Vec<&[String]> = lines.split(|l| l.is_empty()).collect();
        assert_eq!(blocks.len(), 3, "{lines:#?}");
        let (run, apps, inputs) = (blocks[0], blocks[1], &blocks[2][..3]);
        assert_eq!(run.len(), 3);
        assert_eq!(run[2], "shifter: A. Person  comment: beam off");
        assert!(run[1].starts_with("rodeo       12  RUNNING"), "{}", run[1]);
        assert!(
            run[1].contains("2m05s") && run[1].ends_with("62700"),
            "{}",
            run[1]
        );
        check_aligned(
            &run[..2],
            &["partition", "state"],
            &["run", "run time", "L1 accepts", "events written"],
        );
        assert_eq!(apps.len(), 4);
        check_aligned(
            apps,
            &["application", "role", "state", "host", "error"],
            &["pid", "restarts", "rate (Hz)"],
        );
        assert!(apps[2].contains("node07.cern.ch") && apps[2].contains("123456"));
        assert!(apps[3].ends_with("died (signal 9) restarted"), "one line");
        check_aligned(
            inputs,
            &["node", "ROB", "address", "input", "problem"],
            &["fragments", "bytes", "last data"],
        );
        assert!(inputs[1].contains("0x00410000") && inputs[1].contains("0.0 s"));
        assert!(inputs[2].contains("waiting") && inputs[2].ends_with("never connected"));
        assert_eq!(lines[lines.len() - 1], "recent error: ros-1 died");
        // Without inputs, no input table.
        let mut s = status_json();
        s["inputs"] = json!([]);
        assert_eq!(status(&s).iter().filter(|l| l.is_empty()).count(), 1);
    }

    #[test]
    fn runs_and_alarms_render_only_their_own_answers() {
        let body = json!({"runs": [{"run_number": 3, "status": "ok", "started_at_ns": 0,
            "l1_accepts": 10, "files": []}]})
        .to_string();
        let lines = render("runs", &body).unwrap();
        assert_eq!(lines[0], runs_table::header());
        assert!(lines[1].starts_with("     3  ok"), "{}", lines[1]);
        assert_eq!(render("runs", "not json"), None);
        let page = json!({"runs": [{"run_number": 300, "status": "ok"}], "next_before": 300});
        let lines = render("runs", &page.to_string()).unwrap();
        assert!(
            lines.last().unwrap().contains("rodeo ctl runs 300"),
            "{lines:?}"
        );
        let none = RunWords::default();
        assert_eq!(
            request_for("runs", &["300"], &none).unwrap().1,
            "/api/runs?before=300"
        );
        assert!(request_for("runs", &["x"], &none).is_err());
        assert_eq!(render("status", "{\"state\": \"x\"}"), None);
        assert_eq!(render("audit", &body), None);

        let body = json!({"alarms": [
            {"name": "l1-rate-low", "metric": "l1_rate_hz", "condition": "below 1000",
             "active": true, "acknowledged": false, "value": 12.5, "raised": 1,
             "raised_at_ms": 1_245_396_941_000u64},
            {"name": "lost-fragments", "metric": "rodeo_errors_total{kind=\"lost_fragment\"}",
             "condition": "above 0", "active": true, "acknowledged": true, "value": 3.0,
             "raised": 2, "raised_at_ms": 1_245_396_941_000u64},
            {"name": "disk", "metric": "disk_free_bytes", "condition": "below 1e9",
             "active": false, "acknowledged": false, "value": null, "raised": 0,
             "raised_at_ms": 0}
        ]})
        .to_string();
        let lines = render("alarms", &body).unwrap();
        assert_eq!(lines.len(), 4);
        check_aligned(
            &lines,
            &["alarm", "state", "metric", "condition"],
            &["value"],
        );
        assert!(lines[1].contains("active") && lines[1].contains("12.500"));
        assert!(lines[1].ends_with("2009-06-19 07:35:41"), "{}", lines[1]);
        assert!(lines[2].contains("acknowledged") && lines[2].contains("  3  "));
        assert!(
            lines[3].contains("clear") && lines[3].ends_with('-'),
            "{}",
            lines[3]
        );
    }

    #[test]
    fn commands_map_to_their_requests() {
        let none = RunWords::default();
        assert_eq!(
            request_for("status", &[], &none).unwrap(),
            ("GET", "/api/status".into(), String::new())
        );
        let (m, p, b) = request_for("comment", &["7", "beam", "off"], &none).unwrap();
        assert_eq!((m, p.as_str()), ("POST", "/api/runs/7/comment"));
        assert_eq!(b, r#"{"text":"beam off"}"#);
        assert_eq!(
            request_for("start", &[], &none).unwrap().2,
            r#"{"command":"start"}"#
        );
        assert!(request_for("stop", &["now"], &none).is_err());
        assert!(
            request_for("config", &["put", "/nonexistent/x.toml"], &none)
                .unwrap_err()
                .to_string()
                .contains("/nonexistent/x.toml")
        );
        // The run's words go with start only, checked before anything is sent.
        let words = RunWords {
            comment: "HV scan".into(),
            run_type: "calibration".into(),
            shifter: String::new(),
        };
        let (_, p, b) = request_for("start", &[], &words).unwrap();
        assert_eq!(p, "/api/command");
        let b: Value = serde_json::from_str(&b).unwrap();
        assert_eq!(
            b,
            json!({"command": "start", "comment": "HV scan", "run_type": "calibration", "shifter": ""})
        );
        assert!(request_for("stop", &[], &words).is_err());
        let bad = RunWords {
            run_type: "two words".into(),
            ..RunWords::default()
        };
        assert!(request_for("start", &[], &bad)
            .unwrap_err()
            .to_string()
            .contains("run.run_type"));
        // Conditions: a number, a boolean, a string.
        let (m, p, b) = request_for(
            "conditions",
            &["hv=1500", "on=true", "beam=pi+ 120 GeV"],
            &none,
        )
        .unwrap();
        assert_eq!((m, p.as_str()), ("POST", "/api/conditions"));
        let b: Value = serde_json::from_str(&b).unwrap();
        assert_eq!(b, json!({"hv": 1500, "on": true, "beam": "pi+ 120 GeV"}));
        assert!(request_for("conditions", &["hv"], &none).is_err());
        assert_eq!(
            request_for("conditions", &[], &none).unwrap().1,
            "/api/conditions"
        );
        let lines = render(
            "conditions",
            r#"{"latest": {"hv": {"value": 1500, "at_ns": 1245396941000000000, "run_number": 4}}}"#,
        )
        .unwrap();
        assert_eq!(lines[1], "hv          1500  2009-06-19 07:35:41    4");
    }
}
