//! The shard-scaling chart: lock + release cycles/s of a Redlock over three
//! Redis Cluster positions against the shards per position, from the JSON
//! that redfence's `cluster_scale` example writes, as SVG.
//!
//! ```text
//! cargo run --release --features testing --example cluster_scale   # in the repository root
//! cd examples/peers
//! cargo run --release --bin cluster_chart -- ../../target/cluster_scale.json ../../docs/cluster_scale.svg
//! ```
//!
//! Draws the median cycles/s per shard count (a line with points), every
//! run as a small dot (the spread), the ideal linear growth from S = 1
//! (S times its median, dotted) and the standalone baseline at S = 1 (a
//! cross). Only plotters' SVG backend is used, so no font library is
//! needed.

use std::error::Error;
use std::path::PathBuf;

use plotters::prelude::*;
use serde_json::Value;

const WIDTH: u32 = 760;
const HEIGHT: u32 = 520;
const MEASURED: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const IDEAL: RGBColor = RGBColor(0x55, 0x55, 0x55);
const STANDALONE: RGBColor = RGBColor(0xd6, 0x27, 0x28);

/// One shard count's figures.
struct Point {
    shards: f64,
    median: f64,
    runs: Vec<f64>,
}

fn cycles(run: &Value) -> Option<f64> {
    run.get("cycles_per_s")?.as_f64()
}

fn point(row: &Value) -> Option<Point> {
    Some(Point {
        shards: row.get("shards")?.as_f64()?,
        median: cycles(row.get("median")?)?,
        runs: row
            .get("runs")?
            .as_array()?
            .iter()
            .filter_map(cycles)
            .collect(),
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args_os().skip(1);
    let input = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../../target/cluster_scale.json"));
    let output = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("cluster_scale.svg"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&input).map_err(|e| {
        format!(
            "cannot read {} (run the cluster_scale example first): {e}",
            input.display()
        )
    })?)?;
    let mut points: Vec<Point> = doc
        .get("cluster")
        .and_then(Value::as_array)
        .ok_or("no `cluster` rows in the JSON")?
        .iter()
        .filter_map(point)
        .collect();
    points.sort_by(|a, b| a.shards.total_cmp(&b.shards));
    let base = points
        .iter()
        .find(|p| p.shards == 1.0)
        .ok_or("no S = 1 row in the JSON")?
        .median;
    let standalone = doc.get("standalone").and_then(point);
    let settings = doc.get("settings").ok_or("no `settings` in the JSON")?;
    let setting = |name: &str| {
        settings
            .get(name)
            .and_then(Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    let max_shards = points.last().map_or(3.0, |p| p.shards);

    let y_max = points
        .iter()
        .flat_map(|p| p.runs.iter().copied().chain([p.median]))
        .chain([base * max_shards])
        .chain(standalone.iter().flat_map(|s| s.runs.clone()))
        .fold(0.0, f64::max)
        * 1.12;

    let root = SVGBackend::new(&output, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(56);
    title.draw(&Text::new(
        "redfence: lock + release throughput vs shards per cluster position",
        (20, 10),
        ("sans-serif", 19).into_font(),
    ))?;
    title.draw(&Text::new(
        format!(
            "3 Redis Cluster positions, every redis-server capped at {} % of a CPU; \
             {} client threads; median of {} runs of {} s",
            setting("cap_pct"),
            setting("threads"),
            setting("repeats"),
            setting("secs"),
        ),
        (20, 34),
        ("sans-serif", 13).into_font().color(&IDEAL),
    ))?;

    let mut chart = ChartBuilder::on(&body)
        .margin(20)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(0.8f64..max_shards + 0.2, 0.0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("shard masters per position (S)")
        .y_desc("lock + release cycles/s")
        .x_labels(points.len())
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .disable_x_mesh()
        .draw()?;

    let ideal: Vec<(f64, f64)> = points.iter().map(|p| (p.shards, base * p.shards)).collect();
    chart
        .draw_series(DashedLineSeries::new(ideal, 2, 5, IDEAL.stroke_width(2)))?
        .label("ideal: S × (S = 1)")
        .legend(|(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (7, 0)], IDEAL.stroke_width(2))
                + PathElement::new(vec![(12, 0), (19, 0)], IDEAL.stroke_width(2))
        });

    chart
        .draw_series(LineSeries::new(
            points.iter().map(|p| (p.shards, p.median)),
            MEASURED.stroke_width(3),
        ))?
        .label("measured (median)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], MEASURED.stroke_width(3)));
    chart.draw_series(
        points
            .iter()
            .map(|p| Circle::new((p.shards, p.median), 5, MEASURED.filled())),
    )?;
    chart.draw_series(points.iter().map(|p| {
        Text::new(
            format!("{:.0}/s, {:.2}×", p.median, p.median / base),
            (p.shards, p.median),
            ("sans-serif", 13).into_font().color(&MEASURED),
        )
    }))?;
    chart
        .draw_series(points.iter().flat_map(|p| {
            p.runs
                .iter()
                .map(move |&r| Circle::new((p.shards, r), 2, MEASURED.mix(0.5).filled()))
        }))?
        .label("each run")
        .legend(|(x, y)| Circle::new((x + 12, y), 2, MEASURED.mix(0.5).filled()));

    if let Some(s) = &standalone {
        chart
            .draw_series([Cross::new((1.0, s.median), 6, STANDALONE.stroke_width(2))])?
            .label(format!("3 standalone servers (median {:.0}/s)", s.median))
            .legend(|(x, y)| Cross::new((x + 12, y), 5, STANDALONE.stroke_width(2)));
    }

    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 13))
        .draw()?;
    root.present()?;
    println!("chart written to {}", output.display());
    Ok(())
}
