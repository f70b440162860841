//! The lifecycle every application and the partition go through (DataCollection's application
//! control): one state machine, the same for all.
//!
//! ```text
//!            initialize       configure          connect          start
//!   NONE ──────────────▶ INITIAL ─────────▶ CONFIGURED ──────▶ CONNECTED ──────▶ RUNNING
//!        ◀──────────────         ◀─────────            ◀──────           ◀──────
//!            shutdown          unconfigure         disconnect          stop
//!
//!   any transition that fails ──▶ ERROR (with its reason); from ERROR only shutdown (to NONE)
//! ```
//!
//! [`Lifecycle::apply`] checks that a command is legal in the current state *before* running
//! the transition's action; an illegal command is refused with [`TransitionError::Illegal`],
//! which names the state, and changes nothing. A failing action puts the machine in
//! [`State::Error`] with its reason ([`TransitionError::Failed`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    /// Not initialised (the process may not even exist).
    None,
    /// Initialised: the application exists, has no configuration.
    Initial,
    /// Configured: resources allocated (buffers, files named), nothing connected.
    Configured,
    /// Connected: sockets bound and connected, ready to take data.
    Connected,
    /// Running: data flows.
    Running,
    /// A transition failed; see the reason. Only `shutdown` leaves it.
    Error,
}

impl State {
    /// Every state, in lifecycle order (ERROR last).
    pub const ALL: [State; 6] = [
        State::None,
        State::Initial,
        State::Configured,
        State::Connected,
        State::Running,
        State::Error,
    ];

