//! `/metrics` of a partition: [`write_partition_metrics`] turns its status and every
//! application's [`AppMetrics`] into the Prometheus families listed in
//! [`METRIC_FAMILIES`](crate::metrics::METRIC_FAMILIES) (the vocabulary and the per-role writers
//! are [`crate::metrics`]'s).

use crate::lifecycle::State;
use crate::metrics::*;
use crate::prometheus::MetricsWriter;
use crate::run_control::PartitionStatus;

/// What [`write_partition_metrics`] needs besides the applications' counters.
#[derive(Debug, Clone, Copy)]
pub struct PartitionExtras {
    /// Control frames dropped because they did not decode (0 without a control channel).
    pub bad_control_messages: u64,
    /// Sends refused by a full shared-memory inbox (back-pressure), all applications together.
    pub shm_backpressure: u64,
    /// Batched shared-memory messages dropped because their receiver left before the batch
    /// went out, all applications together (`rodeo_transport::shm::undelivered_count`).
    pub shm_undelivered: u64,
    /// Messages refused on receipt as larger than their socket's limit (or malformed on
    /// shared memory), all applications together (`rodeo_transport::socket::oversized_count`).
    pub oversized_messages: u64,
    /// tcp handshakes refused by CURVE (peers without the partition's keys), every process of
    /// the partition together.
    pub auth_refused: u64,
}

