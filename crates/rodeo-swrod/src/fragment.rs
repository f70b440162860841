//! Built fragments and the consumer interface.
//!
//! # Layout: N memory blocks joined by reference
//!
//! Each receiving thread writes its E-links' packets for one L1ID into its own memory block (a
//! pool [`Chunk`]). A [`Fragment`] owns those blocks, in thread order, and is never copied into
//! one buffer: its words are the [`Fragment::pieces`], in order,
//!
//! ```text
//! header  = ROB header (8 words) + ROD header (9 words)   prefix of one block
//! data    = packets of thread 0, thread 1, ...              one slice per non-empty block
//! trailer = ROD status block + ROD trailer (3 words)      just after one block's data
//! ```
//!
//! Every block keeps [`HEADER_WORDS`] free at its start and room for the trailer after its data,
//! so the thread that completes the fragment writes header and trailer in place, into its own
//! block when it has one (it then only reads the other threads' blocks). Each packet in the
//! data is preceded by a 2-word packet header: word 0 bits 15..0 the length in bytes including
//! this header, bits 31..16 the packet status (the reassembly [`ChunkFlags`](rodeo_format::felix::ChunkFlags),
//! 0 = good); word 1 the E-link. The ROD status block (after the data) is the status word then the
//! E-links whose packet did not arrive; the ROB header repeats the status word.
//!
//! Dropping a fragment gives its blocks back to the pool. A sink that does not keep fragments
//! (counting, checking, copying them out) says so in [`FragmentSink::inspect`]: the builder
//! then keeps the fragment and returns its blocks through its per-thread pool caches, in
//! batches, which costs no shared atomic per block.

use rodeo_format::fragment::Status;
use rodeo_memory::Chunk;

/// Receiving threads a builder supports at most (the blocks of a fragment are held inline).
pub const MAX_THREADS: usize = 8;
/// Words of the ROB header (no ROB status beyond one word, no checksum).
pub const ROB_HEADER_WORDS: usize = 8;
/// Words of the fragment header: ROB header and ROD header.
pub const HEADER_WORDS: usize = ROB_HEADER_WORDS + rodeo_format::fragment::ROD_HEADER_WORDS;
/// Words of the 2-word packet header before each packet in the data.
pub const PACKET_HEADER_WORDS: usize = 2;

/// What a sink tells the builder after taking a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// Stop the builder: every thread stops reading, builds what it holds, and returns.
    Stop,
}

/// The consumer of built fragments (the event store plugs in here).
///
/// One required method, [`fragment`](FragmentSink::fragment), called on the receiving thread
/// that completed the fragment: up to N threads call it concurrently, so it takes `&self` and
/// must be `Sync`. It owns the fragment from then on; keeping it keeps its pool blocks, which is
/// how a slow consumer applies back-pressure (the builder waits for the pool, counted in
/// `pool_waits`). It must return quickly: the calling thread reads no links meanwhile.
///
/// The hooks have defaults that do nothing.
pub trait FragmentSink<'p>: Sync {
    /// Takes one built fragment.
    fn fragment(&self, fragment: Fragment<'p>) -> Flow;

    /// Looks at one built fragment before it is handed over: a sink that does not keep it
    /// (it counts, checks or copies fragments out) returns `Some(flow)`, and the builder then
    /// keeps the fragment and gives its blocks back to the calling receiving thread's pool
    /// caches, each to a cache of its own pool, which return them to their pools in batches
    /// (the lazy return of the ATLAS SW ROD's memory pool) rather than one shared free per
    /// block. `None` (the default) asks for the fragment itself, through
    /// [`fragment`](FragmentSink::fragment).
    fn inspect(&self, _fragment: &Fragment<'p>) -> Option<Flow> {
        None
    }

    /// Looks at a run of built fragments of one ROB, in the order the calling thread assembled
    /// them (what it completed since it last handed a run over, at most 64), as
    /// [`inspect`](FragmentSink::inspect) does at one: `Some(flow)` when the sink took them
    /// all in (the builder keeps them and recycles their blocks), `None` (the default) to
    /// take them one by one through `inspect` or `fragment`. A sink with a cost per call (a
    /// lock, a memory fence) pays it once per run.
    fn inspect_run(&self, _fragments: &[Fragment<'p>]) -> Option<Flow> {
        None
    }

    /// Whether the sink can take the fragments one more superpage may complete without
    /// waiting. A [`BuilderPool`](crate::BuilderPool) thread reads a ROB's channels only while
    /// its sink has room, so a sink that would wait holds back its own ROB (whose card then
    /// stalls) and never the other ROBs of the thread. The default: always.
    fn has_room(&self) -> bool {
        true
    }

    /// Called by a receiving thread after each superpage it read (once the fragments it
    /// completed have been handed over) and on its idle turns: a sink that gathers fragments
    /// into batches hands its open batch on now, so no fragment waits for more input. A sink
    /// that wraps another must forward it (and [`has_room`](FragmentSink::has_room) and
    /// [`finish`](FragmentSink::finish)). The default: nothing.
    fn flush(&self) {}

    /// Called once before the receiving threads start, with their number.
    fn begin(&self, _threads: usize) {}

    /// Called once after every thread has finished, with the run's counters.
    fn finish(&self, _counters: &super::SwRodCounters) {}
}

/// A sink that counts fragments, packets, words and flagged fragments, then drops them.
///
/// Counts are kept per receiving thread (one cache line each, by [`Fragment::thread`]), so that
/// the threads never contend on a counter; [`counts`](CountingSink::counts) sums them.
#[derive(Debug, Default)]
pub struct CountingSink {
    shards: [Shard; MAX_THREADS],
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard([std::sync::atomic::AtomicU64; 4]);

/// What a [`CountingSink`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkCounts {
    /// Fragments taken.
    pub fragments: u64,
    /// Words of those fragments.
    pub words: u64,
    /// Packets in them.
    pub packets: u64,
    /// Fragments with a non-zero status.
    pub flagged: u64,
}

impl CountingSink {
    /// A sink with zero counts.
    pub fn new() -> CountingSink {
        CountingSink::default()
    }

    /// The counts so far.
    pub fn counts(&self) -> SinkCounts {
        use std::sync::atomic::Ordering::Relaxed;
        let mut c = SinkCounts::default();
        for s in &self.shards {
            c.fragments += s.0[0].load(Relaxed);
            c.words += s.0[1].load(Relaxed);
            c.packets += s.0[2].load(Relaxed);
            c.flagged += s.0[3].load(Relaxed);
        }
        c
    }

    fn count(&self, fragment: &Fragment<'_>) {
        use std::sync::atomic::Ordering::Relaxed;
        // Only the thread that built the fragment writes its shard: loads and stores suffice.
        let s = &self.shards[fragment.thread() % MAX_THREADS].0;
        let add = |i: usize, v: u64| s[i].store(s[i].load(Relaxed) + v, Relaxed);
        add(0, 1);
        add(1, fragment.size_words() as u64);
        add(2, u64::from(fragment.packets()));
        add(3, u64::from(!fragment.status().is_ok()));
    }
}

impl<'p> FragmentSink<'p> for CountingSink {
    fn fragment(&self, fragment: Fragment<'p>) -> Flow {
        self.count(&fragment);
        Flow::Continue
    }

    /// Counts the fragment without keeping it: its blocks go back to the builder's caches.
    fn inspect(&self, fragment: &Fragment<'p>) -> Option<Flow> {
        self.count(fragment);
        Some(Flow::Continue)
    }
}

/// A built ROB fragment: the blocks of the receiving threads, joined by reference.
/// See the module docs for the layout.
pub struct Fragment<'p> {
    pub(crate) blocks: [Option<Chunk<'p>>; MAX_THREADS],
    /// End of each block's data, in words (data starts at [`HEADER_WORDS`]).
    pub(crate) ends: [u32; MAX_THREADS],
    /// The block holding the header.
    pub(crate) first: usize,
    /// The block holding the trailer.
    pub(crate) last: usize,
    pub(crate) trailer_words: usize,
    pub(crate) data_words: usize,
    pub(crate) l1id: u32,
    pub(crate) bcid: u16,
    pub(crate) status: Status,
    pub(crate) packets: u32,
    pub(crate) missing: u32,
    pub(crate) thread: usize,
}

impl std::fmt::Debug for Fragment<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fragment")
            .field("l1id", &format_args!("{:#010x}", self.l1id))
            .field("bcid", &self.bcid)
            .field("status", &self.status)
            .field("packets", &self.packets)
            .field("missing", &self.missing)
            .field("size_words", &self.size_words())
            .finish()
    }
}

