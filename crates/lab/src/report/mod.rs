//! What a lab run writes: one Markdown file with every scenario's table, an SVG chart of
//! upstream requests per second per scenario, and the raw results as JSON.

mod chart;
mod markdown;

pub use chart::draw;
pub use markdown::render;

use crate::LabError;
use serde::Serialize;
use std::path::Path;

/// One scenario's results, ready to print.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    /// File stem of the chart (`fleet` → `fleet.svg`).
    pub key: String,
    pub title: String,
    /// A Markdown paragraph saying what was run.
    pub intro: String,
    pub table: Table,
    /// Upstream requests per second over the run, one line per row.
    pub series: Vec<Series>,
    /// Caveats printed under the table.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub label: String,
    pub per_second: Vec<u64>,
}

/// Writes `RESULTS.md`, `results.json` and one SVG per section into `dir`.
pub fn write_all(dir: &Path, sections: &[Section], preamble: &str) -> Result<(), LabError> {
    std::fs::create_dir_all(dir).map_err(|source| LabError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    for s in sections.iter().filter(|s| !s.series.is_empty()) {
        draw(&dir.join(format!("{}.svg", s.key)), &s.title, &s.series)?;
    }
    let md = dir.join("RESULTS.md");
    std::fs::write(&md, render(sections, preamble))
        .map_err(|source| LabError::Write { path: md, source })?;
    let json = dir.join("results.json");
    std::fs::write(&json, serde_json::to_vec_pretty(sections)?)
        .map_err(|source| LabError::Write { path: json, source })?;
    Ok(())
}

/// `12.3`, `1,234`, `0.033` — numbers the way the tables show them.
pub fn num(v: f64) -> String {
    if v >= 100.0 {
        let s = (v.round() as u64).to_string();
        let groups: Vec<&str> = s
            .as_bytes()
            .rchunks(3)
            .rev()
            .filter_map(|g| std::str::from_utf8(g).ok())
            .collect();
        groups.join(",")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `10.0×`, `0.03×`
pub fn times(v: f64) -> String {
    if v >= 0.995 || v == 0.0 {
        format!("{v:.2}×")
    } else {
        format!("{v:.3}×")
    }
}

/// `503 ms`, `1.4 ms`
pub fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}

/// `99.8 %`
pub fn percent(fraction: f64) -> String {
    format!("{:.1} %", fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(num(20012.4), "20,012");
        assert_eq!(num(2000.0), "2,000");
        assert_eq!(num(66.66), "66.7");
        assert_eq!(times(10.0), "10.00×");
        assert_eq!(times(0.0333), "0.033×");
        assert_eq!(percent(0.998), "99.8 %");
    }
}
