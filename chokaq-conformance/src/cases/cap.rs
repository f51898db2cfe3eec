//! Cap: `max_workers` is a strict bound on Fetched + Processing per queue.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{BackendExt, ClaimMode, ClaimParams, ErrorKind, LeaseRef, QueueControl, WorkerId};

use crate::ctx::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

super::cases!(cap:
    limits_single_batch,
    counts_fetched_and_processing,
    change_and_clear,
    zero_claims_nothing,
    binds_only_its_queue,
    race_strict,
    race_multi_queue,
);

/// One batch claim never takes more than the cap.
pub async fn limits_single_batch(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 6).await?;
    cx.backend.set_max_workers(&q, Some(2)).await?;
    let w = WorkerId::random();
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Reserve).await?.len(), 2, "batch claim under cap 2");
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 0, "claim with the cap full");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.pending, s.fetched, s.processing), (4, 2, 0), "(pending, fetched, processing)");
    Ok(())
}

/// Fetched and Processing both count; completing or releasing frees a slot.
pub async fn counts_fetched_and_processing(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 5).await?;
    cx.backend.set_max_workers(&q, Some(2)).await?;
    let w = WorkerId::random();
    let reserved = cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
    let started = cx.claim(w, &q, 1, ClaimMode::Start).await?;
    ensure!(reserved.len() == 1 && started.len() == 1, "expected one reserved and one started job");
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Start).await?.len(), 0, "claim with one Fetched + one Processing");
    ensure!(cx.backend.complete_one(w, started[0].lease_ref()).await?.done().is_some(), "complete lost its lease");
    let next = cx.claim(w, &q, 5, ClaimMode::Start).await?;
    ensure_eq!(next.len(), 1, "claim after a completion freed one slot");
    ensure!(cx.backend.release_one(w, reserved[0].lease_ref()).await?.done().is_some(), "release lost its lease");
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Reserve).await?.len(), 1, "claim after a release freed one slot");
    Ok(())
}

/// Raising the cap, and clearing it (None = unlimited), lets more jobs through.
pub async fn change_and_clear(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 10).await?;
    let st = cx.backend.set_max_workers(&q, Some(1)).await?;
    ensure_eq!(st.max_workers, Some(1), "settings after set_max_workers(1)");
    let w = WorkerId::random();
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Reserve).await?.len(), 1, "claim under cap 1");
    cx.backend.set_max_workers(&q, Some(3)).await?;
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Reserve).await?.len(), 2, "claim after raising the cap to 3");
    let st = cx.backend.set_max_workers(&q, None).await?;
    ensure_eq!(st.max_workers, None, "settings after clearing the cap");
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Reserve).await?.len(), 7, "claim with no cap");
    ensure_eq!(cx.backend.queue_settings(&q).await?.max_workers, None, "queue_settings max_workers");
    Ok(())
}

/// A cap of 0 is either rejected as invalid input or stops the queue; it never lets a job
/// through.
pub async fn zero_claims_nothing(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 3).await?;
    match cx.backend.control_queue(&q, QueueControl::SetMaxWorkers(Some(0))).await {
        Ok(st) => {
            ensure_eq!(st.max_workers, Some(0), "settings after cap 0");
            ensure_eq!(cx.claim(WorkerId::random(), &q, 10, ClaimMode::Start).await?.len(), 0, "claim under cap 0");
        }
        Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "error kind for cap 0 ({e})"),
    }
    Ok(())
}

/// A claim over a capped and an uncapped queue: the cap binds only its own queue.
pub async fn binds_only_its_queue(cx: Ctx) -> CaseResult {
    let (capped, free) = (cx.queue_named("capped"), cx.queue_named("free"));
    cx.enqueue_n(&capped, 4).await?;
    cx.enqueue_n(&free, 4).await?;
    cx.backend.set_max_workers(&capped, Some(1)).await?;
    let req = ClaimParams::new(WorkerId::random(), vec![capped.clone(), free.clone()], 100, ClaimMode::Reserve);
    let got = cx.backend.claim(&req).await?;
    let from_capped = got.iter().filter(|j| j.queue == capped).count();
    let from_free = got.iter().filter(|j| j.queue == free).count();
    ensure_eq!((from_capped, from_free), (1, 4), "(from capped queue, from free queue)");
    Ok(())
}

/// The race: many claimers against caps of 1, 2 and 5. An in-process counter goes up after
/// a claim returns and down before the completion is sent, so it can exceed the cap only if
/// the database let too many jobs out; a stats watcher checks the database side too.
pub async fn race_strict(cx: Ctx) -> CaseResult {
    for cap in [1u32, 2, 5] {
        for round in 0..cx.stress.rounds {
            race_round(&cx, cap, round, false).await?;
        }
    }
    Ok(())
}

