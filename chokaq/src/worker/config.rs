//! What a worker is configured with, and the builder that checks it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{Backend, Error, JobKind, QueueName, Result, RetryPolicy, WorkerId, MAX_CLAIM_LIMIT};

use super::maintenance::MaintenanceConfig;
use super::Worker;
use crate::job::{Job, JobContext, JobResult};
use crate::registry::Registry;

/// Everything a [`Worker`] is configured with. Set through [`WorkerBuilder`], which checks
/// each value; read back with [`Worker::config`].
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// Queues to claim from, in order, without duplicates (`"default"` when none is given).
    pub queues: Vec<QueueName>,
    /// Handlers running at once: the number of slots (1 to 1000), queues with slots of their
    /// own included. Default 10, or, when queues have counts of their own, their sum plus 10
    /// for the other queues (their sum alone when every queue has one).
    pub concurrency: u32,
    /// Queues with a slot count of their own (`WorkerBuilder::queue_concurrency`): each runs at
    /// most that many handlers at once in this worker, in slots of its own carved out of
    /// `concurrency`; the other queues share the rest.
    pub queue_concurrency: HashMap<QueueName, u32>,
    /// Jobs held Fetched ([`ClaimMode::Reserve`](chokaq_core::ClaimMode::Reserve)) beyond the
    /// running ones (0 to 1000). Default 0: claims go straight to Processing
    /// ([`ClaimMode::Start`](chokaq_core::ClaimMode::Start)).
    pub prefetch: u32,
    /// Most started jobs held beyond the running ones when `prefetch` is 0 (the buffer adapts
    /// below it); `None` = 4 x `concurrency`.
    pub lookahead: Option<u32>,
    /// Most finished jobs whose outcome is not yet written, counted with the running handlers,
    /// per process (`concurrency` to 100,000); `None` = 2 x `concurrency`. A crash of the
    /// process runs at most this many finished jobs again (their leases expire unwritten). It
    /// also sets the default look-ahead (2 x this) and how many finished jobs the outcome
    /// writer waits for before it writes early.
    pub unwritten_outcomes: Option<u32>,
    /// How long a look-ahead job may wait for a slot before it is released for other workers;
    /// `None` = adaptive (four average job runs or claim round trips, 20 to 250 ms).
    pub lookahead_wait: Option<Duration>,
    /// Longest wait between claims when idle (the back-off doubles up to it). Default 1 s.
    pub poll_interval: Duration,
    /// First back-off step after an empty claim. Default 20 ms.
    pub min_poll_interval: Duration,
    /// How often one batched heartbeat extends the held leases; also how often prefetched
    /// jobs' queues are checked for a pause. Default 5 s.
    pub heartbeat_interval: Duration,
    /// Run timeout of a job whose type and queue set none. Default 30 min.
    pub job_timeout: Duration,
    /// Run timeouts by queue (a job type's own `Job::timeout` wins).
    pub queue_timeouts: HashMap<QueueName, Duration>,
    /// Back-off of retryable failures (a job type's own `Job::retry_policy` wins).
    pub retry_policy: RetryPolicy,
    /// How long a handler whose token fired gets to return before it is dropped. Default 1 s.
    pub cancel_wait: Duration,
    /// How long running handlers get to finish at shutdown before they are cancelled and
    /// handed back. Default 10 s.
    pub shutdown_grace: Duration,
    /// Most completions written in one call (1 to 10,000). Default 500.
    pub completion_batch: usize,
    /// Longest a finished job waits for its completion batch. Default 2 ms.
    pub completion_flush: Duration,
    /// When fewer than half the slots are free, how long to wait for more before claiming,
    /// so claims come in batches (zero: claim at once). Default 2 ms.
    pub claim_batch_window: Duration,
    /// Rescue and retention, run on an interval.
    pub maintenance: MaintenanceConfig,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            queues: Vec::new(),
            concurrency: super::lanes::DEFAULT_CONCURRENCY,
            queue_concurrency: HashMap::new(),
            prefetch: 0,
            lookahead: None,
            unwritten_outcomes: None,
            lookahead_wait: None,
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
    /// `queue_concurrency` as given (checked by `build`).
    queue_counts: Vec<(String, u32)>,
    /// `concurrency` was given.
    concurrency_set: bool,
    registry: Registry,
    worker_id: Option<WorkerId>,
    scheduler: Option<crate::periodic::Scheduler>,
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
    pub(super) fn new(backend: Arc<dyn Backend>) -> Self {
        WorkerBuilder {
            backend,
            config: WorkerConfig::default(),
            queue_names: Vec::new(),
            queue_timeouts: Vec::new(),
            queue_counts: Vec::new(),
            concurrency_set: false,
            registry: Registry::default(),
            worker_id: None,
            scheduler: None,
        }
    }

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

    /// Handlers running at once (1 to 1000), queues with slots of their own
    /// ([`WorkerBuilder::queue_concurrency`]) included: their slots are carved out of this, and
    /// the other queues share the rest. Default 10; with queues of their own slot count, their
    /// sum plus 10 for the other queues (their sum alone when every queue has one).
    pub fn concurrency(mut self, n: u32) -> Self {
        self.config.concurrency = n;
        self.concurrency_set = true;
        self
    }

    /// Gives `queue` (one of the worker's queues) `n` slots of its own (1 to 1000): this worker
    /// runs at most `n` of its jobs at once, and the worker's other queues cannot take those
    /// slots, nor can this queue take theirs, so a queue of slow jobs cannot hold up a queue of
    /// fast ones (River's `Queues: {name: {MaxWorkers: n}}`, Oban's `queues: [name: n]`).
    /// The queue is claimed on its own, never for more jobs than its free slots plus its share
    /// of the look-ahead. The slots are carved out of [`WorkerBuilder::concurrency`]: the
    /// queues without a count of their own share what is left (at least one slot). Left unset,
    /// the concurrency is the sum of the counts, plus 10 for the other queues. Given twice for
    /// one queue, the last count wins. A queue not among the worker's queues, a count of 0 or
    /// over 1000, or counts that leave the other queues no slot, are an `InvalidInput` error
    /// of [`WorkerBuilder::build`]. Distinct from a queue's cap (`QueueControl::SetMaxWorkers`),
    /// which the database enforces across all workers.
    pub fn queue_concurrency(mut self, queue: impl Into<String>, n: u32) -> Self {
        self.queue_counts.push((queue.into(), n));
        self
    }

    /// Jobs held Fetched beyond the running ones (0 to 1000). Default 0: claims go straight
    /// to Processing for exactly as many jobs as there are free slots
    /// ([`ClaimMode::Start`](chokaq_core::ClaimMode::Start)). With a prefetch the worker
    /// reserves ([`ClaimMode::Reserve`](chokaq_core::ClaimMode::Reserve)) and starts each job
    /// when a slot frees; buffered jobs must start within the rescuer's fetched timeout.
    pub fn prefetch(mut self, n: u32) -> Self {
        self.config.prefetch = n;
        self
    }

    /// With `prefetch` 0: the most jobs held beyond the free slots, claimed Fetched with
    /// [`ClaimMode::Hold`](chokaq_core::ClaimMode::Hold) (their attempt counted only when
    /// they start), in a look-ahead buffer so a freed slot takes the next job at once while
    /// the next claim is in flight (0 to 1000). Default: 4 x `concurrency`. The buffer
    /// adapts below this bound: `concurrency` jobs until a handler has finished, then about
    /// what the slots get through in two claim round trips (short jobs: the bound; jobs much
    /// longer than a claim: one).
    /// Buffered jobs are heart-beaten like running ones, count against queue caps, and are
    /// handed back with [`FailAction::Snooze`](chokaq_core::FailAction::Snooze) (attempt not
    /// counted) at shutdown. 0 claims only free slots.
    pub fn lookahead(mut self, n: u32) -> Self {
        self.config.lookahead = Some(n);
        self
    }

    /// The most finished, unwritten outcomes per process, counted with the running handlers
    /// (`concurrency` to 100,000). Default 2 x `concurrency`: a crash runs at most that many
    /// finished jobs again. A larger bound lets a drain of many cheap jobs write their outcomes
    /// in larger batches (fewer commits per job on the database) at the price of more re-runs
    /// after a crash: set it only for idempotent jobs (`docs/runtime.md`, "Exposure"). The
    /// default look-ahead follows it (2 x this bound, at most 1000).
    pub fn unwritten_outcomes(mut self, n: u32) -> Self {
        self.config.unwritten_outcomes = Some(n);
        self
    }

    /// How long a look-ahead job may wait for a slot (a long job holds every slot) before it is
    /// released, its attempt not counted, so that an idle worker can run it, and a queue or
    /// key cap it counts against is not held by a waiting job. Default: four average job run
    /// times or claim round trips, from 20 to 250 ms. Once it releases jobs, the worker holds
    /// no look-ahead until a slot frees.
    pub fn lookahead_wait(mut self, d: Duration) -> Self {
        self.config.lookahead_wait = Some(d);
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
    /// waits for its batch (default 2 ms, at most 10 s).
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

    /// Runs `scheduler` inside the worker: it is registered when [`Worker::run`](super::Worker::run)
    /// starts (a conflicting schedule fails the run before any job is claimed) and its loops
    /// stop with the worker's background tasks.
    pub fn scheduler(mut self, scheduler: crate::periodic::Scheduler) -> Self {
        self.scheduler = Some(scheduler);
        self
    }

    /// Checks the settings and builds the worker. Bad settings are
    /// [`ErrorKind::InvalidInput`](chokaq_core::ErrorKind::InvalidInput).
    pub fn build(self) -> Result<Worker> {
        let WorkerBuilder {
            backend,
            mut config,
            mut queue_names,
            queue_timeouts,
            queue_counts,
            concurrency_set,
            registry,
            worker_id,
            scheduler,
        } = self;
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
        super::lanes::resolve(&mut config, concurrency_set, queue_counts)?;
        for (q, d) in queue_timeouts {
            if d.is_zero() {
                return Err(Error::invalid(format!("timeout of queue {q:?} must be positive")));
            }
            within_limit(&format!("timeout of queue {q:?}"), d)?;
            config.queue_timeouts.insert(QueueName::new(q)?, d);
        }
        for (kind, h) in registry.handlers() {
            JobKind::new(kind)?;
            // A job type's own timeout and retry policy are checked like the worker's.
            if let Some(t) = h.timeout {
                within_limit(&format!("timeout of job kind {kind:?}"), t)?;
            }
            if let Some(p) = h.retry_policy {
                within_limit(&format!("retry policy base of job kind {kind:?}"), p.base)?;
                within_limit(&format!("retry policy max of job kind {kind:?}"), p.max)?;
                if !(p.factor.is_finite() && p.jitter.is_finite()) {
                    return Err(Error::invalid(format!(
                        "retry policy factor and jitter of job kind {kind:?} must be finite"
                    )));
                }
            }
        }
        if registry.is_empty() {
            return Err(Error::invalid("a worker needs at least one registered handler"));
        }
        check(&config)?;
        for (kind, queue) in unclaimed_handlers(&registry, &config.queues) {
            tracing::warn!(
                kind,
                queue,
                claims = %config.queues.iter().map(QueueName::as_str).collect::<Vec<_>>().join(", "),
                "a handler is registered for jobs of kind {kind}, which go to queue {queue} by default, and this \
                 worker does not claim that queue: such jobs wait until a worker that claims it runs them \
                 (add the queue with .queue(...), or set the job's queue when enqueueing)"
            );
        }
        Ok(Worker {
            backend,
            config,
            registry: Arc::new(registry),
            worker_id: worker_id.unwrap_or_else(WorkerId::random),
            scheduler,
        })
    }
}

