//! Issue 40's dashboard findings, on SQLite (a fresh file in the temp directory):
//! L2, a destructive purge names its scope (no default age, unknown fields refused, nothing
//! deleted on a bad request); L3, the router nested under a path parameter (as
//! docs/operations.md shows) answers every route shape; L6, bidi and invisible characters in
//! keys, tags and errors are shown as escapes on every page.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use chokaq_core::{
    Backend, ClaimMode, ClaimParams, DeadReason, FailAction, JobId, JobLocation, NewJob, QueueName, WorkerId,
};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use chokaq_web::{Auth, WebOptions};
use tower::ServiceExt;

const BEARER: &str = "Bearer issue40-token-5b2e";

struct Resp {
    status: StatusCode,
    set_cookie: String,
    body: String,
}

async fn call(app: &Router, method: &str, uri: &str, cookie: Option<&str>, body: Option<String>) -> Resp {
    let mut b =
        Request::builder().method(method).uri(uri).header("authorization", BEARER).header("accept", "application/json");
    if let Some(c) = cookie {
        b = b.header("cookie", c);
    }
    if body.is_some() {
        b = b.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let req = b.body(body.map(Body::from).unwrap_or_else(Body::empty)).expect("request");
    let resp = app.clone().oneshot(req).await.expect("answer");
    let status = resp.status();
    let set_cookie = resp.headers().get(header::SET_COOKIE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20).await.expect("body");
    Resp { status, set_cookie, body: String::from_utf8_lossy(&bytes).into_owned() }
}

/// `GET uri` as a browser asks for it (HTML): status and body.
async fn get_html(app: &Router, uri: &str) -> (StatusCode, String) {
    let req = Request::builder().uri(uri).header("authorization", BEARER).body(Body::empty()).expect("request");
    let resp = app.clone().oneshot(req).await.expect("answer");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20).await.expect("body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// A CSRF token and its cookie, from `GET <prefix>/api/csrf`.
async fn login(app: &Router, prefix: &str) -> (String, String) {
    let r = call(app, "GET", &format!("{prefix}/api/csrf"), None, None).await;
    assert_eq!(r.status, StatusCode::OK, "GET {prefix}/api/csrf: {}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("json");
    let token = v["token"].as_str().expect("token").to_string();
    assert!(r.set_cookie.starts_with(&format!("chokaq_csrf={token};")), "{}", r.set_cookie);
    (format!("chokaq_csrf={token}"), token)
}

fn form(fields: &[(&str, &str)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        s.append_pair(k, v);
    }
    s.finish()
}

async fn with_sqlite<F, Fut>(f: F)
where
    F: FnOnce(Arc<dyn Backend>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = std::env::temp_dir().join(format!("chokaq-web-i40-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let db =
        SqliteBackend::connect(SqliteConfig::new(dir.join("jobs.db").display().to_string())).await.expect("sqlite");
    db.migrate().await.expect("migrate");
    let db = Arc::new(db);
    f(db.clone()).await;
    db.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

async fn make_dead(b: &Arc<dyn Backend>, queue: &str, n: usize) -> Vec<JobId> {
    let jobs =
        (0..n).map(|i| NewJob::build(queue, "web.fail.v1").unwrap().json(serde_json::json!({ "i": i }))).collect();
    let ids: Vec<JobId> = b.enqueue_many(jobs).await.expect("enqueue").into_iter().map(|e| e.id).collect();
    let w = WorkerId::random();
    let q = QueueName::new(queue).unwrap();
    let claimed = b.claim(&ClaimParams::new(w, vec![q], n as u32, ClaimMode::Start)).await.expect("claim");
    assert_eq!(claimed.len(), n, "claimed");
    for j in claimed {
        let out = b
            .fail(w, j.lease_ref(), FailAction::DeadLetter { reason: DeadReason::Failed, error: "boom".into() })
            .await
            .expect("fail");
        assert!(matches!(out, chokaq_core::Fenced::Done(_)), "fail: {out:?}");
    }
    ids
}

async fn dead_count(b: &Arc<dyn Backend>, ids: &[JobId]) -> usize {
    let mut n = 0;
    for id in ids {
        if let Some(j) = b.get_job(*id).await.expect("get_job") {
            if matches!(j.location, JobLocation::Dead(_)) {
                n += 1;
            }
        }
    }
    n
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

/// L2: a JSON purge with a misspelt field (`older_than=720`) or no age at all is a 400 naming
/// the problem, and deletes nothing; the well-formed call still purges.
#[test]
fn purge_names_its_scope() {
    runtime().block_on(with_sqlite(|b| async move {
        let app = Router::new()
            .nest("/ops", chokaq_web::router(b.clone(), WebOptions::new(Auth::bearer("issue40-token-5b2e"))));
        let ids = make_dead(&b, "i40-purge", 3).await;
        let (cookie, token) = login(&app, "/ops").await;
        let bad = [
            (vec![("older_than", "720")], "older_than"),
            (vec![], "older_than_hours"),
            (vec![("older_than_hours", "")], "older_than_hours"),
            (vec![("older_than_hours", "0"), ("queue", "i40-purge"), ("quuee", "x")], "quuee"),
        ];
        for (fields, needle) in bad {
            let mut f = fields.clone();
            f.push(("csrf", &token));
            let r = call(&app, "POST", "/ops/dead/purge", Some(&cookie), Some(form(&f))).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "purge with {fields:?}: {}", r.body);
            let v: serde_json::Value = serde_json::from_str(&r.body).expect("a JSON error");
            let msg = v["error"].as_str().unwrap_or_default();
            assert!(msg.contains(needle), "purge with {fields:?}: error {msg:?} should name {needle}");
            assert_eq!(dead_count(&b, &ids).await, 3, "purge with {fields:?} deleted dead letters");
        }
        let f = [("older_than_hours", "0"), ("queue", "i40-purge"), ("csrf", &token)];
        let r = call(&app, "POST", "/ops/dead/purge", Some(&cookie), Some(form(&f))).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert!(r.body.contains("\"purged\":3"), "{}", r.body);
        assert_eq!(dead_count(&b, &ids).await, 0, "purged");
    }));
}

/// L3: mounted exactly as docs/operations.md shows (`nest("/t/{tenant}", ...)`), every route
/// shape answers without a 500: a queue page, a job page, their JSON, a queue action, a job
/// action, a schedule action.
#[test]
fn nested_under_a_path_parameter() {
    runtime().block_on(with_sqlite(|b| async move {
        let dashboard = chokaq_web::router(b.clone(), WebOptions::new(Auth::bearer("issue40-token-5b2e")));
        let app = Router::new().nest("/t/{tenant}", dashboard);
        let job = NewJob::build("i40-nest", "web.ok.v1").unwrap().json(serde_json::json!({}));
        let id = b.enqueue_many(vec![job]).await.expect("enqueue")[0].id;
        let (cookie, token) = login(&app, "/t/acme").await;
        for (method, path, want) in [
            ("GET", "/t/acme/queues/i40-nest".to_string(), StatusCode::OK),
            ("GET", "/t/acme/api/queues/i40-nest".into(), StatusCode::OK),
            ("GET", format!("/t/acme/jobs/{id}"), StatusCode::OK),
            ("GET", format!("/t/acme/api/jobs/{id}"), StatusCode::OK),
            ("POST", "/t/acme/queues/i40-nest/pause".into(), StatusCode::OK),
            ("POST", format!("/t/acme/jobs/{id}/cancel"), StatusCode::OK),
            ("POST", "/t/acme/schedules/nightly/pause".into(), StatusCode::NOT_FOUND),
        ] {
            let body = (method == "POST").then(|| form(&[("csrf", &token), ("confirm", "yes")]));
            let r = call(&app, method, &path, Some(&cookie), body).await;
            assert_eq!(r.status, want, "{method} {path}: {}", r.body);
        }
        assert!(b.get_job(id).await.unwrap().is_some(), "job still readable");
    }));
}

/// L6: a tag with an unterminated U+202E, an idempotency key with a zero-width space, a
/// concurrency key with U+2066 and an error with U+202E and U+200F (all accepted by
/// enqueue: right-to-left text is legitimate) reach no page raw: each shows as its escape,
/// `\u{202e}`, as the CLI's cells do. Before the fix the pages held the characters
/// themselves (an unterminated U+202E in the tags cell reversed the tags after it).
#[test]
fn bidi_and_invisible_characters_are_shown() {
    runtime().block_on(with_sqlite(|b| async move {
        let app = chokaq_web::router(b.clone(), WebOptions::new(Auth::bearer("issue40-token-5b2e")));
        let job = NewJob::build("i40-bidi", "web.fail.v1")
            .unwrap()
            .json(serde_json::json!({}))
            .tags(["evil\u{202E}gat", "next"])
            .idempotency_key("key\u{200B}zw")
            .concurrency_key("ck\u{2066}iso");
        let id = b.enqueue_many(vec![job]).await.expect("enqueue")[0].id;
        let w = WorkerId::random();
        let q = QueueName::new("i40-bidi").unwrap();
        let claimed = b.claim(&ClaimParams::new(w, vec![q], 1, ClaimMode::Start)).await.expect("claim");
        assert_eq!(claimed.len(), 1, "claimed");
        let error = "failed: \u{202E}dlrow\u{200F} end".to_string();
        let out = b
            .fail(w, claimed[0].lease_ref(), FailAction::DeadLetter { reason: DeadReason::Failed, error })
            .await
            .expect("fail");
        assert!(matches!(out, chokaq_core::Fenced::Done(_)), "fail: {out:?}");
        let raw = ['\u{202E}', '\u{200B}', '\u{2066}', '\u{200F}'];
        let mut shown = std::collections::BTreeSet::new();
        for path in [
            "/".to_string(),
            "/jobs".into(),
            "/jobs?queue=i40-bidi&tag=next".into(),
            format!("/jobs/{id}"),
            "/dead".into(),
            "/queues/i40-bidi".into(),
            "/queues/q%E2%80%AEx".into(),
        ] {
            let (status, body) = get_html(&app, &path).await;
            assert!(status.is_success() || status.is_client_error(), "GET {path}: {status} {body}");
            for c in raw {
                assert!(!body.contains(c), "GET {path}: U+{:04X} printed raw", u32::from(c));
            }
            for e in ["\\u{202e}", "\\u{200b}", "\\u{2066}", "\\u{200f}"] {
                if body.contains(e) {
                    shown.insert(e);
                }
            }
        }
        assert_eq!(shown.len(), 4, "every character shown as its escape somewhere: {shown:?}");
    }));
}
