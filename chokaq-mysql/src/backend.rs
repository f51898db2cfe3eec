//! [`MysqlBackend`]: the pools, the transactions, the retry loop, and `impl Backend`.
//!
//! `impl Backend` only forwards, each operation naming itself on its errors: the bodies live by
//! room (the same files in every backend crate, `docs/architecture.md`): [`crate::enqueue`],
//! [`crate::claim`], [`crate::lease`], [`crate::admin`], [`crate::inspect`], [`crate::list`],
//! [`crate::workers`], [`crate::periodic`] and [`crate::migrate`]; every statement they run
//! comes from [`crate::sql::Statements`], built once here at connect.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chokaq_core::{
    Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, DeadReason, Enqueued, Error,
    ErrorKind, FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, LeaseRef, ListJobsParams,
    NewJob, PurgeParams, QueueControl, QueueName, QueueSettings, ReadDeadline, RequeueOutcome, RescueParams,
    RescueReport, Result, ScheduleDef, ScheduleRow, StatsSnapshot, ThroughputBucket, ThroughputParams, TickOutcome,
    TickRequest, TimestampPrecision, UniqueHold, Wakeups, WorkerId, WorkerProcess, WorkerRegistration,
};
use rand::Rng;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{MySql, MySqlConnection};

use crate::config::MysqlConfig;
use crate::error::{map_err, retryable_code, LockRetries, LockRetryCounts, Path};
use crate::rows::{self, clean_error};
use crate::sql::Statements;
use crate::{admin, claim, enqueue, inspect, lease, list, migrate, periodic, workers};

/// A transaction on the main pool.
pub(crate) type Tx = sqlx::Transaction<'static, MySql>;

/// Tries of a transaction that met a deadlock or lock wait timeout.
const MAX_TRIES: u32 = 5;

/// Deliberately broken statements for the conformance suite's teeth test (exported with the
/// feature `fault-injection`; every switch is off otherwise). Never in production.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// The claim reads the due rows without locking them, then updates them by id: two
    /// claimers can take one job.
    pub claim_read_then_update: bool,
    /// Moves (complete, dead-letter) commit the copy, then delete the hot row in a second
    /// transaction: a reader can see the job in two tables, a killed session leaves it there.
    pub move_two_transactions: bool,
    /// A keyed queue's claim counts the running jobs per key before it takes the control row's
    /// lock (check-then-act), 5 ms before it: racing claimers all see a key under its cap and
    /// all take it.
    pub key_check_before_lock: bool,
    /// The rate window off by one: a bucket may take while `started <= jobs`, not `< jobs`
    /// (one start too many per window).
    pub rate_window_off_by_one: bool,
    /// A change of a rate limit's kind (queue-wide / per key) keeps the starts log's numbers
    /// (issue 40, L7): the new buckets count from ordinals of the old ones.
    pub rate_kind_change_keeps_numbers: bool,
}

/// The MariaDB / MySQL backend. Cheap to clone; clones share the pools and the counters.
#[derive(Clone)]
pub struct MysqlBackend {
    /// Every transaction.
    pub(crate) pool: MySqlPool,
    /// The lease counter's autocommitted reservations (never waits for the main pool).
    pub(crate) lease_pool: MySqlPool,
    /// Every statement, rendered once.
    pub(crate) sql: Arc<Statements>,
    pub(crate) max_payload_bytes: usize,
    pub(crate) max_output_bytes: usize,
    pub(crate) retries: Arc<LockRetries>,
    /// The server's ids of the sessions this backend opened (`kill_connections`).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) sessions: Arc<Mutex<HashSet<u64>>>,
    /// How to open a session outside the pools (`kill_connections`; the kill of a dropped
    /// bounded read, `bounded.rs`).
    pub(crate) options: MySqlConnectOptions,
    pub(crate) schema: String,
    pub(crate) faults: Faults,
    /// The deadline of this view's reads ([`Backend::with_read_deadline`], `bounded.rs`).
    pub(crate) read_deadline: Option<std::time::Instant>,
}

impl fmt::Debug for MysqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlBackend")
            .field("url", &"<redacted>")
            .field("schema", &self.schema)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .finish_non_exhaustive()
    }
}

