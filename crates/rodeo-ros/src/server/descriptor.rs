//! Request descriptors: a fixed pool, allocated once, that bounds the requests waiting.
//!
//! A descriptor holds one DataRequest from the moment it is read until its reply is sent: the
//! requesting peer, the transaction id, the L1ID, the ROBs asked for, and the pending deadline.
//! Were every descriptor taken the core thread would stop reading requests; the pending queue
//! never takes them all (the core keeps one spare: see `core`, `SPARE_DESCRIPTORS`), and a
//! request beyond them that would wait is answered at once, PENDING. Single owner (core
//! thread).
//!
//! # A fair share of the pending queue
//!
//! The queue counts its requests per peer (by a keyed hash of the routing id, so a peer cannot
//! choose an id that shares another's count). When it is full and a peer's request would wait,
//! [`Descriptors::evict_for`] names the request that gives way: the newest parked request of
//! the peer holding the most of the queue, when that peer holds at least two more than the
//! newcomer's peer (max-min fairness); otherwise the newcomer itself. A client that floods the
//! queue with requests far ahead thus answers its own excess, and another client's request
//! that must wait still waits. The largest count is kept exactly (how many peers hold each
//! count, updated as requests park and are answered), so deciding costs a lookup; naming the
//! holder costs a walk over the peers with parked requests only when the one known lost a
//! request while another held as many, and finding its newest request a walk back along the
//! queue: both only for an eviction, at most one per request that would wait.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::time::Instant;

/// One request in flight.
#[derive(Debug)]
pub(crate) struct Descriptor {
    /// Routing id of the requesting peer.
    pub(crate) peer: Vec<u8>,
    /// Transaction id to echo.
    pub(crate) transaction: u32,
    /// The event.
    pub(crate) l1id: u32,
    /// ROB ids asked for (all of the node's when the request listed none).
    pub(crate) robs: Vec<u32>,
    /// When a pending request is answered anyway.
    pub(crate) deadline: Instant,
    /// Counted in the pending queue's per-peer counts (parked at least once, not yet freed).
    parked: bool,
    /// The keyed hash of `peer`, set when first parked.
    peer_key: u64,
}

/// The pool and the pending queue.
#[derive(Debug)]
pub(crate) struct Descriptors {
    slots: Vec<Descriptor>,
    free: Vec<u32>,
    pending: VecDeque<u32>,
    /// Parked requests per peer (by `peer_key`); a peer with none has no entry.
    per_peer: HashMap<u64, u32>,
    /// `peers_at[c]`: how many peers hold exactly `c` parked requests (`c` >= 1).
    peers_at: Vec<u32>,
    /// The most parked requests any one peer holds.
    most: u32,
    /// A peer holding `most`, when known (`None`: found by a walk over `per_peer` when needed).
    top: Option<u64>,
    keys: RandomState,
}

impl Descriptors {
    /// `n` descriptors sized for `robs` ROBs each.
    pub(crate) fn new(n: usize, robs: usize) -> Descriptors {
        let n = n.max(1);
        Descriptors {
            slots: (0..n)
                .map(|_| Descriptor {
                    peer: Vec::with_capacity(64),
                    transaction: 0,
                    l1id: 0,
                    robs: Vec::with_capacity(robs),
                    deadline: Instant::now(),
                    parked: false,
                    peer_key: 0,
                })
                .collect(),
            free: (0..n as u32).rev().collect(),
            pending: VecDeque::with_capacity(n),
            per_peer: HashMap::with_capacity(n),
            peers_at: vec![0; n + 2],
            most: 0,
            top: None,
            keys: RandomState::new(),
        }
    }

    /// Takes a free descriptor.
    pub(crate) fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Gives a descriptor back (answered): no longer counted for its peer.
    pub(crate) fn put(&mut self, d: u32) {
        let slot = &mut self.slots[d as usize];
        if std::mem::take(&mut slot.parked) {
            let key = slot.peer_key;
            if let Some(n) = self.per_peer.get_mut(&key) {
                let was = *n;
                *n -= 1;
                if *n == 0 {
                    self.per_peer.remove(&key);
                }
                self.peers_at[was as usize] -= 1;
                if was > 1 {
                    self.peers_at[was as usize - 1] += 1;
                }
                if was == self.most {
                    if self.peers_at[was as usize] == 0 {
                        // This peer held the most alone: it still does, one fewer.
                        self.most = was - 1;
                        self.top = (self.most > 0).then_some(key);
                    } else if self.top == Some(key) {
                        // Others hold as many: one of them is found when needed.
                        self.top = None;
                    }
                }
            }
        }
        self.free.push(d);
    }

    /// Free descriptors.
    pub(crate) fn available(&self) -> usize {
        self.free.len()
    }

    /// The descriptor `d`.
    pub(crate) fn get(&self, d: u32) -> &Descriptor {
        &self.slots[d as usize]
    }

    /// The descriptor `d`, writable.
    pub(crate) fn get_mut(&mut self, d: u32) -> &mut Descriptor {
        &mut self.slots[d as usize]
    }

