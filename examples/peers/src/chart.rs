//! The latency chart: lock + release latency against percentile, one line
//! per client, panels side by side, written as SVG.
//!
//! Only plotters' SVG backend is used: it writes text as SVG `<text>`
//! elements and lays it out with an estimate, so no font library is needed
//! to build or run this.

use std::error::Error;
use std::path::Path;

use std::ops::Range;

use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::bench_support::{Sample, QUANTILES};

/// One client's line.
pub struct Line {
    pub label: String,
    /// `None` when the client hung: listed in the legend, nothing drawn.
    pub sample: Option<Sample>,
    pub color: RGBColor,
}

/// One panel: a scenario, its clients.
pub struct Panel {
    pub title: String,
    pub lines: Vec<Line>,
}

/// Width of one panel, pixels.
const PANEL_WIDTH: u32 = 640;
const HEIGHT: u32 = 480;
/// The x-axis runs over `-log10(1 - q)`: 0 is the minimum, 1 the 90th
/// percentile, 2 the 99th, 3 the 99.9th (the last quantile point kept).
const X_MAX: f64 = 3.0;

/// Where the x-axis is labelled: the minimum, the median, 90 %, 99 % and
/// 99.9 %.
fn x_key_points() -> Vec<f64> {
    vec![0.0, 2f64.log10(), 1.0, 2.0, X_MAX]
}

/// The percentile axis: linear in `-log10(1 - q)`, labelled (and gridded)
/// at [`x_key_points`] only, which plotters' own axes cannot choose.
struct PercentileAxis(RangedCoordf64);

impl Ranged for PercentileAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.0.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        x_key_points()
    }

    fn range(&self) -> Range<f64> {
        self.0.range()
    }
}

/// The latency axis: logarithmic, labelled at 1, 2 and 5 times each power
/// of ten while that gives at most a dozen labels (plotters' own log axis
/// labels only the powers of ten), else at the powers of ten.
struct LatencyAxis(LogCoord<f64>);

impl Ranged for LatencyAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.0.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        let Range { start, end } = self.0.range();
        let in_range = |steps: &[f64]| -> Vec<f64> {
            // Bounded: a latency axis spans a few decades (from 1 µs up).
            let first = start.max(1.0).log10().floor() as i32;
            (first..first + 15)
                .map(|e| 10f64.powi(e))
                .take_while(|decade| *decade <= end)
                .flat_map(|decade| steps.iter().map(move |s| s * decade))
                .filter(|v| (start..=end).contains(v))
                .collect()
        };
        let fine = in_range(&[1.0, 2.0, 5.0]);
        if fine.len() <= 12 {
            fine
        } else {
            in_range(&[1.0])
        }
    }

    fn range(&self) -> Range<f64> {
        self.0.range()
    }
}

/// Draws `panels` side by side under `caption` into an SVG file at `path`.
pub fn write_svg(path: &Path, caption: &str, panels: &[Panel]) -> Result<(), Box<dyn Error>> {
    let width = PANEL_WIDTH * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let body = root.titled(caption, ("sans-serif", 20))?;
    for (area, panel) in body
        .split_evenly((1, panels.len().max(1)))
        .iter()
        .zip(panels)
    {
        draw_panel(area, panel)?;
    }
    root.present()?;
    Ok(())
}

/// The points of `sample`'s line: (x of the quantile point, latency in µs).
fn points(sample: &Sample) -> Vec<(f64, f64)> {
    (0..QUANTILES)
        .map(|k| {
            let x = X_MAX * k as f64 / (QUANTILES - 1) as f64;
            (x, sample.quantiles[k].as_secs_f64() * 1e6)
        })
        .collect()
}

/// `min` for x = 0, `p90` for x = 1, `p99.9` for x = 3.
fn percentile_label(x: f64) -> String {
    if x <= 0.0 {
        return "min".to_string();
    }
    let percent = (1.0 - 10f64.powf(-x)) * 100.0;
    let text = format!("{percent:.1}");
    format!("p{}", text.strip_suffix(".0").unwrap_or(&text))
}

/// A latency axis label from microseconds: `200 µs`, `2 ms`, `1.5 s`.
fn latency_label(us: f64) -> String {
    let (value, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "µs")
    };
    let text = format!("{value:.1}");
    format!("{} {unit}", text.strip_suffix(".0").unwrap_or(&text))
}

fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &Panel,
) -> Result<(), Box<dyn Error>> {
    let drawn: Vec<Vec<(f64, f64)>> = panel
        .lines
        .iter()
        .map(|l| {
            l.sample
                .filter(|s| s.ops > 0)
                .map(|s| points(&s))
                .unwrap_or_default()
        })
        .collect();
    let all = || drawn.iter().flatten().map(|p| p.1);
    // A log axis needs a positive range even with no data.
    let low = all().fold(f64::INFINITY, f64::min);
    let high = all().fold(0.0, f64::max);
    let (low, high) = if low.is_finite() && high > 0.0 {
        let low = (low * 0.8).max(1.0);
        // The top quarter (on the log axis) stays free for the legend.
        (low, high * (high / low).powf(1.0 / 3.0) * 1.25)
    } else {
        (1.0, 1000.0)
    };

    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(12)
        .margin_right(28)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            PercentileAxis((0.0..X_MAX).into()),
            LatencyAxis((low..high).log_scale().into()),
        )?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("lock + release latency (log scale)")
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|us| latency_label(*us))
        .light_line_style(WHITE)
        .draw()?;
    for (line, points) in panel.lines.iter().zip(drawn) {
        let style = line.color.stroke_width(2);
        let label = match line.sample {
            Some(_) => line.label.clone(),
            None => format!("{} (hangs)", line.label),
        };
        chart
            .draw_series(LineSeries::new(points, style))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
