//! Held claims (`ClaimMode::Hold`), keyed caps and rate limits of the SQLite backend, against a
//! real database file per test.

mod common;

use std::time::Duration;

use chokaq_core::testing::{JobPatch, TestSupport};
use chokaq_core::{
    Backend, BackendExt, CancelOutcome, ClaimMode, ClaimParams, DeadReason, FailAction, FailOutcome, Fenced, JobId,
    JobLocation, JobStatus, NewJob, QueueControl, RequeueOutcome, RescueParams, WorkerId,
};
use common::{claim, fresh, job, q};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `ClaimMode::Hold`: Fetched with its first heartbeat; a Reserve claim of a row that carries
/// an old heartbeat clears it (the rescue would otherwise take it for a held job).
#[tokio::test]
async fn hold_sets_the_heartbeat_and_reserve_clears_it() {
    let (b, _db) = fresh().await;
    let id = b.enqueue(job("hr")).await.unwrap().id;
    let w = WorkerId::random();
    let old = b.db_now().await.unwrap() - chrono::Duration::seconds(30);
    b.force(id, &JobPatch { heartbeat_at: Some(Some(old)), ..JobPatch::default() }).await.unwrap();
    let j = claim(&b, w, "hr", 1, ClaimMode::Reserve).await.remove(0);
    assert_eq!((j.status, j.heartbeat_at), (JobStatus::Fetched, None));
    assert_eq!(b.get_job(id).await.unwrap().unwrap().heartbeat_at, None);
    assert!(!b.release_one(w, j.lease_ref()).await.unwrap().is_lost());
    let h = claim(&b, w, "hr", 1, ClaimMode::Hold).await.remove(0);
    assert_eq!((h.status, h.attempt), (JobStatus::Fetched, 0));
    assert!(h.heartbeat_at.is_some_and(|t| t > old));
    // A release clears the heartbeat again: the Pending row is no longer held.
    assert!(!b.release_one(w, h.lease_ref()).await.unwrap().is_lost());
    let r = b.get_job(id).await.unwrap().unwrap();
    assert_eq!((r.location, r.heartbeat_at, r.worker_id), (JobLocation::Hot(JobStatus::Pending), None, None));
}

/// A held job completed, failed or dead-lettered without a start counts its run; a cancel of
/// it is a request, and its release then dead-letters it.
#[tokio::test]
async fn held_outcomes_count_the_run_and_cancel_is_a_request() {
    let (b, _db) = fresh().await;
    let ids: Vec<JobId> = b.enqueue_many(vec![job("ho"); 4]).await.unwrap().iter().map(|e| e.id).collect();
    let w = WorkerId::random();
    let js = claim(&b, w, "ho", 4, ClaimMode::Hold).await;
    assert_eq!(js.len(), 4);
    // Complete: archived as if started (attempt 1, a start time, status Processing).
    assert_eq!(b.complete_one(w, js[0].lease_ref()).await.unwrap(), Fenced::Done(()));
    assert_eq!(b.complete_one(w, js[0].lease_ref()).await.unwrap(), Fenced::Done(()), "a repeat");
    let r = b.get_job(ids[0]).await.unwrap().unwrap();
    assert_eq!((r.location, r.attempt), (JobLocation::Archived, 1));
    assert!(r.started_at.is_some());
    // Dead letter: the dead row's attempt counts the run.
    let dl = FailAction::DeadLetter { reason: DeadReason::TimedOut, error: "slow".into() };
    let f = b.fail(w, js[1].lease_ref(), dl).await.unwrap();
    assert_eq!(f, Fenced::Done(FailOutcome::DeadLettered(DeadReason::TimedOut)));
    let r = b.get_job(ids[1]).await.unwrap().unwrap();
    assert_eq!((r.location, r.attempt), (JobLocation::Dead(DeadReason::TimedOut), 1));
    // Cancel: a request; the heartbeat reports it; the release dead-letters it.
    assert_eq!(b.cancel(ids[2]).await.unwrap(), CancelOutcome::Requested);
    assert_eq!(b.cancel(ids[2]).await.unwrap(), CancelOutcome::Requested);
    let hb = b.heartbeat(w, &[js[2].lease_ref(), js[3].lease_ref()]).await.unwrap();
    assert_eq!(hb.held, vec![ids[2], ids[3]]);
    assert_eq!(hb.cancel_requested, vec![ids[2]]);
    let out = b.release(w, &[js[2].lease_ref(), js[3].lease_ref()]).await.unwrap();
    assert_eq!(out.done, vec![ids[2], ids[3]]);
    let r = b.get_job(ids[2]).await.unwrap().unwrap();
    assert_eq!((r.location, r.attempt), (JobLocation::Dead(DeadReason::Cancelled), 0));
    assert_eq!(b.get_job(ids[3]).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Pending));
    // A repeated release of the dead-lettered job is lost (nothing is held any more).
    assert!(b.release_one(w, js[2].lease_ref()).await.unwrap().is_lost());
}

