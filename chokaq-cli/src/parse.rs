//! Parsers of command-line values: durations (`7d`, `1h30m`, `500ms`), caps (`N` or `none`),
//! rate limits (`N/PERIOD` or `none`), times (RFC 3339 or an age).

use std::time::Duration;

use chokaq::core::{RateLimit, Timestamp};

/// `7d`, `12h`, `30m`, `45s`, `500ms`, combined (`1h30m`), or a bare number of seconds.
pub fn duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration (e.g. 7d, 12h, 30m, 45s, 500ms)".into());
    }
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("bad duration {s:?}: expected a number before each unit (e.g. 7d, 1h30m)"));
        }
        let n: u64 = rest[..digits].parse().map_err(|_| format!("bad duration {s:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            "w" => Duration::from_secs(n.saturating_mul(7 * 86_400)),
            _ => return Err(format!("bad duration {s:?}: unknown unit {unit:?} (use ms, s, m, h, d or w)")),
        };
        total = total.saturating_add(part);
    }
    Ok(total)
}

/// A duration or `none` (a positional value that must be given, so not an `Option` to clap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalDuration(pub Option<Duration>);

/// A cap, or `none` for no cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap(pub Option<u32>);

/// A duration, or `none`.
pub fn optional_duration(s: &str) -> Result<OptionalDuration, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        Ok(OptionalDuration(None))
    } else {
        duration(s).map(|d| OptionalDuration(Some(d)))
    }
}

/// A cap: a whole number, or `none` (no cap).
pub fn cap(s: &str) -> Result<Cap, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(Cap(None));
    }
    t.parse::<u32>().map(|n| Cap(Some(n))).map_err(|_| format!("bad cap {s:?}: expected a whole number or `none`"))
}

/// A rate limit (`N/PERIOD`, queue-wide until `--by-key` says otherwise), or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate(pub Option<RateLimit>);

/// A rate limit: `N/PERIOD` as [`RateLimit::parse`] takes it (`500/1s`, `10/250ms`), range
/// checked, or `none` (no limit).
pub fn rate(s: &str) -> Result<Rate, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(Rate(None));
    }
    RateLimit::parse(s, false).map(|r| Rate(Some(r))).map_err(|e| e.message().to_string())
}

/// A rate limit as people write it: `500/1s`, `10/250ms`, `100/1m` (the largest unit that
/// divides the period), with ` per key` for a per-key limit.
pub fn rate_text(r: &RateLimit) -> String {
    let ms = r.per.as_millis();
    let period = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s")]
        .iter()
        .find(|(unit, _)| ms > 0 && ms % unit == 0)
        .map_or_else(|| format!("{ms}ms"), |(unit, name)| format!("{}{name}", ms / unit));
    format!("{}/{period}{}", r.jobs, if r.by_key { " per key" } else { "" })
}

/// An RFC 3339 time (`2026-01-31T12:00:00Z`), or an age (`2h`: two hours before now).
pub fn time(s: &str) -> Result<Timestamp, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s.trim()) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let age =
        duration(s).map_err(|_| format!("bad time {s:?}: expected RFC 3339 (2026-01-31T12:00:00Z) or an age (2h)"))?;
    let age = chrono::Duration::from_std(age).map_err(|_| format!("bad time {s:?}: age out of range"))?;
    chrono::Utc::now().checked_sub_signed(age).ok_or_else(|| format!("bad time {s:?}: age out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("7d").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(duration("2w").unwrap(), Duration::from_secs(14 * 86_400));
        for bad in ["", "d", "7x", "h7", "1.5h", "-1s"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
        assert_eq!(optional_duration("none").unwrap(), OptionalDuration(None));
        assert_eq!(cap("none").unwrap(), Cap(None));
        assert_eq!(cap("12").unwrap(), Cap(Some(12)));
        assert!(cap("-1").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(rate("none").unwrap(), Rate(None));
        assert_eq!(rate(" NONE ").unwrap(), Rate(None));
        let r = rate("500/1s").unwrap().0.unwrap();
        assert_eq!((r.jobs, r.per, r.by_key), (500, Duration::from_secs(1), false));
        assert_eq!(rate("10/250ms").unwrap().0.unwrap().per, Duration::from_millis(250));
        for (bad, needle) in [
            ("0/1s", "jobs must be 1"),
            ("5/0s", "period"),
            ("5/2d", "period"),
            ("5", "N/PERIOD"),
            ("x/1s", "N/PERIOD"),
        ] {
            let e = rate(bad).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
        let text = |s: &str, by_key: bool| rate_text(&RateLimit::parse(s, by_key).unwrap());
        assert_eq!(text("500/1s", false), "500/1s");
        assert_eq!(text("500/1000ms", false), "500/1s");
        assert_eq!(text("10/250ms", true), "10/250ms per key");
        assert_eq!(text("100/90s", false), "100/90s");
        assert_eq!(text("100/120s", false), "100/2m");
        assert_eq!(text("1/1d", false), "1/1d");
        assert_eq!(text("7/1500ms", false), "7/1500ms");
    }

    #[test]
    fn times() {
        let t = time("2026-01-31T12:00:00Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-01-31T12:00:00+00:00");
        let ago = time("2h").unwrap();
        let d = chrono::Utc::now() - ago;
        assert!(d >= chrono::Duration::minutes(119) && d <= chrono::Duration::minutes(121), "{d}");
        assert!(time("yesterday").is_err());
    }
}
