//! Request descriptors: a fixed pool, allocated once, that bounds the requests waiting.
//!
//! A descriptor holds one DataRequest from the moment it is read until its reply is sent: the
//! requesting peer, the transaction id, the L1ID, the ROBs asked for, and the pending deadline.
//! Were every descriptor taken the core thread would stop reading requests; the pending queue
//! never takes them all (the core keeps one spare: see `core`, `SPARE_DESCRIPTORS`), and a
//! request beyond them that would wait is answered at once, PENDING. Single owner (core
//! thread).

use std::collections::VecDeque;
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
}

/// The pool and the pending queue.
#[derive(Debug)]
pub(crate) struct Descriptors {
    slots: Vec<Descriptor>,
    free: Vec<u32>,
    pending: VecDeque<u32>,
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
                })
                .collect(),
            free: (0..n as u32).rev().collect(),
            pending: VecDeque::with_capacity(n),
        }
    }

    /// Takes a free descriptor.
    pub(crate) fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Gives a descriptor back.
    pub(crate) fn put(&mut self, d: u32) {
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

    /// Queues `d` as pending.
    pub(crate) fn park(&mut self, d: u32) {
        self.pending.push_back(d);
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
