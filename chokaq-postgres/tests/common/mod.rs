//! Shared helpers of this crate's tests: a fresh schema per test on the real PostgreSQL.
#![allow(dead_code)]

pub mod cap_race;

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, ClaimMode, ClaimParams, ClaimedJob, NewJob, QueueName, WorkerId};
use chokaq_postgres::{PgBackend, PgConfig};

/// The server the tests use: `CHOKAQ_TEST_POSTGRES_URL`, else the local trust-auth server.
pub fn url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Whether an unreachable server must fail the test instead of skipping it.
pub fn required() -> bool {
    std::env::var("CHOKAQ_TEST_REQUIRE").map(|v| v.contains("postgres")).unwrap_or(false)
}

/// A migrated backend on a fresh schema, dropped again by [`Fixture::drop`]. `None` (the test
/// returns early, after saying so) when the server is unreachable and not required.
pub struct Fixture {
    pub db: PgBackend,
}

impl Fixture {
    pub async fn new() -> Option<Fixture> {
        Self::with(|c| c).await
    }

    pub async fn with(f: impl FnOnce(PgConfig) -> PgConfig) -> Option<Fixture> {
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let config = f(PgConfig::new(url()).schema(schema).max_connections(20));
        match PgBackend::connect(config).await {
            Ok(db) => {
                db.migrate().await.expect("migrate");
                Some(Fixture { db })
            }
            Err(e) if !required() && e.kind() == chokaq_core::ErrorKind::Unavailable => {
                eprintln!("SKIPPED: PostgreSQL unreachable ({e}); set CHOKAQ_TEST_REQUIRE=postgres to fail instead");
                None
            }
            Err(e) => panic!("PostgreSQL required but not usable: {e}"),
        }
    }

    pub async fn drop(self) {
        self.db.drop_schema().await.expect("drop schema");
        self.db.pool().close().await;
    }
}

/// Returns from the test when the fixture is `None` (server unreachable, not required).
#[macro_export]
macro_rules! fixture {
    () => {
        match common::Fixture::new().await {
            Some(f) => f,
            None => return,
        }
    };
    ($f:expr) => {
        match common::Fixture::with($f).await {
            Some(f) => f,
            None => return,
        }
    };
}

pub fn q(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

pub fn job(queue: &str) -> NewJob {
    NewJob::build(queue, "test.job.v1").unwrap()
}

pub async fn claim(db: &PgBackend, worker: WorkerId, queue: &str, limit: u32, mode: ClaimMode) -> Vec<ClaimedJob> {
    db.claim(&ClaimParams::new(worker, vec![q(queue)], limit, mode)).await.unwrap()
}

pub async fn claim_one(db: &PgBackend, worker: WorkerId, queue: &str, mode: ClaimMode) -> ClaimedJob {
    let mut v = claim(db, worker, queue, 1, mode).await;
    assert_eq!(v.len(), 1, "expected one job from {queue}");
    v.pop().unwrap()
}

pub async fn total_presence(db: &PgBackend, id: chokaq_core::JobId) -> chokaq_core::testing::Presence {
    db.presence(id).await.unwrap()
}
