//! rodeo's control layer: the partition configuration and the runner that brings a partition
//! up, runs it and brings it down in dependency order, ending with the run's balance sheet.
//!
//! - [`config`]: the TOML partition configuration, its defaults and its validation.

pub mod config;
