//! The [`Harness`]: handlers, and the inline runs of one job, a drain, or every job as it is
//! enqueued (through [`InlineBackend`]).

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chokaq_core::{
    Backend, ClaimMode, ClaimParams, ClaimedJob, DeadReason, Error, FailAction, FailOutcome, Fenced, JobId,
    JobLocation, JobStatus, JobTable, ListJobsParams, QueueName, Result, RetryPolicy, WorkerId, MAX_CLAIM_LIMIT,
};
use futures::FutureExt;

use super::inline::InlineBackend;
use super::report::{Drained, Outcome, Ran};
use crate::client::{Client, IntoNewJob};
use crate::job::{ContextInner, Job, JobContext, JobControl, JobError, JobResult, StopReason};
use crate::registry::{Handler, HandlerOutcome, Registry};

/// How long a handler may run inline unless its job type sets a [`Job::timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How deep inline runs may nest (a job enqueuing a job enqueuing a job ...) in
/// [`Harness::inline_client`] mode before enqueue refuses to run the next one.
pub const MAX_INLINE_DEPTH: usize = 16;

pub(super) struct Inner {
    pub(super) backend: Arc<dyn Backend>,
    registry: Mutex<Registry>,
    worker: WorkerId,
    history: Mutex<Vec<Ran>>,
    pub(super) depth: AtomicUsize,
}

/// Runs jobs in a test, without a worker: register the handlers under test as on a
/// [`WorkerBuilder`](crate::WorkerBuilder), then [`perform`](Harness::perform) one job,
/// [`drain`](Harness::drain) a queue, or enqueue through an
/// [`inline_client`](Harness::inline_client). Each run is one attempt, written to the backend
/// as a worker would (start, then complete, retry, snooze or dead-letter), with the handler's
/// panics caught and its timeout applied. Cheap to clone.
///
/// ```
/// use std::sync::Arc;
/// use chokaq::apptest::{Harness, Outcome};
/// use chokaq::core::memory::MemoryBackend;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct Welcome { user: u64 }
/// # impl chokaq::Job for Welcome { const KIND: &'static str = "welcome.v1"; }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> chokaq::Result<()> {
/// let harness = Harness::new(Arc::new(MemoryBackend::new()));
/// harness.register(|job: Welcome, _ctx| async move {
///     if job.user == 0 { Err(chokaq::JobError::fatal("no such user")) } else { Ok(()) }
/// });
/// assert_eq!(harness.perform(&Welcome { user: 7 }).await?.outcome, Outcome::Completed);
/// assert!(matches!(harness.perform(&Welcome { user: 0 }).await?.outcome, Outcome::DeadLettered { .. }));
/// assert_eq!(harness.history().len(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Harness {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("backend", &self.inner.backend.name())
            .field("worker", &self.inner.worker)
            .finish()
    }
}

