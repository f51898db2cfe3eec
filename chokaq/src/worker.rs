//! The worker: claims jobs, runs handlers, batches heartbeats and completions, runs
//! maintenance and shuts down gracefully. See `docs/runtime.md` for the design.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chokaq_core::{
    Backend, ClaimMode, ClaimParams, ClaimedJob, DeadReason, Error, FailAction, FailOutcome, Fenced, JobId, JobKind,
    JobStatus, LeaseRef, PurgeParams, PurgeTarget, QueueName, RescueParams, Result, RetryPolicy, Wake, WorkerId,
    MAX_CLAIM_LIMIT,
};
use futures::FutureExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::job::{ContextInner, Job, JobContext, JobControl, JobError, JobResult, StopReason};
use crate::metrics_names as m;
use crate::registry::{HandlerOutcome, Registry};

/// The error text of a job handed back at shutdown.
pub const SHUTDOWN_ERROR: &str = "worker shut down";

/// Maintenance every worker runs on an interval; the backend makes sure only one instance at
/// a time does the work.
#[derive(Debug, Clone, PartialEq)]
pub struct MaintenanceConfig {
    /// Run maintenance at all.
    pub enabled: bool,
    /// How often (each worker adds a random delay of up to one interval before its first run).
    pub interval: Duration,
    /// Rescue parameters: fetched timeout, default zombie timeout, batch limit.
    pub rescue: RescueParams,
    /// Purge archived jobs older than this (`None`: keep them).
    pub archive_retention: Option<Duration>,
    /// Purge dead-lettered jobs older than this (`None`: keep them).
    pub dead_letter_retention: Option<Duration>,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            enabled: true,
            interval: Duration::from_secs(30),
            rescue: RescueParams::default(),
            archive_retention: Some(Duration::from_secs(7 * 24 * 3600)),
            dead_letter_retention: Some(Duration::from_secs(30 * 24 * 3600)),
        }
    }
}

/// Everything a [`Worker`] is configured with (see [`WorkerBuilder`] for the meaning and
/// defaults of each field).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    pub queues: Vec<QueueName>,
    pub concurrency: u32,
    pub prefetch: u32,
    /// Most started jobs held beyond the running ones when `prefetch` is 0 (the buffer adapts
    /// below it); `None` = 4 x `concurrency`.
    pub lookahead: Option<u32>,
    pub poll_interval: Duration,
    pub min_poll_interval: Duration,
    pub heartbeat_interval: Duration,
    pub job_timeout: Duration,
    pub queue_timeouts: HashMap<QueueName, Duration>,
    pub retry_policy: RetryPolicy,
    pub cancel_wait: Duration,
    pub shutdown_grace: Duration,
    pub completion_batch: usize,
    pub completion_flush: Duration,
    pub claim_batch_window: Duration,
    pub maintenance: MaintenanceConfig,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            queues: Vec::new(),
            concurrency: 10,
            prefetch: 0,
            lookahead: None,
            poll_interval: Duration::from_secs(1),
            min_poll_interval: Duration::from_millis(20),
            heartbeat_interval: Duration::from_secs(5),
            job_timeout: Duration::from_secs(30 * 60),
            queue_timeouts: HashMap::new(),
            retry_policy: RetryPolicy::default(),
            cancel_wait: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
            completion_batch: 500,
            completion_flush: Duration::from_millis(2),
            claim_batch_window: Duration::from_millis(2),
            maintenance: MaintenanceConfig::default(),
        }
    }
}

/// Builds a [`Worker`]. Start with [`Worker::builder`].
pub struct WorkerBuilder {
    backend: Arc<dyn Backend>,
    config: WorkerConfig,
    queue_names: Vec<String>,
    queue_timeouts: Vec<(String, Duration)>,
    registry: Registry,
    worker_id: Option<WorkerId>,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("backend", &self.backend.name())
            .field("config", &self.config)
            .field("queues", &self.queue_names)
            .field("kinds", &self.registry.kinds().collect::<Vec<_>>())
            .finish()
    }
}

impl WorkerBuilder {
    /// Adds a queue to take jobs from (at least one is needed; `"default"` if none is given).
    pub fn queue(mut self, name: impl Into<String>) -> Self {
        self.queue_names.push(name.into());
        self
    }

