//! The direct in-process path between one client (the ROSTester) and the core thread: typed
//! requests and zero-copy replies over bounded lock-free queues, no ZeroMQ, no encoding.
//!
//! # Why
//!
//! Over ZeroMQ inproc each request and reply is a multi-part message: encoded, copied into
//! ZeroMQ message frames, routed through the ROUTER's pipes (with a mutex-protected mailbox
//! per socket) and decoded again. At 1 MHz that machinery, not rodeo's data path, is what
//! `rodeo bench ros` measured. The direct path keeps everything the core thread does (the same
//! descriptors, pending queue, clears and page holds, through [`RequestSource`]) and
//! replaces only the transport: requests are boxes with the L1ID and ROB ids as native words,
//! replies are boxes holding the reply head (the bytes a DataReply would start with) and the
//! present fragments' page segments, which the client reads where they lie. The store holds
//! those pages itself ([`EventStore::hold_segments`], a plain counter on the core thread, as for
//! a stored fragment) until the box is back on the core thread, which releases them
//! ([`EventStore::release_held`]): no atomic reference count per fragment on either side. A
//! link is tied to the store it was made for; replies for any other store are refused.
//!
//! # State and ownership
//!
//! Four [`BoundedQueue`]s (bounded, lock-free; one producer and one consumer each here; policy
//! `refuse`, which never happens as long as every box is in one place, see below):
//!
//! | queue | producer | consumer | holds |
//! |---|---|---|---|
//! | `request_free` | core (after handling) | client | empty request boxes |
//! | `requests` | client | core | filled requests and clears |
//! | `reply_free` | client (after reading) | core | read reply boxes, segments still held |
//! | `replies` | core | client | replies |
//!
//! Every box is allocated once, when the link is made ([`direct_link`]); its vectors keep
//! their capacity, so the hot path allocates nothing (a request listing more ids than the
//! capacity given grows its box once). Each queue is as large as its pool, so a push never
//! fails: a box is always in exactly one queue or held by one side.
//!
//! # Back-pressure
//!
//! The client keeps at most `capacity` DataRequests unanswered
//! ([`DirectClient::send_request`] refuses more: the tester bounds its requests in flight by
//! [`DirectClient::capacity`]); with one reply box more than that, the core always finds a free
//! reply box. The core reads requests only while it has free descriptors; the client waits
//! (spin, then yield, then short sleeps) for a free request box when the core is behind.
//!
//! # Disconnection and shutdown
//!
//! Each side sets a flag when dropped. A client whose server is gone gets
//! [`DirectError::Closed`] instead of waiting for request boxes; a server whose client is gone
//! refuses its replies (counted as send errors; the holds are released at once) and takes back
//! the replies it never read, so nothing waits for a reader that will never come. A reply that
//! finds no free box (only possible when a client breaks the bound above) is refused: counted
//! by the server as a send error, its holds released. A reply box the client drops instead of
//! giving back is replaced in the return queue by one carrying its segments, so the pool keeps
//! its size and the holds are released. Boxes given back after the server stopped are not
//! drained: their pages stay held in the store the server returns (drop the client first).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rodeo_memory::{Backoff, BackoffSpec, BoundedQueue, FullPolicy};
use rodeo_transport::message::HEADER_BYTES;

use super::source::{Ids, Incoming, ReplyRefused, RequestSource};
use crate::store::{EventStore, HeldSegment, PageRef, PageTable};

/// What a request box carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Data,
    Clear,
}

/// One request (or clear) on its way to the core thread.
#[derive(Debug)]
pub struct DirectRequest {
    kind: Kind,
    /// Transaction id (the sequence number for a clear).
    transaction: u32,
    l1id: u32,
    /// ROB ids (DataRequest, empty: all) or L1IDs (Clear).
    ids: Vec<u32>,
}

