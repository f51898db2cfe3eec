//! Maintenance and queue controls: [`crate::Backend::rescue`] (expired reservations and holds
//! back to Pending, zombies retried or dead-lettered, the starts log pruned to what a rate
//! window can still see), `cancel`, `control_queue`, `requeue_dead` and `purge`.

use std::collections::HashMap;
use std::time::Duration;

use crate::{
    validate, Backend, CancelOutcome, DeadReason, Error, ErrorKind, JobId, JobLocation, JobStatus, PurgeParams,
    PurgeTarget, QueueControl, QueueName, QueueSettings, RequeueOutcome, RescueParams, RescueReport, Result,
    ZombiePolicy,
};

use super::{minus, status_of, MemoryBackend};

/// [`crate::Backend::rescue`].
pub(crate) async fn rescue(b: &MemoryBackend, params: &RescueParams) -> Result<RescueReport> {
    let mut report = b.rescue_now(params);
    // One instance: the retention purges run under the same (process-wide) lock rule.
    for req in &params.purge {
        report.purged += b.purge(req).await?;
    }
    Ok(report)
}

/// [`crate::Backend::cancel`].
pub(crate) async fn cancel(b: &MemoryBackend, id: JobId) -> Result<CancelOutcome> {
    let mut s = b.lock();
    let at = b.now();
    let Some(r) = s.hot.get_mut(&id) else {
        return Ok(CancelOutcome::NotLive);
    };
    match status_of(r) {
        // Processing, or held (its worker may be running it): a request.
        Some(JobStatus::Processing) => {
            r.cancel_requested = true;
            r.updated_at = at;
            Ok(CancelOutcome::Requested)
        }
        Some(JobStatus::Fetched) if r.heartbeat_at.is_some() => {
            r.cancel_requested = true;
            r.updated_at = at;
            Ok(CancelOutcome::Requested)
        }
        _ => {
            MemoryBackend::to_dead(&mut s, id, DeadReason::Cancelled, None, at);
            Ok(CancelOutcome::Cancelled)
        }
    }
}

/// [`crate::Backend::control_queue`].
pub(crate) async fn control_queue(
    b: &MemoryBackend,
    queue: &QueueName,
    control: QueueControl,
) -> Result<QueueSettings> {
    validate::queue_name(queue.as_str())?;
    control.validate()?;
    let mut s = b.lock();
    let mut st = MemoryBackend::settings(&s, queue);
    match control {
        QueueControl::Pause => st.is_paused = true,
        QueueControl::Resume => st.is_paused = false,
        QueueControl::Activate => st.is_active = true,
        QueueControl::Deactivate => st.is_active = false,
        QueueControl::SetMaxWorkers(m) => st.max_workers = m,
        QueueControl::SetZombieTimeout(t) => st.zombie_timeout = t,
        QueueControl::SetFetchedTimeout(t) => st.fetched_timeout = t,
        QueueControl::SetZombiePolicy(p) => st.zombie_policy = p,
        QueueControl::SetKeyMaxWorkers(m) => st.key_max_workers = m,
        QueueControl::SetRateLimit(l) => st.rate_limit = l,
    }
    st.updated_at = Some(b.now());
    s.queues.insert(queue.clone(), st.clone());
    Ok(st)
}

/// [`crate::Backend::requeue_dead`].
pub(crate) async fn requeue_dead(b: &MemoryBackend, id: JobId) -> Result<RequeueOutcome> {
    let mut s = b.lock();
    let at = b.now();
    let Some(r) = s.dead.get(&id) else {
        return Ok(RequeueOutcome::NotFound);
    };
    if let Some(key) = &r.idempotency_key {
        if MemoryBackend::key_holder(&s, &r.queue, key).is_some() {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("a live job of its queue holds the idempotency key of dead job {id}"),
            ));
        }
    }
    let mut r = s.dead.remove(&id).expect("checked above");
    s.expired_holds.remove(&id);
    MemoryBackend::to_pending(&mut r, at);
    r.lease = None;
    r.attempt = 0;
    r.scheduled_at = None;
    r.started_at = None;
    r.heartbeat_at = None;
    r.finished_at = None;
    s.hot.insert(id, r);
    Ok(RequeueOutcome::Requeued)
}

