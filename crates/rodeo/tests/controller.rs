//! The controller over real `rodeo app` processes: a failing transition, illegal commands, a
//! dead application found by heartbeat and by process exit, the same metric families as the
//! embedded partition.

use std::time::Duration;

use rodeo_control::config::{PartitionConfig, TransportKind};
use rodeo_control::controller::Controller;
use rodeo_control::embedded::EmbeddedPartition;
use rodeo_control::lifecycle::{Command, State, TransitionError};
use rodeo_control::run_control::RunControl;
use rodeo_testkit::rodeo_bin;

/// Waits (bounded) until `cond` holds on the controller's status.
fn wait_for(
    ctl: &Controller,
    what: &str,
    cond: impl Fn(&rodeo_control::run_control::PartitionStatus) -> bool,
) {
    let mut last = None;
    let held = rodeo_testkit::holds_within(Duration::from_secs(30), || {
        let st = ctl.status();
        let ok = cond(&st);
        last = Some(st);
        ok
    });
    assert!(held, "timed out waiting for {what}: {last:#?}");
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn small_config(out: &std::path::Path, port_offset: u16) -> PartitionConfig {
    let mut c = PartitionConfig::default();
    c.run.output = out.display().to_string();
    c.run.events = 0;
    c.run.seconds = 60.0;
    c.transport.kind = TransportKind::Tcp;
    // A port range of its own (tests of other binaries use 47000 onwards), below the kernel's
    // ephemeral ports (32768 and up by default): a connection's local port there once took
    // one of these ("Address already in use").
    c.transport.base_port = 20_000 + (std::process::id() % 4_000) as u16 * 3 + port_offset * 10;
    c.l1.rate_hz = 2000.0;
    c.dcm.slots = 8;
    c.supervisor.dcm_timeout_ms = 1000;
    // Generous for a loaded 2-core machine: a stall of a second is not a death here.
    c.control.heartbeat_ms = 200;
    c.control.dead_after_ms = 3000;
    c
}

#[test]
fn a_failing_transition_puts_the_partition_in_error_naming_the_application() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    // The loggers' output directory would be below a regular file: it cannot be created.
    let mut config = small_config(&file.join("out"), 0);
    config.transport.kind = TransportKind::Tcp;
    let ctl = Controller::new(config, rodeo_bin!().into()).unwrap();
    assert_eq!(ctl.command(Command::Initialize).unwrap(), State::Initial);
    let st = ctl.status();
    assert!(st.apps.iter().all(|a| a.state == State::Initial), "{st:#?}");
    let pids: Vec<u32> = st.apps.iter().filter_map(|a| a.pid).collect();
    assert_eq!(pids.len(), 5);

    let e = ctl.command(Command::Configure).unwrap_err();
    match &e {
        TransitionError::Failed {
            who,
            command,
            from,
            reason,
        } => {
            assert_eq!(who, "logger-1");
            assert_eq!(*command, Command::Configure);
            assert_eq!(*from, State::Initial);
            assert!(
                reason.contains("cannot create output directory"),
                "{reason}"
            );
        }
        other => panic!("expected a failure, got {other}"),
    }
    let st = ctl.status();
    assert_eq!(st.state, State::Error);
    let why = st.error.clone().unwrap();
    assert!(
        why.contains("logger-1") && why.contains("cannot create"),
        "{why}"
    );
    let logger = st.apps.iter().find(|a| a.name == "logger-1").unwrap();
    assert_eq!(logger.state, State::Error);
    // The others were not configured: the command stopped at the first failure.
    let sup = st.apps.iter().find(|a| a.name == "supervisor").unwrap();
    assert_eq!(sup.state, State::Initial);
    // From ERROR only shutdown is legal; it takes every process away.
    let e = ctl.command(Command::Start).unwrap_err();
    assert!(e.to_string().contains("ERROR"), "{e}");
    assert_eq!(ctl.command(Command::Shutdown).unwrap(), State::None);
    rodeo_testkit::holds_within(Duration::from_secs(10), || {
        !pids.iter().any(|&p| pid_alive(p))
    });
    for p in pids {
        assert!(!pid_alive(p), "process {p} still there after shutdown");
    }
}

