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
use crate::html::{self, button, dur, enc, esc, form, num, page, ts_ago, Nav};
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
pub use overview::{api_overview, overview};
use overview::{lag_class, limit_badges, state_badges};

// ---- queue ------------------------------------------------------------------------------

async fn queue_stats(st: &Shared, ctx: &Ctx, q: &QueueName) -> Result<(QueueStats, Option<Timestamp>), Response> {
    let snap = st.backend.stats().await.map_err(|e| backend_fail(ctx, e))?;
    let qs =
        snap.queue(q.as_str()).cloned().unwrap_or_else(|| QueueStats { queue: q.to_string(), ..Default::default() });
    Ok((qs, snap.taken_at))
}

pub async fn queue(
    State(st): State<Shared>,
    Extension(ctx): Extension<Ctx>,
    Path(path): Path<HashMap<String, String>>,
    Query(p): Query<Params>,
) -> Res {
    let q = queue_name(&ctx, &own(&path, "queue"))?;
    let settings = st.backend.queue_settings(&q).await.map_err(|e| backend_fail(&ctx, e))?;
    let (qs, taken_at) = queue_stats(&st, &ctx, &q).await?;
    let now = taken_at.unwrap_or_else(chrono::Utc::now);
    let tp = ThroughputParams { window: Duration::from_secs(3600), queue: Some(q.clone()) };
    let throughput = optional(st.backend.throughput(&tp).await).map_err(|e| backend_fail(&ctx, e))?;
    let mut list = ListJobsParams::new(JobTable::Hot);
    list.queue = Some(q.clone());
    list.limit = 20;
    list.without_payloads = true;
    let jobs = st.backend.list_jobs(&list).await.map_err(|e| backend_fail(&ctx, e))?;

    let b = esc(&ctx.base);
    let qe = enc(q.as_str());
    let mut s = String::new();
    let _ = write!(
        s,
        "<div class=\"head\"><h1>Queue <span class=\"mono\">{}</span></h1><span id=\"queue-state\">{}</span></div>{}",
        esc(q.as_str()),
        state_badges(settings.is_paused, settings.is_active, settings.max_workers)
            + &limit_badges(settings.key_max_workers, settings.rate_limit),
        flash(&p)
    );
    s.push_str("<div class=\"cols\"><section><h2>Counts</h2><table class=\"kv\">");
    for (label, id, n, href) in [
        ("Pending", "pending", qs.pending, format!("{b}/jobs?queue={qe}&amp;status=pending")),
        ("Fetched", "fetched", qs.fetched, format!("{b}/jobs?queue={qe}&amp;status=fetched")),
        ("Processing", "processing", qs.processing, format!("{b}/jobs?queue={qe}&amp;status=processing")),
        ("Dead (failed)", "dead", qs.failed(), format!("{b}/dead?queue={qe}")),
        ("Cancelled", "cancelled", qs.cancelled, format!("{b}/dead?queue={qe}")),
        ("Archived", "archived", qs.archived, format!("{b}/jobs?queue={qe}&amp;table=archive")),
    ] {
        let class = if id == "dead" && n > 0 { " class=\"bad\"" } else { "" };
        let _ =
            write!(s, "<tr><th>{label}</th><td{class}><a href=\"{href}\" id=\"count-{id}\">{}</a></td></tr>", num(n));
    }
    let lag = qs.oldest_due_at.map(|t| now.signed_duration_since(t).num_milliseconds().max(0) as f64 / 1000.0);
    let _ = write!(
        s,
        "<tr><th>Lag</th><td class=\"{}\">{}</td></tr>",
        lag_class(&st, lag),
        lag.map(dur).unwrap_or_else(html::empty)
    );
    let series = throughput.as_ref().map(|bk| crate::chart::Series::of(bk, now));
    match &series {
        Some(sr) => {
            let _ = write!(s, "<tr><th>Done, last hour</th><td id=\"done-hour\">{}</td></tr>", num(sr.done_total()));
        }
        None => s.push_str("<tr><th>Done, last hour</th><td class=\"muted\">not available</td></tr>"),
    }
    s.push_str("</table></section><section><h2>Settings</h2><table class=\"kv\">");
    let _ = write!(
        s,
        "<tr><th>Paused</th><td id=\"setting-paused\">{}</td></tr><tr><th>Active</th><td id=\"setting-active\">{}</td></tr>\
         <tr><th>Max workers</th><td id=\"setting-cap\">{}</td></tr>\
         <tr><th>Max workers per key</th><td id=\"setting-key-cap\">{}</td></tr>\
         <tr><th>Rate limit</th><td id=\"setting-rate\">{}</td></tr><tr><th>Zombie timeout</th><td>{}</td></tr>\
         <tr><th>Zombie policy</th><td>{:?}</td></tr><tr><th>Updated</th><td>{}</td></tr></table>",
        if settings.is_paused { "yes" } else { "no" },
        if settings.is_active { "yes" } else { "no" },
        settings.max_workers.map(|n| n.to_string()).unwrap_or_else(|| "unlimited".into()),
        settings.key_max_workers.map(|n| n.to_string()).unwrap_or_else(|| "unlimited".into()),
        settings.rate_limit.map(|r| esc(&html::rate(&r))).unwrap_or_else(|| "none".into()),
        settings.zombie_timeout.map(|d| dur(d.as_secs_f64())).unwrap_or_else(|| "default".into()),
        settings.zombie_policy,
        ts_ago(settings.updated_at, now),
    );
    if !ctx.read_only {
        let a = |act: &str| format!("/queues/{qe}/{act}");
        s.push_str("<div class=\"actions\" id=\"queue-actions\">");
        if settings.is_paused {
            s.push_str(&form(&ctx, &a("resume"), &[], &button("Resume", "primary", "resume"), None));
        } else {
            s.push_str(&form(&ctx, &a("pause"), &[], &button("Pause", "", "pause"), None));
        }
        if settings.is_active {
            s.push_str(&form(&ctx, &a("deactivate"), &[], &button("Deactivate", "danger", "deactivate"), None));
        } else {
            s.push_str(&form(&ctx, &a("activate"), &[], &button("Activate", "primary", "activate"), None));
        }
        let cap_input = format!(
            "<label>Cap <input type=\"number\" name=\"max_workers\" min=\"0\" max=\"{}\" value=\"{}\" placeholder=\"unlimited\" class=\"num\"></label>{}",
            chokaq_core::validate::MAX_QUEUE_WORKERS,
            settings.max_workers.map(|n| n.to_string()).unwrap_or_default(),
            button("Set cap", "", "cap")
        );
        s.push_str(&form(&ctx, &a("cap"), &[], &cap_input, None));
        let key_cap_input = format!(
            "<label>Per key <input type=\"number\" name=\"key_max_workers\" min=\"0\" max=\"{}\" value=\"{}\" placeholder=\"unlimited\" class=\"num\"></label>{}",
            chokaq_core::validate::MAX_QUEUE_WORKERS,
            settings.key_max_workers.map(|n| n.to_string()).unwrap_or_default(),
            button("Set key cap", "", "key-cap")
        );
        s.push_str(&form(&ctx, &a("key-cap"), &[], &key_cap_input, None));
        let rate = settings.rate_limit;
        let rate_input = format!(
            "<label>Rate <input type=\"text\" name=\"rate\" value=\"{}\" placeholder=\"e.g. 500/1s\" size=\"10\" title=\"N/PERIOD (ms, s, m, h, d), empty for none\" \
             pattern=\"\\s*([0-9]+/[0-9]*(ms|s|m|h|d)|[Nn][Oo][Nn][Ee])?\\s*\"></label>\
             <label><input type=\"checkbox\" name=\"by_key\" value=\"on\"{}> per key</label>{}",
            rate.map(|r| esc(&html::rate(&RateLimit { by_key: false, ..r }))).unwrap_or_default(),
            if rate.is_some_and(|r| r.by_key) { " checked" } else { "" },
            button("Set rate limit", "", "rate-limit")
        );
        s.push_str(&form(&ctx, &a("rate-limit"), &[], &rate_input, None));
        s.push_str("</div>");
    }
    s.push_str("</section></div>");
    s.push_str(&busiest_keys(&qs, settings.key_max_workers));
    if let Some(sr) = &series {
        s.push_str("<h2>Throughput</h2>");
        s.push_str(&crate::chart::chart("chart-queue", sr, now));
    }
    let _ = write!(
        s,
        "<h2>Live jobs <span class=\"muted small\">(first {}; <a href=\"{b}/jobs?queue={qe}\">all</a>)</span></h2>",
        jobs.jobs.len()
    );
    s.push_str(&job_table(&ctx, &jobs.jobs, now, false));
    Ok(Html(page(&ctx, &format!("Queue {}", q.as_str()), Nav::None, "queue", &s)).into_response())
}

