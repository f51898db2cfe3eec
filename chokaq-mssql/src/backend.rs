//! `MssqlBackend`: the struct, its constructors and `impl Backend`, which forwards: the
//! operations' bodies live by room (the same files in every backend crate,
//! `docs/architecture.md`): [`crate::enqueue`], [`crate::claim`], [`crate::lease`],
//! [`crate::admin`], [`crate::inspect`], [`crate::list`], [`crate::workers`],
//! [`crate::periodic`] and [`crate::migrate`]. Statements come from `sql/` (rendered once at
//! connect), values are encoded and rows decoded in `rows/`, and every batch goes through
//! [`Pool::run`](crate::pool::Pool::run); the room files bind and run.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use chokaq_core::uuid::Uuid;
use chokaq_core::{
    validate, Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, Enqueued, Error, FailAction,
    FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, LeaseRef, ListJobsParams, NewJob, PurgeParams,
    QueueControl, QueueName, QueueSettings, ReadDeadline, RequeueOutcome, RescueParams, RescueReport, Result,
    StatsSnapshot, ThroughputBucket, ThroughputParams, TimestampPrecision, UniqueHold, WorkerId, WorkerProcess,
    WorkerRegistration,
};
use tiberius::{Row, ToSql};

use crate::config::MssqlConfig;
use crate::error::{connect_error, map_error, timeout};
use crate::pool::{Manager, Pool};
use crate::rows::{col, first_row, id_bytes, job_id, req};
use crate::sql::{self, Statements};
use crate::{admin, claim, enqueue, inspect, lease, list, migrate, workers};

/// The SQL Server backend. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct MssqlBackend {
    inner: Arc<Inner>,
    /// The deadline of this view's reads ([`Backend::with_read_deadline`]).
    read_deadline: Option<std::time::Instant>,
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
    /// Connects (one connection is opened and checked at once, so a wrong address fails here
    /// with [`ErrorKind::Unavailable`](chokaq_core::ErrorKind::Unavailable) within the connect timeout) and builds the pool. Does
    /// not migrate: call [`Backend::migrate`](chokaq_core::Backend::migrate).
    pub async fn connect(cfg: MssqlConfig) -> Result<MssqlBackend> {
        validate::schema_name(&cfg.schema)?;
        let sql = Statements::new(&cfg.schema)?;
        let app_name = format!("chokaq-{}", Uuid::new_v4().simple());
        let manager = Manager::new(cfg.parts.clone(), app_name.clone(), cfg.connect_timeout);
        let pool = Pool::open(manager, cfg.max_connections, cfg.statement_timeout).await?;
        tracing::debug!(target: "chokaq_mssql", server = %cfg, "connected");
        let inner = Arc::new(Inner { pool, cfg, sql, app_name, rescue_misses: AtomicU32::new(0) });
        Ok(MssqlBackend { inner, read_deadline: None })
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
    /// Calls of `rescue` in a row that did not run ([`note_rescue`]).
    pub(crate) fn rescue_misses(&self) -> &AtomicU32 {
        &self.inner.rescue_misses
    }

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
        self.inner.pool.run(op, sql, params, None).await
    }

    /// [`MssqlBackend::run`] for a read: on a view with a read deadline, waits for the pool and
    /// the answer no longer than the time left (the connection is then discarded: see
    /// [`ReadDeadline::Client`]).
    pub(crate) async fn read(&self, op: &'static str, sql: &str, params: &[&dyn ToSql]) -> Result<Vec<Vec<Row>>> {
        self.inner.pool.run(op, sql, params, self.read_deadline).await
    }
}

