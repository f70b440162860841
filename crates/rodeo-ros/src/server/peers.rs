//! Replies dropped per peer: the readout node's policy for a client that does not read.
//!
//! The core thread sends every reply without waiting ([`Socket::try_send_to`]). When the
//! requesting peer's queue is at its high-water mark the reply is dropped: its page references
//! are released at once, and for the client it is a lost reply (it times out and asks again, as
//! for any lost message). Other peers have their own queues and are not affected. The drop is
//! counted in total (`ServerStats::send_dropped`) and here per peer, and the first drop of each
//! peer is logged (one `warn` per peer, not per reply).
//!
//! The table is bounded: at most [`MAX_TRACKED_PEERS`] peers by routing id; drops of any peer
//! beyond those count in one `(other)` entry (logged once), so a client that reconnects under
//! ever new routing ids cannot grow the node's memory. It is written only on the drop path (a
//! short mutex, never taken for a reply that was sent) and read by monitors.
//!
//! Why drop and not disconnect: ZeroMQ's ROUTER has no call that closes one peer's
//! connection, and a reply is worth nothing to a client that stopped reading; a client that
//! reads again gets the replies of its next requests.
//!
//! [`Socket::try_send_to`]: rodeo_transport::socket::Socket::try_send_to

use std::sync::Mutex;

/// Peers tracked by routing id; drops of any further peer count in one `(other)` entry.
pub const MAX_TRACKED_PEERS: usize = 64;

/// The label of drops of peers beyond [`MAX_TRACKED_PEERS`].
pub const OTHER_PEERS: &str = "(other)";

/// Replies dropped for one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerDrop {
    /// The peer's routing id as text ([`peer_label`]), or [`OTHER_PEERS`].
    pub peer: String,
    /// Replies dropped because its queue was full.
    pub dropped: u64,
}

/// Replies dropped per peer; see the module docs.
#[derive(Debug, Default)]
pub struct PeerDrops {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    peers: Vec<(Vec<u8>, PeerDrop)>,
    others: u64,
}

impl PeerDrops {
    /// Counts one reply to `peer` dropped; logs the first one of each peer (`endpoint` names
    /// the node in the message).
    pub(crate) fn record(&self, peer: &[u8], endpoint: &str) {
        // A poisoned table only means a panic elsewhere while counting: keep counting.
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, d)) = t.peers.iter_mut().find(|(id, _)| id == peer) {
            d.dropped += 1;
            return;
        }
        if t.peers.len() < MAX_TRACKED_PEERS {
            let label = peer_label(peer);
            tracing::warn!(
                "readout node {endpoint}: peer {label} does not read its replies (its queue is \
                 full); its replies are dropped and counted while it stays so"
            );
            t.peers.push((
                peer.to_vec(),
                PeerDrop {
                    peer: label,
                    dropped: 1,
                },
            ));
            return;
        }
        if t.others == 0 {
            tracing::warn!(
                "readout node {endpoint}: more than {MAX_TRACKED_PEERS} peers do not read their \
                 replies; the drops of the others are counted as {OTHER_PEERS}"
            );
        }
        t.others += 1;
    }

    /// Every peer with drops, in the order of their first drop, then `(other)` if any.
    pub fn snapshot(&self) -> Vec<PeerDrop> {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<PeerDrop> = t.peers.iter().map(|(_, d)| d.clone()).collect();
        if t.others > 0 {
            v.push(PeerDrop {
                peer: OTHER_PEERS.into(),
                dropped: t.others,
            });
        }
        v
    }
}

/// A routing id as text: as it is when it is printable ASCII (a DCM's identity is its
/// application name), `0x` and hex otherwise (ZeroMQ's generated ids).
pub fn peer_label(id: &[u8]) -> String {
    if !id.is_empty() && id.iter().all(|b| b.is_ascii_graphic()) {
        return String::from_utf8_lossy(id).into_owned();
    }
    let mut s = String::with_capacity(2 + 2 * id.len());
    s.push_str("0x");
    for b in id {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_counted_per_peer_and_the_table_is_bounded() {
        let d = PeerDrops::default();
        d.record(b"dcm-1", "test");
        d.record(b"dcm-1", "test");
        d.record(&[0, 1, 2, 3, 4], "test");
        let s = d.snapshot();
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0],
            PeerDrop {
                peer: "dcm-1".into(),
                dropped: 2
            }
        );
        assert_eq!(s[1].peer, "0x0001020304");
        for i in 0..(MAX_TRACKED_PEERS as u32 + 10) {
            d.record(&i.to_le_bytes(), "test");
        }
        let s = d.snapshot();
        assert_eq!(s.len(), MAX_TRACKED_PEERS + 1);
        assert_eq!(s.last().unwrap().peer, OTHER_PEERS);
        let total: u64 = s.iter().map(|p| p.dropped).sum();
        assert_eq!(total, 3 + u64::from(MAX_TRACKED_PEERS as u32 + 10));
    }
}
