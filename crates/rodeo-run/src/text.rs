//! The balance sheet for people: the lines `rodeo run` prints at the end of a run.

use std::fmt::Write as _;

use crate::sheet::RunSheet;

/// The sheet as text, one line per fact, the verdict last.
pub fn render(sheet: &RunSheet) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = write_sheet(&mut out, sheet);
    out
}

/// A count, or `?` where nobody counted.
fn n(v: Option<u64>) -> String {
    v.map_or_else(|| "?".into(), |v| v.to_string())
}

fn write_sheet(out: &mut String, s: &RunSheet) -> std::fmt::Result {
    if let Some(t) = &s.python_trigger {
        writeln!(out, "python trigger: {t}")?;
    }
    writeln!(out, "run {} -> {}", s.run_number, s.directory.display())?;
    if s.l1_accepts.is_none() {
        // A run that failed: what its files hold, and why.
        for f in &s.files {
            writeln!(out, "  file left: {}", f.display())?;
        }
        writeln!(
            out,
            "  written: {} events ({:.1} MB) in {} file(s), found by reading them",
            n(s.events_written),
            s.bytes_written.unwrap_or(0) as f64 / 1e6,
            s.files.len()
        )?;
        return writeln!(
            out,
            "  balance: FAILED: {}",
            s.reason.as_deref().unwrap_or("unknown")
        );
    }
    let requested = s.l1_rate_requested_hz;
    let rate = s.l1_rate_hz.unwrap_or(0.0);
    writeln!(
        out,
        "  {} L1 accepts in {:.2} s: {:.1} kHz{}",
        n(s.l1_accepts),
        s.seconds.unwrap_or(0.0),
        rate / 1e3,
        if requested > 0.0 {
            format!(" (requested {:.1} kHz)", requested / 1e3)
        } else {
            String::new()
        }
    )?;
    if requested > 0.0 && rate < 0.98 * requested {
        writeln!(
            out,
            "  warning: the partition delivered {:.1}% of the requested L1 rate",
            100.0 * rate / requested
        )?;
    }
    let (a, r, f) = (
        s.accepted.unwrap_or(0),
        s.rejected.unwrap_or(0),
        s.forced_accepts.unwrap_or(0),
    );
    writeln!(
        out,
        "  decided: accepted {a} + rejected {r} + forced {f} = {}",
        a + r + f
    )?;
    writeln!(
        out,
        "  written: {} events ({:.1} MB, {:.2} GB/s) in {} file(s), {} verified",
        n(s.events_written),
        s.bytes_written.unwrap_or(0) as f64 / 1e6,
        s.write_bytes_per_s.unwrap_or(0.0) / 1e9,
        s.files.len(),
        n(s.events_verified)
    )?;
    for node in &s.readout_nodes {
        writeln!(
            out,
            "  {}: {} requests, clears for {} events",
            node.name, node.requests, node.cleared
        )?;
        if node.input_errors > 0 {
            writeln!(
                out,
                "    input: {} link errors found ({} words dropped); their events are flagged",
                node.input_errors, node.input_dropped_words
            )?;
        }
        if node.swrod_built > 0 || node.swrod_error.is_some() {
            writeln!(
                out,
                "    SW ROD input: {} fragments built{}",
                node.swrod_built,
                node.swrod_error
                    .as_deref()
                    .map_or(String::new(), |e| format!(", error: {e}"))
            )?;
        }
    }
    let restarts = s.restarts.unwrap_or(0);
    let partial = s.partial_events.unwrap_or(0);
    if restarts > 0 || partial > 0 {
        writeln!(
            out,
            "  faults: {restarts} restart(s), {partial} partial events, {} events recovered \
             from files left open, {} events resent to a logger",
            n(s.recovered_events),
            n(s.events_resent)
        )?;
    }
    if let Some(why) = &s.ended_by {
        writeln!(
            out,
            "  ended early: {why}; {} events were in flight",
            n(s.in_flight_at_stop)
        )?;
    }
    writeln!(
        out,
        "  balance: {}",
        if s.balanced { "OK" } else { "MISMATCH" }
    )?;
    for p in &s.problems {
        writeln!(out, "  problem: {p}")?;
    }
    Ok(())
}

/// One line for a run that ended in a service (`rodeo serve`'s log).
pub fn one_line(s: &RunSheet) -> String {
    format!(
        "run {} ended: {} L1 accepts, {} events written, balance {}",
        s.run_number,
        n(s.l1_accepts),
        n(s.events_written),
        if s.balanced { "OK" } else { "FAILED" }
    )
}
