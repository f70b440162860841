//! The SW ROD fragment builder feeding a readout node's event store: every built fragment is
//! stored once, served word for word with the builder's status, and a full store holds the
//! builder back without losing anything.

#[path = "../../rodeo-swrod/tests/swrod_common/mod.rs"]
mod swrod_common;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rodeo_cards::dma::{DmaChannel, EmulatedChannel, EmulatedConfig};
use rodeo_cards::generator::L1idCounter;
use rodeo_memory::{ChunkPool, PagePool, PagePoolConfig, RegionOptions};
use rodeo_ros::server::{DirectClient, DirectReply, RequestServer, ServerConfig};
use rodeo_ros::store::{EventStore, StoreConfig};
use rodeo_ros::swrod::{swrod_link, StoreSink};
use rodeo_swrod::{
    DefaultFormat, Flow, Fragment, FragmentBuilder, FragmentSink, SwRodConfig, SwRodCounters,
};
use swrod_common::*;

const WRAP: u32 = 300;
const ROB: u32 = 0x0071_0000;

/// Forwards to the store's sink and remembers each fragment's words (ROB header included).
/// Like any sink wrapping another, it forwards `has_room`, `flush` and `finish` too: the
/// store's sink hands its open batch over on `flush`, so a wrapper that swallowed it would
/// keep the last fragments from the store for good.
/// With `runs` it takes the builder's runs and forwards them whole (the store sink's
/// `inspect_run`, as a node does), else one fragment at a time (its `fragment`).
struct Tee {
    sink: StoreSink,
    words: Mutex<HashMap<u32, Vec<u32>>>,
    runs: bool,
}

impl Tee {
    fn remember(&self, f: &Fragment<'_>) {
        let first = self.words.lock().unwrap().insert(f.l1id(), f.to_vec());
        assert!(first.is_none(), "L1ID {:#x} built twice", f.l1id());
    }
}

impl<'p> FragmentSink<'p> for Tee {
    fn fragment(&self, f: Fragment<'p>) -> Flow {
        self.remember(&f);
        self.sink.fragment(f)
    }

    fn inspect_run(&self, fragments: &[Fragment<'p>]) -> Option<Flow> {
        if !self.runs {
            return None;
        }
        for f in fragments {
            self.remember(f);
        }
        self.sink.inspect_run(fragments)
    }

    fn has_room(&self) -> bool {
        self.sink.has_room()
    }

    fn flush(&self) {
        FragmentSink::flush(&self.sink);
    }

    fn finish(&self, counters: &SwRodCounters) {
        self.sink.finish(counters);
    }
}

/// Packets of 0..40 words: fragments of a few hundred words.
fn sizes(elink: u16, n: u64) -> u32 {
    ((u64::from(elink) * 7 + n * 13) % 40) as u32
}

/// Two threads, four E-links each, `events` events from L1ID 0 (wrapping at 300, so the ECR
/// moves); `missing` names (event, E-link) packets never sent.
fn streams(events: u64, missing: &[(u64, u16)]) -> (SwRodConfig, Vec<Player>, Vec<u32>) {
    let groups: [Vec<u16>; 2] = [(0..4).collect(), (4..8).collect()];
    let config = SwRodConfig {
        source_id: rodeo_format::fragment::SourceId(ROB),
        thread_elinks: groups.to_vec(),
        l1id_wrap: WRAP,
        timeout: Duration::from_millis(200),
        // The smallest window for 1 KiB FELIX blocks: the link holds as many fragments.
        window: 512,
        ..SwRodConfig::default()
    };
    let mut out: Vec<Stream> = groups.iter().map(|g| Stream::new(g)).collect();
    let mut l1ids = Vec::new();
    for n in 0..events {
        let ext = L1idCounter::expected(WRAP, n);
        l1ids.push(ext);
        for (s, g) in out.iter_mut().zip(&groups) {
            for (i, &e) in g.iter().enumerate() {
                if !missing.contains(&(n, e)) {
                    s.packet(i, ext, (ext % 3564) as u16, sizes(e, n));
                }
            }
        }
    }
    for s in &mut out {
        s.flush();
    }
    (config, out.iter().map(player).collect(), l1ids)
}

/// Runs the builder over one emulated card per thread into `sink`.
fn build(config: &SwRodConfig, players: Vec<Player>, sink: &Tee) -> SwRodCounters {
    let pools: Vec<ChunkPool> = (0..2)
        .map(|_| pool(config.block_bytes_for(4 * 40 + 8)))
        .collect();
    let builder = FragmentBuilder::new(
        config,
        &pools,
        DefaultFormat {
            check_payload: true,
        },
    )
    .unwrap();
    let cards: Vec<EmulatedChannel<Vec<u8>>> = players
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let ch = EmulatedChannel::start(
                &format!("felix{i}"),
                EmulatedConfig {
                    queue_depth: 4,
                    ..EmulatedConfig::default()
                },
                p,
            )
            .unwrap();
            for _ in 0..4 {
                ch.push_superpage(vec![0u8; 4 * BLOCK]).unwrap();
            }
            ch
        })
        .collect();
    let inputs: Vec<Vec<&EmulatedChannel<Vec<u8>>>> = cards.iter().map(|c| vec![c]).collect();
    builder.run(&inputs, sink, &AtomicBool::new(false)).unwrap()
}

