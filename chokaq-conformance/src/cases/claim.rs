//! Claim: what a claim returns, its order, its limit, and no duplicates under contention.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use chokaq_core::testing::{JobPatch, Presence};
use chokaq_core::{ClaimMode, ClaimParams, JobId, JobLocation, JobStatus, Lease, LeaseRef, WorkerId};

use crate::child::ChildLine;
use crate::ctx::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

super::cases!(claim:
    returns_fetched_with_lease,
    start_mode_goes_to_processing,
    respects_limit,
    batch_distinct_ids_and_leases,
    order_priority_due_id,
    leases_grow,
    only_named_queues,
    race_tasks_no_duplicates,
    race_processes_no_duplicates [MULTI_PROCESS],
);

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

/// A claim takes at most `limit` jobs; the rest stay Pending for the next claim.
pub async fn respects_limit(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 5).await?;
    let w = WorkerId::random();
    ensure_eq!(cx.claim(w, &q, 3, ClaimMode::Reserve).await?.len(), 3, "first claim (limit 3)");
    ensure_eq!(cx.claim(w, &q, 3, ClaimMode::Reserve).await?.len(), 2, "second claim (limit 3)");
    ensure_eq!(cx.claim(w, &q, 3, ClaimMode::Reserve).await?.len(), 0, "third claim");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.pending, s.fetched), (0, 5), "(pending, fetched)");
    Ok(())
}

/// One batch hands out distinct jobs with distinct leases.
pub async fn batch_distinct_ids_and_leases(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let ids = cx.enqueue_n(&q, 10).await?;
    let got = cx.claim(WorkerId::random(), &q, 10, ClaimMode::Start).await?;
    ensure_eq!(got.len(), 10, "claimed");
    let mut got_ids: Vec<JobId> = got.iter().map(|j| j.id).collect();
    got_ids.sort();
    let mut want = ids.clone();
    want.sort();
    ensure_eq!(got_ids, want, "claimed ids");
    let leases: HashSet<Lease> = got.iter().map(|j| j.lease).collect();
    ensure_eq!(leases.len(), 10, "distinct leases in one batch");
    Ok(())
}

/// With no contention, claims follow priority DESC, then due time ASC, then id ASC.
pub async fn order_priority_due_id(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let now = cx.backend.db_now().await?;
    let hour_ago = now - chrono::Duration::hours(1);
    let two_hours_ago = now - chrono::Duration::hours(2);
    // low1/low2: priority 0, due at creation (now); high: priority 5; early: priority 0 but
    // scheduled two hours ago; tie_a/tie_b: priority 0, both due exactly one hour ago.
    let low1 = cx.enqueue(cx.job(&q).json(serde_json::json!("low1"))).await?;
    let high = cx.enqueue(cx.job(&q).priority(5).json(serde_json::json!("high"))).await?;
    let early = cx.enqueue(cx.job(&q).run_at(two_hours_ago).json(serde_json::json!("early"))).await?;
    let tie_a = cx.enqueue(cx.job(&q).run_at(hour_ago).json(serde_json::json!("tie"))).await?;
    let tie_b = cx.enqueue(cx.job(&q).run_at(hour_ago).json(serde_json::json!("tie"))).await?;
    let low2 = cx.enqueue(cx.job(&q).json(serde_json::json!("low2"))).await?;
    let neg = cx.enqueue(cx.job(&q).priority(-3).run_at(two_hours_ago).json(serde_json::json!("neg"))).await?;
    // low1 and low2 share the created-at order only if the clock moved; force distinct due
    // times so the expectation does not depend on clock resolution.
    cx.force(low1, JobPatch { scheduled_at: Some(Some(now - chrono::Duration::minutes(2))), ..Default::default() })
        .await?;
    cx.force(low2, JobPatch { scheduled_at: Some(Some(now - chrono::Duration::minutes(1))), ..Default::default() })
        .await?;
    let (first_tie, second_tie) = if tie_a < tie_b { (tie_a, tie_b) } else { (tie_b, tie_a) };
    let want = [high, early, first_tie, second_tie, low1, low2, neg];
    let w = WorkerId::random();
    let mut seen = Vec::new();
    for _ in 0..want.len() {
        let got = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
        ensure_eq!(got.len(), 1, "claim {} of {}", seen.len() + 1, want.len());
        seen.push(got[0].id);
    }
    ensure_eq!(seen, want.to_vec(), "claim order (high, early, tie by id, low1, low2, negative priority)");
    // A batch claim uses the same order.
    let q2 = cx.queue_named("batch");
    let a = cx.enqueue(cx.job(&q2).priority(1)).await?;
    let b = cx.enqueue(cx.job(&q2).priority(9)).await?;
    let c = cx.enqueue(cx.job(&q2).priority(4)).await?;
    let got: Vec<JobId> = cx.claim(w, &q2, 3, ClaimMode::Reserve).await?.iter().map(|j| j.id).collect();
    ensure_eq!(got, vec![b, c, a], "batch order by priority");
    Ok(())
}

