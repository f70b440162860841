//! Alarms: conditions on the partition's numbers, configured as `[[alarms]]`, raised after they
//! hold for `for_seconds`, shown on the page (`GET /api/alarms`), exported as
//! `rodeo_alarm_active{name="…"}` and logged; an operator acknowledges them
//! (`POST /api/alarms/ack`).
//!
//! ```toml
//! [[alarms]]
//! name = "l1-rate-low"
//! metric = "l1_rate_hz"          # a value of the status, or a /metrics family
//! below = 1000.0
//! for_seconds = 5
//!
//! [[alarms]]
//! name = "lost-fragments"
//! metric = 'rodeo_errors_total{kind="lost_fragment"}'
//! above = 0
//! ```
//!
//! `metric` is one of the status values `l1_rate_hz`, `event_rate_hz`, `write_rate_hz`,
//! `disk_free_bytes` (the output directory's file system), `monitor_gaps` (samples of the
//! current run the service's subscriber missed), or the name of a Prometheus family of `/metrics` with an
//! optional label selector (`name{label="value",…}`): the sum of its matching samples. A metric
//! with no value (a family absent from this partition) holds no condition. An alarm is looked
//! at only while a run is in progress unless `always = true` (an L1 rate is 0 between runs).

use std::borrow::Cow;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::config::error::{num, Checks, ConfigError};
use crate::prometheus::MetricsWriter;

/// One `[[alarms]]` entry.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AlarmSpec {
    /// Its name (unique; the label of `rodeo_alarm_active`).
    pub name: String,
    /// What it watches (module docs).
    pub metric: String,
    /// Raised while the value is below this.
    #[serde(default)]
    pub below: Option<f64>,
    /// Raised while the value is above this.
    #[serde(default)]
    pub above: Option<f64>,
    /// How long the condition must hold before the alarm is raised (0: at once).
    #[serde(default)]
    pub for_seconds: f64,
    /// Also looked at between runs (default: only while running).
    #[serde(default)]
    pub always: bool,
}

/// The status values an alarm may name besides `/metrics` families.
pub const STATUS_METRICS: [&str; 5] = [
    "l1_rate_hz",
    "event_rate_hz",
    "write_rate_hz",
    "disk_free_bytes",
    "monitor_gaps",
];

/// The longest `for_seconds`: a year.
pub const MAX_FOR_SECONDS: f64 = 365.0 * 86_400.0;

/// Checks `[[alarms]]` on their own (names, selectors, thresholds); the errors name the field
/// (`alarms.…`) and the entry (`alarms[i]`). A partition's checks also refuse a metric it does
/// not have (`PartitionConfig::validate`, `config/alarm_metrics.rs`).
pub fn validate(specs: &[AlarmSpec]) -> Result<(), ConfigError> {
    let mut c = Checks::new();
    check(specs, &mut c);
    c.finish()
}

/// The checks of [`validate`], adding to `c`.
pub(crate) fn check(specs: &[AlarmSpec], c: &mut Checks) {
    let mut bad = |field: &'static str, i: usize, value: String, allowed: Cow<'static, str>| {
        c.push(ConfigError::Value {
            field,
            value: format!("{value} (alarms[{i}])"),
            allowed,
        })
    };
    for (i, a) in specs.iter().enumerate() {
        let name_ok = !a.name.is_empty()
            && a.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            bad(
                "alarms.name",
                i,
                format!("{:?}", a.name),
                "letters, digits, '-', '_' or '.', not empty".into(),
            );
        }
        if specs[..i].iter().any(|b| b.name == a.name) {
            bad(
                "alarms.name",
                i,
                format!("{:?}", a.name),
                "a name no other alarm has".into(),
            );
        }
        if parse_selector(&a.metric).is_none() {
            bad(
                "alarms.metric",
                i,
                format!("{:?}", a.metric),
                "a status value (l1_rate_hz, event_rate_hz, write_rate_hz, disk_free_bytes, \
                 monitor_gaps) or a /metrics family, optionally with labels: \
                 name{label=\"value\"}"
                    .into(),
            );
        }
        if a.below.is_none() && a.above.is_none() {
            bad(
                "alarms.below",
                i,
                "neither below nor above".into(),
                "give below = X or above = X (or both)".into(),
            );
        }
        // Each bound named by itself (a bad `below` was named `alarms.above`, its value shown
        // as `Some(NaN) / None`).
        for (field, bound) in [("alarms.below", a.below), ("alarms.above", a.above)] {
            if let Some(v) = bound.filter(|v| !v.is_finite()) {
                bad(field, i, num(v), "a finite number".into());
            }
        }
        if !(0.0..=MAX_FOR_SECONDS).contains(&a.for_seconds) {
            bad(
                "alarms.for_seconds",
                i,
                num(a.for_seconds),
                "seconds >= 0, at most 31536000 (a year)".into(),
            );
        }
    }
}

