//! `MssqlBackend`: the `chokaq_core::Backend` and `TestSupport` implementation. All SQL comes
//! from [`crate::sql`]; this file binds values, runs batches and decodes rows.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chokaq_core::chrono::{DateTime, NaiveDateTime, Utc};
#[cfg(feature = "testing")]
use chokaq_core::testing::{JobPatch, Presence, TestSupport};
use chokaq_core::uuid::Uuid;
use chokaq_core::{
    validate, Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimMode, ClaimParams, ClaimedJob, DeadReason,
    Enqueued, Error, ErrorKind, FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobKind, JobLocation, JobPage,
    JobRecord, JobStatus, JobTable, Lease, LeaseRef, ListJobsParams, NewJob, PurgeParams, PurgeTarget, QueueControl,
    QueueName, QueueSettings, RequeueOutcome, RescueParams, RescueReport, Result, RunAt, StatsSnapshot, Timestamp,
    TimestampPrecision, WorkerId, ZombiePolicy, MAX_ENQUEUE_BATCH,
};
use tiberius::{Row, ToSql};

use crate::config::MssqlConfig;
use crate::error::{decode, map_error, timeout};
use crate::pool::{ConnectError, Manager};
use crate::sql::Statements;

/// Transient failures (deadlock victim, lock timeout, snapshot conflict) are retried this
/// many times with a short randomised back-off; every batch is atomic, so a retry is safe.
const MAX_TRANSIENT_RETRIES: u32 = 4;

/// The largest JSON document one `enqueue_many` sends (an `NVARCHAR(MAX)` parameter holds
/// 2 GB; tiberius sends at most 1 GiB of text as `nvarchar(max)`).
const MAX_BATCH_DOCUMENT_BYTES: usize = 512 * 1024 * 1024;

/// The SQL Server backend. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct MssqlBackend {
    inner: Arc<Inner>,
}

struct Inner {
    pool: bb8::Pool<Manager>,
    cfg: MssqlConfig,
    sql: Statements,
    app_name: String,
}

impl fmt::Debug for MssqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // MssqlConfig's Debug redacts the password.
        f.debug_struct("MssqlBackend")
            .field("config", &self.inner.cfg)
            .field("app_name", &self.inner.app_name)
            .finish_non_exhaustive()
    }
}

fn connect_error(e: ConnectError) -> Error {
    match e {
        ConnectError::Timeout(d) => {
            Error::new(ErrorKind::Unavailable, format!("connect: SQL Server did not answer within {d:?}"))
        }
        ConnectError::Driver(e) => {
            // Server errors during login keep their number's kind (18456 login failed is
            // `Other`); every other failure to open a connection means the server is not
            // reachable as configured.
            let from_server = e.code().is_some();
            let err = map_error("connect", e);
            if from_server || err.kind() == ErrorKind::Unavailable {
                err
            } else {
                Error::new(ErrorKind::Unavailable, err.message().to_string())
            }
        }
    }
}

fn pool_error(e: bb8::RunError<ConnectError>) -> Error {
    match e {
        bb8::RunError::User(e) => connect_error(e),
        bb8::RunError::TimedOut => {
            Error::new(ErrorKind::Unavailable, "timed out waiting for a pooled SQL Server connection")
        }
    }
}

impl MssqlBackend {
    /// Connects (one connection is opened and checked at once, so a wrong address fails here
    /// with [`ErrorKind::Unavailable`] within the connect timeout) and builds the pool. Does
    /// not migrate: call [`Backend::migrate`].
    pub async fn connect(cfg: MssqlConfig) -> Result<MssqlBackend> {
        validate::schema_name(&cfg.schema)?;
        let app_name = format!("chokaq-{}", Uuid::new_v4().simple());
        let manager = Manager::new(cfg.parts.clone(), app_name.clone(), cfg.connect_timeout);
        let first = bb8::ManageConnection::connect(&manager).await.map_err(connect_error)?;
        let pool = bb8::Pool::builder()
            .max_size(cfg.max_connections)
            .connection_timeout((cfg.connect_timeout + Duration::from_secs(5)).max(Duration::from_secs(30)))
            .test_on_check_out(false)
            .retry_connection(false)
            .build_unchecked(manager);
        let _ = pool.add(first);
        let sql = Statements::new(&cfg.schema);
        tracing::debug!(target: "chokaq_mssql", server = %cfg, "connected");
        Ok(MssqlBackend { inner: Arc::new(Inner { pool, cfg, sql, app_name }) })
    }

