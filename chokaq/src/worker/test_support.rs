//! Helpers of the worker's unit tests: jobs, waiting, and a fresh PostgreSQL schema per test
//! (skipped with a note when the database is unreachable).

use std::sync::Arc;
use std::time::Duration;

use chokaq_core::NewJob;
use chokaq_postgres::{PgBackend, PgConfig};
use tokio::time::Instant;

use super::MaintenanceConfig;

pub(super) fn no_maintenance() -> MaintenanceConfig {
    MaintenanceConfig { enabled: false, ..MaintenanceConfig::default() }
}

/// `n` jobs of kind `t` on `queue`, payload `{"n": i}`.
pub(super) fn jobs(queue: &str, n: usize) -> Vec<NewJob> {
    (0..n).map(|i| NewJob::build(queue, "t").unwrap().json(serde_json::json!({ "n": i }))).collect()
}

/// Polls `cond` until it holds or `limit` passes.
pub(super) async fn wait_for<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A migrated backend on a fresh schema `chokaq_t_<hex>`, or `None` when PostgreSQL is
/// unreachable (`CHOKAQ_TEST_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/test`).
pub(super) async fn pg() -> Option<Arc<PgBackend>> {
    let url = std::env::var("CHOKAQ_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
    match PgBackend::connect(PgConfig::new(url).schema(schema).max_connections(4)).await {
        Ok(b) => {
            use chokaq_core::Backend;
            b.migrate().await.expect("migrate");
            Some(Arc::new(b))
        }
        Err(e) => {
            eprintln!("PostgreSQL unreachable, test skipped: {e}");
            None
        }
    }
}

/// A test-only backend over the memory backend with fault switches on the outcome writes
/// (`complete`, `complete_and_claim`, `fail`): transient errors, a stall, and a hook run when a
/// heartbeat reply comes back.
pub(super) struct Faulty {
    pub(super) inner: chokaq_core::memory::MemoryBackend,
    /// The next this many outcome writes fail with a transient error.
    pub(super) write_failures: std::sync::atomic::AtomicU32,
    /// The next this many `complete_and_claim` calls fail with a transient error.
    pub(super) cac_failures: std::sync::atomic::AtomicU32,
    /// The next this many `fail` calls fail with a transient error (before `write_failures`
    /// is looked at): failures no other write can take.
    pub(super) fail_failures: std::sync::atomic::AtomicU32,
    /// While true, outcome writes wait.
    stalled: std::sync::Mutex<bool>,
    unstall: tokio::sync::Notify,
    /// A crash: while true, every call the worker makes (claim, start, heartbeat, writes,
    /// release) hangs, as if its process were gone.
    pub(super) dead: std::sync::atomic::AtomicBool,
    /// Outcome write calls so far.
    pub(super) write_calls: std::sync::atomic::AtomicU64,
    /// Run once, after the next heartbeat is answered and before its reply is returned.
    #[allow(clippy::type_complexity)]
    pub(super) on_heartbeat: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// While true, `register_worker` fails (as on a schema without the workers table).
    pub(super) registration_fails: std::sync::atomic::AtomicBool,
    /// `register_worker` calls so far.
    pub(super) register_calls: std::sync::atomic::AtomicU64,
    /// Claims (`claim`, and the claim of `complete_and_claim`) that returned no job while
    /// Pending jobs waited (in any queue).
    pub(super) doomed_claims: std::sync::atomic::AtomicU64,
    /// The next this many `start` calls fail with a transient error, writing nothing.
    pub(super) start_failures: std::sync::atomic::AtomicU32,
    /// The next this many `start` calls commit, then fail with a transient error (the reply
    /// lost after the commit).
    pub(super) start_replies_lost: std::sync::atomic::AtomicU32,
    /// `start` calls so far.
    pub(super) start_calls: std::sync::atomic::AtomicU64,
    /// While true, `register_worker` never answers (a blocked workers table).
    pub(super) registration_hangs: std::sync::atomic::AtomicBool,
    /// While true, `heartbeat` fails with a transient error (an outage of the heartbeats).
    pub(super) heartbeats_fail: std::sync::atomic::AtomicBool,
}

impl Default for Faulty {
    fn default() -> Self {
        Faulty {
            inner: chokaq_core::memory::MemoryBackend::new(),
            write_failures: Default::default(),
            cac_failures: Default::default(),
            fail_failures: Default::default(),
            stalled: Default::default(),
            unstall: Default::default(),
            dead: Default::default(),
            write_calls: Default::default(),
            on_heartbeat: Default::default(),
            registration_fails: Default::default(),
            register_calls: Default::default(),
            doomed_claims: Default::default(),
            start_failures: Default::default(),
            start_replies_lost: Default::default(),
            start_calls: Default::default(),
            registration_hangs: Default::default(),
            heartbeats_fail: Default::default(),
        }
    }
}

impl std::fmt::Debug for Faulty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Faulty")
    }
}