/// One reply on its way to the client: the DataReply's head bytes and the present fragments'
/// page segments, read where they lie. The store holds those pages (a plain counter on the core
/// thread) until the box comes back; a box dropped instead is replaced in the return queue by
/// one carrying its segments (see its `Drop`).
#[derive(Debug)]
pub struct DirectReply {
    head: Vec<u8>,
    segments: Vec<HeldSegment>,
    /// The store's pages (none for a link made without a store).
    table: Option<Arc<PageTable>>,
    /// The link, to hand back the segments of a box dropped instead of returned.
    back: Weak<BoxQueues>,
}

impl Drop for DirectReply {
    /// A box dropped instead of given back: a new box with its vectors (and the segments the
    /// store still holds for it) takes its place in the link's return queue, so the pool keeps
    /// its size and the core releases the holds. Nothing happens once the link is gone.
    fn drop(&mut self) {
        let Some(shared) = self.back.upgrade() else {
            return;
        };
        let replacement = Box::new(DirectReply {
            head: std::mem::take(&mut self.head),
            segments: std::mem::take(&mut self.segments),
            table: self.table.take(),
            back: std::mem::take(&mut self.back),
        });
        // The dropped box left the pool, so the queue has room; should it not, the replacement
        // is dropped without coming back here.
        if let Err(mut r) = shared.reply_free.push(replacement) {
            r.item.back = Weak::new();
        }
    }
}

impl DirectReply {
    /// The head: 12-byte protocol header, L1ID, fragment count, then the empty (flagged)
    /// fragments, as a DataReply's first frame.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The present fragments' page segments, in order (a fragment may span several): the words
    /// of each.
    pub fn segments(&self) -> impl Iterator<Item = &[u32]> + '_ {
        (0..self.segments.len()).map(|i| self.segment_words(i))
    }

    /// The words of segment `i` (empty past the end).
    fn segment_words(&self, i: usize) -> &[u32] {
        match (self.segments.get(i), &self.table) {
            // SAFETY: the store holds this segment's page (EventStore::hold_segments) from the
            // moment the core put it in this box until the box is back on the core thread
            // (DirectSource::drain_returned; a dropped box's replacement carries the segments
            // there): the page is not reused meanwhile and its fragment words do not change
            // (pages rule 2, which a store hold satisfies as a reference does), and the Arc
            // keeps the pages mapped. The range was a stored fragment's, in bounds of its page.
            (Some(s), Some(t)) => unsafe { t.slice(s.page, s.offset as usize, s.words as usize) },
            _ => &[],
        }
    }

    fn head_word(&self, i: usize) -> Option<u32> {
        let b = self.head.get(4 * i..4 * i + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Transaction id echoed from the request.
    pub fn transaction(&self) -> Option<u32> {
        self.head_word(1)
    }

    /// Payload bytes the reply declares (as on the wire).
    pub fn payload_bytes(&self) -> Option<u32> {
        self.head_word(2)
    }

    /// The event's L1ID.
    pub fn l1id(&self) -> Option<u32> {
        self.head_word(3)
    }

    /// Calls `f` with words 0, 4 and 6 (marker, source id, status) of each fragment, empty ones
    /// first, `None` for a fragment too short to have them. Stops at a fragment whose size
    /// word is unusable.
    pub fn for_each_fragment(&self, mut f: impl FnMut(Option<[u32; 3]>)) {
        // The fragment headers were written on another core: ask for all of them at once.
        if let Some(t) = &self.table {
            for s in &self.segments {
                t.prefetch(s.page, s.offset as usize);
            }
        }
        // Empty fragments, in the head after 20 bytes.
        let mut at = HEADER_BYTES + 8;
        while at < self.head.len() {
            let Some(size) = fragment_head(|i| self.head_word(at / 4 + i), &mut f) else {
                return;
            };
            if size == 0 {
                return;
            }
            at += size * 4;
        }
        // Present fragments, across the segments.
        let (mut seg, mut off) = (0usize, 0usize);
        while seg < self.segments.len() {
            let Some(size) = fragment_head(|k| self.seg_word(seg, off, k), &mut f) else {
                return;
            };
            if size == 0 {
                return;
            }
            // Advance `size` words.
            let mut rest = size;
            while rest > 0 && seg < self.segments.len() {
                let left = self.segment_words(seg).len() - off;
                if rest < left {
                    off += rest;
                    rest = 0;
                } else {
                    rest -= left;
                    seg += 1;
                    off = 0;
                }
            }
        }
    }
}

/// Reads one fragment's head through `w` (its word `k`) and gives `f` words 0, 4 and 6, or
/// `None` for a fragment too short to have them; returns the fragment's size word, `None` (after
/// telling `f`) when even that is missing.
fn fragment_head(
    w: impl Fn(usize) -> Option<u32>,
    f: &mut impl FnMut(Option<[u32; 3]>),
) -> Option<usize> {
    let Some(size) = w(1).map(|s| s as usize) else {
        f(None);
        return None;
    };
    f(match (w(0), w(4), w(6)) {
        (Some(a), Some(b), Some(c)) if size >= 7 => Some([a, b, c]),
        _ => None,
    });
    Some(size)
}

impl DirectReply {
    /// Word `k` after (`seg`, `off`) in the chain of segments.
    fn seg_word(&self, mut seg: usize, mut off: usize, mut k: usize) -> Option<u32> {
        loop {
            if seg >= self.segments.len() {
                return None;
            }
            let w = self.segment_words(seg);
            if off + k < w.len() {
                return w.get(off + k).copied();
            }
            k -= w.len().saturating_sub(off);
            seg += 1;
            off = 0;
        }
    }
}

/// Why the client could not send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DirectError {
    /// `capacity` DataRequests are unanswered already.
    #[error("direct link: {0} requests in flight already")]
    Full(usize),
    /// The server side is gone.
    #[error("direct link: the server is gone")]
    Closed,
    /// No request box came back within the wait limit (the core thread is stuck).
    #[error("direct link: no request box free after {0:?}")]
    Timeout(Duration),
}

