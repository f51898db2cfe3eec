//! Rows <-> core types. Result rows are decoded here into `chokaq_core` types, by the column
//! names the statements in `sql/` return; [`params`] turns core values into the values bound
//! to those statements.

mod params;

use std::collections::HashSet;
use std::time::Duration;

use chokaq_core::chrono::{DateTime, NaiveDateTime, Utc};
use chokaq_core::uuid::Uuid;
use chokaq_core::{
    BatchOutcome, CancelOutcome, ClaimedJob, DeadReason, Enqueued, FailOutcome, Fenced, HeartbeatReport, JobId,
    JobKind, JobLocation, JobRecord, JobStatus, KeyCount, Lease, LeaseRef, QueueName, QueueSettings, QueueStats,
    RateLimit, RescueReport, Result, StatsSnapshot, Timestamp, WorkerId, ZombiePolicy, MAX_BUSIEST_KEYS,
};
use tiberius::Row;

#[cfg(feature = "testing")]
pub(crate) use self::params::hex_id;
pub(crate) use self::params::{
    check_ts, control_params, dead_reason_text, delay_parts, fail_action, id_bytes, job_json, leases_json, millis,
    unique_json,
};
use crate::error::decode;

pub(crate) fn col<'a, T: tiberius::FromSql<'a>>(op: &str, row: &'a Row, name: &str) -> Result<Option<T>> {
    row.try_get::<T, _>(name).map_err(|e| decode(op, format!("column {name}: {e}")))
}

pub(crate) fn req<'a, T: tiberius::FromSql<'a>>(op: &str, row: &'a Row, name: &str) -> Result<T> {
    col::<T>(op, row, name)?.ok_or_else(|| decode(op, format!("column {name} is NULL")))
}

pub(crate) fn ts(op: &str, row: &Row, name: &str) -> Result<Option<Timestamp>> {
    Ok(col::<NaiveDateTime>(op, row, name)?.map(|n| DateTime::<Utc>::from_naive_utc_and_offset(n, Utc)))
}

pub(crate) fn req_ts(op: &str, row: &Row, name: &str) -> Result<Timestamp> {
    ts(op, row, name)?.ok_or_else(|| decode(op, format!("column {name} is NULL")))
}

pub(crate) fn job_id(op: &str, row: &Row, name: &str) -> Result<JobId> {
    let b: &[u8] = req(op, row, name)?;
    Uuid::from_slice(b).map(JobId).map_err(|e| decode(op, format!("column {name}: {e}")))
}

/// A count column: `BIGINT` (`COUNT_BIG`, `ROWCOUNT_BIG`, the stats sums), or `INT` where a
/// statement returns `@@ROWCOUNT`. NULL and negative values count as 0.
pub(crate) fn count(op: &str, row: &Row, name: &str) -> Result<u64> {
    let n: i64 = match row.try_get::<i64, _>(name) {
        Ok(v) => v.unwrap_or(0),
        Err(_) => col::<i32>(op, row, name)?.map(i64::from).unwrap_or(0),
    };
    Ok(u64::try_from(n).unwrap_or(0))
}

/// The status of a hot row as callers see it. The internal Scheduled state (3: Pending, not
/// yet due, outside the claim index; see `docs/contract.md`, Scheduled jobs) is Pending.
pub(crate) fn hot_status(code: i16) -> Result<JobStatus> {
    match code {
        SCHEDULED => Ok(JobStatus::Pending),
        other => JobStatus::from_code(other),
    }
}

/// The stored `Status` of a Pending job that is not due yet.
pub(crate) const SCHEDULED: i16 = 3;

/// The columns every job table shares.
struct Common {
    id: JobId,
    queue: QueueName,
    kind: JobKind,
    payload: serde_json::Value,
    tags: Vec<String>,
    idempotency_key: Option<String>,
    priority: i32,
    attempt: i32,
    max_attempts: i32,
    lease: Option<Lease>,
    worker_id: Option<WorkerId>,
    heartbeat_at: Option<Timestamp>,
    scheduled_at: Option<Timestamp>,
    created_at: Timestamp,
    started_at: Option<Timestamp>,
    updated_at: Timestamp,
    last_error: Option<String>,
    created_by: Option<String>,
    concurrency_key: Option<String>,
}

