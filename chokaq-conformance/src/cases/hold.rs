//! Held jobs (`ClaimMode::Hold`, issue 24): Fetched and heart-beaten from the claim on, the
//! attempt counted by `start` or, for a job that finishes first, by its outcome; a cancel of a
//! held job is a request (its worker may be running it); a held job expires only after its
//! queue's zombie timeout without a heartbeat, goes back to Pending with its expiry counted
//! (`ClaimedJob::expired_holds` of its next claim) and is never dead-lettered for expiring
//! (issue 36: the runtime records such a job's start before its handler begins, so a handler
//! that kills its process counts attempts); a held job's outcome records its own run's start.

use std::time::Duration;

use chokaq_core::testing::{JobPatch, Presence};
use chokaq_core::{
    BackendExt, CancelOutcome, ClaimMode, ClaimedJob, DeadReason, FailAction, FailOutcome, Fenced, JobLocation,
    JobStatus, QueueName, WorkerId,
};

use crate::ctx::{CaseResult, Ctx, AGED};
use crate::{ensure, ensure_eq};

super::cases!(hold:
    claim_is_fetched_and_heartbeaten,
    complete_counts_the_attempt,
    fail_counts_the_attempt,
    start_counts_once,
    cancel_is_a_request,
    expires_by_the_zombie_timeout,
    expired_holds_never_dead_letter,
    held_outcome_records_its_own_start,
);

/// One held job of a fresh queue (`max_attempts` as given).
async fn held_job(cx: &Ctx, w: WorkerId, max_attempts: i32) -> Result<(QueueName, ClaimedJob), crate::Failure> {
    let q = cx.queue();
    cx.enqueue(cx.job(&q).max_attempts(max_attempts)).await?;
    let mut got = cx.claim(w, &q, 1, ClaimMode::Hold).await?;
    ensure_eq!(got.len(), 1, "claim(limit 1, hold)");
    Ok((q, got.remove(0)))
}

/// A held claim: Fetched, attempt 0, its heartbeat set by the claim (not older than the
/// database clock before it), owned by the worker; a heartbeat holds it and bumps it.
pub async fn claim_is_fetched_and_heartbeaten(cx: Ctx) -> CaseResult {
    let w = WorkerId::random();
    let before = cx.backend.db_now().await?;
    let (_q, j) = held_job(&cx, w, 5).await?;
    ensure_eq!((j.status, j.attempt), (JobStatus::Fetched, 0), "the claimed job");
    let r = cx.record(j.id).await?;
    let res = chrono::Duration::from_std(cx.caps.timestamp_precision.resolution()).unwrap_or_default();
    ensure_eq!((r.location, r.attempt, r.worker_id), (JobLocation::Hot(JobStatus::Fetched), 0, Some(w)), "the row");
    ensure!(
        r.heartbeat_at.is_some_and(|t| t + res >= before),
        "heartbeat_at {:?} not set by the claim",
        r.heartbeat_at
    );
    // 30 s back: under every default timeout (fetched 60 s, zombie 300 s), so that a rescue
    // another case runs in the same schema meanwhile leaves this held job alone.
    let past = cx.backend.db_now().await? - chrono::Duration::seconds(30);
    cx.force(j.id, JobPatch { heartbeat_at: Some(Some(past)), ..Default::default() }).await?;
    let hb = cx.backend.heartbeat(w, &[j.lease_ref()]).await?;
    ensure!(hb.held == vec![j.id] && hb.lost.is_empty() && hb.cancel_requested.is_empty(), "heartbeat: {hb:?}");
    let r = cx.record(j.id).await?;
    ensure!(r.heartbeat_at.is_some_and(|t| t > past), "the heartbeat did not bump a held job");
    ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Fetched), 0), "after the heartbeat");
    Ok(())
}

