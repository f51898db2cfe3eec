//! Keyed: the per-key cap (`key_max_workers`) is a strict bound on Fetched + Processing jobs
//! per concurrency key of a queue, cluster-wide, next to the queue's own cap; a key at its cap
//! never holds back other keys.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chokaq_core::{
    BackendExt, CancelOutcome, ClaimMode, ClaimedJob, DeadReason, ErrorKind, FailAction, Fenced, JobId, JobLocation,
    JobStatus, JobTable, LeaseRef, ListJobsParams, NewJob, QueueControl, QueueName, WorkerId,
};

use crate::child::ChildLine;
use crate::ctx::{CaseResult, Ctx, Failure, AGED};
use crate::{ensure, ensure_eq};

mod race;
use race::{race_processes, race_tasks};

super::cases!(keyed:
    cap_binds_each_key,
    backlog_beyond_the_cap,
    no_head_of_line_blocking,
    counts_fetched_and_processing,
    cap_lowered_while_running,
    cap_zero_and_cleared,
    with_queue_cap,
    key_round_trips,
    repeated_outcomes_keep_count,
    rescue_frees_only_by_moving,
    cancel_frees_only_by_moving,
    sigkill_holder [MULTI_PROCESS],
    race_tasks,
    race_processes [MULTI_PROCESS],
    bad_input,
);

/// A job of `queue` with concurrency key `key` (None: no key) and priority `priority`.
pub(crate) fn keyed_job(cx: &Ctx, queue: &QueueName, key: Option<&str>, priority: i32) -> NewJob {
    let j = cx.job(queue).priority(priority);
    match key {
        Some(k) => j.concurrency_key(k),
        None => j,
    }
}

/// Enqueues `n` jobs of each `(key, n)` in one call; returns the ids in order.
pub(crate) async fn enqueue_keyed(
    cx: &Ctx,
    queue: &QueueName,
    spec: &[(Option<&str>, usize)],
) -> Result<Vec<JobId>, Failure> {
    let mut jobs = Vec::new();
    for (key, n) in spec {
        for _ in 0..*n {
            jobs.push(keyed_job(cx, queue, *key, 0));
        }
    }
    let out = cx.backend.enqueue_many(jobs).await?;
    Ok(out.into_iter().map(|e| e.id).collect())
}

/// Claimed jobs per key (`"-"` for no key).
pub(crate) fn per_key(jobs: &[ClaimedJob]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for j in jobs {
        *m.entry(j.concurrency_key.clone().unwrap_or_else(|| "-".into())).or_insert(0) += 1;
    }
    m
}

fn counts(spec: &[(&str, usize)]) -> BTreeMap<String, usize> {
    spec.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

async fn set_key_cap(cx: &Ctx, q: &QueueName, cap: Option<u32>) -> CaseResult {
    let st = cx.backend.control_queue(q, QueueControl::SetKeyMaxWorkers(cap)).await?;
    ensure_eq!(st.key_max_workers, cap, "key_max_workers returned by control_queue");
    Ok(())
}

/// Cap 2 per key: one batch claim takes two jobs of each key and every key-less job; the
/// stats show the setting and the busiest keys with their running counts.
pub async fn cap_binds_each_key(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    enqueue_keyed(&cx, &q, &[(Some("a"), 5), (Some("b"), 5), (None, 3)]).await?;
    set_key_cap(&cx, &q, Some(2)).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 20, ClaimMode::Reserve).await?;
    ensure_eq!(per_key(&got), counts(&[("-", 3), ("a", 2), ("b", 2)]), "jobs per key of one claim under key cap 2");
    ensure_eq!(cx.claim(w, &q, 20, ClaimMode::Start).await?.len(), 0, "claim with every key at its cap");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.pending, s.fetched), (6, 7), "(pending, fetched)");
    let busiest: Vec<(String, u64)> = s.busiest_keys.iter().map(|k| (k.key.clone(), k.running)).collect();
    ensure_eq!(busiest, vec![("a".to_string(), 2), ("b".to_string(), 2)], "busiest keys (key, running)");
    ensure_eq!(s.settings.and_then(|s| s.key_max_workers), Some(2), "key_max_workers in the stats' settings");
    ensure_eq!(cx.backend.queue_settings(&q).await?.key_max_workers, Some(2), "queue_settings key_max_workers");
    Ok(())
}

