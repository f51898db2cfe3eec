//! Lease / fencing: a worker that lost its lease can neither complete, fail, heartbeat,
//! start nor release, and the new owner's outcome stands.

use chokaq_core::testing::Presence;
use chokaq_core::{
    BackendExt, CancelOutcome, ClaimMode, ClaimedJob, DeadReason, FailAction, Fenced, JobLocation, JobStatus, Lease,
    LeaseRef, WorkerId,
};

use crate::ctx::{CaseResult, Ctx, AGED};
use crate::{ensure, ensure_eq};

super::cases!(lease:
    stale_complete_is_lost,
    stale_heartbeat_is_lost,
    stale_fail_is_lost,
    same_worker_stale_copy,
    status_guards,
    wrong_lease_is_lost,
    batch_complete_mixed,
    cancelled_fetched_cannot_start,
    heartbeat_bumps,
    concurrent_double_complete,
    rescue_races_complete,
);

/// Claims (start mode) a fresh job as worker A, ages it, rescues it and lets worker B claim
/// it again: returns (A's stale claim, B's claim).
async fn rescued_and_reclaimed(cx: &Ctx) -> Result<(WorkerId, ClaimedJob, WorkerId, ClaimedJob), crate::Failure> {
    rescued_and_reclaimed_by(cx, false).await
}

/// [`rescued_and_reclaimed`], where B is A itself when `same_worker` (a worker id alone
/// is not a fence: only the lease is).
async fn rescued_and_reclaimed_by(
    cx: &Ctx,
    same_worker: bool,
) -> Result<(WorkerId, ClaimedJob, WorkerId, ClaimedJob), crate::Failure> {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let a = WorkerId::random();
    let b = if same_worker { a } else { WorkerId::random() };
    let old = cx.claim_one_started(a, &q).await?;
    ensure_eq!(old.id, id, "first claim");
    cx.age(id, AGED).await?;
    cx.rescue_until_at(id, JobLocation::Hot(JobStatus::Pending)).await?;
    let new = cx.claim_one_started(b, &q).await?;
    ensure_eq!(new.id, id, "second claim");
    ensure!(new.lease > old.lease, "new lease {} not above old {}", new.lease, old.lease);
    Ok((a, old, b, new))
}

/// After rescue and re-claim, the old owner's complete is LeaseLost and changes nothing; the
/// new owner completes; the job is archived exactly once.
pub async fn stale_complete_is_lost(cx: Ctx) -> CaseResult {
    let (a, old, b, new) = rescued_and_reclaimed(&cx).await?;
    stale_complete_checks(&cx, a, &old, b, &new).await?;
    let (a, old, b, new) = rescued_and_reclaimed_by(&cx, true).await?;
    stale_complete_checks(&cx, a, &old, b, &new).await
}