/// The queue's busiest keys (Fetched + Processing jobs per concurrency key), keys at the cap
/// marked; nothing for a queue without running keyed jobs and without a key cap.
fn busiest_keys(qs: &QueueStats, key_cap: Option<u32>) -> String {
    if qs.busiest_keys.is_empty() && key_cap.is_none() {
        return String::new();
    }
    let mut s = format!(
        "<h2>Busiest keys <span class=\"muted small\">(running per concurrency key, top {})</span></h2>\
         <table class=\"grid\" id=\"busiest-keys\"><thead><tr><th>Key</th><th class=\"n\">Running</th></tr></thead><tbody>",
        chokaq_core::MAX_BUSIEST_KEYS
    );
    if qs.busiest_keys.is_empty() {
        s.push_str("<tr><td colspan=\"2\" class=\"muted\">No keyed job is running.</td></tr>");
    }
    for k in &qs.busiest_keys {
        let at_cap = key_cap.is_some_and(|c| k.running >= u64::from(c));
        let _ = write!(
            s,
            "<tr{}><td class=\"mono\" data-col=\"key\">{}</td><td class=\"n\" data-col=\"running\">{}{}</td></tr>",
            if at_cap { " class=\"warn\"" } else { "" },
            esc(&k.key),
            num(k.running),
            if at_cap { " <span class=\"badge warn\">at cap</span>" } else { "" }
        );
    }
    s.push_str("</tbody></table>");
    s
}

