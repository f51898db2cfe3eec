//! Rows to chokaq's types and back: decoding result rows, and the few conversions of inputs
//! into bound values (lease arrays, microseconds, stored error texts).

use std::collections::HashSet;
use std::time::Duration;

use chokaq_core::{
    validate, BatchOutcome, ClaimedJob, DeadReason, Error, ErrorKind, JobId, JobKind, JobLocation, JobRecord,
    JobStatus, KeyCount, Lease, LeaseRef, QueueName, QueueSettings, QueueStats, RateLimit, Result, StatsSnapshot,
    Timestamp, WorkerId, ZombiePolicy,
};
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use crate::error::map_sqlx_error;

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
        concurrency_key: get(row, "concurrency_key")?,
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
        expired_holds: get(row, "expired_holds")?,
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
        concurrency_key: get(row, "concurrency_key")?,
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
    settings_named(row, get::<String>(row, "name")?)
}

/// The settings columns of a row, for queue `name`.
fn settings_named(row: &PgRow, name: String) -> Result<QueueSettings> {
    let max: Option<i32> = get(row, "max_workers")?;
    let zt: Option<i64> = get(row, "zombie_timeout_ms")?;
    let ft: Option<i64> = get(row, "fetched_timeout_ms")?;
    let policy: i16 = get(row, "zombie_policy")?;
    let key_max: Option<i32> = get(row, "key_max_workers")?;
    let rate_jobs: Option<i32> = get(row, "rate_jobs")?;
    let rate_per: Option<i64> = get(row, "rate_per_ms")?;
    let rate_limit = match (rate_jobs, rate_per) {
        (Some(jobs), Some(ms)) => Some(RateLimit {
            jobs: jobs.max(0) as u32,
            per: Duration::from_millis(ms.max(0) as u64),
            by_key: get(row, "rate_by_key")?,
        }),
        _ => None,
    };
    Ok(QueueSettings {
        key_max_workers: key_max.map(|m| m.max(0) as u32),
        rate_limit,
        name: QueueName::new(name)?,
        max_workers: max.map(|m| m.max(0) as u32),
        is_paused: get(row, "is_paused")?,
        is_active: get(row, "is_active")?,
        zombie_timeout: zt.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        zombie_policy: if policy == 1 { ZombiePolicy::DeadLetter } else { ZombiePolicy::Retry },
        fetched_timeout: ft.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        updated_at: get(row, "updated_at")?,
    })
}

/// Longest delay passed to SQL: 100 years (PostgreSQL's timestamps end in 294276 AD).
const MAX_MICROS: i64 = 100 * 366 * 24 * 3600 * 1_000_000;

/// A duration in whole microseconds for SQL (`$n * interval '1 microsecond'`), capped at
/// 100 years.
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(MAX_MICROS).min(MAX_MICROS)
}

/// The rows of the stats statement: one per queue (none when every table is empty, then one
/// row with only `taken_at`).
pub(crate) fn stats(rows: &[PgRow]) -> Result<StatsSnapshot> {
    let mut snap = StatsSnapshot::default();
    for row in rows {
        let get_i = |c: &str| row.try_get::<i64, _>(c).map(count).map_err(map_sqlx_error);
        snap.taken_at = row.try_get("taken_at").map_err(map_sqlx_error)?;
        let Some(queue) = row.try_get::<Option<String>, _>("queue").map_err(map_sqlx_error)? else { continue };
        let settings = if get::<bool>(row, "controlled")? { Some(settings_named(row, queue.clone())?) } else { None };
        let keys: Option<Vec<String>> = get(row, "busy_keys")?;
        let counts: Option<Vec<i64>> = get(row, "busy_counts")?;
        let busiest_keys = keys
            .unwrap_or_default()
            .into_iter()
            .zip(counts.unwrap_or_default())
            .map(|(key, n)| KeyCount { key, running: count(n) })
            .collect();
        snap.push(QueueStats {
            busiest_keys,
            queue,
            pending: get_i("pending")?,
            fetched: get_i("fetched")?,
            processing: get_i("processing")?,
            archived: get_i("archived")?,
            dead: get_i("dead")?,
            cancelled: get_i("cancelled")?,
            oldest_due_at: row.try_get("oldest_due_at").map_err(map_sqlx_error)?,
            settings,
            archived_estimated: get(row, "archived_estimated")?,
        });
    }
    Ok(snap)
}

/// Input ids and leases as two parallel arrays, every distinct (id, lease) pair once, in input
/// order: an id listed with a stale lease and its current one is matched by the current one.
pub(crate) fn pairs(leases: &[LeaseRef]) -> (Vec<Uuid>, Vec<i64>) {
    let mut seen = HashSet::with_capacity(leases.len());
    leases.iter().filter(|l| seen.insert((l.id, l.lease))).map(|l| (l.id.0, l.lease.0)).unzip()
}

/// Every distinct id in exactly one list, once, in the order of its first entry: done when a
/// statement reported it for any of its leases.
pub(crate) fn split(ids: &[Uuid], done: &HashSet<Uuid>) -> BatchOutcome {
    BatchOutcome::merge(ids.iter().map(|id| (JobId(*id), done.contains(id))))
}

/// A claimed row that could not be decoded: its id, its lease and why.
pub(crate) struct Undecodable {
    pub(crate) id: Uuid,
    pub(crate) lease: i64,
    pub(crate) reason: String,
}

/// Claimed rows in claim order (`UPDATE … RETURNING` has none): priority DESC, due ASC, id.
/// Each row is decoded on its own: one that cannot be (a payload nested past the reader's
/// limit, a name a newer check refuses) is returned apart, to be dead-lettered, and does not
/// fail its neighbours.
pub(crate) fn sorted_claims(rows: &[PgRow]) -> Result<(Vec<ClaimedJob>, Vec<Undecodable>)> {
    let mut jobs = Vec::with_capacity(rows.len());
    let mut bad = Vec::new();
    for row in rows {
        match claimed(row) {
            Ok(j) => jobs.push(j),
            Err(e) => {
                let id: Uuid = get(row, "id")?;
                let lease: Option<i64> = get(row, "lease")?;
                let lease = lease.ok_or_else(|| Error::new(ErrorKind::Other, "claimed row without a lease"))?;
                bad.push(Undecodable { id, lease, reason: undecodable_reason(&e) });
            }
        }
    }
    jobs.sort_by(|(a, ad), (b, bd)| b.priority.cmp(&a.priority).then(ad.cmp(bd)).then(a.id.cmp(&b.id)));
    Ok((jobs.into_iter().map(|(j, _)| j).collect(), bad))
}

/// The dead-letter error text of an undecodable row: the error and its causes.
pub(crate) fn undecodable_reason(e: &Error) -> String {
    let mut text = format!("undecodable row, dead-lettered by the claim: {}", e.message());
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    error_text(&text)
}

/// An error text as stored: at most [`validate::MAX_ERROR_LEN`] bytes, no NUL.
pub(crate) fn error_text(s: &str) -> String {
    // Truncates before it copies (a huge error text is never copied whole); NUL becomes U+FFFD.
    validate::error_text(s)
}

pub(crate) fn count(v: i64) -> u64 {
    v.max(0) as u64
}