    /// Adds several queues.
    pub fn queues<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.queue_names.extend(names.into_iter().map(Into::into));
        self
    }

    /// Handlers running at once (1 to 1000). Default 10.
    pub fn concurrency(mut self, n: u32) -> Self {
        self.config.concurrency = n;
        self
    }

    /// Jobs held Fetched beyond the running ones (0 to 1000). Default 0: claims go straight
    /// to Processing for exactly as many jobs as there are free slots ([`ClaimMode::Start`]).
    /// With a prefetch the worker reserves ([`ClaimMode::Reserve`]) and starts each job when a
    /// slot frees; buffered jobs must start within the rescuer's fetched timeout.
    pub fn prefetch(mut self, n: u32) -> Self {
        self.config.prefetch = n;
        self
    }

    /// With `prefetch` 0: the most jobs claimed straight to Processing ([`ClaimMode::Start`])
    /// beyond the free slots, held in a look-ahead buffer so a freed slot takes the next job at
    /// once while the next claim is in flight (0 to 1000). Default: 4 x `concurrency`. The
    /// buffer adapts below this bound: `concurrency` jobs until a handler has finished, then
    /// about what the slots get through in two claim round trips (short jobs: the bound; jobs
    /// much longer than a claim: one). Buffered jobs are heart-beaten like running ones,
    /// count against queue caps, and are handed back with [`FailAction::Snooze`] (attempt not
    /// counted) at shutdown. 0 claims only free slots.
    pub fn lookahead(mut self, n: u32) -> Self {
        self.config.lookahead = Some(n);
        self
    }

    /// Longest wait between claims when idle (adaptive back-off doubles from the minimum up to
    /// this; a wake-up resets it). Default 1 s. With LISTEN/NOTIFY this is only the fallback.
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.config.poll_interval = d;
        self
    }

    /// First back-off step after an empty claim. Default 20 ms.
    pub fn min_poll_interval(mut self, d: Duration) -> Self {
        self.config.min_poll_interval = d;
        self
    }

    /// How often running jobs' leases are extended (one batched call per interval). Keep it
    /// well under the queue's zombie timeout. Default 5 s.
    pub fn heartbeat_interval(mut self, d: Duration) -> Self {
        self.config.heartbeat_interval = d;
        self
    }

    /// Default run timeout of a job. Default 30 min.
    pub fn job_timeout(mut self, d: Duration) -> Self {
        self.config.job_timeout = d;
        self
    }

    /// Run timeout of jobs of one queue (a job type's own `Job::timeout` wins).
    pub fn queue_timeout(mut self, queue: impl Into<String>, d: Duration) -> Self {
        self.queue_timeouts.push((queue.into(), d));
        self
    }

    /// Back-off of retryable failures. Default [`RetryPolicy::default`].
    pub fn retry_policy(mut self, p: RetryPolicy) -> Self {
        self.config.retry_policy = p;
        self
    }

    /// How long a handler whose token fired gets to return before it is dropped. Default 1 s.
    pub fn cancel_wait(mut self, d: Duration) -> Self {
        self.config.cancel_wait = d;
        self
    }

    /// How long running handlers get to finish at shutdown before they are cancelled and
    /// handed back. Default 10 s.
    pub fn shutdown_grace(mut self, d: Duration) -> Self {
        self.config.shutdown_grace = d;
        self
    }

    /// Completions flushed in one call at most (default 500) and the longest a finished job
    /// waits for its batch (default 2 ms).
    pub fn completion_batching(mut self, max: usize, flush_every: Duration) -> Self {
        self.config.completion_batch = max;
        self.config.completion_flush = flush_every;
        self
    }

    /// When fewer than half the slots are free, wait up to this long for more to free up
    /// before claiming, so claims come in batches (default 2 ms; zero claims at once).
    pub fn claim_batch_window(mut self, d: Duration) -> Self {
        self.config.claim_batch_window = d;
        self
    }

    /// Maintenance settings (rescue, retention).
    pub fn maintenance(mut self, m: MaintenanceConfig) -> Self {
        self.config.maintenance = m;
        self
    }

    /// A fixed worker id (default: random per worker).
    pub fn worker_id(mut self, id: WorkerId) -> Self {
        self.worker_id = Some(id);
        self
    }

    /// Registers the handler of a typed job.
    pub fn register<J, F, Fut>(mut self, handler: F) -> Self
    where
        J: Job,
        F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        self.registry.insert_typed::<J, F, Fut>(handler);
        self
    }

    /// Registers a handler by kind over the raw JSON payload.
    pub fn register_raw<F, Fut>(mut self, kind: impl Into<String>, handler: F) -> Self
    where
        F: Fn(serde_json::Value, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        self.registry.insert_raw(kind.into(), handler);
        self
    }

    /// Checks the settings and builds the worker. Bad settings are
    /// [`ErrorKind::InvalidInput`](chokaq_core::ErrorKind::InvalidInput).
    pub fn build(self) -> Result<Worker> {
        let WorkerBuilder { backend, mut config, mut queue_names, queue_timeouts, registry, worker_id } = self;
        if queue_names.is_empty() {
            queue_names.push("default".to_string());
        }
        let mut queues = Vec::new();
        for q in queue_names {
            let q = QueueName::new(q)?;
            if !queues.contains(&q) {
                queues.push(q);
            }
        }
        config.queues = queues;
        for (q, d) in queue_timeouts {
            if d.is_zero() {
                return Err(Error::invalid(format!("timeout of queue {q:?} must be positive")));
            }
            config.queue_timeouts.insert(QueueName::new(q)?, d);
        }
        for kind in registry.kinds() {
            JobKind::new(kind)?;
        }
        if registry.is_empty() {
            return Err(Error::invalid("a worker needs at least one registered handler"));
        }
        let c = &config;
        if c.concurrency == 0 || c.concurrency > MAX_CLAIM_LIMIT {
            return Err(Error::invalid(format!("concurrency must be 1 to {MAX_CLAIM_LIMIT}, got {}", c.concurrency)));
        }
        if c.prefetch > MAX_CLAIM_LIMIT {
            return Err(Error::invalid(format!("prefetch must be 0 to {MAX_CLAIM_LIMIT}, got {}", c.prefetch)));
        }
        if let Some(n) = c.lookahead.filter(|n| *n > MAX_CLAIM_LIMIT) {
            return Err(Error::invalid(format!("lookahead must be 0 to {MAX_CLAIM_LIMIT}, got {n}")));
        }
        for (name, d) in [
            ("poll interval", c.poll_interval),
            ("min poll interval", c.min_poll_interval),
            ("heartbeat interval", c.heartbeat_interval),
            ("job timeout", c.job_timeout),
            ("completion flush interval", c.completion_flush),
            ("maintenance interval", c.maintenance.interval),
        ] {
            if d.is_zero() {
                return Err(Error::invalid(format!("{name} must be positive")));
            }
        }
        if c.min_poll_interval > c.poll_interval {
            return Err(Error::invalid("min poll interval must not exceed the poll interval"));
        }
        if c.completion_batch == 0 || c.completion_batch > 10_000 {
            return Err(Error::invalid(format!("completion batch must be 1 to 10000, got {}", c.completion_batch)));
        }
        if !(c.retry_policy.factor.is_finite() && c.retry_policy.jitter.is_finite()) {
            return Err(Error::invalid("retry policy factor and jitter must be finite"));
        }
        Ok(Worker {
            backend,
            config,
            registry: Arc::new(registry),
            worker_id: worker_id.unwrap_or_else(WorkerId::random),
        })
    }
}

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
    /// Prefetched jobs released at shutdown.
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
}

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
        }
    }
}

/// A live view of a running worker's counters; see [`Worker::stats_handle`].
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

struct RunningJob {
    lease: LeaseRef,
    control: Arc<JobControl>,
}

