//! `complete_and_claim`: its completing half is fenced exactly as `complete` (a stale, forged
//! or foreign lease in the list is lost and writes nothing), its claiming half follows every
//! rule of `claim` (pause, schedule, order), the claim's cap count already sees the
//! completions of the same call, and a cap holds strictly while completions ride on claims.
//! PostgreSQL overrides the operation with one function call and SQL Server with one batch
//! (both hand a freed cap slot on without the counting lock); the other backends use the
//! trait's default (the two calls in turn): the same cases run on all of them.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::testing::Presence;
use chokaq_core::{
    BackendExt, ClaimMode, ClaimParams, ClaimedJob, ErrorKind, Fenced, JobId, JobLocation, JobStatus, Lease, LeaseRef,
    QueueName, WorkerId,
};

use crate::ctx::{CaseResult, Ctx, Failure, AGED};
use crate::{ensure, ensure_eq};

super::cases!(complete_and_claim:
    completes_then_claims,
    completes_and_claims_nothing,
    stale_lease_is_lost,
    claim_sees_its_completions,
    lowered_cap_hands_nothing_on,
    claim_respects_pause_schedule_order,
    bad_request_writes_nothing,
    race_cap,
);

fn params(worker: WorkerId, queues: &[&QueueName], limit: u32, mode: ClaimMode) -> ClaimParams {
    ClaimParams::new(worker, queues.iter().map(|q| (*q).clone()).collect(), limit, mode)
}

fn sorted(mut ids: Vec<JobId>) -> Vec<JobId> {
    ids.sort();
    ids
}

/// The held jobs are archived, then the claim hands out the next ones in the mode asked for;
/// with nothing left to claim it still completes; with nothing to complete it is a claim.
pub async fn completes_then_claims(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let ids = cx.enqueue_n(&q, 4).await?;
    let w = WorkerId::random();
    let first = cx.claim(w, &q, 2, ClaimMode::Start).await?;
    ensure_eq!(first.len(), 2, "first claim");
    let leases: Vec<LeaseRef> = first.iter().map(ClaimedJob::lease_ref).collect();
    let (out, next) = cx.backend.complete_and_claim(w, &leases, &params(w, &[&q], 2, ClaimMode::Start)).await?;
    ensure_eq!(sorted(out.done.clone()), sorted(first.iter().map(|j| j.id).collect()), "completed ids");
    ensure!(out.lost.is_empty(), "lost ids: {:?}", out.lost);
    ensure_eq!(next.len(), 2, "claimed along");
    for j in &first {
        ensure_eq!(cx.presence(j.id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "completed job {}", j.id);
    }
    for j in &next {
        ensure!(!first.iter().any(|f| f.id == j.id), "a completed job was claimed again: {}", j.id);
        ensure_eq!((j.status, j.attempt, j.worker_id), (JobStatus::Processing, 1, w), "claimed job {}", j.id);
        let r = cx.record(j.id).await?;
        ensure_eq!((r.location, r.lease), (JobLocation::Hot(JobStatus::Processing), Some(j.lease)), "stored {}", j.id);
    }
    // The queue is dry: the completions are still written, nothing is claimed.
    let leases: Vec<LeaseRef> = next.iter().map(ClaimedJob::lease_ref).collect();
    let (out, none) = cx.backend.complete_and_claim(w, &leases, &params(w, &[&q], 5, ClaimMode::Reserve)).await?;
    ensure_eq!(out.done.len(), 2, "completed with nothing left to claim");
    ensure!(none.is_empty(), "claimed from a dry queue: {none:?}");
    for id in ids {
        ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "job {id} at the end");
    }
    // Nothing to complete: a plain claim (Reserve: Fetched, attempt 0).
    let q2 = cx.queue_named("plain");
    let id = cx.enqueue(cx.job(&q2)).await?;
    let (out, got) = cx.backend.complete_and_claim(w, &[], &params(w, &[&q2], 3, ClaimMode::Reserve)).await?;
    ensure!(out.done.is_empty() && out.lost.is_empty(), "outcome of an empty completion list: {out:?}");
    ensure_eq!(
        got.iter().map(|j| (j.id, j.status, j.attempt)).collect::<Vec<_>>(),
        vec![(id, JobStatus::Fetched, 0)],
        "claimed"
    );
    Ok(())
}