/// A held job completed without a start: archived once with its run counted (attempt 1); the
/// repeat reports done and writes nothing.
pub async fn complete_counts_the_attempt(cx: Ctx) -> CaseResult {
    let w = WorkerId::random();
    let (_q, j) = held_job(&cx, w, 5).await?;
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete of a held job");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "the repeat");
    ensure_eq!(cx.presence(j.id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence");
    let r = cx.record(j.id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Archived, 1), "archived with its run counted");
    ensure!(r.started_at.is_some(), "started_at not set on the archived row");
    Ok(())
}

/// A held job's failure counts its run as `start` would have: a retry leaves attempt 1; the
/// second held run's retry (max_attempts 2) dead-letters it `failed` with attempt 2; a snooze of
/// a held job leaves the attempt unchanged.
pub async fn fail_counts_the_attempt(cx: Ctx) -> CaseResult {
    let w = WorkerId::random();
    let (q, j) = held_job(&cx, w, 2).await?;
    let retry = FailAction::Retry { delay: Duration::ZERO, error: "boom".into() };
    let out = cx.backend.fail(w, j.lease_ref(), retry.clone()).await?;
    ensure!(matches!(out, Fenced::Done(FailOutcome::Retried { .. })), "first held run's retry: {out:?}");
    let r = cx.record(j.id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Pending), 1), "after the first retry");
    let mut again = cx.claim(w, &q, 1, ClaimMode::Hold).await?;
    ensure_eq!(again.len(), 1, "second held claim");
    let j2 = again.remove(0);
    ensure_eq!(j2.attempt, 1, "the second claim's attempt (not counted yet)");
    let out = cx.backend.fail(w, j2.lease_ref(), retry).await?;
    ensure_eq!(out, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Failed)), "second held run's retry");
    let r = cx.record(j.id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Dead(DeadReason::Failed), 2), "dead after two runs");

    let (_q, s) = held_job(&cx, w, 2).await?;
    let out = cx.backend.fail(w, s.lease_ref(), FailAction::Snooze { delay: Duration::ZERO }).await?;
    ensure!(matches!(out, Fenced::Done(FailOutcome::Snoozed { .. })), "snooze of a held job: {out:?}");
    let r = cx.record(s.id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Pending), 0), "a snooze does not count");
    Ok(())
}

/// `start` of a held job counts its attempt once, however often it is repeated with the same
/// lease; the completion afterwards does not count it again.
pub async fn start_counts_once(cx: Ctx) -> CaseResult {
    let w = WorkerId::random();
    let (_q, j) = held_job(&cx, w, 5).await?;
    for i in 0..3 {
        ensure_eq!(cx.backend.start_one(w, j.lease_ref()).await?, Fenced::Done(()), "start #{i}");
        let r = cx.record(j.id).await?;
        ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Processing), 1), "after start #{i}");
    }
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.record(j.id).await?.attempt, 1, "archived attempt");
    Ok(())
}

/// A cancel of a held job is a request, never final at once (its worker may be running it):
/// the row stays held, the heartbeat reports the request, and the worker's release of it
/// dead-letters it `cancelled` (never back to Pending). A held job whose outcome is a retry
/// is dead-lettered `cancelled` too.
pub async fn cancel_is_a_request(cx: Ctx) -> CaseResult {
    let w = WorkerId::random();
    let (_q, j) = held_job(&cx, w, 5).await?;
    ensure_eq!(cx.backend.cancel(j.id).await?, CancelOutcome::Requested, "cancel of a held job");
    let r = cx.record(j.id).await?;
    ensure_eq!(r.location, JobLocation::Hot(JobStatus::Fetched), "still held after the request");
    let hb = cx.backend.heartbeat(w, &[j.lease_ref()]).await?;
    ensure_eq!(hb.cancel_requested, vec![j.id], "the heartbeat reports the request");
    ensure_eq!(cx.backend.release_one(w, j.lease_ref()).await?, Fenced::Done(()), "release of the cancelled job");
    ensure_eq!(cx.presence(j.id).await?, Presence { hot: 0, archive: 0, dead: 1 }, "presence");
    ensure_eq!(cx.record(j.id).await?.location, JobLocation::Dead(DeadReason::Cancelled), "location");

    let (_q, k) = held_job(&cx, w, 5).await?;
    ensure_eq!(cx.backend.cancel(k.id).await?, CancelOutcome::Requested, "cancel of a second held job");
    let out = cx.backend.fail(w, k.lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: "x".into() }).await?;
    ensure_eq!(out, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Cancelled)), "retry of a cancelled held job");
    Ok(())
}

/// A held job is not put back after the fetched timeout (its handler may be running): only
/// after the zombie timeout without a heartbeat, then Pending with its attempt unspent.
pub async fn expires_by_the_zombie_timeout(cx: Ctx) -> CaseResult {
    let w = WorkerId::random();
    let (_q, j) = held_job(&cx, w, 5).await?;
    // Two minutes without a heartbeat: past the default fetched timeout (60 s), within the
    // default zombie timeout (300 s).
    let now = cx.backend.db_now().await?;
    let past = now - chrono::Duration::minutes(2);
    cx.force(j.id, JobPatch { heartbeat_at: Some(Some(past)), updated_at: Some(past), ..Default::default() }).await?;
    for _ in 0..3 {
        cx.backend.rescue(&crate::rescue_params()).await?;
    }
    let r = cx.record(j.id).await?;
    ensure_eq!(
        (r.location, r.lease),
        (JobLocation::Hot(JobStatus::Fetched), Some(j.lease)),
        "a held job 2 min without a heartbeat (fetched timeout 60 s, zombie timeout 300 s) was rescued"
    );
    cx.age(j.id, AGED).await?;
    cx.rescue_until_at(j.id, JobLocation::Hot(JobStatus::Pending)).await?;
    ensure_eq!(cx.record(j.id).await?.attempt, 0, "attempt after the expiry");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::LeaseLost, "the expired lease");
    Ok(())
}