    /// Test and operations helper: creates database `db` on the server `cfg` points at (if
    /// missing), turns `ALLOW_SNAPSHOT_ISOLATION` on and sets `READ_COMMITTED_SNAPSHOT` to
    /// `rcsi` (only when it differs), and returns `cfg` pointed at that database. Needs
    /// CREATE DATABASE / ALTER permissions. Returns whether RCSI is now on.
    pub async fn ensure_database(cfg: MssqlConfig, db: &str, rcsi: bool) -> Result<(MssqlConfig, bool)> {
        let target = cfg.clone().database(db)?;
        let manager = Manager::new(cfg.parts.clone(), "chokaq-setup".to_string(), cfg.connect_timeout);
        let mut conn = bb8::ManageConnection::connect(&manager).await.map_err(connect_error)?;
        let sql = crate::sql::ensure_test_database(db);
        let run = async { conn.client.query(sql.as_str(), &[&rcsi]).await?.into_results().await };
        let sets = match tokio::time::timeout(cfg.statement_timeout, run).await {
            Err(_) => return Err(timeout("ensure_database", cfg.statement_timeout)),
            Ok(r) => r.map_err(|e| map_error("ensure_database", e))?,
        };
        let row = first_row("ensure_database", sets)?;
        let now_on: bool = req("ensure_database", &row, "Rcsi")?;
        let _ = conn.client.close().await;
        Ok((target, now_on))
    }

    /// The configuration (password redacted in its `Debug`/`Display`).
    pub fn config(&self) -> &MssqlConfig {
        &self.inner.cfg
    }

    /// The program name this backend's sessions show in `sys.dm_exec_sessions`.
    pub fn application_name(&self) -> &str {
        &self.inner.app_name
    }

    fn sql(&self) -> &Statements {
        &self.inner.sql
    }

    /// Runs one batch, retrying transient failures.
    async fn run(&self, op: &'static str, sql: &str, params: &[&dyn ToSql]) -> Result<Vec<Vec<Row>>> {
        let mut attempt = 0;
        loop {
            match self.run_once(op, sql, params).await {
                Err(e) if e.kind() == ErrorKind::Transient && attempt < MAX_TRANSIENT_RETRIES => {
                    attempt += 1;
                    let base = 5u64 << attempt;
                    let jitter = rand::random::<u64>() % (base + 1);
                    tracing::debug!(target: "chokaq_mssql", op, attempt, error = %e, "retrying transient failure");
                    tokio::time::sleep(Duration::from_millis(base + jitter)).await;
                }
                other => return other,
            }
        }
    }

    async fn run_once(&self, op: &'static str, sql: &str, params: &[&dyn ToSql]) -> Result<Vec<Vec<Row>>> {
        let mut conn = self.inner.pool.get().await.map_err(pool_error)?;
        conn.broken = true;
        let limit = self.inner.cfg.statement_timeout;
        let res =
            tokio::time::timeout(limit, async { conn.client.query(sql, params).await?.into_results().await }).await;
        match res {
            Err(_) => Err(timeout(op, limit)),
            Ok(Ok(rows)) => {
                conn.broken = false;
                Ok(rows)
            }
            Ok(Err(e)) => {
                let err = map_error(op, e);
                // Deadlock victims and duplicate keys roll the XACT_ABORT batch back and
                // leave the session clean; anything else: discard the connection.
                if matches!(err.kind(), ErrorKind::Transient | ErrorKind::Conflict) {
                    conn.broken = false;
                }
                Err(err)
            }
        }
    }

