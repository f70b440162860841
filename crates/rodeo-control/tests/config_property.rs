//! Issue 36: a configuration that `config check` accepts either runs with complete events or
//! is refused. Generated configurations (as TOML text, so that parsing is tried too) over the
//! fields that matter (readout nodes, channels, fragment sizes, input, DCMs and slots, rates,
//! processing times and fractions including non-finite and huge values, timeouts, ports,
//! alarms) go through `PartitionConfig::from_toml` and the host checks; neither may panic.
//! Values known to be impossible must be refused naming their field. Each accepted one runs
//! as a short embedded partition (a few hundred events or 3 s): it must not panic or fail,
//! must balance, and every event in its files must carry a good fragment of every ROB the
//! partition has, or be counted among the DCMs' partial events.
//!
//! 48 cases by default (about 10 s here, a dozen of them run); `RODEO_CONFIG_CASES=N` for
//! more, `RODEO_CONFIG_EVENTS=N` for longer runs (300 L1 accepts by default, at most 3 s).

use std::collections::HashSet;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rodeo_control::config::{ConfigError, PartitionConfig};
use rodeo_control::embedded::EmbeddedPartition;
use rodeo_files::rawfile::RawFileReader;
use rodeo_format::compress::decompress_event;
use rodeo_format::fragment::{FullEvent, Status};

/// One generated configuration.
#[derive(Debug, Clone)]
struct Gen {
    nodes: u32,
    channels: u32,
    fragment_words: u64,
    swrod: bool,
    elinks: u32,
    dcm_nodes: u32,
    slots: u32,
    processing_us: &'static str,
    accept_fraction: &'static str,
    rate_hz: &'static str,
    seconds: &'static str,
    event_timeout_ms: &'static str,
    external_port: Option<u64>,
    alarm: Option<(&'static str, bool)>,
}

/// Floats as written in TOML, with what the checks must make of them (true: acceptable).
const PROCESSING_US: &[(&str, bool)] = &[
    ("0.0", true),
    ("20.0", true),
    ("150.5", true),
    ("1e300", false),
    ("inf", false),
    ("nan", false),
    ("-1.0", false),
    ("2e7", false),
];
const FRACTIONS: &[(&str, bool)] = &[
    ("0.1", true),
    ("1.0", true),
    ("0.0", true),
    ("1.5", false),
    ("nan", false),
    ("-0.1", false),
];
const RATES: &[(&str, bool)] = &[
    ("0.0", true),
    ("20000.0", true),
    ("1e-300", false),
    ("1e300", false),
    ("inf", false),
    ("nan", false),
];
const SECONDS: &[(&str, bool)] = &[
    ("3.0", true),
    ("-1.0", false),
    ("nan", false),
    ("1e300", false),
];
const TIMEOUTS: &[(&str, bool)] = &[
    ("10000", true),
    ("1000", true),
    ("999", false),
    ("0", false),
    ("9223372036854775807", false),
    ("-5", false),
];
/// Alarm metrics, and whether this partition has them.
const ALARMS: &[(&str, bool)] = &[
    ("l1_rate_hz", true),
    ("rodeo_l1_accepts_total", true),
    ("rodeo_errors_total{kind=\"lost_fragment\"}", true),
    ("rodeo_decision_latency_seconds_count", true),
    ("rodeo_nothing_total", false),
    ("rodeo_decision_latency_seconds", false),
    ("rodeo_errors_total{app=\"dcm-99\"}", false),
    ("rodeo_l1_accepts_total{knd=\"x\"}", false),
];

/// One of `list`: an acceptable value nine times in ten, so that about half the
/// configurations are accepted and run.
fn pick(list: &'static [(&'static str, bool)]) -> impl Strategy<Value = &'static str> {
    let of = |ok: bool| -> Vec<&'static str> {
        list.iter()
            .filter(|(_, o)| *o == ok)
            .map(|(v, _)| *v)
            .collect()
    };
    prop_oneof![
        9 => proptest::sample::select(of(true)),
        1 => proptest::sample::select(of(false)),
    ]
}

