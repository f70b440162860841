//! `rodeo bench transport`: how fast one producer can hand messages to one consumer, per
//! transport and message size, side by side in one run.
//!
//! Transports: `direct` (a bounded in-process channel between two threads, buffers recycled:
//! the floor of any hand-over), `iceoryx2` (rodeo's shared-memory sockets, `shm://`, DEALER to
//! ROUTER, the receiver spinning briefly before it waits for an event notification, small
//! messages sent together as the partition's loops send them: up to 64 per sample, published
//! at the end of each turn of 64 sends or at 8 KiB: see `rodeo_transport::shm`),
//! `iceoryx2_single` (the same socket with batching off: one sample per message),
//! `iceoryx2_raw` (iceoryx2's own publish-subscribe without rodeo's
//! socket layer, a busy-polling subscriber: the library's ceiling, [`super::transport_raw`]),
//! `zmq_ipc` and `zmq_tcp` (rodeo's ZeroMQ sockets, DEALER to ROUTER), `tcp` (a plain kernel
//! TCP stream over loopback with a length prefix through 256 KiB user-space buffers: the
//! kernel's limit) and `stream_tcp` (rodeo's own framing over kernel TCP, DEALER to ROUTER,
//! one vectored write per message: [`rodeo_transport::stream`], [`super::transport_stream`]),
//! and `stream_tls` (the same with TLS 1.3, both sides authenticated by a CA made for the
//! run: what `kind = "stream"` runs off a trusted network).
//! Every cross-process transport runs its consumer in a second process (this executable re-run
//! with the hidden `rodeo bench transport-peer`).
//!
//! The report's top level has the headline ratios of the same run, per measured size B:
//! `shm_vs_zmq_ipc_B` (`iceoryx2` / `zmq_ipc` messages per second), `shm_vs_iceoryx2_raw_B`
//! (`iceoryx2` / `iceoryx2_raw`), `stream_vs_tcp_B` (`stream_tcp` / `tcp`) and
//! `stream_vs_zmq_tcp_B` (`stream_tcp` / `zmq_tcp`) and `stream_tls_vs_stream_tcp_B` (what
//! encryption costs; CURVE's cost is measured on the partition, docs/benchmarks.md).
//!
//! For every message the producer writes every payload byte (`fill`) and the consumer reads
//! every byte (a checksum). A point runs for `--seconds`; the producer then sends a short end
//! marker and the consumer answers with what it received and its CPU time. `cpu_ns_per_msg` is
//! the CPU time (user + system) of both processes over the point divided by the messages: for
//! ZeroMQ it includes its I/O threads, for tcp the kernel's copies.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::shm;
use rodeo_transport::socket::{Frame, Received, SocketKind, Transport};
use serde::Serialize;
use serde_json::Value;

use super::transport_raw::checksum;
use crate::report::Report;

/// Message sizes measured when `--bytes` is not given.
const SIZES: &[usize] = &[64, 1024, 12 * 1024, 96 * 1024];
/// Transports in report order.
const TRANSPORTS: &[&str] = &[
    "direct",
    "iceoryx2",
    "iceoryx2_single",
    "iceoryx2_raw",
    "zmq_ipc",
    "zmq_tcp",
    "tcp",
    "stream_tcp",
    "stream_tls",
];

/// Arguments of `rodeo bench transport`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Message size in bytes; sweeps 64 B, 1 KiB, 12 KiB, 96 KiB when not given.
    #[arg(long, value_name = "B", value_parser = rodeo_ros::cli_values::count(1..=16 << 20))]
    pub bytes: Option<usize>,
    /// One transport (direct, iceoryx2, iceoryx2_single, iceoryx2_raw, zmq_ipc, zmq_tcp, tcp,
    /// stream_tcp, stream_tls); all when not given.
    #[arg(long, value_name = "NAME")]
    pub transport: Option<String>,
    /// Seconds per point.
    #[arg(long, default_value_t = 1.0, value_parser = rodeo_ros::cli_values::seconds)]
    pub seconds: f64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Run each consumer on another "host": a network namespace joined to this one by a veth
    /// pair (MTU 1500), made for the bench and removed after it (needs root and iproute2).
    /// Only the transports between hosts: tcp, zmq_tcp, stream_tcp, stream_tls.
    #[arg(long)]
    pub hosts: bool,
}

