//! tests/api.rs: what the pages show: counts, snapshots, escaping, filters and paging, workers, schedules, errors.

use super::*;

/// The overview's counts, exact, in JSON and HTML; throughput when the backend has it.
pub(crate) async fn overview_counts(b: Arc<dyn Backend>) -> TestResult {
    enqueue(&b, "web-o1", "web.ok.v1", 4).await?;
    make_archived(&b, "web-o2", 3).await?;
    make_dead(&b, "web-o2", 2, "bad").await?;
    let (_, processing) = {
        enqueue(&b, "web-o3", "web.ok.v1", 2).await?;
        claim(&b, "web-o3", 1).await?
    };
    ensure_eq!(processing.len(), 1, "claimed");
    b.pause(&q("web-o3")).await.map_err(err)?;
    let s = session(&b).await?;
    let d = s.get("/api/overview").await?.json()?;
    let t = &d["totals"];
    ensure_eq!(
        (t["pending"].as_u64(), t["processing"].as_u64(), t["archived"].as_u64(), t["dead"].as_u64()),
        (Some(5), Some(1), Some(3), Some(2)),
        "totals {t}"
    );
    let qs = d["queues"].as_array().ok_or("queues")?;
    let names: Vec<&str> = qs.iter().filter_map(|q| q["queue"].as_str()).collect();
    ensure_eq!(names, vec!["web-o1", "web-o2", "web-o3"], "queues");
    ensure_eq!(qs[0]["pending"].as_u64(), Some(4), "web-o1 pending");
    ensure_eq!((qs[1]["archived"].as_u64(), qs[1]["dead"].as_u64()), (Some(3), Some(2)), "web-o2");
    ensure_eq!((qs[2]["is_paused"].as_bool(), qs[2]["processing"].as_u64()), (Some(true), Some(1)), "web-o3");
    match b.throughput(&chokaq_core::ThroughputParams::last_hour()).await {
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            ensure_eq!(d["throughput_available"].as_bool(), Some(false), "throughput flag");
            ensure!(qs[1]["finished_last_hour"].is_null(), "no throughput figure");
        }
        Err(e) => return Err(e.to_string()),
        Ok(_) => {
            ensure_eq!(d["throughput_available"].as_bool(), Some(true), "throughput flag");
            ensure_eq!(qs[1]["finished_last_hour"].as_u64(), Some(3), "web-o2 finished in the last hour");
            ensure_eq!(qs[0]["finished_last_hour"].as_u64(), Some(0), "web-o1 finished in the last hour");
        }
    }
    let html = s.get("").await?.body;
    for needle in [
        "id=\"total-pending\">5<",
        "id=\"total-processing\">1<",
        "id=\"total-archived\">3<",
        "id=\"total-dead\">2<",
        "<tr data-queue=\"web-o3\">",
        "data-state=\"paused\"",
        "web-o2</a>: <a href=\"/ops/jobs/dead?queue=web-o2\">2 failed dead letters</a>",
    ] {
        ensure!(html.contains(needle), "overview lacks {needle}");
    }
    if d["throughput_available"].as_bool() == Some(true) {
        // The chart: 3 done and 2 failed in the last hour, every queue and web-o2's own page.
        ensure!(
            html.contains("id=\"chart-total\" data-done=\"3\" data-failed=\"2\" data-retried=\"0\""),
            "total chart"
        );
        let qp = s.get("/queues/web-o2").await?.body;
        ensure!(qp.contains("id=\"chart-queue\" data-done=\"3\" data-failed=\"2\""), "queue chart");
        ensure!(qp.contains("id=\"count-dead\">2<") && qp.contains("id=\"count-cancelled\">0<"), "queue counts");
    }
    let frag = s.get("?fragment=live").await?.body;
    ensure!(
        frag.starts_with("<div class=\"cards\">") && !frag.contains("<html"),
        "fragment: {}",
        &frag[..frag.len().min(200)]
    );
    Ok(())
}

