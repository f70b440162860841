//! A wire fuzzer against a live readout node (`rodeo ros`, its own process) over tcp on
//! 127.0.0.1: a seeded random mix of
//! hostile peers (garbage frames, truncated and size-lying messages, messages above the node's
//! size limit, a peer that never reads, peers that connect and vanish, requests for absent
//! L1IDs and unknown ROBs, clears of ranges the node never saw; and on raw TCP below ZeroMQ:
//! a slow peer that sends its handshake and a request byte by byte, one that sends many
//! requests and never reads, one that stalls inside a frame, one that sends garbage instead
//! of a handshake, and peers that connect and hang up at once) runs for a bounded time while a
//! well-behaved client written from `specs/dataflow-protocol.md` keeps asking for events. The
//! test asserts that the good client gets every answer, each correct (its transaction, its L1ID,
//! one valid ROB fragment per channel, distinct source ids, the L1ID asked for), that the node
//! counted the hostile traffic instead of crashing, that its peak memory (VmHWM) stayed within
//! a bound, and that SIGTERM still ends it within a second with its counters.
//!
//! The seed and the duration come from `RODEO_FUZZ_SEED` and `RODEO_FUZZ_SECONDS` (defaults:
//! a fixed seed, 10 s); the seed is printed at the start and in every failure so that a run
//! can be replayed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rodeo_format::fragment::RobFragment;
use rodeo_ros::server::default_max_message_bytes;
use rodeo_testkit::rodeo;
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{
    decode, encode_clear, encode_data_request, encode_keepalive, header_bytes, Message, MessageType,
};
use rodeo_transport::socket::{Frame, Received, Socket, SocketKind, Transport};

const CHANNELS: usize = 4;
/// L1IDs the good client asks for: stored at start, never cleared by anyone.
const GOOD_L1IDS: u32 = 64;
/// Clears from hostile peers name L1IDs at or above this (never stored: the store holds 256).
const FAR_L1ID: u32 = 1 << 20;
/// Hostile peer threads with ZeroMQ sockets.
const HOSTILE: usize = 6;
/// Hostile peer threads on raw TCP (below ZeroMQ).
const RAW: usize = 3;
/// Growth of the node's peak resident memory allowed over the attack (issue 28: < 100 MB; a
/// leak per message of the hundreds of thousands sent, or an unbounded reply, would break it).
const RSS_GROWTH_LIMIT_BYTES: u64 = 100 << 20;
/// Growth of the node's resident memory from halfway through the attack to its end.
const RSS_KEPT_LIMIT_BYTES: u64 = 16 << 20;

/// A small seeded generator (xorshift64*): the same seed replays the same peers.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A field of `/proc/PID/status` in bytes (`VmRSS`, `VmHWM`: the peak).
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb << 10)
}

fn dealer(t: &Transport, endpoint: &str, rcvhwm: Option<u32>) -> Socket {
    try_dealer(t, endpoint, rcvhwm).expect("a socket for the good client")
}

/// A DEALER connected to `endpoint`; `None` when the peer's own context is out of sockets
/// (ZeroMQ closes dropped sockets in the background: a peer that flaps fast can get ahead).
fn try_dealer(t: &Transport, endpoint: &str, rcvhwm: Option<u32>) -> Option<Socket> {
    let s = t.socket(SocketKind::Dealer).ok()?;
    if let Some(h) = rcvhwm {
        s.set_high_water_marks(h).ok()?;
    }
    s.set_send_timeout(200).ok()?;
    s.connect(&Endpoint::parse(endpoint).unwrap()).ok()?;
    Some(s)
}

/// The ZMTP 3.0 greeting of a peer with the NULL mechanism (rfc.zeromq.org/spec/23): signature,
/// version 3.0, mechanism "NULL" padded to 20 bytes, as-server 0, 31 bytes of filler.
fn zmtp_greeting() -> Vec<u8> {
    let mut g = vec![0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 0];
    let mut mech = b"NULL".to_vec();
    mech.resize(20, 0);
    g.extend_from_slice(&mech);
    g.push(0);
    g.resize(64, 0);
    g
}

/// The NULL mechanism's READY command of a DEALER (a short command frame).
fn zmtp_ready() -> Vec<u8> {
    let mut body = vec![5];
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&6u32.to_be_bytes());
    body.extend_from_slice(b"DEALER");
    let mut f = vec![0x04, body.len() as u8];
    f.extend_from_slice(&body);
    f
}