/// Issue 37: a call that completes and claims nothing answers with its completions and an
/// empty claim, whatever left the claim empty: a dry queue (in each claim mode, and with a
/// forged lease beside the good ones, then with only a forged one: nothing done either), a
/// paused queue, a full cap (the completions being of another queue). Exact counts each
/// time. (SQL Server's reply to such a call is the completed ids, then an empty result set:
/// a reader that dropped the empty set failed every one of these calls.)
pub async fn completes_and_claims_nothing(cx: Ctx) -> CaseResult {
    let w = WorkerId::random();
    // A dry queue, each mode.
    for (mode, label) in [(ClaimMode::Start, "start"), (ClaimMode::Reserve, "reserve"), (ClaimMode::Hold, "hold")] {
        let q = cx.queue_named(&format!("dry{label}"));
        let ids = cx.enqueue_n(&q, 2).await?;
        let held = cx.claim(w, &q, 2, ClaimMode::Start).await?;
        ensure_eq!(held.len(), 2, "{mode:?}: held");
        let leases: Vec<LeaseRef> = held.iter().map(ClaimedJob::lease_ref).collect();
        let (out, got) = cx.backend.complete_and_claim(w, &leases, &params(w, &[&q], 3, mode)).await?;
        ensure_eq!(sorted(out.done.clone()), sorted(ids.clone()), "{mode:?}: done ids from a dry queue");
        ensure!(out.lost.is_empty(), "{mode:?}: lost ids: {:?}", out.lost);
        ensure_eq!(got.len(), 0, "{mode:?}: claimed from a dry queue");
        let s = cx.queue_stats(&q).await?;
        ensure_eq!(
            (s.pending, s.fetched + s.processing, s.archived),
            (0, 0, 2),
            "{mode:?}: (pending, active, archived)"
        );
    }
    // A dry queue with a forged lease beside a good one, then with the forged one alone.
    let q = cx.queue_named("dryforged");
    cx.enqueue_n(&q, 2).await?;
    let held = cx.claim(w, &q, 2, ClaimMode::Start).await?;
    ensure_eq!(held.len(), 2, "held before the forged lease");
    let forged = LeaseRef { id: held[1].id, lease: Lease(held[1].lease.0 + 1_000_000) };
    let (out, got) = cx
        .backend
        .complete_and_claim(w, &[held[0].lease_ref(), forged], &params(w, &[&q], 3, ClaimMode::Start))
        .await?;
    ensure_eq!(
        (out.done.clone(), out.lost.clone(), got.len()),
        (vec![held[0].id], vec![held[1].id], 0),
        "(done, lost, claimed) with a forged lease"
    );
    let (out, got) = cx.backend.complete_and_claim(w, &[forged], &params(w, &[&q], 3, ClaimMode::Start)).await?;
    ensure_eq!(
        (out.done.len(), out.lost.clone(), got.len()),
        (0, vec![held[1].id], 0),
        "(done, lost, claimed) with only a forged lease"
    );
    ensure_eq!(cx.record(held[1].id).await?.lease, Some(held[1].lease), "the forged lease's job keeps its lease");
    // A paused queue: the completions are written, the waiting job stays.
    let q = cx.queue_named("paused");
    cx.enqueue_n(&q, 3).await?;
    let held = cx.claim(w, &q, 2, ClaimMode::Start).await?;
    ensure_eq!(held.len(), 2, "held before the pause");
    cx.backend.pause(&q).await?;
    let leases: Vec<LeaseRef> = held.iter().map(ClaimedJob::lease_ref).collect();
    let (out, got) = cx.backend.complete_and_claim(w, &leases, &params(w, &[&q], 3, ClaimMode::Start)).await?;
    ensure_eq!(sorted(out.done.clone()), sorted(held.iter().map(|j| j.id).collect()), "done ids in a paused queue");
    ensure_eq!((out.lost.len(), got.len()), (0, 0), "(lost, claimed) in a paused queue");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.pending, s.fetched + s.processing, s.archived), (1, 0, 2), "paused: (pending, active, archived)");
    // A full cap: another worker holds the cap of 2; this worker completes jobs of another
    // queue and claims from the capped one.
    let (capped, other) = (cx.queue_named("capped"), cx.queue_named("other"));
    cx.enqueue_n(&capped, 4).await?;
    cx.backend.set_max_workers(&capped, Some(2)).await?;
    let holder = WorkerId::random();
    ensure_eq!(cx.claim(holder, &capped, 4, ClaimMode::Start).await?.len(), 2, "the cap's holder");
    let other_ids = cx.enqueue_n(&other, 2).await?;
    let held = cx.claim(w, &other, 2, ClaimMode::Start).await?;
    ensure_eq!(held.len(), 2, "held in the other queue");
    let leases: Vec<LeaseRef> = held.iter().map(ClaimedJob::lease_ref).collect();
    let (out, got) = cx.backend.complete_and_claim(w, &leases, &params(w, &[&capped], 3, ClaimMode::Start)).await?;
    ensure_eq!(sorted(out.done.clone()), sorted(other_ids), "done ids beside a full cap");
    ensure_eq!((out.lost.len(), got.len()), (0, 0), "(lost, claimed) from a full cap");
    let s = cx.queue_stats(&capped).await?;
    ensure_eq!((s.pending, s.fetched + s.processing, s.archived), (2, 2, 0), "capped: (pending, active, archived)");
    Ok(())
}

