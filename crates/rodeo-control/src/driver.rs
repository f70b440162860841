//! [`AppDriver`]: one application moved through the lifecycle. The same driver runs every
//! application of the embedded partition (one per application, in one process) and the one
//! application of a `rodeo app` process; the commands come from the partition's own order or
//! from the controller over the control channel.
//!
//! The driver checks a command against the [`Lifecycle`] before it calls the application, so an
//! illegal command changes nothing and names the state; an action that fails puts the
//! application in ERROR with its reason; from ERROR only `shutdown` (which aborts whatever
//! still runs) leads out.

use rodeo_dataflow::trace::TraceRecord;

use crate::application::{Application, Poll, Probe, Role, RunEnd};
use crate::lifecycle::{Command, Lifecycle, State, TransitionError};
use crate::metrics::AppMetrics;
use crate::partition::Layout;
use crate::summary::AppSummary;

/// What a command brings besides itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandInput<'a> {
    /// With `configure`: the partition's layout.
    pub layout: Option<&'a Layout>,
    /// With `stop`: what is known of the ending run.
    pub run: RunEnd,
}

/// One application under lifecycle control; see the module docs.
pub struct AppDriver {
    app: Box<dyn Application>,
    lifecycle: Lifecycle,
    probe: Option<Probe>,
    /// The application's work ended by itself (the supervisor's event count), or it halted.
    finished: bool,
    /// Why the application halted ([`Poll::Halted`]), if it did.
    halted: Option<String>,
}

impl std::fmt::Debug for AppDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppDriver")
            .field("name", &self.app.name())
            .field("state", &self.lifecycle.state())
            .finish()
    }
}

impl AppDriver {
    /// Drives `app`, which starts in NONE.
    pub fn new(app: Box<dyn Application>) -> AppDriver {
        let lifecycle = Lifecycle::new(app.name());
        AppDriver {
            app,
            lifecycle,
            probe: None,
            finished: false,
            halted: None,
        }
    }

    /// The application's name.
    pub fn name(&self) -> &str {
        self.app.name()
    }

    /// Its role.
    pub fn role(&self) -> Role {
        self.app.role()
    }

    /// Its state.
    pub fn state(&self) -> State {
        self.lifecycle.state()
    }

    /// Why it is in ERROR, if it is.
    pub fn error(&self) -> Option<&str> {
        self.lifecycle.error()
    }

    /// The lifecycle (for status).
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.lifecycle
    }

    /// Puts the application in ERROR with `reason` (a failure seen from outside a transition).
    pub fn fail(&mut self, reason: String) {
        self.lifecycle.fail(reason);
    }

    /// Whether the application's work ended by itself (the supervisor's event count) or it
    /// halted ([`AppDriver::halted`]): time to stop the run.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Why the application asked for the run to stop ([`Poll::Halted`]), if it did.
    pub fn halted(&self) -> Option<&str> {
        self.halted.as_deref()
    }

    /// The reader of its live counters (from connect on; kept after disconnect so the last
    /// values stay readable).
    pub fn probe(&self) -> Option<Probe> {
        self.probe.clone()
    }

    /// What makes its drain give up while a `stop` runs (the supervisor's; see
    /// [`crate::application::Abandoner`]).
    pub fn abandoner(&self) -> Option<crate::application::Abandoner> {
        self.app.abandoner()
    }

    /// Its live counters now, if it has been connected.
    pub fn metrics(&self) -> Option<AppMetrics> {
        self.probe.as_ref().map(|p| p())
    }

    /// Runs `command`; returns the new state and, when the command ended the application's
    /// part of the run, its summary.
    pub fn command(
        &mut self,
        command: Command,
        input: CommandInput<'_>,
    ) -> Result<(State, Option<AppSummary>), TransitionError> {
        let mut summary = None;
        let app = &mut self.app;
        let state = self.lifecycle.apply(command, || -> Result<(), String> {
            summary = match command {
                Command::Initialize => None,
                Command::Configure => {
                    let layout = input.layout.ok_or("no configuration to configure with")?;
                    layout.make_runtime_dir().map_err(|e| {
                        format!(
                            "cannot make the runtime directory {} for the ipc endpoints: {e}",
                            layout.runtime.display()
                        )
                    })?;
                    app.configure(layout)?;
                    None
                }
                Command::Connect => {
                    app.connect()?;
                    None
                }
                Command::Start => {
                    app.start()?;
                    None
                }
                Command::Stop => app.stop(input.run)?,
                Command::Disconnect => app.disconnect()?,
                Command::Unconfigure => {
                    app.unconfigure();
                    None
                }
                Command::Shutdown => {
                    app.abort();
                    None
                }
            };
            Ok(())
        });
        if matches!(command, Command::Connect | Command::Start) {
            self.finished = false;
            self.halted = None;
            if let Some(p) = self.app.probe() {
                self.probe = Some(p);
            }
        }
        state.map(|s| (s, summary))
    }

    /// Brings the application down to NONE whatever its state (a partition shutting down from
    /// ERROR): whatever still runs is stopped, without a summary.
    pub fn reset(&mut self) {
        self.app.abort();
        self.lifecycle = Lifecycle::new(self.app.name());
        self.finished = false;
    }

    /// Checks whether a thread of the application ended by itself: a failure puts it in ERROR
    /// (returned as `Some(reason)`), the end of its work sets [`AppDriver::finished`].
    pub fn poll(&mut self) -> Option<String> {
        if !matches!(self.state(), State::Connected | State::Running) {
            return None;
        }
        match self.app.poll() {
            Poll::Running => None,
            Poll::Finished => {
                self.finished = true;
                None
            }
            Poll::Failed(why) => {
                self.lifecycle.fail(why.clone());
                Some(why)
            }
            Poll::Halted(why) => {
                if self.halted.is_none() {
                    tracing::error!("{why}: stopping the run");
                }
                self.finished = true;
                self.halted = Some(why);
                None
            }
        }
    }

    /// Moves the sampled stage time stamps collected so far into `out`.
    pub fn drain_traces(&self, out: &mut Vec<TraceRecord>) {
        self.app.drain_traces(out);
    }
}
