//! Every operation and every guard of the PostgreSQL backend, against the real server.

mod common;

use std::time::Duration;

use chokaq_core::testing::{JobPatch, TestSupport};
use chokaq_core::{
    Backend, BackendExt, CancelOutcome, ClaimMode, ClaimParams, DeadReason, ErrorKind, FailAction, FailOutcome, Fenced,
    JobId, JobLocation, JobStatus, LeaseRef, QueueControl, QueueName, RequeueOutcome, WorkerId, ZombiePolicy,
};
use common::{claim, claim_one, job, q};
use rstest::rstest;
use serde_json::json;
use sqlx::Connection;

fn ago(secs: i64) -> chokaq_core::Timestamp {
    chokaq_core::chrono::Utc::now() - chokaq_core::chrono::Duration::seconds(secs)
}

#[tokio::test]
async fn enqueue_round_trips_every_field() {
    let f = fixture!();
    let db = &f.db;
    let e = db
        .enqueue(
            job("fields")
                .json(json!({"to": "a@b.c", "n": [1, 2, 3]}))
                .priority(7)
                .idempotency_key("k-1")
                .tags(["red", "blue"])
                .max_attempts(4)
                .created_by("tester"),
        )
        .await
        .unwrap();
    let r = db.get_job(e.id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(r.payload, json!({"to": "a@b.c", "n": [1, 2, 3]}));
    assert_eq!(r.priority, 7);
    assert_eq!(r.idempotency_key.as_deref(), Some("k-1"));
    assert_eq!(r.tags, vec!["red", "blue"]);
    assert_eq!((r.attempt, r.max_attempts), (0, 4));
    assert_eq!(r.created_by.as_deref(), Some("tester"));
    assert_eq!(r.lease, None);
    assert!(db.get_job(JobId::new()).await.unwrap().is_none());
    f.drop().await;
}

#[rstest]
#[case::reserve(ClaimMode::Reserve)]
#[case::hold(ClaimMode::Hold)]
#[case::start(ClaimMode::Start)]
#[tokio::test]
async fn claim_modes(#[case] mode: ClaimMode) {
    let f = fixture!();
    let db = &f.db;
    for _ in 0..3 {
        db.enqueue(job("modes")).await.unwrap();
    }
    let w = WorkerId::random();
    let jobs = claim(db, w, "modes", 2, mode).await;
    assert_eq!(jobs.len(), 2);
    assert!(jobs[0].lease != jobs[1].lease);
    for j in &jobs {
        assert_eq!(j.worker_id, w);
        match mode {
            ClaimMode::Reserve => {
                assert_eq!((j.status, j.attempt), (JobStatus::Fetched, 0));
                assert!(j.started_at.is_none() && j.heartbeat_at.is_none());
            }
            ClaimMode::Hold => {
                assert_eq!((j.status, j.attempt), (JobStatus::Fetched, 0));
                assert!(j.started_at.is_none() && j.heartbeat_at.is_some());
            }
            ClaimMode::Start => {
                assert_eq!((j.status, j.attempt), (JobStatus::Processing, 1));
                assert!(j.started_at.is_some() && j.heartbeat_at.is_some());
            }
        }
    }
    // Claimed jobs are not claimed again; the third one is.
    let rest = claim(db, WorkerId::random(), "modes", 10, mode).await;
    assert_eq!(rest.len(), 1);
    assert!(rest[0].lease.0 > jobs[1].lease.0.max(jobs[0].lease.0), "leases grow");
    f.drop().await;
}

/// A Reserve claim writes `heartbeat_at = NULL` (a re-claimed row may carry the heartbeat of
/// its previous run, which would make it held); Hold writes now().
#[tokio::test]
async fn reserve_clears_an_old_heartbeat_and_hold_sets_one() {
    let f = fixture!();
    let db = &f.db;
    let id = db.enqueue(job("rehb")).await.unwrap().id;
    let w = WorkerId::random();
    let first = claim_one(db, w, "rehb", ClaimMode::Start).await;
    let retry = FailAction::Retry { delay: Duration::ZERO, error: "again".into() };
    assert!(db.fail(w, first.lease_ref(), retry).await.unwrap().done().is_some());
    let r = db.get_job(id).await.unwrap().unwrap();
    assert!(r.heartbeat_at.is_some(), "the retried row keeps its last heartbeat");
    let again = claim_one(db, w, "rehb", ClaimMode::Reserve).await;
    assert_eq!((again.status, again.heartbeat_at), (JobStatus::Fetched, None));
    assert!(db.release_one(w, again.lease_ref()).await.unwrap().done().is_some());
    let held = claim_one(db, w, "rehb", ClaimMode::Hold).await;
    let now = db.db_now().await.unwrap();
    assert!(held.heartbeat_at.is_some_and(|t| (now - t).num_seconds().abs() < 5), "{:?}", held.heartbeat_at);
    f.drop().await;
}

#[tokio::test]
async fn claim_order_is_priority_then_due_then_id() {
    let f = fixture!();
    let db = &f.db;
    let now = db.db_now().await.unwrap();
    let low = db.enqueue(job("order").priority(0)).await.unwrap().id;
    let high = db.enqueue(job("order").priority(9)).await.unwrap().id;
    let old_due = db.enqueue(job("order").run_at(now - chrono_secs(60))).await.unwrap().id;
    let low2 = db.enqueue(job("order").priority(0)).await.unwrap().id;
    let got: Vec<JobId> =
        claim(db, WorkerId::random(), "order", 10, ClaimMode::Reserve).await.iter().map(|j| j.id).collect();
    assert_eq!(got, vec![high, old_due, low, low2]);
    f.drop().await;
}

fn chrono_secs(s: i64) -> chokaq_core::chrono::Duration {
    chokaq_core::chrono::Duration::seconds(s)
}

#[tokio::test]
async fn claim_takes_only_the_named_queues_and_respects_the_limit() {
    let f = fixture!();
    let db = &f.db;
    for i in 0..10 {
        db.enqueue(job(if i % 2 == 0 { "a" } else { "b" })).await.unwrap();
    }
    db.enqueue(job("c")).await.unwrap();
    let w = WorkerId::random();
    let got = db.claim(&ClaimParams::new(w, vec![q("a"), q("b")], 7, ClaimMode::Reserve)).await.unwrap();
    assert_eq!(got.len(), 7);
    assert!(got.iter().all(|j| j.queue.as_str() != "c"));
    let err = db.claim(&ClaimParams::new(w, vec![q("a")], 0, ClaimMode::Reserve)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let err = db.claim(&ClaimParams::new(w, vec![], 1, ClaimMode::Reserve)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    f.drop().await;
}

#[tokio::test]
async fn scheduled_jobs_wait_until_due() {
    let f = fixture!();
    let db = &f.db;
    let later = db.enqueue(job("sched").delay(Duration::from_secs(3600))).await.unwrap().id;
    let now = db.db_now().await.unwrap();
    let at = db.enqueue(job("sched").run_at(now + chrono_secs(3600))).await.unwrap().id;
    assert!(claim(db, WorkerId::random(), "sched", 10, ClaimMode::Reserve).await.is_empty());
    let r = db.get_job(later).await.unwrap().unwrap();
    assert!(r.scheduled_at.unwrap() > now + chrono_secs(3500));
    // Due now: claimable.
    assert!(db.force(at, &JobPatch { scheduled_at: Some(Some(ago(1))), ..Default::default() }).await.unwrap());
    let got = claim(db, WorkerId::random(), "sched", 10, ClaimMode::Reserve).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![at]);
    f.drop().await;
}

#[rstest]
#[case::paused(QueueControl::Pause, QueueControl::Resume)]
#[case::inactive(QueueControl::Deactivate, QueueControl::Activate)]
#[tokio::test]
async fn stopped_queues_are_not_claimed(#[case] stop: QueueControl, #[case] go: QueueControl) {
    let f = fixture!();
    let db = &f.db;
    db.enqueue(job("ctl")).await.unwrap();
    let s = db.control_queue(&q("ctl"), stop).await.unwrap();
    assert!(s.is_paused || !s.is_active);
    assert!(claim(db, WorkerId::random(), "ctl", 10, ClaimMode::Start).await.is_empty());
    // Also when capped (the capped path reads the row under its lock).
    db.set_max_workers(&q("ctl"), Some(5)).await.unwrap();
    assert!(claim(db, WorkerId::random(), "ctl", 10, ClaimMode::Start).await.is_empty());
    let s = db.control_queue(&q("ctl"), go).await.unwrap();
    assert!(!s.is_paused && s.is_active && s.max_workers == Some(5));
    assert_eq!(claim(db, WorkerId::random(), "ctl", 10, ClaimMode::Start).await.len(), 1);
    f.drop().await;
}

#[tokio::test]
async fn queue_settings_round_trip() {
    let f = fixture!();
    let db = &f.db;
    let s = db.queue_settings(&q("none")).await.unwrap();
    assert_eq!(s, chokaq_core::QueueSettings::default_for(q("none")));
    db.control_queue(&q("set"), QueueControl::SetZombieTimeout(Some(Duration::from_secs(30)))).await.unwrap();
    db.control_queue(&q("set"), QueueControl::SetZombiePolicy(ZombiePolicy::DeadLetter)).await.unwrap();
    db.set_max_workers(&q("set"), Some(3)).await.unwrap();
    let s = db.queue_settings(&q("set")).await.unwrap();
    assert_eq!(s.max_workers, Some(3));
    assert_eq!(s.zombie_timeout, Some(Duration::from_secs(30)));
    assert_eq!(s.zombie_policy, ZombiePolicy::DeadLetter);
    assert!(s.updated_at.is_some());
    db.set_max_workers(&q("set"), None).await.unwrap();
    assert_eq!(db.queue_settings(&q("set")).await.unwrap().max_workers, None);
    f.drop().await;
}

#[tokio::test]
async fn cap_holds_inside_one_batch_and_across_claims() {
    let f = fixture!();
    let db = &f.db;
    for _ in 0..10 {
        db.enqueue(job("capped")).await.unwrap();
        db.enqueue(job("free")).await.unwrap();
    }
    db.set_max_workers(&q("capped"), Some(2)).await.unwrap();
    let w = WorkerId::random();
    let got = db.claim(&ClaimParams::new(w, vec![q("capped"), q("free")], 20, ClaimMode::Reserve)).await.unwrap();
    assert_eq!(got.iter().filter(|j| j.queue.as_str() == "capped").count(), 2);
    assert_eq!(got.iter().filter(|j| j.queue.as_str() == "free").count(), 10);
    assert!(claim(db, w, "capped", 10, ClaimMode::Start).await.is_empty());
    // Fetched counts too: start one, complete it, and exactly one slot opens.
    let one = got.iter().find(|j| j.queue.as_str() == "capped").unwrap().lease_ref();
    db.start_one(w, one).await.unwrap().done().unwrap();
    assert!(claim(db, w, "capped", 10, ClaimMode::Start).await.is_empty());
    db.complete_one(w, one).await.unwrap().done().unwrap();
    assert_eq!(claim(db, w, "capped", 10, ClaimMode::Start).await.len(), 1);
    // A cap of zero stops the queue.
    db.set_max_workers(&q("free"), Some(0)).await.unwrap();
    db.enqueue(job("free")).await.unwrap();
    assert!(claim(db, w, "free", 10, ClaimMode::Start).await.is_empty());
    f.drop().await;
}

/// Which guarded write a lease test drives.
#[derive(Debug, Clone, Copy)]
enum Op {
    Start,
    Heartbeat,
    Complete,
    Fail,
    Release,
}

async fn apply(db: &chokaq_postgres::PgBackend, op: Op, w: WorkerId, l: LeaseRef) -> bool {
    match op {
        Op::Start => db.start_one(w, l).await.unwrap().is_lost(),
        Op::Heartbeat => {
            let r = db.heartbeat(w, &[l]).await.unwrap();
            assert_eq!(r.held.len() + r.lost.len(), 1);
            !r.lost.is_empty()
        }
        Op::Complete => db.complete_one(w, l).await.unwrap().is_lost(),
        Op::Fail => {
            db.fail(w, l, FailAction::Retry { delay: Duration::ZERO, error: "x".into() }).await.unwrap().is_lost()
        }
        Op::Release => db.release_one(w, l).await.unwrap().is_lost(),
    }
}

#[rstest]
#[case::start(Op::Start)]
#[case::heartbeat(Op::Heartbeat)]
#[case::complete(Op::Complete)]
#[case::fail(Op::Fail)]
#[case::release(Op::Release)]
#[tokio::test]
async fn guards_reject_wrong_lease_worker_and_status(#[case] op: Op) {
    let f = fixture!();
    let db = &f.db;
    db.enqueue(job("guard")).await.unwrap();
    let w = WorkerId::random();
    // Start and release take Fetched (start also a job it started); the others Processing.
    let mode = if matches!(op, Op::Start | Op::Release) { ClaimMode::Reserve } else { ClaimMode::Start };
    let j = claim_one(db, w, "guard", mode).await;
    let before = db.get_job(j.id).await.unwrap().unwrap();
    let wrong_lease = LeaseRef { id: j.id, lease: chokaq_core::Lease(j.lease.0 + 1000) };
    assert!(apply(db, op, w, wrong_lease).await, "wrong lease must be lost");
    assert!(apply(db, op, WorkerId::random(), j.lease_ref()).await, "wrong worker must be lost");
    assert!(apply(db, op, w, LeaseRef { id: JobId::new(), lease: j.lease }).await, "unknown id must be lost");
    assert_eq!(db.get_job(j.id).await.unwrap().unwrap(), before, "a lost write changed nothing");
    // Wrong status: release of a Processing job (every other guard takes Fetched and
    // Processing alike: start is repeatable, complete, heartbeat and fail count a Fetched run).
    if matches!(op, Op::Heartbeat | Op::Complete | Op::Fail) {
        assert!(apply(db, Op::Release, w, j.lease_ref()).await, "wrong status must be lost");
        assert_eq!(db.get_job(j.id).await.unwrap().unwrap(), before, "a lost release changed nothing");
    }
    // The right call passes.
    assert!(!apply(db, op, w, j.lease_ref()).await, "the holder's write must pass");
    f.drop().await;
}

#[tokio::test]
async fn batch_outcomes_list_every_id_once() {
    let f = fixture!();
    let db = &f.db;
    for _ in 0..4 {
        db.enqueue(job("batch")).await.unwrap();
    }
    let w = WorkerId::random();
    let jobs = claim(db, w, "batch", 4, ClaimMode::Start).await;
    let mut leases: Vec<LeaseRef> = jobs.iter().map(|j| j.lease_ref()).collect();
    leases[1].lease.0 += 1; // lost
    leases.push(jobs[0].lease_ref()); // duplicate input
    let out = db.complete(w, &leases).await.unwrap();
    assert_eq!(out.done, vec![jobs[0].id, jobs[2].id, jobs[3].id]);
    assert_eq!(out.lost, vec![jobs[1].id]);
    let hb = db.heartbeat(w, &jobs.iter().map(|j| j.lease_ref()).collect::<Vec<_>>()).await.unwrap();
    assert_eq!(hb.held, vec![jobs[1].id]);
    assert_eq!(hb.lost.len(), 3);
    assert_eq!(db.complete(w, &[]).await.unwrap(), Default::default());
    f.drop().await;
}

#[tokio::test]
async fn stale_copy_after_release_and_reclaim_cannot_start() {
    let f = fixture!();
    let db = &f.db;
    db.enqueue(job("stale")).await.unwrap();
    let w = WorkerId::random();
    let first = claim_one(db, w, "stale", ClaimMode::Reserve).await;
    db.release_one(w, first.lease_ref()).await.unwrap().done().unwrap();
    let again = claim_one(db, w, "stale", ClaimMode::Reserve).await;
    assert_eq!(again.id, first.id);
    assert!(again.lease > first.lease);
    assert!(db.start_one(w, first.lease_ref()).await.unwrap().is_lost());
    db.start_one(w, again.lease_ref()).await.unwrap().done().unwrap();
    f.drop().await;
}

#[tokio::test]
async fn retry_until_dead_letter_keeps_the_last_error() {
    let f = fixture!();
    let db = &f.db;
    let id = db.enqueue(job("retry").max_attempts(2)).await.unwrap().id;
    let w = WorkerId::random();
    let j = claim_one(db, w, "retry", ClaimMode::Start).await;
    let r = db.fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: "first".into() }).await;
    let now = db.db_now().await.unwrap();
    match r.unwrap() {
        Fenced::Done(FailOutcome::Retried { at }) => assert!(at <= now),
        other => panic!("{other:?}"),
    }
    let rec = db.get_job(id).await.unwrap().unwrap();
    assert_eq!((rec.location, rec.attempt, rec.worker_id), (JobLocation::Hot(JobStatus::Pending), 1, None));
    assert_eq!(rec.last_error.as_deref(), Some("first"));
    let j = claim_one(db, w, "retry", ClaimMode::Start).await;
    assert_eq!(j.attempt, 2);
    let long = "é".repeat(10_000);
    let r = db.fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: long }).await.unwrap();
    assert_eq!(r, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Failed)));
    let rec = db.get_job(id).await.unwrap().unwrap();
    assert_eq!(rec.location, JobLocation::Dead(DeadReason::Failed));
    let err = rec.last_error.unwrap();
    assert!(err.len() <= chokaq_core::validate::MAX_ERROR_LEN && err.starts_with('é'));
    assert!(rec.finished_at.is_some());
    f.drop().await;
}