/// A held job whose holders keep stopping before its start is recorded (a crashed worker's
/// look-ahead, a claim whose reply was lost): Pending again after every expiry with its attempt
/// unspent, the count of expiries in its next claim, never dead-lettered for it; then it runs
/// and completes.
pub async fn expired_holds_never_dead_letter(cx: Ctx) -> CaseResult {
    const ROUNDS: i32 = 5;
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).max_attempts(2)).await?;
    for round in 1..=ROUNDS {
        let w = WorkerId::random();
        let got = cx.claim(w, &q, 1, ClaimMode::Hold).await?;
        ensure!(got.len() == 1 && got[0].id == id, "held claim #{round}: {got:?}");
        ensure_eq!(got[0].expired_holds, round - 1, "expired_holds of held claim #{round}");
        cx.age(id, AGED).await?;
        cx.rescue_until("the expiry", || async {
            Ok(!matches!(cx.record(id).await?.location, JobLocation::Hot(JobStatus::Fetched)))
        })
        .await?;
        let r = cx.record(id).await?;
        ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Pending), 0), "after expiry #{round}");
    }
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 1, ClaimMode::Start).await?;
    ensure!(got.len() == 1 && got[0].id == id, "the claim after {ROUNDS} expiries: {got:?}");
    ensure_eq!((got[0].expired_holds, got[0].attempt), (ROUNDS, 1), "(expired_holds, attempt) of the run");
    ensure_eq!(cx.backend.complete_one(w, got[0].lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence");
    Ok(())
}

/// A held job finished without a `start` (its run counted by the outcome) records its own
/// run's start, not an earlier attempt's: its `started_at` is no earlier than its hold's claim,
/// for a completion and for a failure alike.
pub async fn held_outcome_records_its_own_start(cx: Ctx) -> CaseResult {
    let res = chrono::Duration::from_std(cx.caps.timestamp_precision.resolution()).unwrap_or_default();
    for complete in [true, false] {
        let q = cx.queue();
        let id = cx.enqueue(cx.job(&q).max_attempts(5)).await?;
        let w = WorkerId::random();
        let first = cx.claim(w, &q, 1, ClaimMode::Start).await?;
        ensure_eq!(first.len(), 1, "the first attempt's claim");
        let out = cx
            .backend
            .fail(w, first[0].lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: "again".into() })
            .await?;
        ensure!(matches!(out, Fenced::Done(FailOutcome::Retried { .. })), "the first attempt's retry: {out:?}");
        let first_start = cx.record(id).await?.started_at;
        ensure!(first_start.is_some(), "the first attempt recorded no start");
        // The database clock moves past the first start by more than its resolution.
        let after = first_start.unwrap_or_default() + res + res;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while cx.backend.db_now().await? <= after {
            ensure!(std::time::Instant::now() < deadline, "the database clock did not move in 10 s");
            tokio::task::yield_now().await;
        }
        let before = cx.backend.db_now().await?;
        let held = cx.claim(w, &q, 1, ClaimMode::Hold).await?;
        ensure!(held.len() == 1 && held[0].id == id, "the held claim: {held:?}");
        let r = if complete {
            ensure_eq!(cx.backend.complete_one(w, held[0].lease_ref()).await?, Fenced::Done(()), "complete");
            cx.record(id).await?
        } else {
            let out = cx
                .backend
                .fail(w, held[0].lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: "x".into() })
                .await?;
            ensure!(matches!(out, Fenced::Done(FailOutcome::Retried { .. })), "the held attempt's retry: {out:?}");
            cx.record(id).await?
        };
        ensure_eq!(r.attempt, 2, "attempts after the held run (complete: {complete})");
        ensure!(
            r.started_at.is_some_and(|t| t + res >= before),
            "a held run finished by {} kept started_at {:?} (the first attempt's {:?}); its hold was claimed at {before}",
            if complete { "complete" } else { "fail" },
            r.started_at,
            first_start
        );
    }
    Ok(())
}