/// The typed handlers whose job type's default queue (`Job::queue`) is not among `queues`, as
/// (kind, queue), sorted by kind: the worker warns of each when it is built (issue 40, the
/// first hour: such jobs piled up with no word at any log level). Raw handlers name no queue.
pub(crate) fn unclaimed_handlers(registry: &Registry, queues: &[QueueName]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = registry
        .handlers()
        .filter_map(|(kind, h)| h.queue.filter(|q| !queues.iter().any(|x| x.as_str() == *q)).map(|q| (kind, q)))
        .map(|(k, q)| (k.to_string(), q.to_string()))
        .collect();
    v.sort();
    v
}

/// The longest duration any worker setting takes (365 days): longer ones would overflow
/// `Instant` arithmetic in the worker's loops (`Duration::MAX` does).
pub const MAX_SETTING_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

fn within_limit(name: &str, d: Duration) -> Result<()> {
    if d > MAX_SETTING_DURATION {
        return Err(Error::invalid(format!("{name} must be at most {MAX_SETTING_DURATION:?} (365 days), got {d:?}")));
    }
    Ok(())
}

/// The longest completion flush interval (`completion_batching`): it is a batching window.
const MAX_COMPLETION_FLUSH: Duration = Duration::from_secs(10);

/// The largest [`WorkerConfig::unwritten_outcomes`].
const MAX_UNWRITTEN_OUTCOMES: u32 = 100_000;