/// The cap set before the jobs come: a key's backlog beyond its cap waits (and reads as
/// Pending everywhere: stats, get_job, list_jobs), and every way a slot frees lets exactly as
/// many more through: a cancel of a reserved job, a completion, a dead letter.
pub async fn backlog_beyond_the_cap(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    set_key_cap(&cx, &q, Some(2)).await?;
    let ids = enqueue_keyed(&cx, &q, &[(Some("a"), 6), (Some("b"), 1), (None, 1)]).await?;
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.pending, s.fetched, s.processing), (8, 0, 0), "(pending, fetched, processing) after enqueue");
    for id in &ids {
        ensure_eq!(cx.record(*id).await?.location, JobLocation::Hot(JobStatus::Pending), "location of {id}");
    }
    let mut params = ListJobsParams::new(JobTable::Hot);
    (params.queue, params.status) = (Some(q.clone()), Some(JobStatus::Pending));
    ensure_eq!(cx.backend.list_jobs(&params).await?.jobs.len(), 8, "Pending jobs listed");
    let w = WorkerId::random();
    let first = cx.claim(w, &q, 10, ClaimMode::Reserve).await?;
    ensure_eq!(per_key(&first), counts(&[("-", 1), ("a", 2), ("b", 1)]), "first claim under key cap 2");
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 0, "claim with a at its cap");
    // A cancel of a reserved job of a frees one slot of a.
    let a1 = first.iter().find(|j| j.concurrency_key.as_deref() == Some("a")).ok_or("no job of a")?;
    ensure_eq!(cx.backend.cancel(a1.id).await?, chokaq_core::CancelOutcome::Cancelled, "cancel of a reserved job");
    let next = cx.claim(w, &q, 10, ClaimMode::Start).await?;
    ensure_eq!(per_key(&next), counts(&[("a", 1)]), "claim after the cancel");
    // A dead letter frees one.
    let fatal = FailAction::DeadLetter { reason: DeadReason::Failed, error: "no".into() };
    ensure!(matches!(cx.backend.fail(w, next[0].lease_ref(), fatal).await?, Fenced::Done(_)), "fail lost its lease");
    let after_fail = cx.claim(w, &q, 10, ClaimMode::Start).await?;
    ensure_eq!(per_key(&after_fail), counts(&[("a", 1)]), "claim after the dead letter");
    // Completions free one each; the rest of a drains two at a time at most.
    let mut held: Vec<LeaseRef> = first.iter().filter(|j| j.id != a1.id).map(|j| j.lease_ref()).collect();
    let started = cx.backend.start(w, &held).await?;
    ensure_eq!(started.done.len(), 3, "started the reserved jobs");
    held.push(after_fail[0].lease_ref());
    let mut archived = 0;
    for round in 0..10 {
        let out = cx.backend.complete(w, &held).await?;
        ensure!(out.lost.is_empty(), "round {round}: complete lost {:?}", out.lost);
        archived += out.done.len();
        let got = cx.claim(w, &q, 10, ClaimMode::Start).await?;
        ensure!(per_key(&got).values().all(|&n| n <= 2), "round {round}: {:?}", per_key(&got));
        if got.is_empty() {
            break;
        }
        held = got.iter().map(|j| j.lease_ref()).collect();
    }
    ensure_eq!(archived, 6, "jobs archived (a: 4, b: 1, key-less: 1)");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.pending, s.fetched, s.processing, s.archived, s.dead), (0, 0, 0, 6, 2), "final counts");
    Ok(())
}

