//! The SQLite backend's migrations of older files and the listing's index ranges, against a real
//! database file per test.

mod common;

use chokaq_core::{Backend, BackendExt, JobTable, ListJobsParams, QueueControl};
use common::{fresh, job, q};

/// Version 7 adds `expired_holds` to a version-6 file (the column dropped again and the
/// version row removed stand in for one): existing rows get 0, and a second run is a no-op.
#[tokio::test]
async fn migration_7_adds_expired_holds_to_an_older_file() {
    use sqlx::Connection;
    let (b, db) = fresh().await;
    let id = b.enqueue(job("m7")).await.unwrap().id;
    let mut raw = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    sqlx::query("ALTER TABLE jobs_hot DROP COLUMN expired_holds").execute(&mut raw).await.unwrap();
    sqlx::query("DELETE FROM versions WHERE version >= 7").execute(&mut raw).await.unwrap();
    b.migrate().await.unwrap();
    b.migrate().await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT expired_holds FROM jobs_hot WHERE id = ?1")
        .bind(id.0)
        .fetch_one(&mut raw)
        .await
        .unwrap();
    assert_eq!(n, 0);
    let v: i64 = sqlx::query_scalar("SELECT max(version) FROM versions").fetch_one(&mut raw).await.unwrap();
    // This library's version (11: job outputs).
    assert_eq!(v, 11);
}

/// Version 9 adds the concurrency key to the three job tables, the per-key cap and the rate
/// limit to the control rows, the starts log and the running-key index to a version-8 file
/// (all dropped again and the version row removed stand in for one): existing rows read with
/// no key and no limits, a second run is a no-op, and the new settings work on the file.
#[tokio::test]
async fn migration_9_adds_keys_and_rate_limits_to_an_older_file() {
    use chokaq_core::RateLimit;
    use sqlx::Connection;
    let (b, db) = fresh().await;
    let id = b.enqueue(job("m9")).await.unwrap().id;
    let q = q("m9");
    b.control_queue(&q, QueueControl::Pause).await.unwrap();
    let mut raw = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    for ddl in [
        "DROP INDEX jobs_hot_key_running",
        "DROP TABLE rate_starts",
        "ALTER TABLE jobs_hot DROP COLUMN concurrency_key",
        "ALTER TABLE jobs_archive DROP COLUMN concurrency_key",
        "ALTER TABLE jobs_dlq DROP COLUMN concurrency_key",
        "ALTER TABLE queues DROP COLUMN key_max_workers",
        "ALTER TABLE queues DROP COLUMN rate_jobs",
        "ALTER TABLE queues DROP COLUMN rate_per_ms",
        "ALTER TABLE queues DROP COLUMN rate_by_key",
        "DELETE FROM versions WHERE version >= 9",
    ] {
        sqlx::query(ddl).execute(&mut raw).await.unwrap();
    }
    b.migrate().await.unwrap();
    b.migrate().await.unwrap();
    assert_eq!(b.get_job(id).await.unwrap().unwrap().concurrency_key, None);
    let st = b.queue_settings(&q).await.unwrap();
    assert!(st.is_paused);
    assert_eq!((st.key_max_workers, st.rate_limit), (None, None));
    let st = b.control_queue(&q, QueueControl::SetKeyMaxWorkers(Some(2))).await.unwrap();
    assert_eq!(st.key_max_workers, Some(2));
    let limit = RateLimit::new(5, std::time::Duration::from_secs(1)).by_key();
    let st = b.control_queue(&q, QueueControl::SetRateLimit(Some(limit))).await.unwrap();
    assert_eq!(st.rate_limit, Some(limit));
    let st = b.control_queue(&q, QueueControl::SetRateLimit(None)).await.unwrap();
    assert_eq!((st.key_max_workers, st.rate_limit), (Some(2), None));
    let v: i64 = sqlx::query_scalar("SELECT max(version) FROM versions").fetch_one(&mut raw).await.unwrap();
    // This library's version (11: job outputs).
    assert_eq!(v, 11);
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_schema WHERE name IN \
         ('rate_starts', 'rate_starts_queue_n', 'jobs_hot_key_running')",
    )
    .fetch_one(&mut raw)
    .await
    .unwrap();
    assert_eq!(n, 3);
    raw.close().await.unwrap();
}

