//! rodeo's control layer: the partition configuration and the runner that brings a partition
//! up, runs it and brings it down in dependency order, ending with the run's balance sheet.
//!
//! - [`chrome_trace`]: sampled per-event stage time stamps as a Chrome/Perfetto trace.
//! - [`config`]: the TOML partition configuration, its defaults and its validation.
//! - [`partition`]: the embedded partition runner and the run's balance sheet.
//! - [`embedded`]: the embedded partition under run control ([`embedded::EmbeddedPartition`]).
//! - [`lifecycle`]: the state machine every application and the partition go through.
//! - [`control`]: the run-control interface ([`control::RunControl`]) and status types.
//! - [`http`]: the HTTP/1.1 API (status, commands with a bearer token, configuration,
//!   `/metrics`, the web page) for any [`control::RunControl`].
//! - [`prometheus`]: the Prometheus text-format writer.
//! - [`channel`]: the control channel's messages (controller <-> `rodeo app` processes).
//! - [`app`]: one application under lifecycle control ([`app::AppControl`]) and its side of
//!   the control channel.
//! - [`controller`]: the [`controller::Controller`] that runs a partition as processes, local
//!   or over ssh, in dependency order, watching heartbeats.

pub mod app;
pub mod channel;
pub mod chrome_trace;
pub mod config;
pub mod control;
pub mod controller;
pub mod embedded;
pub mod http;
pub mod lifecycle;
pub mod partition;
pub mod prometheus;
