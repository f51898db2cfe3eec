//! Typed jobs, handler errors and the context a handler runs with.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{
    Backend, JobId, JobKind, LeaseRef, QueueName, RetryPolicy, UniqueOpts, WorkerId, DEFAULT_MAX_ATTEMPTS,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// A typed job: a stable kind string and a serde payload (the implementing type itself).
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail {
///     to: String,
/// }
///
/// impl chokaq::Job for SendEmail {
///     const KIND: &'static str = "email.send.v1";
///     fn queue() -> &'static str {
///         "email"
///     }
/// }
/// ```
///
/// The kind is what is stored with the job and what workers look handlers up by, so it must
/// stay stable across deployments: version it (`.v1`, `.v2`) rather than rename it.
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The handler key, e.g. `email.send.v1`.
    const KIND: &'static str;

    /// The queue jobs of this type go to by default.
    fn queue() -> &'static str {
        "default"
    }

    /// `max_attempts` of new jobs of this type.
    fn max_attempts() -> i32 {
        DEFAULT_MAX_ATTEMPTS
    }

    /// A per-type run timeout, overriding the worker's per-queue default.
    fn timeout() -> Option<Duration> {
        None
    }

    /// A per-type retry policy, overriding the worker's default.
    fn retry_policy() -> Option<RetryPolicy> {
        None
    }

    /// The concurrency key of this job, derived from its payload (a tenant, a customer, a
    /// resource): a queue's per-key cap and a by-key rate limit count each key apart. `None`
    /// (the default): the job is bound by neither per-key setting.
    fn concurrency_key(&self) -> Option<String> {
        None
    }

    /// How jobs of this type are unique (`docs/unique.md`): by arguments (the whole payload
    /// or named fields), period, queue and the states that count. `None` (the default): not
    /// unique. [`JobBuilder::unique`](crate::JobBuilder::unique) overrides it per job.
    ///
    /// ```
    /// # use serde::{Deserialize, Serialize};
    /// use std::time::Duration;
    /// use chokaq::core::UniqueOpts;
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Refresh {
    ///     account: u64,
    /// }
    ///
    /// impl chokaq::Job for Refresh {
    ///     const KIND: &'static str = "account.refresh.v1";
    ///     // At most one refresh of an account per hour, while one is live.
    ///     fn unique() -> Option<UniqueOpts> {
    ///         Some(UniqueOpts::new().by_fields(["account"]).by_period(Duration::from_secs(3600)))
    ///     }
    /// }
    /// ```
    fn unique() -> Option<UniqueOpts> {
        None
    }
}

/// How a handler says an attempt did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobError {
    /// Retry later, after the back-off of the retry policy (the job is dead-lettered when no
    /// attempts are left).
    Retry(String),
    /// Retry after this delay instead of the policy's back-off.
    RetryAfter(Duration, String),
    /// Do not retry: dead-letter at once (reason `failed`).
    Fatal(String),
    /// Not an error: run again after this delay; the attempt does not count.
    Snooze(Duration),
    /// The handler cancels its own job: dead-letter with reason `cancelled`.
    Cancel(Option<String>),
}

impl JobError {
    /// A retryable error from anything displayable.
    pub fn retry(e: impl fmt::Display) -> Self {
        JobError::Retry(e.to_string())
    }

    /// A fatal error from anything displayable.
    pub fn fatal(e: impl fmt::Display) -> Self {
        JobError::Fatal(e.to_string())
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Retry(m) => write!(f, "retryable error: {m}"),
            JobError::RetryAfter(d, m) => write!(f, "retryable error (retry after {d:?}): {m}"),
            JobError::Fatal(m) => write!(f, "fatal error: {m}"),
            JobError::Snooze(d) => write!(f, "snoozed for {d:?}"),
            JobError::Cancel(Some(m)) => write!(f, "cancelled: {m}"),
            JobError::Cancel(None) => f.write_str("cancelled"),
        }
    }
}

impl std::error::Error for JobError {}

/// `?` on any error inside a handler makes it retryable.
impl From<chokaq_core::Error> for JobError {
    fn from(e: chokaq_core::Error) -> Self {
        JobError::Retry(e.to_string())
    }
}

