//! The throughput chart: jobs done, failed and retried per minute over the last hour, as
//! server-rendered SVG. No style attribute and no script: the colours come from classes in
//! `assets/style.css`, the hover text from SVG `<title>` elements, so the strict CSP holds.

use std::fmt::Write;

use chokaq_core::{ThroughputBucket, Timestamp};
use serde::Serialize;

use crate::html::num;

/// Minutes in the throughput window.
pub const WINDOW_MINUTES: usize = 60;

/// Per-minute counts over the window, oldest first; the last entry is the current minute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Series {
    pub done: Vec<u64>,
    pub failed: Vec<u64>,
    pub retried: Vec<u64>,
}

impl Series {
    /// A window of zeros.
    pub fn zeros() -> Self {
        Series { done: vec![0; WINDOW_MINUTES], failed: vec![0; WINDOW_MINUTES], retried: vec![0; WINDOW_MINUTES] }
    }

    /// Adds a bucket that falls within the window ending at `now` (others are ignored).
    pub fn add(&mut self, b: &ThroughputBucket, now: Timestamp) {
        let ago = now.signed_duration_since(b.minute).num_minutes();
        if (0..WINDOW_MINUTES as i64).contains(&ago) {
            let i = WINDOW_MINUTES - 1 - ago as usize;
            self.done[i] += b.finished;
            self.failed[i] += b.failed;
            self.retried[i] += b.retried;
        }
    }

    /// The series of `buckets` (every queue summed) over the window ending at `now`.
    pub fn of<'a>(buckets: impl IntoIterator<Item = &'a ThroughputBucket>, now: Timestamp) -> Self {
        let mut s = Series::zeros();
        for b in buckets {
            s.add(b, now);
        }
        s
    }

    pub fn done_total(&self) -> u64 {
        self.done.iter().sum()
    }

    pub fn failed_total(&self) -> u64 {
        self.failed.iter().sum()
    }

    pub fn retried_total(&self) -> u64 {
        self.retried.iter().sum()
    }

    /// The busiest minute (all three kinds together).
    fn peak(&self) -> u64 {
        (0..self.done.len()).map(|i| self.done[i] + self.failed[i] + self.retried[i]).max().unwrap_or(0)
    }
}

/// The large chart (overview and queue page): stacked bars per minute, a scale, a time axis
/// and a legend with the hour's totals. `id` names the element (`chart-total`, `chart-queue`);
/// its `data-done` / `data-failed` / `data-retried` attributes carry the totals.
pub fn chart(id: &str, s: &Series, now: Timestamp) -> String {
    let (bar, gap, h, top, bottom, left) = (10usize, 2usize, 120usize, 8usize, 18usize, 44usize);
    let n = s.done.len();
    let w = left + n * bar + 4;
    let full = top + h + bottom;
    let peak = s.peak();
    let scale = nice_ceiling(peak.max(1));
    let mut out = String::with_capacity(8192);
    let _ = write!(
        out,
        "<figure class=\"chart\" id=\"{id}\" data-done=\"{}\" data-failed=\"{}\" data-retried=\"{}\">\
         <svg class=\"tp\" viewBox=\"0 0 {w} {full}\" width=\"{w}\" height=\"{full}\" role=\"img\" \
         aria-label=\"jobs done, failed and retried per minute over the last hour\">",
        s.done_total(),
        s.failed_total(),
        s.retried_total()
    );
    // Scale: the base line, the middle and the top, labelled.
    for (frac, label) in [(0usize, 0u64), (1, scale / 2), (2, scale)] {
        let y = top + h - frac * h / 2;
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{left}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\"></line>\
             <text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            w - 4,
            left - 4,
            y + 4,
            num(label)
        );
    }
    for (i, label) in [(0usize, "−60 min"), (n / 2, "−30 min"), (n - 1, "now")] {
        let x = left + i * bar + bar / 2;
        let anchor = if i == 0 {
            "start"
        } else if i == n - 1 {
            "end"
        } else {
            "middle"
        };
        let x = if i == n - 1 {
            x + bar / 2
        } else if i == 0 {
            x - bar / 2
        } else {
            x
        };
        let _ =
            write!(out, "<text class=\"axis\" x=\"{x}\" y=\"{}\" text-anchor=\"{anchor}\">{label}</text>", full - 4);
    }
    for i in 0..n {
        let (d, f, r) = (s.done[i], s.failed[i], s.retried[i]);
        if d + f + r == 0 {
            continue;
        }
        let minute = now - chrono::Duration::minutes((n - 1 - i) as i64);
        let x = left + i * bar + gap / 2;
        let _ = write!(
            out,
            "<g class=\"m\"><title>{} UTC: {} done, {} failed, {} failed attempts still waiting to retry</title>",
            minute.format("%H:%M"),
            num(d),
            num(f),
            num(r)
        );
        let mut base = top + h;
        for (v, class) in [(d, "done"), (f, "failed"), (r, "retried")] {
            if v == 0 {
                continue;
            }
            let bh = ((v as f64 / scale as f64) * h as f64).round().max(1.0) as usize;
            let bh = bh.min(base - top);
            base -= bh;
            let _ = write!(
                out,
                "<rect class=\"{class}\" x=\"{x}\" y=\"{base}\" width=\"{}\" height=\"{bh}\"></rect>",
                bar - gap
            );
        }
        out.push_str("</g>");
    }
    out.push_str("</svg><figcaption class=\"legend\">");
    // What each series counts, said where it is shown (issue 40: "Retried 0" while 3,000 jobs
    // had been retried that hour; the series counts only retries still waiting).
    for (class, label, what, total) in [
        ("done", "Done", "jobs archived as done, by the minute they finished", s.done_total()),
        ("failed", "Failed", "jobs dead-lettered as failures, by the minute they failed", s.failed_total()),
        (
            "retried",
            "Retry waiting",
            "failed attempts now waiting for their retry, by the minute they failed; a retry already \
             claimed again or finished is no longer counted",
            s.retried_total(),
        ),
    ] {
        let _ = write!(
            out,
            "<span class=\"key {class}\" title=\"{what}\"><svg class=\"sw\" viewBox=\"0 0 10 10\" width=\"10\" height=\"10\">\
             <rect class=\"{class}\" width=\"10\" height=\"10\"></rect></svg> {label} <b id=\"{id}-{class}\">{}</b></span>",
            num(total)
        );
    }
    let _ = write!(out, "<span class=\"muted\">last hour; peak {} a minute</span></figcaption></figure>", num(peak));
    out
}

