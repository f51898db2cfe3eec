//! `impl Backend for MemoryBackend`: each operation names itself on its errors and forwards to
//! the room that holds its body (the same rooms as every backend crate).

use std::time::Duration;

use async_trait::async_trait;

use crate::{
    Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, Enqueued, FailAction, FailOutcome,
    Fenced, HeartbeatReport, JobId, JobPage, JobRecord, LeaseRef, ListJobsParams, NewJob, PurgeParams, QueueControl,
    QueueName, QueueSettings, ReadDeadline, RequeueOutcome, RescueParams, RescueReport, Result, ScheduleDef,
    ScheduleRow, StatsSnapshot, ThroughputBucket, ThroughputParams, TickOutcome, TickRequest, TimestampPrecision,
    UniqueHold, WorkerId, WorkerProcess, WorkerRegistration,
};

use super::{admin, enqueue, inspect, lease, list, output, periodic, unique, workers, MemoryBackend};

/// Names the operation on an error: every method of `impl Backend` below forwards through it.
macro_rules! op {
    ($name:literal, $body:expr) => {
        async move { $body }.await.map_err(|e: crate::Error| e.with_operation($name))
    };
}

#[async_trait]
impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::minimal(TimestampPrecision::Microsecond)
            .with_multi_process(false)
            .with_kill_connections(false)
            .with_read_deadline(ReadDeadline::Server)
            .with_workflows(true)
            .with_batches(true)
    }

    fn with_read_deadline(&self, deadline: std::time::Instant) -> Option<std::sync::Arc<dyn Backend>> {
        Some(std::sync::Arc::new(self.bounded(deadline)))
    }

    async fn migrate(&self) -> Result<()> {
        op!("migrate", Ok(()))
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        op!("enqueue_many", enqueue::enqueue_many(self, jobs).await)
    }

    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        op!("claim", self.claim_now(req).await)
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

    async fn record_output(&self, worker: WorkerId, lease: LeaseRef, value: &serde_json::Value) -> Result<Fenced> {
        op!("record_output", output::record_output(self, worker, lease, value).await)
    }

    async fn get_output(&self, id: JobId) -> Result<Option<serde_json::Value>> {
        op!("get_output", {
            self.check_read_deadline()?;
            output::get_output(self, id).await
        })
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        op!("release", lease::release(self, worker, leases).await)
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
        op!("queue_settings", {
            self.check_read_deadline()?;
            inspect::queue_settings(self, queue).await
        })
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        op!("requeue_dead", admin::requeue_dead(self, id).await)
    }

    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        op!("purge", admin::purge(self, req).await)
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        op!("stats", {
            self.check_read_deadline()?;
            inspect::stats(self).await
        })
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        op!("get_job", {
            self.check_read_deadline()?;
            inspect::get_job(self, id).await
        })
    }

    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        op!("list_jobs", {
            self.check_read_deadline()?;
            list::list_jobs(self, filter).await
        })
    }

    async fn unique_of(&self, id: JobId) -> Result<Option<UniqueHold>> {
        op!("unique_of", unique::unique_of(self, id).await)
    }

    async fn prune_uniques(&self, limit: u32) -> Result<u64> {
        op!("prune_uniques", unique::prune_uniques(self, limit).await)
    }

    async fn wakeups(&self) -> Result<Option<crate::Wakeups>> {
        op!("wakeups", Ok(None))
    }

    async fn enqueue_workflow(&self, wf: &crate::Workflow) -> Result<crate::EnqueuedWorkflow> {
        super::workflow::enqueue(self, wf).await
    }

    async fn get_workflow(&self, id: crate::WorkflowId) -> Result<Option<crate::WorkflowStatus>> {
        super::workflow::get(self, id).await
    }

    async fn workflow_of(&self, job: JobId) -> Result<Option<crate::WorkflowId>> {
        super::workflow::workflow_of(self, job).await
    }

    async fn cancel_workflow(&self, id: crate::WorkflowId) -> Result<u64> {
        super::workflow::cancel(self, id).await
    }

    async fn enqueue_batch(&self, batch: &crate::Batch) -> Result<crate::EnqueuedBatch> {
        super::batch::enqueue(self, batch).await
    }

    async fn add_to_batch(&self, id: crate::BatchId, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        super::batch::add(self, id, jobs).await
    }

    async fn get_batch(&self, id: crate::BatchId) -> Result<Option<crate::BatchStatus>> {
        super::batch::get(self, id).await
    }

    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        op!("register_worker", workers::register_worker(self, reg).await)
    }

    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        op!("deregister_worker", workers::deregister_worker(self, worker).await)
    }

    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        op!("list_workers", {
            self.check_read_deadline()?;
            workers::list_workers(self).await
        })
    }

    async fn prune_workers(&self, stale_after: Duration) -> Result<u64> {
        op!("prune_workers", workers::prune_workers(self, stale_after).await)
    }

    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        op!("throughput", {
            self.check_read_deadline()?;
            workers::throughput(self, params).await
        })
    }

    // ---- Periodic jobs (the schedules table) ----

    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        op!("register_schedule", periodic::register_schedule(self, def).await)
    }

    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        op!("enqueue_tick", periodic::enqueue_tick(self, req).await)
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        op!("list_schedules", {
            self.check_read_deadline()?;
            periodic::list_schedules(self).await
        })
    }

    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        op!("set_schedule_enabled", periodic::set_schedule_enabled(self, name, enabled).await)
    }

    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        op!("mark_stale_schedules", periodic::mark_stale_schedules(self, group, live).await)
    }
}
