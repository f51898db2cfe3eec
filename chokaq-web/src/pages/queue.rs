//! The queue page, its JSON and its actions (moved out of pages.rs, no behaviour change).

use super::*;

pub(super) async fn queue_stats(ctx: &Ctx, q: &QueueName) -> Result<(QueueStats, Option<Timestamp>), Response> {
    let snap = ctx.backend.stats().await.map_err(|e| backend_fail(ctx, e))?;
    let qs =
        snap.queue(q.as_str()).cloned().unwrap_or_else(|| QueueStats { queue: q.to_string(), ..Default::default() });
    Ok((qs, snap.taken_at))
}

pub async fn queue(
    State(st): State<Shared>,
    Extension(ctx): Extension<Ctx>,
    OwnPath(path): OwnPath,
    Query(p): Query<Params>,
) -> Res {
    let q = queue_name(&ctx, &own(&path, "queue"))?;
    let settings = ctx.backend.queue_settings(&q).await.map_err(|e| backend_fail(&ctx, e))?;
    let (qs, taken_at) = queue_stats(&ctx, &q).await?;
    let now = taken_at.unwrap_or_else(chrono::Utc::now);
    let tp = ThroughputParams { window: Duration::from_secs(3600), queue: Some(q.clone()) };
    let throughput = optional(ctx.backend.throughput(&tp).await).map_err(|e| backend_fail(&ctx, e))?;
    let mut list = ListJobsParams::new(JobTable::Hot);
    list.queue = Some(q.clone());
    list.limit = 20;
    list.without_payloads = true;
    let jobs = ctx.backend.list_jobs(&list).await.map_err(|e| backend_fail(&ctx, e))?;

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
pub(super) fn busiest_keys(qs: &QueueStats, key_cap: Option<u32>) -> String {
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

pub async fn api_queue(Extension(ctx): Extension<Ctx>, OwnPath(path): OwnPath) -> Res {
    let q = queue_name(&ctx, &own(&path, "queue"))?;
    let settings = ctx.backend.queue_settings(&q).await.map_err(|e| backend_fail(&ctx, e))?;
    let (qs, taken_at) = queue_stats(&ctx, &q).await?;
    let tp = ThroughputParams { window: Duration::from_secs(3600), queue: Some(q.clone()) };
    let throughput = optional(ctx.backend.throughput(&tp).await).map_err(|e| backend_fail(&ctx, e))?;
    Ok(Json(json!({ "settings": settings, "stats": qs, "taken_at": taken_at, "throughput": throughput }))
        .into_response())
}

/// The route's own path parameter `name`: a router nested under a path parameter
/// (`nest("/t/{tenant}", ...)`) also hands the outer ones to `Path`, so a handler picks its own
/// by name instead of extracting a fixed-size tuple (issue 40, L3).
pub(super) fn own(path: &HashMap<String, String>, name: &str) -> String {
    path.get(name).cloned().unwrap_or_default()
}

/// The path parameters, or a 400 as the client asked for it (JSON under `/api/`): a
/// parameter that is not UTF-8 once decoded (`/api/queues/%FF`) was axum's plain-text
/// rejection (issue 40).
pub struct OwnPath(pub HashMap<String, String>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for OwnPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Response> {
        match Path::<HashMap<String, String>>::from_request_parts(parts, state).await {
            Ok(Path(p)) => Ok(OwnPath(p)),
            Err(e) => {
                let msg = format!("bad path: {}", e.body_text());
                Err(match parts.extensions.get::<Ctx>() {
                    Some(ctx) => fail(ctx, StatusCode::BAD_REQUEST, &msg),
                    None => e.into_response(),
                })
            }
        }
    }
}

pub(super) fn parse_form(body: &Bytes) -> Vec<(String, String)> {
    form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

pub(super) fn field<'a>(f: &'a [(String, String)], name: &str) -> Option<&'a str> {
    f.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

pub(super) fn confirmed(f: &[(String, String)]) -> bool {
    field(f, "confirm") == Some("yes")
}

/// The page that asks, without JavaScript, whether to go on.
pub(super) fn confirm_page(
    ctx: &Ctx,
    action: &str,
    question: &str,
    fields: &[(String, String)],
    back: &str,
) -> Response {
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
    OwnPath(path): OwnPath,
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
            // Only what the checkbox sends, or its spelled-out forms: `by_key=yes` was read as
            // "not per key" and set a queue-wide limit (issue 40).
            let by_key = match field(&f, "by_key").map(str::trim) {
                None | Some("" | "off" | "false" | "0") => false,
                Some("on" | "true" | "1") => true,
                Some(o) => return Err(bad(&ctx, format!("by_key must be on or off, got {o:?}"))),
            };
            if raw.eq_ignore_ascii_case("none") && by_key {
                return Err(bad(
                    &ctx,
                    "by_key needs a limit, not none: none (or an empty rate) removes the limit, per key or not",
                ));
            }
            if raw.is_empty() || raw.eq_ignore_ascii_case("none") {
                QueueControl::SetRateLimit(None)
            } else {
                QueueControl::SetRateLimit(Some(RateLimit::parse(raw, by_key).map_err(|e| backend_fail(&ctx, e))?))
            }
        }
        _ => return Err(fail(&ctx, StatusCode::NOT_FOUND, "no such queue action")),
    };
    // A queue with no job and no settings is most likely a typo: as the CLI's --create, its
    // settings are written only when the request says so (issue 40).
    if field(&f, "create") != Some("yes") && !queue_exists(&ctx, &q).await.map_err(|e| backend_fail(&ctx, e))? {
        if ctx.wants_json {
            return Err(fail(
                &ctx,
                StatusCode::NOT_FOUND,
                &format!("no queue {q}: it has no job and no settings; send create=yes to set it anyway"),
            ));
        }
        let mut keep = f.clone();
        keep.push(("create".into(), "yes".into()));
        return Ok(confirm_page(
            &ctx,
            &format!("/queues/{}/{}", enc(q.as_str()), enc(&action)),
            &format!("Queue {q} has no job and no settings. Create its settings anyway?"),
            &keep,
            "/",
        ));
    }
    // A key cap of 0 lets no job with a concurrency key start (as a cap of 0 stops the
    // queue): accepted, and said (issue 40).
    let note = matches!(control, QueueControl::SetKeyMaxWorkers(Some(0))).then_some(KEY_CAP_0);
    let settings = st.backend.control_queue(&q, control).await.map_err(|e| backend_fail(&ctx, e))?;
    if ctx.wants_json {
        let mut v = json!({ "ok": true, "settings": settings });
        if let Some(n) = note {
            v["note"] = json!(n);
        }
        return Ok(Json(v).into_response());
    }
    let done = if note.is_some() { "key-cap-0" } else { action.as_str() };
    Ok(Redirect::to(&format!("{}/queues/{}?done={done}", ctx.base, enc(q.as_str()))).into_response())
}

/// What a key cap of 0 does.
const KEY_CAP_0: &str = "Key cap 0: no job with a concurrency key starts in this queue until the cap is raised \
                         or cleared (jobs without a key still run). Clear the field for no per-key cap.";

/// Whether a queue is known: it has a settings row, or a job in any table (three one-row
/// reads, whatever the size of the tables); the CLI's rule for `--create`.
async fn queue_exists(ctx: &Ctx, q: &QueueName) -> chokaq_core::Result<bool> {
    if ctx.backend.queue_settings(q).await?.updated_at.is_some() {
        return Ok(true);
    }
    for table in [JobTable::Hot, JobTable::DeadLetter, JobTable::Archive] {
        let mut p = ListJobsParams::new(table);
        p.queue = Some(q.clone());
        p.limit = 1;
        p.without_payloads = true;
        if !ctx.backend.list_jobs(&p).await?.jobs.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The message for `?done=` (a fixed table: nothing from the query is echoed).
pub(super) fn flash(p: &Params) -> String {
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
        Some("key-cap-0") => KEY_CAP_0.to_string(),
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