/// A key at its cap with many due jobs of the highest priority never holds back the other
/// keys: each claim skips it and takes the next due jobs of other keys, in claim order.
pub async fn no_head_of_line_blocking(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let mut jobs: Vec<NewJob> = (0..30).map(|_| keyed_job(&cx, &q, Some("hot"), 10)).collect();
    for k in 0..5 {
        jobs.push(keyed_job(&cx, &q, Some(&format!("k{k}")), 0));
    }
    jobs.push(keyed_job(&cx, &q, None, 0));
    let ids: Vec<JobId> = cx.backend.enqueue_many(jobs).await?.into_iter().map(|e| e.id).collect();
    set_key_cap(&cx, &q, Some(1)).await?;
    let w = WorkerId::random();
    let first = cx.claim(w, &q, 3, ClaimMode::Start).await?;
    let first_ids: Vec<JobId> = first.iter().map(|j| j.id).collect();
    ensure_eq!(first_ids, vec![ids[0], ids[30], ids[31]], "first claim: the hot key's first job, then k0 and k1");
    let mut rest = Vec::new();
    for _ in 0..4 {
        let got = cx.claim(w, &q, 1, ClaimMode::Start).await?;
        ensure_eq!(got.len(), 1, "a claim of 1 with the hot key at its cap and other keys due");
        rest.push(got[0].id);
    }
    ensure_eq!(rest, ids[32..36].to_vec(), "claims of 1 take k2, k3, k4 and the key-less job, in claim order");
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 0, "claim with only the hot key left, at its cap");
    // The hot key's next job comes when its running one finishes.
    ensure!(cx.backend.complete_one(w, first[0].lease_ref()).await?.done().is_some(), "complete lost its lease");
    let next = cx.claim(w, &q, 10, ClaimMode::Start).await?;
    ensure_eq!(next.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[1]], "claim after the hot job finished");
    Ok(())
}

/// Fetched and Processing both count against a key; completing or releasing frees its slot.
pub async fn counts_fetched_and_processing(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    enqueue_keyed(&cx, &q, &[(Some("a"), 5)]).await?;
    set_key_cap(&cx, &q, Some(2)).await?;
    let w = WorkerId::random();
    let reserved = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    let started = cx.claim(w, &q, 1, ClaimMode::Start).await?;
    ensure!(reserved.len() == 1 && started.len() == 1, "expected one reserved and one started job");
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Hold).await?.len(), 0, "claim with one Fetched + one Processing of a");
    ensure!(cx.backend.complete_one(w, started[0].lease_ref()).await?.done().is_some(), "complete lost its lease");
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Start).await?.len(), 1, "claim after a completion freed a's slot");
    ensure!(cx.backend.release_one(w, reserved[0].lease_ref()).await?.done().is_some(), "release lost its lease");
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Reserve).await?.len(), 1, "claim after a release freed a's slot");
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Reserve).await?.len(), 0, "claim with a at its cap again");
    Ok(())
}

/// Lowering the cap never stops running jobs; new claims of the key wait until its count is
/// under the new cap.
pub async fn cap_lowered_while_running(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    enqueue_keyed(&cx, &q, &[(Some("a"), 6)]).await?;
    set_key_cap(&cx, &q, Some(3)).await?;
    let w = WorkerId::random();
    let running = cx.claim(w, &q, 10, ClaimMode::Start).await?;
    ensure_eq!(running.len(), 3, "claim under key cap 3");
    set_key_cap(&cx, &q, Some(1)).await?;
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 0, "claim right after lowering the cap to 1");
    for (i, j) in running.iter().enumerate() {
        ensure!(cx.backend.complete_one(w, j.lease_ref()).await?.done().is_some(), "complete {i} lost its lease");
        let want = if i == 2 { 1 } else { 0 };
        ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), want, "claim after {} of 3 finished", i + 1);
    }
    Ok(())
}

/// Cap 0 lets no keyed job through (key-less ones still run); clearing the cap lets all of
/// them through.
pub async fn cap_zero_and_cleared(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    enqueue_keyed(&cx, &q, &[(Some("a"), 3), (Some("b"), 3), (None, 2)]).await?;
    set_key_cap(&cx, &q, Some(0)).await?;
    let w = WorkerId::random();
    ensure_eq!(per_key(&cx.claim(w, &q, 20, ClaimMode::Reserve).await?), counts(&[("-", 2)]), "claim under key cap 0");
    set_key_cap(&cx, &q, None).await?;
    let got = cx.claim(w, &q, 20, ClaimMode::Reserve).await?;
    ensure_eq!(per_key(&got), counts(&[("a", 3), ("b", 3)]), "claim with the key cap cleared");
    ensure_eq!(cx.backend.queue_settings(&q).await?.key_max_workers, None, "queue_settings key_max_workers");
    Ok(())
}