/// `name{a="x",b="y"}` -> (name, [(a, x), (b, y)]); `None` if malformed.
pub(crate) fn parse_selector(s: &str) -> Option<(&str, Vec<(&str, &str)>)> {
    let s = s.trim();
    let (name, labels) = match s.split_once('{') {
        Some((n, rest)) => (n, rest.strip_suffix('}')?),
        None => (s, ""),
    };
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if !name_ok {
        return None;
    }
    let mut out = Vec::new();
    for pair in labels.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = pair.split_once('=')?;
        let v = v.trim().strip_prefix('"')?.strip_suffix('"')?;
        out.push((k.trim(), v));
    }
    Some((name, out))
}

/// The sum of the samples of Prometheus text `text` that `selector` matches (`None`: none).
pub fn metric_value(text: &str, selector: &str) -> Option<f64> {
    let (name, labels) = parse_selector(selector)?;
    let mut sum = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((head, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (n, l) = match head.split_once('{') {
            Some((n, l)) => (n, l),
            None => (head, ""),
        };
        if n != name {
            continue;
        }
        if !labels
            .iter()
            .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        {
            continue;
        }
        if let Ok(v) = value.parse::<f64>() {
            *sum.get_or_insert(0.0) += v;
        }
    }
    sum
}

/// One alarm's state.
#[derive(Debug, Clone, Default)]
struct AlarmState {
    /// The condition holds since then.
    since: Option<Instant>,
    active: bool,
    acknowledged: bool,
    /// Wall-clock milliseconds of the last raise.
    raised_at_ms: u64,
    value: Option<f64>,
    raised: u64,
}

/// The alarms of a service and their states.
#[derive(Debug, Default)]
pub struct Alarms {
    specs: Vec<AlarmSpec>,
    states: Vec<AlarmState>,
}

/// What changed in one evaluation (for the log).
#[derive(Debug, Clone, PartialEq)]
pub enum AlarmChange {
    /// Raised (name, value, the condition as text).
    Raised(String, f64, String),
    /// Cleared (name).
    Cleared(String),
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Alarms {
    /// The alarms of `specs`, none raised.
    pub fn new(specs: &[AlarmSpec]) -> Alarms {
        Alarms {
            specs: specs.to_vec(),
            states: vec![AlarmState::default(); specs.len()],
        }
    }

    /// Replaces the specs (a new configuration); states of alarms that keep their name stay.
    pub fn reconfigure(&mut self, specs: &[AlarmSpec]) {
        let states = specs
            .iter()
            .map(|s| {
                self.specs
                    .iter()
                    .position(|o| o == s)
                    .map(|i| self.states[i].clone())
                    .unwrap_or_default()
            })
            .collect();
        self.specs = specs.to_vec();
        self.states = states;
    }

    /// Looks at every alarm: `value` gives a metric's value now; `running` whether a run is in
    /// progress. Returns what was raised or cleared (each also logged here).
    pub fn evaluate(
        &mut self,
        value: &dyn Fn(&str) -> Option<f64>,
        running: bool,
        now: Instant,
    ) -> Vec<AlarmChange> {
        let mut changes = Vec::new();
        for (spec, st) in self.specs.iter().zip(self.states.iter_mut()) {
            let v = if running || spec.always {
                value(&spec.metric)
            } else {
                None
            };
            st.value = v;
            let holds = v.is_some_and(|v| {
                spec.below.is_some_and(|b| v < b) || spec.above.is_some_and(|a| v > a)
            });
            if !holds {
                st.since = None;
                if st.active {
                    st.active = false;
                    tracing::warn!(alarm = %spec.name, "alarm cleared");
                    changes.push(AlarmChange::Cleared(spec.name.clone()));
                }
                continue;
            }
            let since = *st.since.get_or_insert(now);
            if !st.active && now.duration_since(since).as_secs_f64() >= spec.for_seconds {
                st.active = true;
                st.acknowledged = false;
                st.raised += 1;
                st.raised_at_ms = wall_ms();
                let v = v.unwrap_or(f64::NAN);
                let cond = condition(spec);
                tracing::error!(alarm = %spec.name, value = v, condition = %cond, "ALARM raised");
                changes.push(AlarmChange::Raised(spec.name.clone(), v, cond));
            }
        }
        changes
    }

    /// Acknowledges alarm `name` (it stays active while its condition holds, but marked seen).
    pub fn acknowledge(&mut self, name: &str) -> Result<(), String> {
        let i = self
            .specs
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| format!("no alarm named {name:?}"))?;
        self.states[i].acknowledged = true;
        tracing::warn!(alarm = %name, "alarm acknowledged");
        Ok(())
    }

    /// Every alarm as JSON: `{"alarms": [{name, metric, condition, active, acknowledged,
    /// value, raised, raised_at_ms}]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let v: Vec<serde_json::Value> = self
            .specs
            .iter()
            .zip(&self.states)
            .map(|(s, st)| {
                serde_json::json!({
                    "name": s.name,
                    "metric": s.metric,
                    "condition": condition(s),
                    "active": st.active,
                    "acknowledged": st.acknowledged,
                    "value": st.value,
                    "raised": st.raised,
                    "raised_at_ms": st.raised_at_ms,
                })
            })
            .collect();
        serde_json::json!({ "alarms": v })
    }

    /// `rodeo_alarm_active{name}` (1 while raised) and `rodeo_alarm_raised_total{name}`.
    pub fn write_metrics(&self, w: &mut MetricsWriter) {
        if self.specs.is_empty() {
            return;
        }
        let names: Vec<[(&str, &str); 1]> = self
            .specs
            .iter()
            .map(|s| [("name", s.name.as_str())])
            .collect();
        let active: Vec<(&[(&str, &str)], f64)> = names
            .iter()
            .zip(&self.states)
            .map(|(n, st)| (&n[..], if st.active { 1.0 } else { 0.0 }))
            .collect();
        w.gauge(
            "rodeo_alarm_active",
            "1 while the alarm is raised ([[alarms]] in the configuration).",
            &active,
        );
        let raised: Vec<(&[(&str, &str)], u64)> = names
            .iter()
            .zip(&self.states)
            .map(|(n, st)| (&n[..], st.raised))
            .collect();
        w.counter(
            "rodeo_alarm_raised_total",
            "Times the alarm was raised since the service started.",
            &raised,
        );
    }
}

