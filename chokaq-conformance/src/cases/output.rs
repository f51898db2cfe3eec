//! Job outputs (`docs/outputs.md`): a handler's recorded output is stored with the job, kept
//! by every move, read back wherever the job is; the last record of the last run wins; too
//! large is refused; a lost lease writes nothing.

use std::time::Duration;

use chokaq_core::{
    validate, BackendExt, DeadReason, ErrorKind, FailAction, FailOutcome, Fenced, JobId, JobLocation, JobStatus,
    RequeueOutcome, WorkerId,
};
use serde_json::json;

use crate::ctx::{CaseResult, Ctx, AGED};
use crate::{ensure, ensure_eq};

super::cases!(output:
    recorded_then_completed_is_archived,
    none_recorded_is_none,
    unknown_id_is_none,
    last_record_wins,
    retried_last_run_wins,
    kept_when_dead_lettered,
    too_large_is_refused,
    stale_lease_writes_nothing,
    json_null_is_an_output,
);

/// Recorded, then completed: read back (equal JSON) from the archive.
pub async fn recorded_then_completed_is_archived(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let out = json!({"rows": 3, "file": "a\u{e9}.csv", "ok": true, "list": [1, 2.5, null]});
    ensure_eq!(cx.backend.record_output(w, j.lease_ref(), &out).await?, Fenced::Done(()), "record_output");
    ensure_eq!(cx.backend.get_output(id).await?, Some(out.clone()), "output while Processing");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.record(id).await?.location, JobLocation::Archived, "location");
    ensure_eq!(cx.backend.get_output(id).await?, Some(out), "output from the archive");
    Ok(())
}

/// A job that recorded nothing has no output, before and after it completes.
pub async fn none_recorded_is_none(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    ensure_eq!(cx.backend.get_output(id).await?, None, "output of a Pending job");
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.backend.get_output(id).await?, None, "output of an archived job that recorded none");
    Ok(())
}

/// An id no job has: `None`, not an error.
pub async fn unknown_id_is_none(cx: Ctx) -> CaseResult {
    ensure_eq!(cx.backend.get_output(JobId::new()).await?, None, "output of an unknown id");
    Ok(())
}

/// Two records in one run: the second replaces the first.
pub async fn last_record_wins(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(cx.backend.record_output(w, j.lease_ref(), &json!({"n": 1})).await?, Fenced::Done(()), "first");
    ensure_eq!(cx.backend.record_output(w, j.lease_ref(), &json!("second")).await?, Fenced::Done(()), "second");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.backend.get_output(id).await?, Some(json!("second")), "output");
    Ok(())
}

/// Recorded in an attempt that fails and retries, recorded again in the next, completed: the
/// second run's output.
pub async fn retried_last_run_wins(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).max_attempts(3)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(cx.backend.record_output(w, j.lease_ref(), &json!({"run": 1})).await?, Fenced::Done(()), "run 1");
    let out =
        cx.backend.fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: "again".into() }).await?;
    ensure!(matches!(out, Fenced::Done(FailOutcome::Retried { .. })), "fail(retry): {out:?}");
    ensure_eq!(cx.backend.get_output(id).await?, Some(json!({"run": 1})), "output while waiting for the retry");
    let j2 = cx.claim_one_started(w, &q).await?;
    ensure_eq!((j2.id, j2.attempt), (id, 2), "(id, attempt) of the retry");
    ensure_eq!(cx.backend.record_output(w, j2.lease_ref(), &json!({"run": 2})).await?, Fenced::Done(()), "run 2");
    ensure_eq!(cx.backend.complete_one(w, j2.lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.backend.get_output(id).await?, Some(json!({"run": 2})), "output after the retry completed");
    Ok(())
}

