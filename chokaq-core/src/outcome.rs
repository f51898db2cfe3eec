//! What guarded writes report: the typed outcomes a caller must branch on, and the action
//! that ends a failed attempt.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{validate, DeadReason, JobId, Result, Timestamp};

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
    /// [`FailAction::Cancelled`].
    pub cancel_requested: Vec<JobId>,
    /// Leases lost: stop the handler and discard its outcome.
    pub lost: Vec<JobId>,
}

/// How a failed (or deliberately stopped) attempt ends. Completion is [`Backend::complete`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailAction {
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

impl FailAction {
    /// Checks the delay of `Retry` and `Snooze`: at most [`validate::MAX_DELAY`]. Error texts
    /// are never refused; backends store them through [`validate::error_text`].
    pub fn validate(&self) -> Result<()> {
        match self {
            FailAction::Retry { delay, .. } => validate::delay("retry delay", *delay),
            FailAction::Snooze { delay } => validate::delay("snooze delay", *delay),
            FailAction::DeadLetter { .. } | FailAction::Cancelled { .. } => Ok(()),
        }
    }
}

/// What [`Backend::fail`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailOutcome {
    /// Pending again, due at this instant.
    Retried { at: Timestamp },
    /// Snoozed until this instant.
    Snoozed { until: Timestamp },
    /// Moved to the dead-letter table with this reason.
    DeadLettered(DeadReason),
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

/// What [`Backend::requeue_dead`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequeueOutcome {
    /// Back in the hot table as Pending, attempt 0, same id, priority and key.
    Requeued,
    /// No dead-letter row has this id.
    NotFound,
}