/// "metric < X for Y s" as text.
fn condition(s: &AlarmSpec) -> String {
    let mut parts = Vec::new();
    if let Some(b) = s.below {
        parts.push(format!("{} < {b}", s.metric));
    }
    if let Some(a) = s.above {
        parts.push(format!("{} > {a}", s.metric));
    }
    let mut t = parts.join(" or ");
    if s.for_seconds > 0.0 {
        t.push_str(&format!(" for {} s", s.for_seconds));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spec(name: &str, metric: &str, below: Option<f64>, above: Option<f64>, s: f64) -> AlarmSpec {
        AlarmSpec {
            name: name.into(),
            metric: metric.into(),
            below,
            above,
            for_seconds: s,
            always: false,
        }
    }

    /// A bound that is not a finite number is refused naming that bound, with its value.
    #[test]
    fn a_bound_that_is_not_finite_is_named_by_itself() {
        let e = validate(&[spec("a", "l1_rate_hz", Some(f64::NAN), None, 0.0)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("alarms.below") && !e.contains("Some("), "{e}");
        let e = validate(&[spec("a", "l1_rate_hz", None, Some(f64::INFINITY), 0.0)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("alarms.above") && !e.contains("alarms.below"),
            "{e}"
        );
        validate(&[spec("a", "l1_rate_hz", Some(1.0), Some(2.0), 0.0)]).unwrap();
    }

    #[test]
    fn selectors_sum_matching_samples() {
        let text = "# HELP x y\nrodeo_errors_total{app=\"ros-1\",kind=\"lost_fragment\"} 2\n\
                    rodeo_errors_total{app=\"ros-2\",kind=\"lost_fragment\"} 3\n\
                    rodeo_errors_total{app=\"ros-1\",kind=\"clear_gap\"} 7\nrodeo_run_number 4\n";
        let v = |s| metric_value(text, s);
        assert_eq!(v("rodeo_errors_total{kind=\"lost_fragment\"}"), Some(5.0));
        assert_eq!(v("rodeo_errors_total"), Some(12.0));
        assert_eq!(v("rodeo_run_number"), Some(4.0));
        assert_eq!(v("rodeo_nothing"), None);
        assert_eq!(v("bad{"), None);
    }

    #[test]
    fn an_alarm_is_raised_after_its_time_cleared_and_acknowledged() {
        let mut a = Alarms::new(&[spec("low", "l1_rate_hz", Some(10.0), None, 2.0)]);
        let t0 = Instant::now();
        let low = |_: &str| Some(1.0);
        assert!(a.evaluate(&low, true, t0).is_empty());
        assert!(a
            .evaluate(&low, true, t0 + Duration::from_secs(1))
            .is_empty());
        let c = a.evaluate(&low, true, t0 + Duration::from_secs(2));
        assert!(matches!(&c[..], [AlarmChange::Raised(n, ..)] if n == "low"));
        let mut w = MetricsWriter::new();
        a.write_metrics(&mut w);
        assert!(w.finish().contains("rodeo_alarm_active{name=\"low\"} 1"));
        a.acknowledge("low").expect("known alarm");
        assert!(a.acknowledge("nope").is_err());
        assert_eq!(a.to_json()["alarms"][0]["acknowledged"], true);
        // Between runs it is not looked at: cleared.
        let c = a.evaluate(&low, false, t0 + Duration::from_secs(3));
        assert_eq!(c, vec![AlarmChange::Cleared("low".into())]);
    }

    #[test]
    fn bad_specs_name_their_field() {
        let field = |s: AlarmSpec| match validate(&[s]) {
            Err(ConfigError::Value { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(spec("", "x", Some(1.0), None, 0.0)), "alarms.name");
        assert_eq!(
            field(spec("a", "x{", Some(1.0), None, 0.0)),
            "alarms.metric"
        );
        assert_eq!(field(spec("a", "x", None, None, 0.0)), "alarms.below");
        assert_eq!(
            field(spec("a", "x", Some(1.0), None, -1.0)),
            "alarms.for_seconds"
        );
        assert!(validate(&[spec("a", "x{k=\"v\"}", None, Some(0.0), 0.0)]).is_ok());
    }
}
