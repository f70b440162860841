//! The live status line of `rodeo run` on a terminal: elapsed time, L1 rate (and the requested
//! one), events decided and written per second, MB/s to disk, the output's free space, warnings.
//!
//! Shown only when stderr is a terminal and `--quiet` was not given, redrawn in place by
//! indicatif (no scrolling output); nothing at all in a pipe, a log file or CI.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use rodeo_control::run_control::PartitionStatus;

/// The status line (hidden when not wanted).
pub(crate) struct StatusLine {
    bar: ProgressBar,
    output: PathBuf,
    requested_hz: f64,
    /// The previous (time, bytes written), for MB/s.
    last: Option<(Instant, u64)>,
    mb_per_s: f64,
    started: Instant,
}

impl StatusLine {
    /// A line for a run writing under `output` at `requested_hz` (0: unpaced); hidden when
    /// `quiet` or stderr is not a terminal.
    pub(crate) fn new(quiet: bool, output: PathBuf, requested_hz: f64) -> StatusLine {
        let bar = if quiet || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else {
            let b = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{elapsed} {msg:.wide}") {
                b.set_style(style);
            }
            b.enable_steady_tick(Duration::from_millis(200));
            b
        };
        StatusLine {
            bar,
            output,
            requested_hz,
            last: None,
            mb_per_s: 0.0,
            started: Instant::now(),
        }
    }

    /// Redraws the line from the partition's status and the loggers' bytes written.
    pub(crate) fn update(&mut self, s: &PartitionStatus, bytes_written: u64) {
        if self.bar.is_hidden() {
            return;
        }
        let now = Instant::now();
        if let Some((t, b)) = self.last {
            let dt = now.duration_since(t).as_secs_f64();
            if dt > 0.0 {
                self.mb_per_s = bytes_written.saturating_sub(b) as f64 / dt / 1e6;
            }
        }
        self.last = Some((now, bytes_written));
        self.bar.set_message(self.line(s));
    }

    fn line(&self, s: &PartitionStatus) -> String {
        let requested = if self.requested_hz > 0.0 {
            format!("/{:.1}", self.requested_hz / 1e3)
        } else {
            String::new()
        };
        let free = rodeo_files::space::available_near(&self.output)
            .map_or_else(|| "?".to_string(), |b| format!("{:.0} GB", b as f64 / 1e9));
        let mut warnings = Vec::new();
        let n = crate::logging::warnings() + s.recent_errors.len() as u64;
        if n > 0 {
            warnings.push(format!("{n} in the log"));
        }
        // Below the requested rate by more than 2% once the run is under way.
        if self.requested_hz > 0.0
            && s.state == rodeo_control::lifecycle::State::Running
            && self.started.elapsed() > Duration::from_secs(2)
            && s.l1_rate_hz < 0.98 * self.requested_hz
        {
            warnings.push("L1 below rate".into());
        }
        format!(
            "L1 {:.1}{requested} kHz {} | decided {:.1} kHz | wrote {} {:.1} MB/s | {free} free{}",
            s.l1_rate_hz / 1e3,
            s.l1_accepts,
            s.event_rate_hz / 1e3,
            s.events_written,
            self.mb_per_s,
            if warnings.is_empty() {
                String::new()
            } else {
                format!(" | warn: {}", warnings.join(", "))
            }
        )
    }

    /// Clears the line (before the summary is printed).
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
