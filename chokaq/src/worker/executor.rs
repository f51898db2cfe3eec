//! Running one job: its handler on a slot, with the panic caught, the timeout and the stop
//! switch watched; then the verdict, the slot handed on, and the outcome queued or written.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{
    Backend, ClaimedJob, DeadReason, FailAction, FailOutcome, Fenced, JobKind, JobStatus, LeaseRef, QueueName,
    RetryPolicy, WorkerId,
};
use futures::FutureExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::claim::Lookahead;
use super::completer::{Completer, Completion, Outcomes};
use super::config::MAX_SETTING_DURATION;
use super::heartbeat::{Leases, START_AFTER};
use super::lanes::AllSlots;
use super::{add, broken, ewma, write_with_retries, Broken, Counters, WorkerConfig, SHUTDOWN_ERROR};
use crate::job::{ContextInner, JobContext, JobControl, JobError, StopReason};
use crate::metrics_names as m;
use crate::registry::{HandlerOutcome, Registry};

/// What a job runs with when its type sets nothing: the worker's timeouts and retry policy.
pub(super) struct Defaults {
    pub(super) job_timeout: Duration,
    pub(super) queue_timeouts: HashMap<QueueName, Duration>,
    pub(super) retry_policy: RetryPolicy,
    pub(super) cancel_wait: Duration,
}

impl Defaults {
    pub(super) fn from_config(cfg: &WorkerConfig) -> Self {
        Defaults {
            job_timeout: cfg.job_timeout,
            queue_timeouts: cfg.queue_timeouts.clone(),
            retry_policy: cfg.retry_policy,
            cancel_wait: cfg.cancel_wait,
        }
    }
}

/// The slots of one lane of the worker ([`super::lanes`]) and the jobs on them. Owns the
/// semaphore of the lane's slots and the moving average of its handler run times; the task
/// tracker of running jobs is the worker's.
pub(super) struct Executor {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) worker: WorkerId,
    /// The lane's place in the worker's lanes.
    pub(super) lane: usize,
    pub(super) registry: Arc<Registry>,
    pub(super) defaults: Arc<Defaults>,
    pub(super) slots: Arc<Semaphore>,
    /// Every lane's slots: the unwritten-outcome gate counts the whole worker's handlers.
    pub(super) all_slots: Arc<AllSlots>,
    /// A finishing job handed its slot on or freed it.
    pub(super) slot_freed: Notify,
    /// Moving average of handler run times, microseconds (0: none finished yet).
    pub(super) job_us: AtomicU64,
    pub(super) tracker: TaskTracker,
    pub(super) leases: Arc<Leases>,
    pub(super) lookahead: Arc<Lookahead>,
    pub(super) completer: Arc<Completer>,
    pub(super) outcomes: Arc<Outcomes>,
    pub(super) counters: Arc<Counters>,
    /// Look-ahead jobs whose lease is being confirmed (a `start` awaited before their handler
    /// begins, after an outage let the last confirmation age): in flight for the claim loop.
    pub(super) starting: AtomicU64,
    /// Until when no further suspect look-ahead job may begin ([`Executor::suspect_ok`]): one
    /// gate for the whole worker (one suspect at a time per process).
    pub(super) suspect_until: Arc<std::sync::Mutex<Option<Instant>>>,
    /// How long after its last confirmation a held job's handler may still begin without a
    /// confirmed start: half the shortest zombie timeout of the lane's queues.
    pub(super) hold_fresh_us: AtomicU64,
    /// Rule of issue 24: finished, unwritten outcomes plus running handlers of the whole
    /// worker stay at or below this (2 x `concurrency`), so at most that many finished jobs
    /// are ever unwritten.
    pub(super) unwritten_cap: usize,
    /// The worker's span (`chokaq.worker`): the parent of every job's span, whichever task
    /// starts the job (a finishing job hands its slot on from inside its own span).
    pub(super) span: tracing::Span,
}

/// What to do with a finished attempt.
#[derive(Debug, PartialEq)]
pub(super) enum Verdict {
    Complete,
    Fail(FailAction),
    /// The lease is gone: write nothing.
    Discard,
}

