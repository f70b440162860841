//! `rodeo study pool` and `rodeo study dma`: the tables of `rodeo bench pool` and `rodeo bench
//! dma` (measured by that code, called here), written as CSV and JSON and plotted.

use clap::Parser;
use serde_json::{Map, Value};

use super::plot::{line_chart, Chart, Series};
use super::{field, Ctx};
use crate::bench::{dma, pool};
use crate::report::Report;

/// Parses bench arguments as the command line would.
#[derive(Debug, Parser)]
struct PoolArgs {
    #[command(flatten)]
    pub a: pool::Args,
}

#[derive(Debug, Parser)]
struct DmaArgs {
    #[command(flatten)]
    pub a: dma::Args,
}

fn by<'a>(rows: &'a [Map<String, Value>], key: &str, value: &str) -> Vec<&'a Map<String, Value>> {
    rows.iter()
        .filter(|r| r.get(key).and_then(Value::as_str) == Some(value))
        .collect()
}

/// The memory-pool table: allocation time per allocator and thread count.
pub fn pool(ctx: &Ctx) -> anyhow::Result<(Report, bool)> {
    // The whole table `--rounds` times (3 by default; the allocators interleaved within each
    // repetition): medians and spread.
    let repeat = ctx.rounds.unwrap_or(3).to_string();
    let mut argv = vec!["pool", "--repeat", &repeat];
    if ctx.quick {
        argv.push("--quick");
    }
    let report = pool::measure_report(PoolArgs::try_parse_from(argv)?.a)?;
    let mut names: Vec<String> = Vec::new();
    for r in &report.rows {
        if let Some(n) = r.get("allocator").and_then(Value::as_str) {
            if !names.iter().any(|x| x == n) {
                names.push(n.to_string());
            }
        }
    }
    for (stat, file, title) in [
        ("avg_ns", "pool_avg.png", "Allocation time, average (ns)"),
        ("max_ns", "pool_max.png", "Allocation time, maximum (ns)"),
    ] {
        let series: Vec<Series> = names
            .iter()
            .filter(|n| !n.starts_with("first_touch"))
            .map(|n| Series {
                label: n.clone(),
                points: by(&report.rows, "allocator", n)
                    .iter()
                    .map(|r| (field(r, "threads"), field(r, stat)))
                    .collect(),
                line: true,
            })
            .collect();
        line_chart(
            &ctx.dir.join(file),
            &Chart {
                title,
                x_label: "threads",
                y_label: stat,
                log_x: false,
                log_y: true,
            },
            &series,
        )?;
    }
    Ok((report, true))
}

/// The readout-input table: DMA throughput per superpage size and channel count.
pub fn dma(ctx: &Ctx) -> anyhow::Result<(Report, bool)> {
    // Every point measured `--rounds` times (5 by default), interleaved: medians and spread.
    let repeat = ctx.rounds.unwrap_or(5).to_string();
    let mut argv = vec!["dma", "--repeat", &repeat];
    if ctx.quick {
        argv.push("--quick");
    }
    let secs;
    if let Some(s) = ctx.seconds {
        secs = s.to_string();
        argv.extend(["--seconds", &secs]);
    }
    let report = dma::measure_report(DmaArgs::try_parse_from(argv)?.a)?;
    let memcpy = report
        .fields
        .get("memcpy_64mib_bytes_per_s")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let mut series: Vec<Series> = [1.0, 2.0]
        .iter()
        .map(|&ch| Series {
            label: format!("{ch} channel(s)"),
            points: report
                .rows
                .iter()
                .filter(|r| field(r, "channels") == ch)
                .map(|r| {
                    (
                        field(r, "superpage_bytes") / 1024.0,
                        field(r, "bytes_per_s") / 1e9,
                    )
                })
                .collect(),
            line: true,
        })
        .collect();
    let xs: Vec<f64> = series[0].points.iter().map(|p| p.0).collect();
    series.push(Series {
        label: "memcpy (same run)".into(),
        points: xs.iter().map(|&x| (x, memcpy / 1e9)).collect(),
        line: true,
    });
    line_chart(
        &ctx.dir.join("dma_throughput.png"),
        &Chart {
            title: "Emulated DMA into superpages",
            x_label: "superpage size (KiB)",
            y_label: "GB/s",
            log_x: true,
            log_y: false,
        },
        &series,
    )?;
    Ok((report, true))
}
