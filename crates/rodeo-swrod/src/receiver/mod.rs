//! The per-thread aggregation: window slots, packet placement, and closing events.
//!
//! # The packet path
//!
//! [`Aggregator::packet`] is inlined into the block walker (`walker.rs`). The decoder gives the
//! L1ID; its raw difference from the oldest open event's extended L1ID gives the event number
//! whenever no L1ID wrap or ECR lies in between (`fast_span`, recomputed once per event;
//! anything else goes to the out-of-line `seq_slow`), and its low bits the window slot (no
//! hashing, no division). A packet then touches one [`HotSlot`] (32 bytes, two per cache line):
//! the arrival bit of its E-link (duplicates), the order check, the BCID check, and the write
//! pointer and room left in the slot's memory block, where the packet is copied once, with
//! fixed-size moves, behind its 2-word packet header. Whatever the fast path does not cover
//! (the first packet of an event, which opens the slot and takes a block; a duplicate; a full
//! block; a flagged packet; L1ID wrap, late packets and window moves) is a `#[cold]` function.
//! The per-block constants of the E-link (its local index, arrival bit) come in a [`Lane`].
//!
//! Arrival bits: bit `i` of `HotSlot::bits` for local E-links `i < 63`, so that a thread of up
//! to 63 E-links (120 E-links over two threads) keeps all of a slot's state in the hot slot;
//! local E-links from 63 on have their bits in a side array (`hi_bits`, a few words per slot)
//! and set bit 63 of `bits`. The packets of a slot are in E-link order as long as no packet
//! finds a higher bit already set (`bits > bit`: the mark counts as higher than every low
//! E-link) and, among the E-links from 63 on, each is above the last one placed (`last_hi`).
//! An event is complete when its bits equal the full mask, a comparison (no population count:
//! this x86-64 baseline has no `popcnt`), tested after each block.
//!
//! # Events, in order
//!
//! A thread closes ("finalizes") its part of events strictly in event order, at `base`: when
//! every one of its E-links has delivered (the normal case, checked after each block), when the
//! base event is older than the timeout, when a packet arrives a whole window ahead (the window
//! moves past the base), or at the end of the run. A packet more than `MAX_WINDOW_MOVE`
//! events ahead does not move the window: one flipped bit of an ECR or high L1ID bit would
//! close a billion empty events, one at a time, and lose the ROB's real ones as late; it is
//! counted corrupt and dropped. Lost data up to that distance (about ten seconds at 100 kHz)
//! still moves the window.
//!
//! # Ownership
//!
//! Everything here belongs to one thread: the window's slots and their blocks, the arrival
//! bits, one pool cache per block pool and the counters (plain `u64`s, published to the
//! builder's shared mirror once per superpage). The shared state a thread touches: its own ring
//! cell in [`PartExchange`] once per event (read by the assembler later), its completion mark and the
//! other marks every [`PUBLISH_EVERY`] events, the other threads' ring cells of the events it
//! assembles, the pools when a cache runs empty or full (a batch of 32 blocks at a time), and
//! the pools' starvation flags when it publishes. Nothing shared is written per packet. The
//! write pointer of an open slot points into the slot's own block, which the slot owns until
//! the event is closed.
//!
//! # Returning blocks
//!
//! When the sink does not keep a fragment ([`FragmentSink::inspect`]), the assembling thread
//! puts each of its blocks into its own cache of that block's pool: its own blocks are reused
//! from there without touching the pool, and another thread's blocks go back to their pool in
//! batches of 32 (one CAS), which the owner takes back with one CAS and one cache line, rather
//! than one shared free per block and a walk of links written by another core. A thread that
//! waits for a block flags its pool (`PartExchange::set_starved`), and every thread flushes its cache
//! of that pool when it next publishes (it publishes while it waits, too).
//!
//! # Layout
//!
//! - this module: the constants, [`Lane`], [`receiver_backoff`], the [`Aggregator`] (one per thread)
//!   and its construction;
//! - `slot`: a window slot's state, [`HotSlot`] and [`ColdSlot`], and the packet copy
//!   ([`copy_bytes`]);
//! - `input`: the packet path, filing a packet into its window slot ([`Aggregator::packet`]
//!   and its cold paths: opening a slot, the slow event number, taking blocks);
//! - `close`: closing this thread's part of events in order at the base (completion,
//!   timeouts, window moves, end of run) into the shared ring;
//! - `assemble`: publishing the thread's mark and assembling complete fragments from every
//!   thread's parts, handing them to the sink and recycling their blocks.

