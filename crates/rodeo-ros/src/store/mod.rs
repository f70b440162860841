//! The event store of a readout node (the ROS's buffer): per ROB channel, fragments in pages
//! from the page pool, indexed by extended L1ID, answered zero-copy, released by clears.
//!
//! # Model
//!
//! The store takes its pages from a [`PagePool`] once, when it is built (warm memory, no pool
//! traffic on the hot path), and manages them as page tokens per channel, as the ROS host
//! software does for the RobinNP: a stack of free pages per channel, a write cursor, and an
//! [`L1idIndex`](index) from extended L1ID to where the fragment lies. A fragment is stored as
//! a ROB fragment (the store writes the 8-word ROB header with the fragment's status, then the
//! ROD words), packed after the previous one in the page; a fragment larger than a page spans
//! pages linked in a chain. A reply sends the page words as they lie ([`PageRef`] frames).
//!
//! # Ownership and threads
//!
//! [`EventStore`] has one owner, the node's core thread: ingest, lookup and clear take
//! `&mut self` or `&self` there, and need no lock. Only replies leave the thread: ZeroMQ reply
//! frames each hold a counted reference to their page (see `pages`), and a page whose last
//! reference is dropped elsewhere comes back through a lock-free queue that
//! [`EventStore::reclaim`] drains; the direct link's replies carry segments the store holds
//! itself ([`EventStore::hold_segments`]) until the reader hands them back to this thread
//! ([`EventStore::release_held`]). A page is free again only when its fragments are cleared
//! **and** every reply on it is done. Pages also leave the thread lent
//! ([`EventStore::lend`]): a writer elsewhere (the SW ROD sink) fills a [`LentPage`] with
//! whole ROB fragments and hands it back, and the store indexes them where they lie
//! ([`EventStore::adopt`], see `lend`).
//!
//! # Back-pressure
//!
//! When a channel has no free page for a fragment (or its index is full), [`EventStore::ingest`]
//! returns [`IngestError::Full`] and changes nothing: the caller keeps the fragment and stops
//! reading its input, so the card stalls (XOFF). The store never overwrites and never drops a
//! fragment for lack of room. Occupancy is visible per channel; crossing 90% (configurable)
//! raises the channel's alarm, counted once per crossing.
//!
//! # Occupancy and pages lent ahead of the L1
//!
//! A channel's pages in use are of two kinds. Its **fill** (what [`EventStore::occupancy`] and
//! the alarm count) is the pages holding fragments of events the dataflow has named (the
//! newest L1ID of a request or a clear the node saw, the store's *L1 front*) and not yet
//! cleared, plus pages held by replies. Its **lent** pages ([`ChannelCounters::lent_pages`]) are
//! those lent to a writer that has put no fragment there yet (`lend`), and, for an input that
//! runs ahead of the L1 ([`EventStore::set_runs_ahead`]: the emulated cards, the SW ROD's
//! emulated links, a replay), the pages whose first fragment is newer than the L1 front: a
//! real detector sends only what the L1 accepted, so they stand for the free pages a real card
//! holds for its DMA. An emulated card fills every free page ahead of the L1 in a healthy run;
//! its fill stays low until the farm stops clearing. Real inputs (network, files) never run
//! ahead: every page they fill is fill. A refusal for lack of room counts as back-pressure
//! (`full`) only when the channel has no page ahead of the L1 (the input waits for the farm);
//! while it has, the refusal is the card's normal run-ahead (`full_ahead`).
//!
//! # Clears
//!
//! [`EventStore::clear`] releases the listed L1IDs on every channel. A clear for an L1ID that a
//! channel has not received yet (it is newer than the channel's last L1ID) is remembered in the
//! index and the fragment is dropped when it arrives (counted, `dropped_after_clear`); a clear
//! for an L1ID that is older and absent is counted (`unknown_clears`) and harmless. A channel's
//! markers reach only an index's worth of L1IDs ahead of its input; beyond that the store's
//! record of the run's clears (`cleared`: every event from the first clear's on through a
//! watermark, and a window of 2^20 events beyond it) still names the events cleared, so an
//! input far behind the run (its node paused past the DCMs' timeout) drops the fragments of
//! the events decided meanwhile as they come, rather than storing them for no clear to
//! release ([`EventStore::clears_unrecorded`] counts what that record could not take).
//!
//! # Page layouts (the card's rewrites)
//!
//! A card run ([`EventStore::ingest_run`]) fills pages with fragments of one size and status,
//! so a page that comes back to its channel's free stack and is filled the same way again gets
//! its fragments at the same offsets (the stagger depends only on the page and the size). The
//! store keeps, per page, the layout it was last filled with in full (`layouts`, a store-local
//! word per page: size and status, stamped when the page is left with every slot of that
//! layout written; none when anything else wrote there or the page was left early) and tells the
//! run's `fill` whether the slot it gets still holds such a fragment ([`Rewrite::Changed`]):
//! the ROB header is then already right, and the card writes only the words that differ (an
//! emulated card's L1ID and BCID). A real card's DMA costs the host nothing; this keeps the
//! emulation's cost near that, without changing a word a reader sees. Any other writer into a
//! page ([`EventStore::ingest`], [`EventStore::ingest_with`], the general path) marks it as
//! holding no layout, so its next fill is written in full.
//!
//! # L1ID order
//!
//! "Newer" is the signed wrapping distance of extended L1IDs (ECR in bits 31..24), so the
//! comparison stays right across the L1ID wrap and an ECR. A request for an absent L1ID that is
//! not newer than a channel's last one will never be satisfied: it is LOST (protocol rule 3);
//! otherwise it is PENDING.
//!
//! # Layout
//!
//! - this module: the configuration, the public types, the channels and [`EventStore`]'s
//!   construction and gauges, the store's page holds, and ROB headers;
//! - `ingest`: storing fragments (the inline common case, the general case, card runs and
//!   the page layouts they reuse, prefetching the next slot);
//! - `read`: answering requests: what a channel holds for an L1ID (present, pending, lost) and
//!   the page segments of a stored fragment;
//! - `clear`: releasing cleared fragments (and early clears), and settling an idle channel;
//! - `lend`: pages lent to a writer on another thread (the SW ROD sink) and the fragments it
//!   wrote there indexed in place;
//! - `index`: the per-channel L1ID index; `pages`: the page table shared with reply frames;
//!   `slink`: the S-LINK error dump.

