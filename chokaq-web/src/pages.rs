//! The handlers: HTML pages, their POST actions, and the JSON API.

// A handler's error is the response itself (built once, on the error path), as axum does it.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::fmt::Write;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::{Extension, Json};
use chokaq_core::{
    CancelOutcome, DeadReason, Error, ErrorKind, JobId, JobKind, JobLocation, JobPage, JobRecord, JobStatus, JobTable,
    ListJobsParams, PurgeParams, PurgeTarget, QueueControl, QueueName, QueueStats, RateLimit, RequeueOutcome,
    ThroughputParams, Timestamp,
};
use serde_json::json;

use crate::data::{self, optional};
use crate::html::{self, button, dur, enc, esc, form, num, page, ts_ago, ts_in_zone, Nav};
use crate::{Ctx, Shared};

type Res = Result<Response, Response>;
type Params = HashMap<String, String>;

const STYLE: &str = include_str!("../assets/style.css");
const SCRIPT: &str = include_str!("../assets/app.js");

/// The most dead letters one retry request may name.
const MAX_BULK: usize = 1000;

// ---- errors -----------------------------------------------------------------------------

fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
        ErrorKind::Unavailable | ErrorKind::Transient => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error as a page (or JSON); the message is escaped.
fn fail(ctx: &Ctx, status: StatusCode, message: &str) -> Response {
    if ctx.wants_json {
        return (status, Json(json!({ "error": message }))).into_response();
    }
    let body = format!(
        "<h1>{}</h1><p class=\"error\" id=\"error\">{}</p><p><a href=\"{}\">Back to the overview</a></p>",
        esc(status.canonical_reason().unwrap_or("Error")),
        esc(message),
        esc(&ctx.home())
    );
    (status, Html(page(ctx, status.as_str(), Nav::None, "error", &body))).into_response()
}

fn backend_fail(ctx: &Ctx, e: Error) -> Response {
    let status = status_of(e.kind());
    if status.is_server_error() {
        tracing::warn!(error = %e, "dashboard: backend error");
    }
    fail(ctx, status, &e.to_string())
}

fn bad(ctx: &Ctx, message: impl AsRef<str>) -> Response {
    fail(ctx, StatusCode::BAD_REQUEST, message.as_ref())
}

fn queue_name(ctx: &Ctx, s: &str) -> Result<QueueName, Response> {
    QueueName::new(s).map_err(|e| backend_fail(ctx, e))
}

fn job_id(ctx: &Ctx, s: &str) -> Result<JobId, Response> {
    s.parse::<JobId>().map_err(|e| backend_fail(ctx, e))
}

pub async fn not_found(Extension(ctx): Extension<Ctx>) -> Response {
    fail(&ctx, StatusCode::NOT_FOUND, "no such page")
}

// ---- assets -----------------------------------------------------------------------------

pub async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8"), (header::CACHE_CONTROL, "public, max-age=3600")], STYLE)
        .into_response()
}

pub async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "public, max-age=3600")],
        SCRIPT,
    )
        .into_response()
}

// ---- overview (pages/overview.rs) ----------------------------------------------------------

mod overview;
mod paging;
mod tag_scan;
pub use overview::{api_overview, overview};
use overview::{lag_class, limit_badges, state_badges};

// ---- queue (pages/queue.rs) and jobs (pages/jobs.rs) --------------------------------------

mod jobs;
mod queue;
pub use jobs::*;
pub use queue::*;

// ---- dead letters -----------------------------------------------------------------------

