//! Stress with faults: connections killed mid-transaction while claimers and completers run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chokaq_core::testing::Presence;
use chokaq_core::{ClaimMode, JobId, JobLocation, JobStatus, Lease, LeaseRef, WorkerId};

use crate::ctx::{CaseResult, Ctx, Failure, AGED};
use crate::{ensure, ensure_eq};

super::cases!(stress: kill_connections_nothing_lost [KILL_CONNECTIONS]);

/// (id, attempt) -> the leases handed out for it.
type ClaimLog = HashMap<(JobId, i32), Vec<Lease>>;

/// While claimers and completers run, the backend's database connections are killed again
/// and again. Calls may fail (Unavailable); afterwards nothing is lost or doubled: every id
/// is in exactly one table, no job was handed to two workers under one attempt, and once the
/// survivors are rescued and finished every job is archived exactly once.
pub async fn kill_connections_nothing_lost(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let n = cx.stress.jobs;
    let ids = cx.enqueue_n(&q, n).await?;
    let stop = Arc::new(AtomicBool::new(false));
    // (id, attempt) -> leases: two leases for one attempt would be a duplicate claim.
    let claims: Arc<Mutex<ClaimLog>> = Arc::default();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..cx.stress.claimers.clamp(2, 6) {
        let (cx, q, stop, claims) = (cx.clone(), q.clone(), stop.clone(), claims.clone());
        workers.spawn(async move {
            let w = WorkerId::random();
            let mut errors = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let got = match cx.claim(w, &q, 5, ClaimMode::Start).await {
                    Ok(g) => g,
                    Err(_) => {
                        errors += 1;
                        tokio::task::yield_now().await;
                        continue;
                    }
                };
                if got.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                {
                    let mut c = claims.lock().expect("lock");
                    for j in &got {
                        c.entry((j.id, j.attempt)).or_default().push(j.lease);
                    }
                }
                let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
                if cx.backend.complete(w, &leases).await.is_err() {
                    errors += 1;
                }
            }
            Ok::<u64, Failure>(errors)
        });
    }
    let killer = {
        let (cx, stop) = (cx.clone(), stop.clone());
        tokio::spawn(async move {
            let mut kills = 0u64;
            let mut rounds = 0u64;
            let end = Instant::now() + Duration::from_secs(cx.stress.seconds.max(1));
            while Instant::now() < end {
                match cx.backend.kill_connections().await {
                    Ok(k) => kills += k,
                    Err(e) if e.kind() == chokaq_core::ErrorKind::Unsupported => {
                        return Err(Failure(format!("kill_connections unsupported: {e}")));
                    }
                    Err(_) => {}
                }
                rounds += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            stop.store(true, Ordering::SeqCst);
            Ok::<(u64, u64), Failure>((kills, rounds))
        })
    };
    let (kills, _rounds) = killer.await.map_err(|e| Failure(format!("killer panicked: {e}")))??;
    stop.store(true, Ordering::SeqCst);
    while let Some(r) = workers.join_next().await {
        r.map_err(|e| Failure(format!("worker panicked: {e}")))??;
    }
    ensure!(kills > 0, "kill_connections never killed a session");
    // Every job in exactly one place, right after the storm.
    let p = retry_transient(|| cx.backend.presence_many(&ids)).await?;
    let bad: Vec<_> = p.iter().filter(|(_, p)| p.total() != 1).take(5).collect();
    ensure!(bad.is_empty(), "jobs in two tables or none after killed connections: {bad:?}");
    let dups: Vec<_> = claims
        .lock()
        .expect("lock")
        .iter()
        .filter(|(_, l)| l.len() > 1)
        .map(|(k, l)| (*k, l.clone()))
        .take(5)
        .collect();
    ensure!(dups.is_empty(), "jobs claimed twice for one attempt: {dups:?}");
    // Finish the survivors: rescue what a killed call left Processing, claim and complete.
    let w = WorkerId::random();
    let deadline = Instant::now() + crate::POLL_DEADLINE;
    loop {
        let s = retry_transient(|| cx.backend.stats()).await?;
        let qs = s.queue(q.as_str()).cloned().unwrap_or_default();
        if qs.pending + qs.fetched + qs.processing == 0 {
            break;
        }
        ensure!(Instant::now() < deadline, "survivors not finished in time: {qs:?}");
        for (id, _) in p.iter().filter(|(_, p)| p.hot == 1) {
            if let Ok(Some(r)) = cx.backend.get_job(*id).await {
                if matches!(r.location, JobLocation::Hot(JobStatus::Processing) | JobLocation::Hot(JobStatus::Fetched))
                {
                    let _ = cx.age(*id, AGED).await;
                }
            }
        }
        let _ = cx.backend.rescue(&crate::rescue_params()).await;
        if let Ok(got) = cx.claim(w, &q, 100, ClaimMode::Start).await {
            let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
            let _ = cx.backend.complete(w, &leases).await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let p = retry_transient(|| cx.backend.presence_many(&ids)).await?;
    let bad: Vec<_> = p.iter().filter(|(_, p)| *p != Presence { hot: 0, archive: 1, dead: 0 }).take(5).collect();
    ensure!(bad.is_empty(), "jobs not archived exactly once at the end: {bad:?}");
    ensure_eq!(p.len(), n, "presence rows");
    Ok(())
}

/// Retries a read a few times while the pool reconnects after killed sessions.
async fn retry_transient<T, F, Fut>(mut f: F) -> Result<T, Failure>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = chokaq_core::Result<T>>,
{
    let mut last = None;
    for _ in 0..20 {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_retryable() => last = Some(e),
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(last.map(Failure::from).unwrap_or_else(|| Failure("retry failed".into())))
}
