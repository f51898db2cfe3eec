//! Isolation: the backend pins the isolation level its claims need, whatever default the
//! server, the database or the role sets (`docs/contract.md`, Database rules).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, BackendExt, ClaimMode, ClaimParams, LeaseRef, WorkerId};

use crate::cases::Outcome;
use crate::ctx::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

super::cases!(isolation:
    cap_race_repeatable_read_default,
);

/// A strict-cap race whose claims, starts and completions go through sessions whose role
/// defaults to REPEATABLE READ
/// ([`TestSupport::with_repeatable_read_default`]), while high-priority jobs keep arriving.
/// A claim that inherits that level counts a capped queue's active jobs in the snapshot of
/// its first statement: it misses a job another claimer took (and committed) meanwhile, if
/// that job arrived after its snapshot, and takes an older one too many. Ignored where the
/// database has no such default to set.
///
/// The race alone rarely catches it (the claim's window is short, and a stale claim mostly
/// meets a serialization failure the backend retries), so the case first asks the handle
/// which level its sessions run at ([`TestSupport::session_isolation`]): READ COMMITTED.
pub async fn cap_race_repeatable_read_default(cx: Ctx) -> Result<Outcome, Failure> {
    let Some(rr) = cx.backend.with_repeatable_read_default().await? else {
        return Ok(Outcome::Ignored("the database has no default isolation level to set".into()));
    };
    if let Some(level) = rr.session_isolation().await? {
        ensure_eq!(
            level.to_ascii_lowercase(),
            "read committed",
            "isolation level of a claim session whose role defaults to REPEATABLE READ"
        );
    }
    for cap in [1u32, 2] {
        for round in 0..cx.stress.rounds.max(2) {
            race_round(&cx, rr.clone(), cap, round).await?;
        }
    }
    Ok(Outcome::Passed)
}

async fn race_round(cx: &Ctx, rr: Arc<dyn TestSupport>, cap: u32, round: usize) -> CaseResult {
    let q = cx.queue_named(&format!("rr{cap}r{round}"));
    let (low, high) = (30usize, 60usize);
    let total = (low + high) as u64;
    cx.enqueue_n(&q, low).await?;
    cx.backend.set_max_workers(&q, Some(cap)).await?;
    let held = Arc::new(AtomicI64::new(0));
    let max_held = Arc::new(AtomicI64::new(0));
    let max_db = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..cx.stress.claimers.max(6) {
        let (q, held, max_held, done, b) = (q.clone(), held.clone(), max_held.clone(), done.clone(), rr.clone());
        tasks.spawn(async move {
            let w = WorkerId::random();
            let mut progress = crate::cases::Progress::new();
            while done.load(Ordering::SeqCst) < total {
                let now_done = done.load(Ordering::SeqCst);
                ensure!(
                    !progress.stalled(now_done),
                    "isolation race round: no job finished for 60 s ({now_done} of {total})"
                );
                let got = b.claim(&ClaimParams::new(w, vec![q.clone()], cap + 1, ClaimMode::Start)).await?;
                if got.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                ensure!(got.len() as u32 <= cap, "one claim returned {} jobs of a queue capped at {cap}", got.len());
                let now_held = held.fetch_add(got.len() as i64, Ordering::SeqCst) + got.len() as i64;
                max_held.fetch_max(now_held, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                held.fetch_sub(got.len() as i64, Ordering::SeqCst);
                let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
                let c = b.complete(w, &leases).await?;
                ensure!(c.lost.is_empty(), "complete lost leases {:?}", c.lost);
                done.fetch_add(c.done.len() as u64, Ordering::SeqCst);
            }
            Ok::<(), Failure>(())
        });
    }
    // Newer, higher-priority jobs keep arriving: each is the first pick of the next claim,
    // and invisible to a claim whose snapshot is older than it.
    let feeder = {
        let (cx, q) = (cx.clone(), q.clone());
        tokio::spawn(async move {
            for i in 0..high {
                cx.enqueue(cx.job(&q).priority(10).json(serde_json::json!({ "hi": i }))).await?;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok::<(), Failure>(())
        })
    };
    let watcher = {
        let (cx, q, done, max_db) = (cx.clone(), q.clone(), done.clone(), max_db.clone());
        tokio::spawn(async move {
            while done.load(Ordering::SeqCst) < total {
                let s = cx.queue_stats(&q).await?;
                max_db.fetch_max(s.fetched + s.processing, Ordering::SeqCst);
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
    feeder.await.map_err(|e| Failure(format!("feeder panicked: {e}")))??;
    watcher.await.map_err(|e| Failure(format!("watcher panicked: {e}")))??;
    if let Some(e) = first_err {
        return Err(Failure(format!("cap {cap}, round {round}: {e}")));
    }
    let max_held = max_held.load(Ordering::SeqCst);
    ensure!(max_held <= i64::from(cap), "cap {cap} round {round}: {max_held} jobs were held at once by workers");
    let max_db = max_db.load(Ordering::SeqCst);
    ensure!(max_db <= u64::from(cap), "cap {cap} round {round}: stats showed {max_db} active jobs");
    ensure_eq!(cx.queue_stats(&q).await?.archived, total, "cap {cap} round {round}: archived");
    Ok(())
}