/// Held jobs expire by the zombie timeout from their last heartbeat: back to Pending at every
/// expiry (the attempt unspent, counted in `fetched_released`), never dead-lettered for their
/// expiries, each counted in the next claim's `expired_holds`; `cancelled` when a cancel was
/// requested, whatever the count; a requeue starts the count again.
#[tokio::test]
async fn rescue_of_held_jobs_counts_expiries_and_requeue_resets_them() {
    let (b, _db) = fresh().await;
    let id = b.enqueue(job("hx")).await.unwrap().id;
    let params = RescueParams { limit: 100, purge: Vec::new() };
    let expire = |id: JobId, ago: i64| {
        let b = b.clone();
        async move {
            let old = b.db_now().await.unwrap() - chrono::Duration::seconds(ago);
            let patch = JobPatch { heartbeat_at: Some(Some(old)), updated_at: Some(old), ..JobPatch::default() };
            assert!(b.force(id, &patch).await.unwrap());
        }
    };
    // Past the fetched timeout (60 s), within the zombie timeout (300 s): kept.
    let w = WorkerId::random();
    let h = claim(&b, w, "hx", 1, ClaimMode::Hold).await.remove(0);
    assert_eq!(h.expired_holds, 0);
    expire(id, 120).await;
    let rep = b.rescue(&params).await.unwrap();
    assert_eq!((rep.fetched_released, rep.zombies_retried, rep.zombies_dead), (0, 0, 0));
    assert_eq!(b.get_job(id).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Fetched));
    for round in 1..=5 {
        if round > 1 {
            let c = claim(&b, w, "hx", 1, ClaimMode::Hold).await.remove(0);
            assert_eq!(c.expired_holds, round - 1, "the claim after {} expiries", round - 1);
        }
        expire(id, 600).await;
        let rep = b.rescue(&params).await.unwrap();
        assert_eq!((rep.fetched_released, rep.zombies_dead), (1, 0), "round {round}");
        let r = b.get_job(id).await.unwrap().unwrap();
        assert_eq!((r.location, r.attempt, r.heartbeat_at), (JobLocation::Hot(JobStatus::Pending), 0, None));
        assert_eq!((r.lease, r.worker_id), (None, None));
    }
    assert!(b.complete_one(w, h.lease_ref()).await.unwrap().is_lost(), "the first holder is fenced out");
    // A held job with a cancel request dies `cancelled`, whatever its count.
    let c = claim(&b, w, "hx", 1, ClaimMode::Hold).await.remove(0);
    assert_eq!(c.expired_holds, 5);
    assert_eq!(b.cancel(id).await.unwrap(), CancelOutcome::Requested);
    expire(id, 600).await;
    let rep = b.rescue(&params).await.unwrap();
    assert_eq!((rep.fetched_released, rep.zombies_dead), (0, 1));
    assert_eq!(b.get_job(id).await.unwrap().unwrap().location, JobLocation::Dead(DeadReason::Cancelled));
    // Requeued: a fresh row, its count 0 again.
    assert_eq!(b.requeue_dead(id).await.unwrap(), RequeueOutcome::Requeued);
    let c = claim(&b, w, "hx", 1, ClaimMode::Start).await.remove(0);
    assert_eq!((c.expired_holds, c.attempt), (0, 1));
}

