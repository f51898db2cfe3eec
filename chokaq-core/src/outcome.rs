//! What guarded writes report: the typed outcomes a caller must branch on, and the action
//! that ends a failed attempt.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{validate, DeadReason, JobId, Result, Timestamp};

/// The outcome of one guarded write: done, or the lease was lost (the job was rescued,
/// released, cancelled or re-claimed by someone else). A repeated `complete` or `fail` with
/// the lease that already wrote the outcome is `Done` with that outcome again, nothing written
/// twice (`docs/contract.md`, operations and guards). A lost lease is an ordinary outcome the
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
/// were lost. Every input id appears in exactly one of the two lists, once, in the order of its
/// first entry. An id listed more than once (the same lease twice, or a stale lease and the
/// current one) is done when the write happened, or had already happened, for a lease it was
/// listed with; lost otherwise.
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

    /// Folds per-entry results of a batch (in input order; an id may come more than once) into
    /// one outcome by the rule above: done when any entry of the id was done.
    pub fn merge(entries: impl IntoIterator<Item = (JobId, bool)>) -> Self {
        let mut order: Vec<JobId> = Vec::new();
        let mut done: std::collections::HashMap<JobId, bool> = std::collections::HashMap::new();
        for (id, ok) in entries {
            match done.entry(id) {
                std::collections::hash_map::Entry::Occupied(mut e) => *e.get_mut() |= ok,
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(ok);
                    order.push(id);
                }
            }
        }
        Self::partition(order, |id| done.get(id).copied().unwrap_or(false))
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

impl HeartbeatReport {
    /// Folds per-entry results (in input order; an id may come more than once) into one report,
    /// by [`BatchOutcome`]'s rule: an id is held when any of its entries held the lease (with
    /// that entry's cancel flag), lost otherwise; each id in one list, once.
    /// `None` is a lost entry, `Some(cancel_requested)` a held one.
    pub fn merge(entries: impl IntoIterator<Item = (JobId, Option<bool>)>) -> Self {
        let mut order: Vec<JobId> = Vec::new();
        let mut seen: std::collections::HashMap<JobId, Option<bool>> = std::collections::HashMap::new();
        for (id, held) in entries {
            match seen.entry(id) {
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    if held.is_some() {
                        e.insert(held);
                    }
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(held);
                    order.push(id);
                }
            }
        }
        let mut out = HeartbeatReport::default();
        for id in order {
            match seen.get(&id).copied().flatten() {
                Some(cancel) => {
                    out.held.push(id);
                    if cancel {
                        out.cancel_requested.push(id);
                    }
                }
                None => out.lost.push(id),
            }
        }
        out
    }
}

/// How a failed (or deliberately stopped) attempt ends. Completion is [`Backend::complete`](crate::Backend::complete).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailAction {
    /// Back to Pending, due after `delay` (database clock), `last_error` kept. If no attempts
    /// are left the backend dead-letters it instead (reason `failed`) and says so; if an
    /// operator's cancel was accepted, it dead-letters it as `cancelled` (cancel is final).
    Retry { delay: Duration, error: String },
    /// Straight to the dead-letter table.
    DeadLetter { reason: DeadReason, error: String },
    /// Cancelled (by an operator's request or by the handler): dead-letter, reason `cancelled`.
    Cancelled { error: Option<String> },
    /// Back to Pending, due after `delay`; the attempt does not count (`attempt -= 1`). If an
    /// operator's cancel was accepted, dead-lettered as `cancelled` instead (cancel is final).
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

/// What [`Backend::fail`](crate::Backend::fail) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailOutcome {
    /// Pending again, due at this instant.
    Retried { at: Timestamp },
    /// Snoozed until this instant.
    Snoozed { until: Timestamp },
    /// Moved to the dead-letter table with this reason.
    DeadLettered(DeadReason),
}

/// What [`Backend::cancel`](crate::Backend::cancel) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelOutcome {
    /// It was Pending or Fetched and is now in the dead-letter table (reason `cancelled`).
    Cancelled,
    /// It is Processing: `cancel_requested` is set, and its worker sees it on the next
    /// heartbeat. Final: the job never starts another attempt (a retry, snooze or rescue of it
    /// dead-letters it as `cancelled`).
    Requested,
    /// No live job has this id (unknown, or already archived or dead).
    NotLive,
}

/// What [`Backend::requeue_dead`](crate::Backend::requeue_dead) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequeueOutcome {
    /// Back in the hot table as Pending, attempt 0, same id, priority and key.
    Requeued,
    /// No dead-letter row has this id.
    NotFound,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_puts_each_id_in_one_list_once() {
        let (a, b, c) = (JobId::new(), JobId::new(), JobId::new());
        let out = BatchOutcome::merge([(a, false), (b, true), (a, true), (c, false), (b, false), (c, false)]);
        assert_eq!(out, BatchOutcome { done: vec![a, b], lost: vec![c] });
        let hb = HeartbeatReport::merge([(a, None), (b, Some(true)), (a, Some(false)), (c, None), (b, None)]);
        assert_eq!(hb, HeartbeatReport { held: vec![a, b], cancel_requested: vec![b], lost: vec![c] });
    }
}
