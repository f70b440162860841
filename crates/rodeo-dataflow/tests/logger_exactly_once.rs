//! The logger over a real ZeroMQ socket: events are acknowledged only after they are written,
//! a repeated event is acknowledged but written once, and garbage is counted, not written.

use std::sync::Arc;

use rodeo_dataflow::logger::{self, LoggerCompression, LoggerConfig, LoggerCounters};
use rodeo_files::rawfile::RawFileReader;
use rodeo_format::checksum::words_as_bytes;
use rodeo_format::synth::{EventSynth, SynthConfig};
use rodeo_transport::endpoint::Endpoint;
use rodeo_transport::message::{decode, header_bytes, Message, MessageType};
use rodeo_transport::socket::{Frame, Received, SocketKind, Transport};

#[test]
fn repeats_are_acknowledged_and_written_once() {
    let dir = tempfile::tempdir().unwrap();
    let t = Transport::new(1).unwrap();
    let mut cfg = LoggerConfig::new("logger-t", "inproc://logger-t", dir.path().into(), 7);
    cfg.compression = LoggerCompression::Zstd;
    let counters = Arc::new(LoggerCounters::default());
    let handle = logger::spawn(cfg, &t, Arc::clone(&counters)).unwrap();
    let mut dcm = t.socket(SocketKind::Dealer).unwrap();
    dcm.connect(&Endpoint::parse("inproc://logger-t").unwrap())
        .unwrap();
    let mut synth = EventSynth::new(SynthConfig::default());
    let mut words = Vec::new();
    // Events 0..10, then 3 and 5 again, then a message that is not an event.
    for gid in (0..10).chain([3, 5]) {
        synth.event(gid, &mut words).unwrap();
        let header = header_bytes(MessageType::Event, 0, 4 + 4 * words.len() as u32);
        dcm.send([
            Frame::Copy(&header),
            Frame::Copy(&0u32.to_le_bytes()),
            Frame::Copy(words_as_bytes(&words)),
        ])
        .unwrap();
    }
    dcm.send([Frame::Copy(b"garbage!garbage!")]).unwrap();
    let acked = acknowledged(&mut dcm, 12);
    assert_eq!(acked, [0, 1, 2, 3, 3, 4, 5, 5, 6, 7, 8, 9]);
    let summary = handle.stop().unwrap();
    assert_eq!(summary.events_written, 10);
    assert_eq!(summary.duplicates, 2);
    assert_eq!(summary.bad_messages, 1);
    assert_eq!(summary.files.len(), 1);
    let mut reader = RawFileReader::open(&summary.files[0]).unwrap();
    let mut n = 0;
    while let Some(e) = reader.next_event() {
        let e = e.unwrap();
        assert_eq!(e.flags & 1, 1, "compressed events are flagged");
        n += 1;
    }
    assert_eq!(n, 10);
}

/// The written rate's span ends when the last event is on disk (its commit acknowledged), as
/// dd's time ends after its sync: with a single event it is the time from its write to its
/// sync, not 0 (it ended at the last copy into the writer's buffer).
#[test]
fn the_write_span_ends_when_the_last_event_is_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let t = Transport::new(1).unwrap();
    let cfg = LoggerConfig::new("logger-s", "inproc://logger-s", dir.path().into(), 7);
    let handle = logger::spawn(cfg, &t, Arc::new(LoggerCounters::default())).unwrap();
    let mut dcm = t.socket(SocketKind::Dealer).unwrap();
    dcm.connect(&Endpoint::parse("inproc://logger-s").unwrap())
        .unwrap();
    let mut words = Vec::new();
    EventSynth::new(SynthConfig::default())
        .event(0, &mut words)
        .unwrap();
    send_event(&mut dcm, 0, &words);
    assert_eq!(acknowledged(&mut dcm, 1), [0]);
    let summary = handle.stop().unwrap();
    assert_eq!(summary.events_written, 1);
    assert!(
        summary.write_span_ns > 0,
        "one event: the span runs from its write to its sync"
    );
}

