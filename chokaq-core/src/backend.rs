use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{
    Capabilities, ClaimedJob, DeadReason, Enqueued, JobId, JobKind, JobRecord, JobStatus, LeaseRef, NewJob, QueueName,
    Result, Timestamp, WorkerId,
};

/// Largest `limit` accepted by [`Backend::claim`].
pub const MAX_CLAIM_LIMIT: u32 = 1000;
/// Most jobs accepted by one [`Backend::enqueue_many`] call.
pub const MAX_ENQUEUE_BATCH: usize = 10_000;

/// How a claim leaves the jobs it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimMode {
    /// Pending → Fetched: the worker buffers them and calls [`Backend::start`] before running
    /// each (a bounded prefetch).
    Reserve,
    /// Pending → Processing in the claim itself (`attempt += 1`, `started_at`,
    /// `heartbeat_at` set): for a worker that has that many free slots now. Saves the start
    /// round trip.
    Start,
}

/// Parameters of [`Backend::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// Who claims.
    pub worker: WorkerId,
    /// Which queues to take from (at least one).
    pub queues: Vec<QueueName>,
    /// At most this many jobs (1 to [`MAX_CLAIM_LIMIT`]).
    pub limit: u32,
    /// Reserve into Fetched, or start straight into Processing.
    pub mode: ClaimMode,
}

impl ClaimRequest {
    /// A claim request; checked by [`ClaimRequest::validate`].
    pub fn new(worker: WorkerId, queues: Vec<QueueName>, limit: u32, mode: ClaimMode) -> Self {
        ClaimRequest { worker, queues, limit, mode }
    }

    /// Rejects an empty queue list and a limit outside 1..=[`MAX_CLAIM_LIMIT`].
    pub fn validate(&self) -> Result<()> {
        if self.queues.is_empty() {
            return Err(crate::Error::invalid("claim needs at least one queue"));
        }
        if self.limit == 0 || self.limit > MAX_CLAIM_LIMIT {
            return Err(crate::Error::invalid(format!(
                "claim limit must be 1 to {MAX_CLAIM_LIMIT}, got {}",
                self.limit
            )));
        }
        Ok(())
    }
}

/// The outcome of one guarded write: done, or the lease was lost (the job was rescued,
/// released, cancelled or re-claimed by someone else). A lost lease is an ordinary outcome the
/// caller must branch on, never an error and never a silent no-op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[must_use]
pub enum Fenced<T = ()> {
    /// The write happened.
    Done(T),
    /// The lease no longer matches; nothing was written.
    LeaseLost,
}

impl<T> Fenced<T> {
    /// True for [`Fenced::LeaseLost`].
    pub fn is_lost(&self) -> bool {
        matches!(self, Fenced::LeaseLost)
    }

    /// The value of a done write.
    pub fn done(self) -> Option<T> {
        match self {
            Fenced::Done(t) => Some(t),
            Fenced::LeaseLost => None,
        }
    }
}

/// The outcome of a guarded write over many leases: which ids were written and which leases
/// were lost. Every input id appears in exactly one of the two lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchOutcome {
    /// Written.
    pub done: Vec<JobId>,
    /// Lease lost; nothing written for these.
    pub lost: Vec<JobId>,
}

impl BatchOutcome {
    /// Splits `ids` (in input order) into done and lost: every id lands in exactly one list.
    pub fn partition(ids: impl IntoIterator<Item = JobId>, is_done: impl Fn(&JobId) -> bool) -> Self {
        let mut out = BatchOutcome::default();
        for id in ids {
            if is_done(&id) {
                out.done.push(id);
            } else {
                out.lost.push(id);
            }
        }
        out
    }
}

/// What a heartbeat found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReport {
    /// Leases still held (heartbeat bumped).
    pub held: Vec<JobId>,
    /// Of `held`, those an operator asked to cancel: stop the handler and finalize them with
    /// [`FailOutcome::Cancelled`].
    pub cancel_requested: Vec<JobId>,
    /// Leases lost: stop the handler and discard its outcome.
    pub lost: Vec<JobId>,
}