fn decode_common(op: &str, row: &Row) -> Result<Common> {
    let payload_text: &str = req(op, row, "Payload")?;
    let tags = match col::<&str>(op, row, "Tags")? {
        Some(t) => serde_json::from_str(t).map_err(|e| decode(op, format!("Tags: {e}")))?,
        None => Vec::new(),
    };
    Ok(Common {
        id: job_id(op, row, "Id")?,
        queue: QueueName::new(req::<&str>(op, row, "Queue")?)?,
        kind: JobKind::from_stored(req::<&str>(op, row, "Kind")?)?,
        payload: serde_json::from_str(payload_text).map_err(|e| decode(op, format!("Payload: {e}")))?,
        tags,
        idempotency_key: col::<&str>(op, row, "IdempotencyKey")?.map(str::to_string),
        priority: req(op, row, "Priority")?,
        attempt: req(op, row, "Attempt")?,
        max_attempts: req(op, row, "MaxAttempts")?,
        lease: col::<i64>(op, row, "Lease")?.map(Lease),
        worker_id: col::<Uuid>(op, row, "WorkerId")?.map(WorkerId),
        heartbeat_at: ts(op, row, "HeartbeatUtc")?,
        scheduled_at: ts(op, row, "ScheduledAtUtc")?,
        created_at: req_ts(op, row, "CreatedAtUtc")?,
        started_at: ts(op, row, "StartedAtUtc")?,
        updated_at: req_ts(op, row, "UpdatedAtUtc")?,
        last_error: col::<&str>(op, row, "LastError")?.map(str::to_string),
        created_by: col::<&str>(op, row, "CreatedBy")?.map(str::to_string),
        concurrency_key: col::<&str>(op, row, "ConcurrencyKey")?.map(str::to_string),
    })
}

pub(crate) fn decode_claimed(row: &Row) -> Result<ClaimedJob> {
    let op = "claim";
    let c = decode_common(op, row)?;
    Ok(ClaimedJob {
        concurrency_key: c.concurrency_key,
        id: c.id,
        queue: c.queue,
        kind: c.kind,
        payload: c.payload,
        tags: c.tags,
        idempotency_key: c.idempotency_key,
        priority: c.priority,
        status: hot_status(req(op, row, "Status")?)?,
        attempt: c.attempt,
        max_attempts: c.max_attempts,
        lease: c.lease.ok_or_else(|| decode(op, "claimed row without a lease"))?,
        worker_id: c.worker_id.ok_or_else(|| decode(op, "claimed row without a worker"))?,
        scheduled_at: c.scheduled_at,
        created_at: c.created_at,
        started_at: c.started_at,
        heartbeat_at: c.heartbeat_at,
        last_error: c.last_error,
        created_by: c.created_by,
        expired_holds: req(op, row, "ExpiredHolds")?,
    })
}

pub(crate) fn decode_record(op: &str, row: &Row) -> Result<JobRecord> {
    let loc: i32 = req(op, row, "Loc")?;
    let location = match loc {
        0 => JobLocation::Hot(hot_status(req(op, row, "Status")?)?),
        1 => JobLocation::Archived,
        2 => JobLocation::Dead(DeadReason::parse(req::<&str>(op, row, "Reason")?)?),
        other => return Err(decode(op, format!("unknown location {other}"))),
    };
    let cancel_requested: bool = col(op, row, "CancelRequested")?.unwrap_or(false);
    let finished_at = ts(op, row, "FinishedAtUtc")?;
    let c = decode_common(op, row)?;
    Ok(JobRecord {
        concurrency_key: c.concurrency_key,
        id: c.id,
        location,
        queue: c.queue,
        kind: c.kind,
        payload: c.payload,
        tags: c.tags,
        idempotency_key: c.idempotency_key,
        priority: c.priority,
        attempt: c.attempt,
        max_attempts: c.max_attempts,
        lease: c.lease,
        worker_id: c.worker_id,
        scheduled_at: c.scheduled_at,
        created_at: c.created_at,
        started_at: c.started_at,
        heartbeat_at: c.heartbeat_at,
        updated_at: c.updated_at,
        finished_at,
        last_error: c.last_error,
        cancel_requested,
        created_by: c.created_by,
    })
}

