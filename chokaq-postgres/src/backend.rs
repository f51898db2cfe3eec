//! [`PgBackend`]: its constructors and `impl Backend`, which forwards: the operations' bodies
//! live by room (the same files in every backend crate, `docs/architecture.md`):
//! [`crate::enqueue`], [`crate::claim`], [`crate::lease`], [`crate::admin`], [`crate::inspect`],
//! [`crate::list`], [`crate::workers`], [`crate::periodic`] and [`crate::migrate`]. Every
//! statement comes from the [`Statements`] set built when the backend is.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chokaq_core::{
    validate, Backend, Batch, BatchId, BatchOutcome, BatchStatus, CancelOutcome, Capabilities, ClaimParams, ClaimedJob,
    Enqueued, EnqueuedBatch, EnqueuedWorkflow, Error, FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobPage,
    JobRecord, LeaseRef, ListJobsParams, NewJob, PurgeParams, QueueControl, QueueName, QueueSettings, ReadDeadline,
    RequeueOutcome, RescueParams, RescueReport, Result, ScheduleDef, ScheduleRow, StatsSnapshot, ThroughputBucket,
    ThroughputParams, TickOutcome, TickRequest, TimestampPrecision, UniqueHold, Wakeups, WorkerId, WorkerProcess,
    WorkerRegistration, Workflow, WorkflowId, WorkflowStatus,
};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::PgPool;

use crate::config::PgConfig;
use crate::enqueue::Target;
use crate::error::{map_sqlx_error, with_retry};
use crate::kept::Kept;
use crate::sql::{self, Statements};
use crate::{admin, batch, claim, inspect, lease, list, listen, migrate, output, workers, workflow};

/// The PostgreSQL backend. Cheap to clone (the pool and statements are shared).
#[derive(Clone)]
pub struct PgBackend {
    pub(crate) pool: PgPool,
    /// The executor every statement outside a transaction runs on: the pool's sessions, kept
    /// checked out between statements (`kept.rs`).
    pub(crate) kept: Kept,
    pub(crate) shared: Arc<Shared>,
    /// The deadline of this view's reads ([`Backend::with_read_deadline`], `bounded.rs`).
    pub(crate) read_deadline: Option<std::time::Instant>,
}

/// What every clone of a backend shares.
pub(crate) struct Shared {
    pub(crate) schema: String,
    /// `chokaq:<schema>`: how `TestSupport::kill_connections` finds this backend's sessions.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) application_name: String,
    /// The NOTIFY channel (`<schema>_jobs`).
    pub(crate) channel: String,
    pub(crate) max_payload_bytes: usize,
    pub(crate) max_output_bytes: usize,
    pub(crate) sql: Statements,
    /// Rescue calls in a row that found the rescue lock held (see [`PgBackend::note_rescue`]).
    pub(crate) rescue_skipped: AtomicU32,
    /// The one LISTEN session of this backend, fanned out to every [`Backend::wakeups`]
    /// stream (the sender of its broadcast; a new session starts when every stream is gone).
    pub(crate) wake: tokio::sync::Mutex<Option<tokio::sync::broadcast::Sender<chokaq_core::Wake>>>,
    /// The wake-ups sent after the commit (`notify.rs`), started by the first enqueue.
    pub(crate) notifier: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedSender<crate::notify::Request>>>,
}

/// After this many rescue calls in a row that found the lock held, a warning is logged (and
/// again every as many calls).
pub const RESCUE_SKIPPED_WARN: u32 = 20;

impl fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBackend")
            .field("schema", &self.shared.schema)
            .field("pool_size", &self.pool.size())
            .field("max_payload_bytes", &self.shared.max_payload_bytes)
            .finish_non_exhaustive()
    }
}