mod clear;
mod cleared;
mod index;
mod ingest;
mod lend;
mod pages;
mod read;
pub mod slink;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use rodeo_format::fragment::{SourceId, Status, FORMAT_VERSION, ROB_MARKER};
use rodeo_memory::{AllocError, PagePool};

use index::L1idIndex;
#[cfg(test)]
use ingest::first_offset;
pub use ingest::Rewrite;
use ingest::NO_LAYOUT;
pub use lend::{LentPage, LEND_KEEP};
pub use pages::PageRef;
pub(crate) use pages::PageTable;
use pages::NO_PAGE;

/// Part of a stored fragment on one page, held by the store for a reader (see
/// [`EventStore::hold_segments`]): the page's words `offset..offset + words`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldSegment {
    pub(crate) page: u32,
    pub(crate) offset: u32,
    pub(crate) words: u32,
}

/// Words of the ROB header the store writes before each ROD fragment (one status word, no
/// checksum).
pub const ROB_HEADER_WORDS: usize = 8;

/// Word of the ROB header holding the status.
const ROB_STATUS_WORD: usize = 6;

/// Word of a ROD fragment holding the extended L1ID.
pub(crate) const ROD_L1ID_WORD: usize = 5;

/// True when extended L1ID `a` comes after `b` (signed wrapping distance).
#[inline]
pub fn l1id_newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// What a store holds at the end of a run, split at the L1 front
/// ([`EventStore::stored_around_l1_front`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoredAtEnd {
    /// Fragments at or before the L1 front.
    pub behind: u64,
    /// Fragments after it.
    pub ahead: u64,
    /// Of `ahead`, the fragments of L1IDs that some channel does not hold.
    pub ahead_incomplete: u64,
}

/// Configuration of an [`EventStore`].
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The ROB (source) id of each channel, in channel order.
    pub source_ids: Vec<u32>,
    /// Pages each channel owns.
    pub pages_per_channel: usize,
    /// Index entries per channel (stored fragments plus early clears); 0 picks 4 per page.
    pub index_capacity: usize,
    /// Occupancy fraction at which a channel's alarm is raised (default 0.9).
    pub alarm_fraction: f64,
    /// The run's L1ID wrap (default 2^24), for numbering the events its clears name.
    pub l1id_wrap: u32,
    /// The event the node's inputs begin at (0; a restarted node's rejoin event): its first
    /// clear is numbered near it.
    pub first_event: u64,
}

