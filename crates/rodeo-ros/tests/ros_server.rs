//! The request server over real ZeroMQ sockets (inproc and tcp on 127.0.0.1) and over the
//! direct in-process link: replies, pending requests, clears, bad input. Tests marked
//! `backends!` run once per transport. Every wait is bounded.

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::Duration;

use rodeo_cards::dma::{ChannelCounters, ChannelStatus, DmaChannel, Filled};
use rodeo_format::fragment::{RobFragment, RodBuilder, SourceId, Status, SLINK_BEGIN, SLINK_END};
use rodeo_format::synth::check_counter;
use rodeo_memory::{
    BoundedQueue, FullPolicy, PagePool, PagePoolConfig, RegionOptions, Superpage, SuperpagePool,
    SuperpagePoolConfig,
};
use rodeo_ros::inputs::{DmaInput, FirmwareInput, Payload};
use rodeo_ros::server::{DirectClient, DirectReply, Input, RequestServer, ServerConfig};
use rodeo_ros::store::slink::ErrorDump;
use rodeo_ros::store::{EventStore, StoreConfig};
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{decode, encode_clear, encode_data_request, Message};
use rodeo_transport::socket::{Frame, Received, Socket, SocketKind, Transport};

const BASE: u32 = 0x0051_0000;

fn pool(pages: usize) -> PagePool {
    PagePool::new(PagePoolConfig {
        page_bytes: 4096,
        pages,
        region: RegionOptions::default(),
    })
    .unwrap()
}

fn client(t: &Transport, endpoint: &str) -> Socket {
    let s = t.socket(SocketKind::Dealer).unwrap();
    s.connect(&Endpoint::parse(endpoint).unwrap()).unwrap();
    s
}

fn request(s: &mut Socket, txn: u32, l1id: u32, robs: &[u32]) {
    let mut buf = Vec::new();
    encode_data_request(&mut buf, txn, l1id, robs);
    s.send([Frame::Copy(&buf)]).unwrap();
}

fn clear(s: &mut Socket, seq: u32, l1ids: &[u32]) {
    let mut buf = Vec::new();
    encode_clear(&mut buf, seq, l1ids);
    s.send([Frame::Copy(&buf)]).unwrap();
}

/// Receives one reply (10 s bound); returns (transaction, l1id, each fragment's words).
fn reply(s: &mut Socket) -> (u32, u32, Vec<Vec<u32>>) {
    let mut msg = Received::default();
    assert!(s.recv(&mut msg, 10_000).unwrap(), "no reply within 10 s");
    let d = decode(&msg.bytes).unwrap();
    let Message::DataReply { l1id, fragments } = d.message else {
        panic!("not a reply: {:?}", d.header.kind);
    };
    let frags = fragments
        .iter()
        .map(|b| {
            b.chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect()
        })
        .collect();
    (d.header.transaction, l1id, frags)
}

/// A test client over either transport (the socket boxed: it is much larger than the direct
/// client's handle since it can be a shared-memory socket).
enum Client {
    Zmq(Box<Socket>),
    Direct(DirectClient),
}

#[derive(Debug, Clone, Copy)]
enum Backend {
    Inproc,
    Direct,
}

/// Starts a server on `backend` (the endpoint is used by ZeroMQ only) and connects a client.
fn start(
    t: &Transport,
    backend: Backend,
    config: ServerConfig,
    store: EventStore,
    input: Box<dyn Input>,
) -> (RequestServer, Client) {
    match backend {
        Backend::Inproc => {
            let s = RequestServer::start(t, &config, store, input).unwrap();
            let c = client(t, s.endpoint());
            (s, Client::Zmq(Box::new(c)))
        }
        Backend::Direct => {
            let (s, c) = RequestServer::start_direct(&config, store, input).unwrap();
            (s, Client::Direct(c))
        }
    }
}