#[test]
fn illegal_commands_are_refused_naming_the_partition_state() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = Controller::new(small_config(dir.path(), 1), rodeo_bin!().into()).unwrap();
    let e = ctl.command(Command::Configure).unwrap_err();
    assert!(
        matches!(
            e,
            TransitionError::Illegal {
                state: State::None,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("NONE"), "{e}");
    ctl.command(Command::Initialize).unwrap();
    ctl.command(Command::Configure).unwrap();
    for c in [
        Command::Start,
        Command::Stop,
        Command::Shutdown,
        Command::Initialize,
    ] {
        let e = ctl.command(c).unwrap_err();
        assert!(
            matches!(
                e,
                TransitionError::Illegal {
                    state: State::Configured,
                    ..
                }
            ),
            "{c}: {e}"
        );
        assert!(e.to_string().contains("CONFIGURED"), "{e}");
    }
    // Nothing changed, in the partition or in any application.
    let st = ctl.status();
    assert_eq!(st.state, State::Configured);
    assert!(
        st.apps.iter().all(|a| a.state == State::Configured),
        "{st:#?}"
    );
    assert_eq!(ctl.command(Command::Unconfigure).unwrap(), State::Initial);
    assert_eq!(ctl.command(Command::Shutdown).unwrap(), State::None);
}

#[test]
fn dead_applications_are_found_by_heartbeat_and_by_exit_and_reported_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config(dir.path(), 2);
    // The policy without restarts (`[control] restart = false`); restarts: cli_restart.rs.
    config.control.restart = false;
    let ctl = Controller::new(config, rodeo_bin!().into()).unwrap();
    for c in [
        Command::Initialize,
        Command::Configure,
        Command::Connect,
        Command::Start,
    ] {
        ctl.command(c).unwrap();
    }
    wait_for(&ctl, "events flowing", |s| s.l1_accepts > 200);
    // Status and metrics come from the heartbeats.
    let st = ctl.status();
    assert_eq!(st.state, State::Running);
    assert!(st.apps.iter().all(|a| a.state == State::Running), "{st:#?}");
    assert!(
        st.apps.iter().all(|a| a.heartbeat_age_ms.is_some()),
        "{st:#?}"
    );
    let mut m = rodeo_control::prometheus::MetricsWriter::new();
    ctl.write_metrics(&mut m);
    let text = m.finish();
    assert!(
        text.contains("rodeo_l1_accepts_total{app=\"supervisor\"}"),
        "{text}"
    );
    assert!(
        text.contains("rodeo_partition_state{state=\"RUNNING\"} 1"),
        "{text}"
    );
    let pid_of = |name: &str| {
        ctl.status()
            .apps
            .iter()
            .find(|a| a.name == name)
            .and_then(|a| a.pid)
            .unwrap()
    };
    // A hung DCM (stopped, its process still there): only the heartbeat can tell.
    let dcm = pid_of("dcm-1");
    // SAFETY: kill(2) on a child process of the controller with a valid signal number.
    assert_eq!(unsafe { libc::kill(dcm as libc::pid_t, libc::SIGSTOP) }, 0);
    wait_for(&ctl, "dcm-1 dead", |s| {
        s.apps
            .iter()
            .any(|a| a.name == "dcm-1" && a.state == State::Error)
    });
    let st = ctl.status();
    let d = st.apps.iter().find(|a| a.name == "dcm-1").unwrap();
    assert!(
        d.error.as_deref().unwrap().contains("no heartbeat"),
        "{d:?}"
    );
    assert!(
        st.recent_errors.iter().any(|e| e.contains("dcm-1")),
        "{st:#?}"
    );
    // Policy: a dead DCM is survivable (the supervisor reassigns its events).
    assert_eq!(st.state, State::Running, "{st:#?}");
    let before = st.l1_accepts;
    wait_for(&ctl, "events still flowing", |s| {
        s.l1_accepts > before + 200
    });

    // Without restarts a readout node that dies is not survivable: the partition goes to
    // ERROR naming it.
    let ros = pid_of("ros-1");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(ros as libc::pid_t, libc::SIGKILL) }, 0);
    wait_for(&ctl, "partition ERROR", |s| s.state == State::Error);
    let st = ctl.status();
    let why = st.error.unwrap();
    assert!(why.contains("ros-1") && why.contains("dead"), "{why}");
    let r = st.apps.iter().find(|a| a.name == "ros-1").unwrap();
    assert_eq!(r.state, State::Error);
    assert!(r.error.as_deref().unwrap().contains("exited"), "{r:?}");
    assert_eq!(ctl.command(Command::Shutdown).unwrap(), State::None);
    for p in [dcm, ros] {
        rodeo_testkit::holds_within(Duration::from_secs(10), || !pid_alive(p));
    }
    // The stopped DCM was killed by the shutdown (it could not answer).
    assert!(!pid_alive(dcm));
}