impl MysqlBackend {
    /// Connects the pools (every session pinned to READ COMMITTED). Call
    /// [`chokaq_core::Backend::migrate`] before use: it creates the schema's database.
    pub async fn connect(cfg: MysqlConfig) -> Result<Self> {
        let options = cfg.connect_options()?;
        let sql = Arc::new(Statements::new(&cfg.schema)?);
        probe(&options, cfg.acquire_timeout).await?;
        let sessions: Arc<Mutex<HashSet<u64>>> = Arc::default();
        let pool = pool_options(&sql, &sessions, cfg.max_connections, cfg.acquire_timeout)
            .connect_with(options.clone())
            .await
            .map_err(map_err)?;
        let lease_pool = pool_options(&sql, &sessions, 2, cfg.acquire_timeout)
            .connect_with(options.clone())
            .await
            .map_err(map_err)?;
        Ok(MysqlBackend {
            pool,
            lease_pool,
            sql,
            max_payload_bytes: cfg.max_payload_bytes,
            max_output_bytes: cfg.max_output_bytes,
            retries: Arc::default(),
            sessions,
            options,
            schema: cfg.schema,
            faults: Faults::default(),
            read_deadline: None,
        })
    }

    /// The same backend with deliberately broken statements (teeth tests only).
    #[cfg(feature = "fault-injection")]
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// The schema (database) holding the job tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Deadlocks (1213) and lock wait timeouts (1205) this backend met and retried, per path.
    pub fn lock_retries(&self) -> LockRetryCounts {
        self.retries.snapshot()
    }

    /// Closes the pools.
    pub async fn close(&self) {
        self.pool.close().await;
        self.lease_pool.close().await;
    }

    /// Begins a write transaction (READ COMMITTED, pinned per session).
    pub(crate) async fn begin(&self) -> Result<Tx> {
        self.pool.begin().await.map_err(map_err)
    }

    /// Begins a read-only transaction on one snapshot (REPEATABLE READ for this transaction:
    /// a plain read there takes no locks and sees one consistent state), on the connection of
    /// a read (`bounded::ReadConn`).
    pub(crate) async fn begin_read_on<'c>(
        &self,
        conn: &'c mut MySqlConnection,
    ) -> Result<sqlx::Transaction<'c, MySql>> {
        sqlx::Connection::begin_with(conn, self.sql.read_snapshot.clone()).await.map_err(map_err)
    }

    /// The database clock, read on `conn`.
    pub(crate) async fn now(&self, conn: &mut MySqlConnection) -> Result<i64> {
        rows::db_now(conn, &self.sql.db_now).await
    }

    /// Runs `f` (one whole transaction) again while it fails with a deadlock or a lock wait
    /// timeout, at most [`MAX_TRIES`] times with a jittered back-off of 5 to 100 ms, counting
    /// each. InnoDB rolled the failed transaction (or statement) back; the dropped transaction
    /// rolls the rest back, so running it again runs it once.
    pub(crate) async fn retrying<T, F, Fut>(&self, path: Path, mut f: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut tries = 0;
        loop {
            match f().await {
                Err(e) => {
                    let Some(code) = retryable_code(&e) else { return Err(e) };
                    self.retries.count(path, code);
                    tries += 1;
                    if tries >= MAX_TRIES {
                        return Err(e);
                    }
                    tracing::debug!(code, tries, ?path, "mysql: transaction retried");
                    let ms = rand::thread_rng().gen_range(5..=100u64.min(5 << tries));
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                ok => return ok,
            }
        }
    }

    /// A queue's control row, or the defaults.
    pub(crate) async fn read_settings(&self, conn: &mut MySqlConnection, queue: &QueueName) -> Result<QueueSettings> {
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

    /// Moves one hot row (locked by the caller) to the dead-letter table.
    pub(crate) async fn dead_letter(
        &self,
        tx: &mut Tx,
        now: i64,
        id: JobId,
        reason: DeadReason,
        error: Option<&str>,
    ) -> Result<bool> {
        let moved = sqlx::query(&self.sql.dead_letter)
            .bind(now)
            .bind(error.map(clean_error))
            .bind(now)
            .bind(reason.as_str())
            .bind(id.0)
            .execute(&mut **tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        if moved == 0 {
            return Ok(false);
        }
        self.delete_moved(tx, id).await?;
        Ok(true)
    }

    /// Deletes the hot row of a job just copied to another table, in the same transaction
    /// (with the fault `move_two_transactions`: commits the copy first).
    pub(crate) async fn delete_moved(&self, tx: &mut Tx, id: JobId) -> Result<()> {
        if self.faults.move_two_transactions {
            // Broken on purpose: the copy is committed before the delete runs.
            sqlx::query("COMMIT").execute(&mut **tx).await.map_err(map_err)?;
            sqlx::query("BEGIN").execute(&mut **tx).await.map_err(map_err)?;
        }
        sqlx::query(&self.sql.delete_hot).bind(id.0).execute(&mut **tx).await.map_err(map_err)?;
        Ok(())
    }
}

/// One plain connection first, so an unreachable server, a refused login or a missing
/// database fails at once with the server's reason (a pool would only report that it timed
/// out). The driver's messages name no password.
async fn probe(options: &MySqlConnectOptions, timeout: Duration) -> Result<()> {
    use sqlx::Connection;
    let unavailable = |why: String| Error::new(ErrorKind::Unavailable, format!("mysql: cannot connect: {why}"));
    // The caller's timeout as it is (it was capped at 10 s, and the message always said 10 s).
    match tokio::time::timeout(timeout, MySqlConnection::connect_with(options)).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => {
            // A database or user the server does not have, or a refused login: the URL is
            // wrong, and trying again cannot fix it (the PostgreSQL facade says the same).
            let what = match crate::error::mysql_code(&e) {
                Some(1049) => Some("the database the URL names does not exist"),
                Some(1044 | 1045) => Some("the server refused the login (the user or the password of the URL)"),
                _ => None,
            };
            if let (Some(what), sqlx::Error::Database(db)) = (what, &e) {
                let code = crate::error::mysql_code(&e).unwrap_or_default();
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("mysql: {what} (mysql error {code}: {})", db.message()),
                ));
            }
            let e = map_err(e);
            Err(if e.kind() == ErrorKind::InvalidInput { e } else { unavailable(e.message().to_string()) })
        }
        Err(_) => Err(unavailable(format!("no answer within {}", seconds(timeout)))),
    }
}