fn ok_of(list: &[(&str, bool)], v: &str) -> bool {
    list.iter().any(|(x, ok)| *x == v && *ok)
}

fn gen() -> impl Strategy<Value = Gen> {
    let readout = (
        prop_oneof![18 => 1u32..=3, 1 => Just(0u32), 1 => Just(40u32)],
        prop_oneof![18 => 1u32..=8, 1 => Just(0u32), 1 => Just(65u32)],
        prop_oneof![
            12 => 1u64..=3000,
            1 => Just(65_521u64),
            1 => Just(65_522u64),
            1 => Just(20_000u64),
            1 => Just(5_000_000_000u64),
        ],
        proptest::bool::weighted(0.3),
        1u32..=8,
    );
    let dcm = (
        1u32..=3,
        prop_oneof![
            6 => 1u32..=64,
            2 => Just(256u32),
            1 => Just(2000u32),
            1 => Just(4096u32),
            1 => Just(0u32),
        ],
        pick(PROCESSING_US),
        pick(FRACTIONS),
    );
    let run = (
        pick(RATES),
        pick(SECONDS),
        pick(TIMEOUTS),
        proptest::option::weighted(
            0.1,
            prop_oneof![
                Just(0u64),
                Just(47_901u64),
                Just(65_535u64),
                Just(99_999u64)
            ],
        ),
        proptest::option::weighted(0.3, (pick(ALARMS), any::<bool>())),
    );
    (readout, dcm, run).prop_map(
        |(
            (nodes, channels, fragment_words, swrod, elinks),
            (dcm_nodes, slots, processing_us, accept_fraction),
            (rate_hz, seconds, event_timeout_ms, external_port, alarm),
        )| Gen {
            nodes,
            channels,
            fragment_words,
            swrod,
            elinks,
            dcm_nodes,
            slots,
            processing_us,
            accept_fraction,
            rate_hz,
            seconds,
            event_timeout_ms,
            external_port,
            alarm,
        },
    )
}

impl Gen {
    fn toml(&self, output: &str, events: u64) -> String {
        let mut t = format!(
            "[run]\nevents = {events}\nseconds = {}\noutput = {output:?}\n\
             [ros]\nnodes = {}\nchannels = {}\nfragment_words = {}\ninput = \"{}\"\nelinks = {}\n\
             [dcm]\nnodes = {}\nslots = {}\nprocessing_us = {}\naccept_fraction = {}\n\
             [supervisor]\nevent_timeout_ms = {}\n[l1]\nrate_hz = {}\n",
            self.seconds,
            self.nodes,
            self.channels,
            self.fragment_words,
            if self.swrod { "swrod" } else { "dma" },
            self.elinks,
            self.dcm_nodes,
            self.slots,
            self.processing_us,
            self.accept_fraction,
            self.event_timeout_ms,
            self.rate_hz,
        );
        if let Some(port) = self.external_port {
            t.push_str(&format!(
                "mode = \"external\"\nexternal_listen = \"tcp://127.0.0.1:{port}\"\n"
            ));
        }
        if let Some((metric, below)) = self.alarm {
            t.push_str(&format!(
                "[[alarms]]\nname = \"a\"\nmetric = {metric:?}\n{} = 1.0\n",
                if below { "below" } else { "above" }
            ));
        }
        t
    }

    /// Fields that must be refused, by what is known of them without the checks' own rules.
    fn must_refuse(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if !ok_of(PROCESSING_US, self.processing_us) {
            v.push("dcm.processing_us");
        }
        if !ok_of(FRACTIONS, self.accept_fraction) {
            v.push("dcm.accept_fraction");
        }
        if !ok_of(RATES, self.rate_hz) {
            v.push("l1.rate_hz");
        }
        if !ok_of(SECONDS, self.seconds) {
            v.push("run.seconds");
        }
        if !ok_of(TIMEOUTS, self.event_timeout_ms) {
            v.push("supervisor.event_timeout_ms");
        }
        if self
            .external_port
            .is_some_and(|p| !(1..=65535).contains(&p))
        {
            v.push("l1.external_listen");
        }
        if self.alarm.is_some_and(|(m, _)| !ok_of(ALARMS, m)) {
            v.push("alarms.metric");
        }
        if !self.swrod && (65_522..=1u64 << 20).contains(&self.fragment_words) {
            v.push("ros.fragment_words");
        }
        v
    }
}

