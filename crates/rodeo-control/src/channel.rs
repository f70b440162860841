//! The control channel between the controller and its applications (docs/run-control.md).
//!
//! The controller binds a ZeroMQ ROUTER; every `rodeo app` process connects a DEALER whose
//! routing id is its application name. Each message is one frame of JSON:
//!
//! - application -> controller: [`ToController::Hello`] once on connect, a
//!   [`ToController::Heartbeat`] every heartbeat period (state, typed live counters:
//!   [`AppMetrics`]), [`ToController::Busy`] every heartbeat period while a command runs (so a
//!   long command is no silence, and a frozen process is one even during a command), and one
//!   [`ToController::Reply`] per command (the new state, or why it failed, and the
//!   application's typed [`AppSummary`] where the command ends its part of the run);
//! - controller -> application: [`ToApp::Command`], numbered by `seq` (the reply repeats it),
//!   and a [`ToApp::Ping`] every heartbeat period: the controller's liveness. An application
//!   that has had a ping and then hears nothing from the controller for the ping's
//!   `dead_after_ms` (the controller frozen, its host gone) walks itself down and leaves.
//!
//! A frame that does not decode is dropped and counted by the receiver; nothing on the channel
//! can make either side panic.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lifecycle::{Command, State};
use crate::metrics::AppMetrics;
use crate::summary::AppSummary;

/// How late a turn of a loop that watches a peer's silence (the controller's monitor, an
/// application's control loop: each turns every 50-70 ms by design) must come to count as that
/// loop's own stall, not the peer's silence: a quarter of `dead_after`, never below 250 ms, so
/// that a tiny `dead_after` does not make every turn a stall.
pub(crate) fn stall_limit(dead_after: Duration) -> Duration {
    (dead_after / 4).max(Duration::from_millis(250))
}

/// The largest control message accepted (a configuration is a few KiB).
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// A message from the controller to an application.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToApp {
    /// Run a lifecycle command.
    Command {
        /// Sequence number, repeated in the reply.
        seq: u64,
        /// The command.
        command: Command,
        /// With `configure`: the partition configuration (TOML) to take.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        config: Option<String>,
        /// With `stop` to a readout node: the L1 accepts of the run, whose clears it waits
        /// for (bounded) before it replies.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect_cleared: Option<u64>,
        /// With `stop` to the supervisor: an application halted (a logger's disks are full),
        /// so the drain does not wait for events that can no longer be decided.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        abandon_drain: bool,
        /// With `configure` to an application restarted into a running run: the run's L1
        /// accepts so far; a readout node's emulated inputs start at that event (it rejoins at
        /// the current L1ID, not at 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rejoin_at: Option<u64>,
    },
    /// To the supervisor while its `stop` runs: a logger died since, so the drain gives up
    /// after its grace instead of waiting for events no logger can write (as `abandon_drain`
    /// with the command, for a death the command could not know of).
    AbandonDrain,
    /// The controller is alive; sent to every application every heartbeat period.
    Ping {
        /// The controller's `control.dead_after_ms`: the application judges the controller dead
        /// after this long without any message from it (outside its own commands).
        dead_after_ms: u64,
    },
}

/// A heartbeat: the application's state and live counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// Lifecycle state.
    pub state: State,
    /// Why it is in ERROR, if it is.
    #[serde(default)]
    pub error: Option<String>,
    /// The supervisor: its L1 source reached the end of the run (event count) by itself.
    #[serde(default)]
    pub finished: bool,
    /// Live counters (after connect; the last values stay after the run).
    #[serde(default)]
    pub metrics: Option<AppMetrics>,
    /// Sends a full shared-memory inbox refused in this process so far (back-pressure).
    #[serde(default)]
    pub shm_backpressure: u64,
    /// Batched shared-memory messages this process dropped for want of a receiver
    /// (`rodeo_transport::shm::undelivered_count`).
    #[serde(default)]
    pub shm_undelivered: u64,
    /// Messages this process refused on receipt as larger than their socket's limit
    /// (`rodeo_transport::socket::oversized_count`).
    #[serde(default)]
    pub oversized_messages: u64,
    /// Handshakes this process's CURVE servers refused so far (peers without the partition's
    /// keys).
    #[serde(default)]
    pub auth_refused: u64,
}