/// What both ends of a direct link share: the four queues of request and reply boxes (see the
/// module docs) and which side has gone.
struct BoxQueues {
    request_free: BoundedQueue<Box<DirectRequest>>,
    requests: BoundedQueue<Box<DirectRequest>>,
    reply_free: BoundedQueue<Box<DirectReply>>,
    replies: BoundedQueue<Box<DirectReply>>,
    server_gone: AtomicBool,
    client_gone: AtomicBool,
}

/// Makes a link for up to `capacity` DataRequests in flight; request boxes hold `ids` ids and
/// reply boxes `segments` page segments and `head_bytes` head bytes without growing. Replies
/// can carry no fragment (no store): the link for tests of the link itself.
pub fn direct_link(
    capacity: usize,
    ids: usize,
    segments: usize,
    head_bytes: usize,
) -> (DirectSource, DirectClient) {
    direct_link_for(None, capacity, ids, segments, head_bytes)
}

/// [`direct_link`] for a store whose pages are `table`.
pub(crate) fn direct_link_for(
    table: Option<Arc<PageTable>>,
    capacity: usize,
    ids: usize,
    segments: usize,
    head_bytes: usize,
) -> (DirectSource, DirectClient) {
    let capacity = capacity.max(1);
    // Room for the clears that may be queued besides the requests.
    let requests = capacity + CLEAR_SLACK;
    let replies = capacity + 1;
    let shared = Arc::new(BoxQueues {
        request_free: BoundedQueue::new("ros.direct.request_free", requests, FullPolicy::Refuse),
        requests: BoundedQueue::new("ros.direct.requests", requests, FullPolicy::Refuse),
        reply_free: BoundedQueue::new("ros.direct.reply_free", replies, FullPolicy::Refuse),
        replies: BoundedQueue::new("ros.direct.replies", replies, FullPolicy::Refuse),
        server_gone: AtomicBool::new(false),
        client_gone: AtomicBool::new(false),
    });
    for _ in 0..requests {
        let _ = shared.request_free.push(Box::new(DirectRequest {
            kind: Kind::Data,
            transaction: 0,
            l1id: 0,
            ids: Vec::with_capacity(ids),
        }));
    }
    for _ in 0..replies {
        let _ = shared.reply_free.push(Box::new(DirectReply {
            head: Vec::with_capacity(head_bytes),
            segments: Vec::with_capacity(segments),
            table: table.clone(),
            back: Arc::downgrade(&shared),
        }));
    }
    (
        DirectSource {
            shared: Arc::clone(&shared),
            table: table.clone(),
            spare: Vec::with_capacity(replies),
        },
        DirectClient {
            shared,
            capacity,
            in_flight: 0,
            wait_limit: Duration::from_secs(10),
        },
    )
}

