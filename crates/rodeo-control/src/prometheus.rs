//! A writer of the Prometheus text exposition format (version 0.0.4): `# HELP`, `# TYPE`, then
//! samples, one family at a time, labels escaped.
//!
//! It only formats: the values come from the applications' atomic counters and histograms at
//! scrape time, so nothing on the data path knows about Prometheus.

use std::fmt::Write as _;

/// Builds one metrics page. Families must be written whole (all samples of a name together).
#[derive(Debug, Default)]
pub struct MetricsWriter {
    out: String,
    families: usize,
    samples: usize,
}

/// A label set: `(name, value)` pairs.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

impl MetricsWriter {
    /// An empty page.
    pub fn new() -> MetricsWriter {
        MetricsWriter::default()
    }

    /// Starts a family: writes its `# HELP` and `# TYPE` lines. `kind` is `counter`, `gauge`,
    /// `histogram` or `summary`. A counter's name should end in `_total`.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        self.families += 1;
    }

    /// Writes one sample line `name{labels} value`.
    pub fn sample(&mut self, name: &str, labels: Labels<'_>, value: f64) {
        self.out.push_str(name);
        write_labels(&mut self.out, labels, None);
        self.out.push(' ');
        push_value(&mut self.out, value);
        self.out.push('\n');
        self.samples += 1;
    }

    /// A counter family with one sample per label set.
    pub fn counter(&mut self, name: &str, help: &str, samples: &[(Labels<'_>, u64)]) {
        self.family(name, "counter", help);
        for (labels, v) in samples {
            self.sample(name, labels, *v as f64);
        }
    }

    /// A gauge family with one sample per label set.
    pub fn gauge(&mut self, name: &str, help: &str, samples: &[(Labels<'_>, f64)]) {
        self.family(name, "gauge", help);
        for (labels, v) in samples {
            self.sample(name, labels, *v);
        }
    }

    /// One histogram's samples (call [`MetricsWriter::family`] with `histogram` first):
    /// `bounds` are the buckets' upper bounds (ascending), `counts` the per-bucket counts (not
    /// cumulative; one more than `bounds`, the last being the overflow), `sum` the sum of the
    /// observations.
    pub fn histogram(
        &mut self,
        name: &str,
        labels: Labels<'_>,
        bounds: &[f64],
        counts: &[u64],
        sum: f64,
    ) {
        let mut cumulative = 0u64;
        let bucket = format!("{name}_bucket");
        for (i, &c) in counts.iter().enumerate() {
            cumulative += c;
            let le = match bounds.get(i) {
                Some(b) => format_value(*b),
                None => "+Inf".to_string(),
            };
            self.out.push_str(&bucket);
            write_labels(&mut self.out, labels, Some(&le));
            let _ = writeln!(self.out, " {cumulative}");
            self.samples += 1;
        }
        if counts.len() == bounds.len() {
            // No overflow bucket given: +Inf is the total.
            self.out.push_str(&bucket);
            write_labels(&mut self.out, labels, Some("+Inf"));
            let _ = writeln!(self.out, " {cumulative}");
            self.samples += 1;
        }
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, cumulative as f64);
    }

    /// Families written so far.
    pub fn families(&self) -> usize {
        self.families
    }

    /// Sample lines written so far.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }
}

fn write_labels(out: &mut String, labels: Labels<'_>, le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (k, v) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        for ch in v.chars() {
            match ch {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

fn push_value(out: &mut String, v: f64) {
    out.push_str(&format_value(v));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_families_samples_and_histograms() {
        let mut w = MetricsWriter::new();
        w.counter(
            "rodeo_events_total",
            "Events.",
            &[(&[("app", "dcm-1")], 5), (&[("app", "dcm\"2")], 7)],
        );
        w.family("rodeo_latency_seconds", "histogram", "Latency.");
        w.histogram(
            "rodeo_latency_seconds",
            &[("app", "dcm-1")],
            &[0.001, 0.01],
            &[2, 3, 1],
            0.05,
        );
        assert_eq!(w.families(), 2);
        assert_eq!(w.samples(), 2 + 3 + 2);
        let text = w.finish();
        assert!(text.contains("# TYPE rodeo_events_total counter\n"));
        assert!(text.contains("rodeo_events_total{app=\"dcm\\\"2\"} 7\n"));
        assert!(text.contains("rodeo_latency_seconds_bucket{app=\"dcm-1\",le=\"0.01\"} 5\n"));
        assert!(text.contains("rodeo_latency_seconds_bucket{app=\"dcm-1\",le=\"+Inf\"} 6\n"));
        assert!(text.contains("rodeo_latency_seconds_count{app=\"dcm-1\"} 6\n"));
    }
}
