//! Lifecycle: start, complete, release, cancel, requeue, purge, get and list.

use std::time::Duration;

use chokaq_core::testing::Presence;
use chokaq_core::{
    BackendExt, CancelOutcome, ClaimMode, DeadReason, ErrorKind, FailAction, Fenced, JobId, JobLocation, JobStatus,
    JobTable, ListJobsParams, PurgeParams, PurgeTarget, RequeueOutcome, WorkerId,
};

use crate::ctx::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

super::cases!(lifecycle:
    reserve_start_complete,
    release_returns_pending,
    cancel_each_state,
    cancel_not_live,
    requeue_dead,
    requeue_key_conflict,
    purge,
    get_and_list,
    enqueue_many_in_order,
    purge_bounded,
    concurrent_requeue_once,
    cancel_races_claim,
);

/// Reserve, start, complete: attempt 1, then archived with `finished_at`, nowhere else; the
/// same complete repeated reports Done again and writes nothing.
pub async fn reserve_start_complete(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim(w, &q, 1, ClaimMode::Reserve).await?.remove(0);
    ensure_eq!(cx.backend.start_one(w, j.lease_ref()).await?, Fenced::Done(()), "start");
    let r = cx.record(id).await?;
    ensure_eq!(
        (r.location, r.attempt),
        (JobLocation::Hot(JobStatus::Processing), 1),
        "(location, attempt) after start"
    );
    ensure!(r.started_at.is_some() && r.heartbeat_at.is_some(), "start did not set started_at/heartbeat_at: {r:?}");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Archived, "location after complete");
    ensure!(r.finished_at.is_some(), "archived job has no finished_at");
    ensure_eq!(r.attempt, 1, "archived attempt");
    ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence");
    // A repeat of the same complete (its reply lost) reports the outcome that stands.
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "second complete");
    ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence after a second complete");
    Ok(())
}

/// Release puts a Fetched job back to Pending at once: attempt unchanged, worker cleared,
/// claimable again.
pub async fn release_returns_pending(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim(w, &q, 1, ClaimMode::Reserve).await?.remove(0);
    ensure_eq!(cx.backend.release_one(w, j.lease_ref()).await?, Fenced::Done(()), "release");
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Hot(JobStatus::Pending), "location");
    ensure_eq!(r.attempt, 0, "attempt");
    ensure_eq!(r.worker_id, None, "worker_id");
    let again = cx.claim(WorkerId::random(), &q, 1, ClaimMode::Start).await?;
    ensure!(again.len() == 1 && again[0].id == id, "re-claim after release: {again:?}");
    ensure_eq!(again[0].attempt, 1, "attempt of the re-claim");
    Ok(())
}

/// Cancel: Pending and Fetched jobs go to the dead-letter table (cancelled) at once; a
/// Processing job gets `cancel_requested`, its heartbeat reports it, and its worker
/// finalizes it as cancelled.
pub async fn cancel_each_state(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let pending = cx.enqueue(cx.job(&q).priority(-1)).await?;
    let ids = cx.enqueue_n(&q, 2).await?;
    let w = WorkerId::random();
    let fetched = cx.claim(w, &q, 1, ClaimMode::Reserve).await?.remove(0);
    let running = cx.claim_one_started(w, &q).await?;
    ensure!(ids.contains(&fetched.id) && ids.contains(&running.id), "claimed the wrong jobs");
    ensure_eq!(cx.backend.cancel(pending).await?, CancelOutcome::Cancelled, "cancel Pending");
    ensure_eq!(cx.backend.cancel(fetched.id).await?, CancelOutcome::Cancelled, "cancel Fetched");
    ensure_eq!(cx.backend.cancel(running.id).await?, CancelOutcome::Requested, "cancel Processing");
    for id in [pending, fetched.id] {
        ensure_eq!(cx.record(id).await?.location, JobLocation::Dead(DeadReason::Cancelled), "location of {id}");
        ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 0, dead: 1 }, "presence of {id}");
    }
    let r = cx.record(running.id).await?;
    ensure!(r.cancel_requested, "cancel_requested not set");
    ensure_eq!(r.location, JobLocation::Hot(JobStatus::Processing), "a cancel-requested job keeps running");
    let hb = cx.backend.heartbeat(w, &[running.lease_ref()]).await?;
    ensure_eq!(hb.cancel_requested, vec![running.id], "heartbeat's cancel_requested");
    ensure_eq!(hb.held, vec![running.id], "heartbeat's held");
    let out = cx.backend.fail(w, running.lease_ref(), FailAction::Cancelled { error: Some("stopped".into()) }).await?;
    ensure_eq!(out, Fenced::Done(chokaq_core::FailOutcome::DeadLettered(DeadReason::Cancelled)), "fail(cancelled)");
    ensure_eq!(cx.record(running.id).await?.location, JobLocation::Dead(DeadReason::Cancelled), "final location");
    Ok(())
}

