//! Outcomes that stand: a repeated `complete` / `fail` with the lease that already wrote the
//! outcome reports that outcome again and writes nothing twice (a reply lost after the commit
//! is retried safely); a stale or different lease still gets `LeaseLost`. And the batch rule
//! for an id listed more than once: every input id lands in exactly one list, done once the
//! write happened for a lease it was listed with (`docs/contract.md`, operations and guards).

use std::collections::HashSet;
use std::time::Duration;

use chokaq_core::testing::Presence;
use chokaq_core::{
    BackendExt, BatchOutcome, ClaimMode, ClaimParams, ClaimedJob, DeadReason, FailAction, FailOutcome, Fenced, JobId,
    JobLocation, JobStatus, Lease, LeaseRef, WorkerId,
};

use crate::ctx::{CaseResult, Ctx, AGED};
use crate::{ensure, ensure_eq};

super::cases!(outcome:
    repeated_start_is_done,
    repeated_complete_is_done,
    repeated_fail_reports_what_stands,
    stale_lease_after_outcome_is_lost,
    other_worker_same_lease_is_lost,
    batch_duplicate_ids_one_list,
    batch_stale_then_current,
);

/// `start` can be repeated: a start whose reply was lost after its commit is retried, and the
/// same lease and worker starting again is done, with the attempt counted once (issue 24,
/// scenario 1: the retry used to report the lease lost, and the worker dropped a job that ran).
/// Another worker's start with the same lease, and a stale lease, stay lost.
pub async fn repeated_start_is_done(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    ensure_eq!(got.len(), 1, "claim");
    let l = got[0].lease_ref();
    ensure_eq!(cx.backend.start_one(w, l).await?, Fenced::Done(()), "start");
    ensure_eq!(cx.backend.start_one(w, l).await?, Fenced::Done(()), "the repeated start");
    let out = cx.backend.start(w, &[l, l]).await?;
    ensure!(out.done == vec![id] && out.lost.is_empty(), "a batch naming it twice: {out:?}");
    let r = cx.record(id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Hot(JobStatus::Processing), 1), "counted once");
    let other = WorkerId::random();
    ensure_eq!(cx.backend.start_one(other, l).await?, Fenced::LeaseLost, "another worker's start");
    let stale = LeaseRef { id, lease: Lease(l.lease.0 + 1_000_000) };
    ensure_eq!(cx.backend.start_one(w, stale).await?, Fenced::LeaseLost, "a stale lease's start");
    ensure_eq!(cx.backend.complete_one(w, l).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.backend.start_one(w, l).await?, Fenced::LeaseLost, "start after the completion");
    let r = cx.record(id).await?;
    ensure_eq!((r.location, r.attempt), (JobLocation::Archived, 1), "archived after one run");
    Ok(())
}

/// Every distinct input id in exactly one of the two lists, each list free of repeats.
fn one_list_each(what: &str, input: &[LeaseRef], done: &[JobId], lost: &[JobId]) -> CaseResult {
    let ids: HashSet<JobId> = input.iter().map(|l| l.id).collect();
    let d: HashSet<JobId> = done.iter().copied().collect();
    let l: HashSet<JobId> = lost.iter().copied().collect();
    ensure!(
        d.len() == done.len() && l.len() == lost.len(),
        "{what}: an id listed twice in one list: {done:?} / {lost:?}"
    );
    ensure!(d.is_disjoint(&l), "{what}: an id in both lists: done {done:?}, lost {lost:?}");
    let all: HashSet<JobId> = d.union(&l).copied().collect();
    ensure_eq!(all, ids, "{what}: the ids reported");
    Ok(())
}

