//! One lifecycle for every application: the [`Application`] trait, implemented by the readout
//! node ([`ros::RosApp`]), the supervisor ([`supervisor::SupervisorApp`]), the DCM
//! ([`dcm::DcmApp`]) and the logger ([`logger::LoggerApp`]), and driven by one
//! [`AppDriver`](crate::driver::AppDriver) whether the application runs as threads of the
//! embedded partition or alone in a `rodeo app` process.
//!
//! # What each transition does, per role
//!
//! | command     | logger                 | ros                         | dcm                  | supervisor                  |
//! |-------------|------------------------|-----------------------------|----------------------|-----------------------------|
//! | configure   | finds itself in the layout; makes its output directory | allocates and warms its page pool (and the DMA superpages) | finds itself | finds itself |
//! | connect     | binds, starts writing  | builds the store, starts its input (cards), binds | connects its sockets | —                   |
//! | start       | —                      | —                           | —                    | binds, starts the L1 source |
//! | stop        | —                      | waits (bounded) for the clears of every L1 accept | — | stops L1, drains, summary |
//! | disconnect  | closes files, summary  | stops serving, summary      | stops, summary       | —                           |
//! | unconfigure | forgets the layout     | frees its memory            | forgets              | forgets                     |
//!
//! The partition stops the supervisor first, so by the time the others get `stop` every event
//! is decided and the dataflow has drained; they keep their sockets until `disconnect`.
//!
//! # Counters and summaries
//!
//! An application's live counters are read through its [`Probe`] (a cloneable, lock-free
//! reader of the atomics its threads update, handed out at connect), as a typed
//! [`AppMetrics`](crate::metrics::AppMetrics): the same values whether the reader is the
//! embedded partition's `/metrics` or a heartbeat sent to the controller. What an application
//! hands back at the end of its part of the run is a typed
//! [`AppSummary`](crate::summary::AppSummary).
//!
//! # Failures
//!
//! A transition that fails returns why ([`AppError`]); the driver puts the application in ERROR.
//! A thread that ends by itself is found by [`Application::poll`]: the supervisor's L1 source
//! reaching its event count is [`Poll::Finished`]; a DCM or logger thread ending is
//! [`Poll::Failed`] with its error; a logger whose every output directory is full is
//! [`Poll::Halted`] (the run stops in order, with its balance sheet). [`Application::abort`] stops whatever still runs (shutdown
//! from any state, ERROR included).

pub mod dcm;
pub mod logger;
pub mod ros;
pub mod supervisor;

use std::fmt;
use std::sync::Arc;

use rodeo_dataflow::trace::TraceRecord;
use rodeo_dataflow::trigger::TriggerAlgorithm;
use rodeo_transport::socket::Transport;

use crate::metrics::AppMetrics;
use crate::partition::Layout;
pub use crate::partition::Role;
use crate::summary::AppSummary;

/// Why a transition of an application failed: a sentence for the operator (what, where).
pub type AppError = String;

/// A reader of an application's live counters, valid from connect on; cheap to clone, never
/// waits for a command.
pub type Probe = Arc<dyn Fn() -> AppMetrics + Send + Sync>;

/// Tells a running drain to give up after its grace (the supervisor's); callable while a
/// command holds the application, never waits.
pub type Abandoner = Arc<dyn Fn() + Send + Sync>;

/// What [`Application::poll`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll {
    /// Nothing ended by itself.
    Running,
    /// The application's work ended by itself as it should (the supervisor's event count).
    Finished,
    /// A thread of the application ended by itself with this error.
    Failed(String),
    /// The application cannot go on with the run and asks for it to stop in order (a logger
    /// whose output directories are all full): why, for the operator. Its threads still run,
    /// so the stop and disconnect that follow close its files and hand back its summary.
    Halted(String),
}

/// What `stop` tells an application about the run that is ending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunEnd {
    /// The run's L1 accepts (known once the supervisor stopped): a readout node waits
    /// (bounded) until it has received the clears of that many events.
    pub l1_accepts: Option<u64>,
    /// An application halted ([`Poll::Halted`]: a logger's disks are full): the supervisor
    /// does not wait for events that can no longer be decided (after a short grace; they are
    /// counted as undecided in the balance sheet).
    pub abandon_drain: bool,
}

/// Makes the trigger algorithm of the DCM named by the argument (one per DCM, on connect).
pub type TriggerFactory = Arc<dyn Fn(&str) -> Box<dyn TriggerAlgorithm> + Send + Sync>;