pub async fn dead(Extension(ctx): Extension<Ctx>, Query(p): Query<Params>) -> Res {
    let l = list_params(&ctx, &p, Some(JobTable::DeadLetter))?;
    let (page_, searched) = tag_scan::list(&*ctx.backend, &l).await.map_err(|e| backend_fail(&ctx, e))?;
    let now = chrono::Utc::now();
    let mut s = format!("<div class=\"head\"><h1>Dead letters</h1></div>{}", flash(&p));
    s.push_str(&filter_form(&ctx, &l, "/dead", false));
    if !ctx.read_only {
        s.push_str("<div class=\"actions\" id=\"dead-actions\">");
        s.push_str(&format!(
            "<form method=\"post\" action=\"{}/dead/retry\" id=\"retry-form\" class=\"inline\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">{}</form>",
            esc(&ctx.base),
            esc(&ctx.csrf),
            button("Retry selected", "primary", "retry-selected")
        ));
        let mut fields: Vec<(&str, &str)> = Vec::new();
        let qn = l.queue.as_ref().map(|q| q.to_string()).unwrap_or_default();
        if !qn.is_empty() {
            fields.push(("queue", &qn));
        }
        let purge_inner = format!(
            "<label>Purge dead letters older than <input type=\"number\" name=\"older_than_hours\" min=\"0\" step=\"any\" value=\"24\" class=\"num\"> h{}</label>{}",
            if qn.is_empty() { String::new() } else { format!(" in queue <span class=\"mono\">{}</span>", esc(&qn)) },
            button("Purge", "danger", "purge")
        );
        s.push_str(&form(
            &ctx,
            "/dead/purge",
            &fields,
            &purge_inner,
            Some("Purge these dead letters? They are deleted for good."),
        ));
        s.push_str("</div>");
    }
    s.push_str(&tag_scope(searched, &page_));
    s.push_str(&job_table(&ctx, &page_.jobs, now, !ctx.read_only));
    s.push_str(&pager(&ctx, "/dead", &p, &l, &page_, false).await?);
    Ok(Html(page(&ctx, "Dead letters", Nav::Dead, "dead", &s)).into_response())
}

pub async fn dead_retry(State(st): State<Shared>, Extension(ctx): Extension<Ctx>, body: Bytes) -> Res {
    let f = parse_form(&body);
    let ids: Vec<&str> = f.iter().filter(|(k, _)| k == "ids").map(|(_, v)| v.as_str()).collect();
    if ids.is_empty() {
        return Err(bad(&ctx, "select at least one dead letter to retry"));
    }
    if ids.len() > MAX_BULK {
        return Err(bad(&ctx, format!("at most {MAX_BULK} dead letters at once, got {}", ids.len())));
    }
    let ids: Vec<JobId> = ids.iter().map(|s| job_id(&ctx, s)).collect::<Result<_, _>>()?;
    let (mut requeued, mut not_found, mut conflicts) = (0u64, 0u64, 0u64);
    for id in ids {
        match st.backend.requeue_dead(id).await {
            Ok(RequeueOutcome::Requeued) => requeued += 1,
            Ok(RequeueOutcome::NotFound) => not_found += 1,
            Err(e) if e.kind() == ErrorKind::Conflict => conflicts += 1,
            Err(e) => return Err(backend_fail(&ctx, e)),
        }
    }
    if ctx.wants_json {
        return Ok(Json(json!({ "ok": true, "requeued": requeued, "not_found": not_found, "conflicts": conflicts }))
            .into_response());
    }
    Ok(Redirect::to(&format!("{}/dead?done=requeued&n={requeued}", ctx.base)).into_response())
}

/// The fields `POST /dead/purge` takes (the form's `csrf` and `confirm` included).
const PURGE_FIELDS: [&str; 6] = ["older_than_hours", "queue", "kind", "reason", "csrf", "confirm"];

pub async fn dead_purge(State(st): State<Shared>, Extension(ctx): Extension<Ctx>, body: Bytes) -> Res {
    let f = parse_form(&body);
    // A destructive call names its scope (issue 40, L2): no default age, no unknown field (a
    // misspelt `older_than=720` once meant "every dead letter"), nothing deleted otherwise.
    if let Some((k, _)) = f.iter().find(|(k, _)| !PURGE_FIELDS.contains(&k.as_str())) {
        return Err(bad(&ctx, format!("unknown field {k:?}; a purge takes {}", PURGE_FIELDS[..4].join(", "))));
    }
    let hours: f64 = match field(&f, "older_than_hours").map(str::trim).filter(|s| !s.is_empty()) {
        None => return Err(bad(&ctx, "older_than_hours is required: the age in hours of the dead letters to purge")),
        Some(h) => h
            .parse()
            .ok()
            .filter(|h: &f64| h.is_finite() && *h >= 0.0 && *h <= 24.0 * 365.0 * 100.0)
            .ok_or_else(|| bad(&ctx, format!("older_than_hours must be a number of hours, got {h:?}")))?,
    };
    let mut req = PurgeParams::new(PurgeTarget::DeadLetter, Duration::from_secs_f64(hours * 3600.0));
    if let Some(q) = field(&f, "queue").filter(|s| !s.is_empty()) {
        req.queue = Some(queue_name(&ctx, q)?);
    }
    if let Some(k) = field(&f, "kind").filter(|s| !s.is_empty()) {
        req.kind = Some(JobKind::new(k).map_err(|e| backend_fail(&ctx, e))?);
    }
    if let Some(r) = field(&f, "reason").filter(|s| !s.is_empty()) {
        req.reason = Some(DeadReason::parse(r).map_err(|_| bad(&ctx, format!("unknown dead-letter reason {r:?}")))?);
    }
    if !ctx.wants_json && !confirmed(&f) {
        let what = match &req.queue {
            Some(q) => format!("Purge the dead letters of queue {q} older than {hours} h? They are deleted for good."),
            None => format!("Purge every dead letter older than {hours} h? They are deleted for good."),
        };
        return Ok(confirm_page(&ctx, "/dead/purge", &what, &f, "/dead"));
    }
    let n = st.backend.purge(&req).await.map_err(|e| backend_fail(&ctx, e))?;
    if ctx.wants_json {
        return Ok(Json(json!({ "ok": true, "purged": n })).into_response());
    }
    Ok(Redirect::to(&format!("{}/dead?done=purged&n={n}", ctx.base)).into_response())
}