pub(crate) fn decode_queue(op: &str, row: &Row) -> Result<QueueSettings> {
    let policy: i16 = req(op, row, "ZombiePolicy")?;
    let rate_limit = match (col::<i32>(op, row, "RateJobs")?, col::<i64>(op, row, "RatePerMs")?) {
        (Some(jobs), Some(ms)) => Some(RateLimit {
            jobs: u32::try_from(jobs).map_err(|_| decode(op, format!("RateJobs {jobs}")))?,
            per: Duration::from_millis(u64::try_from(ms).map_err(|_| decode(op, format!("RatePerMs {ms}")))?),
            by_key: col::<bool>(op, row, "RateByKey")?.unwrap_or(false),
        }),
        _ => None,
    };
    Ok(QueueSettings {
        key_max_workers: col::<i32>(op, row, "KeyMaxWorkers")?.map(|n| u32::try_from(n).unwrap_or(0)),
        rate_limit,
        name: QueueName::new(req::<&str>(op, row, "Name")?)?,
        max_workers: col::<i32>(op, row, "MaxWorkers")?.map(|n| u32::try_from(n).unwrap_or(0)),
        is_paused: req(op, row, "IsPaused")?,
        is_active: req(op, row, "IsActive")?,
        zombie_timeout: col::<i64>(op, row, "ZombieTimeoutMs")?
            .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        zombie_policy: if policy == 1 { ZombiePolicy::DeadLetter } else { ZombiePolicy::Retry },
        fetched_timeout: col::<i64>(op, row, "FetchedTimeoutMs")?
            .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        updated_at: ts(op, row, "UpdatedAtUtc")?,
    })
}

/// The last result set's rows (batches may emit none before it).
pub(crate) fn last_set<R>(sets: Vec<Vec<R>>) -> Vec<R> {
    sets.into_iter().last().unwrap_or_default()
}

pub(crate) fn first_row(op: &str, sets: Vec<Vec<Row>>) -> Result<Row> {
    last_set(sets).into_iter().next().ok_or_else(|| decode(op, "no result row"))
}

/// Splits input leases into done / lost by the ids the database reported: each input id once,
/// in one list (an id listed with a stale and a current lease is done when the current one
/// wrote), in the order of its first entry (`docs/contract.md`, "Operations and guards").
pub(crate) fn outcome(leases: &[LeaseRef], done_ids: &HashSet<JobId>) -> BatchOutcome {
    BatchOutcome::merge(leases.iter().map(|l| (l.id, done_ids.contains(&l.id))))
}

pub(crate) fn ids_of(op: &str, rows: &[Row]) -> Result<HashSet<JobId>> {
    rows.iter().map(|r| job_id(op, r, "Id")).collect()
}

/// `fail`'s `Result` row (0 lease lost, 1 retried, 2 snoozed, 3 dead-lettered), with the due
/// time and the dead-letter reason as they stand in the database (for a repeated call, what
/// the first call wrote).
pub(crate) fn decode_fail(op: &str, row: &Row) -> Result<Fenced<FailOutcome>> {
    let result: i32 = req(op, row, "Result")?;
    fail_outcome(op, result, || req_ts(op, row, "DueAtUtc"), || DeadReason::parse(req::<&str>(op, row, "Reason")?))
}

/// [`decode_fail`] without the row: the result code, and how to read the due time and the
/// reason when the code needs them.
pub(crate) fn fail_outcome(
    op: &str,
    result: i32,
    due: impl FnOnce() -> Result<Timestamp>,
    reason: impl FnOnce() -> Result<DeadReason>,
) -> Result<Fenced<FailOutcome>> {
    Ok(match result {
        0 => Fenced::LeaseLost,
        1 => Fenced::Done(FailOutcome::Retried { at: due()? }),
        2 => Fenced::Done(FailOutcome::Snoozed { until: due()? }),
        3 => Fenced::Done(FailOutcome::DeadLettered(reason()?)),
        other => return Err(decode(op, format!("unknown result {other}"))),
    })
}

