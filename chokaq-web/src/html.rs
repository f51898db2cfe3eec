//! HTML building blocks: escaping, the page frame, formatting of times and numbers.

use std::fmt::Write;

use chokaq_core::{RateLimit, Timestamp};

use crate::Ctx;

/// Escapes text for HTML element content and quoted attribute values, and shows every
/// character that could move, hide or break text ([`is_unsafe`]) as its escape, `\u{202e}`,
/// as the CLI's table cells do (issue 40, L6: an unterminated U+202E in a tags cell reversed
/// the tags after it), except `\n` and `\t`. For a value a form sends back unchanged use
/// [`esc_value`].
pub fn esc(s: &str) -> String {
    esc_with(s, true)
}

/// Escapes text for a quoted attribute value that a form submits (hidden fields, filter
/// inputs): the characters themselves are kept, so the value round-trips.
pub fn esc_value(s: &str) -> String {
    esc_with(s, false)
}

fn esc_with(s: &str, visible: bool) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            // Line breaks and tabs stay: HTML folds them, and a payload's <pre> needs them.
            c if visible && is_unsafe(c) && c != '\n' && c != '\t' => out.extend(c.escape_unicode()),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Whether `c` would move, hide or break text: the set the CLI escapes too.
pub use chokaq_core::validate::is_unsafe_to_print as is_unsafe;

/// `s` with every [`is_unsafe`] character written as its escape (plain-text answers).
pub fn visible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if is_unsafe(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// Percent-encodes a query or path component.
pub fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Which navigation entry is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Jobs,
    Dead,
    Workers,
    Schedules,
    None,
}

/// The whole page around `body`.
pub fn page(ctx: &Ctx, title: &str, nav: Nav, page_id: &str, body: &str) -> String {
    let b = esc(&ctx.base);
    let mut s = String::with_capacity(body.len() + 2048);
    let _ = write!(
        s,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · chokaq</title>\
         <link rel=\"stylesheet\" href=\"{b}/assets/style.css?v={v}\">\
         <script src=\"{b}/assets/app.js?v={v}\" defer></script></head>\
         <body data-base=\"{b}\" data-page=\"{}\"><header class=\"top\"><a class=\"brand\" href=\"{home}\">chokaq</a><nav>",
        esc(title),
        esc(page_id),
        v = env!("CARGO_PKG_VERSION"),
        home = esc(&ctx.home()),
    );
    for (n, href, label) in [
        (Nav::Overview, "/", "Overview"),
        (Nav::Jobs, "/jobs", "Jobs"),
        (Nav::Dead, "/dead", "Dead letters"),
        (Nav::Workers, "/workers", "Workers"),
        (Nav::Schedules, "/schedules", "Schedules"),
    ] {
        let cur = if n == nav { " class=\"cur\"" } else { "" };
        let href = if href == "/" { esc(&ctx.home()) } else { format!("{b}{href}") };
        let _ = write!(s, "<a href=\"{href}\"{cur}>{label}</a>");
    }
    s.push_str("</nav>");
    if ctx.read_only {
        s.push_str("<span class=\"badge ro\" id=\"read-only\">read-only</span>");
    }
    s.push_str("</header><main>");
    s.push_str(body);
    s.push_str("</main></body></html>\n");
    s
}

/// A POST form with the CSRF field: `fields` are hidden inputs, `inner` the visible part.
/// `confirm`: the question JavaScript asks first (without JavaScript the server asks on a page
/// of its own).
pub fn form(ctx: &Ctx, action: &str, fields: &[(&str, &str)], inner: &str, confirm: Option<&str>) -> String {
    let mut s = format!("<form method=\"post\" action=\"{}{}\" class=\"inline\"", esc(&ctx.base), esc(action));
    if let Some(q) = confirm {
        let _ = write!(s, " data-confirm=\"{}\"", esc(q));
    }
    let _ = write!(s, "><input type=\"hidden\" name=\"csrf\" value=\"{}\">", esc(&ctx.csrf));
    if confirm.is_some() {
        s.push_str("<input type=\"hidden\" name=\"confirm\" value=\"\">");
    }
    for (k, v) in fields {
        let _ = write!(s, "<input type=\"hidden\" name=\"{}\" value=\"{}\">", esc(k), esc_value(v));
    }
    s.push_str(inner);
    s.push_str("</form>");
    s
}

/// A submit button.
pub fn button(label: &str, class: &str, name: &str) -> String {
    format!(
        "<button type=\"submit\" class=\"btn {}\" data-action=\"{}\">{}</button>",
        esc(class),
        esc(name),
        esc(label)
    )
}

