//! The [`Backend`] trait (the operations of the contract), the [`BackendExt`] conveniences,
//! and the forwarding impl for `Arc<B>`.

use async_trait::async_trait;

use crate::{
    Batch, BatchId, BatchOutcome, BatchStatus, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, Enqueued,
    EnqueuedBatch, EnqueuedWorkflow, FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord,
    LeaseRef, ListJobsParams, NewJob, PurgeParams, QueueControl, QueueName, QueueSettings, RequeueOutcome,
    RescueParams, RescueReport, Result, ScheduleDef, ScheduleRow, StatsSnapshot, ThroughputBucket, ThroughputParams,
    TickOutcome, TickRequest, UniqueHold, Wakeups, WorkerId, WorkerProcess, WorkerRegistration, Workflow, WorkflowId,
    WorkflowStatus,
};

/// The contract every backend implements: the operations of the behaviour contract, each one
/// statement (or one atomic unit) against the database.
///
/// Object safe: `Arc<dyn Backend>` works, so a backend can be chosen at run time.
#[async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// A short name for display ("postgres"); never branch on it.
    fn name(&self) -> &'static str;

    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    /// Creates or upgrades the schema. Safe to call from many processes at once.
    async fn migrate(&self) -> Result<()>;

    /// Enqueues up to [`MAX_ENQUEUE_BATCH`](crate::MAX_ENQUEUE_BATCH) jobs in one round trip; results in input order.
    /// All are validated first ([`validate::enqueue_batch`](crate::validate::enqueue_batch):
    /// each job, and at most [`MAX_ENQUEUE_BATCH_BYTES`](crate::validate::MAX_ENQUEUE_BATCH_BYTES)
    /// in all); one invalid job rejects the call and inserts nothing. An idempotency key is
    /// unique among the live jobs of one queue.
    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>>;

    /// Claims up to `limit` due jobs from unpaused, active queues under their cap, in one
    /// statement that skips rows locked by other claimers. Order: priority DESC, due time
    /// ASC, id ASC.
    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>>;

    /// Fetched → Processing for each lease still held (`attempt += 1`). At most
    /// [`MAX_LEASES_PER_CALL`](crate::validate::MAX_LEASES_PER_CALL) leases
    /// ([`validate::lease_list`](crate::validate::lease_list)); the same for `heartbeat`,
    /// `complete`, `release` and `complete_and_claim`.
    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome>;

    /// Bumps `heartbeat_at` of each Processing job still held; reports cancel requests.
    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport>;

    /// Moves each Processing job still held to the archive, in one statement. A job this
    /// worker already completed with the lease named is reported done again (nothing written).
    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome>;

    /// Completes `leases` as [`Backend::complete`](crate::Backend::complete) does, then claims as [`Backend::claim`](crate::Backend::claim)
    /// does, so the claim's cap count already sees those completions. The default makes the
    /// two calls in turn; a backend may override it to do both in one round trip and one
    /// transaction. A bad request is rejected before anything is written. On any other error
    /// the completions may or may not have been written (as with `complete` alone) and nothing
    /// was claimed.
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        req.validate()?;
        crate::validate::lease_list("complete_and_claim", leases)?;
        let done = self.complete(worker, leases).await?;
        let jobs = self.claim(req).await?;
        Ok((done, jobs))
    }

    /// Ends a Processing attempt that did not succeed. A repeat with the lease that already
    /// wrote the outcome reports that outcome again; a retry or snooze of a job whose cancel
    /// was accepted dead-letters it as `cancelled`.
    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>>;

    /// Records the output of the held job's run (`docs/outputs.md`): stored on its hot row,
    /// replacing any earlier output, and carried by every move (archive, dead letters, requeue).
    /// Fenced as `heartbeat`: only the worker holding `lease` of a Fetched or Processing job
    /// writes; a lost lease writes nothing and returns [`Fenced::LeaseLost`]. Checked first
    /// ([`validate::output`](crate::validate::output) with the backend's `max_output_bytes`):
    /// too large is [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) and writes nothing.
    async fn record_output(&self, worker: WorkerId, lease: LeaseRef, output: &serde_json::Value) -> Result<Fenced>;

    /// The output job `id` recorded, wherever the job is (hot, archive, dead-letter); `None`
    /// when it recorded none or no such job exists.
    async fn get_output(&self, id: JobId) -> Result<Option<serde_json::Value>>;

    /// Fetched → Pending for each lease still held; the attempt is unchanged.
    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome>;

    /// Maintenance: expired Fetched jobs back to Pending, zombies back to Pending or to the
    /// dead-letter table. One instance at a time does the work.
    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport>;

    /// Cancels a live job: now if Pending/Fetched, on its owner's next heartbeat if
    /// Processing.
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome>;

    /// Changes a queue's control row (upsert) and returns the new settings. The value is
    /// checked first ([`QueueControl::validate`]); an invalid one writes nothing.
    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings>;

    /// A queue's settings (the defaults when it has no row).
    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings>;

    /// Moves a dead-lettered job back to Pending with attempt 0, same id, priority and key.
    /// Fails with [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) if a live job now holds
    /// its idempotency key.
    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome>;

    /// Deletes finished jobs in bounded batches; returns how many.
    async fn purge(&self, req: &PurgeParams) -> Result<u64>;

    /// Counts per queue and state from one consistent snapshot. Every queue with a job or a
    /// control row is listed (by name), with its settings; `cancelled` counts the dead letters
    /// cancelled on purpose apart. Exact.
    async fn stats(&self) -> Result<StatsSnapshot>;

    /// [`stats`](Backend::stats) for a dashboard: the same, except that a backend may give a
    /// large archive's per-queue counts as estimates (`archived_estimated` set) to stay fast.
    /// The default is the exact [`stats`](Backend::stats).
    async fn stats_estimated(&self) -> Result<StatsSnapshot> {
        self.stats().await
    }

    /// A job wherever it is (hot, archive, dead-letter).
    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>>;

    /// Lists jobs of one table with filters and keyset paging.
    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage>;

    /// This backend with its reads bounded by `deadline`, for a caller that answers a request
    /// within it (the dashboard): `queue_settings`, `stats`, `stats_estimated`, `get_job`,
    /// `list_jobs`, `list_workers`, `throughput` and `list_schedules` on the returned backend
    /// fail with [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable) once it has passed,
    /// and [`Capabilities::read_deadline`] says how a statement the database is running is
    /// stopped at the deadline, or when the read's future is dropped. Every other operation of
    /// the returned backend is this backend's own, unbounded. `None` (the default) when the
    /// backend takes no deadline ([`ReadDeadline::Unbounded`](crate::ReadDeadline)).
    fn with_read_deadline(&self, deadline: std::time::Instant) -> Option<std::sync::Arc<dyn Backend>> {
        let _ = deadline;
        None
    }
    // ---- Unique jobs (docs/unique.md) ------------------------------------------------------

    /// The unique key job `id` holds, with the settings it was enqueued with; `None` when it
    /// holds none (not unique, its key was taken over by a later job, or pruned).
    async fn unique_of(&self, id: JobId) -> Result<Option<UniqueHold>>;

    /// Maintenance: deletes at most `limit` (1 to [`MAX_PRUNE_UNIQUES`](crate::MAX_PRUNE_UNIQUES))
    /// key rows that can decide nothing any more: those whose job has left the hot table and
    /// whose states count no finished state, whose job is in no table, or whose period is
    /// over. A key row whose job is live is never deleted. How many it deleted.
    async fn prune_uniques(&self, limit: u32) -> Result<u64>;

    /// Wake-ups on enqueue, where the database can push them (`None` otherwise: poll). The
    /// one source of truth for whether a backend pushes wake-ups: there is no capability flag
    /// for it, and no default, so a new backend decides.
    async fn wakeups(&self) -> Result<Option<Wakeups>>;

    // ---- Workflows (docs/workflows.md) ------------------------------------------------------
    // Backends that store them say so in `Capabilities::workflows`; the others keep these
    // defaults, which refuse with `ErrorKind::Unsupported` and write nothing.

    /// Enqueues every task of `wf` or none, in one transaction: checked first
    /// ([`Workflow::plan`](crate::Workflow::plan) against
    /// [`DEFAULT_MAX_WORKFLOW_TASKS`](crate::workflow::DEFAULT_MAX_WORKFLOW_TASKS), each job
    /// as `enqueue_many` checks it, no idempotency key or unique settings); a task with
    /// dependencies waits, not claimable, until each has succeeded.
    async fn enqueue_workflow(&self, wf: &Workflow) -> Result<EnqueuedWorkflow> {
        let _ = wf;
        Err(not_stored(self.name(), "workflows"))
    }

    /// A stored workflow with each task's state; `None` for an unknown id.
    async fn get_workflow(&self, id: WorkflowId) -> Result<Option<WorkflowStatus>> {
        let _ = id;
        Err(not_stored(self.name(), "workflows"))
    }

    /// The workflow job `job` is a task of; `None` when it is no workflow's task (or unknown).
    async fn workflow_of(&self, job: JobId) -> Result<Option<WorkflowId>> {
        let _ = job;
        Err(not_stored(self.name(), "workflows"))
    }

    /// Cancels every task of the workflow not yet final (as [`Backend::cancel`] cancels a
    /// job: a waiting or pending task is dead-lettered `cancelled`, a running one gets its
    /// cancel requested); how many tasks it reached. `NotFound` for an unknown id.
    async fn cancel_workflow(&self, id: WorkflowId) -> Result<u64> {
        let _ = id;
        Err(not_stored(self.name(), "workflows"))
    }

    /// Enqueues a batch (`docs/workflows.md`, "Batches"): its jobs, all or none, and its
    /// callbacks, each enqueued exactly once when its event comes (every job final, every job
    /// succeeded, the first dead letter), in the transaction of the move that brings it.
    async fn enqueue_batch(&self, batch: &Batch) -> Result<EnqueuedBatch> {
        let _ = batch;
        Err(not_stored(self.name(), "batches"))
    }

    /// Adds jobs to a batch that is not final (typically from a job of the batch, which keeps
    /// it from being final while it runs); `Conflict` once it is final, `NotFound` for an
    /// unknown id.
    async fn add_to_batch(&self, id: BatchId, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        let _ = (id, jobs);
        Err(not_stored(self.name(), "batches"))
    }

    /// A stored batch's counts and the callbacks enqueued so far; `None` for an unknown id.
    async fn get_batch(&self, id: BatchId) -> Result<Option<BatchStatus>> {
        let _ = id;
        Err(not_stored(self.name(), "batches"))
    }

    // ---- Live worker processes (the workers table) and throughput -------------------------

    /// Upserts this process's row: `started_at` is kept from the first registration,
    /// `last_seen_at` is set to the database clock. Called with every worker heartbeat.
    /// The registration is checked first ([`WorkerRegistration::validate`]).
    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()>;

    /// Removes this process's row (graceful shutdown); whether a row was there.
    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool>;

    /// Every registered worker process, most recently started first (ties: worker id).
    async fn list_workers(&self) -> Result<Vec<WorkerProcess>>;

    /// Maintenance: removes rows whose `last_seen_at` is older than the database's now minus
    /// `stale_after`; how many.
    async fn prune_workers(&self, stale_after: std::time::Duration) -> Result<u64>;

    /// Per queue and minute over the window: jobs archived as done and jobs dead-lettered as
    /// failures (read through the finish-time indexes, never a full scan of the archive), and
    /// failed attempts waiting for a retry (a read of the hot table). Minutes with none are
    /// left out. Ordered by minute, then queue.
    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>>;

    // ---- Periodic jobs (the schedules table) ----------------------------------------------
    // Issue 15: leaderless periodic jobs; see docs/periodic.md. Every backend implements these.

    /// Upserts a schedule by name and returns its row. A row with the same spec, time zone
    /// and group is kept (its `enabled` and `last_enqueued_tick` too) and loses its stale mark;
    /// a row holding another definition is taken over only if it is stale or `def.replace` is
    /// set, else the call fails with [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) and
    /// writes nothing.
    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow>;

    /// Enqueues one tick, in one transaction: advances the row's `last_enqueued_tick` to
    /// `req.tick` only if the row is not stale, holds `req.spec`/`req.time_zone` and records no
    /// tick at or after it (compare-and-set), and only then, if the row is enabled, inserts
    /// `req.job` (key [`tick_key`](crate::tick_key)). Any number of processes may call it for
    /// the same tick: exactly one wins it ([`TickOutcome::Enqueued`], or
    /// [`TickOutcome::Paused`] for a paused row).
    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome>;

    /// Every schedule row, by name.
    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>>;

    /// Pauses (`false`) or resumes (`true`) one schedule; its row, or
    /// [`ErrorKind::NotFound`](crate::ErrorKind::NotFound).
    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow>;

    /// Marks stale every row of `group` whose name is not in `live` (at most
    /// [`MAX_LIVE_SCHEDULES`](crate::MAX_LIVE_SCHEDULES) names); how many rows it marked.
    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64>;
}