/// Leases grow at every claim, and a re-claim of the same job gets a new, larger lease.
pub async fn leases_grow(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 2).await?;
    let w = WorkerId::random();
    let a = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    let b = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    ensure!(a.len() == 1 && b.len() == 1, "expected two single claims");
    ensure!(b[0].lease > a[0].lease, "lease did not grow: {} then {}", a[0].lease, b[0].lease);
    let rel = cx.backend.release(w, &[a[0].lease_ref()]).await?;
    ensure_eq!(rel.done, vec![a[0].id], "released");
    let again = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    ensure_eq!(again.len(), 1, "re-claim");
    ensure_eq!(again[0].id, a[0].id, "re-claimed job");
    ensure!(again[0].lease > b[0].lease, "re-claim lease {} not above {}", again[0].lease, b[0].lease);
    Ok(())
}

/// A claim naming several queues takes from each of them and from no other queue.
pub async fn only_named_queues(cx: Ctx) -> CaseResult {
    let (q1, q2, other) = (cx.queue_named("a"), cx.queue_named("b"), cx.queue_named("other"));
    let mut want = cx.enqueue_n(&q1, 2).await?;
    want.extend(cx.enqueue_n(&q2, 3).await?);
    let untouched = cx.enqueue_n(&other, 2).await?;
    let req = ClaimParams::new(WorkerId::random(), vec![q1.clone(), q2.clone()], 100, ClaimMode::Reserve);
    let mut got: Vec<JobId> = cx.backend.claim(&req).await?.iter().map(|j| j.id).collect();
    got.sort();
    want.sort();
    ensure_eq!(got, want, "claimed ids from both named queues");
    for id in untouched {
        ensure_eq!(cx.record(id).await?.location, JobLocation::Hot(JobStatus::Pending), "job of an unnamed queue");
    }
    let empty = cx.claim(WorkerId::random(), &cx.queue_named("empty"), 10, ClaimMode::Start).await?;
    ensure!(empty.is_empty(), "claim from an empty queue returned {empty:?}");
    Ok(())
}

