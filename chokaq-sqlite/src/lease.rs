//! The lease-guarded operations: start, heartbeat, complete, fail, release.
//!
//! Every write matches `id AND lease AND worker_id AND status` inside one `BEGIN IMMEDIATE`
//! transaction; a write that matches no row reports the lease as lost, never a silent no-op.

use chokaq_core::{
    validate, BatchOutcome, DeadReason, FailAction, FailOutcome, Fenced, HeartbeatReport, LeaseRef, Result, WorkerId,
};
use sqlx::Row;

use crate::backend::{commit, SqliteBackend};
use crate::error::map_err;
use crate::rows::{clean_error, dur_us, now_us, ts};

/// [`chokaq_core::Backend::start`].
pub(crate) async fn start(b: &SqliteBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("start", leases)?;
    let mut out = BatchOutcome::default();
    if leases.is_empty() {
        return Ok(out);
    }
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
        if n == 1 {
            out.done.push(l.id)
        } else {
            out.lost.push(l.id)
        }
    }
    commit(tx).await?;
    Ok(out)
}

/// [`chokaq_core::Backend::heartbeat`].
pub(crate) async fn heartbeat(b: &SqliteBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
    validate::lease_list("heartbeat", leases)?;
    let mut out = HeartbeatReport::default();
    if leases.is_empty() {
        return Ok(out);
    }
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
        match cancel {
            Some(c) => {
                out.held.push(l.id);
                if c != 0 {
                    out.cancel_requested.push(l.id);
                }
            }
            None => out.lost.push(l.id),
        }
    }
    commit(tx).await?;
    Ok(out)
}

/// [`chokaq_core::Backend::complete`].
pub(crate) async fn complete(b: &SqliteBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("complete", leases)?;
    let mut out = BatchOutcome::default();
    if leases.is_empty() {
        return Ok(out);
    }
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
        if n == 1 {
            sqlx::query(&b.sql.delete_hot).bind(l.id.0).execute(&mut *tx).await.map_err(map_err)?;
            out.done.push(l.id);
        } else {
            out.lost.push(l.id);
        }
    }
    commit(tx).await?;
    Ok(out)
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
        tx.rollback().await.map_err(map_err)?;
        return Ok(Fenced::LeaseLost);
    };
    let attempt: i64 = held.try_get("attempt").map_err(map_err)?;
    let max_attempts: i64 = held.try_get("max_attempts").map_err(map_err)?;
    let result = match outcome {
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
    commit(tx).await?;
    Ok(Fenced::Done(result))
}

/// [`chokaq_core::Backend::release`].
pub(crate) async fn release(b: &SqliteBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("release", leases)?;
    let mut out = BatchOutcome::default();
    if leases.is_empty() {
        return Ok(out);
    }
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
        match q {
            Some(q) => {
                out.done.push(l.id);
                queues.push(q);
            }
            None => out.lost.push(l.id),
        }
    }
    commit(tx).await?;
    b.notify(queues);
    Ok(out)
}
