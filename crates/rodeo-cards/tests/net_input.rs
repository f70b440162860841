//! Network input channels on loopback: units sent by `LinkSender` over UDP and TCP arrive whole,
//! in order, in the channel's superpages; wrong-size datagrams and broken records are counted
//! and dropped; TCP applies back-pressure (the card stalls, nothing is lost).

use std::sync::atomic::Ordering;
use std::time::Duration;

use rodeo_cards::card::{Card, CardSpec, ChannelSource, ChannelSpec};
use rodeo_cards::corrupt::UnitSource;
use rodeo_cards::dma::EmulatedConfig;
use rodeo_cards::generator::{FelixConfig, FelixGenerator, SlinkConfig, SlinkGenerator, WordRange};
use rodeo_cards::monitor::LinkMonitor;
use rodeo_cards::net::{LinkAddress, LinkSender};
use rodeo_files::linkfile::LinkMode;
use rodeo_format::felix::TrailerSize;
use rodeo_format::slink::SlinkCheckConfig;
use rodeo_memory::{RegionOptions, SuperpagePool, SuperpagePoolConfig};

fn card(address: &str, mode: LinkMode, slink: SlinkCheckConfig) -> Card {
    Card::start(&CardSpec {
        name: "net0".into(),
        channels: vec![ChannelSpec {
            source: ChannelSource::Net {
                address: LinkAddress::parse(address).unwrap(),
                mode,
                block_size: 1024,
                slink,
                end_with_sender: false,
            },
            config: EmulatedConfig {
                queue_depth: 4,
                ..EmulatedConfig::default()
            },
        }],
    })
    .unwrap()
}

/// Reads the card's only channel until `units` arrived (superpages recycled), or panics after
/// 30 s; with `hold` the superpages are kept until the card has filled them all and stalls
/// (back-pressure: the receiver stops reading and TCP pushes back on the sender).
fn drain(card: &Card, units: u64, monitor: &mut LinkMonitor, hold: bool) {
    let _pool = give_superpages(card);
    let ch = &card.channels()[0].channel;
    if hold {
        rodeo_testkit::wait_until(
            "the card to fill every superpage and stall",
            Duration::from_secs(30),
            || {
                let s = ch.status();
                s.ready_queue_len >= SUPERPAGES && s.counters.stalls > 0
            },
        );
    }
    let mut seen = 0;
    rodeo_testkit::wait_until(
        &format!("{units} units to arrive"),
        Duration::from_secs(30),
        || {
            while let Some(f) = ch.pop_superpage() {
                seen += f.units;
                monitor.consume(f.data());
                ch.push_superpage(f.superpage).unwrap();
            }
            seen >= units
        },
    );
    assert_eq!(seen, units);
}