impl WorkerConfig {
    /// The most finished, unwritten outcomes plus running handlers of this worker:
    /// [`WorkerConfig::unwritten_outcomes`], else 2 x `concurrency`.
    pub fn unwritten_cap(&self) -> usize {
        self.unwritten_outcomes.unwrap_or(self.concurrency.saturating_mul(2)) as usize
    }
}

/// The range and consistency checks of the numeric settings.
fn check(c: &WorkerConfig) -> Result<()> {
    let m = &c.maintenance;
    let mut durations = vec![
        ("poll interval", c.poll_interval),
        ("min poll interval", c.min_poll_interval),
        ("heartbeat interval", c.heartbeat_interval),
        ("job timeout", c.job_timeout),
        ("cancel wait", c.cancel_wait),
        ("shutdown grace", c.shutdown_grace),
        ("completion flush interval", c.completion_flush),
        ("claim batch window", c.claim_batch_window),
        ("maintenance interval", m.interval),
        ("retry policy base", c.retry_policy.base),
        ("retry policy max", c.retry_policy.max),
    ];
    durations.extend(m.archive_retention.map(|d| ("archive retention", d)));
    durations.extend(m.dead_letter_retention.map(|d| ("dead-letter retention", d)));
    durations.extend(m.worker_stale_after.map(|d| ("worker stale after", d)));
    durations.extend(c.lookahead_wait.map(|d| ("look-ahead wait", d)));
    for (name, d) in durations {
        within_limit(name, d)?;
    }
    if c.concurrency == 0 || c.concurrency > MAX_CLAIM_LIMIT {
        return Err(Error::invalid(format!("concurrency must be 1 to {MAX_CLAIM_LIMIT}, got {}", c.concurrency)));
    }
    if c.prefetch > MAX_CLAIM_LIMIT {
        return Err(Error::invalid(format!("prefetch must be 0 to {MAX_CLAIM_LIMIT}, got {}", c.prefetch)));
    }
    if let Some(n) = c.unwritten_outcomes.filter(|n| *n < c.concurrency || *n > MAX_UNWRITTEN_OUTCOMES) {
        return Err(Error::invalid(format!(
            "unwritten outcomes must be {} (the concurrency) to {MAX_UNWRITTEN_OUTCOMES}, got {n}",
            c.concurrency
        )));
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
    // A batching window: a lone finished job waits this long for company before it is written.
    if c.completion_flush > MAX_COMPLETION_FLUSH {
        return Err(Error::invalid(format!(
            "completion flush interval must be at most {MAX_COMPLETION_FLUSH:?}, got {:?}",
            c.completion_flush
        )));
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
    Ok(())
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;

/// The consistency checks against the queues' timeouts, which live in the database
/// (`QueueSettings`; a queue that sets none has the contract's defaults): `Worker::run` reads
/// its queues' settings and refuses to start when one fails.
pub(crate) fn check_against_settings(c: &WorkerConfig, settings: &[chokaq_core::QueueSettings]) -> Result<()> {
    for s in settings {
        let zombie = s.effective_zombie_timeout();
        // A lease is lost when no heartbeat lands within the zombie timeout: leave room for one
        // late or failed beat.
        if c.heartbeat_interval.saturating_mul(2) > zombie {
            return Err(Error::invalid(format!(
                "queue {}: the heartbeat interval ({:?}) must be at most half the queue's zombie timeout ({:?}); \
                 lower heartbeat_interval or raise the queue's timeout (QueueControl::SetZombieTimeout)",
                s.name, c.heartbeat_interval, zombie
            )));
        }
        let fetched = s.effective_fetched_timeout();
        // Buffered (Fetched) jobs are looked at (started, or released when their queue is
        // paused) between claim rounds and at least every heartbeat interval; the rescuer puts
        // them back after the fetched timeout.
        if c.prefetch > 0 && fetched <= c.heartbeat_interval.saturating_mul(2) {
            return Err(Error::invalid(format!(
                "queue {}: with a prefetch, the queue's fetched timeout ({:?}) must exceed twice the heartbeat \
                 interval ({:?}), or buffered jobs are put back before they can start; raise it \
                 (QueueControl::SetFetchedTimeout) or lower heartbeat_interval",
                s.name, fetched, c.heartbeat_interval
            )));
        }
        if c.prefetch > 0 && fetched < c.job_timeout {
            tracing::warn!(
                queue = %s.name,
                fetched_timeout = ?fetched,
                job_timeout = ?c.job_timeout,
                "prefetched jobs waiting behind handlers that run longer than the fetched timeout are put back \
                 by the rescuer (attempt not counted) and claimed again"
            );
        }
    }
    Ok(())
}