    async fn migrate_inner(&self) -> Result<()> {
        self.run("migrate", &self.sql().migrate_schema, &[]).await?;
        self.run("migrate", &self.sql().migrate_objects, &[]).await?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Encoding helpers
// ---------------------------------------------------------------------------------------

fn hex_id(id: JobId) -> String {
    id.0.simple().to_string()
}

fn id_bytes(id: JobId) -> Vec<u8> {
    id.0.as_bytes().to_vec()
}

/// The leases as one JSON document, sorted by id so multi-row writes tend to lock rows in id
/// order (SPEC §5; a deadlock that still happens is retried).
fn leases_json(leases: &[LeaseRef]) -> String {
    let mut sorted: Vec<&LeaseRef> = leases.iter().collect();
    sorted.sort_by_key(|l| l.id);
    let v: Vec<serde_json::Value> =
        sorted.iter().map(|l| serde_json::json!({"id": hex_id(l.id), "lease": l.lease.0})).collect();
    serde_json::Value::Array(v).to_string()
}

/// Splits a delay into whole seconds and nanoseconds for `DATEADD`.
fn delay_parts(what: &str, d: Duration) -> Result<(i32, i32)> {
    let secs = i32::try_from(d.as_secs())
        .map_err(|_| Error::invalid(format!("{what} is too long: {d:?} (at most about 68 years)")))?;
    Ok((secs, d.subsec_nanos() as i32))
}

/// A duration in milliseconds for `DATEADD` (whose seconds must fit an `INT`).
fn millis(what: &str, d: Duration) -> Result<i64> {
    if d.as_secs() > i32::MAX as u64 {
        return Err(Error::invalid(format!("{what} is too long: {d:?} (at most about 68 years)")));
    }
    i64::try_from(d.as_millis()).map_err(|_| Error::invalid(format!("{what} is too long: {d:?}")))
}

/// Rejects instants outside `DATETIME2`'s years 1 to 9999 before they reach the driver.
fn check_ts(what: &str, ts: Option<Timestamp>) -> Result<()> {
    use chokaq_core::chrono::Datelike;
    match ts {
        Some(t) if !(1..=9999).contains(&t.year()) => {
            Err(Error::invalid(format!("{what} {t} is outside SQL Server's DATETIME2 range")))
        }
        _ => Ok(()),
    }
}

/// `yyyy-mm-ddThh:mm:ss.fffffff` (100 ns ticks, the precision of `DATETIME2(7)`).
fn datetime2_text(ts: Timestamp) -> String {
    use chokaq_core::chrono::Timelike;
    let n = ts.naive_utc();
    format!("{}.{:07}", n.format("%Y-%m-%dT%H:%M:%S"), (n.nanosecond() % 1_000_000_000) / 100)
}

fn job_json(ord: usize, id: JobId, job: &NewJob) -> Result<serde_json::Value> {
    let (at, ds, dn) = match job.run_at {
        RunAt::Now => (None, None, None),
        RunAt::At(ts) => {
            check_ts("run_at", Some(ts))?;
            (Some(datetime2_text(ts)), None, None)
        }
        RunAt::After(d) => {
            let (s, n) = delay_parts("delay", d)?;
            (None, Some(s), Some(n))
        }
    };
    let tags = if job.tags.is_empty() { None } else { Some(serde_json::to_string(&job.tags)?) };
    Ok(serde_json::json!({
        "o": ord,
        "id": hex_id(id),
        "q": job.queue.as_str(),
        "k": job.kind.as_str(),
        "p": serde_json::to_string(&job.payload)?,
        "t": tags,
        "key": job.idempotency_key,
        "pr": job.priority,
        "ma": job.max_attempts,
        "at": at,
        "ds": ds,
        "dn": dn,
        "by": job.created_by,
    }))
}

// ---------------------------------------------------------------------------------------
// Decoding helpers
// ---------------------------------------------------------------------------------------

fn col<'a, T: tiberius::FromSql<'a>>(op: &str, row: &'a Row, name: &str) -> Result<Option<T>> {
    row.try_get::<T, _>(name).map_err(|e| decode(op, format!("column {name}: {e}")))
}

fn req<'a, T: tiberius::FromSql<'a>>(op: &str, row: &'a Row, name: &str) -> Result<T> {
    col::<T>(op, row, name)?.ok_or_else(|| decode(op, format!("column {name} is NULL")))
}

fn ts(op: &str, row: &Row, name: &str) -> Result<Option<Timestamp>> {
    Ok(col::<NaiveDateTime>(op, row, name)?.map(|n| DateTime::<Utc>::from_naive_utc_and_offset(n, Utc)))
}

fn req_ts(op: &str, row: &Row, name: &str) -> Result<Timestamp> {
    ts(op, row, name)?.ok_or_else(|| decode(op, format!("column {name} is NULL")))
}

fn job_id(op: &str, row: &Row, name: &str) -> Result<JobId> {
    let b: &[u8] = req(op, row, name)?;
    Uuid::from_slice(b).map(JobId).map_err(|e| decode(op, format!("column {name}: {e}")))
}

fn count(op: &str, row: &Row, name: &str) -> Result<u64> {
    let n: i32 = col(op, row, name)?.unwrap_or(0);
    Ok(u64::try_from(n).unwrap_or(0))
}

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
        kind: JobKind::new(req::<&str>(op, row, "Kind")?)?,
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
    })
}

fn decode_claimed(row: &Row) -> Result<ClaimedJob> {
    let op = "claim";
    let c = decode_common(op, row)?;
    Ok(ClaimedJob {
        id: c.id,
        queue: c.queue,
        kind: c.kind,
        payload: c.payload,
        tags: c.tags,
        idempotency_key: c.idempotency_key,
        priority: c.priority,
        status: JobStatus::from_code(req(op, row, "Status")?)?,
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
    })
}

