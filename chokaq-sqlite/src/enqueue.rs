//! [`chokaq_core::Backend::enqueue_many`]: every job validated and serialized before the
//! write transaction, then inserted (or found by idempotency key or unique key) in one
//! `BEGIN IMMEDIATE`.

use chokaq_core::{unique_key, validate, Enqueued, JobId, NewJob, Result, RunAt, UniqueKey};
use sqlx::sqlite::SqliteConnection;

use crate::backend::{commit, SqliteBackend};
use crate::error::map_err;
use crate::rows::{dur_us, now_us, ts_us};
use crate::unique;

/// A job serialized before the write transaction (one bad job inserts nothing).
pub(crate) struct Prepared {
    payload: String,
    tags: String,
    at: Option<i64>,
    after: Option<i64>,
    /// The unique key (`docs/unique.md`), from the client's clock.
    unique: Option<UniqueKey>,
}

/// Serializes one job and computes its unique key.
pub(crate) fn prepare(job: &NewJob) -> Result<Prepared> {
    let (at, after) = match job.run_at {
        RunAt::Now => (None, None),
        RunAt::At(t) => (Some(ts_us("run_at", t)?), None),
        RunAt::After(d) => (None, Some(dur_us("delay", d)?)),
    };
    Ok(Prepared {
        payload: serde_json::to_string(&job.payload)?,
        tags: serde_json::to_string(&job.tags)?,
        at,
        after,
        unique: unique_key(job, chrono::Utc::now())?,
    })
}

/// Inserts one job in the caller's write transaction, unless a live job of its queue holds
/// its idempotency key or a job in one of its counted states holds its unique key.
pub(crate) async fn insert_one(
    b: &SqliteBackend,
    conn: &mut SqliteConnection,
    job: &NewJob,
    p: &Prepared,
    now: i64,
) -> Result<Enqueued> {
    if let Some(key) = &job.idempotency_key {
        let existing: Option<uuid::Uuid> = sqlx::query_scalar(&b.sql.find_by_key)
            .bind(job.queue.as_str())
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        if let Some(id) = existing {
            return Ok(Enqueued { id: JobId(id), duplicate: true });
        }
    }
    if let Some(u) = &p.unique {
        if let Some(id) = unique::counted_holder(b, conn, u, now).await? {
            return Ok(Enqueued { id, duplicate: true });
        }
    }
    let id = JobId::new();
    let scheduled = p.at.or(p.after.map(|d| now + d));
    sqlx::query(&b.sql.insert_job)
        .bind(id.0)
        .bind(job.queue.as_str())
        .bind(job.kind.as_str())
        .bind(&p.payload)
        .bind(&p.tags)
        .bind(job.idempotency_key.as_deref())
        .bind(job.priority)
        .bind(job.max_attempts)
        .bind(scheduled)
        .bind(now)
        .bind(job.created_by.as_deref())
        .bind(job.concurrency_key.as_deref())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if let Some(u) = &p.unique {
        unique::take(b, conn, u, id, now).await?;
    }
    Ok(Enqueued { id, duplicate: false })
}

/// [`chokaq_core::Backend::enqueue_many`].
pub(crate) async fn enqueue_many(b: &SqliteBackend, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
    // Every job, the batch's length and its total bytes.
    validate::enqueue_batch(&jobs, b.max_payload_bytes)?;
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    // Validate and serialize everything before touching SQL: one bad job inserts nothing.
    let prepared = jobs.iter().map(prepare).collect::<Result<Vec<_>>>()?;
    let mut tx = b.begin_write().await?;
    let now = now_us();
    let mut out = Vec::with_capacity(jobs.len());
    for (job, p) in jobs.iter().zip(&prepared) {
        out.push(insert_one(b, &mut tx, job, p, now).await?);
    }
    commit(tx).await?;
    b.notify(jobs.iter().map(|j| j.queue.as_str().to_string()));
    Ok(out)
}