pub async fn api_queue(
    State(st): State<Shared>,
    Extension(ctx): Extension<Ctx>,
    Path(path): Path<HashMap<String, String>>,
) -> Res {
    let q = queue_name(&ctx, &own(&path, "queue"))?;
    let settings = st.backend.queue_settings(&q).await.map_err(|e| backend_fail(&ctx, e))?;
    let (qs, taken_at) = queue_stats(&st, &ctx, &q).await?;
    let tp = ThroughputParams { window: Duration::from_secs(3600), queue: Some(q.clone()) };
    let throughput = optional(st.backend.throughput(&tp).await).map_err(|e| backend_fail(&ctx, e))?;
    Ok(Json(json!({ "settings": settings, "stats": qs, "taken_at": taken_at, "throughput": throughput }))
        .into_response())
}

/// The route's own path parameter `name`: a router nested under a path parameter
/// (`nest("/t/{tenant}", ...)`) also hands the outer ones to `Path`, so a handler picks its own
/// by name instead of extracting a fixed-size tuple (issue 40, L3).
fn own(path: &HashMap<String, String>, name: &str) -> String {
    path.get(name).cloned().unwrap_or_default()
}

fn parse_form(body: &Bytes) -> Vec<(String, String)> {
    form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

fn field<'a>(f: &'a [(String, String)], name: &str) -> Option<&'a str> {
    f.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn confirmed(f: &[(String, String)]) -> bool {
    field(f, "confirm") == Some("yes")
}

/// The page that asks, without JavaScript, whether to go on.
fn confirm_page(ctx: &Ctx, action: &str, question: &str, fields: &[(String, String)], back: &str) -> Response {
    let mut keep: Vec<(&str, &str)> =
        fields.iter().filter(|(k, _)| k != "csrf" && k != "confirm").map(|(k, v)| (k.as_str(), v.as_str())).collect();
    keep.push(("confirm", "yes"));
    let body = format!(
        "<h1>Please confirm</h1><p class=\"warn-box\">{}</p><div class=\"actions\">{}<a class=\"btn\" href=\"{}{}\">Go back</a></div>",
        esc(question),
        form(ctx, action, &keep, &button("Yes, do it", "danger", "confirm"), None),
        esc(&ctx.base),
        esc(back)
    );
    (StatusCode::OK, Html(page(ctx, "Confirm", Nav::None, "confirm", &body))).into_response()
}

pub async fn queue_action(
    State(st): State<Shared>,
    Extension(ctx): Extension<Ctx>,
    Path(path): Path<HashMap<String, String>>,
    body: Bytes,
) -> Res {
    let (name, action) = (own(&path, "queue"), own(&path, "action"));
    let q = queue_name(&ctx, &name)?;
    let f = parse_form(&body);
    let control = match action.as_str() {
        "pause" => QueueControl::Pause,
        "resume" => QueueControl::Resume,
        "activate" => QueueControl::Activate,
        "deactivate" => QueueControl::Deactivate,
        "cap" => {
            let raw = field(&f, "max_workers").unwrap_or("").trim();
            if raw.is_empty() {
                QueueControl::SetMaxWorkers(None)
            } else {
                let n: u32 =
                    raw.parse().map_err(|_| bad(&ctx, format!("max_workers must be a whole number, got {raw:?}")))?;
                QueueControl::SetMaxWorkers(Some(n))
            }
        }
        "key-cap" => {
            let raw = field(&f, "key_max_workers").unwrap_or("").trim();
            if raw.is_empty() {
                QueueControl::SetKeyMaxWorkers(None)
            } else {
                let n: u32 = raw
                    .parse()
                    .map_err(|_| bad(&ctx, format!("key_max_workers must be a whole number, got {raw:?}")))?;
                QueueControl::SetKeyMaxWorkers(Some(n))
            }
        }
        "rate-limit" => {
            let raw = field(&f, "rate").unwrap_or("").trim();
            let by_key = matches!(field(&f, "by_key"), Some("on" | "true" | "1"));
            if raw.is_empty() || raw.eq_ignore_ascii_case("none") {
                QueueControl::SetRateLimit(None)
            } else {
                QueueControl::SetRateLimit(Some(RateLimit::parse(raw, by_key).map_err(|e| backend_fail(&ctx, e))?))
            }
        }
        _ => return Err(fail(&ctx, StatusCode::NOT_FOUND, "no such queue action")),
    };
    let settings = st.backend.control_queue(&q, control).await.map_err(|e| backend_fail(&ctx, e))?;
    if ctx.wants_json {
        return Ok(Json(json!({ "ok": true, "settings": settings })).into_response());
    }
    Ok(Redirect::to(&format!("{}/queues/{}?done={action}", ctx.base, enc(q.as_str()))).into_response())
}

