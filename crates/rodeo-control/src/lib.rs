//! rodeo's control layer: the partition configuration, one lifecycle for every application,
//! and the runners that bring a partition up, run it and bring it down in dependency order,
//! ending with the run's balance sheet; the metrics every application reports.
//!
//! **Role in the flow.** Above every application crate (`rodeo-ros`'s readout node,
//! `rodeo-dataflow`'s supervisor, DCM and logger): it configures, starts, watches and stops
//! them. It **owns** the lifecycle state of every application and of the partition, the control
//! channel to `rodeo app` processes and the processes themselves. It **must not depend on** the
//! runs (`rodeo-run`), the studies or the binary, and no application crate depends on it.
//!
//! - [`config`]: the TOML partition configuration, one file per section with its defaults and
//!   its checks, and the commented default (`config/default.toml`).
//! - [`partition`]: the layout: every application's name, endpoint and configuration.
//! - [`lifecycle`]: the state machine every application and the partition go through.
//! - [`application`]: the [`application::Application`] trait and its four implementations
//!   (readout node, supervisor, DCM, logger); [`driver`]: the [`driver::AppDriver`] that moves
//!   one application through the lifecycle, the same in every mode.
//! - [`metrics`]: the one metric vocabulary (typed live counters per role, the `/metrics`
//!   families); [`summary`]: the typed summaries and the run's balance sheet.
//! - [`embedded`]: the partition as threads of this process ([`embedded::EmbeddedPartition`]).
//! - [`app`]: one application in its own process ([`app::AppControl`]) and its side of the
//!   control channel; [`channel`]: the channel's messages; [`controller`]: the
//!   [`controller::Controller`] that runs a partition as processes, local or over ssh, watching
//!   heartbeats.
//! - [`control`]: the run-control interface ([`control::RunControl`]), the whole-partition
//!   interface ([`control::Partition`]) and [`control::run_to_end`], one run of either.
//! - [`prometheus`]: the metrics' text format.
//!
//! A run of a partition (its number, directory, record) and the HTTP API live one crate up,
//! in `rodeo-run`.

pub mod alarms;
pub mod app;
pub mod application;
pub mod channel;
pub mod config;
pub mod control;
pub mod controller;
pub mod driver;
pub mod embedded;
pub mod lifecycle;
pub mod metrics;
pub mod monitoring;
pub mod partition;
pub mod prometheus;
pub mod rates;
pub mod summary;