/// Many claimer tasks in one process: every job is claimed exactly once (no job held by two
/// workers), every job ends archived exactly once. Every job is checked.
pub async fn race_tasks_no_duplicates(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let n = cx.stress.jobs;
    let ids = cx.enqueue_n(&q, n).await?;
    let claims = Arc::new(Mutex::new(Vec::<(JobId, Lease, usize)>::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..cx.stress.claimers {
        let cx = cx.clone();
        let q = q.clone();
        let claims = claims.clone();
        tasks.spawn(async move {
            let w = WorkerId::random();
            let (mut lost, mut transient) = (0usize, Vec::new());
            loop {
                let mode = if t % 2 == 0 { ClaimMode::Start } else { ClaimMode::Reserve };
                let req = ClaimParams::new(w, vec![q.clone()], 1 + (t as u32 % 4), mode);
                // A transient error escaping the backend is a failure too, but reported after
                // the duplicate check, which says more.
                let got = match cx.backend.claim(&req).await {
                    Ok(got) => got,
                    Err(e) if e.is_retryable() && transient.len() < 100 => {
                        transient.push(e.to_string());
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                if got.is_empty() {
                    if cx.queue_stats(&q).await?.pending == 0 {
                        return Ok::<_, Failure>((lost, transient));
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                claims.lock().expect("lock").extend(got.iter().map(|j| (j.id, j.lease, t)));
                let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
                if mode == ClaimMode::Reserve {
                    lost += cx.backend.start(w, &leases).await?.lost.len();
                }
                lost += cx.backend.complete(w, &leases).await?.lost.len();
            }
        });
    }
    let (mut lost, mut transient) = (0, Vec::new());
    while let Some(r) = tasks.join_next().await {
        let (l, t) = r.map_err(|e| Failure(format!("claimer task panicked: {e}")))??;
        lost += l;
        transient.extend(t);
    }
    let claims = claims.lock().expect("lock").clone();
    check_claimed_once(&cx, &ids, &claims.iter().map(|(id, l, _)| (*id, *l)).collect::<Vec<_>>()).await?;
    ensure_eq!(lost, 0, "guarded writes that lost their lease (no one else should have held it)");
    ensure!(
        transient.is_empty(),
        "{} claims failed with a transient error (first: {:?})",
        transient.len(),
        transient.first()
    );
    Ok(())
}

/// Checks that every id in `ids` was claimed exactly once, nothing else was claimed, all
/// leases are distinct, and every job is archived exactly once.
pub(crate) async fn check_claimed_once(cx: &Ctx, ids: &[JobId], claims: &[(JobId, Lease)]) -> CaseResult {
    let mut per: HashMap<JobId, Vec<Lease>> = HashMap::new();
    for (id, l) in claims {
        per.entry(*id).or_default().push(*l);
    }
    let dups: Vec<_> = per.iter().filter(|(_, v)| v.len() > 1).take(5).collect();
    ensure!(dups.is_empty(), "jobs claimed more than once (first 5 with their leases): {dups:?}");
    let want: HashSet<JobId> = ids.iter().copied().collect();
    let strangers = per.keys().filter(|id| !want.contains(id)).count();
    ensure_eq!(strangers, 0, "claimed ids that were not enqueued by this case");
    ensure_eq!(per.len(), ids.len(), "distinct jobs claimed");
    let leases: HashSet<Lease> = claims.iter().map(|(_, l)| *l).collect();
    ensure_eq!(leases.len(), claims.len(), "distinct leases");
    let presence = cx.backend.presence_many(ids).await?;
    ensure_eq!(presence.len(), ids.len(), "presence_many rows");
    let bad: Vec<_> = presence.iter().filter(|(_, p)| *p != Presence { hot: 0, archive: 1, dead: 0 }).take(5).collect();
    ensure!(bad.is_empty(), "jobs not archived exactly once (first 5): {bad:?}");
    Ok(())
}

/// Claimers spread over several OS processes (plus tasks here): every job claimed exactly
/// once across all of them, every job archived exactly once.
pub async fn race_processes_no_duplicates(cx: Ctx) -> CaseResult {
    let launcher = cx.children().ok_or("no child launcher")?.clone();
    let q = cx.queue();
    let n = cx.stress.jobs.max(cx.stress.processes * 20);
    let ids = cx.enqueue_n(&q, n).await?;
    let mut procs = Vec::new();
    for p in 0..cx.stress.processes.max(4) {
        procs.push(launcher.spawn("claim-all", &q, 1 + (p as u32 % 5))?);
    }
    let mut readers = tokio::task::JoinSet::new();
    for mut p in procs {
        readers.spawn(async move {
            let mut claims = Vec::new();
            let mut done = false;
            while let Some(line) = p.next().await? {
                match line {
                    ChildLine::Claimed(id, l) => claims.push((id, l)),
                    ChildLine::Done => done = true,
                    ChildLine::Lost(id) => return Err(Failure(format!("child lost the lease of {id}"))),
                    ChildLine::Error(e) => return Err(Failure(format!("child failed: {e}"))),
                    ChildLine::Ready | ChildLine::Held(..) | ChildLine::Tick(..) => {}
                }
            }
            let status = p.child.wait().await.map_err(|e| Failure(format!("waiting for child: {e}")))?;
            ensure!(done && status.success(), "child ended without 'done' (exit {status})");
            Ok::<_, Failure>(claims)
        });
    }
    // Claimers in this process too.
    let mut local = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let cx = cx.clone();
        let q = q.clone();
        local.spawn(async move {
            let w = WorkerId::random();
            let mut claims = Vec::new();
            loop {
                let got = cx.claim(w, &q, 3, ClaimMode::Start).await?;
                if got.is_empty() {
                    if cx.queue_stats(&q).await?.pending == 0 {
                        return Ok::<_, Failure>(claims);
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
                claims.extend(got.iter().map(|j| (j.id, j.lease)));
                let out = cx.backend.complete(w, &leases).await?;
                ensure!(out.lost.is_empty(), "local claimer lost leases: {:?}", out.lost);
            }
        });
    }
    let mut all = Vec::new();
    let mut from_children = 0;
    while let Some(r) = readers.join_next().await {
        let c = r.map_err(|e| Failure(format!("reader panicked: {e}")))??;
        from_children += c.len();
        all.extend(c);
    }
    while let Some(r) = local.join_next().await {
        all.extend(r.map_err(|e| Failure(format!("local claimer panicked: {e}")))??);
    }
    ensure!(from_children > 0, "child processes claimed nothing (the race did not involve them)");
    check_claimed_once(&cx, &ids, &all).await
}