impl StoreConfig {
    /// `channels` channels with source ids `base`, `base + 1`, ...
    pub fn with_channels(channels: usize, base: u32, pages_per_channel: usize) -> StoreConfig {
        StoreConfig {
            source_ids: (0..channels as u32).map(|c| base + c).collect(),
            pages_per_channel,
            index_capacity: 0,
            alarm_fraction: 0.9,
            l1id_wrap: rodeo_format::l1id::DEFAULT_L1ID_WRAP,
            first_event: 0,
        }
    }
}

/// Why the store could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The page pool holds fewer free pages than the configuration asks for.
    #[error("the page pool cannot supply {wanted} pages: {source}")]
    Pages {
        /// Pages asked for.
        wanted: usize,
        /// The pool's error.
        source: AllocError,
    },
    /// No channel, or two channels with one source id.
    #[error("bad channel list: {0}")]
    Channels(&'static str),
    /// A page too small for a ROB header and an empty ROD.
    #[error("pages of {0} bytes are too small")]
    PageTooSmall(usize),
}

/// Why a fragment was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// No room (no free page or a full index): keep the fragment and retry later.
    #[error("channel full")]
    Full,
    /// No such channel.
    #[error("no channel {0}")]
    NoChannel(usize),
    /// The fragment is too short to hold an L1ID; count and drop it.
    #[error("fragment of {0} words has no L1ID")]
    NoL1id(usize),
    /// [`EventStore::ingest_with`] only writes fragments that fit one page.
    #[error("fragment of {0} words does not fit a page")]
    TooLarge(usize),
}

/// What happened to an ingested fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingested {
    /// Stored and indexed.
    Stored,
    /// The L1ID is already stored on this channel: counted, the first copy is kept.
    Duplicate,
    /// Its L1ID was cleared before it arrived: counted and dropped.
    AlreadyCleared,
}

/// What the store holds for one (channel, L1ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The fragment is stored.
    Present,
    /// Not (yet) stored and may still arrive.
    Pending,
    /// Not stored and never will be (older than the channel's last L1ID, or cleared).
    Lost,
}

/// Counters of one channel (64-bit, monotonic unless said otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelCounters {
    /// Fragments stored.
    pub fragments: u64,
    /// Words stored (ROB headers included).
    pub words: u64,
    /// Fragments released by clears.
    pub cleared: u64,
    /// Fragments whose L1ID was already stored (first copy kept).
    pub duplicates: u64,
    /// Fragments dropped because their L1ID had been cleared before they arrived.
    pub dropped_after_clear: u64,
    /// Clears of L1IDs this channel never had and that were older than its last L1ID.
    pub unknown_clears: u64,
    /// Ingest attempts refused for lack of room while the channel had no page ahead of the L1
    /// (back-pressure: the input waits for the farm to clear).
    pub full: u64,
    /// Ingest attempts refused for lack of room while the channel had pages ahead of the L1
    /// (an emulated card's normal run-ahead, not a wait on the farm; module docs).
    pub full_ahead: u64,
    /// Times the occupancy (the fill) crossed the alarm level upwards.
    pub alarms: u64,
    /// Pages in use now, fill and lent (gauge).
    pub pages_in_use: u64,
    /// Of those, pages lent (to a writer, or ahead of the L1; gauge, module docs).
    pub lent_pages: u64,
    /// Fragments stored now (gauge).
    pub stored: u64,
}

/// One ROB channel: its free pages, write cursor, L1ID index, alarm and counters.
#[derive(Debug)]
struct Channel {
    source_id: u32,
    free: Vec<u32>,
    write_page: u32,
    write_offset: usize,
    /// The layout the write page is being filled with (`NO_LAYOUT`: mixed, or not a run's).
    write_layout: u64,
    /// The write page held that same layout in full when it was taken: its slots need only
    /// the words that change ([`Rewrite::Changed`]).
    write_same: bool,
    index: L1idIndex,
    last_l1id: Option<u32>,
    /// A fragment's L1ID far ahead of `last_l1id` ([`MAX_L1ID_STEP`]), not yet taken as the
    /// channel's newest: a later fragment past it confirms it (a real jump: lost data, an
    /// ECR with a short L1ID cycle), the sequence coming back below it leaves it aside (a
    /// corrupted L1ID).
    jump: Option<u32>,
    alarm: bool,
    /// The first L1ID of each page taken while ahead of the L1 front, oldest first (only for
    /// an input that runs ahead; at most the channel's pages).
    ahead: VecDeque<u32>,
    /// Pages lent (`lend`) on which no fragment was adopted yet.
    lent_empty: usize,
    counters: ChannelCounters,
}