/// Cancel of an unknown, archived or dead id is NotLive and changes nothing.
pub async fn cancel_not_live(cx: Ctx) -> CaseResult {
    ensure_eq!(cx.backend.cancel(JobId::new()).await?, CancelOutcome::NotLive, "cancel of an unknown id");
    let q = cx.queue();
    cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.backend.cancel(j.id).await?, CancelOutcome::NotLive, "cancel of an archived job");
    ensure_eq!(cx.presence(j.id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence");
    let d = cx.enqueue(cx.job(&q)).await?;
    ensure_eq!(cx.backend.cancel(d).await?, CancelOutcome::Cancelled, "cancel");
    ensure_eq!(cx.backend.cancel(d).await?, CancelOutcome::NotLive, "cancel of a dead job");
    Ok(())
}

/// Requeue from the dead-letter table: Pending, attempt 0, same id, priority, key and payload;
/// unknown ids are NotFound.
pub async fn requeue_dead(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let key = format!("rq-{}", q);
    let id =
        cx.enqueue(cx.job(&q).priority(7).idempotency_key(key.clone()).json(serde_json::json!({"k": [1, 2]}))).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "boom".into() };
    cx.backend.fail(w, j.lease_ref(), dl).await?.done().ok_or("fail lost its lease")?;
    ensure_eq!(cx.record(id).await?.location, JobLocation::Dead(DeadReason::Failed), "location before requeue");
    ensure_eq!(cx.backend.requeue_dead(id).await?, RequeueOutcome::Requeued, "requeue");
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Hot(JobStatus::Pending), "location");
    ensure_eq!(r.attempt, 0, "attempt");
    ensure_eq!(r.priority, 7, "priority");
    ensure_eq!(r.idempotency_key.as_deref(), Some(key.as_str()), "idempotency key");
    ensure_eq!(r.payload, serde_json::json!({"k": [1, 2]}), "payload");
    ensure_eq!(cx.presence(id).await?, Presence { hot: 1, archive: 0, dead: 0 }, "presence");
    // The key is live again.
    let dup = cx.backend.enqueue(cx.job(&q).idempotency_key(key)).await?;
    ensure!(dup.duplicate && dup.id == id, "enqueue with the requeued job's key: {dup:?}");
    let again = cx.claim_one_started(w, &q).await?;
    ensure_eq!((again.id, again.attempt), (id, 1), "(id, attempt) of the requeued job's claim");
    ensure_eq!(cx.backend.requeue_dead(JobId::new()).await?, RequeueOutcome::NotFound, "requeue of an unknown id");
    ensure_eq!(cx.backend.requeue_dead(id).await?, RequeueOutcome::NotFound, "requeue of a live job");
    Ok(())
}

/// Requeue of a dead job whose key is now held by a live job fails with Conflict and leaves
/// both where they were.
pub async fn requeue_key_conflict(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let key = format!("conflict-{}", q);
    let dead = cx.enqueue(cx.job(&q).idempotency_key(key.clone())).await?;
    ensure_eq!(cx.backend.cancel(dead).await?, CancelOutcome::Cancelled, "cancel");
    let live = cx.backend.enqueue(cx.job(&q).idempotency_key(key)).await?;
    ensure!(!live.duplicate && live.id != dead, "a dead job's key must be free: {live:?}");
    match cx.backend.requeue_dead(dead).await {
        Err(e) => ensure_eq!(e.kind(), ErrorKind::Conflict, "error kind ({e})"),
        Ok(o) => return Err(format!("requeue with a live duplicate key returned {o:?}, expected a Conflict").into()),
    }
    ensure_eq!(cx.presence(dead).await?, Presence { hot: 0, archive: 0, dead: 1 }, "dead job stays dead");
    ensure_eq!(cx.presence(live.id).await?, Presence { hot: 1, archive: 0, dead: 0 }, "live job stays");
    Ok(())
}

