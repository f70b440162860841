//! The SW ROD fragment builder: E-link packets from FELIX blocks into one ROB fragment per L1ID.
//!
//! **Role in the flow.** card (`rodeo-cards`, FELIX mode) -> **fragment builder** -> event store
//! (`rodeo-ros`, through a [`FragmentSink`]). It reads superpages through the
//! `rodeo_cards::dma::DmaChannel` trait and hands each built fragment to a sink.
//!
//! **Owns**: its receiving threads (scoped inside [`FragmentBuilder::run`]), their window slots
//! and rings, and the pool blocks of the fragments until the sink drops them.
//!
//! **Must not depend on** the event store, a transport or anything above: the store plugs in as
//! a [`FragmentSink`]; the emulated cards appear only in its tests and benches.
//!
//! # Modules
//!
//! The builder and its threads:
//!
//! - `builder`: [`FragmentBuilder`] (the configuration checked, the receiving threads started
//!   and joined); `config`: [`SwRodConfig`] and the plan the threads use; `error`:
//!   [`SwRodError`].
//! - `lane`: one receiving thread's turns over its channels and its end of input.
//! - `pool`: [`BuilderPool`], the builders of many ROBs on a fixed number of threads.
//!
//! The per-thread hot path and the state the threads share:
//!
//! - `walker`: the FELIX block walk, packets split over blocks joined;
//! - `receiver/`: the per-thread aggregation (window slots, packet placement, closing events,
//!   assembling complete fragments);
//! - `exchange`: the rings of parts, the completion marks and the assembly cursors the threads
//!   share (model-checked with loom).
//!
//! What goes in and out:
//!
//! - `decoder`: [`PacketDecoder`], the E-link packet format ([`DefaultFormat`]);
//! - `fragment`: [`Fragment`] (the built ROB fragment, blocks joined by reference),
//!   [`FragmentSink`] and its [`Flow`];
//! - `counters`: [`SwRodCounters`].
//!
//! # The algorithm (ATLAS SW ROD, HL-LHC talk)
//!
//! N **receiving threads**, each owning a disjoint set of E-links and the DMA channels that carry
//! them, read the card's superpages. Each thread aggregates, per L1ID, the packets of its own
//! E-links into its **own memory block** from the pool (a [`rodeo_memory::Chunk`], through a
//! per-thread [`rodeo_memory::PoolCache`]: warmed memory, no shared cache line per allocation).
//! When a thread has closed its part of an L1ID, it leaves the block in its own ring of parts
//! and, every 16 events and once per superpage, publishes how far it has got in a completion
//! mark on a cache line of its own. An L1ID is complete when every thread's mark has passed it;
//! complete L1IDs are assembled in groups of 64, group `g` by thread `g % N` (so the threads
//! share the assembly evenly), when it next publishes: it writes each one's ROB and ROD headers
//! and trailer in place and hands the N blocks, joined by reference, to the [`FragmentSink`] as
//! one [`Fragment`] (see [`Fragment`] for the layout). A whole packet is copied once, from the
//! superpage into the block; a packet split over FELIX blocks is first joined from its pieces
//! (the usual FIRST + LAST pair in a small per-E-link buffer, anything else in its E-link's
//! reassembler). No block is ever copied to join it to the others.
//!
//! The per-thread hot path (block walk, packet placement, window slots) is in `walker.rs` and
//! `receiver/`; the state the threads share is in `exchange.rs`.
//!
//! The rejected alternative is one aggregating thread fed by the receivers through queues: it
//! pays a queue hop per packet (or per block) and caps the whole builder at one core, which at
//! 100 MHz of packets leaves about 10 cycles per packet. With per-thread blocks and rings the
//! threads share no cache line per packet and no read-modify-write per L1ID: per batch, one
//! store of a mark and of an assembly cursor, and reads of the other threads' marks and cursors;
//! the assembler reads the other threads' part summaries (a few words per L1ID) from their
//! rings.
//!
//! # Configuration and the L1ID window
//!
//! [`SwRodConfig`] names each thread's E-links, the window (L1IDs in flight, a power of two), the
//! timeout, the L1ID wrap (the ECR counter in bits 31..24 of the extended L1ID increments when
//! the L1ID reaches it, as the emulators do) and the extended L1ID of the first event. Events
//! are numbered from the first one; the window slot of an event is its number's low bits.
//!
//! # Faults
//!
//! - A missing packet: the fragment is built when the thread's oldest open event is older than
//!   the timeout (for a thread that has no packet at all of an event another thread has
//!   published, from when it first saw that mark), or when a packet arrives a whole window
//!   later, or at the end of the run; it is flagged TIMEOUT + FRAGMENT_LOST and the ROD status
//!   block lists the missing E-links.
//! - A duplicate (second packet of an E-link for an open L1ID) or late packet (its L1ID already
//!   built): dropped and counted.
//! - BCID disagreement within a fragment: BCID_CHECK_FAIL.
//! - A corrupt block (bad marker, impossible trailer, sequence gap) or packet (decoder error)
//!   is counted and dropped; the reassembly state of its E-link is flushed, and other E-links
//!   never notice. Packets delivered with FELIX error flags keep them in their packet status.
//!
//! # Back-pressure and shutdown
//!
//! A thread that finds the pool empty waits (counted `pool_waits`): the consumer holds too
//! many fragments (or other threads' caches hold its blocks: it flags its pool, and they give
//! them back when they next publish). A thread a whole window ahead of the assembly waits for the slower threads
//! (`slot_waits`), publishing its mark and assembling what is complete meanwhile. While a
//! thread waits it reads no superpages, so its channels stall and the card applies XOFF.
//! [`FragmentBuilder::run`] returns when every channel of every thread has ended (link down and
//! nothing ready) or when the caller's stop flag (or a sink's [`Flow::Stop`]) is set: the threads
//! then build every event any of them has seen, incomplete ones flagged, so that every packet
//! read lands in exactly one fragment.

mod builder;
mod config;
mod error;
mod lane;
mod pool;

mod exchange;
mod receiver;
mod walker;

mod counters;
mod decoder;
mod fragment;

pub use builder::FragmentBuilder;
pub use config::SwRodConfig;
pub use counters::SwRodCounters;
pub use decoder::{DefaultFormat, PacketDecoder, PacketError, PacketInfo};
pub use error::SwRodError;
pub use fragment::{
    CountingSink, Flow, Fragment, FragmentSink, SinkCounts, HEADER_WORDS, MAX_THREADS,
    PACKET_HEADER_WORDS, ROB_HEADER_WORDS,
};
pub use pool::{BuilderPool, RobRun};