#[test]
fn udp_felix_blocks_arrive_whole_and_bad_datagrams_are_counted() {
    let card = card(
        "udp://127.0.0.1:0",
        LinkMode::Felix,
        SlinkCheckConfig::default(),
    );
    let address = card.channels()[0].address.unwrap();
    let cfg = FelixConfig {
        elinks: vec![0, 5, 0x40],
        payload_words: WordRange::uniform(0, 300),
        trailer: TrailerSize::Bits32,
        ..FelixConfig::default()
    };
    let mut source = UnitSource::new(FelixGenerator::new(&cfg).unwrap(), 1024);
    const BLOCKS: u64 = 2_000;
    let sender = std::thread::spawn(move || {
        let mut s = LinkSender::connect(address).unwrap();
        s.send(&[1, 2, 3]).unwrap(); // not a block: dropped and counted
        s.send(&[7u8; 3000]).unwrap(); // larger than a block: all its bytes counted
        for i in 0..BLOCKS {
            s.send(source.next_unit().unwrap()).unwrap();
            if i % 8 == 7 {
                // Loopback UDP has no flow control: pace so the socket buffer never overflows
                // (the sender's rate, not a synchronisation).
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    let mut monitor = LinkMonitor::felix(1024);
    drain(&card, BLOCKS, &mut monitor, false);
    sender.join().unwrap();
    let c = monitor.felix_counters().unwrap();
    assert_eq!(c.blocks, BLOCKS);
    assert_eq!((c.block_gaps, c.bad_blocks, c.damaged_blocks), (0, 0, 0));
    assert_eq!(monitor.bad(), 0);
    assert!(monitor.good() > 1000);
    let net = card.channels()[0].net.as_ref().unwrap();
    assert_eq!(net.dropped_units.load(Ordering::Relaxed), 2);
    assert_eq!(net.dropped_bytes.load(Ordering::Relaxed), 3 + 3000);
    assert_eq!(net.units.load(Ordering::Relaxed), BLOCKS);
}

#[test]
fn tcp_slink_fragments_back_pressure_and_reconnect() {
    let check = SlinkCheckConfig {
        framing: true,
        crc: true,
        l1id_wrap: 1 << 24,
    };
    let card = card("tcp://127.0.0.1:0", LinkMode::Slink, check);
    let address = card.channels()[0].address.unwrap();
    let cfg = SlinkConfig {
        framing: true,
        crc: true,
        data_words: WordRange::uniform(0, 500),
        ..SlinkConfig::default()
    };
    const FRAGMENTS: u64 = 20_000;
    let max = 4 * cfg.fragment_words(500);
    let sender = std::thread::spawn(move || {
        let mut source = UnitSource::new(SlinkGenerator::new(cfg), max);
        // Two connections, one after the other: the receiver accepts the second when the
        // first ends, and the L1ID sequence continues across them.
        for _ in 0..2 {
            let mut s = LinkSender::connect(address).unwrap();
            for _ in 0..FRAGMENTS / 2 {
                s.send(source.next_unit().unwrap()).unwrap();
            }
            s.flush().unwrap();
            // The second connection waits in the listen backlog until the receiver, reading
            // one connection at a time, has finished the first: no pause is needed.
            drop(s);
        }
    });
    let mut monitor = LinkMonitor::slink(check);
    // Hold the superpages for a while: the card stalls and TCP pushes back on the sender.
    drain(&card, FRAGMENTS, &mut monitor, true);
    sender.join().unwrap();
    let c = monitor.slink_counters().unwrap();
    assert_eq!(c.fragments, FRAGMENTS);
    assert_eq!(c.flagged_fragments, 0, "{c:?}");
    assert_eq!(monitor.good(), FRAGMENTS);
    let status = card.channels()[0].channel.status();
    assert!(status.counters.stalls > 0, "the card never stalled");
    let net = card.channels()[0].net.as_ref().unwrap();
    assert_eq!(net.connections.load(Ordering::Relaxed), 2);
    assert_eq!(net.broken_connections.load(Ordering::Relaxed), 0);
}

/// Sends `units` fixed-size S-LINK fragments to `address` at `rate_hz`, each flushed at once,
/// and returns when each was sent; the reader returns when each arrived in a superpage.
fn latencies(address: &str, rate_hz: f64, units: usize) -> Vec<Duration> {
    let card = card(address, LinkMode::Slink, SlinkCheckConfig::default());
    let address = card.channels()[0].address.unwrap();
    let cfg = SlinkConfig {
        data_words: WordRange::fixed(16),
        ..SlinkConfig::default()
    };
    let bytes = 4 * cfg.fragment_words(16);
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::with_capacity(units)));
    let sender = {
        let sent = std::sync::Arc::clone(&sent);
        std::thread::spawn(move || {
            let mut source = UnitSource::new(SlinkGenerator::new(cfg), bytes);
            let mut s = LinkSender::connect(address).unwrap();
            let start = std::time::Instant::now();
            for i in 0..units {
                let due = start + Duration::from_secs_f64(i as f64 / rate_hz);
                if let Some(wait) = due.checked_duration_since(std::time::Instant::now()) {
                    std::thread::sleep(wait); // the sender's pace
                }
                let t = std::time::Instant::now();
                s.send(source.next_unit().unwrap()).unwrap();
                s.flush().unwrap();
                sent.lock().unwrap().push(t);
            }
            s
        })
    };
    let _pool = give_superpages(&card);
    let ch = &card.channels()[0].channel;
    let mut arrived = Vec::with_capacity(units);
    rodeo_testkit::wait_until(
        &format!("{units} units at {rate_hz} Hz to arrive"),
        Duration::from_secs(60),
        || {
            while let Some(f) = ch.pop_superpage() {
                let t = std::time::Instant::now();
                assert_eq!(f.bytes_used, f.units as usize * bytes);
                arrived.extend(std::iter::repeat_n(t, f.units as usize));
                ch.push_superpage(f.superpage).unwrap();
            }
            arrived.len() >= units
        },
    );
    // The sender still holds its connection open: nothing arrived because it paused or left.
    let s = sender.join().unwrap();
    drop(s);
    let sent = sent.lock().unwrap();
    sent.iter()
        .zip(&arrived)
        .map(|(s, a)| a.saturating_duration_since(*s))
        .collect()
}

fn quantile(mut v: Vec<Duration>, q: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * q) as usize]
}