async fn stale_complete_checks(cx: &Ctx, a: WorkerId, old: &ClaimedJob, b: WorkerId, new: &ClaimedJob) -> CaseResult {
    let out = cx.backend.complete(a, &[old.lease_ref()]).await?;
    ensure!(out.done.is_empty() && out.lost == vec![old.id], "stale complete: {out:?}");
    let r = cx.record(old.id).await?;
    ensure_eq!(r.location, JobLocation::Hot(JobStatus::Processing), "location after a stale complete");
    ensure_eq!(r.lease, Some(new.lease), "lease after a stale complete");
    ensure_eq!(r.worker_id, Some(b), "owner after a stale complete");
    ensure_eq!(cx.backend.complete_one(b, new.lease_ref()).await?, Fenced::Done(()), "new owner's complete");
    ensure_eq!(cx.presence(old.id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence");
    Ok(())
}

/// After rescue and re-claim, the old owner's heartbeat reports the lease lost and does not
/// bump the new owner's heartbeat; the new owner's heartbeat holds. Checked with another
/// worker as the new owner and with the same worker re-claiming (its stale copy).
pub async fn stale_heartbeat_is_lost(cx: Ctx) -> CaseResult {
    for same_worker in [false, true] {
        let (a, old, b, new) = rescued_and_reclaimed_by(&cx, same_worker).await?;
        let who = if same_worker { "same worker" } else { "other worker" };
        // Put the new owner's heartbeat in the past: a stale heartbeat must not refresh it. 30 s,
        // well inside the default zombie timeout (5 min): aged by 5 min, a rescue run meanwhile
        // by another case of the same schema took the job back (heartbeat_at None, seen on
        // SQLite in CI), as in hold_claim_is_fetched_and_heartbeaten before.
        let past = cx.backend.db_now().await? - chrono::Duration::seconds(30);
        cx.force(old.id, chokaq_core::testing::JobPatch { heartbeat_at: Some(Some(past)), ..Default::default() })
            .await?;
        let hb = cx.backend.heartbeat(a, &[old.lease_ref()]).await?;
        ensure!(hb.held.is_empty() && hb.lost == vec![old.id], "stale heartbeat ({who}): {hb:?}");
        let r = cx.record(old.id).await?;
        ensure_eq!(r.heartbeat_at, Some(past), "heartbeat_at after a stale heartbeat ({who})");
        let hb = cx.backend.heartbeat(b, &[new.lease_ref()]).await?;
        ensure!(hb.held == vec![new.id] && hb.lost.is_empty(), "owner's heartbeat ({who}): {hb:?}");
        let r = cx.record(old.id).await?;
        ensure!(r.heartbeat_at.is_some_and(|t| t > past), "owner's heartbeat did not bump heartbeat_at ({who})");
    }
    Ok(())
}

/// After rescue and re-claim, the old owner's fail (retry or dead-letter) is LeaseLost.
pub async fn stale_fail_is_lost(cx: Ctx) -> CaseResult {
    let (a, old, b, new) = rescued_and_reclaimed(&cx).await?;
    let retry = FailAction::Retry { delay: std::time::Duration::from_secs(60), error: "stale".into() };
    ensure_eq!(cx.backend.fail(a, old.lease_ref(), retry).await?, Fenced::LeaseLost, "stale fail(retry)");
    let dead = FailAction::DeadLetter { reason: DeadReason::Failed, error: "stale".into() };
    ensure_eq!(cx.backend.fail(a, old.lease_ref(), dead).await?, Fenced::LeaseLost, "stale fail(dead-letter)");
    let cancel = FailAction::Cancelled { error: None };
    ensure_eq!(cx.backend.fail(a, old.lease_ref(), cancel).await?, Fenced::LeaseLost, "stale fail(cancelled)");
    let r = cx.record(old.id).await?;
    ensure_eq!(r.location, JobLocation::Hot(JobStatus::Processing), "location after stale fails");
    ensure_eq!(r.last_error, None, "last_error after stale fails");
    ensure_eq!(cx.backend.complete_one(b, new.lease_ref()).await?, Fenced::Done(()), "owner's complete");
    Ok(())
}

/// A worker that released a job and claimed it again holds a new lease: its stale buffered
/// copy (old lease, same worker id) cannot start, release or complete it.
pub async fn same_worker_stale_copy(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let first = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    ensure_eq!(first.len(), 1, "first claim");
    ensure_eq!(cx.backend.release_one(w, first[0].lease_ref()).await?, Fenced::Done(()), "release");
    let second = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    ensure!(second.len() == 1 && second[0].id == id, "re-claim: {second:?}");
    ensure!(second[0].lease != first[0].lease, "re-claim kept the lease {}", first[0].lease);
    ensure_eq!(cx.backend.start_one(w, first[0].lease_ref()).await?, Fenced::LeaseLost, "start with the stale copy");
    ensure_eq!(cx.backend.release_one(w, first[0].lease_ref()).await?, Fenced::LeaseLost, "release, stale copy");
    ensure_eq!(cx.backend.start_one(w, second[0].lease_ref()).await?, Fenced::Done(()), "start with the new lease");
    ensure_eq!(cx.backend.complete_one(w, first[0].lease_ref()).await?, Fenced::LeaseLost, "complete, stale copy");
    ensure_eq!(cx.record(id).await?.location, JobLocation::Hot(JobStatus::Processing), "location");
    ensure_eq!(cx.backend.complete_one(w, second[0].lease_ref()).await?, Fenced::Done(()), "complete, new lease");
    Ok(())
}

/// Guards check the status: release needs Fetched; start takes a Fetched job and reports a
/// job it already started done again (repeatable, the attempt counted once); complete,
/// heartbeat and fail take a held job either way (a Fetched one's run counts at its outcome).
pub async fn status_guards(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 3).await?;
    let w = WorkerId::random();
    let fetched = cx.claim(w, &q, 1, ClaimMode::Reserve).await?.remove(0);
    let running = cx.claim_one_started(w, &q).await?;
    ensure_eq!(cx.backend.start_one(w, running.lease_ref()).await?, Fenced::Done(()), "start of a Processing job");
    ensure_eq!(cx.backend.release_one(w, running.lease_ref()).await?, Fenced::LeaseLost, "release of a Processing job");
    let r = cx.record(running.id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Processing), 1), "running job unchanged");
    let hb = cx.backend.heartbeat(w, &[fetched.lease_ref()]).await?;
    ensure_eq!(hb.held, vec![fetched.id], "heartbeat of a Fetched job: held");
    let r = cx.record(fetched.id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Fetched), 0), "fetched job after a heartbeat");
    ensure_eq!(cx.backend.complete_one(w, fetched.lease_ref()).await?, Fenced::Done(()), "complete of a Fetched job");
    let r = cx.record(fetched.id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Archived, 1), "a Fetched job's completion counts its run");
    let third = cx.claim(w, &q, 1, ClaimMode::Reserve).await?.remove(0);
    let fail = FailAction::Retry { delay: std::time::Duration::ZERO, error: "x".into() };
    let out = cx.backend.fail(w, third.lease_ref(), fail).await?;
    ensure!(matches!(out, Fenced::Done(chokaq_core::FailOutcome::Retried { .. })), "fail of a Fetched job: {out:?}");
    let r = cx.record(third.id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Pending), 1), "a Fetched job's failure counts");
    Ok(())
}