// ---- workers ----------------------------------------------------------------------------

pub async fn workers(State(st): State<Shared>, Extension(ctx): Extension<Ctx>) -> Res {
    let ws = optional(ctx.backend.list_workers().await).map_err(|e| backend_fail(&ctx, e))?;
    let mut s = String::from("<div class=\"head\"><h1>Workers</h1></div>");
    match ws {
        None => s.push_str(
            "<p class=\"muted\" id=\"workers-unavailable\">Not available: this backend does not list worker processes yet.</p>",
        ),
        Some(ws) => {
            let now = chrono::Utc::now();
            let stale = st.opts.worker_stale_after;
            let _ = write!(
                s,
                "<p class=\"muted\">A worker not seen for over {} is shown as stuck.</p><table class=\"grid\" id=\"workers\"><thead><tr>\
                 <th>State</th><th>Worker</th><th>Host</th><th class=\"n\">PID</th><th>Queues</th><th class=\"n\">Concurrency</th>\
                 <th>Started</th><th>Last seen</th></tr></thead><tbody>",
                dur(stale.as_secs_f64())
            );
            if ws.is_empty() {
                s.push_str("<tr><td colspan=\"8\" class=\"muted\">No worker processes registered.</td></tr>");
            }
            for w in &ws {
                let stuck = data::is_stuck(w, now, stale);
                let _ = write!(
                    s,
                    "<tr class=\"{}\"><td>{}</td><td class=\"mono\">{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td>\
                     <td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
                    if stuck { "bad" } else { "" },
                    if stuck { "<span class=\"badge bad\">stuck</span>" } else { "<span class=\"badge ok\">alive</span>" },
                    w.worker,
                    esc(&w.host),
                    w.pid,
                    w.queues.iter().map(|q| esc(q)).collect::<Vec<_>>().join(", "),
                    w.concurrency,
                    ts_ago(Some(w.started_at), now),
                    ts_ago(Some(w.last_seen_at), now),
                );
            }
            s.push_str("</tbody></table>");
        }
    }
    Ok(Html(page(&ctx, "Workers", Nav::Workers, "workers", &s)).into_response())
}

pub async fn api_workers(Extension(ctx): Extension<Ctx>) -> Res {
    let ws = optional(ctx.backend.list_workers().await).map_err(|e| backend_fail(&ctx, e))?;
    Ok(Json(json!({ "available": ws.is_some(), "workers": ws.unwrap_or_default() })).into_response())
}

pub async fn api_csrf(Extension(ctx): Extension<Ctx>) -> Response {
    Json(json!({ "token": ctx.csrf })).into_response()
}

