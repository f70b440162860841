//! Output of benchmark and study results: one JSON object with a `rows` array of flat objects
//! (`--json`), or an aligned text table for people.

use serde_json::{Map, Value};

/// A benchmark or study result: a name, top-level fields and rows of flat objects.
#[derive(Debug, Default)]
pub struct Report {
    /// What was measured, e.g. `"pool"`.
    pub bench: String,
    /// Top-level fields (baselines measured in the same run, machine facts).
    pub fields: Map<String, Value>,
    /// One flat object per measured point.
    pub rows: Vec<Map<String, Value>>,
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

    /// Prints the report: JSON on one line, or a header of fields and an aligned table.
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
            println!("{}", Value::Object(obj));
            return;
        }
        for (k, v) in &self.fields {
            println!("{k}: {}", fmt_value(v));
        }
        print_table(&self.rows);
    }
}

fn fmt_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => {
                if f.abs() >= 1e6 {
                    format!("{f:.4e}")
                } else {
                    format!("{f:.3}")
                }
            }
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// Prints rows as an aligned table; columns in the order of the first row.
pub fn print_table(rows: &[Map<String, Value>]) {
    let Some(first) = rows.first() else { return };
    let cols: Vec<&String> = first.keys().collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            cols.iter()
                .map(|c| r.get(*c).map(fmt_value).unwrap_or_default())
                .collect()
        })
        .collect();
    let widths: Vec<usize> = cols
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
        println!("{}", parts.join("  "));
    };
    line(cols.iter().map(|c| c.as_str()).collect());
    for r in &cells {
        line(r.iter().map(String::as_str).collect());
    }
}
