//! Claim: what a claim returns, its order, its limit, and no duplicates under contention.

use chokaq_core::{ClaimMode, JobLocation, JobStatus, WorkerId};

use crate::ctx::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

/// A reserve-mode claim moves the job to Fetched, names the worker, hands out a lease.
pub async fn returns_fetched_with_lease(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).json(serde_json::json!({"a": 1}))).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 10, ClaimMode::Reserve).await?;
    ensure_eq!(got.len(), 1, "claimed jobs");
    let j = &got[0];
    ensure_eq!(j.id, id, "claimed id");
    ensure_eq!(j.status, JobStatus::Fetched, "status in claim result");
    ensure_eq!(j.worker_id, w, "worker in claim result");
    ensure_eq!(j.attempt, 0, "attempt after reserve");
    ensure_eq!(j.payload, serde_json::json!({"a": 1}), "payload");
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Hot(JobStatus::Fetched), "stored location");
    ensure_eq!(r.worker_id, Some(w), "stored worker");
    ensure_eq!(r.lease, Some(j.lease), "stored lease");
    let again = cx.claim(WorkerId::random(), &q, 10, ClaimMode::Reserve).await?;
    ensure!(again.is_empty(), "a fetched job was claimed again: {again:?}");
    Ok(())
}

/// A start-mode claim goes straight to Processing: attempt 1, started_at and heartbeat set.
pub async fn start_mode_goes_to_processing(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(j.id, id, "claimed id");
    ensure_eq!(j.status, JobStatus::Processing, "status");
    ensure_eq!(j.attempt, 1, "attempt");
    ensure!(j.started_at.is_some(), "started_at not set");
    ensure!(j.heartbeat_at.is_some(), "heartbeat_at not set");
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Hot(JobStatus::Processing), "stored location");
    ensure_eq!(r.attempt, 1, "stored attempt");
    Ok(())
}