/// Runs `config` embedded and reads its files back: every event carries a good fragment of
/// every ROB, or is counted partial.
fn run(config: PartitionConfig) -> Result<(), TestCaseError> {
    let robs: HashSet<u32> = (0..(config.ros.nodes * config.ros.channels) as u32)
        .map(|m| (u32::from(config.ros.subdetector) << 16) | m)
        .collect();
    let p = EmbeddedPartition::new(config.clone(), None);
    let summary = p
        .run(|_, _| {})
        .map_err(|e| TestCaseError::fail(format!("the run failed: {e}")))?;
    prop_assert!(summary.balanced(), "unbalanced: {:?}", summary.problems);
    let bad = Status::ROB_FRAGMENT_LOST.word() | Status::ROB_FRAGMENT_PENDING.word();
    let (mut events, mut short) = (0u64, 0u64);
    let mut plain = Vec::new();
    for f in &summary.files {
        let mut reader = RawFileReader::open(f).map_err(|e| TestCaseError::fail(e.to_string()))?;
        while let Some(event) = reader.next_event() {
            let event = event.map_err(|e| TestCaseError::fail(e.to_string()))?;
            decompress_event(event.words, &mut plain)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let e = FullEvent::parse(&plain).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let good: HashSet<u32> = e
                .robs()
                .filter_map(Result::ok)
                .filter(|r| r.status().word() & bad == 0)
                .map(|r| r.source_id().0)
                .filter(|id| robs.contains(id))
                .collect();
            events += 1;
            short += u64::from(good.len() != robs.len());
        }
    }
    prop_assert_eq!(events, summary.events_written);
    prop_assert!(
        short <= summary.partial_events,
        "{short} of {events} events lack a ROB but {} partial events were counted",
        summary.partial_events
    );
    if short > 0 {
        eprintln!("accepted configuration ran with {short} counted partial events of {events}");
    }
    Ok(())
}

#[test]
fn accepted_configurations_run_with_complete_events_and_the_rest_are_refused() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let cases = env("RODEO_CONFIG_CASES", 48) as u32;
    let events = env("RODEO_CONFIG_EVENTS", 300);
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let (accepted, ran) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    runner
        .run(&gen(), |g| {
            let dir = tempfile::tempdir().unwrap();
            let text = g.toml(&dir.path().display().to_string(), events);
            let checked = PartitionConfig::from_toml(&text, "gen.toml")
                .and_then(|c| c.check_here().map(|_| c));
            let must = g.must_refuse();
            let config = match checked {
                Err(e) => {
                    // A value toml cannot take stops the reading before the values' checks.
                    let typed = e.errors().iter().any(|x| {
                        matches!(x, ConfigError::Field { .. } | ConfigError::Parse { .. })
                    });
                    let fields = e.fields();
                    for f in &must {
                        prop_assert!(
                            typed || fields.iter().any(|x| x == f),
                            "{f} not named:\n{e}\n{text}"
                        );
                    }
                    return Ok(());
                }
                Ok(c) => c,
            };
            prop_assert!(must.is_empty(), "accepted, but {must:?} are wrong:\n{text}");
            accepted.set(accepted.get() + 1);
            // An external trigger unit is not part of this test: checked, not run.
            if g.external_port.is_some() {
                return Ok(());
            }
            ran.set(ran.get() + 1);
            run(config)
        })
        .unwrap();
    eprintln!(
        "{cases} configurations: {} accepted, {} run",
        accepted.get(),
        ran.get()
    );
}