/// A unit reaches the reader within milliseconds of its sending at any steady rate, the stream
/// never pausing: the superpage goes at its deadline, not at a pause or when full.
#[test]
fn a_steady_sender_is_read_live_at_any_rate() {
    for (proto, rate, units) in [
        ("tcp", 20.0, 20),
        ("tcp", 200.0, 200),
        ("tcp", 5_000.0, 5_000),
        ("udp", 200.0, 200),
    ] {
        let l = latencies(&format!("{proto}://127.0.0.1:0"), rate, units);
        let (p50, p90, max) = (
            quantile(l.clone(), 0.5),
            quantile(l.clone(), 0.9),
            quantile(l, 1.0),
        );
        eprintln!("{proto} {rate} Hz: latency p50 {p50:?}, p90 {p90:?}, max {max:?}");
        // FLUSH_INTERVAL is 5 ms; the rest is the reader's and the machine's.
        assert!(
            p50 <= Duration::from_millis(10),
            "{proto} {rate} Hz: p50 {p50:?}"
        );
        assert!(
            p90 <= Duration::from_millis(25),
            "{proto} {rate} Hz: p90 {p90:?}"
        );
    }
}

/// A TCP input's state: waiting before its sender, connected while it sends, closed after a
/// clean close, lost after a reset (with the reason), and connected again with a new sender.
#[test]
fn a_tcp_input_reports_its_state() {
    use rodeo_cards::net::LinkState;
    let card = card(
        "tcp://127.0.0.1:0",
        LinkMode::Slink,
        SlinkCheckConfig::default(),
    );
    let address = card.channels()[0].address.unwrap();
    let net = std::sync::Arc::clone(card.channels()[0].net.as_ref().unwrap());
    let _pool = give_superpages(&card);
    let recycle = || recycle_all(&card);
    assert_eq!(net.state(), LinkState::Waiting);
    assert!(net.last_data_age().is_none());
    let cfg = SlinkConfig::default();
    let mut source = UnitSource::new(SlinkGenerator::new(cfg), 4 * cfg.fragment_words(256));
    let mut s = LinkSender::connect(address).unwrap();
    s.send(source.next_unit().unwrap()).unwrap();
    s.flush().unwrap();
    rodeo_testkit::wait_until("connected with data", Duration::from_secs(20), || {
        recycle();
        net.state() == LinkState::Connected && net.units.load(Ordering::Relaxed) == 1
    });
    drop(s);
    rodeo_testkit::wait_until("closed", Duration::from_secs(20), || {
        recycle();
        net.state() == LinkState::Closed
    });
    // A sender that resets its connection in the middle of a record: lost, the cut counted.
    let raw = std::net::TcpStream::connect(match address {
        LinkAddress::Tcp(a) => a,
        LinkAddress::Udp(_) => unreachable!(),
    })
    .unwrap();
    rodeo_testkit::wait_until("connected again", Duration::from_secs(20), || {
        recycle();
        net.state() == LinkState::Connected
    });
    use std::io::Write as _;
    (&raw).write_all(&100u32.to_le_bytes()).unwrap();
    (&raw).write_all(&[0u8; 40]).unwrap();
    rodeo_testkit::net::close_with_reset(raw);
    rodeo_testkit::wait_until("lost", Duration::from_secs(20), || {
        recycle();
        net.state() == LinkState::Lost
    });
    let why = net.lost_reason().unwrap();
    assert!(
        why.contains("reset") || why.contains("middle of a record"),
        "{why}"
    );
    assert_eq!(net.broken_connections.load(Ordering::Relaxed), 1);
    assert_eq!(net.units.load(Ordering::Relaxed), 1);
}

