//! rodeo's dataflow applications: everything after the readout nodes.
//!
//! - [`l1source`]: the Level-1 accepts (an emulator: rate, RoIs drawn from configured ROBs,
//!   deterministic from a seed).
//! - [`external`]: the external L1: accepts from a trigger unit over TCP, busy state back.
//! - [`roib`]: the RoI builder mode of the L1 source: accepts assembled by L1ID from several
//!   Level-1 inputs, with a timeout and flow control.
//! - [`supervisor`]: assigns events to data-collection nodes against credits, reassigns the
//!   events of slow or dead nodes as forced accepts, groups clears for the readout nodes.
//! - [`dcm`]: a data-collection node: per processing slot, RoI requests to the readout nodes,
//!   the trigger algorithm, the rest of an accepted event, the full event built and shipped to a
//!   logger, done reported after the logger's acknowledgement.
//! - [`trace`]: sampled per-event time stamps at each stage (Chrome/Perfetto traces).
//! - [`trigger`]: the trigger-algorithm interface and the built-in emulations.
//! - [`dedup`]: the logger's bounded duplicate detector (a low-water mark and a sliding
//!   bitmap over global ids).
//! - [`disks`]: the logger's output directories, their free-space margin, and what a full
//!   disk looks like (statvfs, `ENOSPC`, `EDQUOT`).
//! - [`logger`]: writes events per stream with group commit (fdatasync per batch), then
//!   acknowledges them; drops (and counts) duplicates, so every event is written once.
//!
//! Every application is one thread that owns its ZeroMQ sockets and its state: no locks, no
//! shared mutable state. They speak the protocol of `specs/dataflow-protocol.md` over any
//! endpoint (inproc, ipc, tcp), so the same code runs embedded in one process or as separate
//! processes on several hosts. [`AppHandle`] is how a controller stops one and collects its
//! summary.

pub mod dcm;
pub mod dedup;
pub mod disks;
pub mod external;
pub mod l1source;
pub mod logger;
pub mod roib;
pub mod supervisor;
pub mod trace;
pub mod trigger;

mod app;

pub use app::{AppHandle, DataflowError};

/// The default ZeroMQ high-water mark of the supervisor's, the DCMs' and the loggers' sockets,
/// in messages per peer and direction (`[transport] high_water_mark` in a partition file).
/// At the mark a DEALER's send is policy `block` (bounded by its 1 s send timeout, then the
/// send fails, is counted and retried), a ROUTER's send is policy `drop_newest` (it fails at
/// once and the message is dropped and counted: an assignment comes back at its timeout, an
/// EventAck by reassignment): docs/architecture.md, the table of queues.
pub const DEFAULT_HIGH_WATER_MARK: u32 = 100_000;
