//! Issue 40's dashboard findings, on SQLite (a fresh file in the temp directory):
//! L2, a destructive purge names its scope (no default age, unknown fields refused, nothing
//! deleted on a bad request); L3, the router nested under a path parameter (as
//! docs/operations.md shows) answers every route shape.

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
