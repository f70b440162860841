//! PNG charts for the studies: the plotters bitmap backend with the DejaVu Sans font compiled
//! into the binary (no system fonts, no freetype), so `rodeo study` plots on a bare machine.

use std::path::Path;
use std::sync::Once;

use anyhow::Context;
use plotters::prelude::*;

/// One named series of points.
pub struct Series {
    /// Legend text.
    pub label: String,
    /// The points, drawn in order.
    pub points: Vec<(f64, f64)>,
    /// Join the points with a line (otherwise markers only).
    pub line: bool,
}

/// Titles and axes of a chart.
pub struct Chart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
}

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        // The bundled font is a valid TrueType file; a failure would only leave text undrawn.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

/// Range of `v` with a margin, positive for log axes.
fn range(v: impl Iterator<Item = f64> + Clone, log: bool) -> (f64, f64) {
    let finite = v.filter(|x| x.is_finite() && (!log || *x > 0.0));
    let lo = finite.clone().fold(f64::INFINITY, f64::min);
    let hi = finite.fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        (lo / 1.5, hi * 1.5)
    } else {
        let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.05).max(1e-12);
        (
            (lo - pad).min(if lo >= 0.0 { 0.0 } else { lo - pad }),
            hi + pad,
        )
    }
}

/// A tick label in plain digits: `100`, `1000`, `0.25`, never `100.0` or `1e3`.
pub fn tick(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    if v == v.round() && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let s = format!("{v:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Width of the legend column at the right of the plot: the legend never covers data.
const LEGEND_WIDTH: u32 = 260;

/// Draws `series` into a PNG at `path`: the plot (1000x700) with its legend in a column at the
/// right, outside the data.
pub fn line_chart(path: &Path, chart: &Chart<'_>, series: &[Series]) -> anyhow::Result<()> {
    register_font();
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (x0, x1) = range(xs, chart.log_x);
    let (y0, y1) = range(ys, chart.log_y);
    let whole = BitMapBackend::new(path, (1000 + LEGEND_WIDTH, 700)).into_drawing_area();
    whole.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (root, legend) = whole.split_horizontally(1000);
    draw_legend(&legend, series)
        .map_err(|e| anyhow::anyhow!("plotting {}: {e}", path.display()))?;
    let draw =
        |root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>| -> Result<(), String> {
            let mut b = ChartBuilder::on(root);
            b.caption(chart.title, ("sans-serif", 26))
                .margin(20)
                .x_label_area_size(55)
                .y_label_area_size(90);
            macro_rules! body {
                ($ctx:expr) => {{
                    let mut ctx = $ctx;
                    ctx.configure_mesh()
                        .x_desc(chart.x_label)
                        .y_desc(chart.y_label)
                        .label_style(("sans-serif", 16))
                        .axis_desc_style(("sans-serif", 18))
                        .x_label_formatter(&|v| tick(*v))
                        .y_label_formatter(&|v| tick(*v))
                        .draw()
                        .map_err(|e| e.to_string())?;
                    for (i, s) in series.iter().enumerate() {
                        let color = Palette99::pick(i).to_rgba();
                        let pts: Vec<(f64, f64)> = s
                            .points
                            .iter()
                            .copied()
                            .filter(|p| p.0.is_finite() && p.1.is_finite())
                            .collect();
                        if s.line {
                            ctx.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                                .map_err(|e| e.to_string())?;
                        }
                        ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                            .map_err(|e| e.to_string())?;
                    }
                }};
            }
            match (chart.log_x, chart.log_y) {
                (false, false) => body!(b
                    .build_cartesian_2d(x0..x1, y0..y1)
                    .map_err(|e| e.to_string())?),
                (true, false) => body!(b
                    .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
                    .map_err(|e| e.to_string())?),
                (false, true) => body!(b
                    .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                    .map_err(|e| e.to_string())?),
                (true, true) => body!(b
                    .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
                    .map_err(|e| e.to_string())?),
            }
            Ok(())
        };
    draw(&root).map_err(|e| anyhow::anyhow!("plotting {}: {e}", path.display()))?;
    whole
        .present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The legend, one line per series (its marker and label), top-down in `area`.
fn draw_legend(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    series: &[Series],
) -> Result<(), String> {
    let font = ("sans-serif", 15).into_font().color(&BLACK);
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let y = 70 + 26 * i as i32;
        area.draw(&Circle::new((14, y), 5, color.filled()))
            .map_err(|e| e.to_string())?;
        // Long labels are cut to the column's width (about 28 characters at this size).
        let label: String = s.label.chars().take(28).collect();
        area.draw(&Text::new(label, (26, y - 8), font.clone()))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_plain_numbers() {
        assert_eq!(tick(100.0), "100");
        assert_eq!(tick(1000.0), "1000");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(-3.0), "-3");
        assert_eq!(tick(1.0e6), "1000000");
    }

    #[test]
    fn the_legend_sits_beside_the_plot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.png");
        let series = vec![Series {
            label: "a series".into(),
            points: vec![(1.0, 1.0), (10.0, 100.0), (100.0, 1000.0)],
            line: true,
        }];
        let chart = Chart {
            title: "t",
            x_label: "x",
            y_label: "y",
            log_x: true,
            log_y: true,
        };
        line_chart(&path, &chart, &series).unwrap();
        let png = std::fs::read(&path).unwrap();
        // PNG IHDR: width at bytes 16..20, big-endian.
        let width = u32::from_be_bytes([png[16], png[17], png[18], png[19]]);
        assert_eq!(width, 1000 + LEGEND_WIDTH);
    }
}
