//! The SVG chart: accepted requests over time, per algorithm, for the
//! boundary burst and the window-shaping attacker.

use std::path::Path;

use plotters::prelude::*;

use super::scenarios::{Burst, Series, Shaping};

const COLOURS: [RGBColor; 5] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
];

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    x_range: (f64, f64),
    lines: &[(String, &Series)],
) -> Result<(), Box<dyn std::error::Error>> {
    let y_max = lines
        .iter()
        .flat_map(|(_, series)| series.iter().map(|&(_, y)| y))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(52)
        .build_cartesian_2d(x_range.0..x_range.1, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("requests accepted so far")
        .draw()?;
    for (i, (name, series)) in lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        // Start each line at zero so a late first acceptance shows as a step.
        let points = std::iter::once((x_range.0, 0.0))
            .chain(series.iter().flat_map(|&(x, y)| [(x, y - 1.0), (x, y)]))
            .chain(series.last().map(|&(_, y)| (x_range.1, y)));
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

/// Writes both panels to one SVG file at `path`.
pub fn write(
    path: &Path,
    burst: &Burst,
    shaping: &Shaping,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1000, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(450);
    let burst_lines: Vec<(String, &Series)> = burst
        .series
        .iter()
        .map(|(algorithm, series)| (format!("{algorithm:?}"), series))
        .collect();
    panel(
        &top,
        &format!(
            "Boundary burst: {0} before and {0} after the minute turns (limit {0}/min)",
            burst.limit
        ),
        (58.5, 61.5),
        &burst_lines,
    )?;
    let shaping_lines: Vec<(String, &Series)> = shaping
        .series
        .iter()
        .map(|(name, series)| (name.to_string(), series))
        .collect();
    panel(
        &bottom,
        "Window-shaping attacker: a request every 10 ms from its best lead before the boundary",
        (15.0, 155.0),
        &shaping_lines,
    )?;
    root.present()?;
    Ok(())
}
