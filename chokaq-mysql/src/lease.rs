//! The lease-guarded operations: start, heartbeat, complete, fail, release.
//!
//! Every write names its rows by `id AND lease AND worker_id AND status`; a lease that matches
//! no row is reported lost, never a silent no-op, unless that very lease already wrote the
//! outcome (a repeated start, complete or fail), which is reported again. A batch is locked in
//! id order, so two batches over the same rows cannot deadlock. The hot paths are set-based:
//! `start` is one autocommitted `UPDATE` per batch, `complete` one transaction per batch that
//! copies the held rows (`INSERT ... SELECT ... FOR UPDATE`, which locks them) and deletes
//! them; the others lock each row first (`FOR UPDATE`) in one transaction.
//!
//! A held job is Fetched or Processing: heartbeat, complete and fail take either. A Fetched
//! job's run counts at its outcome, as `start` would have counted it: `attempt + 1`.

use chokaq_core::{
    validate, BatchOutcome, DeadReason, FailAction, FailOutcome, Fenced, HeartbeatReport, JobStatus, LeaseRef, Result,
    WorkerId,
};
use std::collections::HashSet;

use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::{MySql, MySqlConnection, Row};
use uuid::Uuid;

use crate::backend::{commit, MysqlBackend, Tx};
use crate::error::{corrupt, map_err, Path};
use crate::rows::{clean_error, dur_us, ts};
use crate::sql::{expand, shape, CHUNK};

/// The leases of a batch in id order (the lock order).
pub(crate) fn sorted(leases: &[LeaseRef]) -> Vec<LeaseRef> {
    let mut v = leases.to_vec();
    v.sort_by_key(|l| l.id);
    v
}

/// A set-based statement (`{ids}`, `{pairs}`, worker) for one chunk of leases, padded to its
/// shape by repeating the last lease (an `IN` list naming a row twice matches it once).
fn by_leases<'q>(sql: &'q str, chunk: &[LeaseRef], worker: WorkerId) -> sqlx::query::Query<'q, MySql, MySqlArguments> {
    let n = shape(chunk.len());
    let at = |i: usize| chunk[i.min(chunk.len() - 1)];
    let mut q = sqlx::query(sql);
    for i in 0..n {
        q = q.bind(at(i).id.0);
    }
    for i in 0..n {
        q = q.bind(at(i).id.0).bind(at(i).lease.0);
    }
    q.bind(worker.0)
}

/// The ids a set-based read (`started_many`, `completed_many`) returns for `leases`.
async fn ids_of(
    conn: &mut MySqlConnection,
    template: &str,
    leases: &[LeaseRef],
    worker: WorkerId,
) -> Result<HashSet<Uuid>> {
    let mut ids = HashSet::new();
    for chunk in leases.chunks(CHUNK) {
        let sql = expand(template, shape(chunk.len()));
        let found: Vec<Uuid> = by_leases(&sql, chunk, worker)
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<std::result::Result<_, _>>()
            .map_err(map_err)?;
        ids.extend(found);
    }
    Ok(ids)
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

/// [`chokaq_core::Backend::start`]: one autocommitted `UPDATE` for a batch of up to
/// [`CHUNK`] leases (a longer one: one transaction, a statement per chunk, in id order). When
/// it changed fewer rows than leases, one read tells which are Processing under their lease
/// (started by an earlier call with the same lease: done again, nothing written).
pub(crate) async fn start(b: &MysqlBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("start", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let leases = sorted(leases);
    b.retrying(Path::Completion, || async {
        let mut conn = b.pool.acquire().await.map_err(map_err)?;
        let changed = if leases.len() <= CHUNK {
            let sql = expand(&b.sql.start_many, shape(leases.len()));
            by_leases(&sql, &leases, worker).execute(&mut *conn).await.map_err(map_err)?.rows_affected()
        } else {
            let mut tx = sqlx::Connection::begin(&mut *conn).await.map_err(map_err)?;
            let mut changed = 0;
            for chunk in leases.chunks(CHUNK) {
                let sql = expand(&b.sql.start_many, shape(chunk.len()));
                changed += by_leases(&sql, chunk, worker).execute(&mut *tx).await.map_err(map_err)?.rows_affected();
            }
            tx.commit().await.map_err(map_err)?;
            changed
        };
        if changed == leases.len() as u64 {
            return Ok(BatchOutcome::merge(leases.iter().map(|l| (l.id, true))));
        }
        let started = ids_of(&mut conn, &b.sql.started_many, &leases, worker).await?;
        Ok(BatchOutcome::merge(leases.iter().map(|l| (l.id, started.contains(&l.id.0)))))
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

/// [`chokaq_core::Backend::complete`]: one transaction for the batch, see [`complete_in`].
pub(crate) async fn complete(b: &MysqlBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("complete", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let leases = sorted(leases);
    b.retrying(Path::Completion, || async {
        let mut tx = b.begin().await?;
        let done = complete_in(b, &mut tx, worker, &leases).await?;
        commit(tx).await?;
        Ok(BatchOutcome::merge(leases.iter().map(|l| (l.id, done.contains(&l.id.0)))))
    })
    .await
}

/// Completes `leases` (sorted by id) in `tx`, set-based, per chunk of up to [`CHUNK`]: one
/// `INSERT ... SELECT ... FOR UPDATE` copies the held rows to the archive and locks them (in
/// id order), one `DELETE` removes them. When fewer rows moved than leases, one read of the
/// archive tells which leases completed (now, or by an earlier call with the same lease: done
/// again, nothing written). Returns the ids done.
pub(crate) async fn complete_in(
    b: &MysqlBackend,
    tx: &mut Tx,
    worker: WorkerId,
    leases: &[LeaseRef],
) -> Result<HashSet<Uuid>> {
    let mut moved = 0u64;
    for chunk in leases.chunks(CHUNK) {
        let n = shape(chunk.len());
        let archive = expand(&b.sql.archive_many, n);
        let copied = by_leases(&archive, chunk, worker).execute(&mut **tx).await.map_err(map_err)?.rows_affected();
        if copied == 0 {
            continue;
        }
        if b.faults.move_two_transactions {
            // Broken on purpose: the copy is committed before the delete runs.
            sqlx::query("COMMIT").execute(&mut **tx).await.map_err(map_err)?;
            sqlx::query("BEGIN").execute(&mut **tx).await.map_err(map_err)?;
        }
        let delete = expand(&b.sql.delete_many, n);
        let deleted = by_leases(&delete, chunk, worker).execute(&mut **tx).await.map_err(map_err)?.rows_affected();
        if deleted != copied && !b.faults.move_two_transactions {
            return Err(corrupt(format!("complete copied {copied} rows but deleted {deleted}")));
        }
        moved += copied;
    }
    if moved == leases.len() as u64 {
        return Ok(leases.iter().map(|l| l.id.0).collect());
    }
    ids_of(tx, &b.sql.completed_many, leases, worker).await
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
