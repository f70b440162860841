//! The `stream_tcp` row of `rodeo bench transport`: rodeo's own framing over plain kernel TCP
//! ([`rodeo_transport::stream`]), DEALER to ROUTER between the two processes, as the data
//! paths across hosts would use it.
//!
//! The producer sends each message with one blocking send (one vectored write of the header
//! and the payload, no copy into a buffer of its own); the consumer's router hands each
//! message out as a slice of its receive buffer and reads every byte of it (the checksum).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rodeo_transport::stream::{Dealer, Limits, Router};

use super::transport_raw::checksum;

/// How long one send may wait for the consumer to read.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The consumer: binds `endpoint` (`host:port`), says `ready ADDR` on `out`, then receives
/// until a message of another size than `bytes` (the end marker); returns the messages received
/// and the sum of their bytes.
pub(super) fn consume(
    endpoint: &str,
    bytes: usize,
    out: &mut impl Write,
) -> anyhow::Result<(u64, u64)> {
    let mut router = Router::bind(endpoint, Limits::default())?;
    writeln!(out, "ready {}", router.local_addr())?;
    out.flush()?;
    let (mut n, mut sum) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let Some(m) = router.recv(Duration::from_secs(1))? else {
            anyhow::ensure!(
                Instant::now() < deadline,
                "bench peer stream_tcp: no end marker within 120 s"
            );
            continue;
        };
        if m.bytes.len() != bytes {
            break;
        }
        sum = sum.wrapping_add(checksum(m.bytes));
        n += 1;
    }
    Ok((n, sum))
}

/// The producer: connects to the consumer at `addr`, then for `time` writes every byte of a
/// message of `bytes` and sends it; ends with a one-byte marker. Returns the messages sent and
/// the moment of the first send.
pub(super) fn produce(addr: &str, bytes: usize, time: Duration) -> anyhow::Result<(u64, Instant)> {
    let mut d = Dealer::connect(addr, Limits::default(), SEND_TIMEOUT)
        .context("bench transport stream_tcp: connect")?;
    let mut buf = vec![0u8; bytes];
    let mut sent = 0u64;
    let start = Instant::now();
    while start.elapsed() < time {
        for _ in 0..64 {
            buf.fill(sent as u8);
            d.send(&[&buf], SEND_TIMEOUT)
                .context("bench transport stream_tcp: send")?;
            sent += 1;
        }
    }
    d.send(&[&[0u8]], SEND_TIMEOUT)?;
    anyhow::ensure!(
        d.flush(SEND_TIMEOUT)?,
        "bench transport stream_tcp: the consumer did not read the end marker within \
         {SEND_TIMEOUT:?}"
    );
    Ok((sent, start))
}