/// Purge deletes finished jobs older than the cutoff, filtered by queue (and reason for the
/// dead-letter table), and nothing newer.
pub async fn purge(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let w = WorkerId::random();
    let ids = cx.enqueue_n(&q, 3).await?;
    let got = cx.claim(w, &q, 3, ClaimMode::Start).await?;
    ensure_eq!(
        cx.backend.complete(w, &got.iter().map(|j| j.lease_ref()).collect::<Vec<_>>()).await?.done.len(),
        3,
        "completed"
    );
    let (cancelled, failed) = (cx.enqueue(cx.job(&q)).await?, cx.enqueue(cx.job(&q)).await?);
    cx.backend.cancel(cancelled).await?;
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(j.id, failed, "claimed");
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "x".into() };
    cx.backend.fail(w, j.lease_ref(), dl).await?.done().ok_or("fail lost its lease")?;
    let mut req = PurgeParams::new(PurgeTarget::Archive, Duration::from_secs(3600));
    req.queue = Some(q.clone());
    ensure_eq!(cx.backend.purge(&req).await?, 0, "purge of archive rows older than an hour");
    // Finished "now" is older than 0 s once the clock moves past it.
    req.older_than = Duration::ZERO;
    let purged = purge_until(&cx, &req, 3).await?;
    ensure_eq!(purged, 3, "archive rows purged");
    for id in &ids {
        ensure_eq!(cx.presence(*id).await?.total(), 0, "presence of purged {id}");
    }
    let mut dreq = PurgeParams::new(PurgeTarget::DeadLetter, Duration::ZERO);
    dreq.queue = Some(q.clone());
    dreq.reason = Some(DeadReason::Cancelled);
    let purged = purge_until(&cx, &dreq, 1).await?;
    ensure_eq!(purged, 1, "cancelled rows purged");
    ensure_eq!(cx.presence(cancelled).await?.total(), 0, "cancelled job purged");
    ensure_eq!(cx.presence(failed).await?, Presence { hot: 0, archive: 0, dead: 1 }, "failed job kept (other reason)");
    Ok(())
}

/// `get_job` of an unknown id is None; `list_jobs` pages in id order with a cursor and
/// filters by queue, status and tag.
pub async fn get_and_list(cx: Ctx) -> CaseResult {
    ensure!(cx.backend.get_job(JobId::new()).await?.is_none(), "get_job of an unknown id");
    let q = cx.queue();
    let mut ids = Vec::new();
    for i in 0..5 {
        let tag = if i % 2 == 0 { "even" } else { "odd" };
        ids.push(cx.enqueue(cx.job(&q).tag(tag)).await?);
    }
    let mut sorted = ids.clone();
    sorted.sort();
    let mut f = ListJobsParams::new(JobTable::Hot);
    f.queue = Some(q.clone());
    f.limit = 2;
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = cx.backend.list_jobs(&f).await?;
        pages += 1;
        ensure!(page.jobs.len() <= 2, "page of {} rows with limit 2", page.jobs.len());
        seen.extend(page.jobs.iter().map(|r| r.id));
        match page.next {
            Some(n) => f.after = Some(n),
            None => break,
        }
        ensure!(pages < 10, "paging does not end");
    }
    ensure_eq!(seen, sorted, "ids over all pages, in id order");
    let mut f = ListJobsParams::new(JobTable::Hot);
    f.queue = Some(q.clone());
    f.tag = Some("even".into());
    let even: Vec<JobId> = cx.backend.list_jobs(&f).await?.jobs.iter().map(|r| r.id).collect();
    let mut want: Vec<JobId> = ids.iter().step_by(2).copied().collect();
    want.sort();
    ensure_eq!(even, want, "tag filter");
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let mut f = ListJobsParams::new(JobTable::Hot);
    f.queue = Some(q.clone());
    f.status = Some(JobStatus::Processing);
    let running: Vec<JobId> = cx.backend.list_jobs(&f).await?.jobs.iter().map(|r| r.id).collect();
    ensure_eq!(running, vec![j.id], "status filter");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    let mut f = ListJobsParams::new(JobTable::Archive);
    f.queue = Some(q.clone());
    let archived: Vec<JobId> = cx.backend.list_jobs(&f).await?.jobs.iter().map(|r| r.id).collect();
    ensure_eq!(archived, vec![j.id], "archive listing");
    Ok(())
}

