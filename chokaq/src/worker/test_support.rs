//! Helpers of the worker's unit tests: jobs, waiting, and a fresh PostgreSQL schema per test
//! (skipped with a note when the database is unreachable).

use std::sync::Arc;
use std::time::Duration;

use chokaq_core::NewJob;
use chokaq_postgres::{PgBackend, PgConfig};
use tokio::time::Instant;

use super::MaintenanceConfig;

pub(super) fn no_maintenance() -> MaintenanceConfig {
    MaintenanceConfig { enabled: false, ..MaintenanceConfig::default() }
}

/// `n` jobs of kind `t` on `queue`, payload `{"n": i}`.
pub(super) fn jobs(queue: &str, n: usize) -> Vec<NewJob> {
    (0..n).map(|i| NewJob::build(queue, "t").unwrap().json(serde_json::json!({ "n": i }))).collect()
}

/// Polls `cond` until it holds or `limit` passes.
pub(super) async fn wait_for<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A migrated backend on a fresh schema `chokaq_t_<hex>`, or `None` when PostgreSQL is
/// unreachable (`CHOKAQ_TEST_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/test`).
pub(super) async fn pg() -> Option<Arc<PgBackend>> {
    let url = std::env::var("CHOKAQ_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
    match PgBackend::connect(PgConfig::new(url).schema(schema).max_connections(4)).await {
        Ok(b) => {
            use chokaq_core::Backend;
            b.migrate().await.expect("migrate");
            Some(Arc::new(b))
        }
        Err(e) => {
            eprintln!("PostgreSQL unreachable, test skipped: {e}");
            None
        }
    }
}
