//! `MssqlBackend`: the struct, its constructors and `impl Backend`. Statements come from
//! `sql/` (rendered once at connect), values are encoded and rows decoded in `rows/`, and
//! every batch goes through [`Pool::run`](crate::pool::Pool::run); this file binds and runs.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use chokaq_core::uuid::Uuid;
use chokaq_core::{
    validate, Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, Enqueued, Error, ErrorKind,
    FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, JobStatus, JobTable, LeaseRef,
    ListJobsParams, NewJob, PurgeParams, PurgeTarget, QueueControl, QueueName, QueueSettings, RequeueOutcome,
    RescueParams, RescueReport, Result, StatsSnapshot, ThroughputBucket, ThroughputParams, TimestampPrecision,
    WorkerId, WorkerProcess, WorkerRegistration, DEFAULT_FETCHED_TIMEOUT, DEFAULT_ZOMBIE_TIMEOUT,
};
use tiberius::{Row, ToSql};

use crate::config::MssqlConfig;
use crate::error::{connect_error, map_error, timeout};
use crate::migrate;
use crate::pool::{Manager, Pool};
use crate::rows::{
    check_ts, col, control_params, count, dead_reason_text, decode_cancel, decode_enqueued, decode_fail, decode_queue,
    decode_record, decode_rescue, decode_stats, delay_parts, fail_action, first_row, heartbeat_report, id_bytes,
    ids_of, job_id, job_json, last_set, leases_json, millis, outcome, req, req_ts,
};
use crate::sql::{self, Statements};

/// The largest JSON document one `enqueue_many` sends (an `NVARCHAR(MAX)` parameter holds
/// 2 GB; tiberius sends at most 1 GiB of text as `nvarchar(max)`).
const MAX_BATCH_DOCUMENT_BYTES: usize = 512 * 1024 * 1024;

/// The SQL Server backend. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct MssqlBackend {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    cfg: MssqlConfig,
    sql: Statements,
    app_name: String,
    /// Calls of `rescue` in a row that did not run (the lock row was held or missing).
    rescue_misses: AtomicU32,
}

/// After this many `rescue` calls in a row that did not run, and every as many after, the
/// backend logs a warning (issue 16, finding 4: a held lock must not stop rescue silently).
pub(crate) const RESCUE_MISSES_BEFORE_WARNING: u32 = 10;

/// Counts a rescue call: resets on a run, and returns the number of calls in a row that did
/// not run when a warning is due (every [`RESCUE_MISSES_BEFORE_WARNING`]-th miss).
pub(crate) fn note_rescue(misses: &AtomicU32, ran: bool) -> Option<u32> {
    if ran {
        misses.store(0, Ordering::Relaxed);
        return None;
    }
    let n = misses.fetch_add(1, Ordering::Relaxed).saturating_add(1);
    (n % RESCUE_MISSES_BEFORE_WARNING == 0).then_some(n)
}

/// Splits claimed rows into the decoded jobs and the rows that could not be decoded, each
/// with its error; one bad row never fails the others.
pub(crate) fn split_decoded<R, T>(rows: &[R], decode: impl Fn(&R) -> Result<T>) -> (Vec<T>, Vec<(&R, Error)>) {
    let mut good = Vec::with_capacity(rows.len());
    let mut bad = Vec::new();
    for row in rows {
        match decode(row) {
            Ok(v) => good.push(v),
            Err(e) => bad.push((row, e)),
        }
    }
    (good, bad)
}

