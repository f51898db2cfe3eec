//! Batches (`docs/workflows.md`, "Batches"): each callback is a job enqueued exactly once,
//! with the batch's counts under its payload's key `"batch"`: `finished` when every job is
//! final, `succeeded` when every job succeeded, `first_dead` at the first dead letter; racing
//! last completions fire each once; a job of the batch adds jobs while it is not final; a
//! refused batch writes nothing. Run where the backend stores batches
//! ([`chokaq_core::Capabilities::batches`]).

use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{
    BackendExt, Batch, BatchEvent, BatchId, BatchInfo, ClaimMode, DeadReason, ErrorKind, FailAction, Fenced, QueueName,
    WorkerId,
};
use serde_json::json;

use crate::ctx::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

super::cases!(batch:
    all_succeeded_fires_finished_and_succeeded [BATCHES],
    first_dead_fires_once [BATCHES],
    racing_last_completions_fire_once [BATCHES],
    large_finishes_after_the_last [BATCHES],
    jobs_added_while_not_final [BATCHES],
    refused_batch_writes_nothing [BATCHES],
    retry_counts_nothing [BATCHES],
);

/// The callbacks waiting in `cb`: each one's event and counts, in claim order (all claimed).
async fn callbacks(cx: &Ctx, cb: &QueueName) -> Result<Vec<BatchInfo>, Failure> {
    let w = WorkerId::random();
    let got = cx.claim(w, cb, 100, ClaimMode::Start).await?;
    let mut out = Vec::new();
    for j in got {
        let info: BatchInfo = serde_json::from_value(j.payload["batch"].clone())
            .map_err(|e| Failure(format!("callback payload {}: {e}", j.payload)))?;
        out.push(info);
    }
    out.sort_by_key(|i| i.event.as_str());
    Ok(out)
}

fn with_callbacks(cx: &Ctx, name: &str, cb: &QueueName) -> Batch {
    Batch::new(name)
        .on_finished(cx.job(cb).json(json!({"note": "keep me"})))
        .on_succeeded(cx.job(cb))
        .on_first_dead(cx.job(cb))
}

async fn finish_all(cx: &Ctx, q: &QueueName, n: usize) -> CaseResult {
    let w = WorkerId::random();
    for _ in 0..n {
        let j = cx.claim_one_started(w, q).await?;
        ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    }
    Ok(())
}

/// Three jobs succeed: `finished` and `succeeded` once each (counts 3 / 3 / 0), the
/// callback's own payload kept beside `"batch"`; no `first_dead`.
pub async fn all_succeeded_fires_finished_and_succeeded(cx: Ctx) -> CaseResult {
    let (q, cb) = (cx.queue(), cx.queue_named("cb"));
    let b = with_callbacks(&cx, "ok", &cb).jobs((0..3).map(|_| cx.job(&q)));
    let e = cx.backend.enqueue_batch(&b).await?;
    ensure_eq!(e.jobs.len(), 3, "jobs enqueued");
    ensure_eq!(cx.queue_stats(&cb).await?.pending, 0, "callbacks before any job ends");
    finish_all(&cx, &q, 3).await?;
    let st = cx.backend.get_batch(e.id).await?.ok_or_else(|| Failure("get_batch: None".into()))?;
    ensure_eq!((st.total, st.succeeded, st.dead), (3, 3, 0), "counts");
    ensure_eq!(
        st.fired.iter().map(|f| f.0).collect::<Vec<_>>(),
        vec![BatchEvent::Finished, BatchEvent::Succeeded],
        "fired"
    );
    let got = callbacks(&cx, &cb).await?;
    ensure_eq!(got.len(), 2, "callback jobs");
    ensure_eq!(got[0].event, BatchEvent::Finished, "first");
    ensure_eq!((got[0].total, got[0].succeeded, got[0].dead), (3, 3, 0), "finished's counts");
    ensure_eq!(got[1].event, BatchEvent::Succeeded, "second");
    ensure_eq!(got[0].id, e.id, "batch id");
    let w = WorkerId::random();
    let none = cx.claim(w, &cb, 10, ClaimMode::Start).await?;
    ensure_eq!(none.len(), 0, "more callbacks");
    Ok(())
}

