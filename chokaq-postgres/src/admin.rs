//! Maintenance and queue controls: [`chokaq_core::Backend::rescue`], `cancel`,
//! `control_queue`, `requeue_dead` and `purge` (its batches).

use std::sync::atomic::Ordering;

use chokaq_core::{
    CancelOutcome, Error, ErrorKind, JobId, PurgeParams, PurgeTarget, QueueControl, QueueName, QueueSettings,
    RateLimit, RequeueOutcome, RescueParams, RescueReport, Result, ZombiePolicy, DEFAULT_FETCHED_TIMEOUT,
    DEFAULT_ZOMBIE_TIMEOUT,
};

use crate::backend::{PgBackend, RESCUE_SKIPPED_WARN};
use crate::error::with_retry;
use crate::rows::{self, count};

/// Largest batch of `purge`.
const MAX_PURGE_BATCH: u32 = 100_000;

/// [`chokaq_core::Backend::rescue`].
pub(crate) async fn rescue(b: &PgBackend, params: &RescueParams) -> Result<RescueReport> {
    let limit = i64::from(params.limit);
    let report = with_retry(|| async {
        let mut tx = b.kept.begin().await?;
        let got = sqlx::query(&b.sql().rescue_lock).fetch_optional(&mut *tx).await?.is_some();
        if !got {
            tx.rollback().await?;
            return Ok(RescueReport::default());
        }
        let (released, held_dead): (i64, i64) = sqlx::query_as(&b.sql().rescue_fetched)
            .bind(rows::micros(DEFAULT_FETCHED_TIMEOUT))
            .bind(limit)
            .bind(rows::micros(DEFAULT_ZOMBIE_TIMEOUT))
            .fetch_one(&mut *tx)
            .await?;
        let (retried, dead): (i64, i64) = sqlx::query_as(&b.sql().rescue_zombies)
            .bind(rows::micros(DEFAULT_ZOMBIE_TIMEOUT))
            .bind(limit)
            .fetch_one(&mut *tx)
            .await?;
        // Keys with Blocked rows and room (a lost promotion), then the starts log.
        sqlx::query(&b.sql().rescue_sweep).execute(&mut *tx).await?;
        sqlx::query(&b.sql().rescue_prune_starts).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(RescueReport {
            ran: true,
            fetched_released: count(released),
            zombies_retried: count(retried),
            zombies_dead: count(dead) + count(held_dead),
            purged: 0,
        })
    })
    .await?;
    b.note_rescue(report.ran);
    let mut report = report;
    if report.ran {
        for req in &params.purge {
            report.purged += b.purge_batches(req, true).await?;
        }
    }
    Ok(report)
}

/// [`chokaq_core::Backend::cancel`].
pub(crate) async fn cancel(b: &PgBackend, id: JobId) -> Result<CancelOutcome> {
    let (dead, requested): (i64, i64) =
        with_retry(|| sqlx::query_as(&b.sql().cancel).bind(id.0).fetch_one(&b.kept)).await?;
    Ok(if dead > 0 {
        CancelOutcome::Cancelled
    } else if requested > 0 {
        CancelOutcome::Requested
    } else {
        CancelOutcome::NotLive
    })
}

/// [`chokaq_core::Backend::control_queue`].
pub(crate) async fn control_queue(b: &PgBackend, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
    // Range checks: an out-of-range value is never stored (`SetZombieTimeout(Duration::MAX)`
    // would make every later rescue fail with "interval out of range", for every queue).
    control.validate()?;
    let s = b.sql();
    match control {
        QueueControl::Pause => b.set_control(&s.control_paused, queue, true).await,
        QueueControl::Resume => b.set_control(&s.control_paused, queue, false).await,
        QueueControl::Activate => b.set_control(&s.control_active, queue, true).await,
        QueueControl::Deactivate => b.set_control(&s.control_active, queue, false).await,
        QueueControl::SetMaxWorkers(max) => {
            let max = max
                .map(|m| i32::try_from(m).map_err(|_| Error::invalid(format!("max_workers {m} is too large"))))
                .transpose()?;
            b.set_control(&s.control_max_workers, queue, max).await
        }
        QueueControl::SetZombieTimeout(t) => {
            let ms = t.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1));
            b.set_control(&s.control_zombie_timeout, queue, ms).await
        }
        QueueControl::SetFetchedTimeout(t) => {
            let ms = t.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1));
            b.set_control(&s.control_fetched_timeout, queue, ms).await
        }
        QueueControl::SetZombiePolicy(p) => {
            let code: i16 = match p {
                ZombiePolicy::Retry => 0,
                ZombiePolicy::DeadLetter => 1,
            };
            b.set_control(&s.control_zombie_policy, queue, code).await
        }
        QueueControl::SetKeyMaxWorkers(max) => {
            let max = max
                .map(|m| i32::try_from(m).map_err(|_| Error::invalid(format!("key_max_workers {m} is too large"))))
                .transpose()?;
            b.set_control(&s.control_key_max_workers, queue, max).await
        }
        QueueControl::SetRateLimit(limit) => b.set_rate_limit(queue, limit).await,
    }
}

/// [`chokaq_core::Backend::requeue_dead`].
pub(crate) async fn requeue_dead(b: &PgBackend, id: JobId) -> Result<RequeueOutcome> {
    let (moved, _woke): (i64, i64) =
        with_retry(|| sqlx::query_as(&b.sql().requeue).bind(id.0).fetch_one(&b.kept)).await.map_err(|e| {
            if e.kind() == ErrorKind::Conflict {
                Error::new(ErrorKind::Conflict, format!("a live job holds the idempotency key of {id}"))
            } else {
                e
            }
        })?;
    Ok(if moved > 0 { RequeueOutcome::Requeued } else { RequeueOutcome::NotFound })
}