/// Names the operation on an error: every method of `impl Backend` below forwards through it.
macro_rules! op {
    ($name:literal, $body:expr) => {
        async move { $body }.await.map_err(|e: chokaq_core::Error| e.with_operation($name))
    };
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
            .with_read_deadline(ReadDeadline::Client)
    }

    /// The same pool; the reads wait no longer than the deadline. tiberius sends no attention
    /// signal, so a statement the server is running is not cancelled: its connection is
    /// discarded, and the server runs it until it notices (lock waits end at the session's
    /// `LOCK_TIMEOUT`, 5 s). Hence [`ReadDeadline::Client`].
    fn with_read_deadline(&self, deadline: std::time::Instant) -> Option<Arc<dyn Backend>> {
        Some(Arc::new(MssqlBackend { inner: self.inner.clone(), read_deadline: Some(deadline) }))
    }

    async fn migrate(&self) -> Result<()> {
        op!("migrate", migrate::run(self).await)
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        op!("enqueue_many", enqueue::enqueue_many(self, jobs).await)
    }

    async fn claim(&self, req_: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        op!("claim", claim::claim(self, req_).await)
    }

    /// One batch and one transaction: the completions, then the claim, which hands the slots
    /// the completions freed on (`claim.rs`, `docs/sqlserver.md`).
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        op!("complete_and_claim", self.complete_and_claim_impl(worker, leases, req).await)
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

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, action: FailAction) -> Result<Fenced<FailOutcome>> {
        op!("fail", lease::fail(self, worker, lease, action).await)
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

    async fn purge(&self, r: &PurgeParams) -> Result<u64> {
        op!("purge", self.purge_batches(r, false).await)
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        op!("stats", inspect::stats(self).await)
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        op!("get_job", inspect::get_job(self, id).await)
    }

    async fn list_jobs(&self, f: &ListJobsParams) -> Result<JobPage> {
        op!("list_jobs", list::list_jobs(self, f).await)
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

    async fn prune_workers(&self, stale_after: std::time::Duration) -> Result<u64> {
        op!("prune_workers", workers::prune_workers(self, stale_after).await)
    }

    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        op!("throughput", workers::throughput(self, params).await)
    }

    async fn wakeups(&self) -> Result<Option<chokaq_core::Wakeups>> {
        op!("wakeups", Ok(None))
    }

    // ---- Periodic jobs (the schedules table) ----

    async fn register_schedule(&self, def: &chokaq_core::ScheduleDef) -> Result<chokaq_core::ScheduleRow> {
        op!("register_schedule", self.register_schedule_impl(def).await)
    }

    async fn enqueue_tick(&self, req: &chokaq_core::TickRequest) -> Result<chokaq_core::TickOutcome> {
        op!("enqueue_tick", self.enqueue_tick_impl(req).await)
    }

    async fn list_schedules(&self) -> Result<Vec<chokaq_core::ScheduleRow>> {
        op!("list_schedules", self.list_schedules_impl().await)
    }

    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<chokaq_core::ScheduleRow> {
        op!("set_schedule_enabled", self.set_schedule_enabled_impl(name, enabled).await)
    }

    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        op!("mark_stale_schedules", self.mark_stale_schedules_impl(group, live).await)
    }
}

#[cfg(test)]
mod tests {
    use chokaq_core::{Backend, ErrorKind, FailAction, JobId, LeaseRef, NewJob, QueueName};

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
        let inner = Arc::new(Inner { pool, cfg, sql, app_name, rescue_misses: AtomicU32::new(0) });
        MssqlBackend { inner, read_deadline: None }
    }

    /// A view's reads are bounded on this side only (tiberius cannot cancel a statement): a
    /// passed deadline fails them before any connection is asked for, and a deadline that
    /// passes while the pool tries to connect ends the wait with the deadline's error.
    #[tokio::test]
    async fn a_read_deadline_bounds_the_reads_here() {
        let b = unopened();
        assert_eq!(b.capabilities().read_deadline, ReadDeadline::Client);
        let passed = b.with_read_deadline(std::time::Instant::now()).expect("a view");
        let soon = b.with_read_deadline(std::time::Instant::now() + std::time::Duration::from_millis(50)).unwrap();
        for e in [passed.stats().await.unwrap_err(), passed.list_workers().await.unwrap_err()] {
            assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
            assert!(e.to_string().contains("deadline passed"), "{e}");
        }
        // Nothing listens on port 9: the connect fails on its own or the deadline ends it.
        let e = soon.get_job(JobId::new()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
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