impl Client {
    fn request(&mut self, txn: u32, l1id: u32, robs: &[u32]) {
        match self {
            Client::Zmq(s) => request(s, txn, l1id, robs),
            Client::Direct(d) => d.send_request(txn, l1id, robs).unwrap(),
        }
    }

    fn clear(&mut self, seq: u32, l1ids: &[u32]) {
        match self {
            Client::Zmq(s) => clear(s, seq, l1ids),
            Client::Direct(d) => d.send_clear(seq, l1ids).unwrap(),
        }
    }

    fn reply(&mut self) -> (u32, u32, Vec<Vec<u32>>) {
        match self {
            Client::Zmq(s) => reply(s),
            Client::Direct(d) => {
                let mut slot = None;
                assert!(
                    d.recv_timeout(&mut slot, Duration::from_secs(10)),
                    "no reply within 10 s"
                );
                let r = slot.as_deref().unwrap();
                let out = (r.transaction().unwrap(), r.l1id().unwrap(), direct_frags(r));
                // Hand the box back (drops the page references).
                let _ = d.try_recv(&mut slot);
                assert!(slot.is_none(), "a second reply arrived");
                out
            }
        }
    }

    /// True when a reply arrives within `ms`.
    fn more(&mut self, ms: u64) -> bool {
        match self {
            Client::Zmq(s) => s.recv(&mut Received::default(), ms as i64).unwrap(),
            Client::Direct(d) => d.recv_timeout(&mut None, Duration::from_millis(ms)),
        }
    }
}