/// A Processing job of a fresh queue claimed by a fresh worker.
async fn started(cx: &Ctx, max_attempts: i32) -> Result<(WorkerId, ClaimedJob), crate::Failure> {
    let q = cx.queue();
    cx.enqueue(cx.job(&q).max_attempts(max_attempts)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    Ok((w, j))
}

/// Complete, then the same complete again (its reply was lost): both report Done, in a batch
/// and through `complete_and_claim` too; one archive row, unchanged by the repeats.
pub async fn repeated_complete_is_done(cx: Ctx) -> CaseResult {
    let (w, j) = started(&cx, 3).await?;
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "first complete");
    let first = cx.record(j.id).await?;
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "repeated complete");
    let out = cx.backend.complete(w, &[j.lease_ref()]).await?;
    ensure_eq!(out, BatchOutcome { done: vec![j.id], lost: vec![] }, "repeated complete (batch)");
    let req = ClaimParams::new(w, vec![cx.queue()], 1, ClaimMode::Reserve);
    let (out, claimed) = cx.backend.complete_and_claim(w, &[j.lease_ref()], &req).await?;
    ensure_eq!(out, BatchOutcome { done: vec![j.id], lost: vec![] }, "repeated complete (complete_and_claim)");
    ensure!(claimed.is_empty(), "claimed from an empty queue: {claimed:?}");
    ensure_eq!(cx.presence(j.id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence");
    let after = cx.record(j.id).await?;
    ensure_eq!(
        (after.finished_at, after.updated_at),
        (first.finished_at, first.updated_at),
        "archive row rewritten by a repeat"
    );
    Ok(())
}

/// Each way a fail can end, then the same fail again: the repeat reports the outcome that
/// stands (the same due time for a retry or a snooze, the same reason for a dead letter) and
/// writes nothing.
pub async fn repeated_fail_reports_what_stands(cx: Ctx) -> CaseResult {
    let hour = Duration::from_secs(3600);
    let cases: Vec<(&str, i32, FailAction)> = vec![
        ("retry", 3, FailAction::Retry { delay: hour, error: "again".into() }),
        ("snooze", 3, FailAction::Snooze { delay: hour }),
        ("retry on the last attempt", 1, FailAction::Retry { delay: hour, error: "last".into() }),
        ("dead letter", 3, FailAction::DeadLetter { reason: DeadReason::Failed, error: "fatal".into() }),
        ("cancelled", 3, FailAction::Cancelled { error: None }),
    ];
    for (what, max_attempts, action) in cases {
        let (w, j) = started(&cx, max_attempts).await?;
        let first = cx.backend.fail(w, j.lease_ref(), action.clone()).await?;
        ensure!(!first.is_lost(), "{what}: first fail lost its lease");
        let before = cx.record(j.id).await?;
        let presence = cx.presence(j.id).await?;
        let again = cx.backend.fail(w, j.lease_ref(), action.clone()).await?;
        ensure_eq!(again, first, "{what}: repeated fail");
        let after = cx.record(j.id).await?;
        ensure_eq!(
            (after.location, after.attempt, after.scheduled_at, after.updated_at, after.last_error.clone()),
            (before.location, before.attempt, before.scheduled_at, before.updated_at, before.last_error.clone()),
            "{what}: the job after the repeat"
        );
        ensure_eq!(cx.presence(j.id).await?, presence, "{what}: presence after the repeat");
    }
    Ok(())
}

/// A lease that did not write the outcome which stands is stale, and gets LeaseLost from
/// complete and fail alike: the old owner of a rescued and re-claimed job (another worker or
/// the same one) after the new owner completed or failed it, and the old owner of a job that
/// rescue put back to Pending.
pub async fn stale_lease_after_outcome_is_lost(cx: Ctx) -> CaseResult {
    let retry = || FailAction::Retry { delay: Duration::from_secs(3600), error: "late".into() };
    for same_worker in [false, true] {
        for new_owner_completes in [true, false] {
            let who = format!(
                "{} worker, new owner {}",
                if same_worker { "same" } else { "other" },
                if new_owner_completes { "completed" } else { "retried" }
            );
            let q = cx.queue();
            let id = cx.enqueue(cx.job(&q).max_attempts(5)).await?;
            let a = WorkerId::random();
            let b = if same_worker { a } else { WorkerId::random() };
            let old = cx.claim_one_started(a, &q).await?;
            cx.age(id, AGED).await?;
            cx.rescue_until_at(id, JobLocation::Hot(JobStatus::Pending)).await?;
            let new = cx.claim_one_started(b, &q).await?;
            ensure!(new.lease != old.lease, "{who}: re-claim kept the lease");
            if new_owner_completes {
                ensure_eq!(cx.backend.complete_one(b, new.lease_ref()).await?, Fenced::Done(()), "{who}: new owner");
            } else {
                let out = cx.backend.fail(b, new.lease_ref(), retry()).await?;
                ensure!(matches!(out, Fenced::Done(FailOutcome::Retried { .. })), "{who}: new owner's retry: {out:?}");
            }
            let before = cx.presence(id).await?;
            ensure_eq!(cx.backend.complete_one(a, old.lease_ref()).await?, Fenced::LeaseLost, "{who}: stale complete");
            ensure_eq!(cx.backend.fail(a, old.lease_ref(), retry()).await?, Fenced::LeaseLost, "{who}: stale fail");
            ensure_eq!(cx.presence(id).await?, before, "{who}: presence after the stale calls");
        }
    }
    // Rescued back to Pending, not re-claimed: the dead worker's late outcome is not the one
    // that stands.
    let (w, j) = started(&cx, 5).await?;
    cx.age(j.id, AGED).await?;
    cx.rescue_until_at(j.id, JobLocation::Hot(JobStatus::Pending)).await?;
    ensure_eq!(cx.backend.fail(w, j.lease_ref(), retry()).await?, Fenced::LeaseLost, "fail after rescue");
    let snooze = FailAction::Snooze { delay: Duration::from_secs(3600) };
    ensure_eq!(cx.backend.fail(w, j.lease_ref(), snooze).await?, Fenced::LeaseLost, "snooze after rescue");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::LeaseLost, "complete after rescue");
    ensure_eq!(cx.record(j.id).await?.location, JobLocation::Hot(JobStatus::Pending), "location after them");
    Ok(())
}

