//! The lease-guarded operations: start, heartbeat, complete, fail, release.
//!
//! Every write matches `id AND lease AND worker_id AND status` inside one `BEGIN IMMEDIATE`
//! transaction; a write that matches no row reports the lease as lost, never a silent no-op,
//! unless that very lease already wrote the outcome (a repeated start, complete or fail, whose
//! first reply was lost), which is reported again. An id listed more than once in a batch is
//! reported once, done when any of its entries was.
//!
//! A held job is Fetched or Processing: heartbeat, complete and fail take either (a job claimed
//! with `ClaimMode::Hold` may run, and finish, before its start is recorded). A Fetched job's
//! run counts at its outcome, as `start` would have counted it: `attempt + 1`.

use chokaq_core::{
    validate, BatchOutcome, DeadReason, FailAction, FailOutcome, Fenced, HeartbeatReport, JobStatus, LeaseRef, Result,
    WorkerId,
};
use sqlx::Row;

use crate::backend::{commit, SqliteBackend};
use crate::error::map_err;
use crate::rows::{clean_error, dur_us, now_us, ts};

/// [`chokaq_core::Backend::start`].
pub(crate) async fn start(b: &SqliteBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("start", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let mut entries = Vec::with_capacity(leases.len());
    let mut tx = b.begin_write().await?;
    let now = now_us();
    for l in leases {
        let n = sqlx::query(&b.sql.start)
            .bind(now)
            .bind(l.id.0)
            .bind(l.lease.0)
            .bind(worker.0)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        let done = n == 1
            // Started before with this very lease (a repeat): done again, nothing written.
            || sqlx::query(&b.sql.started_with)
                .bind(l.id.0)
                .bind(l.lease.0)
                .bind(worker.0)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?
                .is_some();
        entries.push((l.id, done));
    }
    commit(tx).await?;
    Ok(BatchOutcome::merge(entries))
}

/// [`chokaq_core::Backend::heartbeat`].
pub(crate) async fn heartbeat(b: &SqliteBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
    validate::lease_list("heartbeat", leases)?;
    if leases.is_empty() {
        return Ok(HeartbeatReport::default());
    }
    let mut entries = Vec::with_capacity(leases.len());
    let mut tx = b.begin_write().await?;
    let now = now_us();
    for l in leases {
        let cancel: Option<i64> = sqlx::query_scalar(&b.sql.heartbeat)
            .bind(now)
            .bind(l.id.0)
            .bind(l.lease.0)
            .bind(worker.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        entries.push((l.id, cancel.map(|c| c != 0)));
    }
    commit(tx).await?;
    Ok(HeartbeatReport::merge(entries))
}

/// [`chokaq_core::Backend::complete`].
pub(crate) async fn complete(b: &SqliteBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("complete", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let mut entries = Vec::with_capacity(leases.len());
    let mut tx = b.begin_write().await?;
    let now = now_us();
    for l in leases {
        let n = sqlx::query(&b.sql.archive_held)
            .bind(now)
            .bind(l.id.0)
            .bind(l.lease.0)
            .bind(worker.0)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        let done = if n == 1 {
            sqlx::query(&b.sql.delete_hot).bind(l.id.0).execute(&mut *tx).await.map_err(map_err)?;
            true
        } else {
            // Completed before with this very lease (a repeat): the outcome stands.
            sqlx::query(&b.sql.completed_with)
                .bind(l.id.0)
                .bind(l.lease.0)
                .bind(worker.0)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?
                .is_some()
        };
        if done {
            // A no-op unless the teeth test's `Faults::key_slot_double_free` is on.
            crate::claim::fault_free_slot(b, &mut tx, l.id.0).await?;
        }
        entries.push((l.id, done));
    }
    commit(tx).await?;
    Ok(BatchOutcome::merge(entries))
}

/// [`chokaq_core::Backend::fail`].
pub(crate) async fn fail(
    b: &SqliteBackend,
    worker: WorkerId,
    lease: LeaseRef,
    outcome: FailAction,
) -> Result<Fenced<FailOutcome>> {
    // Validate before the transaction: bad input changes nothing.
    let delay_us = match &outcome {
        FailAction::Retry { delay, .. } | FailAction::Snooze { delay } => dur_us("delay", *delay)?,
        _ => 0,
    };
    let mut tx = b.begin_write().await?;
    let now = now_us();
    let held = sqlx::query(&b.sql.held_attempts)
        .bind(lease.id.0)
        .bind(lease.lease.0)
        .bind(worker.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
    let Some(held) = held else {
        // Not held: the outcome this lease already wrote, if it did (a repeat), else lost.
        let stood = sqlx::query(&b.sql.fail_standing)
            .bind(lease.id.0)
            .bind(lease.lease.0)
            .bind(worker.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        if stood.is_some() && b.faults.key_slot_double_free {
            crate::claim::fault_free_slot(b, &mut tx, lease.id.0).await?;
            commit(tx).await?;
        } else {
            tx.rollback().await.map_err(map_err)?;
        }
        let Some(stood) = stood else { return Ok(Fenced::LeaseLost) };
        let at: Option<i64> = stood.try_get("at").map_err(map_err)?;
        let reason: Option<String> = stood.try_get("reason").map_err(map_err)?;
        let missing = || chokaq_core::Error::new(chokaq_core::ErrorKind::Other, "fail: no due time stored");
        return Ok(Fenced::Done(match (reason, &outcome) {
            (Some(r), _) => FailOutcome::DeadLettered(DeadReason::parse(&r)?),
            (None, FailAction::Snooze { .. }) => FailOutcome::Snoozed { until: ts(at.ok_or_else(missing)?)? },
            (None, _) => FailOutcome::Retried { at: ts(at.ok_or_else(missing)?)? },
        }));
    };
    let mut attempt: i64 = held.try_get("attempt").map_err(map_err)?;
    if held.try_get::<i64, _>("status").map_err(map_err)? == i64::from(JobStatus::Fetched.code()) {
        // A held Fetched job: started first, in this transaction (its run counts), then the
        // outcome applies to the effective attempt as to any Processing job's.
        sqlx::query(&b.sql.start)
            .bind(now)
            .bind(lease.id.0)
            .bind(lease.lease.0)
            .bind(worker.0)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        attempt += 1;
    }
    let max_attempts: i64 = held.try_get("max_attempts").map_err(map_err)?;
    // An accepted cancel is final: no retry or snooze of the job.
    let cancelled = held.try_get::<i64, _>("cancel_requested").map_err(map_err)? != 0;
    let result = match outcome {
        FailAction::Retry { error, .. } if cancelled => {
            b.dead_letter(&mut tx, now, lease.id, DeadReason::Cancelled, Some(&error)).await?;
            FailOutcome::DeadLettered(DeadReason::Cancelled)
        }
        FailAction::Snooze { .. } if cancelled => {
            b.dead_letter(&mut tx, now, lease.id, DeadReason::Cancelled, None).await?;
            FailOutcome::DeadLettered(DeadReason::Cancelled)
        }
        FailAction::Retry { error, .. } if attempt < max_attempts => {
            let at = now + delay_us;
            sqlx::query(&b.sql.back_to_pending)
                .bind(at)
                .bind(now)
                .bind(Some(clean_error(&error)))
                .bind(0_i64)
                .bind(lease.id.0)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            FailOutcome::Retried { at: ts(at)? }
        }
        FailAction::Retry { error, .. } => {
            b.dead_letter(&mut tx, now, lease.id, DeadReason::Failed, Some(&error)).await?;
            FailOutcome::DeadLettered(DeadReason::Failed)
        }
        FailAction::DeadLetter { reason, error } => {
            b.dead_letter(&mut tx, now, lease.id, reason, Some(&error)).await?;
            FailOutcome::DeadLettered(reason)
        }
        FailAction::Cancelled { error } => {
            b.dead_letter(&mut tx, now, lease.id, DeadReason::Cancelled, error.as_deref()).await?;
            FailOutcome::DeadLettered(DeadReason::Cancelled)
        }
        FailAction::Snooze { .. } => {
            let until = now + delay_us;
            sqlx::query(&b.sql.back_to_pending)
                .bind(until)
                .bind(now)
                .bind(None::<String>)
                .bind(1_i64)
                .bind(lease.id.0)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            FailOutcome::Snoozed { until: ts(until)? }
        }
    };
    // A no-op unless the teeth test's `Faults::key_slot_double_free` is on.
    crate::claim::fault_free_slot(b, &mut tx, lease.id.0).await?;
    commit(tx).await?;
    Ok(Fenced::Done(result))
}

/// [`chokaq_core::Backend::release`].
pub(crate) async fn release(b: &SqliteBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("release", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let mut entries = Vec::with_capacity(leases.len());
    let mut tx = b.begin_write().await?;
    let now = now_us();
    let mut queues = Vec::new();
    for l in leases {
        let q: Option<String> = sqlx::query_scalar(&b.sql.release)
            .bind(now)
            .bind(l.id.0)
            .bind(l.lease.0)
            .bind(worker.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        let done = match q {
            Some(q) => {
                queues.push(q);
                true
            }
            // An accepted cancel is final: a held job with a cancel request is dead-lettered
            // `cancelled`, never put back.
            None => {
                let cancelled = sqlx::query(&b.sql.release_cancelled)
                    .bind(l.id.0)
                    .bind(l.lease.0)
                    .bind(worker.0)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(map_err)?
                    .is_some();
                cancelled && b.dead_letter(&mut tx, now, l.id, DeadReason::Cancelled, None).await?
            }
        };
        if done {
            // A no-op unless the teeth test's `Faults::key_slot_double_free` is on.
            crate::claim::fault_free_slot(b, &mut tx, l.id.0).await?;
        }
        entries.push((l.id, done));
    }
    commit(tx).await?;
    b.notify(queues);
    Ok(BatchOutcome::merge(entries))
}