#[tokio::test]
async fn retry_with_delay_is_not_claimed_early() {
    let f = fixture!();
    let db = &f.db;
    db.enqueue(job("delay")).await.unwrap();
    let w = WorkerId::random();
    let j = claim_one(db, w, "delay", ClaimMode::Start).await;
    let r = db.fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::from_secs(600), error: "e".into() });
    let Fenced::Done(FailOutcome::Retried { at }) = r.await.unwrap() else { panic!("not retried") };
    assert!(at > db.db_now().await.unwrap() + chrono_secs(500));
    assert!(claim(db, w, "delay", 1, ClaimMode::Start).await.is_empty());
    f.drop().await;
}

#[rstest]
#[case::dead_letter(FailAction::DeadLetter { reason: DeadReason::TimedOut, error: "slow".into() }, Some(DeadReason::TimedOut))]
#[case::cancelled(FailAction::Cancelled { error: None }, Some(DeadReason::Cancelled))]
#[case::snooze(FailAction::Snooze { delay: Duration::ZERO }, None)]
#[tokio::test]
async fn fail_outcomes(#[case] outcome: FailAction, #[case] dead: Option<DeadReason>) {
    let f = fixture!();
    let db = &f.db;
    let id = db.enqueue(job("fo")).await.unwrap().id;
    let w = WorkerId::random();
    let j = claim_one(db, w, "fo", ClaimMode::Start).await;
    let r = db.fail(w, j.lease_ref(), outcome.clone()).await.unwrap().done().unwrap();
    let rec = db.get_job(id).await.unwrap().unwrap();
    match dead {
        Some(reason) => {
            assert_eq!(r, FailOutcome::DeadLettered(reason));
            assert_eq!(rec.location, JobLocation::Dead(reason));
        }
        None => {
            assert!(matches!(r, FailOutcome::Snoozed { .. }));
            assert_eq!((rec.location, rec.attempt), (JobLocation::Hot(JobStatus::Pending), 0));
        }
    }
    // A second fail with the same lease reports the outcome that stands; another lease is lost.
    assert_eq!(db.fail(w, j.lease_ref(), outcome).await.unwrap(), Fenced::Done(r));
    let stale = chokaq_core::LeaseRef { id, lease: chokaq_core::Lease(j.lease.0 + 1000) };
    assert!(db.fail(w, stale, FailAction::Cancelled { error: None }).await.unwrap().is_lost());
    f.drop().await;
}

