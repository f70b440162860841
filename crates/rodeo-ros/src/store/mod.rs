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
//! **and** every reply on it is done.
//!
//! # Back-pressure
//!
//! When a channel has no free page for a fragment (or its index is full), [`EventStore::ingest`]
//! returns [`IngestError::Full`] and changes nothing: the caller keeps the fragment and stops
//! reading its input, so the card stalls (XOFF). The store never overwrites and never drops a
//! fragment for lack of room. Occupancy is visible per channel; crossing 90% (configurable)
//! raises the channel's alarm, counted once per crossing.
//!
//! # Clears
//!
//! [`EventStore::clear`] releases the listed L1IDs on every channel. A clear for an L1ID that a
//! channel has not received yet (it is newer than the channel's last L1ID) is remembered in the
//! index and the fragment is dropped when it arrives (counted, `dropped_after_clear`); a clear
//! for an L1ID that is older and absent is counted (`unknown_clears`) and harmless.
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

mod index;
mod pages;
pub mod slink;

use std::collections::HashMap;
use std::sync::Arc;

use rodeo_format::fragment::{SourceId, Status, FORMAT_VERSION, ROB_MARKER};
use rodeo_memory::{AllocError, PagePool};

use index::{L1idIndex, Location, Slot};
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
const ROD_L1ID_WORD: usize = 5;

/// True when extended L1ID `a` comes after `b` (signed wrapping distance).
#[inline]
pub fn l1id_newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
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
}