/// What every application is built with.
#[derive(Clone)]
pub struct AppContext {
    /// The process's ZeroMQ context.
    pub transport: Transport,
    /// Keep the stage time stamps of one event in this many (`None`: no tracing).
    pub trace_every: Option<u64>,
    /// The DCMs' trigger algorithm instead of the configuration's emulated one.
    pub trigger: Option<TriggerFactory>,
    /// The readout nodes of this process register their progress here when they connect,
    /// and a data-driven supervisor (`l1.mode = "readout"`) reads it when it starts.
    pub readout: ReadoutBoard,
}

/// Readout nodes' progress by node name, shared by the applications of one process.
pub type ReadoutBoard = Arc<
    std::sync::Mutex<std::collections::BTreeMap<String, Arc<rodeo_ros::inputs::ReadoutProgress>>>,
>;

impl fmt::Debug for AppContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppContext")
            .field("trace_every", &self.trace_every)
            .field("trigger", &self.trigger.is_some())
            .finish()
    }
}

/// Trace records kept per application until drained.
pub(crate) const TRACE_CAPACITY: usize = 1 << 16;

/// One application of a partition under lifecycle control (module docs). The
/// [`AppDriver`](crate::driver::AppDriver) checks that a command is legal before it calls the
/// method, so an implementation may assume the order configure, connect, start, stop,
/// disconnect, unconfigure.
pub trait Application: Send {
    /// The application's name in the partition (`ros-1`, `dcm-2`, `supervisor`, ...).
    fn name(&self) -> &str;

    /// Its role.
    fn role(&self) -> Role;

    /// INITIAL -> CONFIGURED: takes its part of `layout` (an error if it is not in it) and
    /// allocates what the CONFIGURED state promises.
    fn configure(&mut self, layout: &Layout) -> Result<(), AppError>;

    /// CONFIGURED -> CONNECTED: binds and connects its sockets, starts its threads.
    fn connect(&mut self) -> Result<(), AppError>;

    /// CONNECTED -> RUNNING.
    fn start(&mut self) -> Result<(), AppError> {
        Ok(())
    }

    /// RUNNING -> CONNECTED; the supervisor hands back its summary here.
    fn stop(&mut self, _run: RunEnd) -> Result<Option<AppSummary>, AppError> {
        Ok(None)
    }

    /// CONNECTED -> CONFIGURED: stops its threads; hands back its summary (all but the
    /// supervisor).
    fn disconnect(&mut self) -> Result<Option<AppSummary>, AppError>;

    /// CONFIGURED -> INITIAL: forgets the layout, frees what configure allocated.
    fn unconfigure(&mut self);

    /// Stops whatever runs, from any state (shutdown, ERROR included); never fails.
    fn abort(&mut self);

    /// The reader of its live counters (after connect; `None` before).
    fn probe(&self) -> Option<Probe>;

    /// What makes its drain give up (the supervisor's, after connect); `None` for the others.
    fn abandoner(&self) -> Option<Abandoner> {
        None
    }

    /// Whether a thread ended by itself (module docs).
    fn poll(&mut self) -> Poll {
        Poll::Running
    }

    /// Moves the sampled stage time stamps collected so far into `out`.
    fn drain_traces(&self, _out: &mut Vec<TraceRecord>) {}
}

/// The application `name` of role `role`, not yet configured.
pub fn build(role: Role, name: &str, ctx: &AppContext) -> Box<dyn Application> {
    match role {
        Role::Logger => Box::new(logger::LoggerApp::new(name, ctx)),
        Role::Ros => Box::new(ros::RosApp::new(name, ctx)),
        Role::Dcm => Box::new(dcm::DcmApp::new(name, ctx)),
        Role::Supervisor => Box::new(supervisor::SupervisorApp::new(name, ctx)),
    }
}

/// "not in the layout" for `role` `name`.
pub(crate) fn not_in_layout(role: Role, name: &str) -> AppError {
    format!("no {role} named {name:?} in the configuration")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_of_names() {
        assert_eq!(Role::of_name("dcm-12"), Some(Role::Dcm));
        assert_eq!(Role::of_name("supervisor"), Some(Role::Supervisor));
        assert_eq!(Role::of_name("logger-x"), None);
        assert_eq!(Role::of_name("nobody-1"), None);
        assert_eq!("ros".parse::<Role>().unwrap(), Role::Ros);
    }
}