/// Request boxes beyond the DataRequest bound, for clears.
const CLEAR_SLACK: usize = 16;

/// The core thread's end of a direct link (a [`RequestSource`]).
pub struct DirectSource {
    shared: Arc<BoxQueues>,
    /// The store's pages the replies refer to (none: replies carry no fragment).
    table: Option<Arc<PageTable>>,
    /// Reply boxes taken back from the client, emptied on this thread; used last in, first out
    /// (the box most likely still in cache). Boxes, because they travel through the queues.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<DirectReply>>,
}

impl DirectSource {
    /// Takes back the boxes the client has read (or dropped) and releases what they held, here
    /// on the core thread; once the client is gone, likewise the replies it never read.
    #[inline]
    fn drain_returned(&mut self, store: &mut EventStore) {
        if !self.is_for(store) {
            return;
        }
        while let Some(mut r) = self.shared.reply_free.pop() {
            store.release_held(r.segments.drain(..));
            self.spare.push(r);
        }
        if self.shared.client_gone.load(Ordering::Acquire) {
            while let Some(mut r) = self.shared.replies.pop() {
                store.release_held(r.segments.drain(..));
                self.spare.push(r);
            }
        }
    }

    /// True when `store` is the one whose pages this link's replies refer to: held segments
    /// are only ever taken from and released to that store.
    fn is_for(&self, store: &EventStore) -> bool {
        self.table
            .as_ref()
            .is_some_and(|t| Arc::ptr_eq(t, store.table()))
    }

    /// A free reply box (none when the client is gone or breaks its bound).
    fn take_box(&mut self, store: &mut EventStore) -> Option<Box<DirectReply>> {
        if self.spare.is_empty() {
            self.drain_returned(store);
        }
        let gone = self.shared.client_gone.load(Ordering::Relaxed);
        self.spare.pop().filter(|_| !gone)
    }
}

impl std::fmt::Debug for DirectSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectSource").finish_non_exhaustive()
    }
}

impl Drop for DirectSource {
    fn drop(&mut self) {
        self.shared.server_gone.store(true, Ordering::Release);
    }
}

impl RequestSource for DirectSource {
    type Buffer = Option<Box<DirectRequest>>;

    #[inline]
    fn try_recv(&mut self, buf: &mut Self::Buffer) -> bool {
        if let Some(b) = buf.take() {
            // The pool is as large as the queue: cannot fail.
            let _ = self.shared.request_free.push(b);
        }
        match self.shared.requests.pop() {
            Some(b) => {
                *buf = Some(b);
                true
            }
            None => false,
        }
    }

    /// The core thread's idle wait: [`BackoffSpec::CORE_IDLE`] (a few yields, then 50 us
    /// sleeps): an idle core thread that yields for long takes a shared core's time from the
    /// node's input threads.
    fn recv_timeout(&mut self, buf: &mut Self::Buffer, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut backoff = Backoff::new(BackoffSpec::CORE_IDLE);
        loop {
            if self.try_recv(buf) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            backoff.wait();
        }
    }