/// A message from an application to the controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToController {
    /// The first message after connecting.
    Hello {
        /// Application name.
        name: String,
        /// Role (`logger`, `ros`, `dcm`, `supervisor`).
        role: String,
        /// Process id on its host.
        pid: u32,
        /// Its state (INITIAL: the process exists).
        state: State,
    },
    /// Sent every heartbeat period.
    Heartbeat(Heartbeat),
    /// Sent every heartbeat period while a command runs (instead of the heartbeat, whose
    /// state the command is changing): the application lives and is working on command `seq`.
    Busy {
        /// The command's sequence number.
        seq: u64,
    },
    /// The answer to one command.
    Reply {
        /// The command's sequence number.
        seq: u64,
        /// The state after the command.
        state: State,
        /// Why the command was refused or failed (`None`: it succeeded).
        #[serde(default)]
        error: Option<String>,
        /// The application's summary of the run, when the command ended its part in it
        /// (`stop` of the supervisor, `disconnect` of the others).
        #[serde(default)]
        summary: Option<AppSummary>,
    },
}

/// Encodes a message as one JSON frame.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    // Serialising these types cannot fail (string keys, no non-finite floats).
    serde_json::to_vec(message).unwrap_or_default()
}

/// Why a frame was not a control message.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Larger than [`MAX_MESSAGE_BYTES`].
    #[error("control message of {0} bytes is larger than the limit")]
    TooLarge(usize),
    /// Not JSON of the expected shape.
    #[error("bad control message: {0}")]
    Json(#[from] serde_json::Error),
}

/// Decodes one JSON frame.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, DecodeError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(DecodeError::TooLarge(bytes.len()));
    }
    Ok(serde_json::from_slice(bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_an_error() {
        let m = ToApp::Command {
            seq: 7,
            command: Command::Configure,
            config: Some("[run]\n".into()),
            expect_cleared: None,
            abandon_drain: false,
            rejoin_at: Some(12),
        };
        let b = encode(&m);
        assert_eq!(decode::<ToApp>(&b).unwrap(), m);
        let ping = ToApp::Ping {
            dead_after_ms: 3000,
        };
        let text = String::from_utf8(encode(&ping)).unwrap();
        assert_eq!(text, r#"{"type":"ping","dead_after_ms":3000}"#);
        assert_eq!(decode::<ToApp>(text.as_bytes()).unwrap(), ping);
        let r = ToController::Reply {
            seq: 7,
            state: State::Error,
            error: Some("disk full".into()),
            summary: None,
        };
        assert_eq!(decode::<ToController>(&encode(&r)).unwrap(), r);
        let r = ToController::Reply {
            seq: 8,
            state: State::Configured,
            error: None,
            summary: Some(AppSummary::Ros(crate::summary::NodeSummary {
                name: "ros-1".into(),
                cleared: 3,
                ..Default::default()
            })),
        };
        assert_eq!(decode::<ToController>(&encode(&r)).unwrap(), r);
        let hb = Heartbeat {
            state: State::Running,
            error: None,
            finished: false,
            metrics: Some(AppMetrics::Logger(crate::metrics::LoggerMetrics {
                events_written: 12,
                bytes_written: 4096,
                disk_full: 1,
                directory_moves: 2,
                events_refused: 3,
                bad_messages: 4,
            })),
            shm_backpressure: 5,
            shm_undelivered: 7,
            oversized_messages: 6,
            auth_refused: 6,
        };
        let h = ToController::Heartbeat(hb);
        let text = String::from_utf8(encode(&h)).unwrap();
        assert!(text.contains("\"type\":\"heartbeat\""), "{text}");
        assert_eq!(decode::<ToController>(text.as_bytes()).unwrap(), h);
        for bad in [
            &b""[..],
            b"{",
            b"{\"type\":\"command\",\"seq\":1,\"command\":\"halt\"}",
            b"{\"type\":\"launch\"}",
            b"\xff\xfe",
        ] {
            assert!(decode::<ToApp>(bad).is_err());
        }
        assert!(matches!(
            decode::<ToApp>(&vec![b' '; MAX_MESSAGE_BYTES + 1]),
            Err(DecodeError::TooLarge(_))
        ));
    }
}
