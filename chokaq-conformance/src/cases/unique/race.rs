//! Racing enqueuers of one unique job, and batches.

use std::sync::Arc;

use chokaq_core::{BackendExt, Enqueued};

use super::{by_args_opts, fresh, hot_rows, ujob};
use crate::ctx::{within, CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Enqueuer tasks of the race.
const TASKS: usize = 16;
/// Enqueues per task (`CHOKAQ_STRESS_UNIQUE_ENQUEUES` changes it).
const ENQUEUES: usize = 1000;

fn enqueues() -> usize {
    std::env::var("CHOKAQ_STRESS_UNIQUE_ENQUEUES").ok().and_then(|v| v.parse().ok()).unwrap_or(ENQUEUES)
}

/// 16 tasks × 1,000 enqueues of the same unique job (half through `enqueue`, half through
/// one-job `enqueue_many`): exactly one row; every call returns its id, and exactly one call
/// is not a duplicate. A check-then-insert fails here.
pub async fn race_one_row(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let n = enqueues();
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let (cx, q, barrier) = (cx.clone(), q.clone(), barrier.clone());
        tasks.spawn(async move {
            let job = ujob(&cx, &q, serde_json::json!({"race": true}), by_args_opts());
            let mut out: Vec<Enqueued> = Vec::with_capacity(n);
            barrier.wait().await;
            for i in 0..n {
                let e = if (t + i) % 2 == 0 {
                    within("enqueue", async { Ok(cx.backend.enqueue(job.clone()).await?) }).await?
                } else {
                    let mut v =
                        within("enqueue_many", async { Ok(cx.backend.enqueue_many(vec![job.clone()]).await?) }).await?;
                    v.pop().ok_or_else(|| Failure("enqueue_many returned nothing".into()))?
                };
                out.push(e);
            }
            Ok::<_, Failure>(out)
        });
    }
    let mut results = Vec::with_capacity(TASKS * n);
    while let Some(r) = tasks.join_next().await {
        results.extend(r.map_err(|e| Failure(format!("enqueuer panicked: {e}")))??);
    }
    ensure_eq!(results.len(), TASKS * n, "results");
    let fresh_ids: Vec<_> = results.iter().filter(|e| !e.duplicate).map(|e| e.id).collect();
    ensure_eq!(hot_rows(&cx, &q).await?, 1, "rows in the hot table");
    ensure_eq!(fresh_ids.len(), 1, "non-duplicate results (ids {fresh_ids:?})");
    let id = fresh_ids[0];
    let other = results.iter().filter(|e| e.id != id).count();
    ensure_eq!(other, 0, "results naming another id than the one row's");
    Ok(())
}

/// Inside one `enqueue_many`: a repeat of a unique job in the batch, and a job whose key an
/// existing job holds, are duplicates; results come back in input order.
pub async fn batch_and_existing(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let job = |n: i32| ujob(&cx, &q, serde_json::json!({ "n": n }), by_args_opts());
    let existing = fresh(&cx, job(0), "existing").await?;
    let out = cx.backend.enqueue_many(vec![job(1), cx.job(&q), job(1), job(0), job(2), job(2)]).await?;
    ensure_eq!(out.len(), 6, "results");
    ensure!(!out[0].duplicate && !out[1].duplicate && !out[4].duplicate, "new jobs: {out:?}");
    ensure!(out[2].duplicate && out[2].id == out[0].id, "repeat in the batch: {:?}", out[2]);
    ensure!(out[3].duplicate && out[3].id == existing, "key of an existing job: {:?}", out[3]);
    ensure!(out[5].duplicate && out[5].id == out[4].id, "second repeat in the batch: {:?}", out[5]);
    ensure_eq!(hot_rows(&cx, &q).await?, 4, "rows");
    Ok(())
}