impl PgBackend {
    /// Validates the schema name, then opens a pool (sessions named `chokaq:<schema>`, their
    /// transactions at READ COMMITTED and `jit` off, whatever `default_transaction_isolation`
    /// and `jit` the server, the database or the role sets). Does not migrate: call
    /// [`Backend::migrate`].
    pub async fn connect(config: PgConfig) -> Result<Self> {
        validate::schema_name(&config.schema)?;
        crate::tls::check_url(&config.url)?;
        let opts =
            PgConnectOptions::from_str(&config.url).map_err(|_| Error::invalid("invalid PostgreSQL connection URL"))?;
        Self::connect_with(opts, config).await
    }

    /// [`PgBackend::connect`] with connection options built by the caller (host, user, TLS…);
    /// `config.url` is not used. The sessions are named `chokaq:<schema>`, pinned to READ
    /// COMMITTED and run with `jit = off` (see [`PgBackend::connect`]).
    pub async fn connect_with(opts: PgConnectOptions, config: PgConfig) -> Result<Self> {
        validate::schema_name(&config.schema)?;
        let opts = config.session_options(opts);
        // No ping before each checkout (sqlx's default): it cost every statement a second
        // round trip. A session the server ended answers its next statement with 57P01
        // (retried by `with_retry`); a connection that broke fails that statement as
        // `Unavailable`, like a break during it would, and is discarded.
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections.max(1))
            .acquire_timeout(config.connect_timeout)
            .test_before_acquire(false)
            .connect_with(opts)
            .await
            .map_err(map_sqlx_error)?;
        Self::from_pool(pool, config)
    }

    /// Wraps an existing pool. `config.url` is not used; its other settings are.
    /// The pool's sessions must run their transactions at READ COMMITTED (the server's default):
    /// build them with `PgConnectOptions::options([("default_transaction_isolation", r"read\ committed")])`
    /// (the space escaped), or use [`PgBackend::connect_with`], which does. Add
    /// `("jit", "off")` too: a JIT-compiled claim costs milliseconds per call at a large backlog
    /// (`docs/postgres.md`, "No JIT").
    /// The test support (feature `testing`) kills only sessions whose `application_name` is
    /// `chokaq:<schema>`, as [`PgBackend::connect`] sets it.
    pub fn from_pool(pool: PgPool, config: PgConfig) -> Result<Self> {
        validate::schema_name(&config.schema)?;
        Ok(PgBackend {
            kept: Kept::new(pool.clone()),
            pool,
            read_deadline: None,
            shared: Arc::new(Shared {
                sql: Statements::new(&config.schema),
                application_name: config.application_name(),
                channel: sql::channel(&config.schema),
                schema: config.schema,
                max_payload_bytes: config.max_payload_bytes,
                max_output_bytes: config.max_output_bytes,
                rescue_skipped: AtomicU32::new(0),
                wake: tokio::sync::Mutex::new(None),
                notifier: std::sync::Mutex::new(None),
            }),
        })
    }

    /// The same schema, statements and settings on another pool (test support).
    #[cfg(feature = "testing")]
    pub(crate) fn on_pool(&self, pool: PgPool) -> Self {
        PgBackend { kept: Kept::new(pool.clone()), pool, shared: self.shared.clone(), read_deadline: None }
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema name.
    pub fn schema(&self) -> &str {
        &self.shared.schema
    }

    pub(crate) fn sql(&self) -> &Statements {
        &self.shared.sql
    }

    /// Queues the wake-ups of `queues` for after the commit: now (`xid` None: the enqueue ran
    /// on the pool and has committed), or once the caller's transaction `xid` reads as
    /// committed. Starts the notifier task on first use.
    pub(crate) fn wake_after_commit(&self, queues: Vec<String>, xid: Option<i64>) {
        let mut guard = self.shared.notifier.lock().unwrap();
        let mut req = crate::notify::Request { queues, xid };
        if let Some(tx) = guard.as_ref() {
            match tx.send(req) {
                Ok(()) => return,
                // The task ended (its runtime went away): start another.
                Err(e) => req = e.0,
            }
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let sql =
            crate::notify::Sql { notify: self.sql().notify_queues.clone(), tx_status: self.sql().tx_status.clone() };
        tokio::spawn(crate::notify::run(self.kept.clone(), self.shared.channel.clone(), sql, rx));
        let _ = tx.send(req);
        *guard = Some(tx);
    }
}

/// Building a backend that runs deliberately broken statements (feature `fault-injection`,
/// for the conformance suite's teeth test only).
#[cfg(feature = "fault-injection")]
impl PgBackend {
    /// [`PgBackend::connect`], with the broken statements `faults` names in place of the
    /// correct ones.
    pub async fn connect_with_faults(config: PgConfig, faults: sql::Faults) -> Result<Self> {
        let opts =
            PgConnectOptions::from_str(&config.url).map_err(|_| Error::invalid("invalid PostgreSQL connection URL"))?;
        if faults.claim_repeatable_read {
            // After the pin in `connect_with`: the last setting of a startup option wins.
            let b = Self::connect_with(opts, config).await?;
            let opts =
                (*b.pool.connect_options()).clone().options([("default_transaction_isolation", r"repeatable\ read")]);
            let pool = PgPoolOptions::new()
                .max_connections(b.pool.options().get_max_connections())
                .connect_with(opts)
                .await
                .map_err(map_sqlx_error)?;
            return Ok(PgBackend { kept: Kept::new(pool.clone()), pool, shared: b.shared, read_deadline: None }
                .with_faults(faults));
        }
        Ok(Self::connect_with(opts, config).await?.with_faults(faults))
    }

    /// This backend's pool and settings with a statement set in which the broken statements
    /// `faults` names replace the correct ones (`Faults::default()`: the correct set).
    pub fn with_faults(self, faults: sql::Faults) -> Self {
        let sql = Statements::with_faults(&self.shared.schema, faults);
        let shared = Shared {
            sql,
            schema: self.shared.schema.clone(),
            application_name: self.shared.application_name.clone(),
            channel: self.shared.channel.clone(),
            max_payload_bytes: self.shared.max_payload_bytes,
            max_output_bytes: self.shared.max_output_bytes,
            rescue_skipped: AtomicU32::new(0),
            wake: tokio::sync::Mutex::new(None),
            notifier: std::sync::Mutex::new(None),
        };
        PgBackend { pool: self.pool, kept: self.kept, shared: Arc::new(shared), read_deadline: self.read_deadline }
    }
}

/// Names the operation on an error: every method of `impl Backend` below forwards through it.
macro_rules! op {
    ($name:literal, $body:expr) => {
        async move { $body }.await.map_err(|e: chokaq_core::Error| e.with_operation($name))
    };
}

#[async_trait]
impl Backend for PgBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::minimal(TimestampPrecision::Microsecond)
            .with_kill_connections(true)
            .with_multi_process(true)
            .with_read_deadline(ReadDeadline::Server)
            .with_workflows(true)
            .with_batches(true)
    }

    /// The same pool and sessions; the reads run through `bounded.rs`.
    fn with_read_deadline(&self, deadline: std::time::Instant) -> Option<Arc<dyn Backend>> {
        Some(Arc::new(PgBackend { read_deadline: Some(deadline), ..self.clone() }))
    }

    async fn migrate(&self) -> Result<()> {
        op!("migrate", with_retry(|| migrate::migrate(&self.pool, self.sql(), &self.shared.schema)).await)
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        async move {
            let (rows, slots) = self.prepare(jobs)?;
            if rows.is_empty() {
                return Ok(Vec::new());
            }
            self.enqueue_on(Target::Pool(&self.kept), &rows, &slots).await
        }
        .await
        .map_err(|e: Error| e.with_operation("enqueue_many"))
    }

    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        op!("claim", claim::claim(self, req).await)
    }

    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        op!("complete_and_claim", claim::complete_and_claim(self, worker, leases, req).await)
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
        op!("record_output", output::record_output(self, worker, lease, value).await)
    }

    async fn get_output(&self, id: JobId) -> Result<Option<serde_json::Value>> {
        op!("get_output", output::get_output(self, id).await)
    }

    async fn enqueue_workflow(&self, wf: &Workflow) -> Result<EnqueuedWorkflow> {
        op!("enqueue_workflow", workflow::enqueue(self, Target::Pool(&self.kept), wf).await)
    }

    async fn get_workflow(&self, id: WorkflowId) -> Result<Option<WorkflowStatus>> {
        op!("get_workflow", workflow::get(self, id).await)
    }

    async fn workflow_of(&self, job: JobId) -> Result<Option<WorkflowId>> {
        op!("workflow_of", workflow::workflow_of(self, job).await)
    }

    async fn cancel_workflow(&self, id: WorkflowId) -> Result<u64> {
        op!("cancel_workflow", workflow::cancel(self, id).await)
    }

    async fn enqueue_batch(&self, b: &Batch) -> Result<EnqueuedBatch> {
        op!("enqueue_batch", batch::enqueue(self, Target::Pool(&self.kept), b).await)
    }

    async fn add_to_batch(&self, id: BatchId, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        op!("add_to_batch", batch::add(self, id, jobs).await)
    }

    async fn get_batch(&self, id: BatchId) -> Result<Option<BatchStatus>> {
        op!("get_batch", batch::get(self, id).await)
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

    /// Deletes in bounded batches (`DELETE … WHERE id IN (SELECT id … LIMIT n FOR UPDATE SKIP
    /// LOCKED)`), each its own short transaction, until a batch comes back short or
    /// `max_batches` ran. Concurrent purges skip each other's rows instead of waiting.
    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        op!("purge", self.purge_batches(req, false).await)
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        op!("stats", inspect::stats(self).await)
    }

    async fn stats_estimated(&self) -> Result<StatsSnapshot> {
        op!("stats_estimated", inspect::stats_estimated(self).await)
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
        op!("register_worker", workers::register_worker(self, reg).await)
    }

    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        op!("deregister_worker", workers::deregister_worker(self, worker).await)
    }

    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        op!("list_workers", workers::list_workers(self).await)
    }

    async fn prune_workers(&self, stale_after: Duration) -> Result<u64> {
        op!("prune_workers", workers::prune_workers(self, stale_after).await)
    }

    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        op!("throughput", workers::throughput(self, params).await)
    }

    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        async move {
            // One LISTEN session per backend, whatever the number of workers on it: every
            // stream subscribes to the same broadcast.
            let mut wake = self.shared.wake.lock().await;
            if let Some(tx) = wake.as_ref().filter(|tx| tx.receiver_count() > 0) {
                return Ok(Some(Wakeups::new(tx.subscribe())));
            }
            let channel = self.shared.channel.clone();
            // The listener's own connection, outside the pool (same options: the sessions'
            // name, isolation pin and timeouts), so it never takes a connection the claims need:
            // a pool of one serves them beside it.
            let own = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(self.pool.options().get_acquire_timeout())
                .test_before_acquire(false)
                .connect_lazy_with((*self.pool.connect_options()).clone());
            let listener = with_retry(|| async {
                let mut listener = PgListener::connect_with(&own).await?;
                listener.listen(&channel).await?;
                Ok(listener)
            })
            .await?;
            let (tx, rx) = tokio::sync::broadcast::channel(1024);
            tokio::spawn(listen::run(self.pool.clone(), own, channel, tx.clone(), listener));
            *wake = Some(tx);
            Ok(Some(Wakeups::new(rx)))
        }
        .await
        .map_err(|e: Error| e.with_operation("wakeups"))
    }

    // ---- Periodic jobs (the schedules table) ----

    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        op!("register_schedule", self.register_schedule_impl(def).await)
    }

    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        op!("enqueue_tick", self.enqueue_tick_impl(req).await)
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        op!("list_schedules", self.list_schedules_impl().await)
    }

    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        op!("set_schedule_enabled", self.set_schedule_enabled_impl(name, enabled).await)
    }

    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        op!("mark_stale_schedules", self.mark_stale_schedules_impl(group, live).await)
    }
}
