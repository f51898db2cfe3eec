//! [`SqliteBackend`]: the pools, the transactions, and `impl Backend`.
//!
//! `impl Backend` only forwards: the operations' bodies live by room (the same files in every
//! backend crate, `docs/architecture.md`): [`crate::enqueue`], [`crate::claim`],
//! [`crate::lease`], [`crate::admin`], [`crate::inspect`], [`crate::list`], [`crate::workers`],
//! [`crate::periodic`] and [`crate::migrate`]; every statement they run comes from
//! [`crate::sql::Statements`], built once here at connect.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use chokaq_core::{
    Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, DeadReason, Enqueued, FailAction,
    FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, LeaseRef, ListJobsParams, NewJob, PurgeParams,
    QueueControl, QueueName, QueueSettings, RequeueOutcome, RescueParams, RescueReport, Result, ScheduleDef,
    ScheduleRow, StatsSnapshot, ThroughputBucket, ThroughputParams, TickOutcome, TickRequest, TimestampPrecision, Wake,
    Wakeups, WorkerId, WorkerProcess, WorkerRegistration,
};
use sqlx::sqlite::{SqliteConnection, SqlitePool, SqlitePoolOptions};
use sqlx::Sqlite;
use tokio::sync::broadcast;

use crate::config::SqliteConfig;
use crate::error::map_err;
use crate::rows::{self, clean_error};
use crate::sql::{Statements, MAIN};
use crate::{admin, claim, enqueue, inspect, lease, list, migrate, periodic, workers};

/// A transaction on one of the pools.
pub(crate) type Tx = sqlx::Transaction<'static, Sqlite>;

/// Deliberately broken claims for the conformance suite's teeth test (`tests/teeth.rs`;
/// settable with the feature `fault-injection`, every switch is off otherwise). Never in
/// production. Each is a real bug shape of keyed caps and rate limits (issue 25).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Check-then-act: the claim counts each key's running jobs in a read snapshot *before*
    /// it takes the write lock, and claims under the lock on that count without counting
    /// again: two claimers that both read "a has 0 running" each take the key's full cap.
    pub key_check_then_act: bool,
    /// The claim ignores the per-key cap (treats every queue as having none).
    pub key_ignored: bool,
    /// Frees a key slot twice (the Solid Queue semaphore bug): instead of counting the key's
    /// Fetched + Processing rows, the claim reads a slot ledger (`fault_key_slots`: queue, key,
    /// used) that it increments per job taken and that every outcome call reported done
    /// decrements, a repeated complete or fail (its first reply lost, reported done again)
    /// included, so a repeat frees the slot a second time and the key runs over its cap.
    pub key_slot_double_free: bool,
    /// The rate window off by one: a bucket may take while its count of starts in the window
    /// is `<= jobs` instead of `< jobs`, so each window lets `jobs + 1` starts through.
    pub rate_off_by_one: bool,
}

/// The SQLite backend. Cheap to clone; clones share the pools.
#[derive(Clone)]
pub struct SqliteBackend {
    /// One connection: every write, in `BEGIN IMMEDIATE` transactions.
    pub(crate) writer: SqlitePool,
    /// Read-only connections: stats, listings, settings.
    pub(crate) reader: SqlitePool,
    /// Every statement, rendered once.
    pub(crate) sql: Arc<Statements>,
    pub(crate) max_payload_bytes: usize,
    pub(crate) wake: broadcast::Sender<Wake>,
    pub(crate) faults: Faults,
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
    /// Opens (creating if missing, owner-only: [`SqliteConfig::create_if_missing`]) the
    /// database file in WAL mode with a busy timeout: one writer connection and a small pool
    /// of readers. Call [`Backend::migrate`] before use.
    pub async fn connect(cfg: SqliteConfig) -> Result<Self> {
        let opts = cfg.connect_options()?;
        crate::file::prepare(opts.get_filename(), cfg.create_if_missing)?;
        let sql = Arc::new(Statements::new(MAIN)?);
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
        Ok(SqliteBackend {
            writer,
            reader,
            sql,
            max_payload_bytes: cfg.max_payload_bytes,
            wake,
            faults: Faults::default(),
        })
    }