mod assemble;
mod close;
mod input;
mod slot;

use rodeo_memory::{ChunkPool, PoolCache};

use crate::config::Plan;
use crate::counters::SwRodCounters;
use crate::decoder::PacketDecoder;
use crate::exchange::PartExchange;
use crate::fragment::{Fragment, FragmentSink};

pub(crate) use slot::copy_bytes;
use slot::{ColdSlot, HotSlot};

/// A thread publishes its mark (and assembles its share) at least every this many events, so
/// that fragments are assembled while their blocks are still in the caches.
pub(crate) const PUBLISH_EVERY: u64 = 16;
/// Fragments a thread assembles at most before it hands them to the sink as one run
/// ([`FragmentSink::inspect_run`]).
const RUN_FRAGMENTS: usize = 64;
/// Local E-links whose arrival bit lives in the hot slot.
const LOW_ELINKS: usize = 63;
/// Bit 63 of [`HotSlot::bits`]: a packet of a local E-link from [`LOW_ELINKS`] on arrived.
const HI_MARK: u64 = 1 << 63;
/// Bytes of the packet header in a block (length and status word, E-link word).
const PACKET_HEADER_BYTES: usize = 8;
/// The longest packet (with its header) a packet header can describe.
const MAX_NEED: usize = 0xFFFF;
/// Events a packet may be ahead of the window and still move it (see "Events, in order"):
/// 2^20, about ten seconds of a link at 100 kHz; further is a damaged L1ID.
const MAX_WINDOW_MOVE: u64 = 1 << 20;

/// The receivers' waits: rodeo's one [`Backoff`](rodeo_memory::Backoff), with the receivers'
/// spec ([`BackoffSpec::RECEIVER`](rodeo_memory::BackoffSpec::RECEIVER): spin, yield, then
/// 50 us sleeps).
pub(crate) fn receiver_backoff() -> rodeo_memory::Backoff {
    rodeo_memory::Backoff::new(rodeo_memory::BackoffSpec::RECEIVER)
}

/// The per-block constants of the E-link whose packets the walker places.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lane {
    /// Local index of the E-link in this thread.
    pub(crate) local: usize,
    /// The E-link number.
    pub(crate) elink: u16,
    /// Its arrival bit in [`HotSlot::bits`] ([`HI_MARK`] from local E-link 63 on).
    bit: u64,
    /// From local E-link 63 on: its word in a slot's `hi_bits` and its bit there.
    hi_word: usize,
    hi_bit: u64,
}

impl Lane {
    /// Whether the arrival bit is in the hot slot (local E-links below 63).
    pub(crate) fn low(&self) -> bool {
        self.local < LOW_ELINKS
    }
}

/// Everything a packet touches (split from the reassemblers so both can be borrowed at once).
pub(crate) struct Aggregator<'b, 'p, D, K> {
    pub(crate) t: usize,
    pub(crate) plan: &'b Plan,
    shared: &'b PartExchange<'p>,
    decoder: &'b D,
    sink: &'b K,
    /// One cache per block pool in use (pool `t % pools` serves thread `t`): allocations come
    /// from `caches[own]`; blocks of fragments the sink hands back go to their own pool's
    /// cache, which returns them to that pool in batches.
    caches: Vec<PoolCache<'p>>,
    own: usize,
    pub(crate) elinks: &'b [u16],
    nlocal: u32,
    // Copies of the plan's numbers the packet path uses (no pointer chase per packet).
    wrap: u64,
    modulus: u64,
    window: u64,
    /// `window - 1`: the slot of event `seq` is `seq & mask`.
    mask: usize,
    limit: usize,
    /// Oldest open event (run-local number) and its number modulo the L1ID cycle.
    base: u64,
    base_mod: u64,
    /// The base event's raw extended L1ID, and how many events from the base on share its ECR
    /// without an L1ID wrap (at most the window): the packet path's fast span.
    base_raw: u32,
    base_l1: u64,
    fast_span: u32,
    hot: Vec<HotSlot>,
    cold: Vec<ColdSlot<'p>>,
    /// Arrival bits of local E-links from 63 on: `hi_words` per slot.
    hi_bits: Vec<u64>,
    hi_words: usize,
    /// `HotSlot::bits` of a slot whose every E-link arrived, and the same for each `hi_bits`
    /// word.
    low_full: u64,
    hi_full: Vec<u64>,
    open_events: usize,
    waiting_since: u64,
    /// The base event with no packet here that another thread has published, and when that
    /// was first seen (the timeout of such an event runs from then).
    behind: (u64, u64),
    /// The last `released` read: ring cells below it plus the window are free.
    released_seen: u64,
    /// Every event of this thread's assembly groups below this is assembled.
    cursor: u64,
    /// Inside `publish`'s assembly (a nested publish only stores the mark).
    assembling: bool,
    /// The last mark published.
    pub(crate) published: u64,
    pub(crate) now: u64,
    /// One past the newest event seen.
    end_seen: u64,
    pub(crate) c: SwRodCounters,
    missing: Vec<u32>,
    order: Vec<(u32, u32, u32)>,
    scratch: Vec<u8>,
    /// Fragments assembled since the last hand-over to the sink (at most [`RUN_FRAGMENTS`]),
    /// handed over as one run at the end of each publication (see `assemble`).
    run: Vec<Fragment<'p>>,
}

