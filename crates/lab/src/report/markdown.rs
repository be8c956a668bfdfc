//! Renders sections as Markdown: a heading, the intro, the table, the chart link, the notes.

use super::{Section, Table};

pub fn render(sections: &[Section], preamble: &str) -> String {
    let mut out = String::from("# Weir storm lab results\n\n");
    if !preamble.is_empty() {
        out.push_str(preamble.trim_end());
        out.push_str("\n\n");
    }
    for s in sections {
        out.push_str(&format!("## {}\n\n", s.title));
        if !s.intro.is_empty() {
            out.push_str(s.intro.trim_end());
            out.push_str("\n\n");
        }
        out.push_str(&table(&s.table));
        out.push('\n');
        if !s.series.is_empty() {
            out.push_str(&format!(
                "![upstream requests per second: {}]({}.svg)\n\n",
                s.title, s.key
            ));
        }
        for n in &s.notes {
            out.push_str(&format!("- {n}\n"));
        }
        if !s.notes.is_empty() {
            out.push('\n');
        }
    }
    out
}

/// A GitHub-flavoured Markdown table; `|` inside a cell is escaped.
pub fn table(t: &Table) -> String {
    let cell = |c: &String| c.replace('|', "\\|");
    let mut out = format!(
        "| {} |\n",
        t.header.iter().map(cell).collect::<Vec<_>>().join(" | ")
    );
    let aligns: Vec<&str> = (0..t.header.len())
        .map(|i| if i == 0 { "---" } else { "--:" })
        .collect();
    out.push_str(&format!("|{}|\n", aligns.join("|")));
    for r in &t.rows {
        out.push_str(&format!(
            "| {} |\n",
            r.iter().map(cell).collect::<Vec<_>>().join(" | ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_table() {
        let mut t = Table::new(&["scenario", "req/s"]);
        t.push(vec!["a|b".into(), "1".into()]);
        assert_eq!(
            table(&t),
            "| scenario | req/s |\n|---|--:|\n| a\\|b | 1 |\n"
        );
    }
}