/// The message for `?done=` (a fixed table: nothing from the query is echoed).
fn flash(p: &Params) -> String {
    let n = p.get("n").and_then(|n| n.parse::<u64>().ok());
    let msg = match p.get("done").map(String::as_str) {
        Some("pause") => "Queue paused.".to_string(),
        Some("schedule-pause") => "Schedule paused: its ticks pass without a job until it is resumed.".to_string(),
        Some("schedule-resume") => "Schedule resumed from its next tick.".to_string(),
        Some("resume") => "Queue resumed.".to_string(),
        Some("activate") => "Queue activated.".to_string(),
        Some("deactivate") => "Queue deactivated.".to_string(),
        Some("cap") => "Cap set.".to_string(),
        Some("key-cap") => "Key cap set.".to_string(),
        Some("rate-limit") => "Rate limit set.".to_string(),
        Some("cancelled") => "Job cancelled.".to_string(),
        Some("requested") => "Cancel requested: the worker stops it at its next heartbeat.".to_string(),
        Some("notlive") => "The job is no longer live: nothing to cancel.".to_string(),
        Some("requeued") => match n {
            Some(n) => format!("{} dead letter{} retried.", num(n), if n == 1 { "" } else { "s" }),
            None => "Job retried: it is pending again.".to_string(),
        },
        Some("purged") => format!("{} dead letters purged.", num(n.unwrap_or(0))),
        _ => return String::new(),
    };
    format!("<p class=\"flash\" id=\"flash\">{}</p>", esc(&msg))
}

// ---- jobs -------------------------------------------------------------------------------

fn parse_time(ctx: &Ctx, name: &str, v: &str) -> Result<Option<Timestamp>, Response> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(Some(t.with_timezone(&chrono::Utc)));
    }
    for fmt in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(v, fmt) {
            return Ok(Some(t.and_utc()));
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).map(|t| t.and_utc()));
    }
    Err(bad(ctx, format!("{name}: not a time (use RFC 3339 or YYYY-MM-DDTHH:MM, UTC): {v:?}")))
}

/// `ListJobsParams` from the query string; `table` forced for the dead-letter page.
fn list_params(ctx: &Ctx, p: &Params, table: Option<JobTable>) -> Result<ListJobsParams, Response> {
    let get = |k: &str| p.get(k).map(|s| s.trim()).filter(|s| !s.is_empty());
    let table = match table {
        Some(t) => t,
        None => match get("table") {
            None | Some("hot") => JobTable::Hot,
            Some("archive") => JobTable::Archive,
            Some("dead") => JobTable::DeadLetter,
            Some(o) => return Err(bad(ctx, format!("table must be hot, archive or dead, got {o:?}"))),
        },
    };
    let mut l = ListJobsParams::new(table);
    l.without_payloads = true;
    l.limit = 50;
    if let Some(q) = get("queue") {
        l.queue = Some(queue_name(ctx, q)?);
    }
    if let Some(s) = get("status") {
        if table != JobTable::Hot {
            return Err(bad(ctx, "status filters the live (hot) table only"));
        }
        l.status = Some(match s {
            "pending" => JobStatus::Pending,
            "fetched" => JobStatus::Fetched,
            "processing" => JobStatus::Processing,
            o => return Err(bad(ctx, format!("status must be pending, fetched or processing, got {o:?}"))),
        });
    }
    if let Some(k) = get("kind") {
        l.kind = Some(JobKind::new(k).map_err(|e| backend_fail(ctx, e))?);
    }
    l.tag = get("tag").map(str::to_string);
    l.created_from = parse_time(ctx, "from", get("from").unwrap_or(""))?;
    l.created_to = parse_time(ctx, "to", get("to").unwrap_or(""))?;
    if let Some(a) = get("after") {
        l.after = Some(job_id(ctx, a)?);
    }
    if let Some(n) = get("limit") {
        l.limit =
            n.parse().ok().filter(|n| (1..=1000).contains(n)).ok_or_else(|| bad(ctx, "limit must be 1 to 1000"))?;
    }
    Ok(l)
}

