//! The workers table (live worker processes) and the finished-jobs throughput:
//! [`crate::Backend::register_worker`], `deregister_worker`, `list_workers`, `prune_workers`
//! and `throughput`.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::DurationRound;

use crate::{
    DeadReason, JobLocation, JobRecord, JobStatus, Result, ThroughputBucket, ThroughputParams, Timestamp, WorkerId,
    WorkerProcess, WorkerRegistration,
};

use super::{minus, MemoryBackend};

/// [`crate::Backend::register_worker`].
pub(crate) async fn register_worker(b: &MemoryBackend, reg: &WorkerRegistration) -> Result<()> {
    reg.validate()?;
    let mut s = b.lock();
    let at = b.now();
    let started_at = s.workers.get(&reg.worker).map_or(at, |w| w.started_at);
    s.workers.insert(
        reg.worker,
        WorkerProcess {
            worker: reg.worker,
            host: reg.host.clone(),
            pid: reg.pid,
            queues: reg.queues.iter().map(|q| q.to_string()).collect(),
            concurrency: reg.concurrency,
            started_at,
            last_seen_at: at,
        },
    );
    Ok(())
}

/// [`crate::Backend::deregister_worker`].
pub(crate) async fn deregister_worker(b: &MemoryBackend, worker: WorkerId) -> Result<bool> {
    Ok(b.lock().workers.remove(&worker).is_some())
}

/// [`crate::Backend::list_workers`].
pub(crate) async fn list_workers(b: &MemoryBackend) -> Result<Vec<WorkerProcess>> {
    let mut out: Vec<WorkerProcess> = b.lock().workers.values().cloned().collect();
    out.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(a.worker.0.cmp(&b.worker.0)));
    Ok(out)
}

/// [`crate::Backend::prune_workers`].
pub(crate) async fn prune_workers(b: &MemoryBackend, stale_after: Duration) -> Result<u64> {
    let cutoff = minus(b.now(), stale_after);
    let mut s = b.lock();
    let before = s.workers.len();
    s.workers.retain(|_, w| w.last_seen_at >= cutoff);
    Ok((before - s.workers.len()) as u64)
}

/// [`crate::Backend::throughput`].
pub(crate) async fn throughput(b: &MemoryBackend, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
    params.validate()?;
    let since = minus(b.now(), params.window);
    let s = b.lock();
    let mut per: BTreeMap<(Timestamp, String), [u64; 3]> = BTreeMap::new();
    let mut add = |r: &JobRecord, at: Timestamp, i: usize| {
        if at >= since && params.queue.as_ref().is_none_or(|q| &r.queue == q) {
            let minute = at.duration_trunc(chrono::Duration::minutes(1)).unwrap_or(at);
            per.entry((minute, r.queue.to_string())).or_default()[i] += 1;
        }
    };
    for r in s.archive.values() {
        if let Some(f) = r.finished_at {
            add(r, f, 0);
        }
    }
    for r in s.dead.values() {
        if let (Some(f), JobLocation::Dead(reason)) = (r.finished_at, r.location) {
            if reason != DeadReason::Cancelled {
                add(r, f, 1);
            }
        }
    }
    for r in s.hot.values() {
        if r.location == JobLocation::Hot(JobStatus::Pending) && r.attempt > 0 && r.last_error.is_some() {
            add(r, r.updated_at, 2);
        }
    }
    Ok(per
        .into_iter()
        .map(|((minute, queue), [finished, failed, retried])| ThroughputBucket {
            queue,
            minute,
            finished,
            failed,
            retried,
        })
        .collect())
}
