//! The fault layer between one simulated process and the store: every call of the worker goes
//! through it, and it decides (from the seed) whether the call fails before the store, commits
//! and loses its reply, waits, or never answers (the process is dead).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chokaq_core::{
    Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, Enqueued, Error, ErrorKind,
    FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, LeaseRef, ListJobsParams, NewJob,
    PurgeParams, QueueControl, QueueName, QueueSettings, RequeueOutcome, RescueParams, RescueReport, Result,
    ScheduleDef, ScheduleRow, StatsSnapshot, ThroughputBucket, ThroughputParams, TickOutcome, TickRequest, Wakeups,
    WorkerId, WorkerProcess, WorkerRegistration,
};

use super::world::{job_no, Window, World};

/// One process's view of the store.
pub(super) struct SimBackend {
    pub(super) world: Arc<World>,
    pub(super) p: usize,
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimBackend(p{})", self.p)
    }
}

fn lost(op: &str) -> Error {
    Error::new(ErrorKind::Unavailable, format!("sim: the reply of {op} was lost after its commit"))
}

impl SimBackend {
    /// A dead process's calls never answer.
    async fn alive(&self) {
        if self.world.is_dead(self.p) {
            futures::future::pending::<()>().await;
        }
    }

    async fn wait(&self, d: Duration) {
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
        self.alive().await;
    }

    /// Before the store: the process's fault window, a delay, a failure.
    async fn before(&self, op: &'static str, write: bool) -> Result<()> {
        self.alive().await;
        match self.world.window(self.p) {
            Some(Window::AllFail) => return Err(Error::new(ErrorKind::Unavailable, "sim: outage")),
            Some(Window::HeartbeatsFail) if op == "heartbeat" => {
                return Err(Error::new(ErrorKind::Unavailable, "sim: heartbeat outage"))
            }
            Some(Window::WritesStall) if write => {
                if let Some(end) = self.world.stall_end(self.p) {
                    let now = self.world.now();
                    self.wait(end.saturating_sub(now)).await;
                }
            }
            _ => {}
        }
        if !self.world.faults() {
            return Ok(());
        }
        let d = self.world.upto(self.world.rates.delay);
        self.wait(d).await;
        if self.world.chance(self.world.rates.fail_before) {
            self.world.log(format!("p{} {op}: failed before the store", self.p));
            return Err(Error::new(ErrorKind::Transient, format!("sim: {op} failed")));
        }
        Ok(())
    }

    /// After the store: the checker looks; the reply may be lost (`counted`: the jobs whose
    /// attempt the call counted, when lost), or late.
    async fn after<T>(&self, op: &'static str, r: Result<T>) -> Result<T> {
        self.after_claim(op, r, |_| Vec::new()).await
    }

    /// [`SimBackend::after`] for a call that hands jobs out: when its reply is lost, they are
    /// held for this process without its knowing (orphans, until their holds expire).
    async fn after_claim<T>(
        &self,
        op: &'static str,
        r: Result<T>,
        jobs: impl FnOnce(&T) -> Vec<LeaseRef>,
    ) -> Result<T> {
        self.world.observe();
        self.alive().await;
        if !self.world.faults() {
            return r;
        }
        if r.is_ok() && self.world.chance(self.world.rates.lost_after) {
            let mut c = self.world.check.lock().unwrap();
            c.faulted.insert(self.p);
            if let Ok(v) = &r {
                c.orphans.extend(jobs(v).into_iter().map(|l| (job_no(l.id), l.lease.0)));
            }
            drop(c);
            self.world.log(format!("p{} {op}: reply lost after commit", self.p));
            return Err(lost(op));
        }
        let d = self.world.upto(self.world.rates.delay);
        self.wait(d).await;
        r
    }
}