struct Completion {
    lease: LeaseRef,
    queue: QueueName,
    kind: JobKind,
}

/// The look-ahead buffer: jobs claimed straight to Processing (Start mode) beyond the free
/// slots, in claim order. A finishing handler hands its slot to the first of them.
#[derive(Default)]
struct Ready {
    jobs: VecDeque<(ClaimedJob, Arc<JobControl>)>,
    /// Shutdown: nothing more is taken from the buffer.
    closed: bool,
}

struct Shared {
    backend: Arc<dyn Backend>,
    worker: WorkerId,
    cfg: WorkerConfig,
    registry: Arc<Registry>,
    /// Running and look-ahead jobs (both hold Processing leases the heartbeat extends).
    running: Mutex<HashMap<JobId, RunningJob>>,
    ready: Mutex<Ready>,
    slots: Arc<Semaphore>,
    slot_freed: Notify,
    wake: Notify,
    /// Finished jobs whose outcome (completion or failure) is not written yet: they still
    /// count against their queue's cap in the database.
    finishing: AtomicUsize,
    /// Completer / failure path -> claim loop: outcomes were written (cap room may be free).
    written: Notify,
    /// Outcome writes so far (a `written` wake-up with no new write since the claim is stale).
    writes: AtomicU64,
    /// The claim loop's last claim came back short with jobs in flight: it completes the
    /// queued jobs itself (`complete_and_claim`).
    cap_bound: AtomicBool,
    /// Moving average of handler run times, microseconds (0: none finished yet).
    job_us: AtomicU64,
    /// Finished jobs waiting for their completion write, oldest first. The completer flushes
    /// them in batches; a cap-bound claim loop takes them along in `complete_and_claim`.
    done: Mutex<VecDeque<Completion>>,
    done_ready: Notify,
    counters: Arc<Counters>,
    tracker: TaskTracker,
}

impl Worker {
    /// A builder over `backend`.
    pub fn builder(backend: Arc<dyn Backend>) -> WorkerBuilder {
        WorkerBuilder {
            backend,
            config: WorkerConfig::default(),
            queue_names: Vec::new(),
            queue_timeouts: Vec::new(),
            registry: Registry::default(),
            worker_id: None,
        }
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
        let sh = Arc::new(Shared {
            backend: self.backend,
            worker: self.worker_id,
            slots: Arc::new(Semaphore::new(self.config.concurrency as usize)),
            cfg: self.config,
            registry: self.registry,
            running: Mutex::new(HashMap::new()),
            ready: Mutex::new(Ready::default()),
            slot_freed: Notify::new(),
            wake: Notify::new(),
            finishing: AtomicUsize::new(0),
            written: Notify::new(),
            writes: AtomicU64::new(0),
            job_us: AtomicU64::new(0),
            cap_bound: AtomicBool::new(false),
            done: Mutex::new(VecDeque::new()),
            done_ready: Notify::new(),
            counters,
            tracker: TaskTracker::new(),
        });
        tracing::info!(
            worker = %sh.worker,
            backend = sh.backend.name(),
            queues = ?sh.cfg.queues.iter().map(QueueName::as_str).collect::<Vec<_>>(),
            concurrency = sh.cfg.concurrency,
            prefetch = sh.cfg.prefetch,
            "chokaq worker starting"
        );

        // Background tasks: stopped only after every job has finished.
        let bg_stop = CancellationToken::new();
        let completer_stop = CancellationToken::new();
        let mut bg = Vec::new();
        bg.push(tokio::spawn(heartbeat_loop(sh.clone(), bg_stop.clone())));
        if sh.cfg.maintenance.enabled {
            bg.push(tokio::spawn(maintenance_loop(sh.clone(), bg_stop.clone())));
        }
        match sh.backend.wakeups().await {
            Ok(Some(w)) => bg.push(tokio::spawn(wake_loop(sh.clone(), w, bg_stop.clone()))),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "wake-ups unavailable; polling only"),
        }
        let completer = tokio::spawn(completer_loop(sh.clone(), completer_stop.clone()));
        // If this future is dropped instead of shut down through its token, stop everything it
        // started rather than leak it: running jobs are handed back as at the end of a grace
        // period, background tasks stop.
        let guard = DropGuard { sh: sh.clone(), stops: vec![bg_stop.clone(), completer_stop.clone()], armed: true };

        let buffer = claim_loop(&sh, &shutdown).await;

        // Shutdown: look-ahead jobs (already Processing) go back to Pending at once, their
        // attempt not counted.
        let held: Vec<ClaimedJob> = {
            let mut ready = sh.ready.lock().unwrap();
            ready.closed = true;
            ready.jobs.drain(..).map(|(job, _)| job).collect()
        };
        if !held.is_empty() {
            hand_back_ready(&sh, held).await;
        }

        // Shutdown: release prefetched jobs at once.
        tracing::info!(worker = %sh.worker, buffered = buffer.len(), "chokaq worker shutting down");
        if !buffer.is_empty() {
            let leases: Vec<LeaseRef> = buffer.iter().map(ClaimedJob::lease_ref).collect();
            match with_retries(|| sh.backend.release(sh.worker, &leases)).await {
                Ok(out) => {
                    add(&sh.counters.released, out.done.len() as u64);
                    add(&sh.counters.lease_lost, out.lost.len() as u64);
                }
                Err(e) => tracing::warn!(error = %e, "could not release prefetched jobs; the rescuer will"),
            }
        }
        // Grace period for running handlers, then cancel and hand back the rest.
        sh.tracker.close();
        if tokio::time::timeout(sh.cfg.shutdown_grace, sh.tracker.wait()).await.is_err() {
            let running: Vec<Arc<JobControl>> =
                sh.running.lock().unwrap().values().map(|r| r.control.clone()).collect();
            tracing::info!(count = running.len(), "grace period over; cancelling running jobs");
            for c in running {
                c.stop(StopReason::Shutdown);
            }
            sh.tracker.wait().await;
        }
        completer_stop.cancel();
        let _ = completer.await;
        bg_stop.cancel();
        for t in bg {
            let _ = t.await;
        }
        let report = sh.counters.report();
        let mut guard = guard;
        guard.armed = false;
        tracing::info!(worker = %sh.worker, ?report, "chokaq worker stopped");
        Ok(report)
    }
}