/// A sender that falls silent without a close (its host gone: no FIN ever comes) does not keep
/// the link deaf: a new sender's data takes it over; a probe that connects and closes without
/// a byte does not, nor one that sends what is not a record (a scan's "GET /"), one that
/// connects and idles does not block the new sender, and nobody takes the link while the
/// sender still sends.
#[test]
fn a_silent_sender_gives_its_link_to_a_new_one_that_sends() {
    use rodeo_cards::net::LinkState;
    let card = card(
        "tcp://127.0.0.1:0",
        LinkMode::Slink,
        SlinkCheckConfig::default(),
    );
    let address = card.channels()[0].address.unwrap();
    let tcp = match address {
        LinkAddress::Tcp(a) => a,
        LinkAddress::Udp(_) => unreachable!(),
    };
    let net = std::sync::Arc::clone(card.channels()[0].net.as_ref().unwrap());
    let _pool = give_superpages(&card);
    let recycle = || recycle_all(&card);
    let units = |n: u64| {
        rodeo_testkit::wait_until(&format!("{n} units"), Duration::from_secs(20), || {
            recycle();
            net.units.load(Ordering::Relaxed) >= n
        });
    };
    let cfg = SlinkConfig::default();
    let mut source = UnitSource::new(SlinkGenerator::new(cfg), 4 * cfg.fragment_words(256));
    // The first sender sends, then falls silent with its connection open.
    let mut first = LinkSender::connect(address).unwrap();
    first.send(source.next_unit().unwrap()).unwrap();
    first.flush().unwrap();
    units(1);
    // A probe connects and closes without a byte while the sender is silent: ignored.
    drop(std::net::TcpStream::connect(tcp).unwrap());
    std::thread::sleep(rodeo_cards::net::TAKEOVER_SILENCE + Duration::from_millis(500));
    recycle();
    assert_eq!(net.state(), LinkState::Connected);
    // A scanner that sends what is not a record ("GET /") while the sender is silent takes
    // nothing over either.
    let mut scan = std::net::TcpStream::connect(tcp).unwrap();
    std::io::Write::write_all(&mut scan, b"GET / HTTP/1.0\r\n\r\n").unwrap();
    std::thread::sleep(rodeo_cards::net::TAKEOVER_SILENCE + Duration::from_millis(500));
    recycle();
    assert_eq!(net.state(), LinkState::Connected);
    assert_eq!(net.broken_connections.load(Ordering::Relaxed), 0);
    drop(scan);
    // The silent sender still holds the link: what it sends now arrives.
    first.send(source.next_unit().unwrap()).unwrap();
    first.flush().unwrap();
    units(2);
    // A probe connects and stays idle (it never sends, never closes), then a new sender
    // connects and sends while the first stays silent: the idle probe gives its place once it
    // has waited the takeover time, and the sender takes the link over.
    let idle = std::net::TcpStream::connect(tcp).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut second = LinkSender::connect(address).unwrap();
    for _ in 0..5 {
        second.send(source.next_unit().unwrap()).unwrap();
    }
    second.flush().unwrap();
    units(7);
    assert_eq!(net.broken_connections.load(Ordering::Relaxed), 1);
    let why = net.lost_reason().unwrap();
    assert!(why.contains("silent"), "{why}");
    assert_eq!(net.connections.load(Ordering::Relaxed), 2);
    assert_eq!(net.state(), LinkState::Connected);
    drop((first, idle));
}

/// Superpages of the pool [`give_superpages`] makes.
const SUPERPAGES: usize = 4;

/// Gives the card's only channel every superpage of a new pool of [`SUPERPAGES`] (returned:
/// the pool must outlive them).
fn give_superpages(card: &Card) -> SuperpagePool {
    let pool = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes: 64 * 1024,
        superpages: SUPERPAGES,
        region: RegionOptions::default(),
    })
    .unwrap();
    let ch = &card.channels()[0].channel;
    while let Ok(sp) = pool.alloc() {
        ch.push_superpage(sp).unwrap();
    }
    pool
}

/// Hands every filled superpage of the card's only channel back to it, unread.
fn recycle_all(card: &Card) {
    let ch = &card.channels()[0].channel;
    while let Some(f) = ch.pop_superpage() {
        ch.push_superpage(f.superpage).unwrap();
    }
}