/// Issue 26, items 9 and 11: a deliberate cancel is counted apart and raises no dead-letter
/// alarm (a failure does); a paused queue with no job is listed, with its state.
pub(crate) async fn cancels_and_empty_queues(b: Arc<dyn Backend>) -> TestResult {
    let id = enqueue(&b, "web-c1", "web.ok.v1", 1).await?[0];
    ensure_eq!(b.cancel(id).await.map_err(err)?, chokaq_core::CancelOutcome::Cancelled, "cancel");
    b.pause(&q("web-p1")).await.map_err(err)?;
    let s = session(&b).await?;
    let html = s.get("").await?.body;
    ensure!(!html.contains("class=\"card bad\" href=\"/ops/jobs/dead\""), "a cancel raised the dead-letter alarm");
    for needle in
        ["id=\"total-dead\">0<", "id=\"total-cancelled\">1<", "<tr data-queue=\"web-p1\">", "web-p1</a>: paused</li>"]
    {
        ensure!(html.contains(needle), "overview lacks {needle}");
    }
    let d = s.get("/api/overview").await?.json()?;
    let t = &d["totals"];
    ensure_eq!(
        (t["dead"].as_u64(), t["cancelled"].as_u64(), t["failed"].as_u64()),
        (Some(1), Some(1), Some(0)),
        "totals"
    );
    let p1 = d["queues"].as_array().and_then(|a| a.iter().find(|q| q["queue"] == "web-p1").cloned()).ok_or("web-p1")?;
    ensure_eq!((p1["is_paused"].as_bool(), p1["controlled"].as_bool()), (Some(true), Some(true)), "web-p1 {p1}");
    // Every dead letter has a reason section, error text or not (issue 26, item 13).
    let jp = s.get(&format!("/jobs/{id}")).await?.body;
    ensure!(
        jp.contains("<p id=\"dead-reason\"><span class=\"badge \">cancelled</span> it was cancelled"),
        "reason: {jp}"
    );
    make_dead(&b, "web-c1", 1, "boom").await?;
    let html = s.get("").await?.body;
    ensure!(html.contains("class=\"card bad\" href=\"/ops/jobs/dead\""), "a failure raised no alarm");
    ensure!(html.contains("id=\"total-dead\">1<"), "failed dead letters after a failure");
    Ok(())
}

/// User data (payload, error, tags, key, created_by) is escaped on every page.
pub(crate) async fn user_data_is_escaped(b: Arc<dyn Backend>) -> TestResult {
    let evil = "<script>alert('x')</script>";
    let job = NewJob::build("web-x", "web.ok.v1")
        .unwrap()
        .json(serde_json::json!({ "html": evil, "attr": "\"><img src=x onerror=alert(1)>" }))
        .tag("<b>tag</b>")
        .idempotency_key("<i>key</i>")
        .created_by("<u>me</u>");
    let live = b.enqueue_many(vec![job]).await.map_err(err)?[0].id;
    let dead = make_dead(&b, "web-x2", 1, evil).await?[0];
    let s = session(&b).await?;
    for p in [
        format!("/jobs/{live}"),
        format!("/jobs/{dead}"),
        "/dead".into(),
        "/jobs".into(),
        "/jobs?table=dead".into(),
        "/queues/web-x".into(),
    ] {
        let body = s.get(&p).await?.body;
        for bad in ["<script>alert", "<img src=x", "<b>tag", "<i>key", "<u>me"] {
            ensure!(!body.contains(bad), "{p} holds unescaped {bad}");
        }
        ensure_eq!(body.matches("<script").count(), 1, "{p}: only the dashboard's script tag");
    }
    let page = s.get(&format!("/jobs/{live}")).await?.body;
    ensure!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), "escaped payload");
    ensure!(
        page.contains("&lt;b&gt;tag&lt;/b&gt;") && page.contains("&lt;u&gt;me&lt;/u&gt;"),
        "escaped tag / created_by"
    );
    ensure!(page.contains("&quot;html&quot;: &quot;"), "formatted JSON (pretty, escaped)");
    let dead_page = s.get(&format!("/jobs/{dead}")).await?.body;
    ensure!(dead_page.contains("id=\"last-error\">&lt;script&gt;alert"), "escaped error");
    // An error message echoing input is escaped too.
    let r = s.get("/jobs?kind=%3Cscript%3E").await?;
    ensure_eq!(r.status, StatusCode::OK, "a kind with < is a valid filter: {}", r.body);
    let r = s.get("/jobs?table=%3Cscript%3Ex").await?;
    ensure_eq!(r.status, StatusCode::BAD_REQUEST, "bad table");
    ensure!(!r.body.contains("<script>x") && r.body.contains("&lt;script&gt;x"), "escaped error message");
    Ok(())
}

