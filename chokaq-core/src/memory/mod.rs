//! [`MemoryBackend`]: the reference implementation of the contract, in memory.
//!
//! One mutex guards the whole store, so every operation is trivially atomic and every
//! guard is exactly the one the contract (`docs/contract.md`, "Guards") names. It exists to
//! state the semantics in code and
//! to validate the conformance suite itself; it is not a database and proves nothing about
//! one (capabilities: single process, no connections to kill).
//!
//! It has the rooms of every backend crate (`docs/architecture.md` has the table: file ->
//! trait methods), so that a new backend's author can read it first: this file holds the
//! store and the helpers every room shares; `backend.rs` is `impl Backend`, which forwards to
//! `enqueue.rs`, `claim.rs`, `lease.rs`, `admin.rs`, `inspect.rs`, `list.rs`, `workers.rs` and
//! `periodic.rs` (an in-memory store has nothing to migrate); `testing.rs` is its
//! `TestSupport`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DurationRound, Utc};

mod admin;
mod backend;
mod batch;
mod claim;
mod enqueue;
mod inspect;
mod lease;
mod list;
mod output;
mod periodic;
mod starts;
#[cfg(feature = "testing")]
mod testing;
mod unique;
mod workers;
mod workflow;
#[cfg(feature = "testing")]
pub use testing::RowView;

use crate::{
    validate, ClaimedJob, DeadReason, Enqueued, Error, FailAction, FailOutcome, Fenced, JobId, JobLocation, JobRecord,
    JobStatus, Lease, LeaseRef, NewJob, QueueName, QueueSettings, Result, RunAt, ScheduleRow, Timestamp, WorkerId,
    WorkerProcess,
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
    /// The starts log of rate-limited queues, a bucket per queue and per key; pruned by the
    /// rescue (entries older than the queue's window).
    starts: starts::StartsLog,
    /// Ids counted up from here instead of UUID v7 ([`MemoryBackend::with_clock`]).
    next_id: Option<u64>,
    /// The unique keys (`unique.rs`): key -> the job holding it.
    uniques: HashMap<String, unique::KeyRow>,
    /// The `output` column (`output.rs`): what a job recorded, kept by id wherever the job
    /// moves (hot, archive, dead letters, back), removed with the job by `purge`.
    outputs: HashMap<JobId, serde_json::Value>,
    /// Workflows (`workflow.rs`): the graphs, the waiting tasks, the tasks already counted.
    flows: workflow::Flows,
    /// Batches (`batch.rs`): counts, callbacks, the jobs already counted.
    batches: batch::Batches,
}

/// The in-memory reference backend. Cheap to create; each instance is its own store.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    store: std::sync::Arc<Mutex<Store>>,
    max_payload_bytes: usize,
    clock: Clock,
    /// The deadline of this view's reads ([`Backend::with_read_deadline`](crate::Backend)).
    read_deadline: Option<std::time::Instant>,
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
            store: std::sync::Arc::new(Mutex::new(Store::default())),
            max_payload_bytes: validate::DEFAULT_MAX_PAYLOAD_BYTES,
            clock: Clock::default(),
            read_deadline: None,
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
            store: std::sync::Arc::new(Mutex::new(store)),
            max_payload_bytes: validate::DEFAULT_MAX_PAYLOAD_BYTES,
            clock: Clock(Some(std::sync::Arc::new(clock))),
            read_deadline: None,
        }
    }

    /// The same store, its reads bounded by `deadline` (`Backend::with_read_deadline`).
    fn bounded(&self, deadline: std::time::Instant) -> Self {
        MemoryBackend {
            store: self.store.clone(),
            max_payload_bytes: self.max_payload_bytes,
            clock: self.clock.clone(),
            read_deadline: Some(deadline),
        }
    }

    /// Fails a read of a view whose deadline passed. A read runs in one step under the lock,
    /// so nothing of it outlives its call: the deadline is checked once, before it.
    fn check_read_deadline(&self) -> Result<()> {
        match self.read_deadline {
            Some(d) => crate::deadline::remaining(d).map(drop),
            None => Ok(()),
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

    /// Inserts `job` unless a live job holds its idempotency key, or a job in one of its
    /// counted states holds its unique key (computed from `at`, the enqueue's clock).
    fn insert(store: &mut Store, job: NewJob, at: Timestamp) -> Result<Enqueued> {
        if let Some(key) = &job.idempotency_key {
            if let Some(existing) = Self::key_holder(store, &job.queue, key) {
                return Ok(Enqueued { id: existing.id, duplicate: true });
            }
        }
        let ukey = crate::unique_key(&job, at)?;
        if let Some(holder) = ukey.as_ref().and_then(|k| unique::holder(store, k, at)) {
            return Ok(Enqueued { id: holder, duplicate: true });
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
        if let Some(k) = ukey {
            unique::take(store, k, id);
        }
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
            // A workflow task's dependents are cancelled with it, a batch counts it
            // (docs/workflows.md).
            workflow::failed(store, id, at);
            batch::ended(store, id, false, at);
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

#[cfg(test)]
mod tests;