/// The same race with every claim naming the capped queue and an uncapped one, so the cap
/// must hold inside multi-queue claims too (and the uncapped queue keeps the claims busy).
pub async fn race_multi_queue(cx: Ctx) -> CaseResult {
    for cap in [1u32, 2] {
        for round in 0..cx.stress.rounds.div_ceil(2) {
            race_round(&cx, cap, round, true).await?;
        }
    }
    Ok(())
}

async fn race_round(cx: &Ctx, cap: u32, round: usize, multi: bool) -> CaseResult {
    let q = cx.queue_named(&format!("cap{cap}r{round}"));
    let jobs = (cap as usize * 12).max(40);
    cx.enqueue_n(&q, jobs).await?;
    cx.backend.set_max_workers(&q, Some(cap)).await?;
    let mut queues = vec![q.clone()];
    if multi {
        let filler = cx.queue_named(&format!("fill{cap}r{round}"));
        cx.enqueue_n(&filler, jobs * 2).await?;
        queues.push(filler);
    }
    let held = Arc::new(AtomicI64::new(0));
    let max_held = Arc::new(AtomicI64::new(0));
    let max_db = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let claimers = cx.stress.claimers.max(6);
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..claimers {
        let (cx, q, held, max_held, done) = (cx.clone(), q.clone(), held.clone(), max_held.clone(), done.clone());
        let queues = queues.clone();
        tasks.spawn(async move {
            let w = WorkerId::random();
            let mut progress = crate::cases::Progress::new();
            while done.load(Ordering::SeqCst) < jobs as u64 {
                let now_done = done.load(Ordering::SeqCst);
                ensure!(!progress.stalled(now_done), "cap race round: no job finished for 60 s ({now_done} of {jobs})");
                let mode = if t % 3 == 0 { ClaimMode::Reserve } else { ClaimMode::Start };
                let req = ClaimParams::new(w, queues.clone(), cap + 1 + 2 * (queues.len() as u32 - 1), mode);
                let got = cx.backend.claim(&req).await?;
                if got.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                let capped = got.iter().filter(|j| j.queue == q).count();
                ensure!(capped as u32 <= cap, "one claim returned {capped} jobs of a queue capped at {cap}");
                let now_held = held.fetch_add(capped as i64, Ordering::SeqCst) + capped as i64;
                max_held.fetch_max(now_held, Ordering::SeqCst);
                // A caught overshoot ends the round at once (the others stop on `done`).
                ensure!(now_held <= i64::from(cap), "{now_held} jobs were held at once by workers");
                let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
                if mode == ClaimMode::Reserve {
                    let s = cx.backend.start(w, &leases).await?;
                    ensure!(s.lost.is_empty(), "start lost leases {:?}", s.lost);
                }
                // Hold the jobs briefly (the "work"), so claims overlap.
                tokio::time::sleep(Duration::from_millis(2)).await;
                held.fetch_sub(capped as i64, Ordering::SeqCst);
                let c = cx.backend.complete(w, &leases).await?;
                ensure!(c.lost.is_empty(), "complete lost leases {:?}", c.lost);
                let capped_done = got.iter().filter(|j| j.queue == q && c.done.contains(&j.id)).count();
                // Saturating: `done` is set to u64::MAX to stop the round, and a wrapping add
                // would restart it (then the round waits out its 60 s stall guard).
                let _ = done.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| d.checked_add(capped_done as u64));
            }
            Ok::<(), Failure>(())
        });
    }
    // The database's view, while the race runs.
    let watcher = {
        let (cx, q, done, max_db) = (cx.clone(), q.clone(), done.clone(), max_db.clone());
        tokio::spawn(async move {
            while done.load(Ordering::SeqCst) < jobs as u64 {
                let s = cx.queue_stats(&q).await?;
                max_db.fetch_max(s.fetched + s.processing, Ordering::SeqCst);
                if s.fetched + s.processing > u64::from(cap) {
                    // Caught: stop the claimers now; the check after the round reports it.
                    done.store(u64::MAX, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
            }
            Ok::<(), Failure>(())
        })
    };
    let mut first_err = None;
    while let Some(r) = tasks.join_next().await {
        let r = r.map_err(|e| Failure(format!("claimer panicked: {e}"))).and_then(|r| r);
        if let Err(e) = r {
            first_err.get_or_insert(e);
            done.store(u64::MAX, Ordering::SeqCst);
        }
    }
    watcher.await.map_err(|e| Failure(format!("watcher panicked: {e}")))??;
    if let Some(e) = first_err {
        return Err(Failure(format!("cap {cap}, round {round}: {e}")));
    }
    let max_held = max_held.load(Ordering::SeqCst);
    ensure!(max_held <= i64::from(cap), "cap {cap} round {round}: {max_held} jobs were held at once by workers");
    let max_db = max_db.load(Ordering::SeqCst);
    ensure!(max_db <= u64::from(cap), "cap {cap} round {round}: stats showed {max_db} active jobs");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!(s.archived, jobs as u64, "cap {cap} round {round}: archived");
    Ok(())
}
