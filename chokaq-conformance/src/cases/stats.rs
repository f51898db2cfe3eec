//! Stats: exact counts per queue and state from one snapshot, the lag, and sums that always
//! add up while jobs move.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::testing::JobPatch;
use chokaq_core::{BackendExt, ClaimMode, DeadReason, FailAction, JobId, LeaseRef, WorkerId};

use crate::ctx::{within, CaseResult, Ctx, Failure, CALL_DEADLINE};
use crate::{ensure, ensure_eq};

super::cases!(stats:
    counts_per_state,
    oldest_due_lag,
    readers_see_consistent_sums,
    controlled_queue_listed,
    cancelled_counted_apart,
    throughput_kinds,
    read_deadline_views,
);

/// Two Pending, one Fetched, one Processing, one archived, one dead: counted exactly.
pub async fn counts_per_state(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 6).await?;
    let w = WorkerId::random();
    cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    let p = cx.claim(w, &q, 3, ClaimMode::Start).await?;
    ensure_eq!(p.len(), 3, "started");
    cx.backend.complete_one(w, p[0].lease_ref()).await?.done().ok_or("complete lost")?;
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "x".into() };
    cx.backend.fail(w, p[1].lease_ref(), dl).await?.done().ok_or("fail lost")?;
    let s = cx.queue_stats(&q).await?;
    ensure_eq!(
        (s.pending, s.fetched, s.processing, s.archived, s.dead),
        (2, 1, 1, 1, 1),
        "(pending, fetched, processing, archived, dead) of {q}"
    );
    let all = cx.backend.stats().await?;
    ensure!(all.taken_at.is_some(), "stats has no taken_at");
    ensure_eq!(all.total(), all.hot() + all.archived + all.dead, "totals add up");
    let sum: u64 = all.queues.iter().map(|q| q.pending + q.fetched + q.processing + q.archived + q.dead).sum();
    ensure_eq!(sum, all.total(), "per-queue counts sum to the totals");
    Ok(())
}

/// The lag: `oldest_due_at` is the due time of the oldest Pending job that is due now;
/// future jobs do not count.
pub async fn oldest_due_lag(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let now = cx.backend.db_now().await?;
    let old = now - chrono::Duration::minutes(30);
    let a = cx.enqueue(cx.job(&q)).await?;
    cx.enqueue(cx.job(&q).run_at(now + chrono::Duration::hours(1))).await?;
    let b = cx.enqueue(cx.job(&q)).await?;
    cx.force(b, JobPatch { scheduled_at: Some(Some(old)), ..Default::default() }).await?;
    let s = cx.queue_stats(&q).await?;
    ensure_eq!(s.pending, 3, "pending");
    ensure_eq!(s.oldest_due_at, Some(old), "oldest_due_at");
    let _ = a;
    let future_only = cx.queue_named("future");
    cx.enqueue(cx.job(&future_only).run_at(now + chrono::Duration::hours(1))).await?;
    ensure_eq!(cx.queue_stats(&future_only).await?.oldest_due_at, None, "lag of a queue with only future jobs");
    Ok(())
}

