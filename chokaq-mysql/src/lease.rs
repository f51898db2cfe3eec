//! The lease-guarded operations: start, heartbeat, complete, fail, release.
//!
//! Every write first locks the row by `id AND lease AND worker_id AND status` (`FOR UPDATE`),
//! inside one transaction; a lock that matches no row reports the lease as lost, never a silent
//! no-op, unless that very lease already wrote the outcome (a repeated start, complete or
//! fail), which is reported again. A batch is locked in id order, so two batches over the same
//! rows cannot deadlock. Moves copy the locked row (`INSERT ... SELECT`) and delete it in the
//! same transaction.
//!
//! A held job is Fetched or Processing: heartbeat, complete and fail take either. A Fetched
//! job's run counts at its outcome, as `start` would have counted it: `attempt + 1`.

use chokaq_core::{
    validate, BatchOutcome, DeadReason, FailAction, FailOutcome, Fenced, HeartbeatReport, JobStatus, LeaseRef, Result,
    WorkerId,
};
use sqlx::mysql::MySqlRow;
use sqlx::Row;

use crate::backend::{commit, MysqlBackend, Tx};
use crate::error::{map_err, Path};
use crate::rows::{clean_error, dur_us, ts};

/// The leases of a batch in id order (the lock order).
fn sorted(leases: &[LeaseRef]) -> Vec<LeaseRef> {
    let mut v = leases.to_vec();
    v.sort_by_key(|l| l.id);
    v
}

/// Locks a held job of this lease: its row (status, attempt, max_attempts, cancel_requested).
async fn lock_held(b: &MysqlBackend, tx: &mut Tx, worker: WorkerId, l: &LeaseRef) -> Result<Option<MySqlRow>> {
    sqlx::query(&b.sql.lock_held)
        .bind(l.id.0)
        .bind(l.lease.0)
        .bind(worker.0)
        .fetch_optional(&mut **tx)
        .await
        .map_err(map_err)
}

fn int(row: &MySqlRow, col: &str) -> Result<i64> {
    row.try_get::<i64, _>(col).map_err(map_err)
}

