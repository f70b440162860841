//! Reading one of a child's output streams on a thread of its own, into a buffer the test
//! looks at while the child runs: a child that prints much never blocks on a full pipe.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// What a child wrote on one stream so far, and whether the stream has ended.
#[derive(Default)]
pub(super) struct Capture {
    bytes: Mutex<Vec<u8>>,
    ended: AtomicBool,
}

impl Capture {
    /// Starts a thread that reads `from` to its end into a new capture; with `echo`, each line
    /// is also printed on the test's stderr after that prefix.
    pub(super) fn start(from: impl Read + Send + 'static, echo: Option<String>) -> Arc<Capture> {
        let capture = Arc::new(Capture::default());
        let writer = Arc::clone(&capture);
        std::thread::spawn(move || writer.read_to_end(from, echo));
        capture
    }

    /// The reading thread's loop: appends every chunk until the end of the stream (or an
    /// error), then marks the capture ended.
    fn read_to_end(&self, mut from: impl Read, echo: Option<String>) {
        let mut chunk = vec![0u8; 64 * 1024];
        let mut echoed = 0;
        loop {
            match from.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    let mut bytes = self.bytes();
                    bytes.extend_from_slice(&chunk[..n]);
                    if let Some(prefix) = &echo {
                        echoed = echo_lines(prefix, &bytes, echoed, false);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        if let Some(prefix) = &echo {
            echo_lines(prefix, &self.bytes(), echoed, true);
        }
        self.ended.store(true, Ordering::Release);
    }

    fn bytes(&self) -> MutexGuard<'_, Vec<u8>> {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the stream has ended (the child and every process that shares the pipe closed
    /// it).
    pub(super) fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Everything written so far, as text (invalid UTF-8 replaced).
    pub(super) fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }

    /// The complete lines written so far (everything once the stream ended: its last line is
    /// complete then) and whether it ended.
    pub(super) fn lines(&self) -> (String, bool) {
        let ended = self.ended();
        let bytes = self.bytes();
        let end = if ended {
            bytes.len()
        } else {
            bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
        };
        (String::from_utf8_lossy(&bytes[..end]).into_owned(), ended)
    }
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("ended", &self.ended())
            .finish_non_exhaustive()
    }
}

/// Prints the lines of `bytes` from offset `from` on the test's stderr after `prefix` (the
/// last, unterminated one too when `all`); returns the offset after the last line printed.
fn echo_lines(prefix: &str, bytes: &[u8], mut from: usize, all: bool) -> usize {
    while let Some(n) = bytes[from..].iter().position(|&b| b == b'\n') {
        eprintln!(
            "{prefix}{}",
            String::from_utf8_lossy(&bytes[from..from + n])
        );
        from += n + 1;
    }
    if all && from < bytes.len() {
        eprintln!("{prefix}{}", String::from_utf8_lossy(&bytes[from..]));
        from = bytes.len();
    }
    from
}