/// The last error stored with a dead-lettered undecodable row: what failed, never the payload,
/// bounded like any error text.
pub(crate) fn undecodable_error_text(error: &Error) -> String {
    validate::error_text(&format!("chokaq: the stored job cannot be decoded, so it was dead-lettered: {error}"))
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

impl MssqlBackend {
    /// Deletes finished rows in bounded batches. `locked` (maintenance): each batch runs in a
    /// transaction holding the `rescue` row of `Locks` (taken with `READPAST`); the purge stops
    /// at the first batch that finds it held by another instance.
    async fn purge_batches(&self, r: &PurgeParams, locked: bool) -> Result<u64> {
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
                    self.run(op, &self.sql().purge_archive, &[&batch, &older, &queue, &kind, &locked]).await?
                }
                PurgeTarget::DeadLetter => {
                    self.run(op, &self.sql().purge_dlq, &[&batch, &older, &queue, &kind, &reason, &locked]).await?
                }
            };
            let deleted: i64 = crate::rows::req(op, &first_row(op, sets)?, "Deleted")?;
            // -1: another instance holds the maintenance lock.
            let Ok(n) = u64::try_from(deleted) else { break };
            total += n;
            if n < u64::from(r.batch_size) {
                break;
            }
        }
        Ok(total)
    }

    /// Connects (one connection is opened and checked at once, so a wrong address fails here
    /// with [`ErrorKind::Unavailable`] within the connect timeout) and builds the pool. Does
    /// not migrate: call [`Backend::migrate`].
    pub async fn connect(cfg: MssqlConfig) -> Result<MssqlBackend> {
        validate::schema_name(&cfg.schema)?;
        let sql = Statements::new(&cfg.schema)?;
        let app_name = format!("chokaq-{}", Uuid::new_v4().simple());
        let manager = Manager::new(cfg.parts.clone(), app_name.clone(), cfg.connect_timeout);
        let pool = Pool::open(manager, cfg.max_connections, cfg.statement_timeout).await?;
        tracing::debug!(target: "chokaq_mssql", server = %cfg, "connected");
        Ok(MssqlBackend { inner: Arc::new(Inner { pool, cfg, sql, app_name, rescue_misses: AtomicU32::new(0) }) })
    }

    /// Test and operations helper: creates database `db` on the server `cfg` points at (if
    /// missing), sets `READ_COMMITTED_SNAPSHOT` to `rcsi` and `ALLOW_SNAPSHOT_ISOLATION` to
    /// `snapshot` (each only when it differs), and returns `cfg` pointed at that database, with
    /// the two options as they now are (`(cfg, rcsi_on, snapshot_on)`). Needs CREATE DATABASE /
    /// ALTER permissions. The conformance suite runs in three such databases: RCSI on, RCSI
    /// off, and both off (the on-premises default).
    pub async fn ensure_database(
        cfg: MssqlConfig,
        db: &str,
        rcsi: bool,
        snapshot: bool,
    ) -> Result<(MssqlConfig, bool, bool)> {
        let target = cfg.clone().database(db)?;
        let sql = sql::ensure_test_database(db)?;
        let manager = Manager::new(cfg.parts.clone(), "chokaq-setup".to_string(), cfg.connect_timeout);
        let mut conn = bb8::ManageConnection::connect(&manager).await.map_err(connect_error)?;
        let run = async { conn.client.query(sql.as_str(), &[&rcsi, &snapshot]).await?.into_results().await };
        let sets = match tokio::time::timeout(cfg.statement_timeout, run).await {
            Err(_) => return Err(timeout("ensure_database", cfg.statement_timeout)),
            Ok(r) => r.map_err(|e| map_error("ensure_database", e))?,
        };
        let row = first_row("ensure_database", sets)?;
        let rcsi_on: bool = req("ensure_database", &row, "Rcsi")?;
        let snapshot_on = req::<i32>("ensure_database", &row, "Snapshot")? == 1;
        let _ = conn.client.close().await;
        Ok((target, rcsi_on, snapshot_on))
    }

    /// The configuration (password redacted in its `Debug`/`Display`).
    pub fn config(&self) -> &MssqlConfig {
        &self.inner.cfg
    }

    /// The program name this backend's sessions show in `sys.dm_exec_sessions`.
    pub fn application_name(&self) -> &str {
        &self.inner.app_name
    }

    /// The statements, rendered for this backend's schema.
    pub(crate) fn sql(&self) -> &Statements {
        &self.inner.sql
    }

    /// Dead-letters one claimed row that `rows::decode_claimed` refused (reason `failed`, the
    /// decoding error as its last error), fenced by the id and lease this claim gave it. A
    /// row whose id or lease cannot be read, or a failed move, is logged and left to rescue
    /// (its lease expires like any other): the good rows of the claim are returned either way.
    pub(crate) async fn dead_letter_undecodable(&self, worker: WorkerId, row: &Row, error: &Error) {
        let op = "claim";
        let (id, lease) = match (job_id(op, row, "Id"), col::<i64>(op, row, "Lease")) {
            (Ok(id), Ok(Some(lease))) => (id, lease),
            _ => {
                tracing::error!(target: "chokaq_mssql", %error, "a claimed row cannot be decoded, nor its id and lease read");
                return;
            }
        };
        let text = undecodable_error_text(error);
        let bytes = id_bytes(id);
        match self.run(op, &self.sql().dead_letter_undecodable, &[&bytes, &lease, &worker.0, &text]).await {
            Ok(sets) => {
                let moved = first_row(op, sets).and_then(|r| req::<i32>(op, &r, "Moved")).unwrap_or(0);
                tracing::warn!(target: "chokaq_mssql", job = %id, moved = moved == 1, %error,
                    "a claimed row cannot be decoded: dead-lettered");
            }
            Err(e) => tracing::warn!(target: "chokaq_mssql", job = %id, %error, move_error = %e,
                "a claimed row cannot be decoded, and dead-lettering it failed: rescue will return it"),
        }
    }

    /// Runs one batch on a pooled connection (statement timeout, transient failures retried).
    pub(crate) async fn run(&self, op: &'static str, sql: &str, params: &[&dyn ToSql]) -> Result<Vec<Vec<Row>>> {
        self.inner.pool.run(op, sql, params).await
    }
}

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
        async move { migrate::run(self).await }.await.map_err(|e: chokaq_core::Error| e.with_operation("migrate"))
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        async move {
            if jobs.is_empty() {
                return Ok(Vec::new());
            }
            // The job count, every job's own checks, and the batch's total bytes.
            validate::enqueue_batch(&jobs, self.inner.cfg.max_payload_bytes)?;
            let mut items = Vec::with_capacity(jobs.len());
            for (i, job) in jobs.iter().enumerate() {
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
            decode_enqueued(op, &rows, jobs.len())
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("enqueue_many"))
    }

    async fn claim(&self, req_: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        async move {
            req_.validate()?;
            let (queues, limit, mode) = crate::handoff::claim_args(req_)?;
            let sets = self.run("claim", &self.sql().claim, &[&queues, &req_.worker.0, &limit, &mode]).await?;
            Ok(self.finish_claim(req_.worker, last_set(sets)).await)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("claim"))
    }

    /// One batch and one transaction: the completions, then the claim, which hands the slots
    /// the completions freed on (`handoff.rs`, `docs/sqlserver.md`).
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        self.complete_and_claim_impl(worker, leases, req).await.map_err(|e| e.with_operation("complete_and_claim"))
    }

    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            validate::lease_list("start", leases)?;
            if leases.is_empty() {
                return Ok(BatchOutcome::default());
            }
            let json = leases_json(leases);
            let rows = last_set(self.run("start", &self.sql().start, &[&json, &worker.0]).await?);
            Ok(outcome(leases, &ids_of("start", &rows)?))
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("start"))
    }

    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        async move {
            let op = "heartbeat";
            validate::lease_list(op, leases)?;
            if leases.is_empty() {
                return Ok(HeartbeatReport::default());
            }
            let json = leases_json(leases);
            let rows = last_set(self.run(op, &self.sql().heartbeat, &[&json, &worker.0]).await?);
            heartbeat_report(op, leases, &rows)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("heartbeat"))
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            validate::lease_list("complete", leases)?;
            if leases.is_empty() {
                return Ok(BatchOutcome::default());
            }
            let json = leases_json(leases);
            let rows = last_set(self.run("complete", &self.sql().complete, &[&json, &worker.0]).await?);
            Ok(outcome(leases, &ids_of("complete", &rows)?))
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("complete"))
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, action: FailAction) -> Result<Fenced<FailOutcome>> {
        async move {
            let op = "fail";
            action.validate()?;
            let (code, delay, error, reason) = fail_action(action);
            let (secs, nanos) = delay_parts("retry delay", delay)?;
            let error = error.map(|e| validate::error_text(&e));
            let reason_text = dead_reason_text(reason);
            let id = id_bytes(lease.id);
            let row = first_row(
                op,
                self.run(
                    op,
                    &self.sql().fail,
                    &[&id, &lease.lease.0, &worker.0, &code, &secs, &nanos, &error, &reason_text],
                )
                .await?,
            )?;
            decode_fail(op, &row)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("fail"))
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            validate::lease_list("release", leases)?;
            if leases.is_empty() {
                return Ok(BatchOutcome::default());
            }
            let json = leases_json(leases);
            let rows = last_set(self.run("release", &self.sql().release, &[&json, &worker.0]).await?);
            Ok(outcome(leases, &ids_of("release", &rows)?))
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("release"))
    }

    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        async move {
            let op = "rescue";
            if params.limit == 0 {
                return Err(Error::invalid("rescue limit must be at least 1"));
            }
            let fetched = millis("fetched_timeout", DEFAULT_FETCHED_TIMEOUT)?;
            let zombie = millis("zombie_timeout", DEFAULT_ZOMBIE_TIMEOUT)?;
            let limit = i32::try_from(params.limit).map_err(|_| Error::invalid("rescue limit too large"))?;
            let max_holds = chokaq_core::MAX_EXPIRED_HOLDS;
            let row = first_row(op, self.run(op, &self.sql().rescue, &[&fetched, &zombie, &limit, &max_holds]).await?)?;
            let mut report = decode_rescue(op, &row)?;
            if let Some(misses) = note_rescue(&self.inner.rescue_misses, report.ran) {
                tracing::warn!(
                    target: "chokaq_mssql",
                    misses,
                    "rescue has not run for {misses} calls in a row: another session holds the rescue row of the \
                     schema's Locks table (a long transaction, or a role with UPDATE on it holding it on purpose), \
                     or the schema is not migrated"
                );
            }
            if report.ran {
                for req in &params.purge {
                    report.purged += self.purge_batches(req, true).await?;
                }
            }
            Ok(report)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("rescue"))
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        async move {
            let op = "cancel";
            let bytes = id_bytes(id);
            let row = first_row(op, self.run(op, &self.sql().cancel, &[&bytes]).await?)?;
            decode_cancel(op, &row)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("cancel"))
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        async move {
            let op = "control_queue";
            control.validate()?;
            let p = control_params(control)?;
            let name = queue.as_str().to_string();
            let params: [&dyn ToSql; 9] = [
                &name,
                &p.code,
                &p.max,
                &p.timeout_ms,
                &p.policy,
                &p.key_max,
                &p.rate_jobs,
                &p.rate_per_ms,
                &p.rate_by_key,
            ];
            let row = first_row(op, self.run(op, &self.sql().control_queue, &params).await?)?;
            decode_queue(op, &row)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("control_queue"))
    }

    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        async move {
            let op = "queue_settings";
            let name = queue.as_str().to_string();
            let rows = last_set(self.run(op, &self.sql().queue_settings, &[&name]).await?);
            match rows.first() {
                Some(r) => decode_queue(op, r),
                None => Ok(QueueSettings::default_for(queue.clone())),
            }
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("queue_settings"))
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        async move {
            let op = "requeue_dead";
            let bytes = id_bytes(id);
            let row = match self.run(op, &self.sql().requeue_dead, &[&bytes]).await {
                Ok(sets) => first_row(op, sets)?,
                Err(e) if e.kind() == ErrorKind::Conflict => {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        format!("requeue_dead: a live job of the same queue already holds the idempotency key of {id}"),
                    ))
                }
                Err(e) => return Err(e),
            };
            Ok(if req::<i32>(op, &row, "Moved")? == 1 { RequeueOutcome::Requeued } else { RequeueOutcome::NotFound })
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("requeue_dead"))
    }

    async fn purge(&self, r: &PurgeParams) -> Result<u64> {
        self.purge_batches(r, false).await.map_err(|e: chokaq_core::Error| e.with_operation("purge"))
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        async move {
            let op = "stats";
            let sets = self.run(op, &self.sql().stats, &[]).await?;
            decode_stats(op, sets)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("stats"))
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        async move {
            let op = "get_job";
            let bytes = id_bytes(id);
            let rows = last_set(self.run(op, &self.sql().get_job, &[&bytes]).await?);
            match rows.len() {
                0 => Ok(None),
                1 => decode_record(op, &rows[0]).map(Some),
                n => Err(Error::new(ErrorKind::Other, format!("get_job: job {id} is in {n} tables at once"))),
            }
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("get_job"))
    }

    async fn list_jobs(&self, f: &ListJobsParams) -> Result<JobPage> {
        async move {
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
                self.run(op, sql, &[&limit, &after, &queue, &status, &kind, &tag, &f.created_from, &f.created_to])
                    .await?,
            );
            let mut jobs = rows.iter().map(|r| decode_record(op, r)).collect::<Result<Vec<_>>>()?;
            if f.without_payloads {
                // The statement still reads the payloads; the answer leaves them out as the
                // contract says (a narrower statement is future work).
                for j in &mut jobs {
                    j.payload = serde_json::Value::Null;
                }
            }
            let next = if jobs.len() > f.limit as usize {
                jobs.truncate(f.limit as usize);
                jobs.last().map(|j| j.id)
            } else {
                None
            };
            Ok(JobPage { jobs, next })
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("list_jobs"))
    }

    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        async move {
            let op = "register_worker";
            reg.validate()?;
            let queues: Vec<&str> = reg.queues.iter().map(|q| q.as_str()).collect();
            let queues = serde_json::to_string(&queues)?;
            let (host, pid, concurrency) = (reg.host.clone(), i64::from(reg.pid), i64::from(reg.concurrency));
            self.run(op, &self.sql().register_worker, &[&reg.worker.0, &host, &pid, &queues, &concurrency]).await?;
            Ok(())
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("register_worker"))
    }

    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        async move {
            let op = "deregister_worker";
            let row = first_row(op, self.run(op, &self.sql().deregister_worker, &[&worker.0]).await?)?;
            Ok(count(op, &row, "Deleted")? > 0)
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("deregister_worker"))
    }

    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        async move {
            let op = "list_workers";
            let rows = last_set(self.run(op, &self.sql().list_workers, &[]).await?);
            let bad = |what: &str| Error::new(ErrorKind::Other, format!("{op}: unexpected stored {what}"));
            rows.iter()
                .map(|r| {
                    let queues: &str = req(op, r, "Queues")?;
                    Ok(WorkerProcess {
                        worker: WorkerId(req::<Uuid>(op, r, "WorkerId")?),
                        host: req::<&str>(op, r, "Host")?.to_string(),
                        pid: u32::try_from(req::<i64>(op, r, "Pid")?).map_err(|_| bad("pid"))?,
                        queues: serde_json::from_str(queues).map_err(|_| bad("queues"))?,
                        concurrency: u32::try_from(req::<i64>(op, r, "Concurrency")?)
                            .map_err(|_| bad("concurrency"))?,
                        started_at: req_ts(op, r, "StartedAtUtc")?,
                        last_seen_at: req_ts(op, r, "LastSeenAtUtc")?,
                    })
                })
                .collect::<Result<Vec<_>>>()
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("list_workers"))
    }

    async fn prune_workers(&self, stale_after: std::time::Duration) -> Result<u64> {
        async move {
            let op = "prune_workers";
            let ms = millis("stale_after", stale_after)?;
            let row = first_row(op, self.run(op, &self.sql().prune_workers, &[&ms]).await?)?;
            count(op, &row, "Deleted")
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("prune_workers"))
    }

    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        async move {
            let op = "throughput";
            params.validate()?;
            let ms = millis("window", params.window)?;
            let sets = match &params.queue {
                None => self.run(op, &self.sql().throughput_all, &[&ms]).await?,
                Some(q) => {
                    let name = q.as_str().to_string();
                    self.run(op, &self.sql().throughput_queue, &[&ms, &name]).await?
                }
            };
            last_set(sets)
                .iter()
                .map(|r| {
                    Ok(ThroughputBucket {
                        queue: req::<&str>(op, r, "Queue")?.to_string(),
                        minute: req_ts(op, r, "Minute")?,
                        finished: count(op, r, "Finished")?,
                        failed: count(op, r, "Failed")?,
                        retried: count(op, r, "Retried")?,
                    })
                })
                .collect::<Result<Vec<_>>>()
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("throughput"))
    }

    async fn wakeups(&self) -> Result<Option<chokaq_core::Wakeups>> {
        async move { Ok(None) }.await.map_err(|e: chokaq_core::Error| e.with_operation("wakeups"))
    }

    // ---- Periodic jobs (the schedules table) ----

    async fn register_schedule(&self, def: &chokaq_core::ScheduleDef) -> Result<chokaq_core::ScheduleRow> {
        self.register_schedule_impl(def).await.map_err(|e| e.with_operation("register_schedule"))
    }

    async fn enqueue_tick(&self, req: &chokaq_core::TickRequest) -> Result<chokaq_core::TickOutcome> {
        self.enqueue_tick_impl(req).await.map_err(|e| e.with_operation("enqueue_tick"))
    }

    async fn list_schedules(&self) -> Result<Vec<chokaq_core::ScheduleRow>> {
        self.list_schedules_impl().await.map_err(|e| e.with_operation("list_schedules"))
    }

    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<chokaq_core::ScheduleRow> {
        self.set_schedule_enabled_impl(name, enabled).await.map_err(|e| e.with_operation("set_schedule_enabled"))
    }

    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        self.mark_stale_schedules_impl(group, live).await.map_err(|e| e.with_operation("mark_stale_schedules"))
    }
}

