//! Cancel is final: once an operator's cancel of a Processing job is accepted, the job never
//! starts another attempt. Whatever ends the running attempt (a retry, a snooze, a rescue of
//! the zombie) files it in the dead-letter table as `cancelled`
//! (`docs/contract.md`, operations and guards).

use std::time::Duration;

use chokaq_core::testing::{JobPatch, Presence};
use chokaq_core::{
    CancelOutcome, ClaimMode, DeadReason, FailAction, FailOutcome, Fenced, JobId, JobLocation, JobStatus, QueueName,
    WorkerId,
};

use crate::ctx::{CaseResult, Ctx, AGED};
use crate::{ensure, ensure_eq};

super::cases!(cancel:
    then_retry_dead_letters,
    then_snooze_dead_letters,
    then_rescue_dead_letters,
);

/// A started job of a fresh queue (`max_attempts` as given) whose cancel was accepted
/// (`Requested`): returns (queue, worker, claim).
async fn cancelled_while_running(
    cx: &Ctx,
    max_attempts: i32,
) -> Result<(QueueName, WorkerId, chokaq_core::ClaimedJob), crate::Failure> {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).max_attempts(max_attempts)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(j.id, id, "claimed job");
    ensure_eq!(cx.backend.cancel(id).await?, CancelOutcome::Requested, "cancel of a Processing job");
    Ok((q, w, j))
}

/// The job is in the dead-letter table as `cancelled`, nowhere else, and can never be claimed
/// again (even once its schedule would be due).
async fn is_cancelled_for_good(cx: &Ctx, q: &QueueName, id: JobId, what: &str) -> CaseResult {
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Dead(DeadReason::Cancelled), "location after {what}");
    ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 0, dead: 1 }, "presence after {what}");
    // Were it (wrongly) back in the hot table, make it due now so a claim would take it.
    let _ = cx.backend.force(id, &JobPatch { scheduled_at: Some(None), ..Default::default() }).await;
    let again = cx.claim(WorkerId::random(), q, 10, ClaimMode::Start).await?;
    ensure!(again.is_empty(), "a job whose cancel was accepted was claimed again after {what}: {again:?}");
    Ok(())
}

/// Cancel accepted, then the attempt fails with `Retry` (attempts left, and on the last
/// attempt): the retry is not honoured; the job is dead-lettered as `cancelled`, and the
/// call reports it.
pub async fn then_retry_dead_letters(cx: Ctx) -> CaseResult {
    for max_attempts in [5, 1] {
        let (q, w, j) = cancelled_while_running(&cx, max_attempts).await?;
        let out = cx
            .backend
            .fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: "boom".into() })
            .await?;
        ensure_eq!(
            out,
            Fenced::Done(FailOutcome::DeadLettered(DeadReason::Cancelled)),
            "fail(Retry) after an accepted cancel (max_attempts {max_attempts})"
        );
        is_cancelled_for_good(&cx, &q, j.id, &format!("fail(Retry), max_attempts {max_attempts}")).await?;
    }
    Ok(())
}

/// Cancel accepted, then the handler snoozes: the job is dead-lettered as `cancelled`, not put
/// back to Pending.
pub async fn then_snooze_dead_letters(cx: Ctx) -> CaseResult {
    let (q, w, j) = cancelled_while_running(&cx, 5).await?;
    let out = cx.backend.fail(w, j.lease_ref(), FailAction::Snooze { delay: Duration::ZERO }).await?;
    ensure_eq!(
        out,
        Fenced::Done(FailOutcome::DeadLettered(DeadReason::Cancelled)),
        "fail(Snooze) after an accepted cancel"
    );
    is_cancelled_for_good(&cx, &q, j.id, "fail(Snooze)").await
}

/// Cancel accepted, then the worker dies before its next heartbeat: rescue dead-letters the
/// zombie as `cancelled` (the queue's policy is Retry and attempts are left), and the dead
/// worker's lease is lost.
pub async fn then_rescue_dead_letters(cx: Ctx) -> CaseResult {
    let (q, w, j) = cancelled_while_running(&cx, 5).await?;
    cx.age(j.id, AGED).await?;
    cx.rescue_until(&format!("job {} out of Processing", j.id), || async {
        Ok(cx.record(j.id).await?.location != JobLocation::Hot(JobStatus::Processing))
    })
    .await?;
    is_cancelled_for_good(&cx, &q, j.id, "rescue").await?;
    let out = cx.backend.heartbeat(w, &[j.lease_ref()]).await?;
    ensure_eq!(out.lost, vec![j.id], "the dead worker's heartbeat after rescue");
    Ok(())
}
