//! `rodeo runs` as a table a person reads: one line per run of the run database (`RunDb::list`'s
//! JSON form), every column at a fixed place (a wider value widens only its own line), the
//! last one open: who started the run, with its latest comment or the reason it was not ok.

use serde_json::Value;

/// The header line.
pub fn header() -> String {
    table_line(&HEADER.map(String::from))
}

/// The line of one run (an element of `RunDb::list`).
pub fn line(run: &Value) -> String {
    table_line(&row(run))
}

/// The table's columns: title, width, right-aligned. The last column (who started the run,
/// with its latest comment or the reason it was not ok) is left open.
const COLUMNS: [(&str, usize, bool); 10] = [
    ("run", 6, true),
    ("verdict", 8, false),
    ("started (UTC)", 19, false),
    ("duration", 9, true),
    ("L1", 10, true),
    ("accepted", 10, true),
    ("written", 10, true),
    ("MB", 9, true),
    ("files", 5, true),
    ("started by (comment or reason)", 0, false),
];

/// The header's cells.
const HEADER: [&str; 10] = {
    let mut h = [""; 10];
    let mut i = 0;
    while i < 10 {
        h[i] = COLUMNS[i].0;
        i += 1;
    }
    h
};

/// One line of the table: every cell padded to its column (a wider value widens only its own
/// line), two spaces between columns, no trailing blanks.
fn table_line(cells: &[String; 10]) -> String {
    let mut line = String::new();
    for (i, (cell, (_, width, right))) in cells.iter().zip(COLUMNS).enumerate() {
        if i > 0 {
            line.push_str("  ");
        }
        if right {
            line.push_str(&format!("{cell:>width$}"));
        } else if i + 1 < COLUMNS.len() {
            line.push_str(&format!("{cell:<width$}"));
        } else {
            line.push_str(cell);
        }
    }
    line.trim_end().to_string()
}

/// The cells of one run of the database (`RunDb::list`'s JSON form).
fn row(r: &Value) -> [String; 10] {
    let count = |k: &str| r[k].as_u64().map_or("-".to_string(), |n| n.to_string());
    let started = r["started_at_ns"].as_i64().filter(|ns| *ns > 0);
    let duration = match (started, r["stopped_at_ns"].as_i64()) {
        (Some(a), Some(b)) if b >= a => format_duration((b - a) as f64 / 1e9),
        _ => "-".into(),
    };
    // The latest comment on the run, else the comment it was started with, else the reason
    // it was not ok.
    let comment = r["comments"]
        .as_array()
        .and_then(|c| c.last())
        .and_then(|c| c["text"].as_str());
    let text = |k: &str| r[k].as_str().filter(|s| !s.is_empty());
    let note = comment
        .or_else(|| text("comment"))
        .or_else(|| text("reason"));
    let started_by = r["started_by"].as_str().unwrap_or("");
    let who = match text("run_type") {
        Some(t) => format!("[{t}] {started_by}"),
        None => started_by.to_string(),
    };
    let last = match note {
        Some(n) if who.is_empty() => format!("({n})"),
        Some(n) => format!("{who} ({n})"),
        None => who,
    };
    [
        r["run_number"].to_string(),
        r["status"].as_str().unwrap_or("?").to_string(),
        started.map_or("-".into(), |ns| {
            rodeo_files::eventstorage::utc_text(ns as u64 / 1_000_000_000)
        }),
        duration,
        count("l1_accepts"),
        count("accepted"),
        count("events_written"),
        format!("{:.1}", r["bytes_written"].as_f64().unwrap_or(0.0) / 1e6),
        // A page of `GET /api/runs` names the first files and counts them all.
        r["files_total"]
            .as_u64()
            .unwrap_or_else(|| r["files"].as_array().map_or(0, Vec::len) as u64)
            .to_string(),
        last,
    ]
}

/// A duration as a person reads it: `12.3 s`, `4m05s`, `2h03m`.
pub fn format_duration(seconds: f64) -> String {
    if seconds < 60.0 {
        format!("{seconds:.1} s")
    } else if seconds < 3600.0 {
        let s = seconds as u64;
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        let m = seconds as u64 / 60;
        format!("{}h{:02}m", m / 60, m % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_whatever_the_values() {
        let run = serde_json::json!({
            "run_number": 7, "status": "degraded", "started_at_ns": 1_245_396_941_000_000_000i64,
            "stopped_at_ns": 1_245_397_066_000_000_000i64, "l1_accepts": 100000,
            "accepted": 10021, "events_written": 10021, "bytes_written": 1.5e8,
            "files": ["a", "b"], "reason": "22 partial events", "started_by": "rodeo run"
        });
        let header = table_line(&HEADER.map(String::from));
        let line = table_line(&row(&run));
        assert!(
            line.starts_with("     7  degraded  2009-06-19 07:35:41      2m05s"),
            "{line}"
        );
        for title in ["L1", "accepted", "written", "MB", "files"] {
            // Right-aligned columns end where their titles end.
            let end = header.find(title).unwrap() + title.len();
            assert_ne!(&line[end - 1..end], " ", "{title}: {line}");
            assert_eq!(&line[end..end + 1], " ", "{title}: {line}");
        }
        let last = header.find("started by").unwrap();
        assert_eq!(&line[last..], "rodeo run (22 partial events)");
        assert_eq!(format_duration(7322.0), "2h02m");
        // The run's type and the comment it was started with; a later comment wins.
        let mut words = run.clone();
        words["run_type"] = "calibration".into();
        words["comment"] = "HV scan".into();
        assert_eq!(
            &table_line(&row(&words))[last..],
            "[calibration] rodeo run (HV scan)"
        );
        words["comments"] = serde_json::json!([{"text": "beam lost at 10:02"}]);
        assert_eq!(
            &table_line(&row(&words))[last..],
            "[calibration] rodeo run (beam lost at 10:02)"
        );
    }
}