/// A node with one channel (the builder's ROB) fed by the builder, on the direct link.
fn node(
    config: &SwRodConfig,
    pages: usize,
    extra: usize,
    pending: Duration,
) -> (RequestServer, DirectClient, Tee) {
    let pool = PagePool::new(PagePoolConfig {
        page_bytes: 1024,
        pages,
        region: RegionOptions::default(),
    })
    .unwrap();
    let store = EventStore::new(&pool, &StoreConfig::with_channels(1, ROB, pages)).unwrap();
    let (sink, input) = swrod_link(0, config, extra, 512);
    let (server, client) = RequestServer::start_direct(
        &ServerConfig {
            pending_timeout: pending,
            ..ServerConfig::default()
        },
        store,
        Box::new(input),
    )
    .unwrap();
    let tee = Tee {
        sink,
        words: Mutex::new(HashMap::new()),
        runs: true,
    };
    (server, client, tee)
}

/// Asks for the ROB of `l1id` and returns the served words (the empty fragment if missing).
/// `slot` holds the last reply; the next receive gives its box back to the link.
fn fetch(client: &mut DirectClient, slot: &mut Option<Box<DirectReply>>, l1id: u32) -> Vec<u32> {
    client.send_request(l1id, l1id, &[ROB]).unwrap();
    assert!(
        client.recv_timeout(slot, Duration::from_secs(20)),
        "no reply for {l1id:#x}"
    );
    let r = slot.as_ref().unwrap();
    assert_eq!(r.l1id(), Some(l1id));
    r.segments().flat_map(|s| s.iter().copied()).collect()
}

#[test]
fn built_fragments_are_stored_once_and_served_word_for_word() {
    // Whole runs of fragments (streamed into the store pages under one lock), then one
    // fragment at a time.
    for runs in [true, false] {
        stored_once_and_served_word_for_word(runs);
    }
}