#[async_trait]
impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }
    /// The store's, except that this wrapper gives no read-deadline view.
    fn capabilities(&self) -> Capabilities {
        self.world.db.capabilities().with_read_deadline(chokaq_core::ReadDeadline::Unbounded)
    }
    async fn migrate(&self) -> Result<()> {
        Ok(())
    }
    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        self.world.db.enqueue_many(jobs).await
    }
    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        self.before("claim", false).await?;
        let r = self.world.db.claim(req).await;
        self.after_claim("claim", r, |j| j.iter().map(ClaimedJob::lease_ref).collect()).await
    }
    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        self.before("start", false).await?;
        let r = self.world.db.start(worker, leases).await;
        self.after("start", r).await
    }
    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        self.before("heartbeat", false).await?;
        let r = self.world.db.heartbeat(worker, leases).await;
        self.after("heartbeat", r).await
    }
    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        self.before("complete", true).await?;
        let r = self.world.db.complete(worker, leases).await;
        super::flow::batch_twice_after_complete(&self.world).await;
        self.after("complete", r).await
    }
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        self.before("complete_and_claim", true).await?;
        let r = self.world.db.complete_and_claim(worker, leases, req).await;
        super::flow::batch_twice_after_complete(&self.world).await;
        self.after_claim("complete_and_claim", r, |(_, j)| j.iter().map(ClaimedJob::lease_ref).collect()).await
    }
    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        self.before("fail", true).await?;
        let r = self.world.db.fail(worker, lease, outcome).await;
        self.after("fail", r).await
    }
    async fn record_output(&self, worker: WorkerId, lease: LeaseRef, output: &serde_json::Value) -> Result<Fenced> {
        self.before("record_output", false).await?;
        let r = self.world.db.record_output(worker, lease, output).await;
        self.after("record_output", r).await
    }
    async fn get_output(&self, id: JobId) -> Result<Option<serde_json::Value>> {
        self.alive().await;
        self.world.db.get_output(id).await
    }
    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        self.before("release", false).await?;
        let r = self.world.db.release(worker, leases).await;
        self.after("release", r).await
    }
    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        self.alive().await;
        let r = self.world.db.rescue(params).await;
        self.world.observe();
        r
    }
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        let r = self.world.db.cancel(id).await;
        self.world.observe();
        r
    }
    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        self.world.db.control_queue(queue, control).await
    }
    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        self.before("queue_settings", false).await?;
        let r = self.world.db.queue_settings(queue).await;
        self.alive().await;
        r
    }
    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        self.world.db.requeue_dead(id).await
    }
    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        self.world.db.purge(req).await
    }
    async fn stats(&self) -> Result<StatsSnapshot> {
        self.world.db.stats().await
    }
    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.world.db.get_job(id).await
    }
    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        self.world.db.list_jobs(filter).await
    }
    async fn unique_of(&self, id: JobId) -> Result<Option<chokaq_core::UniqueHold>> {
        self.world.db.unique_of(id).await
    }
    async fn prune_uniques(&self, limit: u32) -> Result<u64> {
        self.world.db.prune_uniques(limit).await
    }
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        Ok(None)
    }
    async fn enqueue_batch(&self, batch: &chokaq_core::Batch) -> chokaq_core::Result<chokaq_core::EnqueuedBatch> {
        self.world.db.enqueue_batch(batch).await
    }
    async fn add_to_batch(
        &self,
        id: chokaq_core::BatchId,
        jobs: Vec<chokaq_core::NewJob>,
    ) -> chokaq_core::Result<Vec<chokaq_core::JobId>> {
        self.world.db.add_to_batch(id, jobs).await
    }
    async fn get_batch(&self, id: chokaq_core::BatchId) -> chokaq_core::Result<Option<chokaq_core::BatchStatus>> {
        self.world.db.get_batch(id).await
    }
    async fn enqueue_workflow(&self, wf: &chokaq_core::Workflow) -> chokaq_core::Result<chokaq_core::EnqueuedWorkflow> {
        self.world.db.enqueue_workflow(wf).await
    }
    async fn workflow_of(&self, job: chokaq_core::JobId) -> chokaq_core::Result<Option<chokaq_core::WorkflowId>> {
        self.world.db.workflow_of(job).await
    }
    async fn get_workflow(
        &self,
        id: chokaq_core::WorkflowId,
    ) -> chokaq_core::Result<Option<chokaq_core::WorkflowStatus>> {
        self.world.db.get_workflow(id).await
    }
    async fn cancel_workflow(&self, id: chokaq_core::WorkflowId) -> chokaq_core::Result<u64> {
        self.world.db.cancel_workflow(id).await
    }
    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        self.alive().await;
        self.world.db.register_worker(reg).await
    }
    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        self.alive().await;
        self.world.db.deregister_worker(worker).await
    }
    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        self.world.db.list_workers().await
    }
    async fn prune_workers(&self, stale_after: Duration) -> Result<u64> {
        self.world.db.prune_workers(stale_after).await
    }
    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        self.world.db.throughput(params).await
    }
    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        self.world.db.register_schedule(def).await
    }
    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        self.world.db.enqueue_tick(req).await
    }
    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.world.db.list_schedules().await
    }
    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        self.world.db.set_schedule_enabled(name, enabled).await
    }
    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        self.world.db.mark_stale_schedules(group, live).await
    }
}
