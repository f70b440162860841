//! Alarms on metrics the partition has: an `[[alarms]]` entry's `metric` must be a status
//! value ([`STATUS_METRICS`]) or a family of `/metrics` this partition writes
//! ([`METRIC_FAMILIES`], the service's [`SERVICE_FAMILIES`], the SW ROD input's
//! [`swrod_families`] with `ros.input = "swrod"`, the monitoring's with `[monitoring]`), a
//! histogram by its samples (`_count`, `_sum`, `_bucket`), its labels ones the family has and,
//! for `app`, `role`, `verdict`, `state` and an alarm's `name`, values this partition has.
//! Anything else never has a value, and the alarm is never raised.

use crate::alarms::{parse_selector, AlarmSpec, STATUS_METRICS};
use crate::lifecycle::State;
use crate::metrics::{swrod_families, Family, METRIC_FAMILIES, SERVICE_FAMILIES};

use super::error::Checks;
use super::{PartitionConfig, RosInput};

impl PartitionConfig {
    /// `alarms.metric` of every alarm: one this partition has (module docs).
    pub(super) fn check_alarm_metrics(&self, c: &mut Checks) {
        for (i, a) in self.alarms.iter().enumerate() {
            if parse_selector(&a.metric).is_none() {
                continue; // refused by the alarms' own checks
            }
            if let Err(why) = metric_known(&a.metric, self, &self.alarms) {
                c.bad(
                    "alarms.metric",
                    format!("{:?} (alarms[{i}])", a.metric),
                    format!(
                        "a metric this partition has, or the alarm never has a value and is \
                         never raised: {why}"
                    ),
                );
            }
        }
    }
}

/// Whether `metric` names something `config`'s partition has (`specs`: the alarms, whose
/// names `rodeo_alarm_active{name}` takes); `Err`: why not, in words.
pub fn metric_known(
    metric: &str,
    config: &PartitionConfig,
    specs: &[AlarmSpec],
) -> Result<(), String> {
    let Some((name, labels)) = parse_selector(metric) else {
        return Err("not a metric name with optional labels".into());
    };
    if STATUS_METRICS.contains(&name) {
        return if labels.is_empty() {
            Ok(())
        } else {
            Err(format!("the status value {name} takes no labels"))
        };
    }
    let swrod = swrod_families();
    let family = |n: &str| -> Option<Family> {
        METRIC_FAMILIES
            .iter()
            .chain(SERVICE_FAMILIES)
            .copied()
            .find(|f| f.name == n)
            .or_else(|| {
                swrod.iter().find(|s| s.as_str() == n).map(|_| Family {
                    name: "rodeo_ros_swrod_*",
                    kind: "counter",
                    labels: &["app"],
                })
            })
    };
    let (family, le) = match family(name) {
        Some(f) if f.kind == "histogram" => {
            return Err(format!(
                "{name} is a histogram: name its samples, {name}_count, {name}_sum or \
                 {name}_bucket{{le=\"...\"}}"
            ))
        }
        Some(f) => (f, false),
        None => {
            let hist = ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                family(base)
                    .filter(|f| f.kind == "histogram")
                    .map(|f| (f, *suffix == "_bucket"))
            });
            hist.ok_or_else(|| unknown_family(name))?
        }
    };
    if family.name.starts_with("rodeo_ros_swrod_") && config.ros.input != RosInput::Swrod {
        return Err(format!("{name} exists only with ros.input = \"swrod\""));
    }
    if family.name.starts_with("rodeo_monitor_") && !config.monitoring.enabled() {
        return Err(format!("{name} exists only with [monitoring] endpoint set"));
    }
    for (k, v) in labels {
        if !(family.labels.contains(&k) || le && k == "le") {
            return Err(format!(
                "{name} has no label {k:?} (its labels: {})",
                if family.labels.is_empty() {
                    "none".to_string()
                } else {
                    family.labels.join(", ")
                }
            ));
        }
        let known = match k {
            "app" => config.is_app_name(v),
            "role" => ["logger", "ros", "dcm", "supervisor"].contains(&v),
            "verdict" => ["accept", "reject", "forced_accept"].contains(&v),
            "name" => specs.iter().any(|s| s.name == v),
            "state" => State::ALL.iter().any(|s| s.name() == v),
            _ => true,
        };
        if !known {
            return Err(format!(
                "{k}=\"{v}\" is none of this partition's (app: {})",
                config.app_name_ranges()
            ));
        }
    }
    Ok(())
}

/// Why `name` is no family, with the nearest names.
fn unknown_family(name: &str) -> String {
    let mut near: Vec<(usize, &str)> = METRIC_FAMILIES
        .iter()
        .chain(SERVICE_FAMILIES)
        .map(|f| (distance(name, f.name), f.name))
        .collect();
    near.sort();
    let near: Vec<&str> = near.iter().take(3).map(|(_, n)| *n).collect();
    format!(
        "no /metrics family {name} (nearest: {}; every family: docs/run-control.md, \
         \"Metrics\")",
        near.join(", ")
    )
}

/// Edit distance (insertions, deletions, substitutions) between `a` and `b`.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(prev + usize::from(ca != *cb));
            prev = cur;
        }
    }
    row[b.len()]
}