/// Version 10 (issue 40, L7) numbers the starts a version-9 file logged row by row (the
/// column and its indexes dropped again, the old index back and the version row removed stand
/// in for one): in stamp order per bucket of each queue's limit (the queue's queue-wide, each
/// key's per key, key-less entries 0 there), once; the windows count as before; and an insert
/// without an ordinal fails.
#[tokio::test]
async fn migration_10_numbers_the_starts_of_an_older_file() {
    use chokaq_core::{ClaimMode, RateLimit, WorkerId};
    use sqlx::Connection;
    let (b, db) = fresh().await;
    let day = std::time::Duration::from_secs(86_400);
    b.control_queue(&q("wide"), QueueControl::SetRateLimit(Some(RateLimit::new(10, day)))).await.unwrap();
    b.control_queue(&q("bykey"), QueueControl::SetRateLimit(Some(RateLimit::new(3, day).by_key()))).await.unwrap();
    let mut raw = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    let now = chokaq_core::testing::TestSupport::db_now(&b).await.unwrap().timestamp_micros();
    for ddl in [
        "DROP TRIGGER rate_starts_numbered",
        "DROP INDEX rate_starts_queue_n",
        "DROP INDEX rate_starts_key_n",
        "ALTER TABLE rate_starts DROP COLUMN n",
        "CREATE INDEX rate_starts_window ON rate_starts (queue, stamp, ckey)",
        "DELETE FROM versions WHERE version >= 10",
    ] {
        sqlx::query(ddl).execute(&mut raw).await.unwrap();
    }
    for (queue, key, ago_s) in [
        ("wide", Some("a"), 30),
        ("wide", None, 20),
        ("wide", Some("b"), 10),
        ("wide", Some("a"), 90_000),
        ("bykey", Some("a"), 30),
        ("bykey", Some("b"), 20),
        ("bykey", None, 15),
        ("bykey", Some("a"), 10),
    ] {
        sqlx::query("INSERT INTO rate_starts (queue, ckey, stamp) VALUES (?1, ?2, ?3)")
            .bind(queue)
            .bind(key)
            .bind(now - ago_s * 1_000_000)
            .execute(&mut raw)
            .await
            .unwrap();
    }
    b.migrate().await.unwrap();
    b.migrate().await.unwrap();
    let numbered: Vec<(String, Option<String>, i64)> =
        sqlx::query_as("SELECT queue, ckey, n FROM rate_starts ORDER BY queue, ckey NULLS FIRST, stamp")
            .fetch_all(&mut raw)
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
            b.enqueue(match k {
                Some(k) => j.concurrency_key(k),
                None => j,
            })
            .await
            .unwrap();
        }
    }
    let took = |queue: &'static str| {
        let b = &b;
        async move { common::claim(b, WorkerId::random(), queue, 20, ClaimMode::Start).await.len() }
    };
    assert_eq!((took("wide").await, took("bykey").await), (7, 3), "(queue-wide 10 less 3, per key 1 of a and 2 of b)");
    // A start logged without its ordinal (as a process of version 9 on the same file would log
    // it) fails instead of breaking the count.
    let old = sqlx::query("INSERT INTO rate_starts (queue, ckey, stamp) VALUES ('wide', NULL, ?1)")
        .bind(now)
        .execute(&mut raw)
        .await
        .unwrap_err();
    assert!(old.to_string().contains("without its ordinal"), "{old}");
    raw.close().await.unwrap();
}

/// Version 8: the archive and the dead letters have (queue, id) and (kind, id), the `(queue)`
/// indexes are gone, and a page by kind or by queue reads its index in id order (no sort).
#[tokio::test]
async fn migration_8_lists_by_queue_and_kind_in_id_order() {
    use sqlx::Connection;
    let (b, db) = fresh().await;
    b.migrate().await.unwrap();
    let mut raw = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    let mut names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name IN ('jobs_archive', 'jobs_dlq') \
         AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
    )
    .fetch_all(&mut raw)
    .await
    .unwrap();
    names.sort();
    assert_eq!(
        names,
        [
            "jobs_archive_finished",
            "jobs_archive_finished_queue",
            "jobs_archive_kind",
            "jobs_archive_queue_id",
            "jobs_dlq_finished",
            "jobs_dlq_kind",
            "jobs_dlq_queue_id"
        ]
    );
    for (filter, index) in [("kind = 'k'", "jobs_archive_kind"), ("queue = 'q'", "jobs_archive_queue_id")] {
        let rows =
            sqlx::query(&format!("EXPLAIN QUERY PLAN SELECT id FROM jobs_archive WHERE {filter} ORDER BY id LIMIT 51"))
                .fetch_all(&mut raw)
                .await
                .unwrap();
        let plan: Vec<String> = rows.iter().map(|r| sqlx::Row::get::<String, _>(r, "detail")).collect();
        assert!(plan.iter().any(|d| d.contains(index)), "{filter}: {plan:?}");
        assert!(!plan.iter().any(|d| d.contains("TEMP B-TREE")), "{filter} sorts: {plan:?}");
    }
}