/// `enqueue`'s rows (`Id`, `Duplicate`), one per job in input order.
pub(crate) fn decode_enqueued(op: &str, rows: &[Row], jobs: usize) -> Result<Vec<Enqueued>> {
    if rows.len() != jobs {
        return Err(decode(op, format!("{} result rows for {jobs} jobs", rows.len())));
    }
    rows.iter().map(|r| Ok(Enqueued { id: job_id(op, r, "Id")?, duplicate: req(op, r, "Duplicate")? })).collect()
}

/// `heartbeat`'s rows (`Id`, `CancelRequested` of every job still held) as the report over
/// the input leases.
pub(crate) fn heartbeat_report(op: &str, leases: &[LeaseRef], rows: &[Row]) -> Result<HeartbeatReport> {
    let mut held = HashSet::new();
    let mut cancel = HashSet::new();
    for r in rows {
        let id = job_id(op, r, "Id")?;
        if col::<bool>(op, r, "CancelRequested")?.unwrap_or(false) {
            cancel.insert(id);
        }
        held.insert(id);
    }
    Ok(HeartbeatReport::merge(leases.iter().map(|l| (l.id, held.contains(&l.id).then(|| cancel.contains(&l.id))))))
}

/// `rescue`'s one row.
pub(crate) fn decode_rescue(op: &str, row: &Row) -> Result<RescueReport> {
    Ok(RescueReport {
        ran: req(op, row, "Ran")?,
        fetched_released: count(op, row, "FetchedReleased")?,
        zombies_retried: count(op, row, "ZombiesRetried")?,
        zombies_dead: count(op, row, "ZombiesDead")?,
        purged: 0,
    })
}

/// `cancel`'s `Result` (1 cancelled, 2 requested, else not live).
pub(crate) fn decode_cancel(op: &str, row: &Row) -> Result<CancelOutcome> {
    Ok(match req::<i32>(op, row, "Result")? {
        1 => CancelOutcome::Cancelled,
        2 => CancelOutcome::Requested,
        _ => CancelOutcome::NotLive,
    })
}

/// A queue's `BusiestKeys` column (`[{"k": key, "n": running}, …]` from `FOR JSON PATH`, NULL
/// when no keyed job runs), in the order the statement gave: most running first, ties by key.
pub(crate) fn busiest_keys(op: &str, json: Option<&str>) -> Result<Vec<KeyCount>> {
    #[derive(serde::Deserialize)]
    struct Entry {
        k: String,
        n: u64,
    }
    let Some(json) = json else { return Ok(Vec::new()) };
    let entries: Vec<Entry> = serde_json::from_str(json).map_err(|e| decode(op, format!("BusiestKeys: {e}")))?;
    Ok(entries.into_iter().take(MAX_BUSIEST_KEYS).map(|e| KeyCount { key: e.k, running: e.n }).collect())
}

