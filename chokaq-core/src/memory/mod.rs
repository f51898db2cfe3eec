//! [`MemoryBackend`]: the reference implementation of the contract, in memory.
//!
//! One mutex guards the whole store, so every operation is trivially atomic and every
//! guard is exactly the one the contract (`docs/contract.md`, "Guards") names. It exists to
//! state the semantics in code and
//! to validate the conformance suite itself; it is not a database and proves nothing about
//! one (capabilities: single process, no connections to kill).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DurationRound, Utc};

mod claim;
mod rescue;
#[cfg(feature = "testing")]
mod testing;
#[cfg(feature = "testing")]
pub use testing::RowView;

use crate::{
    validate, Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimParams, ClaimedJob, DeadReason, Enqueued, Error,
    ErrorKind, FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobLocation, JobPage, JobRecord, JobStatus,
    JobTable, Lease, LeaseRef, ListJobsParams, NewJob, PurgeParams, PurgeTarget, QueueControl, QueueName,
    QueueSettings, QueueStats, RequeueOutcome, RescueParams, RescueReport, Result, RunAt, ScheduleDef, ScheduleRow,
    StatsSnapshot, ThroughputBucket, ThroughputParams, TickOutcome, TickRequest, Timestamp, TimestampPrecision,
    WorkerId, WorkerProcess, WorkerRegistration,
};

#[derive(Debug, Default)]
struct Store {
    hot: BTreeMap<JobId, JobRecord>,
    archive: BTreeMap<JobId, JobRecord>,
    dead: BTreeMap<JobId, JobRecord>,
    queues: HashMap<QueueName, QueueSettings>,
    workers: HashMap<WorkerId, WorkerProcess>,
    last_lease: i64,
    schedules: BTreeMap<String, ScheduleRow>,
    /// The `expired_holds` column: how often a held Fetched job expired (absent: 0).
    expired_holds: HashMap<JobId, i32>,
    /// The starts log of rate-limited queues: (queue, concurrency key, claim time), in claim
    /// order; pruned by the rescue (entries older than the queue's window).
    starts: Vec<(QueueName, Option<String>, Timestamp)>,
    /// Ids counted up from here instead of UUID v7 ([`MemoryBackend::with_clock`]).
    next_id: Option<u64>,
}

/// The in-memory reference backend. Cheap to create; each instance is its own store.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    store: Mutex<Store>,
    max_payload_bytes: usize,
    clock: Clock,
}

/// Whole microseconds, as PostgreSQL's timestamptz stores them.
fn micros(t: Timestamp) -> Timestamp {
    t.duration_trunc(chrono::Duration::microseconds(1)).unwrap_or(t)
}

/// Where a [`MemoryBackend`] reads the time: the system clock, or a caller's clock (a
/// simulation's virtual time, [`MemoryBackend::with_clock`]).
#[derive(Clone, Default)]
struct Clock(Option<std::sync::Arc<dyn Fn() -> Timestamp + Send + Sync>>);

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Clock(given)" } else { "Clock(system)" })
    }
}

fn plus(t: Timestamp, d: Duration) -> Result<Timestamp> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .ok_or_else(|| Error::invalid(format!("duration {d:?} is out of range")))
}

fn minus(t: Timestamp, d: Duration) -> Timestamp {
    chrono::Duration::from_std(d).ok().and_then(|d| t.checked_sub_signed(d)).unwrap_or(Timestamp::MIN_UTC)
}

fn due_at(r: &JobRecord) -> Timestamp {
    r.scheduled_at.unwrap_or(r.created_at)
}

