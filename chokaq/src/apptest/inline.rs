//! [`InlineBackend`]: the backend of [`Harness::inline_client`], which runs each job as it is
//! enqueued.

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use chokaq_core::{
    Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, Enqueued, Error, FailAction,
    FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, LeaseRef, ListJobsParams, NewJob, PurgeParams,
    QueueControl, QueueName, QueueSettings, RequeueOutcome, RescueParams, RescueReport, Result, RunAt, ScheduleDef,
    ScheduleRow, StatsSnapshot, ThroughputBucket, ThroughputParams, TickOutcome, TickRequest, Wakeups, WorkerId,
    WorkerProcess, WorkerRegistration,
};

use super::run::{Harness, MAX_INLINE_DEPTH};

/// A backend that forwards every call to the harness's backend, except that `enqueue_many`
/// (and so `enqueue`) then runs each new job due now through the [`Harness`], one attempt,
/// before it returns: jobs a handler enqueues run inside that handler's call, up to
/// [`MAX_INLINE_DEPTH`](super::MAX_INLINE_DEPTH) (16) levels deep: the enqueue one level further is an `InvalidInput`
/// error (its job is inserted and left pending), which fails the attempt of the handler that
/// made it, as any error from `enqueue` would. The jobs are real rows, so the assertions of
/// [`Expect`](super::Expect) (with `including_finished`) and
/// [`Harness::history`] show them. Not run: duplicates (the existing job is left as it is) and
/// jobs delayed or scheduled for later (they wait; [`Harness::drain`] will not run them
/// before they are due either). A job whose kind has no handler registered is an
/// `InvalidInput` error from `enqueue`; the job is inserted and stays pending.
///
/// Jobs enqueued in a caller's transaction (`Client::<PgBackend>::enqueue_in_tx`) do not go
/// through this backend and are not run inline.
///
/// ```
/// # use std::sync::Arc;
/// # use chokaq::apptest::{Harness, Outcome};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> chokaq::Result<()> {
/// let harness = Harness::new(Arc::new(chokaq::core::memory::MemoryBackend::new()));
/// let client = harness.inline_client();
/// let inner = client.clone();
/// harness.register_raw("order.v1", move |_order, _ctx| {
///     let client = inner.clone();
///     async move {
///         client.enqueue(chokaq::JobBuilder::raw("email", "receipt.v1", 1.into())).await?;
///         Ok(())
///     }
/// });
/// harness.register_raw("receipt.v1", |_n, _ctx| async { Ok(()) });
/// client.enqueue(chokaq::JobBuilder::raw("orders", "order.v1", 42.into())).await?;
/// let kinds: Vec<_> = harness.history().iter().map(|r| (r.kind.to_string(), r.outcome.clone())).collect();
/// // The receipt ran inside the order's handler, so it finished first.
/// assert_eq!(kinds, [("receipt.v1".into(), Outcome::Completed), ("order.v1".into(), Outcome::Completed)]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct InlineBackend {
    harness: Harness,
}

impl InlineBackend {
    /// The inline backend of `harness` (also [`Harness::inline_client`]).
    pub fn new(harness: Harness) -> Self {
        InlineBackend { harness }
    }

    fn inner(&self) -> &dyn Backend {
        &*self.harness.inner.backend
    }
}