/// Two of three jobs dead-lettered: `first_dead` once (dead 1), then `finished` (1 / 2); no
/// `succeeded`.
pub async fn first_dead_fires_once(cx: Ctx) -> CaseResult {
    let (q, cb) = (cx.queue(), cx.queue_named("cb"));
    let e = cx.backend.enqueue_batch(&with_callbacks(&cx, "dead", &cb).jobs((0..3).map(|_| cx.job(&q)))).await?;
    let w = WorkerId::random();
    for _ in 0..2 {
        let j = cx.claim_one_started(w, &q).await?;
        let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "boom".into() };
        ensure!(!cx.backend.fail(w, j.lease_ref(), dl).await?.is_lost(), "fail(dead-letter)");
    }
    let st = cx.backend.get_batch(e.id).await?.ok_or_else(|| Failure("get_batch: None".into()))?;
    ensure_eq!(st.fired.iter().map(|f| f.0).collect::<Vec<_>>(), vec![BatchEvent::FirstDead], "fired after two dead");
    finish_all(&cx, &q, 1).await?;
    let got = callbacks(&cx, &cb).await?;
    let events: Vec<BatchEvent> = got.iter().map(|i| i.event).collect();
    ensure_eq!(events, vec![BatchEvent::Finished, BatchEvent::FirstDead], "callbacks (sorted by name)");
    ensure_eq!((got[1].total, got[1].succeeded, got[1].dead), (3, 0, 1), "first_dead's counts");
    ensure_eq!((got[0].total, got[0].succeeded, got[0].dead), (3, 1, 2), "finished's counts");
    Ok(())
}

