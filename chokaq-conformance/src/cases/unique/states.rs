//! The state sets: which states of the key's holder make a new job a duplicate, and what
//! frees a key.

use std::time::Duration;

use chokaq_core::{
    BackendExt, CancelOutcome, ClaimMode, DeadReason, FailAction, FailOutcome, Fenced, UniqueState, UniqueStates,
    WorkerId,
};

use super::{by_args_opts, duplicate, fresh, hot_rows, ujob};
use crate::ctx::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

/// The default set counts every live state: Pending, Scheduled, Fetched (reserved and held),
/// Processing; a completed job frees the key.
pub async fn default_states_are_live(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let job = || ujob(&cx, &q, serde_json::json!({"n": 1}), by_args_opts());
    let a = fresh(&cx, job(), "first").await?;
    duplicate(&cx, job(), a, "while Pending").await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    ensure_eq!(got.len(), 1, "reserved");
    duplicate(&cx, job(), a, "while Fetched").await?;
    ensure_eq!(cx.backend.start_one(w, got[0].lease_ref()).await?, Fenced::Done(()), "start");
    duplicate(&cx, job(), a, "while Processing").await?;
    ensure_eq!(cx.backend.complete_one(w, got[0].lease_ref()).await?, Fenced::Done(()), "complete");
    let b = fresh(&cx, job(), "after the holder succeeded").await?;
    ensure!(a != b, "a new id after success");
    // Scheduled: due tomorrow.
    let later = cx.backend.db_now().await? + chrono::Duration::days(1);
    let s = fresh(&cx, ujob(&cx, &q, serde_json::json!({"n": 2}), by_args_opts()).run_at(later), "scheduled").await?;
    duplicate(&cx, ujob(&cx, &q, serde_json::json!({"n": 2}), by_args_opts()), s, "while Scheduled").await?;
    ensure_eq!(hot_rows(&cx, &q).await?, 2, "rows");
    Ok(())
}

/// With Succeeded counted, a completed job still holds its key (the duplicate gets the
/// archived job's id); a cancelled one does not.
pub async fn succeeded_counted(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let opts = by_args_opts().states(UniqueStates::DEFAULT.with(UniqueState::Succeeded));
    let job = |n: i32| ujob(&cx, &q, serde_json::json!({ "n": n }), opts.clone());
    let a = fresh(&cx, job(1), "first").await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    duplicate(&cx, job(1), a, "after the holder succeeded").await?;
    let c = fresh(&cx, job(2), "another payload").await?;
    ensure_eq!(cx.backend.cancel(c).await?, CancelOutcome::Cancelled, "cancel");
    let d = fresh(&cx, job(2), "after the holder was cancelled").await?;
    ensure!(c != d, "a new id after the cancel");
    ensure_eq!(hot_rows(&cx, &q).await?, 1, "rows");
    Ok(())
}

/// Waiting only: a Pending job holds the key, a Processing one does not.
pub async fn waiting_only(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let opts = by_args_opts().states(UniqueStates::WAITING);
    let job = || ujob(&cx, &q, serde_json::json!({}), opts.clone());
    let a = fresh(&cx, job(), "first").await?;
    duplicate(&cx, job(), a, "while Pending").await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    ensure_eq!(got.len(), 1, "reserved");
    let b = fresh(&cx, job(), "while the holder is Fetched").await?;
    duplicate(&cx, job(), b, "while the second is Pending").await?;
    ensure_eq!(hot_rows(&cx, &q).await?, 2, "rows");
    Ok(())
}

/// A job leaving the live states frees its key (default set): completed, dead-lettered,
/// cancelled while Pending, discarded after its last attempt.
pub async fn leaving_a_counted_state_frees_the_key(cx: Ctx) -> CaseResult {
    let w = WorkerId::random();
    for (i, how) in ["complete", "dead letter", "cancel", "last attempt"].into_iter().enumerate() {
        let q = cx.queue_named(&format!("h{i}"));
        let job = |n: &str| ujob(&cx, &q, serde_json::json!({ "n": n }), by_args_opts());
        let a = fresh(&cx, if how == "last attempt" { job(how).max_attempts(1) } else { job(how) }, how).await?;
        duplicate(&cx, job(how), a, how).await?;
        if how == "cancel" {
            ensure_eq!(cx.backend.cancel(a).await?, CancelOutcome::Cancelled, "cancel");
        } else {
            let j = cx.claim_one_started(w, &q).await?;
            ensure_eq!(j.id, a, "claimed");
            let outcome = match how {
                "complete" => {
                    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
                    None
                }
                "dead letter" => Some(FailAction::DeadLetter { reason: DeadReason::Failed, error: "no".into() }),
                _ => Some(FailAction::Retry { delay: Duration::ZERO, error: "last".into() }),
            };
            if let Some(action) = outcome {
                let out = cx.backend.fail(w, j.lease_ref(), action).await?;
                ensure_eq!(out, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Failed)), "{how}");
            }
        }
        let b = fresh(&cx, job(how), &format!("after {how}")).await?;
        ensure!(a != b, "{how}: a new id");
        ensure_eq!(hot_rows(&cx, &q).await?, 1, "{how}: rows");
    }
    Ok(())
}

/// A retried job keeps its key: while it waits for its retry, a duplicate is refused with its
/// id, and `unique_of` still names it.
pub async fn retried_job_keeps_its_key(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let job = || ujob(&cx, &q, serde_json::json!({}), by_args_opts());
    let a = fresh(&cx, job(), "first").await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let action = FailAction::Retry { delay: Duration::from_secs(3600), error: "again".into() };
    let out = cx.backend.fail(w, j.lease_ref(), action).await?;
    ensure!(matches!(out, Fenced::Done(FailOutcome::Retried { .. })), "retried: {out:?}");
    duplicate(&cx, job(), a, "while waiting for its retry").await?;
    let hold = cx.backend.unique_of(a).await?;
    ensure_eq!(hold.map(|h| h.job_id), Some(a), "the key's holder");
    // Waiting only counts the retry too.
    let w_opts = by_args_opts().states(UniqueStates::of(&[UniqueState::Retrying]));
    let r = ujob(&cx, &q, serde_json::json!({"only": "retrying"}), w_opts.clone());
    let first = fresh(&cx, r.clone(), "retrying-only set, first").await?;
    let second = fresh(&cx, r, "retrying-only set, the holder is Pending (not counted)").await?;
    ensure!(first != second, "two ids");
    ensure_eq!(hot_rows(&cx, &q).await?, 3, "rows");
    Ok(())
}
