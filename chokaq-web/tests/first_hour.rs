//! Issue 40 item 5, the dashboard's part: a throttled queue (a queue-wide rate limit whose
//! window is full) shows that its window is full, not a lag fault (a fresh SQLite file); the
//! overview's archived counts right or visibly a bound on a fresh install, before the planner's
//! statistics exist (PostgreSQL, a fresh schema `chokaq_t_<hex>`, dropped afterwards).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, ClaimMode, ClaimParams, NewJob, QueueControl, QueueName, RateLimit, WorkerId};
use chokaq_postgres::{PgBackend, PgConfig};
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

/// GET `/` until `ready` holds (the throughput is read in the background), 10 s at most.
async fn overview_when(app: &axum::Router, ready: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let req = Request::builder().uri("/").header("authorization", BEARER).body(Body::empty()).unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body = String::from_utf8(axum::body::to_bytes(resp.into_body(), 16 << 20).await.unwrap().to_vec()).unwrap();
        if body.contains(ready) {
            return body;
        }
        assert!(Instant::now() < deadline, "no {ready} on the overview after 10 s:\n{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh install: 3,000 jobs archived this hour, no ANALYZE yet (autovacuum off on the
/// table so none runs during the test). The backend's estimate is its floor, 1,001; the
/// overview showed `~1,001` beside "Done, 1 h" 3,000. Now the queue's cell and the Archived
/// card show the bound the throughput proves, `≥3,000`, marked stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_counts_after_a_fresh_install() {
    let url = std::env::var("CHOKAQ_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
    let pg = PgBackend::connect(PgConfig::new(url).schema(&schema).max_connections(4)).await.expect("postgres");
    pg.migrate().await.unwrap();
    let pg = Arc::new(pg);
    let checks = tokio::spawn(fresh_install_checks(pg.clone(), schema));
    let outcome = checks.await;
    pg.drop_schema().await.unwrap();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn fresh_install_checks(pg: Arc<PgBackend>, schema: String) {
    sqlx::query(&format!("ALTER TABLE \"{schema}\".jobs_archive SET (autovacuum_enabled = false)"))
        .execute(pg.pool())
        .await
        .unwrap();
    sqlx::query(&format!(
        "INSERT INTO \"{schema}\".jobs_archive (id, queue, kind, payload, priority, attempt, max_attempts, \
         created_at, updated_at, finished_at) \
         SELECT (lpad(to_hex(floor(extract(epoch FROM c) * 1000)::bigint), 12, '0') || '7000' || '8' \
                 || lpad(to_hex(g), 15, '0'))::uuid, 'fresh', 'k', '{{}}', 0, 1, 1, c, c, c \
           FROM (SELECT g, now() - g * interval '10 milliseconds' AS c FROM generate_series(1, 3000) g) s"
    ))
    .execute(pg.pool())
    .await
    .unwrap();
    // One live job: the queue is listed (a queue only in an archive without statistics is not).
    pg.enqueue_many(vec![job("fresh", chrono::Utc::now())]).await.unwrap();
    let b: Arc<dyn Backend> = pg.clone();
    let est = b.stats_estimated().await.unwrap();
    let q = est.queue("fresh").expect("the queue is listed");
    assert_eq!((q.archived, q.archived_estimated), (1001, true), "the backend's floor before ANALYZE");
    let app = chokaq_web::router(
        b.clone(),
        WebOptions::new(Auth::bearer("first-hour-token-0123456789")).snapshot_max_age(Duration::ZERO),
    );
    let body = overview_when(&app, "data-done=\"3000\"").await;
    let row = body.split("data-queue=\"fresh\"").nth(1).expect("the queue's row");
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("data-col=\"archived\"><span class=\"est\" data-stale=\"1\""), "{row}");
    assert!(row.contains(">≥3,000</span>"), "{row}");
    assert!(!row.contains("~1,001"), "{row}");
    assert!(body.contains("id=\"total-archived\"><span class=\"est\" data-stale=\"1\""), "{body}");
}