/// The event store. See the module docs.
#[derive(Debug)]
pub struct EventStore {
    table: Arc<PageTable>,
    /// The store thread's own holds per page: the channel's write cursor while it writes into
    /// the page, plus one per stored fragment touching it. Plain counters: only this thread
    /// changes them. While a page has any, the store holds exactly one reference on the
    /// page's shared (atomic) count, so storing and clearing a fragment costs no atomic
    /// read-modify-write, which would wait for the page writes before it to reach the cache.
    holds: Box<[u32]>,
    /// Per page, the layout ([`layout_key`]) its every fragment slot was last written with in
    /// full by a card run, or `NO_LAYOUT`. Store-local, like `holds`. See the module docs.
    layouts: Box<[u64]>,
    /// Words per page (the table's, kept here for the hot path).
    page_words: usize,
    /// A node restarted into a running run: no early-clear markers (see
    /// [`EventStore::set_rejoining`]).
    rejoining: bool,
    channels: Vec<Channel>,
    page_channel: Box<[u16]>,
    by_rob: HashMap<u32, u16>,
    /// Channel `c` has source id `rob_base + c` for every channel (the usual numbering):
    /// [`EventStore::channel_of`] subtracts instead of hashing.
    rob_base: Option<u32>,
    pages_per_channel: usize,
    alarm_pages: usize,
    /// The L1IDs of the clear being processed (reused).
    clear_ids: Vec<u32>,
    /// The newest L1ID the dataflow named (a request or a clear): the L1 front (module docs).
    l1_front: Option<u32>,
    /// The input runs ahead of the L1 (module docs, [`EventStore::set_runs_ahead`]).
    runs_ahead: bool,
    /// Per page: lent and no fragment adopted on it yet.
    lent_empty: Box<[bool]>,
    /// The events the run's clears have named, for fragments that come after their clear
    /// however far the input lags (`cleared`).
    cleared: cleared::ClearedEvents,
}

impl EventStore {
    /// Builds the store, taking `channels x pages_per_channel` pages from `pool`.
    pub fn new(pool: &PagePool, config: &StoreConfig) -> Result<EventStore, StoreError> {
        let n = config.source_ids.len();
        if n == 0 || n > usize::from(u16::MAX) {
            return Err(StoreError::Channels("between 1 and 65535 channels"));
        }
        if pool.page_bytes() / 4 < ROB_HEADER_WORDS + 12 {
            return Err(StoreError::PageTooSmall(pool.page_bytes()));
        }
        let per = config.pages_per_channel.max(1);
        let wanted = n * per;
        let table =
            PageTable::new(pool, wanted).map_err(|source| StoreError::Pages { wanted, source })?;
        let mut by_rob = HashMap::with_capacity(n);
        for (c, &id) in config.source_ids.iter().enumerate() {
            if by_rob.insert(id, c as u16).is_some() {
                return Err(StoreError::Channels("two channels share a source id"));
            }
        }
        let cap = if config.index_capacity == 0 {
            per * 4
        } else {
            config.index_capacity
        };
        let channels = config
            .source_ids
            .iter()
            .enumerate()
            .map(|(c, &source_id)| Channel {
                source_id,
                // Popped from the end: pages in ascending order.
                free: ((c * per) as u32..((c + 1) * per) as u32).rev().collect(),
                write_page: NO_PAGE,
                write_offset: 0,
                write_layout: NO_LAYOUT,
                write_same: false,
                index: L1idIndex::new(cap),
                last_l1id: None,
                jump: None,
                alarm: false,
                ahead: VecDeque::with_capacity(per),
                lent_empty: 0,
                counters: ChannelCounters::default(),
            })
            .collect();
        let page_channel = (0..wanted).map(|p| (p / per) as u16).collect();
        let alarm_pages = ((per as f64) * config.alarm_fraction.clamp(0.0, 1.0)).ceil() as usize;
        Ok(EventStore {
            rejoining: false,
            page_words: table.page_words(),
            table: Arc::new(table),
            holds: vec![0; wanted].into_boxed_slice(),
            layouts: vec![NO_LAYOUT; wanted].into_boxed_slice(),
            channels,
            page_channel,
            rob_base: config.source_ids.first().copied().filter(|&base| {
                config
                    .source_ids
                    .iter()
                    .enumerate()
                    .all(|(c, &id)| u64::from(id) == u64::from(base) + c as u64)
            }),
            by_rob,
            pages_per_channel: per,
            alarm_pages,
            clear_ids: Vec::with_capacity(1024),
            l1_front: None,
            runs_ahead: false,
            lent_empty: vec![false; wanted].into_boxed_slice(),
            cleared: cleared::ClearedEvents::new(config.l1id_wrap, config.first_event),
        })
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.channels.len()
    }

