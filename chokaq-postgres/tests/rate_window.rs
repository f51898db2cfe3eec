//! Issue 40, L7: a rate limit over a long window (`1000000/1d`) must not make every claim
//! count the whole window. A claim's work is read from PostgreSQL's own statistics of the
//! claim's transaction, on a session of the test's: the tuples the claim returned from the
//! starts log, from all its indexes and its sequential scans
//! (`pg_stat_get_xact_tuples_returned`), the same whether the window holds 1,000 starts or
//! 1,000,000. And the count stays exact there (`chokaq_conformance::check_long_window`).

mod common;

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, BackendExt, QueueControl, RateLimit, WorkerId};
use chokaq_postgres::{PgBackend, PgConfig};
use common::{job, q};
use sqlx::Connection;
use std::time::Duration;

/// How many jobs one claim of `limit` from `queue` took, and how many tuples it read from the
/// starts log (table and indexes), in one transaction on a fresh session of its own.
async fn measured_claim(schema: &str, queue: &str, limit: i32) -> (usize, i64) {
    let mut conn = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let ids: Vec<uuid::Uuid> = sqlx::query_scalar(&format!("SELECT id FROM \"{schema}\".claim($1, $2, $3, $4)"))
        .bind(WorkerId::random().0)
        .bind(vec![queue.to_string()])
        .bind(limit)
        .bind(2i16)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    let read: i64 = sqlx::query_scalar(
        "SELECT sum(pg_stat_get_xact_tuples_returned(c.oid))::int8 FROM pg_class c \
          WHERE c.oid = $1::regclass OR c.oid IN (SELECT i.indexrelid FROM pg_index i WHERE i.indrelid = $1::regclass)",
    )
    .bind(format!("\"{schema}\".starts"))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    (ids.len(), read)
}

/// Queue-wide and per key: a claim of 20 reads as few tuples of the starts log with 1,000
/// starts in its window as with 999,990 (at most 4), and takes exactly what the window leaves
/// (10); the next claim, with 1,000,000 in the window, takes nothing and reads as little. Before
/// (a count of the window's entries), it read every entry: 999,990 tuples, then 1,000,000.
#[rstest::rstest]
#[case::queue_wide(false)]
#[case::by_key(true)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_work_does_not_grow_with_the_window(#[case] by_key: bool) {
    let f = fixture!();
    let db = &f.db;
    let s = db.schema().to_string();
    let limit = |jobs| {
        let l = RateLimit::new(jobs, Duration::from_secs(86_400));
        if by_key {
            l.by_key()
        } else {
            l
        }
    };
    let key = by_key.then_some("k");
    let mut reads = Vec::new();
    for (queue, fill) in [("small", 1_000u64), ("large", 999_990)] {
        for _ in 0..25 {
            let j = if by_key { job(queue).concurrency_key("k") } else { job(queue) };
            db.enqueue(j).await.unwrap();
        }
        db.control_queue(&q(queue), QueueControl::SetRateLimit(Some(limit(1_000_000)))).await.unwrap();
        let now = db.db_now().await.unwrap();
        db.add_starts(&q(queue), key, fill, now - chokaq_core::chrono::Duration::hours(1)).await.unwrap();
        let (took, read) = measured_claim(&s, queue, 20).await;
        let (again, read_full) = measured_claim(&s, queue, 20).await;
        eprintln!("by_key {by_key}: {fill} starts in the window: took {took} reading {read} tuples of the starts log, then {again} reading {read_full}");
        reads.push((fill, took, read, again, read_full));
    }
    let (small, large) = (reads[0], reads[1]);
    assert_eq!((small.1, large.1, large.3), (20, 10, 0), "(took with 1,000 starts, with 999,990, then with 1,000,000)");
    // Three index tuples: the bucket's last ordinal and its first in the window (the count),
    // and the last again before the starts are logged; none with a full window (no log).
    assert!(
        small.2 <= 4 && large.2 <= 4 && large.4 <= 4,
        "the claim read {} tuples of the starts log with 999,990 starts in its window, {} with 1,000, {} with \
         1,000,000 (a full window)",
        large.2,
        small.2,
        large.4
    );
    f.drop().await;
}

