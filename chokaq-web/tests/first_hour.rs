//! Issue 40 item 5, the dashboard's part: a throttled queue (a queue-wide rate limit whose
//! window is full) shows that its window is full, not a lag fault. On a fresh SQLite file.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chokaq_core::{Backend, ClaimMode, ClaimParams, NewJob, QueueControl, QueueName, RateLimit, WorkerId};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use chokaq_web::{Auth, WebOptions};
use tower::ServiceExt;

const BEARER: &str = "Bearer first-hour-token-0123456789";

fn job(queue: &str, due: chrono::DateTime<chrono::Utc>) -> NewJob {
    NewJob::build(queue, "web.ok.v1").unwrap().json(serde_json::json!({})).run_at(due)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_queue_says_its_window_is_full() {
    let dir = std::env::temp_dir().join(format!("chokaq-web-first-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = SqliteBackend::connect(SqliteConfig::new(dir.join("jobs.db").display().to_string())).await.unwrap();
    db.migrate().await.unwrap();
    let b: Arc<dyn Backend> = Arc::new(db);
    let thr = QueueName::new("thr").unwrap();
    b.control_queue(&thr, QueueControl::SetRateLimit(Some(RateLimit::parse("3/1h", false).unwrap()))).await.unwrap();
    // Three started and done this hour: the window is full.
    let now = chrono::Utc::now();
    b.enqueue_many((0..3).map(|_| job("thr", now)).collect()).await.unwrap();
    let w = WorkerId::random();
    let claimed = b.claim(&ClaimParams::new(w, vec![thr.clone()], 10, ClaimMode::Start)).await.unwrap();
    assert_eq!(claimed.len(), 3);
    let leases: Vec<_> = claimed.iter().map(|j| j.lease_ref()).collect();
    b.complete(w, &leases).await.unwrap();
    // Two more, due five minutes ago, held back by the limit; the same in a queue without one.
    let due = now - chrono::Duration::minutes(5);
    b.enqueue_many(vec![job("thr", due), job("thr", due), job("slow", due)]).await.unwrap();
    let more = b.claim(&ClaimParams::new(w, vec![thr.clone()], 10, ClaimMode::Start)).await.unwrap();
    assert_eq!(more.len(), 0, "the rate limit holds them");

    let app = chokaq_web::router(
        b.clone(),
        WebOptions::new(Auth::bearer("first-hour-token-0123456789")).snapshot_max_age(Duration::ZERO),
    );
    // The throughput is read in the background: poll until the page has it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        let req = Request::builder().uri("/").header("authorization", BEARER).body(Body::empty()).unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body = String::from_utf8(axum::body::to_bytes(resp.into_body(), 16 << 20).await.unwrap().to_vec()).unwrap();
        if body.contains("data-done=\"3\"") {
            break body;
        }
        assert!(Instant::now() < deadline, "no throughput on the overview after 10 s:\n{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(body.contains("data-throttled=\"thr\""), "{body}");
    assert!(body.contains("throttled, its rate limit's window is full (3/1h)"), "{body}");
    assert!(!body.contains("thr</a>: oldest due job waiting"), "a throttled queue flagged as lag:\n{body}");
    assert_eq!(body.matches("data-limit=\"window-full\"").count(), 1, "{body}");
    // The queue without a limit is still a lag problem.
    assert!(body.contains("slow</a>: oldest due job waiting"), "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}