/// Writes the whole vocabulary of `/metrics` for a partition: its state and run, every
/// application's state and heartbeat age, and every application's counters by role. `apps`
/// pairs each application's name with its counters (absent before connect).
pub fn write_partition_metrics(
    w: &mut MetricsWriter,
    status: &PartitionStatus,
    apps: &[(&str, Option<&AppMetrics>)],
    extras: PartitionExtras,
) {
    w.family(
        "rodeo_partition_state",
        "gauge",
        "1 for the partition's lifecycle state, 0 for the others.",
    );
    for s in State::ALL {
        let v = if s == status.state { 1.0 } else { 0.0 };
        w.sample("rodeo_partition_state", &[("state", s.name())], v);
    }
    w.family(
        "rodeo_app_state",
        "gauge",
        "1 for each application's lifecycle state, 0 for the others.",
    );
    for a in &status.apps {
        for s in State::ALL {
            let v = if s == a.state { 1.0 } else { 0.0 };
            w.sample(
                "rodeo_app_state",
                &[("app", &a.name), ("role", &a.role), ("state", s.name())],
                v,
            );
        }
    }
    w.family(
        "rodeo_app_heartbeat_age_seconds",
        "gauge",
        "Seconds since each application's counters were last heard (0: read in this process).",
    );
    for a in &status.apps {
        let age = a.heartbeat_age_ms.map_or(0.0, |ms| ms as f64 / 1e3);
        w.sample(
            "rodeo_app_heartbeat_age_seconds",
            &[("app", &a.name), ("role", &a.role)],
            age,
        );
    }
    w.family(
        "rodeo_app_restarts_total",
        "counter",
        "Times each application was restarted after a death since the partition came up.",
    );
    for a in &status.apps {
        w.sample(
            "rodeo_app_restarts_total",
            &[("app", &a.name), ("role", &a.role)],
            a.restarts as f64,
        );
    }
    w.gauge(
        "rodeo_run_restarts",
        "Applications restarted after a death in this run.",
        &[(&[], status.restarts as f64)],
    );
    w.gauge(
        "rodeo_run_number",
        "The run number.",
        &[(&[], f64::from(status.run_number))],
    );
    w.gauge(
        "rodeo_run_seconds",
        "Seconds since the run started.",
        &[(&[], status.run_seconds)],
    );
    w.counter(
        "rodeo_control_bad_messages_total",
        "Control frames dropped because they did not decode.",
        &[(&[], extras.bad_control_messages)],
    );
    w.counter(
        "rodeo_shm_backpressure_total",
        "Sends a full shared-memory inbox refused (retried or reported to the sender, never lost).",
        &[(&[], extras.shm_backpressure)],
    );
    w.counter(
        "rodeo_shm_undelivered_total",
        "Batched shared-memory messages dropped because their receiver left before the batch \
         went out (as messages queued to a vanished ZeroMQ peer).",
        &[(&[], extras.shm_undelivered)],
    );
    w.counter(
        "rodeo_oversized_messages_total",
        "Messages refused on receipt as larger than their socket's limit \
         (transport.max_message_bytes; on shared memory also malformed ones).",
        &[(&[], extras.oversized_messages)],
    );
    w.counter(
        "rodeo_transport_auth_refused_total",
        "tcp handshakes refused by CURVE: peers without the partition's keys (plain ZeroMQ, \
         wrong keys, garbage); the first refusal from each address is logged.",
        &[(&[], extras.auth_refused)],
    );

    let mut sup = Vec::new();
    let mut dcms = Vec::new();
    let mut loggers = Vec::new();
    let mut nodes = Vec::new();
    for (name, m) in apps {
        match m {
            Some(AppMetrics::Supervisor(s)) => sup.push((*name, &**s)),
            Some(AppMetrics::Dcm(d)) => dcms.push((*name, &**d)),
            Some(AppMetrics::Logger(l)) => loggers.push((*name, l)),
            Some(AppMetrics::Ros(r)) => nodes.push((*name, &**r)),
            None => {}
        }
    }
    write_supervisor(w, &sup);
    write_dcms(w, &dcms);
    write_loggers(w, &loggers);
    write_nodes(w, &nodes);

    // Errors by kind, every application in one family.
    let mut errs: Vec<([(&str, &str); 2], u64)> = Vec::new();
    for (n, s) in &nodes {
        for (kind, v) in [
            ("lost_fragment", s.lost_fragments),
            ("pending_fragment", s.pending_fragments),
            ("request_timeout", s.timeouts),
            ("clear_gap", s.clear_gaps),
            ("send_dropped", s.send_dropped),
            ("rejected_request", s.rejected_requests),
            ("pending_overflow", s.pending_overflow),
            ("bad_message", s.bad_messages),
        ] {
            errs.push(([("app", n), ("kind", kind)], v));
        }
    }
    for (n, s) in &sup {
        errs.push(([("app", n), ("kind", "bad_message")], s.bad_messages));
    }
    for (n, l) in &loggers {
        errs.push(([("app", n), ("kind", "bad_message")], l.bad_messages));
    }
    for (n, d) in &dcms {
        for (kind, v) in [
            ("bad_message", d.bad_messages),
            ("stale_reply", d.stale_replies),
            ("send_failure", d.send_failures),
        ] {
            errs.push(([("app", n), ("kind", kind)], v));
        }
    }
    let s: Vec<(&[(&str, &str)], u64)> = errs.iter().map(|(l, v)| (&l[..], *v)).collect();
    w.counter(
        "rodeo_errors_total",
        "Errors and discarded messages, by application and kind.",
        &s,
    );
    write_queue_metrics(w);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rodeo_memory::LogHistogram;

    use super::*;
    use crate::run_control::AppStatus;

    /// `# TYPE name kind` of every family on `page`.
    fn families(page: &str) -> Vec<(String, String)> {
        page.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, k)| (n.to_string(), k.to_string()))
            .collect()
    }

    #[test]
    fn every_family_written_is_listed_and_every_listed_family_is_written() {
        let h = LogHistogram::new().snapshot();
        let app = |name: &str, role: &str| AppStatus {
            name: name.into(),
            role: role.into(),
            state: State::Running,
            error: None,
            host: None,
            pid: None,
            heartbeat_age_ms: None,
            rate_hz: 0.0,
            restarts: 0,
        };
        let status = PartitionStatus {
            apps: vec![app("supervisor", "supervisor"), app("ros-1", "ros")],
            ..PartitionStatus::empty("p".into(), State::Running, 1)
        };
        let sup = AppMetrics::Supervisor(Box::new(SupervisorMetrics {
            l1_accepts: 1,
            l1_missed: 0,
            accepted: 1,
            rejected: 0,
            forced_accepts: 0,
            in_flight: 0,
            credits: 0,
            decision_latency: h.clone(),
            bad_messages: 0,
        }));
        let dcm = AppMetrics::Dcm(Box::new(DcmMetrics {
            slots: 1,
            events: 1,
            accepted: 1,
            requests: 1,
            bytes_received: 1,
            busy_slots: 0,
            outstanding_requests: 0,
            queued_requests: 0,
            bad_messages: 0,
            stale_replies: 0,
            send_failures: 0,
            request_latency: h.clone(),
            decision_latency: h.clone(),
            build_latency: h,
            sampled: 0,
            sample_dropped: 0,
        }));
        let logger = AppMetrics::Logger(LoggerMetrics {
            events_written: 1,
            bytes_written: 1,
            disk_full: 0,
            directory_moves: 0,
            events_refused: 0,
            bad_messages: 0,
        });
        let c = rodeo_ros::swrod::SwRodInputCounters::default();
        let ros = AppMetrics::Ros(Box::new(RosMetrics {
            requests: 1,
            fragments_sent: 1,
            bytes_sent: 1,
            cleared_l1ids: 1,
            pending_now: 0,
            input_fragments: 1,
            lost_fragments: 0,
            pending_fragments: 0,
            timeouts: 0,
            clear_gaps: 0,
            buffer_occupancy: 0.0,
            buffer_lent: 0.0,
            send_dropped: 0,
            send_dropped_by_peer: BTreeMap::from([("peer".to_string(), 1)]),
            rejected_requests: 0,
            pending_overflow: 0,
            bad_messages: 0,
            swrod: Some(SwRodMetrics {
                builder: c.builder.fields().map(|(k, v)| (k.to_string(), v)).into(),
                link: c.link.fields().map(|(k, v)| (k.to_string(), v)).into(),
            }),
            channels: Vec::new(),
            inputs: vec![crate::summary::InputStatus {
                node: "ros-1".into(),
                rob: 0x0041_0000,
                address: "tcp://127.0.0.1:5000".into(),
                state: crate::summary::InputState::Connected,
                fragments: 10,
                bytes: 1000,
                errors: 0,
                last_data_age_ms: Some(3),
                rate_hz: 200.0,
                problem: None,
            }],
        }));
        let mut w = MetricsWriter::new();
        write_partition_metrics(
            &mut w,
            &status,
            &[
                ("supervisor", Some(&sup)),
                ("dcm-1", Some(&dcm)),
                ("logger-1", Some(&logger)),
                ("ros-1", Some(&ros)),
            ],
            PartitionExtras {
                bad_control_messages: 0,
                shm_backpressure: 0,
                shm_undelivered: 0,
                oversized_messages: 0,
                auth_refused: 0,
            },
        );
        let written = families(&w.finish());
        let swrod = swrod_families();
        let (plain, sw): (Vec<_>, Vec<_>) = written
            .iter()
            .partition(|(n, _)| !n.starts_with("rodeo_ros_swrod_"));
        let listed: Vec<(String, String)> = METRIC_FAMILIES
            .iter()
            .map(|f| (f.name.to_string(), f.kind.to_string()))
            .collect();
        let plain: Vec<(String, String)> = plain.into_iter().cloned().collect();
        assert_eq!(
            plain, listed,
            "METRIC_FAMILIES and the families written differ"
        );
        let mut sw: Vec<&String> = sw.iter().map(|(n, _)| n).collect();
        let mut swrod: Vec<&String> = swrod.iter().collect();
        sw.sort();
        swrod.sort();
        assert_eq!(sw, swrod);
        assert!(written.len() > 60, "{written:?}");

        // The alarms' families are the service's list's first two.
        let a = crate::alarms::Alarms::new(&[crate::alarms::AlarmSpec {
            name: "x".into(),
            metric: "rodeo_run_number".into(),
            below: Some(1.0),
            above: None,
            for_seconds: 0.0,
            always: false,
        }]);
        let mut w = MetricsWriter::new();
        a.write_metrics(&mut w);
        let alarm: Vec<String> = families(&w.finish()).into_iter().map(|(n, _)| n).collect();
        assert_eq!(alarm, [SERVICE_FAMILIES[0].name, SERVICE_FAMILIES[1].name]);
    }
}
