//! rodeo's dataflow applications: everything after the readout nodes.
//!
//! **Role in the flow.** readout nodes (`rodeo-ros`, over the protocol) -> **supervisor, DCMs,
//! loggers** -> raw-data files (`rodeo-files`). Every application is one thread that owns its
//! ZeroMQ sockets and its state: no locks, no shared mutable state. They speak the protocol of
//! `specs/dataflow-protocol.md` over any endpoint (inproc, ipc, tcp, shm), so the same code runs
//! embedded in one process or as separate processes on several hosts. [`AppHandle`] is how a
//! controller stops one and collects its summary.
//!
//! **Must not depend on** the readout (`rodeo-ros`, `rodeo-swrod`, `rodeo-cards`: a readout
//! node is reached only through the protocol), nor on the control layer, the studies or the
//! binary above it: they configure and start these applications, never the other way round.
//!
//! The Level-1 accepts:
//!
//! - [`l1source`]: the Level-1 accepts (an emulator: rate, RoIs drawn from configured ROBs,
//!   deterministic from a seed).
//! - [`external`]: the external L1: accepts from a trigger unit over TCP, busy state back.
//! - [`roib`]: the RoI builder mode of the L1 source: accepts assembled by L1ID from several
//!   Level-1 inputs, with a timeout and flow control.
//!
//! The applications:
//!
//! - [`supervisor`]: assigns events to data-collection nodes against credits, reassigns the
//!   events of slow or dead nodes as forced accepts, groups clears for the readout nodes.
//! - [`dcm`]: a data-collection node: per processing slot, RoI requests to the readout nodes,
//!   the trigger algorithm, the rest of an accepted event, the full event built and shipped to a
//!   logger, done reported after the logger's acknowledgement.
//! - [`logger`]: writes events per stream with group commit (fdatasync per batch), then
//!   acknowledges them; drops (and counts) duplicates, so every event is written once.
//!
//! Their parts:
//!
//! - [`trigger`]: the trigger-algorithm interface and the built-in emulations (the DCM's).
//! - [`trace`]: sampled per-event time stamps at each stage (Chrome/Perfetto traces).
//! - [`dedup`]: the logger's bounded duplicate detector (a low-water mark and a sliding
//!   bitmap over global ids).
//! - [`disks`]: the logger's output directories, their free-space margin, and what a full
//!   disk looks like (statvfs, `ENOSPC`, `EDQUOT`).
//!
//! What every application shares (private modules, re-exported here):
//!
//! - `handle`: [`AppHandle`], a running application's stop flag and thread;
//! - `error`: [`DataflowError`], why an application failed;
//! - and [`DEFAULT_HIGH_WATER_MARK`], below.

pub mod external;
pub mod l1source;
pub mod roib;

pub mod dcm;
pub mod logger;
pub mod supervisor;

pub mod dedup;
pub mod disks;
pub mod trace;
pub mod trigger;

mod error;
mod handle;

pub use error::DataflowError;
pub use handle::AppHandle;

/// The default ZeroMQ high-water mark of the supervisor's, the DCMs' and the loggers' sockets,
/// in messages per peer and direction (`[transport] high_water_mark` in a partition file).
/// At the mark a DEALER's send is policy `block` (bounded by its 1 s send timeout, then the
/// send fails, is counted and retried), a ROUTER's send is policy `drop_newest` (it fails at
/// once and the message is dropped and counted: an assignment comes back at its timeout, an
/// EventAck by reassignment): docs/architecture.md, the table of queues.
pub const DEFAULT_HIGH_WATER_MARK: u32 = 100_000;

/// Sender identities a supervisor or logger keeps apart; a message from one more is a bad
/// message. A peer's identity is its own choice (on shared memory the sender writes it), so a
/// table that grew by one per identity would grow without end; a partition has at most 64
/// DCMs, and restarts under new identities leave room for many more.
pub(crate) const MAX_PEER_IDENTITIES: usize = 4096;