impl Executor {
    /// Registers a Processing job with the leases and runs it on the slot `permit` holds.
    /// `sent`: when the request that granted or confirmed its lease was sent.
    pub(super) fn spawn_new(self: &Arc<Self>, job: ClaimedJob, permit: OwnedSemaphorePermit, sent: Instant) {
        let control = self.leases.track_sent(&job, sent);
        self.spawn(job, permit, control);
    }

    /// Runs a tracked job on the slot `permit` holds.
    pub(super) fn spawn(self: &Arc<Self>, job: ClaimedJob, permit: OwnedSemaphorePermit, control: Arc<JobControl>) {
        add(&self.counters.started, 1);
        let span = tracing::info_span!(parent: &self.span, "chokaq.job", queue = %job.queue, kind = %job.kind, id = %job.id,
            attempt = job.attempt);
        self.tracker.spawn(self.clone().run_job(job, permit, control).instrument(span));
    }

    /// Starts look-ahead jobs on every free slot.
    pub(super) fn fill_slots(self: &Arc<Self>) {
        loop {
            if self.lookahead.is_empty() || !self.may_begin() {
                return;
            }
            let Ok(permit) = self.slots.clone().try_acquire_owned() else { return };
            if let Some(p) = self.run_next(permit) {
                drop(p);
                return;
            }
        }
    }

    /// Whether one more handler may begin on a free slot: finished, unwritten outcomes plus
    /// running handlers (of the whole worker) stay within [`Executor::unwritten_cap`] with it.
    pub(super) fn may_begin(&self) -> bool {
        self.outcomes.unwritten() + self.running_now() < self.unwritten_cap
    }

    /// How many more handlers may begin on free slots now (the gate of [`Executor::may_begin`]).
    pub(super) fn begin_room(&self) -> usize {
        self.unwritten_cap.saturating_sub(self.outcomes.unwritten() + self.running_now())
    }

    /// Gives the slot `permit` holds to the next buffered job that may run; the permit back
    /// when none did (the buffer is empty).
    fn run_next(self: &Arc<Self>, mut permit: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
        while let Some(job) = self.lookahead.take(self.suspect_ok()) {
            match self.begin_held(job, permit) {
                None => return None,
                Some(p) => permit = p,
            }
        }
        Some(permit)
    }

