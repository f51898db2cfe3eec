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
    QueueControl, QueueName, QueueSettings, ReadDeadline, RequeueOutcome, RescueParams, RescueReport, Result,
    ScheduleDef, ScheduleRow, StatsSnapshot, ThroughputBucket, ThroughputParams, TickOutcome, TickRequest,
    TimestampPrecision, UniqueHold, Wake, Wakeups, WorkerId, WorkerProcess, WorkerRegistration,
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
    /// A change of a rate limit's kind (queue-wide / per key) keeps the starts log's numbers
    /// (issue 40, L7): the new buckets count from ordinals of the old ones.
    pub rate_kind_change_keeps_numbers: bool,
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
    pub(crate) max_output_bytes: usize,
    pub(crate) wake: broadcast::Sender<Wake>,
    pub(crate) faults: Faults,
    /// The deadline of this view's reads ([`Backend::with_read_deadline`], `bounded.rs`).
    pub(crate) read_deadline: Option<std::time::Instant>,
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
            max_output_bytes: cfg.max_output_bytes,
            wake,
            faults: Faults::default(),
            read_deadline: None,
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

/// Names the operation on an error: every method of `impl Backend` below forwards through it.
macro_rules! op {
    ($name:literal, $body:expr) => {
        async move { $body }.await.map_err(|e: chokaq_core::Error| e.with_operation($name))
    };
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::minimal(TimestampPrecision::Microsecond)
            .with_kill_connections(false)
            .with_multi_process(true)
            .with_read_deadline(ReadDeadline::Server)
    }

    /// The same pools; the reads run through `bounded.rs`.
    fn with_read_deadline(&self, deadline: std::time::Instant) -> Option<Arc<dyn Backend>> {
        Some(Arc::new(SqliteBackend { read_deadline: Some(deadline), ..self.clone() }))
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
        op!("enqueue_many", enqueue::enqueue_many(self, jobs).await)
    }

    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        op!("claim", claim::claim(self, req).await)
    }

    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        op!("start", lease::start(self, worker, leases).await)
    }

    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        op!("heartbeat", lease::heartbeat(self, worker, leases).await)
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        op!("complete", lease::complete(self, worker, leases).await)
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        op!("fail", lease::fail(self, worker, lease, outcome).await)
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        op!("release", lease::release(self, worker, leases).await)
    }

    async fn record_output(&self, worker: WorkerId, lease: LeaseRef, value: &serde_json::Value) -> Result<Fenced> {
        op!("record_output", crate::output::record_output(self, worker, lease, value).await)
    }

    async fn get_output(&self, id: JobId) -> Result<Option<serde_json::Value>> {
        op!("get_output", crate::output::get_output(self, id).await)
    }

    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        op!("rescue", admin::rescue(self, params).await)
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        op!("cancel", admin::cancel(self, id).await)
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        op!("control_queue", admin::control_queue(self, queue, control).await)
    }

    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        op!("queue_settings", inspect::queue_settings(self, queue).await)
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        op!("requeue_dead", admin::requeue_dead(self, id).await)
    }

    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        op!("purge", admin::purge(self, req).await)
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        op!("stats", inspect::stats(self).await)
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        op!("get_job", inspect::get_job(self, id).await)
    }

    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        op!("list_jobs", list::list_jobs(self, filter).await)
    }

    async fn unique_of(&self, id: JobId) -> Result<Option<UniqueHold>> {
        op!("unique_of", crate::unique::unique_of(self, id).await)
    }

    async fn prune_uniques(&self, limit: u32) -> Result<u64> {
        op!("prune_uniques", crate::unique::prune_uniques(self, limit).await)
    }

    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        op!("register_worker", workers::register(self, reg).await)
    }

    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        op!("deregister_worker", workers::deregister(self, worker).await)
    }

    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        op!("list_workers", workers::list(self).await)
    }

    async fn prune_workers(&self, stale_after: std::time::Duration) -> Result<u64> {
        op!("prune_workers", workers::prune(self, stale_after).await)
    }

    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        op!("throughput", workers::throughput(self, params).await)
    }

    /// In-process wake-ups: fed by this process's own enqueues, releases and rescues (other
    /// processes on the same file are not heard; poll for those).
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        op!("wakeups", Ok(Some(Wakeups::new(self.wake.subscribe()))))
    }

    // ---- Periodic jobs (the schedules table) ----

    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        op!("register_schedule", periodic::register(self, def).await)
    }

    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        op!("enqueue_tick", periodic::enqueue_tick(self, req).await)
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        op!("list_schedules", periodic::list(self).await)
    }

    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        op!("set_schedule_enabled", periodic::set_enabled(self, name, enabled).await)
    }

    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        op!("mark_stale_schedules", periodic::mark_stale(self, group, live).await)
    }
}
