//! Cap race (issue 24): a cap set on a queue that had none binds every claim that commits
//! after `SetMaxWorkers` returned, also the claims that were already in flight when it was set
//! (on PostgreSQL: claims that read "no cap" before the cap committed hold the queue's control
//! row until they commit, and the control waits for them).

use std::sync::Arc;

use chokaq_core::{BackendExt, ClaimMode, ClaimParams, WorkerId};

use crate::ctx::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

super::cases!(cap:
    first_set_binds_racing_claimers,
);

/// Rounds, racing claimers per round and their claim limit.
const ROUNDS: usize = 20;
const RACERS: usize = 6;
const LIMIT: u32 = 20;
/// Claims issued after `SetMaxWorkers(1)` returned, one after another.
const AFTER: usize = 3;

/// Per round, a fresh uncapped queue with more jobs than the racers can take; `RACERS`
/// claimers (limit `LIMIT`, start mode, nobody completes) start together with
/// `SetMaxWorkers(1)`. Once it returned, with `s0` the queue's Fetched + Processing read right
/// after: every claim that commits from then on sees the cap, so every count read afterwards
/// (after each of `AFTER` claims issued then, each racer's return, and at the end) is at least
/// `s0` and at most `max(s0, 1)`; each later claim gets at most one job; and the jobs all the
/// claims returned are exactly the queue's busy count. A backend whose claim in flight ignores
/// the cap it did not read commits its rows after the read of `s0` (the count grows past it),
/// or lets a later claim count them out (it gets one too).
pub async fn first_set_binds_racing_claimers(cx: Ctx) -> CaseResult {
    for round in 0..ROUNDS {
        race_round(&cx, round).await?;
    }
    Ok(())
}

async fn race_round(cx: &Ctx, round: usize) -> CaseResult {
    let q = cx.queue_named(&format!("r{round}"));
    cx.enqueue_n(&q, RACERS * LIMIT as usize + 10).await?;
    let start = Arc::new(tokio::sync::Barrier::new(RACERS + 1));
    let mut racers = tokio::task::JoinSet::new();
    for _ in 0..RACERS {
        let (cx, q, start) = (cx.clone(), q.clone(), start.clone());
        racers.spawn(async move {
            start.wait().await;
            let req = ClaimParams::new(WorkerId::random(), vec![q], LIMIT, ClaimMode::Start);
            Ok::<usize, Failure>(cx.backend.claim(&req).await?.len())
        });
    }
    start.wait().await;
    cx.backend.set_max_workers(&q, Some(1)).await?;
    let busy = |cx: &Ctx| {
        let (cx, q) = (cx.clone(), q.clone());
        async move {
            let s = cx.queue_stats(&q).await?;
            Ok::<u64, Failure>(s.fetched + s.processing)
        }
    };
    let s0 = busy(cx).await?;
    let top = s0.max(1);
    let mut claimed = 0u64;
    for i in 0..AFTER {
        let got = cx.claim(WorkerId::random(), &q, 5, ClaimMode::Start).await?.len() as u64;
        ensure!(got <= 1, "round {round}: claim #{i} after SetMaxWorkers(1) returned got {got} jobs");
        claimed += got;
        let n = busy(cx).await?;
        ensure!(
            (s0..=top).contains(&n),
            "round {round}: {n} busy after claim #{i} (it got {got}) with cap 1; {s0} right after SetMaxWorkers returned"
        );
    }
    while let Some(r) = racers.join_next().await {
        let got = r.map_err(|e| Failure(format!("racer panicked: {e}"))).and_then(|r| r)? as u64;
        claimed += got;
        let n = busy(cx).await?;
        ensure!(
            (s0..=top).contains(&n),
            "round {round}: {n} busy after a racer returned ({got} jobs) with cap 1; {s0} right after SetMaxWorkers \
             returned"
        );
    }
    let n = busy(cx).await?;
    ensure!((s0..=top).contains(&n), "round {round}: {n} busy at the end with cap 1; {s0} right after SetMaxWorkers");
    ensure_eq!(n, claimed, "round {round}: busy against the jobs all claims returned");
    Ok(())
}