    /// Source (ROB) id of channel `c`.
    pub fn source_id(&self, c: usize) -> Option<u32> {
        self.channels.get(c).map(|ch| ch.source_id)
    }

    /// The channel holding ROB `rob`.
    #[inline]
    pub fn channel_of(&self, rob: u32) -> Option<usize> {
        if let Some(base) = self.rob_base {
            let c = rob.wrapping_sub(base) as usize;
            return (c < self.channels.len()).then_some(c);
        }
        self.by_rob.get(&rob).map(|&c| usize::from(c))
    }

    /// Words per page.
    pub fn page_words(&self) -> usize {
        self.table.page_words()
    }

    /// Pages each channel owns.
    pub fn pages_per_channel(&self) -> usize {
        self.pages_per_channel
    }

    /// Counters of channel `c` (with the gauges filled in).
    pub fn counters(&self, c: usize) -> ChannelCounters {
        let ch = &self.channels[c];
        let mut k = ch.counters;
        k.pages_in_use = (self.pages_per_channel - ch.free.len()) as u64;
        k.lent_pages = lent_pages(ch, self.l1_front, self.pages_per_channel) as u64;
        k.stored = ch.index.len() as u64;
        k
    }

    /// Pages of channel `c` lent: to a writer with no fragment on them yet, or holding
    /// fragments ahead of the L1 front (module docs); what [`ChannelCounters::lent_pages`]
    /// reports.
    pub fn lent_pages(&self, c: usize) -> usize {
        lent_pages(&self.channels[c], self.l1_front, self.pages_per_channel)
    }

    /// Whether the input runs ahead of the L1 ([`EventStore::set_runs_ahead`]).
    pub fn runs_ahead(&self) -> bool {
        self.runs_ahead
    }

    /// Marks the input as one that runs ahead of the L1 (an emulated card, a replay): pages
    /// whose first fragment is newer than the L1 front count as lent, not fill (module docs).
    /// Off by default (a real input's every fragment is fill).
    pub fn set_runs_ahead(&mut self, on: bool) {
        self.runs_ahead = on;
    }

    /// Notes an L1ID the dataflow asked for (a DataRequest): the L1 front moves to it if it is
    /// newer. Clears move it themselves ([`EventStore::clear`]).
    #[inline]
    pub fn note_l1(&mut self, l1id: u32) {
        if self.l1_front.is_none_or(|f| l1id_newer(l1id, f)) {
            self.l1_front = Some(l1id);
        }
    }

    /// The L1 front: the newest L1ID a request or a clear named (module docs).
    pub fn l1_front(&self) -> Option<u32> {
        self.l1_front
    }

    /// The fragments stored now, over every channel, split at the L1 front (the newest L1ID
    /// a request or clear named, [`EventStore::l1_front`]; every one is ahead without a
    /// front). At the end of a run with a detector's input, the ones behind were passed over
    /// by the L1 (missing on another input), the ones ahead came after the last accept; of
    /// those, `ahead_incomplete` are of L1IDs some channel does not hold. A walk of every
    /// index: for the end of a run.
    pub fn stored_around_l1_front(&self) -> StoredAtEnd {
        let front = self.l1_front;
        let is_ahead = |l1id: u32| front.is_none_or(|f| l1id_newer(l1id, f));
        let mut out = StoredAtEnd::default();
        let mut holders: std::collections::HashMap<u32, usize> = Default::default();
        for ch in &self.channels {
            // One walk: every stored fragment counted, those ahead apart.
            let mut ahead = 0;
            let all = ch.index.count_stored(|l1id| {
                if is_ahead(l1id) {
                    ahead += 1;
                    *holders.entry(l1id).or_default() += 1;
                }
                true
            }) as u64;
            out.ahead += ahead;
            out.behind += all - ahead;
        }
        let channels = self.channels.len();
        out.ahead_incomplete = holders
            .values()
            .filter(|&&n| n < channels)
            .map(|&n| n as u64)
            .sum();
        out
    }