struct DropGuard {
    sh: Arc<Shared>,
    stops: Vec<CancellationToken>,
    armed: bool,
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        tracing::warn!(worker = %self.sh.worker, "worker future dropped without a graceful shutdown");
        if let Ok(running) = self.sh.running.lock() {
            for r in running.values() {
                r.control.stop(StopReason::Shutdown);
            }
        }
        for t in &self.stops {
            t.cancel();
        }
    }
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

/// The claim loop; returns the prefetch buffer left at shutdown.
async fn claim_loop(sh: &Arc<Shared>, shutdown: &CancellationToken) -> VecDeque<ClaimedJob> {
    let cfg = &sh.cfg;
    let concurrency = cfg.concurrency as usize;
    let prefetch = cfg.prefetch as usize;
    let mode = if prefetch == 0 { ClaimMode::Start } else { ClaimMode::Reserve };
    let lookahead_max = if prefetch == 0 {
        cfg.lookahead.unwrap_or(cfg.concurrency.saturating_mul(4)).min(MAX_CLAIM_LIMIT) as usize
    } else {
        0
    };
    // Moving average of claim round trips, microseconds.
    let mut rtt_us = 0u64;
    let mut buffer: VecDeque<ClaimedJob> = VecDeque::new();
    let mut backoff = cfg.min_poll_interval;
    let mut next_claim = Instant::now();
    let max_idle = cfg.poll_interval;
    let mut next_pause_check = Instant::now() + cfg.heartbeat_interval;
    let mut gather_until: Option<Instant> = None;
    // The last claim came back short while outcomes of this worker were still unwritten: the
    // next claim waits for the next write (a queue cap counts unwritten jobs) instead of polling.
    let mut await_written = false;
    // The last claim came back short with jobs in flight: the next claim completes the queued
    // finished jobs in the same call.
    let mut cap_bound = false;
    let mut seen_writes = 0u64;

    loop {
        if shutdown.is_cancelled() {
            break;
        }
        // 0. Prefetched jobs of a queue paused (or deactivated) since are released, not run.
        if !buffer.is_empty() && Instant::now() >= next_pause_check {
            next_pause_check = Instant::now() + cfg.heartbeat_interval;
            release_paused(sh, &mut buffer).await;
        }
        // 1. Start buffered jobs on free slots (reserve mode).
        if !buffer.is_empty() {
            let free = sh.slots.available_permits().min(buffer.len());
            if free > 0 {
                if let Ok(permits) = sh.slots.clone().try_acquire_many_owned(free as u32) {
                    let batch: Vec<ClaimedJob> = buffer.drain(..free).collect();
                    start_and_spawn(sh, batch, permits).await;
                    continue;
                }
            }
        }
        // 1b. Look-ahead jobs onto free slots (finishing handlers normally take them first).
        fill_slots_from_ready(sh);
        // 2. Claim what fits: running + prefetched (Fetched) + look-ahead (Processing).
        let lookahead = lookahead_target(concurrency, lookahead_max, rtt_us, sh.job_us.load(Ordering::Relaxed));
        let capacity = concurrency + prefetch + lookahead;
        let free = sh.slots.available_permits();
        let ready_len = sh.ready.lock().unwrap().jobs.len();
        let held = (concurrency - free.min(concurrency)) + buffer.len() + ready_len;
        let want = capacity.saturating_sub(held).min(MAX_CLAIM_LIMIT as usize);
        let now = Instant::now();
        // Batch claims: while most of the capacity is still held, give others a moment to free up.
        let small = want > 0 && want * 2 < capacity;
        let gathering = if small && !cfg.claim_batch_window.is_zero() && now >= next_claim {
            let until = *gather_until.get_or_insert(now + cfg.claim_batch_window);
            now < until
        } else {
            false
        };
        if want > 0 && now >= next_claim && !gathering {
            gather_until = None;
            await_written = false;
            let req = ClaimParams::new(sh.worker, cfg.queues.clone(), want as u32, mode);
            // Cap-bound: take the queued completions along, so the claim's cap count sees
            // them (one round trip where the backend supports it).
            let batch = if cap_bound { take_done(sh, cfg.completion_batch) } else { Vec::new() };
            let t0 = Instant::now();
            let res = if batch.is_empty() {
                sh.backend.claim(&req).await
            } else {
                let leases: Vec<LeaseRef> = batch.iter().map(|c| c.lease).collect();
                match sh.backend.complete_and_claim(sh.worker, &leases, &req).await {
                    Ok((out, jobs)) => {
                        completions_written(sh, &batch, Ok(out.lost));
                        Ok(jobs)
                    }
                    Err(e) => {
                        completions_written(sh, &batch, Err(&e));
                        Err(e)
                    }
                }
            };
            add(&sh.counters.claim_calls, 1);
            let took = t0.elapsed();
            rtt_us = ewma(rtt_us, took.as_micros() as u64);
            metrics::histogram!(m::CLAIM_LATENCY).record(took.as_secs_f64());
            match res {
                Ok(jobs) => {
                    let got = jobs.len();
                    add(&sh.counters.claimed, got as u64);
                    if mode == ClaimMode::Start {
                        let tracked: Vec<(ClaimedJob, Arc<JobControl>)> = jobs
                            .into_iter()
                            .map(|job| {
                                let control = track(sh, &job);
                                (job, control)
                            })
                            .collect();
                        sh.ready.lock().unwrap().jobs.extend(tracked);
                        fill_slots_from_ready(sh);
                    } else {
                        buffer.extend(jobs);
                    }
                    if got >= want {
                        // More may be waiting (rows skipped as locked by other claimers, or a
                        // full batch): claim again as soon as there is room.
                        backoff = cfg.min_poll_interval;
                        next_claim = Instant::now();
                        cap_bound = false;
                        sh.cap_bound.store(false, Ordering::Release);
                    } else {
                        // Short: the queues ran dry, or a cap (which counts this worker's
                        // finished but unwritten jobs) is reached. While this worker holds jobs
                        // or unwritten outcomes, claim again as soon as they are all finished
                        // (taking their completions along) or an outcome is written, instead
                        // of polling.
                        let in_flight =
                            sh.finishing.load(Ordering::Acquire) > 0 || !sh.running.lock().unwrap().is_empty();
                        cap_bound = in_flight;
                        sh.cap_bound.store(in_flight, Ordering::Release);
                        await_written = in_flight;
                        seen_writes = sh.writes.load(Ordering::Acquire);
                        if got == 0 {
                            next_claim = Instant::now() + backoff;
                            backoff = (backoff * 2).min(max_idle);
                        } else if in_flight {
                            next_claim = Instant::now() + backoff;
                        } else {
                            backoff = cfg.min_poll_interval;
                            next_claim = Instant::now();
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "claim failed; backing off");
                    next_claim = Instant::now() + backoff;
                    backoff = (backoff * 2).min(max_idle);
                }
            }
            continue;
        }
        // 3. Wait for a free slot, a written outcome, a wake-up, the next poll, or shutdown.
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = sh.slot_freed.notified() => {
                if await_written {
                    // Cap-bound: once nothing runs, complete what finished and claim at once,
                    // without waiting for the completer's batch window.
                    if sh.running.lock().unwrap().is_empty() && !sh.done.lock().unwrap().is_empty() {
                        await_written = false;
                        next_claim = Instant::now();
                    }
                } else {
                    // Let other finishing handlers free their slots too, so claims batch up.
                    tokio::task::yield_now().await;
                }
            }
            _ = sh.written.notified(), if await_written => {
                if sh.writes.load(Ordering::Acquire) != seen_writes {
                    await_written = false;
                    next_claim = Instant::now();
                }
            }
            _ = sh.wake.notified() => {
                backoff = cfg.min_poll_interval;
                next_claim = Instant::now();
            }
            _ = tokio::time::sleep_until(next_claim), if want > 0 && !gathering => {}
            _ = tokio::time::sleep_until(gather_until.unwrap_or(now)), if gathering => {}
            _ = tokio::time::sleep_until(next_pause_check), if !buffer.is_empty() => {}
        }
    }
    buffer
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

/// How many look-ahead jobs to hold: what the slots get through in two claim round trips,
/// between 1 and `max`; `concurrency` (at most `max`) until both averages exist.
fn lookahead_target(concurrency: usize, max: usize, rtt_us: u64, job_us: u64) -> usize {
    if max == 0 {
        return 0;
    }
    if rtt_us == 0 || job_us == 0 {
        return concurrency.min(max);
    }
    let need = (2 * concurrency as u64 * rtt_us).div_ceil(job_us);
    (need.min(max as u64) as usize).max(1)
}

/// Takes the next look-ahead job, unless shutting down.
fn take_ready(sh: &Shared) -> Option<(ClaimedJob, Arc<JobControl>)> {
    let mut ready = sh.ready.lock().unwrap();
    if ready.closed {
        return None;
    }
    ready.jobs.pop_front()
}

/// Starts look-ahead jobs on every free slot.
fn fill_slots_from_ready(sh: &Arc<Shared>) {
    loop {
        let Ok(permit) = sh.slots.clone().try_acquire_owned() else { return };
        match take_ready(sh) {
            Some((job, control)) => spawn_tracked(sh, job, permit, control),
            None => return,
        }
    }
}

/// Shutdown: hands the look-ahead jobs (Processing, never run) back to Pending at once, with
/// `FailAction::Snooze { delay: 0 }` so the attempt does not count.
async fn hand_back_ready(sh: &Arc<Shared>, held: Vec<ClaimedJob>) {
    {
        let mut running = sh.running.lock().unwrap();
        for job in &held {
            running.remove(&job.id);
        }
    }
    let results = futures::future::join_all(held.iter().map(|job| {
        let lease = job.lease_ref();
        with_retries(move || sh.backend.fail(sh.worker, lease, FailAction::Snooze { delay: Duration::ZERO }))
    }))
    .await;
    for r in results {
        match r {
            Ok(Fenced::Done(_)) => add(&sh.counters.released, 1),
            Ok(Fenced::LeaseLost) => add(&sh.counters.lease_lost, 1),
            Err(e) => tracing::warn!(error = %e, "could not hand back a look-ahead job; the rescuer will"),
        }
    }
}

/// Releases the buffered jobs of queues that are now paused or inactive.
async fn release_paused(sh: &Shared, buffer: &mut VecDeque<ClaimedJob>) {
    let mut queues: Vec<QueueName> = Vec::new();
    for j in buffer.iter() {
        if !queues.contains(&j.queue) {
            queues.push(j.queue.clone());
        }
    }
    let mut stopped: Vec<QueueName> = Vec::new();
    for q in queues {
        match sh.backend.queue_settings(&q).await {
            Ok(s) if s.is_paused || !s.is_active => stopped.push(q),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, queue = %q, "could not read queue settings"),
        }
    }
    if stopped.is_empty() {
        return;
    }
    let (release, keep): (Vec<ClaimedJob>, Vec<ClaimedJob>) =
        buffer.drain(..).partition(|j| stopped.contains(&j.queue));
    buffer.extend(keep);
    let leases: Vec<LeaseRef> = release.iter().map(ClaimedJob::lease_ref).collect();
    match with_retries(|| sh.backend.release(sh.worker, &leases)).await {
        Ok(out) => {
            tracing::info!(released = out.done.len(), "released prefetched jobs of paused queues");
            add(&sh.counters.released, out.done.len() as u64);
            add(&sh.counters.lease_lost, out.lost.len() as u64);
        }
        Err(e) => tracing::warn!(error = %e, "could not release prefetched jobs of paused queues; the rescuer will"),
    }
}

