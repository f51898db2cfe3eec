//! The claim's parameters.

use serde::{Deserialize, Serialize};

use crate::{QueueName, Result, WorkerId};

/// Largest `limit` accepted by [`Backend::claim`](crate::Backend::claim).
pub const MAX_CLAIM_LIMIT: u32 = 1000;
/// Most jobs accepted by one [`Backend::enqueue_many`](crate::Backend::enqueue_many) call.
pub const MAX_ENQUEUE_BATCH: usize = 10_000;

/// How a claim leaves the jobs it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimMode {
    /// Pending → Fetched: the worker buffers them and calls [`Backend::start`](crate::Backend::start) before running
    /// each (a bounded prefetch).
    Reserve,
    /// Pending → Processing in the claim itself (`attempt += 1`, `started_at`,
    /// `heartbeat_at` set): for a worker that has that many free slots now. Saves the start
    /// round trip.
    Start,
    /// Pending → Fetched **held**: `heartbeat_at` is set (the claim is its first heartbeat),
    /// the attempt is not counted. The worker may begin a held job's handler before any
    /// further write: the attempt is counted by [`Backend::start`](crate::Backend::start) or, for a job that finishes
    /// first, by its outcome (`complete` / `fail` on a held Fetched job count the attempt
    /// as `start` then the outcome would, in one statement). A held job is heart-beaten like a
    /// Processing one and expires only after its queue's zombie timeout without a heartbeat;
    /// a cancel of it is a request (its worker may be running it), never final at once.
    ///
    /// [`Backend::start`](crate::Backend::start): crate::Backend::start
    Hold,
}

/// Parameters of [`Backend::claim`](crate::Backend::claim).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimParams {
    /// Who claims.
    pub worker: WorkerId,
    /// Which queues to take from (at least one).
    pub queues: Vec<QueueName>,
    /// At most this many jobs (1 to [`MAX_CLAIM_LIMIT`]).
    pub limit: u32,
    /// Reserve into Fetched, or start straight into Processing.
    pub mode: ClaimMode,
}

impl ClaimParams {
    /// A claim request; checked by [`ClaimParams::validate`].
    pub fn new(worker: WorkerId, queues: Vec<QueueName>, limit: u32, mode: ClaimMode) -> Self {
        ClaimParams { worker, queues, limit, mode }
    }

    /// Rejects an empty queue list and a limit outside 1..=[`MAX_CLAIM_LIMIT`].
    pub fn validate(&self) -> Result<()> {
        if self.queues.is_empty() {
            return Err(crate::Error::invalid("claim needs at least one queue"));
        }
        if self.limit == 0 || self.limit > MAX_CLAIM_LIMIT {
            return Err(crate::Error::invalid(format!(
                "claim limit must be 1 to {MAX_CLAIM_LIMIT}, got {}",
                self.limit
            )));
        }
        Ok(())
    }
}
