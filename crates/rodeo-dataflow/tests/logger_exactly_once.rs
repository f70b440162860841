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
    let mut acked = Vec::new();
    let mut msg = Received::default();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while acked.len() < 12 {
        assert!(std::time::Instant::now() < deadline, "acks: {acked:?}");
        if dcm.recv(&mut msg, 100).unwrap() {
            let Message::EventAck { global_ids } = decode(&msg.bytes).unwrap().message else {
                panic!("not an EventAck");
            };
            acked.extend(global_ids.iter());
        }
    }
    acked.sort_unstable();
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
