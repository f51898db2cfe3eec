//! Every operation and guard of the SQLite backend, against a real database file per test.

mod common;

use std::time::Duration;

use chokaq_core::testing::{JobPatch, TestSupport};
use chokaq_core::{
    Backend, BackendExt, CancelOutcome, ClaimMode, ClaimParams, DeadReason, ErrorKind, FailAction, FailOutcome, Fenced,
    JobId, JobLocation, JobStatus, JobTable, ListJobsParams, NewJob, PurgeParams, PurgeTarget, QueueControl,
    RescueParams, WorkerId, MAX_ENQUEUE_BATCH,
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
    // A missing directory is configuration, not an outage (issue 40, item 2): a retry cannot
    // fix it.
    let e = SqliteBackend::connect(SqliteConfig::new("/nonexistent-dir-chokaq/sub/x.db")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("its directory does not exist"), "{e}");
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
