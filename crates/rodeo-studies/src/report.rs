//! Output of benchmark and study results: one JSON object with a `rows` array of flat objects
//! (`--json`), or an aligned text table for people.

use serde_json::{Map, Value};

/// `println!` that a closed standard output (`rodeo bench ... | head`) cannot turn into a
/// panic: the rest of the report is dropped.
macro_rules! report_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// A benchmark or study result: a name, top-level fields and rows of flat objects.
#[derive(Debug, Default)]
pub struct Report {
    /// What was measured, e.g. `"pool"`.
    pub bench: String,
    /// Top-level fields (baselines measured in the same run, machine facts).
    pub fields: Map<String, Value>,
    /// One flat object per measured point.
    pub rows: Vec<Map<String, Value>>,
    /// Targets, for people ([`Report::add_target`]; not in the JSON).
    pub targets: Vec<Target>,
}

impl Report {
    /// An empty report for `bench`.
    pub fn new(bench: &str) -> Report {
        Report {
            bench: bench.to_string(),
            ..Report::default()
        }
    }

    /// Adds a row from any serializable flat struct.
    pub fn push_row<T: serde::Serialize>(&mut self, row: &T) -> anyhow::Result<()> {
        match serde_json::to_value(row)? {
            Value::Object(map) => {
                self.rows.push(map);
                Ok(())
            }
            other => anyhow::bail!("a report row must serialize to an object, got {other}"),
        }
    }

    /// Names a target the measurement is held against, for people: `what` it is, the `value`
    /// measured and the `goal`, both with units, and whether it was met. Printed one line each
    /// after the table; the JSON is unchanged (its `target_met` fields stay as they are).
    pub fn add_target(&mut self, what: &str, value: String, goal: String, met: bool) {
        self.targets.push(Target {
            what: what.to_string(),
            value,
            goal,
            met,
        });
    }

    /// Prints the report: JSON on one line, or for people the fields, a short table with units
    /// (rates in kHz, bandwidths in MB/s, times in us; a single row as one line per figure) and
    /// one line per target naming it and its value.
    pub fn print(&self, json: bool) {
        if json {
            let mut obj = Map::new();
            obj.insert("bench".into(), Value::String(self.bench.clone()));
            for (k, v) in &self.fields {
                obj.insert(k.clone(), v.clone());
            }
            obj.insert(
                "rows".into(),
                Value::Array(self.rows.iter().cloned().map(Value::Object).collect()),
            );
            report_line!("{}", Value::Object(obj));
            return;
        }
        report_line!("{}", self.bench);
        for (k, v) in &self.fields {
            if k.starts_with("target") {
                continue; // said by the target lines
            }
            let (name, value) = human(k, v);
            report_line!("  {name}: {value}");
        }
        if self.rows.len() == 1 {
            for (k, v) in &self.rows[0] {
                let (name, value) = human(k, v);
                report_line!("  {name:<32} {value:>14}");
            }
        } else {
            print_table(&self.rows);
        }
        for t in &self.targets {
            report_line!(
                "target {}: {} (goal {}): {}",
                t.what,
                t.value,
                t.goal,
                if t.met { "met" } else { "NOT met" }
            );
        }
    }
}

/// A target a measurement is held against ([`Report::add_target`]).
#[derive(Debug, Clone)]
pub struct Target {
    /// What is measured.
    pub what: String,
    /// The value, with its unit.
    pub value: String,
    /// The goal, with its unit.
    pub goal: String,
    /// Whether the value meets the goal.
    pub met: bool,
}

/// Units for people from a field name's suffix: (suffix, unit shown, divisor).
const UNITS: [(&str, &str, f64); 7] = [
    ("_bytes_per_s", "MB/s", 1e6),
    ("_per_s", "k/s", 1e3),
    ("_hz", "kHz", 1e3),
    ("_ns", "us", 1e3),
    ("_us", "us", 1.0),
    ("_bytes", "MB", 1e6),
    ("_s", "s", 1.0),
];

/// A field's name with its unit and its value scaled to it, for people.
pub fn human(key: &str, v: &Value) -> (String, String) {
    let key_ = if key == "bytes" || key == "bytes_per_s" {
        format!("_{key}")
    } else {
        key.to_string()
    };
    for (suffix, unit, div) in UNITS {
        if let Some(stem) = key_.strip_suffix(suffix) {
            let stem = stem.trim_start_matches('_');
            let name = if stem.is_empty() {
                unit.to_string()
            } else {
                format!("{stem} ({unit})")
            };
            return match v.as_f64() {
                Some(f) if !v.is_boolean() => (name, plain(f / div)),
                _ => (name, fmt_value(v)),
            };
        }
    }
    (key.to_string(), fmt_value(v))
}

/// A number in plain digits: no exponent, fewer decimals as it grows.
pub fn plain(f: f64) -> String {
    let a = f.abs();
    if a == 0.0 || a.fract() == 0.0 && a < 1e15 {
        format!("{f:.0}")
    } else if a >= 100.0 {
        format!("{f:.1}")
    } else if a >= 1.0 {
        format!("{f:.2}")
    } else {
        format!("{f:.3}")
    }
}

fn fmt_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => plain(f),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// Prints rows as an aligned table with units in the headers ([`human`]); columns in the order
/// of the first row.
pub fn print_table(rows: &[Map<String, Value>]) {
    let Some(first) = rows.first() else { return };
    let cols: Vec<&String> = first.keys().collect();
    let heads: Vec<String> = cols.iter().map(|c| human(c, &Value::Null).0).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            cols.iter()
                .map(|c| r.get(*c).map(|v| human(c, v).1).unwrap_or_default())
                .collect()
        })
        .collect();
    let widths: Vec<usize> = heads
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cells
                .iter()
                .map(|r| r[i].len())
                .chain([c.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |vals: Vec<&str>| {
        let parts: Vec<String> = vals
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:>w$}"))
            .collect();
        report_line!("{}", parts.join("  "));
    };
    line(heads.iter().map(String::as_str).collect());
    for r in &cells {
        line(r.iter().map(String::as_str).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_for_people_carry_their_units_in_plain_digits() {
        let n = |f: f64| Value::from(f);
        assert_eq!(human("l1_rate_hz", &n(159_201.0)).1, "159.2");
        assert_eq!(human("l1_rate_hz", &n(0.0)).0, "l1_rate (kHz)");
        assert_eq!(
            human("bytes_per_s", &n(8.1597e8)),
            ("MB/s".into(), "816.0".into())
        );
        assert_eq!(human("p99_latency_ns", &n(9_437_184.0)).1, "9437.2");
        assert_eq!(human("events", &Value::from(100u64)).1, "100");
        assert_eq!(plain(1000.0), "1000");
        assert!(!plain(2.8534e8).contains('e'));
    }
}
