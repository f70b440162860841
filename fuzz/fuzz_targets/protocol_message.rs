//! Fuzz target: the dataflow protocol decoder on arbitrary bytes. Every decoded list is walked,
//! so a validation gap in `decode` shows up as a panic in an iterator.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rodeo_transport::message::{decode, Message};

fuzz_target!(|data: &[u8]| {
    let Ok(d) = decode(data) else { return };
    match d.message {
        Message::Update { decisions, .. } => {
            assert_eq!(decisions.iter().count(), decisions.len());
        }
        Message::Process(a) | Message::Build(a) => {
            assert_eq!(a.rois.iter().count(), a.rois.len());
        }
        Message::Clear { l1ids } => {
            assert_eq!(l1ids.iter().count(), l1ids.len());
        }
        Message::DataRequest { robs, .. } => {
            assert_eq!(robs.iter().count(), robs.len());
        }
        Message::DataReply { fragments, .. } => {
            let total: usize = fragments.iter().map(<[u8]>::len).sum();
            assert_eq!(fragments.iter().count(), fragments.len());
            assert_eq!(total, fragments.as_bytes().len());
        }
        Message::EventAck { global_ids } => {
            assert_eq!(global_ids.iter().count(), global_ids.len());
        }
        Message::Event { .. } | Message::KeepAlive => {}
    }
});
