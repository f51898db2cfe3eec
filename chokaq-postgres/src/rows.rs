//! Decoding rows into chokaq's types.

use std::time::Duration;

use chokaq_core::{
    ClaimedJob, DeadReason, Error, ErrorKind, JobId, JobKind, JobLocation, JobRecord, JobStatus, Lease, QueueName,
    QueueSettings, Result, Timestamp, WorkerId, ZombiePolicy,
};
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

fn get<'r, T>(row: &'r PgRow, col: &str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(col).map_err(|e| Error::with_source(ErrorKind::Other, format!("decoding column {col}"), e))
}

/// A claimed hot row, with its due time (for ordering the batch).
pub(crate) fn claimed(row: &PgRow) -> Result<(ClaimedJob, Timestamp)> {
    let lease: Option<i64> = get(row, "lease")?;
    let worker: Option<Uuid> = get(row, "worker_id")?;
    let job = ClaimedJob {
        id: JobId(get(row, "id")?),
        queue: QueueName::new(get::<String>(row, "queue")?)?,
        kind: JobKind::new(get::<String>(row, "kind")?)?,
        payload: get(row, "payload")?,
        tags: get(row, "tags")?,
        idempotency_key: get(row, "idempotency_key")?,
        priority: get(row, "priority")?,
        status: JobStatus::from_code(get(row, "status")?)?,
        attempt: get(row, "attempt")?,
        max_attempts: get(row, "max_attempts")?,
        lease: Lease(lease.ok_or_else(|| Error::new(ErrorKind::Other, "claimed row without a lease"))?),
        worker_id: WorkerId(worker.ok_or_else(|| Error::new(ErrorKind::Other, "claimed row without a worker"))?),
        scheduled_at: get(row, "scheduled_at")?,
        created_at: get(row, "created_at")?,
        started_at: get(row, "started_at")?,
        heartbeat_at: get(row, "heartbeat_at")?,
        last_error: get(row, "last_error")?,
        created_by: get(row, "created_by")?,
    };
    Ok((job, get(row, "due_at")?))
}

/// A row of one of the `*_RECORD` projections.
pub(crate) fn record(row: &PgRow) -> Result<JobRecord> {
    let loc: String = get(row, "loc")?;
    let location = match loc.as_str() {
        "hot" => JobLocation::Hot(JobStatus::from_code(get(row, "status")?)?),
        "archive" => JobLocation::Archived,
        _ => JobLocation::Dead(DeadReason::parse(&get::<String>(row, "reason")?)?),
    };
    Ok(JobRecord {
        id: JobId(get(row, "id")?),
        location,
        queue: QueueName::new(get::<String>(row, "queue")?)?,
        kind: JobKind::new(get::<String>(row, "kind")?)?,
        payload: get(row, "payload")?,
        tags: get(row, "tags")?,
        idempotency_key: get(row, "idempotency_key")?,
        priority: get(row, "priority")?,
        attempt: get(row, "attempt")?,
        max_attempts: get(row, "max_attempts")?,
        lease: get::<Option<i64>>(row, "lease")?.map(Lease),
        worker_id: get::<Option<Uuid>>(row, "worker_id")?.map(WorkerId),
        scheduled_at: get(row, "scheduled_at")?,
        created_at: get(row, "created_at")?,
        started_at: get(row, "started_at")?,
        heartbeat_at: get(row, "heartbeat_at")?,
        updated_at: get(row, "updated_at")?,
        finished_at: get(row, "finished_at")?,
        last_error: get(row, "last_error")?,
        cancel_requested: get(row, "cancel_requested")?,
        created_by: get(row, "created_by")?,
    })
}

/// A `queues` row.
pub(crate) fn queue_settings(row: &PgRow) -> Result<QueueSettings> {
    let max: Option<i32> = get(row, "max_workers")?;
    let zt: Option<i64> = get(row, "zombie_timeout_ms")?;
    let policy: i16 = get(row, "zombie_policy")?;
    Ok(QueueSettings {
        name: QueueName::new(get::<String>(row, "name")?)?,
        max_workers: max.map(|m| m.max(0) as u32),
        is_paused: get(row, "is_paused")?,
        is_active: get(row, "is_active")?,
        zombie_timeout: zt.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        zombie_policy: if policy == 1 { ZombiePolicy::DeadLetter } else { ZombiePolicy::Retry },
        updated_at: Some(get(row, "updated_at")?),
    })
}

/// Longest delay passed to SQL: 100 years (PostgreSQL's timestamps end in 294276 AD).
const MAX_MICROS: i64 = 100 * 366 * 24 * 3600 * 1_000_000;

/// A duration in whole microseconds for SQL (`$n * interval '1 microsecond'`), capped at
/// 100 years.
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(MAX_MICROS).min(MAX_MICROS)
}
