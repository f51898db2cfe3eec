//! `chokaq-sqlite`: the chokaq backend for SQLite, on sqlx's SQLite driver.
//!
//! How it stays correct: SQLite has a single writer per database file. Every write (a claim,
//! a completion, every move between tables) runs inside `BEGIN IMMEDIATE`, which takes the
//! write lock *before* reading, so the read and the write of one operation can never
//! interleave with another writer's, whether that writer is a task of this process or another
//! process on the same file. Inside one process, writes go through one pooled connection
//! (queued fairly by the pool); across processes, SQLite's `busy_timeout` waits for the lock
//! and a bounded retry of `BEGIN IMMEDIATE` (in [`SqliteBackend::begin_write`], the one place
//! that retries) absorbs longer waits. The database runs in WAL mode, so reads (stats,
//! listings) use their own connections and a consistent snapshot and never block writers.
//!
//! Consequences: `max_workers` caps are trivially strict (the active count is read inside
//! the claim's write transaction), leases come from a counter row incremented in the same
//! transaction, and moves are `INSERT ... SELECT` + `DELETE` inside one transaction.
//!
//! ```no_run
//! # async fn demo() -> chokaq_core::Result<()> {
//! use chokaq_core::Backend;
//! use chokaq_sqlite::{SqliteBackend, SqliteConfig};
//! let backend = SqliteBackend::connect(SqliteConfig::new("sqlite:///tmp/jobs.db")).await?;
//! backend.migrate().await?;
//! # Ok(()) }
//! ```

mod config;
mod error;
mod rows;
mod schema;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
#[cfg(feature = "testing")]
use chokaq_core::testing::{JobPatch, Presence, TestSupport};
use chokaq_core::{
    validate, Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimMode, ClaimParams, ClaimedJob, DeadReason,
    Enqueued, Error, ErrorKind, FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, JobStatus,
    JobTable, LeaseRef, ListJobsParams, NewJob, PurgeParams, PurgeTarget, QueueControl, QueueName, QueueSettings,
    QueueStats, RequeueOutcome, RescueParams, RescueReport, Result, RunAt, StatsSnapshot, TimestampPrecision, Wake,
    Wakeups, WorkerId, ZombiePolicy, MAX_ENQUEUE_BATCH,
};
use sqlx::sqlite::{SqliteConnection, SqlitePool, SqlitePoolOptions, SqliteRow};
use sqlx::{QueryBuilder, Row, Sqlite};
use tokio::sync::broadcast;

pub use config::SqliteConfig;
use error::{corrupt, map_err};
use rows::{dur_us, now_us, ts, ts_us, Src};
use schema::COLS;

/// How many times `BEGIN IMMEDIATE` is retried after SQLite reported BUSY/LOCKED (each try
/// already waited up to the busy timeout inside SQLite).
const BEGIN_RETRIES: u32 = 8;
/// Largest purge batch.
const MAX_PURGE_BATCH: u32 = 100_000;
/// Ids per `IN (...)` list (SQLite's default bound-parameter limit is 32,766).
const IN_CHUNK: usize = 500;

type Tx = sqlx::Transaction<'static, Sqlite>;

/// The SQLite backend. Cheap to clone; clones share the pools.
#[derive(Clone)]
pub struct SqliteBackend {
    writer: SqlitePool,
    reader: SqlitePool,
    max_payload_bytes: usize,
    wake: broadcast::Sender<Wake>,
    /// The database file (never printed).
    file: std::path::PathBuf,
}

impl fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("database", &"<redacted>")
            .field("max_payload_bytes", &self.max_payload_bytes)
            .finish_non_exhaustive()
    }
}

impl SqliteBackend {
    /// Opens (creating if missing) the database file in WAL mode with a busy timeout: one
    /// writer connection and a small pool of readers. Call [`Backend::migrate`] before use.
    pub async fn connect(cfg: SqliteConfig) -> Result<Self> {
        let opts = cfg.connect_options()?;
        let file = opts.get_filename().to_path_buf();
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(cfg.acquire_timeout)
            .connect_with(opts.clone())
            .await
            .map_err(map_err)?;
        let reader = SqlitePoolOptions::new()
            .max_connections(cfg.max_readers)
            .min_connections(0)
            .acquire_timeout(cfg.acquire_timeout)
            .connect_with(opts.pragma("query_only", "ON"))
            .await
            .map_err(map_err)?;
        let (wake, _) = broadcast::channel(1024);
        Ok(SqliteBackend { writer, reader, max_payload_bytes: cfg.max_payload_bytes, wake, file })
    }