#[tokio::test]
async fn cancel_in_every_state() {
    let f = fixture!();
    let db = &f.db;
    let pending = db.enqueue(job("cx")).await.unwrap().id;
    assert_eq!(db.cancel(pending).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(db.get_job(pending).await.unwrap().unwrap().location, JobLocation::Dead(DeadReason::Cancelled));
    assert_eq!(db.cancel(pending).await.unwrap(), CancelOutcome::NotLive);
    assert_eq!(db.cancel(JobId::new()).await.unwrap(), CancelOutcome::NotLive);

    let fetched = db.enqueue(job("cx")).await.unwrap().id;
    let w = WorkerId::random();
    let fj = claim_one(db, w, "cx", ClaimMode::Reserve).await;
    assert_eq!(db.cancel(fetched).await.unwrap(), CancelOutcome::Cancelled);
    assert!(db.start_one(w, fj.lease_ref()).await.unwrap().is_lost());

    let running = db.enqueue(job("cx")).await.unwrap().id;
    let rj = claim_one(db, w, "cx", ClaimMode::Start).await;
    assert_eq!(db.cancel(running).await.unwrap(), CancelOutcome::Requested);
    let hb = db.heartbeat(w, &[rj.lease_ref()]).await.unwrap();
    assert_eq!((hb.held.clone(), hb.cancel_requested.clone()), (vec![running], vec![running]));
    let r = db.fail(w, rj.lease_ref(), FailAction::Cancelled { error: Some("stopped".into()) }).await.unwrap();
    assert_eq!(r, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Cancelled)));
    let rec = db.get_job(running).await.unwrap().unwrap();
    assert_eq!(rec.last_error.as_deref(), Some("stopped"));
    f.drop().await;
}

