//! Heartbeats are HOT updates, in a test binary of its own.
//!
//! Whether an update can be HOT depends on room on the row's page. Room made by pruning dead row
//! versions depends on the oldest snapshot anywhere on the server, so other sessions (tests
//! running beside this one, another test run on the same server) made a test that heartbeats
//! a row several times flaky: 463 and 617 of 1,000 HOT beside the `ops` binary, 596 of 1,000
//! beside a second `.ci/run`, 994 alone. This test needs no pruning: it rewrites the claimed rows
//! onto fresh pages (the table's fillfactor 50 leaves half of each page free) and heartbeats
//! each row once, so every new version fits on its own page whatever other sessions hold open.

mod common;

use std::time::Duration;

use chokaq_core::{Backend, ClaimMode, WorkerId};
use common::{claim, job};

const JOBS: usize = 1000;

/// Heartbeats are HOT updates (issue: PostgreSQL performance, heartbeats): no index covers a
/// column a heartbeat writes, and the hot table leaves room on its pages, so at least 90% of
/// 1,000 heartbeat row updates add no index entries (`pg_stat_user_tables.n_tup_hot_upd`).
#[tokio::test]
async fn heartbeats_are_hot_updates() {
    let f = fixture!();
    let db = &f.db;
    let w = WorkerId::random();
    db.enqueue_many((0..JOBS).map(|_| job("hot")).collect()).await.unwrap();
    let mut leases = Vec::with_capacity(JOBS);
    while leases.len() < JOBS {
        let got = claim(db, w, "hot", 200, ClaimMode::Start).await;
        assert!(!got.is_empty(), "claimed {} of {JOBS}", leases.len());
        leases.extend(got.iter().map(|j| j.lease_ref()));
    }
    assert_eq!(leases.len(), JOBS);

    // The claimed rows onto fresh pages: the deleted versions keep their space until pruned, so
    // the inserts go to new pages, filled to the fillfactor.
    {
        let schema = db.schema();
        let mut tx = db.pool().begin().await.unwrap();
        // Every column but the generated ones (`due_at`).
        let cols: String = sqlx::query_scalar(
            "SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position) \
             FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'jobs_hot' \
             AND is_generated = 'NEVER'",
        )
        .bind(schema)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        for sql in [
            format!("CREATE TEMP TABLE moved ON COMMIT DROP AS SELECT {cols} FROM \"{schema}\".jobs_hot"),
            format!("DELETE FROM \"{schema}\".jobs_hot"),
            format!("INSERT INTO \"{schema}\".jobs_hot ({cols}) SELECT {cols} FROM moved"),
        ] {
            sqlx::query(&sql).execute(&mut *tx).await.unwrap();
        }
        tx.commit().await.unwrap();
    }

    let counts = || async {
        // A fresh snapshot of the statistics each time (they are flushed asynchronously).
        let mut conn = db.pool().acquire().await.unwrap();
        sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut *conn).await.unwrap();
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs_hot'",
        )
        .bind(db.schema())
        .fetch_one(&mut *conn)
        .await
        .unwrap()
    };
    // The claims' own updates reach the statistics first.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let (upd0, hot0) = loop {
        let c = counts().await;
        if c.0 >= JOBS as i64 || std::time::Instant::now() > deadline {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for chunk in leases.chunks(200) {
        let r = db.heartbeat(w, chunk).await.unwrap();
        assert_eq!(r.held.len(), chunk.len());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let (upd, hot) = loop {
        let c = counts().await;
        if c.0 >= upd0 + JOBS as i64 || std::time::Instant::now() > deadline {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (beats, hot_beats) = (upd - upd0, hot - hot0);
    assert!(beats >= JOBS as i64, "heartbeat updates seen in the statistics: {beats}");
    assert!(
        hot_beats * 10 >= beats * 9,
        "HOT heartbeat updates: {hot_beats} of {beats} ({}%), expected at least 90%",
        hot_beats * 100 / beats.max(1)
    );
    println!("HOT heartbeat updates: {hot_beats} of {beats}");
    f.drop().await;
}