fn table_name(t: JobTable) -> &'static str {
    match t {
        JobTable::Hot => "hot",
        JobTable::Archive => "archive",
        JobTable::DeadLetter => "dead",
    }
}

fn status_name(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Pending => "pending",
        JobStatus::Fetched => "fetched",
        JobStatus::Processing => "processing",
    }
}

fn location_badge(l: JobLocation) -> String {
    match l {
        JobLocation::Hot(s) => format!("<span class=\"badge s-{0}\">{0}</span>", status_name(s)),
        JobLocation::Archived => "<span class=\"badge s-archived\">archived</span>".into(),
        JobLocation::Dead(r) => format!("<span class=\"badge bad\">dead: {}</span>", esc(r.as_str())),
    }
}

/// The query string of a listing (for pagination links), without `after`.
fn list_query(l: &ListJobsParams, with_table: bool) -> String {
    let mut parts: Vec<String> = Vec::new();
    if with_table {
        parts.push(format!("table={}", table_name(l.table)));
    }
    if let Some(q) = &l.queue {
        parts.push(format!("queue={}", enc(q.as_str())));
    }
    if let Some(s) = l.status {
        parts.push(format!("status={}", status_name(s)));
    }
    if let Some(k) = &l.kind {
        parts.push(format!("kind={}", enc(k.as_str())));
    }
    if let Some(t) = &l.tag {
        parts.push(format!("tag={}", enc(t)));
    }
    if let Some(t) = l.created_from {
        parts.push(format!("from={}", enc(&t.to_rfc3339())));
    }
    if let Some(t) = l.created_to {
        parts.push(format!("to={}", enc(&t.to_rfc3339())));
    }
    if l.limit != 50 {
        parts.push(format!("limit={}", l.limit));
    }
    parts.join("&amp;")
}

fn filter_form(ctx: &Ctx, l: &ListJobsParams, action: &str, with_table: bool) -> String {
    let mut s =
        format!("<form method=\"get\" action=\"{}{}\" class=\"filters\" id=\"filters\">", esc(&ctx.base), action);
    if with_table {
        s.push_str("<label>Table <select name=\"table\">");
        for (v, label) in [("hot", "Live"), ("archive", "Archive"), ("dead", "Dead letters")] {
            let sel = if table_name(l.table) == v { " selected" } else { "" };
            let _ = write!(s, "<option value=\"{v}\"{sel}>{label}</option>");
        }
        s.push_str("</select></label><label>Status <select name=\"status\"><option value=\"\">any</option>");
        for st in [JobStatus::Pending, JobStatus::Fetched, JobStatus::Processing] {
            let sel = if l.status == Some(st) { " selected" } else { "" };
            let _ = write!(s, "<option value=\"{0}\"{sel}>{0}</option>", status_name(st));
        }
        s.push_str("</select></label>");
    }
    let v = |o: Option<String>| esc(&o.unwrap_or_default());
    let _ = write!(
        s,
        "<label>Queue <input name=\"queue\" value=\"{}\" size=\"12\"></label>\
         <label>Kind <input name=\"kind\" value=\"{}\" size=\"14\"></label>\
         <label>Tag <input name=\"tag\" value=\"{}\" size=\"10\"></label>\
         <label>Created from <input name=\"from\" value=\"{}\" placeholder=\"YYYY-MM-DDTHH:MM\" size=\"18\"></label>\
         <label>to <input name=\"to\" value=\"{}\" placeholder=\"UTC\" size=\"16\"></label>\
         <label>Per page <input name=\"limit\" type=\"number\" min=\"1\" max=\"1000\" value=\"{}\" class=\"num\"></label>\
         <button type=\"submit\" class=\"btn\">Filter</button></form>",
        v(l.queue.as_ref().map(|q| q.to_string())),
        v(l.kind.as_ref().map(|k| k.to_string())),
        v(l.tag.clone()),
        v(l.created_from.map(|t| t.to_rfc3339())),
        v(l.created_to.map(|t| t.to_rfc3339())),
        l.limit
    );
    s
}

