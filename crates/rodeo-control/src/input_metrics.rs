//! The readout inputs' `/metrics` families (docs/run-control.md, "Inputs"): one sample per
//! input labelled `node`, `rob` (`0x00410001`) and `address`; the state as a gauge per state
//! (1 for the current one), so that a Prometheus rule or a rodeo `[[alarms]]` entry can watch
//! `rodeo_ros_input_state{state="lost"}` or `rodeo_ros_input_problem` (the sum of the matching
//! samples: the number of inputs in that state, or with a problem).

use crate::prometheus::MetricsWriter;
use crate::summary::{InputState, InputStatus};

/// Writes the input families for `inputs` (every node's, in order).
pub(crate) fn write_inputs<'a>(
    w: &mut MetricsWriter,
    inputs: impl IntoIterator<Item = &'a InputStatus>,
) {
    let inputs: Vec<(&InputStatus, String)> = inputs
        .into_iter()
        .map(|i| (i, format!("0x{:08x}", i.rob)))
        .collect();
    let labels: Vec<[(&str, &str); 3]> = inputs
        .iter()
        .map(|(i, rob)| {
            [
                ("node", i.node.as_str()),
                ("rob", rob.as_str()),
                ("address", i.address.as_str()),
            ]
        })
        .collect();
    w.family(
        "rodeo_ros_input_state",
        "gauge",
        "1 for each readout input's state (waiting, connected, closed, lost, ended), 0 for the \
         others; lost includes an input silent longer than ros.input_silence_seconds.",
    );
    for ((i, _), l) in inputs.iter().zip(&labels) {
        for s in InputState::ALL {
            let v = if s == i.state { 1.0 } else { 0.0 };
            w.sample(
                "rodeo_ros_input_state",
                &[l[0], l[1], l[2], ("state", s.name())],
                v,
            );
        }
    }
    let counter = |f: fn(&InputStatus) -> u64| -> Vec<(&[(&str, &str)], u64)> {
        inputs
            .iter()
            .zip(&labels)
            .map(|((i, _), l)| (&l[..], f(i)))
            .collect()
    };
    w.counter(
        "rodeo_ros_input_fragments_total",
        "Fragments each readout input received.",
        &counter(|i| i.fragments),
    );
    w.counter(
        "rodeo_ros_input_bytes_total",
        "Bytes of fragments each readout input received (0 where not counted: the inline \
         generator, the SW ROD).",
        &counter(|i| i.bytes),
    );
    w.counter(
        "rodeo_ros_input_errors_total",
        "Errors of each readout input: fragments of the wrong size, connections lost, S-LINK \
         check errors.",
        &counter(|i| i.errors),
    );
    let gauge = |f: fn(&InputStatus) -> Option<f64>| -> Vec<(&[(&str, &str)], f64)> {
        inputs
            .iter()
            .zip(&labels)
            .filter_map(|((i, _), l)| f(i).map(|v| (&l[..], v)))
            .collect()
    };
    w.gauge(
        "rodeo_ros_input_last_data_age_seconds",
        "Seconds since each readout input last received data (no sample before its first).",
        &gauge(|i| i.last_data_age_ms.map(|ms| ms as f64 / 1e3)),
    );
    w.gauge(
        "rodeo_ros_input_rate_hz",
        "Fragments per second each readout input receives, over about the last second.",
        &gauge(|i| Some(i.rate_hz)),
    );
    w.gauge(
        "rodeo_ros_input_problem",
        "1 while a readout input is a problem of the run (never delivered, lost, silent or \
         closed longer than ros.input_silence_seconds), else 0.",
        &gauge(|i| Some(if i.problem.is_some() { 1.0 } else { 0.0 })),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarms::metric_value;

    fn input(rob: u32, state: InputState, problem: bool) -> InputStatus {
        InputStatus {
            node: "ros-1".into(),
            rob,
            address: format!("tcp://127.0.0.1:{}", 5000 + (rob & 0xFF)),
            state,
            fragments: 10,
            bytes: 1000,
            errors: 0,
            last_data_age_ms: (state != InputState::Waiting).then_some(1500),
            rate_hz: 2.0,
            problem: problem.then(|| "never connected".into()),
        }
    }

    #[test]
    fn input_families_are_alarm_able_by_state_and_problem() {
        let inputs = [
            input(0x0041_0000, InputState::Connected, false),
            input(0x0041_0001, InputState::Lost, true),
            input(0x0041_0002, InputState::Waiting, true),
        ];
        let mut w = MetricsWriter::new();
        write_inputs(&mut w, &inputs);
        let text = w.finish();
        let v = |sel: &str| metric_value(&text, sel);
        assert_eq!(v(r#"rodeo_ros_input_state{state="lost"}"#), Some(1.0));
        assert_eq!(v(r#"rodeo_ros_input_state{state="waiting"}"#), Some(1.0));
        assert_eq!(v(r#"rodeo_ros_input_state{state="closed"}"#), Some(0.0));
        assert_eq!(
            v(r#"rodeo_ros_input_state{rob="0x00410000",state="connected"}"#),
            Some(1.0)
        );
        assert_eq!(v("rodeo_ros_input_problem"), Some(2.0));
        assert_eq!(v("rodeo_ros_input_fragments_total"), Some(30.0));
        // No age before the first data.
        assert_eq!(v("rodeo_ros_input_last_data_age_seconds"), Some(3.0));
        assert!(text.contains(
            r#"rodeo_ros_input_errors_total{node="ros-1",rob="0x00410001",address="tcp://127.0.0.1:5001"} 0"#
        ), "{text}");
    }
}