/// Another worker repeating the owner's complete with the owner's lease is not the owner:
/// LeaseLost, also after the owner completed.
pub async fn other_worker_same_lease_is_lost(cx: Ctx) -> CaseResult {
    let (w, j) = started(&cx, 3).await?;
    let other = WorkerId::random();
    ensure_eq!(cx.backend.complete_one(other, j.lease_ref()).await?, Fenced::LeaseLost, "before the owner");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "owner");
    ensure_eq!(cx.backend.complete_one(other, j.lease_ref()).await?, Fenced::LeaseLost, "after the owner");
    let (w, j) = started(&cx, 3).await?;
    let dead = FailAction::DeadLetter { reason: DeadReason::Failed, error: "fatal".into() };
    ensure!(!cx.backend.fail(w, j.lease_ref(), dead.clone()).await?.is_lost(), "owner's dead letter");
    ensure_eq!(cx.backend.fail(other, j.lease_ref(), dead).await?, Fenced::LeaseLost, "other worker's repeat");
    Ok(())
}

/// An id listed twice with the same lease, in every batch operation: it is reported once, in
/// `done`, and written once.
pub async fn batch_duplicate_ids_one_list(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 2).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 2, ClaimMode::Reserve).await?;
    ensure_eq!(got.len(), 2, "claimed");
    let (a, b) = (got[0].lease_ref(), got[1].lease_ref());
    let input = [a, a, b, a];
    let out = cx.backend.start(w, &input).await?;
    one_list_each("start", &input, &out.done, &out.lost)?;
    ensure_eq!(out.lost, Vec::<JobId>::new(), "start: lost");
    ensure_eq!(cx.record(a.id).await?.attempt, 1, "attempt after a start listed three times");
    let hb = cx.backend.heartbeat(w, &input).await?;
    one_list_each("heartbeat", &input, &hb.held, &hb.lost)?;
    ensure_eq!(hb.lost, Vec::<JobId>::new(), "heartbeat: lost");
    let out = cx.backend.complete(w, &input).await?;
    one_list_each("complete", &input, &out.done, &out.lost)?;
    ensure_eq!(out.lost, Vec::<JobId>::new(), "complete: lost");
    for l in [a, b] {
        ensure_eq!(cx.presence(l.id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence of {}", l.id);
    }
    // Release, on a fresh pair.
    cx.enqueue_n(&q, 2).await?;
    let got = cx.claim(w, &q, 2, ClaimMode::Reserve).await?;
    ensure_eq!(got.len(), 2, "claimed for release");
    let (a, b) = (got[0].lease_ref(), got[1].lease_ref());
    let input = [b, a, b];
    let out = cx.backend.release(w, &input).await?;
    one_list_each("release", &input, &out.done, &out.lost)?;
    ensure_eq!(out.lost, Vec::<JobId>::new(), "release: lost");
    Ok(())
}

/// An id listed with a stale lease and with its current one, in either order: the current
/// lease's write happens, and the id is done (once).
pub async fn batch_stale_then_current(cx: Ctx) -> CaseResult {
    for stale_first in [true, false] {
        let order = if stale_first { "stale first" } else { "current first" };
        let q = cx.queue();
        cx.enqueue_n(&q, 2).await?;
        let w = WorkerId::random();
        let got = cx.claim(w, &q, 2, ClaimMode::Reserve).await?;
        ensure_eq!(got.len(), 2, "claimed");
        let (a, b) = (got[0].lease_ref(), got[1].lease_ref());
        let stale = LeaseRef { id: a.id, lease: Lease(a.lease.0 + 1_000_000) };
        let input = if stale_first { vec![stale, a, b] } else { vec![a, stale, b] };
        let out = cx.backend.start(w, &input).await?;
        one_list_each(&format!("start, {order}"), &input, &out.done, &out.lost)?;
        ensure_eq!(out.lost, Vec::<JobId>::new(), "start, {order}: lost");
        let hb = cx.backend.heartbeat(w, &input).await?;
        one_list_each(&format!("heartbeat, {order}"), &input, &hb.held, &hb.lost)?;
        ensure_eq!(hb.lost, Vec::<JobId>::new(), "heartbeat, {order}: lost");
        let out = cx.backend.complete(w, &input).await?;
        one_list_each(&format!("complete, {order}"), &input, &out.done, &out.lost)?;
        ensure_eq!(out.lost, Vec::<JobId>::new(), "complete, {order}: lost");
        ensure_eq!(cx.presence(a.id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence, {order}");
        // And a batch with only a stale lease for an id: lost, nothing written.
        cx.enqueue_n(&q, 1).await?;
        let j = cx.claim_one_started(w, &q).await?;
        let stale = LeaseRef { id: j.id, lease: Lease(j.lease.0 + 1_000_000) };
        let input = [stale, stale];
        let out = cx.backend.complete(w, &input).await?;
        one_list_each(&format!("complete of a stale pair, {order}"), &input, &out.done, &out.lost)?;
        ensure_eq!(out.lost, vec![j.id], "complete of a stale pair, {order}: lost");
        ensure_eq!(cx.presence(j.id).await?, Presence { hot: 1, archive: 0, dead: 0 }, "stale pair, {order}");
    }
    Ok(())
}
