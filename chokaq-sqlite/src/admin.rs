//! Maintenance and administration: rescue, cancel, queue controls, requeue, purge.

use chokaq_core::{
    validate, CancelOutcome, DeadReason, Error, ErrorKind, JobId, PurgeParams, PurgeTarget, QueueControl, QueueName,
    QueueSettings, RequeueOutcome, RescueParams, RescueReport, Result, ZombiePolicy, DEFAULT_FETCHED_TIMEOUT,
    DEFAULT_ZOMBIE_TIMEOUT,
};
use sqlx::Row;

use crate::backend::{commit, SqliteBackend};
use crate::error::map_err;
use crate::rows::{dur_us, now_us, parse_policy, policy_str};

/// Largest purge batch.
const MAX_PURGE_BATCH: u32 = 100_000;

/// [`chokaq_core::Backend::rescue`].
pub(crate) async fn rescue(b: &SqliteBackend, params: &RescueParams) -> Result<RescueReport> {
    if params.limit == 0 {
        return Err(Error::invalid("rescue limit must be at least 1"));
    }
    let fetched_us = dur_us("fetched_timeout", DEFAULT_FETCHED_TIMEOUT)?;
    let zombie_us = dur_us("zombie_timeout", DEFAULT_ZOMBIE_TIMEOUT)?;
    // The whole rescue is one BEGIN IMMEDIATE transaction: SQLite's write lock is the
    // maintenance lock, so two instances never rescue the same job; the second one finds
    // nothing left to do.
    let mut tx = b.begin_write().await?;
    let now = now_us();
    let mut report = RescueReport { ran: true, ..RescueReport::default() };
    let limit = i64::from(params.limit);
    let released = sqlx::query(&b.sql.rescue_fetched)
        .bind(now)
        .bind(fetched_us)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
    report.fetched_released = released.len() as u64;
    let mut queues: Vec<String> = Vec::new();
    for r in &released {
        queues.push(r.try_get("queue").map_err(map_err)?);
    }
    let mut left = limit - released.len() as i64;
    // Held Fetched jobs (a heartbeat since the claim): their handler may be running, so the
    // zombie timeout applies, from the last heartbeat, and the zombie policy does not. A held
    // job whose cancel was accepted dies `cancelled`; any other goes back to Pending with its
    // attempt unspent and its expiry counted (`expired_holds`, returned with its next claim),
    // never dead-lettered for its expiries: it may never have run (it waited in a crashed
    // worker's look-ahead, or the claim's reply was lost), and the runtime records its start
    // before its handler begins, so a job that kills its worker counts attempts.
    if left > 0 {
        let held = sqlx::query(&b.sql.find_expired_holds)
            .bind(now)
            .bind(zombie_us)
            .bind(left)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        left -= held.len() as i64;
        for h in held {
            let id = JobId(h.try_get("id").map_err(map_err)?);
            let cancelled: i64 = h.try_get("cancel_requested").map_err(map_err)?;
            if cancelled != 0 {
                b.dead_letter(&mut tx, now, id, DeadReason::Cancelled, None).await?;
                report.zombies_dead += 1;
            } else {
                sqlx::query(&b.sql.release_expired_hold)
                    .bind(now)
                    .bind(id.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                report.fetched_released += 1;
                queues.push(h.try_get("queue").map_err(map_err)?);
            }
        }
    }
    if left > 0 {
        let zombies = sqlx::query(&b.sql.find_zombies)
            .bind(now)
            .bind(zombie_us)
            .bind(left)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        for z in zombies {
            let id = JobId(z.try_get("id").map_err(map_err)?);
            let attempt: i64 = z.try_get("attempt").map_err(map_err)?;
            let max_attempts: i64 = z.try_get("max_attempts").map_err(map_err)?;
            let policy = parse_policy(&z.try_get::<String, _>("policy").map_err(map_err)?)?;
            let cancelled: i64 = z.try_get("cancel_requested").map_err(map_err)?;
            if cancelled != 0 {
                // An accepted cancel is final: the zombie is not retried.
                b.dead_letter(&mut tx, now, id, DeadReason::Cancelled, None).await?;
                report.zombies_dead += 1;
            } else if policy == ZombiePolicy::Retry && attempt < max_attempts {
                sqlx::query(&b.sql.retry_zombie).bind(now).bind(id.0).execute(&mut *tx).await.map_err(map_err)?;
                report.zombies_retried += 1;
                queues.push(z.try_get("queue").map_err(map_err)?);
            } else {
                b.dead_letter(&mut tx, now, id, DeadReason::Zombie, Some("heartbeat expired (zombie)")).await?;
                report.zombies_dead += 1;
            }
        }
    }
    // The starts log keeps only what a rate window can still see (all of a queue's entries
    // once its limit is cleared).
    sqlx::query(&b.sql.rate_prune).bind(now).execute(&mut *tx).await.map_err(map_err)?;
    commit(tx).await?;
    b.notify(queues);
    // The retention purges: each batch is its own write transaction, and SQLite's write lock
    // is the maintenance lock, so two instances never purge at once.
    for req in &params.purge {
        report.purged += purge(b, req).await?;
    }
    Ok(report)
}

/// [`chokaq_core::Backend::cancel`].
pub(crate) async fn cancel(b: &SqliteBackend, id: JobId) -> Result<CancelOutcome> {
    let mut tx = b.begin_write().await?;
    let now = now_us();
    let row = sqlx::query(&b.sql.hot_status).bind(id.0).fetch_optional(&mut *tx).await.map_err(map_err)?;
    let status = match row {
        Some(r) => {
            Some((r.try_get::<i64, _>("status").map_err(map_err)?, r.try_get::<i64, _>("held").map_err(map_err)? != 0))
        }
        None => None,
    };
    // Pending, Scheduled and reserved Fetched jobs die at once; a Processing or held Fetched
    // job's worker may be running it: a request, which its worker sees in the heartbeat.
    let out = match status {
        None => CancelOutcome::NotLive,
        Some((0 | 3, _) | (1, false)) => {
            b.dead_letter(&mut tx, now, id, DeadReason::Cancelled, None).await?;
            CancelOutcome::Cancelled
        }
        Some(_) => {
            sqlx::query(&b.sql.request_cancel).bind(now).bind(id.0).execute(&mut *tx).await.map_err(map_err)?;
            CancelOutcome::Requested
        }
    };
    commit(tx).await?;
    Ok(out)
}

/// [`chokaq_core::Backend::control_queue`].
pub(crate) async fn control_queue(
    b: &SqliteBackend,
    queue: &QueueName,
    control: QueueControl,
) -> Result<QueueSettings> {
    validate::queue_name(queue.as_str())?;
    // Range checks: an out-of-range value is never stored (it would break later reads).
    control.validate()?;
    let (sql, value): (&str, Option<i64>) = match control {
        QueueControl::Pause => (&b.sql.set_paused, Some(1)),
        QueueControl::Resume => (&b.sql.set_paused, Some(0)),
        QueueControl::Activate => (&b.sql.set_active, Some(1)),
        QueueControl::Deactivate => (&b.sql.set_active, Some(0)),
        QueueControl::SetMaxWorkers(m) => (&b.sql.set_max_workers, m.map(i64::from)),
        QueueControl::SetZombieTimeout(d) => {
            (&b.sql.set_zombie_timeout, d.map(|d| dur_us("zombie_timeout", d)).transpose()?)
        }
        QueueControl::SetKeyMaxWorkers(m) => (&b.sql.set_key_max_workers, m.map(i64::from)),
        QueueControl::SetRateLimit(_) => (&b.sql.set_rate_limit, None),
        QueueControl::SetZombiePolicy(_) => (&b.sql.set_zombie_policy, None),
        QueueControl::SetFetchedTimeout(d) => {
            (&b.sql.set_fetched_timeout, d.map(|d| dur_us("fetched_timeout", d)).transpose()?)
        }
    };
    let mut tx = b.begin_write().await?;
    let now = now_us();
    sqlx::query(&b.sql.ensure_queue).bind(queue.as_str()).bind(now).execute(&mut *tx).await.map_err(map_err)?;
    if let (QueueControl::SetRateLimit(l), false) = (control, b.faults.rate_kind_change_keeps_numbers) {
        // A change of the limit's kind numbers the log again for the new buckets.
        sqlx::query(&b.sql.rate_renumber)
            .bind(queue.as_str())
            .bind(l.map(|l| i64::from(l.jobs)))
            .bind(i64::from(l.is_some_and(|l| l.by_key)))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
    }
    match control {
        QueueControl::SetZombiePolicy(p) => sqlx::query(sql).bind(policy_str(p)).bind(now).bind(queue.as_str()),
        // Jobs, period and by-key together: None clears all three.
        QueueControl::SetRateLimit(l) => sqlx::query(sql)
            .bind(l.map(|l| i64::from(l.jobs)))
            .bind(l.map(|l| l.per_millis()))
            .bind(l.map(|l| i64::from(l.by_key)))
            .bind(now)
            .bind(queue.as_str()),
        _ => sqlx::query(sql).bind(value).bind(now).bind(queue.as_str()),
    }
    .execute(&mut *tx)
    .await
    .map_err(map_err)?;
    let settings = b.read_settings(&mut tx, queue).await?;
    commit(tx).await?;
    if matches!(
        control,
        QueueControl::Resume
            | QueueControl::Activate
            | QueueControl::SetMaxWorkers(_)
            | QueueControl::SetKeyMaxWorkers(_)
            | QueueControl::SetRateLimit(_)
    ) {
        b.notify([queue.as_str().to_string()]);
    }
    Ok(settings)
}

/// [`chokaq_core::Backend::requeue_dead`].
pub(crate) async fn requeue_dead(b: &SqliteBackend, id: JobId) -> Result<RequeueOutcome> {
    let mut tx = b.begin_write().await?;
    let now = now_us();
    let row = sqlx::query(&b.sql.dead_key_and_queue).bind(id.0).fetch_optional(&mut *tx).await.map_err(map_err)?;
    let Some(row) = row else {
        tx.rollback().await.map_err(map_err)?;
        return Ok(RequeueOutcome::NotFound);
    };
    let key: Option<String> = row.try_get("idempotency_key").map_err(map_err)?;
    let queue: String = row.try_get("queue").map_err(map_err)?;
    if let Some(key) = key {
        let taken: Option<uuid::Uuid> = sqlx::query_scalar(&b.sql.find_by_key)
            .bind(&queue)
            .bind(&key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        if let Some(other) = taken {
            tx.rollback().await.map_err(map_err)?;
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("cannot requeue {id}: live job {other} holds its idempotency key"),
            ));
        }
    }
    sqlx::query(&b.sql.requeue).bind(now).bind(id.0).execute(&mut *tx).await.map_err(map_err)?;
    sqlx::query(&b.sql.delete_dead).bind(id.0).execute(&mut *tx).await.map_err(map_err)?;
    commit(tx).await?;
    b.notify([queue]);
    Ok(RequeueOutcome::Requeued)
}