/// What a handler returns.
pub type JobResult = Result<(), JobError>;

/// Why a running job was stopped from outside its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum StopReason {
    /// The lease is gone (rescued, re-claimed, cancelled elsewhere): discard the outcome.
    LeaseLost = 1,
    /// An operator asked to cancel it.
    CancelRequested = 2,
    /// It ran longer than its timeout.
    Timeout = 3,
    /// The worker shut down and the grace period is over.
    Shutdown = 4,
}

/// The stop switch of one running job: a token plus the first reason it was fired for.
#[derive(Debug)]
pub(crate) struct JobControl {
    pub(crate) token: CancellationToken,
    reason: AtomicU8,
}

impl JobControl {
    pub(crate) fn new() -> Self {
        JobControl { token: CancellationToken::new(), reason: AtomicU8::new(0) }
    }

    /// Fires the token; the first reason sticks.
    pub(crate) fn stop(&self, reason: StopReason) {
        let _ = self.reason.compare_exchange(0, reason as u8, Ordering::AcqRel, Ordering::Acquire);
        self.token.cancel();
    }

    pub(crate) fn reason(&self) -> Option<StopReason> {
        match self.reason.load(Ordering::Acquire) {
            1 => Some(StopReason::LeaseLost),
            2 => Some(StopReason::CancelRequested),
            3 => Some(StopReason::Timeout),
            4 => Some(StopReason::Shutdown),
            _ => None,
        }
    }
}

pub(crate) struct ContextInner {
    pub(crate) id: JobId,
    pub(crate) lease: LeaseRef,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    pub(crate) queue: QueueName,
    pub(crate) kind: JobKind,
    pub(crate) worker: WorkerId,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) control: Arc<JobControl>,
}

/// What a handler knows about the job it runs: ids, attempt numbers, a cancellation token
/// and a way to extend its lease now. Cheap to clone.
#[derive(Clone)]
pub struct JobContext {
    inner: Arc<ContextInner>,
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.inner.id)
            .field("lease", &self.inner.lease.lease)
            .field("attempt", &self.inner.attempt)
            .field("max_attempts", &self.inner.max_attempts)
            .field("queue", &self.inner.queue)
            .field("kind", &self.inner.kind)
            .field("cancelled", &self.inner.control.token.is_cancelled())
            .finish()
    }
}

impl JobContext {
    pub(crate) fn new(inner: ContextInner) -> Self {
        JobContext { inner: Arc::new(inner) }
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.inner.id
    }

    /// This attempt's number (1-based).
    pub fn attempt(&self) -> i32 {
        self.inner.attempt
    }

    /// How many attempts the job gets in all.
    pub fn max_attempts(&self) -> i32 {
        self.inner.max_attempts
    }

    /// True when this is the last attempt the job gets.
    pub fn is_last_attempt(&self) -> bool {
        self.inner.attempt >= self.inner.max_attempts
    }

    /// The queue the job came from.
    pub fn queue(&self) -> &QueueName {
        &self.inner.queue
    }

    /// The job's kind.
    pub fn kind(&self) -> &JobKind {
        &self.inner.kind
    }

    /// The lease (fencing token) this attempt holds.
    pub fn lease(&self) -> LeaseRef {
        self.inner.lease
    }

    /// The id of the worker running the job.
    pub fn worker_id(&self) -> WorkerId {
        self.inner.worker
    }

