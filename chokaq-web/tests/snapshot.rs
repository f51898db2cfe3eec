//! The overview's shared snapshot: the computation `router` starts when it is built never
//! replaces a snapshot stored after it was spawned. Deterministic on a current-thread runtime
//! with the memory backend (whose calls never yield): the spawned start-up computation runs
//! only when the test yields, after the first request stored its own snapshot.
//!
//! CI (two runs at once) failed `chokaq-web/api mysql::overview_snapshot` with "the page shows
//! the same snapshot": the start-up computation ran late, after a job was added, and stored a
//! snapshot that a young one should have kept out.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request};
use chokaq_core::memory::MemoryBackend;
use chokaq_core::{Backend, BackendExt, JobKind, NewJob, QueueName};
use chokaq_web::{router, Auth, WebOptions};
use tower::ServiceExt;

const TOKEN: &str = "snapshot-token-5d2e-91b7";

async fn pending(app: &axum::Router) -> Option<u64> {
    let req = Request::builder()
        .uri("/api/overview")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .expect("request");
    let resp = app.clone().oneshot(req).await.expect("response");
    assert_eq!(resp.status(), 200, "GET /api/overview");
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.expect("body");
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    v["totals"]["pending"].as_u64()
}

async fn enqueue(b: &Arc<dyn Backend>, n: usize) {
    let (q, k) = (QueueName::new("snap").unwrap(), JobKind::new("snap.v1").unwrap());
    for _ in 0..n {
        b.enqueue(NewJob::new(q.clone(), k.clone())).await.expect("enqueue");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_start_up_snapshot_never_replaces_a_newer_one() {
    let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    enqueue(&b, 3).await;
    // Spawns the start-up computation; on this runtime it has not run yet.
    let app = router(b.clone(), WebOptions::new(Auth::bearer(TOKEN)).snapshot_max_age(Duration::from_secs(3600)));
    assert_eq!(pending(&app).await, Some(3), "the first overview");
    enqueue(&b, 1).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(pending(&app).await, Some(3), "the shared snapshot within its age");
}