/// The periodic schedules (issue 15): spec, time zone, next and last tick, state; pause and
/// resume one.
pub async fn schedules(Extension(ctx): Extension<Ctx>, Query(p): Query<Params>) -> Res {
    let rows = ctx.backend.list_schedules().await.map_err(|e| backend_fail(&ctx, e))?;
    let now = chrono::Utc::now();
    let mut s = String::from("<div class=\"head\"><h1>Schedules</h1></div>");
    s.push_str(&flash(&p));
    s.push_str(
        "<table class=\"grid\" id=\"schedules\"><thead><tr><th>State</th><th>Schedule</th><th>Spec</th>\
         <th>Time zone</th><th>Group</th><th>Next tick</th><th>Last enqueued tick</th><th></th></tr></thead><tbody>",
    );
    if rows.is_empty() {
        s.push_str("<tr><td colspan=\"8\" class=\"muted\">No schedules registered.</td></tr>");
    }
    for r in &rows {
        let (badge, class) = schedule_state(r, now);
        let action = if ctx.read_only || r.stale {
            String::new()
        } else {
            let act = if r.enabled { "pause" } else { "resume" };
            let label = if r.enabled { "Pause" } else { "Resume" };
            form(&ctx, &format!("/schedules/{}/{act}", enc(&r.name)), &[], &button(label, "", act), None)
        };
        let _ = write!(
            s,
            "<tr class=\"{class}\"><td>{badge}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td><td>{}</td>\
             <td>{}</td><td>{}{}</td><td>{}</td><td>{action}</td></tr>",
            esc(&r.name),
            esc(&r.spec),
            esc(&r.time_zone),
            esc(&r.group),
            ts_ago(r.next_tick, now),
            ts_in_zone(r.next_tick, &r.time_zone),
            ts_ago(r.last_enqueued_tick, now),
        );
    }
    s.push_str("</tbody></table>");
    Ok(Html(page(&ctx, "Schedules", Nav::Schedules, "schedules", &s)).into_response())
}

/// A schedule's badge and row class. An enabled schedule whose next tick is more than a
/// minute past due is flagged `overdue` (no process holding it enqueues its ticks), not green.
fn schedule_state(r: &chokaq_core::ScheduleRow, now: Timestamp) -> (&'static str, &'static str) {
    let overdue = r.next_tick.is_some_and(|t| now.signed_duration_since(t) > chrono::Duration::minutes(1));
    if r.stale {
        ("<span class=\"badge bad\">stale</span>", "bad")
    } else if r.enabled && overdue {
        (
            "<span class=\"badge warn\" data-state=\"overdue\" title=\"the next tick is past due: is a process with \
             this schedule running?\">overdue</span>",
            "warn",
        )
    } else if r.enabled {
        ("<span class=\"badge ok\">active</span>", "")
    } else {
        ("<span class=\"badge warn\">paused</span>", "warn")
    }
}

pub async fn schedule_action(State(st): State<Shared>, Extension(ctx): Extension<Ctx>, OwnPath(path): OwnPath) -> Res {
    let (name, action) = (own(&path, "name"), own(&path, "action"));
    let enabled = match action.as_str() {
        "pause" => false,
        "resume" => true,
        _ => return Err(fail(&ctx, StatusCode::NOT_FOUND, "no such schedule action")),
    };
    let row = st.backend.set_schedule_enabled(&name, enabled).await.map_err(|e| backend_fail(&ctx, e))?;
    if ctx.wants_json {
        return Ok(Json(json!({ "ok": true, "schedule": row })).into_response());
    }
    Ok(Redirect::to(&format!("{}/schedules?done=schedule-{action}", ctx.base)).into_response())
}

pub async fn api_schedules(Extension(ctx): Extension<Ctx>) -> Res {
    let rows = ctx.backend.list_schedules().await.map_err(|e| backend_fail(&ctx, e))?;
    Ok(Json(json!({ "schedules": rows })).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overdue_schedule_is_flagged_not_green() {
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let row = |next: i64, enabled: bool| chokaq_core::ScheduleRow {
            name: "s".into(),
            spec: "every:60s".into(),
            time_zone: "UTC".into(),
            group: "default".into(),
            next_tick: Some(now + chrono::Duration::seconds(next)),
            last_enqueued_tick: None,
            enabled,
            stale: false,
            created_at: now,
            updated_at: now,
        };
        assert!(schedule_state(&row(-3600, true), now).0.contains("overdue"));
        assert!(schedule_state(&row(-30, true), now).0.contains("active"), "a tick being enqueued now");
        assert!(schedule_state(&row(60, true), now).0.contains("active"));
        assert!(schedule_state(&row(-3600, false), now).0.contains("paused"), "a paused one is paused");
    }
}