/// How a failed (or deliberately stopped) attempt ends. Completion is [`Backend::complete`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailOutcome {
    /// Back to Pending, due after `delay` (database clock), `last_error` kept. If no attempts
    /// are left the backend dead-letters it instead (reason `failed`) and says so.
    Retry { delay: Duration, error: String },
    /// Straight to the dead-letter table.
    DeadLetter { reason: DeadReason, error: String },
    /// Cancelled (by an operator's request or by the handler): dead-letter, reason `cancelled`.
    Cancelled { error: Option<String> },
    /// Back to Pending, due after `delay`; the attempt does not count (`attempt -= 1`).
    Snooze { delay: Duration },
}

/// What [`Backend::fail`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailResult {
    /// Pending again, due at this instant.
    Retried { at: Timestamp },
    /// Snoozed until this instant.
    Snoozed { until: Timestamp },
    /// Moved to the dead-letter table with this reason.
    DeadLettered(DeadReason),
}

/// Parameters of [`Backend::rescue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RescueParams {
    /// A Fetched job not started within this long goes back to Pending.
    pub fetched_timeout: Duration,
    /// A Processing job whose heartbeat is older than its queue's `zombie_timeout` (this,
    /// when the queue sets none) is a zombie.
    pub default_zombie_timeout: Duration,
    /// At most this many jobs per call.
    pub limit: u32,
}

impl Default for RescueParams {
    fn default() -> Self {
        RescueParams {
            fetched_timeout: Duration::from_secs(60),
            default_zombie_timeout: Duration::from_secs(300),
            limit: 1000,
        }
    }
}

/// What [`Backend::rescue`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RescueReport {
    /// False when another instance held the maintenance lock, so this call did nothing.
    pub ran: bool,
    /// Fetched jobs put back to Pending.
    pub fetched_released: u64,
    /// Zombies put back to Pending (attempts left, queue policy allows).
    pub zombies_retried: u64,
    /// Zombies moved to the dead-letter table (reason `zombie`).
    pub zombies_dead: u64,
}

/// What [`Backend::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelOutcome {
    /// It was Pending or Fetched and is now in the dead-letter table (reason `cancelled`).
    Cancelled,
    /// It is Processing: `cancel_requested` is set, and its worker sees it on the next
    /// heartbeat.
    Requested,
    /// No live job has this id (unknown, or already archived or dead).
    NotLive,
}

/// What to do with a queue's zombies (Processing jobs whose heartbeat expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ZombiePolicy {
    /// Back to Pending while attempts remain, else dead-letter. The default.
    #[default]
    Retry,
    /// Always dead-letter (reason `zombie`).
    DeadLetter,
}

/// One change to a queue's control row (an upsert).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueControl {
    Pause,
    Resume,
    Activate,
    Deactivate,
    /// `None` = unlimited.
    SetMaxWorkers(Option<u32>),
    /// `None` = use the rescuer's default.
    SetZombieTimeout(Option<Duration>),
    SetZombiePolicy(ZombiePolicy),
}

/// A queue's settings. A queue with no control row is active, unpaused and unlimited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSettings {
    pub name: QueueName,
    pub max_workers: Option<u32>,
    pub is_paused: bool,
    pub is_active: bool,
    pub zombie_timeout: Option<Duration>,
    pub zombie_policy: ZombiePolicy,
    /// None when the queue has no control row.
    pub updated_at: Option<Timestamp>,
}

impl QueueSettings {
    /// The settings of a queue with no control row.
    pub fn default_for(name: QueueName) -> Self {
        QueueSettings {
            name,
            max_workers: None,
            is_paused: false,
            is_active: true,
            zombie_timeout: None,
            zombie_policy: ZombiePolicy::Retry,
            updated_at: None,
        }
    }
}

/// What [`Backend::requeue_dead`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequeueOutcome {
    /// Back in the hot table as Pending, attempt 0, same id, priority and key.
    Requeued,
    /// No dead-letter row has this id.
    NotFound,
}

/// Which finished-jobs table to purge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PurgeTarget {
    Archive,
    DeadLetter,
}

