//! Pause: nothing is claimed from a paused or inactive queue; the backend side of what a
//! worker does with the jobs it already holds (`docs/contract.md`, "Operations and guards",
//! pause): its Fetched jobs can be released at once, its Processing jobs (running handlers
//! and Start-mode look-ahead jobs) keep their lease and run to completion.

use std::time::Duration;

use chokaq_core::{
    BackendExt, ClaimMode, ClaimParams, FailAction, Fenced, JobLocation, JobStatus, LeaseRef, QueueControl,
    QueueSettings, WorkerId,
};

use crate::ctx::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

super::cases!(pause:
    blocks_claims,
    inactive_blocks_claims,
    fetched_released_on_pause,
    started_jobs_run_to_completion,
    settings_and_isolation,
);

/// Paused: no claims; resumed: claims again.
pub async fn blocks_claims(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 3).await?;
    let st = cx.backend.pause(&q).await?;
    ensure!(st.is_paused, "settings after pause: {st:?}");
    let w = WorkerId::random();
    ensure!(cx.claim(w, &q, 10, ClaimMode::Start).await?.is_empty(), "claimed from a paused queue");
    ensure!(cx.claim(w, &q, 10, ClaimMode::Reserve).await?.is_empty(), "reserved from a paused queue");
    cx.enqueue_n(&q, 1).await?;
    ensure!(cx.claim(w, &q, 10, ClaimMode::Start).await?.is_empty(), "claimed a new job from a paused queue");
    let st = cx.backend.resume(&q).await?;
    ensure!(!st.is_paused, "settings after resume: {st:?}");
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 4, "claimed after resume");
    Ok(())
}

/// Deactivated: no claims; activated: claims again.
pub async fn inactive_blocks_claims(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 2).await?;
    let st = cx.backend.control_queue(&q, QueueControl::Deactivate).await?;
    ensure!(!st.is_active, "settings after deactivate: {st:?}");
    let w = WorkerId::random();
    ensure!(cx.claim(w, &q, 10, ClaimMode::Start).await?.is_empty(), "claimed from an inactive queue");
    let st = cx.backend.control_queue(&q, QueueControl::Activate).await?;
    ensure!(st.is_active, "settings after activate: {st:?}");
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 2, "claimed after activate");
    Ok(())
}

/// The backend side of a Reserve-mode worker's pause check: the Fetched jobs it holds of a
/// queue paused since can be released at once (no timeout): they are Pending, attempt
/// unchanged, its old leases are dead, and they stay unclaimed until resume.
pub async fn fetched_released_on_pause(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 3).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 3, ClaimMode::Reserve).await?;
    ensure_eq!(got.len(), 3, "reserved");
    cx.backend.pause(&q).await?;
    let out = cx.backend.release(w, &got.iter().map(|j| j.lease_ref()).collect::<Vec<_>>()).await?;
    ensure_eq!(out.done.len(), 3, "released");
    for j in &got {
        let r = cx.record(j.id).await?;
        ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Pending), 0), "(location, attempt)");
        ensure_eq!(cx.backend.start_one(w, j.lease_ref()).await?, Fenced::LeaseLost, "start after release");
    }
    ensure!(cx.claim(w, &q, 10, ClaimMode::Start).await?.is_empty(), "claimed from the paused queue");
    cx.backend.resume(&q).await?;
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 3, "claimed after resume");
    Ok(())
}

/// Pause stops claims, not the jobs already out. Jobs claimed in Start mode before the pause
/// (running handlers, and a worker's look-ahead jobs waiting for a slot) keep their lease:
/// heartbeats hold them with no cancel request, and they complete; a retry puts one back to
/// Pending, where it waits for the resume like the jobs never claimed. A Fetched job may still
/// be started (`start` does not look at the queue: a worker can start a buffered job before
/// its next pause check) and then runs to completion too.
pub async fn started_jobs_run_to_completion(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 6).await?;
    let w = WorkerId::random();
    let running = cx.claim(w, &q, 3, ClaimMode::Start).await?;
    ensure_eq!(running.len(), 3, "claimed in start mode");
    let fetched = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    ensure_eq!(fetched.len(), 1, "claimed in reserve mode");
    cx.backend.pause(&q).await?;
    ensure!(cx.claim(w, &q, 10, ClaimMode::Start).await?.is_empty(), "claimed from the paused queue");
    let leases: Vec<LeaseRef> = running.iter().map(|j| j.lease_ref()).collect();
    let hb = cx.backend.heartbeat(w, &leases).await?;
    ensure_eq!(hb.held.len(), 3, "heartbeat of the running jobs of a paused queue: held ({hb:?})");
    ensure!(hb.lost.is_empty() && hb.cancel_requested.is_empty(), "heartbeat after pause: {hb:?}");
    ensure_eq!(cx.backend.start_one(w, fetched[0].lease_ref()).await?, Fenced::Done(()), "start of a Fetched job");
    let retry = FailAction::Retry { delay: Duration::ZERO, error: "again".into() };
    ensure!(cx.backend.fail(w, running[2].lease_ref(), retry).await?.done().is_some(), "fail(retry) lost its lease");
    let out = cx.backend.complete(w, &[leases[0], leases[1], fetched[0].lease_ref()]).await?;
    ensure_eq!(out.done.len(), 3, "completed in a paused queue (lost: {:?})", out.lost);
    let s = cx.queue_stats(&q).await?;
    ensure_eq!(
        (s.pending, s.fetched, s.processing, s.archived),
        (3, 0, 0, 3),
        "(pending, fetched, processing, archived)"
    );
    ensure!(cx.claim(w, &q, 10, ClaimMode::Start).await?.is_empty(), "the retried job was claimed while paused");
    cx.backend.resume(&q).await?;
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 3, "claimed after resume");
    Ok(())
}

/// Settings: a queue with no row has the defaults; controls are upserts that keep the other
/// fields; pausing one queue leaves others alone, also inside one multi-queue claim.
pub async fn settings_and_isolation(cx: Ctx) -> CaseResult {
    let (paused, open) = (cx.queue_named("paused"), cx.queue_named("open"));
    let st = cx.backend.queue_settings(&paused).await?;
    let mut want = QueueSettings::default_for(paused.clone());
    want.updated_at = st.updated_at;
    ensure_eq!(st, want, "settings of a queue with no row");
    ensure!(st.updated_at.is_none(), "a queue with no row has updated_at {:?}", st.updated_at);
    cx.backend.set_max_workers(&paused, Some(4)).await?;
    let st = cx.backend.pause(&paused).await?;
    ensure_eq!((st.is_paused, st.max_workers, st.is_active), (true, Some(4), true), "(paused, max, active)");
    ensure!(st.updated_at.is_some(), "a queue with a row has no updated_at");
    ensure_eq!(cx.backend.queue_settings(&paused).await?, st, "queue_settings after pause");
    cx.enqueue_n(&paused, 2).await?;
    let ids = cx.enqueue_n(&open, 2).await?;
    let req = ClaimParams::new(WorkerId::random(), vec![paused.clone(), open.clone()], 10, ClaimMode::Reserve);
    let mut got: Vec<_> = cx.backend.claim(&req).await?.iter().map(|j| j.id).collect();
    got.sort();
    let mut want = ids;
    want.sort();
    ensure_eq!(got, want, "claim over a paused and an open queue");
    Ok(())
}
