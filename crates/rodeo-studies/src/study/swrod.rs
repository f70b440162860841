//! `rodeo study swrod`: the L1 rate of one readout node whose ROBs are fed by its SW ROD (per
//! ROB a fragment builder on an emulated FELIX card, all on the node's builder pool), against
//! the number of ROBs, the E-links per ROB and the packet size, with the same node fed by
//! S-LINK DMA beside it (the SW ROD talk's plots of rate against E-links; docs/studies.md).
//!
//! Each point is the ROSTester's default request mix against an in-process node on the direct
//! link (`rodeo tester --channels R --fragment-words W --input swrod --elinks E`), for
//! `--seconds`; the DMA reference (`--input dma`) is measured per ROB count and fragment size,
//! interleaved with the SW ROD points of the same ROBs and size. With `--rounds N` each point
//! is measured N times (in turn with the others) and the median kept. The study's check: no
//! point lost a fragment or got a bad reply.

use serde_json::{Map, Value};

use super::plot::{line_chart, Chart, Series};
use super::{field, Ctx};
use crate::report::Report;
use rodeo_ros::standalone::{start_direct_node, InputKind, NodeArgs};
use rodeo_rostester::drive::{run_direct_tester, MixArgs, NodeRow};

/// One measurement of a node.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    l1_rate_hz: f64,
    lost: u64,
    bad: u64,
    node: NodeRow,
}

/// Runs the tester for `seconds` against a fresh node of `robs` ROBs of `words` data words,
/// fed by SW ROD builders of `elinks` E-links each (`Some`) or by S-LINK DMA (`None`).
fn measure(
    robs: usize,
    words: u32,
    elinks: Option<usize>,
    seconds: f64,
) -> anyhow::Result<Measured> {
    let node = NodeArgs {
        channels: robs,
        fragment_words: words,
        input: if elinks.is_some() {
            InputKind::Swrod
        } else {
            InputKind::Dma
        },
        elinks: elinks.unwrap_or(4),
        ..crate::defaults()
    };
    let mix = MixArgs {
        seconds,
        ..crate::defaults()
    };
    let (n, mut client) = start_direct_node(&node)?;
    let cpu0 = rodeo_memory::cpu::process_cpu_time();
    let r = run_direct_tester(&mut client, &node.robs(), node.l1id_wrap, &mix);
    let cpu = rodeo_memory::cpu::process_cpu_time().saturating_sub(cpu0);
    drop(client);
    let stopped = n.stop();
    let r = r?;
    Ok(Measured {
        l1_rate_hz: r.l1_rate_hz(),
        lost: r.lost_fragments,
        bad: r.bad_replies,
        node: NodeRow::from_stopped(&stopped).with_process_cpu(cpu, r.events),
    })
}

/// The median of `xs` by L1 rate (`xs` not empty).
fn median(mut xs: Vec<Measured>) -> Measured {
    xs.sort_by(|a, b| a.l1_rate_hz.total_cmp(&b.l1_rate_hz));
    xs[xs.len() / 2]
}

