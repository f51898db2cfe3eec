//! Output: aligned tables for people, JSON for scripts, and errors (to stderr) that say what
//! to do.

use std::io::Write;
use std::time::Duration;

use chokaq::core::validate::is_unsafe_to_print as is_unsafe;
use chokaq::core::Timestamp;
use serde::Serialize;

use crate::Failure;

/// `println!` for the command's output: a reader that closed the pipe (`chokaq jobs list |
/// head`) ends the process quietly with exit 0, where `println!` panics.
macro_rules! outln {
    () => {
        $crate::output::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;

/// Writes `args` to stdout. A closed pipe ends the process with exit 0 (the reader has what it
/// wanted); any other write error ends it with exit 1, saying so on stderr.
pub fn write_out(args: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write the output: {e}");
        std::process::exit(crate::Exit::Other as i32);
    }
}

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

    /// Adds a row. Every cell is passed through [`escape`]: text from the database (tags,
    /// idempotency keys, `created_by`, a worker's host, errors) cannot move, hide or break
    /// the columns.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.into_iter().map(|c| escape(&c)).collect());
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
        write_out(format_args!("{}", self.render()));
    }
}

/// `s` with every character that could move, hide or break text ([`is_unsafe`]) written as
/// its escape, `\u{202e}`, so that a table cell shows what is stored and keeps its width.
pub fn escape(s: &str) -> String {
    if !s.chars().any(is_unsafe) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// Prints one JSON document on stdout.
pub fn json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => write_out(format_args!("{s}\n")),
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
        eprint!("{}", failure_text(f));
    }
}

/// The `error: …` and `hint: …` lines of a failure, as printed on stderr. Both carry text a
/// server chose (its error message), so every character that could move, hide or break text
/// is [`escape`]d, as in a table cell: no terminal escape, bidi override or forged extra line
/// gets through (issue 40, L1).
fn failure_text(f: &Failure) -> String {
    let mut s = format!("error: {}\n", escape(&f.message));
    if let Some(h) = &f.hint {
        s.push_str(&format!("hint: {}\n", escape(h)));
    }
    s
}

/// `2026-01-31 12:00:00Z`.
pub fn time(t: Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// `t` in the IANA time zone `zone` (`2026-01-31 13:00:00 CET`), or None for UTC and for a
/// zone name chrono-tz does not know.
pub fn local_time(t: Timestamp, zone: &str) -> Option<String> {
    let tz: chrono_tz::Tz = zone.parse().ok()?;
    if tz == chrono_tz::UTC || tz == chrono_tz::Etc::UTC {
        return None;
    }
    Some(t.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z").to_string())
}

/// `t` in UTC, and in `zone` beside it when that is another zone (a schedule's next tick:
/// `2026-01-31 12:00:00Z (2026-01-31 13:00:00 CET)`).
pub fn time_in_zone(t: Timestamp, zone: &str) -> String {
    match local_time(t, zone) {
        Some(local) => format!("{} ({local})", time(t)),
        None => time(t),
    }
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

    /// Issue 26 item 6: bidi, zero-width and control characters are shown as escapes in
    /// every cell, and the columns stay aligned.
    #[test]
    fn unsafe_characters_are_escaped_and_columns_align() {
        let mut t = Table::new(&["HOST", ">PID", "KEY"]);
        t.row(vec!["h\u{202e}x".into(), "1".into(), "a\u{200b}b\u{2066}c".into()]);
        t.row(vec!["plain".into(), "42".into(), "t\u{feff}\u{00ad}\u{2028}\n\u{1b}[31m".into()]);
        let out = t.render();
        let lines: Vec<&str> = out.lines().collect();
        assert!(!lines.iter().any(|l| l.chars().any(is_unsafe)), "{out:?}");
        assert_eq!(lines[1], "h\\u{202e}x    1  a\\u{200b}b\\u{2066}c", "{out}");
        assert_eq!(lines[2], "plain        42  t\\u{feff}\\u{ad}\\u{2028}\\u{a}\\u{1b}[31m", "{out}");
        // Every row's PID column ends where the header's does.
        let end = lines[0].find("PID").unwrap() + 3;
        for l in &lines[1..] {
            assert!(l[..end].ends_with(|c: char| c.is_ascii_digit()), "{l:?} in\n{out}");
        }
        assert_eq!(escape("ünïcödé 日本 🚀"), "ünïcödé 日本 🚀");
    }

    /// Issue 40, L1: a server's text in an error or hint line (a hostile server's terminal
    /// escapes: OSC title, clear screen, right-to-left override) is printed escaped.
    #[test]
    fn a_time_in_the_schedules_own_zone_beside_utc() {
        let t = chrono::DateTime::parse_from_rfc3339("2026-01-31T12:00:00Z").unwrap().with_timezone(&chrono::Utc);
        assert_eq!(time_in_zone(t, "Europe/Berlin"), "2026-01-31 12:00:00Z (2026-01-31 13:00:00 CET)");
        assert_eq!(time_in_zone(t, "America/New_York"), "2026-01-31 12:00:00Z (2026-01-31 07:00:00 EST)");
        assert_eq!(time_in_zone(t, "UTC"), "2026-01-31 12:00:00Z");
        assert_eq!(time_in_zone(t, "Etc/UTC"), "2026-01-31 12:00:00Z");
        assert_eq!(time_in_zone(t, "No/Such_Zone"), "2026-01-31 12:00:00Z");
    }

    #[test]
    fn error_and_hint_lines_are_escaped() {
        let f =
            crate::Failure::new(crate::Exit::Usage, "relation \u{1b}]0;pwned\u{7}\u{1b}[2J does not exist\u{202e}x")
                .hint("ask \u{1b}[31mthe admin\nhint: forged");
        let out = failure_text(&f);
        assert_eq!(
            out,
            "error: relation \\u{1b}]0;pwned\\u{7}\\u{1b}[2J does not exist\\u{202e}x\n\
             hint: ask \\u{1b}[31mthe admin\\u{a}hint: forged\n",
            "{out:?}"
        );
    }
}