    /// Closes the pools (waits for connections in use to come back).
    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }

    /// Starts a write transaction with `BEGIN IMMEDIATE` (the write lock is taken first).
    /// The one place where SQLITE_BUSY/LOCKED is retried, with bounded, jittered back-off.
    async fn begin_write(&self) -> Result<Tx> {
        let mut delay = Duration::from_millis(5);
        let mut tries = 0;
        loop {
            match self.writer.begin_with("BEGIN IMMEDIATE").await {
                Ok(tx) => return Ok(tx),
                Err(e) => {
                    let err = map_err(e);
                    if err.kind() != ErrorKind::Transient || tries >= BEGIN_RETRIES {
                        return Err(err);
                    }
                    tries += 1;
                    let jitter = Duration::from_micros(rand::random::<u64>() % 5_000);
                    tokio::time::sleep(delay + jitter).await;
                    delay = (delay * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    /// Starts a read transaction (a consistent WAL snapshot from its first read).
    async fn begin_read(&self) -> Result<Tx> {
        self.reader.begin().await.map_err(map_err)
    }

    /// Whether any of `queues` may have a claimable job, judged from a read snapshot.
    async fn may_have_work(&self, queues: &[&QueueName]) -> Result<bool> {
        let mut tx = self.begin_read().await?;
        let now = now_us();
        let mut found = false;
        for q in queues {
            let s = read_settings(&mut tx, q).await?;
            if s.is_paused || !s.is_active || s.max_workers == Some(0) {
                continue;
            }
            if let Some(max) = s.max_workers {
                let active: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM jobs_hot WHERE queue = ?1 AND status IN (1, 2)")
                        .bind(q.as_str())
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(map_err)?;
                if active >= i64::from(max) {
                    continue;
                }
            }
            let due: Option<i64> = sqlx::query_scalar(
                "SELECT 1 FROM jobs_hot WHERE queue = ?1 AND status = 0 \
                 AND coalesce(scheduled_at, created_at) <= ?2 LIMIT 1",
            )
            .bind(q.as_str())
            .bind(now)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
            if due.is_some() {
                found = true;
                break;
            }
        }
        tx.rollback().await.map_err(map_err)?;
        Ok(found)
    }

    fn notify(&self, queues: impl IntoIterator<Item = String>) {
        let mut seen = HashSet::new();
        for q in queues {
            if seen.insert(q.clone()) {
                // No receiver is fine: nobody is waiting.
                let _ = self.wake.send(Wake::Queue(q));
            }
        }
    }
}

async fn commit(tx: Tx) -> Result<()> {
    tx.commit().await.map_err(map_err)
}

/// Error text as stored: NUL replaced (databases cannot store it in text), truncated.
fn clean_error(s: &str) -> String {
    let s = s.replace('\0', "\u{fffd}");
    validate::truncate(&s, validate::MAX_ERROR_LEN).to_string()
}

/// Moves one hot row to the dead-letter table (caller checked it exists).
async fn dead_letter(
    conn: &mut SqliteConnection,
    now: i64,
    id: JobId,
    reason: DeadReason,
    error: Option<&str>,
) -> Result<bool> {
    let moved = sqlx::query(&schema::DEAD_LETTER)
        .bind(now)
        .bind(id.0)
        .bind(reason.as_str())
        .bind(error.map(clean_error))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?
        .rows_affected();
    if moved == 0 {
        return Ok(false);
    }
    sqlx::query("DELETE FROM jobs_hot WHERE id = ?1").bind(id.0).execute(&mut *conn).await.map_err(map_err)?;
    Ok(true)
}

/// A queue's control row, or the defaults.
async fn read_settings(conn: &mut SqliteConnection, queue: &QueueName) -> Result<QueueSettings> {
    let row = sqlx::query(
        "SELECT max_workers, is_paused, is_active, zombie_timeout_us, zombie_policy, updated_at FROM queues \
         WHERE name = ?1",
    )
    .bind(queue.as_str())
    .fetch_optional(&mut *conn)
    .await
    .map_err(map_err)?;
    let Some(row) = row else { return Ok(QueueSettings::default_for(queue.clone())) };
    let max_workers: Option<i64> = row.try_get("max_workers").map_err(map_err)?;
    let zombie_us: Option<i64> = row.try_get("zombie_timeout_us").map_err(map_err)?;
    let policy: String = row.try_get("zombie_policy").map_err(map_err)?;
    Ok(QueueSettings {
        name: queue.clone(),
        max_workers: max_workers.map(|m| u32::try_from(m).map_err(|_| corrupt("max_workers"))).transpose()?,
        is_paused: row.try_get::<i64, _>("is_paused").map_err(map_err)? != 0,
        is_active: row.try_get::<i64, _>("is_active").map_err(map_err)? != 0,
        zombie_timeout: zombie_us
            .map(|us| u64::try_from(us).map(Duration::from_micros).map_err(|_| corrupt("zombie_timeout")))
            .transpose()?,
        zombie_policy: parse_policy(&policy)?,
        updated_at: Some(ts(row.try_get("updated_at").map_err(map_err)?)?),
    })
}

fn policy_str(p: ZombiePolicy) -> &'static str {
    match p {
        ZombiePolicy::Retry => "retry",
        ZombiePolicy::DeadLetter => "dead_letter",
    }
}

fn parse_policy(s: &str) -> Result<ZombiePolicy> {
    match s {
        "retry" => Ok(ZombiePolicy::Retry),
        "dead_letter" => Ok(ZombiePolicy::DeadLetter),
        other => Err(corrupt(format!("zombie_policy {other:?}"))),
    }
}

/// A claim candidate: enough to merge per-queue lists into the global order.
struct Candidate {
    id: uuid::Uuid,
    priority: i64,
    due: i64,
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::minimal(TimestampPrecision::Microsecond).with_kill_connections(false).with_multi_process(true)
    }

    async fn migrate(&self) -> Result<()> {
        let mut tx = self.begin_write().await?;
        for ddl in schema::MIGRATIONS.iter() {
            sqlx::query(ddl).execute(&mut *tx).await.map_err(map_err)?;
        }
        let newest: Option<i64> =
            sqlx::query_scalar("SELECT max(version) FROM versions").fetch_one(&mut *tx).await.map_err(map_err)?;
        if newest.is_some_and(|v| v > schema::SCHEMA_VERSION) {
            return Err(Error::new(
                ErrorKind::Other,
                format!(
                    "sqlite: the database schema is version {}, newer than this library's {}",
                    newest.unwrap_or_default(),
                    schema::SCHEMA_VERSION
                ),
            ));
        }
        sqlx::query("INSERT INTO versions (version, applied_at) VALUES (?1, ?2) ON CONFLICT (version) DO NOTHING")
            .bind(schema::SCHEMA_VERSION)
            .bind(now_us())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        commit(tx).await
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        if jobs.len() > MAX_ENQUEUE_BATCH {
            return Err(Error::invalid(format!(
                "enqueue_many takes at most {MAX_ENQUEUE_BATCH} jobs, got {}",
                jobs.len()
            )));
        }
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
            job.validate(self.max_payload_bytes)?;
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
        let mut tx = self.begin_write().await?;
        let now = now_us();
        let mut out = Vec::with_capacity(jobs.len());
        for (job, p) in jobs.iter().zip(&prepared) {
            if let Some(key) = &job.idempotency_key {
                let existing: Option<uuid::Uuid> =
                    sqlx::query_scalar("SELECT id FROM jobs_hot WHERE idempotency_key = ?1")
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
            sqlx::query(
                "INSERT INTO jobs_hot (id, queue, kind, payload, tags, idempotency_key, priority, status, attempt, \
                 max_attempts, scheduled_at, created_at, updated_at, created_by) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, 0, ?8, ?9, ?10, ?10, ?11)",
            )
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
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
            out.push(Enqueued { id, duplicate: false });
        }
        commit(tx).await?;
        self.notify(jobs.iter().map(|j| j.queue.as_str().to_string()));
        Ok(out)
    }

    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        req.validate()?;
        let mut queues: Vec<&QueueName> = req.queues.iter().collect();
        queues.sort();
        queues.dedup();
        let limit = i64::from(req.limit);
        let start = req.mode == ClaimMode::Start;

        // Idle pollers should not queue for the write lock: look first in a read snapshot.
        // A stale "nothing to do" only delays the next poll; the decision that matters
        // (which rows, under which cap) is taken again under the write lock below.
        if !self.may_have_work(&queues).await? {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_write().await?;
        let now = now_us();
        let mut candidates: Vec<Candidate> = Vec::new();
        for q in queues {
            let settings = read_settings(&mut tx, q).await?;
            if settings.is_paused || !settings.is_active {
                continue;
            }
            // Strict cap: the active count is read under the write lock, so no other claimer
            // can change it before this transaction commits. Uncapped queues skip the count.
            let take = match settings.max_workers {
                None => limit,
                Some(max) => {
                    let active: i64 =
                        sqlx::query_scalar("SELECT count(*) FROM jobs_hot WHERE queue = ?1 AND status IN (1, 2)")
                            .bind(q.as_str())
                            .fetch_one(&mut *tx)
                            .await
                            .map_err(map_err)?;
                    (i64::from(max) - active).clamp(0, limit)
                }
            };
            if take == 0 {
                continue;
            }
            let rows = sqlx::query(
                "SELECT id, priority, coalesce(scheduled_at, created_at) AS due FROM jobs_hot \
                 WHERE queue = ?1 AND status = 0 AND coalesce(scheduled_at, created_at) <= ?2 \
                 ORDER BY priority DESC, coalesce(scheduled_at, created_at) ASC, id ASC LIMIT ?3",
            )
            .bind(q.as_str())
            .bind(now)
            .bind(take)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
            for r in rows {
                candidates.push(Candidate {
                    id: r.try_get("id").map_err(map_err)?,
                    priority: r.try_get("priority").map_err(map_err)?,
                    due: r.try_get("due").map_err(map_err)?,
                });
            }
        }
        candidates.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.due.cmp(&b.due)).then(a.id.cmp(&b.id)));
        candidates.truncate(req.limit as usize);
        if candidates.is_empty() {
            tx.rollback().await.map_err(map_err)?;
            return Ok(Vec::new());
        }
        let count = i64::try_from(candidates.len()).map_err(|_| corrupt("claim size"))?;
        let top: i64 =
            sqlx::query_scalar("UPDATE counters SET value = value + ?1 WHERE name = 'lease' RETURNING value")
                .bind(count)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
        let first = top - count + 1;
        let sql = format!(
            "UPDATE jobs_hot SET status = ?1, worker_id = ?2, lease = ?3, updated_at = ?4, \
             attempt = attempt + ?5, \
             started_at = CASE WHEN ?5 = 1 THEN ?4 ELSE started_at END, \
             heartbeat_at = CASE WHEN ?5 = 1 THEN ?4 ELSE heartbeat_at END \
             WHERE id = ?6 AND status = 0 RETURNING {COLS}"
        );
        let status = if start { JobStatus::Processing } else { JobStatus::Fetched };
        let mut out = Vec::with_capacity(candidates.len());
        for (i, c) in candidates.iter().enumerate() {
            let row: SqliteRow = sqlx::query(&sql)
                .bind(i64::from(status.code()))
                .bind(req.worker.0)
                .bind(first + i as i64)
                .bind(now)
                .bind(i64::from(start))
                .bind(c.id)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
            out.push(rows::claimed(&row)?);
        }
        commit(tx).await?;
        Ok(out)
    }

    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let mut out = BatchOutcome::default();
        if leases.is_empty() {
            return Ok(out);
        }
        let mut tx = self.begin_write().await?;
        let now = now_us();
        for l in leases {
            let n = sqlx::query(
                "UPDATE jobs_hot SET status = 2, attempt = attempt + 1, started_at = ?1, heartbeat_at = ?1, \
                 updated_at = ?1 WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status = 1",
            )
            .bind(now)
            .bind(l.id.0)
            .bind(l.lease.0)
            .bind(worker.0)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
            if n == 1 {
                out.done.push(l.id)
            } else {
                out.lost.push(l.id)
            }
        }
        commit(tx).await?;
        Ok(out)
    }

    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        let mut out = HeartbeatReport::default();
        if leases.is_empty() {
            return Ok(out);
        }
        let mut tx = self.begin_write().await?;
        let now = now_us();
        for l in leases {
            let cancel: Option<i64> = sqlx::query_scalar(
                "UPDATE jobs_hot SET heartbeat_at = ?1, updated_at = ?1 \
                 WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status = 2 RETURNING cancel_requested",
            )
            .bind(now)
            .bind(l.id.0)
            .bind(l.lease.0)
            .bind(worker.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
            match cancel {
                Some(c) => {
                    out.held.push(l.id);
                    if c != 0 {
                        out.cancel_requested.push(l.id);
                    }
                }
                None => out.lost.push(l.id),
            }
        }
        commit(tx).await?;
        Ok(out)
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let mut out = BatchOutcome::default();
        if leases.is_empty() {
            return Ok(out);
        }
        let mut tx = self.begin_write().await?;
        let now = now_us();
        for l in leases {
            let n = sqlx::query(&schema::ARCHIVE_HELD)
                .bind(now)
                .bind(l.id.0)
                .bind(l.lease.0)
                .bind(worker.0)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?
                .rows_affected();
            if n == 1 {
                sqlx::query("DELETE FROM jobs_hot WHERE id = ?1")
                    .bind(l.id.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                out.done.push(l.id);
            } else {
                out.lost.push(l.id);
            }
        }
        commit(tx).await?;
        Ok(out)
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        // Validate before the transaction: bad input changes nothing.
        let delay_us = match &outcome {
            FailAction::Retry { delay, .. } | FailAction::Snooze { delay } => dur_us("delay", *delay)?,
            _ => 0,
        };
        let mut tx = self.begin_write().await?;
        let now = now_us();
        let held = sqlx::query(
            "SELECT attempt, max_attempts FROM jobs_hot WHERE id = ?1 AND lease = ?2 AND worker_id = ?3 AND status = 2",
        )
        .bind(lease.id.0)
        .bind(lease.lease.0)
        .bind(worker.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
        let Some(held) = held else {
            tx.rollback().await.map_err(map_err)?;
            return Ok(Fenced::LeaseLost);
        };
        let attempt: i64 = held.try_get("attempt").map_err(map_err)?;
        let max_attempts: i64 = held.try_get("max_attempts").map_err(map_err)?;
        let back_to_pending = "UPDATE jobs_hot SET status = 0, worker_id = NULL, scheduled_at = ?1, updated_at = ?2, \
             heartbeat_at = NULL, cancel_requested = 0, last_error = coalesce(?3, last_error), \
             attempt = max(attempt - ?4, 0) WHERE id = ?5";
        let result = match outcome {
            FailAction::Retry { error, .. } if attempt < max_attempts => {
                let at = now + delay_us;
                sqlx::query(back_to_pending)
                    .bind(at)
                    .bind(now)
                    .bind(Some(clean_error(&error)))
                    .bind(0_i64)
                    .bind(lease.id.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                FailOutcome::Retried { at: ts(at)? }
            }
            FailAction::Retry { error, .. } => {
                dead_letter(&mut tx, now, lease.id, DeadReason::Failed, Some(&error)).await?;
                FailOutcome::DeadLettered(DeadReason::Failed)
            }
            FailAction::DeadLetter { reason, error } => {
                dead_letter(&mut tx, now, lease.id, reason, Some(&error)).await?;
                FailOutcome::DeadLettered(reason)
            }
            FailAction::Cancelled { error } => {
                dead_letter(&mut tx, now, lease.id, DeadReason::Cancelled, error.as_deref()).await?;
                FailOutcome::DeadLettered(DeadReason::Cancelled)
            }
            FailAction::Snooze { .. } => {
                let until = now + delay_us;
                sqlx::query(back_to_pending)
                    .bind(until)
                    .bind(now)
                    .bind(None::<String>)
                    .bind(1_i64)
                    .bind(lease.id.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                FailOutcome::Snoozed { until: ts(until)? }
            }
        };
        commit(tx).await?;
        Ok(Fenced::Done(result))
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let mut out = BatchOutcome::default();
        if leases.is_empty() {
            return Ok(out);
        }
        let mut tx = self.begin_write().await?;
        let now = now_us();
        let mut queues = Vec::new();
        for l in leases {
            let q: Option<String> = sqlx::query_scalar(
                "UPDATE jobs_hot SET status = 0, worker_id = NULL, updated_at = ?1 \
                 WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status = 1 RETURNING queue",
            )
            .bind(now)
            .bind(l.id.0)
            .bind(l.lease.0)
            .bind(worker.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
            match q {
                Some(q) => {
                    out.done.push(l.id);
                    queues.push(q);
                }
                None => out.lost.push(l.id),
            }
        }
        commit(tx).await?;
        self.notify(queues);
        Ok(out)
    }

    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        if params.limit == 0 {
            return Err(Error::invalid("rescue limit must be at least 1"));
        }
        let fetched_us = dur_us("fetched_timeout", params.fetched_timeout)?;
        let zombie_us = dur_us("default_zombie_timeout", params.default_zombie_timeout)?;
        // The whole rescue is one BEGIN IMMEDIATE transaction: SQLite's write lock is the
        // maintenance lock, so two instances never rescue the same job; the second one finds
        // nothing left to do.
        let mut tx = self.begin_write().await?;
        let now = now_us();
        let mut report = RescueReport { ran: true, ..RescueReport::default() };
        let limit = i64::from(params.limit);
        let released = sqlx::query(
            "UPDATE jobs_hot SET status = 0, worker_id = NULL, updated_at = ?1 WHERE id IN \
             (SELECT id FROM jobs_hot WHERE status = 1 AND updated_at < ?2 ORDER BY updated_at, id LIMIT ?3) \
             RETURNING queue",
        )
        .bind(now)
        .bind(now - fetched_us)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        report.fetched_released = released.len() as u64;
        let mut queues: Vec<String> = Vec::new();
        for r in &released {
            queues.push(r.try_get("queue").map_err(map_err)?);
        }
        let left = limit - released.len() as i64;
        if left > 0 {
            let zombies = sqlx::query(
                "SELECT h.id, h.queue, h.attempt, h.max_attempts, coalesce(q.zombie_policy, 'retry') AS policy \
                 FROM jobs_hot h LEFT JOIN queues q ON q.name = h.queue \
                 WHERE h.status = 2 \
                   AND coalesce(h.heartbeat_at, h.started_at, h.updated_at) < ?1 - coalesce(q.zombie_timeout_us, ?2) \
                 ORDER BY h.id LIMIT ?3",
            )
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
                if policy == ZombiePolicy::Retry && attempt < max_attempts {
                    sqlx::query(
                        "UPDATE jobs_hot SET status = 0, worker_id = NULL, heartbeat_at = NULL, cancel_requested = 0, \
                         updated_at = ?1 WHERE id = ?2",
                    )
                    .bind(now)
                    .bind(id.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                    report.zombies_retried += 1;
                    queues.push(z.try_get("queue").map_err(map_err)?);
                } else {
                    dead_letter(&mut tx, now, id, DeadReason::Zombie, Some("heartbeat expired (zombie)")).await?;
                    report.zombies_dead += 1;
                }
            }
        }
        commit(tx).await?;
        self.notify(queues);
        Ok(report)
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        let mut tx = self.begin_write().await?;
        let now = now_us();
        let status: Option<i64> = sqlx::query_scalar("SELECT status FROM jobs_hot WHERE id = ?1")
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        let out = match status {
            None => CancelOutcome::NotLive,
            Some(0 | 1) => {
                dead_letter(&mut tx, now, id, DeadReason::Cancelled, None).await?;
                CancelOutcome::Cancelled
            }
            Some(_) => {
                sqlx::query("UPDATE jobs_hot SET cancel_requested = 1, updated_at = ?1 WHERE id = ?2")
                    .bind(now)
                    .bind(id.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                CancelOutcome::Requested
            }
        };
        commit(tx).await?;
        Ok(out)
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        validate::queue_name(queue.as_str())?;
        let (column, value): (&str, Option<i64>) = match control {
            QueueControl::Pause => ("is_paused", Some(1)),
            QueueControl::Resume => ("is_paused", Some(0)),
            QueueControl::Activate => ("is_active", Some(1)),
            QueueControl::Deactivate => ("is_active", Some(0)),
            QueueControl::SetMaxWorkers(m) => ("max_workers", m.map(i64::from)),
            QueueControl::SetZombieTimeout(d) => {
                ("zombie_timeout_us", d.map(|d| dur_us("zombie_timeout", d)).transpose()?)
            }
            QueueControl::SetZombiePolicy(_) => ("zombie_policy", None),
        };
        let mut tx = self.begin_write().await?;
        let now = now_us();
        sqlx::query(
            "INSERT INTO queues (name, created_at, updated_at) VALUES (?1, ?2, ?2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(queue.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        // `column` is one of the fixed names above, never input.
        let sql = format!("UPDATE queues SET {column} = ?1, updated_at = ?2 WHERE name = ?3");
        let q = match control {
            QueueControl::SetZombiePolicy(p) => sqlx::query(&sql).bind(policy_str(p)),
            _ => sqlx::query(&sql).bind(value),
        };
        q.bind(now).bind(queue.as_str()).execute(&mut *tx).await.map_err(map_err)?;
        let settings = read_settings(&mut tx, queue).await?;
        commit(tx).await?;
        if matches!(control, QueueControl::Resume | QueueControl::Activate | QueueControl::SetMaxWorkers(_)) {
            self.notify([queue.as_str().to_string()]);
        }
        Ok(settings)
    }

    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        validate::queue_name(queue.as_str())?;
        let mut conn = self.reader.acquire().await.map_err(map_err)?;
        read_settings(&mut conn, queue).await
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        let mut tx = self.begin_write().await?;
        let now = now_us();
        let row = sqlx::query("SELECT idempotency_key, queue FROM jobs_dlq WHERE id = ?1")
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        let Some(row) = row else {
            tx.rollback().await.map_err(map_err)?;
            return Ok(RequeueOutcome::NotFound);
        };
        let key: Option<String> = row.try_get("idempotency_key").map_err(map_err)?;
        let queue: String = row.try_get("queue").map_err(map_err)?;
        if let Some(key) = key {
            let taken: Option<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM jobs_hot WHERE idempotency_key = ?1")
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
        sqlx::query(&schema::REQUEUE).bind(now).bind(id.0).execute(&mut *tx).await.map_err(map_err)?;
        sqlx::query("DELETE FROM jobs_dlq WHERE id = ?1").bind(id.0).execute(&mut *tx).await.map_err(map_err)?;
        commit(tx).await?;
        self.notify([queue]);
        Ok(RequeueOutcome::Requeued)
    }

    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        if req.batch_size == 0 || req.batch_size > MAX_PURGE_BATCH {
            return Err(Error::invalid(format!(
                "purge batch_size must be 1 to {MAX_PURGE_BATCH}, got {}",
                req.batch_size
            )));
        }
        if req.max_batches == 0 {
            return Err(Error::invalid("purge max_batches must be at least 1"));
        }
        if req.target == PurgeTarget::Archive && req.reason.is_some() {
            return Err(Error::invalid("purge reason applies to the dead-letter table only"));
        }
        let older_us = dur_us("older_than", req.older_than)?;
        let table = match req.target {
            PurgeTarget::Archive => "jobs_archive",
            PurgeTarget::DeadLetter => "jobs_dlq",
        };
        let reason_filter = if req.target == PurgeTarget::DeadLetter { "AND (?5 IS NULL OR reason = ?5)" } else { "" };
        let sql = format!(
            "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE finished_at < ?1 \
             AND (?2 IS NULL OR queue = ?2) AND (?3 IS NULL OR kind = ?3) {reason_filter} \
             ORDER BY finished_at LIMIT ?4)"
        );
        let mut total = 0u64;
        for _ in 0..req.max_batches {
            // Each batch is its own short write transaction, so claims interleave.
            let mut tx = self.begin_write().await?;
            let cutoff = now_us() - older_us;
            let mut q = sqlx::query(&sql)
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

    async fn stats(&self) -> Result<StatsSnapshot> {
        let mut tx = self.begin_read().await?;
        let now = now_us();
        let mut per: HashMap<String, QueueStats> = HashMap::new();
        let mut snap = StatsSnapshot { taken_at: Some(ts(now)?), ..StatsSnapshot::default() };
        let hot = sqlx::query("SELECT queue, status, count(*) AS n FROM jobs_hot GROUP BY queue, status")
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        for r in hot {
            let queue: String = r.try_get("queue").map_err(map_err)?;
            let status: i64 = r.try_get("status").map_err(map_err)?;
            let n = u64::try_from(r.try_get::<i64, _>("n").map_err(map_err)?).unwrap_or(0);
            let qs = per.entry(queue.clone()).or_insert_with(|| QueueStats { queue, ..QueueStats::default() });
            match status {
                0 => {
                    qs.pending += n;
                    snap.pending += n;
                }
                1 => {
                    qs.fetched += n;
                    snap.fetched += n;
                }
                2 => {
                    qs.processing += n;
                    snap.processing += n;
                }
                other => return Err(corrupt(format!("status {other}"))),
            }
        }
        let lag = sqlx::query(
            "SELECT queue, min(coalesce(scheduled_at, created_at)) AS due FROM jobs_hot \
             WHERE status = 0 AND coalesce(scheduled_at, created_at) <= ?1 GROUP BY queue",
        )
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
        for r in lag {
            let queue: String = r.try_get("queue").map_err(map_err)?;
            let due: i64 = r.try_get("due").map_err(map_err)?;
            let qs = per.entry(queue.clone()).or_insert_with(|| QueueStats { queue, ..QueueStats::default() });
            qs.oldest_due_at = Some(ts(due)?);
        }
        for (table, archived) in [("jobs_archive", true), ("jobs_dlq", false)] {
            let rows = sqlx::query(&format!("SELECT queue, count(*) AS n FROM {table} GROUP BY queue"))
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?;
            for r in rows {
                let queue: String = r.try_get("queue").map_err(map_err)?;
                let n = u64::try_from(r.try_get::<i64, _>("n").map_err(map_err)?).unwrap_or(0);
                let qs = per.entry(queue.clone()).or_insert_with(|| QueueStats { queue, ..QueueStats::default() });
                if archived {
                    qs.archived += n;
                    snap.archived += n;
                } else {
                    qs.dead += n;
                    snap.dead += n;
                }
            }
        }
        tx.rollback().await.map_err(map_err)?;
        let mut queues: Vec<QueueStats> = per.into_values().collect();
        queues.sort_by(|a, b| a.queue.cmp(&b.queue));
        snap.queues = queues;
        Ok(snap)
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        let mut tx = self.begin_read().await?;
        let mut found = None;
        for (table, src) in [("jobs_hot", Src::Hot), ("jobs_archive", Src::Archive), ("jobs_dlq", Src::Dead)] {
            let sql = format!("{} WHERE id = ?1", schema::select_record(table));
            let row = sqlx::query(&sql).bind(id.0).fetch_optional(&mut *tx).await.map_err(map_err)?;
            if let Some(row) = row {
                found = Some(rows::record(&row, src)?);
                break;
            }
        }
        tx.rollback().await.map_err(map_err)?;
        Ok(found)
    }

    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        if filter.limit == 0 || filter.limit > 1000 {
            return Err(Error::invalid(format!("list limit must be 1 to 1000, got {}", filter.limit)));
        }
        if filter.status.is_some() && filter.table != JobTable::Hot {
            return Err(Error::invalid("a status filter applies to the hot table only"));
        }
        if let Some(tag) = &filter.tag {
            validate::text_field("tag", tag, validate::MAX_TAG_LEN)?;
        }
        let from = filter.created_from.map(|t| ts_us("created_from", t)).transpose()?;
        let to = filter.created_to.map(|t| ts_us("created_to", t)).transpose()?;
        let (table, src) = match filter.table {
            JobTable::Hot => ("jobs_hot", Src::Hot),
            JobTable::Archive => ("jobs_archive", Src::Archive),
            JobTable::DeadLetter => ("jobs_dlq", Src::Dead),
        };
        let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new(schema::select_record(table));
        qb.push(" WHERE 1 = 1");
        if let Some(q) = &filter.queue {
            qb.push(" AND queue = ").push_bind(q.as_str().to_string());
        }
        if let Some(s) = filter.status {
            qb.push(" AND status = ").push_bind(i64::from(s.code()));
        }
        if let Some(k) = &filter.kind {
            qb.push(" AND kind = ").push_bind(k.as_str().to_string());
        }
        if let Some(tag) = &filter.tag {
            qb.push(" AND EXISTS (SELECT 1 FROM json_each(tags) WHERE json_each.value = ")
                .push_bind(tag.clone())
                .push(")");
        }
        if let Some(from) = from {
            qb.push(" AND created_at >= ").push_bind(from);
        }
        if let Some(to) = to {
            qb.push(" AND created_at < ").push_bind(to);
        }
        if let Some(after) = filter.after {
            qb.push(" AND id > ").push_bind(after.0);
        }
        qb.push(" ORDER BY id LIMIT ").push_bind(i64::from(filter.limit) + 1);
        let mut conn = self.reader.acquire().await.map_err(map_err)?;
        let rows = qb.build().fetch_all(&mut *conn).await.map_err(map_err)?;
        let mut jobs = rows.iter().map(|r| rows::record(r, src)).collect::<Result<Vec<_>>>()?;
        let next = if jobs.len() > filter.limit as usize {
            jobs.truncate(filter.limit as usize);
            jobs.last().map(|j| j.id)
        } else {
            None
        };
        Ok(JobPage { jobs, next })
    }

    /// In-process wake-ups: fed by this process's own enqueues, releases and rescues (other
    /// processes on the same file are not heard; poll for those).
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        Ok(Some(Wakeups::new(self.wake.subscribe())))
    }
}

#[cfg(feature = "testing")]
#[async_trait]
impl TestSupport for SqliteBackend {
    async fn db_now(&self) -> Result<chokaq_core::Timestamp> {
        ts(now_us())
    }

    async fn force(&self, id: JobId, patch: &JobPatch) -> Result<bool> {
        let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new("UPDATE jobs_hot SET id = id");
        if let Some(s) = patch.status {
            qb.push(", status = ").push_bind(i64::from(s.code()));
        }
        if let Some(a) = patch.attempt {
            qb.push(", attempt = ").push_bind(i64::from(a));
        }
        if let Some(t) = patch.scheduled_at {
            qb.push(", scheduled_at = ").push_bind(t.map(|t| t.timestamp_micros()));
        }
        if let Some(t) = patch.heartbeat_at {
            qb.push(", heartbeat_at = ").push_bind(t.map(|t| t.timestamp_micros()));
        }
        if let Some(t) = patch.updated_at {
            qb.push(", updated_at = ").push_bind(t.timestamp_micros());
        }
        if let Some(t) = patch.created_at {
            qb.push(", created_at = ").push_bind(t.timestamp_micros());
        }
        qb.push(" WHERE id = ").push_bind(id.0);
        let mut tx = self.begin_write().await?;
        let n = qb.build().execute(&mut *tx).await.map_err(map_err)?.rows_affected();
        commit(tx).await?;
        Ok(n == 1)
    }

    async fn presence(&self, id: JobId) -> Result<Presence> {
        Ok(self.presence_many(&[id]).await?.pop().map(|(_, p)| p).unwrap_or_default())
    }

    async fn presence_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, Presence)>> {
        let mut map: HashMap<JobId, Presence> = ids.iter().map(|id| (*id, Presence::default())).collect();
        let mut tx = self.begin_read().await?;
        for chunk in ids.chunks(IN_CHUNK) {
            for table in ["jobs_hot", "jobs_archive", "jobs_dlq"] {
                let mut qb: QueryBuilder<Sqlite> =
                    QueryBuilder::new(format!("SELECT id, count(*) AS n FROM {table} WHERE id IN ("));
                let mut sep = qb.separated(", ");
                for id in chunk {
                    sep.push_bind(id.0);
                }
                qb.push(") GROUP BY id");
                let rows = qb.build().fetch_all(&mut *tx).await.map_err(map_err)?;
                for r in rows {
                    let id = JobId(r.try_get("id").map_err(map_err)?);
                    let n = u32::try_from(r.try_get::<i64, _>("n").map_err(map_err)?).unwrap_or(u32::MAX);
                    if let Some(p) = map.get_mut(&id) {
                        match table {
                            "jobs_hot" => p.hot = n,
                            "jobs_archive" => p.archive = n,
                            _ => p.dead = n,
                        }
                    }
                }
            }
        }
        tx.rollback().await.map_err(map_err)?;
        Ok(ids.iter().map(|id| (*id, map.get(id).copied().unwrap_or_default())).collect())
    }

    /// Drops this backend's tables. SQLite has no schemas, the database file is the schema:
    /// when the file then holds nothing else, the pools are closed and the file (with its
    /// `-wal` and `-shm` companions) is removed, so this backend is unusable afterwards. A
    /// file that holds other tables is kept.
    async fn drop_schema(&self) -> Result<()> {
        let mut tx = self.begin_write().await?;
        for table in schema::TABLES {
            sqlx::query(&format!("DROP TABLE IF EXISTS {table}")).execute(&mut *tx).await.map_err(map_err)?;
        }
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM sqlite_schema").fetch_one(&mut *tx).await.map_err(map_err)?;
        commit(tx).await?;
        if left == 0 {
            self.close().await;
            for suffix in ["", "-wal", "-shm"] {
                let mut p = self.file.clone().into_os_string();
                p.push(suffix);
                match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(Error::with_source(
                            ErrorKind::Other,
                            "sqlite: could not remove the dropped database file",
                            e,
                        ))
                    }
                }
            }
        }
        Ok(())
    }
}
