//! The guarded writes of a held lease: wrong lease, worker or status rejected, batch outcomes, stale copies, retries and fail outcomes.

use super::*;

/// Which guarded write a lease test drives.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Start,
    Heartbeat,
    Complete,
    Fail,
    Release,
}

pub(crate) async fn apply(db: &chokaq_postgres::PgBackend, op: Op, w: WorkerId, l: LeaseRef) -> bool {
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