    /// Counters summed over channels.
    pub fn total_counters(&self) -> ChannelCounters {
        let mut t = ChannelCounters::default();
        for c in 0..self.channels.len() {
            let k = self.counters(c);
            t.fragments += k.fragments;
            t.words += k.words;
            t.cleared += k.cleared;
            t.duplicates += k.duplicates;
            t.dropped_after_clear += k.dropped_after_clear;
            t.unknown_clears += k.unknown_clears;
            t.full += k.full;
            t.full_ahead += k.full_ahead;
            t.alarms += k.alarms;
            t.pages_in_use += k.pages_in_use;
            t.lent_pages += k.lent_pages;
            t.stored += k.stored;
        }
        t
    }

    /// Occupancy of channel `c`: its fill (pages in use but not lent, module docs) over the
    /// pages it owns, 0.0 ..= 1.0.
    pub fn occupancy(&self, c: usize) -> f64 {
        let ch = &self.channels[c];
        let in_use = self.pages_per_channel - ch.free.len();
        let fill = in_use - lent_pages(ch, self.l1_front, self.pages_per_channel);
        fill as f64 / self.pages_per_channel as f64
    }

    /// True while channel `c` is at or above its alarm level.
    pub fn alarm(&self, c: usize) -> bool {
        self.channels[c].alarm
    }

    /// For a node restarted into a running run (`crate::server::rejoin`): a clear for an L1ID
    /// newer than a channel's last leaves no early-clear marker (it is counted as unknown).
    /// Such a node's inputs may lag far behind the run: markers for every event decided
    /// meanwhile would fill the index and stop the inputs; the fragments they would have
    /// dropped are released by the rejoin sweep instead.
    pub fn set_rejoining(&mut self, on: bool) {
        self.rejoining = on;
    }

    /// What the store's record of the run's clears (`cleared`) could not take: events its
    /// window passed over without their clear (a clear lost, or an event decided later than
    /// a window of 2^20 events), and clears too far beyond the window to be noted (a hostile
    /// or mistaken clear). Both 0 in a healthy run.
    pub fn clears_unrecorded(&self) -> (u64, u64) {
        (
            self.cleared.passed_uncleared(),
            self.cleared.beyond_window(),
        )
    }

    /// The last (newest) L1ID channel `c` stored, if any.
    pub fn last_l1id(&self, c: usize) -> Option<u32> {
        self.channels[c].last_l1id
    }

    /// Brings back pages whose last reply frame was sent on another thread. Call it regularly
    /// (the core thread does, every loop).
    pub fn reclaim(&mut self) -> usize {
        let mut n = 0;
        while let Some(p) = self.table.pop_returned() {
            if n == 0 {
                // Free again: this thread's streaming stores into them land first (`push_free`).
                rodeo_memory::stream::fence();
            }
            let c = usize::from(self.page_channel[p as usize]);
            if std::mem::take(&mut self.lent_empty[p as usize]) {
                // A lent page dropped away from the store with nothing adopted.
                self.channels[c].lent_empty -= 1;
            }
            self.channels[c].free.push(p);
            n += 1;
        }
        n
    }
}

/// Pages of channel `ch` lent: lent to a writer with no fragment yet, or taken ahead of the L1
/// front `front` (module docs); at most its pages in use.
#[inline]
fn lent_pages(ch: &Channel, front: Option<u32>, pages: usize) -> usize {
    lent_with(ch, ahead_pages(ch, front), pages)
}

/// Pages of channel `ch` lent, given `ahead` pages ahead of the L1 front.
#[inline(always)]
fn lent_with(ch: &Channel, ahead: usize, pages: usize) -> usize {
    ahead
        .saturating_add(ch.lent_empty)
        .min(pages - ch.free.len())
}

