//! Every operation and guard of the SQLite backend, against a real database file per test.

mod common;

use std::time::Duration;

use chokaq_core::testing::{JobPatch, TestSupport};
use chokaq_core::{
    Backend, BackendExt, CancelOutcome, ClaimMode, ClaimParams, DeadReason, ErrorKind, FailAction, FailOutcome, Fenced,
    JobId, JobLocation, JobStatus, JobTable, ListJobsParams, NewJob, PurgeParams, PurgeTarget, QueueControl,
    RequeueOutcome, RescueParams, Wake, WorkerId, ZombiePolicy, MAX_ENQUEUE_BATCH,
};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use common::{claim, fresh, fresh_with, job, q};
use serde_json::json;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[tokio::test]
async fn migrate_is_idempotent_and_capabilities_are_declared() {
    let (b, _db) = fresh().await;
    b.migrate().await.unwrap();
    b.migrate().await.unwrap();
    let caps = b.capabilities();
    // In-process wake-ups only (no cross-process push): the old `!caps.listen_notify`.
    assert!(b.wakeups().await.unwrap().is_some());
    assert!(caps.multi_process);
    assert!(!caps.kill_connections);
    assert_eq!(b.name(), "sqlite");
    assert_eq!(b.kill_connections().await.unwrap_err().kind(), ErrorKind::Unsupported);
}

#[tokio::test]
async fn migrate_from_two_backends_at_once() {
    let db = common::TempDb::new();
    let a = SqliteBackend::connect(SqliteConfig::new(db.url())).await.unwrap();
    let c = SqliteBackend::connect(SqliteConfig::new(db.path.display().to_string())).await.unwrap();
    let (ra, rc) = tokio::join!(a.migrate(), c.migrate());
    ra.unwrap();
    rc.unwrap();
    let id = a.enqueue(job("m")).await.unwrap().id;
    assert!(c.get_job(id).await.unwrap().is_some());
}