#[tokio::test]
async fn requeue_dead_keeps_id_priority_and_key() {
    let f = fixture!();
    let db = &f.db;
    let id = db.enqueue(job("rq").priority(3).idempotency_key("rq-key").max_attempts(1)).await.unwrap().id;
    let w = WorkerId::random();
    let j = claim_one(db, w, "rq", ClaimMode::Start).await;
    let _ = db.fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: "x".into() }).await.unwrap();
    // The key is free while the job is dead: a new live job takes it, and requeue conflicts.
    let other = db.enqueue(job("rq").idempotency_key("rq-key")).await.unwrap();
    assert!(!other.duplicate);
    let err = db.requeue_dead(id).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(db.get_job(id).await.unwrap().unwrap().location, JobLocation::Dead(DeadReason::Failed));
    assert_eq!(db.cancel(other.id).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(db.requeue_dead(id).await.unwrap(), RequeueOutcome::Requeued);
    let rec = db.get_job(id).await.unwrap().unwrap();
    assert_eq!(rec.location, JobLocation::Hot(JobStatus::Pending));
    assert_eq!((rec.attempt, rec.priority, rec.idempotency_key.as_deref()), (0, 3, Some("rq-key")));
    assert_eq!(db.requeue_dead(id).await.unwrap(), RequeueOutcome::NotFound);
    assert_eq!(db.requeue_dead(JobId::new()).await.unwrap(), RequeueOutcome::NotFound);
    let again = claim_one(db, w, "rq", ClaimMode::Start).await;
    assert_eq!((again.id, again.attempt), (id, 1));
    f.drop().await;
}