    fn view(buf: &Self::Buffer) -> Incoming<'_> {
        let Some(r) = buf.as_deref() else {
            return Incoming::Bad;
        };
        match r.kind {
            Kind::Data => Incoming::DataRequest {
                peer: &[],
                transaction: r.transaction,
                l1id: r.l1id,
                robs: Ids::Slice(&r.ids),
            },
            Kind::Clear => Incoming::Clear {
                sequence: r.transaction,
                l1ids: Ids::Slice(&r.ids),
            },
        }
    }

    /// The core uses [`RequestSource::reply_held`] for this source; this form carries only
    /// replies without present fragments (a link without a store) and refuses others.
    fn reply(
        &mut self,
        _peer: &[u8],
        head: &[u8],
        segments: &mut Vec<PageRef>,
    ) -> Result<(), ReplyRefused> {
        if !segments.is_empty() {
            segments.clear();
            return Err(ReplyRefused::Gone);
        }
        let Some(mut r) = self.spare.pop().or_else(|| self.shared.reply_free.pop()) else {
            return Err(ReplyRefused::Gone);
        };
        if !r.segments.is_empty() {
            // A box of a held reply not yet released (only `maintain` with the store can):
            // leave it for that.
            let _ = self.shared.reply_free.push(r);
            return Err(ReplyRefused::Gone);
        }
        if self.shared.client_gone.load(Ordering::Relaxed) {
            self.spare.push(r);
            return Err(ReplyRefused::Gone);
        }
        r.head.clear();
        r.head.extend_from_slice(head);
        // The pool is as large as the queue: cannot fail.
        let _ = self.shared.replies.push(r);
        Ok(())
    }

    fn endpoint(&self) -> String {
        "direct".into()
    }

    fn holds_segments(&self) -> bool {
        self.table.is_some()
    }

    #[inline]
    fn reply_held(
        &mut self,
        _peer: &[u8],
        head: &[u8],
        segments: &mut Vec<HeldSegment>,
        store: &mut EventStore,
    ) -> Result<(), ReplyRefused> {
        // Segments of another store could not be read or released through this link.
        if !self.is_for(store) {
            return Err(ReplyRefused::Gone);
        }
        let Some(mut r) = self.take_box(store) else {
            return Err(ReplyRefused::Gone);
        };
        r.head.clear();
        r.head.extend_from_slice(head);
        // Emptied when it came back (drain_returned).
        r.segments.append(segments);
        // The pool is as large as the queue: cannot fail.
        let _ = self.shared.replies.push(r);
        Ok(())
    }

    fn maintain(&mut self, store: &mut EventStore) {
        self.drain_returned(store);
    }
}

/// The client's end of a direct link: sends requests and clears, receives replies.
pub struct DirectClient {
    shared: Arc<BoxQueues>,
    capacity: usize,
    in_flight: usize,
    wait_limit: Duration,
}

impl std::fmt::Debug for DirectClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectClient")
            .field("capacity", &self.capacity)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl Drop for DirectClient {
    fn drop(&mut self) {
        self.shared.client_gone.store(true, Ordering::Release);
    }
}

