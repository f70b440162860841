//! The `stream_tcp` and `stream_tls` rows of `rodeo bench transport`: rodeo's own framing over
//! plain kernel TCP ([`rodeo_transport::stream`]), DEALER to ROUTER between the two processes,
//! as the data paths across hosts use it; `stream_tls` with TLS 1.3 (the partition's kind of
//! keys, made for the run: the consumer gets them in its environment, which is fine for keys
//! that protect nothing but this measurement).
//!
//! The producer sends each message with one blocking send (one vectored write of the header
//! and the payload, no copy into a buffer of its own); the consumer's router hands each
//! message out as a slice of its receive buffer and reads every byte of it (the checksum).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rodeo_transport::stream::{Dealer, Limits, Router, TlsContext, TlsKeys};

use super::transport_raw::checksum;

/// How long one send may wait for the consumer to read.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The environment variable that hands the run's TLS keys to the `stream_tls` consumer.
const KEYS_ENV: &str = "RODEO_BENCH_TLS_KEYS";

/// The run's TLS keys (made once per process by the producer).
fn run_keys() -> anyhow::Result<&'static TlsKeys> {
    static KEYS: std::sync::OnceLock<TlsKeys> = std::sync::OnceLock::new();
    if let Some(k) = KEYS.get() {
        return Ok(k);
    }
    let k = TlsKeys::generate()?;
    Ok(KEYS.get_or_init(|| k))
}

/// For a stream transport's name: `Some(tls)` (`stream_tcp`: false, `stream_tls`: true).
pub(super) fn is_stream(transport: &str) -> Option<bool> {
    match transport {
        "stream_tcp" => Some(false),
        "stream_tls" => Some(true),
        _ => None,
    }
}

/// What the consumer of `transport` needs in its environment (the run's TLS keys).
pub(super) fn peer_env(transport: &str) -> Vec<(&'static str, String)> {
    match (is_stream(transport), run_keys()) {
        (Some(true), Ok(k)) => vec![(KEYS_ENV, k.to_words())],
        _ => Vec::new(),
    }
}

/// The TLS configurations of a `stream_tls` point: the run's keys, or the consumer's from its
/// environment.
fn context(tls: bool, consumer: bool) -> anyhow::Result<Option<TlsContext>> {
    if !tls {
        return Ok(None);
    }
    let keys = if consumer {
        let words = std::env::var(KEYS_ENV)
            .with_context(|| format!("bench peer stream_tls: no {KEYS_ENV} in the environment"))?;
        let words: Vec<&str> = words.split_whitespace().collect();
        TlsKeys::from_words(&words)?
    } else {
        run_keys()?.clone()
    };
    Ok(Some(keys.context()?))
}

/// The consumer: binds `endpoint` (`host:port`), says `ready ADDR` on `out`, then receives
/// until a message of another size than `bytes` (the end marker); returns the messages received
/// and the sum of their bytes. With `tls`, every byte arrives through TLS.
pub(super) fn consume(
    endpoint: &str,
    bytes: usize,
    out: &mut impl Write,
    tls: bool,
) -> anyhow::Result<(u64, u64)> {
    let mut router = Router::bind_tls(endpoint, Limits::default(), context(tls, true)?)?;
    writeln!(out, "ready {}", router.local_addr())?;
    out.flush()?;
    let (mut n, mut sum) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let Some(m) = router.recv(Duration::from_secs(1))? else {
            anyhow::ensure!(
                Instant::now() < deadline,
                "bench peer stream: no end marker within 120 s"
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
/// the moment of the first send. With `tls`, every byte goes through TLS.
pub(super) fn produce(
    addr: &str,
    bytes: usize,
    time: Duration,
    tls: bool,
) -> anyhow::Result<(u64, Instant)> {
    let tls = context(tls, false)?;
    let mut d = Dealer::connect_tls(addr, Limits::default(), SEND_TIMEOUT, tls.as_ref())
        .context("bench transport stream: connect")?;
    let mut buf = vec![0u8; bytes];
    let mut sent = 0u64;
    let start = Instant::now();
    while start.elapsed() < time {
        for _ in 0..64 {
            buf.fill(sent as u8);
            d.send(&[&buf], SEND_TIMEOUT)
                .context("bench transport stream: send")?;
            sent += 1;
        }
    }
    d.send(&[&[0u8]], SEND_TIMEOUT)?;
    anyhow::ensure!(
        d.flush(SEND_TIMEOUT)?,
        "bench transport stream: the consumer did not read the end marker within \
         {SEND_TIMEOUT:?}"
    );
    Ok((sent, start))
}