#[tokio::test]
async fn stats_count_every_table() {
    let f = fixture!();
    let db = &f.db;
    for _ in 0..5 {
        db.enqueue(job("s1")).await.unwrap();
    }
    db.enqueue(job("s2").delay(Duration::from_secs(3600))).await.unwrap();
    let w = WorkerId::random();
    let fetched = claim(db, w, "s1", 1, ClaimMode::Reserve).await;
    let running = claim(db, w, "s1", 2, ClaimMode::Start).await;
    db.complete_one(w, running[0].lease_ref()).await.unwrap().done().unwrap();
    let _ = db.fail(w, running[1].lease_ref(), FailAction::Cancelled { error: None }).await.unwrap();
    let s = db.stats().await.unwrap();
    let s1 = s.queue("s1").unwrap();
    assert_eq!((s1.pending, s1.fetched, s1.processing, s1.archived, s1.dead), (2, 1, 0, 1, 1));
    assert!(s1.oldest_due_at.is_some());
    let s2 = s.queue("s2").unwrap();
    assert_eq!((s2.pending, s2.oldest_due_at), (1, None), "future jobs are not lag");
    assert_eq!(s.total(), 6);
    assert!(s.taken_at.is_some());
    let _ = fetched;
    f.drop().await;
}

async fn age_finished(db: &chokaq_postgres::PgBackend, table: &str, days: i32) {
    sqlx::query(&format!("UPDATE \"{}\".{table} SET finished_at = now() - $1 * interval '1 day'", db.schema()))
        .bind(days)
        .execute(db.pool())
        .await
        .unwrap();
}

