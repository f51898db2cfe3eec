//! Maintenance and administration: rescue, cancel, queue controls, requeue, purge.

use chokaq_core::{
    validate, CancelOutcome, DeadReason, Error, ErrorKind, JobId, PurgeParams, PurgeTarget, QueueControl, QueueName,
    QueueSettings, RequeueOutcome, RescueParams, RescueReport, Result, ZombiePolicy, DEFAULT_FETCHED_TIMEOUT,
    DEFAULT_ZOMBIE_TIMEOUT,
};
use sqlx::Row;

use crate::backend::{commit, MysqlBackend};
use crate::error::{map_err, Path, DUP_ENTRY};
use crate::rows::{dur_us, opt_text, parse_policy, policy_str, text};

/// Largest purge batch.
const MAX_PURGE_BATCH: u32 = 100_000;

/// [`chokaq_core::Backend::rescue`].
pub(crate) async fn rescue(b: &MysqlBackend, params: &RescueParams) -> Result<RescueReport> {
    if params.limit == 0 {
        return Err(Error::invalid("rescue limit must be at least 1"));
    }
    let mut report = b.retrying(Path::Other, || rescue_once(b, params)).await?;
    if report.ran {
        prune_starts(b).await?;
        // The retention purges, each batch its own short transaction.
        for req in &params.purge {
            report.purged += purge(b, req).await?;
        }
    }
    Ok(report)
}

/// Most starts-log entries one prune statement deletes; a rescue runs at most
/// [`PRUNE_BATCHES`] of them per queue.
const PRUNE_BATCH: i64 = 10_000;
const PRUNE_BATCHES: usize = 100;

/// The rescue's prune of the starts log (after its transaction): per queue with entries, in
/// batches, each a short transaction that locks the queue's control row `FOR UPDATE` (the lock
/// a rate-limited claim holds from its count to its commit), reads the database's clock after
/// it, and deletes the entries no window ending then or later can see (stamped at or before
/// `now - per`), or all of them when the queue has no limit. No claim counts a window while
/// the prune holds the lock, and every claim after it reads a clock no earlier than the
/// prune's: an entry the prune deleted is in no window a claim counts (issue 36 hole 4).
async fn prune_starts(b: &MysqlBackend) -> Result<()> {
    let queues: Vec<Vec<u8>> = sqlx::query_scalar(&b.sql.starts_queues).fetch_all(&b.pool).await.map_err(map_err)?;
    for queue in &queues {
        for _ in 0..PRUNE_BATCHES {
            let n = b.retrying(Path::Other, || prune_queue_starts(b, queue)).await?;
            if n < PRUNE_BATCH as u64 {
                break;
            }
        }
    }
    Ok(())
}

/// One batch of [`prune_starts`] for one queue, in its own transaction: the rows deleted.
async fn prune_queue_starts(b: &MysqlBackend, queue: &[u8]) -> Result<u64> {
    let mut tx = b.begin().await?;
    let row = sqlx::query(&b.sql.lock_queue).bind(queue).fetch_optional(&mut *tx).await.map_err(map_err)?;
    let now = b.now(&mut tx).await?;
    let per_ms = match row {
        Some(r) => {
            let jobs: Option<i64> = r.try_get("rate_jobs").map_err(map_err)?;
            let per_ms: Option<i64> = r.try_get("rate_per_ms").map_err(map_err)?;
            jobs.and(per_ms)
        }
        None => None,
    };
    // Without a limit no window counts the queue's entries: all go.
    let cutoff = per_ms.map_or(i64::MAX, |ms| now.saturating_sub(ms.saturating_mul(1000)));
    let n = sqlx::query(&b.sql.prune_starts)
        .bind(queue)
        .bind(cutoff)
        .bind(PRUNE_BATCH)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
    commit(tx).await?;
    Ok(n)
}