    /// A held look-ahead job (Fetched, heart-beaten since its claim) takes the slot `permit`
    /// holds. Its handler begins at once, with no write: the database keeps a held job for this
    /// worker as long as its heartbeats land (only the zombie timeout without one expires it),
    /// and a cancel of it is a request, never final behind the worker's back. Its attempt is
    /// counted by the deferred start ([`super::heartbeat::Starter`]) once it has run a moment,
    /// or by its outcome if that comes first. The handler does not begin when the job was
    /// stopped while it waited (lease lost, cancel requested: then it is released, which
    /// dead-letters a cancelled job), or when its lease was last confirmed longer ago than
    /// [`Executor::hold_fresh_us`] (an outage): then a `start` is awaited first. Returns the permit
    /// when the job did not take it.
    fn begin_held(self: &Arc<Self>, mut job: ClaimedJob, permit: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
        if job.status == JobStatus::Processing {
            // Claimed started (only the teeth's broken variant does that).
            self.spawn_new(job, permit, Instant::now());
            return None;
        }
        let lease = job.lease_ref();
        let Some((control, confirmed)) = self.leases.begin(lease) else {
            // Replaced by a newer lease of the same job, or forgotten: not ours any more.
            add(&self.counters.lease_lost, 1);
            return Some(permit);
        };
        match control.reason() {
            None => {}
            Some(StopReason::CancelRequested) => {
                // Never began: released, which dead-letters it `cancelled` (cancel is final).
                self.release_cancelled(lease);
                return Some(permit);
            }
            Some(_) => {
                self.leases.untrack(lease);
                add(&self.counters.lease_lost, 1);
                tracing::debug!(id = %lease.id, "look-ahead lease lost while buffered");
                return Some(permit);
            }
        }
        job.attempt += 1;
        job.status = JobStatus::Processing;
        let fresh = Duration::from_micros(self.hold_fresh_us.load(Ordering::Relaxed));
        // A job whose earlier holds expired (a holder stopped before its start was recorded)
        // may be the one that kills its process as it begins: its start is recorded first, so
        // each such crash counts an attempt and the job ends (issue 36, hole 1).
        let suspect = job.expired_holds > 0 && !broken(self.worker, Broken::SuspectUnconfirmed);
        if !suspect && (confirmed.elapsed() < fresh || broken(self.worker, Broken::UnconfirmedLease)) {
            self.spawn(job, permit, control);
            return None;
        }
        // The last confirmation is old (heartbeats failed for a while), or the job is suspect:
        // confirm (start) before running.
        self.starting.fetch_add(1, Ordering::AcqRel);
        if suspect {
            // No other suspect begins until this one has run a moment (`suspect_ok`).
            *self.suspect_until.lock().unwrap() = Some(Instant::now() + Duration::from_secs(3600));
        }
        let this = self.clone();
        self.tracker.spawn(async move {
            let at = Instant::now();
            let one = [lease];
            let res = write_with_retries(this.worker, "start", || this.backend.start(this.worker, &one)).await;
            this.starting.fetch_sub(1, Ordering::AcqRel);
            if suspect {
                let begun = matches!(&res, Ok(out) if out.done.contains(&lease.id));
                *this.suspect_until.lock().unwrap() = begun.then(|| Instant::now() + START_AFTER);
            }
            match res {
                Ok(out) if out.done.contains(&lease.id) => {
                    this.leases.started(&[lease], &out.done, &out.lost, at);
                    this.spawn(job, permit, control);
                }
                Ok(_) => {
                    this.leases.untrack(lease);
                    add(&this.counters.lease_lost, 1);
                    tracing::info!(id = %lease.id, "look-ahead lease lost during an outage; not run");
                    drop(permit);
                    this.slot_freed.notify_one();
                }
                Err(e) => {
                    // Not retryable: never began, so leave it to the rescuer (attempt unspent).
                    tracing::warn!(error = %e, id = %lease.id, "start failed; the job is left to the rescuer");
                    this.leases.untrack(lease);
                    drop(permit);
                    this.slot_freed.notify_one();
                }
            }
        });
        None
    }

    /// A buffered job whose cancel was requested: released (the backend dead-letters it
    /// `cancelled`), in the background; its handler never began.
    fn release_cancelled(self: &Arc<Self>, lease: LeaseRef) {
        self.outcomes.finished(self.lane);
        let this = self.clone();
        self.tracker.spawn(async move {
            let one = [lease];
            let res = write_with_retries(this.worker, "release", || this.backend.release(this.worker, &one)).await;
            this.leases.untrack(lease);
            match res {
                Ok(out) if out.done.contains(&lease.id) => {
                    add(&this.counters.cancelled, 1);
                    add(&this.counters.dead_lettered, 1);
                    tracing::info!(id = %lease.id, "cancelled while buffered; never ran");
                }
                Ok(_) => add(&this.counters.lease_lost, 1),
                Err(e) => tracing::warn!(error = %e, id = %lease.id, "could not release a cancelled job"),
            }
            this.outcomes.written(this.lane, 1);
        });
    }

    /// Whether a suspect job (its earlier holds expired) may begin now: one at a time per
    /// process, each after the one before it has run [`START_AFTER`] (or never got its start),
    /// so that a suspect job that kills its process as it begins cannot take another suspect
    /// job's counted start with it.
    pub(super) fn suspect_ok(&self) -> bool {
        self.suspect_gate().is_none_or(|t| Instant::now() >= t) || broken(self.worker, Broken::SuspectUnconfirmed)
    }

    /// Until when no further suspect job may begin (`None`: open now).
    pub(super) fn suspect_gate(&self) -> Option<Instant> {
        let gate = *self.suspect_until.lock().unwrap();
        gate.filter(|t| Instant::now() < *t)
    }

    /// Handlers running now in the whole worker (slots taken in every lane).
    pub(super) fn running_now(&self) -> usize {
        self.all_slots.running()
    }