/// One ZMTP message frame (the last of its message) holding `body`.
fn zmtp_frame(body: &[u8]) -> Vec<u8> {
    let mut f = if body.len() < 256 {
        vec![0x00, body.len() as u8]
    } else {
        let mut h = vec![0x02];
        h.extend_from_slice(&(body.len() as u64).to_be_bytes());
        h
    };
    f.extend_from_slice(body);
    f
}

/// A raw TCP connection to the node's `tcp://HOST:PORT` endpoint (`None`: refused, e.g. out
/// of ports for a moment).
fn raw_connect(endpoint: &str) -> Option<TcpStream> {
    let addr = endpoint.strip_prefix("tcp://")?;
    let s = TcpStream::connect(addr).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    Some(s)
}

/// Reads ZMTP frames from `s` (after the node's greeting) until a message frame comes;
/// whether one came before the read timeout.
fn raw_read_message(s: &mut TcpStream) -> bool {
    let mut greeting = [0u8; 64];
    if s.read_exact(&mut greeting).is_err() {
        return false;
    }
    loop {
        let mut flags = [0u8; 1];
        if s.read_exact(&mut flags).is_err() {
            return false;
        }
        let len = if flags[0] & 0x02 != 0 {
            let mut b = [0u8; 8];
            if s.read_exact(&mut b).is_err() {
                return false;
            }
            u64::from_be_bytes(b)
        } else {
            let mut b = [0u8; 1];
            if s.read_exact(&mut b).is_err() {
                return false;
            }
            u64::from(b[0])
        };
        let mut body = vec![0u8; len.min(1 << 20) as usize];
        if s.read_exact(&mut body).is_err() {
            return false;
        }
        if flags[0] & 0x04 == 0 {
            return true;
        }
    }
}