/// Readers of stats (and of raw presence) while jobs move between tables never see a job in
/// two tables or in none: hot + archived + dead of the queue always equals what was enqueued.
/// Every backend call is bounded by [`CALL_DEADLINE`] and the whole race by 60 s, so a hung
/// mover or reader fails the case with what it was waiting for.
pub async fn readers_see_consistent_sums(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let n = cx.stress.jobs;
    let ids = cx.enqueue_n(&q, n).await?;
    let stop = Arc::new(AtomicBool::new(false));
    // Jobs that left the hot table (archived or dead-lettered), for the deadline's message.
    let finished = Arc::new(AtomicU64::new(0));
    // Readers that have read once: the movers start after both, so the readers read while
    // jobs move (a backend that never yields, the in-memory one, could otherwise let the
    // movers finish before a reader ran: "the readers never read", under load).
    let readers_ready = Arc::new(AtomicU64::new(0));
    let mut movers = tokio::task::JoinSet::new();
    let mover_count = cx.stress.claimers.clamp(2, 4);
    for t in 0..mover_count {
        let (cx, q, stop, finished, ready) =
            (cx.clone(), q.clone(), stop.clone(), finished.clone(), readers_ready.clone());
        movers.spawn(async move {
            let w = WorkerId::random();
            let start_by = tokio::time::Instant::now() + CALL_DEADLINE;
            while ready.load(Ordering::SeqCst) < 2 {
                ensure!(
                    tokio::time::Instant::now() < start_by,
                    "the readers did not read once within {CALL_DEADLINE:?}"
                );
                tokio::task::yield_now().await;
            }
            while !stop.load(Ordering::SeqCst) {
                let got = within("a mover's claim", cx.claim(w, &q, 4, ClaimMode::Start)).await?;
                if got.is_empty() {
                    if within("a mover's stats", cx.queue_stats(&q)).await?.pending == 0 {
                        return Ok::<(), Failure>(());
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                // Three ways out: archive, dead-letter, retry (back to Pending, due now).
                let mut done = Vec::new();
                for (i, j) in got.iter().enumerate() {
                    match (i + t) % 4 {
                        0 => {
                            let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "x".into() };
                            let out = within("a mover's fail(dead-letter)", async {
                                Ok(cx.backend.fail(w, j.lease_ref(), dl).await?)
                            })
                            .await?;
                            ensure!(!out.is_lost(), "fail(dead-letter) lost its lease");
                            finished.fetch_add(1, Ordering::SeqCst);
                        }
                        1 if j.attempt < 2 => {
                            let r = FailAction::Retry { delay: Duration::ZERO, error: "again".into() };
                            let out = within("a mover's fail(retry)", async {
                                Ok(cx.backend.fail(w, j.lease_ref(), r).await?)
                            })
                            .await?;
                            ensure!(!out.is_lost(), "fail(retry) lost its lease");
                        }
                        _ => done.push(j.lease_ref()),
                    }
                }
                let leases: Vec<LeaseRef> = done;
                if !leases.is_empty() {
                    let out =
                        within("a mover's complete", async { Ok(cx.backend.complete(w, &leases).await?) }).await?;
                    ensure!(out.lost.is_empty(), "complete lost leases {:?}", out.lost);
                    finished.fetch_add(out.done.len() as u64, Ordering::SeqCst);
                }
            }
            Ok(())
        });
    }
    let mut readers = tokio::task::JoinSet::new();
    for r in 0..2 {
        let (cx, q, ids, stop, ready) = (cx.clone(), q.clone(), ids.clone(), stop.clone(), readers_ready.clone());
        readers.spawn(async move {
            let mut reads = 0u64;
            while !stop.load(Ordering::SeqCst) {
                if r == 0 {
                    let s = within("a reader's stats", cx.queue_stats(&q)).await?;
                    let total = s.pending + s.fetched + s.processing + s.archived + s.dead;
                    ensure_eq!(total, n as u64, "hot + archived + dead seen by a concurrent stats reader ({s:?})");
                } else {
                    let p =
                        within("a reader's presence_many", async { Ok(cx.backend.presence_many(&ids).await?) }).await?;
                    let bad: Vec<(JobId, _)> = p.into_iter().filter(|(_, p)| p.total() != 1).take(3).collect();
                    ensure!(bad.is_empty(), "a concurrent reader saw jobs in two tables or none: {bad:?}");
                }
                reads += 1;
                if reads == 1 {
                    ready.fetch_add(1, Ordering::SeqCst);
                }
                // A backend whose calls never yield (the in-memory one) must not hold a
                // runtime thread forever: the deadlines and the abort need their turn.
                tokio::task::yield_now().await;
            }
            Ok::<u64, Failure>(reads)
        });
    }
    let limit = Duration::from_secs(60);
    let deadline = tokio::time::Instant::now() + limit;
    let mut first_err: Option<Failure> = None;
    let mut movers_left = mover_count;
    while movers_left > 0 {
        match tokio::time::timeout_at(deadline, movers.join_next()).await {
            Ok(Some(r)) => {
                movers_left -= 1;
                if let Err(e) = r.map_err(|e| Failure(format!("mover panicked: {e}"))).and_then(|r| r) {
                    // One failed mover fails the case: stop the others now.
                    first_err.get_or_insert(e);
                    stop.store(true, Ordering::SeqCst);
                }
            }
            Ok(None) => break,
            Err(_) => {
                first_err.get_or_insert(Failure(format!(
                    "movers did not finish within {limit:?}: {movers_left} of {mover_count} still running, {} of {n} \
                     jobs archived or dead-lettered",
                    finished.load(Ordering::SeqCst)
                )));
                movers.abort_all();
                break;
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    let mut reads = 0;
    // The readers stop at their next loop turn; each call is bounded by CALL_DEADLINE.
    let readers_deadline = tokio::time::Instant::now() + CALL_DEADLINE + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(readers_deadline, readers.join_next()).await {
            Ok(Some(r)) => match r.map_err(|e| Failure(format!("reader panicked: {e}"))).and_then(|r| r) {
                Ok(k) => reads += k,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            },
            Ok(None) => break,
            Err(_) => {
                first_err.get_or_insert(Failure("the readers did not stop after the movers ended".into()));
                readers.abort_all();
                break;
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    ensure!(reads > 0, "the readers never read");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.pending, s.fetched, s.processing), (0, 0, 0), "hot jobs at the end");
    ensure_eq!(s.archived + s.dead, n as u64, "archived + dead at the end");
    Ok(())
}

/// A queue exists once it has a control row, jobs or not: a paused queue with no job is in
/// the snapshot with zero counts and its settings; a queue with jobs and no control row has
/// none (issue 26, item 9).
pub async fn controlled_queue_listed(cx: Ctx) -> CaseResult {
    let (q, capped, plain) = (cx.queue_named("paused"), cx.queue_named("capped"), cx.queue_named("plain"));
    cx.backend.pause(&q).await?;
    cx.backend.set_max_workers(&capped, Some(3)).await?;
    cx.enqueue_n(&plain, 1).await?;
    let all = cx.backend.stats().await?;
    let s = all.queue(q.as_str()).ok_or_else(|| Failure(format!("paused queue {q} with no job is not in stats")))?;
    ensure_eq!((s.pending, s.fetched, s.processing, s.archived, s.dead), (0, 0, 0, 0, 0), "counts of {q}");
    ensure!(s.is_paused() && s.is_active(), "{q}: paused and active, got {:?}", s.settings);
    ensure_eq!(s.settings.as_ref().map(|st| st.name.as_str()), Some(q.as_str()), "settings' queue name");
    let c = all.queue(capped.as_str()).ok_or_else(|| Failure(format!("capped queue {capped} is not in stats")))?;
    ensure_eq!(c.settings.as_ref().and_then(|st| st.max_workers), Some(3), "{capped}'s cap");
    ensure!(!c.is_paused(), "{capped} is not paused");
    let p = all.queue(plain.as_str()).ok_or_else(|| Failure(format!("{plain} is not in stats")))?;
    ensure_eq!((p.pending, p.settings.is_some()), (1, false), "{plain}: one job, no control row");
    let names: Vec<&str> = all.queues.iter().map(|q| q.queue.as_str()).collect();
    ensure!(names.windows(2).all(|w| w[0] < w[1]), "queues are listed once each, by name: {names:?}");
    cx.backend.resume(&q).await?;
    let s = cx.queue_stats(&q).await?;
    ensure!(s.settings.is_some() && !s.is_paused(), "{q} after resume: listed, not paused ({:?})", s.settings);
    Ok(())
}

/// A deliberate cancel is a dead letter counted apart (`cancelled`), not a failure: an
/// operator's cancel of a Pending job and a handler's `Cancelled` next to one failure, one
/// timeout and one zombie-free dead letter (issue 26, item 11).
pub async fn cancelled_counted_apart(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let ids = cx.enqueue_n(&q, 4).await?;
    ensure_eq!(cx.backend.cancel(ids[0]).await?, chokaq_core::CancelOutcome::Cancelled, "cancel of a Pending job");
    let w = WorkerId::random();
    let p = cx.claim(w, &q, 3, ClaimMode::Start).await?;
    ensure_eq!(p.len(), 3, "started");
    let actions = [
        FailAction::Cancelled { error: None },
        FailAction::DeadLetter { reason: DeadReason::Failed, error: "x".into() },
        FailAction::DeadLetter { reason: DeadReason::TimedOut, error: "slow".into() },
    ];
    for (j, a) in p.iter().zip(actions) {
        cx.backend.fail(w, j.lease_ref(), a).await?.done().ok_or("fail lost")?;
    }
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.dead, s.cancelled, s.failed()), (4, 2, 2), "(dead, cancelled, failed) of {q}");
    let all = cx.backend.stats().await?;
    ensure_eq!(all.cancelled, all.queues.iter().map(|q| q.cancelled).sum::<u64>(), "cancelled totals add up");
    ensure!(
        all.cancelled >= 2 && all.cancelled <= all.dead,
        "snapshot cancelled {} of {} dead",
        all.cancelled,
        all.dead
    );
    Ok(())
}

/// Throughput counts jobs done, failures dead-lettered (not cancels) and failed attempts
/// waiting for a retry, each in its own column.
pub async fn throughput_kinds(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 5).await?;
    let w = WorkerId::random();
    let p = cx.claim(w, &q, 5, ClaimMode::Start).await?;
    ensure_eq!(p.len(), 5, "started");
    cx.backend.complete_one(w, p[0].lease_ref()).await?.done().ok_or("complete lost")?;
    cx.backend.complete_one(w, p[1].lease_ref()).await?.done().ok_or("complete lost")?;
    let retry = FailAction::Retry { delay: Duration::from_secs(600), error: "again".into() };
    cx.backend.fail(w, p[2].lease_ref(), retry).await?.done().ok_or("retry lost")?;
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "x".into() };
    cx.backend.fail(w, p[3].lease_ref(), dl).await?.done().ok_or("fail lost")?;
    cx.backend.fail(w, p[4].lease_ref(), FailAction::Cancelled { error: None }).await?.done().ok_or("cancel lost")?;
    let tp = chokaq_core::ThroughputParams { window: Duration::from_secs(3600), queue: Some(q.clone()) };
    let buckets = match cx.backend.throughput(&tp).await {
        Err(e) if e.kind() == chokaq_core::ErrorKind::Unsupported => return Ok(()),
        r => r?,
    };
    let sum = |f: fn(&chokaq_core::ThroughputBucket) -> u64| buckets.iter().map(f).sum::<u64>();
    ensure_eq!(
        (sum(|b| b.finished), sum(|b| b.failed), sum(|b| b.retried)),
        (2, 1, 1),
        "(finished, failed, retried) of {q} over the last hour: {buckets:?}"
    );
    Ok(())
}