#[tokio::test]
async fn connect_rejects_memory_and_redacts_debug() {
    let e = SqliteBackend::connect(SqliteConfig::new("sqlite::memory:")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = SqliteBackend::connect(SqliteConfig::new("/nonexistent-dir-chokaq/sub/x.db")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(!e.to_string().contains("nonexistent-dir-chokaq"), "{e}");
    let (b, db) = fresh().await;
    let dbg = format!("{b:?}");
    assert!(!dbg.contains(&db.path.display().to_string()), "{dbg}");
    assert!(dbg.contains("redacted"), "{dbg}");
}

#[tokio::test]
async fn enqueue_round_trips_every_field() {
    let (b, _db) = fresh().await;
    let at = b.db_now().await.unwrap() + chrono::Duration::seconds(30);
    let new = job("mail")
        .json(json!({"to": "a@b.c", "n": [1, 2, 3], "ü": "ß"}))
        .priority(7)
        .idempotency_key("key-1")
        .tags(["x", "y"])
        .max_attempts(3)
        .created_by("tester")
        .run_at(at);
    let e = b.enqueue(new).await.unwrap();
    assert!(!e.duplicate);
    let r = b.get_job(e.id).await.unwrap().unwrap();
    assert_eq!(r.id, e.id);
    assert_eq!(r.location, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(r.queue.as_str(), "mail");
    assert_eq!(r.kind.as_str(), "test.job.v1");
    assert_eq!(r.payload, json!({"to": "a@b.c", "n": [1, 2, 3], "ü": "ß"}));
    assert_eq!(r.tags, vec!["x".to_string(), "y".to_string()]);
    assert_eq!(r.idempotency_key.as_deref(), Some("key-1"));
    assert_eq!(r.priority, 7);
    assert_eq!(r.attempt, 0);
    assert_eq!(r.max_attempts, 3);
    assert_eq!(r.created_by.as_deref(), Some("tester"));
    assert_eq!(r.scheduled_at, Some(at));
    assert_eq!(r.lease, None);
    assert_eq!(r.worker_id, None);
    assert!(!r.cancel_requested);
    assert_eq!(b.presence(e.id).await.unwrap().total(), 1);

    let later = job("mail").delay(secs(60));
    let before = b.db_now().await.unwrap();
    let id = b.enqueue(later).await.unwrap().id;
    let r = b.get_job(id).await.unwrap().unwrap();
    let s = r.scheduled_at.unwrap();
    assert!(s >= before + chrono::Duration::seconds(60), "{s} vs {before}");
    assert!(s <= b.db_now().await.unwrap() + chrono::Duration::seconds(60));
}

#[tokio::test]
async fn idempotency_key_is_unique_among_live_jobs() {
    let (b, _db) = fresh().await;
    let first = b.enqueue(job("k").idempotency_key("same")).await.unwrap();
    let second = b.enqueue(job("k").idempotency_key("same")).await.unwrap();
    assert!(!first.duplicate);
    assert!(second.duplicate);
    assert_eq!(first.id, second.id);
    assert_eq!(b.stats().await.unwrap().total(), 1);

    // Once the job is finished the key is free again.
    let w = WorkerId::random();
    let c = claim(&b, w, "k", 1, ClaimMode::Start).await;
    assert_eq!(b.complete(w, &[c[0].lease_ref()]).await.unwrap().done, vec![first.id]);
    let third = b.enqueue(job("k").idempotency_key("same")).await.unwrap();
    assert!(!third.duplicate);
    assert_ne!(third.id, first.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueues_with_one_key_make_one_row() {
    let (b, _db) = fresh().await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move { b.enqueue(job("k").idempotency_key("race")).await.unwrap() }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    assert_eq!(ids.iter().filter(|e| !e.duplicate).count(), 1);
    assert!(ids.iter().all(|e| e.id == ids[0].id));
    assert_eq!(b.stats().await.unwrap().pending, 1);
}

#[tokio::test]
async fn enqueue_many_keeps_order_and_is_all_or_nothing() {
    let (b, _db) = fresh().await;
    let out = b
        .enqueue_many(vec![
            job("a").idempotency_key("k1"),
            job("a"),
            job("b").idempotency_key("k1"),
            job("b").idempotency_key("k2"),
            job("a").idempotency_key("k1"),
        ])
        .await
        .unwrap();
    assert_eq!(out.len(), 5);
    // Keys are scoped per queue: k1 on b is its own job; k1 twice on a is one.
    assert_eq!(out.iter().map(|e| e.duplicate).collect::<Vec<_>>(), vec![false, false, false, false, true]);
    assert_ne!(out[2].id, out[0].id);
    assert_eq!(out[4].id, out[0].id);
    assert_eq!(b.stats().await.unwrap().pending, 4);

    // One invalid job rejects the call and inserts nothing.
    let bad = b.enqueue_many(vec![job("a"), job("a").max_attempts(0), job("a")]).await.unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidInput);
    assert_eq!(b.stats().await.unwrap().pending, 4);

    let too_many = vec![job("a"); MAX_ENQUEUE_BATCH + 1];
    assert_eq!(b.enqueue_many(too_many).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    assert!(b.enqueue_many(Vec::new()).await.unwrap().is_empty());
    assert_eq!(b.stats().await.unwrap().pending, 4);
}

#[tokio::test]
async fn bad_input_is_rejected_and_changes_nothing() {
    let (b, _db) = fresh_with(|c| c.max_payload_bytes(64)).await;
    let cases: Vec<NewJob> = vec![
        job("v").json(json!({"big": "x".repeat(100)})),
        job("v").json(json!({"nul": "a\u{0000}b"})),
        job("v").json(json!({"a\u{0000}": 1})),
        job("v").max_attempts(0),
        job("v").tag(""),
        job("v").tag("t".repeat(101)),
        job("v").idempotency_key("a\0b"),
        job("v").idempotency_key("k".repeat(256)),
        job("v").created_by(""),
        job("v").delay(Duration::from_secs(u64::MAX / 2)),
    ];
    for (i, c) in cases.into_iter().enumerate() {
        let e = b.enqueue(c).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "case {i}: {e}");
    }
    assert_eq!(b.stats().await.unwrap().total(), 0);

    let w = WorkerId::random();
    for (queues, limit) in [(vec![], 1), (vec![q("v")], 0), (vec![q("v")], 1001)] {
        let e = b.claim(&ClaimParams::new(w, queues, limit, ClaimMode::Reserve)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    let mut f = ListJobsParams::new(JobTable::Hot);
    f.limit = 0;
    assert_eq!(b.list_jobs(&f).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    let mut f = ListJobsParams::new(JobTable::Archive);
    f.status = Some(JobStatus::Pending);
    assert_eq!(b.list_jobs(&f).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    let e = b.rescue(&RescueParams { limit: 0, ..RescueParams::default() }).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let mut p = PurgeParams::new(PurgeTarget::Archive, secs(1));
    p.batch_size = 0;
    assert_eq!(b.purge(&p).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    let mut p = PurgeParams::new(PurgeTarget::Archive, secs(1));
    p.reason = Some(DeadReason::Failed);
    assert_eq!(b.purge(&p).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    let e = b
        .control_queue(&q("v"), QueueControl::SetZombieTimeout(Some(Duration::from_secs(u64::MAX))))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(b.queue_settings(&q("v")).await.unwrap().updated_at, None, "no row was written");
}

#[tokio::test]
async fn claim_order_is_priority_then_due_then_id() {
    let (b, _db) = fresh().await;
    let now = b.db_now().await.unwrap();
    let old = now - chrono::Duration::seconds(100);
    let a = b.enqueue(job("o").priority(1)).await.unwrap().id;
    let bb = b.enqueue(job("o").priority(5)).await.unwrap().id;
    let c = b.enqueue(job("o").priority(1).run_at(old)).await.unwrap().id;
    let d = b.enqueue(job("o").priority(1)).await.unwrap().id;
    let w = WorkerId::random();
    let got: Vec<JobId> = claim(&b, w, "o", 10, ClaimMode::Reserve).await.iter().map(|j| j.id).collect();
    assert_eq!(got, vec![bb, c, a, d]);
}

#[tokio::test]
async fn claim_merges_queues_and_skips_future_jobs() {
    let (b, _db) = fresh().await;
    let x = b.enqueue(job("x").priority(2)).await.unwrap().id;
    let y = b.enqueue(job("y").priority(3)).await.unwrap().id;
    let future = b.enqueue(job("x").priority(9).delay(secs(3600))).await.unwrap().id;
    let w = WorkerId::random();
    let got = b.claim(&ClaimParams::new(w, vec![q("x"), q("y"), q("x")], 10, ClaimMode::Reserve)).await.unwrap();
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![y, x]);
    assert!(claim(&b, w, "x", 10, ClaimMode::Reserve).await.is_empty());
    let past = b.db_now().await.unwrap() - chrono::Duration::seconds(1);
    assert!(b.force(future, &JobPatch { scheduled_at: Some(Some(past)), ..JobPatch::default() }).await.unwrap());
    let got = claim(&b, w, "x", 10, ClaimMode::Reserve).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, future);
}

#[tokio::test]
async fn reserve_start_complete_with_fencing() {
    let (b, _db) = fresh().await;
    let ids: Vec<JobId> = b.enqueue_many(vec![job("f"); 3]).await.unwrap().iter().map(|e| e.id).collect();
    let w = WorkerId::random();
    let got = claim(&b, w, "f", 2, ClaimMode::Reserve).await;
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|j| j.status == JobStatus::Fetched && j.attempt == 0 && j.worker_id == w));
    assert!(got[0].lease < got[1].lease, "leases grow");
    let leases: Vec<_> = got.iter().map(|j| j.lease_ref()).collect();

    // A reserved claim has no heartbeat.
    assert!(got.iter().all(|j| j.heartbeat_at.is_none()));

    // Another worker can neither start nor complete them.
    let other = WorkerId::random();
    assert!(b.start_one(other, leases[0]).await.unwrap().is_lost());
    assert_eq!(b.complete(other, &leases).await.unwrap().lost.len(), 2);

    let out = b.start(w, &leases).await.unwrap();
    assert_eq!(out.done, vec![leases[0].id, leases[1].id]);
    let r = b.get_job(leases[0].id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Hot(JobStatus::Processing));
    assert_eq!(r.attempt, 1);
    assert!(r.started_at.is_some() && r.heartbeat_at.is_some());
    // Started twice (a retry after a lost reply): done again, the attempt counted once.
    assert_eq!(b.start_one(w, leases[0]).await.unwrap(), Fenced::Done(()));
    assert_eq!(b.get_job(leases[0].id).await.unwrap().unwrap().attempt, 1);

    // Mixed batch: one held, one stale lease, one unknown id.
    let stale = chokaq_core::LeaseRef { id: leases[1].id, lease: chokaq_core::Lease(leases[1].lease.0 + 1000) };
    let unknown = chokaq_core::LeaseRef { id: JobId::new(), lease: leases[0].lease };
    let out = b.complete(w, &[leases[0], stale, unknown]).await.unwrap();
    assert_eq!(out.done, vec![leases[0].id]);
    assert_eq!(out.lost, vec![leases[1].id, unknown.id]);
    let r = b.get_job(leases[0].id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Archived);
    assert!(r.finished_at.is_some());
    let p = b.presence(leases[0].id).await.unwrap();
    assert_eq!((p.hot, p.archive, p.dead), (0, 1, 0));
    // A repeat with the lease that completed it reports the outcome that stands, writing
    // nothing; a stale lease of the archived job is still lost.
    assert_eq!(b.complete_one(w, leases[0]).await.unwrap(), Fenced::Done(()));
    let p = b.presence(leases[0].id).await.unwrap();
    assert_eq!((p.hot, p.archive, p.dead), (0, 1, 0));
    let stale0 = chokaq_core::LeaseRef { id: leases[0].id, lease: chokaq_core::Lease(leases[0].lease.0 + 1000) };
    assert!(b.complete_one(w, stale0).await.unwrap().is_lost());

    let snap = b.stats().await.unwrap();
    assert_eq!((snap.pending, snap.fetched, snap.processing, snap.archived, snap.dead), (1, 0, 1, 1, 0));
    assert_eq!(snap.total(), ids.len() as u64);
}

#[tokio::test]
async fn start_mode_claims_straight_into_processing() {
    let (b, _db) = fresh().await;
    b.enqueue(job("s")).await.unwrap();
    let w = WorkerId::random();
    let got = claim(&b, w, "s", 5, ClaimMode::Start).await;
    assert_eq!(got.len(), 1);
    let j = &got[0];
    assert_eq!(j.status, JobStatus::Processing);
    assert_eq!(j.attempt, 1);
    assert!(j.started_at.is_some() && j.heartbeat_at.is_some());
    assert_eq!(b.start_one(w, j.lease_ref()).await.unwrap(), Fenced::Done(()), "already processing: a repeat");
    assert_eq!(b.get_job(j.id).await.unwrap().unwrap().attempt, 1, "counted once");
    assert!(b.release_one(w, j.lease_ref()).await.unwrap().is_lost(), "release is for Fetched only");
    assert!(!b.complete_one(w, j.lease_ref()).await.unwrap().is_lost());
}

#[tokio::test]
async fn release_and_reclaim_fences_the_stale_copy() {
    let (b, _db) = fresh().await;
    let id = b.enqueue(job("r")).await.unwrap().id;
    let w = WorkerId::random();
    let first = claim(&b, w, "r", 1, ClaimMode::Reserve).await.remove(0);
    assert!(!b.release_one(w, first.lease_ref()).await.unwrap().is_lost());
    let r = b.get_job(id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(r.attempt, 0);
    assert_eq!(r.worker_id, None);
    assert!(b.release_one(w, first.lease_ref()).await.unwrap().is_lost());

    // Same worker claims the same job again: a new lease; the old copy is fenced.
    let second = claim(&b, w, "r", 1, ClaimMode::Start).await.remove(0);
    assert_eq!(second.id, id);
    assert!(second.lease > first.lease);
    assert!(b.complete_one(w, first.lease_ref()).await.unwrap().is_lost());
    let hb = b.heartbeat(w, &[first.lease_ref()]).await.unwrap();
    assert_eq!(hb.lost, vec![id]);
    let f = b.fail(w, first.lease_ref(), FailAction::Retry { delay: secs(1), error: "x".into() }).await.unwrap();
    assert!(f.is_lost());
    assert!(!b.complete_one(w, second.lease_ref()).await.unwrap().is_lost());
    assert_eq!(b.presence(id).await.unwrap().archive, 1);
}

#[tokio::test]
async fn heartbeat_and_cancel_of_processing_job() {
    let (b, _db) = fresh().await;
    let id = b.enqueue(job("h")).await.unwrap().id;
    let w = WorkerId::random();
    let j = claim(&b, w, "h", 1, ClaimMode::Start).await.remove(0);
    let before = b.get_job(id).await.unwrap().unwrap().heartbeat_at.unwrap();
    assert!(common::wait_until(secs(5), || async { b.db_now().await.unwrap() > before }).await, "clock did not move");
    let hb = b.heartbeat(w, &[j.lease_ref()]).await.unwrap();
    assert_eq!(hb.held, vec![id]);
    assert!(hb.cancel_requested.is_empty() && hb.lost.is_empty());
    let after = b.get_job(id).await.unwrap().unwrap().heartbeat_at.unwrap();
    assert!(after > before);
    // Wrong worker: lost, and nothing bumped.
    let hb = b.heartbeat(WorkerId::random(), &[j.lease_ref()]).await.unwrap();
    assert_eq!(hb.lost, vec![id]);

    assert_eq!(b.cancel(id).await.unwrap(), CancelOutcome::Requested);
    assert_eq!(b.cancel(id).await.unwrap(), CancelOutcome::Requested);
    assert!(b.get_job(id).await.unwrap().unwrap().cancel_requested);
    let hb = b.heartbeat(w, &[j.lease_ref()]).await.unwrap();
    assert_eq!(hb.held, vec![id]);
    assert_eq!(hb.cancel_requested, vec![id]);
    let f = b.fail(w, j.lease_ref(), FailAction::Cancelled { error: Some("stopped".into()) }).await.unwrap();
    assert_eq!(f, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Cancelled)));
    let r = b.get_job(id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Dead(DeadReason::Cancelled));
    assert_eq!(r.last_error.as_deref(), Some("stopped"));
    assert_eq!(b.cancel(id).await.unwrap(), CancelOutcome::NotLive);
}

#[tokio::test]
async fn cancel_pending_and_fetched_dead_letters_at_once() {
    let (b, _db) = fresh().await;
    let p = b.enqueue(job("c")).await.unwrap().id;
    assert_eq!(b.cancel(p).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(b.get_job(p).await.unwrap().unwrap().location, JobLocation::Dead(DeadReason::Cancelled));
    let f = b.enqueue(job("c")).await.unwrap().id;
    let w = WorkerId::random();
    let j = claim(&b, w, "c", 1, ClaimMode::Reserve).await.remove(0);
    assert_eq!(b.cancel(f).await.unwrap(), CancelOutcome::Cancelled);
    assert!(b.start_one(w, j.lease_ref()).await.unwrap().is_lost());
    assert_eq!(b.cancel(JobId::new()).await.unwrap(), CancelOutcome::NotLive);
    let pr = b.presence(f).await.unwrap();
    assert_eq!((pr.hot, pr.archive, pr.dead), (0, 0, 1));
}

#[tokio::test]
async fn fail_retries_until_max_attempts_then_dead_letters() {
    let (b, _db) = fresh().await;
    let id = b.enqueue(job("fail").max_attempts(2)).await.unwrap().id;
    let w = WorkerId::random();
    let j = claim(&b, w, "fail", 1, ClaimMode::Start).await.remove(0);
    let before = b.db_now().await.unwrap();
    let f = b.fail(w, j.lease_ref(), FailAction::Retry { delay: secs(30), error: "boom 1".into() }).await.unwrap();
    let Fenced::Done(FailOutcome::Retried { at }) = f else { panic!("{f:?}") };
    assert!(at >= before + chrono::Duration::seconds(30));
    let r = b.get_job(id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(r.scheduled_at, Some(at));
    assert_eq!(r.last_error.as_deref(), Some("boom 1"));
    assert_eq!(r.worker_id, None);
    assert_eq!(r.attempt, 1);
    // Not due yet.
    assert!(claim(&b, w, "fail", 1, ClaimMode::Start).await.is_empty());
    let past = b.db_now().await.unwrap() - chrono::Duration::seconds(1);
    b.force(id, &JobPatch { scheduled_at: Some(Some(past)), ..JobPatch::default() }).await.unwrap();
    let j = claim(&b, w, "fail", 1, ClaimMode::Start).await.remove(0);
    assert_eq!(j.attempt, 2);
    assert_eq!(j.last_error.as_deref(), Some("boom 1"));
    let long = "é".repeat(10_000);
    let f = b.fail(w, j.lease_ref(), FailAction::Retry { delay: secs(1), error: long }).await.unwrap();
    assert_eq!(f, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Failed)));
    let r = b.get_job(id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Dead(DeadReason::Failed));
    assert!(r.last_error.as_ref().unwrap().len() <= chokaq_core::validate::MAX_ERROR_LEN);
    assert!(r.last_error.as_ref().unwrap().starts_with("éé"));
}

#[tokio::test]
async fn fail_dead_letter_snooze_and_bad_delay() {
    let (b, _db) = fresh().await;
    let ids: Vec<JobId> = b.enqueue_many(vec![job("d"), job("d")]).await.unwrap().iter().map(|e| e.id).collect();
    let w = WorkerId::random();
    let js = claim(&b, w, "d", 2, ClaimMode::Start).await;
    let f = b
        .fail(w, js[0].lease_ref(), FailAction::DeadLetter { reason: DeadReason::TimedOut, error: "slow".into() })
        .await
        .unwrap();
    assert_eq!(f, Fenced::Done(FailOutcome::DeadLettered(DeadReason::TimedOut)));
    assert_eq!(b.get_job(ids[0]).await.unwrap().unwrap().location, JobLocation::Dead(DeadReason::TimedOut));

    // A bad delay is invalid input and changes nothing.
    let e = b.fail(w, js[1].lease_ref(), FailAction::Snooze { delay: Duration::from_secs(u64::MAX) }).await;
    assert_eq!(e.unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(b.get_job(ids[1]).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Processing));

    let f = b.fail(w, js[1].lease_ref(), FailAction::Snooze { delay: secs(10) }).await.unwrap();
    let Fenced::Done(FailOutcome::Snoozed { until }) = f else { panic!("{f:?}") };
    let r = b.get_job(ids[1]).await.unwrap().unwrap();
    assert_eq!(r.attempt, 0, "snooze does not count the attempt");
    assert_eq!(r.scheduled_at, Some(until));
    assert_eq!(r.location, JobLocation::Hot(JobStatus::Pending));
    // A repeat with the same lease reports the snooze that stands and changes nothing.
    let again = b.fail(w, js[1].lease_ref(), FailAction::Snooze { delay: secs(1) }).await.unwrap();
    assert_eq!(again, Fenced::Done(FailOutcome::Snoozed { until }));
    assert_eq!(b.get_job(ids[1]).await.unwrap().unwrap().scheduled_at, Some(until));
    let stale = chokaq_core::LeaseRef { id: ids[1], lease: chokaq_core::Lease(js[1].lease.0 + 1000) };
    assert!(b.fail(w, stale, FailAction::Snooze { delay: secs(1) }).await.unwrap().is_lost());
}

#[tokio::test]
async fn rescue_releases_expired_fetched_and_handles_zombies() {
    let (b, _db) = fresh().await;
    // fetched (expired), fetched (fresh), zombie with attempts left, zombie out of attempts,
    // zombie in a dead-letter-policy queue, zombie in a queue with a long zombie timeout.
    let fe = b.enqueue(job("z1")).await.unwrap().id;
    let ff = b.enqueue(job("z1")).await.unwrap().id;
    let zr = b.enqueue(job("z2").max_attempts(3)).await.unwrap().id;
    let zd = b.enqueue(job("z2").max_attempts(1)).await.unwrap().id;
    let zp = b.enqueue(job("z3")).await.unwrap().id;
    let zl = b.enqueue(job("z4")).await.unwrap().id;
    b.control_queue(&q("z3"), QueueControl::SetZombiePolicy(ZombiePolicy::DeadLetter)).await.unwrap();
    b.control_queue(&q("z4"), QueueControl::SetZombieTimeout(Some(secs(86_400)))).await.unwrap();
    let w = WorkerId::random();
    let f = claim(&b, w, "z1", 2, ClaimMode::Reserve).await;
    let z2 = claim(&b, w, "z2", 2, ClaimMode::Start).await;
    let z3 = claim(&b, w, "z3", 1, ClaimMode::Start).await;
    let z4 = claim(&b, w, "z4", 1, ClaimMode::Start).await;
    let old = b.db_now().await.unwrap() - chrono::Duration::seconds(600);
    b.force(fe, &JobPatch { updated_at: Some(old), ..JobPatch::default() }).await.unwrap();
    for id in [zr, zd, zp, zl] {
        b.force(id, &JobPatch { heartbeat_at: Some(Some(old)), ..JobPatch::default() }).await.unwrap();
    }
    let params = RescueParams { limit: 100, purge: Vec::new() };
    let rep = b.rescue(&params).await.unwrap();
    assert!(rep.ran);
    assert_eq!((rep.fetched_released, rep.zombies_retried, rep.zombies_dead), (1, 1, 2));
    let loc = |id| {
        let b = b.clone();
        async move { b.get_job(id).await.unwrap().unwrap().location }
    };
    assert_eq!(loc(fe).await, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(loc(ff).await, JobLocation::Hot(JobStatus::Fetched));
    assert_eq!(loc(zr).await, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(loc(zd).await, JobLocation::Dead(DeadReason::Zombie));
    assert_eq!(loc(zp).await, JobLocation::Dead(DeadReason::Zombie));
    assert_eq!(loc(zl).await, JobLocation::Hot(JobStatus::Processing));
    assert_eq!(b.get_job(zr).await.unwrap().unwrap().attempt, 1);

    // The old owners are fenced out.
    let fe_lease = f.iter().find(|j| j.id == fe).unwrap().lease_ref();
    assert!(b.start_one(w, fe_lease).await.unwrap().is_lost());
    let zr_lease = z2.iter().find(|j| j.id == zr).unwrap().lease_ref();
    assert!(b.complete_one(w, zr_lease).await.unwrap().is_lost());
    assert_eq!(b.heartbeat(w, &[z3[0].lease_ref()]).await.unwrap().lost, vec![zp]);
    assert!(!b.complete_one(w, z4[0].lease_ref()).await.unwrap().is_lost());

    // Nothing left: a second pass does nothing.
    let rep = b.rescue(&params).await.unwrap();
    assert_eq!((rep.fetched_released, rep.zombies_retried, rep.zombies_dead), (0, 0, 0));
}

#[tokio::test]
async fn rescue_respects_its_limit() {
    let (b, _db) = fresh().await;
    b.enqueue_many(vec![job("l"); 5]).await.unwrap();
    let w = WorkerId::random();
    let js = claim(&b, w, "l", 5, ClaimMode::Reserve).await;
    let old = b.db_now().await.unwrap() - chrono::Duration::seconds(600);
    for j in &js {
        b.force(j.id, &JobPatch { updated_at: Some(old), ..JobPatch::default() }).await.unwrap();
    }
    let params = RescueParams { limit: 3, ..RescueParams::default() };
    assert_eq!(b.rescue(&params).await.unwrap().fetched_released, 3);
    assert_eq!(b.rescue(&params).await.unwrap().fetched_released, 2);
    assert_eq!(b.stats().await.unwrap().pending, 5);
}

#[tokio::test]
async fn queue_controls_pause_deactivate_and_cap() {
    let (b, _db) = fresh().await;
    let s = b.queue_settings(&q("qc")).await.unwrap();
    assert_eq!((s.max_workers, s.is_paused, s.is_active, s.updated_at), (None, false, true, None));
    b.enqueue_many(vec![job("qc"); 5]).await.unwrap();
    let w = WorkerId::random();

    let s = b.pause(&q("qc")).await.unwrap();
    assert!(s.is_paused && s.updated_at.is_some());
    assert!(claim(&b, w, "qc", 10, ClaimMode::Reserve).await.is_empty());
    b.resume(&q("qc")).await.unwrap();
    b.control_queue(&q("qc"), QueueControl::Deactivate).await.unwrap();
    assert!(claim(&b, w, "qc", 10, ClaimMode::Reserve).await.is_empty());
    let s = b.control_queue(&q("qc"), QueueControl::Activate).await.unwrap();
    assert!(s.is_active && !s.is_paused);

    let s = b.set_max_workers(&q("qc"), Some(2)).await.unwrap();
    assert_eq!(s.max_workers, Some(2));
    let first = claim(&b, w, "qc", 10, ClaimMode::Reserve).await;
    assert_eq!(first.len(), 2, "cap holds inside one batch");
    assert!(claim(&b, w, "qc", 10, ClaimMode::Start).await.is_empty());
    assert!(!b.release_one(w, first[0].lease_ref()).await.unwrap().is_lost());
    assert_eq!(claim(&b, w, "qc", 10, ClaimMode::Start).await.len(), 1);
    b.set_max_workers(&q("qc"), Some(0)).await.unwrap();
    assert!(claim(&b, w, "qc", 10, ClaimMode::Start).await.is_empty());
    b.set_max_workers(&q("qc"), None).await.unwrap();
    assert_eq!(claim(&b, w, "qc", 10, ClaimMode::Start).await.len(), 3);

    let s = b.control_queue(&q("qc"), QueueControl::SetZombieTimeout(Some(secs(42)))).await.unwrap();
    assert_eq!(s.zombie_timeout, Some(secs(42)));
    let s = b.control_queue(&q("qc"), QueueControl::SetZombiePolicy(ZombiePolicy::DeadLetter)).await.unwrap();
    assert_eq!(s.zombie_policy, ZombiePolicy::DeadLetter);
    assert_eq!(s.zombie_timeout, Some(secs(42)));
    assert_eq!(s, b.queue_settings(&q("qc")).await.unwrap());
}

#[tokio::test]
async fn requeue_dead_restores_the_job() {
    let (b, _db) = fresh().await;
    let id = b.enqueue(job("rq").priority(4).idempotency_key("rk").max_attempts(1)).await.unwrap().id;
    let w = WorkerId::random();
    let j = claim(&b, w, "rq", 1, ClaimMode::Start).await.remove(0);
    let f = b.fail(w, j.lease_ref(), FailAction::Retry { delay: secs(1), error: "e".into() }).await.unwrap();
    assert_eq!(f, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Failed)));

    // A live job took the key meanwhile: conflict, nothing moves.
    let other = b.enqueue(job("rq").idempotency_key("rk")).await.unwrap();
    assert!(!other.duplicate);
    assert_eq!(b.requeue_dead(id).await.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(b.presence(id).await.unwrap().dead, 1);
    b.cancel(other.id).await.unwrap();

    assert_eq!(b.requeue_dead(id).await.unwrap(), RequeueOutcome::Requeued);
    let r = b.get_job(id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Hot(JobStatus::Pending));
    assert_eq!((r.attempt, r.priority), (0, 4));
    assert_eq!(r.idempotency_key.as_deref(), Some("rk"));
    let p = b.presence(id).await.unwrap();
    assert_eq!((p.hot, p.archive, p.dead), (1, 0, 0));
    assert_eq!(b.requeue_dead(id).await.unwrap(), RequeueOutcome::NotFound);
    assert_eq!(
        b.enqueue(job("rq").idempotency_key("rk")).await.unwrap(),
        chokaq_core::Enqueued { id, duplicate: true }
    );
    let j = claim(&b, w, "rq", 1, ClaimMode::Start).await.remove(0);
    assert_eq!((j.id, j.attempt), (id, 1));
}

#[tokio::test]
async fn purge_deletes_old_finished_jobs_in_batches() {
    let (b, _db) = fresh().await;
    b.enqueue_many(vec![job("p"); 7]).await.unwrap();
    b.enqueue_many(vec![job("p2"); 2]).await.unwrap();
    let w = WorkerId::random();
    let js = claim(&b, w, "p", 7, ClaimMode::Start).await;
    let leases: Vec<_> = js.iter().map(|j| j.lease_ref()).collect();
    assert_eq!(b.complete(w, &leases[..5]).await.unwrap().done.len(), 5);
    for l in &leases[5..] {
        let _ = b.fail(w, *l, FailAction::DeadLetter { reason: DeadReason::Failed, error: "x".into() }).await.unwrap();
    }
    for j in claim(&b, w, "p2", 2, ClaimMode::Start).await {
        let _ = b.fail(w, j.lease_ref(), FailAction::Cancelled { error: None }).await.unwrap();
    }
    // Nothing is older than an hour.
    assert_eq!(b.purge(&PurgeParams::new(PurgeTarget::Archive, secs(3600))).await.unwrap(), 0);
    let now = b.db_now().await.unwrap();
    assert!(common::wait_until(secs(5), || async { b.db_now().await.unwrap() > now }).await);
    let mut req = PurgeParams::new(PurgeTarget::Archive, Duration::ZERO);
    req.batch_size = 2;
    req.max_batches = 2;
    assert_eq!(b.purge(&req).await.unwrap(), 4, "bounded by batches");
    assert_eq!(b.purge(&req).await.unwrap(), 1);
    let mut dl = PurgeParams::new(PurgeTarget::DeadLetter, Duration::ZERO);
    dl.reason = Some(DeadReason::Cancelled);
    assert_eq!(b.purge(&dl).await.unwrap(), 2);
    dl.reason = None;
    dl.queue = Some(q("other"));
    assert_eq!(b.purge(&dl).await.unwrap(), 0);
    dl.queue = Some(q("p"));
    assert_eq!(b.purge(&dl).await.unwrap(), 2);
    assert_eq!(b.stats().await.unwrap().total(), 0);
}

#[tokio::test]
async fn stats_and_listing() {
    let (b, _db) = fresh().await;
    let old = b.db_now().await.unwrap() - chrono::Duration::seconds(50);
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut j = job("s1").tag(format!("t{}", i % 2));
        if i == 0 {
            j = j.run_at(old);
        }
        ids.push(b.enqueue(j).await.unwrap().id);
    }
    ids.push(b.enqueue(job("s2").delay(secs(600))).await.unwrap().id);
    let w = WorkerId::random();
    let c = claim(&b, w, "s1", 2, ClaimMode::Start).await;
    b.complete_one(w, c[0].lease_ref()).await.unwrap().done().unwrap();
    let snap = b.stats().await.unwrap();
    assert_eq!((snap.pending, snap.fetched, snap.processing, snap.archived, snap.dead), (4, 0, 1, 1, 0));
    assert!(snap.taken_at.is_some());
    let s1 = snap.queue("s1").unwrap();
    assert_eq!((s1.pending, s1.processing, s1.archived), (3, 1, 1));
    assert!(s1.oldest_due_at.is_some());
    let s2 = snap.queue("s2").unwrap();
    assert_eq!(s2.pending, 1);
    assert_eq!(s2.oldest_due_at, None, "not due yet");

    let mut f = ListJobsParams::new(JobTable::Hot);
    f.limit = 2;
    let p1 = b.list_jobs(&f).await.unwrap();
    assert_eq!(p1.jobs.len(), 2);
    f.after = p1.next;
    let p2 = b.list_jobs(&f).await.unwrap();
    assert_eq!(p2.jobs.len(), 2);
    f.after = p2.next;
    let p3 = b.list_jobs(&f).await.unwrap();
    assert_eq!(p3.jobs.len(), 1);
    assert_eq!(p3.next, None);
    let all: Vec<JobId> = p1.jobs.iter().chain(&p2.jobs).chain(&p3.jobs).map(|j| j.id).collect();
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted, "id order");

    let mut f = ListJobsParams::new(JobTable::Hot);
    f.queue = Some(q("s1"));
    f.tag = Some("t0".into());
    assert_eq!(b.list_jobs(&f).await.unwrap().jobs.len(), 2, "t0 jobs left in hot");
    f.tag = None;
    f.status = Some(JobStatus::Processing);
    assert_eq!(b.list_jobs(&f).await.unwrap().jobs.len(), 1);
    let mut f = ListJobsParams::new(JobTable::Archive);
    f.kind = Some(chokaq_core::JobKind::new("test.job.v1").unwrap());
    let arch = b.list_jobs(&f).await.unwrap();
    assert_eq!(arch.jobs.len(), 1);
    assert_eq!(arch.jobs[0].location, JobLocation::Archived);
    let mut f = ListJobsParams::new(JobTable::Hot);
    f.created_from = Some(b.db_now().await.unwrap() + chrono::Duration::seconds(10));
    assert!(b.list_jobs(&f).await.unwrap().jobs.is_empty());

    let pm = b.presence_many(&ids).await.unwrap();
    assert_eq!(pm.len(), 6);
    assert!(pm.iter().all(|(_, p)| p.total() == 1));
    assert_eq!(pm.iter().filter(|(_, p)| p.archive == 1).count(), 1);
}

#[tokio::test]
async fn wakeups_hear_this_process_enqueues() {
    let (b, _db) = fresh().await;
    let mut w = b.wakeups().await.unwrap().expect("in-process wakeups");
    b.enqueue(job("wake")).await.unwrap();
    let got = tokio::time::timeout(secs(5), w.recv()).await.unwrap();
    assert_eq!(got, Some(Wake::Queue("wake".into())));
}

#[tokio::test]
async fn drop_schema_removes_the_tables_and_the_empty_file() {
    let (b, db) = fresh().await;
    b.enqueue(job("x")).await.unwrap();
    assert!(db.path.exists());
    b.drop_schema().await.unwrap();
    assert!(!db.path.exists(), "the file was the schema");
    assert_eq!(b.stats().await.unwrap_err().kind(), ErrorKind::Unavailable, "pools are closed");
}

#[tokio::test]
async fn drop_schema_keeps_a_file_with_other_tables() {
    use sqlx::Connection;
    let (b, db) = fresh().await;
    let mut other = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    sqlx::query("CREATE TABLE app_data (x INTEGER)").execute(&mut other).await.unwrap();
    b.enqueue(job("x")).await.unwrap();
    b.drop_schema().await.unwrap();
    assert!(db.path.exists(), "the file holds the application's table");
    assert!(b.stats().await.is_err(), "the job tables are gone");
    b.migrate().await.unwrap();
    assert_eq!(b.stats().await.unwrap().total(), 0);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM app_data").fetch_one(&mut other).await.unwrap();
    assert_eq!(n, 0);
}

/// Another process holding the write lock longer than the busy timeout and every retry:
/// the write fails as Transient (retryable) and changes nothing; once the lock is gone the
/// same call succeeds.
#[tokio::test]
async fn busy_database_is_a_transient_error() {
    use sqlx::Connection;
    let (b, db) = fresh_with(|c| c.busy_timeout(Duration::from_millis(5))).await;
    let mut other = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE").execute(&mut other).await.unwrap();
    let e = b.enqueue(job("busy")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(e.is_retryable());
    // Reads are not blocked by the writer (WAL).
    assert_eq!(b.stats().await.unwrap().total(), 0);
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    assert!(!b.enqueue(job("busy")).await.unwrap().duplicate);
    assert_eq!(b.stats().await.unwrap().total(), 1);
}

/// Throughput reads a range of the archive's `(finished_at, queue)` index and never the
/// table: every queue, and one queue.
#[tokio::test]
async fn throughput_reads_a_covering_index_range() {
    use sqlx::{ConnectOptions, Row};
    let (b, db) = fresh().await;
    let w = WorkerId::random();
    for queue in ["tp_a", "tp_b"] {
        b.enqueue_many((0..20).map(|_| job(queue)).collect()).await.unwrap();
        for j in claim(&b, w, queue, 20, ClaimMode::Start).await {
            b.complete(w, &[j.lease_ref()]).await.unwrap();
        }
    }
    let mut conn: sqlx::SqliteConnection =
        db.url().parse::<sqlx::sqlite::SqliteConnectOptions>().unwrap().connect().await.unwrap();
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();
    let all = chokaq_sqlite::all_statements("main").unwrap();
    for name in ["throughput_all", "throughput_queue"] {
        let sql = &all.iter().find(|(n, _)| *n == name).unwrap().1;
        let text = format!("EXPLAIN QUERY PLAN {sql}");
        let rows = sqlx::query(&text).bind(0i64).bind(60_000_000i64).bind("tp_a").fetch_all(&mut conn).await.unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>("detail")).collect();
        let plan = plan.join("\n");
        assert!(plan.contains("USING COVERING INDEX jobs_archive_finished_queue"), "{name}:\n{plan}");
    }
    let buckets = b.throughput(&chokaq_core::ThroughputParams::last_hour()).await.unwrap();
    let per: Vec<(String, u64)> = buckets.iter().map(|x| (x.queue.clone(), x.finished)).collect();
    let total = |q: &str| per.iter().filter(|(n, _)| n == q).map(|(_, n)| n).sum::<u64>();
    assert_eq!((total("tp_a"), total("tp_b")), (20, 20));
}

/// Issue 12, item 1: jobs scheduled for later are Scheduled, outside the claim's index range
/// (queue, Pending), so 20,000 of them due tomorrow cost the claim of five due jobs nothing
/// (version 5 kept them in that range, and every claim walked past them); once due, the claim
/// promotes them and they run.
#[tokio::test]
async fn a_scheduled_backlog_stays_out_of_the_claim_range() {
    use sqlx::Connection;
    let (b, db) = fresh().await;
    let tomorrow = b.db_now().await.unwrap() + chokaq_core::chrono::Duration::seconds(86_400);
    for _ in 0..4 {
        b.enqueue_many((0..5_000).map(|_| job("later").run_at(tomorrow)).collect()).await.unwrap();
    }
    b.enqueue_many((0..5).map(|_| job("later")).collect()).await.unwrap();
    let mut conn = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    let in_range: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs_hot INDEXED BY jobs_hot_claim WHERE queue = 'later' AND status = 0",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(in_range, 5, "entries of the claim's index range with 20,000 jobs due tomorrow and 5 due now");
    assert_eq!(b.stats().await.unwrap().pending, 20_005, "Scheduled counts as Pending");
    assert_eq!(claim(&b, WorkerId::random(), "later", 10, ClaimMode::Reserve).await.len(), 5);
    // Once due, a Scheduled job is promoted by the claim and runs.
    let one = b.enqueue(job("later2").run_at(tomorrow)).await.unwrap().id;
    assert!(claim(&b, WorkerId::random(), "later2", 10, ClaimMode::Reserve).await.is_empty());
    assert_eq!(b.get_job(one).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Pending));
    let past = b.db_now().await.unwrap() - chokaq_core::chrono::Duration::seconds(1);
    assert!(b.force(one, &JobPatch { scheduled_at: Some(Some(past)), ..Default::default() }).await.unwrap());
    let got = claim(&b, WorkerId::random(), "later2", 10, ClaimMode::Reserve).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![one]);
    conn.close().await.unwrap();
}

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
    // This library's version (9: concurrency keys and rate limits).
    assert_eq!(v, 9);
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
    assert_eq!(v, 9);
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_schema WHERE name IN \
         ('rate_starts', 'rate_starts_window', 'jobs_hot_key_running')",
    )
    .fetch_one(&mut raw)
    .await
    .unwrap();
    assert_eq!(n, 3);
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

/// Held jobs expire by the zombie timeout from their last heartbeat: back to Pending (the
/// attempt unspent, counted in `fetched_released`), dead-lettered `zombie` at the third
/// expiry, or `cancelled` when a cancel was requested; a requeue starts the count again.
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
    expire(id, 120).await;
    let rep = b.rescue(&params).await.unwrap();
    assert_eq!((rep.fetched_released, rep.zombies_retried, rep.zombies_dead), (0, 0, 0));
    assert_eq!(b.get_job(id).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Fetched));
    for round in 1..=chokaq_core::MAX_EXPIRED_HOLDS {
        if round > 1 {
            claim(&b, w, "hx", 1, ClaimMode::Hold).await.remove(0);
        }
        expire(id, 600).await;
        let rep = b.rescue(&params).await.unwrap();
        let r = b.get_job(id).await.unwrap().unwrap();
        if round < chokaq_core::MAX_EXPIRED_HOLDS {
            assert_eq!((rep.fetched_released, rep.zombies_dead), (1, 0), "round {round}");
            assert_eq!((r.location, r.attempt, r.heartbeat_at), (JobLocation::Hot(JobStatus::Pending), 0, None));
            assert_eq!((r.lease, r.worker_id), (None, None));
        } else {
            assert_eq!((rep.fetched_released, rep.zombies_dead), (0, 1), "round {round}");
            assert_eq!(r.location, JobLocation::Dead(DeadReason::Zombie));
            assert_eq!(
                r.last_error.as_deref(),
                Some("held 3 times by workers that stopped before its start was recorded")
            );
        }
    }
    assert!(b.complete_one(w, h.lease_ref()).await.unwrap().is_lost(), "the first holder is fenced out");
    // Requeued: a fresh row, so one more expiry puts it back instead of killing it.
    assert_eq!(b.requeue_dead(id).await.unwrap(), RequeueOutcome::Requeued);
    claim(&b, w, "hx", 1, ClaimMode::Hold).await.remove(0);
    expire(id, 600).await;
    assert_eq!(b.rescue(&params).await.unwrap().fetched_released, 1);
    assert_eq!(b.get_job(id).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Pending));
    // A held job with a cancel request dies `cancelled`, whatever its count.
    claim(&b, w, "hx", 1, ClaimMode::Hold).await.remove(0);
    assert_eq!(b.cancel(id).await.unwrap(), CancelOutcome::Requested);
    expire(id, 600).await;
    let rep = b.rescue(&params).await.unwrap();
    assert_eq!((rep.fetched_released, rep.zombies_dead), (0, 1));
    assert_eq!(b.get_job(id).await.unwrap().unwrap().location, JobLocation::Dead(DeadReason::Cancelled));
}

/// The statements of keyed and rate-limited claims read index ranges, never the whole table
/// nor a sort: the page of due jobs walks `jobs_hot_claim` in claim order, the per-key running
/// count reads `jobs_hot_key_running` (only running keyed rows), the starts log is counted
/// through `rate_starts_window`, and the stats' busiest keys read only running rows (the
/// running-key index or the `(status, updated_at)` one, as the planner likes).
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
        ("rate_count_queue", "rate_starts_window"),
        ("rate_count_keys", "rate_starts_window"),
        ("stats_busiest_keys", "jobs_hot_key_running|jobs_hot_status (status=?)"),
    ] {
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {}", sql(name))).fetch_all(&mut raw).await.unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>("detail")).collect();
        assert!(plan.iter().any(|d| index.split('|').any(|i| d.contains(i))), "{name}: {plan:?}");
        assert!(!plan.iter().any(|d| d.starts_with("SCAN jobs_hot") && !d.contains("INDEX")), "{name}: {plan:?}");
        if name == "claim_candidates_keyed" {
            assert!(!plan.iter().any(|d| d.contains("TEMP B-TREE")), "{name} sorts: {plan:?}");
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