    /// How many of this lane's look-ahead jobs' starts are in flight (their handlers may be
    /// running).
    pub(super) fn starting_count(&self) -> usize {
        self.starting.load(Ordering::Acquire) as usize
    }

    /// Free slots of this lane now.
    pub(super) fn free_slots(&self) -> usize {
        self.slots.available_permits()
    }

    /// The moving average of handler run times, microseconds (0: none finished yet).
    pub(super) fn job_us(&self) -> u64 {
        self.job_us.load(Ordering::Relaxed)
    }

    async fn run_job(self: Arc<Self>, job: ClaimedJob, permit: OwnedSemaphorePermit, control: Arc<JobControl>) {
        let ClaimedJob {
            id,
            queue,
            kind,
            payload,
            attempt,
            max_attempts,
            lease,
            scheduled_at,
            created_at,
            started_at,
            ..
        } = job;
        let lease = LeaseRef { id, lease };
        if let Some(started) = started_at {
            let due = scheduled_at.unwrap_or(created_at);
            let lag = (started - due).to_std().unwrap_or_default();
            metrics::histogram!(m::QUEUE_LAG, "queue" => queue.to_string()).record(lag.as_secs_f64());
        }
        let t0 = Instant::now();
        let handler = self.registry.get(kind.as_str()).cloned();
        let verdict = match handler {
            None => {
                add(&self.counters.failed, 1);
                let msg =
                    format!("unknown job kind {:?}: no handler is registered for it on this worker", kind.as_str());
                tracing::warn!("{msg}");
                Verdict::Fail(FailAction::DeadLetter { reason: DeadReason::Failed, error: msg })
            }
            Some(h) => {
                let d = &self.defaults;
                let timeout = h.timeout.or_else(|| d.queue_timeouts.get(&queue).copied()).unwrap_or(d.job_timeout);
                let policy = h.retry_policy.unwrap_or(d.retry_policy);
                let bs = broken(self.worker, Broken::ShutdownRetries);
                if let Some(reason) = control.reason() {
                    // Stopped while waiting in the look-ahead buffer (lease lost, cancel request):
                    // the handler does not run.
                    decide_with(&self.counters, Some(reason), None, (attempt, max_attempts), &policy, timeout, bs)
                } else {
                    let ctx = JobContext::new(ContextInner {
                        id,
                        lease,
                        attempt,
                        max_attempts,
                        queue: queue.clone(),
                        kind: kind.clone(),
                        worker: self.worker,
                        backend: self.backend.clone(),
                        control: control.clone(),
                    });
                    // A handler can panic before its async body starts (while building its
                    // future): caught like any other panic.
                    let fut = match std::panic::catch_unwind(AssertUnwindSafe(|| (h.call)(payload, ctx))) {
                        Ok(fut) => AssertUnwindSafe(fut).catch_unwind().boxed(),
                        Err(panic) => futures::future::ready(Err(panic)).boxed(),
                    };
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
                        None => tokio::time::timeout(d.cancel_wait, &mut fut).await.ok(),
                    };
                    let ran = t0.elapsed();
                    let avg = self.job_us.load(Ordering::Relaxed);
                    self.job_us.store(ewma(avg, ran.as_micros() as u64), Ordering::Relaxed);
                    metrics::histogram!(m::JOB_RUN, "queue" => queue.to_string(), "kind" => kind.to_string())
                        .record(ran.as_secs_f64());
                    decide_with(&self.counters, control.reason(), res, (attempt, max_attempts), &policy, timeout, bs)
                }
            }
        };
        // The handler is done (or dropped): its outcome counts as unwritten from now, before
        // the slot goes on (the claim loop's back-pressure and the gate see it). Until that
        // write the job still counts against caps, and its lease stays held (heart-beaten)
        // until the write lands or the lease is lost. Only this attempt's lease is touched (a
        // newer lease of the same job may be buffered).
        let mut permit = Some(permit);
        if matches!(verdict, Verdict::Discard) || broken(self.worker, Broken::UntrackBeforeWrite) {
            self.leases.untrack(lease);
        }
        if !matches!(verdict, Verdict::Discard) {
            self.leases.finish(lease);
            self.outcomes.finished(self.lane);
        }
        // Queue the completion before the slot is seen free, so a claim loop that finds nothing
        // running finds every finished job's completion queued.
        let verdict = match verdict {
            Verdict::Complete => {
                self.completer.push(Completion { lane: self.lane, lease, queue: queue.clone(), kind: kind.clone() });
                None
            }
            other => Some(other),
        };
        self.hand_on(permit.take());