/// One raw TCP peer's turn (below ZeroMQ, as a broken or hostile network peer behaves);
/// `slow_answered` counts the slow peers that got their answer.
fn raw_turn(endpoint: &str, rng: &mut Rng, slow_answered: &AtomicU64, sent: &AtomicU64) {
    let mut buf = Vec::new();
    match rng.below(5) {
        // Slow: the handshake and one request byte by byte, then the answer is read.
        0 => {
            let Some(mut s) = raw_connect(endpoint) else {
                return;
            };
            let _ = s.set_nodelay(true);
            encode_data_request(&mut buf, 7, GOOD_L1IDS / 2, &[]);
            let mut bytes = zmtp_greeting();
            bytes.extend(zmtp_ready());
            bytes.extend(zmtp_frame(&buf));
            let pause = Duration::from_micros(200 + rng.below(800));
            for b in &bytes {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                // The pace of a slow peer, not a synchronisation.
                std::thread::sleep(pause);
            }
            sent.fetch_add(1, Ordering::Relaxed);
            if raw_read_message(&mut s) {
                slow_answered.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Never reads: thousands of requests in a burst, the connection held a while.
        1 => {
            let Some(mut s) = raw_connect(endpoint) else {
                return;
            };
            let mut bytes = zmtp_greeting();
            bytes.extend(zmtp_ready());
            for i in 0..3_000u32 {
                buf.clear();
                encode_data_request(&mut buf, i, i % GOOD_L1IDS, &[]);
                bytes.extend(zmtp_frame(&buf));
            }
            if s.write_all(&bytes).is_ok() {
                sent.fetch_add(3_000, Ordering::Relaxed);
            }
            // Holding the unread connection open is the attack.
            std::thread::sleep(Duration::from_millis(300));
        }
        // Stalls inside a frame: a header promising more than it sends, then silence.
        2 => {
            let Some(mut s) = raw_connect(endpoint) else {
                return;
            };
            let mut bytes = zmtp_greeting();
            bytes.extend(zmtp_ready());
            bytes.push(0x02);
            bytes.extend_from_slice(&(64u64 << 10).to_be_bytes());
            let n = rng.below(1000) as usize;
            bytes.extend(rng.bytes(n));
            let _ = s.write_all(&bytes);
            sent.fetch_add(1, Ordering::Relaxed);
            // Holding the half-sent frame open is the attack.
            std::thread::sleep(Duration::from_millis(200));
        }
        // Garbage instead of a handshake.
        3 => {
            let Some(mut s) = raw_connect(endpoint) else {
                return;
            };
            let n = 1 + rng.below(4096) as usize;
            let _ = s.write_all(&rng.bytes(n));
            sent.fetch_add(1, Ordering::Relaxed);
        }
        // Flapping: connect and hang up, again and again, some after half a greeting.
        _ => {
            for k in 0..20 {
                let Some(mut s) = raw_connect(endpoint) else {
                    return;
                };
                if k < 10 {
                    let _ = s.write_all(&zmtp_greeting()[..32]);
                }
                drop(s);
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// One hostile peer's turn: picks a behaviour and carries it out for a short while. Returns
/// `None` when its context had no socket to give (the turn is skipped).
fn hostile_turn(
    t: &Transport,
    endpoint: &str,
    rng: &mut Rng,
    limit: usize,
    rob: u32,
    sent: &AtomicU64,
) -> Option<()> {
    let mut buf = Vec::new();
    match rng.below(9) {
        // Garbage frames of random length, sometimes several frames in one message.
        0 => {
            let mut s = try_dealer(t, endpoint, None)?;
            for _ in 0..200 {
                let (na, nb) = (rng.below(512) as usize, rng.below(64) as usize);
                let (a, b) = (rng.bytes(na), rng.bytes(nb));
                let _ = if rng.below(4) == 0 {
                    s.send([Frame::Copy(&a), Frame::Copy(&b)])
                } else {
                    s.send([Frame::Copy(&a)])
                };
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Valid requests cut short, and headers whose size word lies.
        1 => {
            let mut s = try_dealer(t, endpoint, None)?;
            for i in 0..200u32 {
                buf.clear();
                encode_data_request(&mut buf, i, i % GOOD_L1IDS, &[rng.next() as u32]);
                let cut = rng.below(buf.len() as u64) as usize;
                let _ = s.send([Frame::Copy(&buf[..cut])]);
                let lie = rng.next() as u32;
                let mut h = header_bytes(MessageType::DataRequest, i, lie).to_vec();
                let n = rng.below(32) as usize * 4;
                h.extend_from_slice(&rng.bytes(n));
                let _ = s.send([Frame::Copy(&h)]);
                sent.fetch_add(2, Ordering::Relaxed);
            }
        }
        // Messages above the node's limit: ZeroMQ drops the connection before buffering them.
        2 => {
            let mut s = try_dealer(t, endpoint, None)?;
            let huge = vec![0xA5u8; limit + 1 + rng.below(1 << 16) as usize];
            let _ = s.send([Frame::Copy(&huge)]);
            sent.fetch_add(1, Ordering::Relaxed);
        }
        // A peer that never reads its replies (receive high-water mark 1).
        3 => {
            let mut s = try_dealer(t, endpoint, Some(1))?;
            for i in 0..2_000u32 {
                buf.clear();
                encode_data_request(&mut buf, i, i % GOOD_L1IDS, &[]);
                if s.try_send([Frame::Copy(&buf)]).is_err() {
                    break;
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Peers that connect, ask and vanish before the answer.
        4 => {
            for i in 0..20u32 {
                let mut s = try_dealer(t, endpoint, None)?;
                buf.clear();
                encode_data_request(&mut buf, i, i % GOOD_L1IDS, &[]);
                let _ = s.send([Frame::Copy(&buf)]);
                sent.fetch_add(1, Ordering::Relaxed);
                drop(s);
            }
        }
        // Requests for absent L1IDs and for ROB ids the node does not have.
        5 => {
            let mut s = try_dealer(t, endpoint, None)?;
            for i in 0..500u32 {
                buf.clear();
                let l1id = FAR_L1ID + rng.below(1 << 20) as u32;
                let robs = [rng.next() as u32, rng.next() as u32];
                encode_data_request(&mut buf, i, l1id, &robs);
                let _ = s.send([Frame::Copy(&buf)]);
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Clears of ranges the node never saw, with sequence numbers out of order, and
        // keepalives.
        6 => {
            let mut s = try_dealer(t, endpoint, None)?;
            for _ in 0..500u32 {
                buf.clear();
                let first = FAR_L1ID + rng.below(1 << 24) as u32;
                let l1ids: Vec<u32> = (0..rng.below(100) as u32).map(|k| first + k).collect();
                encode_clear(&mut buf, rng.next() as u32, &l1ids);
                let _ = s.send([Frame::Copy(&buf)]);
                buf.clear();
                encode_keepalive(&mut buf, rng.next() as u32);
                let _ = s.send([Frame::Copy(&buf)]);
                sent.fetch_add(2, Ordering::Relaxed);
            }
        }
        // One of the node's ROBs named as often as the size limit lets through (half of it):
        // answered with one fragment, never a reply that grows with the list.
        7 => {
            let mut s = try_dealer(t, endpoint, None)?;
            let robs = vec![rob; limit / 8];
            for i in 0..4u32 {
                buf.clear();
                encode_data_request(&mut buf, i, i % GOOD_L1IDS, &robs);
                let _ = s.send([Frame::Copy(&buf)]);
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Message types a readout node does not take, with plausible payloads.
        _ => {
            let mut s = try_dealer(t, endpoint, None)?;
            for i in 0..200u32 {
                let kind = MessageType::ALL[rng.below(MessageType::ALL.len() as u64) as usize];
                let words = rng.below(16) as u32;
                let mut m = header_bytes(kind, i, words * 4).to_vec();
                m.extend_from_slice(&rng.bytes(words as usize * 4));
                let _ = s.send([Frame::Copy(&m)]);
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Some(())
}

/// Checks one answer of the good client: its transaction and L1ID, one valid ROB per channel
/// with distinct source ids and the L1ID asked for.
fn check_reply(msg: &Received, txn: u32, l1id: u32) -> Result<Vec<u32>, String> {
    let d = decode(&msg.bytes).map_err(|e| format!("reply does not decode: {e}"))?;
    if d.header.transaction != txn {
        return Err(format!("transaction {} for {txn}", d.header.transaction));
    }
    let Message::DataReply {
        l1id: got,
        fragments,
    } = d.message
    else {
        return Err(format!("not a DataReply: {:?}", d.header.kind));
    };
    if got != l1id {
        return Err(format!("L1ID {got} for {l1id}"));
    }
    let mut sources = Vec::new();
    for f in fragments.iter() {
        let words: Vec<u32> = f
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let rob = RobFragment::parse(&words).map_err(|e| format!("bad ROB: {e}"))?;
        let rod_l1id = rob.rod().extended_l1id();
        if rod_l1id != l1id {
            return Err(format!("ROB of L1ID {rod_l1id} in the reply for {l1id}"));
        }
        sources.push(rob.source_id().0);
    }
    sources.sort_unstable();
    sources.dedup();
    if sources.len() != CHANNELS {
        return Err(format!(
            "sources {sources:x?}: expected {CHANNELS} distinct ROBs"
        ));
    }
    Ok(sources)
}

#[test]
fn a_good_client_is_served_correctly_through_a_seeded_mix_of_hostile_peers() {
    let seed = env_u64("RODEO_FUZZ_SEED", 0x5EED_2026_1125);
    let seconds = env_u64("RODEO_FUZZ_SECONDS", 10);
    eprintln!("wire fuzz: seed {seed:#x} for {seconds} s (replay: RODEO_FUZZ_SEED={seed})");
    let node = rodeo!()
        .args([
            "ros",
            "--listen",
            "tcp://127.0.0.1:0",
            "--json",
            "--input",
            "firmware",
        ])
        .args([
            "--channels",
            &CHANNELS.to_string(),
            "--fragment-words",
            "100",
        ])
        .args(["--pages-per-channel", "256", "--seconds", "120"])
        .spawn();
    let pid = node.id();
    let line = node.wait_for_stdout("the first line", Duration::from_secs(60), |out| {
        out.lines().next().map(String::from)
    });
    let endpoint = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    let limit = default_max_message_bytes(CHANNELS);
    // The good client, first alone: the node answers (its input has filled the store).
    let good_context = Transport::new(1).unwrap();
    let mut good = dealer(&good_context, &endpoint, None);
    let mut buf = Vec::new();
    let mut msg = Received::default();
    let t0 = Instant::now();
    let rob = loop {
        buf.clear();
        encode_data_request(&mut buf, 0, GOOD_L1IDS - 1, &[]);
        good.send([Frame::Copy(&buf)]).unwrap();
        assert!(
            good.recv(&mut msg, 10_000).unwrap(),
            "the node never answered"
        );
        if let Ok(sources) = check_reply(&msg, 0, GOOD_L1IDS - 1) {
            break sources[0];
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "input never filled the store"
        );
    };
    let rss_before = status_bytes(pid, "VmRSS");

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let slow_answered = Arc::new(AtomicU64::new(0));
    let peers: Vec<_> = (0..HOSTILE + RAW)
        .map(|k| {
            let (endpoint, stop, sent) = (endpoint.clone(), stop.clone(), sent.clone());
            let slow_answered = slow_answered.clone();
            std::thread::spawn(move || {
                // Each hostile peer has its own context, as a process of its own would.
                let t = Transport::new(1).unwrap();
                let mut rng = Rng::new(seed ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let mut turns = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if k >= HOSTILE {
                        raw_turn(&endpoint, &mut rng, &slow_answered, &sent);
                        turns += 1;
                    } else if hostile_turn(&t, &endpoint, &mut rng, limit, rob, &sent).is_some() {
                        turns += 1;
                    }
                    // A breath between turns (the peers' pace, not a synchronisation): the mix
                    // is about what peers send, not about out-connecting the node's I/O
                    // thread (no server survives a SYN flood from its own host unaided).
                    std::thread::sleep(Duration::from_millis(2));
                }
                turns
            })
        })
        .collect();

    // The good client: one request at a time, every answer within 5 s, each checked.
    let mut answered = 0u64;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut txn = 1u32;
    // The node's resident memory halfway through: a leak per message keeps growing after it,
    // buffers that fill up and are reused do not.
    let half = Instant::now() + Duration::from_secs(seconds) / 2;
    let mut rss_half = None;
    while Instant::now() < deadline {
        if rss_half.is_none() && Instant::now() >= half {
            rss_half = Some(status_bytes(pid, "VmRSS"));
            eprintln!(
                "seed {seed:#x}: halfway, {} hostile messages sent",
                sent.load(Ordering::Relaxed)
            );
        }
        let l1id = txn % GOOD_L1IDS;
        buf.clear();
        encode_data_request(&mut buf, txn, l1id, &[]);
        good.send([Frame::Copy(&buf)]).unwrap();
        let got = good.recv(&mut msg, 5_000).unwrap();
        assert!(got, "seed {seed:#x}: no answer to request {txn} within 5 s");
        if let Err(e) = check_reply(&msg, txn, l1id) {
            panic!("seed {seed:#x}: request {txn}: {e}");
        }
        answered += 1;
        txn += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let turns: u64 = peers.into_iter().map(|p| p.join().unwrap()).sum();
    let rss_peak = status_bytes(pid, "VmHWM");
    let rss_after = status_bytes(pid, "VmRSS");
    let rss_half = rss_half.unwrap_or(rss_before);

    // SIGTERM ends the node within a second, with its counters as JSON.
    let t0 = Instant::now();
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    let out = node.wait_with_deadline(Duration::from_secs(60));
    let rest = out.stdout.split_once('\n').map_or("", |(_, rest)| rest);
    let status = out.status;
    let took = t0.elapsed();
    assert!(
        status.success(),
        "seed {seed:#x}: the node ended with {status}"
    );
    assert!(took < Duration::from_secs(1), "SIGTERM took {took:?}");
    let s: serde_json::Value = serde_json::from_str(rest.trim())
        .unwrap_or_else(|e| panic!("no JSON summary ({e}): {rest}"));
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("no {k} in {s}"));
    assert!(answered > 100, "seed {seed:#x}: only {answered} answers");
    assert!(turns >= HOSTILE as u64, "the hostile peers hardly ran");
    // Garbage was counted as such; clears of unseen ranges were read; requests for absent
    // L1IDs were answered as lost or pending (after waiting in the pending queue).
    let absent = n("lost_fragments") + n("pending_fragments") + n("parked");
    assert!(
        n("bad_messages") > 0 && n("clears") > 0 && absent > 0,
        "seed {seed:#x}: the hostile traffic did not reach the node: {s}"
    );
    assert!(n("replies") > answered, "{s}");
    assert!(
        n("duplicate_robs") > 0,
        "no repeated-ROB request was read: {s}"
    );
    // A slow peer (byte by byte, below ZeroMQ) is served like any other.
    let slow = slow_answered.load(Ordering::Relaxed);
    assert!(slow > 0, "seed {seed:#x}: no slow raw peer got its answer");
    let growth = rss_peak.saturating_sub(rss_before);
    assert!(
        growth < RSS_GROWTH_LIMIT_BYTES,
        "seed {seed:#x}: memory grew by {} MB (before {} MB, peak {} MB); {s}",
        growth >> 20,
        rss_before >> 20,
        rss_peak >> 20
    );
    // The second half of the attack on top of the first: a leak per message grows on
    // (hundreds of thousands of messages per half: 100 bytes each is tens of MB).
    let kept = rss_after.saturating_sub(rss_half);
    assert!(
        kept < RSS_KEPT_LIMIT_BYTES,
        "seed {seed:#x}: the node grew by {} MB in the second half of the attack (before {} \
         MB, halfway {} MB, after {} MB); {s}",
        kept >> 20,
        rss_before >> 20,
        rss_half >> 20,
        rss_after >> 20
    );
    eprintln!(
        "seed {seed:#x}: {answered} good answers, {} hostile messages in {turns} turns, \
         {slow} slow raw peers answered, peak rss +{} MB, second half +{} MB; {s}",
        sent.load(Ordering::Relaxed),
        growth >> 20,
        kept >> 20,
    );
}
