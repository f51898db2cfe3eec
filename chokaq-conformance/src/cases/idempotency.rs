//! Idempotency: one live job per key, also under concurrent enqueuers.

use std::sync::Arc;

use chokaq_core::{BackendExt, ClaimMode, Fenced, JobTable, ListJobsParams, WorkerId};

use crate::ctx::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

super::cases!(idempotency:
    duplicate_returns_existing,
    concurrent_one_row,
    key_free_after_finish,
    batch_with_duplicates,
    concurrent_overlapping_batches,
    scoped_per_queue,
);

/// A second enqueue with a live key returns the first job's id, marked duplicate, and no
/// new row; jobs without keys never collide.
pub async fn duplicate_returns_existing(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let key = format!("k-{q}");
    let a = cx.backend.enqueue(cx.job(&q).idempotency_key(key.clone()).priority(1)).await?;
    let b = cx.backend.enqueue(cx.job(&q).idempotency_key(key.clone()).priority(9)).await?;
    ensure!(!a.duplicate, "first enqueue marked duplicate");
    ensure!(b.duplicate, "second enqueue not marked duplicate");
    ensure_eq!(b.id, a.id, "duplicate's id");
    ensure_eq!(cx.record(a.id).await?.priority, 1, "the first job's fields stand");
    let c = cx.backend.enqueue(cx.job(&q)).await?;
    let d = cx.backend.enqueue(cx.job(&q)).await?;
    ensure!(!c.duplicate && !d.duplicate && c.id != d.id, "jobs without a key collided: {c:?} {d:?}");
    ensure_eq!(cx.queue_stats(&q).await?.pending, 3, "pending rows");
    // Also while the job is running.
    let w = WorkerId::random();
    let j = cx.claim(w, &q, 3, ClaimMode::Start).await?;
    ensure_eq!(j.len(), 3, "claimed");
    let e = cx.backend.enqueue(cx.job(&q).idempotency_key(key)).await?;
    ensure!(e.duplicate && e.id == a.id, "enqueue with the key of a running job: {e:?}");
    Ok(())
}

/// Many concurrent enqueuers with one key: one row, one id, exactly one of them not a
/// duplicate.
pub async fn concurrent_one_row(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let key = format!("race-{q}");
    let n = 16;
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (cx, q, key, barrier) = (cx.clone(), q.clone(), key.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            let job = cx.job(&q).idempotency_key(key).json(serde_json::json!({ "i": i }));
            if i % 2 == 0 {
                Ok::<_, Failure>(cx.backend.enqueue(job).await?)
            } else {
                let mut out = cx.backend.enqueue_many(vec![job]).await?;
                out.pop().ok_or_else(|| Failure("enqueue_many returned nothing".into()))
            }
        });
    }
    let mut results = Vec::new();
    while let Some(r) = tasks.join_next().await {
        results.push(r.map_err(|e| Failure(format!("enqueuer panicked: {e}")))??);
    }
    let first = results[0].id;
    ensure!(results.iter().all(|e| e.id == first), "enqueuers got different ids: {results:?}");
    ensure_eq!(results.iter().filter(|e| !e.duplicate).count(), 1, "non-duplicate results");
    let mut f = ListJobsParams::new(JobTable::Hot);
    f.queue = Some(q.clone());
    ensure_eq!(cx.backend.list_jobs(&f).await?.jobs.len(), 1, "rows in the hot table");
    Ok(())
}

/// Once the keyed job finished (archived), the key is free: a new job gets a new id.
pub async fn key_free_after_finish(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let key = format!("once-{q}");
    let a = cx.backend.enqueue(cx.job(&q).idempotency_key(key.clone())).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    let b = cx.backend.enqueue(cx.job(&q).idempotency_key(key.clone())).await?;
    ensure!(!b.duplicate && b.id != a.id, "enqueue after the keyed job finished: {b:?}");
    ensure_eq!(cx.record(a.id).await?.idempotency_key.as_deref(), Some(key.as_str()), "archived job keeps its key");
    Ok(())
}

/// One enqueue_many with the same key twice (and a key already live) inserts one row per
/// key; results come back in input order.
pub async fn batch_with_duplicates(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let (k1, k2) = (format!("b1-{q}"), format!("b2-{q}"));
    let live = cx.backend.enqueue(cx.job(&q).idempotency_key(k2.clone())).await?;
    let out = cx
        .backend
        .enqueue_many(vec![
            cx.job(&q).idempotency_key(k1.clone()),
            cx.job(&q),
            cx.job(&q).idempotency_key(k1),
            cx.job(&q).idempotency_key(k2),
        ])
        .await?;
    ensure_eq!(out.len(), 4, "results");
    ensure!(!out[0].duplicate && !out[1].duplicate, "first two are new: {out:?}");
    ensure!(out[2].duplicate && out[2].id == out[0].id, "repeat of k1 inside the batch: {:?}", out[2]);
    ensure!(out[3].duplicate && out[3].id == live.id, "k2 already live: {:?}", out[3]);
    ensure_eq!(cx.queue_stats(&q).await?.pending, 3, "rows");
    Ok(())
}