/// The fragments of a direct reply, each as words: empty ones from the head, then the page
/// segments joined and split by each fragment's size word.
fn direct_frags(r: &DirectReply) -> Vec<Vec<u32>> {
    let words = |b: &[u8]| -> Vec<u32> {
        b.chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect()
    };
    let head = words(r.head());
    let count = head[4] as usize;
    let mut all: Vec<u32> = head[5..].to_vec();
    for seg in r.segments() {
        all.extend_from_slice(seg);
    }
    assert_eq!(
        (r.payload_bytes().unwrap() as usize - 8) / 4,
        all.len(),
        "declared payload"
    );
    let mut out = Vec::new();
    let mut rest = &all[..];
    while !rest.is_empty() {
        let n = rest[1] as usize;
        out.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    assert_eq!(out.len(), count);
    out
}

/// Defines one test per backend from a function taking a [`Backend`].
macro_rules! backends {
    ($f:ident: $inproc:ident, $direct:ident) => {
        #[test]
        fn $inproc() {
            $f(Backend::Inproc);
        }
        #[test]
        fn $direct() {
            $f(Backend::Direct);
        }
    };
}

/// Longest a test waits for a condition.
const WAIT: Duration = Duration::from_secs(20);

fn wait_until(what: &str, f: impl FnMut() -> bool) {
    rodeo_testkit::wait_until(what, WAIT, f);
}

fn run_full_cycle(endpoint: &str) {
    let t = Transport::new(1).unwrap();
    let pool = pool(4 * 64);
    let store = EventStore::new(&pool, &StoreConfig::with_channels(4, BASE, 64)).unwrap();
    let input = FirmwareInput::new(&store, 100, 1 << 24, Payload::Full).with_limit(200);
    let server = RequestServer::start(
        &t,
        &ServerConfig {
            endpoint: endpoint.into(),
            ..ServerConfig::default()
        },
        store,
        Box::new(input),
    )
    .unwrap();
    let mut c = client(&t, server.endpoint());
    let mut seen = HashSet::new();
    let mut txn = 0;
    for l1id in 0..200u32 {
        // Alternate one-ROB, two-ROB and whole-node requests.
        let robs: Vec<u32> = match l1id % 3 {
            0 => vec![BASE + (l1id % 4)],
            1 => vec![BASE, BASE + 3],
            _ => vec![],
        };
        txn += 1;
        request(&mut c, txn, l1id, &robs);
        let (rt, rl, frags) = reply(&mut c);
        assert!(seen.insert(rt), "transaction {rt} answered twice");
        assert_eq!((rt, rl), (txn, l1id));
        assert_eq!(frags.len(), if robs.is_empty() { 4 } else { robs.len() });
        for f in &frags {
            let rob = RobFragment::parse(f).unwrap();
            assert!(rob.status().is_ok(), "{:?}", rob.status());
            let rod = rob.rod();
            assert_eq!(rod.extended_l1id(), l1id);
            assert_eq!(
                check_counter(rod.data(), rod.source_id().word(), l1id),
                None
            );
        }
        if l1id % 50 == 49 {
            clear(&mut c, l1id / 50, &(l1id - 49..=l1id).collect::<Vec<_>>());
        }
    }
    wait_until("clears processed", || server.stats().cleared_l1ids == 200);
    // Over inproc the receiver holds the last frame it read until its next receive.
    drop(c);
    let mut stopped = server.stop();
    assert_eq!(stopped.counters.requests, 200);
    assert_eq!(stopped.counters.replies, 200);
    assert_eq!(stopped.counters.clear_gaps, 0);
    // The last reply frames may still be in ZeroMQ's hands: wait for their pages.
    wait_until("pages back", || {
        stopped.store.reclaim();
        (0..4).all(|ch| stopped.store.settle(ch) == 0)
    });
    for ch in 0..4 {
        assert_eq!(stopped.store.occupancy(ch), 0.0);
    }
    drop(stopped);
    assert_eq!(pool.stats().in_use, 0, "every page back in the pool");
}

#[test]
fn inproc_requests_replies_and_clears() {
    run_full_cycle("inproc://ros-server-full");
}

#[test]
fn tcp_requests_replies_and_clears() {
    run_full_cycle("tcp://127.0.0.1:*");
}

#[test]
fn ipc_requests_replies_and_clears() {
    let path = std::env::temp_dir().join(format!("rodeo-ros-{}.sock", std::process::id()));
    run_full_cycle(&format!("ipc://{}", path.display()));
    let _ = std::fs::remove_file(path);
}

/// An input the test feeds by hand: ROD fragments for channel 0.
struct Manual(mpsc::Receiver<(usize, Vec<u32>)>);

impl Input for Manual {
    fn poll(&mut self, store: &mut EventStore) -> u64 {
        let mut n = 0;
        while let Ok((c, rod)) = self.0.try_recv() {
            store.ingest(c, &rod, Status::OK).unwrap();
            n += 1;
        }
        n
    }
}

fn rod(source: u32, l1id: u32) -> Vec<u32> {
    let mut out = Vec::new();
    RodBuilder {
        source_id: SourceId(source),
        extended_l1id: l1id,
        status: &[0],
        data: &[&[1, 2, 3]],
        ..RodBuilder::default()
    }
    .write_vec(&mut out)
    .unwrap();
    out
}

backends!(pending_requests: pending_requests_answered_on_data_on_timeout_and_lost_when_cleared,
    direct_pending_requests_answered_on_data_on_timeout_and_lost_when_cleared);

fn pending_requests(backend: Backend) {
    let t = Transport::new(1).unwrap();
    let pool = pool(32);
    let store = EventStore::new(&pool, &StoreConfig::with_channels(2, BASE, 16)).unwrap();
    let (tx, rx) = mpsc::channel();
    let (server, mut c) = start(
        &t,
        backend,
        ServerConfig {
            endpoint: "inproc://ros-pending".into(),
            pending_timeout: Duration::from_millis(300),
            ..ServerConfig::default()
        },
        store,
        Box::new(Manual(rx)),
    );
    // 1. Data arrives after the request: answered complete, unflagged.
    c.request(1, 5, &[BASE]);
    wait_until("request parked", || server.stats().parked == 1);
    tx.send((0, rod(BASE, 5))).unwrap();
    let (txn, _, f) = c.reply();
    assert_eq!(txn, 1);
    assert!(RobFragment::parse(&f[0]).unwrap().status().is_ok());
    // 2. One of two never arrives: after the timeout the reply holds the present fragment and
    // an empty one flagged PENDING.
    c.request(2, 7, &[BASE, BASE + 1]);
    tx.send((0, rod(BASE, 7))).unwrap();
    let (txn, _, f) = c.reply();
    assert_eq!(txn, 2);
    let st: Vec<Status> = f
        .iter()
        .map(|w| RobFragment::parse(w).unwrap().status())
        .collect();
    assert_eq!(st.iter().filter(|s| s.is_ok()).count(), 1);
    assert_eq!(
        st.iter()
            .filter(|s| s.contains(Status::ROB_FRAGMENT_PENDING))
            .count(),
        1
    );
    // 3. A clear of the L1ID a request waits for answers it at once, LOST.
    c.request(3, 9, &[BASE + 1]);
    wait_until("second park", || server.stats().parked == 3);
    c.clear(0, &[9]);
    let (txn, _, f) = c.reply();
    assert_eq!(txn, 3);
    assert!(RobFragment::parse(&f[0])
        .unwrap()
        .status()
        .contains(Status::ROB_FRAGMENT_LOST));
    // 4. An older L1ID than the channel's last: LOST immediately; unknown ROB: LOST.
    c.request(4, 1, &[BASE, 0xBAD]);
    let (_, _, f) = c.reply();
    for w in &f {
        assert!(RobFragment::parse(w)
            .unwrap()
            .status()
            .contains(Status::ROB_FRAGMENT_LOST));
    }
    let s = server.stop();
    assert_eq!(s.counters.replies, 4, "each request answered once");
    assert_eq!(s.counters.timeouts, 1);
    assert_eq!(s.counters.unknown_robs, 1);
    // Nothing more arrives.
    assert!(!c.more(200), "a request answered twice");
}

#[test]
fn garbage_messages_are_counted_and_the_node_keeps_serving() {
    let t = Transport::new(1).unwrap();
    let pool = pool(16);
    let store = EventStore::new(&pool, &StoreConfig::with_channels(1, BASE, 16)).unwrap();
    let input = FirmwareInput::new(&store, 10, 1 << 24, Payload::Full).with_limit(5);
    let server = RequestServer::start(
        &t,
        &ServerConfig {
            endpoint: "inproc://ros-garbage".into(),
            ..ServerConfig::default()
        },
        store,
        Box::new(input),
    )
    .unwrap();
    let mut c = client(&t, server.endpoint());
    c.send([Frame::Copy(b"\x01\x02\x03")]).unwrap();
    c.send([Frame::Copy(&[0xFFu8; 40])]).unwrap();
    // A header promising more payload than sent.
    let mut buf = Vec::new();
    encode_data_request(&mut buf, 1, 0, &[BASE]);
    buf[8] = 200;
    c.send([Frame::Copy(&buf)]).unwrap();
    request(&mut c, 9, 2, &[BASE]);
    let (txn, l1id, f) = reply(&mut c);
    assert_eq!((txn, l1id, f.len()), (9, 2, 1));
    let s = server.stop();
    assert_eq!(s.counters.bad_messages, 3);
}

/// A DMA channel fed by the test with prepared superpages.
struct Prepared {
    ready: BoundedQueue<Filled<Superpage>>,
    back: BoundedQueue<Superpage>,
}

impl DmaChannel<Superpage> for Prepared {
    fn push_superpage(&self, s: Superpage) -> Result<(), Superpage> {
        self.back.push(s).map(drop).map_err(|r| r.item)
    }
    fn pop_superpage(&self) -> Option<Filled<Superpage>> {
        self.ready.pop()
    }
    fn transfer_queue_available(&self) -> usize {
        self.back.capacity() - self.back.len()
    }
    fn status(&self) -> ChannelStatus {
        ChannelStatus {
            link_up: true,
            transfer_queue_len: self.back.len(),
            ready_queue_len: self.ready.len(),
            counters: ChannelCounters::default(),
        }
    }
}

backends!(bad_slink: bad_slink_fragments_are_flagged_counted_dumped_and_never_crash,
    direct_bad_slink_fragments_are_flagged_counted_dumped_and_never_crash);

fn bad_slink(backend: Backend) {
    let sp = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes: 64 * 1024,
        superpages: 2,
        region: RegionOptions::default(),
    })
    .unwrap();
    let mut page = sp.alloc().unwrap();
    let mut words = Vec::new();
    for l1id in 0..10u32 {
        words.push(SLINK_BEGIN);
        let mut r = rod(BASE, l1id);
        match l1id {
            3 => r[0] = 0x1234_5678,         // bad marker: unreadable, dropped
            5 => *r.last_mut().unwrap() = 9, // bad trailer: flagged, stored
            7 => r[5] = 6,                   // duplicate L1ID 6: flagged
            _ => {}
        }
        words.extend_from_slice(&r);
        if l1id != 8 {
            words.push(SLINK_END); // fragment 8: missing end word
        }
    }
    words.extend_from_slice(&[0xFFFF_FFFF; 5]); // trailing garbage
    page.words_mut()[..words.len()].copy_from_slice(&words);
    let chan = Prepared {
        ready: BoundedQueue::new("test.prepared.ready", 4, FullPolicy::Refuse),
        back: BoundedQueue::new("test.prepared.back", 4, FullPolicy::Refuse),
    };
    chan.ready
        .push(Filled {
            superpage: page,
            bytes_used: words.len() * 4,
            units: 10,
            sequence: 0,
            unit_bytes: 0,
        })
        .unwrap();
    let dir = tempfile_dir(&format!("{backend:?}"));
    let dump_path = dir.join("errors.txt");
    let dump = ErrorDump::new(Some(std::fs::File::create(&dump_path).unwrap()), 100);
    let t = Transport::new(1).unwrap();
    let pool = pool(16);
    let store = EventStore::new(&pool, &StoreConfig::with_channels(1, BASE, 16)).unwrap();
    let (server, mut c) = start(
        &t,
        backend,
        ServerConfig {
            endpoint: "inproc://ros-bad-slink".into(),
            pending_timeout: Duration::from_millis(50),
            ..ServerConfig::default()
        },
        store,
        Box::new(DmaInput::new(
            vec![chan],
            rodeo_format::slink::SlinkCheckConfig {
                framing: true,
                crc: false,
                l1id_wrap: 1 << 24,
            },
            dump,
        )),
    );
    wait_until("input read", || server.stats().input_fragments >= 10);
    let mut status_of = |l1id: u32| {
        c.request(l1id, l1id, &[BASE]);
        let (_, _, f) = c.reply();
        // A fragment with a broken ROD does not parse as a whole; its ROB status word does.
        assert_eq!(f[0][0], rodeo_format::fragment::ROB_MARKER);
        Status(f[0][6])
    };
    assert!(status_of(0).is_ok());
    assert!(status_of(3).contains(Status::ROB_INVALID_MARKER));
    assert!(status_of(5).intersects(Status::ROB_FORMAT_ERROR | Status::ROB_FRAGMENT_SIZE));
    assert!(status_of(6).is_ok(), "the first copy of 6 is kept");
    assert!(status_of(8).contains(Status::ROB_MISSING_EOF));
    let s = server.stop();
    assert_eq!(s.slink.garbage_spans, 1, "the trailing garbage");
    assert!(s.slink.flagged_fragments >= 4);
    assert_eq!(s.store.counters(0).duplicates, 1);
    let dumped = std::fs::read_to_string(&dump_path).unwrap();
    assert_eq!(dumped.lines().count(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rodeo-ros-test-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_fragment_spanning_pages_is_sent_zero_copy_in_pieces_and_arrives_whole() {
    let t = Transport::new(1).unwrap();
    let pool = PagePool::new(PagePoolConfig {
        page_bytes: 1024,
        pages: 64,
        region: RegionOptions::default(),
    })
    .unwrap();
    let store = EventStore::new(&pool, &StoreConfig::with_channels(1, BASE, 64)).unwrap();
    let (tx, rx) = mpsc::channel();
    let server = RequestServer::start(
        &t,
        &ServerConfig {
            endpoint: "inproc://ros-span".into(),
            ..ServerConfig::default()
        },
        store,
        Box::new(Manual(rx)),
    )
    .unwrap();
    // Above JOIN_REPLY_BYTES: sent as page segments (a smaller reply is one copied frame).
    let data: Vec<u32> = (0..5000u32).map(|i| i * 3).collect();
    let mut big = Vec::new();
    RodBuilder {
        source_id: SourceId(BASE),
        extended_l1id: 4,
        status: &[0],
        data: &[&data],
        ..RodBuilder::default()
    }
    .write_vec(&mut big)
    .unwrap();
    tx.send((0, big.clone())).unwrap();
    let mut c = client(&t, server.endpoint());
    request(&mut c, 1, 4, &[BASE]);
    let mut msg = Received::default();
    assert!(c.recv(&mut msg, 10_000).unwrap());
    // Header frame, then one frame per page segment: 8 + 5,013 words over 256-word pages,
    // 20 segments, one more if the page's first fragment is staggered into a 21st.
    assert!(
        big.len() * 4 > rodeo_ros::server::source::JOIN_REPLY_BYTES,
        "the test needs a reply that is not joined"
    );
    assert!((21..=22).contains(&msg.frames), "{} frames", msg.frames);
    let d = decode(&msg.bytes).unwrap();
    let Message::DataReply { fragments, .. } = d.message else {
        panic!()
    };
    let f = fragments.iter().next().unwrap();
    let words: Vec<u32> = f
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    assert_eq!(RobFragment::parse(&words).unwrap().rod().words(), &big[..]);
    drop(c);
    drop(server);
}

#[test]
fn firmware_input_larger_than_a_page_spans_pages() {
    let t = Transport::new(1).unwrap();
    let pool = PagePool::new(PagePoolConfig {
        page_bytes: 512,
        pages: 64,
        region: RegionOptions::default(),
    })
    .unwrap();
    let store = EventStore::new(&pool, &StoreConfig::with_channels(2, BASE, 32)).unwrap();
    let input = FirmwareInput::new(&store, 200, 1 << 24, Payload::Full).with_limit(10);
    let server = RequestServer::start(
        &t,
        &ServerConfig {
            endpoint: "inproc://ros-fw-span".into(),
            ..ServerConfig::default()
        },
        store,
        Box::new(input),
    )
    .unwrap();
    let mut c = client(&t, server.endpoint());
    for l1id in 0..10 {
        request(&mut c, l1id + 1, l1id, &[]);
        let (_, _, frags) = reply(&mut c);
        for f in &frags {
            let rod = RobFragment::parse(f).unwrap().rod();
            assert_eq!(rod.data().len(), 200);
            assert_eq!(
                check_counter(rod.data(), rod.source_id().word(), l1id),
                None
            );
        }
    }
    drop(c);
}

#[test]
fn a_full_store_stalls_the_card_and_drops_nothing() {
    use rodeo_cards::dma::{EmulatedChannel, EmulatedConfig};
    use rodeo_cards::generator::{SlinkConfig, SlinkGenerator, WordRange};
    use rodeo_ros::store::Lookup;
    let sp = SuperpagePool::new(SuperpagePoolConfig {
        superpage_bytes: 16 * 1024,
        superpages: 4,
        region: RegionOptions::default(),
    })
    .unwrap();
    let chan: EmulatedChannel<Superpage> = EmulatedChannel::start(
        "test-card",
        EmulatedConfig {
            queue_depth: 4,
            ..EmulatedConfig::default()
        },
        SlinkGenerator::new(SlinkConfig {
            source_id: BASE,
            data_words: WordRange::fixed(100),
            framing: true,
            ..SlinkConfig::default()
        }),
    )
    .unwrap();
    for _ in 0..4 {
        chan.push_superpage(sp.alloc().unwrap()).unwrap();
    }
    let t = Transport::new(1).unwrap();
    let pool = pool(8);
    let store = EventStore::new(&pool, &StoreConfig::with_channels(1, BASE, 8)).unwrap();
    let server = RequestServer::start(
        &t,
        &ServerConfig {
            endpoint: "inproc://ros-full".into(),
            ..ServerConfig::default()
        },
        store,
        Box::new(DmaInput::new(
            vec![chan],
            rodeo_format::slink::SlinkCheckConfig {
                framing: true,
                crc: false,
                l1id_wrap: 1 << 24,
            },
            ErrorDump::new(None, 0),
        )),
    )
    .unwrap();
    // The store refusing (published per channel) and the card stalling after it: a stall
    // alone may be the card outrunning the core's first poll, before anything was stored.
    rodeo_testkit::wait_until("the card stalled on the full store", WAIT, || {
        server.channel_stats().snapshot()[0].full > 0 && server.stats().input_stalls > 0
    });
    let s = server.stop();
    let k = s.store.counters(0);
    assert!(k.full > 0, "the store never refused: {k:?}");
    assert!(s.input_stalls > 0, "the card never stalled");
    assert_eq!(s.slink.l1id_sequence_errors, 0);
    assert_eq!(k.stored, k.fragments);
    // Everything stored is there, from L1ID 0 with no gap: nothing overwritten or dropped.
    for l1id in 0..k.fragments as u32 {
        assert_eq!(s.store.lookup(0, l1id), Lookup::Present, "L1ID {l1id}");
    }
    // Full: no free page, or (here, 8 fragments a page) the index of 4 entries a page.
    assert!(k.pages_in_use >= 7, "{k:?}");
}

/// One S-LINK record (`u32` length, then the ROD fragment) as a TCP sender writes it.
fn record(source: u32, l1id: u32) -> Vec<u8> {
    let words = rod(source, l1id);
    let mut out = ((4 * words.len()) as u32).to_le_bytes().to_vec();
    out.extend(words.iter().flat_map(|w| w.to_le_bytes()));
    out
}

/// A readout node's network inputs as `/api/status` and the run summary see them: waiting,
/// then (with the silence time passed) a live problem; connected while data comes; lost when
/// silent longer than the silence time, connected again with data; closed at a clean close;
/// lost, with the reason, at a reset; judged at the run's end.
#[test]
fn a_network_node_watches_its_inputs() {
    use rodeo_ros::inputs::network::NetworkInput;
    use rodeo_ros::inputs::InputState;
    use rodeo_ros::node::{NodeConfig, NodeInput, ReadoutNode};
    use std::io::Write as _;
    let silence = Duration::from_millis(300);
    let config = NodeConfig {
        channels: 2,
        base_source_id: BASE,
        pages_per_channel: 64,
        input: NodeInput::Network(NetworkInput {
            listen: vec!["tcp://127.0.0.1:0".into(), "tcp://127.0.0.1:0".into()],
            framing: false,
            crc: false,
            end_with_sender: true,
        }),
        input_silence: Some(silence),
        ..NodeConfig::default()
    };
    let (node, client) = ReadoutNode::start_direct(&config).unwrap();
    let watch = node.input_watch();
    let first = watch.snapshot("ros-1");
    assert_eq!(first.len(), 2);
    for (i, s) in first.iter().enumerate() {
        assert_eq!(
            (s.state, s.rob, s.fragments),
            (InputState::Waiting, BASE + i as u32, 0)
        );
        assert!(s.address.starts_with("tcp://127.0.0.1:"), "{}", s.address);
        assert!(!s.address.ends_with(":0"), "the bound port: {}", s.address);
        assert_eq!(s.last_data_age_ms, None);
    }
    let addr = |i: usize| first[i].address.trim_start_matches("tcp://").to_string();
    // Waiting longer than the silence time is a problem already, live.
    wait_until("a live problem for the input nobody connected to", || {
        watch.snapshot("ros-1")[1]
            .problem
            .as_deref()
            .is_some_and(|p| p.contains("never connected"))
    });
    let mut a = std::net::TcpStream::connect(addr(0)).unwrap();
    a.set_nodelay(true).unwrap();
    for l1id in 0..3 {
        a.write_all(&record(BASE, l1id)).unwrap();
    }
    wait_until("3 fragments on input 0", || {
        let s = &watch.snapshot("ros-1")[0];
        s.state == InputState::Connected && s.fragments == 3 && s.problem.is_none()
    });
    let s = &watch.snapshot("ros-1")[0];
    assert!(s.bytes > 0 && s.last_data_age_ms.is_some(), "{s:?}");
    // Silent longer than the silence time: lost, and a problem; data again: connected.
    wait_until("input 0 lost for its silence", || {
        let s = &watch.snapshot("ros-1")[0];
        s.state == InputState::Lost && s.problem.as_deref().is_some_and(|p| p.contains("silent"))
    });
    a.write_all(&record(BASE, 3)).unwrap();
    wait_until("input 0 connected again", || {
        watch.snapshot("ros-1")[0].state == InputState::Connected
    });
    // The run ends now: input 1 never connected, input 0 was silent for a while.
    let end = watch.at_run_end("ros-1");
    let p1 = end[1].problem.clone().unwrap();
    assert!(
        p1.starts_with(&format!(
            "ros-1 ROB 0x{:08x} tcp://{}:",
            BASE + 1,
            "127.0.0.1"
        )) && p1.ends_with(": never connected"),
        "{p1}"
    );
    assert!(
        end[0]
            .problem
            .as_deref()
            .is_some_and(|p| p.contains("silent for up to")),
        "{:?}",
        end[0]
    );
    drop(a);
    wait_until("input 0 closed", || {
        watch.snapshot("ros-1")[0].state == InputState::Closed
    });
    // A sender that resets its connection mid-run: lost, with the reason.
    let b = std::net::TcpStream::connect(addr(1)).unwrap();
    (&b).write_all(&record(BASE + 1, 0)).unwrap();
    wait_until("input 1 connected", || {
        watch.snapshot("ros-1")[1].fragments == 1
    });
    rodeo_testkit::net::close_with_reset(b);
    wait_until("input 1 lost", || {
        let s = &watch.snapshot("ros-1")[1];
        s.state == InputState::Lost
            && s.problem
                .as_deref()
                .is_some_and(|p| p.contains("connection lost"))
            && s.errors >= 1
    });
    drop(client);
    let _ = node.stop();
    // After the stop the last states stay readable.
    let after = watch.snapshot("ros-1");
    assert_eq!(
        (after[0].state, after[1].state, after[0].fragments),
        (InputState::Closed, InputState::Lost, 4)
    );
}

/// The emulated cards' inputs: connected while they write, ended once the node stopped, and
/// no problem.
#[test]
fn a_dma_node_s_inputs_end_with_the_node() {
    use rodeo_ros::inputs::InputState;
    use rodeo_ros::node::{NodeConfig, ReadoutNode};
    let config = NodeConfig {
        channels: 3,
        pages_per_channel: 64,
        ..NodeConfig::default()
    };
    let (node, client) = ReadoutNode::start_direct(&config).unwrap();
    let watch = node.input_watch();
    wait_until("every emulated input writing", || {
        watch
            .snapshot("ros-1")
            .iter()
            .all(|s| s.state == InputState::Connected && s.fragments > 0 && s.address == "emulated")
    });
    drop(client);
    let _ = node.stop();
    let end = watch.at_run_end("ros-1");
    assert!(
        end.iter()
            .all(|s| s.state == InputState::Ended && s.problem.is_none()),
        "{end:?}"
    );
}