fn decode_record(op: &str, row: &Row) -> Result<JobRecord> {
    let loc: i32 = req(op, row, "Loc")?;
    let location = match loc {
        0 => JobLocation::Hot(JobStatus::from_code(req(op, row, "Status")?)?),
        1 => JobLocation::Archived,
        2 => JobLocation::Dead(DeadReason::parse(req::<&str>(op, row, "Reason")?)?),
        other => return Err(decode(op, format!("unknown location {other}"))),
    };
    let cancel_requested: bool = col(op, row, "CancelRequested")?.unwrap_or(false);
    let finished_at = ts(op, row, "FinishedAtUtc")?;
    let c = decode_common(op, row)?;
    Ok(JobRecord {
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

fn decode_queue(op: &str, row: &Row) -> Result<QueueSettings> {
    let policy: i16 = req(op, row, "ZombiePolicy")?;
    Ok(QueueSettings {
        name: QueueName::new(req::<&str>(op, row, "Name")?)?,
        max_workers: col::<i32>(op, row, "MaxWorkers")?.map(|n| u32::try_from(n).unwrap_or(0)),
        is_paused: req(op, row, "IsPaused")?,
        is_active: req(op, row, "IsActive")?,
        zombie_timeout: col::<i64>(op, row, "ZombieTimeoutMs")?
            .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        zombie_policy: if policy == 1 { ZombiePolicy::DeadLetter } else { ZombiePolicy::Retry },
        updated_at: ts(op, row, "UpdatedAtUtc")?,
    })
}

/// The last result set's rows (batches may emit none before it).
fn last_set(sets: Vec<Vec<Row>>) -> Vec<Row> {
    sets.into_iter().last().unwrap_or_default()
}

fn first_row(op: &str, sets: Vec<Vec<Row>>) -> Result<Row> {
    last_set(sets).into_iter().next().ok_or_else(|| decode(op, "no result row"))
}

/// Splits input leases into done / lost by the ids the database reported.
fn outcome(leases: &[LeaseRef], done_ids: &HashSet<JobId>) -> BatchOutcome {
    BatchOutcome::partition(leases.iter().map(|l| l.id), |id| done_ids.contains(id))
}

fn ids_of(op: &str, rows: &[Row]) -> Result<HashSet<JobId>> {
    rows.iter().map(|r| job_id(op, r, "Id")).collect()
}

fn dead_reason_text(r: DeadReason) -> String {
    r.as_str().to_string()
}

// ---------------------------------------------------------------------------------------
// Backend
// ---------------------------------------------------------------------------------------

#[async_trait]
impl Backend for MssqlBackend {
    fn name(&self) -> &'static str {
        "mssql"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::minimal(TimestampPrecision::HundredNanoseconds)
            .with_kill_connections(true)
            .with_multi_process(true)
    }

    async fn migrate(&self) -> Result<()> {
        self.migrate_inner().await
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        if jobs.len() > MAX_ENQUEUE_BATCH {
            return Err(Error::invalid(format!(
                "enqueue_many takes at most {MAX_ENQUEUE_BATCH} jobs, got {}",
                jobs.len()
            )));
        }
        let mut items = Vec::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            job.validate(self.inner.cfg.max_payload_bytes)?;
            items.push(job_json(i, JobId::new(), job)?);
        }
        let payload = serde_json::Value::Array(items).to_string();
        if payload.len() > MAX_BATCH_DOCUMENT_BYTES {
            return Err(Error::invalid(format!(
                "enqueue_many batch is {} bytes as one document, over {MAX_BATCH_DOCUMENT_BYTES}: split it",
                payload.len()
            )));
        }
        let op = "enqueue";
        let mut attempt = 0;
        let rows = loop {
            match self.run(op, &self.sql().enqueue, &[&payload]).await {
                // A unique-index race the key-range lock did not cover: the other insert has
                // committed, so a retry finds it and returns its id.
                Err(e) if e.kind() == ErrorKind::Conflict && attempt < 3 => attempt += 1,
                other => break last_set(other?),
            }
        };
        if rows.len() != jobs.len() {
            return Err(decode(op, format!("{} result rows for {} jobs", rows.len(), jobs.len())));
        }
        rows.iter().map(|r| Ok(Enqueued { id: job_id(op, r, "Id")?, duplicate: req(op, r, "Duplicate")? })).collect()
    }

    async fn claim(&self, req_: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        req_.validate()?;
        let queues: Vec<&str> = req_.queues.iter().map(QueueName::as_str).collect();
        let queues = serde_json::to_string(&queues)?;
        let mode: i16 = match req_.mode {
            ClaimMode::Reserve => JobStatus::Fetched.code(),
            ClaimMode::Start => JobStatus::Processing.code(),
        };
        let limit = i32::try_from(req_.limit).map_err(|_| Error::invalid("claim limit too large"))?;
        let sets = self.run("claim", &self.sql().claim, &[&queues, &req_.worker.0, &limit, &mode]).await?;
        let mut jobs = last_set(sets).iter().map(decode_claimed).collect::<Result<Vec<_>>>()?;
        jobs.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.scheduled_at.unwrap_or(a.created_at).cmp(&b.scheduled_at.unwrap_or(b.created_at)))
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok(jobs)
    }

    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        if leases.is_empty() {
            return Ok(BatchOutcome::default());
        }
        let json = leases_json(leases);
        let rows = last_set(self.run("start", &self.sql().start, &[&json, &worker.0]).await?);
        Ok(outcome(leases, &ids_of("start", &rows)?))
    }

    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        if leases.is_empty() {
            return Ok(HeartbeatReport::default());
        }
        let op = "heartbeat";
        let json = leases_json(leases);
        let rows = last_set(self.run(op, &self.sql().heartbeat, &[&json, &worker.0]).await?);
        let mut held = HashSet::new();
        let mut cancel = HashSet::new();
        for r in &rows {
            let id = job_id(op, r, "Id")?;
            if col::<bool>(op, r, "CancelRequested")?.unwrap_or(false) {
                cancel.insert(id);
            }
            held.insert(id);
        }
        let mut report = HeartbeatReport::default();
        for l in leases {
            if held.contains(&l.id) {
                report.held.push(l.id);
                if cancel.contains(&l.id) {
                    report.cancel_requested.push(l.id);
                }
            } else {
                report.lost.push(l.id);
            }
        }
        Ok(report)
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        if leases.is_empty() {
            return Ok(BatchOutcome::default());
        }
        let json = leases_json(leases);
        let rows = last_set(self.run("complete", &self.sql().complete, &[&json, &worker.0]).await?);
        Ok(outcome(leases, &ids_of("complete", &rows)?))
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome_: FailAction) -> Result<Fenced<FailOutcome>> {
        let op = "fail";
        let (action, delay, error, reason): (i16, Duration, Option<String>, DeadReason) = match outcome_ {
            FailAction::Retry { delay, error } => (0, delay, Some(error), DeadReason::Failed),
            FailAction::Snooze { delay } => (1, delay, None, DeadReason::Failed),
            FailAction::DeadLetter { reason, error } => (2, Duration::ZERO, Some(error), reason),
            FailAction::Cancelled { error } => (2, Duration::ZERO, error, DeadReason::Cancelled),
        };
        let (secs, nanos) = delay_parts("retry delay", delay)?;
        let error = error.map(|e| validate::truncate(&e, validate::MAX_ERROR_LEN).to_string());
        let reason_text = dead_reason_text(reason);
        let id = id_bytes(lease.id);
        let row = first_row(
            op,
            self.run(
                op,
                &self.sql().fail,
                &[&id, &lease.lease.0, &worker.0, &action, &secs, &nanos, &error, &reason_text],
            )
            .await?,
        )?;
        let result: i32 = req(op, &row, "Result")?;
        Ok(match result {
            0 => Fenced::LeaseLost,
            1 => Fenced::Done(FailOutcome::Retried { at: req_ts(op, &row, "DueAtUtc")? }),
            2 => Fenced::Done(FailOutcome::Snoozed { until: req_ts(op, &row, "DueAtUtc")? }),
            3 => Fenced::Done(FailOutcome::DeadLettered(reason)),
            other => return Err(decode(op, format!("unknown result {other}"))),
        })
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        if leases.is_empty() {
            return Ok(BatchOutcome::default());
        }
        let json = leases_json(leases);
        let rows = last_set(self.run("release", &self.sql().release, &[&json, &worker.0]).await?);
        Ok(outcome(leases, &ids_of("release", &rows)?))
    }

    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        let op = "rescue";
        if params.limit == 0 {
            return Err(Error::invalid("rescue limit must be at least 1"));
        }
        let fetched = millis("fetched_timeout", params.fetched_timeout)?;
        let zombie = millis("default_zombie_timeout", params.default_zombie_timeout)?;
        let limit = i32::try_from(params.limit).map_err(|_| Error::invalid("rescue limit too large"))?;
        let row = first_row(op, self.run(op, &self.sql().rescue, &[&fetched, &zombie, &limit]).await?)?;
        Ok(RescueReport {
            ran: req(op, &row, "Ran")?,
            fetched_released: count(op, &row, "FetchedReleased")?,
            zombies_retried: count(op, &row, "ZombiesRetried")?,
            zombies_dead: count(op, &row, "ZombiesDead")?,
        })
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        let op = "cancel";
        let bytes = id_bytes(id);
        let row = first_row(op, self.run(op, &self.sql().cancel, &[&bytes]).await?)?;
        Ok(match req::<i32>(op, &row, "Result")? {
            1 => CancelOutcome::Cancelled,
            2 => CancelOutcome::Requested,
            _ => CancelOutcome::NotLive,
        })
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        let op = "control_queue";
        let mut max: Option<i32> = None;
        let mut zombie_ms: Option<i64> = None;
        let mut policy: Option<i16> = None;
        let code: i16 = match control {
            QueueControl::Pause => 1,
            QueueControl::Resume => 2,
            QueueControl::Activate => 3,
            QueueControl::Deactivate => 4,
            QueueControl::SetMaxWorkers(n) => {
                max = n
                    .map(|n| i32::try_from(n).map_err(|_| Error::invalid(format!("max_workers {n} is too large"))))
                    .transpose()?;
                5
            }
            QueueControl::SetZombieTimeout(d) => {
                zombie_ms = d.map(|d| millis("zombie_timeout", d)).transpose()?;
                6
            }
            QueueControl::SetZombiePolicy(p) => {
                policy = Some(match p {
                    ZombiePolicy::Retry => 0,
                    ZombiePolicy::DeadLetter => 1,
                });
                7
            }
        };
        let name = queue.as_str().to_string();
        let row =
            first_row(op, self.run(op, &self.sql().control_queue, &[&name, &code, &max, &zombie_ms, &policy]).await?)?;
        decode_queue(op, &row)
    }

    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        let op = "queue_settings";
        let name = queue.as_str().to_string();
        let rows = last_set(self.run(op, &self.sql().queue_settings, &[&name]).await?);
        match rows.first() {
            Some(r) => decode_queue(op, r),
            None => Ok(QueueSettings::default_for(queue.clone())),
        }
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        let op = "requeue_dead";
        let bytes = id_bytes(id);
        let row = match self.run(op, &self.sql().requeue_dead, &[&bytes]).await {
            Ok(sets) => first_row(op, sets)?,
            Err(e) if e.kind() == ErrorKind::Conflict => {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!("requeue_dead: a live job already holds the idempotency key of {id}"),
                ))
            }
            Err(e) => return Err(e),
        };
        Ok(if req::<i32>(op, &row, "Moved")? == 1 { RequeueOutcome::Requeued } else { RequeueOutcome::NotFound })
    }

    async fn purge(&self, r: &PurgeParams) -> Result<u64> {
        let op = "purge";
        if r.batch_size == 0 || r.batch_size > 100_000 {
            return Err(Error::invalid("purge batch_size must be 1 to 100000"));
        }
        if r.reason.is_some() && r.target == PurgeTarget::Archive {
            return Err(Error::invalid("purge: a reason filter applies to the dead-letter table only"));
        }
        let batch = i32::try_from(r.batch_size).map_err(|_| Error::invalid("purge batch_size too large"))?;
        let older = millis("older_than", r.older_than)?;
        let queue = r.queue.as_ref().map(|q| q.as_str().to_string());
        let kind = r.kind.as_ref().map(|k| k.as_str().to_string());
        let reason = r.reason.map(dead_reason_text);
        let mut total = 0u64;
        for _ in 0..r.max_batches {
            let sets = match r.target {
                PurgeTarget::Archive => {
                    self.run(op, &self.sql().purge_archive, &[&batch, &older, &queue, &kind]).await?
                }
                PurgeTarget::DeadLetter => {
                    self.run(op, &self.sql().purge_dlq, &[&batch, &older, &queue, &kind, &reason]).await?
                }
            };
            let n = count(op, &first_row(op, sets)?, "Deleted")?;
            total += n;
            if n < u64::from(r.batch_size) {
                break;
            }
        }
        Ok(total)
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        let op = "stats";
        let sets = self.run(op, &self.sql().stats, &[]).await?;
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
            let q = chokaq_core::QueueStats {
                queue: req::<&str>(op, r, "Queue")?.to_string(),
                pending: count(op, r, "Pending")?,
                fetched: count(op, r, "Fetched")?,
                processing: count(op, r, "Processing")?,
                archived: count(op, r, "Archived")?,
                dead: count(op, r, "Dead")?,
                oldest_due_at: ts(op, r, "OldestDue")?,
            };
            snap.pending += q.pending;
            snap.fetched += q.fetched;
            snap.processing += q.processing;
            snap.archived += q.archived;
            snap.dead += q.dead;
            snap.queues.push(q);
        }
        Ok(snap)
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        let op = "get_job";
        let bytes = id_bytes(id);
        let rows = last_set(self.run(op, &self.sql().get_job, &[&bytes]).await?);
        match rows.len() {
            0 => Ok(None),
            1 => decode_record(op, &rows[0]).map(Some),
            n => Err(Error::new(ErrorKind::Other, format!("get_job: job {id} is in {n} tables at once"))),
        }
    }

    async fn list_jobs(&self, f: &ListJobsParams) -> Result<JobPage> {
        let op = "list_jobs";
        if f.limit == 0 || f.limit > 1000 {
            return Err(Error::invalid(format!("list limit must be 1 to 1000, got {}", f.limit)));
        }
        if f.status.is_some() && f.table != JobTable::Hot {
            return Err(Error::invalid("list_jobs: a status filter applies to the hot table only"));
        }
        if let Some(tag) = &f.tag {
            validate::text_field("tag", tag, validate::MAX_TAG_LEN)?;
        }
        let sql = match f.table {
            JobTable::Hot => &self.sql().list_hot,
            JobTable::Archive => &self.sql().list_archive,
            JobTable::DeadLetter => &self.sql().list_dlq,
        };
        check_ts("created_from", f.created_from)?;
        check_ts("created_to", f.created_to)?;
        let limit = i32::try_from(f.limit + 1).unwrap_or(1001);
        let after = f.after.map(id_bytes);
        let queue = f.queue.as_ref().map(|q| q.as_str().to_string());
        let status = f.status.map(JobStatus::code);
        let kind = f.kind.as_ref().map(|k| k.as_str().to_string());
        let tag = f.tag.clone();
        let rows = last_set(
            self.run(op, sql, &[&limit, &after, &queue, &status, &kind, &tag, &f.created_from, &f.created_to]).await?,
        );
        let mut jobs = rows.iter().map(|r| decode_record(op, r)).collect::<Result<Vec<_>>>()?;
        let next = if jobs.len() > f.limit as usize {
            jobs.truncate(f.limit as usize);
            jobs.last().map(|j| j.id)
        } else {
            None
        };
        Ok(JobPage { jobs, next })
    }

    async fn wakeups(&self) -> Result<Option<chokaq_core::Wakeups>> {
        Ok(None)
    }
}

