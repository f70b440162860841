//! `rodeo bench partition`: the CPU a partition costs per L1 accept, per process, application
//! and thread, with its wake-ups and the messages of each hop (docs/benchmarks.md, "CPU per
//! L1 accept").
//!
//! [`measure`] runs the partition (the built-in default or a file) for `--events` L1 accepts
//! as `rodeo run` does ([`Run`]: same checks, same stop, same balance sheet), in a temporary
//! output directory removed afterwards, and reads the kernel's per-thread CPU clocks and
//! context switches ([`crate::proc_threads`]) of every thread of this process and, with
//! `--processes`, of every application process (their pids from the controller's status),
//! at every turn of the run's loop (every 20 ms; an embedded supervisor's thread ends by
//! itself with its last event, so a coarser interval could miss it whole). Each thread keeps
//! the last value seen, so what a thread spends after its last sample (at most one interval,
//! and the stop: files closed, the loggers' checks) is not in its row; `unsampled_cpu_ns`
//! says how much that was in all, from `getrusage` of this process and of its ended children
//! (the application processes), which misses nothing.
//!
//! The report is one JSON object (`rows`: one per thread, then one per application) as the
//! other benches'; a run whose verdict is `failed` is an error, not a figure.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use rodeo_control::metrics::AppMetrics;
use rodeo_control::run_control::Partition;
use serde_json::{json, Map, Value};

use crate::output::{started_by, OutputDir};
use crate::proc_threads::{rusage_cpu_ns, sample_process, ProcError, ThreadSample};
use crate::run::{Mode, Run, RunOptions};
use crate::setup::{load_config, Overrides};
use crate::verdict::{verdict_line, Verdict};

/// Arguments of `rodeo bench partition`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Partition configuration (TOML); default: the built-in partition.
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// L1 accepts to run for.
    #[arg(long, default_value_t = 300_000, value_name = "N")]
    pub events: u64,
    /// Every application its own `rodeo app` process (as `rodeo run --processes`).
    #[arg(long)]
    pub processes: bool,
    /// L1 accept rate in Hz (overrides l1.rate_hz; 0: as fast as the partition takes).
    #[arg(long, value_name = "HZ")]
    pub rate: Option<f64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The measurement: top-level fields (the headline and the per-hop counts, in report order)
/// and rows (one flat object per thread, `kind = "thread"`, then one per application).
pub type Profile = (Map<String, Value>, Vec<Map<String, Value>>);

/// Names (without their number) of the threads a readout node starts besides its core: the
/// emulated S-LINK and FELIX cards' DMA engines, the SW ROD's builders.
const READOUT_THREADS: [&str; 3] = ["slink", "felix", "swrod"];

/// The application of this process's threads that are no application's (the bench's own main
/// thread, ZeroMQ's I/O threads, pools shared by several applications).
const OTHER: &str = "(other)";

/// Runs the bench; see the module documentation. `interrupted` is polled at every turn of the
/// run's loop (the caller's SIGINT/SIGTERM flag): once true the run stops as `rodeo run` does,
/// its directory is removed, and the bench fails (an interrupted run is not a figure).
pub fn measure(args: &Args, interrupted: &dyn Fn() -> bool) -> anyhow::Result<Profile> {
    anyhow::ensure!(args.events > 0, "--events must be at least 1");
    let mut config = load_config(args.config.as_deref())?;
    anyhow::ensure!(
        config.hosts.is_empty(),
        "the configuration places applications on other hosts ([hosts]): the bench reads \
         this host's /proc only; profile a partition of one host"
    );
    Overrides {
        events: Some(args.events),
        rate_hz: args.rate,
        ..Overrides::default()
    }
    .apply(&mut config);
    let dir = std::env::temp_dir().join(format!("rodeo-bench-partition.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the bench directory {}", dir.display()))?;
    let elsewhere = config.logger.directories.clone();
    let mode = if args.processes {
        Mode::Processes
    } else {
        Mode::Embedded
    };
    let result = measure_in(&dir, config, mode, interrupted);
    if let Ok((_, run_dir_name)) = &result {
        for d in &elsewhere {
            let _ = std::fs::remove_dir_all(Path::new(d).join(run_dir_name));
        }
    }
    let removed = std::fs::remove_dir_all(&dir);
    let (profile, _) = result?;
    removed.with_context(|| format!("cannot remove the bench directory {}", dir.display()))?;
    Ok(profile)
}

