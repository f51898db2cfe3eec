//! Issue 40, L7: a rate limit over a long window (`1000000/1d`) must not make every claim
//! count the whole window. A claim's work is SQLite's own count of the virtual-machine
//! instructions its statements ran (a progress handler at every instruction on every
//! connection of the backend, `SqliteBackend::count_vm_steps`): the same whether the window
//! holds 1,000 starts or 1,000,000. And the count stays exact there
//! (`chokaq_conformance::check_long_window`).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, BackendExt, ClaimMode, QueueControl, RateLimit, WorkerId};
use common::{claim, fresh_with, job, q};

/// Queue-wide and per key: a claim of 20 runs as many instructions with 1,000 starts in its
/// window as with 999,990 (within 10 %), and takes exactly what the window leaves (10); the
/// next claim, with 1,000,000 in the window, takes nothing at the same cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_work_does_not_grow_with_the_window() {
    for by_key in [false, true] {
        let (b, _db) = fresh_with(|c| c.max_readers(2)).await;
        let steps = Arc::new(AtomicU64::new(0));
        b.count_vm_steps(steps.clone(), 2).await.unwrap();
        let limit = RateLimit::new(1_000_000, Duration::from_secs(86_400));
        let limit = if by_key { limit.by_key() } else { limit };
        let key = by_key.then_some("k");
        let mut seen = Vec::new();
        for (queue, fill) in [("small", 1_000u64), ("large", 999_990)] {
            for _ in 0..25 {
                let j = if by_key { job(queue).concurrency_key("k") } else { job(queue) };
                b.enqueue(j).await.unwrap();
            }
            b.control_queue(&q(queue), QueueControl::SetRateLimit(Some(limit))).await.unwrap();
            let now = b.db_now().await.unwrap();
            b.add_starts(&q(queue), key, fill, now - chokaq_core::chrono::Duration::hours(1)).await.unwrap();
            let before = steps.load(Ordering::SeqCst);
            let took = claim(&b, WorkerId::random(), queue, 20, ClaimMode::Start).await.len();
            let cost = steps.load(Ordering::SeqCst) - before;
            let before = steps.load(Ordering::SeqCst);
            let again = claim(&b, WorkerId::random(), queue, 20, ClaimMode::Start).await.len();
            let cost_again = steps.load(Ordering::SeqCst) - before;
            eprintln!(
                "by_key {by_key}: {fill} starts in the window: took {took} in {cost} instructions, then {again} in {cost_again}"
            );
            seen.push((took, cost, again, cost_again));
        }
        let (small, large) = (seen[0], seen[1]);
        assert_eq!((small.0, large.0, large.2), (20, 10, 0), "by_key {by_key}: (took with 1,000, 999,990, 1,000,000)");
        assert!(
            large.1 * 10 <= small.1 * 11 && large.3 * 10 <= small.1 * 11,
            "by_key {by_key}: the claim ran {} instructions with 999,990 starts in its window, {} with 1,000, {} with \
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
        let (b, _db) = common::fresh().await;
        chokaq_conformance::check_long_window(&b, &q("long"), 999_990, by_key)
            .await
            .unwrap_or_else(|e| panic!("by_key {by_key}: {e}"));
    }
}