/// Pages of channel `ch` whose first fragment is newer than the L1 front `front`.
#[inline]
fn ahead_pages(ch: &Channel, front: Option<u32>) -> usize {
    match front {
        None => ch.ahead.len(),
        // Oldest first: those the front passed come first.
        Some(f) => ch.ahead.len() - ch.ahead.partition_point(|&l| !l1id_newer(l, f)),
    }
}

/// Notes that channel `ch` took `pages` fresh pages for a fragment of `l1id`: pages ahead of
/// the L1 when the input runs ahead and `l1id` is newer than the front.
#[inline(always)]
fn note_fresh_pages(
    ch: &mut Channel,
    runs_ahead: bool,
    front: Option<u32>,
    l1id: u32,
    pages: usize,
    per: usize,
) {
    if runs_ahead && front.is_none_or(|f| l1id_newer(l1id, f)) {
        for _ in 0..pages {
            if ch.ahead.len() >= per {
                ch.ahead.pop_front();
            }
            ch.ahead.push_back(l1id);
        }
    }
}

/// Drops from channel `ch`'s pages ahead of the L1 those the front `front` has reached since
/// (oldest first, so they come first; the front only moves on): every page left is newer than
/// it, so the count is the list's length, without the search [`ahead_pages`] does for a reader
/// that may not change the channel.
#[inline(always)]
fn drop_passed(ch: &mut Channel, front: Option<u32>) {
    if let Some(f) = front {
        while ch.ahead.front().is_some_and(|&l| !l1id_newer(l, f)) {
            ch.ahead.pop_front();
        }
    }
}

/// [`lent_pages`] for the store's own thread, after [`drop_passed`].
#[inline(always)]
fn lent_pages_passed(ch: &mut Channel, front: Option<u32>, pages: usize) -> usize {
    drop_passed(ch, front);
    lent_with(ch, ch.ahead.len(), pages)
}

/// Raises channel `ch`'s alarm when its fill reached `alarm_pages` (counted once per crossing).
#[inline(always)]
fn raise_alarm(ch: &mut Channel, front: Option<u32>, per: usize, alarm_pages: usize) {
    if !ch.alarm {
        let fill = (per - ch.free.len()) - lent_pages_passed(ch, front, per);
        if fill >= alarm_pages {
            ch.alarm = true;
            ch.counters.alarms += 1;
        }
    }
}

/// Counts a refusal of channel `ch` for lack of room: back-pressure, or the card's run-ahead
/// when pages are ahead of the L1 (module docs). A full channel whose pages the L1 front
/// reached since the last page was taken raises its alarm here.
#[inline]
fn count_full(ch: &mut Channel, front: Option<u32>, per: usize, alarm_pages: usize) {
    drop_passed(ch, front);
    if !ch.ahead.is_empty() {
        ch.counters.full_ahead += 1;
    } else {
        ch.counters.full += 1;
    }
    raise_alarm(ch, front, per, alarm_pages);
}

/// Puts page `p` back on a channel's free stack after a fence: the store's streaming stores
/// into it ([`pages::PageTable::write_streaming`]) land before whatever takes it next (a plain
/// or streaming write, a lend to another thread). For a single page; a call that frees many
/// fences once ([`rodeo_memory::stream::fence`]) and pushes them plainly.
#[inline]
fn push_free(free: &mut Vec<u32>, p: u32) {
    rodeo_memory::stream::fence();
    free.push(p);
}

/// Adds a store hold on page `p`; the first takes the store's one shared reference.
#[inline(always)]
fn hold(holds: &mut [u32], table: &PageTable, p: u32) {
    let h = &mut holds[p as usize];
    if *h == 0 {
        table.take_fresh(p);
    }
    *h += 1;
}

/// Drops a store hold on page `p`; the last drops the store's shared reference. True when
/// that was the page's last reference (no reply frame holds it): the caller frees the page.
#[inline(always)]
fn unhold(holds: &mut [u32], table: &PageTable, p: u32) -> bool {
    let h = &mut holds[p as usize];
    debug_assert!(*h > 0, "unhold of page {p} without a hold");
    *h -= 1;
    *h == 0 && table.release(p)
}