fn status_of(r: &JobRecord) -> Option<JobStatus> {
    match r.location {
        JobLocation::Hot(s) => Some(s),
        _ => None,
    }
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        MemoryBackend {
            store: Mutex::new(Store::default()),
            max_payload_bytes: validate::DEFAULT_MAX_PAYLOAD_BYTES,
            clock: Clock::default(),
        }
    }

    /// An empty store that reads the time from `clock` and numbers its jobs 1, 2, 3, … in
    /// enqueue order (ids are still UUIDs, ordered as they were given): with a virtual clock,
    /// two runs that make the same calls in the same order get the same answers (the runtime's
    /// deterministic simulator, `chokaq/src/worker/sim`).
    #[cfg(feature = "testing")]
    pub fn with_clock(clock: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        let store = Store { next_id: Some(0), ..Store::default() };
        MemoryBackend {
            store: Mutex::new(store),
            max_payload_bytes: validate::DEFAULT_MAX_PAYLOAD_BYTES,
            clock: Clock(Some(std::sync::Arc::new(clock))),
        }
    }

    /// The time now, in whole microseconds.
    fn now(&self) -> Timestamp {
        micros(match &self.clock.0 {
            Some(c) => c(),
            None => Utc::now(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn settings(store: &Store, q: &QueueName) -> QueueSettings {
        store.queues.get(q).cloned().unwrap_or_else(|| QueueSettings::default_for(q.clone()))
    }

    /// The live job of `queue` holding idempotency key `key`: keys are unique per queue.
    fn key_holder<'a>(store: &'a Store, queue: &QueueName, key: &str) -> Option<&'a JobRecord> {
        store.hot.values().find(|r| &r.queue == queue && r.idempotency_key.as_deref() == Some(key))
    }

    fn insert(store: &mut Store, job: NewJob, at: Timestamp) -> Result<Enqueued> {
        if let Some(key) = &job.idempotency_key {
            if let Some(existing) = Self::key_holder(store, &job.queue, key) {
                return Ok(Enqueued { id: existing.id, duplicate: true });
            }
        }
        let scheduled_at = match job.run_at {
            RunAt::Now => None,
            RunAt::At(t) => Some(t.duration_trunc(chrono::Duration::microseconds(1)).unwrap_or(t)),
            RunAt::After(d) => Some(plus(at, d)?),
        };
        let id = match store.next_id.as_mut() {
            Some(n) => {
                *n += 1;
                JobId(uuid::Uuid::from_u128((1u128 << 127) | u128::from(*n)))
            }
            None => JobId::new(),
        };
        store.hot.insert(
            id,
            JobRecord {
                id,
                location: JobLocation::Hot(JobStatus::Pending),
                queue: job.queue,
                kind: job.kind,
                payload: job.payload,
                tags: job.tags,
                idempotency_key: job.idempotency_key,
                concurrency_key: job.concurrency_key,
                priority: job.priority,
                attempt: 0,
                max_attempts: job.max_attempts,
                lease: None,
                worker_id: None,
                scheduled_at,
                created_at: at,
                started_at: None,
                heartbeat_at: None,
                updated_at: at,
                finished_at: None,
                last_error: None,
                cancel_requested: false,
                created_by: job.created_by,
            },
        );
        Ok(Enqueued { id, duplicate: false })
    }

    /// Removes a hot row and files it as dead with `reason`.
    fn to_dead(store: &mut Store, id: JobId, reason: DeadReason, error: Option<String>, at: Timestamp) {
        if let Some(mut r) = store.hot.remove(&id) {
            r.location = JobLocation::Dead(reason);
            if error.is_some() {
                r.last_error = error;
            }
            r.finished_at = Some(at);
            r.updated_at = at;
            store.dead.insert(id, r);
        }
    }

    /// Back to Pending; the lease stays on the row only for a retry or snooze (the outcome a
    /// repeat of that fail finds), every other caller clears it.
    fn to_pending(r: &mut JobRecord, at: Timestamp) {
        r.location = JobLocation::Hot(JobStatus::Pending);
        r.worker_id = None;
        r.cancel_requested = false;
        r.updated_at = at;
    }

    /// What a `fail` whose lease no longer holds the job reports: the outcome this lease
    /// already wrote, when it did (a repeat whose first reply was lost), else `LeaseLost`.
    /// A retry or snooze leaves the lease on the Pending row (release and rescue clear it); a
    /// dead letter keeps lease and worker (a zombie's, filed by rescue, is not the worker's).
    fn standing_fail(store: &Store, worker: WorkerId, lease: LeaseRef, action: &FailAction) -> Fenced<FailOutcome> {
        if let Some(r) = store.hot.get(&lease.id) {
            if r.lease == Some(lease.lease) && status_of(r) == Some(JobStatus::Pending) {
                if let Some(at) = r.scheduled_at {
                    return Fenced::Done(match action {
                        FailAction::Snooze { .. } => FailOutcome::Snoozed { until: at },
                        _ => FailOutcome::Retried { at },
                    });
                }
            }
            return Fenced::LeaseLost;
        }
        match store.dead.get(&lease.id) {
            Some(JobRecord { location: JobLocation::Dead(reason), lease: Some(l), worker_id: Some(w), .. })
                if *l == lease.lease && *w == worker && *reason != DeadReason::Zombie =>
            {
                Fenced::Done(FailOutcome::DeadLettered(*reason))
            }
            _ => Fenced::LeaseLost,
        }
    }

    /// The hot row held by `lease`, Fetched or Processing, if the lease still matches.
    fn held_any(store: &mut Store, worker: WorkerId, lease: LeaseRef) -> Option<&mut JobRecord> {
        store.hot.get_mut(&lease.id).filter(|r| {
            r.lease == Some(lease.lease)
                && r.worker_id == Some(worker)
                && matches!(status_of(r), Some(JobStatus::Fetched | JobStatus::Processing))
        })
    }

    /// Fetched → Processing (`attempt += 1`); a Processing row is left as it is. What `start`
    /// does, and what `complete` and `fail` do first to a held Fetched row (its run counts).
    fn start_row(r: &mut JobRecord, at: Timestamp) {
        if status_of(r) == Some(JobStatus::Fetched) {
            r.location = JobLocation::Hot(JobStatus::Processing);
            r.attempt += 1;
            r.started_at = Some(at);
        }
        r.heartbeat_at = Some(at);
        r.updated_at = at;
    }

    /// The hot row held by `lease` in status `status`, if the lease still matches.
    fn held(store: &mut Store, worker: WorkerId, lease: LeaseRef, status: JobStatus) -> Option<&mut JobRecord> {
        store
            .hot
            .get_mut(&lease.id)
            .filter(|r| r.lease == Some(lease.lease) && r.worker_id == Some(worker) && status_of(r) == Some(status))
    }
}

fn claimed(r: &JobRecord) -> ClaimedJob {
    ClaimedJob {
        id: r.id,
        queue: r.queue.clone(),
        kind: r.kind.clone(),
        payload: r.payload.clone(),
        tags: r.tags.clone(),
        idempotency_key: r.idempotency_key.clone(),
        concurrency_key: r.concurrency_key.clone(),
        priority: r.priority,
        status: status_of(r).unwrap_or(JobStatus::Fetched),
        attempt: r.attempt,
        max_attempts: r.max_attempts,
        lease: r.lease.unwrap_or(Lease(0)),
        worker_id: r.worker_id.unwrap_or(WorkerId(uuid::Uuid::nil())),
        scheduled_at: r.scheduled_at,
        created_at: r.created_at,
        started_at: r.started_at,
        heartbeat_at: r.heartbeat_at,
        last_error: r.last_error.clone(),
        created_by: r.created_by.clone(),
        expired_holds: 0,
    }
}

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
        async move {
            validate::enqueue_batch(&jobs, self.max_payload_bytes)?;
            let mut s = self.lock();
            let at = self.now();
            // Validate the schedule of every job before inserting any.
            for j in &jobs {
                if let RunAt::After(d) = j.run_at {
                    plus(at, d)?;
                }
            }
            jobs.into_iter().map(|j| Self::insert(&mut s, j, at)).collect::<Result<Vec<_>>>()
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("enqueue_many"))
    }

    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        self.claim_now(req).await.map_err(|e: crate::Error| e.with_operation("claim"))
    }

    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            validate::lease_list("start", leases)?;
            let mut s = self.lock();
            let at = self.now();
            let mut entries = Vec::with_capacity(leases.len());
            for l in leases {
                // Repeatable: a row this lease already started is done again.
                let ok = match Self::held_any(&mut s, worker, *l) {
                    Some(r) => {
                        Self::start_row(r, at);
                        true
                    }
                    None => false,
                };
                entries.push((l.id, ok));
            }
            Ok(BatchOutcome::merge(entries))
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("start"))
    }

    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        async move {
            validate::lease_list("heartbeat", leases)?;
            let mut s = self.lock();
            let at = self.now();
            let mut entries = Vec::with_capacity(leases.len());
            for l in leases {
                let held = Self::held_any(&mut s, worker, *l).map(|r| {
                    r.heartbeat_at = Some(at);
                    r.updated_at = at;
                    r.cancel_requested
                });
                entries.push((l.id, held));
            }
            Ok(HeartbeatReport::merge(entries))
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("heartbeat"))
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            validate::lease_list("complete", leases)?;
            let mut s = self.lock();
            let at = self.now();
            let mut entries = Vec::with_capacity(leases.len());
            for l in leases {
                let ok = if let Some(r) = Self::held_any(&mut s, worker, *l) {
                    // A held Fetched row's run counts here (no start was written).
                    Self::start_row(r, at);
                    let mut r = s.hot.remove(&l.id).expect("held row exists");
                    r.location = JobLocation::Archived;
                    r.finished_at = Some(at);
                    r.updated_at = at;
                    s.archive.insert(l.id, r);
                    true
                } else {
                    // Completed before with this very lease (a repeat whose first reply was lost):
                    // the outcome stands.
                    s.archive.get(&l.id).is_some_and(|r| r.lease == Some(l.lease) && r.worker_id == Some(worker))
                };
                entries.push((l.id, ok));
            }
            Ok(BatchOutcome::merge(entries))
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("complete"))
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        async move {
            outcome.validate()?;
            let mut s = self.lock();
            let at = self.now();
            let Some(r) = Self::held_any(&mut s, worker, lease) else {
                return Ok(Self::standing_fail(&s, worker, lease, &outcome));
            };
            // A held Fetched row's run counts first, as `start` would have counted it.
            Self::start_row(r, at);
            // An accepted cancel is final: no retry or snooze of the job.
            let cancelled = r.cancel_requested;
            let result = match outcome {
                FailAction::Retry { error, .. } if cancelled => {
                    Self::to_dead(&mut s, lease.id, DeadReason::Cancelled, Some(validate::error_text(&error)), at);
                    FailOutcome::DeadLettered(DeadReason::Cancelled)
                }
                FailAction::Snooze { .. } if cancelled => {
                    Self::to_dead(&mut s, lease.id, DeadReason::Cancelled, None, at);
                    FailOutcome::DeadLettered(DeadReason::Cancelled)
                }
                FailAction::Retry { delay, error } => {
                    if r.attempt >= r.max_attempts {
                        Self::to_dead(&mut s, lease.id, DeadReason::Failed, Some(validate::error_text(&error)), at);
                        FailOutcome::DeadLettered(DeadReason::Failed)
                    } else {
                        let when = plus(at, delay)?;
                        Self::to_pending(r, at);
                        r.scheduled_at = Some(when);
                        r.last_error = Some(validate::error_text(&error));
                        FailOutcome::Retried { at: when }
                    }
                }
                FailAction::DeadLetter { reason, error } => {
                    Self::to_dead(&mut s, lease.id, reason, Some(validate::error_text(&error)), at);
                    FailOutcome::DeadLettered(reason)
                }
                FailAction::Cancelled { error } => {
                    Self::to_dead(
                        &mut s,
                        lease.id,
                        DeadReason::Cancelled,
                        error.as_deref().map(validate::error_text),
                        at,
                    );
                    FailOutcome::DeadLettered(DeadReason::Cancelled)
                }
                FailAction::Snooze { delay } => {
                    let when = plus(at, delay)?;
                    Self::to_pending(r, at);
                    r.attempt = (r.attempt - 1).max(0);
                    r.scheduled_at = Some(when);
                    FailOutcome::Snoozed { until: when }
                }
            };
            Ok(Fenced::Done(result))
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("fail"))
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        async move {
            validate::lease_list("release", leases)?;
            let mut s = self.lock();
            let at = self.now();
            let mut entries = Vec::with_capacity(leases.len());
            for l in leases {
                let ok = match Self::held(&mut s, worker, *l, JobStatus::Fetched) {
                    // An accepted cancel is final: the job is not put back.
                    Some(r) if r.cancel_requested => {
                        Self::to_dead(&mut s, l.id, DeadReason::Cancelled, None, at);
                        true
                    }
                    Some(r) => {
                        Self::to_pending(r, at);
                        r.lease = None;
                        r.heartbeat_at = None;
                        true
                    }
                    None => false,
                };
                entries.push((l.id, ok));
            }
            Ok(BatchOutcome::merge(entries))
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("release"))
    }

    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        async move {
            let mut report = self.rescue_now(params);
            // One instance: the retention purges run under the same (process-wide) lock rule.
            for req in &params.purge {
                report.purged += self.purge(req).await?;
            }
            Ok(report)
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("rescue"))
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        async move {
            let mut s = self.lock();
            let at = self.now();
            let Some(r) = s.hot.get_mut(&id) else {
                return Ok(CancelOutcome::NotLive);
            };
            match status_of(r) {
                // Processing, or held (its worker may be running it): a request.
                Some(JobStatus::Processing) => {
                    r.cancel_requested = true;
                    r.updated_at = at;
                    Ok(CancelOutcome::Requested)
                }
                Some(JobStatus::Fetched) if r.heartbeat_at.is_some() => {
                    r.cancel_requested = true;
                    r.updated_at = at;
                    Ok(CancelOutcome::Requested)
                }
                _ => {
                    Self::to_dead(&mut s, id, DeadReason::Cancelled, None, at);
                    Ok(CancelOutcome::Cancelled)
                }
            }
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("cancel"))
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        async move {
            validate::queue_name(queue.as_str())?;
            control.validate()?;
            let mut s = self.lock();
            let mut st = Self::settings(&s, queue);
            match control {
                QueueControl::Pause => st.is_paused = true,
                QueueControl::Resume => st.is_paused = false,
                QueueControl::Activate => st.is_active = true,
                QueueControl::Deactivate => st.is_active = false,
                QueueControl::SetMaxWorkers(m) => st.max_workers = m,
                QueueControl::SetZombieTimeout(t) => st.zombie_timeout = t,
                QueueControl::SetFetchedTimeout(t) => st.fetched_timeout = t,
                QueueControl::SetZombiePolicy(p) => st.zombie_policy = p,
                QueueControl::SetKeyMaxWorkers(m) => st.key_max_workers = m,
                QueueControl::SetRateLimit(l) => st.rate_limit = l,
            }
            st.updated_at = Some(self.now());
            s.queues.insert(queue.clone(), st.clone());
            Ok(st)
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("control_queue"))
    }

    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        async move {
            let s = self.lock();
            Ok(Self::settings(&s, queue))
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("queue_settings"))
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        async move {
            let mut s = self.lock();
            let at = self.now();
            let Some(r) = s.dead.get(&id) else {
                return Ok(RequeueOutcome::NotFound);
            };
            if let Some(key) = &r.idempotency_key {
                if Self::key_holder(&s, &r.queue, key).is_some() {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        format!("a live job of its queue holds the idempotency key of dead job {id}"),
                    ));
                }
            }
            let mut r = s.dead.remove(&id).expect("checked above");
            s.expired_holds.remove(&id);
            Self::to_pending(&mut r, at);
            r.lease = None;
            r.attempt = 0;
            r.scheduled_at = None;
            r.started_at = None;
            r.heartbeat_at = None;
            r.finished_at = None;
            s.hot.insert(id, r);
            Ok(RequeueOutcome::Requeued)
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("requeue_dead"))
    }

    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        async move {
            if req.batch_size == 0 || req.max_batches == 0 {
                return Err(Error::invalid("purge batch_size and max_batches must be at least 1"));
            }
            let mut s = self.lock();
            let cutoff = minus(self.now(), req.older_than);
            let budget = u64::from(req.batch_size) * u64::from(req.max_batches);
            let table = match req.target {
                PurgeTarget::Archive => &mut s.archive,
                PurgeTarget::DeadLetter => &mut s.dead,
            };
            let ids: Vec<JobId> = table
                .values()
                .filter(|r| r.finished_at.is_some_and(|f| f < cutoff))
                .filter(|r| req.queue.as_ref().is_none_or(|q| &r.queue == q))
                .filter(|r| req.kind.as_ref().is_none_or(|k| &r.kind == k))
                .filter(|r| req.reason.is_none_or(|reason| r.location == JobLocation::Dead(reason)))
                .map(|r| r.id)
                .take(budget as usize)
                .collect();
            for id in &ids {
                table.remove(id);
            }
            Ok(ids.len() as u64)
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("purge"))
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        async move {
            let s = self.lock();
            let at = self.now();
            let mut snap = StatsSnapshot { taken_at: Some(at), ..Default::default() };
            let mut per: BTreeMap<String, QueueStats> = BTreeMap::new();
            for r in s.hot.values().chain(s.archive.values()).chain(s.dead.values()) {
                let qs = per
                    .entry(r.queue.to_string())
                    .or_insert_with(|| QueueStats { queue: r.queue.to_string(), ..Default::default() });
                match r.location {
                    JobLocation::Hot(JobStatus::Pending) => {
                        qs.pending += 1;
                        snap.pending += 1;
                        let due = due_at(r);
                        if due <= at && qs.oldest_due_at.is_none_or(|o| due < o) {
                            qs.oldest_due_at = Some(due);
                        }
                    }
                    JobLocation::Hot(JobStatus::Fetched) => {
                        qs.fetched += 1;
                        snap.fetched += 1;
                    }
                    JobLocation::Hot(JobStatus::Processing) => {
                        qs.processing += 1;
                        snap.processing += 1;
                    }
                    JobLocation::Archived => {
                        qs.archived += 1;
                        snap.archived += 1;
                    }
                    JobLocation::Dead(reason) => {
                        qs.dead += 1;
                        snap.dead += 1;
                        if reason == DeadReason::Cancelled {
                            qs.cancelled += 1;
                            snap.cancelled += 1;
                        }
                    }
                }
            }
            let mut keys: BTreeMap<(String, String), u64> = BTreeMap::new();
            for r in s.hot.values() {
                if let (Some(k), Some(JobStatus::Fetched | JobStatus::Processing)) = (&r.concurrency_key, status_of(r))
                {
                    *keys.entry((r.queue.to_string(), k.clone())).or_default() += 1;
                }
            }
            for ((queue, key), running) in keys {
                if let Some(qs) = per.get_mut(&queue) {
                    qs.busiest_keys.push(crate::KeyCount { key, running });
                }
            }
            for qs in per.values_mut() {
                qs.busiest_keys.sort_by(|a, b| b.running.cmp(&a.running).then_with(|| a.key.cmp(&b.key)));
                qs.busiest_keys.truncate(crate::MAX_BUSIEST_KEYS);
            }
            for (name, st) in &s.queues {
                per.entry(name.to_string())
                    .or_insert_with(|| QueueStats { queue: name.to_string(), ..Default::default() })
                    .settings = Some(st.clone());
            }
            snap.queues = per.into_values().collect();
            Ok(snap)
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("stats"))
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        async move {
            let s = self.lock();
            Ok(s.hot.get(&id).or_else(|| s.archive.get(&id)).or_else(|| s.dead.get(&id)).cloned())
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("get_job"))
    }

    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        async move {
            if filter.limit == 0 || filter.limit > 1000 {
                return Err(Error::invalid(format!("list limit must be 1 to 1000, got {}", filter.limit)));
            }
            if let Some(tag) = &filter.tag {
                crate::validate::text_field("tag", tag, crate::validate::MAX_TAG_LEN)?;
            }
            let s = self.lock();
            let table = match filter.table {
                JobTable::Hot => &s.hot,
                JobTable::Archive => &s.archive,
                JobTable::DeadLetter => &s.dead,
            };
            let mut jobs: Vec<JobRecord> = table
                .values()
                .filter(|r| filter.after.is_none_or(|a| r.id > a))
                .filter(|r| filter.queue.as_ref().is_none_or(|q| &r.queue == q))
                .filter(|r| filter.status.is_none_or(|st| r.location == JobLocation::Hot(st)))
                .filter(|r| filter.kind.as_ref().is_none_or(|k| &r.kind == k))
                .filter(|r| filter.tag.as_ref().is_none_or(|t| r.tags.contains(t)))
                .filter(|r| filter.created_from.is_none_or(|f| r.created_at >= f))
                .filter(|r| filter.created_to.is_none_or(|t| r.created_at < t))
                .take(filter.limit as usize + 1)
                .map(|r| {
                    let mut r = r.clone();
                    if filter.without_payloads {
                        r.payload = serde_json::Value::Null;
                    }
                    r
                })
                .collect();
            let next = if jobs.len() > filter.limit as usize {
                jobs.truncate(filter.limit as usize);
                jobs.last().map(|r| r.id)
            } else {
                None
            };
            Ok(JobPage { jobs, next })
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("list_jobs"))
    }

    async fn wakeups(&self) -> Result<Option<crate::Wakeups>> {
        async move { Ok(None) }.await.map_err(|e: crate::Error| e.with_operation("wakeups"))
    }

    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        async move {
            reg.validate()?;
            let mut s = self.lock();
            let at = self.now();
            let started_at = s.workers.get(&reg.worker).map_or(at, |w| w.started_at);
            s.workers.insert(
                reg.worker,
                WorkerProcess {
                    worker: reg.worker,
                    host: reg.host.clone(),
                    pid: reg.pid,
                    queues: reg.queues.iter().map(|q| q.to_string()).collect(),
                    concurrency: reg.concurrency,
                    started_at,
                    last_seen_at: at,
                },
            );
            Ok(())
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("register_worker"))
    }

    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        async move { Ok(self.lock().workers.remove(&worker).is_some()) }
            .await
            .map_err(|e: crate::Error| e.with_operation("deregister_worker"))
    }

    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        async move {
            let mut out: Vec<WorkerProcess> = self.lock().workers.values().cloned().collect();
            out.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(a.worker.0.cmp(&b.worker.0)));
            Ok(out)
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("list_workers"))
    }

    async fn prune_workers(&self, stale_after: Duration) -> Result<u64> {
        async move {
            let cutoff = minus(self.now(), stale_after);
            let mut s = self.lock();
            let before = s.workers.len();
            s.workers.retain(|_, w| w.last_seen_at >= cutoff);
            Ok((before - s.workers.len()) as u64)
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("prune_workers"))
    }

    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        async move {
            params.validate()?;
            let since = minus(self.now(), params.window);
            let s = self.lock();
            let mut per: BTreeMap<(Timestamp, String), [u64; 3]> = BTreeMap::new();
            let mut add = |r: &JobRecord, at: Timestamp, i: usize| {
                if at >= since && params.queue.as_ref().is_none_or(|q| &r.queue == q) {
                    let minute = at.duration_trunc(chrono::Duration::minutes(1)).unwrap_or(at);
                    per.entry((minute, r.queue.to_string())).or_default()[i] += 1;
                }
            };
            for r in s.archive.values() {
                if let Some(f) = r.finished_at {
                    add(r, f, 0);
                }
            }
            for r in s.dead.values() {
                if let (Some(f), JobLocation::Dead(reason)) = (r.finished_at, r.location) {
                    if reason != DeadReason::Cancelled {
                        add(r, f, 1);
                    }
                }
            }
            for r in s.hot.values() {
                if r.location == JobLocation::Hot(JobStatus::Pending) && r.attempt > 0 && r.last_error.is_some() {
                    add(r, r.updated_at, 2);
                }
            }
            Ok(per
                .into_iter()
                .map(|((minute, queue), [finished, failed, retried])| ThroughputBucket {
                    queue,
                    minute,
                    finished,
                    failed,
                    retried,
                })
                .collect())
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("throughput"))
    }

    // ---- Periodic jobs (the schedules table) ----

    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        async move {
            def.validate()?;
            let mut s = self.lock();
            let at = self.now();
            let row = match s.schedules.get_mut(&def.name) {
                Some(r) => {
                    if !def.same_as(r) && !r.stale && !def.replace {
                        return Err(def.conflict(r));
                    }
                    r.spec.clone_from(&def.spec);
                    r.time_zone.clone_from(&def.time_zone);
                    r.group.clone_from(&def.group);
                    r.next_tick = def.next_tick.or(r.next_tick);
                    r.stale = false;
                    r.updated_at = at;
                    r.clone()
                }
                None => {
                    let r = ScheduleRow {
                        name: def.name.clone(),
                        spec: def.spec.clone(),
                        time_zone: def.time_zone.clone(),
                        group: def.group.clone(),
                        next_tick: def.next_tick,
                        last_enqueued_tick: None,
                        enabled: true,
                        stale: false,
                        created_at: at,
                        updated_at: at,
                    };
                    s.schedules.insert(def.name.clone(), r.clone());
                    r
                }
            };
            Ok(row)
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("register_schedule"))
    }

    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        async move {
            req.validate(self.max_payload_bytes)?;
            let mut s = self.lock();
            let at = self.now();
            let won = s.schedules.get(&req.name).is_some_and(|r| {
                !r.stale
                    && r.spec == req.spec
                    && r.time_zone == req.time_zone
                    && r.last_enqueued_tick.is_none_or(|last| last < req.tick)
            });
            if !won {
                return Ok(TickOutcome::refused(req, s.schedules.get(&req.name)));
            }
            let mut enabled = false;
            if let Some(r) = s.schedules.get_mut(&req.name) {
                r.last_enqueued_tick = Some(req.tick);
                r.next_tick = req.next_tick;
                r.updated_at = at;
                enabled = r.enabled;
            }
            if !enabled {
                return Ok(TickOutcome::Paused);
            }
            Ok(TickOutcome::Enqueued(Self::insert(&mut s, req.job.clone(), at)?))
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("enqueue_tick"))
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        async move { Ok(self.lock().schedules.values().cloned().collect()) }
            .await
            .map_err(|e: crate::Error| e.with_operation("list_schedules"))
    }

    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        async move {
            crate::validate_schedule_name(name)?;
            let mut s = self.lock();
            let r = s.schedules.get_mut(name).ok_or_else(|| Error::not_found(format!("no schedule named {name:?}")))?;
            r.enabled = enabled;
            r.updated_at = self.now();
            Ok(r.clone())
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("set_schedule_enabled"))
    }

    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        async move {
            crate::validate_live_schedules(group, live)?;
            let mut s = self.lock();
            let at = self.now();
            let mut n = 0;
            for r in s.schedules.values_mut() {
                if r.group == group && !r.stale && !live.contains(&r.name) {
                    r.stale = true;
                    r.updated_at = at;
                    n += 1;
                }
            }
            Ok(n)
        }
        .await
        .map_err(|e: crate::Error| e.with_operation("mark_stale_schedules"))
    }
}

#[cfg(test)]
mod tests;