/// `stats`' result sets: the `IsSnapshot` / `Now` row, then one row per queue.
pub(crate) fn decode_stats(op: &str, sets: Vec<Vec<Row>>) -> Result<StatsSnapshot> {
    let has = |r: &Row, name: &str| r.columns().iter().any(|c| c.name() == name);
    let mut snap = StatsSnapshot::default();
    let mut rows = Vec::new();
    for r in sets.into_iter().flatten() {
        if has(&r, "IsSnapshot") {
            snap.taken_at = ts(op, &r, "Now")?;
        } else {
            rows.push(r);
        }
    }
    for r in &rows {
        let settings = match col::<&str>(op, r, "Name")? {
            Some(_) => Some(decode_queue(op, r)?),
            None => None,
        };
        snap.push(QueueStats {
            busiest_keys: busiest_keys(op, col::<&str>(op, r, "BusiestKeys")?)?,
            queue: req::<&str>(op, r, "Queue")?.to_string(),
            pending: count(op, r, "Pending")?,
            fetched: count(op, r, "Fetched")?,
            processing: count(op, r, "Processing")?,
            archived: count(op, r, "Archived")?,
            dead: count(op, r, "Dead")?,
            cancelled: count(op, r, "Cancelled")?,
            oldest_due_at: ts(op, r, "OldestDue")?,
            settings,
            archived_estimated: false,
        });
    }
    Ok(snap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::Statements;

    /// The columns the decoders read are the ones the statements return.
    #[test]
    fn decoders_read_columns_the_statements_return() {
        let st = Statements::new("chokaq").unwrap();
        let common = [
            "Id",
            "Queue",
            "Kind",
            "Payload",
            "Tags",
            "IdempotencyKey",
            "Priority",
            "Attempt",
            "MaxAttempts",
            "Lease",
            "WorkerId",
            "HeartbeatUtc",
            "ScheduledAtUtc",
            "CreatedAtUtc",
            "StartedAtUtc",
            "UpdatedAtUtc",
            "LastError",
            "CreatedBy",
            "ConcurrencyKey",
        ];
        let record = ["Loc", "Status", "CancelRequested", "FinishedAtUtc", "Reason"];
        let mut expect: Vec<(&str, &String, Vec<&str>)> = vec![
            ("enqueue", &st.enqueue, vec!["Id", "Duplicate"]),
            ("claim", &st.claim, [&common[..], &["Status"]].concat()),
            ("start", &st.start, vec!["Id"]),
            ("heartbeat", &st.heartbeat, vec!["Id", "CancelRequested"]),
            ("complete", &st.complete, vec!["Id"]),
            ("release", &st.release, vec!["Id"]),
            ("fail", &st.fail, vec!["Result", "DueAtUtc", "Reason", "Repeated"]),
            ("rescue", &st.rescue, vec!["Ran", "FetchedReleased", "ZombiesRetried", "ZombiesDead"]),
            ("cancel", &st.cancel, vec!["Result"]),
            ("requeue_dead", &st.requeue_dead, vec!["Moved"]),
            ("dead_letter_undecodable", &st.dead_letter_undecodable, vec!["Moved"]),
            ("purge_archive", &st.purge_archive, vec!["Deleted"]),
            ("purge_dlq", &st.purge_dlq, vec!["Deleted"]),
            (
                "stats",
                &st.stats,
                vec![
                    "IsSnapshot",
                    "Now",
                    "Queue",
                    "Pending",
                    "Fetched",
                    "Processing",
                    "Archived",
                    "Dead",
                    "Cancelled",
                    "OldestDue",
                    "Name",
                    "IsPaused",
                    "KeyMaxWorkers",
                    "RateJobs",
                    "RatePerMs",
                    "RateByKey",
                    "BusiestKeys",
                ],
            ),
            ("db_now", &st.db_now, vec!["Now"]),
            ("force", &st.force, vec!["Changed"]),
            ("presence_many", &st.presence_many, vec!["Id", "Hot", "Archive", "Dead"]),
            ("kill_connections", &st.kill_connections, vec!["Killed"]),
        ];
        let queue_cols = vec![
            "Name",
            "MaxWorkers",
            "IsPaused",
            "IsActive",
            "ZombieTimeoutMs",
            "ZombiePolicy",
            "FetchedTimeoutMs",
            "KeyMaxWorkers",
            "RateJobs",
            "RatePerMs",
            "RateByKey",
            "UpdatedAtUtc",
        ];
        expect.push(("control_queue", &st.control_queue, queue_cols.clone()));
        expect.push(("queue_settings", &st.queue_settings, queue_cols));
        for (name, sql) in [
            ("get_job", &st.get_job),
            ("list_hot", &st.list_hot),
            ("list_archive", &st.list_archive),
            ("list_dlq", &st.list_dlq),
        ] {
            expect.push((name, sql, [&common[..], &record[..]].concat()));
        }
        for (name, sql, cols) in expect {
            for c in cols {
                assert!(sql.contains(&format!("[{c}]")), "{name} does not return [{c}]");
            }
        }
    }

    /// Issue 25: the busiest keys as `stats` returns them (`FOR JSON PATH`), in its order.
    #[test]
    fn busiest_keys_decode_in_the_statements_order() {
        assert!(busiest_keys("stats", None).unwrap().is_empty());
        let keys = busiest_keys("stats", Some(r#"[{"k":"b","n":3},{"k":"a","n":1},{"k":"é\"x","n":1}]"#)).unwrap();
        let got: Vec<(&str, u64)> = keys.iter().map(|k| (k.key.as_str(), k.running)).collect();
        assert_eq!(got, vec![("b", 3), ("a", 1), ("é\"x", 1)]);
        assert!(busiest_keys("stats", Some("not json")).is_err());
        let st = Statements::new("chokaq").unwrap();
        assert!(st
            .stats
            .contains(&format!("SELECT TOP ({}) b.[ConcurrencyKey] AS [k], COUNT_BIG(*) AS [n]", MAX_BUSIEST_KEYS)));
        assert!(st.stats.contains(
            "        ORDER BY COUNT_BIG(*) DESC, b.[ConcurrencyKey] ASC\n        FOR JSON PATH\n    ) AS [BusiestKeys]"
        ));
        // Inside the one statement that reads the counts, so from the same snapshot.
        assert!(at_least_once(
            &st.stats,
            "WHERE b.[Queue] = y.[Queue] AND b.[Status] IN (1, 2) AND b.[ConcurrencyKey] IS NOT NULL"
        ));
    }

    fn at_least_once(s: &str, what: &str) -> bool {
        s.matches(what).count() == 1
    }

    #[test]
    fn scheduled_is_pending_to_callers() {
        assert_eq!(hot_status(SCHEDULED).unwrap(), JobStatus::Pending);
        assert_eq!(hot_status(0).unwrap(), JobStatus::Pending);
        assert_eq!(hot_status(1).unwrap(), JobStatus::Fetched);
        assert_eq!(hot_status(2).unwrap(), JobStatus::Processing);
        assert!(hot_status(4).is_err());
        // Nothing outside the backend can ask for the internal state.
        assert!(JobStatus::from_code(SCHEDULED).is_err());
    }

    #[test]
    fn fail_outcomes_come_from_what_the_database_holds() {
        let at = Timestamp::default();
        let never = || -> Result<Timestamp> { panic!("the due time is not read for this result") };
        let no_reason = || -> Result<DeadReason> { panic!("the reason is not read for this result") };
        assert_eq!(fail_outcome("fail", 0, never, no_reason).unwrap(), Fenced::LeaseLost);
        assert_eq!(fail_outcome("fail", 1, || Ok(at), no_reason).unwrap(), Fenced::Done(FailOutcome::Retried { at }));
        assert_eq!(
            fail_outcome("fail", 2, || Ok(at), no_reason).unwrap(),
            Fenced::Done(FailOutcome::Snoozed { until: at })
        );
        // A repeated fail reports the reason stored with the dead letter, not the caller's.
        let stored = || DeadReason::parse("timed_out");
        assert_eq!(
            fail_outcome("fail", 3, never, stored).unwrap(),
            Fenced::Done(FailOutcome::DeadLettered(DeadReason::TimedOut))
        );
        assert!(fail_outcome("fail", 9, never, no_reason).is_err());
    }

    #[test]
    fn batch_outcomes_keep_input_order_and_split_every_id() {
        let a = LeaseRef { id: JobId::new(), lease: Lease(1) };
        let b = LeaseRef { id: JobId::new(), lease: Lease(2) };
        let c = LeaseRef { id: JobId::new(), lease: Lease(3) };
        let done: HashSet<JobId> = [c.id, a.id].into_iter().collect();
        let out = outcome(&[a, b, c], &done);
        assert_eq!(out.done, vec![a.id, c.id]);
        assert_eq!(out.lost, vec![b.id]);
    }
}

#[cfg(test)]
mod batch_rule_tests {
    use super::*;
    use chokaq_core::Lease;

    /// Each input id once, in one list: a duplicate id whose current lease wrote is done once,
    /// never also lost and never twice.
    #[test]
    fn a_duplicate_id_lands_in_one_list_once() {
        let a = JobId::new();
        let b = JobId::new();
        let leases = [
            LeaseRef { id: a, lease: Lease(1) },
            LeaseRef { id: a, lease: Lease(2) },
            LeaseRef { id: b, lease: Lease(3) },
        ];
        let done: HashSet<JobId> = [a].into_iter().collect();
        let out = outcome(&leases, &done);
        assert_eq!(out.done, vec![a]);
        assert_eq!(out.lost, vec![b]);
    }
}
