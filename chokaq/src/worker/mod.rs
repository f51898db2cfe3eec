//! The worker: claims jobs, runs handlers, batches heartbeats and completions, runs
//! maintenance and shuts down gracefully. See `docs/runtime.md` for the design.
//!
//! Its parts, each owning what it uses:
//!
//! * [`lanes`]: the lanes of a worker whose queues have slots of their own, each with its own
//!   slots, claim loop and look-ahead;
//! * [`claim`]: the claim loop (what to claim and when) and the look-ahead buffer;
//! * [`executor`]: the slots and one job on a slot (panic, timeout, verdict, failure write);
//! * [`completer`]: the completion queue and the task that writes it in batches, and the
//!   count of outcomes not written yet;
//! * [`heartbeat`]: the leases held and the task that extends them;
//! * [`maintenance`]: rescue and retention purges on an interval;
//! * [`config`]: the settings and their builder.
//!
//! This module starts them, shuts them down in order, and keeps the counters.

mod claim;
mod completer;
mod config;
#[cfg(test)]
mod execution_tests;
mod executor;
mod heartbeat;
mod lanes;
mod lookahead;
mod maintenance;
#[cfg(test)]
mod registration_tests;
#[cfg(test)]
mod reliability_tests;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod test_support;

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{Backend, ClaimedJob, LeaseRef, QueueName, Result, WorkerId};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{WorkerBuilder, WorkerConfig, MAX_SETTING_DURATION};
pub use maintenance::{MaintenanceConfig, MIN_WORKER_STALE_AFTER};

use crate::job::StopReason;
use crate::registry::Registry;
use claim::{Claimer, Lookahead, Parts};
use completer::{Completer, Outcomes};
use executor::{Defaults, Executor};
use heartbeat::{Heartbeat, Leases};
use maintenance::Maintenance;

/// How long a graceful shutdown waits to remove the worker's row from the workers table.
const DEREGISTER_TIMEOUT: Duration = Duration::from_secs(5);

/// The error text of a job handed back at shutdown.
pub const SHUTDOWN_ERROR: &str = "worker shut down";

/// Counts of what a worker did, returned by [`Worker::run`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Jobs claimed (in either claim mode).
    pub claimed: u64,
    /// Jobs started (handlers run).
    pub started: u64,
    /// Jobs archived.
    pub completed: u64,
    /// Attempts that failed (error, panic, timeout, undecodable payload, unknown kind).
    pub failed: u64,
    /// Of those, put back to Pending for a retry.
    pub retried: u64,
    /// Snoozed by their handler.
    pub snoozed: u64,
    /// Moved to the dead-letter table (any reason, cancellations included).
    pub dead_lettered: u64,
    /// Cancelled (operator request or handler).
    pub cancelled: u64,
    /// Outcomes discarded because the lease was lost.
    pub lease_lost: u64,
    /// Claimed jobs handed back unrun (Pending again, attempt not counted): prefetched jobs at
    /// shutdown, look-ahead jobs that waited past `lookahead_wait`, and those of a queue paused
    /// meanwhile.
    pub released: u64,
    /// Running jobs handed back at shutdown after the grace period.
    pub handed_back: u64,
    /// Handlers that panicked.
    pub panicked: u64,
    /// Handlers that timed out.
    pub timed_out: u64,
    /// Claim round trips (empty ones included).
    pub claim_calls: u64,
    /// Completion round trips.
    pub complete_calls: u64,
    /// Heartbeat round trips.
    pub heartbeat_calls: u64,
    /// Deferred start round trips (held jobs whose handler ran longer than a moment).
    pub start_calls: u64,
}

/// The live counters behind a [`WorkerReport`]; every part adds to its own.
#[derive(Debug, Default)]
struct Counters {
    claimed: AtomicU64,
    started: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    snoozed: AtomicU64,
    dead_lettered: AtomicU64,
    cancelled: AtomicU64,
    lease_lost: AtomicU64,
    released: AtomicU64,
    handed_back: AtomicU64,
    panicked: AtomicU64,
    timed_out: AtomicU64,
    claim_calls: AtomicU64,
    complete_calls: AtomicU64,
    heartbeat_calls: AtomicU64,
    start_calls: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    fn report(&self) -> WorkerReport {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkerReport {
            claimed: g(&self.claimed),
            started: g(&self.started),
            completed: g(&self.completed),
            failed: g(&self.failed),
            retried: g(&self.retried),
            snoozed: g(&self.snoozed),
            dead_lettered: g(&self.dead_lettered),
            cancelled: g(&self.cancelled),
            lease_lost: g(&self.lease_lost),
            released: g(&self.released),
            handed_back: g(&self.handed_back),
            panicked: g(&self.panicked),
            timed_out: g(&self.timed_out),
            claim_calls: g(&self.claim_calls),
            complete_calls: g(&self.complete_calls),
            heartbeat_calls: g(&self.heartbeat_calls),
            start_calls: g(&self.start_calls),
        }
    }
}

