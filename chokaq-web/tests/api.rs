//! The dashboard's HTTP surface against real databases: every endpoint with and without
//! auth, every action without / with a wrong CSRF token, read-only refusal, mounting under a
//! prefix, escaping of user data, filters and keyset paging.
//!
//! A custom harness (libtest-mimic): each case runs once on PostgreSQL (a fresh schema
//! `chokaq_t_<hex>`, dropped afterwards; URL from `CHOKAQ_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`), once on MariaDB / MySQL (a fresh database
//! `chokaq_t_<hex>`, dropped afterwards; URL from `CHOKAQ_TEST_MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`) and once on SQLite (a fresh file in the temp
//! directory). An unreachable server makes its cases ignored, or failed when
//! `CHOKAQ_TEST_REQUIRE` names it (`postgres`, `mysql`). Requests go through
//! `tower::ServiceExt::oneshot` (one case also through a real listener). The keyed cases
//! (issue 25) run on the memory backend too.

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::Router;
use chokaq_core::testing::TestSupport;
use chokaq_core::{
    Backend, BackendExt, ClaimMode, ClaimParams, DeadReason, ErrorKind, FailAction, JobId, JobLocation, JobStatus,
    NewJob, QueueName, WorkerId, WorkerRegistration,
};
use chokaq_mysql::{MysqlBackend, MysqlConfig};
use chokaq_postgres::{PgBackend, PgConfig};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use chokaq_web::{Auth, WebOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;
use tower::ServiceExt;

type TestResult = Result<(), String>;
type Case = fn(Arc<dyn Backend>) -> Pin<Box<dyn Future<Output = TestResult> + Send>>;

const PREFIX: &str = "/ops/jobs";
const TOKEN: &str = "test-token-7f3a-0c41";
const BEARER: &str = "Bearer test-token-7f3a-0c41";

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

macro_rules! ensure_eq {
    ($a:expr, $b:expr, $($arg:tt)+) => {{
        match (&$a, &$b) {
            (a, b) => {
                if a != b {
                    return Err(format!("{}: {:?} != {:?}", format!($($arg)+), a, b));
                }
            }
        }
    }};
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

// ---- HTTP -------------------------------------------------------------------------------

#[derive(Debug)]
struct Resp {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Resp {
    fn json(&self) -> Result<Value, String> {
        serde_json::from_str(&self.body).map_err(|e| format!("not JSON ({e}): {}", self.body))
    }
    fn header(&self, name: header::HeaderName) -> String {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
    }
}

async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> Result<Resp, String> {
    let mut b = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    if body.is_some() {
        b = b.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let req = b.body(body.map(Body::from).unwrap_or_else(Body::empty)).map_err(err)?;
    let resp = app.clone().oneshot(req).await.map_err(err)?;
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20).await.map_err(err)?;
    Ok(Resp { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() })
}

fn form_body(fields: &[(&str, &str)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        s.append_pair(k, v);
    }
    s.finish()
}

/// A browser-like client of one mounted dashboard: auth header, CSRF cookie and token.
#[derive(Clone)]
struct Session {
    app: Router,
    prefix: String,
    auth: Option<String>,
    cookie: Option<String>,
    token: Option<String>,
}

impl Session {
    fn new(app: Router, prefix: &str, auth: Option<&str>) -> Self {
        Session { app, prefix: prefix.to_string(), auth: auth.map(str::to_string), cookie: None, token: None }
    }

    fn headers(&self, json: bool) -> Vec<(&'static str, String)> {
        let mut h = Vec::new();
        if let Some(a) = &self.auth {
            h.push(("authorization", a.clone()));
        }
        if let Some(c) = &self.cookie {
            h.push(("cookie", c.clone()));
        }
        if json {
            h.push(("accept", "application/json".to_string()));
        }
        h
    }

    async fn req(&self, method: &str, path: &str, json: bool, body: Option<String>) -> Result<Resp, String> {
        let h = self.headers(json);
        let hs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        call(&self.app, method, &format!("{}{path}", self.prefix), &hs, body).await
    }

    async fn get(&self, path: &str) -> Result<Resp, String> {
        self.req("GET", path, false, None).await
    }

    /// Fetches a CSRF token (and its cookie) from `GET /api/csrf`.
    async fn login(mut self) -> Result<Self, String> {
        let r = self.get("/api/csrf").await?;
        ensure_eq!(r.status, StatusCode::OK, "GET /api/csrf: {}", r.body);
        let token = r.json()?["token"].as_str().ok_or("no token")?.to_string();
        let set = r.header(header::SET_COOKIE);
        ensure!(set.starts_with(&format!("chokaq_csrf={token};")), "Set-Cookie {set:?}");
        ensure!(set.contains("SameSite=Strict") && set.contains("HttpOnly"), "cookie flags: {set}");
        self.cookie = Some(format!("chokaq_csrf={token}"));
        self.token = Some(token);
        Ok(self)
    }

    /// A form POST carrying the token in the form (as the pages do).
    async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Result<Resp, String> {
        let mut f: Vec<(&str, &str)> = fields.to_vec();
        if let Some(t) = &self.token {
            f.push(("csrf", t));
        }
        self.req("POST", path, false, Some(form_body(&f))).await
    }

    /// A JSON API POST carrying the token in the form.
    async fn post_json(&self, path: &str, fields: &[(&str, &str)]) -> Result<Resp, String> {
        let mut f: Vec<(&str, &str)> = fields.to_vec();
        if let Some(t) = &self.token {
            f.push(("csrf", t));
        }
        self.req("POST", path, true, Some(form_body(&f))).await
    }
}

fn mounted(backend: Arc<dyn Backend>, opts: WebOptions) -> Router {
    Router::new().nest(PREFIX, chokaq_web::router(backend, opts))
}

/// A logged-in session. The overview is computed on every request here
/// (`snapshot_max_age(ZERO)`), so a case sees what it just wrote; `overview_snapshot` tests the
/// shared snapshot.
async fn session(b: &Arc<dyn Backend>) -> Result<Session, String> {
    let opts = WebOptions::new(Auth::bearer(TOKEN)).snapshot_max_age(Duration::ZERO);
    Session::new(mounted(b.clone(), opts), PREFIX, Some(BEARER)).login().await
}

// ---- fixtures ---------------------------------------------------------------------------

fn q(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

async fn enqueue(b: &Arc<dyn Backend>, queue: &str, kind: &str, n: usize) -> Result<Vec<JobId>, String> {
    let jobs = (0..n).map(|i| NewJob::build(queue, kind).unwrap().json(serde_json::json!({ "i": i }))).collect();
    Ok(b.enqueue_many(jobs).await.map_err(err)?.into_iter().map(|e| e.id).collect())
}

/// Claims (start mode) every due job of `queue`, up to `n`.
async fn claim(b: &Arc<dyn Backend>, queue: &str, n: u32) -> Result<(WorkerId, Vec<chokaq_core::ClaimedJob>), String> {
    let w = WorkerId::random();
    let jobs = b.claim(&ClaimParams::new(w, vec![q(queue)], n, ClaimMode::Start)).await.map_err(err)?;
    Ok((w, jobs))
}

async fn make_archived(b: &Arc<dyn Backend>, queue: &str, n: usize) -> Result<Vec<JobId>, String> {
    let ids = enqueue(b, queue, "web.ok.v1", n).await?;
    let (w, jobs) = claim(b, queue, n as u32).await?;
    ensure_eq!(jobs.len(), n, "claimed");
    let leases: Vec<_> = jobs.iter().map(|j| j.lease_ref()).collect();
    let out = b.complete(w, &leases).await.map_err(err)?;
    ensure_eq!(out.done.len(), n, "completed");
    Ok(ids)
}

async fn make_dead(b: &Arc<dyn Backend>, queue: &str, n: usize, error: &str) -> Result<Vec<JobId>, String> {
    let ids = enqueue(b, queue, "web.fail.v1", n).await?;
    let (w, jobs) = claim(b, queue, n as u32).await?;
    ensure_eq!(jobs.len(), n, "claimed");
    for j in jobs {
        let out = b
            .fail(w, j.lease_ref(), FailAction::DeadLetter { reason: DeadReason::Failed, error: error.to_string() })
            .await
            .map_err(err)?;
        ensure!(matches!(out, chokaq_core::Fenced::Done(_)), "fail: {out:?}");
    }
    Ok(ids)
}

async fn location(b: &Arc<dyn Backend>, id: JobId) -> Result<Option<JobLocation>, String> {
    Ok(b.get_job(id).await.map_err(err)?.map(|j| j.location))
}

// ---- cases ------------------------------------------------------------------------------

/// Every GET endpoint: 401 without auth or with a wrong one (with a challenge), 200 with it.
async fn every_get_needs_auth(b: Arc<dyn Backend>) -> TestResult {
    let live = enqueue(&b, "web-a", "web.ok.v1", 1).await?[0];
    let s = session(&b).await?;
    let paths = [
        "".to_string(),
        "?fragment=live".into(),
        "/jobs".into(),
        "/jobs?table=archive".into(),
        "/jobs?table=dead".into(),
        format!("/jobs/{live}"),
        "/queues/web-a".into(),
        "/dead".into(),
        "/workers".into(),
        "/assets/style.css".into(),
        "/assets/app.js".into(),
        "/api/overview".into(),
        "/api/queues/web-a".into(),
        "/api/jobs".into(),
        format!("/api/jobs/{live}"),
        "/api/workers".into(),
        "/api/csrf".into(),
    ];
    for p in &paths {
        for auth in [None, Some("Bearer wrong-token"), Some("Basic b3BzOnB3"), Some(TOKEN)] {
            let mut anon = s.clone();
            anon.auth = auth.map(str::to_string);
            let r = anon.get(p).await?;
            ensure_eq!(r.status, StatusCode::UNAUTHORIZED, "GET {p} with {auth:?}");
            ensure_eq!(r.header(header::WWW_AUTHENTICATE), "Bearer realm=\"chokaq\"", "challenge of {p}");
            ensure!(!r.body.contains("web-a"), "a 401 leaks data: {}", r.body);
        }
        let r = s.get(p).await?;
        ensure_eq!(r.status, StatusCode::OK, "GET {p}: {}", r.body);
        ensure!(r.header(header::CONTENT_SECURITY_POLICY).contains("default-src 'none'"), "CSP on {p}");
    }
    Ok(())
}

/// One action, how to check that it took effect, and its expected redirect.
struct Action {
    path: String,
    fields: Vec<(&'static str, String)>,
    redirect: String,
}

async fn actions_fixture(b: &Arc<dyn Backend>) -> Result<(Vec<Action>, JobId, JobId, JobId), String> {
    let live = enqueue(b, "web-b", "web.ok.v1", 1).await?[0];
    let dead = make_dead(b, "web-d", 3, "boom").await?;
    let acts = vec![
        Action { path: "/queues/web-b/pause".into(), fields: vec![], redirect: "/queues/web-b?done=pause".into() },
        Action { path: "/queues/web-b/resume".into(), fields: vec![], redirect: "/queues/web-b?done=resume".into() },
        Action {
            path: "/queues/web-b/deactivate".into(),
            fields: vec![],
            redirect: "/queues/web-b?done=deactivate".into(),
        },
        Action {
            path: "/queues/web-b/activate".into(),
            fields: vec![],
            redirect: "/queues/web-b?done=activate".into(),
        },
        Action {
            path: "/queues/web-b/cap".into(),
            fields: vec![("max_workers", "3".into())],
            redirect: "/queues/web-b?done=cap".into(),
        },
        Action {
            path: format!("/jobs/{live}/cancel"),
            fields: vec![("confirm", "yes".into())],
            redirect: format!("/jobs/{live}?done=cancelled"),
        },
        Action {
            path: format!("/jobs/{}/retry", dead[0]),
            fields: vec![],
            redirect: format!("/jobs/{}?done=requeued", dead[0]),
        },
        Action {
            path: "/dead/retry".into(),
            fields: vec![("ids", dead[1].to_string())],
            redirect: "/dead?done=requeued&n=1".into(),
        },
        Action {
            path: "/dead/purge".into(),
            fields: vec![("older_than_hours", "0".into()), ("queue", "web-d".into()), ("confirm", "yes".into())],
            redirect: "/dead?done=purged&n=1".into(),
        },
    ];
    Ok((acts, live, dead[0], dead[2]))
}

/// The state the actions change, to show that a refused action changed nothing.
async fn snapshot(b: &Arc<dyn Backend>, ids: &[JobId]) -> Result<String, String> {
    let s = b.queue_settings(&q("web-b")).await.map_err(err)?;
    let mut out = format!("paused={} active={} cap={:?};", s.is_paused, s.is_active, s.max_workers);
    for id in ids {
        out.push_str(&format!("{:?};", location(b, *id).await?));
    }
    Ok(out)
}

/// Every action: refused without auth, without a CSRF token (none, only the cookie, only the
/// field), with a wrong one (forged, another dashboard's, cookie and field differing); then
/// done with both.
async fn every_action_needs_auth_and_csrf(b: Arc<dyn Backend>) -> TestResult {
    let (acts, live, dead0, dead2) = actions_fixture(&b).await?;
    let s = session(&b).await?;
    let before = snapshot(&b, &[live, dead0, dead2]).await?;
    // A valid token of another dashboard instance (another secret).
    let other = session(&b).await?;
    let other_token = other.token.clone().unwrap();
    let mine = s.token.clone().unwrap();
    let forged = format!("{}.{}", &mine[..32], "0".repeat(64));

    for a in &acts {
        let fields: Vec<(&str, &str)> = a.fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        // No auth (but a good token).
        let mut anon = s.clone();
        anon.auth = None;
        ensure_eq!(anon.post(&a.path, &fields).await?.status, StatusCode::UNAUTHORIZED, "POST {} without auth", a.path);
        // No token at all.
        let mut none = s.clone();
        none.cookie = None;
        none.token = None;
        let r = none.post(&a.path, &fields).await?;
        ensure_eq!(r.status, StatusCode::FORBIDDEN, "POST {} without CSRF", a.path);
        ensure!(r.body.contains("CSRF token missing"), "{}", r.body);
        // Cookie only.
        let mut cookie_only = s.clone();
        cookie_only.token = None;
        ensure_eq!(cookie_only.post(&a.path, &fields).await?.status, StatusCode::FORBIDDEN, "{} cookie only", a.path);
        // Field only.
        let mut field_only = s.clone();
        field_only.cookie = None;
        ensure_eq!(field_only.post(&a.path, &fields).await?.status, StatusCode::FORBIDDEN, "{} field only", a.path);
        // Wrong: forged signature (cookie = field), another instance's token, cookie != field.
        for (cookie, field) in [(&forged, &forged), (&other_token, &other_token), (&mine, &other_token)] {
            let mut wrong = s.clone();
            wrong.cookie = Some(format!("chokaq_csrf={cookie}"));
            wrong.token = Some(field.clone());
            let r = wrong.post(&a.path, &fields).await?;
            ensure_eq!(r.status, StatusCode::FORBIDDEN, "POST {} with a wrong CSRF token", a.path);
            ensure!(r.body.contains("CSRF token"), "{}", r.body);
        }
        // The header instead of the field works the same way: a wrong one is refused.
        let h = [("authorization", BEARER), ("cookie", &format!("chokaq_csrf={mine}")), ("x-csrf-token", &other_token)];
        let hs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, *v)).collect();
        let r = call(&s.app, "POST", &format!("{PREFIX}{}", a.path), &hs, Some(form_body(&fields))).await?;
        ensure_eq!(r.status, StatusCode::FORBIDDEN, "POST {} with a wrong x-csrf-token", a.path);
    }
    ensure_eq!(snapshot(&b, &[live, dead0, dead2]).await?, before, "refused actions changed nothing");

    // Now each one with auth and the token: a 303 to the right page.
    for a in &acts {
        let fields: Vec<(&str, &str)> = a.fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = s.post(&a.path, &fields).await?;
        ensure_eq!(r.status, StatusCode::SEE_OTHER, "POST {}: {}", a.path, r.body);
        ensure_eq!(r.header(header::LOCATION), format!("{PREFIX}{}", a.redirect), "redirect of {}", a.path);
    }
    let st = b.queue_settings(&q("web-b")).await.map_err(err)?;
    ensure!(!st.is_paused && st.is_active && st.max_workers == Some(3), "settings {st:?}");
    ensure_eq!(location(&b, live).await?, Some(JobLocation::Dead(DeadReason::Cancelled)), "cancelled");
    ensure_eq!(location(&b, dead0).await?, Some(JobLocation::Hot(JobStatus::Pending)), "retried");
    ensure_eq!(location(&b, dead2).await?, None, "purged");

    // The token in the x-csrf-token header works too.
    let h = [("authorization", BEARER), ("cookie", &format!("chokaq_csrf={mine}")), ("x-csrf-token", &mine)];
    let hs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, *v)).collect();
    let r = call(&s.app, "POST", &format!("{PREFIX}/queues/web-b/pause"), &hs, None).await?;
    ensure_eq!(r.status, StatusCode::SEE_OTHER, "pause with the header: {}", r.body);
    ensure!(b.queue_settings(&q("web-b")).await.map_err(err)?.is_paused, "paused through the header");
    Ok(())
}

/// Read-only: every action refused with 403 (auth and CSRF good), nothing changes, and no page
/// shows a form or button for an action.
async fn read_only_refuses_and_hides(b: Arc<dyn Backend>) -> TestResult {
    let (acts, live, dead0, dead2) = actions_fixture(&b).await?;
    let ro =
        Session::new(mounted(b.clone(), WebOptions::new(Auth::bearer(TOKEN)).read_only(true)), PREFIX, Some(BEARER))
            .login()
            .await?;
    let before = snapshot(&b, &[live, dead0, dead2]).await?;
    for a in &acts {
        let fields: Vec<(&str, &str)> = a.fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = ro.post(&a.path, &fields).await?;
        ensure_eq!(r.status, StatusCode::FORBIDDEN, "read-only POST {}", a.path);
        ensure!(r.body.contains("read-only"), "{}", r.body);
        ensure_eq!(
            ro.post_json(&a.path, &fields).await?.status,
            StatusCode::FORBIDDEN,
            "read-only JSON POST {}",
            a.path
        );
    }
    ensure_eq!(snapshot(&b, &[live, dead0, dead2]).await?, before, "read-only changed something");
    for p in [
        "".to_string(),
        "/queues/web-b".into(),
        format!("/jobs/{live}"),
        format!("/jobs/{dead0}"),
        "/dead".into(),
        "/jobs".into(),
        "/workers".into(),
    ] {
        let r = ro.get(&p).await?;
        ensure_eq!(r.status, StatusCode::OK, "GET {p}");
        ensure!(r.body.contains("id=\"read-only\""), "read-only badge on {p}");
        for needle in ["method=\"post\"", "data-action=", "btn primary", "btn danger"] {
            ensure!(!r.body.contains(needle), "{needle} on read-only {p}");
        }
    }
    // The read-write dashboard does show them.
    let rw = session(&b).await?;
    ensure!(rw.get(&format!("/jobs/{dead0}")).await?.body.contains("data-action=\"retry\""), "retry button");
    ensure!(rw.get("/queues/web-b").await?.body.contains("data-action=\"pause\""), "pause button");
    Ok(())
}

/// The overview's counts, exact, in JSON and HTML; throughput when the backend has it.
async fn overview_counts(b: Arc<dyn Backend>) -> TestResult {
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
async fn cancels_and_empty_queues(b: Arc<dyn Backend>) -> TestResult {
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
async fn user_data_is_escaped(b: Arc<dyn Backend>) -> TestResult {
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
async fn filters_and_paging(b: Arc<dyn Backend>) -> TestResult {
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

/// Queue controls, cancel (with the no-JS confirmation), retry one / many, purge, JSON API.
async fn actions_take_effect(b: Arc<dyn Backend>) -> TestResult {
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
async fn mounting(b: Arc<dyn Backend>) -> TestResult {
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

/// Workers: the list when the backend has it, "not available" when it does not.
async fn workers_page(b: Arc<dyn Backend>) -> TestResult {
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
async fn errors(b: Arc<dyn Backend>) -> TestResult {
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

/// Basic auth, and Auth::None (no auth, CSRF still required).
async fn basic_and_no_auth(b: Arc<dyn Backend>) -> TestResult {
    let app = mounted(b.clone(), WebOptions::new(Auth::basic("ops", "pa:ss")));
    // "ops:pa:ss" in base64.
    let good = "Basic b3BzOnBhOnNz";
    let r = call(&app, "GET", "/ops/jobs", &[], None).await?;
    ensure_eq!(r.status, StatusCode::UNAUTHORIZED, "no auth");
    ensure!(r.header(header::WWW_AUTHENTICATE).starts_with("Basic realm=\"chokaq\""), "basic challenge");
    ensure_eq!(
        call(&app, "GET", "/ops/jobs", &[("authorization", "Basic b3BzOndyb25n")], None).await?.status,
        StatusCode::UNAUTHORIZED,
        "wrong password"
    );
    ensure_eq!(
        call(&app, "GET", "/ops/jobs", &[("authorization", BEARER)], None).await?.status,
        StatusCode::UNAUTHORIZED,
        "bearer on basic"
    );
    ensure_eq!(call(&app, "GET", "/ops/jobs", &[("authorization", good)], None).await?.status, StatusCode::OK, "basic");
    let s = Session::new(app, PREFIX, Some(good)).login().await?;
    ensure_eq!(s.post("/queues/web-ba/pause", &[]).await?.status, StatusCode::SEE_OTHER, "basic POST");

    let open = Session::new(mounted(b.clone(), WebOptions::new(Auth::None)), PREFIX, None);
    ensure_eq!(open.get("").await?.status, StatusCode::OK, "Auth::None GET");
    ensure_eq!(
        open.post("/queues/web-ba/resume", &[]).await?.status,
        StatusCode::FORBIDDEN,
        "Auth::None still needs CSRF"
    );
    let open = open.login().await?;
    ensure_eq!(open.post("/queues/web-ba/resume", &[]).await?.status, StatusCode::SEE_OTHER, "Auth::None with CSRF");
    ensure!(!b.queue_settings(&q("web-ba")).await.map_err(err)?.is_paused, "resumed");
    Ok(())
}

/// `serve_on` over a real socket: auth enforced, `Auth::None` refused off loopback.
async fn real_listener(b: Arc<dyn Backend>) -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let err0 =
        chokaq_web::serve(b.clone(), "0.0.0.0:0".parse().unwrap(), WebOptions::new(Auth::None)).await.unwrap_err();
    ensure_eq!(err0.kind(), ErrorKind::InvalidInput, "no auth on 0.0.0.0");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(err)?;
    let addr = listener.local_addr().map_err(err)?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let stop2 = stop.clone();
    let server =
        tokio::spawn(chokaq_web::serve_on(b.clone(), listener, WebOptions::new(Auth::bearer(TOKEN)), async move {
            stop2.notified().await
        }));
    let get = |auth: Option<&'static str>| async move {
        let mut c = tokio::net::TcpStream::connect(addr).await.map_err(err)?;
        let a = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        c.write_all(format!("GET /api/overview HTTP/1.1\r\nHost: x\r\n{a}Connection: close\r\n\r\n").as_bytes())
            .await
            .map_err(err)?;
        let mut out = String::new();
        c.read_to_string(&mut out).await.map_err(err)?;
        Ok::<String, String>(out)
    };
    let anon = get(None).await?;
    ensure!(anon.starts_with("HTTP/1.1 401"), "{anon}");
    let ok = get(Some(BEARER)).await?;
    ensure!(ok.starts_with("HTTP/1.1 200") && ok.contains("\"totals\""), "{ok}");
    stop.notify_one();
    tokio::time::timeout(Duration::from_secs(10), server).await.map_err(err)?.map_err(err)?.map_err(err)?;
    Ok(())
}

/// The overview is one shared snapshot: served as is while young, recomputed by every action
/// before its response, refreshed in the background once old (the old one is served
/// meanwhile); `snapshot_max_age(ZERO)` computes it every time.
async fn overview_snapshot(b: Arc<dyn Backend>) -> TestResult {
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
async fn schedules_page(b: Arc<dyn Backend>) -> TestResult {
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

/// Issue 25: the key-cap and rate-limit controls need auth and the CSRF token (refused
/// otherwise, and in read-only mode, changing nothing), take effect, refuse bad values with 400
/// and nothing written; the queue page shows the key cap, the rate limit and the busiest keys
/// with exact running counts (a hostile key escaped); the job page shows the concurrency key
/// escaped; the JSON API carries the fields.
async fn keyed_controls_and_pages(b: Arc<dyn Backend>) -> TestResult {
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

    // Cleared: an empty key cap, `none` as the rate.
    for (path, fields) in [
        ("/queues/web-k/key-cap", vec![("key_max_workers", "")]),
        ("/queues/web-k/rate-limit", vec![("rate", "none"), ("by_key", "on")]),
    ] {
        ensure_eq!(s.post(path, &fields).await?.status, StatusCode::SEE_OTHER, "{path} cleared");
    }
    let st = settings().await?;
    ensure_eq!((st.key_max_workers, st.rate_limit), (None, None), "cleared");
    let v = s.post_json("/queues/web-k/rate-limit", &[("rate", "5/250ms")]).await?.json()?;
    ensure_eq!(v["settings"]["rate_limit"], serde_json::json!({ "jobs": 5, "per": 250, "by_key": false }), "JSON post");
    Ok(())
}

fn keyed_cases() -> Vec<(&'static str, Case)> {
    vec![("keyed_controls_and_pages", |b| Box::pin(keyed_controls_and_pages(b)))]
}

fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("every_get_needs_auth", |b| Box::pin(every_get_needs_auth(b))),
        ("every_action_needs_auth_and_csrf", |b| Box::pin(every_action_needs_auth_and_csrf(b))),
        ("read_only_refuses_and_hides", |b| Box::pin(read_only_refuses_and_hides(b))),
        ("overview_counts", |b| Box::pin(overview_counts(b))),
        ("overview_snapshot", |b| Box::pin(overview_snapshot(b))),
        ("cancels_and_empty_queues", |b| Box::pin(cancels_and_empty_queues(b))),
        ("user_data_is_escaped", |b| Box::pin(user_data_is_escaped(b))),
        ("filters_and_paging", |b| Box::pin(filters_and_paging(b))),
        ("actions_take_effect", |b| Box::pin(actions_take_effect(b))),
        ("mounting", |b| Box::pin(mounting(b))),
        ("workers_page", |b| Box::pin(workers_page(b))),
        ("schedules_page", |b| Box::pin(schedules_page(b))),
        ("errors", |b| Box::pin(errors(b))),
        ("basic_and_no_auth", |b| Box::pin(basic_and_no_auth(b))),
        ("real_listener", |b| Box::pin(real_listener(b))),
    ]
}

// ---- harness ----------------------------------------------------------------------------

fn pg_url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

fn mysql_url() -> String {
    std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

fn required(what: &str) -> bool {
    std::env::var("CHOKAQ_TEST_REQUIRE").map(|v| v.split(',').any(|s| s.trim() == what)).unwrap_or(false)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

fn on_postgres(case: Case) -> Result<(), Failed> {
    runtime().block_on(async {
        let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
        let pg = PgBackend::connect(PgConfig::new(pg_url()).schema(&schema).max_connections(4)).await.map_err(err)?;
        pg.migrate().await.map_err(err)?;
        let pg = Arc::new(pg);
        let out = case(pg.clone()).await;
        if let Err(e) = pg.drop_schema().await {
            eprintln!("could not drop schema {schema}: {e}");
        }
        out.map_err(Failed::from)
    })
}

fn on_mysql(case: Case) -> Result<(), Failed> {
    runtime().block_on(async {
        let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
        let my = MysqlBackend::connect(MysqlConfig::new(mysql_url()).schema(&schema).max_connections(4))
            .await
            .map_err(err)?;
        let my = Arc::new(my);
        let out = match my.migrate().await {
            Ok(()) => case(my.clone()).await,
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = my.drop_schema().await {
            eprintln!("could not drop database {schema}: {e}");
        }
        out.map_err(Failed::from)
    })
}

fn on_sqlite(case: Case) -> Result<(), Failed> {
    runtime().block_on(async {
        let dir = std::env::temp_dir().join(format!("chokaq-web-t-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).map_err(err)?;
        let out = async {
            let db = SqliteBackend::connect(SqliteConfig::new(dir.join("jobs.db").display().to_string()))
                .await
                .map_err(err)?;
            db.migrate().await.map_err(err)?;
            let db = Arc::new(db);
            let out = case(db.clone()).await;
            db.close().await;
            out
        }
        .await;
        let _ = std::fs::remove_dir_all(&dir);
        out.map_err(Failed::from)
    })
}

/// The memory backend (the reference semantics of issue 25's keyed cases).
fn on_memory(case: Case) -> Result<(), Failed> {
    runtime().block_on(case(Arc::new(chokaq_core::memory::MemoryBackend::new()))).map_err(Failed::from)
}

/// The trial of `case` on a server: run, failed (unreachable and required) or ignored.
fn server_trial(
    name: &str,
    label: &'static str,
    reachable: bool,
    run: fn(Case) -> Result<(), Failed>,
    case: Case,
) -> Trial {
    let name = format!("{label}::{name}");
    if reachable {
        Trial::test(name, move || run(case))
    } else if required(label) {
        Trial::test(name, move || Err(format!("{label} is unreachable and CHOKAQ_TEST_REQUIRE names {label}").into()))
    } else {
        Trial::test(name, || Ok(())).with_ignored_flag(true)
    }
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let (pg_ok, my_ok) = runtime().block_on(async {
        let pg = PgBackend::connect(PgConfig::new(pg_url()).schema("chokaq_probe").max_connections(1)).await.is_ok();
        let my = MysqlBackend::connect(MysqlConfig::new(mysql_url()).schema("chokaq_probe").max_connections(1))
            .await
            .is_ok();
        (pg, my)
    });
    let mut trials = Vec::new();
    for (name, case) in cases() {
        trials.push(server_trial(name, "postgres", pg_ok, on_postgres, case));
        trials.push(server_trial(name, "mysql", my_ok, on_mysql, case));
        trials.push(Trial::test(format!("sqlite::{name}"), move || on_sqlite(case)));
    }
    for (name, case) in keyed_cases() {
        trials.push(Trial::test(format!("memory::{name}"), move || on_memory(case)));
        trials.push(server_trial(name, "postgres", pg_ok, on_postgres, case));
        trials.push(server_trial(name, "mysql", my_ok, on_mysql, case));
        trials.push(Trial::test(format!("sqlite::{name}"), move || on_sqlite(case)));
    }
    for (ok, label, env) in [(pg_ok, "postgres", "CHOKAQ_TEST_POSTGRES_URL"), (my_ok, "mysql", "CHOKAQ_TEST_MYSQL_URL")]
    {
        if !ok && !required(label) {
            eprintln!("{label} unreachable at {env} (or the default): its cases are ignored");
        }
    }
    libtest_mimic::run(&args, trials).exit_code()
}