/// [`chokaq_core::Backend::start`].
pub(crate) async fn start(b: &MysqlBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("start", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let leases = sorted(leases);
    b.retrying(Path::Completion, || async {
        let mut entries = Vec::with_capacity(leases.len());
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        for l in &leases {
            let n = sqlx::query(&b.sql.start)
                .bind(now)
                .bind(now)
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
    })
    .await
}

/// [`chokaq_core::Backend::heartbeat`].
pub(crate) async fn heartbeat(b: &MysqlBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
    validate::lease_list("heartbeat", leases)?;
    if leases.is_empty() {
        return Ok(HeartbeatReport::default());
    }
    let leases = sorted(leases);
    b.retrying(Path::Completion, || async {
        let mut entries = Vec::with_capacity(leases.len());
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        for l in &leases {
            let held = lock_held(b, &mut tx, worker, l).await?;
            let cancel = match held {
                Some(row) => {
                    sqlx::query(&b.sql.heartbeat)
                        .bind(now)
                        .bind(now)
                        .bind(l.id.0)
                        .execute(&mut *tx)
                        .await
                        .map_err(map_err)?;
                    Some(int(&row, "cancel_requested")? != 0)
                }
                None => None,
            };
            entries.push((l.id, cancel));
        }
        commit(tx).await?;
        Ok(HeartbeatReport::merge(entries))
    })
    .await
}

/// [`chokaq_core::Backend::complete`].
pub(crate) async fn complete(b: &MysqlBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("complete", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let leases = sorted(leases);
    b.retrying(Path::Completion, || async {
        let mut entries = Vec::with_capacity(leases.len());
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        for l in &leases {
            let done = if lock_held(b, &mut tx, worker, l).await?.is_some() {
                sqlx::query(&b.sql.archive_held)
                    .bind(now)
                    .bind(now)
                    .bind(now)
                    .bind(l.id.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                b.delete_moved(&mut tx, l.id).await?;
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
            entries.push((l.id, done));
        }
        commit(tx).await?;
        Ok(BatchOutcome::merge(entries))
    })
    .await
}

/// [`chokaq_core::Backend::fail`].
pub(crate) async fn fail(
    b: &MysqlBackend,
    worker: WorkerId,
    lease: LeaseRef,
    outcome: FailAction,
) -> Result<Fenced<FailOutcome>> {
    // Validate before the transaction: bad input changes nothing.
    let delay_us = match &outcome {
        FailAction::Retry { delay, .. } | FailAction::Snooze { delay } => dur_us("delay", *delay)?,
        _ => 0,
    };
    b.retrying(Path::Completion, || fail_once(b, worker, lease, &outcome, delay_us)).await
}

async fn fail_once(
    b: &MysqlBackend,
    worker: WorkerId,
    lease: LeaseRef,
    outcome: &FailAction,
    delay_us: i64,
) -> Result<Fenced<FailOutcome>> {
    let mut tx = b.begin().await?;
    let now = b.now(&mut tx).await?;
    let Some(held) = lock_held(b, &mut tx, worker, &lease).await? else {
        // Not held: the outcome this lease already wrote, if it did (a repeat), else lost.
        let stood = sqlx::query(&b.sql.fail_standing)
            .bind(lease.id.0)
            .bind(lease.lease.0)
            .bind(lease.id.0)
            .bind(lease.lease.0)
            .bind(worker.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.rollback().await.map_err(map_err)?;
        let Some(stood) = stood else { return Ok(Fenced::LeaseLost) };
        let at: Option<i64> = stood.try_get("at").map_err(map_err)?;
        let reason = crate::rows::opt_text(&stood, "reason")?;
        let missing = || chokaq_core::Error::new(chokaq_core::ErrorKind::Other, "fail: no due time stored");
        return Ok(Fenced::Done(match (reason, outcome) {
            (Some(r), _) => FailOutcome::DeadLettered(DeadReason::parse(&r)?),
            (None, FailAction::Snooze { .. }) => FailOutcome::Snoozed { until: ts(at.ok_or_else(missing)?)? },
            (None, _) => FailOutcome::Retried { at: ts(at.ok_or_else(missing)?)? },
        }));
    };
    let mut attempt = int(&held, "attempt")?;
    if int(&held, "status")? == i64::from(JobStatus::Fetched.code()) {
        // A held Fetched job: started first, in this transaction (its run counts).
        sqlx::query(&b.sql.start)
            .bind(now)
            .bind(now)
            .bind(now)
            .bind(lease.id.0)
            .bind(lease.lease.0)
            .bind(worker.0)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        attempt += 1;
    }
    let max_attempts = int(&held, "max_attempts")?;
    // An accepted cancel is final: no retry or snooze of the job.
    let cancelled = int(&held, "cancel_requested")? != 0;
    let back = |at: i64, error: Option<String>, give_back: i64| {
        sqlx::query(&b.sql.back_to_pending)
            .bind(at)
            .bind(now)
            .bind(at)
            .bind(now)
            .bind(error)
            .bind(give_back)
            .bind(lease.id.0)
    };
    let result = match outcome {
        FailAction::Retry { error, .. } if cancelled => {
            b.dead_letter(&mut tx, now, lease.id, DeadReason::Cancelled, Some(error)).await?;
            FailOutcome::DeadLettered(DeadReason::Cancelled)
        }
        FailAction::Snooze { .. } if cancelled => {
            b.dead_letter(&mut tx, now, lease.id, DeadReason::Cancelled, None).await?;
            FailOutcome::DeadLettered(DeadReason::Cancelled)
        }
        FailAction::Retry { error, .. } if attempt < max_attempts => {
            let at = now + delay_us;
            back(at, Some(clean_error(error)), 0).execute(&mut *tx).await.map_err(map_err)?;
            FailOutcome::Retried { at: ts(at)? }
        }
        FailAction::Retry { error, .. } => {
            b.dead_letter(&mut tx, now, lease.id, DeadReason::Failed, Some(error)).await?;
            FailOutcome::DeadLettered(DeadReason::Failed)
        }
        FailAction::DeadLetter { reason, error } => {
            b.dead_letter(&mut tx, now, lease.id, *reason, Some(error)).await?;
            FailOutcome::DeadLettered(*reason)
        }
        FailAction::Cancelled { error } => {
            b.dead_letter(&mut tx, now, lease.id, DeadReason::Cancelled, error.as_deref()).await?;
            FailOutcome::DeadLettered(DeadReason::Cancelled)
        }
        FailAction::Snooze { .. } => {
            let until = now + delay_us;
            back(until, None, 1).execute(&mut *tx).await.map_err(map_err)?;
            FailOutcome::Snoozed { until: ts(until)? }
        }
    };
    commit(tx).await?;
    Ok(Fenced::Done(result))
}

/// [`chokaq_core::Backend::release`].
pub(crate) async fn release(b: &MysqlBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("release", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let leases = sorted(leases);
    b.retrying(Path::Completion, || async {
        let mut entries = Vec::with_capacity(leases.len());
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        for l in &leases {
            let held = lock_held(b, &mut tx, worker, l).await?;
            let done = match held {
                Some(row) if int(&row, "status")? == i64::from(JobStatus::Fetched.code()) => {
                    if int(&row, "cancel_requested")? != 0 {
                        // An accepted cancel is final: dead-lettered `cancelled`, never put back.
                        b.dead_letter(&mut tx, now, l.id, DeadReason::Cancelled, None).await?
                    } else {
                        sqlx::query(&b.sql.release).bind(now).bind(l.id.0).execute(&mut *tx).await.map_err(map_err)?;
                        true
                    }
                }
                _ => false,
            };
            entries.push((l.id, done));
        }
        commit(tx).await?;
        Ok(BatchOutcome::merge(entries))
    })
    .await
}