fn job_table(ctx: &Ctx, jobs: &[JobRecord], now: Timestamp, checkboxes: bool) -> String {
    let b = esc(&ctx.base);
    let mut s = String::from("<div class=\"scroll\"><table class=\"grid jobs\" id=\"jobs\"><thead><tr>");
    if checkboxes {
        s.push_str("<th><input type=\"checkbox\" id=\"select-all\" title=\"Select all\"></th>");
    }
    s.push_str(
        "<th>Id</th><th>Queue</th><th>Kind</th><th>State</th><th class=\"n\">Attempt</th><th class=\"n\">Prio</th>\
         <th>Created</th><th>Finished / due</th><th>Last error</th></tr></thead><tbody>",
    );
    if jobs.is_empty() {
        let _ = write!(s, "<tr><td colspan=\"{}\" class=\"muted\">No jobs.</td></tr>", if checkboxes { 10 } else { 9 });
    }
    for j in jobs {
        let id = j.id.to_string();
        s.push_str("<tr>");
        if checkboxes {
            let _ = write!(s, "<td><input type=\"checkbox\" name=\"ids\" value=\"{id}\" form=\"retry-form\"></td>");
        }
        let when = j.finished_at.or(j.scheduled_at);
        let err = j.last_error.as_deref().unwrap_or("");
        let short: String = err.chars().take(80).collect();
        let _ = write!(
            s,
            "<td class=\"mono\"><a href=\"{b}/jobs/{id}\" title=\"{id}\">{}</a></td><td><a href=\"{b}/queues/{}\">{}</a></td>\
             <td class=\"mono\">{}</td><td>{}</td><td class=\"n\">{}/{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td>\
             <td class=\"err\" title=\"{}\"><span>{}{}</span></td></tr>",
            id,
            enc(j.queue.as_str()),
            esc(j.queue.as_str()),
            esc(j.kind.as_str()),
            location_badge(j.location),
            j.attempt,
            j.max_attempts,
            j.priority,
            ts_ago(Some(j.created_at), now),
            ts_ago(when, now),
            esc(err),
            esc(&short),
            if err.chars().count() > 80 { "…" } else { "" },
        );
    }
    s.push_str("</tbody></table></div>");
    s
}

/// The pager of a list page, with its position and total (one capped count).
async fn pager(
    st: &Shared,
    ctx: &Ctx,
    path: &str,
    p: &Params,
    l: &ListJobsParams,
    page: &JobPage,
    with_table: bool,
) -> Result<String, Response> {
    let total = paging::total(&*st.backend, l).await.map_err(|e| backend_fail(ctx, e))?;
    Ok(paging::pager(ctx, path, &list_query(l, with_table), l, page, &paging::Trail::parse(p), total))
}

pub async fn jobs(State(st): State<Shared>, Extension(ctx): Extension<Ctx>, Query(p): Query<Params>) -> Res {
    let l = list_params(&ctx, &p, None)?;
    let page_ = st.backend.list_jobs(&l).await.map_err(|e| backend_fail(&ctx, e))?;
    let now = chrono::Utc::now();
    let title = match (l.table, l.status) {
        (JobTable::Hot, Some(s)) => format!("Jobs: {}", status_name(s)),
        (JobTable::Hot, None) => "Jobs: live".into(),
        (JobTable::Archive, _) => "Jobs: archive".into(),
        (JobTable::DeadLetter, _) => "Jobs: dead letters".into(),
    };
    let mut s = format!("<div class=\"head\"><h1>{}</h1></div>", esc(&title));
    s.push_str(&filter_form(&ctx, &l, "/jobs", true));
    s.push_str(&job_table(&ctx, &page_.jobs, now, false));
    s.push_str(&pager(&st, &ctx, "/jobs", &p, &l, &page_, true).await?);
    Ok(Html(page(&ctx, &title, Nav::Jobs, "jobs", &s)).into_response())
}

pub async fn api_jobs(State(st): State<Shared>, Extension(ctx): Extension<Ctx>, Query(p): Query<Params>) -> Res {
    let l = list_params(&ctx, &p, None)?;
    let page_ = st.backend.list_jobs(&l).await.map_err(|e| backend_fail(&ctx, e))?;
    Ok(Json(json!({ "jobs": page_.jobs, "next": page_.next })).into_response())
}