/// The `Unsupported` answer of the workflow and batch defaults.
fn not_stored(backend: &str, what: &str) -> crate::Error {
    crate::Error::unsupported(format!("the {backend} backend does not store {what}"))
}

/// Conveniences over [`Backend`]; implemented for every backend, never by hand.
#[async_trait]
pub trait BackendExt: Backend {
    /// Enqueues one job: [`Backend::enqueue_many`](crate::Backend::enqueue_many) with one element. A live job with the same
    /// idempotency key wins: its id is returned with `duplicate: true` and no row is inserted.
    async fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let mut out = self.enqueue_many(vec![job]).await?;
        out.pop()
            .ok_or_else(|| crate::Error::new(crate::ErrorKind::Other, "enqueue_many returned no result for one job"))
    }

    /// Completes one job.
    async fn complete_one(&self, worker: WorkerId, lease: LeaseRef) -> Result<Fenced> {
        let out = self.complete(worker, &[lease]).await?;
        Ok(if out.done.contains(&lease.id) { Fenced::Done(()) } else { Fenced::LeaseLost })
    }

    /// Starts one fetched job.
    async fn start_one(&self, worker: WorkerId, lease: LeaseRef) -> Result<Fenced> {
        let out = self.start(worker, &[lease]).await?;
        Ok(if out.done.contains(&lease.id) { Fenced::Done(()) } else { Fenced::LeaseLost })
    }

    /// Releases one fetched job.
    async fn release_one(&self, worker: WorkerId, lease: LeaseRef) -> Result<Fenced> {
        let out = self.release(worker, &[lease]).await?;
        Ok(if out.done.contains(&lease.id) { Fenced::Done(()) } else { Fenced::LeaseLost })
    }

    /// Pauses a queue.
    async fn pause(&self, queue: &QueueName) -> Result<QueueSettings> {
        self.control_queue(queue, QueueControl::Pause).await
    }

    /// Resumes a queue.
    async fn resume(&self, queue: &QueueName) -> Result<QueueSettings> {
        self.control_queue(queue, QueueControl::Resume).await
    }

    /// Sets a queue's cap (`None` = unlimited).
    async fn set_max_workers(&self, queue: &QueueName, max: Option<u32>) -> Result<QueueSettings> {
        self.control_queue(queue, QueueControl::SetMaxWorkers(max)).await
    }
}

