//! Enqueue: one transaction per batch. Jobs with an idempotency key are inserted in
//! (queue, key) order, so two batches whose keys overlap in opposite orders take the unique
//! index's locks in the same order and wait for each other instead of deadlocking; the
//! results come back in input order.

use chokaq_core::{unique_key, validate, Enqueued, JobId, NewJob, Result, RunAt, UniqueKey};

use crate::backend::{commit, MysqlBackend, Tx};
use crate::error::{corrupt, map_err, mysql_code, Path, DUP_ENTRY};
use crate::rows::{dur_us, ts_us};
use crate::unique::{claim_key, KeyRow};

/// A job serialized before any SQL runs (one bad job inserts nothing).
pub(crate) struct Prepared {
    pub(crate) id: JobId,
    pub(crate) payload: String,
    pub(crate) tags: String,
    /// `RunAt::At`, as microseconds.
    pub(crate) at: Option<i64>,
    /// `RunAt::After`, as microseconds.
    pub(crate) after: Option<i64>,
    /// The unique key (`docs/unique.md`), from the client's clock.
    pub(crate) unique: Option<UniqueKey>,
}

/// Serializes one job (its id chosen now, so ids follow the input order).
pub(crate) fn prepare(job: &NewJob) -> Result<Prepared> {
    let (at, after) = match job.run_at {
        RunAt::Now => (None, None),
        RunAt::At(t) => (Some(ts_us("run_at", t)?), None),
        RunAt::After(d) => (None, Some(dur_us("delay", d)?)),
    };
    Ok(Prepared {
        id: JobId::new(),
        payload: serde_json::to_string(&job.payload)?,
        tags: serde_json::to_string(&job.tags)?,
        at,
        after,
        unique: unique_key(job, chrono::Utc::now())?,
    })
}

/// The live job of `job`'s queue holding its key, if any.
async fn holder(b: &MysqlBackend, tx: &mut Tx, job: &NewJob, key: &str) -> Result<Option<uuid::Uuid>> {
    sqlx::query_scalar(&b.sql.find_by_key)
        .bind(job.queue.as_str())
        .bind(key)
        .fetch_optional(&mut **tx)
        .await
        .map_err(map_err)
}

/// Inserts one job in the caller's transaction, unless a live job of its queue holds its
/// idempotency key or a job in one of its counted states holds its unique key.
pub(crate) async fn insert_one(
    b: &MysqlBackend,
    tx: &mut Tx,
    job: &NewJob,
    p: &Prepared,
    now: i64,
) -> Result<Enqueued> {
    if let Some(key) = &job.idempotency_key {
        if let Some(id) = holder(b, tx, job, key).await? {
            return Ok(Enqueued { id: JobId(id), duplicate: true });
        }
    }
    if let Some(u) = &p.unique {
        if let KeyRow::Duplicate(id) = claim_key(b, tx, u, p.id, now).await? {
            return Ok(Enqueued { id, duplicate: true });
        }
    }
    let scheduled = p.at.or(p.after.map(|d| now + d));
    let res = sqlx::query(&b.sql.insert_job)
        .bind(p.id.0)
        .bind(job.queue.as_str())
        .bind(job.kind.as_str())
        .bind(&p.payload)
        .bind(&p.tags)
        .bind(job.idempotency_key.as_deref())
        .bind(job.priority)
        .bind(scheduled)
        .bind(now)
        .bind(job.max_attempts)
        .bind(scheduled)
        .bind(now)
        .bind(now)
        .bind(job.created_by.as_deref())
        .bind(job.concurrency_key.as_deref())
        .execute(&mut **tx)
        .await;
    match (res, &job.idempotency_key) {
        (Ok(_), _) => Ok(Enqueued { id: p.id, duplicate: false }),
        // Another transaction inserted the key first and committed (this insert waited for
        // it on the unique index): the job it made is the one.
        (Err(e), Some(key)) if mysql_code(&e) == Some(DUP_ENTRY) => match holder(b, tx, job, key).await? {
            Some(id) => Ok(Enqueued { id: JobId(id), duplicate: true }),
            None => Err(map_err(e)),
        },
        (Err(e), _) => Err(map_err(e)),
    }
}

/// [`chokaq_core::Backend::enqueue_many`].
pub(crate) async fn enqueue_many(b: &MysqlBackend, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
    validate::enqueue_batch(&jobs, b.max_payload_bytes)?;
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let prepared = jobs.iter().map(prepare).collect::<Result<Vec<_>>>()?;
    // Jobs without a key first, in input order; then the keyed ones in (queue, key) order;
    // unique jobs by their unique key (the first of one key in the input still goes first).
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&x, &y| {
        let k = |i: usize| jobs[i].idempotency_key.as_ref().map(|key| (jobs[i].queue.as_str(), key.as_str()));
        let u = |i: usize| prepared[i].unique.as_ref().map(|u| u.key.as_str());
        k(x).cmp(&k(y)).then(u(x).cmp(&u(y))).then(x.cmp(&y))
    });
    b.retrying(Path::Other, || async {
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        let mut out: Vec<Option<Enqueued>> = vec![None; jobs.len()];
        for &i in &order {
            out[i] = Some(insert_one(b, &mut tx, &jobs[i], &prepared[i], now).await?);
        }
        commit(tx).await?;
        out.into_iter().map(|e| e.ok_or_else(|| corrupt("enqueue result missing"))).collect()
    })
    .await
}