/// The transports `--hosts` measures (the others work within one host only).
const HOSTS_TRANSPORTS: &[&str] = &["tcp", "zmq_tcp", "stream_tcp", "stream_tls"];

/// Arguments of the hidden consumer process (`rodeo bench transport-peer`).
#[derive(Debug, clap::Args)]
pub struct PeerArgs {
    /// iceoryx2, iceoryx2_single, iceoryx2_raw, zmq_ipc, zmq_tcp, tcp, stream_tcp or stream_tls.
    #[arg(long)]
    pub transport: String,
    /// The endpoint to bind (an address for tcp, a service name for iceoryx2_raw).
    #[arg(long)]
    pub endpoint: String,
    /// Message size: a message of another size ends the point.
    #[arg(long)]
    pub bytes: usize,
}

/// One measured point.
#[derive(Debug, Serialize)]
struct Row {
    transport: &'static str,
    message_bytes: u64,
    processes: u32,
    messages: u64,
    seconds: f64,
    msg_per_s: f64,
    bytes_per_s: f64,
    cpu_ns_per_msg: f64,
    /// The consumer ran in another network namespace (`--hosts`).
    across_hosts: bool,
    /// `iceoryx2` only: what the consumer did when its queue was empty (its bounded spin).
    #[serde(skip_serializing_if = "Option::is_none")]
    receiver: Option<Wake>,
}

/// The shared-memory consumer's wake-ups over one point (`rodeo_transport::shm::SpinCounts`).
#[derive(Debug, Default, Clone, Copy, Serialize, serde::Deserialize)]
struct Wake {
    /// Spins that saw the next message come.
    spins_caught: u64,
    /// Spins that ran out, each followed by a wait on the event.
    spins_missed: u64,
    /// Waits on the event (a system call each).
    waits: u64,
    /// Nanoseconds spent spinning per message received (part of `cpu_ns_per_msg`).
    spin_ns_per_msg: f64,
    /// The producer's sends that met a full queue (`rodeo_transport::shm::backpressure_count`).
    #[serde(default)]
    sender_backpressure: u64,
}

/// What one measured point gives: messages, seconds, CPU nanoseconds of both processes, and
/// the shared-memory consumer's wake-ups.
type Measured = (u64, f64, u64, Option<Wake>);

/// CPU time (user + system) of this process so far, in nanoseconds.
fn process_cpu_ns() -> u64 {
    rodeo_memory::cpu::process_cpu_time().as_nanos() as u64
}

/// The consumer process: binds, says `ready`, receives until the end marker, prints
/// `{"messages":..,"checksum":..,"cpu_ns":..,"wake":..}` and returns (`wake`: the spin counts
/// of a shared-memory consumer, else null).
pub fn peer(args: &PeerArgs) -> anyhow::Result<()> {
    let cpu0 = process_cpu_ns();
    let spin0 = shm::spin_counts();
    let (mut n, mut sum) = (0u64, 0u64);
    let mut out = std::io::stdout();
    if args.transport == "iceoryx2_raw" {
        (n, sum) = super::transport_raw::consume(&args.endpoint, args.bytes, &mut out)?;
    } else if let Some(tls) = super::transport_stream::is_stream(&args.transport) {
        (n, sum) = super::transport_stream::consume(&args.endpoint, args.bytes, &mut out, tls)?;
    } else if args.transport == "tcp" {
        let listener = TcpListener::bind(&args.endpoint)
            .with_context(|| format!("bench peer: bind {}", args.endpoint))?;
        writeln!(out, "ready {}", listener.local_addr()?)?;
        out.flush()?;
        let (stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut r = BufReader::with_capacity(256 * 1024, stream);
        let mut buf = vec![0u8; args.bytes.max(1)];
        loop {
            let mut len = [0u8; 4];
            r.read_exact(&mut len)?;
            let len = u32::from_le_bytes(len) as usize;
            if len != args.bytes {
                break;
            }
            r.read_exact(&mut buf[..len])?;
            sum = sum.wrapping_add(checksum(&buf[..len]));
            n += 1;
        }
    } else {
        let transport = Transport::new(1)?;
        let socket = transport.socket(SocketKind::Router)?;
        socket.set_high_water_marks(1000)?;
        let ep = Endpoint::parse(&args.endpoint)?;
        let bound = socket.bind(&ep)?;
        writeln!(out, "ready {bound}")?;
        out.flush()?;
        let mut socket = socket;
        let mut msg = Received::default();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if !socket.recv(&mut msg, 1000)? {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "bench peer: no end marker within 120 s"
                );
                continue;
            }
            if msg.bytes.len() != args.bytes {
                break;
            }
            sum = sum.wrapping_add(checksum(&msg.bytes));
            n += 1;
        }
    }
    let cpu = process_cpu_ns() - cpu0;
    let spin = shm::spin_counts();
    let wake = args.transport.starts_with("iceoryx2").then(|| Wake {
        spins_caught: spin.caught - spin0.caught,
        spins_missed: spin.missed - spin0.missed,
        waits: spin.waits - spin0.waits,
        spin_ns_per_msg: (spin.spin_ns - spin0.spin_ns) as f64 / n.max(1) as f64,
        sender_backpressure: 0,
    });
    writeln!(
        out,
        "{}",
        serde_json::json!({"messages": n, "checksum": sum, "cpu_ns": cpu, "wake": wake})
    )?;
    out.flush()?;
    Ok(())
}