impl StoreConfig {
    /// `channels` channels with source ids `base`, `base + 1`, ...
    pub fn with_channels(channels: usize, base: u32, pages_per_channel: usize) -> StoreConfig {
        StoreConfig {
            source_ids: (0..channels as u32).map(|c| base + c).collect(),
            pages_per_channel,
            index_capacity: 0,
            alarm_fraction: 0.9,
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
    /// Ingest attempts refused for lack of room (back-pressure events).
    pub full: u64,
    /// Times the occupancy crossed the alarm level upwards.
    pub alarms: u64,
    /// Pages in use now (gauge).
    pub pages_in_use: u64,
    /// Fragments stored now (gauge).
    pub stored: u64,
}

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
    alarm: bool,
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
                alarm: false,
                counters: ChannelCounters::default(),
            })
            .collect();
        let page_channel = (0..wanted).map(|p| (p / per) as u16).collect();
        let alarm_pages = ((per as f64) * config.alarm_fraction.clamp(0.0, 1.0)).ceil() as usize;
        Ok(EventStore {
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
        k.stored = ch.index.len() as u64;
        k
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
            t.alarms += k.alarms;
            t.pages_in_use += k.pages_in_use;
            t.stored += k.stored;
        }
        t
    }

    /// Occupancy of channel `c`: pages in use over pages owned, 0.0 ..= 1.0.
    pub fn occupancy(&self, c: usize) -> f64 {
        let ch = &self.channels[c];
        (self.pages_per_channel - ch.free.len()) as f64 / self.pages_per_channel as f64
    }

    /// True while channel `c` is at or above its alarm level.
    pub fn alarm(&self, c: usize) -> bool {
        self.channels[c].alarm
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
            let c = usize::from(self.page_channel[p as usize]);
            self.channels[c].free.push(p);
            n += 1;
        }
        n
    }

    /// Stores the ROD fragment `rod` of channel `c` with ROB status `status`, copying it into
    /// the channel's pages behind an 8-word ROB header. See the module docs for back-pressure.
    pub fn ingest(
        &mut self,
        c: usize,
        rod: &[u32],
        status: Status,
    ) -> Result<Ingested, IngestError> {
        let l1id = *rod
            .get(ROD_L1ID_WORD)
            .ok_or(IngestError::NoL1id(rod.len()))?;
        self.ingest_inner(
            c,
            l1id,
            rod.len(),
            status,
            |table, mut page, mut offset, header| {
                // Header and ROD words, page by page along the chain.
                let mut rest: [&[u32]; 2] = [header, rod];
                let page_words = table.page_words();
                for part in &mut rest {
                    while !part.is_empty() {
                        if offset == page_words {
                            page = table.next(page);
                            offset = 0;
                        }
                        let n = part.len().min(page_words - offset);
                        // SAFETY: the store thread writes the words of a fragment being placed, past
                        // every stored fragment of these pages (pages::rule 1).
                        unsafe { table.write(page, offset, &part[..n]) };
                        offset += n;
                        *part = &part[n..];
                    }
                }
            },
        )
    }

    /// Stores a fragment of `rod_words` words and L1ID `l1id` written in place by `fill` (an
    /// emulated card writing straight into the page, as a DMA engine would). The ROB fragment
    /// must fit one page. `fill` gets exactly `rod_words` words.
    pub fn ingest_with(
        &mut self,
        c: usize,
        l1id: u32,
        rod_words: usize,
        status: Status,
        fill: impl FnOnce(&mut [u32]),
    ) -> Result<Ingested, IngestError> {
        if rod_words + ROB_HEADER_WORDS > self.table.page_words() {
            return Err(IngestError::TooLarge(rod_words));
        }
        self.ingest_inner(c, l1id, rod_words, status, |table, page, offset, header| {
            // SAFETY: as in `ingest`: the words being placed, exclusively the store thread's.
            let dst = unsafe { table.slice_mut(page, offset, ROB_HEADER_WORDS + rod_words) };
            dst[..ROB_HEADER_WORDS].copy_from_slice(header);
            fill(&mut dst[ROB_HEADER_WORDS..]);
        })
    }

    /// Stores a run of fragments of `rod_words` ROD words each on channel `c`, as a card's DMA
    /// engine fills its pages: the L1ID of each comes from `next_l1id`, and
    /// `fill(l1id, dst, rewrite)` writes its ROD words in place (`dst` is exactly `rod_words`
    /// long). With [`Rewrite::Changed`], `dst` already holds the fragment this channel's runs
    /// last wrote there with the same size and status (see the module docs): `fill` must leave
    /// it as a full write would, but need write only the words that differ from that one; with
    /// [`Rewrite::Full`] it writes every word it wants read. Stops after `limit`
    /// fragments or at the first one the store refuses (full channel, or one of the other
    /// [`IngestError`]s); that one is not consumed. Returns how many L1IDs were consumed
    /// (stored, or dropped as duplicates or already cleared, as [`EventStore::ingest_with`]
    /// does) and the error that stopped the run. The ROB fragment must fit one page.
    pub fn ingest_run(
        &mut self,
        c: usize,
        rod_words: usize,
        status: Status,
        limit: usize,
        mut next_l1id: impl FnMut() -> u32,
        mut fill: impl FnMut(u32, &mut [u32], Rewrite),
    ) -> (usize, Option<IngestError>) {
        let words = ROB_HEADER_WORDS + rod_words;
        if words > self.page_words {
            return (0, Some(IngestError::TooLarge(rod_words)));
        }
        let layout = layout_key(words, status);
        for done in 0..limit {
            let l1id = next_l1id();
            if let Some((page, offset, source, same)) = self.place_fast(c, l1id, words, layout) {
                // SAFETY: as in `ingest`: the words just placed, exclusively the store thread's.
                let dst = unsafe { self.table.slice_mut(page, offset, words) };
                let (header, rod) = dst.split_at_mut(ROB_HEADER_WORDS);
                if same {
                    // The slot holds this layout's fragment: its ROB header is already right.
                    fill(l1id, rod, Rewrite::Changed);
                } else {
                    header.copy_from_slice(&rob_header(source, words, status));
                    fill(l1id, rod, Rewrite::Full);
                }
                continue;
            }
            let fill = &mut fill;
            let write = move |table: &PageTable, page: u32, offset: usize, header: &[u32]| {
                // SAFETY: as above.
                let dst = unsafe { table.slice_mut(page, offset, words) };
                dst[..ROB_HEADER_WORDS].copy_from_slice(header);
                fill(l1id, &mut dst[ROB_HEADER_WORDS..], Rewrite::Full);
            };
            if let Err(e) = self.ingest_general(c, l1id, rod_words, status, write) {
                return (done, Some(e));
            }
        }
        (limit, None)
    }

    /// Every case of an ingest: the common one inline ([`EventStore::place_fast`]), the rest
    /// through [`EventStore::ingest_general`].
    #[inline(always)]
    fn ingest_inner(
        &mut self,
        c: usize,
        l1id: u32,
        rod_words: usize,
        status: Status,
        write: impl FnOnce(&PageTable, u32, usize, &[u32]),
    ) -> Result<Ingested, IngestError> {
        let words = ROB_HEADER_WORDS + rod_words;
        match self.place_fast(c, l1id, words, NO_LAYOUT) {
            Some((page, offset, source, _)) => {
                write(
                    &self.table,
                    page,
                    offset,
                    &rob_header(source, words, status),
                );
                Ok(Ingested::Stored)
            }
            None => self.ingest_general(c, l1id, rod_words, status, write),
        }
    }

    /// The common case of an ingest: a ROB fragment of `words` words that fits the channel's
    /// write page or one fresh page, whose L1ID's index slot is free at home (in-order
    /// L1IDs). Places and indexes it, and returns its page, word offset and the channel's
    /// source id: the caller writes the words there before anything looks the L1ID up (the
    /// store has one thread). Anything else (no such channel, duplicates, early clears,
    /// collisions, fragments spanning pages, a full channel) changes nothing and returns
    /// `None`: ask [`EventStore::ingest_general`].
    ///
    /// `layout` is the card run's [`layout_key`] (`NO_LAYOUT` for any other writer); the last
    /// value returned says whether the slot still holds a fragment of that layout (see the
    /// module docs), so only the words that change need writing.
    #[inline(always)]
    fn place_fast(
        &mut self,
        c: usize,
        l1id: u32,
        words: usize,
        layout: u64,
    ) -> Option<(u32, usize, u32, bool)> {
        let pw = self.page_words;
        let ch = self.channels.get_mut(c)?;
        if words > pw {
            return None;
        }
        let home = ch.index.vacant_home(l1id)?;
        let fits = ch.write_page != NO_PAGE && ch.write_offset + words <= pw;
        if !fits && ch.free.is_empty() {
            return None;
        }
        let table = &*self.table;
        let holds = &mut self.holds;
        if !fits {
            // Leave the current page (drop the cursor's hold) for a fresh one.
            stamp_left_page(ch, &mut self.layouts, pw);
            if ch.write_page != NO_PAGE && unhold(holds, table, ch.write_page) {
                ch.free.push(ch.write_page);
            }
            let p = ch.free.pop()?;
            hold(holds, table, p);
            table.set_next(p, NO_PAGE);
            ch.write_page = p;
            ch.write_offset = first_offset(p, words, pw);
            // Being filled under `layout` (stamped when left full); its slots still hold that
            // layout if it was stamped so.
            let was = std::mem::replace(&mut self.layouts[p as usize], NO_LAYOUT);
            ch.write_same = layout != NO_LAYOUT && was == layout;
            ch.write_layout = layout;
        } else if ch.write_layout != layout {
            // Another writer in this page: its slots follow no one layout any more.
            ch.write_layout = NO_LAYOUT;
            ch.write_same = false;
        }
        let (page, offset) = (ch.write_page, ch.write_offset);
        hold(holds, table, page);
        ch.write_offset = offset + words;
        ch.index.fill_home(
            home,
            l1id,
            Location {
                page,
                offset: offset as u32,
                words: words as u32,
            },
        );
        prefetch_next(table, ch, &self.layouts, words, pw, layout);
        ch.counters.fragments += 1;
        ch.counters.words += words as u64;
        note_l1id(ch, l1id);
        if !fits {
            let in_use = self.pages_per_channel - ch.free.len();
            if !ch.alarm && in_use >= self.alarm_pages {
                ch.alarm = true;
                ch.counters.alarms += 1;
            }
        }
        Some((page, offset, ch.source_id, ch.write_same))
    }

    /// Every case of an ingest (the common one is [`EventStore::place_fast`]).
    #[inline(never)]
    fn ingest_general(
        &mut self,
        c: usize,
        l1id: u32,
        rod_words: usize,
        status: Status,
        write: impl FnOnce(&PageTable, u32, usize, &[u32]),
    ) -> Result<Ingested, IngestError> {
        let table = &*self.table;
        let holds = &mut self.holds;
        let page_words = table.page_words();
        let ch = self.channels.get_mut(c).ok_or(IngestError::NoChannel(c))?;
        match ch.index.get(l1id) {
            Some(Slot::Stored(_)) => {
                ch.counters.duplicates += 1;
                return Ok(Ingested::Duplicate);
            }
            Some(Slot::ClearedEarly) => {
                ch.index.remove(l1id);
                ch.counters.dropped_after_clear += 1;
                note_l1id(ch, l1id);
                return Ok(Ingested::AlreadyCleared);
            }
            None => {}
        }
        let words = ROB_HEADER_WORDS + rod_words;
        let room = if ch.write_page == NO_PAGE {
            0
        } else {
            page_words - ch.write_offset
        };
        let fresh = if words <= room {
            0
        } else {
            words.div_ceil(page_words)
        };
        if ch.free.len() < fresh || ch.index.is_full() {
            ch.counters.full += 1;
            return Err(IngestError::Full);
        }
        let header = rob_header(ch.source_id, words, status);
        let layouts = &mut self.layouts;
        let (first, offset) = if fresh == 0 {
            (ch.write_page, ch.write_offset)
        } else {
            // Leave the current page (drop the cursor's hold) and chain fresh pages.
            stamp_left_page(ch, layouts, page_words);
            if ch.write_page != NO_PAGE && unhold(holds, table, ch.write_page) {
                ch.free.push(ch.write_page);
            }
            let first = ch.free.pop().expect("checked above");
            let mut prev = first;
            hold(holds, table, first);
            table.set_next(first, NO_PAGE);
            layouts[first as usize] = NO_LAYOUT;
            for _ in 1..fresh {
                let p = ch.free.pop().expect("checked above");
                layouts[p as usize] = NO_LAYOUT;
                hold(holds, table, p);
                table.set_next(p, NO_PAGE);
                table.set_next(prev, p);
                prev = p;
            }
            // The last page becomes the write page: the cursor holds it.
            hold(holds, table, prev);
            ch.write_page = prev;
            ch.write_offset = 0;
            (first, 0)
        };
        if fresh == 0 {
            hold(holds, table, first);
        }
        // The write page now holds a fragment of no card run's layout.
        ch.write_layout = NO_LAYOUT;
        ch.write_same = false;
        write(table, first, offset, &header);
        ch.write_offset = if fresh == 0 {
            offset + words
        } else {
            // Words on the last page of the chain: 1 ..= page_words.
            words - (fresh - 1) * page_words
        };
        let loc = Location {
            page: first,
            offset: offset as u32,
            words: words as u32,
        };
        // The index had no entry (checked above) and is not full: the insert succeeds.
        let _ = ch.index.insert_absent(l1id, Slot::Stored(loc));
        prefetch_next(table, ch, layouts, words, page_words, NO_LAYOUT);
        ch.counters.fragments += 1;
        ch.counters.words += words as u64;
        note_l1id(ch, l1id);
        let in_use = self.pages_per_channel - ch.free.len();
        if !ch.alarm && in_use >= self.alarm_pages {
            ch.alarm = true;
            ch.counters.alarms += 1;
        }
        Ok(Ingested::Stored)
    }

    /// What channel `c` holds for `l1id`.
    #[inline]
    pub fn lookup(&self, c: usize, l1id: u32) -> Lookup {
        let ch = &self.channels[c];
        match ch.index.get(l1id) {
            Some(Slot::Stored(_)) => Lookup::Present,
            Some(Slot::ClearedEarly) => Lookup::Lost,
            None => match ch.last_l1id {
                Some(last) if !l1id_newer(l1id, last) => Lookup::Lost,
                _ => Lookup::Pending,
            },
        }
    }

    /// Appends the page segments of the fragment of (`c`, `l1id`) to `out`, the store holding
    /// each page itself (a plain counter, as for a stored fragment) until
    /// [`EventStore::release_held`]; returns false (and appends nothing) when it is not stored.
    /// For a reader that hands its segments back to this thread (the direct link): no atomic
    /// operation on either side.
    #[inline]
    pub(crate) fn hold_segments(
        &mut self,
        c: usize,
        l1id: u32,
        out: &mut Vec<HeldSegment>,
    ) -> bool {
        let Some(Slot::Stored(loc)) = self.channels[c].index.get(l1id) else {
            return false;
        };
        for s in chain(&self.table, loc, self.page_words) {
            hold(&mut self.holds, &self.table, s.page);
            out.push(s);
        }
        true
    }

    /// Gives back the holds [`EventStore::hold_segments`] took; pages whose last holder that
    /// was go back to their channel's free stack.
    pub(crate) fn release_held(&mut self, segments: impl IntoIterator<Item = HeldSegment>) {
        for s in segments {
            if unhold(&mut self.holds, &self.table, s.page) {
                let c = usize::from(self.page_channel[s.page as usize]);
                self.channels[c].free.push(s.page);
            }
        }
    }

    /// The page table, for readers of held segments.
    pub(crate) fn table(&self) -> &Arc<PageTable> {
        &self.table
    }

    /// Calls `f` with a [`PageRef`] per page segment of the fragment of (`c`, `l1id`); returns
    /// false (and calls nothing) when it is not stored.
    #[inline]
    pub fn with_segments(&self, c: usize, l1id: u32, mut f: impl FnMut(PageRef)) -> bool {
        let Some(Slot::Stored(loc)) = self.channels[c].index.get(l1id) else {
            return false;
        };
        for s in chain(&self.table, loc, self.page_words) {
            f(PageRef::new(&self.table, s.page, s.offset, s.words));
        }
        true
    }

    /// A copy of the ROB fragment of (`c`, `l1id`), for tests and diagnostics.
    pub fn fragment_copy(&self, c: usize, l1id: u32) -> Option<Vec<u32>> {
        let mut out = Vec::new();
        self.with_segments(c, l1id, |r| out.extend_from_slice(r.words()))
            .then_some(out)
    }

    /// Releases `l1ids` on every channel. Returns the fragments released.
    pub fn clear(&mut self, l1ids: impl IntoIterator<Item = u32>) -> u64 {
        let table = &*self.table;
        let holds = &mut self.holds;
        let pw = table.page_words();
        let mut released = 0;
        self.clear_ids.clear();
        self.clear_ids.extend(l1ids);
        // Channel by channel: a group of consecutive L1IDs then walks adjacent index slots.
        for ch in &mut self.channels {
            for &l1id in &self.clear_ids {
                // The common case first: stored at home, nothing to shift.
                if let Some(loc) = ch.index.take_home(l1id) {
                    release_fragment(holds, table, &mut ch.free, loc, pw);
                    ch.counters.cleared += 1;
                    released += 1;
                    continue;
                }
                match ch.index.remove(l1id) {
                    Some(Slot::Stored(loc)) => {
                        release_fragment(holds, table, &mut ch.free, loc, pw);
                        ch.counters.cleared += 1;
                        released += 1;
                    }
                    Some(Slot::ClearedEarly) => {
                        // Cleared twice before it arrived: keep the marker.
                        let _ = ch.index.insert_absent(l1id, Slot::ClearedEarly);
                    }
                    None => {
                        let newer = ch.last_l1id.is_none_or(|last| l1id_newer(l1id, last));
                        if !newer || ch.index.insert_absent(l1id, Slot::ClearedEarly).is_err() {
                            ch.counters.unknown_clears += 1;
                        }
                    }
                }
            }
        }
        for ch in &mut self.channels {
            let in_use = self.pages_per_channel - ch.free.len();
            if ch.alarm && in_use < self.alarm_pages {
                ch.alarm = false;
            }
        }
        released
    }

    /// Pages in use on channel `c` after the write cursor's page is released if it holds no
    /// fragment (an idle, fully cleared channel then shows zero).
    pub fn settle(&mut self, c: usize) -> usize {
        let table = &*self.table;
        let ch = &mut self.channels[c];
        // Only the cursor holds it: no stored fragment.
        if ch.write_page != NO_PAGE && self.holds[ch.write_page as usize] == 1 {
            let p = ch.write_page;
            stamp_left_page(ch, &mut self.layouts, table.page_words());
            ch.write_page = NO_PAGE;
            ch.write_offset = 0;
            if unhold(&mut self.holds, table, p) {
                ch.free.push(p);
            }
        }
        self.pages_per_channel - ch.free.len()
    }
}

