//! The plain ZeroMQ baseline of `rodeo bench ros` and `rodeo study sfi`: a ROUTER that answers
//! every DataRequest with prebuilt fragments of a node's size, doing nothing a readout node does
//! besides the transport (no store, no clears), so that the ratio of a node's rate to it says
//! what the node costs over the transport.

use rodeo_format::fragment::{RobBuilder, RobPayload, RodBuilder, SourceId};
use rodeo_transport::message::{decode, header_bytes, Message, MessageType};
use rodeo_transport::socket::{Frame, Received, Socket};

use rodeo_ros::standalone::NodeArgs;

/// Answers DataRequests with prebuilt fragments of the node's size until `stop()`; returns the
/// requests served.
pub fn plain_loop(
    mut sock: Socket,
    node: &NodeArgs,
    stop: &dyn Fn() -> bool,
) -> anyhow::Result<u64> {
    let data = vec![0u32; node.fragment_words as usize];
    let robs = node.robs();
    let frags: Vec<Vec<u8>> = robs
        .iter()
        .map(|&id| {
            let mut w = Vec::new();
            let pieces: [&[u32]; 1] = [&data];
            RobBuilder {
                source_id: SourceId(id),
                status: &[0],
                payload: RobPayload::Rod(RodBuilder {
                    source_id: SourceId(id),
                    status: &[0],
                    data: &pieces,
                    ..RodBuilder::default()
                }),
                ..RobBuilder::default()
            }
            .write_vec(&mut w)
            .expect("small fragment");
            w.iter().flat_map(|x| x.to_le_bytes()).collect()
        })
        .collect();
    let mut msg = Received::default();
    let mut head = Vec::with_capacity(20);
    let mut served = 0u64;
    let mut idx = Vec::with_capacity(robs.len());
    while !stop() {
        // A signal (the SIGTERM that stops this process) interrupts the wait: check stop().
        if !sock.recv(&mut msg, 20).unwrap_or(false) {
            continue;
        }
        let Ok(d) = decode(&msg.bytes) else { continue };
        let Message::DataRequest { l1id, robs: want } = d.message else {
            continue;
        };
        idx.clear();
        if want.is_empty() {
            idx.extend(0..robs.len());
        } else {
            idx.extend(
                want.iter()
                    .filter_map(|r| robs.iter().position(|&x| x == r)),
            );
        }
        let bytes: usize = idx.iter().map(|&i| frags[i].len()).sum();
        head.clear();
        head.extend_from_slice(&header_bytes(
            MessageType::DataReply,
            d.header.transaction,
            (8 + bytes) as u32,
        ));
        head.extend_from_slice(&l1id.to_le_bytes());
        head.extend_from_slice(&(idx.len() as u32).to_le_bytes());
        let frames =
            std::iter::once(Frame::Copy(&head)).chain(idx.iter().map(|&i| Frame::Copy(&frags[i])));
        let peer = msg.peer.clone();
        sock.send_to(&peer, frames)?;
        served += 1;
    }
    Ok(served)
}