impl Faulty {
    pub(super) fn stall(&self, yes: bool) {
        *self.stalled.lock().unwrap() = yes;
        if !yes {
            self.unstall.notify_waiters();
        }
    }

    /// Hangs forever once `dead` is set.
    async fn alive(&self) {
        if self.dead.load(std::sync::atomic::Ordering::Acquire) {
            futures::future::pending::<()>().await;
        }
    }

    /// A claim came back empty: counted as doomed when Pending jobs wait.
    async fn count_doomed(&self) {
        use chokaq_core::Backend;
        if self.inner.stats().await.is_ok_and(|s| s.pending > 0) {
            self.doomed_claims.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
    }

    async fn write_gate(&self) -> chokaq_core::Result<()> {
        use std::sync::atomic::Ordering;
        self.alive().await;
        self.write_calls.fetch_add(1, Ordering::AcqRel);
        loop {
            let wait = self.unstall.notified();
            if !*self.stalled.lock().unwrap() {
                break;
            }
            wait.await;
        }
        let take = |n: &std::sync::atomic::AtomicU32| {
            n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1)).is_ok()
        };
        if take(&self.write_failures) {
            return Err(chokaq_core::Error::new(chokaq_core::ErrorKind::Transient, "injected transient write error"));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl chokaq_core::Backend for Faulty {
    fn name(&self) -> &'static str {
        "faulty-memory"
    }
    fn capabilities(&self) -> chokaq_core::Capabilities {
        self.inner.capabilities().with_read_deadline(chokaq_core::ReadDeadline::Unbounded)
    }
    async fn migrate(&self) -> chokaq_core::Result<()> {
        self.inner.migrate().await
    }
    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> chokaq_core::Result<Vec<chokaq_core::Enqueued>> {
        self.inner.enqueue_many(jobs).await
    }
    async fn claim(&self, req: &chokaq_core::ClaimParams) -> chokaq_core::Result<Vec<chokaq_core::ClaimedJob>> {
        self.alive().await;
        let r = self.inner.claim(req).await;
        if matches!(&r, Ok(jobs) if jobs.is_empty()) {
            self.count_doomed().await;
        }
        r
    }
    async fn start(
        &self,
        worker: chokaq_core::WorkerId,
        leases: &[chokaq_core::LeaseRef],
    ) -> chokaq_core::Result<chokaq_core::BatchOutcome> {
        use std::sync::atomic::Ordering;
        self.alive().await;
        self.start_calls.fetch_add(1, Ordering::AcqRel);
        let take = |n: &std::sync::atomic::AtomicU32| {
            n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1)).is_ok()
        };
        if take(&self.start_failures) {
            return Err(chokaq_core::Error::new(chokaq_core::ErrorKind::Transient, "injected start error"));
        }
        let out = self.inner.start(worker, leases).await?;
        if take(&self.start_replies_lost) {
            return Err(chokaq_core::Error::new(
                chokaq_core::ErrorKind::Unavailable,
                "injected: reply lost after commit",
            ));
        }
        Ok(out)
    }
    async fn heartbeat(
        &self,
        worker: chokaq_core::WorkerId,
        leases: &[chokaq_core::LeaseRef],
    ) -> chokaq_core::Result<chokaq_core::HeartbeatReport> {
        self.alive().await;
        if self.heartbeats_fail.load(std::sync::atomic::Ordering::Acquire) {
            return Err(chokaq_core::Error::new(chokaq_core::ErrorKind::Unavailable, "injected heartbeat failure"));
        }
        let r = self.inner.heartbeat(worker, leases).await;
        let hook = self.on_heartbeat.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        r
    }
    async fn complete(
        &self,
        worker: chokaq_core::WorkerId,
        leases: &[chokaq_core::LeaseRef],
    ) -> chokaq_core::Result<chokaq_core::BatchOutcome> {
        self.write_gate().await?;
        self.inner.complete(worker, leases).await
    }
    async fn complete_and_claim(
        &self,
        worker: chokaq_core::WorkerId,
        leases: &[chokaq_core::LeaseRef],
        req: &chokaq_core::ClaimParams,
    ) -> chokaq_core::Result<(chokaq_core::BatchOutcome, Vec<chokaq_core::ClaimedJob>)> {
        use std::sync::atomic::Ordering;
        self.write_gate().await?;
        if self.cac_failures.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1)).is_ok() {
            return Err(chokaq_core::Error::new(
                chokaq_core::ErrorKind::Transient,
                "injected complete_and_claim error",
            ));
        }
        let r = self.inner.complete_and_claim(worker, leases, req).await;
        if matches!(&r, Ok((_, jobs)) if jobs.is_empty()) {
            self.count_doomed().await;
        }
        r
    }
    async fn fail(
        &self,
        worker: chokaq_core::WorkerId,
        lease: chokaq_core::LeaseRef,
        outcome: chokaq_core::FailAction,
    ) -> chokaq_core::Result<chokaq_core::Fenced<chokaq_core::FailOutcome>> {
        use std::sync::atomic::Ordering;
        self.alive().await;
        if self.fail_failures.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1)).is_ok() {
            self.write_calls.fetch_add(1, Ordering::AcqRel);
            return Err(chokaq_core::Error::new(chokaq_core::ErrorKind::Transient, "injected transient fail error"));
        }
        self.write_gate().await?;
        self.inner.fail(worker, lease, outcome).await
    }
    async fn record_output(
        &self,
        worker: chokaq_core::WorkerId,
        lease: chokaq_core::LeaseRef,
        output: &serde_json::Value,
    ) -> chokaq_core::Result<chokaq_core::Fenced> {
        self.alive().await;
        self.inner.record_output(worker, lease, output).await
    }
    async fn get_output(&self, id: chokaq_core::JobId) -> chokaq_core::Result<Option<serde_json::Value>> {
        self.alive().await;
        self.inner.get_output(id).await
    }
    async fn release(
        &self,
        worker: chokaq_core::WorkerId,
        leases: &[chokaq_core::LeaseRef],
    ) -> chokaq_core::Result<chokaq_core::BatchOutcome> {
        self.alive().await;
        self.inner.release(worker, leases).await
    }
    async fn rescue(&self, params: &chokaq_core::RescueParams) -> chokaq_core::Result<chokaq_core::RescueReport> {
        self.inner.rescue(params).await
    }
    async fn cancel(&self, id: chokaq_core::JobId) -> chokaq_core::Result<chokaq_core::CancelOutcome> {
        self.inner.cancel(id).await
    }
    async fn control_queue(
        &self,
        queue: &chokaq_core::QueueName,
        control: chokaq_core::QueueControl,
    ) -> chokaq_core::Result<chokaq_core::QueueSettings> {
        self.inner.control_queue(queue, control).await
    }
    async fn queue_settings(&self, queue: &chokaq_core::QueueName) -> chokaq_core::Result<chokaq_core::QueueSettings> {
        self.inner.queue_settings(queue).await
    }
    async fn requeue_dead(&self, id: chokaq_core::JobId) -> chokaq_core::Result<chokaq_core::RequeueOutcome> {
        self.inner.requeue_dead(id).await
    }
    async fn purge(&self, req: &chokaq_core::PurgeParams) -> chokaq_core::Result<u64> {
        self.inner.purge(req).await
    }
    async fn stats(&self) -> chokaq_core::Result<chokaq_core::StatsSnapshot> {
        self.inner.stats().await
    }
    async fn get_job(&self, id: chokaq_core::JobId) -> chokaq_core::Result<Option<chokaq_core::JobRecord>> {
        self.inner.get_job(id).await
    }
    async fn list_jobs(&self, filter: &chokaq_core::ListJobsParams) -> chokaq_core::Result<chokaq_core::JobPage> {
        self.inner.list_jobs(filter).await
    }
    async fn unique_of(&self, id: chokaq_core::JobId) -> chokaq_core::Result<Option<chokaq_core::UniqueHold>> {
        self.inner.unique_of(id).await
    }
    async fn prune_uniques(&self, limit: u32) -> chokaq_core::Result<u64> {
        self.inner.prune_uniques(limit).await
    }
    async fn wakeups(&self) -> chokaq_core::Result<Option<chokaq_core::Wakeups>> {
        self.inner.wakeups().await
    }
    async fn enqueue_batch(&self, batch: &chokaq_core::Batch) -> chokaq_core::Result<chokaq_core::EnqueuedBatch> {
        self.inner.enqueue_batch(batch).await
    }
    async fn add_to_batch(
        &self,
        id: chokaq_core::BatchId,
        jobs: Vec<chokaq_core::NewJob>,
    ) -> chokaq_core::Result<Vec<chokaq_core::JobId>> {
        self.inner.add_to_batch(id, jobs).await
    }
    async fn get_batch(&self, id: chokaq_core::BatchId) -> chokaq_core::Result<Option<chokaq_core::BatchStatus>> {
        self.inner.get_batch(id).await
    }
    async fn enqueue_workflow(&self, wf: &chokaq_core::Workflow) -> chokaq_core::Result<chokaq_core::EnqueuedWorkflow> {
        self.inner.enqueue_workflow(wf).await
    }
    async fn workflow_of(&self, job: chokaq_core::JobId) -> chokaq_core::Result<Option<chokaq_core::WorkflowId>> {
        self.inner.workflow_of(job).await
    }
    async fn get_workflow(
        &self,
        id: chokaq_core::WorkflowId,
    ) -> chokaq_core::Result<Option<chokaq_core::WorkflowStatus>> {
        self.inner.get_workflow(id).await
    }
    async fn cancel_workflow(&self, id: chokaq_core::WorkflowId) -> chokaq_core::Result<u64> {
        self.inner.cancel_workflow(id).await
    }
    async fn register_worker(&self, reg: &chokaq_core::WorkerRegistration) -> chokaq_core::Result<()> {
        use std::sync::atomic::Ordering;
        self.register_calls.fetch_add(1, Ordering::AcqRel);
        if self.registration_hangs.load(Ordering::Acquire) {
            futures::future::pending::<()>().await;
        }
        if self.registration_fails.load(Ordering::Acquire) {
            return Err(chokaq_core::Error::new(chokaq_core::ErrorKind::NotMigrated, "injected: no workers table"));
        }
        self.inner.register_worker(reg).await
    }
    async fn deregister_worker(&self, worker: chokaq_core::WorkerId) -> chokaq_core::Result<bool> {
        self.inner.deregister_worker(worker).await
    }
    async fn list_workers(&self) -> chokaq_core::Result<Vec<chokaq_core::WorkerProcess>> {
        self.inner.list_workers().await
    }
    async fn prune_workers(&self, stale_after: std::time::Duration) -> chokaq_core::Result<u64> {
        self.inner.prune_workers(stale_after).await
    }
    async fn throughput(
        &self,
        params: &chokaq_core::ThroughputParams,
    ) -> chokaq_core::Result<Vec<chokaq_core::ThroughputBucket>> {
        self.inner.throughput(params).await
    }
    async fn register_schedule(&self, def: &chokaq_core::ScheduleDef) -> chokaq_core::Result<chokaq_core::ScheduleRow> {
        self.inner.register_schedule(def).await
    }
    async fn enqueue_tick(&self, req: &chokaq_core::TickRequest) -> chokaq_core::Result<chokaq_core::TickOutcome> {
        self.inner.enqueue_tick(req).await
    }
    async fn list_schedules(&self) -> chokaq_core::Result<Vec<chokaq_core::ScheduleRow>> {
        self.inner.list_schedules().await
    }
    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> chokaq_core::Result<chokaq_core::ScheduleRow> {
        self.inner.set_schedule_enabled(name, enabled).await
    }
    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> chokaq_core::Result<u64> {
        self.inner.mark_stale_schedules(group, live).await
    }
}