/// Kills and reaps the consumer should the producer fail half-way.
struct PeerGuard(Child);

impl Drop for PeerGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Removes a file (the consumer's ipc socket) when dropped.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn spawn_peer(
    transport: &str,
    endpoint: &str,
    bytes: usize,
    host: Option<&super::netns::PeerHost>,
) -> anyhow::Result<(PeerGuard, BufReader<std::process::ChildStdout>, String)> {
    let exe = std::env::current_exe().context("bench transport: cannot find the executable")?;
    let mut child = host
        .map_or_else(|| Command::new(&exe), |h| h.command(&exe))
        .args([
            "bench",
            "transport-peer",
            "--transport",
            transport,
            "--endpoint",
            endpoint,
            "--bytes",
            &bytes.to_string(),
        ])
        .envs(super::transport_stream::peer_env(transport))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("bench transport: cannot start the consumer process")?;
    let stdout = child.stdout.take().context("consumer stdout")?;
    let guard = PeerGuard(child);
    let mut r = BufReader::new(stdout);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let bound = line
        .trim()
        .strip_prefix("ready ")
        .with_context(|| format!("bench transport: consumer said {line:?}"))?
        .to_string();
    Ok((guard, r, bound))
}

fn finish_peer(
    mut guard: PeerGuard,
    mut r: BufReader<std::process::ChildStdout>,
) -> anyhow::Result<(u64, u64, Option<Wake>)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let v: Value = serde_json::from_str(line.trim())
        .with_context(|| format!("bench transport: consumer report {line:?}"))?;
    let _ = guard.0.wait();
    Ok((
        v["messages"].as_u64().unwrap_or(0),
        v["cpu_ns"].as_u64().unwrap_or(0),
        serde_json::from_value(v["wake"].clone()).unwrap_or(None),
    ))
}

fn measure_direct(bytes: usize, time: Duration) -> anyhow::Result<Measured> {
    use std::sync::mpsc::sync_channel;
    let (tx, rx) = sync_channel::<Vec<u8>>(256);
    let (back_tx, back_rx) = sync_channel::<Vec<u8>>(512);
    for _ in 0..300 {
        back_tx.send(vec![0u8; bytes])?;
    }
    let cpu0 = process_cpu_ns();
    let start = Instant::now();
    let consumer = std::thread::spawn(move || {
        let (mut n, mut sum) = (0u64, 0u64);
        while let Ok(b) = rx.recv() {
            sum = sum.wrapping_add(checksum(&b));
            n += 1;
            if back_tx.send(b).is_err() {
                break;
            }
        }
        (n, sum)
    });
    let mut i = 0u64;
    while start.elapsed() < time {
        for _ in 0..64 {
            let mut b = back_rx.recv()?;
            b.fill(i as u8);
            tx.send(b)?;
            i += 1;
        }
    }
    drop(tx);
    let (n, _) = consumer
        .join()
        .map_err(|_| anyhow::anyhow!("direct consumer panicked"))?;
    Ok((
        n,
        start.elapsed().as_secs_f64(),
        process_cpu_ns() - cpu0,
        None,
    ))
}