    /// Fired when the handler should stop: its lease was lost, an operator cancelled the job,
    /// it timed out, or the worker is shutting down and the grace period is over.
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.inner.control.token
    }

    /// Why the handler was stopped, if it was (the simulator tells a lost lease, whose outcome
    /// is discarded, from the stops that write one).
    #[cfg(test)]
    pub(crate) fn stop_reason(&self) -> Option<StopReason> {
        self.inner.control.reason()
    }

    /// True once the cancellation token fired.
    pub fn is_cancelled(&self) -> bool {
        self.inner.control.token.is_cancelled()
    }

    /// Waits until the cancellation token fires.
    pub async fn cancelled(&self) {
        self.inner.control.token.cancelled().await
    }

    /// Extends the lease now (a heartbeat for this job alone, on top of the worker's batched
    /// ones). Returns `Ok(true)` while the job is still held and not cancelled; `Ok(false)`
    /// when the lease was lost or an operator asked to cancel (the token has then fired).
    pub async fn heartbeat(&self) -> chokaq_core::Result<bool> {
        let report = self.inner.backend.heartbeat(self.inner.worker, &[self.inner.lease]).await?;
        if report.lost.contains(&self.inner.id) {
            self.inner.control.stop(StopReason::LeaseLost);
            return Ok(false);
        }
        if report.cancel_requested.contains(&self.inner.id) {
            self.inner.control.stop(StopReason::CancelRequested);
            return Ok(false);
        }
        Ok(!self.is_cancelled())
    }

    /// Records this run's output (`docs/outputs.md`): any serde value, stored with the job,
    /// kept when it is archived or dead-lettered, read back with
    /// [`Client::output`](crate::Client::output). A later record replaces an earlier one, and a
    /// retried job's last recorded output wins. An output the backend's `max_output_bytes`
    /// refuses (1 MiB by default) is an [`ErrorKind::InvalidInput`](chokaq_core::ErrorKind)
    /// error naming both sizes, checked before any round trip, and nothing is stored: it is
    /// never truncated. When the lease was lost, nothing is written, the cancellation token
    /// fires, and the call fails with [`ErrorKind::Conflict`](chokaq_core::ErrorKind).
    pub async fn record_output<T: Serialize + ?Sized>(&self, value: &T) -> chokaq_core::Result<()> {
        let value = serde_json::to_value(value).map_err(|e| {
            chokaq_core::Error::invalid(format!("job {}: the output does not serialize to JSON: {e}", self.inner.id))
        })?;
        match self.inner.backend.record_output(self.inner.worker, self.inner.lease, &value).await? {
            chokaq_core::Fenced::Done(()) => Ok(()),
            chokaq_core::Fenced::LeaseLost => {
                self.inner.control.stop(StopReason::LeaseLost);
                Err(chokaq_core::Error::new(
                    chokaq_core::ErrorKind::Conflict,
                    format!("job {}: the lease was lost, the output was not recorded", self.inner.id),
                ))
            }
        }
    }

    /// The output a dependency of this workflow task recorded, by the dependency's task name,
    /// decoded as `T` (`docs/workflows.md`, rule 6): `None` when it recorded none. A job that
    /// is no workflow's task, or a name that is not one of this task's dependencies, is
    /// [`ErrorKind::InvalidInput`](chokaq_core::ErrorKind); an output that does not decode as
    /// `T` too. (Its dependencies succeeded before this task could be claimed, so the output
    /// is their last run's.)
    pub async fn dependency_output<T: serde::de::DeserializeOwned>(
        &self,
        task: &str,
    ) -> chokaq_core::Result<Option<T>> {
        let id = self.inner.id;
        let backend = &self.inner.backend;
        let invalid = |m: String| chokaq_core::Error::invalid(m);
        let Some(wid) = backend.workflow_of(id).await? else {
            return Err(invalid(format!("job {id} is no workflow's task: it has no dependency {task:?}")));
        };
        let Some(wf) = backend.get_workflow(wid).await? else {
            return Err(invalid(format!("job {id}: its workflow {wid} is gone")));
        };
        let me = wf.tasks.iter().find(|t| t.job == id);
        if !me.is_some_and(|t| t.deps.iter().any(|d| d == task)) {
            let name = me.map_or("?", |t| t.name.as_str());
            return Err(invalid(format!("workflow {:?}: {task:?} is not a dependency of task {name:?}", wf.name)));
        }
        let Some(dep) = wf.task(task) else {
            return Err(invalid(format!("workflow {:?} has no task {task:?}", wf.name)));
        };
        let Some(value) = backend.get_output(dep.job).await? else {
            return Ok(None);
        };
        serde_json::from_value(value).map(Some).map_err(|e| {
            invalid(format!(
                "the output of task {task:?} (job {}) does not decode as {}: {e}",
                dep.job,
                std::any::type_name::<T>()
            ))
        })
    }
}