    /// Queues `d` as pending (counted for its peer the first time).
    pub(crate) fn park(&mut self, d: u32) {
        let slot = &mut self.slots[d as usize];
        if !slot.parked {
            slot.parked = true;
            let key = self.keys.hash_one(&slot.peer[..]);
            slot.peer_key = key;
            let n = self.per_peer.entry(key).or_insert(0);
            *n += 1;
            let now = *n;
            if now > 1 {
                self.peers_at[now as usize - 1] -= 1;
            }
            self.peers_at[now as usize] += 1;
            if now > self.most {
                self.most = now;
                self.top = Some(key);
            } else if now == self.most && self.top.is_none() {
                self.top = Some(key);
            }
        }
        self.pending.push_back(d);
    }

    /// With the queue full, the parked request that gives way to `d` (not parked), taken off
    /// the queue: the newest of a peer holding the most of it, when that is at least two more
    /// than `d`'s peer holds; `None` when `d` itself should be answered at once (module docs).
    pub(crate) fn evict_for(&mut self, d: u32) -> Option<u32> {
        let mine = self.keys.hash_one(&self.slots[d as usize].peer[..]);
        let held = self.per_peer.get(&mine).copied().unwrap_or(0);
        if self.most < held.saturating_add(2) {
            return None;
        }
        let most = self.most;
        let top = match self.top {
            Some(t) => t,
            None => {
                let (&t, _) = self.per_peer.iter().find(|&(_, &n)| n == most)?;
                self.top = Some(t);
                t
            }
        };
        let at = self
            .pending
            .iter()
            .rposition(|&p| self.slots[p as usize].peer_key == top)?;
        self.pending.remove(at)
    }

    /// Requests waiting.
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Pops the oldest pending request.
    pub(crate) fn unpark(&mut self) -> Option<u32> {
        self.pending.pop_front()
    }

    /// Deadline of the oldest pending request.
    pub(crate) fn first_deadline(&self) -> Option<Instant> {
        self.pending
            .front()
            .map(|&d| self.slots[d as usize].deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes a descriptor for `peer` and parks it.
    fn park_for(ds: &mut Descriptors, peer: &[u8]) -> u32 {
        let d = ds.take().unwrap();
        ds.get_mut(d).peer = peer.to_vec();
        ds.park(d);
        d
    }

    /// The newest request of the peer holding at least two more than the newcomer's gives
    /// way; a tie, or the holder itself asking, leaves the newcomer to be answered; answered
    /// requests no longer count for their peer.
    #[test]
    fn the_peer_holding_the_most_gives_way_to_one_holding_less() {
        let mut ds = Descriptors::new(8, 1);
        let flood: Vec<u32> = (0..4).map(|_| park_for(&mut ds, b"flood")).collect();
        let other = ds.take().unwrap();
        ds.get_mut(other).peer = b"other".to_vec();
        assert_eq!(ds.evict_for(other), Some(flood[3]), "the flood's newest");
        ds.put(flood[3]);
        ds.park(other);
        assert_eq!(ds.pending(), 4);
        // The flood asks again: it holds the most, so its own request is answered.
        let again = ds.take().unwrap();
        ds.get_mut(again).peer = b"flood".to_vec();
        assert_eq!(ds.evict_for(again), None);
        ds.put(again);
        // A third peer with one parked: 3 against 1 + 2, the flood still gives way.
        let third = ds.take().unwrap();
        ds.get_mut(third).peer = b"third".to_vec();
        assert_eq!(ds.evict_for(third), Some(flood[2]));
        ds.put(flood[2]);
        ds.park(third);
        // Now 2 / 1 / 1: nobody holds two more than "other", the newcomer is answered.
        let more = ds.take().unwrap();
        ds.get_mut(more).peer = b"other".to_vec();
        assert_eq!(ds.evict_for(more), None);
        ds.put(more);
        // Answering drops the counts: with the queue drained, every count is gone.
        while let Some(d) = ds.unpark() {
            ds.put(d);
        }
        assert!(ds.per_peer.is_empty(), "{:?}", ds.per_peer);
        assert_eq!((ds.most, ds.top), (0, None));
        assert_eq!(ds.available(), 8);
        // The flood drained; another peer holds the queue now, and the flood's peer asking is
        // given its share (the holder known before is forgotten, not trusted).
        let b: Vec<u32> = (0..4).map(|_| park_for(&mut ds, b"b")).collect();
        let back = ds.take().unwrap();
        ds.get_mut(back).peer = b"flood".to_vec();
        assert_eq!(ds.evict_for(back), Some(b[3]));
        ds.put(b[3]);
        ds.park(back);
        // Two peers tie at the most (2 / 2 after "c" parks twice, "b" giving one more way): the
        // holder is found among them.
        park_for(&mut ds, b"c");
        let newcomer = ds.take().unwrap();
        ds.get_mut(newcomer).peer = b"d".to_vec();
        assert_eq!(ds.evict_for(newcomer), Some(b[2]), "b holds 3");
        ds.put(b[2]);
        ds.park(newcomer);
        let fourth = park_for(&mut ds, b"c");
        assert_eq!(ds.most, 2);
        let e = ds.take().unwrap();
        ds.get_mut(e).peer = b"e".to_vec();
        assert_eq!(ds.evict_for(e), Some(b[1]), "b, known to hold the most");
        ds.put(b[1]);
        assert_eq!(
            (ds.most, ds.top),
            (2, None),
            "c still holds 2, found when needed"
        );
        assert_eq!(
            ds.evict_for(e),
            Some(fourth),
            "c's newest, found by the walk"
        );
        ds.put(fourth);
        assert_eq!(ds.most, 1);
        assert_eq!(ds.evict_for(e), None, "everyone holds 1");
        ds.put(e);
    }
}