/// [`chokaq_core::Backend::purge`]: bounded batches, each its own short write transaction.
pub(crate) async fn purge(b: &SqliteBackend, req: &PurgeParams) -> Result<u64> {
    if req.batch_size == 0 || req.batch_size > MAX_PURGE_BATCH {
        return Err(Error::invalid(format!("purge batch_size must be 1 to {MAX_PURGE_BATCH}, got {}", req.batch_size)));
    }
    if req.max_batches == 0 {
        return Err(Error::invalid("purge max_batches must be at least 1"));
    }
    if req.target == PurgeTarget::Archive && req.reason.is_some() {
        return Err(Error::invalid("purge reason applies to the dead-letter table only"));
    }
    let older_us = dur_us("older_than", req.older_than)?;
    let sql = match req.target {
        PurgeTarget::Archive => &b.sql.purge_archive,
        PurgeTarget::DeadLetter => &b.sql.purge_dead,
    };
    let mut total = 0u64;
    for _ in 0..req.max_batches {
        // Each batch is its own short write transaction, so claims interleave.
        let mut tx = b.begin_write().await?;
        let cutoff = now_us() - older_us;
        let mut q = sqlx::query(sql)
            .bind(cutoff)
            .bind(req.queue.as_ref().map(QueueName::as_str))
            .bind(req.kind.as_ref().map(|k| k.as_str()))
            .bind(i64::from(req.batch_size));
        if req.target == PurgeTarget::DeadLetter {
            q = q.bind(req.reason.map(DeadReason::as_str));
        }
        let n = q.execute(&mut *tx).await.map_err(map_err)?.rows_affected();
        commit(tx).await?;
        total += n;
        if n < u64::from(req.batch_size) {
            break;
        }
    }
    Ok(total)
}
