//! A backend wrapper that counts and times the calls the runtime makes (two clock reads a
//! call), so the drains can report round trips, jobs per call and mean call times.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use chokaq::core::{
    BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, FailAction, FailOutcome, Fenced,
    HeartbeatReport, JobPage, LeaseRef, ListJobsParams, PurgeParams, QueueControl, QueueSettings, RequeueOutcome,
    RescueParams, RescueReport, StatsSnapshot, Wakeups,
};
use chokaq::{Backend, Enqueued, JobId, JobRecord, NewJob, QueueName, Result, WorkerId};
use chokaq_postgres::PgBackend;
use serde_json::{json, Value};

use crate::figures::round3;

#[derive(Debug, Default)]
pub(crate) struct CallStat {
    calls: AtomicU64,
    items: AtomicU64,
    /// Calls that returned no job.
    empty: AtomicU64,
    nanos: AtomicU64,
}

impl CallStat {
    pub(crate) fn record(&self, items: usize, t0: Instant) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.items.fetch_add(items as u64, Ordering::Relaxed);
        if items == 0 {
            self.empty.fetch_add(1, Ordering::Relaxed);
        }
        self.nanos.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    pub(crate) fn reset(&self) {
        self.calls.store(0, Ordering::Relaxed);
        self.items.store(0, Ordering::Relaxed);
        self.empty.store(0, Ordering::Relaxed);
        self.nanos.store(0, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> CallFigures {
        let calls = self.calls.load(Ordering::Relaxed);
        let items = self.items.load(Ordering::Relaxed);
        let nanos = self.nanos.load(Ordering::Relaxed);
        CallFigures {
            calls,
            items,
            empty: self.empty.load(Ordering::Relaxed),
            mean_ms: if calls == 0 { 0.0 } else { nanos as f64 / calls as f64 / 1e6 },
            busy_s: nanos as f64 / 1e9,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CallFigures {
    pub(crate) calls: u64,
    pub(crate) items: u64,
    pub(crate) empty: u64,
    pub(crate) mean_ms: f64,
    /// Sum of the calls' durations (calls may overlap).
    pub(crate) busy_s: f64,
}

impl CallFigures {
    pub(crate) fn json(&self) -> Value {
        json!({ "calls": self.calls, "jobs": self.items, "empty_calls": self.empty, "mean_ms": round3(self.mean_ms), "busy_s": round3(self.busy_s) })
    }
}

impl std::ops::Add for CallFigures {
    type Output = CallFigures;

    /// Two kinds of call together (mean weighted by calls).
    fn add(self, o: CallFigures) -> CallFigures {
        let calls = self.calls + o.calls;
        let busy_s = self.busy_s + o.busy_s;
        CallFigures {
            calls,
            items: self.items + o.items,
            empty: self.empty + o.empty,
            mean_ms: if calls == 0 { 0.0 } else { busy_s * 1e3 / calls as f64 },
            busy_s,
        }
    }
}

/// The runtime's calls by kind. Every call is one round trip with one SQL statement, except
/// `rescue` (a transaction of three) and `purge` (batches), both counted in `other`.
#[derive(Debug, Default)]
pub(crate) struct CallStats {
    /// `claim` calls (items: jobs claimed).
    pub(crate) claim: CallStat,
    /// `complete_and_claim` calls (items: jobs claimed; `completed` counts the completions).
    pub(crate) complete_and_claim: CallStat,
    /// Jobs completed by `complete_and_claim` calls.
    pub(crate) completed_in_claim: AtomicU64,
    /// `start` calls (items: leases started).
    pub(crate) start: CallStat,
    pub(crate) complete: CallStat,
    pub(crate) heartbeat: CallStat,
    /// Everything else the runtime calls (fail, release, rescue, queue settings, purge).
    pub(crate) other: CallStat,
}

impl CallStats {
    pub(crate) fn reset(&self) {
        self.claim.reset();
        self.complete_and_claim.reset();
        self.completed_in_claim.store(0, Ordering::Relaxed);
        self.start.reset();
        self.complete.reset();
        self.heartbeat.reset();
        self.other.reset();
    }
}

/// The PostgreSQL backend with its claim, complete and heartbeat calls counted and timed.
#[derive(Debug, Clone)]
pub(crate) struct Timed {
    pub(crate) inner: Arc<PgBackend>,
    pub(crate) stats: Arc<CallStats>,
}

#[async_trait]
impl Backend for Timed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    /// The inner backend's, except that this wrapper gives no read-deadline view.
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_read_deadline(chokaq_core::ReadDeadline::Unbounded)
    }
    async fn migrate(&self) -> Result<()> {
        self.inner.migrate().await
    }
    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        self.inner.enqueue_many(jobs).await
    }
    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        let t0 = Instant::now();
        let r = self.inner.claim(req).await;
        self.stats.claim.record(r.as_ref().map_or(0, Vec::len), t0);
        r
    }
    /// Forwarded, or the wrapper would replace the backend's one-round-trip override with the
    /// trait's default (two calls) and time a worker unlike the one a user runs.
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        let t0 = Instant::now();
        let r = self.inner.complete_and_claim(worker, leases, req).await;
        self.stats.complete_and_claim.record(r.as_ref().map_or(0, |(_, jobs)| jobs.len()), t0);
        if let Ok((out, _)) = &r {
            self.stats.completed_in_claim.fetch_add(out.done.len() as u64, Ordering::Relaxed);
        }
        r
    }
    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let t0 = Instant::now();
        let r = self.inner.start(worker, leases).await;
        self.stats.start.record(leases.len(), t0);
        r
    }
    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        let t0 = Instant::now();
        let r = self.inner.heartbeat(worker, leases).await;
        self.stats.heartbeat.record(leases.len(), t0);
        r
    }
    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let t0 = Instant::now();
        let r = self.inner.complete(worker, leases).await;
        self.stats.complete.record(leases.len(), t0);
        r
    }
    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        let t0 = Instant::now();
        let r = self.inner.fail(worker, lease, outcome).await;
        self.stats.other.record(1, t0);
        r
    }
    async fn record_output(&self, worker: WorkerId, lease: LeaseRef, output: &serde_json::Value) -> Result<Fenced> {
        let t0 = Instant::now();
        let r = self.inner.record_output(worker, lease, output).await;
        self.stats.other.record(1, t0);
        r
    }
    async fn get_output(&self, id: JobId) -> Result<Option<serde_json::Value>> {
        let t0 = Instant::now();
        let r = self.inner.get_output(id).await;
        self.stats.other.record(1, t0);
        r
    }
    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let t0 = Instant::now();
        let r = self.inner.release(worker, leases).await;
        self.stats.other.record(leases.len(), t0);
        r
    }
    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        let t0 = Instant::now();
        let r = self.inner.rescue(params).await;
        self.stats.other.record(0, t0);
        r
    }
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.inner.cancel(id).await
    }
    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        self.inner.control_queue(queue, control).await
    }
    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        let t0 = Instant::now();
        let r = self.inner.queue_settings(queue).await;
        self.stats.other.record(0, t0);
        r
    }
    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        self.inner.requeue_dead(id).await
    }
    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        let t0 = Instant::now();
        let r = self.inner.purge(req).await;
        self.stats.other.record(0, t0);
        r
    }
    async fn stats(&self) -> Result<StatsSnapshot> {
        self.inner.stats().await
    }
    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.inner.get_job(id).await
    }
    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        self.inner.list_jobs(filter).await
    }
    async fn unique_of(&self, id: JobId) -> Result<Option<chokaq_core::UniqueHold>> {
        self.inner.unique_of(id).await
    }
    async fn prune_uniques(&self, limit: u32) -> Result<u64> {
        self.inner.prune_uniques(limit).await
    }
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        self.inner.wakeups().await
    }
    async fn enqueue_batch(&self, batch: &chokaq::core::Batch) -> chokaq::core::Result<chokaq::core::EnqueuedBatch> {
        self.inner.enqueue_batch(batch).await
    }
    async fn add_to_batch(
        &self,
        id: chokaq::core::BatchId,
        jobs: Vec<chokaq::core::NewJob>,
    ) -> chokaq::core::Result<Vec<chokaq::core::JobId>> {
        self.inner.add_to_batch(id, jobs).await
    }
    async fn get_batch(&self, id: chokaq::core::BatchId) -> chokaq::core::Result<Option<chokaq::core::BatchStatus>> {
        self.inner.get_batch(id).await
    }
    async fn enqueue_workflow(
        &self,
        wf: &chokaq::core::Workflow,
    ) -> chokaq::core::Result<chokaq::core::EnqueuedWorkflow> {
        self.inner.enqueue_workflow(wf).await
    }
    async fn workflow_of(&self, job: chokaq::core::JobId) -> chokaq::core::Result<Option<chokaq::core::WorkflowId>> {
        self.inner.workflow_of(job).await
    }
    async fn get_workflow(
        &self,
        id: chokaq::core::WorkflowId,
    ) -> chokaq::core::Result<Option<chokaq::core::WorkflowStatus>> {
        self.inner.get_workflow(id).await
    }
    async fn cancel_workflow(&self, id: chokaq::core::WorkflowId) -> chokaq::core::Result<u64> {
        self.inner.cancel_workflow(id).await
    }
    async fn register_worker(&self, reg: &chokaq::core::WorkerRegistration) -> chokaq::core::Result<()> {
        self.inner.register_worker(reg).await
    }
    async fn deregister_worker(&self, worker: chokaq::core::WorkerId) -> chokaq::core::Result<bool> {
        self.inner.deregister_worker(worker).await
    }
    async fn list_workers(&self) -> chokaq::core::Result<Vec<chokaq::core::WorkerProcess>> {
        self.inner.list_workers().await
    }
    async fn prune_workers(&self, stale_after: std::time::Duration) -> chokaq::core::Result<u64> {
        self.inner.prune_workers(stale_after).await
    }
    async fn throughput(
        &self,
        params: &chokaq::core::ThroughputParams,
    ) -> chokaq::core::Result<Vec<chokaq::core::ThroughputBucket>> {
        self.inner.throughput(params).await
    }
    async fn register_schedule(&self, def: &chokaq::core::ScheduleDef) -> Result<chokaq::core::ScheduleRow> {
        self.inner.register_schedule(def).await
    }
    async fn enqueue_tick(&self, req: &chokaq::core::TickRequest) -> Result<chokaq::core::TickOutcome> {
        self.inner.enqueue_tick(req).await
    }
    async fn list_schedules(&self) -> Result<Vec<chokaq::core::ScheduleRow>> {
        self.inner.list_schedules().await
    }
    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<chokaq::core::ScheduleRow> {
        self.inner.set_schedule_enabled(name, enabled).await
    }
    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        self.inner.mark_stale_schedules(group, live).await
    }
}