/// Purges until `want` rows went (the cutoff is "older than", so rows finished in this very
/// instant go once the clock moves on); returns how many went.
async fn purge_until(cx: &Ctx, req: &PurgeParams, want: u64) -> Result<u64, crate::Failure> {
    let deadline = std::time::Instant::now() + crate::POLL_DEADLINE;
    let mut purged = 0;
    loop {
        purged += cx.backend.purge(req).await?;
        if purged >= want || std::time::Instant::now() > deadline {
            return Ok(purged);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// enqueue_many returns one result per job in input order, and every job is stored with its
/// own payload.
pub async fn enqueue_many_in_order(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let n = 50;
    let jobs = (0..n).map(|i| cx.job(&q).priority(i % 3).json(serde_json::json!({ "i": i }))).collect();
    let out = cx.backend.enqueue_many(jobs).await?;
    ensure_eq!(out.len(), n as usize, "results");
    let distinct: std::collections::HashSet<JobId> = out.iter().map(|e| e.id).collect();
    ensure_eq!(distinct.len(), n as usize, "distinct ids");
    for (i, e) in out.iter().enumerate() {
        ensure!(!e.duplicate, "job {i} marked duplicate");
        let r = cx.record(e.id).await?;
        ensure_eq!(r.payload, serde_json::json!({ "i": i }), "payload of result {i}");
        ensure_eq!(r.priority, i as i32 % 3, "priority of result {i}");
    }
    Ok(())
}

/// Purge is bounded: batch_size x max_batches rows at most per call.
pub async fn purge_bounded(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 5).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 5, ClaimMode::Start).await?;
    let leases: Vec<_> = got.iter().map(|j| j.lease_ref()).collect();
    ensure_eq!(cx.backend.complete(w, &leases).await?.done.len(), 5, "completed");
    let mut req = PurgeParams::new(PurgeTarget::Archive, Duration::ZERO);
    req.queue = Some(q.clone());
    req.batch_size = 1;
    req.max_batches = 2;
    // Wait until all five are older than "now" (the cutoff is strict), then purge once.
    let last = cx.record(got[4].id).await?.finished_at.ok_or("no finished_at")?;
    cx.poll("the database clock to pass the last completion", || {
        let cx = cx.clone();
        async move { Ok(cx.backend.db_now().await? > last) }
    })
    .await?;
    ensure_eq!(cx.backend.purge(&req).await?, 2, "rows purged by one call with batch_size 1, max_batches 2");
    ensure_eq!(cx.queue_stats(&q).await?.archived, 3, "archived rows left");
    Ok(())
}

/// Two requeues of one dead job at once: exactly one Requeued, the other NotFound, one hot row.
pub async fn concurrent_requeue_once(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let ids = cx.enqueue_n(&q, 10).await?;
    for id in &ids {
        ensure_eq!(cx.backend.cancel(*id).await?, CancelOutcome::Cancelled, "cancel");
    }
    let mut tasks = tokio::task::JoinSet::new();
    for id in &ids {
        for _ in 0..2 {
            let (cx, id) = (cx.clone(), *id);
            tasks.spawn(async move { Ok::<_, crate::Failure>((id, cx.backend.requeue_dead(id).await?)) });
        }
    }
    let mut requeued: std::collections::HashMap<JobId, usize> = Default::default();
    while let Some(r) = tasks.join_next().await {
        let (id, out) = r.map_err(|e| crate::Failure(format!("task panicked: {e}")))??;
        if out == RequeueOutcome::Requeued {
            *requeued.entry(id).or_default() += 1;
        }
    }
    for id in &ids {
        ensure_eq!(requeued.get(id).copied().unwrap_or(0), 1, "Requeued outcomes for {id}");
        ensure_eq!(cx.presence(*id).await?, Presence { hot: 1, archive: 0, dead: 0 }, "presence of {id}");
    }
    Ok(())
}

/// Cancels racing start-mode claims: a job is either cancelled before any claim (Cancelled,
/// dead, never handed out) or claimed first (then the cancel is only Requested); never both,
/// and every job stays in exactly one table.
pub async fn cancel_races_claim(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let ids = cx.enqueue_n(&q, 60).await?;
    let claimed = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::<JobId>::new()));
    let mut claimers = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let (cx, q, claimed) = (cx.clone(), q.clone(), claimed.clone());
        claimers.spawn(async move {
            let w = WorkerId::random();
            loop {
                let got = cx.claim(w, &q, 2, ClaimMode::Start).await?;
                if got.is_empty() {
                    if cx.queue_stats(&q).await?.pending == 0 {
                        return Ok::<(), crate::Failure>(());
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                claimed.lock().expect("lock").extend(got.iter().map(|j| j.id));
            }
        });
    }
    let mut outcomes = Vec::new();
    for id in ids.iter().rev() {
        outcomes.push((*id, cx.backend.cancel(*id).await?));
    }
    while let Some(r) = claimers.join_next().await {
        r.map_err(|e| crate::Failure(format!("claimer panicked: {e}")))??;
    }
    let claimed = claimed.lock().expect("lock").clone();
    let (mut cancelled, mut requested) = (0, 0);
    for (id, out) in outcomes {
        let r = cx.record(id).await?;
        ensure_eq!(cx.presence(id).await?.total(), 1, "tables holding {id}");
        match out {
            CancelOutcome::Cancelled => {
                cancelled += 1;
                ensure!(!claimed.contains(&id), "job {id} was cancelled before any claim, yet a claim returned it");
                ensure_eq!(r.location, JobLocation::Dead(DeadReason::Cancelled), "location of cancelled {id}");
            }
            CancelOutcome::Requested => {
                requested += 1;
                ensure!(claimed.contains(&id), "cancel of {id} was Requested but no claim returned it");
                ensure!(r.cancel_requested, "cancel_requested not set on {id}");
            }
            CancelOutcome::NotLive => return Err(format!("cancel of live job {id} returned NotLive").into()),
        }
    }
    ensure_eq!(cancelled + requested, 60, "cancel outcomes");
    Ok(())
}
