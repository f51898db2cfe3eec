//! Hostile input and misconfiguration (issue 16): every input is rejected with a typed
//! error, or is survivable; nothing one caller stores breaks another queue.

use std::time::Duration;

use chokaq_core::{
    validate, ClaimMode, ErrorKind, JobId, JobLocation, JobTable, Lease, LeaseRef, ListJobsParams, QueueControl,
    WorkerId,
};

use crate::ctx::{rescue_params, CaseResult, Ctx};
use crate::{ensure, ensure_eq};

super::cases!(hostile:
    zombie_timeout_out_of_range_is_refused,
    max_workers_out_of_range_is_refused,
    lease_lists_over_the_cap_are_refused,
    list_without_payloads,
);

/// `SetZombieTimeout(Duration::MAX)` (or 0) is refused with `InvalidInput` naming the limit,
/// stores nothing, and rescue keeps working for every queue.
pub async fn zombie_timeout_out_of_range_is_refused(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    for t in [Duration::MAX, validate::MAX_ZOMBIE_TIMEOUT + Duration::from_secs(1), Duration::ZERO] {
        match cx.backend.control_queue(&q, QueueControl::SetZombieTimeout(Some(t))).await {
            Ok(st) => return Err(format!("SetZombieTimeout({t:?}) was stored: {st:?}").into()),
            Err(e) => {
                ensure_eq!(e.kind(), ErrorKind::InvalidInput, "error kind for SetZombieTimeout({t:?}) ({e})");
                ensure!(e.to_string().contains("zombie_timeout"), "the error does not name the setting: {e}");
            }
        }
    }
    ensure_eq!(cx.backend.queue_settings(&q).await?.zombie_timeout, None, "stored zombie timeout");
    let ok = cx.backend.control_queue(&q, QueueControl::SetZombieTimeout(Some(validate::MAX_ZOMBIE_TIMEOUT))).await?;
    ensure_eq!(ok.zombie_timeout, Some(validate::MAX_ZOMBIE_TIMEOUT), "the largest timeout is stored");
    cx.backend.rescue(&rescue_params()).await?;
    Ok(())
}

/// A cap above the limit is refused (`InvalidInput`) and stores nothing.
pub async fn max_workers_out_of_range_is_refused(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let e = match cx.backend.control_queue(&q, QueueControl::SetMaxWorkers(Some(u32::MAX))).await {
        Ok(st) => return Err(format!("SetMaxWorkers(u32::MAX) was stored: {st:?}").into()),
        Err(e) => e,
    };
    ensure_eq!(e.kind(), ErrorKind::InvalidInput, "error kind for SetMaxWorkers(u32::MAX) ({e})");
    ensure_eq!(cx.backend.queue_settings(&q).await?.max_workers, None, "stored cap");
    Ok(())
}

/// Lease lists longer than `validate::MAX_LEASES_PER_CALL` are refused before anything is
/// written, by start, heartbeat, complete and release.
pub async fn lease_lists_over_the_cap_are_refused(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 1).await?;
    let w = WorkerId::random();
    let held = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    ensure_eq!(held.len(), 1, "claimed");
    let mut leases: Vec<LeaseRef> =
        (0..validate::MAX_LEASES_PER_CALL).map(|i| LeaseRef { id: JobId::new(), lease: Lease(i as i64) }).collect();
    leases.push(held[0].lease_ref());
    let kinds = [
        ("start", cx.backend.start(w, &leases).await.err()),
        ("heartbeat", cx.backend.heartbeat(w, &leases).await.err()),
        ("complete", cx.backend.complete(w, &leases).await.err()),
        ("release", cx.backend.release(w, &leases).await.err()),
    ];
    for (op, err) in kinds {
        let Some(e) = err else { return Err(format!("{op} accepted {} leases", leases.len()).into()) };
        ensure_eq!(e.kind(), ErrorKind::InvalidInput, "{op}: error kind ({e})");
    }
    ensure_eq!(cx.record(held[0].id).await?.location, JobLocation::Hot(chokaq_core::JobStatus::Fetched), "job");
    Ok(())
}

/// `ListJobsParams::without_payloads` lists the jobs with `Null` payloads; the default keeps them.
pub async fn list_without_payloads(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue(cx.job(&q).json(serde_json::json!({ "big": "x".repeat(1000) }))).await?;
    let mut params = ListJobsParams::new(JobTable::Hot);
    params.limit = 10;
    params.queue = Some(q.clone());
    let with = cx.backend.list_jobs(&params).await?;
    ensure_eq!(with.jobs.len(), 1, "listed");
    ensure!(with.jobs[0].payload.get("big").is_some(), "default list lost the payload: {:?}", with.jobs[0].payload);
    params.without_payloads = true;
    let without = cx.backend.list_jobs(&params).await?;
    ensure_eq!(without.jobs.len(), 1, "listed without payloads");
    ensure_eq!(without.jobs[0].payload, serde_json::Value::Null, "payload of a list without payloads");
    ensure_eq!(without.jobs[0].id, with.jobs[0].id, "same job");
    Ok(())
}