#[cfg(test)]
mod tests {
    use chokaq_core::ErrorKind;

    use super::*;

    /// Issue 16 finding 1: one bad row costs only itself; its neighbours are returned, in
    /// order, and the bad row comes back with its error for the dead-letter move.
    #[test]
    fn one_undecodable_row_never_fails_its_neighbours() {
        let rows = [1, 2, 3, 4];
        let (good, bad) = split_decoded(&rows, |r: &i32| {
            if *r == 2 {
                Err(Error::new(ErrorKind::Other, "claim: Payload: recursion limit exceeded at line 1 column 129"))
            } else {
                Ok(r * 10)
            }
        });
        assert_eq!(good, vec![10, 30, 40]);
        assert_eq!(bad.len(), 1);
        assert_eq!(*bad[0].0, 2);
        let text = undecodable_error_text(&bad[0].1);
        assert!(text.starts_with("chokaq: the stored job cannot be decoded, so it was dead-lettered: "), "{text}");
        assert!(text.contains("recursion limit exceeded"), "{text}");
        // Bounded like every stored error text, cut on a char boundary.
        let huge = Error::new(ErrorKind::Other, "é".repeat(validate::MAX_ERROR_LEN));
        let text = undecodable_error_text(&huge);
        assert!(text.len() <= validate::MAX_ERROR_LEN);
        let all_bad: (Vec<i32>, _) = split_decoded(&rows, |_| Err(Error::new(ErrorKind::Other, "x")));
        assert!(all_bad.0.is_empty());
        assert_eq!(all_bad.1.len(), 4);
    }