/// `2026-12-01 03:41:48Z`.
pub fn ts(t: Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// An optional timestamp with its age relative to `now`.
/// `t` in the IANA time zone `zone`, as a muted second line (`2026-01-31 13:00:00 CET`);
/// empty for UTC, a zone chrono-tz does not know, or no time.
pub fn ts_in_zone(t: Option<Timestamp>, zone: &str) -> String {
    let Some(t) = t else { return String::new() };
    let Ok(tz) = zone.parse::<chrono_tz::Tz>() else { return String::new() };
    if tz == chrono_tz::UTC || tz == chrono_tz::Etc::UTC {
        return String::new();
    }
    format!(
        "<br><span class=\"muted\">{}</span>",
        esc(&t.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z").to_string())
    )
}

pub fn ts_ago(t: Option<Timestamp>, now: Timestamp) -> String {
    match t {
        None => empty(),
        Some(t) => {
            let secs = now.signed_duration_since(t).num_milliseconds() as f64 / 1000.0;
            let rel = if secs >= 0.0 { format!("{} ago", dur(secs)) } else { format!("in {}", dur(-secs)) };
            format!(
                "<time datetime=\"{}\" title=\"{}\">{}</time> <span class=\"muted\">({rel})</span>",
                t.to_rfc3339(),
                ts(t),
                ts(t)
            )
        }
    }
}

/// A short duration: `850ms`, `12s`, `4m 05s`, `3h 20m`, `2d 4h`.
pub fn dur(secs: f64) -> String {
    if secs < 1.0 {
        return format!("{}ms", (secs * 1000.0).round() as i64);
    }
    let s = secs.round() as i64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// A rate limit as people write it: `500/1s`, `10/250ms`, `100/1m` (the largest unit that
/// divides the period), with ` per key` for a per-key limit (the CLI prints the same).
pub fn rate(r: &RateLimit) -> String {
    let ms = r.per.as_millis();
    let period = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s")]
        .iter()
        .find(|(unit, _)| ms > 0 && ms % unit == 0)
        .map_or_else(|| format!("{ms}ms"), |(unit, name)| format!("{}{name}", ms / unit));
    format!("{}/{period}{}", r.jobs, if r.by_key { " per key" } else { "" })
}

/// `1,234,567`.
pub fn num(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The one mark for an empty value (no lag, no error, no time), on every page; the CLI prints
/// the same.
pub const EMPTY: &str = "—";

/// [`EMPTY`] as muted HTML.
pub fn empty() -> String {
    format!("<span class=\"muted empty\">{EMPTY}</span>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_next_tick_in_the_schedules_own_zone() {
        let t = chrono::DateTime::parse_from_rfc3339("2026-01-31T12:00:00Z").unwrap().with_timezone(&chrono::Utc);
        assert_eq!(ts_in_zone(Some(t), "Europe/Berlin"), "<br><span class=\"muted\">2026-01-31 13:00:00 CET</span>");
        assert_eq!(ts_in_zone(Some(t), "UTC"), "");
        assert_eq!(ts_in_zone(Some(t), "No/Such_Zone"), "");
        assert_eq!(ts_in_zone(None, "Europe/Berlin"), "");
    }

    #[test]
    fn escapes_everything_that_matters() {
        assert_eq!(esc("<script>alert('x')</script>&\""), "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;");
    }

    #[test]
    fn invisible_and_bidi_characters_are_shown() {
        assert_eq!(
            esc("a\u{202E}b\u{200B}c\u{2066}\r\u{1b}[2J<\n\tz"),
            "a\\u{202e}b\\u{200b}c\\u{2066}\\u{d}\\u{1b}[2J&lt;\n\tz"
        );
        assert_eq!(esc("naïve 日本 emoji 🎉"), "naïve 日本 emoji 🎉");
        assert_eq!(esc_value("a\u{202E}\"b"), "a\u{202E}&quot;b");
    }

    #[test]
    fn numbers_and_durations() {
        assert_eq!(num(0), "0");
        assert_eq!(num(999), "999");
        assert_eq!(num(1000), "1,000");
        assert_eq!(num(1_234_567), "1,234,567");
        assert_eq!(dur(0.25), "250ms");
        assert_eq!(dur(12.0), "12s");
        assert_eq!(dur(245.0), "4m 05s");
        assert_eq!(dur(12_000.0), "3h 20m");
        assert_eq!(dur(187_200.0), "2d 4h");
        let r = |s: &str, by_key: bool| rate(&RateLimit::parse(s, by_key).unwrap());
        assert_eq!(r("500/1s", false), "500/1s");
        assert_eq!(r("10/250ms", true), "10/250ms per key");
        assert_eq!(r("100/120s", false), "100/2m");
        assert_eq!(r("7/1500ms", false), "7/1500ms");
    }
}