/// The queue's cap and the per-key cap hold together.
pub async fn with_queue_cap(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    enqueue_keyed(&cx, &q, &[(Some("a"), 5), (Some("b"), 5)]).await?;
    set_key_cap(&cx, &q, Some(2)).await?;
    cx.backend.set_max_workers(&q, Some(3)).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 10, ClaimMode::Start).await?;
    ensure_eq!(got.len(), 3, "claim under queue cap 3");
    ensure!(per_key(&got).values().all(|&n| n <= 2), "a key over its cap of 2: {:?}", per_key(&got));
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 0, "claim with the queue at its cap");
    cx.backend.set_max_workers(&q, None).await?;
    let more = cx.claim(w, &q, 10, ClaimMode::Start).await?;
    ensure_eq!(more.len(), 1, "claim with the queue cap cleared (keys a and b at 2 each)");
    Ok(())
}

/// The key is stored, returned by claim, get_job and list_jobs, and kept through the archive,
/// the dead letters and a requeue.
pub async fn key_round_trips(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let key = "tenant-42 Ünïcödé 東京";
    let ok = cx.enqueue(keyed_job(&cx, &q, Some(key), 1)).await?;
    let bad = cx.enqueue(keyed_job(&cx, &q, Some(key), 0)).await?;
    let plain = cx.enqueue(keyed_job(&cx, &q, None, 0)).await?;
    let rec = cx.record(ok).await?;
    ensure_eq!(rec.concurrency_key.as_deref(), Some(key), "key of the pending job");
    ensure_eq!(cx.record(plain).await?.concurrency_key, None, "key of a job without one");
    let mut params = ListJobsParams::new(JobTable::Hot);
    params.queue = Some(q.clone());
    let page = cx.backend.list_jobs(&params).await?;
    let listed: HashMap<JobId, Option<String>> = page.jobs.iter().map(|r| (r.id, r.concurrency_key.clone())).collect();
    ensure_eq!(listed.get(&ok).cloned().flatten().as_deref(), Some(key), "key in list_jobs");
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 3, ClaimMode::Start).await?;
    ensure_eq!(got.len(), 3, "claim of the three jobs");
    let by_id: HashMap<JobId, &ClaimedJob> = got.iter().map(|j| (j.id, j)).collect();
    ensure_eq!(by_id[&ok].concurrency_key.as_deref(), Some(key), "key of the claimed job");
    ensure_eq!(by_id[&plain].concurrency_key, None, "key of the claimed job without one");
    ensure!(cx.backend.complete_one(w, by_id[&ok].lease_ref()).await?.done().is_some(), "complete lost its lease");
    let archived = cx.record(ok).await?;
    ensure_eq!(
        (archived.location, archived.concurrency_key.as_deref()),
        (JobLocation::Archived, Some(key)),
        "archived"
    );
    let out = cx
        .backend
        .fail(w, by_id[&bad].lease_ref(), FailAction::DeadLetter { reason: DeadReason::Failed, error: "no".into() })
        .await?;
    ensure!(matches!(out, Fenced::Done(_)), "fatal fail lost its lease");
    let dead = cx.record(bad).await?;
    ensure_eq!(
        (dead.location, dead.concurrency_key.as_deref()),
        (JobLocation::Dead(DeadReason::Failed), Some(key)),
        "dead-lettered"
    );
    cx.backend.requeue_dead(bad).await?;
    let back = cx.record(bad).await?;
    ensure_eq!(
        (back.location, back.concurrency_key.as_deref()),
        (JobLocation::Hot(JobStatus::Pending), Some(key)),
        "requeued"
    );
    Ok(())
}