impl DirectClient {
    /// DataRequests that may be unanswered at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// DataRequests sent and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn take_box(&self) -> Result<Box<DirectRequest>, DirectError> {
        // Waiting for the core thread to free a box: [`BackoffSpec::HANDOVER`], spin, then
        // yield for a few hundred microseconds (longer than a reply takes under load: a sleep
        // costs at least 50 µs plus the kernel's timer slack), then 50 µs sleeps. The core
        // thread's own idle wait is shorter (`recv_timeout`, [`BackoffSpec::CORE_IDLE`]).
        let mut backoff = Backoff::new(BackoffSpec::HANDOVER);
        let mut since: Option<Instant> = None;
        loop {
            if let Some(b) = self.shared.request_free.pop() {
                return Ok(b);
            }
            if self.shared.server_gone.load(Ordering::Acquire) {
                return Err(DirectError::Closed);
            }
            let t0 = *since.get_or_insert_with(Instant::now);
            if t0.elapsed() > self.wait_limit {
                return Err(DirectError::Timeout(self.wait_limit));
            }
            backoff.wait();
        }
    }

    /// Sends a DataRequest for `robs` (empty: every ROB) of `l1id`.
    pub fn send_request(
        &mut self,
        transaction: u32,
        l1id: u32,
        robs: &[u32],
    ) -> Result<(), DirectError> {
        if self.in_flight >= self.capacity {
            return Err(DirectError::Full(self.capacity));
        }
        let mut b = self.take_box()?;
        b.kind = Kind::Data;
        b.transaction = transaction;
        b.l1id = l1id;
        b.ids.clear();
        b.ids.extend_from_slice(robs);
        let _ = self.shared.requests.push(b);
        self.in_flight += 1;
        Ok(())
    }

    /// Sends a Clear of `l1ids` with sequence number `sequence`.
    pub fn send_clear(&mut self, sequence: u32, l1ids: &[u32]) -> Result<(), DirectError> {
        let mut b = self.take_box()?;
        b.kind = Kind::Clear;
        b.transaction = sequence;
        b.l1id = 0;
        b.ids.clear();
        b.ids.extend_from_slice(l1ids);
        let _ = self.shared.requests.push(b);
        Ok(())
    }

    /// Receives a reply into `slot` if one is ready. The reply held in `slot` before is given
    /// back first, with its segments: the core thread releases them.
    #[inline]
    pub fn try_recv(&mut self, slot: &mut Option<Box<DirectReply>>) -> bool {
        if let Some(r) = slot.take() {
            let _ = self.shared.reply_free.push(r);
        }
        match self.shared.replies.pop() {
            Some(r) => {
                *slot = Some(r);
                self.in_flight = self.in_flight.saturating_sub(1);
                true
            }
            None => false,
        }
    }

    /// As [`DirectClient::try_recv`], waiting up to `timeout`.
    pub fn recv_timeout(&mut self, slot: &mut Option<Box<DirectReply>>, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        // A reply may wait for data the node has not got yet: the client soon sleeps, so
        // that it leaves the cores to the node it waits for.
        let mut backoff = Backoff::new(BackoffSpec::CLIENT);
        loop {
            if self.try_recv(slot) {
                return true;
            }
            if Instant::now() >= deadline || self.shared.server_gone.load(Ordering::Acquire) {
                return self.try_recv(slot);
            }
            backoff.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreConfig;
    use rodeo_format::fragment::{RodBuilder, SourceId, Status};
    use rodeo_memory::{PagePool, PagePoolConfig};

    /// Held segments: the client reads the stored words in place; a box given back or
    /// dropped releases its holds on the core thread, and every page comes back after the
    /// clear.
    #[test]
    fn held_segments_are_read_in_place_and_released_returned_or_dropped() {
        let pool = PagePool::new(PagePoolConfig {
            page_bytes: 256,
            pages: 8,
            ..PagePoolConfig::default()
        })
        .unwrap();
        let mut store = EventStore::new(&pool, &StoreConfig::with_channels(1, 5, 8)).unwrap();
        let mut rods = Vec::new();
        for l1id in 0..3u32 {
            let mut rod = Vec::new();
            let data: Vec<u32> = (0..90).map(|i| l1id * 1000 + i).collect();
            RodBuilder {
                source_id: SourceId(5),
                extended_l1id: l1id,
                status: &[0],
                data: &[&data],
                ..RodBuilder::default()
            }
            .write_vec(&mut rod)
            .unwrap();
            store.ingest(0, &rod, Status::OK).unwrap();
            rods.push(rod);
        }
        let (mut source, mut client) =
            direct_link_for(Some(Arc::clone(store.table())), 4, 4, 4, 64);
        let mut slot = None;
        for l1id in 0..3u32 {
            client.send_request(l1id, l1id, &[5]).unwrap();
            let mut held = Vec::new();
            assert!(store.hold_segments(0, l1id, &mut held));
            source
                .reply_held(&[], &[0u8; 20], &mut held, &mut store)
                .unwrap();
            assert!(held.is_empty(), "the box took the segments");
            // Receiving gives the previous box back.
            assert!(client.try_recv(&mut slot));
            let words: Vec<u32> = slot
                .as_ref()
                .unwrap()
                .segments()
                .flat_map(|s| s.iter().copied())
                .collect();
            assert_eq!(words, store.fragment_copy(0, l1id).unwrap());
            assert_eq!(&words[8..], &rods[l1id as usize][..]);
            source.maintain(&mut store);
        }
        // The last box is dropped, not given back: a replacement brings its holds back, and
        // the pool keeps its size (five replies through a link of four boxes' capacity + 1).
        drop(slot);
        source.maintain(&mut store);
        let mut slot = None;
        for t in 0..5u32 {
            client.send_request(t, 0, &[5]).unwrap();
            let mut held = Vec::new();
            assert!(store.hold_segments(0, 0, &mut held));
            source
                .reply_held(&[], &[0u8; 20], &mut held, &mut store)
                .unwrap();
            assert!(client.try_recv(&mut slot));
            drop(slot.take());
            source.maintain(&mut store);
        }
        // Segments of another store are refused (and left to the caller to release).
        let pool2 = PagePool::new(PagePoolConfig {
            page_bytes: 256,
            pages: 2,
            ..PagePoolConfig::default()
        })
        .unwrap();
        let mut other = EventStore::new(&pool2, &StoreConfig::with_channels(1, 5, 2)).unwrap();
        other.ingest(0, &rods[0], Status::OK).unwrap();
        let mut held = Vec::new();
        assert!(other.hold_segments(0, 0, &mut held));
        assert_eq!(
            source.reply_held(&[], &[0u8; 20], &mut held, &mut other),
            Err(ReplyRefused::Gone)
        );
        other.release_held(held.drain(..));
        other.clear([0u32]);
        assert_eq!(other.settle(0), 0);
        store.clear(0..3u32);
        assert_eq!(store.settle(0), 0, "every page back");
    }

    #[test]
    fn requests_in_flight_are_bounded_and_a_reply_frees_one() {
        let (mut source, mut client) = direct_link(2, 4, 4, 64);
        client.send_request(1, 10, &[7, 8]).unwrap();
        client.send_request(2, 11, &[]).unwrap();
        assert_eq!(client.send_request(3, 12, &[]), Err(DirectError::Full(2)));
        let mut buf = None;
        assert!(source.try_recv(&mut buf));
        match DirectSource::view(&buf) {
            Incoming::DataRequest {
                transaction,
                l1id,
                robs,
                ..
            } => {
                assert_eq!((transaction, l1id, robs.len()), (1, 10, 2));
            }
            other => panic!("not a request: {other:?}"),
        }
        let head = [0u8; 20];
        source.reply(&[], &head, &mut Vec::new()).unwrap();
        let mut slot = None;
        assert!(client.try_recv(&mut slot));
        assert_eq!(client.in_flight(), 1);
        client.send_request(3, 12, &[]).unwrap();
        // Clears do not count against the bound.
        client.send_clear(0, &[10, 11]).unwrap();
        // Requests 2 and 3, then the clear, in order.
        assert!(source.try_recv(&mut buf));
        assert!(source.try_recv(&mut buf));
        assert!(source.try_recv(&mut buf));
        assert!(matches!(
            DirectSource::view(&buf),
            Incoming::Clear { sequence: 0, l1ids } if l1ids.len() == 2
        ));
        assert!(!source.try_recv(&mut buf));
    }

    #[test]
    fn a_gone_server_closes_the_client_and_a_gone_client_refuses_replies() {
        let (source, mut client) = direct_link(1, 4, 4, 64);
        drop(source);
        // The free boxes are used up by unread clears, then the client learns the server left.
        let mut sent = 0;
        let err = loop {
            match client.send_clear(sent, &[1]) {
                Ok(()) => sent += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(err, DirectError::Closed);
        assert_eq!(sent as usize, 1 + CLEAR_SLACK);

        let (mut source, client) = direct_link(1, 4, 4, 64);
        drop(client);
        assert_eq!(
            source.reply(&[], &[0u8; 20], &mut Vec::new()),
            Err(ReplyRefused::Gone)
        );
    }
}
