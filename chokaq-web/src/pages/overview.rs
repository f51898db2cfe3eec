//! The overview: cards, problems, the throughput chart and the queue table.

use std::fmt::Write;

use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse};
use axum::{Extension, Json};

use super::{backend_fail, Params, Res};
use crate::chart;
use crate::data::{self, OverviewData};
use crate::html::{dur, empty, enc, esc, num, page, ts, Nav, EMPTY};
use crate::{Ctx, Shared};

pub async fn overview(State(st): State<Shared>, Extension(ctx): Extension<Ctx>, Query(q): Query<Params>) -> Res {
    let d = data::overview_shared(&st).await.map_err(|e| backend_fail(&ctx, e))?;
    let live = live_html(&ctx, &st, &d);
    if q.get("fragment").is_some_and(|f| f == "live") {
        return Ok(Html(live).into_response());
    }
    let body = format!(
        "<div class=\"head\"><h1>Overview</h1><span class=\"muted live-status\" id=\"live-status\"></span></div>\
         <section id=\"live\" data-src=\"{}?fragment=live\" data-every=\"{}\">{live}</section>",
        esc(&ctx.home()),
        st.opts.refresh_every.as_millis()
    );
    Ok(Html(page(&ctx, "Overview", Nav::Overview, "overview", &body)).into_response())
}

pub async fn api_overview(State(st): State<Shared>, Extension(ctx): Extension<Ctx>) -> Res {
    let d = data::overview_shared(&st).await.map_err(|e| backend_fail(&ctx, e))?;
    Ok(Json(&*d).into_response())
}

pub(super) fn lag_class(st: &Shared, lag: Option<f64>) -> &'static str {
    match lag {
        Some(s) if s > st.opts.lag_warning.as_secs_f64() => "warn",
        _ => "",
    }
}

/// An archived count, marked `~` (with a tooltip) when it is an estimate. An estimate below
/// what the archive is known to hold, `at_least` (the jobs done in the last hour, which the
/// throughput reads from the archive itself), is stale (a fresh install: the planner's
/// statistics not gathered yet, so the backend's floor of 1,001) and is shown as that lower
/// bound instead, `≥30,000` (issue 40: `~1,001` beside 30,000 done that hour).
pub(super) fn archived(n: u64, estimated: bool, at_least: Option<u64>) -> String {
    match (estimated, at_least) {
        (true, Some(min)) if min > n => format!(
            "<span class=\"est\" data-stale=\"1\" title=\"at least this many: the jobs done in the last hour; \
             the planner's statistics are not gathered yet (ANALYZE); exact on the queue page\">≥{}</span>",
            num(min)
        ),
        (true, _) => format!(
            "<span class=\"est\" title=\"estimate (planner statistics); exact on the queue page\">~{}</span>",
            num(n)
        ),
        (false, _) => num(n),
    }
}