    /// The same backend with deliberately broken claims (teeth tests only).
    #[cfg(feature = "fault-injection")]
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Closes the pools (waits for connections in use to come back).
    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }

    /// Starts a write transaction with `BEGIN IMMEDIATE` (the write lock is taken first).
    /// Waiting for the lock is SQLite's own busy handler, up to the busy timeout: the one
    /// retry of this backend (`docs/contract.md`, Database rules). A lock still held after it
    /// comes back as `Transient`, for the caller's layer to decide.
    pub(crate) async fn begin_write(&self) -> Result<Tx> {
        self.writer.begin_with(self.sql.begin_immediate.clone()).await.map_err(map_err)
    }

    /// Starts a read transaction (a consistent WAL snapshot from its first read).
    pub(crate) async fn begin_read(&self) -> Result<Tx> {
        self.reader.begin().await.map_err(map_err)
    }

    /// Wakes this process's listeners of each queue once.
    pub(crate) fn notify(&self, queues: impl IntoIterator<Item = String>) {
        let mut seen = HashSet::new();
        for q in queues {
            if seen.insert(q.clone()) {
                // No receiver is fine: nobody is waiting.
                let _ = self.wake.send(Wake::Queue(q));
            }
        }
    }

    /// A queue's control row, or the defaults.
    pub(crate) async fn read_settings(&self, conn: &mut SqliteConnection, queue: &QueueName) -> Result<QueueSettings> {
        let row = sqlx::query(&self.sql.queue_settings)
            .bind(queue.as_str())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        match row {
            Some(row) => rows::settings(&row, queue),
            None => Ok(QueueSettings::default_for(queue.clone())),
        }
    }

    /// Moves one hot row to the dead-letter table (the caller checked it exists).
    pub(crate) async fn dead_letter(
        &self,
        conn: &mut SqliteConnection,
        now: i64,
        id: JobId,
        reason: DeadReason,
        error: Option<&str>,
    ) -> Result<bool> {
        let moved = sqlx::query(&self.sql.dead_letter)
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
        sqlx::query(&self.sql.delete_hot).bind(id.0).execute(&mut *conn).await.map_err(map_err)?;
        Ok(true)
    }
}

/// Commits a transaction.
pub(crate) async fn commit(tx: Tx) -> Result<()> {
    tx.commit().await.map_err(map_err)
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
        async move {
            let mut tx = self.begin_write().await?;
            migrate::run(&mut tx, &self.sql).await?;
            commit(tx).await
        }
        .await
        .map_err(|e: chokaq_core::Error| e.with_operation("migrate"))
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        async move { enqueue::enqueue_many(self, jobs).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("enqueue_many"))
    }

    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        async move { claim::claim(self, req).await }.await.map_err(|e: chokaq_core::Error| e.with_operation("claim"))
    }

    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move { lease::start(self, worker, leases).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("start"))
    }

    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        async move { lease::heartbeat(self, worker, leases).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("heartbeat"))
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move { lease::complete(self, worker, leases).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("complete"))
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        async move { lease::fail(self, worker, lease, outcome).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("fail"))
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move { lease::release(self, worker, leases).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("release"))
    }

    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        async move { admin::rescue(self, params).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("rescue"))
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        async move { admin::cancel(self, id).await }.await.map_err(|e: chokaq_core::Error| e.with_operation("cancel"))
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        async move { admin::control_queue(self, queue, control).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("control_queue"))
    }

    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        async move { inspect::queue_settings(self, queue).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("queue_settings"))
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        async move { admin::requeue_dead(self, id).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("requeue_dead"))
    }

    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        async move { admin::purge(self, req).await }.await.map_err(|e: chokaq_core::Error| e.with_operation("purge"))
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        async move { inspect::stats(self).await }.await.map_err(|e: chokaq_core::Error| e.with_operation("stats"))
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        async move { inspect::get_job(self, id).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("get_job"))
    }

    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        async move { list::list_jobs(self, filter).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("list_jobs"))
    }

    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        async move { workers::register(self, reg).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("register_worker"))
    }

    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        async move { workers::deregister(self, worker).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("deregister_worker"))
    }

    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        async move { workers::list(self).await }.await.map_err(|e: chokaq_core::Error| e.with_operation("list_workers"))
    }

    async fn prune_workers(&self, stale_after: std::time::Duration) -> Result<u64> {
        async move { workers::prune(self, stale_after).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("prune_workers"))
    }

    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        async move { workers::throughput(self, params).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("throughput"))
    }

    /// In-process wake-ups: fed by this process's own enqueues, releases and rescues (other
    /// processes on the same file are not heard; poll for those).
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        async move { Ok(Some(Wakeups::new(self.wake.subscribe()))) }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("wakeups"))
    }

    // ---- Periodic jobs (the schedules table) ----

    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        async move { periodic::register(self, def).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("register_schedule"))
    }

    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        async move { periodic::enqueue_tick(self, req).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("enqueue_tick"))
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        async move { periodic::list(self).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("list_schedules"))
    }

    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        async move { periodic::set_enabled(self, name, enabled).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("set_schedule_enabled"))
    }

    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        async move { periodic::mark_stale(self, group, live).await }
            .await
            .map_err(|e: chokaq_core::Error| e.with_operation("mark_stale_schedules"))
    }
}