/// The metric families (`# TYPE` lines) of a partition's `/metrics` page.
fn families(p: &dyn RunControl) -> std::collections::BTreeSet<String> {
    let mut m = rodeo_control::prometheus::MetricsWriter::new();
    p.write_metrics(&mut m);
    m.finish()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn the_embedded_partition_and_processes_export_the_same_metric_families() {
    let dir = tempfile::tempdir().unwrap();
    let up = [
        Command::Initialize,
        Command::Configure,
        Command::Connect,
        Command::Start,
    ];
    let mut c = small_config(&dir.path().join("embedded"), 4);
    c.transport.kind = TransportKind::Inproc;
    let embedded = EmbeddedPartition::new(c, None);
    for cmd in up {
        embedded.command(cmd).unwrap();
    }
    rodeo_testkit::wait_until("100 L1 accepts", Duration::from_secs(30), || {
        embedded.status().l1_accepts >= 100
    });
    let in_process = families(&embedded);
    embedded.command(Command::Stop).unwrap();

    let ctl = Controller::new(
        small_config(&dir.path().join("processes"), 5),
        rodeo_bin!().into(),
    )
    .unwrap();
    for cmd in up {
        ctl.command(cmd).unwrap();
    }
    wait_for(&ctl, "events flowing", |s| s.l1_accepts > 100);
    let processes = families(&ctl);
    assert_eq!(ctl.command(Command::Stop).unwrap(), State::Connected);
    // Every application's counters, histograms included, in both modes.
    for f in [
        "rodeo_l1_accepts_total",
        "rodeo_dcm_events_total",
        "rodeo_dcm_request_latency_seconds",
        "rodeo_ros_requests_total",
        "rodeo_logger_events_written_total",
        "rodeo_errors_total",
        "rodeo_app_heartbeat_age_seconds",
    ] {
        assert!(
            in_process.contains(f),
            "{f} missing in process: {in_process:?}"
        );
    }
    assert_eq!(
        in_process,
        processes,
        "families only embedded: {:?}; only in processes: {:?}",
        in_process.difference(&processes).collect::<Vec<_>>(),
        processes.difference(&in_process).collect::<Vec<_>>()
    );
}

/// The run's end reaches the controller within a turn of the supervisor process's loop, not
/// at its next heartbeat: with heartbeats every 10 s, a run of 500 events is seen to end
/// within a few seconds of its start (before, at the first heartbeat after it: 10 s), and the
/// partition then walks down to NONE.
#[test]
fn a_run_that_ends_by_itself_is_seen_at_once_not_at_the_next_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = small_config(dir.path(), 6);
    c.run.events = 500;
    c.run.seconds = 0.0;
    c.control.heartbeat_ms = 10_000;
    c.control.dead_after_ms = 40_000;
    let ctl = Controller::new(c, rodeo_bin!().into()).unwrap();
    for cmd in [Command::Initialize, Command::Configure, Command::Connect] {
        ctl.command(cmd).unwrap();
    }
    let started = std::time::Instant::now();
    assert_eq!(ctl.command(Command::Start).unwrap(), State::Running);
    let seen = rodeo_testkit::holds_within(Duration::from_secs(6), || ctl.run_finished());
    assert!(
        seen,
        "a 500-event run at 2 kHz not seen to end {:?} after its start",
        started.elapsed()
    );
    for (cmd, state) in [
        (Command::Stop, State::Connected),
        (Command::Disconnect, State::Configured),
        (Command::Unconfigure, State::Initial),
        (Command::Shutdown, State::None),
    ] {
        assert_eq!(ctl.command(cmd).unwrap(), state, "{cmd}");
    }
}