/// Channel `ch` leaves its write page: the page keeps the layout it was being filled with only
/// when every slot of that layout was written (the next one would not fit), else none. Pages
/// being filled hold no layout (`place_fast`), so a page left early, by any path, never tells
/// a later run that slots it never wrote hold its fragments.
#[inline(always)]
fn stamp_left_page(ch: &Channel, layouts: &mut [u64], page_words: usize) {
    let Some(stamp) = layouts.get_mut(ch.write_page as usize) else {
        return;
    };
    let words = (ch.write_layout & 0xFFFF_FFFF) as usize;
    let complete = ch.write_layout != NO_LAYOUT && ch.write_offset + words > page_words;
    *stamp = if complete { ch.write_layout } else { NO_LAYOUT };
}

/// The next fragment of channel `ch` most likely has this size (`words`) and layout (`layout`)
/// and goes where the cursor is now (or at the first offset of the next free page): warms, for
/// writing, the lines it will write then, so that those writes do not stall on memory. A slot
/// that holds that layout already gets only its ROD L1ID and BCID rewritten (one line); any
/// other gets its header and trailer lines.
#[inline(always)]
fn prefetch_next(
    table: &PageTable,
    ch: &Channel,
    layouts: &[u64],
    words: usize,
    page_words: usize,
    layout: u64,
) {
    let (np, no, same) = if ch.write_offset + words <= page_words {
        (
            ch.write_page,
            ch.write_offset,
            ch.write_same && ch.write_layout == layout,
        )
    } else {
        match ch.free.last() {
            Some(&p) => (
                p,
                first_offset(p, words, page_words),
                layout != NO_LAYOUT && layouts.get(p as usize) == Some(&layout),
            ),
            None => (NO_PAGE, 0, false),
        }
    };
    if np == NO_PAGE {
        return;
    }
    if same {
        table.prefetch(np, no + ROB_HEADER_WORDS + ROD_L1ID_WORD);
    } else {
        table.prefetch(np, no);
        table.prefetch(np, no + 16);
        table.prefetch(np, (no + words).min(page_words) - 1);
    }
}

