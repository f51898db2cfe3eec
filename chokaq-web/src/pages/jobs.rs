//! The job list, a job's page, its JSON and its actions (moved out of pages.rs, no behaviour change).

use super::*;

pub(super) fn parse_time(ctx: &Ctx, name: &str, v: &str) -> Result<Option<Timestamp>, Response> {
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
pub(super) fn list_params(ctx: &Ctx, p: &Params, table: Option<JobTable>) -> Result<ListJobsParams, Response> {
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

pub(super) fn table_name(t: JobTable) -> &'static str {
    match t {
        JobTable::Hot => "hot",
        JobTable::Archive => "archive",
        JobTable::DeadLetter => "dead",
    }
}

pub(super) fn status_name(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Pending => "pending",
        JobStatus::Fetched => "fetched",
        JobStatus::Processing => "processing",
    }
}

pub(super) fn location_badge(l: JobLocation) -> String {
    match l {
        JobLocation::Hot(s) => format!("<span class=\"badge s-{0}\">{0}</span>", status_name(s)),
        JobLocation::Archived => "<span class=\"badge s-archived\">archived</span>".into(),
        JobLocation::Dead(r) => format!("<span class=\"badge bad\">dead: {}</span>", esc(r.as_str())),
    }
}

/// The query string of a listing (for pagination links), without `after`.
pub(super) fn list_query(l: &ListJobsParams, with_table: bool) -> String {
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

pub(super) fn filter_form(ctx: &Ctx, l: &ListJobsParams, action: &str, with_table: bool) -> String {
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
    let v = |o: Option<String>| html::esc_value(&o.unwrap_or_default());
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

pub(super) fn job_table(ctx: &Ctx, jobs: &[JobRecord], now: Timestamp, checkboxes: bool) -> String {
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
pub(super) async fn pager(
    ctx: &Ctx,
    path: &str,
    p: &Params,
    l: &ListJobsParams,
    page: &JobPage,
    with_table: bool,
) -> Result<String, Response> {
    // A tag filter is not counted: counting would read the whole table (tag_scan).
    let total = match l.tag {
        Some(_) => None,
        None => Some(paging::total(&*ctx.backend, l).await.map_err(|e| backend_fail(ctx, e))?),
    };
    Ok(paging::pager(ctx, path, &list_query(l, with_table), l, page, &paging::Trail::parse(p), total))
}

/// What a tag-filtered page says about its scope: how many jobs it searched, and that "Next
/// page" searches on. Empty without a tag filter.
pub(super) fn tag_scope(searched: Option<u64>, page: &JobPage) -> String {
    let Some(n) = searched else { return String::new() };
    let on = if page.next.is_some() {
        " <strong>Next page</strong> searches the following ones."
    } else {
        " That is the end of the list."
    };
    format!(
        "<p class=\"muted\" id=\"tag-scope\">The tag filter searched {} jobs of this list from here (at most {} a page: \
         no index serves tags, so a page never reads more).{on}</p>",
        num(n),
        num(u64::from(tag_scan::TAG_SCAN_ROWS))
    )
}

pub async fn jobs(Extension(ctx): Extension<Ctx>, Query(p): Query<Params>) -> Res {
    let l = list_params(&ctx, &p, None)?;
    let (page_, searched) = tag_scan::list(&*ctx.backend, &l).await.map_err(|e| backend_fail(&ctx, e))?;
    let now = chrono::Utc::now();
    let title = match (l.table, l.status) {
        (JobTable::Hot, Some(s)) => format!("Jobs: {}", status_name(s)),
        (JobTable::Hot, None) => "Jobs: live".into(),
        (JobTable::Archive, _) => "Jobs: archive".into(),
        (JobTable::DeadLetter, _) => "Jobs: dead letters".into(),
    };
    let mut s = format!("<div class=\"head\"><h1>{}</h1></div>", esc(&title));
    s.push_str(&filter_form(&ctx, &l, "/jobs", true));
    s.push_str(&tag_scope(searched, &page_));
    s.push_str(&job_table(&ctx, &page_.jobs, now, false));
    s.push_str(&pager(&ctx, "/jobs", &p, &l, &page_, true).await?);
    Ok(Html(page(&ctx, &title, Nav::Jobs, "jobs", &s)).into_response())
}

pub async fn api_jobs(Extension(ctx): Extension<Ctx>, Query(p): Query<Params>) -> Res {
    let l = list_params(&ctx, &p, None)?;
    let (page_, searched) = tag_scan::list(&*ctx.backend, &l).await.map_err(|e| backend_fail(&ctx, e))?;
    let mut v = json!({ "jobs": page_.jobs, "next": page_.next });
    if let Some(n) = searched {
        v["tag_searched"] = json!(n);
    }
    Ok(Json(v).into_response())
}

pub async fn job(Extension(ctx): Extension<Ctx>, OwnPath(path): OwnPath, Query(p): Query<Params>) -> Res {
    let id = job_id(&ctx, &own(&path, "id"))?;
    let Some(j) = ctx.backend.get_job(id).await.map_err(|e| backend_fail(&ctx, e))? else {
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
    // The unique key the job holds and its settings (docs/unique.md), only when it holds one.
    let unique = match ctx.backend.unique_of(id).await.map_err(|e| backend_fail(&ctx, e))? {
        Some(u) => format!(
            "<tr><th>Unique key</th><td class=\"mono\" id=\"job-unique-key\">{}</td></tr>\
             <tr><th>Unique settings</th><td id=\"job-unique\">{}{}</td></tr>",
            esc(&u.key),
            esc(&u.opts.to_string()),
            u.expires_at.map(|t| format!("; period ends {}", ts_ago(Some(t), now))).unwrap_or_default()
        ),
        None => String::new(),
    };
    let _ = write!(
        s,
        "<div class=\"cols\"><section><h2>Job</h2><table class=\"kv\" id=\"job-fields\">\
         <tr><th>Queue</th><td><a href=\"{b}/queues/{}\">{}</a></td></tr><tr><th>Kind</th><td class=\"mono\">{}</td></tr>\
         <tr><th>Priority</th><td>{}</td></tr><tr><th>Attempts</th><td id=\"job-attempts\">{} of {}</td></tr>\
         <tr><th>Tags</th><td>{}</td></tr><tr><th>Concurrency key</th><td class=\"mono\" id=\"job-key\">{}</td></tr>\
         <tr><th>Idempotency key</th><td class=\"mono\">{}</td></tr>{unique}\
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
    // What the handler recorded (docs/outputs.md), escaped like the payload.
    match ctx.backend.get_output(id).await.map_err(|e| backend_fail(&ctx, e))? {
        Some(o) => {
            let text = serde_json::to_string_pretty(&o).unwrap_or_else(|_| "null".into());
            let _ = write!(s, "<h2>Output</h2><pre class=\"json\" id=\"output\">{}</pre>", esc(&text));
        }
        None => s.push_str("<h2>Output</h2><p class=\"muted\" id=\"output\">No output was recorded.</p>"),
    }
    Ok(Html(page(&ctx, &format!("Job {id}"), Nav::None, "job", &s)).into_response())
}

pub async fn api_job(Extension(ctx): Extension<Ctx>, OwnPath(path): OwnPath) -> Res {
    let id = own(&path, "id");
    let id = job_id(&ctx, &id)?;
    match ctx.backend.get_job(id).await.map_err(|e| backend_fail(&ctx, e))? {
        Some(j) => {
            // The job's fields, and `output`: what its handler recorded (docs/outputs.md), or null.
            let output = ctx.backend.get_output(id).await.map_err(|e| backend_fail(&ctx, e))?;
            let mut v = serde_json::to_value(&j)
                .map_err(|e| fail(&ctx, StatusCode::INTERNAL_SERVER_ERROR, &format!("job {id}: {e}")))?;
            if let Some(o) = v.as_object_mut() {
                o.insert("output".into(), output.unwrap_or(serde_json::Value::Null));
            }
            Ok(Json(v).into_response())
        }
        None => Err(fail(&ctx, StatusCode::NOT_FOUND, &format!("no job with id {id}"))),
    }
}

pub async fn job_action(
    State(st): State<Shared>,
    Extension(ctx): Extension<Ctx>,
    OwnPath(path): OwnPath,
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