/// A creation window lists the jobs created in it, also as id bounds (UUID v7): jobs enqueued
/// now are in a window from a minute ago, and in none that ends before them or starts after.
#[tokio::test]
async fn list_by_creation_window() {
    let (b, _db) = fresh().await;
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    for _ in 0..3 {
        b.enqueue(job("win")).await.unwrap();
    }
    let after = chrono::Utc::now() + chrono::Duration::seconds(1);
    let page = |from, to| {
        let mut p = ListJobsParams::new(JobTable::Hot);
        p.created_from = from;
        p.created_to = to;
        p
    };
    assert_eq!(b.list_jobs(&page(Some(before), None)).await.unwrap().jobs.len(), 3);
    assert_eq!(b.list_jobs(&page(Some(before), Some(after))).await.unwrap().jobs.len(), 3);
    assert_eq!(b.list_jobs(&page(None, Some(before))).await.unwrap().jobs.len(), 0);
    assert_eq!(b.list_jobs(&page(Some(after), None)).await.unwrap().jobs.len(), 0);
    // Keyset paging inside the window: 2, then 1.
    let mut p = page(Some(before), Some(after));
    p.limit = 2;
    let first = b.list_jobs(&p).await.unwrap();
    assert_eq!(first.jobs.len(), 2);
    p.after = first.next;
    let second = b.list_jobs(&p).await.unwrap();
    assert_eq!((second.jobs.len(), second.next), (1, None));
}

/// Version 10 adds the unique keys' table to a version-9 file (dropped again and the version
/// row removed stand in for one): a second run is a no-op, and unique jobs work on the file.
#[tokio::test]
async fn migration_10_adds_unique_keys_to_an_older_file() {
    use chokaq_core::UniqueOpts;
    use sqlx::Connection;
    let (b, db) = fresh().await;
    let mut raw = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    for ddl in ["DROP TABLE uniques", "DELETE FROM versions WHERE version >= 10"] {
        sqlx::query(ddl).execute(&mut raw).await.unwrap();
    }
    b.migrate().await.unwrap();
    b.migrate().await.unwrap();
    let u = || job("m10").json(serde_json::json!({"a": 1})).unique(UniqueOpts::new().by_args());
    let first = b.enqueue(u()).await.unwrap();
    let second = b.enqueue(u()).await.unwrap();
    assert_eq!((first.duplicate, second.duplicate, second.id), (false, true, first.id));
    let v: i64 = sqlx::query_scalar("SELECT max(version) FROM versions").fetch_one(&mut raw).await.unwrap();
    assert_eq!(v, 11);
}

/// Version 11 adds the `output` column to the three job tables of a version-10 file (dropped
/// again and the version row removed stand in for one): a job enqueued before reads no
/// output, a second run is a no-op, and an output recorded on the file is archived with it.
#[tokio::test]
async fn migration_11_adds_outputs_to_an_older_file() {
    use chokaq_core::{ClaimMode, ClaimParams, Fenced, WorkerId};
    use sqlx::Connection;
    let (b, db) = fresh().await;
    let id = b.enqueue(job("m11")).await.unwrap().id;
    let mut raw = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    for ddl in [
        "ALTER TABLE jobs_hot DROP COLUMN output",
        "ALTER TABLE jobs_archive DROP COLUMN output",
        "ALTER TABLE jobs_dlq DROP COLUMN output",
        "DELETE FROM versions WHERE version >= 11",
    ] {
        sqlx::query(ddl).execute(&mut raw).await.unwrap();
    }
    b.migrate().await.unwrap();
    b.migrate().await.unwrap();
    assert_eq!(b.get_output(id).await.unwrap(), None);
    let w = WorkerId::random();
    let got = b.claim(&ClaimParams::new(w, vec![q("m11")], 1, ClaimMode::Start)).await.unwrap();
    assert_eq!(got.len(), 1);
    let out = serde_json::json!({"rows": 2});
    assert_eq!(b.record_output(w, got[0].lease_ref(), &out).await.unwrap(), Fenced::Done(()));
    assert_eq!(b.complete_one(w, got[0].lease_ref()).await.unwrap(), Fenced::Done(()));
    assert_eq!(b.get_output(id).await.unwrap(), Some(out));
    let v: i64 = sqlx::query_scalar("SELECT max(version) FROM versions").fetch_one(&mut raw).await.unwrap();
    assert_eq!(v, 11);
}