/// One rescue transaction: the `rescue` lock row (`SKIP LOCKED`: one rescue at a time, the
/// others return at once), then the expired rows, each locked `SKIP LOCKED` (a row a
/// completer holds is left for the next rescue).
async fn rescue_once(b: &MysqlBackend, params: &RescueParams) -> Result<RescueReport> {
    let fetched_us = dur_us("fetched_timeout", DEFAULT_FETCHED_TIMEOUT)?;
    let zombie_us = dur_us("zombie_timeout", DEFAULT_ZOMBIE_TIMEOUT)?;
    let mut tx = b.begin().await?;
    let now = b.now(&mut tx).await?;
    if sqlx::query(&b.sql.rescue_lock).fetch_optional(&mut *tx).await.map_err(map_err)?.is_none() {
        tx.rollback().await.map_err(map_err)?;
        return Ok(RescueReport::default());
    }
    let mut report = RescueReport { ran: true, ..RescueReport::default() };
    let limit = i64::from(params.limit);
    let released = sqlx::query(&b.sql.find_expired_fetched)
        .bind(now)
        .bind(fetched_us)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
    for r in &released {
        let id: uuid::Uuid = r.try_get("id").map_err(map_err)?;
        sqlx::query(&b.sql.release_fetched).bind(now).bind(id).execute(&mut *tx).await.map_err(map_err)?;
    }
    report.fetched_released = released.len() as u64;
    let mut left = limit - released.len() as i64;
    // Held Fetched jobs (a heartbeat since the claim): the zombie timeout applies, the zombie
    // policy does not (as in every backend). A held job whose cancel was accepted dies
    // `cancelled`; any other goes back to Pending with its attempt unspent and its expiry
    // counted (`expired_holds`, returned with its next claim), never dead-lettered for its
    // expiries: it may never have run (it waited in a crashed worker's look-ahead, or the
    // claim's reply was lost), and the runtime records its start before its handler begins.
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
            let policy = parse_policy(&text(&z, "policy")?)?;
            let cancelled: i64 = z.try_get("cancel_requested").map_err(map_err)?;
            if cancelled != 0 {
                // An accepted cancel is final: the zombie is not retried.
                b.dead_letter(&mut tx, now, id, DeadReason::Cancelled, None).await?;
                report.zombies_dead += 1;
            } else if policy == ZombiePolicy::Retry && attempt < max_attempts {
                sqlx::query(&b.sql.retry_zombie).bind(now).bind(id.0).execute(&mut *tx).await.map_err(map_err)?;
                report.zombies_retried += 1;
            } else {
                b.dead_letter(&mut tx, now, id, DeadReason::Zombie, Some("heartbeat expired (zombie)")).await?;
                report.zombies_dead += 1;
            }
        }
    }
    commit(tx).await?;
    Ok(report)
}

/// [`chokaq_core::Backend::cancel`].
pub(crate) async fn cancel(b: &MysqlBackend, id: JobId) -> Result<CancelOutcome> {
    b.retrying(Path::Other, || async {
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        let row = sqlx::query(&b.sql.hot_status).bind(id.0).fetch_optional(&mut *tx).await.map_err(map_err)?;
        let status = match row {
            Some(r) => Some((
                r.try_get::<i64, _>("status").map_err(map_err)?,
                r.try_get::<i64, _>("held").map_err(map_err)? != 0,
            )),
            None => None,
        };
        // Pending, Scheduled and reserved Fetched jobs die at once; a Processing or held
        // Fetched job's worker may be running it: a request, seen in its heartbeat.
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
    })
    .await
}

