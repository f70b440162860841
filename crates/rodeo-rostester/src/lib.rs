//! The ROSTester (ROS paper, section 7.1.2): emulated L1 accepts driving a readout node with
//! the HLT's request mix, measuring the delete (L1) rate it sustains.
//!
//! **Role in the flow.** A client of the ROS protocol, standing where the trigger farm's DCMs
//! stand: it sends DataRequest and Clear to a readout node (`rodeo-ros`) and measures what comes
//! back. It **owns** one thread and its link.
//!
//! **Must not depend on** the dataflow applications (`rodeo-dataflow`), the control layer
//! (`rodeo-control`), the studies (`rodeo-studies`) or the binary: the studies and the binary
//! call it, not the reverse. Of `rodeo-ros` it uses the direct link's client and a stopped
//! node's counters, nothing of the node's insides.
//!
//! # The mix
//!
//! Per event: with probability `l2_fraction` an L2 (RoI) request for `roi_size` distinct ROBs
//! drawn uniformly; with probability `eb_fraction` an event-building request for every ROB not
//! requested yet (sent after the L2 reply, as the HLT asks for the rest only after its
//! decision). Once every request of an event is answered its L1ID joins the clear group; a full
//! group (`clear_group`, default 100) goes out as one Clear. The number of requests in flight is
//! bounded (`max_outstanding`); the event rate may be capped (`max_rate`). Instance `I` of `K`
//! generates events `I, I + K, I + 2K, ...`, so several testers share one node without asking
//! for the same L1ID. A reply with FRAGMENT_PENDING fragments is asked again for those ROBs
//! after `retry_delay` (1 ms by default, as a DCM), up to `retries` times (protocol rule 3); then
//! the fragments are counted as missing. The request slot stays taken while the re-ask waits.
//!
//! # Links
//!
//! The tester talks to the node through a [`TesterLink`]: a ZeroMQ DEALER socket ([`run()`],
//! any endpoint, the protocol's encoding) or the direct in-process link
//! ([`rodeo_ros::server::DirectClient`], [`run_direct`]): typed requests and replies whose present
//! fragments are page references read where they lie. The mix, the checks and the report are
//! the same code for both.
//!
//! # Threads and state
//!
//! One thread, one link. Transactions index a fixed table of request slots (slot
//! index in the low 16 bits, a generation above), events in flight sit in a ring, latencies go
//! to a fixed [`Histogram`]: the loop allocates nothing per event.
//!
//! # Shutdown
//!
//! At the event limit, the time limit or the stop flag, the tester stops generating, waits (up
//! to `drain_timeout`) for the replies in flight, sends the partial clear group, and reports.
//! A partial group is also sent when no clear went out for `clear_flush` (protocol rule 5).
//! A node that answers nothing for `drain_timeout` while requests wait ends the run early too
//! ([`TesterReport::stopped_on_silence`]): a dead node is said within seconds, not after the
//! whole `duration` of requests sent into the void.

//!
//! # Modules
//!
//! The tester (private modules, their items re-exported here):
//! - `config`: [`TesterConfig`], one instance's request mix and limits;
//! - `link`: [`TesterLink`] and its two links ([`ZmqLink`], the direct link's client), what
//!   the tester reads of a reply ([`ReplyHead`], [`FragmentHead`]), [`TesterError`];
//! - `run`: the loop of one instance ([`run()`], [`run_direct`], [`run_on`]);
//! - `report`: [`TesterReport`] and its rates;
//! - `histogram`: the fixed latency [`Histogram`].
//!
//! Driving it:
//! - [`drive`]: what `rodeo tester`, the benches and the studies run: tester threads over
//!   ZeroMQ or one on the direct link, configured by [`drive::MixArgs`] (a clap `Args`
//!   struct), and one flat result row ([`drive::Row`]).

mod config;
pub mod drive;
mod histogram;
mod link;
mod report;
mod run;

pub use config::TesterConfig;
pub use histogram::Histogram;
pub use link::{FragmentHead, ReplyHead, TesterError, TesterLink, ZmqLink};
pub use report::{TesterReport, INTERVAL};
pub use run::{run, run_direct, run_on, MAX_ROBS};
