//! Issue 36 hole 4: a rate window is never overrun when the rescue prunes the starts log while
//! a rate-limited claim is in flight. The claim is held by the test hook of
//! `migrations/functions.sql` (`chokaq.test_claim_delay_ms`, at 'first': after its first
//! statement, before its lock and its count) while the database clock moves past the window of
//! the queue's earlier starts and the rescue prunes them; then the claim counts and takes. No
//! half-open window `[s, s + per)` of the started jobs' `started_at` (in Start mode each job's
//! stamp in the starts log) may hold more than the limit.

mod common;

use std::time::{Duration, Instant};

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, BackendExt, ClaimMode, QueueControl, RateLimit, RescueParams, Timestamp, WorkerId};
use common::{claim, job, q};
use sqlx::Connection;

/// The limit: `JOBS` starts per `PER_MS`.
const JOBS: u32 = 3;
const PER_MS: u64 = 1000;
/// How long the held claim sleeps: the window, and time for the rescue.
const HOLD_MS: u64 = PER_MS + 2000;

/// Queue-wide and per key (all jobs of one key): 3 started, a claim held before its count,
/// the window passes and the rescue prunes the 3 entries, the held claim goes on. Before the
/// fix it counted with its transaction's start time (a window that still held the 3 pruned
/// starts), found none, and started 3 more inside it: 6 in one window, limit 3.
#[rstest::rstest]
#[case::queue_wide(false)]
#[case::by_key(true)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_during_a_claim_never_overruns_the_window(#[case] by_key: bool) {
    let f = fixture!();
    let db = &f.db;
    let s = db.schema().to_string();
    let queue = "rate_race";
    for _ in 0..(2 * JOBS) {
        let j = if by_key { job(queue).concurrency_key("k") } else { job(queue) };
        db.enqueue(j).await.unwrap();
    }
    let limit = RateLimit { jobs: JOBS, per: Duration::from_millis(PER_MS), by_key };
    db.control_queue(&q(queue), QueueControl::SetRateLimit(Some(limit))).await.unwrap();
    let first = claim(db, WorkerId::random(), queue, 2 * JOBS, ClaimMode::Start).await;
    assert_eq!(first.len(), JOBS as usize, "the first claim fills the window");
    let last_start = first.iter().filter_map(|j| j.started_at).max().unwrap();

    // The held claim, on its own session.
    let common::cap_race::Delayed { mut conn, pid } = common::cap_race::Delayed::new(HOLD_MS, "first").await.unwrap();
    let claim_sql = format!("SELECT id FROM \"{s}\".claim($1, $2, $3, $4)");
    let held = tokio::spawn(async move {
        let mut tx = conn.begin().await.unwrap();
        let rows: Vec<uuid::Uuid> = sqlx::query_scalar(&claim_sql)
            .bind(WorkerId::random().0)
            .bind(vec![queue.to_string()])
            .bind(2 * JOBS as i32)
            .bind(2i16)
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        rows.len()
    });
    let sleeping = || async {
        let ev: Option<String> = sqlx::query_scalar("SELECT wait_event FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_optional(db.pool())
            .await
            .unwrap()
            .flatten();
        ev.as_deref() == Some("PgSleep")
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sleeping().await {
        assert!(Instant::now() < deadline, "the held claim never reached its sleep");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // The database clock past the first starts' window, then the rescue's prune.
    let past = last_start + chokaq_core::chrono::Duration::milliseconds(PER_MS as i64 + 1);
    while db.db_now().await.unwrap() <= past {
        assert!(Instant::now() < deadline, "the database clock did not move");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(db.rescue(&RescueParams::default()).await.unwrap().ran);
    let log: i64 =
        sqlx::query_scalar(&format!("SELECT count(*) FROM \"{s}\".starts")).fetch_one(db.pool()).await.unwrap();
    assert_eq!(log, 0, "the rescue pruned the first starts");
    assert!(sleeping().await, "the claim was no longer held when the rescue returned (HOLD_MS too short)");

    let n = tokio::time::timeout(Duration::from_secs(30), held).await.expect("the held claim returned").unwrap();
    let stamps: Vec<Timestamp> = sqlx::query_scalar(&format!(
        "SELECT started_at FROM \"{s}\".jobs_hot WHERE queue = $1 AND started_at IS NOT NULL"
    ))
    .bind(queue)
    .fetch_all(db.pool())
    .await
    .unwrap();
    let most = chokaq_conformance::max_in_window(&stamps, limit.per);
    eprintln!("by_key {by_key}: the held claim took {n}; {} started, at most {most} in one window", stamps.len());
    assert!(
        most <= JOBS as usize,
        "{most} starts in one window of {PER_MS} ms, limit {JOBS} (the held claim took {n})"
    );
    assert_eq!((n, stamps.len()), (JOBS as usize, 2 * JOBS as usize), "the held claim starts the next window's jobs");
    f.drop().await;
}