/// Reserve mode: starts buffered jobs (one call for the batch) and spawns the ones still held.
async fn start_and_spawn(sh: &Arc<Shared>, batch: Vec<ClaimedJob>, mut permits: OwnedSemaphorePermit) {
    let leases: Vec<LeaseRef> = batch.iter().map(ClaimedJob::lease_ref).collect();
    match with_retries(|| sh.backend.start(sh.worker, &leases)).await {
        Ok(out) => {
            let done: HashSet<JobId> = out.done.into_iter().collect();
            for mut job in batch {
                if done.contains(&job.id) {
                    job.attempt += 1;
                    job.status = JobStatus::Processing;
                    if let Some(p) = permits.split(1) {
                        spawn_job(sh, job, p);
                    }
                } else {
                    add(&sh.counters.lease_lost, 1);
                    metrics::counter!(m::LEASE_LOST, "queue" => job.queue.to_string(), "kind" => job.kind.to_string())
                        .increment(1);
                    tracing::debug!(id = %job.id, "lease lost before start (rescued or cancelled)");
                }
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, count = leases.len(), "start failed; releasing the jobs");
            if let Err(e) = sh.backend.release(sh.worker, &leases).await {
                tracing::warn!(error = %e, "release failed too; the rescuer will put them back");
            }
        }
    }
}

