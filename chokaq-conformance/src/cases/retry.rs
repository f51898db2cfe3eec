//! Retry: back-off to Pending until `max_attempts`, then dead-letter; fatal errors and
//! snoozes.

use std::time::Duration;

use chokaq_core::testing::{JobPatch, Presence};
use chokaq_core::{ClaimMode, DeadReason, FailAction, FailOutcome, Fenced, JobLocation, JobStatus, WorkerId};

use crate::ctx::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

super::cases!(retry:
    backoff_schedules_pending,
    until_max_attempts_then_dead,
    fatal_dead_letters_at_once,
    snooze_does_not_count,
    long_error_truncated,
);

/// A retry puts the job back to Pending, due after the delay (database clock), with the
/// error kept and the worker cleared; it is not claimable before then.
pub async fn backoff_schedules_pending(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let before = cx.backend.db_now().await?;
    let out = cx
        .backend
        .fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::from_secs(3600), error: "try later".into() })
        .await?;
    let after = cx.backend.db_now().await?;
    let Fenced::Done(FailOutcome::Retried { at }) = out else {
        return Err(format!("fail(retry) with attempts left returned {out:?}").into());
    };
    let res = chrono::Duration::from_std(cx.caps.timestamp_precision.resolution()).unwrap_or_default();
    let hour = chrono::Duration::hours(1);
    ensure!(
        at + res >= before + hour && at <= after + hour + res,
        "retry due at {at}, not now + 1 h ({before}..{after})"
    );
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Hot(JobStatus::Pending), "location");
    ensure_eq!(r.scheduled_at, Some(at), "scheduled_at");
    ensure_eq!(r.last_error.as_deref(), Some("try later"), "last_error");
    ensure_eq!(r.worker_id, None, "worker_id");
    ensure_eq!(r.attempt, 1, "attempt");
    ensure!(cx.claim(w, &q, 10, ClaimMode::Start).await?.is_empty(), "a job due in an hour was claimed");
    Ok(())
}

/// Retried until `max_attempts`; the last failure dead-letters it (reason failed) with its
/// last error, and it is never claimed again.
pub async fn until_max_attempts_then_dead(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).max_attempts(3)).await?;
    let w = WorkerId::random();
    for attempt in 1..=3 {
        let j = cx.claim_one_started(w, &q).await?;
        ensure_eq!((j.id, j.attempt), (id, attempt), "(id, attempt) of claim {attempt}");
        if attempt > 1 {
            ensure_eq!(j.last_error.clone(), Some(format!("error {}", attempt - 1)), "last_error seen by the worker");
        }
        let out = cx
            .backend
            .fail(
                w,
                j.lease_ref(),
                FailAction::Retry { delay: Duration::from_secs(60), error: format!("error {attempt}") },
            )
            .await?;
        if attempt < 3 {
            ensure!(matches!(out, Fenced::Done(FailOutcome::Retried { .. })), "fail {attempt}: {out:?}");
            // Make it due now instead of in a minute.
            cx.force(id, JobPatch { scheduled_at: Some(None), ..Default::default() }).await?;
        } else {
            ensure_eq!(out, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Failed)), "last fail");
        }
    }
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Dead(DeadReason::Failed), "location");
    ensure_eq!(r.last_error.as_deref(), Some("error 3"), "last_error");
    ensure_eq!(r.attempt, 3, "attempt");
    ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 0, dead: 1 }, "presence");
    ensure!(cx.claim(w, &q, 10, ClaimMode::Start).await?.is_empty(), "a dead job was claimed");
    Ok(())
}

/// A fatal error dead-letters at once, attempts left or not, with the given reason.
pub async fn fatal_dead_letters_at_once(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).max_attempts(10)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let out = cx
        .backend
        .fail(w, j.lease_ref(), FailAction::DeadLetter { reason: DeadReason::TimedOut, error: "fatal".into() })
        .await?;
    ensure_eq!(out, Fenced::Done(FailOutcome::DeadLettered(DeadReason::TimedOut)), "fail(dead-letter)");
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Dead(DeadReason::TimedOut), "location");
    ensure_eq!(r.last_error.as_deref(), Some("fatal"), "last_error");
    ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 0, dead: 1 }, "presence");
    Ok(())
}

/// A snooze puts the job back to Pending for later without counting the attempt.
pub async fn snooze_does_not_count(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).max_attempts(1)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(j.attempt, 1, "attempt");
    let out = cx.backend.fail(w, j.lease_ref(), FailAction::Snooze { delay: Duration::from_secs(600) }).await?;
    let Fenced::Done(FailOutcome::Snoozed { until }) = out else {
        return Err(format!("snooze returned {out:?}").into());
    };
    let r = cx.record(id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Pending), 0), "(location, attempt)");
    ensure_eq!(r.scheduled_at, Some(until), "scheduled_at");
    ensure!(cx.claim(w, &q, 1, ClaimMode::Start).await?.is_empty(), "a snoozed job was claimed early");
    cx.force(id, JobPatch { scheduled_at: Some(None), ..Default::default() }).await?;
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(j.attempt, 1, "attempt after the snooze (max_attempts 1 still allows it)");
    Ok(())
}

/// Error text longer than the limit is stored truncated on a character boundary.
pub async fn long_error_truncated(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    // 3-byte characters, so a cut at the byte limit falls inside one.
    let long: String = "é€".repeat(chokaq_core::validate::MAX_ERROR_LEN);
    let out = cx
        .backend
        .fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::from_secs(60), error: long.clone() })
        .await?;
    ensure!(out.done().is_some(), "fail lost its lease");
    let stored = cx.record(id).await?.last_error.unwrap_or_default();
    ensure!(!stored.is_empty(), "no error stored");
    ensure!(stored.len() <= chokaq_core::validate::MAX_ERROR_LEN, "stored error is {} bytes", stored.len());
    ensure!(long.starts_with(&stored), "stored error is not a prefix of the original");
    Ok(())
}
