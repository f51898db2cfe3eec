//! `impl Backend for MemoryBackend`: each operation names itself on its errors and forwards to
//! the room that holds its body (the same rooms as every backend crate).

use std::time::Duration;

use async_trait::async_trait;

use crate::{
    Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, Enqueued, FailAction, FailOutcome,
    Fenced, HeartbeatReport, JobId, JobPage, JobRecord, LeaseRef, ListJobsParams, NewJob, PurgeParams, QueueControl,
    QueueName, QueueSettings, RequeueOutcome, RescueParams, RescueReport, Result, ScheduleDef, ScheduleRow,
    StatsSnapshot, ThroughputBucket, ThroughputParams, TickOutcome, TickRequest, TimestampPrecision, WorkerId,
    WorkerProcess, WorkerRegistration,
};

use super::{admin, enqueue, inspect, lease, list, periodic, workers, MemoryBackend};

#[async_trait]
impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::minimal(TimestampPrecision::Microsecond).with_multi_process(false).with_kill_connections(false)
    }

    async fn migrate(&self) -> Result<()> {
        async move { Ok(()) }.await.map_err(|e: crate::Error| e.with_operation("migrate"))
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        async move { enqueue::enqueue_many(self, jobs).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("enqueue_many"))
    }

    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        self.claim_now(req).await.map_err(|e: crate::Error| e.with_operation("claim"))
    }

    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move { lease::start(self, worker, leases).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("start"))
    }

    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        async move { lease::heartbeat(self, worker, leases).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("heartbeat"))
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move { lease::complete(self, worker, leases).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("complete"))
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        async move { lease::fail(self, worker, lease, outcome).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("fail"))
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move { lease::release(self, worker, leases).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("release"))
    }

    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        async move { admin::rescue(self, params).await }.await.map_err(|e: crate::Error| e.with_operation("rescue"))
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        async move { admin::cancel(self, id).await }.await.map_err(|e: crate::Error| e.with_operation("cancel"))
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        async move { admin::control_queue(self, queue, control).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("control_queue"))
    }

    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        async move { inspect::queue_settings(self, queue).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("queue_settings"))
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        async move { admin::requeue_dead(self, id).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("requeue_dead"))
    }

    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        async move { admin::purge(self, req).await }.await.map_err(|e: crate::Error| e.with_operation("purge"))
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        async move { inspect::stats(self).await }.await.map_err(|e: crate::Error| e.with_operation("stats"))
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        async move { inspect::get_job(self, id).await }.await.map_err(|e: crate::Error| e.with_operation("get_job"))
    }

    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        async move { list::list_jobs(self, filter).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("list_jobs"))
    }

    async fn wakeups(&self) -> Result<Option<crate::Wakeups>> {
        async move { Ok(None) }.await.map_err(|e: crate::Error| e.with_operation("wakeups"))
    }

    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        async move { workers::register_worker(self, reg).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("register_worker"))
    }

    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        async move { workers::deregister_worker(self, worker).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("deregister_worker"))
    }

    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        async move { workers::list_workers(self).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("list_workers"))
    }

    async fn prune_workers(&self, stale_after: Duration) -> Result<u64> {
        async move { workers::prune_workers(self, stale_after).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("prune_workers"))
    }

    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        async move { workers::throughput(self, params).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("throughput"))
    }

    // ---- Periodic jobs (the schedules table) ----

    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        async move { periodic::register_schedule(self, def).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("register_schedule"))
    }

    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        async move { periodic::enqueue_tick(self, req).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("enqueue_tick"))
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        async move { periodic::list_schedules(self).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("list_schedules"))
    }

    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        async move { periodic::set_schedule_enabled(self, name, enabled).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("set_schedule_enabled"))
    }

    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        async move { periodic::mark_stale_schedules(self, group, live).await }
            .await
            .map_err(|e: crate::Error| e.with_operation("mark_stale_schedules"))
    }
}
