//! rodeo's memory: pre-allocated, warmed-up pools of fixed-size chunks and pages.
//!
//! **Role in the flow.** Under every stage with a data path: the cards' superpages, the SW
//! ROD's blocks, the event store's pages, and the queues and waits between their threads.
//!
//! **Must not depend on** any other rodeo crate, nor know what its memory holds (fragments,
//! events, messages): every crate that allocates per event builds on it, never the other way
//! round.
//!
//! The pools (private modules, their types re-exported here):
//!
//! - `chunk`: [`ChunkPool`] (with the per-thread [`PoolCache`]): fixed-size chunks that grow
//!   by whole regions up to a limit, for fragment builders and anything else that allocates per
//!   event; `raw`: the lock-free core every pool shares (below, "The atomic state");
//!   `stats`: [`PoolStats`].
//! - `page`: [`PagePool`] / [`PageHandle`]: the readout's pages, shared via `Arc`, handles that
//!   cross threads and give the page back on drop; [`SuperpagePool`] / [`Superpage`]:
//!   contiguous buffers of one size for DMA-style producers.
//! - `region`: [`Region`]: `mmap`'d memory with warm-up ([`WarmupReport`]), huge pages and
//!   `mlock`; `error`: [`AllocError`] and [`Error`].
//!
//! What the threads of the data path share:
//!
//! - [`queue`]: [`BoundedQueue`], the one bounded in-process queue (with a named
//!   [`FullPolicy`]: `block`, `drop_newest`, `refuse`, and a registry read by `/metrics`), and
//!   [`Backoff`], the one way a thread waits for another.
//! - [`histogram`]: [`LogHistogram`], a lock-free log-bucket latency histogram for the data
//!   path's metrics.
//! - [`sync`]: the loom facade (atomics, `Arc`, `UnsafeCell`) every crate's lock-free code uses.
//! - [`cpu`]: the CPUs threads run on: pinning ([`cpu::pin_to_cpu`]), narrowing a thread or the
//!   whole process to a set ([`cpu::narrow_thread`], [`cpu::narrow_process_threads`]), the
//!   process's CPUs as first seen ([`cpu::process_cpus`]), and a thread's CPU time.
//! - [`machine`]: what the machine offers: page size, memory, huge pages, the mlock limit.
//!
//! # Why a lazy free list
//!
//! The rejected alternative is the classic pool (boost::pool): when it grows, it allocates a
//! block twice the size of the previous one and threads *every* chunk of the new block onto its
//! free list before returning. That pass writes every chunk, so it page-faults the whole block
//! and its time doubles with each growth; at 1 GiB one allocation takes a fraction of a second.
//! The ATLAS SW ROD lost data when such stalls exceeded the trigger's latency budget.
//!
//! Here a chunk joins the free list only when it is *freed*. A new region is handed out by
//! bumping an index ("never used" chunks are not on any list), so growing costs one `mmap` and
//! no pass over memory, and with warm-up the pages are already faulted in before the run. Every
//! allocation is then a CAS on the free list or on the bump index: tens of nanoseconds, with no
//! stall but the (rare, bounded, optional) mapping of a region.
//!
//! # The atomic state
//!
//! A pool's core is a handful of words (private type `RawPool`):
//!
//! | word | bits | meaning |
//! |---|---|---|
//! | `head: AtomicU64` | `63..32` tag, `31..0` index | top of the free list; index `u32::MAX` = empty |
//! | `depot: AtomicU64` | same as `head` | top of the stack of full 32-chunk batches (cache flushes) |
//! | `next: [AtomicU32]` | one per chunk | the chunk below on the free list (only while free) |
//! | `bump: AtomicU64` | | next never-used chunk index |
//! | `committed: AtomicU64` | | chunks in published regions; `bump <= committed` always |
//! | `bases: [AtomicUsize]` | one per region | region start address, written once |
//! | `growing: AtomicBool` | | a thread is mapping a region |
//!
//! Chunk `i` lives at `bases[i / chunks_per_region] + (i % chunks_per_region) * chunk_bytes`.
//!
//! # Rules
//!
//! 1. Only a successful CAS of `head` changes the free list, and every such CAS increments the
//!    tag. A pop reads `head` (acquire), then `next[index]`, then CASes `head` from the value it
//!    read to `(next, tag + 1)`. If in between the chunk was popped and pushed back (the ABA
//!    case), the tag differs and the CAS fails, so a stale `next` is never installed. The tag
//!    wraps after 2^32 operations; an ABA would need exactly that many operations by other
//!    threads between one pop's load and its CAS.
//! 2. `bump` only grows, by CAS, and never past `committed`; a chunk handed out by bump was
//!    never handed out before.
//! 3. A region is published in order: map (and warm) it, store its base in `bases`, then store
//!    `committed += chunks_per_region` (release). Whoever reads `committed` (acquire) above an
//!    index sees that index's base.
//! 4. Only the thread that flips `growing` from false to true (CAS) maps a region; it clears
//!    the flag (release) when done, also on error. Other allocators yield and retry the free
//!    list and bump meanwhile; they wait only for the mapping to finish, never for a lock held
//!    by a descheduled thread doing something else. At the limit they get
//!    [`AllocError::Exhausted`], which callers turn into back-pressure.
//! 5. A thread may write `next[i]` only while it owns chunk `i` (after taking it, before the
//!    push CAS that publishes it). The push CAS is a release, the pop CAS an acquire, so the
//!    chunk's contents written by its last owner are visible to its next owner.
//! 6. Statistics are relaxed counters and never order anything.
//! 7. The depot is a second tagged stack with the same rules; its nodes are batches of 32 free
//!    chunks, named by the first chunk, whose *memory* holds the other 31 indices (pools with
//!    chunks of at least 128 bytes; smaller chunks are flushed as linked chains onto the free
//!    list). The flusher writes the indices before the push CAS (release); they are read only
//!    by the thread whose pop CAS (acquire) took the batch, so the read is ordered and owned. A
//!    cache refill therefore costs one CAS and one cache line, not a 32-link walk. A direct
//!    allocation that finds the free list and bump empty breaks a batch up (one chunk for
//!    itself, 31 linked onto the free list), so no chunk is ever out of reach.
//!
//! The lock-free parts are model-checked with loom (atomics come from a `sync` facade):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p rodeo-memory --release --test loom_pool
//! ```
//!
//! # Back-pressure and shutdown
//!
//! Pools never block forever and never grow past their limit: exhaustion is an error value.
//! Handles borrow ([`Chunk`]) or share ([`PageHandle`], [`Superpage`]) their pool, so the
//! regions are unmapped only when the last handle is gone.

pub mod cache;
mod chunk;
pub mod cpu;
mod error;
pub mod histogram;
pub mod machine;
mod page;
pub mod queue;
mod raw;
mod region;
mod stats;
pub mod stream;
pub mod sync;

pub use chunk::{Chunk, ChunkPool, PoolCache, PoolConfig};
pub use error::{AllocError, Error};
pub use histogram::LogHistogram;
pub use page::{
    PageHandle, PagePool, PagePoolConfig, Superpage, SuperpagePool, SuperpagePoolConfig,
};
pub use queue::{Backoff, BackoffSpec, BoundedQueue, FullPolicy, PolicyKind, Pushed, Refused};
pub use region::{HugePages, Mlock, Region, RegionOptions, WarmupReport, BASE_PAGE, HUGE_PAGE};
pub use stats::PoolStats;