/// Parameters of [`Backend::purge`]: delete finished jobs older than `older_than`, in batches
/// of `batch_size`, at most `max_batches` batches per call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRequest {
    pub target: PurgeTarget,
    /// Rows finished more than this long ago (database clock).
    pub older_than: Duration,
    pub queue: Option<QueueName>,
    pub kind: Option<JobKind>,
    /// Dead-letter only.
    pub reason: Option<DeadReason>,
    pub batch_size: u32,
    pub max_batches: u32,
}

impl PurgeRequest {
    /// Purge `target` rows finished more than `older_than` ago, 1,000 rows a batch, at most
    /// 100 batches.
    pub fn new(target: PurgeTarget, older_than: Duration) -> Self {
        PurgeRequest { target, older_than, queue: None, kind: None, reason: None, batch_size: 1000, max_batches: 100 }
    }
}

/// One queue's counts in a [`StatsSnapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    pub queue: String,
    pub pending: u64,
    pub fetched: u64,
    pub processing: u64,
    pub archived: u64,
    pub dead: u64,
    /// Due time of the oldest Pending job that is due now (the queue's lag).
    pub oldest_due_at: Option<Timestamp>,
}

/// Counts taken from one consistent snapshot: the sums always add up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    /// The database clock when the snapshot was taken.
    pub taken_at: Option<Timestamp>,
    pub queues: Vec<QueueStats>,
    pub pending: u64,
    pub fetched: u64,
    pub processing: u64,
    pub archived: u64,
    pub dead: u64,
}

impl StatsSnapshot {
    /// Live jobs (Pending + Fetched + Processing).
    pub fn hot(&self) -> u64 {
        self.pending + self.fetched + self.processing
    }

    /// Every job the snapshot saw: hot + archived + dead.
    pub fn total(&self) -> u64 {
        self.hot() + self.archived + self.dead
    }

    /// One queue's counts, if it has any jobs.
    pub fn queue(&self, name: &str) -> Option<&QueueStats> {
        self.queues.iter().find(|q| q.queue == name)
    }
}

/// Which table [`Backend::list_jobs`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobTable {
    Hot,
    Archive,
    DeadLetter,
}

/// A filtered, keyset-paged listing. Jobs come in id order (= creation order); pass the
/// previous page's `next` as `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFilter {
    pub table: JobTable,
    pub queue: Option<QueueName>,
    /// Hot table only.
    pub status: Option<JobStatus>,
    pub kind: Option<JobKind>,
    pub tag: Option<String>,
    pub created_from: Option<Timestamp>,
    pub created_to: Option<Timestamp>,
    pub after: Option<JobId>,
    /// 1 to 1000.
    pub limit: u32,
}

impl JobFilter {
    /// Everything in `table`, 100 a page.
    pub fn new(table: JobTable) -> Self {
        JobFilter {
            table,
            queue: None,
            status: None,
            kind: None,
            tag: None,
            created_from: None,
            created_to: None,
            after: None,
            limit: 100,
        }
    }
}

/// A page of [`Backend::list_jobs`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobPage {
    pub jobs: Vec<JobRecord>,
    /// The cursor for the next page; None on the last page.
    pub next: Option<JobId>,
}

/// A wake-up: work may be available.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Jobs were enqueued into this queue.
    Queue(String),
    /// Wake-ups were missed; check every queue.
    Any,
}

/// A stream of wake-ups from the database (PostgreSQL `LISTEN/NOTIFY`).
#[derive(Debug)]
pub struct Wakeups {
    rx: tokio::sync::broadcast::Receiver<Wake>,
}

impl Wakeups {
    /// Wraps a broadcast receiver the backend feeds.
    pub fn new(rx: tokio::sync::broadcast::Receiver<Wake>) -> Self {
        Wakeups { rx }
    }