impl<'p> Fragment<'p> {
    /// Extended L1ID.
    pub fn l1id(&self) -> u32 {
        self.l1id
    }

    /// BCID of the fragment (of its first packet).
    pub fn bcid(&self) -> u16 {
        self.bcid
    }

    /// The status word (ROB and ROD).
    pub fn status(&self) -> Status {
        self.status
    }

    /// The receiving thread that completed the fragment (and calls the sink with it), from 0.
    pub fn thread(&self) -> usize {
        self.thread
    }

    /// Packets in the fragment.
    pub fn packets(&self) -> u32 {
        self.packets
    }

    /// Size of the whole ROB fragment in words.
    pub fn size_words(&self) -> usize {
        HEADER_WORDS + self.data_words + self.trailer_words
    }

    /// The E-links whose packet is missing, from the ROD status block.
    pub fn missing_elinks(&self) -> &[u32] {
        let t = self.trailer();
        t.get(1..1 + self.missing as usize).unwrap_or(&[])
    }

    fn block_words(&self, i: usize) -> &[u32] {
        self.blocks[i].as_ref().map(|c| c.words()).unwrap_or(&[])
    }

    /// The header piece (ROB and ROD headers).
    pub fn header(&self) -> &[u32] {
        self.block_words(self.first)
            .get(..HEADER_WORDS)
            .unwrap_or(&[])
    }

    /// The trailer piece (ROD status block and ROD trailer).
    pub fn trailer(&self) -> &[u32] {
        let end = self.ends[self.last] as usize;
        self.block_words(self.last)
            .get(end..end + self.trailer_words)
            .unwrap_or(&[])
    }

    /// The data piece of receiving thread `thread` (empty if it had no packet).
    pub fn data(&self, thread: usize) -> &[u32] {
        if thread >= MAX_THREADS {
            return &[];
        }
        let end = self.ends[thread] as usize;
        self.block_words(thread)
            .get(HEADER_WORDS..end)
            .unwrap_or(&[])
    }

    /// The fragment's words as pieces to write back to back (scatter-gather): header, each
    /// thread's data, trailer. Empty data pieces are skipped.
    pub fn pieces(&self) -> impl Iterator<Item = &[u32]> + '_ {
        std::iter::once(self.header())
            .chain(
                (0..MAX_THREADS)
                    .map(|t| self.data(t))
                    .filter(|d| !d.is_empty()),
            )
            .chain(std::iter::once(self.trailer()))
    }

    /// A contiguous copy of the fragment (for tests and tools; the data path uses
    /// [`pieces`](Fragment::pieces)).
    pub fn to_vec(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.size_words());
        for p in self.pieces() {
            v.extend_from_slice(p);
        }
        v
    }
}