impl<'b, 'p, D: PacketDecoder, K: FragmentSink<'p>> Aggregator<'b, 'p, D, K> {
    pub(crate) fn new(
        t: usize,
        plan: &'b Plan,
        shared: &'b PartExchange<'p>,
        decoder: &'b D,
        sink: &'b K,
        pools: &'p [ChunkPool],
    ) -> Self {
        let elinks = &plan.thread_elinks[t][..];
        let nlocal = elinks.len();
        let hi = nlocal.saturating_sub(LOW_ELINKS);
        let hi_words = hi.div_ceil(64);
        let low_full = if hi > 0 {
            u64::MAX
        } else {
            (1u64 << nlocal) - 1
        };
        let hi_full = (0..hi_words)
            .map(|w| {
                let n = (hi - 64 * w).min(64);
                if n == 64 {
                    u64::MAX
                } else {
                    (1u64 << n) - 1
                }
            })
            .collect();
        let window = plan.window as usize;
        let mut agg = Aggregator {
            t,
            plan,
            shared,
            decoder,
            sink,
            caches: pools
                .iter()
                .take(plan.threads())
                .map(ChunkPool::cache)
                .collect(),
            own: t % pools.len().clamp(1, plan.threads()),
            elinks,
            nlocal: nlocal as u32,
            wrap: plan.wrap,
            modulus: plan.modulus,
            window: plan.window,
            mask: window - 1,
            limit: plan.data_limit_bytes,
            base: 0,
            base_mod: plan.first_mod,
            base_raw: 0,
            base_l1: 0,
            fast_span: 0,
            hot: (0..window).map(|_| HotSlot::CLOSED).collect(),
            cold: (0..window).map(|_| ColdSlot::closed()).collect(),
            hi_bits: vec![0; window * hi_words],
            hi_words,
            low_full,
            hi_full,
            open_events: 0,
            waiting_since: 0,
            behind: (u64::MAX, 0),
            released_seen: 0,
            cursor: 0,
            assembling: false,
            published: 0,
            now: 0,
            end_seen: 0,
            c: SwRodCounters::default(),
            missing: Vec::with_capacity(plan.total_elinks),
            order: Vec::with_capacity(nlocal),
            scratch: vec![0; plan.chunk_bytes],
            run: Vec::with_capacity(RUN_FRAGMENTS),
        };
        agg.base_l1 = plan.first_mod % plan.wrap;
        agg.base_raw = ((plan.first_mod / plan.wrap) as u32 & 0xFF) << 24 | agg.base_l1 as u32;
        agg.set_fast_span();
        agg
    }

    /// The per-block constants of local E-link `local`.
    pub(crate) fn lane(&self, local: usize, elink: u16) -> Lane {
        if local < LOW_ELINKS {
            Lane {
                local,
                elink,
                bit: 1 << local,
                hi_word: 0,
                hi_bit: 0,
            }
        } else {
            let h = local - LOW_ELINKS;
            Lane {
                local,
                elink,
                bit: HI_MARK,
                hi_word: h / 64,
                hi_bit: 1 << (h % 64),
            }
        }
    }

    fn set_fast_span(&mut self) {
        self.fast_span = (self.wrap - self.base_l1).min(self.window) as u32;
    }

    fn aborted(&self) -> bool {
        self.shared.abort.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn base(&self) -> u64 {
        self.base
    }
}