fn live_html(ctx: &Ctx, st: &Shared, d: &OverviewData) -> String {
    let b = esc(&ctx.base);
    let t = &d.totals;
    let max_lag =
        d.queues.iter().filter_map(|q| q.lag_seconds).fold(None, |m: Option<f64>, l| Some(m.map_or(l, |m| m.max(l))));
    let mut s = String::with_capacity(8192);
    s.push_str("<div class=\"cards\">");
    let card = |s: &mut String, id: &str, label: &str, value: String, class: &str, href: String| {
        let _ = write!(
            s,
            "<a class=\"card {class}\" href=\"{href}\"><span class=\"label\">{label}</span><span class=\"value\" id=\"total-{id}\">{value}</span></a>"
        );
    };
    card(&mut s, "pending", "Pending", num(t.pending), "", format!("{b}/jobs?table=hot&amp;status=pending"));
    card(&mut s, "fetched", "Fetched", num(t.fetched), "", format!("{b}/jobs?table=hot&amp;status=fetched"));
    card(
        &mut s,
        "processing",
        "Processing",
        num(t.processing),
        "",
        format!("{b}/jobs?table=hot&amp;status=processing"),
    );
    // The alarm is for failures and zombies; a deliberate cancel is counted on its own card.
    card(&mut s, "dead", "Dead (failed)", num(t.failed), if t.failed > 0 { "bad" } else { "" }, format!("{b}/dead"));
    card(&mut s, "cancelled", "Cancelled", num(t.cancelled), "", format!("{b}/dead"));
    card(
        &mut s,
        "archived",
        "Archived",
        archived(
            t.archived,
            t.archived_estimated,
            d.queues.iter().map(|q| q.finished_last_hour).sum::<Option<u64>>().filter(|_| !d.queues.is_empty()),
        ),
        "",
        format!("{b}/jobs?table=archive"),
    );
    card(
        &mut s,
        "lag",
        "Max lag",
        max_lag.map(dur).unwrap_or_else(|| EMPTY.into()),
        lag_class(st, max_lag),
        format!("{b}/jobs?table=hot&amp;status=pending"),
    );
    match &d.workers {
        Some(w) => card(
            &mut s,
            "workers",
            "Workers",
            if w.stuck > 0 { format!("{} + {} stuck", w.alive, w.stuck) } else { w.alive.to_string() },
            if w.stuck > 0 { "bad" } else { "" },
            format!("{b}/workers"),
        ),
        None => card(&mut s, "workers", "Workers", "not available".into(), "na", format!("{b}/workers")),
    }
    s.push_str("</div>");

    // Problems first.
    let mut problems: Vec<String> = Vec::new();
    for q in &d.queues {
        let qh = format!("<a href=\"{b}/queues/{}\">{}</a>", enc(&q.queue), esc(&q.queue));
        if q.failed > 0 {
            problems.push(format!(
                "<li class=\"bad\">{qh}: <a href=\"{b}/dead?queue={}\">{} failed dead letter{}</a></li>",
                enc(&q.queue),
                num(q.failed),
                if q.failed == 1 { "" } else { "s" }
            ));
        }
        if let Some(l) = q.lag_seconds.filter(|l| *l > st.opts.lag_warning.as_secs_f64()) {
            match q.rate_limit.filter(|_| window_full(q)) {
                // Throttled: the limit holds the jobs back, as asked (issue 40).
                Some(r) => problems.push(format!(
                    "<li class=\"info\" data-throttled=\"{}\">{qh}: throttled, its rate limit's window is full \
                     ({}): due jobs wait for the next window, oldest waiting {}</li>",
                    esc(&q.queue),
                    esc(&crate::html::rate(&r)),
                    dur(l)
                )),
                None => problems.push(format!("<li class=\"warn\">{qh}: oldest due job waiting {}</li>", dur(l))),
            }
        }
        if q.is_paused {
            problems.push(format!("<li class=\"warn\">{qh}: paused</li>"));
        }
        if !q.is_active {
            problems.push(format!("<li class=\"warn\">{qh}: deactivated</li>"));
        }
    }
    if let Some(w) = &d.workers {
        if w.stuck > 0 {
            problems.push(format!(
                "<li class=\"bad\"><a href=\"{b}/workers\">{} worker{} not seen for over {}</a></li>",
                w.stuck,
                if w.stuck == 1 { "" } else { "s" },
                dur(st.opts.worker_stale_after.as_secs_f64())
            ));
        }
    }
    if problems.is_empty() {
        s.push_str(
            "<p class=\"ok problems\" id=\"problems\">No failed dead letters, lag, paused queues or stuck workers.</p>",
        );
    } else {
        s.push_str("<ul class=\"problems\" id=\"problems\">");
        for p in problems {
            s.push_str(&p);
        }
        s.push_str("</ul>");
    }

    match (&d.per_minute, d.taken_at) {
        (Some(series), Some(now)) => {
            s.push_str("<h2>Throughput, every queue</h2>");
            s.push_str(&chart::chart("chart-total", series, now));
        }
        _ if d.throughput_pending => s.push_str(
            "<h2>Throughput, every queue</h2><p class=\"muted\" id=\"chart-total\">Computing the last hour; shown at \
             the next refresh.</p>",
        ),
        _ => s.push_str("<p class=\"muted\" id=\"chart-total\">Throughput: not available from this backend yet.</p>"),
    }

    s.push_str(
        "<table class=\"grid\" id=\"queues\"><thead><tr><th>Queue</th><th>State</th><th class=\"n\">Pending</th>\
         <th class=\"n\">Fetched</th><th class=\"n\">Processing</th><th class=\"n\">Failed</th>\
         <th class=\"n\">Cancelled</th><th class=\"n\">Archived</th><th class=\"n\">Lag</th>\
         <th class=\"n\">Done, 1 h</th><th>Last hour</th></tr></thead><tbody>",
    );
    if d.queues.is_empty() {
        s.push_str("<tr><td colspan=\"11\" class=\"muted\">No queues yet: a queue is listed once it holds a job or has settings (pause, cap, ...).</td></tr>");
    }
    for q in &d.queues {
        let qe = enc(&q.queue);
        let full = window_full(q);
        let _ = write!(
            s,
            "<tr data-queue=\"{}\"><td><a href=\"{b}/queues/{qe}\">{}</a></td><td>{}</td>\
             <td class=\"n\" data-col=\"pending\"><a href=\"{b}/jobs?queue={qe}&amp;status=pending\">{}</a></td>\
             <td class=\"n\" data-col=\"fetched\">{}</td><td class=\"n\" data-col=\"processing\">{}</td>\
             <td class=\"n {}\" data-col=\"dead\"><a href=\"{b}/dead?queue={qe}\">{}</a></td>\
             <td class=\"n\" data-col=\"cancelled\">{}</td>\
             <td class=\"n\" data-col=\"archived\">{}</td><td class=\"n {}\" data-col=\"lag\">{}</td>\
             <td class=\"n\" data-col=\"done\">{}</td><td>{}</td></tr>",
            esc(&q.queue),
            esc(&q.queue),
            state_badges(q.is_paused, q.is_active, q.max_workers)
                + &limit_badges(q.key_max_workers, q.rate_limit)
                + if full { " <span class=\"badge\" data-limit=\"window-full\">window full</span>" } else { "" },
            num(q.pending),
            num(q.fetched),
            num(q.processing),
            if q.failed > 0 { "bad" } else { "" },
            num(q.failed),
            num(q.cancelled),
            archived(q.archived, q.archived_estimated, q.finished_last_hour),
            if full { "throttled" } else { lag_class(st, q.lag_seconds) },
            q.lag_seconds.map(dur).unwrap_or_else(empty),
            q.finished_last_hour.map(num).unwrap_or_else(empty),
            q.per_minute.as_ref().map(chart::spark).unwrap_or_default(),
        );
    }
    s.push_str("</tbody></table>");
    let _ = write!(
        s,
        "<p class=\"muted small\">Snapshot {} (database clock).{}</p>",
        d.taken_at.map(ts).unwrap_or_default(),
        if t.archived_estimated {
            " Archived counts marked ~ are estimates from the planner's statistics; a queue's page has the exact count."
        } else {
            ""
        }
    );
    s
}

