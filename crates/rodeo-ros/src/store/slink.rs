//! The error dump of the S-LINK input: words the checker could not store (no readable L1ID,
//! garbage between fragments) go to an error file as hex words, rate-limited, and are counted.
//!
//! The checks themselves are `rodeo_format::slink::SlinkChecker`'s (framing control words, ROD
//! marker, header and trailer, L1ID readable, L1ID sequence per channel with wrap, duplicates,
//! optional CRC word); [`crate::inputs::DmaInput`] runs one per channel.

use std::io::Write;
use std::time::Instant;

/// Writes unreadable fragments to an error file as hex words, at most `per_s` per second.
#[derive(Debug)]
pub struct ErrorDump {
    out: Option<std::fs::File>,
    per_s: u32,
    window: Instant,
    in_window: u32,
    /// Fragments written.
    pub dumped: u64,
    /// Fragments not written because of the rate limit.
    pub suppressed: u64,
}

impl ErrorDump {
    /// A dump into `out` (none: count only).
    pub fn new(out: Option<std::fs::File>, per_s: u32) -> ErrorDump {
        ErrorDump {
            out,
            per_s,
            window: Instant::now(),
            in_window: 0,
            dumped: 0,
            suppressed: 0,
        }
    }

    /// Dumps `words` of channel `channel` unless the rate limit is reached.
    pub fn dump(&mut self, channel: usize, words: &[u32]) {
        if self.window.elapsed().as_secs() >= 1 {
            self.window = Instant::now();
            self.in_window = 0;
        }
        let Some(out) = self.out.as_mut() else {
            self.suppressed += 1;
            return;
        };
        if self.in_window >= self.per_s {
            self.suppressed += 1;
            return;
        }
        self.in_window += 1;
        let mut line = format!("channel {channel} words {}:", words.len());
        for w in words.iter().take(64) {
            line.push_str(&format!(" {w:08x}"));
        }
        line.push('\n');
        if out.write_all(line.as_bytes()).is_ok() {
            self.dumped += 1;
        } else {
            self.suppressed += 1;
        }
    }
}