/// The run in output directory `dir`; the profile and the run directory's name.
fn measure_in(
    dir: &Path,
    config: rodeo_control::config::PartitionConfig,
    mode: Mode,
    interrupted: &dyn Fn() -> bool,
) -> anyhow::Result<(Profile, PathBuf)> {
    let mut output = OutputDir::open(dir, "rodeo bench partition")?;
    let (self_before, children_before) = rusage_cpu_ns();
    let wall = Instant::now();
    let mut run = Run::new(
        &output,
        config,
        RunOptions::new(mode, started_by("rodeo bench partition")),
    )?;
    let partition = run.partition();
    let sampler = RefCell::new(Sampler::new(mode));
    // Every turn of the run's loop: a thread's CPU is known only while it lives.
    let stopped = std::cell::Cell::new(false);
    let quit = || {
        sampler.borrow_mut().sample(partition.as_ref());
        stopped.set(stopped.get() || interrupted());
        stopped.get()
    };
    let outcome = run.drive(&quit, |_, _| {});
    let metrics = run.last_metrics().to_vec();
    let outcome = outcome.map_err(|e| anyhow::Error::from(e).context("the partition failed"));
    let sheet = run.finish(&mut output, outcome, None);
    let wall_seconds = wall.elapsed().as_secs_f64();
    let (self_after, children_after) = rusage_cpu_ns();
    let rusage_ns =
        self_after.saturating_sub(self_before) + children_after.saturating_sub(children_before);
    let sampler = sampler.into_inner();
    if let Some(e) = sampler.error {
        return Err(anyhow::Error::from(e).context("reading the threads' CPU clocks"));
    }
    if stopped.get() {
        anyhow::bail!(
            "run {} (the bench's run) was interrupted after {} L1 accepts (verdict: {}): no figure; \
             its output directory is removed",
            sheet.run_number,
            sheet.l1_accepts.unwrap_or(0),
            verdict_line(sheet.verdict, &sheet.problems)
        );
    }
    if sheet.verdict == Verdict::Failed {
        anyhow::bail!(
            "run {} (the bench's run): {}",
            sheet.run_number,
            verdict_line(sheet.verdict, &sheet.problems)
        );
    }
    let l1 = sheet.l1_accepts.unwrap_or(0);
    anyhow::ensure!(l1 > 0, "the run took no L1 accept: nothing to divide by");
    let mut head = Map::new();
    head.insert("mode".into(), json!(mode_word(mode)));
    head.insert("verdict".into(), serde_json::to_value(sheet.verdict)?);
    head.insert("balanced".into(), json!(sheet.balanced));
    head.insert("l1_accepts".into(), json!(l1));
    head.insert("l1_rate_hz".into(), json!(sheet.l1_rate_hz));
    head.insert("wall_seconds".into(), json!(wall_seconds));
    let mut profile = sampler.report(l1, rusage_ns, head);
    hops(&metrics, &mut profile.0);
    Ok((
        profile,
        sheet
            .directory
            .file_name()
            .map(PathBuf::from)
            .unwrap_or_default(),
    ))
}

fn mode_word(mode: Mode) -> &'static str {
    match mode {
        Mode::Embedded => "embedded",
        Mode::Processes => "processes",
    }
}

/// One thread as last seen.
#[derive(Debug, Clone)]
struct Seen {
    process: String,
    application: String,
    sample: ThreadSample,
}

/// The last value seen of every thread of the partition's processes.
struct Sampler {
    mode: Mode,
    own_pid: u32,
    threads: BTreeMap<(u32, u32), Seen>,
    error: Option<ProcError>,
}

impl Sampler {
    fn new(mode: Mode) -> Sampler {
        Sampler {
            mode,
            own_pid: std::process::id(),
            threads: BTreeMap::new(),
            error: None,
        }
    }

    /// Reads every thread of this process and of the partition's application processes now.
    fn sample(&mut self, partition: &dyn Partition) {
        if self.error.is_some() {
            return;
        }
        let apps: Vec<(String, String, Option<u32>)> = partition
            .status()
            .apps
            .into_iter()
            .map(|a| (a.name, a.role, a.pid))
            .collect();
        let mut processes = vec![(self.own_pid, "bench".to_string())];
        if self.mode == Mode::Processes {
            processes.extend(
                apps.iter()
                    .filter_map(|(name, _, pid)| Some(((*pid)?, name.clone()))),
            );
        }
        for (pid, process) in processes {
            let samples = match sample_process(pid) {
                Ok(s) => s,
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            };
            for s in samples {
                let application = if pid != self.own_pid {
                    process.clone()
                } else if self.mode == Mode::Processes {
                    "controller".to_string()
                } else if s.tid == self.own_pid {
                    "bench".to_string()
                } else {
                    application_of(&s.comm, &apps)
                };
                let key = (s.pid, s.tid);
                self.threads.insert(
                    key,
                    Seen {
                        process: process.clone(),
                        application,
                        sample: s,
                    },
                );
            }
        }
    }