/// The consumer's endpoint of `transport` on this host.
fn local_endpoint(transport: &str) -> String {
    match transport {
        "iceoryx2_raw" => super::transport_raw::service_name(std::process::id()),
        "iceoryx2" | "iceoryx2_single" => {
            format!("shm://rodeo-bench-{}/consumer", std::process::id())
        }
        "zmq_ipc" => format!(
            "ipc://{}/rodeo-bench-{}.sock",
            std::env::temp_dir().display(),
            std::process::id()
        ),
        "zmq_tcp" => "tcp://127.0.0.1:0".to_string(),
        _ => "127.0.0.1:0".to_string(),
    }
}

fn measure_socket(
    transport: &'static str,
    bytes: usize,
    time: Duration,
    host: Option<&super::netns::PeerHost>,
) -> anyhow::Result<Measured> {
    let endpoint = match (transport, host) {
        ("zmq_tcp", Some(h)) => format!("tcp://{}:0", h.peer_addr),
        (_, Some(h)) => format!("{}:0", h.peer_addr),
        (transport, None) => local_endpoint(transport),
    };
    // libzmq leaves an ipc socket's file when its process ends: removed however we leave.
    let _socket_file = endpoint
        .strip_prefix("ipc://")
        .map(|p| RemoveOnDrop(std::path::PathBuf::from(p)));
    let (guard, r, bound) = spawn_peer(transport, &endpoint, bytes, host)?;
    let cpu0 = process_cpu_ns();
    if transport == "iceoryx2_raw" {
        let (sent, secs, (n, peer_cpu, _)) =
            super::transport_raw::produce(&bound, bytes, time, || finish_peer(guard, r))?;
        anyhow::ensure!(
            n == sent,
            "bench transport {transport}: sent {sent}, received {n}"
        );
        return Ok((n, secs, process_cpu_ns() - cpu0 + peer_cpu, None));
    }
    if let Some(tls) = super::transport_stream::is_stream(transport) {
        let (sent, start) = super::transport_stream::produce(&bound, bytes, time, tls)?;
        let (n, peer_cpu, _) = finish_peer(guard, r)?;
        anyhow::ensure!(
            n == sent,
            "bench transport {transport}: sent {sent}, received {n}"
        );
        let secs = start.elapsed().as_secs_f64();
        return Ok((n, secs, process_cpu_ns() - cpu0 + peer_cpu, None));
    }
    let mut buf = vec![0u8; bytes];
    let backpressure0 = shm::backpressure_count();
    let start;
    let mut sent = 0u64;
    if transport == "tcp" {
        let s = TcpStream::connect(&bound)?;
        s.set_nodelay(true)?;
        let mut w = std::io::BufWriter::with_capacity(256 * 1024, s);
        start = Instant::now();
        while start.elapsed() < time {
            for _ in 0..64 {
                buf.fill(sent as u8);
                w.write_all(&(bytes as u32).to_le_bytes())?;
                w.write_all(&buf)?;
                sent += 1;
            }
        }
        w.write_all(&1u32.to_le_bytes())?;
        w.write_all(&[0])?;
        w.flush()?;
        let (n, peer_cpu, _) = finish_peer(guard, r)?;
        let secs = start.elapsed().as_secs_f64();
        return Ok((n, secs, process_cpu_ns() - cpu0 + peer_cpu, None));
    }
    let t = Transport::new(1)?;
    let socket = t.socket(SocketKind::Dealer)?;
    socket.set_high_water_marks(1000)?;
    socket.set_send_timeout(10_000)?;
    // As the partition's loops use their sockets: small messages go out together at the end
    // of each turn (shared memory; ZeroMQ batches on its own), a turn being 64 sends here;
    // `iceoryx2_single` publishes one sample per message (iceoryx2's cost per sample).
    socket.set_batching(transport != "iceoryx2_single");
    socket.connect(&Endpoint::parse(&bound)?)?;
    let mut socket = socket;
    start = Instant::now();
    while start.elapsed() < time {
        for _ in 0..64 {
            buf.fill(sent as u8);
            socket
                .send([Frame::Copy(&buf)])
                .context("bench transport: send")?;
            sent += 1;
        }
        socket.flush();
    }
    socket.send([Frame::Copy(&[0u8])])?;
    socket
        .flush_wait()
        .context("bench transport: the consumer did not take the last batch")?;
    let (n, peer_cpu, mut wake) = finish_peer(guard, r)?;
    if let Some(w) = wake.as_mut() {
        w.sender_backpressure = shm::backpressure_count() - backpressure0;
    }
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(
        n == sent,
        "bench transport {transport}: sent {sent}, received {n}"
    );
    Ok((n, secs, process_cpu_ns() - cpu0 + peer_cpu, wake))
}

