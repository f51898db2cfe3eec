//! Output: aligned tables for people, JSON for scripts, and errors (to stderr) that say what
//! to do.

use std::time::Duration;

use chokaq::core::Timestamp;
use serde::Serialize;

use crate::Failure;

/// A table: a header and rows of cells, printed with every column padded to its widest cell.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    /// Columns aligned to the right (numbers).
    right: Vec<bool>,
}

impl Table {
    /// A table with these columns; a column whose name starts with `>` is right-aligned
    /// (the `>` is not printed).
    pub fn new(header: &[&'static str]) -> Self {
        Table {
            header: header.iter().map(|h| h.trim_start_matches('>')).collect(),
            rows: Vec::new(),
            right: header.iter().map(|h| h.starts_with('>')).collect(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, no trailing spaces.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(c.chars().count());
                }
            }
        }
        let line = |cells: Vec<&str>| {
            let mut out = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i > 0 {
                    out.push_str("  ");
                }
                let pad = widths[i].saturating_sub(c.chars().count());
                if self.right[i] {
                    out.push_str(&" ".repeat(pad));
                    out.push_str(c);
                } else {
                    out.push_str(c);
                    out.push_str(&" ".repeat(pad));
                }
            }
            out.trim_end().to_string()
        };
        let mut out = line(self.header.clone());
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r.iter().map(String::as_str).collect()));
            out.push('\n');
        }
        out
    }

    pub fn print(&self) {
        print!("{}", self.render());
    }
}

/// Prints one JSON document on stdout.
pub fn json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("error: cannot encode the output as JSON: {e}"),
    }
}

/// Prints a failure on stderr: `error: …` and `hint: …`, or one JSON document with `--json`.
pub fn failure(as_json: bool, f: &Failure) {
    if as_json {
        let doc = serde_json::json!({
            "error": { "message": f.message, "hint": f.hint, "exit_code": f.exit as u8 }
        });
        eprintln!("{doc}");
    } else {
        eprintln!("error: {}", f.message);
        if let Some(h) = &f.hint {
            eprintln!("hint: {h}");
        }
    }
}

/// `2026-01-31 12:00:00Z`.
pub fn time(t: Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

pub fn opt_time(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "-".to_string(), time)
}

/// A short human duration: `850ms`, `42s`, `3m 5s`, `2h 4m`, `3d 1h`.
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (days, hours, mins, secs) = (s / 86_400, (s % 86_400) / 3600, (s % 3600) / 60, s % 60);
    let two = |a: u64, ua: &str, b: u64, ub: &str| if b == 0 { format!("{a}{ua}") } else { format!("{a}{ua} {b}{ub}") };
    if days > 0 {
        two(days, "d", hours, "h")
    } else if hours > 0 {
        two(hours, "h", mins, "m")
    } else if mins > 0 {
        two(mins, "m", secs, "s")
    } else {
        format!("{secs}s")
    }
}

/// How long before `now` `t` was (zero if it is later).
pub fn since(now: Timestamp, t: Timestamp) -> Duration {
    (now - t).to_std().unwrap_or(Duration::ZERO)
}

/// Cuts `s` to `max` characters, marking the cut with `…`; newlines become spaces.
pub fn clip(s: &str, max: usize) -> String {
    let flat: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut out: String = flat.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_numbers_go_right() {
        let mut t = Table::new(&["QUEUE", ">PENDING"]);
        t.row(vec!["emails".into(), "7".into()]);
        t.row(vec!["q".into(), "1234".into()]);
        assert_eq!(t.render(), "QUEUE   PENDING\nemails        7\nq          1234\n");
    }

    #[test]
    fn ages() {
        assert_eq!(age(Duration::from_millis(850)), "850ms");
        assert_eq!(age(Duration::from_secs(42)), "42s");
        assert_eq!(age(Duration::from_secs(185)), "3m 5s");
        assert_eq!(age(Duration::from_secs(2 * 3600 + 240)), "2h 4m");
        assert_eq!(age(Duration::from_secs(3 * 86_400 + 3600)), "3d 1h");
        assert_eq!(age(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(clip("a\nbcdef", 4), "a b…");
    }
}