fn spawn_job(sh: &Arc<Shared>, job: ClaimedJob, permit: OwnedSemaphorePermit) {
    let control = track(sh, &job);
    spawn_tracked(sh, job, permit, control);
}

/// Registers a Processing job for heartbeats, cancel requests and lease loss.
fn track(sh: &Shared, job: &ClaimedJob) -> Arc<JobControl> {
    let control = Arc::new(JobControl::new());
    let old =
        sh.running.lock().unwrap().insert(job.id, RunningJob { lease: job.lease_ref(), control: control.clone() });
    if let Some(old) = old {
        // This worker still runs an earlier attempt of the same job, which was rescued and
        // granted anew: the earlier lease is lost, whatever the next heartbeat would say.
        old.control.stop(StopReason::LeaseLost);
    }
    control
}

/// Runs a tracked job on the slot `permit` holds.
fn spawn_tracked(sh: &Arc<Shared>, job: ClaimedJob, permit: OwnedSemaphorePermit, control: Arc<JobControl>) {
    add(&sh.counters.started, 1);
    let span =
        tracing::info_span!("chokaq.job", queue = %job.queue, kind = %job.kind, id = %job.id, attempt = job.attempt);
    sh.tracker.spawn(run_job(sh.clone(), job, permit, control).instrument(span));
}