/// Where the first fragment goes in fresh page `p`, for fragments of `words` words in pages of
/// `page_words`: staggered by a few cache lines from page to page, within the room that
/// fragments of this size leave unused at a page's end anyway (so no page holds fewer of
/// them). Without it every page's first header sits at offset 0, and the header lines of all
/// the store's pages compete for the same few cache sets.
#[inline(always)]
fn first_offset(p: u32, words: usize, page_words: usize) -> usize {
    let spare = page_words % words;
    // 16 words = one 64-byte line; eight colours.
    let want = (p as usize % 8) * 16;
    want.min(spare & !15)
}

/// Drops the store's holds of a cleared fragment at `loc`: one per page it touches; pages
/// whose last reference that was go back on `free`.
#[inline(always)]
fn release_fragment(
    holds: &mut [u32],
    table: &PageTable,
    free: &mut Vec<u32>,
    loc: Location,
    page_words: usize,
) {
    for s in chain(table, loc, page_words) {
        if unhold(holds, table, s.page) {
            free.push(s.page);
        }
    }
}

/// The page segments of a stored fragment at `loc`, in order along its chain of pages. Each
/// page's successor is read when its segment is produced (and only when the fragment goes on),
/// so a caller may free the page it was handed before asking for the next.
#[inline(always)]
fn chain(
    table: &PageTable,
    loc: Location,
    page_words: usize,
) -> impl Iterator<Item = HeldSegment> + '_ {
    let (mut page, mut offset, mut rest) = (loc.page, loc.offset as usize, loc.words as usize);
    std::iter::from_fn(move || {
        if rest == 0 {
            return None;
        }
        let n = rest.min(page_words - offset);
        let s = HeldSegment {
            page,
            offset: offset as u32,
            words: n as u32,
        };
        rest -= n;
        if rest > 0 {
            page = table.next(page);
        }
        offset = 0;
        Some(s)
    })
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

#[inline(always)]
fn note_l1id(ch: &mut Channel, l1id: u32) {
    if ch.last_l1id.is_none_or(|last| l1id_newer(l1id, last)) {
        ch.last_l1id = Some(l1id);
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

/// No card-run layout (see the module docs).
const NO_LAYOUT: u64 = 0;

/// A card run's page layout: fragment size (ROB header included, never zero) and status.
#[inline]
fn layout_key(words: usize, status: Status) -> u64 {
    (u64::from(status.word()) << 32) | (words as u64 & 0xFFFF_FFFF)
}

/// What a card run's `fill` is asked to write ([`EventStore::ingest_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewrite {
    /// Every word: the slot holds anything.
    Full,
    /// Only the words that differ from the fragment this channel's runs last wrote in this
    /// slot with the same size and status, which the slot still holds.
    Changed,
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
