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

/// Draws `series` into a 1000x700 PNG at `path`.
pub fn line_chart(path: &Path, chart: &Chart<'_>, series: &[Series]) -> anyhow::Result<()> {
    register_font();
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (x0, x1) = range(xs, chart.log_x);
    let (y0, y1) = range(ys, chart.log_y);
    let root = BitMapBackend::new(path, (1000, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
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
                            .map_err(|e| e.to_string())?
                            .label(s.label.clone())
                            .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
                    }
                    ctx.configure_series_labels()
                        .background_style(WHITE.mix(0.85))
                        .border_style(BLACK)
                        .label_font(("sans-serif", 15))
                        .draw()
                        .map_err(|e| e.to_string())?;
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
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