/// The statements of keyed and rate-limited claims read index ranges, never the whole table
/// nor a sort: the page of due jobs walks `jobs_hot_claim` in claim order, the per-key running
/// count reads `jobs_hot_key_running` (only running keyed rows), and the stats' busiest keys read only running rows (the
/// running-key index or the `(status, updated_at)` one, as the planner likes). The starts log's
/// counts and the numbering of a logged start search `rate_starts_queue_n` / `rate_starts_key_n`
/// in order, with no sort and no scan (issue 40, L7: each search reads one entry).
#[tokio::test]
async fn keyed_and_rate_statements_read_their_indexes() {
    use sqlx::{Connection, Row};
    let (_b, db) = fresh().await;
    let mut raw = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    let all = chokaq_sqlite::all_statements("main").unwrap();
    let sql = |name: &str| all.iter().find(|(n, _)| *n == name).map(|(_, s)| s.clone()).unwrap();
    for (name, index) in [
        ("claim_candidates_keyed", "jobs_hot_claim"),
        ("key_running", "jobs_hot_key_running"),
        ("rate_count_queue", "rate_starts_queue_n"),
        ("rate_count_key", "rate_starts_key_n"),
        ("rate_log_queue", "rate_starts_queue_n"),
        ("rate_log_key", "rate_starts_key_n"),
        ("stats_busiest_keys", "jobs_hot_key_running|jobs_hot_status (status=?)"),
    ] {
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {}", sql(name))).fetch_all(&mut raw).await.unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>("detail")).collect();
        assert!(plan.iter().any(|d| index.split('|').any(|i| d.contains(i))), "{name}: {plan:?}");
        assert!(!plan.iter().any(|d| d.starts_with("SCAN jobs_hot") && !d.contains("INDEX")), "{name}: {plan:?}");
        if name == "claim_candidates_keyed" || name.starts_with("rate_") {
            // A rate count (issue 40, L7) is searches of its index in its order, each one row
            // (LIMIT 1): a sort would read the bucket's every entry.
            assert!(!plan.iter().any(|d| d.contains("TEMP B-TREE")), "{name} sorts: {plan:?}");
        }
        if name.starts_with("rate_") {
            assert!(!plan.iter().any(|d| d.starts_with("SCAN") && d != "SCAN CONSTANT ROW"), "{name} scans: {plan:?}");
        }
    }
    raw.close().await.unwrap();
}

/// A Start claim of a rate-limited queue logs one start per job stamped with the job's
/// `started_at` (the rule the cases read windows back by); the rescue prunes the entries its
/// queue's window no longer sees, and all of a queue whose limit was cleared.
#[tokio::test]
async fn rate_log_stamps_are_started_at_and_rescue_prunes_them() {
    use chokaq_core::RateLimit;
    use sqlx::Connection;
    let (b, db) = fresh().await;
    let (limited, cleared) = (q("rl"), q("rl_cleared"));
    for queue in [&limited, &cleared] {
        let jobs: Vec<NewJob> = (0..4).map(|i| job(queue.as_str()).concurrency_key(format!("k{}", i % 2))).collect();
        b.enqueue_many(jobs).await.unwrap();
        let limit = RateLimit::new(3, secs(3600));
        b.control_queue(queue, QueueControl::SetRateLimit(Some(limit))).await.unwrap();
    }
    let w = WorkerId::random();
    let got = claim(&b, w, "rl", 10, ClaimMode::Start).await;
    assert_eq!(got.len(), 3, "a window of 3 starts");
    assert!(claim(&b, w, "rl", 10, ClaimMode::Start).await.is_empty());
    assert_eq!(claim(&b, w, "rl_cleared", 10, ClaimMode::Reserve).await.len(), 3);
    let mut raw = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    let stamps: Vec<(String, Option<String>, i64)> =
        sqlx::query_as("SELECT queue, ckey, stamp FROM rate_starts WHERE queue = 'rl' ORDER BY ckey")
            .fetch_all(&mut raw)
            .await
            .unwrap();
    let mut want: Vec<(String, Option<String>, i64)> = got
        .iter()
        .map(|j| ("rl".to_string(), j.concurrency_key.clone(), j.started_at.unwrap().timestamp_micros()))
        .collect();
    want.sort();
    assert_eq!(stamps, want);
    b.control_queue(&cleared, QueueControl::SetRateLimit(None)).await.unwrap();
    b.rescue(&RescueParams::default()).await.unwrap();
    let left: Vec<(String, i64)> =
        sqlx::query_as("SELECT queue, count(*) FROM rate_starts GROUP BY queue").fetch_all(&mut raw).await.unwrap();
    assert_eq!(left, vec![("rl".to_string(), 3)], "the cleared queue's entries are pruned, the window's kept");
    // Entries older than the window go (aged by hand: the window is an hour).
    sqlx::query("UPDATE rate_starts SET stamp = stamp - 3600000000").execute(&mut raw).await.unwrap();
    b.rescue(&RescueParams::default()).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM rate_starts").fetch_one(&mut raw).await.unwrap();
    assert_eq!(n, 0);
    assert_eq!(claim(&b, w, "rl", 10, ClaimMode::Start).await.len(), 1, "the window is free again");
    raw.close().await.unwrap();
}