pub async fn job(
    State(st): State<Shared>,
    Extension(ctx): Extension<Ctx>,
    Path(path): Path<HashMap<String, String>>,
    Query(p): Query<Params>,
) -> Res {
    let id = job_id(&ctx, &own(&path, "id"))?;
    let Some(j) = st.backend.get_job(id).await.map_err(|e| backend_fail(&ctx, e))? else {
        return Err(fail(&ctx, StatusCode::NOT_FOUND, &format!("no job with id {id}")));
    };
    let now = chrono::Utc::now();
    let b = esc(&ctx.base);
    let mut s = format!(
        "<div class=\"head\"><h1>Job <span class=\"mono\">{id}</span></h1><span id=\"job-state\">{}</span></div>{}",
        location_badge(j.location),
        flash(&p)
    );
    if !ctx.read_only {
        s.push_str("<div class=\"actions\" id=\"job-actions\">");
        match j.location {
            JobLocation::Hot(_) => s.push_str(&form(
                &ctx,
                &format!("/jobs/{id}/cancel"),
                &[],
                &button("Cancel job", "danger", "cancel"),
                Some("Cancel this job? A cancel is final: the job never runs again."),
            )),
            JobLocation::Dead(_) => {
                s.push_str(&form(&ctx, &format!("/jobs/{id}/retry"), &[], &button("Retry", "primary", "retry"), None))
            }
            JobLocation::Archived => {}
        }
        s.push_str("</div>");
    }
    let opt = |o: Option<String>| o.map(|v| esc(&v)).unwrap_or_else(html::empty);
    let _ = write!(
        s,
        "<div class=\"cols\"><section><h2>Job</h2><table class=\"kv\" id=\"job-fields\">\
         <tr><th>Queue</th><td><a href=\"{b}/queues/{}\">{}</a></td></tr><tr><th>Kind</th><td class=\"mono\">{}</td></tr>\
         <tr><th>Priority</th><td>{}</td></tr><tr><th>Attempts</th><td id=\"job-attempts\">{} of {}</td></tr>\
         <tr><th>Tags</th><td>{}</td></tr><tr><th>Concurrency key</th><td class=\"mono\" id=\"job-key\">{}</td></tr>\
         <tr><th>Idempotency key</th><td class=\"mono\">{}</td></tr>\
         <tr><th>Created by</th><td>{}</td></tr><tr><th>Cancel requested</th><td>{}</td></tr></table></section>",
        enc(j.queue.as_str()),
        esc(j.queue.as_str()),
        esc(j.kind.as_str()),
        j.priority,
        j.attempt,
        j.max_attempts,
        if j.tags.is_empty() {
            html::empty()
        } else {
            j.tags.iter().map(|t| format!("<span class=\"tag\">{}</span>", esc(t))).collect::<Vec<_>>().join(" ")
        },
        opt(j.concurrency_key.clone()),
        opt(j.idempotency_key.clone()),
        opt(j.created_by.clone()),
        if j.cancel_requested { "yes" } else { "no" },
    );
    let _ = write!(
        s,
        "<section><h2>Lease and times</h2><table class=\"kv\"><tr><th>Lease</th><td class=\"mono\">{}</td></tr>\
         <tr><th>Worker</th><td class=\"mono\">{}</td></tr><tr><th>Created</th><td>{}</td></tr><tr><th>Scheduled</th><td>{}</td></tr>\
         <tr><th>Started</th><td>{}</td></tr><tr><th>Heartbeat</th><td>{}</td></tr><tr><th>Updated</th><td>{}</td></tr>\
         <tr><th>Finished</th><td>{}</td></tr></table></section></div>",
        opt(j.lease.map(|l| l.to_string())),
        opt(j.worker_id.map(|w| w.to_string())),
        ts_ago(Some(j.created_at), now),
        ts_ago(j.scheduled_at, now),
        ts_ago(j.started_at, now),
        ts_ago(j.heartbeat_at, now),
        ts_ago(Some(j.updated_at), now),
        ts_ago(j.finished_at, now),
    );
    if let JobLocation::Dead(reason) = j.location {
        // Every dead letter says why it is one, error text or not.
        let why = match reason {
            DeadReason::Failed => "it failed with no attempt left, or with a fatal error",
            DeadReason::Cancelled => "it was cancelled on purpose (by an operator or its handler); not a failure",
            DeadReason::TimedOut => "its attempt timed out and was not retried",
            DeadReason::Zombie => {
                "its worker stopped heart-beating and the queue's policy (or its attempts) said not to retry"
            }
            DeadReason::Expired => "it expired before it ran",
        };
        let _ = write!(
            s,
            "<h2>Reason</h2><p id=\"dead-reason\"><span class=\"badge {}\">{}</span> {why}.</p>",
            if reason == DeadReason::Cancelled { "" } else { "bad" },
            esc(reason.as_str())
        );
        if j.last_error.is_none() {
            s.push_str("<p class=\"muted\" id=\"last-error\">No error text was recorded.</p>");
        }
    }
    if let Some(e) = &j.last_error {
        let _ = write!(s, "<h2>Last error</h2><pre class=\"error-text\" id=\"last-error\">{}</pre>", esc(e));
    }
    let payload = serde_json::to_string_pretty(&j.payload).unwrap_or_else(|_| "null".into());
    let _ = write!(s, "<h2>Payload</h2><pre class=\"json\" id=\"payload\">{}</pre>", esc(&payload));
    Ok(Html(page(&ctx, &format!("Job {id}"), Nav::None, "job", &s)).into_response())
}

