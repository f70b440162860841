//! The `iceoryx2_raw` row of `rodeo bench transport`: iceoryx2's own publish-subscribe between
//! the two processes, without rodeo's socket layer, as the baseline the shared-memory sockets
//! (`iceoryx2` row) are measured against.
//!
//! What it is: a plain `ipc::Service` (single-threaded ports, no locks) publish-subscribe
//! service of byte slices with one publisher (the producer) and one subscriber (the consumer
//! process), the same queue depth as rodeo's inboxes (`QUEUE_MESSAGES`), no history and no
//! overflow (a full queue holds the publisher: `RetryUntilDelivered`, so nothing is lost). The
//! producer loans a sample of the message size and writes every byte into it; the consumer reads
//! every byte of every sample in place (the checksum) and releases it.
//!
//! Wake-up strategy: none. The subscriber **busy-polls** (`receive` in a loop with a spin hint,
//! yielding the core every 256 empty polls) and the publisher sends no notification, as the
//! issue's probe did: the library's ceiling, bought with a consumer core at 100% whether
//! messages come or not. A full loan pool or queue makes the producer poll likewise.

use std::io::Write;
use std::time::{Duration, Instant};

use iceoryx2::port::LoanError;
use iceoryx2::prelude::*;
use rodeo_transport::shm::QUEUE_MESSAGES;

/// One turn of a busy-poll that found nothing: a spin hint, and every [`YIELD_EVERY`]th turn
/// the core for whoever else wants it (on a busy 2-core machine a pure spin would hold the core
/// its peer needs for a whole time slice).
fn pause(turn: u32) {
    if turn % YIELD_EVERY == 0 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// Empty polls between two yields of the core.
const YIELD_EVERY: u32 = 256;

/// The service name both processes use for the producer with process id `pid`.
pub(super) fn service_name(pid: u32) -> String {
    format!("rodeo-bench-raw-{pid}")
}

fn node() -> anyhow::Result<Node<ipc::Service>> {
    set_log_level_from_env_or(LogLevel::Fatal);
    // rodeo's configuration: the records under rodeo's root on the shared-memory tmpfs (not
    // /tmp/iceoryx2), the clean-up after dead processes left to rodeo's shared-memory layer.
    let config = rodeo_transport::shm::iceoryx2_config();
    NodeBuilder::new()
        .config(&config)
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<ipc::Service>()
        .map_err(|e| anyhow::anyhow!("bench iceoryx2_raw: create node: {e:?}"))
}

type Service =
    iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, [u8], ()>;

fn service(node: &Node<ipc::Service>, name: &str) -> anyhow::Result<Service> {
    let sname = ServiceName::new(name)
        .map_err(|e| anyhow::anyhow!("bench iceoryx2_raw: service name {name}: {e:?}"))?;
    node.service_builder(&sname)
        .publish_subscribe::<[u8]>()
        .max_publishers(1)
        .max_subscribers(1)
        .subscriber_max_buffer_size(QUEUE_MESSAGES)
        .history_size(0)
        .enable_safe_overflow(false)
        .open_or_create()
        .map_err(|e| anyhow::anyhow!("bench iceoryx2_raw: service {name}: {e:?}"))
}

/// The consumer: makes the service and its subscriber, says `ready NAME` on `out`, then
/// busy-polls until a sample of another size than `bytes` (the end marker); returns the
/// messages received and the sum of their bytes.
pub(super) fn consume(
    name: &str,
    bytes: usize,
    out: &mut impl Write,
) -> anyhow::Result<(u64, u64)> {
    let node = node()?;
    let svc = service(&node, name)?;
    let sub = svc
        .subscriber_builder()
        .buffer_size(QUEUE_MESSAGES)
        .create()
        .map_err(|e| anyhow::anyhow!("bench iceoryx2_raw: subscriber: {e:?}"))?;
    writeln!(out, "ready {name}")?;
    out.flush()?;
    let (mut n, mut sum) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut idle = 0u32;
    loop {
        let sample = sub
            .receive()
            .map_err(|e| anyhow::anyhow!("bench iceoryx2_raw: receive: {e:?}"))?;
        let Some(sample) = sample else {
            idle = idle.wrapping_add(1);
            pause(idle);
            if idle % 65_536 == 0 {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "bench peer iceoryx2_raw: no end marker within 120 s"
                );
            }
            continue;
        };
        let p: &[u8] = sample.payload();
        if p.len() != bytes {
            break;
        }
        sum = sum.wrapping_add(checksum(p));
        n += 1;
    }
    Ok((n, sum))
}

/// The producer: opens the consumer's service `name`, then for `time` loans a sample of
/// `bytes`, writes every byte and sends it; ends with a one-byte marker and calls `finish` (it
/// collects the consumer's report) while its ports still live, so that the consumer reads
/// every sample from a publisher that is still there. Returns the messages sent, the seconds
/// from the first send to the consumer's report, and what `finish` returned.
pub(super) fn produce<T>(
    name: &str,
    bytes: usize,
    time: Duration,
    finish: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(u64, f64, T)> {
    let node = node()?;
    let svc = service(&node, name)?;
    let publisher = svc
        .publisher_builder()
        .initial_max_slice_len(bytes.max(1))
        .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
        .create()
        .map_err(|e| anyhow::anyhow!("bench iceoryx2_raw: publisher: {e:?}"))?;
    let mut full = 0u32;
    let mut send = |len: usize, value: u8| -> anyhow::Result<()> {
        loop {
            let sample = match publisher.loan_slice_uninit(len) {
                Ok(s) => s,
                // Every slot is in the consumer's queue: wait for it to release one.
                Err(LoanError::ExceedsMaxLoans | LoanError::OutOfMemory) => {
                    full = full.wrapping_add(1);
                    pause(full);
                    continue;
                }
                Err(e) => anyhow::bail!("bench iceoryx2_raw: loan {len} bytes: {e:?}"),
            };
            let delivered = sample
                .write_from_fn(|_| value)
                .send()
                .map_err(|e| anyhow::anyhow!("bench iceoryx2_raw: send: {e:?}"))?;
            // None: the queue was full before the consumer had attached to it (a consumer not
            // scheduled yet at the start); the sample was discarded, so it is sent again.
            if delivered > 0 {
                return Ok(());
            }
            full = full.wrapping_add(1);
            pause(full);
        }
    };
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < time {
        for _ in 0..64 {
            send(bytes, sent as u8)?;
            sent += 1;
        }
    }
    send(1, 0)?;
    let report = finish()?;
    Ok((sent, start.elapsed().as_secs_f64(), report))
}

/// The consumer's read of every byte (every transport's consumer of `bench transport`).
pub(super) fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |s, &x| s.wrapping_add(u64::from(x)))
}