#[tokio::test]
async fn purge_deletes_old_rows_in_batches_with_filters() {
    use chokaq_core::{PurgeParams, PurgeTarget};
    let f = fixture!();
    let db = &f.db;
    let w = WorkerId::random();
    for queue in ["p1", "p1", "p1", "p1", "p1", "p2", "p2"] {
        db.enqueue(job(queue)).await.unwrap();
    }
    for queue in ["p1", "p2"] {
        let jobs = claim(db, w, queue, 10, ClaimMode::Start).await;
        db.complete(w, &jobs.iter().map(|j| j.lease_ref()).collect::<Vec<_>>()).await.unwrap();
    }
    let dead = db.enqueue(job("p1")).await.unwrap().id;
    db.cancel(dead).await.unwrap();
    // Fresh rows are kept.
    let req = PurgeParams::new(PurgeTarget::Archive, Duration::from_secs(86_400));
    assert_eq!(db.purge(&req).await.unwrap(), 0);
    age_finished(db, "jobs_archive", 2).await;
    age_finished(db, "jobs_dlq", 2).await;
    let mut only_p1 = req.clone();
    only_p1.queue = Some(q("p1"));
    only_p1.batch_size = 2;
    only_p1.max_batches = 2;
    assert_eq!(db.purge(&only_p1).await.unwrap(), 4, "two batches of two");
    assert_eq!(db.purge(&only_p1).await.unwrap(), 1);
    assert_eq!(db.purge(&req).await.unwrap(), 2);
    let mut dlq = PurgeParams::new(PurgeTarget::DeadLetter, Duration::from_secs(86_400));
    dlq.reason = Some(DeadReason::Failed);
    assert_eq!(db.purge(&dlq).await.unwrap(), 0);
    dlq.reason = Some(DeadReason::Cancelled);
    assert_eq!(db.purge(&dlq).await.unwrap(), 1);
    let mut bad = req.clone();
    bad.reason = Some(DeadReason::Failed);
    assert_eq!(db.purge(&bad).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    let s = db.stats().await.unwrap();
    assert_eq!(s.total(), 0);
    f.drop().await;
}

#[tokio::test]
async fn listing_pages_and_filters() {
    use chokaq_core::{JobTable, ListJobsParams};
    let f = fixture!();
    let db = &f.db;
    let mut ids = Vec::new();
    for i in 0..25 {
        let mut j = job(if i % 5 == 0 { "l2" } else { "l1" });
        if i % 2 == 0 {
            j = j.tag("even");
        }
        ids.push(db.enqueue(j).await.unwrap().id);
    }
    let mut seen = Vec::new();
    let mut filter = ListJobsParams::new(JobTable::Hot);
    filter.limit = 10;
    loop {
        let page = db.list_jobs(&filter).await.unwrap();
        seen.extend(page.jobs.iter().map(|j| j.id));
        match page.next {
            Some(n) => filter.after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, ids, "all jobs, in id order, once");
    let mut f2 = ListJobsParams::new(JobTable::Hot);
    f2.queue = Some(q("l2"));
    assert_eq!(db.list_jobs(&f2).await.unwrap().jobs.len(), 5);
    f2.tag = Some("even".into());
    assert_eq!(db.list_jobs(&f2).await.unwrap().jobs.len(), 3);
    f2.status = Some(JobStatus::Fetched);
    assert!(db.list_jobs(&f2).await.unwrap().jobs.is_empty());
    let mut f3 = ListJobsParams::new(JobTable::Hot);
    f3.kind = Some(chokaq_core::JobKind::new("other.kind").unwrap());
    assert!(db.list_jobs(&f3).await.unwrap().jobs.is_empty());
    let now = db.db_now().await.unwrap();
    f3.kind = None;
    f3.created_from = Some(now + chrono_secs(60));
    assert!(db.list_jobs(&f3).await.unwrap().jobs.is_empty());
    f3.created_from = Some(now - chrono_secs(60));
    f3.created_to = Some(now + chrono_secs(60));
    assert_eq!(db.list_jobs(&f3).await.unwrap().jobs.len(), 25);
    // Archive and dead-letter tables.
    let w = WorkerId::random();
    let j = claim_one(db, w, "l2", ClaimMode::Start).await;
    db.complete_one(w, j.lease_ref()).await.unwrap().done().unwrap();
    db.cancel(ids[1]).await.unwrap();
    let arch = db.list_jobs(&ListJobsParams::new(JobTable::Archive)).await.unwrap();
    assert_eq!(arch.jobs.iter().map(|r| (r.id, r.location)).collect::<Vec<_>>(), vec![(j.id, JobLocation::Archived)]);
    let dead = db.list_jobs(&ListJobsParams::new(JobTable::DeadLetter)).await.unwrap();
    assert_eq!(dead.jobs[0].location, JobLocation::Dead(DeadReason::Cancelled));
    let mut bad = ListJobsParams::new(JobTable::Archive);
    bad.status = Some(JobStatus::Pending);
    assert_eq!(db.list_jobs(&bad).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    bad = ListJobsParams::new(JobTable::Hot);
    bad.limit = 0;
    assert_eq!(db.list_jobs(&bad).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    f.drop().await;
}

#[tokio::test]
async fn a_cancel_request_survives_a_retry() {
    let f = fixture!();
    let db = &f.db;
    let id = db.enqueue(job("cr")).await.unwrap().id;
    let w = WorkerId::random();
    let j = claim_one(db, w, "cr", ClaimMode::Start).await;
    assert_eq!(db.cancel(id).await.unwrap(), CancelOutcome::Requested);
    // The handler failed before it saw the request: the request stays, and a cancel is final,
    // so the retry dead-letters the job as cancelled; it never runs again.
    let r = db.fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: "e".into() }).await;
    assert_eq!(r.unwrap(), Fenced::Done(FailOutcome::DeadLettered(DeadReason::Cancelled)));
    assert_eq!(db.get_job(id).await.unwrap().unwrap().location, JobLocation::Dead(DeadReason::Cancelled));
    assert!(claim(db, w, "cr", 1, ClaimMode::Start).await.is_empty());
    f.drop().await;
}

/// Throughput reads the archive through one range of its `(finished_at, queue)` index, never a
/// scan of the table, for every queue and for one. Index-only where the planner can count on
/// the visibility map, else a bitmap scan of the same range: whether VACUUM may mark the new
/// rows' pages all-visible depends on every other session of the server (an open snapshot
/// older than the rows stops it; a second `.ci/run` on the same server held one, and the
/// planner chose the bitmap scan: `Bitmap Heap Scan on jobs_archive` under `Bitmap Index Scan on
/// jobs_archive_finished_queue_idx`), so either is accepted, and only through that index.
#[tokio::test]
async fn throughput_reads_an_index_range_only() {
    let f = fixture!();
    let db = &f.db;
    let s = db.schema();
    sqlx::query(&format!(
        "INSERT INTO \"{s}\".jobs_archive (id, queue, kind, payload, priority, attempt, max_attempts, created_at, \
         updated_at, finished_at) SELECT gen_random_uuid(), 'q' || (i % 10), 'k', '{{}}'::jsonb, 0, 1, 25, now(), \
         now(), now() - (i % 86400) * interval '1 second' FROM generate_series(1, 50000) i \
         WHERE i % 86400 NOT BETWEEN 3500 AND 3699"
    ))
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(&format!("VACUUM ANALYZE \"{s}\".jobs_archive")).execute(db.pool()).await.unwrap();
    let all = chokaq_postgres::all_statements(s).unwrap();
    let stmt = |name: &str| all.iter().find(|(n, _)| *n == name).map(|(_, sql)| sql.clone()).unwrap();
    let hour = 3_600_000_000i64;
    let plan = |sql: String, queue: Option<&'static str>| async move {
        let text = format!("EXPLAIN {sql}");
        let q = sqlx::query_scalar::<_, String>(&text).bind(hour);
        let q = match queue {
            Some(name) => q.bind(name),
            None => q,
        };
        q.fetch_all(db.pool()).await.unwrap().join("\n")
    };
    for (name, queue) in [("throughput_all", None), ("throughput_queue", Some("q3"))] {
        let p = plan(stmt(name), queue).await;
        let through_range = p.contains("Index Only Scan using jobs_archive_finished_queue_idx")
            || (p.contains("Bitmap Index Scan on jobs_archive_finished_queue_idx")
                && p.matches("Bitmap Index Scan on jobs_archive").count() == 1);
        assert!(through_range, "{name}:\n{p}");
        // The archive is only ever read through that range (the hot table's retry branch and
        // the dead-letter branch read tables that stay small).
        assert!(
            !p.contains("Seq Scan on jobs_archive") && !p.contains("Index Scan using jobs_archive_pkey"),
            "{name}:\n{p}"
        );
    }
    let buckets = db.throughput(&chokaq_core::ThroughputParams::last_hour()).await.unwrap();
    let counted: u64 = buckets.iter().map(|b| b.finished).sum();
    // Jobs one second apart, finished 1 s to 50,000 s ago, none 3,500 s to 3,699 s ago: the
    // last hour holds exactly the 3,499 finished 1 s to 3,499 s ago (the gap absorbs the time
    // the test takes).
    assert_eq!(counted, 3499, "jobs counted in the last hour");
    f.drop().await;
}

/// Issue 12, item 4: a claim naming five queues locks the ten rows it returns, not ten per
/// queue. Version 8 of the schema locked all fifty until its commit: a second claimer running
/// meanwhile found every row of the five queues locked and came back empty.
#[tokio::test]
async fn a_claim_over_many_queues_locks_only_what_it_returns() {
    let f = fixture!();
    let db = &f.db;
    let names = ["lk1", "lk2", "lk3", "lk4", "lk5"];
    for n in names {
        db.enqueue_many((0..10).map(|_| job(n)).collect()).await.unwrap();
        // The queue's control row, made before: a claim creates a missing one, and the
        // concurrent claimer below would wait for the held claim's uncommitted insert of it
        // (once per queue; claims commit at once, this test holds one open).
        db.resume(&q(n)).await.unwrap();
    }
    let queues: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let s = db.schema();
    // The first claim, in a transaction held open.
    let mut holder = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    let first: Vec<uuid::Uuid> = sqlx::query_scalar(&format!("SELECT id FROM \"{s}\".claim($1, $2, 10, 0::int2)"))
        .bind(uuid::Uuid::new_v4())
        .bind(&queues)
        .fetch_all(&mut holder)
        .await
        .unwrap();
    assert_eq!(first.len(), 10, "the first claim's rows");
    // What another session can still lock: the forty rows the first claim did not return.
    let mut probe = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut probe).await.unwrap();
    let free: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM (SELECT id FROM \"{s}\".jobs_hot WHERE status = 0 FOR UPDATE SKIP LOCKED) f"
    ))
    .fetch_one(&mut probe)
    .await
    .unwrap();
    sqlx::query("ROLLBACK").execute(&mut probe).await.unwrap();
    assert_eq!(free, 40, "rows left lockable while the first claim is open (50 enqueued, 10 claimed)");
    // A concurrent claimer gets every one of them.
    let all: Vec<QueueName> = names.iter().map(|n| q(n)).collect();
    let second = db.claim(&ClaimParams::new(WorkerId::random(), all, 100, ClaimMode::Reserve)).await.unwrap();
    assert_eq!(second.len(), 40, "the concurrent claimer's rows");
    assert!(second.iter().all(|j| !first.contains(&j.id.0)));
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    assert_eq!(db.stats().await.unwrap().fetched, 50);
    f.drop().await;
}