/// `CHOKAQ_STRESS_JOBS` jobs completed by 16 racing claimers: each callback exactly once.
pub async fn racing_last_completions_fire_once(cx: Ctx) -> CaseResult {
    let (q, cb) = (cx.queue(), cx.queue_named("cb"));
    let n = cx.stress.jobs.max(16);
    let e = cx.backend.enqueue_batch(&with_callbacks(&cx, "race", &cb).jobs((0..n).map(|_| cx.job(&q)))).await?;
    let mut set = tokio::task::JoinSet::new();
    let q = Arc::new(q);
    for _ in 0..cx.stress.claimers.max(16) {
        let (cx, q) = (cx.clone(), q.clone());
        set.spawn(async move {
            let w = WorkerId::random();
            loop {
                let got = cx.claim(w, &q, 4, ClaimMode::Start).await?;
                if got.is_empty() {
                    return Ok::<(), Failure>(());
                }
                let leases: Vec<_> = got.iter().map(|j| j.lease_ref()).collect();
                let out = cx.backend.complete(w, &leases).await?;
                ensure!(out.lost.is_empty(), "complete lost {:?}", out.lost);
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| Failure(format!("claimer panicked: {e}")))??;
    }
    let st = cx.backend.get_batch(e.id).await?.ok_or_else(|| Failure("get_batch: None".into()))?;
    ensure_eq!((st.total, st.succeeded, st.dead), (n as u64, n as u64, 0), "counts");
    let got = callbacks(&cx, &cb).await?;
    ensure_eq!(
        got.iter().map(|i| i.event).collect::<Vec<_>>(),
        vec![BatchEvent::Finished, BatchEvent::Succeeded],
        "callbacks"
    );
    Ok(())
}

/// A batch of 100 (more than a backend may count in one place: PostgreSQL counts a large batch
/// in parts), 98 ended ten at a time by one batch completion each, one dead-lettered: only
/// `first_dead` so far, the batch not final; the 100th: `finished` once, with 99 / 1.
pub async fn large_finishes_after_the_last(cx: Ctx) -> CaseResult {
    let (q, cb) = (cx.queue(), cx.queue_named("cb"));
    let n = 100;
    let e = cx.backend.enqueue_batch(&with_callbacks(&cx, "large", &cb).jobs((0..n).map(|_| cx.job(&q)))).await?;
    let w = WorkerId::random();
    let mut held = Vec::new();
    while held.len() < n {
        let got = cx.claim(w, &q, 50, ClaimMode::Start).await?;
        ensure!(!got.is_empty(), "claimed {} of {n} jobs, then nothing", held.len());
        held.extend(got.iter().map(|j| (j.id, j.lease_ref())));
    }
    held.sort_by_key(|(id, _)| *id);
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "boom".into() };
    ensure!(!cx.backend.fail(w, held[n - 2].1, dl).await?.is_lost(), "fail(dead-letter) the 99th");
    for chunk in held[..n - 2].chunks(10) {
        let leases: Vec<_> = chunk.iter().rev().map(|(_, l)| *l).collect();
        let out = cx.backend.complete(w, &leases).await?;
        ensure_eq!((out.done.len(), out.lost.len()), (chunk.len(), 0), "(done, lost) of a batch completion");
    }
    let st = cx.backend.get_batch(e.id).await?.ok_or_else(|| Failure("get_batch: None".into()))?;
    ensure_eq!((st.total, st.succeeded, st.dead), (n as u64, n as u64 - 2, 1), "counts before the last");
    ensure_eq!(st.fired.iter().map(|f| f.0).collect::<Vec<_>>(), vec![BatchEvent::FirstDead], "fired before the last");
    ensure!(!st.is_final(), "final before the last job");
    ensure_eq!(cx.backend.complete_one(w, held[n - 1].1).await?, Fenced::Done(()), "complete the last");
    let got = callbacks(&cx, &cb).await?;
    ensure_eq!(
        got.iter().map(|i| i.event).collect::<Vec<_>>(),
        vec![BatchEvent::Finished, BatchEvent::FirstDead],
        "callbacks (sorted by name)"
    );
    ensure_eq!((got[0].total, got[0].succeeded, got[0].dead), (n as u64, n as u64 - 1, 1), "finished's counts");
    ensure_eq!((got[1].total, got[1].succeeded, got[1].dead), (n as u64, 0, 1), "first_dead's counts");
    Ok(())
}

/// A job of the batch, while it runs, adds two: the batch finishes only after all three;
/// adding to a final batch is `Conflict` and writes nothing; to an unknown one `NotFound`.
pub async fn jobs_added_while_not_final(cx: Ctx) -> CaseResult {
    let (q, cb) = (cx.queue(), cx.queue_named("cb"));
    let e = cx.backend.enqueue_batch(&with_callbacks(&cx, "grow", &cb).job(cx.job(&q))).await?;
    let w = WorkerId::random();
    let first = cx.claim_one_started(w, &q).await?;
    let added = cx.backend.add_to_batch(e.id, vec![cx.job(&q), cx.job(&q)]).await?;
    ensure_eq!(added.len(), 2, "added");
    ensure_eq!(cx.backend.complete_one(w, first.lease_ref()).await?, Fenced::Done(()), "complete the first");
    ensure_eq!(cx.queue_stats(&cb).await?.pending, 0, "callbacks with two added jobs left");
    finish_all(&cx, &q, 2).await?;
    let st = cx.backend.get_batch(e.id).await?.ok_or_else(|| Failure("get_batch: None".into()))?;
    ensure_eq!((st.total, st.succeeded, st.dead), (3, 3, 0), "counts");
    match cx.backend.add_to_batch(e.id, vec![cx.job(&q)]).await {
        Err(err) => ensure_eq!(err.kind(), ErrorKind::Conflict, "add to a final batch: {err}"),
        Ok(ids) => return Err(Failure(format!("a final batch took {ids:?}"))),
    }
    ensure_eq!(cx.queue_stats(&q).await?.pending, 0, "jobs left by the refused addition");
    match cx.backend.add_to_batch(BatchId::new(), vec![cx.job(&q)]).await {
        Err(err) => ensure_eq!(err.kind(), ErrorKind::NotFound, "add to an unknown batch: {err}"),
        Ok(ids) => return Err(Failure(format!("an unknown batch took {ids:?}"))),
    }
    ensure_eq!(cx.backend.get_batch(BatchId::new()).await?, None, "an unknown batch");
    Ok(())
}

/// No jobs, a keyed job, a callback whose payload is not an object: `InvalidInput`, nothing
/// written.
pub async fn refused_batch_writes_nothing(cx: Ctx) -> CaseResult {
    let (q, cb) = (cx.queue(), cx.queue_named("cb"));
    let bad = [
        Batch::new("empty").on_finished(cx.job(&cb)),
        Batch::new("keyed").job(cx.job(&q)).job(cx.job(&q).idempotency_key("k")),
        Batch::new("array").job(cx.job(&q)).on_finished(cx.job(&cb).json(json!([1, 2]))),
    ];
    for b in &bad {
        match cx.backend.enqueue_batch(b).await {
            Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "{}: {e}", b.name()),
            Ok(e) => return Err(Failure(format!("{}: accepted as {}", b.name(), e.id))),
        }
    }
    ensure_eq!(cx.queue_stats(&q).await?.pending + cx.queue_stats(&cb).await?.pending, 0, "jobs written");
    Ok(())
}

/// A job that fails and is retried counts nothing; its later success counts once.
pub async fn retry_counts_nothing(cx: Ctx) -> CaseResult {
    let (q, cb) = (cx.queue(), cx.queue_named("cb"));
    let e = cx.backend.enqueue_batch(&with_callbacks(&cx, "retry", &cb).job(cx.job(&q).max_attempts(3))).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let retry = FailAction::Retry { delay: Duration::ZERO, error: "again".into() };
    ensure!(!cx.backend.fail(w, j.lease_ref(), retry).await?.is_lost(), "fail(retry)");
    let st = cx.backend.get_batch(e.id).await?.ok_or_else(|| Failure("get_batch: None".into()))?;
    ensure_eq!((st.succeeded, st.dead, st.fired.len()), (0, 0, 0), "after a retry");
    finish_all(&cx, &q, 1).await?;
    let st = cx.backend.get_batch(e.id).await?.ok_or_else(|| Failure("get_batch: None".into()))?;
    ensure_eq!((st.total, st.succeeded, st.dead, st.fired.len()), (1, 1, 0, 2), "after the success");
    Ok(())
}