        match verdict {
            None | Some(Verdict::Complete) => {}
            Some(Verdict::Discard) => {
                add(&self.counters.lease_lost, 1);
                metrics::counter!(m::LEASE_LOST, "queue" => queue.to_string(), "kind" => kind.to_string()).increment(1);
                tracing::info!("lease lost; outcome discarded");
            }
            Some(Verdict::Fail(outcome)) => self.finish_failed(lease, &queue, &kind, outcome).await,
        }
    }

    /// A finished job's slot: to the next look-ahead job, or freed (nothing when it was handed
    /// on already).
    fn hand_on(self: &Arc<Self>, permit: Option<OwnedSemaphorePermit>) {
        let Some(permit) = permit else { return };
        // The finishing job's own slot is counted as running until it is handed on.
        if self.outcomes.unwritten() + self.running_now() <= self.unwritten_cap {
            if let Some(p) = self.run_next(permit) {
                drop(p);
            }
        } else {
            drop(permit);
        }
        self.slot_freed.notify_one();
    }

    async fn finish_failed(&self, lease: LeaseRef, queue: &QueueName, kind: &JobKind, outcome: FailAction) {
        let c = &self.counters;
        let is_failure = matches!(outcome, FailAction::Retry { .. } | FailAction::DeadLetter { .. });
        let res =
            write_with_retries(self.worker, "fail", || self.backend.fail(self.worker, lease, outcome.clone())).await;
        self.leases.untrack(lease);
        match res {
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
                        metrics::counter!(m::DEAD_LETTERED, "queue" => queue.to_string(),
                            "kind" => kind.to_string(), "reason" => reason.as_str())
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
                tracing::error!(error = %e, "could not record the failed attempt (not retryable); the rescuer will retry the job");
            }
        }
        self.outcomes.written(self.lane, 1);
    }
}

type CaughtOutcome = std::result::Result<HandlerOutcome, Box<dyn std::any::Any + Send>>;

/// The verdict on an attempt: why it was stopped from outside, if it was, and what the
/// handler produced (`None`: nothing in time). Counts failures, panics, timeouts and
/// hand-backs.
#[cfg(test)]
fn decide(
    c: &Counters,
    reason: Option<StopReason>,
    res: Option<CaughtOutcome>,
    (attempt, max_attempts): (i32, i32),
    policy: &RetryPolicy,
    timeout: Duration,
) -> Verdict {
    decide_with(c, reason, res, (attempt, max_attempts), policy, timeout, false)
}

/// [`decide`], with the teeth's broken shutdown variant (`Broken::ShutdownRetries`).
fn decide_with(
    c: &Counters,
    reason: Option<StopReason>,
    res: Option<CaughtOutcome>,
    (attempt, max_attempts): (i32, i32),
    policy: &RetryPolicy,
    timeout: Duration,
    broken_shutdown: bool,
) -> Verdict {
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
            // A graceful shutdown never dead-letters: on the last attempt the job goes back
            // with a snooze, which does not count the attempt.
            if attempt >= max_attempts && !broken_shutdown {
                return Verdict::Fail(FailAction::Snooze { delay: Duration::ZERO });
            }
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
                JobError::RetryAfter(delay, msg) => {
                    FailAction::Retry { delay: delay.min(MAX_SETTING_DURATION), error: msg }
                }
                JobError::Fatal(msg) => FailAction::DeadLetter { reason: DeadReason::Failed, error: msg },
                JobError::Snooze(delay) => FailAction::Snooze { delay: delay.min(MAX_SETTING_DURATION) },
                JobError::Cancel(error) => FailAction::Cancelled { error },
            })
        }
    }
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

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
