//! Shared helpers for the SQLite backend tests: each test gets its own temporary database file.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chokaq_core::{Backend, ClaimMode, ClaimParams, ClaimedJob, NewJob, QueueName, WorkerId};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};

/// A temporary database file, removed (with its WAL and shared-memory files) on drop.
#[derive(Debug)]
pub struct TempDb {
    pub path: PathBuf,
}

impl TempDb {
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(format!("chokaq_t_{}.db", uuid::Uuid::new_v4().simple()));
        TempDb { path }
    }

    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(Path::new(&p));
        }
    }
}

/// A migrated backend on a fresh file.
pub async fn fresh() -> (SqliteBackend, TempDb) {
    fresh_with(|c| c).await
}

/// A migrated backend on a fresh file, with a tweaked configuration.
pub async fn fresh_with(f: impl FnOnce(SqliteConfig) -> SqliteConfig) -> (SqliteBackend, TempDb) {
    let db = TempDb::new();
    let backend = SqliteBackend::connect(f(SqliteConfig::new(db.url()))).await.expect("connect");
    backend.migrate().await.expect("migrate");
    (backend, db)
}

pub fn q(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

pub fn job(queue: &str) -> NewJob {
    NewJob::build(queue, "test.job.v1").unwrap()
}

pub async fn claim(b: &SqliteBackend, w: WorkerId, queue: &str, limit: u32, mode: ClaimMode) -> Vec<ClaimedJob> {
    b.claim(&ClaimParams::new(w, vec![q(queue)], limit, mode)).await.expect("claim")
}

/// Polls `cond` until it holds or `timeout` passes (no sleeps as synchronisation).
pub async fn wait_until<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