/// Issue 12, item 4, the top-up: when the rows a multi-queue claim chose are taken before it
/// locks them, it takes the next free rows instead of coming back short.
#[tokio::test]
async fn a_multi_queue_claim_tops_up_when_its_rows_are_taken() {
    let f = fixture!();
    let db = &f.db;
    db.enqueue_many((0..3).map(|_| job("tu1").priority(5)).collect()).await.unwrap();
    db.enqueue_many((0..10).map(|_| job("tu2")).collect()).await.unwrap();
    let s = db.schema();
    // Another session holds two of tu1's three rows (the best by priority).
    let mut holder = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    let held: Vec<uuid::Uuid> = sqlx::query_scalar(&format!(
        "SELECT id FROM \"{s}\".jobs_hot WHERE queue = 'tu1' ORDER BY id LIMIT 2 FOR UPDATE"
    ))
    .fetch_all(&mut holder)
    .await
    .unwrap();
    let got =
        db.claim(&ClaimParams::new(WorkerId::random(), vec![q("tu1"), q("tu2")], 5, ClaimMode::Reserve)).await.unwrap();
    assert_eq!(got.len(), 5, "a full batch despite two chosen rows being held");
    assert!(got.iter().all(|j| !held.contains(&j.id.0)));
    assert_eq!(got.iter().filter(|j| j.queue.as_str() == "tu1").count(), 1);
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    f.drop().await;
}

