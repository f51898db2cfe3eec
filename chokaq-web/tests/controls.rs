//! Issue 40 item 4, the dashboard's part: a queue control refuses values it does not
//! understand (`by_key=yes`, `none` with `by_key`), writes no settings for an unknown queue
//! without the confirmation the CLI asks for (`--create`; here `create=yes`), says what a key
//! cap of 0 does, and `/api/queues/%FF` answers JSON. On a fresh SQLite file.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use chokaq_core::{Backend, NewJob, QueueName};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use chokaq_web::{Auth, WebOptions};
use tower::ServiceExt;

const BEARER: &str = "Bearer controls-token-0123456789";

struct Resp {
    status: StatusCode,
    content_type: String,
    body: String,
}

async fn call(app: &Router, method: &str, uri: &str, json: bool, cookie: Option<&str>, body: Option<String>) -> Resp {
    let mut b = Request::builder().method(method).uri(uri).header("authorization", BEARER);
    if json {
        b = b.header("accept", "application/json");
    }
    if let Some(c) = cookie {
        b = b.header("cookie", c);
    }
    if body.is_some() {
        b = b.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let resp = app.clone().oneshot(b.body(body.map(Body::from).unwrap_or_else(Body::empty)).unwrap()).await.unwrap();
    let status = resp.status();
    let content_type = resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20).await.unwrap();
    Resp { status, content_type, body: String::from_utf8_lossy(&bytes).into_owned() }
}

fn form(fields: &[(&str, &str)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        s.append_pair(k, v);
    }
    s.finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controls_refuse_what_they_do_not_understand() {
    let dir = std::env::temp_dir().join(format!("chokaq-web-ctl-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = SqliteBackend::connect(SqliteConfig::new(dir.join("jobs.db").display().to_string())).await.unwrap();
    db.migrate().await.unwrap();
    let b: Arc<dyn Backend> = Arc::new(db);
    b.enqueue_many(vec![NewJob::build("known", "web.ok.v1").unwrap().json(serde_json::json!({}))]).await.unwrap();
    let app = chokaq_web::router(b.clone(), WebOptions::new(Auth::bearer("controls-token-0123456789")));
    let r = call(&app, "GET", "/api/csrf", true, None, None).await;
    let token = serde_json::from_str::<serde_json::Value>(&r.body).unwrap()["token"].as_str().unwrap().to_string();
    let cookie = format!("chokaq_csrf={token}");
    let post = |uri: &'static str, json: bool, fields: Vec<(&'static str, &'static str)>| {
        let (app, cookie, token) = (app.clone(), cookie.clone(), token.clone());
        async move {
            let mut f = fields;
            f.push(("csrf", &token));
            call(&app, "POST", uri, json, Some(&cookie), Some(form(&f))).await
        }
    };
    let settings = |q: &'static str| {
        let b = b.clone();
        async move { b.queue_settings(&QueueName::new(q).unwrap()).await.unwrap() }
    };

    // by_key=yes: refused, nothing set (before: a queue-wide 5/1s).
    let r = post("/queues/known/rate-limit", true, vec![("rate", "5/1s"), ("by_key", "yes")]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("by_key must be on or off"), "{}", r.body);
    assert_eq!(settings("known").await.rate_limit, None);
    // none with by_key: refused.
    let r = post("/queues/known/rate-limit", true, vec![("rate", "none"), ("by_key", "on")]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("by_key needs a limit"), "{}", r.body);
    // What the form sends still works.
    let r = post("/queues/known/rate-limit", true, vec![("rate", "5/1s"), ("by_key", "on")]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let rl = settings("known").await.rate_limit.expect("a limit");
    assert_eq!((rl.jobs, rl.by_key), (5, true));

    // An unknown queue: no settings row without create=yes (JSON: 404; HTML: a confirmation).
    let r = post("/queues/typo/pause", true, vec![]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(r.body.contains("no job and no settings") && r.body.contains("create=yes"), "{}", r.body);
    let r = post("/queues/typo/pause", false, vec![]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body.contains("has no job and no settings"), "{}", r.body);
    assert!(r.body.contains("name=\"create\" value=\"yes\""), "{}", r.body);
    let s = settings("typo").await;
    assert_eq!((s.updated_at.is_some(), s.is_paused), (false, false), "no settings row written");
    let r = post("/queues/typo/pause", true, vec![("create", "yes")]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let s = settings("typo").await;
    assert_eq!((s.updated_at.is_some(), s.is_paused), (true, true));

    // A key cap of 0: set, and explained.
    let r = post("/queues/known/key-cap", true, vec![("key_max_workers", "0")]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body.contains("no job with a concurrency key starts"), "{}", r.body);
    assert_eq!(settings("known").await.key_max_workers, Some(0));
    let r = post("/queues/known/key-cap", false, vec![("key_max_workers", "0")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);

    // A path that is not UTF-8: JSON under /api/.
    let r = call(&app, "GET", "/api/queues/%FF", false, None, None).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.content_type.starts_with("application/json"), "{} {}", r.content_type, r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("bad path")), "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}