/// [`chokaq_core::Backend::control_queue`].
pub(crate) async fn control_queue(b: &MysqlBackend, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
    validate::queue_name(queue.as_str())?;
    // Range checks: an out-of-range value is never stored.
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
    b.retrying(Path::Other, || async {
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        sqlx::query(&b.sql.ensure_queue)
            .bind(queue.as_str())
            .bind(now)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        if let (QueueControl::SetRateLimit(Some(l)), false) = (control, b.faults.rate_kind_change_keeps_numbers) {
            // Under the control row's lock (every claim of the queue holds it from its count to
            // its commit): a change of the limit's kind numbers the log again for the new
            // buckets (issue 40, L7).
            let row = sqlx::query(&b.sql.lock_queue).bind(queue.as_str()).fetch_one(&mut *tx).await.map_err(map_err)?;
            let had = row.try_get::<Option<i64>, _>("rate_jobs").map_err(map_err)?.is_some();
            let was_by_key = row.try_get::<i64, _>("rate_by_key").map_err(map_err)? != 0;
            if !had || was_by_key != l.by_key {
                let by_key = i64::from(l.by_key);
                sqlx::query(&b.sql.renumber_starts)
                    .bind(by_key)
                    .bind(by_key)
                    .bind(queue.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
            }
        }
        let q = match control {
            QueueControl::SetZombiePolicy(p) => sqlx::query(sql).bind(policy_str(p)),
            // `SetRateLimit(None)` clears all three columns.
            QueueControl::SetRateLimit(l) => sqlx::query(sql)
                .bind(l.map(|l| i64::from(l.jobs)))
                .bind(l.map(|l| l.per_millis()))
                .bind(i64::from(l.is_some_and(|l| l.by_key))),
            _ => sqlx::query(sql).bind(value),
        };
        q.bind(now).bind(queue.as_str()).execute(&mut *tx).await.map_err(map_err)?;
        let settings = b.read_settings(&mut tx, queue).await?;
        commit(tx).await?;
        Ok(settings)
    })
    .await
}

/// [`chokaq_core::Backend::requeue_dead`].
pub(crate) async fn requeue_dead(b: &MysqlBackend, id: JobId) -> Result<RequeueOutcome> {
    b.retrying(Path::Other, || async {
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        let row = sqlx::query(&b.sql.dead_key_and_queue).bind(id.0).fetch_optional(&mut *tx).await.map_err(map_err)?;
        let Some(row) = row else {
            tx.rollback().await.map_err(map_err)?;
            return Ok(RequeueOutcome::NotFound);
        };
        let key = opt_text(&row, "idempotency_key")?;
        let queue = text(&row, "queue")?;
        let conflict = |other: Option<uuid::Uuid>| {
            let holder = other.map(|o| format!("live job {o}")).unwrap_or_else(|| "a live job".to_string());
            Error::new(ErrorKind::Conflict, format!("cannot requeue {id}: {holder} holds its idempotency key"))
        };
        if let Some(key) = key {
            let taken: Option<uuid::Uuid> = sqlx::query_scalar(&b.sql.find_by_key)
                .bind(&queue)
                .bind(&key)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
            if taken.is_some() {
                tx.rollback().await.map_err(map_err)?;
                return Err(conflict(taken));
            }
        }
        match sqlx::query(&b.sql.requeue).bind(now).bind(id.0).execute(&mut *tx).await {
            Ok(_) => {}
            // The key was taken meanwhile (the unique index decides).
            Err(e) if crate::error::mysql_code(&e) == Some(DUP_ENTRY) => {
                tx.rollback().await.map_err(map_err)?;
                return Err(conflict(None));
            }
            Err(e) => return Err(map_err(e)),
        }
        sqlx::query(&b.sql.delete_dead).bind(id.0).execute(&mut *tx).await.map_err(map_err)?;
        commit(tx).await?;
        Ok(RequeueOutcome::Requeued)
    })
    .await
}

/// [`chokaq_core::Backend::purge`]: bounded batches, each its own short transaction.
pub(crate) async fn purge(b: &MysqlBackend, req: &PurgeParams) -> Result<u64> {
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
    let queue = req.queue.as_ref().map(QueueName::as_str);
    let kind = req.kind.as_ref().map(|k| k.as_str());
    let reason = req.reason.map(DeadReason::as_str);
    let mut total = 0u64;
    for _ in 0..req.max_batches {
        let n = b
            .retrying(Path::Other, || async {
                let mut tx = b.begin().await?;
                let cutoff = b.now(&mut tx).await? - older_us;
                let mut q = sqlx::query(sql).bind(cutoff).bind(queue).bind(queue).bind(kind).bind(kind);
                if req.target == PurgeTarget::DeadLetter {
                    q = q.bind(reason).bind(reason);
                }
                let n = q.bind(i64::from(req.batch_size)).execute(&mut *tx).await.map_err(map_err)?.rows_affected();
                commit(tx).await?;
                Ok(n)
            })
            .await?;
        total += n;
        if n < u64::from(req.batch_size) {
            break;
        }
    }
    Ok(total)
}
