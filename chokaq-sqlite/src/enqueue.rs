//! [`chokaq_core::Backend::enqueue_many`]: every job validated and serialized before the
//! write transaction, then inserted (or found by idempotency key) in one `BEGIN IMMEDIATE`.

use chokaq_core::{validate, Enqueued, JobId, NewJob, Result, RunAt};

use crate::backend::{commit, SqliteBackend};
use crate::error::map_err;
use crate::rows::{dur_us, now_us, ts_us};

/// [`chokaq_core::Backend::enqueue_many`].
pub(crate) async fn enqueue_many(b: &SqliteBackend, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
    // Every job, the batch's length and its total bytes.
    validate::enqueue_batch(&jobs, b.max_payload_bytes)?;
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    // Validate and serialize everything before touching SQL: one bad job inserts nothing.
    struct Prepared {
        payload: String,
        tags: String,
        at: Option<i64>,
        after: Option<i64>,
    }
    let mut prepared = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let (at, after) = match job.run_at {
            RunAt::Now => (None, None),
            RunAt::At(t) => (Some(ts_us("run_at", t)?), None),
            RunAt::After(d) => (None, Some(dur_us("delay", d)?)),
        };
        prepared.push(Prepared {
            payload: serde_json::to_string(&job.payload)?,
            tags: serde_json::to_string(&job.tags)?,
            at,
            after,
        });
    }
    let mut tx = b.begin_write().await?;
    let now = now_us();
    let mut out = Vec::with_capacity(jobs.len());
    for (job, p) in jobs.iter().zip(&prepared) {
        if let Some(key) = &job.idempotency_key {
            let existing: Option<uuid::Uuid> = sqlx::query_scalar(&b.sql.find_by_key)
                .bind(job.queue.as_str())
                .bind(key)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?;
            if let Some(id) = existing {
                out.push(Enqueued { id: JobId(id), duplicate: true });
                continue;
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
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        out.push(Enqueued { id, duplicate: false });
    }
    commit(tx).await?;
    b.notify(jobs.iter().map(|j| j.queue.as_str().to_string()));
    Ok(out)
}