/// A full table of sender identities gives an idle sender's place (its events all
/// acknowledged) to a new one, the least recently heard first: identities made up by the
/// thousand (or DCMs renamed over a long run) no longer keep a new DCM's events out for good.
#[test]
fn a_full_table_of_senders_gives_an_idle_ones_place_to_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let t = Transport::new(1).unwrap();
    let mut cfg = LoggerConfig::new("logger-f", "inproc://logger-f", dir.path().into(), 7);
    cfg.max_senders = 2;
    let handle = logger::spawn(cfg, &t, Arc::new(LoggerCounters::default())).unwrap();
    let mut synth = EventSynth::new(SynthConfig::default());
    let mut words = Vec::new();
    let mut dcms = Vec::new();
    for (gid, id) in [(0u64, "dcm-a"), (1, "dcm-b"), (2, "dcm-c"), (3, "dcm-b")] {
        if !dcms.iter().any(|(name, _)| *name == id) {
            let s = t.socket(SocketKind::Dealer).unwrap();
            s.set_identity(id.as_bytes()).unwrap();
            s.connect(&Endpoint::parse("inproc://logger-f").unwrap())
                .unwrap();
            dcms.push((id, s));
        }
        let dcm = &mut dcms.iter_mut().find(|(name, _)| *name == id).unwrap().1;
        synth.event(gid, &mut words).unwrap();
        send_event(dcm, 0, &words);
        // Each acknowledged before the next is sent: every sender idle when "dcm-c" comes.
        assert_eq!(acknowledged(dcm, 1), [gid], "{id}");
    }
    let summary = handle.stop().unwrap();
    assert_eq!(summary.events_written, 4);
    assert_eq!(summary.bad_messages, 0);
    // "dcm-c" took "dcm-a"'s place (heard least recently); "dcm-b" kept its own.
    assert_eq!(summary.senders_replaced, 1);
}

/// The global ids of the first `n` events `dcm` gets acknowledged (within 20 s), sorted.
fn acknowledged(dcm: &mut rodeo_transport::socket::Socket, n: usize) -> Vec<u64> {
    let mut acked = Vec::new();
    let mut msg = Received::default();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while acked.len() < n {
        assert!(std::time::Instant::now() < deadline, "acks: {acked:?}");
        if dcm.recv(&mut msg, 100).unwrap() {
            let Message::EventAck { global_ids } = decode(&msg.bytes).unwrap().message else {
                panic!("not an EventAck");
            };
            acked.extend(global_ids.iter());
        }
    }
    acked.sort_unstable();
    acked
}

/// Sends one `Event` message of `stream` and `words` on `dcm`.
fn send_event(dcm: &mut rodeo_transport::socket::Socket, stream: u32, words: &[u32]) {
    let header = header_bytes(MessageType::Event, 0, 4 + 4 * words.len() as u32);
    dcm.send([
        Frame::Copy(&header),
        Frame::Copy(&stream.to_le_bytes()),
        Frame::Copy(words_as_bytes(words)),
    ])
    .unwrap();
}

/// What a peer sends is input: an event the EventStorage writer cannot take (an unknown
/// compression type; it ended the logger) and one with a wild stream index (it sized the
/// logger's tables by it: 4 billion streams) are counted and dropped, and the logger goes on
/// writing the events after them.
#[test]
fn events_a_logger_cannot_write_are_counted_and_it_goes_on() {
    use rodeo_format::fragment::FullEvent;
    let dir = tempfile::tempdir().unwrap();
    let t = Transport::new(1).unwrap();
    let mut cfg = LoggerConfig::new("logger-b", "inproc://logger-b", dir.path().into(), 8);
    cfg.format = logger::FileFormat::EventStorage;
    let handle = logger::spawn(cfg, &t, Arc::new(LoggerCounters::default())).unwrap();
    let mut dcm = t.socket(SocketKind::Dealer).unwrap();
    dcm.connect(&Endpoint::parse("inproc://logger-b").unwrap())
        .unwrap();
    let mut synth = EventSynth::new(SynthConfig::default());
    let mut words = Vec::new();
    synth.event(0, &mut words).unwrap();
    let compression = |w: &[u32]| FullEvent::parse(w).ok().map(|e| e.compression());
    let at = (0..words.len())
        .find(|&i| {
            let mut p = words.clone();
            p[i] = 2;
            words[i] == 0 && compression(&p) == Some(2)
        })
        .unwrap();
    words[at] = 2;
    send_event(&mut dcm, 0, &words);
    synth.event(1, &mut words).unwrap();
    send_event(&mut dcm, u32::MAX, &words);
    // Words after the event (a DCM never sends any): refused, not written into a record.
    synth.event(5, &mut words).unwrap();
    words.extend_from_slice(&[0xDEAD_BEEF, 7]);
    send_event(&mut dcm, 0, &words);
    for gid in 2..5 {
        synth.event(gid, &mut words).unwrap();
        send_event(&mut dcm, 0, &words);
    }
    let acked = acknowledged(&mut dcm, 3);
    assert_eq!(acked, [2, 3, 4]);
    let summary = handle.stop().unwrap();
    assert_eq!(summary.events_written, 3);
    assert_eq!(summary.bad_messages, 3);
}