/// The completing half is fenced: a stale lease (the job was rescued and re-claimed by
/// another worker), a lease never handed out, another worker's job and an unknown id are
/// lost and write nothing, while the good lease of the same list is archived; the new owner's
/// lease still holds. Nothing lost frees a cap slot for the claiming half.
pub async fn stale_lease_is_lost(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let (a, b) = (WorkerId::random(), WorkerId::random());
    let stale_id = cx.enqueue(cx.job(&q)).await?;
    let old = cx.claim_one_started(a, &q).await?;
    ensure_eq!(old.id, stale_id, "first claim");
    cx.age(stale_id, AGED).await?;
    cx.rescue_until_at(stale_id, JobLocation::Hot(JobStatus::Pending)).await?;
    let new = cx.claim_one_started(b, &q).await?;
    ensure!(new.id == stale_id && new.lease > old.lease, "re-claim by b: {new:?} after {old:?}");
    cx.enqueue_n(&q, 3).await?;
    let mine = cx.claim(a, &q, 2, ClaimMode::Start).await?;
    ensure_eq!(mine.len(), 2, "a's claim");
    let theirs = cx.claim_one_started(b, &q).await?;
    let (good, forged_job) = (&mine[0], &mine[1]);
    let forged = LeaseRef { id: forged_job.id, lease: Lease(forged_job.lease.0 + 1_000_000) };
    let unknown = LeaseRef { id: JobId::new(), lease: good.lease };
    // Four hot jobs are held now (new, good, forged_job, theirs): a cap of 4 is full, and only
    // the one good completion may free a slot for the claim.
    cx.enqueue_n(&q, 3).await?;
    cx.backend.set_max_workers(&q, Some(4)).await?;
    let list = [old.lease_ref(), good.lease_ref(), forged, theirs.lease_ref(), unknown];
    let (out, got) = cx.backend.complete_and_claim(a, &list, &params(a, &[&q], 5, ClaimMode::Start)).await?;
    ensure_eq!(out.done, vec![good.id], "done ids");
    ensure_eq!(sorted(out.lost.clone()), sorted(vec![old.id, forged.id, theirs.id, unknown.id]), "lost ids");
    ensure_eq!(got.len(), 1, "claimed with one slot freed under cap 4 (the lost leases free none)");
    ensure_eq!(cx.presence(good.id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "the good one");
    for (what, j, owner) in [("stale", &new, b), ("forged", forged_job, a), ("another worker's", &theirs, b)] {
        let r = cx.record(j.id).await?;
        ensure_eq!(
            (r.location, r.lease, r.worker_id),
            (JobLocation::Hot(JobStatus::Processing), Some(j.lease), Some(owner)),
            "the job of the {what} lease after complete_and_claim"
        );
        ensure_eq!(cx.presence(j.id).await?, Presence { hot: 1, archive: 0, dead: 0 }, "the {what} one");
    }
    ensure_eq!(cx.backend.complete_one(b, new.lease_ref()).await?, Fenced::Done(()), "the new owner's complete");
    ensure_eq!(cx.backend.complete_one(b, theirs.lease_ref()).await?, Fenced::Done(()), "b's own complete");
    ensure_eq!(cx.backend.complete_one(a, forged_job.lease_ref()).await?, Fenced::Done(()), "a's real lease");
    Ok(())
}

/// The claim's cap count already sees the completions of the same call: a worker holding the
/// whole cap completes its jobs and gets as many new ones in one call (a backend that claims
/// before it completes gets none), never more than the cap.
pub async fn claim_sees_its_completions(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 9).await?;
    cx.backend.set_max_workers(&q, Some(2)).await?;
    let w = WorkerId::random();
    let mut held = cx.claim(w, &q, 5, ClaimMode::Start).await?;
    ensure_eq!(held.len(), 2, "claim under cap 2");
    for (round, mode) in [ClaimMode::Start, ClaimMode::Reserve, ClaimMode::Start].into_iter().enumerate() {
        let leases: Vec<LeaseRef> = held.iter().map(ClaimedJob::lease_ref).collect();
        let (out, got) = cx.backend.complete_and_claim(w, &leases, &params(w, &[&q], 5, mode)).await?;
        ensure_eq!(out.done.len(), 2, "round {round}: completed");
        ensure_eq!(got.len(), 2, "round {round}: claimed in the same call with the cap (2) freed by its completions");
        let s = cx.queue_stats(&q).await?;
        ensure_eq!(s.fetched + s.processing, 2, "round {round}: active jobs under cap 2 ({s:?})");
        held = got;
        if mode == ClaimMode::Reserve {
            let started = cx.backend.start(w, &held.iter().map(ClaimedJob::lease_ref).collect::<Vec<_>>()).await?;
            ensure_eq!(started.done.len(), 2, "round {round}: started");
        }
    }
    // One of the two completions is lost: one slot frees, one job is claimed.
    let forged = LeaseRef { id: held[1].id, lease: Lease(held[1].lease.0 + 1_000_000) };
    let (out, got) = cx
        .backend
        .complete_and_claim(w, &[held[0].lease_ref(), forged], &params(w, &[&q], 5, ClaimMode::Start))
        .await?;
    ensure_eq!((out.done.len(), out.lost.len(), got.len()), (1, 1, 1), "(done, lost, claimed) with one forged lease");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.fetched + s.processing, s.archived), (2, 7), "(active, archived) at the end");
    Ok(())
}

