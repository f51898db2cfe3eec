//! tests/api.rs: what the actions do, mounting under a prefix, the keyed controls and pages.

use super::*;

/// Queue controls, cancel (with the no-JS confirmation), retry one / many, purge, JSON API.
pub(crate) async fn actions_take_effect(b: Arc<dyn Backend>) -> TestResult {
    let s = session(&b).await?;
    let qn = q("web-c");
    enqueue(&b, "web-c", "web.ok.v1", 1).await?;
    for (path, fields, check) in [
        ("/queues/web-c/pause", vec![], "paused"),
        ("/queues/web-c/cap", vec![("max_workers", "7")], "cap7"),
        ("/queues/web-c/cap", vec![("max_workers", "")], "uncapped"),
        ("/queues/web-c/deactivate", vec![], "inactive"),
        ("/queues/web-c/activate", vec![], "active"),
        ("/queues/web-c/resume", vec![], "resumed"),
    ] {
        let r = s.post(path, &fields).await?;
        ensure_eq!(r.status, StatusCode::SEE_OTHER, "{path}: {}", r.body);
        let st = b.queue_settings(&qn).await.map_err(err)?;
        let ok = match check {
            "paused" => st.is_paused,
            "cap7" => st.max_workers == Some(7),
            "uncapped" => st.max_workers.is_none(),
            "inactive" => !st.is_active,
            "active" => st.is_active,
            _ => !st.is_paused,
        };
        ensure!(ok, "{check}: {st:?}");
    }
    let r = s.post("/queues/web-c/cap", &[("max_workers", "lots")]).await?;
    ensure_eq!(r.status, StatusCode::BAD_REQUEST, "cap lots");
    let r = s.post("/queues/web-c/cap", &[("max_workers", "1000001")]).await?;
    ensure_eq!(r.status, StatusCode::BAD_REQUEST, "cap over the limit: {}", r.body);
    ensure_eq!(s.post("/queues/web-c/explode", &[]).await?.status, StatusCode::NOT_FOUND, "unknown action");
    ensure_eq!(s.post("/queues/bad%20q/pause", &[]).await?.status, StatusCode::BAD_REQUEST, "bad queue");
    let r = s.post_json("/queues/web-c/pause", &[]).await?;
    ensure_eq!(r.json()?["settings"]["is_paused"].as_bool(), Some(true), "JSON pause");
    let page = s.get("/queues/web-c?done=pause").await?.body;
    ensure!(page.contains("id=\"flash\">Queue paused.") && page.contains("id=\"setting-paused\">yes"), "queue page");

    // Cancel: without confirm=yes the server asks first (JavaScript off) and nothing happens.
    let live = enqueue(&b, "web-c2", "web.ok.v1", 2).await?;
    let r = s.post(&format!("/jobs/{}/cancel", live[0]), &[]).await?;
    ensure_eq!(r.status, StatusCode::OK, "confirmation page");
    ensure!(r.body.contains("Please confirm") && r.body.contains("name=\"confirm\" value=\"yes\""), "{}", r.body);
    ensure_eq!(location(&b, live[0]).await?, Some(JobLocation::Hot(JobStatus::Pending)), "not cancelled yet");
    let r = s.post(&format!("/jobs/{}/cancel", live[0]), &[("confirm", "yes")]).await?;
    ensure_eq!(r.status, StatusCode::SEE_OTHER, "cancel");
    ensure_eq!(location(&b, live[0]).await?, Some(JobLocation::Dead(DeadReason::Cancelled)), "cancelled");
    let r = s.post_json(&format!("/jobs/{}/cancel", live[0]), &[]).await?;
    ensure_eq!(r.json()?["outcome"].as_str(), Some("notlive"), "second cancel");
    // A Processing job: the cancel is requested.
    let (_, claimed) = claim(&b, "web-c2", 1).await?;
    let r = s.post_json(&format!("/jobs/{}/cancel", claimed[0].id), &[]).await?;
    ensure_eq!(r.json()?["outcome"].as_str(), Some("requested"), "cancel of a processing job");

    // Retry one, retry many, conflicts and unknown ids.
    let dead = make_dead(&b, "web-c3", 4, "e").await?;
    let r = s.post_json(&format!("/jobs/{}/retry", dead[0]), &[]).await?;
    ensure_eq!(r.json()?["outcome"].as_str(), Some("requeued"), "retry one");
    let r = s.post_json(&format!("/jobs/{}/retry", dead[0]), &[]).await?;
    ensure_eq!(r.status, StatusCode::NOT_FOUND, "retry of a job that is not dead");
    let unknown = JobId::new().to_string();
    let (d1, d2) = (dead[1].to_string(), dead[2].to_string());
    let r = s.post_json("/dead/retry", &[("ids", &d1), ("ids", &d2), ("ids", &unknown)]).await?;
    let v = r.json()?;
    ensure_eq!((v["requeued"].as_u64(), v["not_found"].as_u64()), (Some(2), Some(1)), "retry many {v}");
    for id in &dead[..3] {
        ensure_eq!(location(&b, *id).await?, Some(JobLocation::Hot(JobStatus::Pending)), "requeued {id}");
    }
    ensure_eq!(s.post("/dead/retry", &[]).await?.status, StatusCode::BAD_REQUEST, "retry nothing");
    ensure_eq!(s.post("/dead/retry", &[("ids", "nope")]).await?.status, StatusCode::BAD_REQUEST, "retry a bad id");
    let page = s.get("/dead?done=requeued&n=2").await?.body;
    ensure!(page.contains("id=\"flash\">2 dead letters retried."), "dead page flash");

    // Purge: asks first, then deletes exactly the queue's dead letters.
    let r = s.post("/dead/purge", &[("older_than_hours", "0"), ("queue", "web-c3")]).await?;
    ensure!(r.status == StatusCode::OK && r.body.contains("Please confirm"), "purge confirmation");
    ensure_eq!(location(&b, dead[3]).await?, Some(JobLocation::Dead(DeadReason::Failed)), "not purged yet");
    let r = s.post_json("/dead/purge", &[("older_than_hours", "24"), ("queue", "web-c3")]).await?;
    ensure_eq!(r.json()?["purged"].as_u64(), Some(0), "nothing older than a day");
    let r = s.post("/dead/purge", &[("older_than_hours", "0"), ("queue", "web-c3"), ("confirm", "yes")]).await?;
    ensure_eq!(r.header(header::LOCATION), format!("{PREFIX}/dead?done=purged&n=1"), "purge redirect");
    ensure_eq!(location(&b, dead[3]).await?, None, "purged");
    ensure_eq!(location(&b, live[0]).await?, Some(JobLocation::Dead(DeadReason::Cancelled)), "other queue kept");
    ensure_eq!(
        s.post("/dead/purge", &[("older_than_hours", "-1")]).await?.status,
        StatusCode::BAD_REQUEST,
        "negative age"
    );
    Ok(())
}