impl<B: Backend + ?Sized> BackendExt for B {}

/// Forwards every method, provided ones included (so an override in `B` is not lost behind
/// the `Arc`); the lint fails the build when a method is added to the trait and not here.
#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    fn with_read_deadline(&self, deadline: std::time::Instant) -> Option<std::sync::Arc<dyn Backend>> {
        (**self).with_read_deadline(deadline)
    }
    async fn migrate(&self) -> Result<()> {
        (**self).migrate().await
    }
    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        (**self).enqueue_many(jobs).await
    }
    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        (**self).claim(req).await
    }
    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        (**self).start(worker, leases).await
    }
    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        (**self).heartbeat(worker, leases).await
    }
    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        (**self).complete(worker, leases).await
    }
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        (**self).complete_and_claim(worker, leases, req).await
    }
    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        (**self).fail(worker, lease, outcome).await
    }
    async fn record_output(&self, worker: WorkerId, lease: LeaseRef, output: &serde_json::Value) -> Result<Fenced> {
        (**self).record_output(worker, lease, output).await
    }
    async fn get_output(&self, id: JobId) -> Result<Option<serde_json::Value>> {
        (**self).get_output(id).await
    }
    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        (**self).release(worker, leases).await
    }
    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        (**self).rescue(params).await
    }
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        (**self).cancel(id).await
    }
    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        (**self).control_queue(queue, control).await
    }
    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        (**self).queue_settings(queue).await
    }
    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        (**self).requeue_dead(id).await
    }
    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        (**self).purge(req).await
    }
    async fn stats(&self) -> Result<StatsSnapshot> {
        (**self).stats().await
    }
    async fn stats_estimated(&self) -> Result<StatsSnapshot> {
        (**self).stats_estimated().await
    }
    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        (**self).get_job(id).await
    }
    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        (**self).list_jobs(filter).await
    }
    async fn unique_of(&self, id: JobId) -> Result<Option<UniqueHold>> {
        (**self).unique_of(id).await
    }
    async fn prune_uniques(&self, limit: u32) -> Result<u64> {
        (**self).prune_uniques(limit).await
    }
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        (**self).wakeups().await
    }
    async fn enqueue_workflow(&self, wf: &Workflow) -> Result<EnqueuedWorkflow> {
        (**self).enqueue_workflow(wf).await
    }
    async fn get_workflow(&self, id: WorkflowId) -> Result<Option<WorkflowStatus>> {
        (**self).get_workflow(id).await
    }
    async fn cancel_workflow(&self, id: WorkflowId) -> Result<u64> {
        (**self).cancel_workflow(id).await
    }
    async fn workflow_of(&self, job: JobId) -> Result<Option<WorkflowId>> {
        (**self).workflow_of(job).await
    }
    async fn enqueue_batch(&self, batch: &Batch) -> Result<EnqueuedBatch> {
        (**self).enqueue_batch(batch).await
    }
    async fn add_to_batch(&self, id: BatchId, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
        (**self).add_to_batch(id, jobs).await
    }
    async fn get_batch(&self, id: BatchId) -> Result<Option<BatchStatus>> {
        (**self).get_batch(id).await
    }
    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        (**self).register_worker(reg).await
    }
    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        (**self).deregister_worker(worker).await
    }
    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        (**self).list_workers().await
    }
    async fn prune_workers(&self, stale_after: std::time::Duration) -> Result<u64> {
        (**self).prune_workers(stale_after).await
    }
    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        (**self).throughput(params).await
    }
    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        (**self).register_schedule(def).await
    }
    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        (**self).enqueue_tick(req).await
    }
    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        (**self).list_schedules().await
    }
    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        (**self).set_schedule_enabled(name, enabled).await
    }
    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        (**self).mark_stale_schedules(group, live).await
    }
}