#[cfg(feature = "testing")]
#[async_trait]
impl TestSupport for MssqlBackend {
    async fn db_now(&self) -> Result<Timestamp> {
        let op = "db_now";
        let row = first_row(op, self.run(op, &self.sql().db_now, &[]).await?)?;
        req_ts(op, &row, "Now")
    }

    async fn force(&self, id: JobId, patch: &JobPatch) -> Result<bool> {
        let op = "force";
        for (what, t) in [
            ("scheduled_at", patch.scheduled_at.flatten()),
            ("heartbeat_at", patch.heartbeat_at.flatten()),
            ("updated_at", patch.updated_at),
            ("created_at", patch.created_at),
        ] {
            check_ts(what, t)?;
        }
        let bytes = id_bytes(id);
        let status = patch.status.map(JobStatus::code);
        let sched = patch.scheduled_at.flatten();
        let hb = patch.heartbeat_at.flatten();
        let (s1, s2, s3, s4, s5, s6) = (
            patch.status.is_some(),
            patch.attempt.is_some(),
            patch.scheduled_at.is_some(),
            patch.heartbeat_at.is_some(),
            patch.updated_at.is_some(),
            patch.created_at.is_some(),
        );
        let row = first_row(
            op,
            self.run(
                op,
                &self.sql().force,
                &[
                    &bytes,
                    &s1,
                    &status,
                    &s2,
                    &patch.attempt,
                    &s3,
                    &sched,
                    &s4,
                    &hb,
                    &s5,
                    &patch.updated_at,
                    &s6,
                    &patch.created_at,
                ],
            )
            .await?,
        )?;
        Ok(req::<i32>(op, &row, "Changed")? > 0)
    }