/// A live view of a running worker's counters; see [`Worker::run_with_handle`].
#[derive(Debug, Clone)]
pub struct StatsHandle(Arc<Counters>);

impl StatsHandle {
    /// The counters now.
    pub fn report(&self) -> WorkerReport {
        self.0.report()
    }
}

/// Runs handlers for jobs claimed from a backend. Build with [`Worker::builder`], run with
/// [`Worker::run`].
pub struct Worker {
    backend: Arc<dyn Backend>,
    config: WorkerConfig,
    registry: Arc<Registry>,
    worker_id: WorkerId,
    scheduler: Option<crate::periodic::Scheduler>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.worker_id)
            .field("backend", &self.backend.name())
            .field("config", &self.config)
            .field("kinds", &self.registry.kinds().collect::<Vec<_>>())
            .finish()
    }
}

impl Worker {
    /// A builder over `backend`.
    pub fn builder(backend: Arc<dyn Backend>) -> WorkerBuilder {
        WorkerBuilder::new(backend)
    }

    /// This worker's id (random per worker unless set).
    pub fn id(&self) -> WorkerId {
        self.worker_id
    }

    /// The settings.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Runs until `shutdown` is cancelled, then shuts down gracefully: stops claiming,
    /// releases prefetched jobs at once, gives running handlers the grace period, cancels and
    /// hands back the rest, flushes completions. Returns what it did.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport> {
        self.run_with_stats(shutdown, Arc::new(Counters::default())).await
    }

    /// Like [`Worker::run`], also returning a live view of the counters before it starts.
    pub fn run_with_handle(
        self,
        shutdown: CancellationToken,
    ) -> (StatsHandle, impl Future<Output = Result<WorkerReport>> + Send + 'static) {
        let counters = Arc::new(Counters::default());
        (StatsHandle(counters.clone()), self.run_with_stats(shutdown, counters))
    }

    async fn run_with_stats(self, shutdown: CancellationToken, counters: Arc<Counters>) -> Result<WorkerReport> {
        let Worker { backend, config: cfg, registry, worker_id: worker, scheduler } = self;
        // The queues' timeouts live in the database: a setting this worker cannot keep (a
        // heartbeat too slow for a queue's zombie timeout) refuses the start. A database that
        // cannot be read now does not stop the worker (it waits for it like any other call).
        let mut settings = Vec::with_capacity(cfg.queues.len());
        for q in &cfg.queues {
            match with_retries(|| backend.queue_settings(q)).await {
                Ok(s) => settings.push(s),
                Err(e) if e.is_retryable() => {
                    tracing::warn!(error = %e, queue = %q, "could not read the queue's settings to check the worker's");
                }
                Err(e) => return Err(e),
            }
        }
        config::check_against_settings(&cfg, &settings)?;
        // The scheduler first: a conflicting schedule fails the run before anything starts.
        let sched_stop = CancellationToken::new();
        let scheduler = match scheduler {
            Some(s) => Some(s.start(sched_stop.clone()).await?),
            None => None,
        };
        let _sched_guard = sched_stop.clone().drop_guard();
        // The lanes: one per queue with slots of its own, one for the others (`lanes`).
        let specs = if broken(worker, Broken::SharedQueueSlots) { lanes::single(&cfg) } else { lanes::layout(&cfg) };
        let leases = Arc::new(Leases::default());
        let outcomes = Arc::new(Outcomes::new(specs.len()));
        let completer =
            Arc::new(Completer::new(backend.clone(), worker, &cfg, leases.clone(), outcomes.clone(), counters.clone()));
        let semaphores: Vec<Arc<Semaphore>> = specs.iter().map(|l| Arc::new(Semaphore::new(l.slots))).collect();
        let all_slots =
            Arc::new(lanes::AllSlots::new(semaphores.iter().cloned().zip(specs.iter().map(|l| l.slots)).collect()));
        let (defaults, tracker) = (Arc::new(Defaults::from_config(&cfg)), TaskTracker::new());
        let suspect_until = Arc::new(std::sync::Mutex::new(None));
        let span = tracing::info_span!("chokaq.worker", worker = %worker);
        let mut claimers = Vec::with_capacity(specs.len());
        let mut lookaheads = Vec::with_capacity(specs.len());
        let mut wakes = Vec::with_capacity(specs.len());
        for (spec, slots) in specs.iter().zip(semaphores) {
            let lookahead = Arc::new(Lookahead::default());
            let fresh = hold_fresh(&spec.queues, cfg.heartbeat_interval, &settings);
            let executor = Arc::new(Executor {
                backend: backend.clone(),
                worker,
                lane: spec.index,
                registry: registry.clone(),
                defaults: defaults.clone(),
                slots,
                all_slots: all_slots.clone(),
                slot_freed: Notify::new(),
                job_us: AtomicU64::new(0),
                tracker: tracker.clone(),
                leases: leases.clone(),
                lookahead: lookahead.clone(),
                completer: completer.clone(),
                outcomes: outcomes.clone(),
                counters: counters.clone(),
                starting: AtomicU64::new(0),
                suspect_until: suspect_until.clone(),
                hold_fresh_us: AtomicU64::new(fresh.as_micros() as u64),
                unwritten_cap: cfg.unwritten_cap(),
                span: span.clone(),
            });
            let wake = Arc::new(Notify::new());
            let parts = Parts {
                wake: wake.clone(),
                executor,
                leases: leases.clone(),
                lookahead: lookahead.clone(),
                completer: completer.clone(),
                outcomes: outcomes.clone(),
                counters: counters.clone(),
            };
            claimers.push(Claimer::new(backend.clone(), worker, &cfg, spec, &settings, parts));
            lookaheads.push(lookahead);
            wakes.push((spec.queues.clone(), wake));
        }
        tracing::info!(
            worker = %worker,
            backend = backend.name(),
            queues = ?cfg.queues.iter().map(QueueName::as_str).collect::<Vec<_>>(),
            concurrency = cfg.concurrency,
            queue_concurrency = ?cfg.queues.iter().filter_map(|q| Some((q.as_str(), *cfg.queue_concurrency.get(q)?)))
                .collect::<Vec<_>>(),
            prefetch = cfg.prefetch,
            "chokaq worker starting"
        );

        // Background tasks: stopped only after every job has finished.
        let bg_stop = CancellationToken::new();
        let completer_stop = CancellationToken::new();
        let mut bg = Vec::new();
        let heartbeat = Heartbeat {
            backend: backend.clone(),
            worker,
            interval: cfg.heartbeat_interval,
            leases: leases.clone(),
            counters: counters.clone(),
            registration: Some(heartbeat::registration(worker, &cfg)),
        };
        bg.push(tokio::spawn(heartbeat.run(bg_stop.clone())));
        let starter =
            heartbeat::Starter { backend: backend.clone(), worker, leases: leases.clone(), counters: counters.clone() };
        bg.push(tokio::spawn(starter.run(bg_stop.clone())));
        leases.set_zombie_timeouts(&settings);
        bg.push(tokio::spawn(heartbeat::fence_loop(
            leases.clone(),
            backend.clone(),
            cfg.heartbeat_interval,
            worker,
            bg_stop.clone(),
        )));
        if cfg.maintenance.enabled {
            let maintenance = Maintenance::new(backend.clone(), cfg.maintenance.clone(), cfg.heartbeat_interval);
            bg.push(tokio::spawn(maintenance.run(bg_stop.clone())));
        }
        match backend.wakeups().await {
            Ok(Some(w)) => bg.push(tokio::spawn(lanes::wake_loop(wakes, w, bg_stop.clone()))),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "wake-ups unavailable; polling only"),
        }
        let completer_task = tokio::spawn(completer.run(completer_stop.clone()));
        // If this future is dropped instead of shut down through its token, stop everything it
        // started rather than leak it: running jobs are handed back as at the end of a grace
        // period, background tasks stop.
        let guard = DropGuard {
            worker,
            leases: leases.clone(),
            stops: vec![bg_stop.clone(), completer_stop.clone()],
            armed: true,
        };

        // Every lane's claim loop, in this task, until the shutdown token fires.
        let buffers = futures::future::join_all(claimers.iter().map(|c| c.run(&shutdown))).await;
        let buffer: VecDeque<ClaimedJob> = buffers.into_iter().flatten().collect();
        sched_stop.cancel();
        if let Some(s) = scheduler {
            s.wait().await;
        }

        // Shutdown: look-ahead jobs (Fetched, never started) go back to Pending at once, their
        // attempt not counted.
        let held: Vec<ClaimedJob> = lookaheads.iter().flat_map(|l| l.close()).collect();
        if !held.is_empty() {
            let sent: Vec<LeaseRef> = held.iter().map(ClaimedJob::lease_ref).collect();
            release_prefetched(&backend, worker, &counters, held.into()).await;
            for l in sent {
                leases.untrack(l);
            }
        }
        // Shutdown: release prefetched jobs at once.
        tracing::info!(worker = %worker, buffered = buffer.len(), "chokaq worker shutting down");
        if !buffer.is_empty() {
            release_prefetched(&backend, worker, &counters, buffer).await;
        }
        // Grace period for running handlers, then cancel and hand back the rest.
        tracker.close();
        if tokio::time::timeout(cfg.shutdown_grace, tracker.wait()).await.is_err() {
            let count = leases.stop_all(StopReason::Shutdown);
            tracing::info!(count, "grace period over; cancelling running jobs");
            tracker.wait().await;
        }
        completer_stop.cancel();
        let _ = completer_task.await;
        bg_stop.cancel();
        for t in bg {
            let _ = t.await;
        }
        // Last: this process leaves the workers table (maintenance removes the row of a
        // process that could not say goodbye).
        match tokio::time::timeout(DEREGISTER_TIMEOUT, backend.deregister_worker(worker)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not remove this worker's row; maintenance will"),
            Err(_) => tracing::warn!("removing this worker's row timed out; maintenance will"),
        }
        let report = counters.report();
        let mut guard = guard;
        guard.armed = false;
        tracing::info!(worker = %worker, ?report, "chokaq worker stopped");
        Ok(report)
    }
}