/// The small per-queue chart of the overview's table: the same stacked bars, 2 px a minute.
pub fn spark(s: &Series) -> String {
    let n = s.done.len();
    if n == 0 {
        return String::new();
    }
    let (w, h) = (n * 2, 18usize);
    let peak = s.peak().max(1);
    let mut out = format!(
        "<svg class=\"spark\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" \
         aria-label=\"done, failed and waiting to retry per minute, last hour\"><title>last hour: {} done, {} failed, {} waiting to retry</title>",
        num(s.done_total()),
        num(s.failed_total()),
        num(s.retried_total())
    );
    for i in 0..n {
        let mut base = h;
        for (v, class) in [(s.done[i], "done"), (s.failed[i], "failed"), (s.retried[i], "retried")] {
            if v == 0 {
                continue;
            }
            let bh = ((v as f64 / peak as f64) * h as f64).round().max(1.0) as usize;
            let bh = bh.min(base);
            if bh == 0 {
                continue;
            }
            base -= bh;
            let _ =
                write!(out, "<rect class=\"{class}\" x=\"{}\" y=\"{base}\" width=\"2\" height=\"{bh}\"></rect>", i * 2);
        }
    }
    out.push_str("</svg>");
    out
}

/// The smallest of 1, 2, 5 × 10^k at or above `n`: a scale that reads well.
fn nice_ceiling(n: u64) -> u64 {
    let mut p = 1u64;
    loop {
        for m in [1, 2, 5] {
            if let Some(v) = p.checked_mul(m) {
                if v >= n {
                    return v;
                }
            }
        }
        match p.checked_mul(10) {
            Some(next) => p = next,
            None => return n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(minute: Timestamp, finished: u64, failed: u64, retried: u64) -> ThroughputBucket {
        ThroughputBucket { queue: "q".into(), minute, finished, failed, retried }
    }

    #[test]
    fn buckets_land_in_their_minute() {
        let now = chrono::DateTime::from_timestamp(1_800_000_030, 0).unwrap();
        let m = |ago: i64| now - chrono::Duration::minutes(ago) - chrono::Duration::seconds(30);
        let s = Series::of(&[bucket(m(0), 3, 1, 0), bucket(m(59), 2, 0, 4), bucket(m(60), 9, 9, 9)], now);
        assert_eq!((s.done[59], s.failed[59], s.done[0], s.retried[0]), (3, 1, 2, 4));
        assert_eq!((s.done_total(), s.failed_total(), s.retried_total()), (5, 1, 4), "the 61st minute is out");
    }

    #[test]
    fn chart_is_svg_without_style_and_stacks() {
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let mut s = Series::zeros();
        s.done[59] = 8;
        s.failed[59] = 2;
        s.retried[10] = 1;
        let c = chart("chart-total", &s, now);
        assert!(c.contains("id=\"chart-total\" data-done=\"8\" data-failed=\"2\" data-retried=\"1\""), "{c}");
        assert_eq!(c.matches("<rect class=\"done\" x=").count(), 1);
        assert_eq!(c.matches("<rect class=\"failed\" x=").count(), 1);
        assert_eq!(c.matches("<rect class=\"retried\" x=").count(), 1);
        // Each series says what it counts: "Retried" read as every retry of the hour.
        assert!(c.contains("Retry waiting <b id=\"chart-total-retried\">1</b>"), "{c}");
        assert!(c.contains("a retry already claimed again or finished is no longer counted"), "{c}");
        assert!(!c.contains("Retried"), "{c}");
        assert!(c.contains("<title>") && !c.contains("style") && !c.contains("<script"), "{c}");
        assert!(c.contains("id=\"chart-total-done\">8<"), "{c}");
        let sp = spark(&s);
        assert!(sp.contains("<rect class=\"failed\"") && !sp.contains("style"), "{sp}");
    }

    #[test]
    fn scales_read_well() {
        assert_eq!([1, 2, 3, 7, 10, 11, 120, 999].map(nice_ceiling), [1, 2, 5, 10, 10, 20, 200, 1000]);
    }
}
