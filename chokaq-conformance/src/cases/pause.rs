//! Pause: nothing is claimed from a paused or inactive queue; fetched jobs of a paused queue
//! are released by their worker.

use chokaq_core::{
    BackendExt, ClaimMode, ClaimParams, Fenced, JobLocation, JobStatus, QueueControl, QueueSettings, WorkerId,
};

use crate::ctx::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

super::cases!(pause: blocks_claims, inactive_blocks_claims, fetched_released_on_pause, settings_and_isolation);

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

/// A worker holding fetched-not-started jobs of a queue that gets paused releases them: they
/// are Pending at once (no timeout), attempt unchanged, and stay unclaimed until resume.
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