/// Shutdown: releases the prefetched (Fetched) jobs at once, in one call.
async fn release_prefetched(
    backend: &Arc<dyn Backend>,
    worker: WorkerId,
    counters: &Counters,
    buffer: VecDeque<ClaimedJob>,
) {
    let leases: Vec<LeaseRef> = buffer.iter().map(ClaimedJob::lease_ref).collect();
    match with_retries(|| backend.release(worker, &leases)).await {
        Ok(out) => {
            add(&counters.released, out.done.len() as u64);
            add(&counters.lease_lost, out.lost.len() as u64);
        }
        Err(e) => tracing::warn!(error = %e, "could not release prefetched jobs; the rescuer will"),
    }
}

struct DropGuard {
    worker: WorkerId,
    leases: Arc<Leases>,
    stops: Vec<CancellationToken>,
    armed: bool,
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        tracing::warn!(worker = %self.worker, "worker future dropped without a graceful shutdown");
        self.leases.stop_all(StopReason::Shutdown);
        for t in &self.stops {
            t.cancel();
        }
    }
}

/// The longest pause between two tries of an outcome write.
const WRITE_BACKOFF_CAP: Duration = Duration::from_secs(1);

/// Writes an outcome (`complete`, `fail`): calls `f` again on every retryable error, with a
/// back-off that doubles from 50 ms up to [`WRITE_BACKOFF_CAP`], until it is written or fails
/// for good (a non-retryable error). Nothing is given up on a transient error: a repeated
/// write of the same lease cannot apply twice (the lease guard), and the job's lease stays
/// heart-beaten meanwhile.
async fn write_with_retries<T, F, Fut>(worker: WorkerId, what: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    if broken(worker, Broken::GiveUpAfterFour) {
        return with_retries(f).await;
    }
    let mut delay = Duration::from_millis(50);
    let mut tries = 0u64;
    loop {
        match f().await {
            Err(e) if e.is_retryable() => {
                tries += 1;
                if tries % 10 == 0 {
                    tracing::warn!(error = %e, tries, what, "an outcome write keeps failing; still retrying");
                } else {
                    tracing::debug!(error = %e, tries, what, "retrying an outcome write");
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(WRITE_BACKOFF_CAP);
            }
            other => return other,
        }
    }
}

/// Deliberately broken variants of the worker, switched on per worker id by this crate's unit
/// tests only (the teeth: each must be caught by a named test). Always off outside tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Broken {
    /// Outcome writes give up after four retries (the old behaviour).
    GiveUpAfterFour,
    /// A finished job's lease is forgotten before its outcome is written (no heartbeats).
    UntrackBeforeWrite,
    /// A failed `complete_and_claim` drops its completions.
    DropFailedBatch,
    /// A job handed back at shutdown is retried even on its last attempt (dead-lettered).
    ShutdownRetries,
    /// A heartbeat reply's lost list is applied by job id, whatever the lease.
    LostById,
    /// The look-ahead is claimed in Start mode (attempt counted before a slot takes it).
    LookaheadStart,
    /// A held job's handler begins however long ago its lease was last confirmed (no
    /// confirming start after an outage).
    UnconfirmedLease,
    /// A held job whose earlier holds expired begins without its start recorded first (a
    /// poison job's crashes never count).
    SuspectUnconfirmed,
    /// A running handler is not stopped when its lease was last confirmed longer ago than
    /// its queue's zombie timeout allows (no self-fencing).
    NoSelfFence,
    /// A rate-limited queue's jobs are held in the look-ahead or prefetched like any other's
    /// (the rate counted at claim time only).
    RateAtClaimOnly,
    /// Prefetched (Reserve) jobs begin on free slots without the unwritten-outcome gate.
    BufferWithoutGate,
    /// The look-ahead keeps jobs however long its slots stay busy (hoarding).
    LookaheadHoards,
    /// The queues' own slot counts are ignored: every queue shares the worker's slots (before
    /// issue 40, item 5).
    SharedQueueSlots,
}

