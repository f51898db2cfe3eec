//! Heartbeats are HOT updates, in a test binary of its own: whether an update can be HOT
//! depends on pruning, and pruning waits for the oldest snapshot in the database, so the open
//! transactions of other tests running beside it (the `ops` binary runs its tests in parallel)
//! made it flaky (463 and 617 of 1,000 HOT in those runs, 994 alone). Cargo runs test binaries
//! one at a time.

mod common;

use std::time::Duration;

use chokaq_core::{Backend, ClaimMode, WorkerId};
use common::{claim, job};

/// Heartbeats are HOT updates (issue: PostgreSQL performance, heartbeats): no index covers a
/// column a heartbeat writes, and the hot table leaves room on its pages, so at least 90% of
/// 1,000 heartbeat row updates add no index entries (`pg_stat_user_tables.n_tup_hot_upd`).
#[tokio::test]
async fn heartbeats_are_hot_updates() {
    let f = fixture!();
    let db = &f.db;
    let w = WorkerId::random();
    db.enqueue_many((0..200).map(|_| job("hot")).collect()).await.unwrap();
    let leases: Vec<_> = claim(db, w, "hot", 200, ClaimMode::Start).await.iter().map(|j| j.lease_ref()).collect();
    assert_eq!(leases.len(), 200);
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
    // The claim's own updates reach the statistics first.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let (upd0, hot0) = loop {
        let c = counts().await;
        if c.0 >= 200 || std::time::Instant::now() > deadline {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for _ in 0..5 {
        let r = db.heartbeat(w, &leases).await.unwrap();
        assert_eq!(r.held.len(), 200);
    }
    let (upd, hot) = loop {
        let c = counts().await;
        if c.0 >= upd0 + 1000 || std::time::Instant::now() > deadline {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (beats, hot_beats) = (upd - upd0, hot - hot0);
    assert!(beats >= 1000, "heartbeat updates seen in the statistics: {beats}");
    assert!(
        hot_beats * 10 >= beats * 9,
        "HOT heartbeat updates: {hot_beats} of {beats} ({}%), expected at least 90%",
        hot_beats * 100 / beats.max(1)
    );
    println!("HOT heartbeat updates: {hot_beats} of {beats}");
    f.drop().await;
}