/// Removes the ipc socket files (`<tmp>/rodeo-bench-<pid>.sock`) that benches whose process is
/// gone left (killed before they could remove them), with one line on stderr; returns how many.
pub fn remove_stale_sockets(tmp: &std::path::Path) -> usize {
    let mut removed = 0;
    for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("rodeo-bench-")
            .and_then(|r| r.strip_suffix(".sock"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if !alive && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        eprintln!("rodeo: removed {removed} socket file(s) of benches whose process is gone");
    }
    removed
}

/// Measures every selected transport and size; returns the report.
pub fn measure_report(args: &Args) -> anyhow::Result<Report> {
    remove_stale_sockets(&std::env::temp_dir());
    let sizes: Vec<usize> = args.bytes.map_or(SIZES.to_vec(), |b| vec![b.max(2)]);
    let choices = if args.hosts {
        HOSTS_TRANSPORTS
    } else {
        TRANSPORTS
    };
    let transports: Vec<&'static str> = match &args.transport {
        Some(t) => vec![*choices
            .iter()
            .find(|x| **x == t.as_str())
            .with_context(|| {
                format!(
                    "--transport {t}: one of {choices:?}{}",
                    if args.hosts { " with --hosts" } else { "" }
                )
            })?],
        None => choices.to_vec(),
    };
    // The consumer's "host" (removed when this returns, whatever happens).
    let host = if args.hosts {
        Some(super::netns::PeerHost::create()?)
    } else {
        None
    };
    let time = Duration::from_secs_f64(args.seconds.clamp(0.05, 60.0));
    let mut report = Report::new("transport");
    report
        .fields
        .insert("across_hosts".into(), Value::from(host.is_some()));
    let mut rate = std::collections::HashMap::new();
    for &bytes in &sizes {
        for &tr in &transports {
            let (messages, seconds, cpu_ns, receiver) = if tr == "direct" {
                measure_direct(bytes, time)?
            } else {
                measure_socket(tr, bytes, time, host.as_ref())?
            };
            let msg_per_s = messages as f64 / seconds.max(1e-9);
            rate.insert((tr, bytes), msg_per_s);
            report.push_row(&Row {
                transport: tr,
                message_bytes: bytes as u64,
                processes: if tr == "direct" { 1 } else { 2 },
                messages,
                seconds,
                msg_per_s,
                bytes_per_s: msg_per_s * bytes as f64,
                cpu_ns_per_msg: cpu_ns as f64 / messages.max(1) as f64,
                across_hosts: host.is_some(),
                receiver,
            })?;
        }
    }
    for &bytes in &sizes {
        let Some(shm) = rate.get(&("iceoryx2", bytes)) else {
            continue;
        };
        for (other, key) in [("zmq_ipc", "zmq_ipc"), ("iceoryx2_raw", "iceoryx2_raw")] {
            if let Some(o) = rate.get(&(other, bytes)) {
                report.fields.insert(
                    format!("shm_vs_{key}_{bytes}"),
                    Value::from(shm / o.max(1e-9)),
                );
            }
        }
    }
    for &bytes in &sizes {
        let Some(stream) = rate.get(&("stream_tcp", bytes)) else {
            continue;
        };
        for other in ["tcp", "zmq_tcp"] {
            if let Some(o) = rate.get(&(other, bytes)) {
                report.fields.insert(
                    format!("stream_vs_{other}_{bytes}"),
                    Value::from(stream / o.max(1e-9)),
                );
            }
        }
        if let Some(tls) = rate.get(&("stream_tls", bytes)) {
            report.fields.insert(
                format!("stream_tls_vs_stream_tcp_{bytes}"),
                Value::from(tls / stream.max(1e-9)),
            );
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_of_benches_whose_process_is_gone_are_removed_and_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let live = tmp
            .path()
            .join(format!("rodeo-bench-{}.sock", std::process::id()));
        // No process has this pid (above the kernel's limit of 2^22).
        let dead = tmp.path().join("rodeo-bench-4294967290.sock");
        let other = tmp.path().join("rodeo-bench-notapid.sock");
        for f in [&live, &dead, &other] {
            std::fs::write(f, b"").unwrap();
        }
        assert_eq!(remove_stale_sockets(tmp.path()), 1);
        assert!(live.exists() && other.exists() && !dead.exists());
    }
}