#[cfg(test)]
static BROKEN: std::sync::Mutex<Vec<(WorkerId, Broken)>> = std::sync::Mutex::new(Vec::new());

#[cfg(test)]
fn broken(worker: WorkerId, what: Broken) -> bool {
    BROKEN.lock().unwrap().contains(&(worker, what))
}

#[cfg(not(test))]
#[inline(always)]
fn broken(_worker: WorkerId, _what: Broken) -> bool {
    false
}

/// How long after its last confirmation a held job's handler may begin without a confirmed
/// start: half the shortest zombie timeout of the worker's queues (their settings as read at
/// the start and again every heartbeat interval; the contract's default where a queue's could
/// not be read at the start), and never less than two heartbeat intervals short of it.
fn hold_fresh(queues: &[QueueName], heartbeat: Duration, settings: &[chokaq_core::QueueSettings]) -> Duration {
    let shortest = queues
        .iter()
        .map(|q| {
            settings
                .iter()
                .find(|s| &s.name == q)
                .map(|s| s.effective_zombie_timeout())
                .unwrap_or(chokaq_core::DEFAULT_ZOMBIE_TIMEOUT)
        })
        .min()
        .unwrap_or(chokaq_core::DEFAULT_ZOMBIE_TIMEOUT);
    (shortest / 2).min(shortest.saturating_sub(2 * heartbeat))
}

/// Calls `f` again on retryable errors, a few times with a short back-off.
async fn with_retries<T, F, Fut>(mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut delay = Duration::from_millis(50);
    let mut tries = 0;
    loop {
        match f().await {
            Err(e) if e.is_retryable() && tries < 4 => {
                tries += 1;
                tracing::debug!(error = %e, tries, "retrying a backend call");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => return other,
        }
    }
}

/// An exponential moving average (weight 1/8); `avg` 0 means no sample yet.
fn ewma(avg: u64, sample: u64) -> u64 {
    let sample = sample.max(1);
    if avg == 0 {
        sample
    } else {
        (avg * 7 + sample) / 8
    }
}

#[cfg(test)]
mod tests {
    use super::ewma;

    #[test]
    fn ewma_starts_at_the_first_sample_and_weighs_an_eighth() {
        assert_eq!(ewma(0, 800), 800);
        assert_eq!(ewma(800, 1600), 900);
        assert_eq!(ewma(0, 0), 1, "a zero sample counts as 1, so 0 keeps meaning no sample");
    }
}
