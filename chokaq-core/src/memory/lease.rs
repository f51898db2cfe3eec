//! The guarded writes of a held lease: [`crate::Backend::start`], `heartbeat`, `complete`,
//! `fail` and `release`.

use crate::{
    validate, BatchOutcome, DeadReason, FailAction, FailOutcome, Fenced, HeartbeatReport, JobLocation, JobStatus,
    LeaseRef, Result, WorkerId,
};

use super::{plus, MemoryBackend};

/// [`crate::Backend::start`].
pub(crate) async fn start(b: &MemoryBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("start", leases)?;
    let mut s = b.lock();
    let at = b.now();
    let mut entries = Vec::with_capacity(leases.len());
    for l in leases {
        // Repeatable: a row this lease already started is done again.
        let ok = match MemoryBackend::held_any(&mut s, worker, *l) {
            Some(r) => {
                MemoryBackend::start_row(r, at);
                true
            }
            None => false,
        };
        entries.push((l.id, ok));
    }
    Ok(BatchOutcome::merge(entries))
}

/// [`crate::Backend::heartbeat`].
pub(crate) async fn heartbeat(b: &MemoryBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
    validate::lease_list("heartbeat", leases)?;
    let mut s = b.lock();
    let at = b.now();
    let mut entries = Vec::with_capacity(leases.len());
    for l in leases {
        let held = MemoryBackend::held_any(&mut s, worker, *l).map(|r| {
            r.heartbeat_at = Some(at);
            r.updated_at = at;
            r.cancel_requested
        });
        entries.push((l.id, held));
    }
    Ok(HeartbeatReport::merge(entries))
}

/// [`crate::Backend::complete`].
pub(crate) async fn complete(b: &MemoryBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("complete", leases)?;
    let mut s = b.lock();
    let at = b.now();
    let mut entries = Vec::with_capacity(leases.len());
    for l in leases {
        let ok = if let Some(r) = MemoryBackend::held_any(&mut s, worker, *l) {
            // A held Fetched row's run counts here (no start was written).
            MemoryBackend::start_row(r, at);
            let mut r = s.hot.remove(&l.id).expect("held row exists");
            r.location = JobLocation::Archived;
            r.finished_at = Some(at);
            r.updated_at = at;
            s.archive.insert(l.id, r);
            // A workflow task's success releases its dependents (docs/workflows.md).
            super::workflow::succeeded(&mut s, l.id);
            super::batch::ended(&mut s, l.id, true, at);
            true
        } else {
            // Completed before with this very lease (a repeat whose first reply was lost):
            // the outcome stands.
            s.archive.get(&l.id).is_some_and(|r| r.lease == Some(l.lease) && r.worker_id == Some(worker))
        };
        entries.push((l.id, ok));
    }
    Ok(BatchOutcome::merge(entries))
}

/// [`crate::Backend::fail`].
pub(crate) async fn fail(
    b: &MemoryBackend,
    worker: WorkerId,
    lease: LeaseRef,
    outcome: FailAction,
) -> Result<Fenced<FailOutcome>> {
    outcome.validate()?;
    let mut s = b.lock();
    let at = b.now();
    let Some(r) = MemoryBackend::held_any(&mut s, worker, lease) else {
        return Ok(MemoryBackend::standing_fail(&s, worker, lease, &outcome));
    };
    // A held Fetched row's run counts first, as `start` would have counted it.
    MemoryBackend::start_row(r, at);
    // An accepted cancel is final: no retry or snooze of the job.
    let cancelled = r.cancel_requested;
    let result = match outcome {
        FailAction::Retry { error, .. } if cancelled => {
            MemoryBackend::to_dead(&mut s, lease.id, DeadReason::Cancelled, Some(validate::error_text(&error)), at);
            FailOutcome::DeadLettered(DeadReason::Cancelled)
        }
        FailAction::Snooze { .. } if cancelled => {
            MemoryBackend::to_dead(&mut s, lease.id, DeadReason::Cancelled, None, at);
            FailOutcome::DeadLettered(DeadReason::Cancelled)
        }
        FailAction::Retry { delay, error } => {
            if r.attempt >= r.max_attempts {
                MemoryBackend::to_dead(&mut s, lease.id, DeadReason::Failed, Some(validate::error_text(&error)), at);
                FailOutcome::DeadLettered(DeadReason::Failed)
            } else {
                let when = plus(at, delay)?;
                MemoryBackend::to_pending(r, at);
                r.scheduled_at = Some(when);
                r.last_error = Some(validate::error_text(&error));
                FailOutcome::Retried { at: when }
            }
        }
        FailAction::DeadLetter { reason, error } => {
            MemoryBackend::to_dead(&mut s, lease.id, reason, Some(validate::error_text(&error)), at);
            FailOutcome::DeadLettered(reason)
        }
        FailAction::Cancelled { error } => {
            MemoryBackend::to_dead(
                &mut s,
                lease.id,
                DeadReason::Cancelled,
                error.as_deref().map(validate::error_text),
                at,
            );
            FailOutcome::DeadLettered(DeadReason::Cancelled)
        }
        FailAction::Snooze { delay } => {
            let when = plus(at, delay)?;
            MemoryBackend::to_pending(r, at);
            r.attempt = (r.attempt - 1).max(0);
            r.scheduled_at = Some(when);
            FailOutcome::Snoozed { until: when }
        }
    };
    Ok(Fenced::Done(result))
}

/// [`crate::Backend::release`].
pub(crate) async fn release(b: &MemoryBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("release", leases)?;
    let mut s = b.lock();
    let at = b.now();
    let mut entries = Vec::with_capacity(leases.len());
    for l in leases {
        let ok = match MemoryBackend::held(&mut s, worker, *l, JobStatus::Fetched) {
            // An accepted cancel is final: the job is not put back.
            Some(r) if r.cancel_requested => {
                MemoryBackend::to_dead(&mut s, l.id, DeadReason::Cancelled, None, at);
                true
            }
            Some(r) => {
                MemoryBackend::to_pending(r, at);
                r.lease = None;
                r.heartbeat_at = None;
                true
            }
            None => false,
        };
        entries.push((l.id, ok));
    }
    Ok(BatchOutcome::merge(entries))
}