    /// The report: headline `head` completed with the CPU and wake-ups per L1 accept, rows per
    /// thread and per application.
    fn report(&self, l1: u64, rusage_ns: u64, mut head: Map<String, Value>) -> Profile {
        let per_l1 = |x: u64| x as f64 / l1 as f64;
        let cpu_ns: u64 = self.threads.values().map(|t| t.sample.cpu_ns).sum();
        let wakeups: u64 = self.threads.values().map(|t| t.sample.wakeups()).sum();
        head.insert("cpu_us_per_l1".into(), json!(per_l1(cpu_ns) / 1e3));
        head.insert("wakeups_per_l1".into(), json!(per_l1(wakeups)));
        head.insert("cpu_ns".into(), json!(cpu_ns));
        head.insert("wakeups".into(), json!(wakeups));
        head.insert("threads".into(), json!(self.threads.len()));
        let schedstat = self.threads.values().all(|t| t.sample.from_schedstat);
        head.insert(
            "cpu_clock".into(),
            json!(if schedstat { "schedstat" } else { "stat" }),
        );
        head.insert("rusage_cpu_ns".into(), json!(rusage_ns));
        head.insert(
            "rusage_cpu_us_per_l1".into(),
            json!(per_l1(rusage_ns) / 1e3),
        );
        head.insert(
            "unsampled_cpu_ns".into(),
            json!(rusage_ns as i64 - cpu_ns as i64),
        );
        let mut threads: Vec<&Seen> = self.threads.values().collect();
        threads.sort_by(|a, b| {
            (&a.process, &a.application, b.sample.cpu_ns).cmp(&(
                &b.process,
                &b.application,
                a.sample.cpu_ns,
            ))
        });
        let mut rows = Vec::new();
        // (process, application) -> (pid, threads, cpu, wakeups)
        let mut apps: BTreeMap<(String, String), (u32, u64, u64, u64)> = BTreeMap::new();
        for t in threads {
            let s = &t.sample;
            rows.push(row(
                "thread",
                t,
                &s.comm,
                Some(s.tid),
                (s.cpu_ns, s.wakeups(), 1),
                l1,
            ));
            let a = apps
                .entry((t.process.clone(), t.application.clone()))
                .or_insert((s.pid, 0, 0, 0));
            a.1 += 1;
            a.2 += s.cpu_ns;
            a.3 += s.wakeups();
        }
        let mut summed: Vec<_> = apps.into_iter().collect();
        summed.sort_by_key(|a| std::cmp::Reverse(a.1 .2));
        for ((process, application), (pid, n, cpu, wake)) in summed {
            let seen = Seen {
                process,
                application,
                sample: ThreadSample {
                    pid,
                    tid: 0,
                    comm: String::new(),
                    cpu_ns: cpu,
                    from_schedstat: schedstat,
                    voluntary_switches: wake,
                    nonvoluntary_switches: 0,
                },
            };
            rows.push(row(
                "application",
                &seen,
                &format!("({n} threads)"),
                None,
                (cpu, wake, n),
                l1,
            ));
        }
        (head, rows)
    }
}

/// One row: `kind`, where, which thread (`tid` None: an application's sum), and `(cpu_ns,
/// wakeups, threads)`.
fn row(
    kind: &str,
    t: &Seen,
    thread: &str,
    tid: Option<u32>,
    (cpu_ns, wakeups, threads): (u64, u64, u64),
    l1: u64,
) -> Map<String, Value> {
    let mut r = Map::new();
    r.insert("kind".into(), json!(kind));
    r.insert("process".into(), json!(t.process));
    r.insert("application".into(), json!(t.application));
    r.insert("thread".into(), json!(thread));
    r.insert("pid".into(), json!(t.sample.pid));
    r.insert("tid".into(), json!(tid));
    r.insert("threads".into(), json!(threads));
    r.insert("cpu_ns".into(), json!(cpu_ns));
    r.insert(
        "cpu_us_per_l1".into(),
        json!(cpu_ns as f64 / l1 as f64 / 1e3),
    );
    r.insert("wakeups".into(), json!(wakeups));
    r.insert("wakeups_per_l1".into(), json!(wakeups as f64 / l1 as f64));
    r
}

