//! `MssqlBackend`: the struct, its constructors and `impl Backend`. Statements come from
//! `sql/` (rendered once at connect), values are encoded and rows decoded in `rows/`, and
//! every batch goes through [`Pool::run`](crate::pool::Pool::run); this file binds and runs.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use chokaq_core::uuid::Uuid;
use chokaq_core::{
    validate, Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimMode, ClaimParams, ClaimedJob, Enqueued, Error,
    ErrorKind, FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, JobStatus, JobTable,
    LeaseRef, ListJobsParams, NewJob, PurgeParams, PurgeTarget, QueueControl, QueueName, QueueSettings, RequeueOutcome,
    RescueParams, RescueReport, Result, StatsSnapshot, TimestampPrecision, WorkerId, MAX_ENQUEUE_BATCH,
};
use tiberius::{Row, ToSql};

use crate::config::MssqlConfig;
use crate::error::{connect_error, map_error, timeout};
use crate::migrate;
use crate::pool::{Manager, Pool};
use crate::rows::{
    check_ts, control_params, count, dead_reason_text, decode_cancel, decode_claimed, decode_enqueued, decode_fail,
    decode_queue, decode_record, decode_rescue, decode_stats, delay_parts, fail_action, first_row, heartbeat_report,
    id_bytes, ids_of, job_json, last_set, leases_json, millis, outcome, req,
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
        Ok(MssqlBackend { inner: Arc::new(Inner { pool, cfg, sql, app_name }) })
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
        migrate::run(self).await
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
        decode_enqueued(op, &rows, jobs.len())
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
        heartbeat_report(op, leases, &rows)
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        if leases.is_empty() {
            return Ok(BatchOutcome::default());
        }
        let json = leases_json(leases);
        let rows = last_set(self.run("complete", &self.sql().complete, &[&json, &worker.0]).await?);
        Ok(outcome(leases, &ids_of("complete", &rows)?))
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, action: FailAction) -> Result<Fenced<FailOutcome>> {
        let op = "fail";
        let (code, delay, error, reason) = fail_action(action);
        let (secs, nanos) = delay_parts("retry delay", delay)?;
        let error = error.map(|e| validate::truncate(&e, validate::MAX_ERROR_LEN).to_string());
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
        decode_rescue(op, &row)
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        let op = "cancel";
        let bytes = id_bytes(id);
        let row = first_row(op, self.run(op, &self.sql().cancel, &[&bytes]).await?)?;
        decode_cancel(op, &row)
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        let op = "control_queue";
        let (code, max, zombie_ms, policy) = control_params(control)?;
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
        decode_stats(op, sets)
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