/// What to do with a finished attempt.
enum Verdict {
    Complete,
    Fail(FailAction),
    /// The lease is gone: write nothing.
    Discard,
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

async fn run_job(sh: Arc<Shared>, job: ClaimedJob, permit: OwnedSemaphorePermit, control: Arc<JobControl>) {
    let ClaimedJob {
        id, queue, kind, payload, attempt, max_attempts, lease, scheduled_at, created_at, started_at, ..
    } = job;
    let lease = LeaseRef { id, lease };
    if let Some(started) = started_at {
        let due = scheduled_at.unwrap_or(created_at);
        let lag = (started - due).to_std().unwrap_or_default();
        metrics::histogram!(m::QUEUE_LAG, "queue" => queue.to_string()).record(lag.as_secs_f64());
    }
    let t0 = Instant::now();
    let handler = sh.registry.get(kind.as_str()).cloned();
    let verdict = match handler {
        None => {
            add(&sh.counters.failed, 1);
            let msg = format!("unknown job kind {:?}: no handler is registered for it on this worker", kind.as_str());
            tracing::warn!("{msg}");
            Verdict::Fail(FailAction::DeadLetter { reason: DeadReason::Failed, error: msg })
        }
        Some(h) => {
            let timeout =
                h.timeout.or_else(|| sh.cfg.queue_timeouts.get(&queue).copied()).unwrap_or(sh.cfg.job_timeout);
            let policy = h.retry_policy.unwrap_or(sh.cfg.retry_policy);
            if let Some(reason) = control.reason() {
                // Stopped while waiting in the look-ahead buffer (lease lost, cancel request):
                // the handler does not run.
                decide(&sh, Some(reason), None, attempt, &policy, timeout)
            } else {
                let ctx = JobContext::new(ContextInner {
                    id,
                    lease,
                    attempt,
                    max_attempts,
                    queue: queue.clone(),
                    kind: kind.clone(),
                    worker: sh.worker,
                    backend: sh.backend.clone(),
                    control: control.clone(),
                });
                let fut = AssertUnwindSafe((h.call)(payload, ctx)).catch_unwind();
                tokio::pin!(fut);
                let first = tokio::select! {
                    biased;
                    r = &mut fut => Some(r),
                    _ = control.token.cancelled() => None,
                    _ = tokio::time::sleep(timeout) => {
                        control.stop(StopReason::Timeout);
                        None
                    }
                };
                let res = match first {
                    Some(r) => Some(r),
                    // Stopped from outside: give the handler a moment to notice and return.
                    None => tokio::time::timeout(sh.cfg.cancel_wait, &mut fut).await.ok(),
                };
                let ran = t0.elapsed();
                let avg = sh.job_us.load(Ordering::Relaxed);
                sh.job_us.store(ewma(avg, ran.as_micros() as u64), Ordering::Relaxed);
                metrics::histogram!(m::JOB_RUN, "queue" => queue.to_string(), "kind" => kind.to_string())
                    .record(ran.as_secs_f64());
                decide(&sh, control.reason(), res, attempt, &policy, timeout)
            }
        }
    };
    // The handler is done (or dropped): hand the slot to the next look-ahead job, or free it,
    // before the finishing write. Until that write the job still counts against caps.
    {
        // Remove this attempt's entry only (a newer lease of the same job may be buffered).
        let mut running = sh.running.lock().unwrap();
        if running.get(&id).is_some_and(|r| r.lease == lease) {
            running.remove(&id);
        }
    }
    if !matches!(verdict, Verdict::Discard) {
        sh.finishing.fetch_add(1, Ordering::AcqRel);
    }
    // Queue the completion before the slot is seen free, so a claim loop that finds nothing
    // running finds every finished job's completion queued.
    let verdict = match verdict {
        Verdict::Complete => {
            sh.done.lock().unwrap().push_back(Completion { lease, queue: queue.clone(), kind: kind.clone() });
            sh.done_ready.notify_one();
            None
        }
        other => Some(other),
    };
    match take_ready(&sh) {
        Some((next, next_control)) => spawn_tracked(&sh, next, permit, next_control),
        None => drop(permit),
    }
    sh.slot_freed.notify_one();

    match verdict {
        None | Some(Verdict::Complete) => {}
        Some(Verdict::Discard) => {
            add(&sh.counters.lease_lost, 1);
            metrics::counter!(m::LEASE_LOST, "queue" => queue.to_string(), "kind" => kind.to_string()).increment(1);
            tracing::info!("lease lost; outcome discarded");
        }
        Some(Verdict::Fail(outcome)) => finish_failed(&sh, lease, &queue, &kind, outcome).await,
    }
}

type CaughtOutcome = std::result::Result<HandlerOutcome, Box<dyn std::any::Any + Send>>;

fn decide(
    sh: &Shared,
    reason: Option<StopReason>,
    res: Option<CaughtOutcome>,
    attempt: i32,
    policy: &RetryPolicy,
    timeout: Duration,
) -> Verdict {
    let c = &sh.counters;
    let returned_ok = matches!(res, Some(Ok(HandlerOutcome::Returned(Ok(())))));
    match reason {
        Some(StopReason::LeaseLost) => return Verdict::Discard,
        Some(StopReason::CancelRequested) => {
            return Verdict::Fail(FailAction::Cancelled { error: Some("cancelled by operator request".to_string()) })
        }
        // The work got done after all: keep it.
        Some(StopReason::Timeout | StopReason::Shutdown) if returned_ok => return Verdict::Complete,
        Some(StopReason::Timeout) => {
            add(&c.timed_out, 1);
            add(&c.failed, 1);
            tracing::warn!(?timeout, "job timed out");
            return Verdict::Fail(FailAction::Retry {
                delay: policy.delay(attempt),
                error: format!("job timed out after {timeout:?}"),
            });
        }
        Some(StopReason::Shutdown) => {
            add(&c.handed_back, 1);
            return Verdict::Fail(FailAction::Retry { delay: Duration::ZERO, error: SHUTDOWN_ERROR.to_string() });
        }
        None => {}
    }
    match res {
        None => {
            add(&c.failed, 1);
            Verdict::Fail(FailAction::Retry { delay: policy.delay(attempt), error: "handler stopped".to_string() })
        }
        Some(Err(panic)) => {
            add(&c.panicked, 1);
            add(&c.failed, 1);
            let msg = format!("handler panicked: {}", panic_message(panic.as_ref()));
            tracing::warn!("{msg}");
            Verdict::Fail(FailAction::Retry { delay: policy.delay(attempt), error: msg })
        }
        Some(Ok(HandlerOutcome::Undecodable(msg))) => {
            add(&c.failed, 1);
            tracing::warn!("{msg}");
            Verdict::Fail(FailAction::DeadLetter { reason: DeadReason::Failed, error: msg })
        }
        Some(Ok(HandlerOutcome::Returned(Ok(())))) => Verdict::Complete,
        Some(Ok(HandlerOutcome::Returned(Err(e)))) => {
            if !matches!(e, JobError::Snooze(_) | JobError::Cancel(_)) {
                add(&c.failed, 1);
            }
            tracing::debug!(error = %e, "handler returned an error");
            Verdict::Fail(match e {
                JobError::Retry(msg) => FailAction::Retry { delay: policy.delay(attempt), error: msg },
                JobError::RetryAfter(delay, msg) => FailAction::Retry { delay, error: msg },
                JobError::Fatal(msg) => FailAction::DeadLetter { reason: DeadReason::Failed, error: msg },
                JobError::Snooze(delay) => FailAction::Snooze { delay },
                JobError::Cancel(error) => FailAction::Cancelled { error },
            })
        }
    }
}

async fn finish_failed(sh: &Shared, lease: LeaseRef, queue: &QueueName, kind: &JobKind, outcome: FailAction) {
    let c = &sh.counters;
    let is_failure = matches!(outcome, FailAction::Retry { .. } | FailAction::DeadLetter { .. });
    match with_retries(|| sh.backend.fail(sh.worker, lease, outcome.clone())).await {
        Ok(Fenced::Done(r)) => {
            if is_failure {
                metrics::counter!(m::FAILED, "queue" => queue.to_string(), "kind" => kind.to_string()).increment(1);
            }
            match r {
                FailOutcome::Retried { at } => {
                    add(&c.retried, 1);
                    metrics::counter!(m::RETRIED, "queue" => queue.to_string(), "kind" => kind.to_string())
                        .increment(1);
                    tracing::debug!(%at, "job will be retried");
                }
                FailOutcome::Snoozed { until } => {
                    add(&c.snoozed, 1);
                    tracing::debug!(%until, "job snoozed");
                }
                FailOutcome::DeadLettered(reason) => {
                    add(&c.dead_lettered, 1);
                    if reason == DeadReason::Cancelled {
                        add(&c.cancelled, 1);
                    }
                    metrics::counter!(m::DEAD_LETTERED, "queue" => queue.to_string(), "kind" => kind.to_string(),
                        "reason" => reason.as_str())
                    .increment(1);
                    tracing::info!(%reason, "job dead-lettered");
                }
            }
        }
        Ok(Fenced::LeaseLost) => {
            add(&c.lease_lost, 1);
            metrics::counter!(m::LEASE_LOST, "queue" => queue.to_string(), "kind" => kind.to_string()).increment(1);
            tracing::info!("lease lost; failure outcome discarded");
        }
        Err(e) => {
            tracing::error!(error = %e, "could not record the failed attempt; the rescuer will retry the job");
        }
    }
    sh.finishing.fetch_sub(1, Ordering::AcqRel);
    sh.writes.fetch_add(1, Ordering::AcqRel);
    sh.written.notify_one();
}

async fn completer_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let max = sh.cfg.completion_batch;
    loop {
        if sh.done.lock().unwrap().is_empty() {
            tokio::select! {
                _ = sh.done_ready.notified() => {}
                _ = stop.cancelled() => {
                    // Stopping (every job has finished): flush what is left.
                    loop {
                        let batch = take_done(&sh, max);
                        if batch.is_empty() {
                            return;
                        }
                        flush_completions(&sh, batch).await;
                    }
                }
            }
        }
        // Gather for up to the flush interval or a full batch; flush at once when two slot-fulls
        // (2 x `concurrency`) are waiting, so few finished jobs stay unwritten (after a crash
        // they run again), except while the claim loop is cap-bound: it takes them along.
        let deadline = Instant::now() + sh.cfg.completion_flush;
        let early = if sh.cap_bound.load(Ordering::Acquire) { max } else { max.min(2 * sh.cfg.concurrency as usize) };
        while sh.done.lock().unwrap().len() < early {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break,
                _ = sh.done_ready.notified() => {}
            }
        }
        // Empty when a cap-bound claim loop took them along meanwhile.
        let batch = take_done(&sh, max);
        flush_completions(&sh, batch).await;
    }
}