impl PgBackend {
    /// Deletes finished rows in bounded batches. `locked` (maintenance): each batch runs in a
    /// transaction that holds the schema's `rescue` lock row, taken without waiting; the purge
    /// stops at the first batch that finds it held by another instance.
    pub(crate) async fn purge_batches(&self, req: &PurgeParams, locked: bool) -> Result<u64> {
        if req.batch_size == 0 || req.batch_size > MAX_PURGE_BATCH {
            return Err(Error::invalid(format!(
                "purge batch_size must be 1 to {MAX_PURGE_BATCH}, got {}",
                req.batch_size
            )));
        }
        if req.reason.is_some() && req.target != PurgeTarget::DeadLetter {
            return Err(Error::invalid("a reason filter applies to the dead-letter table only"));
        }
        let sql = match req.target {
            PurgeTarget::Archive => &self.sql().purge_archive,
            PurgeTarget::DeadLetter => &self.sql().purge_dlq,
        };
        let mut total = 0u64;
        for _ in 0..req.max_batches {
            let n = with_retry(|| async {
                let mut tx = self.kept.begin().await?;
                if locked && sqlx::query(&self.sql().rescue_lock).fetch_optional(&mut *tx).await?.is_none() {
                    tx.rollback().await?;
                    return Ok(None);
                }
                let q = sqlx::query(sql)
                    .bind(rows::micros(req.older_than))
                    .bind(req.queue.as_ref().map(|q| q.as_str()))
                    .bind(req.kind.as_ref().map(|k| k.as_str()))
                    .bind(i64::from(req.batch_size));
                // `$5` reason: a parameter of the dead-letter statement only.
                let q = if req.target == PurgeTarget::DeadLetter { q.bind(req.reason.map(|r| r.as_str())) } else { q };
                let n = q.execute(&mut *tx).await?.rows_affected();
                tx.commit().await?;
                Ok(Some(n))
            })
            .await?;
            let Some(n) = n else { break };
            total += n;
            if n < u64::from(req.batch_size) {
                break;
            }
        }
        Ok(total)
    }

    /// Counts rescue calls in a row that did not run (another session held the lock) and warns
    /// every [`RESCUE_SKIPPED_WARN`] of them: a lock held for that long means a stuck instance
    /// or a session that should not hold it.
    pub(crate) fn note_rescue(&self, ran: bool) {
        if ran {
            self.shared.rescue_skipped.store(0, Ordering::Relaxed);
            return;
        }
        let n = self.shared.rescue_skipped.fetch_add(1, Ordering::Relaxed) + 1;
        if n % RESCUE_SKIPPED_WARN == 0 {
            tracing::warn!(
                schema = %self.shared.schema,
                skipped = n,
                "rescue has not run for {n} calls in a row: another session holds the schema's rescue lock \
                 (the `rescue` row of its `locks` table)"
            );
        }
    }

    pub(crate) async fn set_control<T>(&self, sql: &str, queue: &QueueName, value: T) -> Result<QueueSettings>
    where
        T: for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Sync + Clone,
    {
        // One transaction: the row made sure of, locked FOR UPDATE (waits for the claims that
        // read the old settings), then changed; see `CONTROL_LOCK`.
        let row = with_retry(|| async {
            let mut tx = self.kept.begin().await?;
            sqlx::query(&self.sql().control_ensure).bind(queue.as_str()).execute(&mut *tx).await?;
            sqlx::query(&self.sql().control_lock).bind(queue.as_str()).execute(&mut *tx).await?;
            let row = sqlx::query(sql).bind(queue.as_str()).bind(value.clone()).fetch_one(&mut *tx).await?;
            tx.commit().await?;
            Ok(row)
        })
        .await?;
        rows::queue_settings(&row)
    }

    /// `SetRateLimit`, validated by the caller: the three columns in one upsert, under the
    /// same locks as [`PgBackend::set_control`], after the starts log is numbered for the new
    /// limit's buckets when its kind changes (`CONTROL_RATE_RENUMBER`).
    pub(crate) async fn set_rate_limit(&self, queue: &QueueName, limit: Option<RateLimit>) -> Result<QueueSettings> {
        let jobs = limit
            .map(|l| i32::try_from(l.jobs).map_err(|_| Error::invalid(format!("rate limit {} is too large", l.jobs))))
            .transpose()?;
        let per = limit.map(|l| l.per_millis());
        let by_key = limit.is_some_and(|l| l.by_key);
        let row = with_retry(|| async {
            let mut tx = self.kept.begin().await?;
            sqlx::query(&self.sql().control_ensure).bind(queue.as_str()).execute(&mut *tx).await?;
            sqlx::query(&self.sql().control_lock).bind(queue.as_str()).execute(&mut *tx).await?;
            sqlx::query(&self.sql().control_rate_renumber)
                .bind(queue.as_str())
                .bind(jobs)
                .bind(by_key)
                .execute(&mut *tx)
                .await?;
            let row = sqlx::query(&self.sql().control_rate_limit)
                .bind(queue.as_str())
                .bind(jobs)
                .bind(per)
                .bind(by_key)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(row)
        })
        .await?;
        rows::queue_settings(&row)
    }
}