fn stored_once_and_served_word_for_word(runs: bool) {
    let events = 700;
    // Event 50 misses E-link 5's packet: built at the timeout, flagged.
    let (config, players, l1ids) = streams(events, &[(50, 5)]);
    let (server, mut client, mut tee) = node(&config, 2048, 16, Duration::from_secs(20));
    tee.runs = runs;
    let c = build(&config, players, &tee);
    assert_eq!(c.fragments, events);
    assert_eq!(c.incomplete_fragments, 1);
    let built = tee.words.lock().unwrap().clone();
    // The builder is done; wait until the node has taken every fragment in.
    rodeo_testkit::wait_until("every fragment stored", Duration::from_secs(20), || {
        server.stats().input_fragments >= events
    });
    let mut slot = None;
    for &l1id in &l1ids {
        let served = fetch(&mut client, &mut slot, l1id);
        let want = &built[&l1id];
        // The store writes its own ROB header (no checksum, the same status); the ROD words
        // are the builder's exactly.
        assert_eq!(served[8..], want[8..], "L1ID {l1id:#x}");
        assert_eq!(served[6], want[6], "ROB status of {l1id:#x}");
        assert_eq!(served[4], ROB);
    }
    let flagged = built[&l1ids[50]][6];
    assert_ne!(flagged, 0, "the incomplete fragment is flagged");
    client.send_clear(0, &l1ids).unwrap();
    // The last reply's page references go back with it.
    drop(slot);
    drop(client);
    // The clear is handled before the node stops.
    rodeo_testkit::wait_until("the clear handled", Duration::from_secs(20), || {
        server.stats().clears >= 1
    });
    let counts = tee.sink.counters();
    // Written straight into the store's pages (streamed), the others through the batch's words.
    assert!(counts.in_place > 0, "{counts:?}");
    assert_eq!(
        (
            counts.fragments,
            counts.rejected,
            counts.dropped_no_consumer,
            counts.out_of_order,
            counts.duplicates,
            counts.skipped
        ),
        (events, 0, 0, 0, 0, 0)
    );
    let mut stopped = server.stop();
    let k = stopped.store.total_counters();
    assert_eq!((k.fragments, k.duplicates, k.cleared), (events, 0, events));
    assert_eq!(
        stopped.store.settle(0),
        0,
        "every page back after the clear"
    );
}

#[test]
fn a_full_store_holds_the_builder_back_and_loses_nothing() {
    let events = 1500;
    let (config, players, l1ids) = streams(events, &[]);
    // 1 KiB pages, about one fragment each, and the link's reorder window plus one buffer: the
    // builder runs a few hundred events ahead of the reader, then the store is full.
    let (server, mut client, tee) = node(&config, 256, 1, Duration::from_secs(20));
    let t0 = Instant::now();
    let (c, served) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            // The HLT's side starts late, once the store has refused a fragment (the builder
            // is then held back), then asks for each event in order and clears in groups of 4.
            rodeo_testkit::wait_until("the store full", Duration::from_secs(20), || {
                server.channel_stats().snapshot()[0].full > 0
            });
            let (mut served, mut slot) = (0u64, None);
            for (n, chunk) in l1ids.chunks(4).enumerate() {
                for &l1id in chunk {
                    let words = fetch(&mut client, &mut slot, l1id);
                    assert!(words.len() > 8 && words[6] == 0, "{l1id:#x}: {words:?}");
                    served += 1;
                }
                client.send_clear(n as u32, chunk).unwrap();
            }
            served
        });
        let c = build(&config, players, &tee);
        (c, reader.join().unwrap())
    });
    assert!(t0.elapsed() < Duration::from_secs(120));
    assert_eq!((c.fragments, served), (events, events));
    let counts = tee.sink.counters();
    assert_eq!(
        (
            counts.fragments,
            counts.dropped_no_consumer,
            counts.out_of_order,
            counts.skipped
        ),
        (events, 0, 0, 0)
    );
    let stopped = server.stop();
    let k = stopped.store.total_counters();
    // The store was full (back-pressure) at least once, and nothing was dropped.
    assert!(k.full > 0, "{k:?}");
    assert_eq!(
        (k.fragments, k.duplicates, k.dropped_after_clear),
        (events, 0, 0)
    );
    assert!(
        counts.sink_waits > 0 || c.pool_waits > 0 || k.full > 0,
        "no back-pressure seen: {counts:?} {c:?}"
    );
}