    /// The upper-case name, as in status JSON and metrics.
    pub fn name(self) -> &'static str {
        match self {
            State::None => "NONE",
            State::Initial => "INITIAL",
            State::Configured => "CONFIGURED",
            State::Connected => "CONNECTED",
            State::Running => "RUNNING",
            State::Error => "ERROR",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A run-control command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Command {
    /// NONE -> INITIAL.
    Initialize,
    /// INITIAL -> CONFIGURED.
    Configure,
    /// CONFIGURED -> CONNECTED.
    Connect,
    /// CONNECTED -> RUNNING.
    Start,
    /// RUNNING -> CONNECTED (the dataflow drains first).
    Stop,
    /// CONNECTED -> CONFIGURED.
    Disconnect,
    /// CONFIGURED -> INITIAL.
    Unconfigure,
    /// INITIAL or ERROR -> NONE.
    Shutdown,
}

impl Command {
    /// Every command, in the order that brings an application up and down again.
    pub const ALL: [Command; 8] = [
        Command::Initialize,
        Command::Configure,
        Command::Connect,
        Command::Start,
        Command::Stop,
        Command::Disconnect,
        Command::Unconfigure,
        Command::Shutdown,
    ];

    /// The lower-case name, as in `{"command":"stop"}`.
    pub fn name(self) -> &'static str {
        match self {
            Command::Initialize => "initialize",
            Command::Configure => "configure",
            Command::Connect => "connect",
            Command::Start => "start",
            Command::Stop => "stop",
            Command::Disconnect => "disconnect",
            Command::Unconfigure => "unconfigure",
            Command::Shutdown => "shutdown",
        }
    }

    /// The state this command leads to from `from`, or `None` when it is illegal there.
    pub fn target(self, from: State) -> Option<State> {
        use Command as C;
        use State as S;
        match (self, from) {
            (C::Initialize, S::None) => Some(S::Initial),
            (C::Configure, S::Initial) => Some(S::Configured),
            (C::Connect, S::Configured) => Some(S::Connected),
            (C::Start, S::Connected) => Some(S::Running),
            (C::Stop, S::Running) => Some(S::Connected),
            (C::Disconnect, S::Connected) => Some(S::Configured),
            (C::Unconfigure, S::Configured) => Some(S::Initial),
            (C::Shutdown, S::Initial | S::Error) => Some(S::None),
            _ => None,
        }
    }

    /// Whether this command goes down the lifecycle (its dependency order is reversed).
    pub fn is_downward(self) -> bool {
        matches!(
            self,
            Command::Stop | Command::Disconnect | Command::Unconfigure | Command::Shutdown
        )
    }

    /// The commands that bring an application from `from` to `to` along the lifecycle
    /// (empty when equal; `None` when `to` is not reachable without an ERROR in between).
    pub fn path(from: State, to: State) -> Option<Vec<Command>> {
        let rank = |s: State| match s {
            State::None => Some(0),
            State::Initial => Some(1),
            State::Configured => Some(2),
            State::Connected => Some(3),
            State::Running => Some(4),
            State::Error => None,
        };
        const UP: [Command; 4] = [
            Command::Initialize,
            Command::Configure,
            Command::Connect,
            Command::Start,
        ];
        const DOWN: [Command; 4] = [
            Command::Shutdown,
            Command::Unconfigure,
            Command::Disconnect,
            Command::Stop,
        ];
        match (rank(from), rank(to)) {
            (Some(a), Some(b)) if a <= b => Some(UP[a..b].to_vec()),
            (Some(a), Some(b)) => Some(DOWN[b..a].iter().rev().copied().collect()),
            (None, Some(0)) => Some(vec![Command::Shutdown]),
            _ => None,
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A command name that is not one of [`Command::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown command {0:?}: expected one of initialize, configure, connect, start, stop, disconnect, unconfigure, shutdown")]
pub struct UnknownCommand(pub String);

impl FromStr for Command {
    type Err = UnknownCommand;

    fn from_str(s: &str) -> Result<Command, UnknownCommand> {
        Command::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownCommand(s.to_string()))
    }
}

/// Why a command did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The command is not legal in the current state; nothing changed.
    #[error("{command} refused: {who} is {state}, and {command} is not legal there")]
    Illegal {
        /// Who refused (application or partition name).
        who: String,
        /// The command.
        command: Command,
        /// The current state.
        state: State,
    },
    /// The transition's action failed; the application is now in ERROR.
    #[error("{command} failed in {who} (was {from}): {reason}")]
    Failed {
        /// Which application failed (for a partition: the first application that failed).
        who: String,
        /// The command.
        command: Command,
        /// The state before the command.
        from: State,
        /// The reason, from the application.
        reason: String,
    },
    /// No command failed: an application died or failed while the partition was in `from`
    /// (a death with no restart left, during the run); the partition is now in ERROR.
    #[error("{who} went to ERROR while {from}: {reason}")]
    Lost {
        /// The application (or the partition) that failed.
        who: String,
        /// The state it was in.
        from: State,
        /// Why.
        reason: String,
    },
}

impl TransitionError {
    /// The application named in the error.
    pub fn who(&self) -> &str {
        match self {
            TransitionError::Illegal { who, .. }
            | TransitionError::Failed { who, .. }
            | TransitionError::Lost { who, .. } => who,
        }
    }
}

/// The lifecycle state of one application (or of the partition), with the reason of the last
/// failure.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    who: String,
    state: State,
    error: Option<String>,
}

impl Lifecycle {
    /// A lifecycle in [`State::None`] for the application `who`.
    pub fn new(who: impl Into<String>) -> Lifecycle {
        Lifecycle {
            who: who.into(),
            state: State::None,
            error: None,
        }
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The reason of the failure that put it in ERROR (`None` otherwise).
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The application's name.
    pub fn who(&self) -> &str {
        &self.who
    }

    /// Checks that `command` is legal now, without changing anything.
    pub fn check(&self, command: Command) -> Result<State, TransitionError> {
        command
            .target(self.state)
            .ok_or_else(|| TransitionError::Illegal {
                who: self.who.clone(),
                command,
                state: self.state,
            })
    }

    /// Runs `command`: refuses it if illegal (nothing changes, `action` is not called), else
    /// calls `action` and moves to the target state, or to ERROR with the action's reason.
    pub fn apply<E: fmt::Display>(
        &mut self,
        command: Command,
        action: impl FnOnce() -> Result<(), E>,
    ) -> Result<State, TransitionError> {
        let target = self.check(command)?;
        let from = self.state;
        match action() {
            Ok(()) => {
                self.state = target;
                if target == State::None {
                    self.error = None;
                }
                Ok(target)
            }
            Err(e) => {
                let reason = e.to_string();
                self.fail(reason.clone());
                Err(TransitionError::Failed {
                    who: self.who.clone(),
                    command,
                    from,
                    reason,
                })
            }
        }
    }

    /// Puts the application in ERROR with `reason` (a failure outside a transition, e.g. a
    /// dead peer or a thread that ended).
    pub fn fail(&mut self, reason: impl Into<String>) {
        self.state = State::Error;
        self.error = Some(reason.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_and_down_the_whole_lifecycle() {
        let mut l = Lifecycle::new("dcm-1");
        for c in Command::ALL {
            l.apply(c, || Ok::<(), String>(())).unwrap();
        }
        assert_eq!(l.state(), State::None);
    }

    #[test]
    fn illegal_commands_are_refused_naming_the_state_and_change_nothing() {
        for from in State::ALL {
            for c in Command::ALL {
                if c.target(from).is_some() {
                    continue;
                }
                let mut l = Lifecycle::new("ros-1");
                l.state = from;
                let mut called = false;
                let e = l
                    .apply(c, || {
                        called = true;
                        Ok::<(), String>(())
                    })
                    .unwrap_err();
                assert!(!called);
                assert_eq!(l.state(), from);
                assert!(e.to_string().contains(from.name()), "{e}");
                assert!(e.to_string().contains("ros-1"), "{e}");
            }
        }
    }

    #[test]
    fn a_failing_transition_goes_to_error_with_its_reason() {
        let mut l = Lifecycle::new("logger-1");
        l.apply(Command::Initialize, || Ok::<(), String>(()))
            .unwrap();
        let e = l
            .apply(Command::Configure, || Err("disk full"))
            .unwrap_err();
        assert_eq!(l.state(), State::Error);
        assert_eq!(l.error(), Some("disk full"));
        assert_eq!(e.who(), "logger-1");
        assert!(e.to_string().contains("disk full"));
        // Only shutdown leaves ERROR.
        assert!(l.apply(Command::Start, || Ok::<(), String>(())).is_err());
        l.apply(Command::Shutdown, || Ok::<(), String>(())).unwrap();
        assert_eq!(l.state(), State::None);
        assert_eq!(l.error(), None);
    }

    #[test]
    fn paths_follow_the_lifecycle() {
        assert_eq!(
            Command::path(State::None, State::Running).unwrap(),
            vec![
                Command::Initialize,
                Command::Configure,
                Command::Connect,
                Command::Start
            ]
        );
        assert_eq!(
            Command::path(State::Running, State::Configured).unwrap(),
            vec![Command::Stop, Command::Disconnect]
        );
        assert_eq!(
            Command::path(State::Connected, State::Connected),
            Some(vec![])
        );
        assert_eq!(Command::path(State::Error, State::Running), None);
        // Each path is legal step by step.
        for a in State::ALL {
            for b in State::ALL {
                if let Some(p) = Command::path(a, b) {
                    let mut s = a;
                    for c in p {
                        s = c.target(s).unwrap();
                    }
                    assert_eq!(s, b);
                }
            }
        }
    }

    #[test]
    fn commands_parse_by_name() {
        assert_eq!("Stop".parse::<Command>().unwrap(), Command::Stop);
        assert!("halt".parse::<Command>().is_err());
        let json = serde_json::to_string(&Command::Unconfigure).unwrap();
        assert_eq!(json, "\"unconfigure\"");
        assert_eq!(
            serde_json::to_string(&State::Running).unwrap(),
            "\"RUNNING\""
        );
    }
}