/// Filters of `list_jobs` and keyset paging, through the JSON API and the HTML pager.
pub(crate) async fn filters_and_paging(b: Arc<dyn Backend>) -> TestResult {
    let mut ids = Vec::new();
    for i in 0..7 {
        let mut j = NewJob::build("web-p", if i % 2 == 0 { "web.even.v1" } else { "web.odd.v1" }).unwrap();
        if i < 3 {
            j = j.tag("first3");
        }
        ids.push(b.enqueue_many(vec![j]).await.map_err(err)?[0].id);
    }
    enqueue(&b, "web-other", "web.even.v1", 2).await?;
    let s = session(&b).await?;
    let page_ids = |v: &Value| -> Vec<String> {
        v["jobs"]
            .as_array()
            .map(|a| a.iter().filter_map(|j| j["id"].as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let want = |r: std::ops::Range<usize>| -> Vec<String> { ids[r].iter().map(|i| i.to_string()).collect() };
    // Keyset paging, three a page.
    let p1 = s.get("/api/jobs?queue=web-p&limit=3").await?.json()?;
    ensure_eq!(page_ids(&p1), want(0..3), "page 1");
    let n1 = p1["next"].as_str().ok_or("next 1")?.to_string();
    let p2 = s.get(&format!("/api/jobs?queue=web-p&limit=3&after={n1}")).await?.json()?;
    ensure_eq!(page_ids(&p2), want(3..6), "page 2");
    let n2 = p2["next"].as_str().ok_or("next 2")?.to_string();
    let p3 = s.get(&format!("/api/jobs?queue=web-p&limit=3&after={n2}")).await?.json()?;
    ensure_eq!(page_ids(&p3), want(6..7), "page 3");
    ensure!(p3["next"].is_null(), "no next after the last page");
    ensure!(p1["jobs"][0]["payload"].is_null(), "lists carry no payloads");
    // Filters.
    ensure_eq!(page_ids(&s.get("/api/jobs?queue=web-p&kind=web.odd.v1").await?.json()?).len(), 3, "kind");
    ensure_eq!(page_ids(&s.get("/api/jobs?tag=first3").await?.json()?), want(0..3), "tag");
    ensure_eq!(page_ids(&s.get("/api/jobs?kind=web.even.v1").await?.json()?).len(), 6, "kind across queues");
    ensure_eq!(page_ids(&s.get("/api/jobs?status=pending").await?.json()?).len(), 9, "status");
    ensure_eq!(page_ids(&s.get("/api/jobs?status=processing").await?.json()?).len(), 0, "status processing");
    ensure_eq!(page_ids(&s.get("/api/jobs?table=archive").await?.json()?).len(), 0, "archive");
    ensure_eq!(
        page_ids(&s.get("/api/jobs?from=2000-01-01T00:00&to=2999-01-01").await?.json()?).len(),
        9,
        "created range"
    );
    ensure_eq!(page_ids(&s.get("/api/jobs?to=2000-01-01T00:00:00Z").await?.json()?).len(), 0, "created before 2000");
    for bad in [
        "status=running",
        "table=nope",
        "limit=0",
        "limit=1001",
        "after=xyz",
        "queue=bad%20name",
        "from=yesterday",
        "table=archive&status=pending",
    ] {
        let r = s.get(&format!("/api/jobs?{bad}")).await?;
        ensure_eq!(r.status, StatusCode::BAD_REQUEST, "GET /api/jobs?{bad}: {}", r.body);
        ensure!(r.json()?["error"].is_string(), "JSON error for {bad}");
    }
    // The HTML pager keeps the filters, carries the cursor and the trail back, and says where
    // the page is (issue 26, item 13).
    let html = s.get("/jobs?queue=web-p&limit=3").await?.body;
    let link = format!(
        "href=\"/ops/jobs/jobs?table=hot&amp;queue=web-p&amp;limit=3&amp;after={n1}&amp;trail=start\" id=\"next-page\""
    );
    ensure!(html.contains(&link), "next link {link}");
    ensure!(!html.contains("id=\"first-page\"") && !html.contains("id=\"prev-page\""), "no way back on page 1");
    ensure!(html.contains("id=\"page-info\">1–3 of 7<"), "position on page 1");
    let html = s.get(&format!("/jobs?queue=web-p&limit=3&after={n1}&trail=start")).await?.body;
    ensure!(html.contains("id=\"page-info\">4–6 of 7<"), "position on page 2");
    let prev = "href=\"/ops/jobs/jobs?table=hot&amp;queue=web-p&amp;limit=3\" id=\"prev-page\"";
    ensure!(html.contains(prev), "previous link to page 1: {prev}");
    let next = format!("after={n2}&amp;trail=start,{n1}\" id=\"next-page\"");
    ensure!(html.contains(&next), "next link from page 2: {next}");
    let html = s.get(&format!("/jobs?queue=web-p&limit=3&after={n2}&trail=start,{n1}")).await?.body;
    ensure!(!html.contains("id=\"next-page\"") && html.contains("id=\"first-page\""), "last page links");
    ensure!(html.contains("id=\"page-info\">7–7 of 7<"), "position on page 3");
    let prev = format!("limit=3&amp;after={n1}&amp;trail=start\" id=\"prev-page\"");
    ensure!(html.contains(&prev), "previous link to page 2: {prev}");
    ensure_eq!(html.matches("<tr><td class=\"mono\">").count(), 1, "rows on the last page");
    // The same id form as the CLI: the whole id.
    ensure!(html.contains(&format!("title=\"{}\">{}</a>", ids[6], ids[6])), "the whole id in the list");
    Ok(())
}

/// Workers: the list when the backend has it, "not available" when it does not.
pub(crate) async fn workers_page(b: Arc<dyn Backend>) -> TestResult {
    let s = session(&b).await?;
    let reg = WorkerRegistration {
        worker: WorkerId::random(),
        host: "<host>".into(),
        pid: 4242,
        queues: vec![q("web-w")],
        concurrency: 8,
    };
    match b.register_worker(&reg).await {
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            let r = s.get("/workers").await?;
            ensure_eq!(r.status, StatusCode::OK, "workers page");
            ensure!(r.body.contains("id=\"workers-unavailable\""), "not available");
            let v = s.get("/api/workers").await?.json()?;
            ensure_eq!(v["available"].as_bool(), Some(false), "api workers");
            ensure!(s.get("").await?.body.contains("id=\"total-workers\">n/a<"), "overview n/a");
        }
        Err(e) => return Err(e.to_string()),
        Ok(()) => {
            let r = s.get("/workers").await?;
            ensure!(r.body.contains(&reg.worker.to_string()) && r.body.contains("&lt;host&gt;"), "worker row");
            ensure!(r.body.contains(">4242<") && r.body.contains("badge ok\">alive"), "alive worker");
            let v = s.get("/api/workers").await?.json()?;
            ensure_eq!(v["workers"].as_array().map(Vec::len), Some(1), "one worker");
            ensure!(s.get("").await?.body.contains("id=\"total-workers\">1<"), "overview workers");
        }
    }
    Ok(())
}

/// Bad ids and names are 400, unknown ones 404, the same in JSON.
pub(crate) async fn errors(b: Arc<dyn Backend>) -> TestResult {
    let s = session(&b).await?;
    let unknown = JobId::new();
    for (p, status) in [
        ("/jobs/not-a-uuid".to_string(), StatusCode::BAD_REQUEST),
        (format!("/jobs/{unknown}"), StatusCode::NOT_FOUND),
        ("/api/jobs/not-a-uuid".into(), StatusCode::BAD_REQUEST),
        (format!("/api/jobs/{unknown}"), StatusCode::NOT_FOUND),
        ("/queues/bad%20name".into(), StatusCode::BAD_REQUEST),
        ("/api/queues/bad%20name".into(), StatusCode::BAD_REQUEST),
        ("/no/such/page".into(), StatusCode::NOT_FOUND),
    ] {
        let r = s.get(&p).await?;
        ensure_eq!(r.status, status, "GET {p}: {}", r.body);
        if p.starts_with("/api/") {
            ensure!(r.json()?["error"].is_string(), "JSON error for {p}");
        } else {
            ensure!(r.body.contains("id=\"error\""), "error page for {p}");
        }
    }
    ensure_eq!(
        s.post_json(&format!("/jobs/{unknown}/retry"), &[]).await?.status,
        StatusCode::NOT_FOUND,
        "retry unknown"
    );
    let r = s.req("PUT", "/queues/x/pause", false, None).await?;
    ensure_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "PUT");
    // An empty queue's page reads (a queue without jobs or a control row).
    let r = s.get("/queues/web-empty").await?;
    ensure!(r.status == StatusCode::OK && r.body.contains("id=\"setting-cap\">unlimited"), "empty queue page");
    Ok(())
}

/// The overview is one shared snapshot: served as is while young, recomputed by every action
/// before its response, refreshed in the background once old (the old one is served
/// meanwhile); `snapshot_max_age(ZERO)` computes it every time.
pub(crate) async fn overview_snapshot(b: Arc<dyn Backend>) -> TestResult {
    enqueue(&b, "web-s", "web.ok.v1", 3).await?;
    let pending =
        |s: Session| async move { s.get("/api/overview").await?.json().map(|v| v["totals"]["pending"].as_u64()) };
    let opts = WebOptions::new(Auth::bearer(TOKEN)).snapshot_max_age(Duration::from_secs(3600));
    let s = Session::new(mounted(b.clone(), opts), PREFIX, Some(BEARER)).login().await?;
    ensure_eq!(pending(s.clone()).await?, Some(3), "first overview");
    enqueue(&b, "web-s", "web.ok.v1", 1).await?;
    ensure_eq!(pending(s.clone()).await?, Some(3), "the shared snapshot within its age");
    ensure!(s.get("").await?.body.contains("id=\"total-pending\">3<"), "the page shows the same snapshot");
    ensure_eq!(s.post("/queues/web-s/pause", &[]).await?.status, StatusCode::SEE_OTHER, "pause");
    let v = s.get("/api/overview").await?.json()?;
    ensure_eq!(v["totals"]["pending"].as_u64(), Some(4), "an action recomputes the snapshot");
    ensure_eq!(v["queues"][0]["is_paused"].as_bool(), Some(true), "and the next one shows it");
    // Uncached: every request sees the database.
    let zero = WebOptions::new(Auth::bearer(TOKEN)).snapshot_max_age(Duration::ZERO);
    let z = Session::new(mounted(b.clone(), zero), PREFIX, Some(BEARER));
    ensure_eq!(pending(z.clone()).await?, Some(4), "uncached");
    enqueue(&b, "web-s", "web.ok.v1", 1).await?;
    ensure_eq!(pending(z.clone()).await?, Some(5), "uncached sees the new job at once");
    // A short max age: an old snapshot is served while a background refresh replaces it, so
    // polling sees the new count within a few requests.
    let short = WebOptions::new(Auth::bearer(TOKEN)).snapshot_max_age(Duration::from_millis(50));
    let p = Session::new(mounted(b.clone(), short), PREFIX, Some(BEARER));
    ensure_eq!(pending(p.clone()).await?, Some(5), "short max age, first");
    enqueue(&b, "web-s", "web.ok.v1", 1).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if pending(p.clone()).await? == Some(6) {
            break;
        }
        ensure!(std::time::Instant::now() < deadline, "the background refresh never showed the new job");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Issue 15: the schedules page lists the rows; pause and resume need auth and the CSRF
/// token, and are hidden and refused in read-only mode.
pub(crate) async fn schedules_page(b: Arc<dyn Backend>) -> TestResult {
    let name = format!("web.sched.{:08x}", rand::random::<u32>());
    b.register_schedule(&chokaq_core::ScheduleDef::new(name.clone(), "every:60s", "UTC")).await.map_err(err)?;
    let enabled = || async {
        let rows = b.list_schedules().await.map_err(err)?;
        Ok::<_, String>(rows.iter().find(|r| r.name == name).map(|r| r.enabled))
    };
    let s = session(&b).await?;
    let r = s.get("/schedules").await?;
    ensure_eq!(r.status, StatusCode::OK, "schedules page");
    ensure!(r.body.contains(&name) && r.body.contains("every:60s") && r.body.contains("badge ok\">active"), "row");
    ensure!(r.body.contains(&format!("/schedules/{name}/pause")), "a pause button");
    let v = s.get("/api/schedules").await?.json()?;
    ensure!(v["schedules"].as_array().is_some_and(|a| a.iter().any(|x| x["name"] == name.as_str())), "api: {v}");
    // No CSRF token: refused, nothing changed.
    let bare = Session::new(mounted(b.clone(), WebOptions::new(Auth::bearer(TOKEN))), PREFIX, Some(BEARER));
    ensure_eq!(bare.post(&format!("/schedules/{name}/pause"), &[]).await?.status, StatusCode::FORBIDDEN, "no CSRF");
    ensure_eq!(enabled().await?, Some(true), "still enabled after a refused POST");
    let r = s.post(&format!("/schedules/{name}/pause"), &[]).await?;
    ensure_eq!(r.status, StatusCode::SEE_OTHER, "pause");
    ensure_eq!(enabled().await?, Some(false), "paused");
    ensure!(s.get("/schedules").await?.body.contains("badge warn\">paused"), "shown paused");
    ensure_eq!(s.post(&format!("/schedules/{name}/resume"), &[]).await?.status, StatusCode::SEE_OTHER, "resume");
    ensure_eq!(enabled().await?, Some(true), "resumed");
    let ro =
        Session::new(mounted(b.clone(), WebOptions::new(Auth::bearer(TOKEN)).read_only(true)), PREFIX, Some(BEARER))
            .login()
            .await?;
    ensure!(!ro.get("/schedules").await?.body.contains("/pause\""), "read-only shows no pause button");
    ensure_eq!(ro.post(&format!("/schedules/{name}/pause"), &[]).await?.status, StatusCode::FORBIDDEN, "read-only");
    ensure_eq!(enabled().await?, Some(true), "read-only changed nothing");
    Ok(())
}
