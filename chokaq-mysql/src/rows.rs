//! Rows <-> core types: decoding stored rows, encoding values for storage (times, durations,
//! zombie policies, error text).

use std::time::Duration;

use chokaq_core::{
    chrono::{DateTime, Utc},
    validate, ClaimedJob, DeadReason, Error, JobId, JobKind, JobLocation, JobRecord, JobStatus, Lease, QueueName,
    QueueSettings, RateLimit, Result, Timestamp, WorkerId, ZombiePolicy,
};
use sqlx::mysql::MySqlRow;
use sqlx::Row;
use uuid::Uuid;

use crate::error::{corrupt, map_err};

/// Longest delay or timeout accepted: about 1,000 years, so `now + delay` never overflows.
pub(crate) const MAX_DURATION_US: i64 = 1000 * 366 * 86_400 * 1_000_000;

/// This host's UTC clock in whole microseconds: only for figures no other process compares
/// (the `taken_at` of a stats snapshot is the database's). Every stored time comes from the
/// database clock, read by [`db_now`].
#[allow(dead_code)]
pub(crate) fn local_now_us() -> i64 {
    Utc::now().timestamp_micros()
}

/// The database clock in microseconds since the epoch (sessions run at time zone `+00:00`).
pub(crate) async fn db_now(conn: &mut sqlx::MySqlConnection, sql: &str) -> Result<i64> {
    sqlx::query_scalar(sql).fetch_one(&mut *conn).await.map_err(map_err)
}

/// Microseconds since the epoch to a timestamp.
pub(crate) fn ts(us: i64) -> Result<Timestamp> {
    DateTime::from_timestamp_micros(us).ok_or_else(|| corrupt(format!("timestamp {us} out of range")))
}

pub(crate) fn opt_ts(us: Option<i64>) -> Result<Option<Timestamp>> {
    us.map(ts).transpose()
}

/// A duration as microseconds, rejecting absurd values as invalid input.
pub(crate) fn dur_us(what: &str, d: Duration) -> Result<i64> {
    match i64::try_from(d.as_micros()) {
        Ok(us) if us <= MAX_DURATION_US => Ok(us),
        _ => Err(Error::invalid(format!("{what} is too long: {d:?} (at most about 1000 years)"))),
    }
}

/// A timestamp as microseconds, rejecting instants outside years 0..=9999.
pub(crate) fn ts_us(what: &str, t: Timestamp) -> Result<i64> {
    let us = t.timestamp_micros();
    // 0000-01-01 .. 9999-12-31
    if !(-62_167_219_200_000_000..=253_402_300_799_999_999).contains(&us) {
        return Err(Error::invalid(format!("{what} is out of range: {t}")));
    }
    Ok(us)
}

pub(crate) fn get<'r, T>(row: &'r MySqlRow, col: &str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::MySql> + sqlx::Type<sqlx::MySql>,
{
    row.try_get(col).map_err(map_err)
}

/// A text column stored as bytes (VARBINARY, or text under a binary collation, which the
/// driver reports as binary): decoded as UTF-8.
pub(crate) fn text(row: &MySqlRow, col: &str) -> Result<String> {
    let b: Vec<u8> = get(row, col)?;
    String::from_utf8(b).map_err(|_| corrupt(format!("{col} is not UTF-8")))
}

/// [`text`] for a NULL-able column.
pub(crate) fn opt_text(row: &MySqlRow, col: &str) -> Result<Option<String>> {
    let b: Option<Vec<u8>> = get(row, col)?;
    b.map(|b| String::from_utf8(b).map_err(|_| corrupt(format!("{col} is not UTF-8")))).transpose()
}

fn i32_col(row: &MySqlRow, col: &str) -> Result<i32> {
    let v: i64 = get(row, col)?;
    i32::try_from(v).map_err(|_| corrupt(format!("{col} = {v}")))
}

/// A stored status: Scheduled (3, Pending whose due time was ahead when the row was written)
/// reads as Pending.
pub(crate) fn status(code: i64) -> Result<JobStatus> {
    match code {
        3 => Ok(JobStatus::Pending),
        c => JobStatus::from_code(i16::try_from(c).map_err(|_| corrupt("status"))?),
    }
}

/// Which table a row was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Src {
    Hot,
    Archive,
    Dead,
}

/// Decodes a job row: the columns of the `get_*` and `list_*` statements (and, for rows
/// just claimed, the `cols!()` the claim returns, with `from == Src::Hot`).
pub(crate) fn record(row: &MySqlRow, from: Src) -> Result<JobRecord> {
    let status_code: i64 = get(row, "status")?;
    let status = status(status_code)?;
    let (location, finished_at) = match from {
        Src::Hot => (JobLocation::Hot(status), None),
        Src::Archive => (JobLocation::Archived, Some(ts(get(row, "finished_at")?)?)),
        Src::Dead => {
            let reason = text(row, "reason")?;
            (JobLocation::Dead(DeadReason::parse(&reason)?), Some(ts(get(row, "finished_at")?)?))
        }
    };
    let payload = text(row, "payload")?;
    let tags = text(row, "tags")?;
    let queue = text(row, "queue")?;
    let kind = text(row, "kind")?;
    let cancel_requested: i64 = get(row, "cancel_requested")?;
    Ok(JobRecord {
        concurrency_key: opt_text(row, "concurrency_key")?,
        id: JobId(get::<Uuid>(row, "id")?),
        location,
        queue: QueueName::new(queue).map_err(|_| corrupt("queue"))?,
        kind: JobKind::new(kind).map_err(|_| corrupt("kind"))?,
        payload: serde_json::from_str(&payload).map_err(|_| corrupt("payload is not JSON"))?,
        tags: serde_json::from_str(&tags).map_err(|_| corrupt("tags are not a JSON array of strings"))?,
        idempotency_key: opt_text(row, "idempotency_key")?,
        priority: i32_col(row, "priority")?,
        attempt: i32_col(row, "attempt")?,
        max_attempts: i32_col(row, "max_attempts")?,
        lease: get::<Option<i64>>(row, "lease")?.map(Lease),
        worker_id: get::<Option<Uuid>>(row, "worker_id")?.map(WorkerId),
        scheduled_at: opt_ts(get(row, "scheduled_at")?)?,
        created_at: ts(get(row, "created_at")?)?,
        started_at: opt_ts(get(row, "started_at")?)?,
        heartbeat_at: opt_ts(get(row, "heartbeat_at")?)?,
        updated_at: ts(get(row, "updated_at")?)?,
        finished_at,
        last_error: opt_text(row, "last_error")?,
        cancel_requested: cancel_requested != 0,
        created_by: opt_text(row, "created_by")?,
    })
}