/// Concurrent batches whose keys overlap in different orders (the classic deadlock shape):
/// no error escapes, and every key ends up on exactly one row whose id every batch got.
pub async fn concurrent_overlapping_batches(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let keys: Vec<String> = (0..12).map(|i| format!("ovl-{i}-{q}")).collect();
    let batches = 8;
    let barrier = Arc::new(tokio::sync::Barrier::new(batches));
    let mut tasks = tokio::task::JoinSet::new();
    for b in 0..batches {
        let (cx, q, barrier) = (cx.clone(), q.clone(), barrier.clone());
        let mut ks = keys.clone();
        if b % 2 == 1 {
            ks.reverse();
        }
        ks.rotate_left(b % keys.len());
        tasks.spawn(async move {
            let jobs = ks.iter().map(|k| cx.job(&q).idempotency_key(k.clone())).collect();
            barrier.wait().await;
            let out = cx.backend.enqueue_many(jobs).await?;
            ensure_eq!(out.len(), ks.len(), "results of one batch");
            Ok::<_, Failure>(ks.into_iter().zip(out).collect::<Vec<_>>())
        });
    }
    let mut by_key: std::collections::HashMap<String, std::collections::HashSet<chokaq_core::JobId>> =
        Default::default();
    let mut fresh = 0;
    while let Some(r) = tasks.join_next().await {
        for (k, e) in r.map_err(|e| Failure(format!("enqueuer panicked: {e}")))?? {
            by_key.entry(k).or_default().insert(e.id);
            fresh += usize::from(!e.duplicate);
        }
    }
    for k in &keys {
        ensure_eq!(by_key.get(k).map(|s| s.len()), Some(1), "distinct ids returned for key {k}");
    }
    ensure_eq!(fresh, keys.len(), "non-duplicate results over all batches");
    ensure_eq!(cx.queue_stats(&q).await?.pending, keys.len() as u64, "rows");
    Ok(())
}

/// Keys are scoped per queue: key K on queue A does not block K on queue B (in one batch or
/// two calls), and K twice on A still dedups.
pub async fn scoped_per_queue(cx: Ctx) -> CaseResult {
    let (qa, qb, qc) = (cx.queue_named("a"), cx.queue_named("b"), cx.queue_named("c"));
    let key = format!("k-{qa}");
    let a = cx.backend.enqueue(cx.job(&qa).idempotency_key(key.clone())).await?;
    let b = cx.backend.enqueue(cx.job(&qb).idempotency_key(key.clone())).await?;
    ensure!(!a.duplicate, "first enqueue of K on A marked duplicate");
    ensure!(!b.duplicate, "K on B reported a duplicate of K on A: {b:?} (keys are scoped per queue)");
    ensure!(a.id != b.id, "K on B returned A's job");
    let a2 = cx.backend.enqueue(cx.job(&qa).idempotency_key(key.clone())).await?;
    ensure!(a2.duplicate && a2.id == a.id, "K twice on A: {a2:?}");
    let b2 = cx.backend.enqueue(cx.job(&qb).idempotency_key(key.clone())).await?;
    ensure!(b2.duplicate && b2.id == b.id, "K twice on B: {b2:?}");
    // One batch naming K on two queues, and K twice on one of them.
    let out = cx
        .backend
        .enqueue_many(vec![
            cx.job(&qc).idempotency_key(key.clone()),
            cx.job(&qa).idempotency_key(key.clone()),
            cx.job(&qc).idempotency_key(key.clone()),
        ])
        .await?;
    ensure_eq!(out.len(), 3, "batch result count");
    ensure!(!out[0].duplicate, "K on C in a batch: {:?}", out[0]);
    ensure!(out[1].duplicate && out[1].id == a.id, "K on A in a batch: {:?}", out[1]);
    ensure!(out[2].duplicate && out[2].id == out[0].id, "K twice on C in one batch: {:?}", out[2]);
    for (q, n) in [(&qa, 1), (&qb, 1), (&qc, 1)] {
        ensure_eq!(cx.queue_stats(q).await?.pending, n, "pending rows of {q}");
    }
    Ok(())
}