/// Issue 12, item 1: jobs scheduled for later cost the claim nothing. With 20,000 jobs due
/// tomorrow and five due now, the claim reads a handful of index pages (version 8 walked
/// every not-yet-due entry of the claim index), and the delayed jobs are claimed once due,
/// through their promotion.
#[tokio::test]
async fn a_scheduled_backlog_costs_the_claim_nothing() {
    let f = fixture!();
    let db = &f.db;
    let tomorrow = db.db_now().await.unwrap() + chrono_secs(86_400);
    for _ in 0..4 {
        db.enqueue_many((0..5_000).map(|_| job("later").run_at(tomorrow)).collect()).await.unwrap();
    }
    db.enqueue_many((0..5).map(|_| job("later")).collect()).await.unwrap();
    let s = db.schema();
    let mut conn = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    let got: Vec<uuid::Uuid> = sqlx::query_scalar(&format!("SELECT id FROM \"{s}\".claim($1, $2, 10, 0::int2)"))
        .bind(uuid::Uuid::new_v4())
        .bind(vec!["later".to_string()])
        .fetch_all(&mut conn)
        .await
        .unwrap();
    // This transaction's own index page reads (hits and misses) in the two indexes a claim
    // seeks, not yet flushed to the cumulative statistics.
    let read: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)::int8
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relname IN ('jobs_hot_claim_idx', 'jobs_hot_scheduled_idx')",
    )
    .bind(s)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
    assert_eq!(got.len(), 5, "the due jobs");
    assert!(read <= 10, "index pages the claim read with 20,000 scheduled jobs: {read}");
    // Once due, a delayed job is claimed like any other.
    let one = db.enqueue(job("later2").run_at(tomorrow)).await.unwrap().id;
    assert!(claim(db, WorkerId::random(), "later2", 10, ClaimMode::Reserve).await.is_empty());
    assert_eq!(db.get_job(one).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Pending));
    assert!(db.force(one, &JobPatch { scheduled_at: Some(Some(ago(1))), ..Default::default() }).await.unwrap());
    let got = claim(db, WorkerId::random(), "later2", 10, ClaimMode::Reserve).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![one]);
    f.drop().await;
}

/// `stats_estimated` (the dashboard's): exact and equal to `stats` while each queue's archive
/// holds at most 1,000 jobs; beyond that an estimate from the planner's statistics, marked as
/// one, near the exact count once the table is analyzed; every other field exact.
#[tokio::test]
async fn stats_estimated_is_exact_when_small_and_marked_when_estimated() {
    let f = fixture!();
    let db = &f.db;
    let s = db.schema();
    let small = q("est-small");
    db.enqueue(job(small.as_str())).await.unwrap();
    assert_eq!(db.stats_estimated().await.unwrap().queues, db.stats().await.unwrap().queues, "small tables: the same");
    sqlx::query(&format!(
        "INSERT INTO \"{s}\".jobs_archive (id, queue, kind, payload, priority, attempt, max_attempts, created_at, \
         updated_at, finished_at) SELECT gen_random_uuid(), 'est-big', 'k', '{{}}'::jsonb, 0, 1, 25, now(), now(), \
         now() FROM generate_series(1, 5000)"
    ))
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(&format!("ANALYZE \"{s}\".jobs_archive")).execute(db.pool()).await.unwrap();
    let exact = db.stats().await.unwrap();
    let est = db.stats_estimated().await.unwrap();
    let big = est.queue("est-big").expect("the big queue is listed");
    assert!(big.archived_estimated && est.archived_estimated, "marked as an estimate: {big:?}");
    assert!((4000..=6000).contains(&big.archived), "estimate near 5,000: {}", big.archived);
    assert_eq!(exact.queue("est-big").unwrap().archived, 5000);
    assert!(!exact.archived_estimated, "stats() is exact");
    let sm = est.queue(small.as_str()).unwrap();
    assert_eq!((sm.pending, sm.archived, sm.archived_estimated), (1, 0, false), "the small queue");
    f.drop().await;
}
