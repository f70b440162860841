//! What the outside sees of one readout input ([`InputStatus`]): its state ([`InputState`]),
//! counters, the age of its last data, its rate, and the problem it is, if it is one. The same
//! record is served live (`/api/status`, heartbeats in `--processes` mode, `/metrics`) and kept
//! in the node's end-of-run summary, so it is serialisable and every field added later must
//! have a serde default.

use serde::{Deserialize, Serialize};

/// The state of a readout input (one ROB channel's input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputState {
    /// No data yet: a network listener nobody connected to (or no datagram yet), an emulated
    /// or file channel that has written nothing yet.
    Waiting,
    /// Receiving: a sender is connected (TCP) or datagrams arrive (UDP); an emulated, file or
    /// replay channel is writing.
    Connected,
    /// The sender closed its connection cleanly (TCP). With `listen_end_on_close` that is the
    /// input's end, and may be the run's.
    Closed,
    /// The connection was reset, broke in the middle of a record or carried an invalid record;
    /// or the input has been silent longer than the configured time (`[ros]
    /// input_silence_seconds`).
    Lost,
    /// A file or replay read to its end, an emulator stopped at the run's end.
    Ended,
}

impl InputState {
    /// Every state, in this order (the `/metrics` family has a sample for each).
    pub const ALL: [InputState; 5] = [
        InputState::Waiting,
        InputState::Connected,
        InputState::Closed,
        InputState::Lost,
        InputState::Ended,
    ];

    /// The state's name, as serialised: `waiting`, `connected`, `closed`, `lost`, `ended`.
    pub fn name(self) -> &'static str {
        match self {
            InputState::Waiting => "waiting",
            InputState::Connected => "connected",
            InputState::Closed => "closed",
            InputState::Lost => "lost",
            InputState::Ended => "ended",
        }
    }
}

/// One readout input as `/api/status` lists it and the run summary keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputStatus {
    /// The readout node (`ros-1`).
    pub node: String,
    /// The ROB (source id) the input feeds.
    pub rob: u32,
    /// Where its data comes from: `tcp://HOST:PORT`, `udp://HOST:PORT`, a file path,
    /// `replay:FILE`, or `emulated`.
    pub address: String,
    /// Its state now (or at the end).
    pub state: InputState,
    /// Units received (fragments).
    pub fragments: u64,
    /// Bytes of those fragments (0 where the input does not count bytes: the inline firmware
    /// generator, the SW ROD).
    pub bytes: u64,
    /// Errors: fragments of the wrong size dropped, connections lost, S-LINK check errors.
    pub errors: u64,
    /// Milliseconds since its last data (`None`: no data yet).
    pub last_data_age_ms: Option<u64>,
    /// Fragments per second, over about the last second.
    pub rate_hz: f64,
    /// Why this input is a problem of the run, naming the node, the ROB and the address
    /// (`ros-1 ROB 0x00410001 tcp://127.0.0.1:5001: never connected`); live, the problem as of
    /// now; at the end of the run, by the rules of docs/run-control.md ("Inputs").
    #[serde(default)]
    pub problem: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_travels_as_json_with_lowercase_states() {
        let s = InputStatus {
            node: "ros-1".into(),
            rob: 0x0041_0001,
            address: "tcp://127.0.0.1:5001".into(),
            state: InputState::Lost,
            fragments: 7,
            bytes: 700,
            errors: 1,
            last_data_age_ms: None,
            rate_hz: 0.0,
            problem: Some("ros-1 ROB 0x00410001 tcp://127.0.0.1:5001: never connected".into()),
        };
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains(r#""state":"lost""#), "{text}");
        assert_eq!(serde_json::from_str::<InputStatus>(&text).unwrap(), s);
        for st in InputState::ALL {
            let t = serde_json::to_string(&st).unwrap();
            assert_eq!(t, format!("\"{}\"", st.name()));
        }
    }
}
