//! The balance sheet for people: the lines `rodeo run` prints at the end of a run. Each rate
//! is printed beside the time it is measured over, "verified" only for files read back, the
//! verdict last.

use std::fmt::Write as _;

use crate::sheet::RunSheet;
use crate::verdict::{verdict_line, Problem, ProblemKind, Verdict};

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
    let words: Vec<String> = [
        ("type", &s.run_type),
        ("comment", &s.comment),
        ("shifter", &s.shifter),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| format!("{k}: {v}"))
    .collect();
    if !words.is_empty() {
        writeln!(out, "  {}", words.join("; "))?;
    }
    if s.stopped_early {
        writeln!(
            out,
            "  stopped before its end (a signal, or a stop command)"
        )?;
    }
    if s.l1_accepts.is_none() && s.events_written.is_none() {
        return writeln!(out, "  verdict: {}", verdict_line(s.verdict, &s.problems));
    }
    let requested = s.l1_rate_requested_hz;
    let rate = s.l1_rate_hz.unwrap_or(0.0);
    match (s.l1_seconds, s.l1_accepts) {
        (Some(span), Some(n)) if span > 0.0 => writeln!(
            out,
            "  L1: {n} accepts, {} over the {span:.2} s from the first to the last{}; \
             the run took {:.2} s",
            rate_text(rate),
            if requested > 0.0 {
                format!(" (requested {})", rate_text(requested))
            } else {
                String::new()
            },
            s.seconds.unwrap_or(0.0)
        )?,
        (_, l1) => writeln!(
            out,
            "  L1: {} accepts in {:.2} s",
            n(l1),
            s.seconds.unwrap_or(0.0)
        )?,
    }
    if requested > 0.0 && rate > 0.0 && rate < 0.98 * requested {
        writeln!(
            out,
            "  warning: the partition delivered {:.1}% of the requested L1 rate",
            100.0 * rate / requested
        )?;
    }
    if s.accepted.is_some() {
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
    }
    let unfinished = s
        .files
        .iter()
        .any(|f| f.to_string_lossy().ends_with(".writing"));
    let checked = if s.verified_by_reading && unfinished && s.events_verified < s.events_written {
        // Some in files left unfinished: read back, but no file check passes them (the sheet
        // said "read back and verified" of a `.writing` file `rodeo verify` refuses).
        format!(
            "{} read back, {} of them in finished files (verified), the rest in unfinished ones",
            n(s.events_written),
            n(s.events_verified)
        )
    } else if s.verified_by_reading {
        format!("{} read back and verified", n(s.events_verified))
    } else {
        format!(
            "{} checked as written (record checksums, each file's end record and size read \
             back)",
            n(s.events_verified)
        )
    };
    let write_rate = match s.write_bytes_per_s {
        Some(r) if r > 0.0 => format!(", {:.2} GB/s over the loggers' own write time", r / 1e9),
        _ => String::new(),
    };
    writeln!(
        out,
        "  written: {} events ({:.1} MB{write_rate}) in {} file(s); {checked}",
        n(s.events_written),
        s.bytes_written.unwrap_or(0) as f64 / 1e6,
        s.files.len(),
    )?;
    for node in &s.readout_nodes {
        // A node restarted into the run saw the clears from its rejoin on, one that died at
        // the stop counted until its last heartbeat: rule 6 does not check their clears, and
        // the line says why they are short of the L1 accepts.
        let exempt = if node.restarted {
            " (restarted into the run: from its rejoin on, not checked against the run's)"
        } else if node.died_at_stop {
            " (its last heartbeat's count: not checked against the run's)"
        } else {
            ""
        };
        writeln!(
            out,
            "  {}: {} requests, clears for {} events{exempt}",
            node.name, node.requests, node.cleared
        )?;
        if let Some(e) = &node.earlier_lives {
            writeln!(out, "    {}", earlier_lives_text(e))?;
        }
        if node.unbuilt_cut_by_stop > 0 {
            writeln!(
                out,
                "    {} fragments received after the last L1 accept: the run's end cut their \
                 events, not built",
                node.unbuilt_cut_by_stop
            )?;
        }
        if node.store_duplicates > 0 || node.store_dropped_after_clear > 0 {
            writeln!(
                out,
                "    store dropped {} duplicate fragment(s) (an L1ID sent twice: the first \
                 kept) and {} that came after their event was cleared",
                node.store_duplicates, node.store_dropped_after_clear
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
    if s.l1_accepts.is_some() {
        writeln!(
            out,
            "  balance: {}",
            if s.balanced {
                "OK (every L1 accept decided, cleared and written once)".to_string()
            } else if s.verdict == Verdict::Failed && s.l1_accepts == Some(0) {
                // Nothing to balance: "MISMATCH" read as lost events (a port in use).
                "not checked: the run failed before its first L1 accept".into()
            } else if let Some(who) = only_summaries_missing(&s.problems) {
                // Every count the sheet has adds up; an application's own are missing
                // ("MISMATCH" read as counts that disagree, a QA pass).
                format!("INCOMPLETE ({who} ended without the summary: its counts are missing)")
            } else {
                "MISMATCH".into()
            }
        )?;
    }
    let bad: u64 = s.bad_messages.values().sum();
    if bad > 0 {
        let each: Vec<String> = s
            .bad_messages
            .iter()
            .map(|(app, n)| format!("{app} {n}"))
            .collect();
        writeln!(
            out,
            "  dropped: {} malformed message(s) on the partition's sockets ({}): a broken or \
             hostile peer; no event of the run is in them",
            bad,
            each.join(", ")
        )?;
    }
    for p in &s.problems {
        writeln!(out, "  problem ({}): {}", p.verdict.as_str(), p.text)?;
    }
    writeln!(out, "  verdict: {}", verdict_line(s.verdict, &s.problems))
}

/// One line for a run that ended in a service (`rodeo serve`'s log).
pub fn one_line(s: &RunSheet) -> String {
    format!(
        "run {} ended: {} L1 accepts, {} events written, verdict {}",
        s.run_number,
        n(s.l1_accepts),
        n(s.events_written),
        verdict_line(s.verdict, &s.problems)
    )
}

/// A rate in kHz to one decimal from 1 kHz on, in Hz below (20 Hz read "0.0 kHz").
fn rate_text(hz: f64) -> String {
    if hz >= 1e3 {
        format!("{:.1} kHz", hz / 1e3)
    } else {
        format!("{hz:.1} Hz")
    }
}

/// The applications named by the balance problems when every one of them is an application
/// that ended without its summary (`"logger-1, ros-1"`); `None` otherwise.
fn only_summaries_missing(problems: &[Problem]) -> Option<String> {
    const MISSING: &str = " ended without its summary";
    let balance: Vec<&Problem> = problems
        .iter()
        .filter(|p| p.kind == ProblemKind::Balance)
        .collect();
    let names: Option<Vec<&str>> = balance
        .iter()
        .map(|p| p.text.strip_suffix(MISSING))
        .collect();
    names.filter(|n| !n.is_empty()).map(|n| n.join(", "))
}

/// A restarted readout node's earlier lives in one line: their counts, each to its last
/// heartbeat, and the lives that died before any.
fn earlier_lives_text(e: &rodeo_control::summary::EarlierLives) -> String {
    let lives = if e.lives == 1 {
        "its earlier life".to_string()
    } else {
        format!("its {} earlier lives", e.lives)
    };
    let unheard = match e.unheard {
        0 => String::new(),
        1 if e.lives == 1 => "; it died before its first heartbeat: not counted".into(),
        k => format!("; {k} of them died before their first heartbeat: not counted"),
    };
    format!(
        "{lives} (to the last heartbeat before each death): {} fragments stored, {} requests, \
         clears for {} events, {} fragments answered lost{unheard}",
        e.stored, e.requests, e.cleared, e.lost_fragments
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_words_are_said_under_the_run_line_when_given() {
        let mut sheet = RunSheet {
            run_number: 3,
            ..RunSheet::default()
        };
        assert!(!render(&sheet).contains("comment"));
        sheet.comment = "HV scan".into();
        sheet.run_type = "calibration".into();
        let text = render(&sheet);
        let second = text.lines().nth(1).unwrap();
        assert_eq!(second, "  type: calibration; comment: HV scan", "{text}");
    }

    /// A restarted node's clears are short of the L1 accepts by design: its line says so next
    /// to "balance: OK".
    #[test]
    fn a_restarted_node_s_clears_are_said_to_be_exempt() {
        let node = |restarted| crate::sheet::NodeSheet {
            name: "ros-1".into(),
            cleared: 194_026,
            restarted,
            ..crate::sheet::NodeSheet::default()
        };
        let mut sheet = RunSheet {
            l1_accepts: Some(271_414),
            balanced: true,
            readout_nodes: vec![node(true)],
            ..RunSheet::default()
        };
        assert!(render(&sheet).contains(
            "ros-1: 0 requests, clears for 194026 events (restarted into the run: from its \
             rejoin on, not checked against the run's)"
        ));
        sheet.readout_nodes = vec![node(false)];
        assert!(render(&sheet).contains("clears for 194026 events\n"));
        // Its earlier lives' counts under its line (they were on no sheet).
        let mut restarted = node(true);
        restarted.earlier_lives = Some(rodeo_control::summary::EarlierLives {
            lives: 2,
            unheard: 1,
            requests: 9,
            cleared: 77_388,
            stored: 80_000,
            lost_fragments: 0,
        });
        sheet.readout_nodes = vec![restarted];
        let text = render(&sheet);
        assert!(
            text.contains(
                "    its 2 earlier lives (to the last heartbeat before each death): 80000 \
                 fragments stored, 9 requests, clears for 77388 events, 0 fragments answered \
                 lost; 1 of them died before their first heartbeat: not counted"
            ),
            "{text}"
        );
    }

    /// A run whose only balance problems are applications that ended without their summary:
    /// "INCOMPLETE" naming them, not "MISMATCH"; files partly unfinished are read back, and
    /// only the finished ones called verified.
    #[test]
    fn missing_summaries_make_the_balance_incomplete_and_unfinished_files_are_not_verified() {
        let missing = Problem::new(
            ProblemKind::Balance,
            None,
            None,
            "logger-1 ended without its summary".into(),
        );
        let mut sheet = RunSheet {
            l1_accepts: Some(10),
            verdict: Verdict::Failed,
            problems: vec![missing.clone()],
            events_written: Some(10),
            events_verified: Some(8),
            verified_by_reading: true,
            files: vec!["r.0001.data".into(), "r.0002.data.writing".into()],
            ..RunSheet::default()
        };
        let text = render(&sheet);
        assert!(
            text.contains("balance: INCOMPLETE (logger-1 ended without the summary"),
            "{text}"
        );
        assert!(
            text.contains("10 read back, 8 of them in finished files (verified)"),
            "{text}"
        );
        sheet.problems.push(Problem::new(
            ProblemKind::Balance,
            None,
            None,
            "events written 8 != accepted 10".into(),
        ));
        assert!(render(&sheet).contains("balance: MISMATCH"));
    }

    /// Malformed messages dropped by the applications are said, with who dropped them; none,
    /// nothing is said.
    #[test]
    fn malformed_messages_are_said_by_application() {
        let mut sheet = RunSheet {
            l1_accepts: Some(10),
            ..RunSheet::default()
        };
        assert!(!render(&sheet).contains("malformed"));
        sheet.bad_messages.insert("ros-1".into(), 126_382);
        sheet.bad_messages.insert("supervisor".into(), 2);
        assert!(render(&sheet).contains(
            "dropped: 126384 malformed message(s) on the partition's sockets (ros-1 126382, \
             supervisor 2)"
        ));
    }

    /// A run that failed before its first accept has no balance to check: the line says so
    /// rather than "MISMATCH".
    #[test]
    fn a_run_failed_before_its_first_accept_has_its_balance_not_checked() {
        let mut sheet = RunSheet {
            l1_accepts: Some(0),
            verdict: Verdict::Failed,
            ..RunSheet::default()
        };
        assert!(render(&sheet)
            .contains("balance: not checked: the run failed before its first L1 accept"));
        sheet.l1_accepts = Some(10);
        assert!(render(&sheet).contains("balance: MISMATCH"));
    }

    /// Rates from 1 kHz on in kHz, below in Hz (never "0.0 kHz").
    #[test]
    fn low_rates_are_said_in_hz() {
        assert_eq!(super::rate_text(20.0), "20.0 Hz");
        assert_eq!(super::rate_text(999.9), "999.9 Hz");
        assert_eq!(super::rate_text(114_300.0), "114.3 kHz");
    }

    /// Fragments the store dropped (duplicates, late after a clear) are said under the node,
    /// and only when there are some.
    #[test]
    fn fragments_the_store_dropped_are_said_under_the_node() {
        let mut node = crate::sheet::NodeSheet {
            name: "ros-1".into(),
            ..crate::sheet::NodeSheet::default()
        };
        let sheet = |node: &crate::sheet::NodeSheet| RunSheet {
            l1_accepts: Some(10),
            balanced: true,
            readout_nodes: vec![node.clone()],
            ..RunSheet::default()
        };
        assert!(!render(&sheet(&node)).contains("store dropped"));
        node.store_duplicates = 3;
        node.store_dropped_after_clear = 1;
        assert!(render(&sheet(&node)).contains(
            "    store dropped 3 duplicate fragment(s) (an L1ID sent twice: the first kept) and \
             1 that came after their event was cleared"
        ));
    }
}