/// A repeated complete (its first reply lost) and a repeated fail report the outcome that
/// stands and free the key's slot once: the key never runs more than its cap afterwards.
pub async fn repeated_outcomes_keep_count(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    enqueue_keyed(&cx, &q, &[(Some("a"), 4)]).await?;
    set_key_cap(&cx, &q, Some(1)).await?;
    let w = WorkerId::random();
    let j1 = cx.claim_one_started(w, &q).await?;
    ensure_eq!(cx.backend.complete_one(w, j1.lease_ref()).await?, Fenced::Done(()), "complete");
    ensure_eq!(cx.backend.complete_one(w, j1.lease_ref()).await?, Fenced::Done(()), "the repeated complete");
    ensure_eq!(cx.backend.complete_one(w, j1.lease_ref()).await?, Fenced::Done(()), "a third complete");
    let j2 = cx.claim(w, &q, 5, ClaimMode::Start).await?;
    ensure_eq!(j2.len(), 1, "claim after one job of a finished (reported done three times)");
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Start).await?.len(), 0, "claim with a at its cap of 1");
    let fatal = FailAction::DeadLetter { reason: DeadReason::Failed, error: "boom".into() };
    ensure!(matches!(cx.backend.fail(w, j2[0].lease_ref(), fatal.clone()).await?, Fenced::Done(_)), "fail");
    ensure!(matches!(cx.backend.fail(w, j2[0].lease_ref(), fatal).await?, Fenced::Done(_)), "the repeated fail");
    let j3 = cx.claim(w, &q, 5, ClaimMode::Start).await?;
    ensure_eq!(j3.len(), 1, "claim after a failure (reported twice)");
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Start).await?.len(), 0, "claim with a at its cap of 1 again");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.pending, s.processing, s.archived, s.dead), (1, 1, 1, 1), "(pending, processing, archived, dead)");
    Ok(())
}

/// A rescue that leaves a fresh job alone leaves its key's slot taken; once the job's
/// heartbeat is old, the rescue moves it back to Pending and only that frees the slot.
pub async fn rescue_frees_only_by_moving(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let ids = enqueue_keyed(&cx, &q, &[(Some("a"), 2)]).await?;
    set_key_cap(&cx, &q, Some(1)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(j.id, ids[0], "first job of a");
    cx.backend.rescue(&crate::ctx::rescue_params()).await?;
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Start).await?.len(), 0, "claim after a rescue of fresh jobs");
    cx.age(j.id, AGED).await?;
    cx.rescue_until_at(j.id, JobLocation::Hot(JobStatus::Pending)).await?;
    let again = cx.claim(w, &q, 5, ClaimMode::Start).await?;
    ensure_eq!(again.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[0]], "claim after the rescue (same job)");
    ensure_eq!(again[0].attempt, 2, "attempt of the rescued job's second run");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::LeaseLost, "the first run's lease");
    Ok(())
}

/// Two cancels of a held or running job (`what`): each only a request, and its key stays full.
async fn cancel_requested_keeps_slot(cx: &Ctx, w: WorkerId, q: &QueueName, id: JobId, what: &str) -> CaseResult {
    for n in 0..2 {
        ensure_eq!(cx.backend.cancel(id).await?, CancelOutcome::Requested, "cancel {n} of the {what} job");
        ensure_eq!(cx.claim(w, q, 5, ClaimMode::Start).await?.len(), 0, "claim after cancel {n} of the {what} job");
    }
    Ok(())
}

/// A cancel frees a key's slot exactly when a job leaves Fetched or Processing: a reserved job
/// is dead-lettered at once (its start is then lost) and its key claims again; a held or a
/// running one only has its cancel requested (repeated: nothing changes) and keeps the slot
/// until its worker's release or outcome moves it.
pub async fn cancel_frees_only_by_moving(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let ids = enqueue_keyed(&cx, &q, &[(Some("a"), 4)]).await?;
    set_key_cap(&cx, &q, Some(1)).await?;
    let w = WorkerId::random();
    let ids_of = |jobs: &[ClaimedJob]| jobs.iter().map(|j| j.id).collect::<Vec<_>>();
    let reserved = cx.claim(w, &q, 5, ClaimMode::Reserve).await?;
    ensure_eq!(ids_of(&reserved), vec![ids[0]], "claim (reserve) under key cap 1");
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Hold).await?.len(), 0, "claim with a's job reserved");
    ensure_eq!(cx.backend.cancel(ids[0]).await?, CancelOutcome::Cancelled, "cancel of the reserved job");
    ensure_eq!(
        cx.backend.start_one(w, reserved[0].lease_ref()).await?,
        Fenced::LeaseLost,
        "start of the cancelled job"
    );

    let held = cx.claim(w, &q, 5, ClaimMode::Hold).await?;
    ensure_eq!(ids_of(&held), vec![ids[1]], "claim (hold) after the reserved job's cancel");
    cancel_requested_keeps_slot(&cx, w, &q, ids[1], "held").await?;
    ensure!(cx.backend.release_one(w, held[0].lease_ref()).await?.done().is_some(), "release of the held job");

    let running = cx.claim(w, &q, 5, ClaimMode::Start).await?;
    ensure_eq!(ids_of(&running), vec![ids[2]], "claim after the held job's release");
    cancel_requested_keeps_slot(&cx, w, &q, ids[2], "running").await?;
    ensure!(cx.backend.complete_one(w, running[0].lease_ref()).await?.done().is_some(), "the running job's outcome");
    let last = cx.claim(w, &q, 5, ClaimMode::Start).await?;
    ensure_eq!(ids_of(&last), vec![ids[3]], "claim after the running job's outcome");
    for (i, id) in ids[..3].iter().enumerate() {
        ensure_eq!(cx.backend.cancel(*id).await?, CancelOutcome::NotLive, "cancel of job {i} once it left");
    }
    Ok(())
}