/// Recorded, then the final failure dead-letters the job: the output is kept in the dead
/// letters, and a requeue carries it back to the hot table.
pub async fn kept_when_dead_lettered(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).max_attempts(1)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let rec = json!({"partial": [1, 2]});
    ensure_eq!(cx.backend.record_output(w, j.lease_ref(), &rec).await?, Fenced::Done(()), "record");
    let out =
        cx.backend.fail(w, j.lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: "last".into() }).await?;
    ensure_eq!(out, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Failed)), "final fail");
    ensure_eq!(cx.record(id).await?.location, JobLocation::Dead(DeadReason::Failed), "location");
    ensure_eq!(cx.backend.get_output(id).await?, Some(rec.clone()), "output of the dead letter");
    ensure_eq!(cx.backend.requeue_dead(id).await?, RequeueOutcome::Requeued, "requeue_dead");
    ensure_eq!(cx.record(id).await?.location, JobLocation::Hot(JobStatus::Pending), "location after requeue");
    ensure_eq!(cx.backend.get_output(id).await?, Some(rec), "output after requeue");
    Ok(())
}

/// An output over the default limit ([`validate::DEFAULT_MAX_OUTPUT_BYTES`]) is refused with
/// `InvalidInput` naming both sizes, nothing is stored, and the job still completes.
pub async fn too_large_is_refused(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let big = json!("x".repeat(validate::DEFAULT_MAX_OUTPUT_BYTES)); // + 2 quotes
    let size = validate::DEFAULT_MAX_OUTPUT_BYTES + 2;
    match cx.backend.record_output(w, j.lease_ref(), &big).await {
        Err(e) => {
            ensure_eq!(e.kind(), ErrorKind::InvalidInput, "error kind ({e})");
            let text = e.to_string();
            ensure!(
                text.contains(&size.to_string()) && text.contains(&validate::DEFAULT_MAX_OUTPUT_BYTES.to_string()),
                "the error names neither both sizes: {text}"
            );
        }
        Ok(f) => return Err(format!("an output of {size} bytes was accepted: {f:?}").into()),
    }
    ensure_eq!(cx.backend.get_output(id).await?, None, "output after the refusal");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.record(id).await?.location, JobLocation::Archived, "location");
    ensure_eq!(cx.backend.get_output(id).await?, None, "output after complete");
    Ok(())
}

/// After rescue and re-claim, the old owner's record is `LeaseLost` and writes nothing; the
/// new owner's record stands.
pub async fn stale_lease_writes_nothing(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let a = WorkerId::random();
    let b = WorkerId::random();
    let old = cx.claim_one_started(a, &q).await?;
    ensure_eq!(old.id, id, "first claim");
    cx.age(id, AGED).await?;
    cx.rescue_until_at(id, JobLocation::Hot(JobStatus::Pending)).await?;
    ensure_eq!(cx.backend.record_output(a, old.lease_ref(), &json!("stale")).await?, Fenced::LeaseLost, "pending");
    ensure_eq!(cx.backend.get_output(id).await?, None, "output after a stale record (Pending)");
    let new = cx.claim_one_started(b, &q).await?;
    ensure_eq!(new.id, id, "second claim");
    ensure_eq!(cx.backend.record_output(a, old.lease_ref(), &json!("stale")).await?, Fenced::LeaseLost, "stale");
    ensure_eq!(cx.backend.record_output(b, old.lease_ref(), &json!("stale")).await?, Fenced::LeaseLost, "old lease");
    ensure_eq!(cx.backend.get_output(id).await?, None, "output after stale records");
    ensure_eq!(cx.backend.record_output(b, new.lease_ref(), &json!("owner")).await?, Fenced::Done(()), "owner");
    ensure_eq!(cx.backend.record_output(a, old.lease_ref(), &json!("stale")).await?, Fenced::LeaseLost, "stale 2");
    ensure_eq!(cx.backend.complete_one(b, new.lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.backend.record_output(b, new.lease_ref(), &json!("late")).await?, Fenced::LeaseLost, "archived");
    ensure_eq!(cx.backend.get_output(id).await?, Some(json!("owner")), "output");
    Ok(())
}

/// A recorded JSON `null` is an output (`Some(null)`), not the absence of one, in the hot row
/// and in the archive.
pub async fn json_null_is_an_output(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(cx.backend.record_output(w, j.lease_ref(), &json!(null)).await?, Fenced::Done(()), "record null");
    ensure_eq!(cx.backend.get_output(id).await?, Some(json!(null)), "output while Processing");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.backend.get_output(id).await?, Some(json!(null)), "output from the archive");
    Ok(())
}