/// Whether a queue's queue-wide rate limit is what holds its due jobs back: jobs wait, and as
/// many started in the last window as the limit allows. Read from the last hour's per-minute
/// throughput (jobs done or failed, by the minute they finished), so approximate: a window of
/// a minute or more is full when the minutes it spans hold `jobs` finishes; a shorter one when
/// the busier of the last two minutes ran at 90 % of the limit's rate or more.
pub(super) fn window_full(q: &data::QueueRow) -> bool {
    let (Some(r), Some(s)) = (q.rate_limit, q.per_minute.as_ref()) else { return false };
    let per_ms = u64::try_from(r.per.as_millis()).unwrap_or(u64::MAX);
    let n = s.done.len();
    if r.by_key || q.pending == 0 || per_ms == 0 || n == 0 {
        return false;
    }
    let finished = |i: usize| s.done[i] + s.failed[i];
    if per_ms >= 60_000 {
        let minutes = usize::try_from(per_ms.div_ceil(60_000)).unwrap_or(usize::MAX).min(n);
        (n - minutes..n).map(finished).sum::<u64>() >= u64::from(r.jobs)
    } else {
        let per_minute = u64::from(r.jobs).saturating_mul(60_000) / per_ms;
        let recent = (n.saturating_sub(2)..n).map(finished).max().unwrap_or(0);
        recent.saturating_mul(10) >= per_minute.saturating_mul(9)
    }
}

/// The per-key cap and the rate limit as badges (nothing when the queue has neither).
pub(super) fn limit_badges(key_cap: Option<u32>, rate: Option<chokaq_core::RateLimit>) -> String {
    let mut s = String::new();
    if let Some(c) = key_cap {
        let _ = write!(s, " <span class=\"badge\" data-limit=\"key-cap\">key cap {c}</span>");
    }
    if let Some(r) = rate {
        let _ = write!(s, " <span class=\"badge\" data-limit=\"rate\">rate {}</span>", esc(&crate::html::rate(&r)));
    }
    s
}

pub(super) fn state_badges(paused: bool, active: bool, cap: Option<u32>) -> String {
    let mut s = String::new();
    if !active {
        s.push_str("<span class=\"badge warn\">inactive</span> ");
    }
    if paused {
        s.push_str("<span class=\"badge warn\" data-state=\"paused\">paused</span> ");
    }
    if active && !paused {
        s.push_str("<span class=\"badge ok\" data-state=\"running\">running</span> ");
    }
    if let Some(c) = cap {
        let _ = write!(s, "<span class=\"badge\">cap {c}</span>");
    }
    s
}
