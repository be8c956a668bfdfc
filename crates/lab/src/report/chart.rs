//! The SVG chart: upstream requests per second over time, one line per row, on a log scale
//! (the rows span from a few dozen to tens of thousands of requests per second).

use super::Series;
use crate::LabError;
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Draws `series` into an SVG file at `path`.
pub fn draw(path: &Path, title: &str, series: &[Series]) -> Result<(), LabError> {
    plot(path, title, series).map_err(|message| LabError::Chart {
        path: path.to_path_buf(),
        message,
    })
}

fn plot(path: &Path, title: &str, series: &[Series]) -> Result<(), String> {
    let x_max = series
        .iter()
        .map(|s| s.per_second.len())
        .max()
        .unwrap_or(1)
        .max(2) as u32;
    let y_max = series
        .iter()
        .flat_map(|s| s.per_second.iter().copied())
        .max()
        .unwrap_or(1)
        .max(10) as f64;
    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0u32..x_max - 1, (0.5f64..y_max * 3.0).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds since the clients started")
        .y_desc("upstream requests / s (log)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        // A second with no request is drawn at 0.5 so the log axis can show it.
        let points = s
            .per_second
            .iter()
            .enumerate()
            .map(|(x, y)| (x as u32, (*y as f64).max(0.5)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_label() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.svg");
        let series = vec![
            Series {
                label: "healthy".into(),
                per_second: vec![200, 200, 200],
            },
            Series {
                label: "buggy".into(),
                per_second: vec![0, 2000, 1990],
            },
        ];
        draw(&path, "fleet", &series).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(
            svg.starts_with("<svg") || svg.starts_with("<?xml"),
            "{}",
            &svg[..40]
        );
        assert!(svg.contains("healthy") && svg.contains("buggy"));
    }
}
