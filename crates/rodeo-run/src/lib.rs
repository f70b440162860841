//! rodeo's runs: one run of a partition from its number to its record, the service that makes
//! one run after another, and the HTTP API over either.
//!
//! **Role in the flow.** Above the partition (`rodeo-control`): a [`run::Run`] takes a run
//! number in an output directory it owns, writes the configuration snapshot, builds the
//! partition (threads or processes), drives it to its end and keeps its balance sheet
//! ([`sheet::RunSheet`], one shape for every way a run ends) in `summary.json` and in the run
//! database. `rodeo run`, `rodeo serve` and `rodeo runs` are thin commands over this crate. It
//! **owns** the output directory's lock, the run database and the run numbers.
//!
//! **Must not depend on** the studies or the binary; nothing below it (control, dataflow,
//! readout) depends on it.
//!
//! The run:
//! - [`setup`]: the configuration file (or the default) and the command line's overrides.
//! - [`lock`]: one output directory, one owner (`flock` on `.rodeo.lock`).
//! - [`output`]: the owned output directory: lock, run database, run numbers, records.
//! - [`run`]: [`run::Run`], one run from its number to its record.
//! - [`sheet`]: [`sheet::RunSheet`], the balance sheet in its one shape; [`verdict`]: ok,
//!   degraded or failed, and the problems behind it; [`text`]: the sheet for people;
//!   [`unbuilt`]: a detector's fragments never built, lost or cut by the stop.
//! - [`rundb`]: the run database (`runs.sqlite`, SQLite); [`runs_table`]: its runs as an
//!   aligned table (`rodeo runs`); [`ctl_tables`]: `rodeo ctl status|runs|alarms` as tables,
//!   and the request of each `rodeo ctl` command.
//!
//! Many runs, and watching them:
//! - [`service`]: [`service::RunService`], a partition that stays up, one run after another.
//! - [`fixed`]: what `PUT /api/config` can never change (processes, listening places, paths
//!   outside the output directory).
//! - [`http`]: the HTTP/1.1 API (status, commands, configuration, `/metrics`, the web page).
//! - [`observe`]: what a service keeps for the page (history, alarms, histograms, log).
//! - [`chrome_trace`]: sampled stage time stamps as a Chrome/Perfetto trace.
//!
//! - [`error_text`]: an error and its causes as one line, each cause said once.
//!
//! Measuring a run:
//! - [`profile`]: `rodeo bench partition`, the CPU and wake-ups per L1 accept of every thread
//!   of every process of a run, and the messages of each hop; [`proc_threads`]: the kernel's
//!   per-thread CPU clocks and context switches from `/proc`.

pub mod chrome_trace;
pub mod ctl_tables;
pub mod error_text;
pub mod fixed;
pub mod http;
pub mod lock;
pub mod losses;
pub mod observe;
pub mod output;
pub mod proc_threads;
pub mod profile;
pub mod run;
pub mod rundb;
pub mod runs_table;
pub mod service;
pub mod setup;
pub mod sheet;
pub mod text;
pub mod unbuilt;
pub mod verdict;