/// Mounted under a prefix every link, form, cookie and redirect carries it; at the root none.
pub(crate) async fn mounting(b: Arc<dyn Backend>) -> TestResult {
    let id = enqueue(&b, "web-m", "web.ok.v1", 1).await?[0];
    let s = session(&b).await?;
    let html = s.get("").await?.body;
    for needle in [
        "href=\"/ops/jobs/assets/style.css",
        "src=\"/ops/jobs/assets/app.js",
        "class=\"brand\" href=\"/ops/jobs\"",
        "href=\"/ops/jobs/queues/web-m\"",
        "data-src=\"/ops/jobs?fragment=live\"",
    ] {
        ensure!(html.contains(needle), "prefixed overview lacks {needle}");
    }
    let r = s.get(&format!("/jobs/{id}")).await?;
    ensure!(r.body.contains(&format!("action=\"/ops/jobs/jobs/{id}/cancel\"")), "prefixed form action");
    let fresh = Session::new(s.app.clone(), PREFIX, Some(BEARER));
    let set = fresh.get("").await?.header(header::SET_COOKIE);
    ensure!(set.contains("; Path=/ops/jobs;"), "cookie path: {set}");
    ensure_eq!(
        call(&s.app, "GET", "/ops/jobs", &[("authorization", BEARER)], None).await?.status,
        StatusCode::OK,
        "bare prefix"
    );

    // Self-contained: no page or asset refers to anything outside the dashboard.
    for p in
        ["".to_string(), "/assets/style.css".into(), "/assets/app.js".into(), format!("/jobs/{id}"), "/dead".into()]
    {
        let body = s.get(&p).await?.body;
        for needle in ["http://", "https://", "//cdn", "@import", "url("] {
            ensure!(!body.contains(needle), "{p} refers to {needle}");
        }
    }

    // At the root.
    let root = Session::new(chokaq_web::router(b.clone(), WebOptions::new(Auth::bearer(TOKEN))), "", Some(BEARER))
        .login()
        .await?;
    let html = root.get("/").await?.body;
    ensure!(html.contains("href=\"/queues/web-m\"") && html.contains("class=\"brand\" href=\"/\""), "root links");
    let set = Session::new(root.app.clone(), "", Some(BEARER)).get("/").await?.header(header::SET_COOKIE);
    ensure!(set.contains("; Path=/;"), "root cookie path: {set}");
    let r = root.post("/queues/web-m/pause", &[]).await?;
    ensure_eq!(r.header(header::LOCATION), "/queues/web-m?done=pause", "root redirect");

    // A fixed base path (a proxy strips the prefix before the router sees it).
    let proxied = Session::new(
        chokaq_web::router(b.clone(), WebOptions::new(Auth::bearer(TOKEN)).base_path("/behind/proxy/")),
        "",
        Some(BEARER),
    );
    let html = proxied.get("/").await?.body;
    ensure!(html.contains("href=\"/behind/proxy/queues/web-m\""), "base_path links");
    Ok(())
}