/// `check_long_window` with 999,990 starts, queue-wide and per key: exact counts.
#[rstest::rstest]
#[case::queue_wide(false)]
#[case::by_key(true)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_starts_in_the_window_are_counted_exactly(#[case] by_key: bool) {
    let f = fixture!();
    chokaq_conformance::check_long_window(&f.db, &q("long"), 999_990, by_key).await.unwrap();
    f.drop().await;
}

/// A schema at version 15 with starts logged row by row (no ordinals) upgrades to 16: its
/// entries are numbered in stamp order for each queue's limit (the queue's bucket queue-wide,
/// each key's per key, key-less entries 0 there), and the windows count as before: 3 of 10
/// per day taken queue-wide leave 7; per key, 2 of key a and 1 of key b leave 1 and 2 of 3.
#[tokio::test]
async fn version_15_starts_are_numbered_by_the_upgrade() {
    let Some(f) = common::Fixture::new().await else { return };
    let schema = format!("up_{}", uuid::Uuid::new_v4().simple());
    let quoted = format!("\"{schema}\"");
    let pool = f.db.pool().clone();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&format!("CREATE SCHEMA {quoted}")).execute(&mut *tx).await.unwrap();
    sqlx::query(&format!(
        "CREATE TABLE {quoted}.versions (version integer PRIMARY KEY, name text NOT NULL, \
         applied_at timestamptz NOT NULL DEFAULT now())"
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    for m in chokaq_postgres::MIGRATIONS.iter().filter(|m| m.version <= 15) {
        sqlx::raw_sql(&m.sql.replace("{schema}", &quoted)).execute(&mut *tx).await.unwrap();
        let insert = format!("INSERT INTO {quoted}.versions (version, name) VALUES ($1, $2)");
        sqlx::query(&insert).bind(m.version).bind(m.name).execute(&mut *tx).await.unwrap();
    }
    // The limits, and the starts a version-15 claim logged (queue, key, seconds ago).
    sqlx::raw_sql(&format!(
        "INSERT INTO {quoted}.queues (name, rate_jobs, rate_per_ms, rate_by_key) VALUES \
         ('wide', 10, 86400000, false), ('bykey', 3, 86400000, true); \
         INSERT INTO {quoted}.starts (queue, ckey, stamp) SELECT s.q, s.k, now() - s.ago * interval '1 second' \
           FROM (VALUES ('wide', 'a', 30), ('wide', NULL, 20), ('wide', 'b', 10), ('wide', 'a', 90000), \
                        ('bykey', 'a', 30), ('bykey', 'b', 20), ('bykey', NULL, 15), ('bykey', 'a', 10)) \
                AS s(q, k, ago)"
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let db = PgBackend::connect(PgConfig::new(common::url()).schema(schema.clone()).max_connections(2)).await.unwrap();
    db.migrate().await.unwrap();
    let numbered: Vec<(String, Option<String>, i64)> =
        sqlx::query_as(&format!("SELECT queue, ckey, n FROM {quoted}.starts ORDER BY queue, ckey NULLS FIRST, stamp"))
            .fetch_all(&pool)
            .await
            .unwrap();
    let row = |q: &str, k: Option<&str>, n: i64| (q.to_string(), k.map(str::to_string), n);
    assert_eq!(
        numbered,
        vec![
            row("bykey", None, 0),
            row("bykey", Some("a"), 1),
            row("bykey", Some("a"), 2),
            row("bykey", Some("b"), 1),
            row("wide", None, 3),
            row("wide", Some("a"), 1),
            row("wide", Some("a"), 2),
            row("wide", Some("b"), 4),
        ]
    );
    for (queue, keys) in
        [("wide", vec![None; 10]), ("bykey", vec![Some("a"), Some("a"), Some("b"), Some("b"), Some("b")])]
    {
        for k in keys {
            let j = job(queue);
            db.enqueue(match k {
                Some(k) => j.concurrency_key(k),
                None => j,
            })
            .await
            .unwrap();
        }
    }
    let took = |queue: &'static str| {
        let db = &db;
        async move { common::claim(db, WorkerId::random(), queue, 20, chokaq_core::ClaimMode::Start).await.len() }
    };
    assert_eq!((took("wide").await, took("bykey").await), (7, 3), "(queue-wide 10 less 3, per key 1 of a and 2 of b)");
    db.drop_schema().await.unwrap();
    f.drop().await;
}