pub async fn api_job(
    State(st): State<Shared>,
    Extension(ctx): Extension<Ctx>,
    Path(path): Path<HashMap<String, String>>,
) -> Res {
    let id = own(&path, "id");
    let id = job_id(&ctx, &id)?;
    match st.backend.get_job(id).await.map_err(|e| backend_fail(&ctx, e))? {
        Some(j) => Ok(Json(j).into_response()),
        None => Err(fail(&ctx, StatusCode::NOT_FOUND, &format!("no job with id {id}"))),
    }
}

pub async fn job_action(
    State(st): State<Shared>,
    Extension(ctx): Extension<Ctx>,
    Path(path): Path<HashMap<String, String>>,
    body: Bytes,
) -> Res {
    let (id, action) = (own(&path, "id"), own(&path, "action"));
    let jid = job_id(&ctx, &id)?;
    let f = parse_form(&body);
    let done = match action.as_str() {
        "cancel" => {
            if !ctx.wants_json && !confirmed(&f) {
                return Ok(confirm_page(
                    &ctx,
                    &format!("/jobs/{jid}/cancel"),
                    &format!("Cancel job {jid}? A cancel is final: the job never runs again."),
                    &f,
                    &format!("/jobs/{jid}"),
                ));
            }
            match st.backend.cancel(jid).await.map_err(|e| backend_fail(&ctx, e))? {
                CancelOutcome::Cancelled => "cancelled",
                CancelOutcome::Requested => "requested",
                CancelOutcome::NotLive => "notlive",
            }
        }
        "retry" => match st.backend.requeue_dead(jid).await.map_err(|e| backend_fail(&ctx, e))? {
            RequeueOutcome::Requeued => "requeued",
            RequeueOutcome::NotFound => {
                return Err(fail(&ctx, StatusCode::NOT_FOUND, &format!("no dead letter with id {jid}")));
            }
        },
        _ => return Err(fail(&ctx, StatusCode::NOT_FOUND, "no such job action")),
    };
    if ctx.wants_json {
        return Ok(Json(json!({ "ok": true, "outcome": done })).into_response());
    }
    Ok(Redirect::to(&format!("{}/jobs/{jid}?done={done}", ctx.base)).into_response())
}

// ---- dead letters -----------------------------------------------------------------------

pub async fn dead(State(st): State<Shared>, Extension(ctx): Extension<Ctx>, Query(p): Query<Params>) -> Res {
    let l = list_params(&ctx, &p, Some(JobTable::DeadLetter))?;
    let page_ = st.backend.list_jobs(&l).await.map_err(|e| backend_fail(&ctx, e))?;
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
    s.push_str(&job_table(&ctx, &page_.jobs, now, !ctx.read_only));
    s.push_str(&pager(&st, &ctx, "/dead", &p, &l, &page_, false).await?);
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
    let ws = optional(st.backend.list_workers().await).map_err(|e| backend_fail(&ctx, e))?;
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

pub async fn api_workers(State(st): State<Shared>, Extension(ctx): Extension<Ctx>) -> Res {
    let ws = optional(st.backend.list_workers().await).map_err(|e| backend_fail(&ctx, e))?;
    Ok(Json(json!({ "available": ws.is_some(), "workers": ws.unwrap_or_default() })).into_response())
}

pub async fn api_csrf(Extension(ctx): Extension<Ctx>) -> Response {
    Json(json!({ "token": ctx.csrf })).into_response()
}

/// The periodic schedules (issue 15): spec, time zone, next and last tick, state; pause and
/// resume one.
pub async fn schedules(State(st): State<Shared>, Extension(ctx): Extension<Ctx>, Query(p): Query<Params>) -> Res {
    let rows = st.backend.list_schedules().await.map_err(|e| backend_fail(&ctx, e))?;
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
             <td>{}</td><td>{}</td><td>{}</td><td>{action}</td></tr>",
            esc(&r.name),
            esc(&r.spec),
            esc(&r.time_zone),
            esc(&r.group),
            ts_ago(r.next_tick, now),
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

pub async fn schedule_action(
    State(st): State<Shared>,
    Extension(ctx): Extension<Ctx>,
    Path(path): Path<HashMap<String, String>>,
) -> Res {
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

pub async fn api_schedules(State(st): State<Shared>, Extension(ctx): Extension<Ctx>) -> Res {
    let rows = st.backend.list_schedules().await.map_err(|e| backend_fail(&ctx, e))?;
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