/// A lease number that was never handed out for the job (or another job's lease) is lost.
pub async fn wrong_lease_is_lost(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 2).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 2, ClaimMode::Start).await?;
    ensure_eq!(got.len(), 2, "claimed");
    let (j1, j2) = (&got[0], &got[1]);
    let forged = LeaseRef { id: j1.id, lease: Lease(j1.lease.0 + 1_000_000) };
    ensure_eq!(cx.backend.complete_one(w, forged).await?, Fenced::LeaseLost, "complete with a forged lease");
    let crossed = LeaseRef { id: j1.id, lease: j2.lease };
    ensure_eq!(cx.backend.complete_one(w, crossed).await?, Fenced::LeaseLost, "complete with another job's lease");
    let unknown = LeaseRef { id: chokaq_core::JobId::new(), lease: j1.lease };
    ensure_eq!(cx.backend.complete_one(w, unknown).await?, Fenced::LeaseLost, "complete of an unknown id");
    ensure_eq!(cx.record(j1.id).await?.location, JobLocation::Hot(JobStatus::Processing), "j1 unchanged");
    Ok(())
}

/// A batch complete with one stale lease among good ones: the good ones are archived, the
/// stale one is reported lost; every input id is in exactly one list.
pub async fn batch_complete_mixed(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 3).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 3, ClaimMode::Start).await?;
    ensure_eq!(got.len(), 3, "claimed");
    let stale = LeaseRef { id: got[1].id, lease: Lease(got[1].lease.0 + 1_000_000) };
    let out = cx.backend.complete(w, &[got[0].lease_ref(), stale, got[2].lease_ref()]).await?;
    let mut done = out.done.clone();
    done.sort();
    let mut want = vec![got[0].id, got[2].id];
    want.sort();
    ensure_eq!(done, want, "done ids");
    ensure_eq!(out.lost, vec![got[1].id], "lost ids");
    ensure_eq!(cx.presence(got[1].id).await?, Presence { hot: 1, archive: 0, dead: 0 }, "the stale one stays hot");
    Ok(())
}

/// A Fetched job cancelled by an operator: the worker's buffered copy cannot start it.
pub async fn cancelled_fetched_cannot_start(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim(w, &q, 1, ClaimMode::Reserve).await?.remove(0);
    ensure_eq!(cx.backend.cancel(id).await?, CancelOutcome::Cancelled, "cancel of a Fetched job");
    ensure_eq!(cx.backend.start_one(w, j.lease_ref()).await?, Fenced::LeaseLost, "start after cancel");
    ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 0, dead: 1 }, "presence");
    ensure_eq!(cx.record(id).await?.location, JobLocation::Dead(DeadReason::Cancelled), "location");
    Ok(())
}

