//! The SW ROD input of a readout node: fragment builders feeding the event store, from the
//! emulated FELIX cards to the core thread, in one folder.
//!
//! **The feed** ([`crate::node::NodeInput::SwRod`]): one SW ROD serving all the node's ROBs:
//! per ROB an emulated FELIX channel and a single-thread fragment builder, all the builders on a
//! fixed [`BuilderPool`](rodeo_swrod::BuilderPool) of builder threads (`threads`, default one
//! per core; ROB `r` on pool thread `r % threads`, so a ROB's fragment completes where its
//! packets land) drawing their blocks from one shared block pool, and one thread (`swrod`) that
//! runs the pool and publishes the builders' counters every 20 ms (for
//! [`crate::node::ReadoutNode::swrod_stats`] and [`SwRodMonitor`]). Each builder hands its
//! fragments to the core thread through its ROB's [`swrod_link`] (the per-ROB reorder window;
//! back-pressure: a full store holds the builder, which stops reading its card, which stalls).
//!
//! **The link** between one builder and one store channel: a [`FragmentSink`] on the builder's
//! side ([`StoreSink`]) and an [`Input`] on the core thread's side ([`SwRodInput`]), joined by
//! two bounded lock-free queues of batches ([`swrod_link`]).
//!
//! Files, one job each:
//! - `batch`: a batch of fragments and where each lies (lent store page or the batch's words);
//! - `handover`: the link's shared state: the `free`/`ready` queues, the open batch, the
//!   counters (and the loom tests of the hand-over);
//! - `sink`: the builder's end ([`StoreSink`]);
//! - `window`: the core thread's end and its reorder window ([`SwRodInput`]);
//! - `link`: making a link ([`swrod_link`]) and polling one per channel ([`SwRodInputs`]);
//! - `counters`: [`SwRodLinkCounters`], [`SwRodInputCounters`];
//! - `parts`: the feed built but not running (cards, block pool, builder pool, links);
//! - `builders`: the `swrod` thread's work (the pool run, the cards' leftovers counted);
//! - `feed`: the running feed, its live counters and its shutdown;
//! - `monitor`: [`SwRodMonitor`], the shared handle on the live counters.
//!
//! # Data flow and copies
//!
//! The builder's receiving threads complete a fragment as N pool blocks joined by reference.
//! The sink writes it, in one pass over the pieces (`FragmentSink::inspect`), into the link's
//! open **batch**, and leaves the blocks to the builder, which recycles them at once through
//! its thread's pool caches, so the builder's memory stays with the builder. A batch carries
//! store pages that the core thread lent it ([`EventStore::lend`], up to
//! `BATCH_PAGES_BYTES` worth): the sink writes each fragment straight into the next room in
//! them, behind the store's own 8-word ROB header with the builder's status (TIMEOUT,
//! FRAGMENT_LOST, BCID_CHECK_FAIL, ...), in place of the builder's header, with plain stores
//! (no prefetch of the next one's lines: within the noise when last tried, 2026-12-06). A
//! batch goes to the core thread when the builder has read a superpage
//! (`FragmentSink::flush`), when its pages are full, or at [`BATCH_FRAGMENTS`]
//! fragments: a batch is to the SW ROD input what a superpage is to the S-LINK input, so the
//! two threads exchange one queue item per superpage, not one per fragment (a queue hop moves
//! a few cache lines between the cores: per fragment it cost more than the fragment's
//! copies). The core thread then indexes each fragment where it lies ([`EventStore::adopt`]:
//! no copy, and no read of the page: the sink noted each fragment's L1ID), takes back the
//! pages written, lends fresh ones in their place, and returns the batch. The only copy of a
//! fragment between the builder's blocks and the reply is the sink's, on the builder's core
//! (the S-LINK input's is the core thread's).
//!
//! A fragment that no lent page can take (the store lent the batch none, its channel having
//! no page to spare, or one larger than a page) is copied into the batch's own words instead
//! (at most [`BATCH_WORDS`] of them), and the core thread copies it into the store
//! ([`EventStore::ingest`]), as before the pages were lent: two copies, but back-pressure
//! stays the store's. A link's batches hold at most a quarter of their channel's pages
//! (`LENT_SHARE`); the store keeps its last free page ([`crate::store::LEND_KEEP`]).
//!
//! # Order
//!
//! The store expects each channel's L1IDs in order: an absent L1ID older than the channel's
//! last one is answered LOST (protocol rule 3), as an S-LINK ROD sends in order. A builder of
//! one receiving thread (a pooled ROB, [`rodeo_swrod::BuilderPool`]) completes its L1IDs in
//! order, incomplete ones included (a thread closes its oldest open L1ID first), so each
//! fragment is the one the input waits for and is stored straight from its batch. A builder of
//! N threads does not: its threads complete L1IDs in groups of 64, group `g` on thread
//! `g % N`, so a group can arrive before the one before it is finished. The input therefore
//! puts the fragments back in L1ID order before storing them, in a window twice the builder's
//! own (L1IDs in flight, [`SwRodConfig::window`]): a fragment ahead of the one it waits for is
//! copied out of its batch into a window slot (a buffer of the core thread's, reused), so a
//! batch always goes back once read and the window never holds the builder back. The builder
//! never has more L1IDs open than its window and builds every one exactly once, so the window
//! always drains.
//!
//! What the window does with the unexpected:
//! - a fragment a whole window or more ahead of the L1ID it waits for (a gap in the builder's
//!   sequence, or a builder restarted at another L1ID): the window is flushed in order up to
//!   it, the L1IDs that never came counted in [`SwRodLinkCounters::skipped`], and waiting
//!   resumes from there;
//! - a second copy of an L1ID waiting in the window: dropped, counted in
//!   [`SwRodLinkCounters::duplicates`];
//! - a fragment behind the L1ID it waits for (one skipped earlier, or a copy of one stored):
//!   stored as it came (the store keeps the first copy of an L1ID), counted in
//!   [`SwRodLinkCounters::out_of_order`];
//! - a fragment too short to carry an L1ID: counted in [`SwRodLinkCounters::rejected`].
//!
//! # State and ownership
//!
//! | queue | producer | consumer | holds |
//! |---|---|---|---|
//! | `free` | core thread | builder threads (any) | empty batches, with their lent pages |
//! | `ready` | builder threads (any) | core thread | filled batches |
//!
//! A lent page is written by one thread at a time, the holder of its batch, and read by no one
//! before the core thread has indexed its fragments; the queues order the sink's writes before
//! the core thread's look (see [`crate::store`], `lend`). When the input is dropped, the lent
//! pages of the batches it can reach go back to the store at once, and those of a batch the sink
//! holds at its next hand-over or flush, so a store outliving its input gets every page back.
//!
//! The batch being filled (`open`) is behind a mutex that only the ROB's receiving threads
//! take (one thread for a pooled ROB: never contended). Every batch is allocated when the link
//! is made and keeps its capacity; one that must grow for a larger fragment grows once. Each
//! queue is as large as the set of batches, so a push never fails. The window's slots and the
//! batch being read belong to the core thread.
//!
//! # Back-pressure
//!
//! Full store: [`SwRodInput`]'s `poll` stops at the refused fragment and retries it on the next
//! poll, so read batches stop coming back. Fewer free batches than one superpage has taken so
//! far (learnt at each `flush`): the sink reports no room (`FragmentSink::has_room`, counted
//! once per episode in [`SwRodLinkCounters::sink_waits`]) and its builder stops reading its
//! cards, which stall, so that a pool thread does not start a superpage it cannot finish; a
//! sink that still needs a batch in the middle of a superpage waits (spin, then yield, then
//! short sleeps; counted likewise) while holding the fragment, so its pool blocks stay taken.
//! Nothing is dropped on the way; a fragment the store drops for its own reasons (a duplicate
//! L1ID, one cleared before it arrived, too short to hold an L1ID) is counted by the store as
//! for any input.
//!
//! # Shutdown
//!
//! Dropping the [`SwRodInput`] (the core thread stopped) makes a waiting sink give up: it then
//! drops the fragment and counts it in [`SwRodLinkCounters::dropped_no_consumer`], as it does
//! for a batch it would hand over from then on, so a builder never hangs on a node that is
//! gone. [`StoreSink::abandon`] does the same while the core thread still runs: a node stopping
//! its builder before its core thread calls it once the builder no longer progresses (a full
//! store nobody clears), so the builder's final fragments cannot wait forever; fragments
//! already handed over are still stored.
//!
//! A readout node stops its feed producers first, so nothing waits on a thread already gone:
//! the cards' generators are told to finish (each card hands over its last superpage and
//! reports its link down); the builders read what is left and end on their own while the core
//! thread still stores their fragments. If they stop making progress for 100 ms (a full store
//! nobody clears) or 2 s pass, the links are abandoned ([`StoreSink::abandon`]: a waiting sink
//! drops its fragment, counted) and the builders stopped; the builder thread is joined (and
//! with it the card threads); then the core thread is stopped (pending requests answered),
//! which drops its input and counts what it still held.
//!
//! [`SwRodInputs`] polls several links (one per store channel) as one [`Input`], as a readout
//! node fed by one builder per ROB does.
//!
//! [`Input`]: crate::server::Input
//! [`FragmentSink`]: rodeo_swrod::FragmentSink
//! [`SwRodConfig::window`]: rodeo_swrod::SwRodConfig::window
//! [`EventStore::lend`]: crate::store::EventStore::lend
//! [`EventStore::adopt`]: crate::store::EventStore::adopt
//! [`EventStore::ingest`]: crate::store::EventStore::ingest

mod batch;
mod builders;
pub(crate) mod counters;
mod feed;
mod handover;
mod link;
mod monitor;
mod parts;
mod sink;
mod window;

pub use batch::{BATCH_FRAGMENTS, BATCH_WORDS};
pub use counters::{SwRodInputCounters, SwRodLinkCounters};
pub use link::{swrod_link, SwRodInputs};
pub use monitor::SwRodMonitor;
pub use sink::StoreSink;
pub use window::SwRodInput;

pub(crate) use feed::SwRodFeed;
pub(crate) use parts::SwRodParts;