/// A completion hands its slot on only while the cap has room for it: with the cap lowered
/// below what runs, the completions of `complete_and_claim` claim nothing until the count is
/// under the new cap, then exactly the room there is. (PostgreSQL hands a freed slot on
/// without the queue's row lock, so this checks that its handoff still counts: one that
/// trusted its completions alone would run two jobs under a cap of 1.)
pub async fn lowered_cap_hands_nothing_on(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 6).await?;
    cx.backend.set_max_workers(&q, Some(3)).await?;
    let w = WorkerId::random();
    let held = cx.claim(w, &q, 3, ClaimMode::Start).await?;
    ensure_eq!(held.len(), 3, "claim under cap 3");
    cx.backend.set_max_workers(&q, Some(1)).await?;
    for (i, (job, want)) in held.iter().zip([0, 0, 1]).enumerate() {
        let (out, got) =
            cx.backend.complete_and_claim(w, &[job.lease_ref()], &params(w, &[&q], 1, ClaimMode::Start)).await?;
        ensure_eq!((out.done.len(), got.len()), (1, want), "completion {i} under the lowered cap 1: (done, claimed)");
        let s = cx.queue_stats(&q).await?;
        ensure_eq!(s.fetched + s.processing, (2 - i as u64).max(1), "completion {i}: active jobs ({s:?})");
    }
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.fetched + s.processing, s.archived, s.pending), (1, 3, 2), "(active, archived, pending) at the end");
    Ok(())
}

