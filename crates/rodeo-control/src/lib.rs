//! rodeo's control layer: the partition configuration and the runner that brings a partition
//! up, runs it and brings it down in dependency order, ending with the run's balance sheet.
//!
//! - [`config`]: the TOML partition configuration, its defaults and its validation.
//! - [`partition`]: the embedded partition runner and the run's balance sheet.
//! - [`lifecycle`]: the state machine every application and the partition go through.
//! - [`control`]: the run-control interface ([`control::RunControl`]) and status types.
//! - [`prometheus`]: the Prometheus text-format writer.
//! - [`channel`]: the control channel's messages (controller <-> `rodeo app` processes).
//! - [`app`]: one application under lifecycle control ([`app::AppControl`]) and its side of
//!   the control channel.
//! - [`controller`]: the [`controller::Controller`] that runs a partition as processes, local
//!   or over ssh, in dependency order, watching heartbeats.

pub mod app;
pub mod channel;
pub mod config;
pub mod control;
pub mod controller;
pub mod lifecycle;
pub mod partition;
pub mod prometheus;
