//! The studies: the papers' characterisation methods (`rodeo study NAME`). Each study runs its
//! measurements in this process, then writes into `--output DIR/NAME/` a CSV of the measured
//! points, `summary.json` (the report: top-level fields and rows) and PNG plots, and returns the
//! report for the caller to print.
//!
//! Studies call the existing measurement code: the ROSTester and the in-process readout node
//! (`ros`, `slice`), the plain ZeroMQ fragment server of `bench ros` (`sfi`), and `bench pool` /
//! `bench dma` (`pool`, `dma`), and the in-process node with its SW ROD input (`swrod`). Nothing here runs in the background after the command returns:
//! every node and thread a study starts is stopped and joined before the next point.

pub mod model;
pub mod plot;
pub mod ros;
pub mod rounds;
pub mod sfi;
pub mod slice;
pub mod swrod;
pub mod tables;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Map, Value};

use crate::report::Report;

/// Arguments of `rodeo study`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which study.
    #[arg(value_enum)]
    pub name: Name,
    /// A smaller grid and shorter points (the `ros` study then takes a few minutes).
    #[arg(long)]
    pub quick: bool,
    /// Directory receiving NAME/ with the CSV, summary.json and PNG plots.
    #[arg(long, value_name = "DIR", default_value = "rodeo-study")]
    pub output: PathBuf,
    /// Seconds per measured point (default depends on the study and --quick).
    #[arg(long, value_name = "S", value_parser = rodeo_ros::cli_values::seconds)]
    pub seconds: Option<f64>,
    /// Measurements of each point, the points interleaved and the median kept (`ros`: 9 with
    /// --quick, else 5; `sfi`, `slice`, `dma`: 5; `pool`: 3 repetitions of the table);
    /// 1..=1000.
    #[arg(long, value_name = "N", value_parser = rodeo_ros::cli_values::count(1..=1000))]
    pub rounds: Option<usize>,
    /// `ros`: only the first N grid points (tests run a tiny grid).
    #[arg(long, hide = true, value_name = "N")]
    pub max_points: Option<usize>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The studies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Name {
    /// ROS paper 7.1: maximum delete rate over fragment size, EB/L2 fractions and RoI size;
    /// Figure 9; the utilisation model fitted on part of the grid, held-out points predicted.
    Ros,
    /// DataCollection paper Fig. 3: event building from up to 1600 emulated sources, fragments
    /// of 160 .. 1456 bytes: message rate and bandwidth.
    Sfi,
    /// Level-2 SCI paper: the vertical slice's four scenarios (pipeline, event parallelism,
    /// RoI fragment building, RoI parallelism), time per event and latency against size.
    Slice,
    /// The memory-pool table of `bench pool`, with a plot.
    Pool,
    /// The readout-input (DMA) table of `bench dma`, with a plot.
    Dma,
    /// SW ROD talk: a readout node's L1 rate with its SW ROD input against ROBs, E-links per
    /// ROB and packet size, its S-LINK DMA input beside it.
    Swrod,
}

impl Name {
    /// The study's name (its output directory and `bench` field).
    pub fn as_str(self) -> &'static str {
        match self {
            Name::Ros => "ros",
            Name::Sfi => "sfi",
            Name::Slice => "slice",
            Name::Pool => "pool",
            Name::Dma => "dma",
            Name::Swrod => "swrod",
        }
    }
}

/// What a study gets: its options and its output directory (created).
pub struct Ctx {
    /// `--quick`.
    pub quick: bool,
    /// `--seconds`.
    pub seconds: Option<f64>,
    /// `DIR/NAME`.
    pub dir: PathBuf,
    /// `--rounds`.
    pub rounds: Option<usize>,
    /// `--max-points`.
    pub max_points: Option<usize>,
}

/// What a study returns: its report (also written to `summary.json`) and whether every check it
/// makes held (a fitted model that predicts its held-out points, a met target).
#[derive(Debug)]
pub struct Outcome {
    /// The report, as `--json` prints it.
    pub report: Report,
    /// Whether the study's checks held.
    pub ok: bool,
}

/// Runs the study `args` names and writes its CSV, `summary.json` and plots.
pub fn run(args: &Args) -> anyhow::Result<Outcome> {
    let name = args.name.as_str();
    let dir = args.output.join(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Tried before the measurement, not after it (an existing directory this process cannot
    // write in failed the study only at its end).
    let probe = dir.join(format!(".rodeo-study-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").with_context(|| {
        format!(
            "{} is not a directory this process can write in: choose another --output",
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    if let Some(s) = args.seconds {
        anyhow::ensure!(s > 0.0 && s.is_finite(), "--seconds must be positive");
    }
    let ctx = Ctx {
        quick: args.quick,
        seconds: args.seconds,
        dir: dir.clone(),
        rounds: args.rounds,
        max_points: args.max_points,
    };
    anyhow::ensure!(args.rounds != Some(0), "--rounds must be at least 1");
    let (mut report, ok) = match args.name {
        Name::Ros => ros::run(&ctx)?,
        Name::Sfi => sfi::run(&ctx)?,
        Name::Slice => slice::run(&ctx)?,
        Name::Pool => tables::pool(&ctx)?,
        Name::Dma => tables::dma(&ctx)?,
        Name::Swrod => swrod::run(&ctx)?,
    };
    report.bench = format!("study_{name}");
    report.fields.insert("quick".into(), args.quick.into());
    report
        .fields
        .insert("output_dir".into(), dir.display().to_string().into());
    write_csv(&dir.join(format!("{name}.csv")), &report.rows)?;
    write_json(&dir.join("summary.json"), &report_value(&report))?;
    Ok(Outcome { report, ok })
}

/// The report as one JSON object (as `--json` prints it).
fn report_value(r: &Report) -> Value {
    let mut obj = Map::new();
    obj.insert("bench".into(), r.bench.clone().into());
    for (k, v) in &r.fields {
        obj.insert(k.clone(), v.clone());
    }
    obj.insert(
        "rows".into(),
        Value::Array(r.rows.iter().cloned().map(Value::Object).collect()),
    );
    Value::Object(obj)
}

/// Writes pretty JSON to `path`.
pub fn write_json(path: &Path, v: &Value) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Writes rows as CSV (columns of the first row; strings quoted when they need it).
pub fn write_csv(path: &Path, rows: &[Map<String, Value>]) -> anyhow::Result<()> {
    let mut out = String::new();
    if let Some(first) = rows.first() {
        let cols: Vec<&String> = first.keys().collect();
        out.push_str(
            &cols
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(","),
        );
        out.push('\n');
        for r in rows {
            let cells: Vec<String> = cols
                .iter()
                .map(|c| match r.get(*c) {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) if s.contains([',', '"', '\n']) => {
                        format!("\"{}\"", s.replace('"', "\"\""))
                    }
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                })
                .collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

/// A number not returned before in this process (fresh inproc endpoint names: ZeroMQ frees a
/// closed socket's inproc name asynchronously, so reusing one can fail to bind).
pub fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A number field of a row (0 when missing).
pub fn field(row: &Map<String, Value>, key: &str) -> f64 {
    row.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}