/// Decrements the inline depth when the run ends (also on error or panic).
struct DepthGuard<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for DepthGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[async_trait]
impl Backend for InlineBackend {
    fn name(&self) -> &'static str {
        self.inner().name()
    }
    /// The inner backend's, except that this wrapper gives no read-deadline view.
    fn capabilities(&self) -> Capabilities {
        self.inner().capabilities().with_read_deadline(chokaq_core::ReadDeadline::Unbounded)
    }
    async fn migrate(&self) -> Result<()> {
        self.inner().migrate().await
    }
    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let now: Vec<(bool, QueueName)> = jobs.iter().map(|j| (j.run_at == RunAt::Now, j.queue.clone())).collect();
        let out = self.inner().enqueue_many(jobs).await?;
        for ((due, queue), e) in now.into_iter().zip(&out) {
            if !due || e.duplicate {
                continue;
            }
            let depth = &self.harness.inner.depth;
            let _guard = DepthGuard(depth);
            if depth.fetch_add(1, Ordering::AcqRel) >= MAX_INLINE_DEPTH {
                return Err(Error::invalid(format!(
                    "inline mode: job {} enqueued more than {MAX_INLINE_DEPTH} levels deep (a job enqueuing itself?); \
                     it is inserted and left pending",
                    e.id
                )));
            }
            self.harness.run_one(e.id, &queue).await?;
        }
        Ok(out)
    }
    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        self.inner().claim(req).await
    }
    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        self.inner().start(worker, leases).await
    }
    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        self.inner().heartbeat(worker, leases).await
    }
    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        self.inner().complete(worker, leases).await
    }
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        self.inner().complete_and_claim(worker, leases, req).await
    }
    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        self.inner().fail(worker, lease, outcome).await
    }
    async fn record_output(&self, worker: WorkerId, lease: LeaseRef, output: &serde_json::Value) -> Result<Fenced> {
        self.inner().record_output(worker, lease, output).await
    }
    async fn get_output(&self, id: JobId) -> Result<Option<serde_json::Value>> {
        self.inner().get_output(id).await
    }
    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        self.inner().release(worker, leases).await
    }
    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        self.inner().rescue(params).await
    }
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.inner().cancel(id).await
    }
    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        self.inner().control_queue(queue, control).await
    }
    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        self.inner().queue_settings(queue).await
    }
    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        self.inner().requeue_dead(id).await
    }
    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        self.inner().purge(req).await
    }
    async fn stats(&self) -> Result<StatsSnapshot> {
        self.inner().stats().await
    }
    async fn stats_estimated(&self) -> Result<StatsSnapshot> {
        self.inner().stats_estimated().await
    }
    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.inner().get_job(id).await
    }
    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        self.inner().list_jobs(filter).await
    }
    async fn unique_of(&self, id: JobId) -> Result<Option<chokaq_core::UniqueHold>> {
        self.inner().unique_of(id).await
    }
    async fn prune_uniques(&self, limit: u32) -> Result<u64> {
        self.inner().prune_uniques(limit).await
    }
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        self.inner().wakeups().await
    }
    async fn enqueue_batch(&self, batch: &chokaq_core::Batch) -> chokaq_core::Result<chokaq_core::EnqueuedBatch> {
        self.inner().enqueue_batch(batch).await
    }
    async fn add_to_batch(
        &self,
        id: chokaq_core::BatchId,
        jobs: Vec<chokaq_core::NewJob>,
    ) -> chokaq_core::Result<Vec<chokaq_core::JobId>> {
        self.inner().add_to_batch(id, jobs).await
    }
    async fn get_batch(&self, id: chokaq_core::BatchId) -> chokaq_core::Result<Option<chokaq_core::BatchStatus>> {
        self.inner().get_batch(id).await
    }
    async fn enqueue_workflow(&self, wf: &chokaq_core::Workflow) -> chokaq_core::Result<chokaq_core::EnqueuedWorkflow> {
        self.inner().enqueue_workflow(wf).await
    }
    async fn workflow_of(&self, job: chokaq_core::JobId) -> chokaq_core::Result<Option<chokaq_core::WorkflowId>> {
        self.inner().workflow_of(job).await
    }
    async fn get_workflow(
        &self,
        id: chokaq_core::WorkflowId,
    ) -> chokaq_core::Result<Option<chokaq_core::WorkflowStatus>> {
        self.inner().get_workflow(id).await
    }
    async fn cancel_workflow(&self, id: chokaq_core::WorkflowId) -> chokaq_core::Result<u64> {
        self.inner().cancel_workflow(id).await
    }
    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        self.inner().register_worker(reg).await
    }
    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        self.inner().deregister_worker(worker).await
    }
    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        self.inner().list_workers().await
    }
    async fn prune_workers(&self, stale_after: std::time::Duration) -> Result<u64> {
        self.inner().prune_workers(stale_after).await
    }
    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        self.inner().throughput(params).await
    }
    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        self.inner().register_schedule(def).await
    }
    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        self.inner().enqueue_tick(req).await
    }
    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.inner().list_schedules().await
    }
    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        self.inner().set_schedule_enabled(name, enabled).await
    }
    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        self.inner().mark_stale_schedules(group, live).await
    }
}