/// Heartbeat bumps `heartbeat_at` of a held job (and so keeps rescue away).
pub async fn heartbeat_bumps(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let w = WorkerId::random();
    cx.enqueue(cx.job(&q)).await?;
    let j = cx.claim_one_started(w, &q).await?;
    // 30 s: inside the default zombie timeout, so no other case's rescue takes the job back.
    let past = cx.backend.db_now().await? - chrono::Duration::seconds(30);
    cx.force(j.id, chokaq_core::testing::JobPatch { heartbeat_at: Some(Some(past)), ..Default::default() }).await?;
    let before = cx.backend.db_now().await?;
    let hb = cx.backend.heartbeat(w, &[j.lease_ref()]).await?;
    ensure!(hb.held == vec![j.id] && hb.lost.is_empty() && hb.cancel_requested.is_empty(), "heartbeat: {hb:?}");
    let r = cx.record(j.id).await?;
    let res = chrono::Duration::from_std(cx.caps.timestamp_precision.resolution()).unwrap_or_default();
    ensure!(
        r.heartbeat_at.is_some_and(|t| t + res >= before),
        "heartbeat_at {:?} is older than the database clock before the heartbeat ({before})",
        r.heartbeat_at
    );
    Ok(())
}

/// The same completion sent twice at once (a client retry racing the original): both report
/// Done (the second one the outcome that stands), the job is archived exactly once.
pub async fn concurrent_double_complete(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let n = 20;
    cx.enqueue_n(&q, n).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, n as u32, ClaimMode::Start).await?;
    ensure_eq!(got.len(), n, "claimed");
    let mut tasks = tokio::task::JoinSet::new();
    for j in &got {
        for _ in 0..2 {
            let (cx, l) = (cx.clone(), j.lease_ref());
            tasks.spawn(async move { Ok::<_, crate::Failure>((l.id, cx.backend.complete_one(w, l).await?)) });
        }
    }
    let mut done: std::collections::HashMap<chokaq_core::JobId, usize> = Default::default();
    while let Some(r) = tasks.join_next().await {
        let (id, out) = r.map_err(|e| crate::Failure(format!("task panicked: {e}")))??;
        if out == Fenced::Done(()) {
            *done.entry(id).or_default() += 1;
        }
    }
    for j in &got {
        // Both report Done (a repeat of the outcome that stands); exactly one archive row.
        ensure_eq!(done.get(&j.id).copied().unwrap_or(0), 2, "Done outcomes for {}", j.id);
        ensure_eq!(cx.presence(j.id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence of {}", j.id);
    }
    Ok(())
}

/// Rescue racing the owner's completion of an expired job: either the completion wins (the
/// job is archived, rescue left it) or rescue wins (the completion is LeaseLost, the job is
/// Pending) — never both, never neither. Repeated over many jobs.
pub async fn rescue_races_complete(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let n = 30;
    cx.enqueue_n(&q, n).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, n as u32, ClaimMode::Start).await?;
    ensure_eq!(got.len(), n, "claimed");
    for j in &got {
        cx.age(j.id, AGED).await?;
    }
    let rescuer = {
        let cx = cx.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                cx.backend.rescue(&crate::rescue_params()).await?;
                tokio::task::yield_now().await;
            }
            Ok::<(), crate::Failure>(())
        })
    };
    let mut outcomes = Vec::new();
    for j in &got {
        outcomes.push((j.id, cx.backend.complete_one(w, j.lease_ref()).await?));
        tokio::task::yield_now().await;
    }
    rescuer.await.map_err(|e| crate::Failure(format!("rescuer panicked: {e}")))??;
    for (id, out) in outcomes {
        let p = cx.presence(id).await?;
        match out {
            Fenced::Done(()) => ensure_eq!(p, Presence { hot: 0, archive: 1, dead: 0 }, "completed job {id}"),
            Fenced::LeaseLost => {
                ensure_eq!(p, Presence { hot: 1, archive: 0, dead: 0 }, "rescued job {id}");
                ensure_eq!(cx.record(id).await?.location, JobLocation::Hot(JobStatus::Pending), "rescued job {id}");
            }
        }
    }
    Ok(())
}