    /// The next wake-up; `None` once the backend has stopped listening for good.
    pub async fn recv(&mut self) -> Option<Wake> {
        match self.rx.recv().await {
            Ok(w) => Some(w),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Some(Wake::Any),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
        }
    }
}

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

    /// Enqueues one job. A live job with the same idempotency key wins: its id is returned
    /// with `duplicate: true` and no row is inserted.
    async fn enqueue(&self, job: NewJob) -> Result<Enqueued>;

    /// Enqueues up to [`MAX_ENQUEUE_BATCH`] jobs in one round trip; results in input order.
    /// All are validated first; one invalid job rejects the call and inserts nothing.
    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>>;

    /// Claims up to `limit` due jobs from unpaused, active queues under their cap, in one
    /// statement that skips rows locked by other claimers. Order: priority DESC, due time
    /// ASC, id ASC.
    async fn claim(&self, req: &ClaimRequest) -> Result<Vec<ClaimedJob>>;

    /// Fetched → Processing for each lease still held (`attempt += 1`).
    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome>;

    /// Bumps `heartbeat_at` of each Processing job still held; reports cancel requests.
    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport>;

    /// Moves each Processing job still held to the archive, in one statement.
    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome>;

    /// Completes `leases` as [`Backend::complete`] does, then claims as [`Backend::claim`]
    /// does, so the claim's cap count already sees those completions. The default makes the
    /// two calls in turn; a backend may override it to do both in one round trip and one
    /// transaction. A bad request is rejected before anything is written. On any other error
    /// the completions may or may not have been written (as with `complete` alone) and nothing
    /// was claimed.
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimRequest,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        req.validate()?;
        let done = self.complete(worker, leases).await?;
        let jobs = self.claim(req).await?;
        Ok((done, jobs))
    }

    /// Ends a Processing attempt that did not succeed.
    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailOutcome) -> Result<Fenced<FailResult>>;

    /// Fetched → Pending for each lease still held; the attempt is unchanged.
    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome>;

    /// Maintenance: expired Fetched jobs back to Pending, zombies back to Pending or to the
    /// dead-letter table. One instance at a time does the work.
    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport>;

    /// Cancels a live job: now if Pending/Fetched, on its owner's next heartbeat if
    /// Processing.
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome>;

    /// Changes a queue's control row (upsert) and returns the new settings.
    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings>;

    /// A queue's settings (the defaults when it has no row).
    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings>;

    /// Moves a dead-lettered job back to Pending with attempt 0, same id, priority and key.
    /// Fails with [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) if a live job now holds
    /// its idempotency key.
    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome>;

    /// Deletes finished jobs in bounded batches; returns how many.
    async fn purge(&self, req: &PurgeRequest) -> Result<u64>;

    /// Counts per queue and state from one consistent snapshot.
    async fn stats(&self) -> Result<StatsSnapshot>;

    /// A job wherever it is (hot, archive, dead-letter).
    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>>;

    /// Lists jobs of one table with filters and keyset paging.
    async fn list_jobs(&self, filter: &JobFilter) -> Result<JobPage>;

    /// Wake-ups on enqueue, where the database can push them (`None` otherwise: poll).
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        Ok(None)
    }
}

/// Conveniences over [`Backend`]; implemented for every backend, never by hand.
#[async_trait]
pub trait BackendExt: Backend {
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

#[async_trait]
impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    async fn migrate(&self) -> Result<()> {
        (**self).migrate().await
    }
    async fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        (**self).enqueue(job).await
    }
    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        (**self).enqueue_many(jobs).await
    }
    async fn claim(&self, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
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
        req: &ClaimRequest,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        (**self).complete_and_claim(worker, leases, req).await
    }
    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailOutcome) -> Result<Fenced<FailResult>> {
        (**self).fail(worker, lease, outcome).await
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
    async fn purge(&self, req: &PurgeRequest) -> Result<u64> {
        (**self).purge(req).await
    }
    async fn stats(&self) -> Result<StatsSnapshot> {
        (**self).stats().await
    }
    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        (**self).get_job(id).await
    }
    async fn list_jobs(&self, filter: &JobFilter) -> Result<JobPage> {
        (**self).list_jobs(filter).await
    }
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        (**self).wakeups().await
    }
}