impl Harness {
    /// A harness on `backend` (migrated already), with no handlers.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Harness {
            inner: Arc::new(Inner {
                backend,
                registry: Mutex::new(Registry::default()),
                worker: WorkerId::random(),
                history: Mutex::new(Vec::new()),
                depth: AtomicUsize::new(0),
            }),
        }
    }

    /// The backend the harness runs on.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// Registers the handler of job type `J` (replacing an earlier one), as
    /// [`WorkerBuilder::register`](crate::WorkerBuilder::register) does. Handlers may be
    /// registered after clients were made, so a handler can capture an
    /// [`inline_client`](Harness::inline_client).
    pub fn register<J, F, Fut>(&self, handler: F) -> &Self
    where
        J: Job,
        F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        self.registry().insert_typed::<J, F, Fut>(handler);
        self
    }

    /// Registers a handler by kind over the raw JSON payload.
    pub fn register_raw<F, Fut>(&self, kind: impl Into<String>, handler: F) -> &Self
    where
        F: Fn(serde_json::Value, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        self.registry().insert_raw(kind.into(), handler);
        self
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client on the harness's backend: its jobs wait to be drained (the "manual" mode).
    pub fn client(&self) -> Client<Arc<dyn Backend>> {
        Client::new(self.inner.backend.clone())
    }

    /// A client whose every enqueued job runs at once, inline, before `enqueue` returns (the
    /// "inline" mode; see [`InlineBackend`]).
    pub fn inline_client(&self) -> Client<InlineBackend> {
        Client::new(InlineBackend::new(self.clone()))
    }

    /// Every job this harness ran so far, in order (perform, drains and inline runs).
    pub fn history(&self) -> Vec<Ran> {
        self.inner.history.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Enqueues `job` (a typed job by reference, a [`JobBuilder`](crate::JobBuilder) or a
    /// [`NewJob`](crate::NewJob)) and runs that job's handler once, inline, with a real
    /// [`JobContext`]; returns how it ended. The job must be due now (no delay). No handler
    /// registered for its kind: an `InvalidInput` error, and the job stays pending.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use chokaq::apptest::{Harness, Outcome};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize)]
    /// # struct Resize { width: u32 }
    /// # impl chokaq::Job for Resize { const KIND: &'static str = "resize.v1"; }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> chokaq::Result<()> {
    /// let harness = Harness::new(Arc::new(chokaq::core::memory::MemoryBackend::new()));
    /// harness.register(|job: Resize, ctx| async move {
    ///     assert_eq!(ctx.attempt(), 1);
    ///     if job.width > 10_000 { return Err(chokaq::JobError::retry("too wide for now")) }
    ///     Ok(())
    /// });
    /// let ran = harness.perform(&Resize { width: 20_000 }).await?;
    /// assert!(matches!(ran.outcome, Outcome::Retried { ref error, .. } if error == "too wide for now"));
    /// # Ok(()) }
    /// ```
    pub async fn perform(&self, job: impl IntoNewJob) -> Result<Ran> {
        let enqueued = self.client().enqueue(job).await?;
        self.run_job(enqueued.id).await
    }

    /// Runs the handler of one job already enqueued (pending and due) once, inline.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use chokaq::apptest::{Harness, Outcome};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> chokaq::Result<()> {
    /// let harness = Harness::new(Arc::new(chokaq::core::memory::MemoryBackend::new()));
    /// harness.register_raw("ping.v1", |_payload, _ctx| async { Ok(()) });
    /// let id = harness.client().enqueue(chokaq::JobBuilder::raw("default", "ping.v1", 1.into())).await?.id;
    /// assert_eq!(harness.run_job(id).await?.outcome, Outcome::Completed);
    /// # Ok(()) }
    /// ```
    pub async fn run_job(&self, id: JobId) -> Result<Ran> {
        let Some(job) = self.inner.backend.get_job(id).await? else {
            return Err(Error::not_found(format!("job {id} does not exist")));
        };
        if job.location != JobLocation::Hot(JobStatus::Pending) {
            return Err(Error::invalid(format!("job {id} is not pending (it is {:?})", job.location)));
        }
        self.run_one(id, &job.queue).await?.ok_or_else(|| {
            Error::invalid(format!(
                "job {id} is not due yet, or its queue {} is paused or at its cap: it was not run",
                job.queue
            ))
        })
    }

    /// Runs job `id` of `queue` once if it is due and claimable; `None` if it was not run.
    pub(super) async fn run_one(&self, id: JobId, queue: &QueueName) -> Result<Option<Ran>> {
        let drained = self.run_loop(|| async { Ok(vec![queue.clone()]) }, |j| j.id == id, 1).await?;
        Ok(drained.ran.into_iter().next())
    }

    /// Runs the jobs due in `queue` when it is called, one at a time, in claim order
    /// (priority, then due time), each once; not the jobs they enqueue (see
    /// [`drain_recursive`](Harness::drain_recursive)), nor jobs scheduled for later, nor a
    /// retry of a job that failed in this drain.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use chokaq::apptest::Harness;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> chokaq::Result<()> {
    /// let harness = Harness::new(Arc::new(chokaq::core::memory::MemoryBackend::new()));
    /// harness.register_raw("count.v1", |n, _ctx| async move {
    ///     if n == 3 { Err(chokaq::JobError::fatal("three")) } else { Ok(()) }
    /// });
    /// let jobs = (1..=4).map(|n| chokaq::JobBuilder::raw("numbers", "count.v1", n.into()));
    /// harness.client().enqueue_many(jobs).await?;
    /// let drained = harness.drain("numbers").await?;
    /// assert_eq!((drained.ran.len(), drained.completed(), drained.failed()), (4, 3, 1));
    /// # Ok(()) }
    /// ```
    pub async fn drain(&self, queue: &str) -> Result<Drained> {
        let queue = QueueName::new(queue)?;
        let due: HashSet<JobId> = self.pending_ids(Some(&queue)).await?;
        let max = due.len();
        self.run_loop(|| async { Ok(vec![queue.clone()]) }, |j| due.contains(&j.id), max).await
    }

    /// Runs the jobs due in `queue`, then the jobs those enqueue (in any queue), and theirs,
    /// until no such job is due or `max_runs` jobs ran ([`Drained::hit_bound`] then says
    /// whether any was left). Jobs that were pending in other queues before the call are
    /// left alone. Each job runs at most once per drain.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use chokaq::apptest::Harness;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> chokaq::Result<()> {
    /// let harness = Harness::new(Arc::new(chokaq::core::memory::MemoryBackend::new()));
    /// let client = harness.client();
    /// // Each job enqueues the next, forever: the bound stops it.
    /// harness.register_raw("chain.v1", move |n, _ctx| {
    ///     let client = client.clone();
    ///     async move {
    ///         let next = n.as_u64().unwrap_or(0) + 1;
    ///         client.enqueue(chokaq::JobBuilder::raw("other", "chain.v1", next.into())).await?;
    ///         Ok(())
    ///     }
    /// });
    /// harness.client().enqueue(chokaq::JobBuilder::raw("start", "chain.v1", 0.into())).await?;
    /// let drained = harness.drain_recursive("start", 5).await?;
    /// assert_eq!((drained.ran.len(), drained.hit_bound), (5, true));
    /// # Ok(()) }
    /// ```
    pub async fn drain_recursive(&self, queue: &str, max_runs: usize) -> Result<Drained> {
        let queue = QueueName::new(queue)?;
        let before = self.pending_ids(None).await?;
        let others: HashSet<JobId> = {
            let mine = self.pending_ids(Some(&queue)).await?;
            before.difference(&mine).copied().collect()
        };
        let backend = self.inner.backend.clone();
        let queues = || {
            let backend = backend.clone();
            let queue = queue.clone();
            async move {
                let stats = backend.stats().await?;
                let mut qs = vec![queue.clone()];
                for q in stats.queues.iter().filter(|q| q.pending > 0 && q.queue != queue.as_str()) {
                    qs.push(QueueName::new(q.queue.as_str())?);
                }
                Ok(qs)
            }
        };
        self.run_loop(queues, |j| !others.contains(&j.id), max_runs).await
    }

    /// The ids of the pending jobs (due or not) of `queue`, or of every queue.
    async fn pending_ids(&self, queue: Option<&QueueName>) -> Result<HashSet<JobId>> {
        let mut ids = HashSet::new();
        let mut params = ListJobsParams::new(JobTable::Hot);
        params.queue = queue.cloned();
        params.status = Some(JobStatus::Pending);
        params.without_payloads = true;
        params.limit = 1000;
        loop {
            let page = self.inner.backend.list_jobs(&params).await?;
            ids.extend(page.jobs.iter().map(|j| j.id));
            match page.next {
                Some(next) => params.after = Some(next),
                None => return Ok(ids),
            }
        }
    }

    /// Claims from `queues()` (asked again each round), runs the claimed jobs `accept` takes
    /// and that did not run yet, releases the others untouched; until a claim brings none to
    /// run, or `max` ran.
    async fn run_loop<Q, QF>(&self, queues: Q, accept: impl Fn(&ClaimedJob) -> bool, max: usize) -> Result<Drained>
    where
        Q: Fn() -> QF,
        QF: Future<Output = Result<Vec<QueueName>>>,
    {
        let b = &self.inner.backend;
        let mut out = Drained::default();
        let mut done: HashSet<JobId> = HashSet::new();
        loop {
            let req = ClaimParams::new(self.inner.worker, queues().await?, MAX_CLAIM_LIMIT, ClaimMode::Reserve);
            let claimed = b.claim(&req).await?;
            let (mut take, others): (Vec<_>, Vec<_>) =
                claimed.into_iter().partition(|j| accept(j) && !done.contains(&j.id));
            let release: Vec<_> = others.iter().map(ClaimedJob::lease_ref).collect();
            if !release.is_empty() {
                b.release(self.inner.worker, &release).await?;
            }
            if take.is_empty() {
                return Ok(out);
            }
            if out.ran.len() >= max {
                out.hit_bound = true;
                let back: Vec<_> = take.iter().map(ClaimedJob::lease_ref).collect();
                b.release(self.inner.worker, &back).await?;
                return Ok(out);
            }
            // Run one, put the rest back: what the job enqueues may come first next round.
            let rest = take.split_off(1);
            let back: Vec<_> = rest.iter().map(ClaimedJob::lease_ref).collect();
            if !back.is_empty() {
                b.release(self.inner.worker, &back).await?;
            }
            let job = take.remove(0);
            done.insert(job.id);
            out.ran.push(self.run_claimed(job).await?);
        }
    }

    /// One attempt of a job claimed (Fetched) by this harness: start, handler, outcome.
    pub(super) async fn run_claimed(&self, job: ClaimedJob) -> Result<Ran> {
        let b = &self.inner.backend;
        let worker = self.inner.worker;
        let lease = job.lease_ref();
        let handler = self.registry().get(job.kind.as_str()).cloned();
        let Some(handler) = handler else {
            b.release(worker, &[lease]).await?;
            return Err(Error::invalid(format!(
                "no handler is registered in this Harness for kind {:?} (job {}, left pending)",
                job.kind.as_str(),
                job.id
            )));
        };
        let started = b.start(worker, &[lease]).await?;
        let attempt = job.attempt + 1;
        let ran = |outcome| Ran { id: job.id, kind: job.kind.clone(), queue: job.queue.clone(), attempt, outcome };
        if !started.done.contains(&job.id) {
            return Ok(self.record(ran(Outcome::LeaseLost)));
        }
        let action = self.call(&handler, &job, attempt).await;
        let outcome = match action {
            None => match b.complete(worker, &[lease]).await? {
                done if done.done.contains(&job.id) => Outcome::Completed,
                _ => Outcome::LeaseLost,
            },
            Some(action) => {
                let error = match &action {
                    FailAction::Retry { error, .. } | FailAction::DeadLetter { error, .. } => Some(error.clone()),
                    FailAction::Cancelled { error } => error.clone(),
                    FailAction::Snooze { .. } => None,
                };
                match b.fail(worker, lease, action).await? {
                    Fenced::LeaseLost => Outcome::LeaseLost,
                    Fenced::Done(FailOutcome::Retried { at }) => {
                        Outcome::Retried { error: error.unwrap_or_default(), at }
                    }
                    Fenced::Done(FailOutcome::Snoozed { until }) => Outcome::Snoozed { until },
                    Fenced::Done(FailOutcome::DeadLettered(reason)) => Outcome::DeadLettered { reason, error },
                }
            }
        };
        Ok(self.record(ran(outcome)))
    }

    fn record(&self, ran: Ran) -> Ran {
        self.inner.history.lock().unwrap_or_else(|e| e.into_inner()).push(ran.clone());
        ran
    }

    /// Runs the handler; `None` when it succeeded, else the failure to write (as the worker
    /// decides it: the retry policy's delay, a fatal error dead-letters, a panic or a timeout
    /// retries).
    async fn call(&self, h: &Handler, job: &ClaimedJob, attempt: i32) -> Option<FailAction> {
        let control = Arc::new(JobControl::new());
        let ctx = JobContext::new(ContextInner {
            id: job.id,
            lease: job.lease_ref(),
            attempt,
            max_attempts: job.max_attempts,
            queue: job.queue.clone(),
            kind: job.kind.clone(),
            worker: self.inner.worker,
            backend: self.inner.backend.clone(),
            control: control.clone(),
        });
        let policy = h.retry_policy.unwrap_or_default();
        let timeout = h.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let fut = match std::panic::catch_unwind(AssertUnwindSafe(|| (h.call)(job.payload.clone(), ctx))) {
            Ok(fut) => AssertUnwindSafe(fut).catch_unwind().boxed(),
            Err(panic) => futures::future::ready(Err(panic)).boxed(),
        };
        let res = tokio::time::timeout(timeout, fut).await;
        decide(res, attempt, &policy, timeout, &control)
    }
}

type Caught = std::result::Result<HandlerOutcome, Box<dyn std::any::Any + Send>>;

fn decide(
    res: std::result::Result<Caught, tokio::time::error::Elapsed>,
    attempt: i32,
    policy: &RetryPolicy,
    timeout: Duration,
    control: &JobControl,
) -> Option<FailAction> {
    let retry = |error: String| Some(FailAction::Retry { delay: policy.delay(attempt), error });
    let Ok(caught) = res else {
        control.stop(StopReason::Timeout);
        return retry(format!("job timed out after {timeout:?}"));
    };
    match caught {
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            retry(format!("handler panicked: {msg}"))
        }
        Ok(HandlerOutcome::Undecodable(msg)) => Some(FailAction::DeadLetter { reason: DeadReason::Failed, error: msg }),
        Ok(HandlerOutcome::Returned(Ok(()))) => None,
        Ok(HandlerOutcome::Returned(Err(e))) => Some(match e {
            JobError::Retry(msg) => FailAction::Retry { delay: policy.delay(attempt), error: msg },
            JobError::RetryAfter(delay, msg) => {
                FailAction::Retry { delay: delay.min(crate::MAX_SETTING_DURATION), error: msg }
            }
            JobError::Fatal(msg) => FailAction::DeadLetter { reason: DeadReason::Failed, error: msg },
            JobError::Snooze(delay) => FailAction::Snooze { delay: delay.min(crate::MAX_SETTING_DURATION) },
            JobError::Cancel(error) => FailAction::Cancelled { error },
        }),
    }
}
