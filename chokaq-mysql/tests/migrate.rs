//! Schema version 2 (issue 25: concurrency keys, key caps, rate limits) over a database of
//! version 1: `migrate` adds the columns, the index and the starts log with `ALTER TABLE`, takes
//! the steps a database has already as done, and runs again as a no-op. Version 3 (issue 40,
//! L7) over a database of version 2 with starts logged: their ordinals. Version 4 (issue 41,
//! job outputs) over a database of version 3: the `output` columns.
//!
//! `cargo test -p chokaq-mysql --test migrate` (URL from `CHOKAQ_TEST_MYSQL_URL`;
//! `CHOKAQ_TEST_REQUIRE=mysql` makes an unreachable server a failure).

use std::time::Duration;

use chokaq_conformance::{fresh_schema_name, is_required};
use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, ClaimMode, ClaimParams, NewJob, QueueControl, QueueName, RateLimit, WorkerId};
use chokaq_mysql::{MysqlBackend, MysqlConfig};
use sqlx::Connection;

const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// What version 2 added, dropped again: the schema as version 1 left it.
const BACK_TO_V1: &[&str] = &[
    "ALTER TABLE {s}.jobs_hot DROP INDEX jobs_hot_key_running, DROP COLUMN running_key, DROP COLUMN concurrency_key",
    "ALTER TABLE {s}.jobs_archive DROP COLUMN concurrency_key",
    "ALTER TABLE {s}.jobs_dlq DROP COLUMN concurrency_key",
    "ALTER TABLE {s}.queues DROP COLUMN key_max_workers, DROP COLUMN rate_jobs, DROP COLUMN rate_per_ms, \
     DROP COLUMN rate_by_key",
    "DROP TABLE {s}.starts",
    "DELETE FROM {s}.versions WHERE version = 2",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_upgrades_version_1_and_runs_again() {
    let url = std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    let schema = fresh_schema_name();
    let b = match MysqlBackend::connect(MysqlConfig::new(url.clone()).schema(schema.clone())).await {
        Ok(b) => b,
        Err(e) if !is_required("mysql") => {
            eprintln!("skipped: mysql unreachable: {e}");
            return;
        }
        Err(e) => panic!("mysql unreachable (and CHOKAQ_TEST_REQUIRE requires it): {e}"),
    };
    b.migrate().await.expect("fresh migrate");
    let mut conn = sqlx::MySqlConnection::connect(&url).await.expect("plain connection");
    // The schema name is `chokaq_t_<hex>` (validated by the backend already).
    for ddl in BACK_TO_V1 {
        sqlx::query(&ddl.replace("{s}", &format!("`{schema}`"))).execute(&mut conn).await.expect(ddl);
    }
    conn.close().await.expect("close");
    // From version 1, then once more over version 2.
    b.migrate().await.expect("migrate from version 1");
    b.migrate().await.expect("migrate again");

    let q = QueueName::new("upgraded").unwrap();
    let job = NewJob::build("upgraded", "k").unwrap().concurrency_key("tenant-1");
    let id = b.enqueue_many(vec![job]).await.unwrap()[0].id;
    b.control_queue(&q, QueueControl::SetKeyMaxWorkers(Some(1))).await.unwrap();
    let limit = RateLimit::new(5, Duration::from_secs(1)).by_key();
    let st = b.control_queue(&q, QueueControl::SetRateLimit(Some(limit))).await.unwrap();
    assert_eq!((st.key_max_workers, st.rate_limit), (Some(1), Some(limit)));
    let got = b.claim(&ClaimParams::new(WorkerId::random(), vec![q.clone()], 5, ClaimMode::Start)).await.unwrap();
    assert_eq!(
        got.iter().map(|j| (j.id, j.concurrency_key.clone())).collect::<Vec<_>>(),
        [(id, Some("tenant-1".to_string()))]
    );
    let rec = b.get_job(id).await.unwrap().expect("the job");
    assert_eq!(rec.concurrency_key.as_deref(), Some("tenant-1"));
    let stats = b.stats().await.unwrap();
    let qs = stats.queues.iter().find(|s| s.queue == "upgraded").expect("the queue's stats");
    assert_eq!(qs.busiest_keys, vec![chokaq_core::KeyCount { key: "tenant-1".into(), running: 1 }]);
    b.drop_schema().await.expect("drop the schema");
}

/// Version 3 numbers the starts a version-2 database logged row by row (the column and its
/// indexes dropped again, the old index back and the version row set back stand in for one): in
/// stamp order per bucket of each queue's limit (the queue's queue-wide, each key's per key,
/// key-less entries 0 there), once; and the windows count as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_numbers_the_starts_of_version_2() {
    let url = std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    let schema = fresh_schema_name();
    let b = match MysqlBackend::connect(MysqlConfig::new(url.clone()).schema(schema.clone())).await {
        Ok(b) => b,
        Err(e) if !is_required("mysql") => {
            eprintln!("skipped: mysql unreachable: {e}");
            return;
        }
        Err(e) => panic!("mysql unreachable (and CHOKAQ_TEST_REQUIRE requires it): {e}"),
    };
    b.migrate().await.expect("fresh migrate");
    let day = Duration::from_secs(86_400);
    let (wide, bykey) = (QueueName::new("wide").unwrap(), QueueName::new("bykey").unwrap());
    b.control_queue(&wide, QueueControl::SetRateLimit(Some(RateLimit::new(10, day)))).await.unwrap();
    b.control_queue(&bykey, QueueControl::SetRateLimit(Some(RateLimit::new(3, day).by_key()))).await.unwrap();
    let now = b.db_now().await.unwrap().timestamp_micros();
    let s = format!("`{schema}`");
    let mut conn = sqlx::MySqlConnection::connect(&url).await.expect("plain connection");
    for ddl in [
        format!(
            "ALTER TABLE {s}.starts DROP INDEX starts_queue_n, DROP INDEX starts_key_n, DROP COLUMN n, \
                 ADD INDEX starts_window (queue, stamp, ckey)"
        ),
        format!("UPDATE {s}.versions SET version = 2"),
    ] {
        sqlx::query(&ddl).execute(&mut conn).await.expect(&ddl);
    }
    for (queue, key, ago_s) in [
        ("wide", Some("a"), 30i64),
        ("wide", None, 20),
        ("wide", Some("b"), 10),
        ("wide", Some("a"), 90_000),
        ("bykey", Some("a"), 30),
        ("bykey", Some("b"), 20),
        ("bykey", None, 15),
        ("bykey", Some("a"), 10),
    ] {
        sqlx::query(&format!("INSERT INTO {s}.starts (queue, ckey, stamp) VALUES (?, ?, ?)"))
            .bind(queue)
            .bind(key)
            .bind(now - ago_s * 1_000_000)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    b.migrate().await.expect("migrate from version 2");
    b.migrate().await.expect("migrate again");
    let numbered: Vec<(String, Option<String>, i64)> = sqlx::query_as(&format!(
        "SELECT CAST(queue AS CHAR), CAST(ckey AS CHAR), n FROM {s}.starts ORDER BY queue, ckey, stamp"
    ))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.expect("close");
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
    let mut jobs: Vec<NewJob> = (0..10).map(|_| NewJob::build("wide", "k").unwrap()).collect();
    for k in ["a", "a", "b", "b", "b"] {
        jobs.push(NewJob::build("bykey", "k").unwrap().concurrency_key(k));
    }
    b.enqueue_many(jobs).await.unwrap();
    let took = |q: &QueueName| {
        let (b, q) = (&b, q.clone());
        async move { b.claim(&ClaimParams::new(WorkerId::random(), vec![q], 20, ClaimMode::Start)).await.unwrap().len() }
    };
    assert_eq!((took(&wide).await, took(&bykey).await), (7, 3), "(queue-wide 10 less 3, per key 1 of a and 2 of b)");
    b.drop_schema().await.expect("drop the schema");
}

/// Version 4 adds the `output` column to the three job tables of a version-3 database (the
/// columns dropped again and the version row removed stand in for one): a job enqueued before
/// reads no output, a second run is a no-op, and an output recorded afterwards is archived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_adds_outputs_to_version_3() {
    use chokaq_core::{BackendExt, Fenced};
    let url = std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    let schema = fresh_schema_name();
    let b = match MysqlBackend::connect(MysqlConfig::new(url.clone()).schema(schema.clone())).await {
        Ok(b) => b,
        Err(e) if !is_required("mysql") => {
            eprintln!("skipped: mysql unreachable: {e}");
            return;
        }
        Err(e) => panic!("mysql unreachable (and CHOKAQ_TEST_REQUIRE requires it): {e}"),
    };
    b.migrate().await.expect("fresh migrate");
    let id = b.enqueue_many(vec![NewJob::build("outputs", "k").unwrap()]).await.unwrap()[0].id;
    let mut conn = sqlx::MySqlConnection::connect(&url).await.expect("plain connection");
    for ddl in [
        "ALTER TABLE {s}.jobs_hot DROP COLUMN output",
        "ALTER TABLE {s}.jobs_archive DROP COLUMN output",
        "ALTER TABLE {s}.jobs_dlq DROP COLUMN output",
        "DELETE FROM {s}.versions WHERE version >= 4",
    ] {
        sqlx::query(&ddl.replace("{s}", &format!("`{schema}`"))).execute(&mut conn).await.expect(ddl);
    }
    b.migrate().await.expect("migrate from version 3");
    b.migrate().await.expect("migrate again");
    let top: i64 = sqlx::query_scalar(&format!("SELECT max(version) FROM `{schema}`.versions"))
        .fetch_one(&mut conn)
        .await
        .expect("the version");
    assert_eq!(top, 4);
    conn.close().await.expect("close");
    assert_eq!(b.get_output(id).await.unwrap(), None);
    let q = QueueName::new("outputs").unwrap();
    let w = WorkerId::random();
    let got = b.claim(&ClaimParams::new(w, vec![q], 1, ClaimMode::Start)).await.unwrap();
    assert_eq!(got.len(), 1);
    let out = serde_json::json!({"rows": 2});
    assert_eq!(b.record_output(w, got[0].lease_ref(), &out).await.unwrap(), Fenced::Done(()));
    assert_eq!(b.complete_one(w, got[0].lease_ref()).await.unwrap(), Fenced::Done(()));
    assert_eq!(b.get_output(id).await.unwrap(), Some(out));
    b.drop_schema().await.expect("drop the schema");
}