/// Issue 25: the key-cap and rate-limit controls need auth and the CSRF token (refused
/// otherwise, and in read-only mode, changing nothing), take effect, refuse bad values with 400
/// and nothing written; the queue page shows the key cap, the rate limit and the busiest keys
/// with exact running counts (a hostile key escaped); the job page shows the concurrency key
/// escaped; the JSON API carries the fields.
pub(crate) async fn keyed_controls_and_pages(b: Arc<dyn Backend>) -> TestResult {
    let qn = q("web-k");
    let evil = "<img src=x onerror=alert(1)>";
    let mut ids = Vec::new();
    for key in ["a", "a", "a", "b", evil] {
        let j = NewJob::build("web-k", "web.ok.v1").unwrap().concurrency_key(key);
        ids.push(b.enqueue_many(vec![j]).await.map_err(err)?[0].id);
    }
    enqueue(&b, "web-k", "web.ok.v1", 1).await?;
    let s = session(&b).await?;
    let settings = || async { b.queue_settings(&qn).await.map_err(err) };
    let before = settings().await?;
    let acts: [(&str, Vec<(&str, &str)>); 2] = [
        ("/queues/web-k/key-cap", vec![("key_max_workers", "2")]),
        ("/queues/web-k/rate-limit", vec![("rate", "1000/1m"), ("by_key", "on")]),
    ];
    // Refused: no auth, no token, a wrong token, read-only.
    let ro =
        Session::new(mounted(b.clone(), WebOptions::new(Auth::bearer(TOKEN)).read_only(true)), PREFIX, Some(BEARER))
            .login()
            .await?;
    let other = session(&b).await?.token.unwrap_or_default();
    for (path, fields) in &acts {
        let mut anon = s.clone();
        anon.auth = None;
        ensure_eq!(anon.post(path, fields).await?.status, StatusCode::UNAUTHORIZED, "{path} without auth");
        let mut none = s.clone();
        none.token = None;
        none.cookie = None;
        ensure_eq!(none.post(path, fields).await?.status, StatusCode::FORBIDDEN, "{path} without CSRF");
        let mut wrong = s.clone();
        wrong.token = Some(other.clone());
        ensure_eq!(wrong.post(path, fields).await?.status, StatusCode::FORBIDDEN, "{path} with a wrong CSRF token");
        ensure_eq!(ro.post(path, fields).await?.status, StatusCode::FORBIDDEN, "{path} read-only");
    }
    ensure_eq!(settings().await?, before, "refused controls changed nothing");
    let page = ro.get("/queues/web-k").await?.body;
    ensure!(!page.contains("data-action=\"key-cap\"") && !page.contains("name=\"rate\""), "read-only shows the forms");

    // Taken: a 303 back to the queue page with its message.
    for (path, fields) in &acts {
        let r = s.post(path, fields).await?;
        ensure_eq!(r.status, StatusCode::SEE_OTHER, "{path}: {}", r.body);
        let done = path.rsplit('/').next().unwrap_or_default();
        ensure_eq!(r.header(header::LOCATION), format!("{PREFIX}/queues/web-k?done={done}"), "redirect of {path}");
    }
    let st = settings().await?;
    ensure_eq!(st.key_max_workers, Some(2), "key cap");
    ensure_eq!(st.rate_limit, Some(chokaq_core::RateLimit::new(1000, Duration::from_secs(60)).by_key()), "rate limit");

    // Bad values: 400, the message says why, nothing written.
    for (path, fields, needle) in [
        ("/queues/web-k/key-cap", vec![("key_max_workers", "lots")], "whole number"),
        ("/queues/web-k/key-cap", vec![("key_max_workers", "1000001")], "key_max_workers"),
        ("/queues/web-k/key-cap", vec![("key_max_workers", "-1")], "whole number"),
        ("/queues/web-k/rate-limit", vec![("rate", "0/1s")], "jobs must be 1"),
        ("/queues/web-k/rate-limit", vec![("rate", "5/0s")], "period"),
        ("/queues/web-k/rate-limit", vec![("rate", "5/2d")], "period"),
        ("/queues/web-k/rate-limit", vec![("rate", "5/1w")], "N/PERIOD"),
        ("/queues/web-k/rate-limit", vec![("rate", "<b>5</b>")], "N/PERIOD"),
    ] {
        let r = s.post(path, &fields).await?;
        ensure_eq!(r.status, StatusCode::BAD_REQUEST, "{path} {fields:?}: {}", r.body);
        ensure!(r.body.contains(needle), "{path} {fields:?}: the error does not say {needle:?}: {}", r.body);
        ensure!(!r.body.contains("<b>5"), "an echoed value is escaped: {}", r.body);
    }
    ensure_eq!(settings().await?, st, "refused values changed nothing");

    // Running: key a at its cap of 2, b, the hostile key, the key-less job.
    let (_, got) = claim(&b, "web-k", 10).await?;
    ensure_eq!(got.len(), 5, "claimed under the key cap");
    let page = s.get("/queues/web-k?done=key-cap").await?.body;
    ensure!(page.contains("id=\"flash\">Key cap set."), "flash");
    ensure!(page.contains("id=\"setting-key-cap\">2<"), "key cap on the queue page");
    ensure!(page.contains("id=\"setting-rate\">1000/1m per key<"), "rate limit on the queue page");
    ensure!(page.contains("data-limit=\"key-cap\">key cap 2<"), "key cap badge");
    ensure!(!page.contains("<img src=x"), "the queue page holds the key unescaped");
    ensure!(page.contains("&lt;img src=x onerror=alert(1)&gt;"), "the hostile key, escaped");
    let table = page.split("id=\"busiest-keys\"").nth(1).ok_or("no busiest keys table")?;
    let table = table.split("</table>").next().unwrap_or_default();
    let keys: Vec<&str> =
        table.split("data-col=\"key\">").skip(1).map(|c| c.split('<').next().unwrap_or_default()).collect();
    let running: Vec<&str> =
        table.split("data-col=\"running\">").skip(1).map(|c| c.split('<').next().unwrap_or_default()).collect();
    // Most running first, ties by key ('<' sorts before 'b').
    ensure_eq!(keys, vec!["a", "&lt;img src=x onerror=alert(1)&gt;", "b"], "busiest keys");
    ensure_eq!(running, vec!["2 ", "1", "1"], "running per key (a at its cap)");
    ensure!(table.contains("at cap"), "key a is marked at its cap");
    // The forms show the current values.
    ensure!(page.contains("name=\"key_max_workers\" min=\"0\" max=\"1000000\" value=\"2\""), "key cap form");
    ensure!(page.contains("name=\"rate\" value=\"1000/1m\"") && page.contains("value=\"on\" checked"), "rate form");

    // JSON: the queue API and the overview API.
    let v = s.req("GET", "/api/queues/web-k", true, None).await?.json()?;
    ensure_eq!(v["settings"]["key_max_workers"].as_u64(), Some(2), "API key cap");
    ensure_eq!(
        v["settings"]["rate_limit"],
        serde_json::json!({ "jobs": 1000, "per": 60_000, "by_key": true }),
        "API rate"
    );
    ensure_eq!(
        v["stats"]["busiest_keys"],
        serde_json::json!([{ "key": "a", "running": 2 }, { "key": evil, "running": 1 }, { "key": "b", "running": 1 }]),
        "API busiest keys"
    );
    let v = s.req("GET", "/api/overview", true, None).await?.json()?;
    let row = v["queues"].as_array().and_then(|a| a.iter().find(|x| x["queue"] == "web-k").cloned()).ok_or("row")?;
    ensure_eq!(
        (row["key_max_workers"].as_u64(), row["busiest_keys"][0]["running"].as_u64()),
        (Some(2), Some(2)),
        "overview row"
    );
    let overview = s.get("").await?.body;
    ensure!(overview.contains("key cap 2") && overview.contains("rate 1000/1m per key"), "overview badges");

    // The job page: the key, escaped; the job API carries it.
    let page = s.get(&format!("/jobs/{}", ids[4])).await?.body;
    ensure!(page.contains("id=\"job-key\">&lt;img src=x onerror=alert(1)&gt;<"), "job page key");
    ensure!(!page.contains("<img src=x"), "the job page holds the key unescaped");
    let v = s.req("GET", &format!("/api/jobs/{}", ids[0]), true, None).await?.json()?;
    ensure_eq!(v["concurrency_key"].as_str(), Some("a"), "job API");

    // Cleared: an empty key cap, `none` as the rate (without by_key: `none` with it is refused
    // since issue 40, as the CLI refuses it).
    for (path, fields) in
        [("/queues/web-k/key-cap", vec![("key_max_workers", "")]), ("/queues/web-k/rate-limit", vec![("rate", "none")])]
    {
        ensure_eq!(s.post(path, &fields).await?.status, StatusCode::SEE_OTHER, "{path} cleared");
    }
    let st = settings().await?;
    ensure_eq!((st.key_max_workers, st.rate_limit), (None, None), "cleared");
    let v = s.post_json("/queues/web-k/rate-limit", &[("rate", "5/250ms")]).await?.json()?;
    ensure_eq!(v["settings"]["rate_limit"], serde_json::json!({ "jobs": 5, "per": 250, "by_key": false }), "JSON post");
    Ok(())
}