/// One claim over a keyed queue and a plain one: each queue gives its first jobs in claim
/// order that its rules let through, and the merge is the one global claim order (the keyed
/// queue's saturated key holds back neither its other key nor the other queue).
#[tokio::test]
async fn keyed_claim_over_two_queues_keeps_the_global_order() {
    let (b, _db) = fresh().await;
    let mut keyed = Vec::new();
    for (key, priority) in [("x", 5), ("x", 5), ("x", 5), ("y", 0)] {
        keyed.push(job("ka").concurrency_key(key).priority(priority));
    }
    let keyed: Vec<JobId> = b.enqueue_many(keyed).await.unwrap().into_iter().map(|e| e.id).collect();
    let plain: Vec<JobId> = b
        .enqueue_many((0..3).map(|_| job("kb").priority(1)).collect())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    b.control_queue(&q("ka"), QueueControl::SetKeyMaxWorkers(Some(1))).await.unwrap();
    let params = |limit| ClaimParams::new(WorkerId::random(), vec![q("kb"), q("ka")], limit, ClaimMode::Start);
    let got: Vec<JobId> = b.claim(&params(4)).await.unwrap().iter().map(|j| j.id).collect();
    assert_eq!(got, vec![keyed[0], plain[0], plain[1], plain[2]]);
    let got: Vec<JobId> = b.claim(&params(10)).await.unwrap().iter().map(|j| j.id).collect();
    assert_eq!(got, vec![keyed[3]], "x at its cap of 1, y free");
    assert!(b.claim(&params(10)).await.unwrap().is_empty());
}

/// A per-key cap and a by-key rate limit together: each key takes the smaller room.
#[tokio::test]
async fn key_cap_and_by_key_rate_take_the_smaller_room() {
    use chokaq_core::RateLimit;
    let (b, _db) = fresh().await;
    let jobs: Vec<NewJob> =
        ["a", "a", "a", "a", "b", "b", "b", "b"].iter().map(|k| job("kr").concurrency_key(*k)).collect();
    b.enqueue_many(jobs).await.unwrap();
    b.control_queue(&q("kr"), QueueControl::SetKeyMaxWorkers(Some(2))).await.unwrap();
    let limit = RateLimit::new(3, secs(3600)).by_key();
    b.control_queue(&q("kr"), QueueControl::SetRateLimit(Some(limit))).await.unwrap();
    let w = WorkerId::random();
    let first = claim(&b, w, "kr", 10, ClaimMode::Start).await;
    assert_eq!(first.len(), 4, "2 per key (the cap binds first)");
    let leases: Vec<_> = first.iter().map(|j| j.lease_ref()).collect();
    assert_eq!(b.complete(w, &leases).await.unwrap().done.len(), 4);
    let second = claim(&b, w, "kr", 10, ClaimMode::Start).await;
    assert_eq!(second.len(), 2, "1 per key (3 starts per hour per key: the rate binds now)");
    assert!(claim(&b, w, "kr", 10, ClaimMode::Start).await.is_empty());
}
