//! What the harness reports: how each job it ran ended.

use chokaq_core::{DeadReason, JobId, JobKind, QueueName, Timestamp};

/// How one run of a job ended, as written to the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler returned `Ok(())`: the job is archived.
    Completed,
    /// The attempt failed and the job waits for a retry at `at` (the handler's error, a
    /// panic or a timeout).
    Retried {
        /// The error written with the attempt.
        error: String,
        /// When the job is due again.
        at: Timestamp,
    },
    /// The handler snoozed the job (`JobError::Snooze`): due again at `until`, the attempt
    /// not counted.
    Snoozed {
        /// When the job is due again.
        until: Timestamp,
    },
    /// The job was dead-lettered: a fatal error, no attempts left, an undecodable payload,
    /// or a cancel (`reason` tells which).
    DeadLettered {
        /// Why.
        reason: DeadReason,
        /// The last error, when there is one.
        error: Option<String>,
    },
    /// The job's lease was lost before its outcome was written (another process took or
    /// cancelled it); nothing was written.
    LeaseLost,
}

impl Outcome {
    /// True for [`Outcome::Completed`].
    pub fn is_completed(&self) -> bool {
        matches!(self, Outcome::Completed)
    }
}

/// One job the harness ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: JobKind,
    /// Its queue.
    pub queue: QueueName,
    /// The attempt this run was (1-based).
    pub attempt: i32,
    /// How it ended.
    pub outcome: Outcome,
}

/// What a drain ran, in the order it ran them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    /// Every job run, in order.
    pub ran: Vec<Ran>,
    /// True when the drain stopped at its bound with jobs it would have run still due.
    pub hit_bound: bool,
}

impl Drained {
    /// How many runs completed.
    pub fn completed(&self) -> usize {
        self.ran.iter().filter(|r| r.outcome.is_completed()).count()
    }

    /// How many runs did not complete.
    pub fn failed(&self) -> usize {
        self.ran.len() - self.completed()
    }

    /// The runs of jobs of kind `kind`.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Ran> + 'a {
        self.ran.iter().filter(move |r| r.kind.as_str() == kind)
    }
}
