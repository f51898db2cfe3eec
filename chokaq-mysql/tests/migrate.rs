//! Schema version 2 (issue 25: concurrency keys, key caps, rate limits) over a database of
//! version 1: `migrate` adds the columns, the index and the starts log with `ALTER TABLE`, takes
//! the steps a database has already as done, and runs again as a no-op.
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