/// The application a thread of the embedded partition works for, from its name: an
/// application's name (`dcm-1`, or it followed by `-...`), else the one application of the
/// role its name starts with (`ros-core`, `slink0` of the only readout node), else [`OTHER`].
fn application_of(comm: &str, apps: &[(String, String, Option<u32>)]) -> String {
    if let Some((name, _, _)) = apps
        .iter()
        .filter(|(name, _, _)| {
            comm == name
                || comm
                    .strip_prefix(name.as_str())
                    .is_some_and(|r| r.starts_with('-'))
        })
        .max_by_key(|(name, _, _)| name.len())
    {
        return name.clone();
    }
    let head = comm.split(['-', '_']).next().unwrap_or(comm);
    let head = head.trim_end_matches(|c: char| c.is_ascii_digit());
    // The emulated cards' and the SW ROD's threads work for their readout node.
    let head = if READOUT_THREADS.contains(&head) {
        "ros"
    } else {
        head
    };
    let mut of_role = apps.iter().filter(|(_, role, _)| role == head);
    match (of_role.next(), of_role.next()) {
        (Some((name, _, _)), None) => name.clone(),
        _ => OTHER.to_string(),
    }
}

/// The messages and bytes of each hop per L1 accept, from the applications' own counters as
/// they last reported them (divided by the supervisors' L1 accepts in the same counters).
fn hops(metrics: &[(String, AppMetrics)], head: &mut Map<String, Value>) {
    let mut c: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, m) in metrics {
        let mut add = |k, v| *c.entry(k).or_default() += v;
        match m {
            AppMetrics::Supervisor(s) => {
                add("l1", s.l1_accepts);
                add("supervisor_decisions", s.accepted + s.rejected);
            }
            AppMetrics::Dcm(d) => {
                add("dcm_events", d.events);
                add("dcm_data_requests", d.requests);
                add("dcm_received_bytes", d.bytes_received);
                add("dcm_sampled", d.sampled);
            }
            AppMetrics::Ros(r) => {
                add("ros_input_fragments", r.input_fragments);
                add("ros_requests_served", r.requests);
                add("ros_fragments_sent", r.fragments_sent);
                add("ros_sent_bytes", r.bytes_sent);
                add("ros_l1ids_cleared", r.cleared_l1ids);
            }
            AppMetrics::Logger(l) => {
                add("logger_events_written", l.events_written);
                add("logger_written_bytes", l.bytes_written);
            }
        }
    }
    let l1 = c.remove("l1").unwrap_or(0);
    head.insert("counters_l1_accepts".into(), json!(l1));
    for (k, v) in c {
        let per = if l1 > 0 { v as f64 / l1 as f64 } else { 0.0 };
        head.insert(format!("{k}_per_l1"), json!(per));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_given_to_their_application_by_name() {
        let apps: Vec<(String, String, Option<u32>)> = [
            ("supervisor", "supervisor"),
            ("dcm-1", "dcm"),
            ("dcm-11", "dcm"),
            ("ros-1", "ros"),
            ("logger-1", "logger"),
        ]
        .iter()
        .map(|(n, r)| (n.to_string(), r.to_string(), None))
        .collect();
        assert_eq!(application_of("dcm-1", &apps), "dcm-1");
        assert_eq!(application_of("dcm-11", &apps), "dcm-11");
        assert_eq!(application_of("dcm-1-sample", &apps), "dcm-1");
        assert_eq!(application_of("ros-core", &apps), "ros-1");
        assert_eq!(application_of("ros2-x", &apps), "ros-1");
        assert_eq!(application_of("slink0", &apps), "ros-1");
        assert_eq!(application_of("swrod-pool1", &apps), "ros-1");
        assert_eq!(application_of("dcm-x", &apps), OTHER);
        assert_eq!(application_of("ZMQbg/IO/0", &apps), OTHER);
        assert_eq!(application_of("supervisor", &apps), "supervisor");
    }

    #[test]
    fn hops_are_divided_by_the_l1_accepts_of_the_same_counters() {
        let mut head = Map::new();
        hops(&[], &mut head);
        assert_eq!(head["counters_l1_accepts"], json!(0));
    }
}