/// The claiming half obeys every claim rule: a paused or inactive queue gives nothing (also
/// right after the call completed one of its jobs, and inside a claim naming an open queue),
/// a job not yet due stays, and the claimed jobs come in claim order (priority DESC, due time
/// ASC, id ASC).
pub async fn claim_respects_pause_schedule_order(cx: Ctx) -> CaseResult {
    let (q, open) = (cx.queue(), cx.queue_named("open"));
    let w = WorkerId::random();
    cx.enqueue_n(&q, 3).await?;
    let held = cx.claim(w, &q, 3, ClaimMode::Start).await?;
    ensure_eq!(held.len(), 3, "held");
    let later = cx.enqueue_n(&q, 2).await?;
    cx.backend.pause(&q).await?;
    let (out, got) =
        cx.backend.complete_and_claim(w, &[held[0].lease_ref()], &params(w, &[&q], 10, ClaimMode::Start)).await?;
    ensure_eq!(out.done, vec![held[0].id], "completed in a paused queue (pause stops claims, not completions)");
    ensure!(got.is_empty(), "claimed from a paused queue: {got:?}");
    let open_ids = cx.enqueue_n(&open, 2).await?;
    let (out, got) = cx
        .backend
        .complete_and_claim(w, &[held[1].lease_ref()], &params(w, &[&q, &open], 10, ClaimMode::Reserve))
        .await?;
    ensure_eq!(out.done, vec![held[1].id], "completed");
    ensure_eq!(sorted(got.iter().map(|j| j.id).collect()), sorted(open_ids), "claimed over a paused and an open queue");
    cx.backend.resume(&q).await?;
    cx.backend.control_queue(&q, chokaq_core::QueueControl::Deactivate).await?;
    let (_, got) = cx.backend.complete_and_claim(w, &[], &params(w, &[&q], 10, ClaimMode::Start)).await?;
    ensure!(got.is_empty(), "claimed from an inactive queue: {got:?}");
    cx.backend.control_queue(&q, chokaq_core::QueueControl::Activate).await?;
    // Take the two waiting jobs out of the way, then order and schedule on fresh jobs.
    let (_, got) = cx.backend.complete_and_claim(w, &[], &params(w, &[&q], 10, ClaimMode::Start)).await?;
    ensure_eq!(sorted(got.iter().map(|j| j.id).collect()), sorted(later), "claimed after resume and activate");
    let done: Vec<LeaseRef> = got.iter().map(ClaimedJob::lease_ref).chain([held[2].lease_ref()]).collect();
    let now = cx.backend.db_now().await?;
    let low = cx.enqueue(cx.job(&q)).await?;
    let high = cx.enqueue(cx.job(&q).priority(7)).await?;
    let early = cx.enqueue(cx.job(&q).run_at(now - chrono::Duration::hours(1))).await?;
    let future = cx.enqueue(cx.job(&q).run_at(now + chrono::Duration::hours(1))).await?;
    let (out, got) = cx.backend.complete_and_claim(w, &done, &params(w, &[&q], 10, ClaimMode::Reserve)).await?;
    ensure_eq!(out.done.len(), 3, "completed");
    ensure_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![high, early, low], "claim order (high, early, low)");
    ensure_eq!(cx.record(future).await?.location, JobLocation::Hot(JobStatus::Pending), "the job due in an hour");
    Ok(())
}

/// A bad claim request (limit 0, over the maximum, no queue) is `InvalidInput` and writes
/// nothing: the completions of the same call stay unwritten.
pub async fn bad_request_writes_nothing(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 2).await?;
    let w = WorkerId::random();
    let held = cx.claim_one_started(w, &q).await?;
    let bad = [
        ("limit 0", params(w, &[&q], 0, ClaimMode::Start)),
        ("limit over the maximum", params(w, &[&q], chokaq_core::MAX_CLAIM_LIMIT + 1, ClaimMode::Start)),
        ("no queue", params(w, &[], 1, ClaimMode::Start)),
    ];
    for (what, req) in bad {
        match cx.backend.complete_and_claim(w, &[held.lease_ref()], &req).await {
            Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "error kind for {what} ({e})"),
            Ok(r) => return Err(Failure(format!("complete_and_claim with {what} was accepted: {r:?}"))),
        }
        let r = cx.record(held.id).await?;
        ensure_eq!((r.location, r.lease), (JobLocation::Hot(JobStatus::Processing), Some(held.lease)), "after {what}");
        let s = cx.queue_stats(&q).await?;
        ensure_eq!((s.pending, s.processing, s.archived), (1, 1, 0), "(pending, processing, archived) after {what}");
    }
    let (out, got) =
        cx.backend.complete_and_claim(w, &[held.lease_ref()], &params(w, &[&q], 1, ClaimMode::Start)).await?;
    ensure!(out.done == vec![held.id] && got.len() == 1, "the good call: {out:?}, claimed {got:?}");
    Ok(())
}