/// A view from `with_read_deadline` (the dashboard's, one per request): with time left its reads
/// see what the backend's see, and its writes are the backend's; once the deadline has passed
/// every read fails as Unavailable. A backend whose `read_deadline` is `Unbounded` gives no view.
pub async fn read_deadline_views(cx: Ctx) -> CaseResult {
    use chokaq_core::{ErrorKind, JobTable, ListJobsParams, ReadDeadline};
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let kind = cx.backend.capabilities().read_deadline;
    let later = cx.backend.with_read_deadline(std::time::Instant::now() + Duration::from_secs(60));
    let later = match (kind, later) {
        (ReadDeadline::Unbounded, None) => return Ok(()),
        (ReadDeadline::Unbounded, Some(_)) => {
            return Err("a view from a backend whose read_deadline is Unbounded".into())
        }
        (_, None) => return Err(format!("read_deadline is {kind:?} but with_read_deadline gave no view").into()),
        (_, Some(v)) => v,
    };
    let job = later.get_job(id).await?;
    ensure_eq!(job.map(|j| j.id), Some(id), "the view's get_job");
    let mut p = ListJobsParams::new(JobTable::Hot);
    p.queue = Some(q.clone());
    let page = later.list_jobs(&p).await?;
    ensure_eq!(page.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id], "the view's list_jobs");
    let stats = later.stats().await?;
    ensure_eq!(stats.queue(q.as_str()).map(|s| s.pending), Some(1), "the view's stats of {q}");
    let second = later.enqueue(cx.job(&q)).await?.id;
    ensure!(cx.backend.get_job(second).await?.is_some(), "the view's enqueue is in the store");

    let passed = cx.backend.with_read_deadline(std::time::Instant::now()).ok_or("no view")?;
    let reads = [
        ("stats", passed.stats().await.err()),
        ("get_job", passed.get_job(id).await.err()),
        ("list_jobs", passed.list_jobs(&p).await.err()),
        ("queue_settings", passed.queue_settings(&q).await.err()),
        ("list_workers", passed.list_workers().await.err()),
        ("list_schedules", passed.list_schedules().await.err()),
    ];
    for (what, e) in reads {
        let e = e.ok_or_else(|| format!("{what} of a view past its deadline succeeded"))?;
        ensure_eq!(e.kind(), ErrorKind::Unavailable, "{what} past the deadline: {e}");
    }
    Ok(())
}
