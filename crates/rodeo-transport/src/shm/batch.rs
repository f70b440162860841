//! Small messages that go out together in one shared-memory sample (a socket with
//! [`Socket::set_batching`](crate::socket::Socket::set_batching) on).
//!
//! iceoryx2's cost is per sample (loan, publish, the subscriber's queue, release: about 1 us
//! of CPU for the two ends on the 2-core development machine), whatever its size. A socket that
//! batches appends each message of at most [`BATCH_MESSAGE_BYTES`] to a batch of its outbox
//! and publishes the batch as one sample when the socket's owner next receives (once it has
//! read every message of the batch sample it is reading), polls or flushes (its loop does on
//! every turn: the contract of `set_batching`), before a larger message (order is kept), when
//! the batch would pass [`BATCH_BYTES`], and when the socket is dropped.
//!
//! A receive takes the next message of the batch sample being read without publishing: a
//! server that answers a batch of requests one by one (a readout node answering the requests a
//! DCM sent in one turn) then sends its answers together, in one sample per peer, instead of
//! one per answer (each receive publishing the answer before it). The wait this adds is the
//! reading of one received batch; before a receive waits, or looks at its queue for the next
//! sample, what waits goes out. Measured (`rodeo bench partition --processes`, default
//! partition, 2026-12-06, three pairs): 7.87-8.58 us of CPU per L1 accept against 9.04-9.29
//! before (a flush at every receive, messages of at most 1 KiB batched; docs/benchmarks.md).
//!
//! A batch sample is `[BATCH_MARK][identity length][identity]` then, per message, its length
//! (u32, little-endian) and its bytes. [`BATCH_MARK`] is never an identity length (at most 64),
//! so a receiver tells a batch from a single message by its first byte. A batch whose lengths
//! run past its end is refused from that message on (counted as a dropped message).

use std::sync::atomic::{AtomicU64, Ordering};

/// Messages of at most this many bytes wait in a batch when batching is on: a readout node's
/// reply of a few fragments (the default partition's: about 2.2 KiB) included.
pub const BATCH_MESSAGE_BYTES: usize = 4096;
/// A batch is published before it would hold more than this many bytes of messages: with its
/// mark and the longest identity (64 bytes) a batch sample stays within 16 KiB, the slot size
/// batch samples of 8 KiB took before.
pub const BATCH_BYTES: usize = 16 * 1024 - 2 - 64;
/// The first byte of a batch sample (an identity length is at most 64).
pub(crate) const BATCH_MARK: u8 = 0xFF;

static UNDELIVERED: AtomicU64 = AtomicU64::new(0);

/// The environment variable that turns batching off in a process (`0`), whatever its sockets
/// ask for: every message then goes out in a sample of its own, at once.
pub const BATCH_ENV: &str = "RODEO_SHM_BATCH";

/// 0: not read yet, 1: allowed, 2: turned off by [`BATCH_ENV`].
static ALLOWED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether sockets of this process may batch ([`BATCH_ENV`]).
pub fn batching_allowed() -> bool {
    match ALLOWED.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var(BATCH_ENV).map_or(true, |v| v.trim() != "0");
            ALLOWED.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
        v => v == 1,
    }
}

/// Batched messages this process dropped because their inbox had lost its receiver before the
/// batch went out (as a ZeroMQ peer that vanished loses what was queued to it): the figure of
/// `/metrics` next to the back-pressure count.
pub fn undelivered_count() -> u64 {
    UNDELIVERED.load(Ordering::Relaxed)
}

/// Counts `n` batched messages dropped for want of a receiver.
pub(crate) fn count_undelivered(n: u64) {
    UNDELIVERED.fetch_add(n, Ordering::Relaxed);
}

/// Appends one message of `len` bytes made of `parts` to `batch`.
pub(crate) fn append<'p>(batch: &mut Vec<u8>, len: usize, parts: impl Iterator<Item = &'p [u8]>) {
    batch.extend_from_slice(&(len as u32).to_le_bytes());
    for p in parts {
        batch.extend_from_slice(p);
    }
}

/// The bytes of a batch sample after its mark: the identity (as a range of `payload`) and
/// where its first message starts; `None` when the identity runs past the end.
pub(crate) fn header(payload: &[u8]) -> Option<(std::ops::Range<usize>, usize)> {
    let id_len = usize::from(*payload.get(1)?);
    let end = 2 + id_len;
    (end <= payload.len()).then_some((2..end, end))
}

/// The next message of a batch `payload` from byte `at` on, as a range of `payload`, and moves
/// `at` past it. `None` at the end; `Some(Err(()))` when the length runs past the end (then `at`
/// is moved to the end: the rest is refused).
pub(crate) fn next(payload: &[u8], at: &mut usize) -> Option<Result<std::ops::Range<usize>, ()>> {
    if *at >= payload.len() {
        return None;
    }
    let start = *at + 4;
    let len = payload
        .get(*at..start)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    match len
        .and_then(|n| start.checked_add(n))
        .filter(|&end| end <= payload.len())
    {
        Some(end) => {
            *at = end;
            Some(Ok(start..end))
        }
        None => {
            *at = payload.len();
            Some(Err(()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: &[u8], messages: &[&[u8]]) -> Vec<u8> {
        let mut b = vec![BATCH_MARK, id.len() as u8];
        b.extend_from_slice(id);
        for m in messages {
            append(&mut b, m.len(), [*m].into_iter());
        }
        b
    }

    #[test]
    fn a_batch_gives_back_its_messages_in_order_with_the_identity() {
        let s = sample(b"dcm-1", &[b"one", b"", b"three"]);
        let (id, mut at) = header(&s).expect("header");
        assert_eq!(&s[id], b"dcm-1");
        let mut got = Vec::new();
        while let Some(r) = next(&s, &mut at) {
            got.push(s[r.expect("well formed")].to_vec());
        }
        assert_eq!(got, [b"one".to_vec(), Vec::new(), b"three".to_vec()]);
    }

    #[test]
    fn a_length_past_the_end_refuses_the_rest_without_panicking() {
        let mut s = sample(b"", &[b"ok"]);
        s.extend_from_slice(&1000u32.to_le_bytes());
        s.extend_from_slice(b"short");
        let (_, mut at) = header(&s).expect("header");
        assert_eq!(next(&s, &mut at).map(|r| r.is_ok()), Some(true));
        assert_eq!(next(&s, &mut at), Some(Err(())));
        assert_eq!(next(&s, &mut at), None);
        // A cut length field, and an identity longer than the sample.
        let cut = [BATCH_MARK, 0, 1, 2];
        let (_, mut at) = header(&cut).expect("header");
        assert_eq!(next(&cut, &mut at), Some(Err(())));
        assert_eq!(header(&[BATCH_MARK, 9, 1]), None);
        assert_eq!(header(&[BATCH_MARK]), None);
    }
}
