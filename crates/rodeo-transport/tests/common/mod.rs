//! What the stream transport's test files share.

use std::time::{Duration, Instant};

use rodeo_transport::stream::{Router, StreamStats};

/// Receives on `r` until `cond` holds of its stats (no message may come), within `wait`.
pub(crate) fn until_stats(
    r: &mut Router,
    what: &str,
    wait: Duration,
    cond: impl Fn(&StreamStats) -> bool,
) {
    let deadline = Instant::now() + wait;
    while !cond(&r.stats()) {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {wait:?}: {:?}",
            r.stats()
        );
        if let Some(m) = r.recv(Duration::from_millis(50)).unwrap() {
            panic!("{what}: unexpected message of {} bytes", m.bytes.len());
        }
    }
}
