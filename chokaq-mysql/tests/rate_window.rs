//! Issue 40, L7: a rate limit over a long window (`1000000/1d`) must not make every claim
//! count the whole window. A claim's work is the storage engine's own count of the rows and
//! index entries the claim's session read (`Handler_read%`, `MysqlBackend::handler_reads`,
//! a pool of one connection): the same whether the window holds 1,000 starts or 1,000,000. And
//! the count stays exact there (`chokaq_conformance::check_long_window`).

use std::time::Duration;

use chokaq_conformance::{fresh_schema_name, is_required};
use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, ClaimMode, ClaimParams, NewJob, QueueControl, QueueName, RateLimit, WorkerId};
use chokaq_mysql::{MysqlBackend, MysqlConfig};

const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// A migrated backend on a fresh database with one pooled connection; `None` when the server is
/// unreachable and not required.
async fn open() -> Option<MysqlBackend> {
    let url = std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    match MysqlBackend::connect(MysqlConfig::new(url).schema(fresh_schema_name()).max_connections(1)).await {
        Ok(b) => {
            b.migrate().await.expect("migrate");
            Some(b)
        }
        Err(e) if !is_required("mysql") => {
            eprintln!("skipped: mysql unreachable: {e}");
            None
        }
        Err(e) => panic!("mysql unreachable (and CHOKAQ_TEST_REQUIRE requires it): {e}"),
    }
}

/// Queue-wide and per key: a claim of 20 reads as many rows and index entries with 1,000
/// starts in its window as with 999,990 (within 10 %), and takes exactly what the window leaves
/// (10); the next claim, with 1,000,000 in the window, takes nothing at no more cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_work_does_not_grow_with_the_window() {
    for by_key in [false, true] {
        let Some(b) = open().await else { return };
        let limit = RateLimit::new(1_000_000, Duration::from_secs(86_400));
        let limit = if by_key { limit.by_key() } else { limit };
        let key = by_key.then_some("k");
        let mut seen = Vec::new();
        for (queue, fill) in [("small", 1_000u64), ("large", 999_990)] {
            let q = QueueName::new(queue).unwrap();
            let jobs = (0..25)
                .map(|_| {
                    let j = NewJob::build(queue, "test.job.v1").unwrap();
                    if by_key {
                        j.concurrency_key("k")
                    } else {
                        j
                    }
                })
                .collect();
            b.enqueue_many(jobs).await.unwrap();
            b.control_queue(&q, QueueControl::SetRateLimit(Some(limit))).await.unwrap();
            let now = b.db_now().await.unwrap();
            b.add_starts(&q, key, fill, now - chokaq_core::chrono::Duration::hours(1)).await.unwrap();
            let claim = || {
                let (b, q) = (&b, q.clone());
                async move { b.claim(&ClaimParams::new(WorkerId::random(), vec![q], 20, ClaimMode::Start)).await }
            };
            let before = b.handler_reads().await.unwrap();
            let took = claim().await.unwrap().len();
            let mid = b.handler_reads().await.unwrap();
            let again = claim().await.unwrap().len();
            let after = b.handler_reads().await.unwrap();
            let (cost, cost_again) = (mid - before, after - mid);
            eprintln!("by_key {by_key}: {fill} starts in the window: took {took} reading {cost} rows, then {again} reading {cost_again}");
            seen.push((took, cost, again, cost_again));
        }
        b.drop_schema().await.unwrap();
        let (small, large) = (seen[0], seen[1]);
        assert_eq!((small.0, large.0, large.2), (20, 10, 0), "by_key {by_key}: (took with 1,000, 999,990, 1,000,000)");
        assert!(
            large.1 * 10 <= small.1 * 11 && large.3 * 10 <= small.1 * 11,
            "by_key {by_key}: the claim read {} rows with 999,990 starts in its window, {} with 1,000, {} with \
             1,000,000 (a full window)",
            large.1,
            small.1,
            large.3
        );
    }
}

/// `check_long_window` with 999,990 starts, queue-wide and per key: exact counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_starts_in_the_window_are_counted_exactly() {
    for by_key in [false, true] {
        let Some(b) = open().await else { return };
        chokaq_conformance::check_long_window(&b, &QueueName::new("long").unwrap(), 999_990, by_key)
            .await
            .unwrap_or_else(|e| panic!("by_key {by_key}: {e}"));
        b.drop_schema().await.unwrap();
    }
}