/// What an ingest of `l1id` on channel `ch` comes to without storing anything: a duplicate of
/// a stored L1ID, or an L1ID cleared before it came (its early clear's marker then removed);
/// counted. `None`: the L1ID is absent, to be stored.
#[inline(always)]
fn known_l1id(ch: &mut Channel, cleared: &cleared::ClearedEvents, l1id: u32) -> Option<Ingested> {
    match ch.index.get(l1id) {
        Some(index::Slot::Stored(_)) => {
            ch.counters.duplicates += 1;
            Some(Ingested::Duplicate)
        }
        Some(index::Slot::ClearedEarly) => {
            ch.index.remove(l1id);
            ch.counters.dropped_after_clear += 1;
            note_l1id(ch, l1id);
            Some(Ingested::AlreadyCleared)
        }
        // Cleared beyond the reach of the channel's markers (an input far behind the run):
        // the run's clears say so (`cleared`).
        None if cleared.is_cleared(l1id) => {
            ch.counters.dropped_after_clear += 1;
            note_l1id(ch, l1id);
            Some(Ingested::AlreadyCleared)
        }
        None => None,
    }
}

/// How far (in raw extended L1IDs) a fragment may be ahead of its channel's newest and be
/// taken as the newest at once; a larger jump waits for the next fragment to confirm it
/// (`Channel::jump`). One corrupted L1ID far ahead made every L1ID in the gap "older than the
/// newest", answered LOST (protocol rule 3), and moved the readout L1 past them: +2000 gave
/// 2000 partial events (a QA pass, 2026-12-07).
pub const MAX_L1ID_STEP: u32 = 4096;

/// Notes `l1id` as channel `ch`'s last L1ID when it is newer than the last one: at once within
/// [`MAX_L1ID_STEP`], else once the next fragment confirms the jump.
#[inline(always)]
fn note_l1id(ch: &mut Channel, l1id: u32) {
    match ch.last_l1id {
        None => ch.last_l1id = Some(l1id),
        Some(last) if l1id_newer(l1id, last) => {
            if l1id.wrapping_sub(last) <= MAX_L1ID_STEP {
                ch.last_l1id = Some(l1id);
                // The sequence went on below a jump waiting: that one was corrupted.
                ch.jump = None;
            } else {
                note_jump(ch, l1id);
            }
        }
        Some(_) => {}
    }
}

/// A fragment far ahead of its channel's newest L1ID: the newest when it comes right after the
/// jump waiting for confirmation and past it (the sequence goes on from there), else the jump
/// waiting (see [`MAX_L1ID_STEP`]). After a corrupted L1ID the real sequence comes back below
/// it, and the next step of it drops the jump (`note_l1id`).
#[cold]
#[inline(never)]
fn note_jump(ch: &mut Channel, l1id: u32) {
    match ch.jump {
        Some(j) if l1id_newer(l1id, j) => {
            ch.last_l1id = Some(l1id);
            ch.jump = None;
        }
        _ => ch.jump = Some(l1id),
    }
}

/// Words of an empty ROB fragment ([`empty_rob`]).
pub const EMPTY_ROB_WORDS: usize = ROB_HEADER_WORDS + 12;

/// An empty ROB fragment (ROB header, a ROD with no status and no data) for ROB `source_id`
/// and `l1id`, flagged `status`: the answer for a fragment the store does not hold.
pub fn empty_rob(source_id: u32, l1id: u32, status: Status) -> [u32; EMPTY_ROB_WORDS] {
    let mut w = [0u32; EMPTY_ROB_WORDS];
    w[..ROB_HEADER_WORDS].copy_from_slice(&rob_header(source_id, EMPTY_ROB_WORDS, status));
    w[ROB_HEADER_WORDS..ROB_HEADER_WORDS + 9].copy_from_slice(&[
        rodeo_format::fragment::ROD_MARKER,
        9,
        rodeo_format::fragment::ROD_FORMAT_VERSION,
        source_id,
        0,
        l1id,
        0,
        0,
        0,
    ]);
    w
}

/// The ROB header of a stored fragment of `words` words (header included).
#[inline]
fn rob_header(source_id: u32, words: usize, status: Status) -> [u32; ROB_HEADER_WORDS] {
    let mut h = [
        ROB_MARKER,
        words as u32,
        ROB_HEADER_WORDS as u32,
        FORMAT_VERSION,
        SourceId(source_id).word(),
        1,
        0,
        0, // checksum type: none
    ];
    h[ROB_STATUS_WORD] = status.word();
    h
}

#[cfg(test)]
mod tests;