/// Takes up to `max` queued completions, oldest first.
fn take_done(sh: &Shared, max: usize) -> Vec<Completion> {
    let mut done = sh.done.lock().unwrap();
    let n = done.len().min(max);
    done.drain(..n).collect()
}

async fn flush_completions(sh: &Shared, batch: Vec<Completion>) {
    if batch.is_empty() {
        return;
    }
    let leases: Vec<LeaseRef> = batch.iter().map(|c| c.lease).collect();
    add(&sh.counters.complete_calls, 1);
    let res = with_retries(|| sh.backend.complete(sh.worker, &leases)).await;
    completions_written(sh, &batch, res.as_ref().map(|out| out.lost.clone()));
}

/// Records a completion write (counters, metrics) and tells the claim loop.
fn completions_written(sh: &Shared, batch: &[Completion], res: std::result::Result<Vec<JobId>, &Error>) {
    match res {
        Ok(lost) => {
            let lost: HashSet<JobId> = lost.into_iter().collect();
            let mut done = 0u64;
            for c in batch {
                if lost.contains(&c.lease.id) {
                    metrics::counter!(m::LEASE_LOST, "queue" => c.queue.to_string(), "kind" => c.kind.to_string())
                        .increment(1);
                    tracing::info!(id = %c.lease.id, "lease lost before completion; outcome discarded");
                } else {
                    done += 1;
                    metrics::counter!(m::COMPLETED, "queue" => c.queue.to_string(), "kind" => c.kind.to_string())
                        .increment(1);
                }
            }
            add(&sh.counters.completed, done);
            add(&sh.counters.lease_lost, lost.len() as u64);
        }
        Err(e) => {
            tracing::error!(error = %e, count = batch.len(),
                "could not complete jobs; they will be rescued and run again (handlers must be idempotent)");
        }
    }
    sh.finishing.fetch_sub(batch.len(), Ordering::AcqRel);
    sh.writes.fetch_add(1, Ordering::AcqRel);
    sh.written.notify_one();
}

async fn heartbeat_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(sh.cfg.heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let leases: Vec<LeaseRef> = sh
            .running
            .lock()
            .unwrap()
            .values()
            .filter(|r| r.control.reason() != Some(StopReason::LeaseLost))
            .map(|r| r.lease)
            .collect();
        if leases.is_empty() {
            continue;
        }
        add(&sh.counters.heartbeat_calls, 1);
        match sh.backend.heartbeat(sh.worker, &leases).await {
            Ok(report) => {
                if report.lost.is_empty() && report.cancel_requested.is_empty() {
                    continue;
                }
                let running = sh.running.lock().unwrap();
                for id in &report.lost {
                    if let Some(r) = running.get(id) {
                        r.control.stop(StopReason::LeaseLost);
                    }
                }
                for id in &report.cancel_requested {
                    if let Some(r) = running.get(id) {
                        r.control.stop(StopReason::CancelRequested);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, count = leases.len(), "heartbeat failed"),
        }
    }
}

async fn maintenance_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let mc = &sh.cfg.maintenance;
    // Spread the instances out.
    let first = mc.interval.mul_f64(rand::random::<f64>());
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = tokio::time::sleep(first) => {}
    }
    let mut tick = tokio::time::interval(mc.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match sh.backend.rescue(&mc.rescue).await {
            Ok(r) if r.fetched_released + r.zombies_retried + r.zombies_dead > 0 => {
                tracing::info!(
                    fetched_released = r.fetched_released,
                    zombies_retried = r.zombies_retried,
                    zombies_dead = r.zombies_dead,
                    "rescue"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "rescue failed"),
        }
        for (target, age) in
            [(PurgeTarget::Archive, mc.archive_retention), (PurgeTarget::DeadLetter, mc.dead_letter_retention)]
        {
            let Some(age) = age else { continue };
            match sh.backend.purge(&PurgeParams::new(target, age)).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(?target, purged = n, "retention purge"),
                Err(e) => tracing::warn!(error = %e, ?target, "purge failed"),
            }
        }
    }
}

async fn wake_loop(sh: Arc<Shared>, mut wakeups: chokaq_core::Wakeups, stop: CancellationToken) {
    loop {
        let w = tokio::select! {
            _ = stop.cancelled() => return,
            w = wakeups.recv() => w,
        };
        match w {
            Some(Wake::Any) => sh.wake.notify_one(),
            Some(Wake::Queue(q)) if sh.cfg.queues.iter().any(|x| x.as_str() == q) => sh.wake.notify_one(),
            Some(Wake::Queue(_)) => {}
            None => {
                tracing::info!("wake-up stream ended; polling only");
                return;
            }
        }
    }
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