/// The columns a claim's mark writes, for [`claimed`].
pub(crate) struct Marked {
    pub(crate) status: JobStatus,
    pub(crate) lease: Lease,
    pub(crate) worker: WorkerId,
    /// The claim starts the job (`attempt + 1`, `started_at` now).
    pub(crate) start: bool,
    /// The claim sets the first heartbeat (else it clears it).
    pub(crate) beat: bool,
    pub(crate) now: Timestamp,
}

/// Decodes a Pending row the claim picked (its columns and `expired_holds`, as read before the
/// mark), as the mark changed it: the claim reads nothing back.
pub(crate) fn claimed(row: &MySqlRow, m: &Marked) -> Result<ClaimedJob> {
    let r = record(row, Src::Hot)?;
    if r.location != JobLocation::Hot(JobStatus::Pending) {
        return Err(corrupt("claimed row was not Pending"));
    }
    Ok(ClaimedJob {
        concurrency_key: r.concurrency_key,
        id: r.id,
        queue: r.queue,
        kind: r.kind,
        payload: r.payload,
        tags: r.tags,
        idempotency_key: r.idempotency_key,
        priority: r.priority,
        status: m.status,
        attempt: r.attempt + i32::from(m.start),
        max_attempts: r.max_attempts,
        lease: m.lease,
        worker_id: m.worker,
        scheduled_at: r.scheduled_at,
        created_at: r.created_at,
        started_at: if m.start { Some(m.now) } else { r.started_at },
        heartbeat_at: m.beat.then_some(m.now),
        last_error: r.last_error,
        created_by: r.created_by,
        expired_holds: get(row, "expired_holds")?,
    })
}

/// Decodes a queue's control row (statement `queue_settings`).
pub(crate) fn settings(row: &MySqlRow, queue: &QueueName) -> Result<QueueSettings> {
    let max_workers: Option<i64> = get(row, "max_workers")?;
    let fetched_us: Option<i64> = get(row, "fetched_timeout_us")?;
    let zombie_us: Option<i64> = get(row, "zombie_timeout_us")?;
    let policy = text(row, "zombie_policy")?;
    let key_max_workers: Option<i64> = get(row, "key_max_workers")?;
    let rate_jobs: Option<i64> = get(row, "rate_jobs")?;
    let rate_per_ms: Option<i64> = get(row, "rate_per_ms")?;
    let rate_limit = match (rate_jobs, rate_per_ms) {
        (Some(jobs), Some(ms)) => Some(RateLimit {
            jobs: u32::try_from(jobs).map_err(|_| corrupt("rate_jobs"))?,
            per: Duration::from_millis(u64::try_from(ms).map_err(|_| corrupt("rate_per_ms"))?),
            by_key: get::<i64>(row, "rate_by_key")? != 0,
        }),
        _ => None,
    };
    Ok(QueueSettings {
        key_max_workers: key_max_workers
            .map(|m| u32::try_from(m).map_err(|_| corrupt("key_max_workers")))
            .transpose()?,
        rate_limit,
        name: queue.clone(),
        max_workers: max_workers.map(|m| u32::try_from(m).map_err(|_| corrupt("max_workers"))).transpose()?,
        is_paused: get::<i64>(row, "is_paused")? != 0,
        is_active: get::<i64>(row, "is_active")? != 0,
        zombie_timeout: zombie_us
            .map(|us| u64::try_from(us).map(Duration::from_micros).map_err(|_| corrupt("zombie_timeout")))
            .transpose()?,
        zombie_policy: parse_policy(&policy)?,
        fetched_timeout: fetched_us
            .map(|us| u64::try_from(us).map(Duration::from_micros).map_err(|_| corrupt("fetched_timeout")))
            .transpose()?,
        updated_at: Some(ts(get(row, "updated_at")?)?),
    })
}

/// A zombie policy as stored.
pub(crate) fn policy_str(p: ZombiePolicy) -> &'static str {
    match p {
        ZombiePolicy::Retry => "retry",
        ZombiePolicy::DeadLetter => "dead_letter",
    }
}

/// A stored zombie policy.
pub(crate) fn parse_policy(s: &str) -> Result<ZombiePolicy> {
    match s {
        "retry" => Ok(ZombiePolicy::Retry),
        "dead_letter" => Ok(ZombiePolicy::DeadLetter),
        other => Err(corrupt(format!("zombie_policy {other:?}"))),
    }
}

/// Error text as stored: NUL replaced (databases cannot store it in text), truncated.
pub(crate) fn clean_error(s: &str) -> String {
    // Truncates before it copies (a huge error text is never copied whole); NUL becomes U+FFFD.
    validate::error_text(s)
}