/// A child process holds a keyed job (start mode) and is killed with SIGKILL. Its key's slot
/// stays taken (no early release by any other path) until its heartbeat is old and rescue
/// moves the job; then the key runs again.
pub async fn sigkill_holder(cx: Ctx) -> CaseResult {
    let launcher = cx.children().ok_or("no child launcher")?.clone();
    let q = cx.queue();
    let ids = enqueue_keyed(&cx, &q, &[(Some("a"), 3)]).await?;
    set_key_cap(&cx, &q, Some(1)).await?;
    let mut child = launcher.spawn("hold", &q, 1)?;
    let held = loop {
        match tokio::time::timeout(crate::POLL_DEADLINE, child.next())
            .await
            .map_err(|_| Failure("child did not report a held job in time".into()))??
        {
            Some(ChildLine::Held(id, _)) => break id,
            Some(ChildLine::Error(e)) => return Err(format!("child failed: {e}").into()),
            Some(_) => continue,
            None => return Err("child exited without holding a job".into()),
        }
    };
    ensure_eq!(held, ids[0], "job the child holds");
    child.child.start_kill().map_err(|e| Failure(format!("SIGKILL failed: {e}")))?;
    let status = child.child.wait().await.map_err(|e| Failure(format!("wait: {e}")))?;
    ensure!(!status.success(), "killed child exited successfully ({status})");
    let w = WorkerId::random();
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Start).await?.len(), 0, "claim of key a after its holder died");
    cx.backend.rescue(&crate::ctx::rescue_params()).await?;
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Start).await?.len(), 0, "claim after a rescue of a fresh heartbeat");
    cx.age(held, AGED).await?;
    cx.rescue_until_at(held, JobLocation::Hot(JobStatus::Pending)).await?;
    let got = cx.claim(w, &q, 5, ClaimMode::Start).await?;
    ensure_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![held], "claim after the rescue");
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Start).await?.len(), 0, "claim with a at its cap again");
    Ok(())
}

/// An invalid key is invalid input and inserts nothing (the whole batch); an out-of-range
/// per-key cap is invalid input and changes nothing.
pub async fn bad_input(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let long = "k".repeat(chokaq_core::validate::MAX_CONCURRENCY_KEY_LEN + 1);
    for bad in ["", "a\nb", "nul\0key", "\u{1b}[31m", "line\u{2028}sep", long.as_str()] {
        let batch = vec![keyed_job(&cx, &q, Some("fine"), 0), keyed_job(&cx, &q, Some(bad), 0)];
        let err = cx.backend.enqueue_many(batch).await.err().ok_or(format!("key {bad:?} was accepted"))?;
        ensure_eq!(err.kind(), ErrorKind::InvalidInput, "error kind for key {bad:?} ({err})");
    }
    ensure_eq!(cx.queue_stats(&q).await?.pending, 0, "jobs inserted by rejected batches");
    set_key_cap(&cx, &q, Some(3)).await?;
    let over = chokaq_core::validate::MAX_QUEUE_WORKERS + 1;
    let err = cx.backend.control_queue(&q, QueueControl::SetKeyMaxWorkers(Some(over))).await.err();
    ensure_eq!(err.map(|e| e.kind()), Some(ErrorKind::InvalidInput), "error kind for key cap {over}");
    ensure_eq!(cx.backend.queue_settings(&q).await?.key_max_workers, Some(3), "key cap after the rejected change");
    Ok(())
}