    /// A backend whose pool has opened nothing, pointed at a port where nothing listens.
    fn unopened() -> MssqlBackend {
        let cfg = MssqlConfig::new("server=tcp:127.0.0.1,9;user=u;password=p;encrypt=false")
            .unwrap()
            .connect_timeout(std::time::Duration::from_millis(500));
        let sql = Statements::new(&cfg.schema).unwrap();
        let manager = Manager::new(cfg.parts.clone(), "chokaq-test".to_string(), cfg.connect_timeout);
        let pool = Pool::unopened(manager, cfg.statement_timeout);
        let app_name = "chokaq-test".to_string();
        MssqlBackend { inner: Arc::new(Inner { pool, cfg, sql, app_name, rescue_misses: AtomicU32::new(0) }) }
    }

    fn invalid<T: std::fmt::Debug>(r: Result<T>, says: &str) {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains(says), "{e} does not say {says:?}");
    }

    /// The core's checks run before anything reaches the server (core-api: lease lists,
    /// queue controls, fail actions, the enqueue batch's total bytes); a call that passes
    /// them does reach the network (and fails there, nothing listens).
    #[tokio::test]
    async fn the_core_checks_run_before_any_statement() {
        use chokaq_core::{Lease, QueueControl};
        let b = unopened();
        let w = WorkerId(chokaq_core::uuid::Uuid::new_v4());
        let lease = LeaseRef { id: JobId::new(), lease: Lease(1) };
        let many = vec![lease; validate::MAX_LEASES_PER_CALL + 1];
        invalid(b.start(w, &many).await, "start takes at most");
        invalid(b.heartbeat(w, &many).await, "heartbeat takes at most");
        invalid(b.complete(w, &many).await, "complete takes at most");
        invalid(b.release(w, &many).await, "release takes at most");
        let q = QueueName::new("q").unwrap();
        let forever = std::time::Duration::MAX;
        invalid(b.control_queue(&q, QueueControl::SetZombieTimeout(Some(forever))).await, "zombie_timeout");
        let too_many = validate::MAX_QUEUE_WORKERS + 1;
        invalid(b.control_queue(&q, QueueControl::SetMaxWorkers(Some(too_many))).await, "max_workers");
        // Issue 25: a per-key cap or a rate limit out of range, a bad concurrency key.
        let keys = QueueControl::SetKeyMaxWorkers(Some(validate::MAX_QUEUE_WORKERS + 1));
        assert_eq!(b.control_queue(&q, keys).await.unwrap_err().kind(), ErrorKind::InvalidInput);
        let rate = chokaq_core::RateLimit::new(0, std::time::Duration::from_secs(1));
        assert_eq!(
            b.control_queue(&q, QueueControl::SetRateLimit(Some(rate))).await.unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        let long_key = NewJob::build("q", "k").unwrap().concurrency_key("k".repeat(256));
        assert_eq!(b.enqueue_many(vec![long_key]).await.unwrap_err().kind(), ErrorKind::InvalidInput);
        invalid(b.fail(w, lease, FailAction::Snooze { delay: forever }).await, "snooze delay");
        let big = serde_json::Value::String("x".repeat(1_000_000));
        let jobs: Vec<NewJob> = (0..40).map(|_| NewJob::build("q", "k").unwrap().json(big.clone())).collect();
        invalid(b.enqueue_many(jobs).await, "split it");
        // Past the checks, the call goes to the server: not an input error.
        let e = b.complete(w, &[lease]).await.unwrap_err();
        assert_ne!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }

    /// Issue 16 finding 4: a warning every `RESCUE_MISSES_BEFORE_WARNING` calls in a row that
    /// did not run; a run resets the count.
    #[test]
    fn rescue_warns_after_n_calls_in_a_row_that_did_not_run() {
        let misses = AtomicU32::new(0);
        let n = RESCUE_MISSES_BEFORE_WARNING;
        for _ in 1..n {
            assert_eq!(note_rescue(&misses, false), None);
        }
        assert_eq!(note_rescue(&misses, false), Some(n));
        for _ in 1..n {
            assert_eq!(note_rescue(&misses, false), None);
        }
        assert_eq!(note_rescue(&misses, false), Some(2 * n));
        assert_eq!(note_rescue(&misses, true), None);
        assert_eq!(misses.load(Ordering::Relaxed), 0);
        for _ in 1..n {
            assert_eq!(note_rescue(&misses, false), None);
        }
        assert_eq!(note_rescue(&misses, true), None, "a run in between: no warning");
        assert_eq!(note_rescue(&misses, false), None);
    }
}