/// Runs the study. See the module docs.
pub fn run(ctx: &Ctx) -> anyhow::Result<(Report, bool)> {
    let seconds = ctx.seconds.unwrap_or(if ctx.quick { 1.0 } else { 4.0 });
    let rounds = ctx.rounds.unwrap_or(1);
    let robs_grid: &[usize] = if ctx.quick { &[4, 24] } else { &[4, 12, 24] };
    let elinks_grid: &[usize] = if ctx.quick {
        &[4, 16]
    } else {
        &[2, 4, 8, 16, 32]
    };
    // Data words per ROB fragment: 100 words (small packets) and 400 (the point).
    let words_grid: &[u32] = &[100, 400];
    // The points: (ROBs, data words, E-links; None for the DMA reference).
    let mut points: Vec<(usize, u32, Option<usize>)> = Vec::new();
    for &robs in robs_grid {
        for &words in words_grid {
            points.push((robs, words, None));
            // Each E-link's packet carries its share of the fragment less 4 words (at least 1
            // word of payload).
            points.extend(
                elinks_grid
                    .iter()
                    .filter(|&&e| words as usize / e >= 5)
                    .map(|&e| (robs, words, Some(e))),
            );
        }
    }
    if let Some(max) = ctx.max_points {
        points.truncate(max.max(1));
    }
    let mut samples: Vec<Vec<Measured>> = vec![Vec::new(); points.len()];
    for _ in 0..rounds {
        for (i, &(robs, words, elinks)) in points.iter().enumerate() {
            samples[i].push(measure(robs, words, elinks, seconds)?);
        }
    }
    let measured: Vec<Measured> = samples.into_iter().map(median).collect();
    let mut report = Report::new("swrod");
    let mut ok = true;
    for (i, &(robs, words, elinks)) in points.iter().enumerate() {
        let m = measured[i];
        ok &= m.lost == 0 && m.bad == 0;
        // The DMA reference of this ROB count and size, if measured.
        let dma = points
            .iter()
            .position(|&p| p == (robs, words, None))
            .map(|j| measured[j].l1_rate_hz);
        let mut row = Map::new();
        row.insert(
            "input".into(),
            if elinks.is_some() { "swrod" } else { "dma" }.into(),
        );
        row.insert("robs".into(), robs.into());
        row.insert("fragment_words".into(), words.into());
        row.insert("elinks".into(), elinks.unwrap_or(0).into());
        // The node cuts the fragment evenly over the E-links, 4 words of each share around
        // the packet's payload.
        let packet_bytes = elinks.map_or(0, |e| 4 * (words as usize / e - 4));
        row.insert("packet_payload_bytes".into(), packet_bytes.into());
        row.insert("l1_rate_hz".into(), m.l1_rate_hz.into());
        let packets = m.l1_rate_hz * (robs * elinks.unwrap_or(0)) as f64;
        row.insert("packets_per_s".into(), packets.into());
        row.insert(
            "ratio_to_dma".into(),
            dma.filter(|&d| d > 0.0)
                .map_or(Value::Null, |d| (m.l1_rate_hz / d).into()),
        );
        row.insert("lost_fragments".into(), m.lost.into());
        row.insert("bad_replies".into(), m.bad.into());
        row.insert("rounds".into(), rounds.into());
        if let Value::Object(node) = serde_json::to_value(m.node)? {
            row.extend(node);
        }
        report.rows.push(row);
    }
    // Rate against E-links, one line per (ROBs, size); the DMA reference as a flat line.
    let mut rate = Vec::new();
    let mut packets = Vec::new();
    for &robs in robs_grid {
        for &words in words_grid {
            let of = |input: &str| -> Vec<&Map<String, Value>> {
                report
                    .rows
                    .iter()
                    .filter(|r| {
                        field(r, "robs") as usize == robs
                            && field(r, "fragment_words") as u32 == words
                            && r.get("input").and_then(Value::as_str) == Some(input)
                    })
                    .collect()
            };
            let sw = of("swrod");
            if sw.is_empty() {
                continue;
            }
            let label = format!("{robs} ROBs x {words} words");
            rate.push(Series {
                label: format!("SW ROD, {label}"),
                points: sw
                    .iter()
                    .map(|r| (field(r, "elinks"), field(r, "l1_rate_hz") / 1e3))
                    .collect(),
                line: true,
            });
            packets.push(Series {
                label: label.clone(),
                points: sw
                    .iter()
                    .map(|r| (field(r, "elinks"), field(r, "packets_per_s") / 1e6))
                    .collect(),
                line: true,
            });
            if let Some(d) = of("dma").first() {
                let khz = field(d, "l1_rate_hz") / 1e3;
                rate.push(Series {
                    label: format!("S-LINK DMA, {label}"),
                    points: sw.iter().map(|r| (field(r, "elinks"), khz)).collect(),
                    line: false,
                });
            }
        }
    }
    line_chart(
        &ctx.dir.join("swrod_rate.png"),
        &Chart {
            title: "Readout node L1 rate, SW ROD input (S-LINK DMA beside)",
            x_label: "E-links per ROB",
            y_label: "L1 rate (kHz)",
            log_x: true,
            log_y: false,
        },
        &rate,
    )?;
    line_chart(
        &ctx.dir.join("swrod_packets.png"),
        &Chart {
            title: "E-link packets aggregated per second, whole node",
            x_label: "E-links per ROB",
            y_label: "packets (MHz)",
            log_x: true,
            log_y: false,
        },
        &packets,
    )?;
    report
        .fields
        .insert("seconds_per_point".into(), seconds.into());
    report.fields.insert("rounds".into(), rounds.into());
    let best = report
        .rows
        .iter()
        .filter(|r| r.get("input").and_then(Value::as_str) == Some("swrod"))
        .map(|r| field(r, "packets_per_s"))
        .fold(0.0, f64::max);
    report
        .fields
        .insert("max_packets_per_s".into(), best.into());
    report.fields.insert("all_balanced".into(), ok.into());
    Ok((report, ok))
}