    async fn presence(&self, id: JobId) -> Result<Presence> {
        Ok(self.presence_many(&[id]).await?.into_iter().next().map(|(_, p)| p).unwrap_or_default())
    }

    async fn presence_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, Presence)>> {
        let op = "presence_many";
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let json = serde_json::to_string(&ids.iter().map(|i| hex_id(*i)).collect::<Vec<_>>())?;
        let rows = last_set(self.run(op, &self.sql().presence_many, &[&json]).await?);
        let mut found = std::collections::HashMap::new();
        for r in &rows {
            let p = Presence {
                hot: count(op, r, "Hot")? as u32,
                archive: count(op, r, "Archive")? as u32,
                dead: count(op, r, "Dead")? as u32,
            };
            found.insert(job_id(op, r, "Id")?, p);
        }
        Ok(ids.iter().map(|i| (*i, found.get(i).copied().unwrap_or_default())).collect())
    }

    async fn kill_connections(&self) -> Result<u64> {
        let op = "kill_connections";
        let name = self.inner.app_name.clone();
        let row = first_row(op, self.run(op, &self.sql().kill_connections, &[&name]).await?)?;
        count(op, &row, "Killed")
    }

    async fn drop_schema(&self) -> Result<()> {
        self.run("drop_schema", &self.sql().drop_schema, &[]).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chokaq_core::chrono::TimeZone;

    #[test]
    fn leases_travel_as_one_json_document() {
        let id = JobId(Uuid::parse_str("0190f3a1-2b3c-7d4e-8f00-112233445566").unwrap());
        let json = leases_json(&[LeaseRef { id, lease: Lease(42) }]);
        assert_eq!(json, r#"[{"id":"0190f3a12b3c7d4e8f00112233445566","lease":42}]"#);
        assert_eq!(id_bytes(id).len(), 16);
        assert_eq!(id_bytes(id)[0], 0x01);
    }

    #[test]
    fn job_documents_carry_schedule_and_text_safely() {
        let at =
            Utc.with_ymd_and_hms(2026, 11, 30, 5, 6, 7).unwrap() + chokaq_core::chrono::Duration::nanoseconds(1234500);
        let job = NewJob::build("mail", "email.send.v1")
            .unwrap()
            .json(serde_json::json!({"to": "a'b\"; DROP TABLE x; --", "n": 1}))
            .run_at(at)
            .idempotency_key("k-1")
            .tag("t1");
        let v = job_json(3, JobId::new(), &job).unwrap();
        assert_eq!(v["o"], 3);
        assert_eq!(v["at"], "2026-11-30T05:06:07.0012345");
        assert_eq!(v["ds"], serde_json::Value::Null);
        assert_eq!(v["t"], r#"["t1"]"#);
        let payload: serde_json::Value = serde_json::from_str(v["p"].as_str().unwrap()).unwrap();
        assert_eq!(payload["to"], "a'b\"; DROP TABLE x; --");

        let job = NewJob::build("mail", "k").unwrap().delay(Duration::new(90, 500));
        let v = job_json(0, JobId::new(), &job).unwrap();
        assert_eq!((v["ds"].as_i64(), v["dn"].as_i64()), (Some(90), Some(500)));
        assert_eq!(v["t"], serde_json::Value::Null);
    }

    #[test]
    fn delays_out_of_range_are_invalid_input() {
        let e = delay_parts("delay", Duration::from_secs(u64::from(u32::MAX))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(delay_parts("delay", Duration::from_millis(1500)).unwrap(), (1, 500_000_000));
        let job = NewJob::build("q", "k").unwrap().delay(Duration::from_secs(u64::MAX / 2));
        assert_eq!(job_json(0, JobId::new(), &job).unwrap_err().kind(), ErrorKind::InvalidInput);
        let far = Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap();
        let job = NewJob::build("q", "k").unwrap().run_at(far);
        assert_eq!(job_json(0, JobId::new(), &job).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(millis("t", Duration::from_secs(u64::from(u32::MAX))).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(millis("t", Duration::from_millis(1500)).unwrap(), 1500);
    }

    /// The columns the decoders read are the ones the statements return.
    #[test]
    fn decoders_read_columns_the_statements_return() {
        let st = Statements::new("chokaq");
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
        ];
        let record = ["Loc", "Status", "CancelRequested", "FinishedAtUtc", "Reason"];
        let mut expect: Vec<(&str, &String, Vec<&str>)> = vec![
            ("enqueue", &st.enqueue, vec!["Id", "Duplicate"]),
            ("claim", &st.claim, [&common[..], &["Status"]].concat()),
            ("start", &st.start, vec!["Id"]),
            ("heartbeat", &st.heartbeat, vec!["Id", "CancelRequested"]),
            ("complete", &st.complete, vec!["Id"]),
            ("release", &st.release, vec!["Id"]),
            ("fail", &st.fail, vec!["Result", "DueAtUtc"]),
            ("rescue", &st.rescue, vec!["Ran", "FetchedReleased", "ZombiesRetried", "ZombiesDead"]),
            ("cancel", &st.cancel, vec!["Result"]),
            ("requeue_dead", &st.requeue_dead, vec!["Moved"]),
            ("purge_archive", &st.purge_archive, vec!["Deleted"]),
            ("purge_dlq", &st.purge_dlq, vec!["Deleted"]),
            (
                "stats",
                &st.stats,
                vec!["IsSnapshot", "Now", "Queue", "Pending", "Fetched", "Processing", "Archived", "Dead", "OldestDue"],
            ),
            ("db_now", &st.db_now, vec!["Now"]),
            ("force", &st.force, vec!["Changed"]),
            ("presence_many", &st.presence_many, vec!["Id", "Hot", "Archive", "Dead"]),
            ("kill_connections", &st.kill_connections, vec!["Killed"]),
        ];
        let queue_cols =
            vec!["Name", "MaxWorkers", "IsPaused", "IsActive", "ZombieTimeoutMs", "ZombiePolicy", "UpdatedAtUtc"];
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