/// The cap race with completions riding on claims: many workers, each completing what it
/// held in the call that claims its next jobs, against caps of 1 and 3 (some claim in
/// Reserve mode and start, some plain claim and complete alone, so both paths race). An
/// in-process count goes up after a call returns and down before the completions are sent:
/// it can pass the cap only if the backend let too many jobs out; a stats watcher checks the
/// database side. The first overshoot ends the case at once.
pub async fn race_cap(cx: Ctx) -> CaseResult {
    for cap in [1u32, 3] {
        for round in 0..cx.stress.rounds.div_ceil(2) {
            race_round(&cx, cap, round).await.map_err(|e| Failure(format!("cap {cap}, round {round}: {e}")))?;
        }
    }
    Ok(())
}

async fn race_round(cx: &Ctx, cap: u32, round: usize) -> CaseResult {
    let q = cx.queue_named(&format!("cap{cap}r{round}"));
    let jobs = (cap as usize * 12).max(40);
    cx.enqueue_n(&q, jobs).await?;
    cx.backend.set_max_workers(&q, Some(cap)).await?;
    let held = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    // Set when a task fails: everyone stops at once.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..cx.stress.claimers.max(6) {
        let (cx, q, held, done, stop) = (cx.clone(), q.clone(), held.clone(), done.clone(), stop.clone());
        tasks.spawn(async move {
            let w = WorkerId::random();
            let mut mine: Vec<LeaseRef> = Vec::new();
            let plain = t % 4 == 3;
            let mut progress = crate::cases::Progress::new();
            while !stop.load(Ordering::SeqCst) && (done.load(Ordering::SeqCst) < jobs as u64 || !mine.is_empty()) {
                ensure!(
                    !progress.stalled(done.load(Ordering::SeqCst)),
                    "no job finished for 60 s: {} of {jobs} jobs done, this worker holds {}",
                    done.load(Ordering::SeqCst),
                    mine.len()
                );
                let mode = if t % 3 == 0 { ClaimMode::Reserve } else { ClaimMode::Start };
                let req = ClaimParams::new(w, vec![q.clone()], cap + 1, mode);
                held.fetch_sub(mine.len() as i64, Ordering::SeqCst);
                let (out, got) = if plain && !mine.is_empty() {
                    (cx.backend.complete(w, &mine).await?, Vec::new())
                } else {
                    cx.backend.complete_and_claim(w, &mine, &req).await?
                };
                ensure!(out.lost.is_empty(), "completions lost their leases: {:?}", out.lost);
                ensure_eq!(out.done.len(), mine.len(), "completed");
                done.fetch_add(out.done.len() as u64, Ordering::SeqCst);
                ensure!(got.len() as u32 <= cap, "one call returned {} jobs of a queue capped at {cap}", got.len());
                let now_held = held.fetch_add(got.len() as i64, Ordering::SeqCst) + got.len() as i64;
                ensure!(now_held <= i64::from(cap), "{now_held} jobs were held at once by workers");
                mine = got.iter().map(ClaimedJob::lease_ref).collect();
                if mode == ClaimMode::Reserve && !mine.is_empty() {
                    let s = cx.backend.start(w, &mine).await?;
                    ensure!(s.lost.is_empty(), "start lost leases {:?}", s.lost);
                }
                if mine.is_empty() {
                    tokio::task::yield_now().await;
                } else {
                    // The "work", so that calls overlap.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            Ok::<(), Failure>(())
        });
    }
    // The database's view, while the race runs.
    {
        let (cx, q, done, stop) = (cx.clone(), q.clone(), done.clone(), stop.clone());
        tasks.spawn(async move {
            let mut progress = crate::cases::Progress::new();
            while !stop.load(Ordering::SeqCst) && done.load(Ordering::SeqCst) < jobs as u64 {
                let s = cx.queue_stats(&q).await?;
                ensure!(
                    s.fetched + s.processing <= u64::from(cap),
                    "stats showed {} active jobs ({s:?})",
                    s.fetched + s.processing
                );
                ensure!(
                    !progress.stalled(done.load(Ordering::SeqCst)),
                    "no job finished for 60 s: {} of {jobs} jobs done",
                    done.load(Ordering::SeqCst)
                );
                tokio::task::yield_now().await;
            }
            Ok::<(), Failure>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r.map_err(|e| Failure(format!("task panicked: {e}"))).and_then(|r| r) {
            stop.store(true, Ordering::SeqCst);
            tasks.abort_all();
            return Err(e);
        }
    }
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.archived, s.fetched + s.processing), (jobs as u64, 0), "(archived, active) at the end");
    Ok(())
}