/// [`crate::Backend::purge`].
pub(crate) async fn purge(b: &MemoryBackend, req: &PurgeParams) -> Result<u64> {
    if req.batch_size == 0 || req.max_batches == 0 {
        return Err(Error::invalid("purge batch_size and max_batches must be at least 1"));
    }
    let mut s = b.lock();
    let cutoff = minus(b.now(), req.older_than);
    let budget = u64::from(req.batch_size) * u64::from(req.max_batches);
    let table = match req.target {
        PurgeTarget::Archive => &mut s.archive,
        PurgeTarget::DeadLetter => &mut s.dead,
    };
    let ids: Vec<JobId> = table
        .values()
        .filter(|r| r.finished_at.is_some_and(|f| f < cutoff))
        .filter(|r| req.queue.as_ref().is_none_or(|q| &r.queue == q))
        .filter(|r| req.kind.as_ref().is_none_or(|k| &r.kind == k))
        .filter(|r| req.reason.is_none_or(|reason| r.location == JobLocation::Dead(reason)))
        .map(|r| r.id)
        .take(budget as usize)
        .collect();
    for id in &ids {
        table.remove(id);
    }
    for id in &ids {
        s.outputs.remove(id);
    }
    Ok(ids.len() as u64)
}

impl MemoryBackend {
    /// The rescue itself (timeouts from each queue's settings), under the store's lock.
    pub(super) fn rescue_now(&self, params: &RescueParams) -> RescueReport {
        let mut s = self.lock();
        let at = self.now();
        let mut report = RescueReport { ran: true, ..Default::default() };
        let mut todo: Vec<(JobId, bool)> = Vec::new(); // (id, is_zombie)
        let mut held_expired: Vec<JobId> = Vec::new();
        for r in s.hot.values() {
            if (todo.len() + held_expired.len()) as u32 >= params.limit {
                break;
            }
            match status_of(r) {
                // Held (the claim set its heartbeat): its handler may be running, so the zombie
                // timeout applies, from its last heartbeat.
                Some(JobStatus::Fetched) if r.heartbeat_at.is_some() => {
                    let timeout = Self::settings(&s, &r.queue).effective_zombie_timeout();
                    if r.heartbeat_at.unwrap_or(r.updated_at) < minus(at, timeout) {
                        held_expired.push(r.id);
                    }
                }
                Some(JobStatus::Fetched) => {
                    let timeout = Self::settings(&s, &r.queue).effective_fetched_timeout();
                    if r.updated_at < minus(at, timeout) {
                        todo.push((r.id, false));
                    }
                }
                Some(JobStatus::Processing) => {
                    let timeout = Self::settings(&s, &r.queue).effective_zombie_timeout();
                    if r.heartbeat_at.unwrap_or(r.updated_at) < minus(at, timeout) {
                        todo.push((r.id, true));
                    }
                }
                _ => {}
            }
        }
        for id in held_expired {
            let cancelled = s.hot.get(&id).is_some_and(|r| r.cancel_requested);
            let expired = s.expired_holds.get(&id).copied().unwrap_or(0) + 1;
            if cancelled {
                Self::to_dead(&mut s, id, DeadReason::Cancelled, None, at);
                report.zombies_dead += 1;
            } else {
                // Never dead-lettered for its expiries (issue 36): the job may never have run
                // (it waited in a crashed worker's look-ahead, or the claim's reply was lost).
                // The count goes out with its next claim, and the runtime records its start
                // before its handler begins, so a job that kills its worker counts attempts.
                s.expired_holds.insert(id, expired);
                let r = s.hot.get_mut(&id).expect("listed above");
                Self::to_pending(r, at);
                r.lease = None;
                r.heartbeat_at = None;
                report.fetched_released += 1;
            }
        }
        for (id, zombie) in todo {
            let r = s.hot.get(&id).expect("listed above");
            if !zombie {
                let r = s.hot.get_mut(&id).expect("listed above");
                Self::to_pending(r, at);
                r.lease = None;
                report.fetched_released += 1;
                continue;
            }
            let policy = Self::settings(&s, &r.queue).zombie_policy;
            if r.cancel_requested {
                // An accepted cancel is final: the zombie is not retried.
                Self::to_dead(&mut s, id, DeadReason::Cancelled, None, at);
                report.zombies_dead += 1;
            } else if policy == ZombiePolicy::Retry && r.attempt < r.max_attempts {
                let r = s.hot.get_mut(&id).expect("listed above");
                Self::to_pending(r, at);
                r.lease = None;
                report.zombies_retried += 1;
            } else {
                Self::to_dead(&mut s, id, DeadReason::Zombie, None, at);
                report.zombies_dead += 1;
            }
        }
        // The starts log keeps only what a rate window can still see.
        let windows: HashMap<QueueName, Duration> =
            s.queues.iter().filter_map(|(q, st)| st.rate_limit.map(|l| (q.clone(), l.per))).collect();
        s.starts.prune(|q| windows.get(q).map(|per| minus(at, *per)));
        report
    }
}
