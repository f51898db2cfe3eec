//! Hostile input and misconfiguration (issue 16): every input is rejected with a typed
//! error, or is survivable; nothing one caller stores breaks another queue.

use std::time::Duration;

use chokaq_core::testing::JobPatch;
use chokaq_core::{
    validate, ClaimMode, ErrorKind, JobId, JobLocation, JobTable, Lease, LeaseRef, ListJobsParams, QueueControl,
    WorkerId,
};

use crate::cases::Outcome;
use crate::ctx::{rescue_params, CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

super::cases!(hostile:
    zombie_timeout_out_of_range_is_refused,
    max_workers_out_of_range_is_refused,
    lease_lists_over_the_cap_are_refused,
    list_without_payloads,
    undecodable_row_is_dead_lettered,
    errors_name_their_operation,
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

/// A stored row that cannot be decoded (here: a payload nested deeper than the reader's
/// recursion limit, forced past enqueue's checks) is dead-lettered by the claim that meets it,
/// with a reason; its neighbours in the same batch are claimed, in both modes, and the bad
/// row never comes back. Ignored where no undecodable row can be stored (memory).
pub async fn undecodable_row_is_dead_lettered(cx: Ctx) -> Result<Outcome, Failure> {
    for mode in [ClaimMode::Start, ClaimMode::Reserve] {
        let q = cx.queue_named(if mode == ClaimMode::Start { "start" } else { "reserve" });
        let bad = cx.enqueue(cx.job(&q).priority(10)).await?;
        let good = cx.enqueue_n(&q, 2).await?;
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let patch = JobPatch { raw_payload: Some(deep), ..JobPatch::default() };
        match cx.backend.force(bad, &patch).await {
            Ok(true) => {}
            Ok(false) => return Err("force found no hot row".into()),
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                return Ok(Outcome::Ignored(format!("this backend cannot store an undecodable row ({e})")))
            }
            Err(e) => return Err(e.into()),
        }
        let w = WorkerId::random();
        let got = match cx.backend.claim(&chokaq_core::ClaimParams::new(w, vec![q.clone()], 3, mode)).await {
            Ok(got) => got,
            Err(e) => return Err(format!("{mode:?} claim failed on a batch holding an undecodable row: {e}").into()),
        };
        let mut ids: Vec<JobId> = got.iter().map(|j| j.id).collect();
        ids.sort();
        let mut want = good.clone();
        want.sort();
        ensure_eq!(ids, want, "{mode:?}: the claim returns the decodable neighbours");
        let p = cx.presence(bad).await?;
        ensure_eq!((p.hot, p.archive, p.dead), (0, 0, 1), "{mode:?}: the undecodable row's (hot, archive, dead)");
        let again = cx.backend.claim(&chokaq_core::ClaimParams::new(w, vec![q.clone()], 3, mode)).await?;
        ensure!(again.is_empty(), "{mode:?}: a later claim returned {} jobs", again.len());
        cx.backend.rescue(&rescue_params()).await?;
        ensure_eq!(cx.presence(bad).await?.dead, 1, "{mode:?}: dead after a rescue");
    }
    Ok(Outcome::Passed)
}

/// An error a backend returns names the operation it came from (`Error::operation`), so a
/// caller deciding about retries, and a log line, know which call failed.
pub async fn errors_name_their_operation(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let e = match cx.backend.control_queue(&q, QueueControl::SetMaxWorkers(Some(u32::MAX))).await {
        Ok(st) => return Err(format!("SetMaxWorkers(u32::MAX) was stored: {st:?}").into()),
        Err(e) => e,
    };
    ensure_eq!(e.operation(), Some("control_queue"), "operation of a refused control_queue ({e})");
    let too_many: Vec<LeaseRef> =
        (0..=validate::MAX_LEASES_PER_CALL).map(|i| LeaseRef { id: JobId::new(), lease: Lease(i as i64) }).collect();
    let e = match cx.backend.complete(WorkerId::random(), &too_many).await {
        Ok(o) => return Err(format!("complete accepted {} leases: {o:?}", too_many.len()).into()),
        Err(e) => e,
    };
    ensure_eq!(e.operation(), Some("complete"), "operation of a refused complete ({e})");
    Ok(())
}