/// `12 s`, `1.5 s`, `250 ms`.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Pool options whose every session is pinned to READ COMMITTED and recorded by its id.
fn pool_options(
    sql: &Arc<Statements>,
    sessions: &Arc<Mutex<HashSet<u64>>>,
    max: u32,
    acquire_timeout: Duration,
) -> MySqlPoolOptions {
    let (sql, sessions) = (sql.clone(), sessions.clone());
    MySqlPoolOptions::new().max_connections(max).min_connections(0).acquire_timeout(acquire_timeout).after_connect(
        move |conn, _meta| {
            let (sql, sessions) = (sql.clone(), sessions.clone());
            Box::pin(async move {
                sqlx::query(&sql.session_isolation).execute(&mut *conn).await?;
                let id: u64 = sqlx::query_scalar(&sql.connection_id).fetch_one(&mut *conn).await?;
                sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
                Ok(())
            })
        },
    )
}

/// Commits a transaction.
pub(crate) async fn commit(tx: Tx) -> Result<()> {
    tx.commit().await.map_err(map_err)
}

/// Names the operation on an error.
macro_rules! op {
    ($name:literal, $body:expr) => {
        async move { $body }.await.map_err(|e: chokaq_core::Error| e.with_operation($name))
    };
}

#[async_trait]
impl Backend for MysqlBackend {
    fn name(&self) -> &'static str {
        "mysql"
    }

    /// Microsecond times; several processes on one database; sessions can be killed
    /// (`KILL CONNECTION`). No wake-ups: MySQL has no LISTEN/NOTIFY, workers poll.
    fn capabilities(&self) -> Capabilities {
        Capabilities::minimal(TimestampPrecision::Microsecond)
            .with_kill_connections(true)
            .with_multi_process(true)
            .with_read_deadline(ReadDeadline::Server)
    }

    /// The same pools; the reads run through `bounded.rs`.
    fn with_read_deadline(&self, deadline: std::time::Instant) -> Option<Arc<dyn Backend>> {
        Some(Arc::new(MysqlBackend { read_deadline: Some(deadline), ..self.clone() }))
    }

    async fn migrate(&self) -> Result<()> {
        op!("migrate", {
            let mut conn = self.pool.acquire().await.map_err(crate::error::map_err)?;
            let now = self.now(&mut conn).await?;
            migrate::run(&mut conn, &self.sql, now).await
        })
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        op!("enqueue_many", enqueue::enqueue_many(self, jobs).await)
    }

    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        op!("claim", claim::claim(self, req).await)
    }

    /// The completions and the claim in one transaction (`claim::complete_and_claim`).
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

    /// None: MySQL and MariaDB push no notifications; workers poll (with back-off).
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        op!("wakeups", Ok(None))
    }

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
