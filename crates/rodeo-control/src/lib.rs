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
//! What a partition is:
//! - [`config`]: the TOML partition configuration, one file per section with its defaults and
//!   its checks, and the commented default (`config/default.toml`); [`binds`]: its addresses
//!   tried on this host (`rodeo config check --bind`).
//! - [`partition`]: the layout: every application's name, [`partition::Role`], endpoint and
//!   configuration.
//! - [`lifecycle`]: the state machine every application and the partition go through.
//!
//! Its applications, in every mode:
//! - [`application`]: the [`application::Application`] trait and its four implementations
//!   (readout node, supervisor, DCM, logger); [`driver`]: the [`driver::AppDriver`] that moves
//!   one application through the lifecycle, the same in every mode.
//!
//! Running them:
//! - [`run_control`]: the run-control interface ([`run_control::RunControl`]), the
//!   whole-partition interface ([`run_control::Partition`]) and [`run_control::run_to_end`],
//!   one run of either.
//! - [`embedded`]: the partition as threads of this process ([`embedded::EmbeddedPartition`]).
//! - [`controller`]: the [`controller::Controller`] that runs a partition as processes, local
//!   or over ssh, watching heartbeats and restarting the dead; [`app_process`]: one
//!   application in its own `rodeo app` process ([`app_process::AppControl`]) and its side of
//!   the control channel; [`channel`]: the channel's messages; [`leftovers`]: what runs whose
//!   processes are gone left in the temporary directory, removed when a controller starts.
//!
//! Watching them:
//! - [`metrics`]: the one metric vocabulary (typed live counters per role, the `/metrics`
//!   families; the readout inputs' in `input_metrics`); [`prometheus`]: its text format;
//!   [`rates`]: the status's rates.
//! - [`summary`]: the typed summaries and the run's balance sheet.
//! - [`monitoring`]: event sampling (`[monitoring]`, the forwarder, the histogram subscriber);
//!   [`alarms`]: conditions on the partition's numbers (`[[alarms]]`).
//!
//! A run of a partition (its number, directory, record) and the HTTP API live one crate up,
//! in `rodeo-run`.

// What a partition is.
pub mod binds;
pub mod config;
pub mod lifecycle;
pub mod partition;

// Its applications.
pub mod application;
pub mod driver;

// Running them.
pub mod app_process;
mod beat;
pub mod channel;
pub mod controller;
pub mod embedded;
pub mod leftovers;
pub mod run_control;

// Watching them.
pub mod alarms;
mod input_metrics;
pub mod metrics;
pub mod monitoring;
pub mod partition_metrics;
pub mod prometheus;
pub mod rates;
pub mod summary;
