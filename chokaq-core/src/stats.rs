//! Counts per queue and state, from one consistent snapshot.

use serde::{Deserialize, Serialize};

use crate::{QueueSettings, Timestamp};

/// How many Fetched + Processing jobs one concurrency key holds ([`QueueStats::busiest_keys`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyCount {
    pub key: String,
    pub running: u64,
}

/// How many keys [`QueueStats::busiest_keys`] lists at most.
pub const MAX_BUSIEST_KEYS: usize = 5;

/// One queue's counts in a [`StatsSnapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    pub queue: String,
    pub pending: u64,
    pub fetched: u64,
    pub processing: u64,
    pub archived: u64,
    /// Every dead letter of the queue, whatever its reason.
    pub dead: u64,
    /// Of `dead`, the jobs cancelled on purpose (reason `cancelled`): counted apart, since a
    /// cancel is a decision, not a failure. [`QueueStats::failed`] is the rest.
    #[serde(default)]
    pub cancelled: u64,
    /// Due time of the oldest Pending job that is due now (the queue's lag).
    pub oldest_due_at: Option<Timestamp>,
    /// The queue's control row; `None` when it has none (the defaults apply). A queue with a
    /// control row is listed even when it holds no job.
    #[serde(default)]
    pub settings: Option<QueueSettings>,
    /// `archived` is an estimate ([`Backend::stats_estimated`](crate::Backend::stats_estimated)
    /// on a large archive), not an exact count.
    #[serde(default)]
    pub archived_estimated: bool,
    /// The concurrency keys with the most Fetched + Processing jobs in the queue, at most
    /// [`MAX_BUSIEST_KEYS`], most running first (ties: by key). Empty when no running job of
    /// the queue has a key.
    #[serde(default)]
    pub busiest_keys: Vec<KeyCount>,
}

impl QueueStats {
    /// Dead letters that are failures (failed, timed out, zombie, expired): every dead letter
    /// but the cancelled ones. What an alarm should watch.
    pub fn failed(&self) -> u64 {
        self.dead.saturating_sub(self.cancelled)
    }

    /// Whether the queue's control row pauses it.
    pub fn is_paused(&self) -> bool {
        self.settings.as_ref().is_some_and(|s| s.is_paused)
    }

    /// Whether the queue is active (no control row: active).
    pub fn is_active(&self) -> bool {
        self.settings.as_ref().is_none_or(|s| s.is_active)
    }
}

/// Counts taken from one consistent snapshot: the sums always add up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    /// The database clock when the snapshot was taken.
    pub taken_at: Option<Timestamp>,
    pub queues: Vec<QueueStats>,
    pub pending: u64,
    pub fetched: u64,
    pub processing: u64,
    pub archived: u64,
    /// Every dead letter.
    pub dead: u64,
    /// Of `dead`, the cancelled ones.
    #[serde(default)]
    pub cancelled: u64,
    /// `archived` (of one queue or more) is an estimate.
    #[serde(default)]
    pub archived_estimated: bool,
}

impl StatsSnapshot {
    /// Live jobs (Pending + Fetched + Processing).
    pub fn hot(&self) -> u64 {
        self.pending + self.fetched + self.processing
    }

    /// Every job the snapshot saw: hot + archived + dead.
    pub fn total(&self) -> u64 {
        self.hot() + self.archived + self.dead
    }

    /// Dead letters that are failures: every dead letter but the cancelled ones.
    pub fn failed(&self) -> u64 {
        self.dead.saturating_sub(self.cancelled)
    }

    /// One queue's counts, if it has jobs or a control row.
    pub fn queue(&self, name: &str) -> Option<&QueueStats> {
        self.queues.iter().find(|q| q.queue == name)
    }

    /// Adds one queue's counts to the totals and the queue to the list (the backends' stats
    /// build a snapshot with it).
    pub fn push(&mut self, q: QueueStats) {
        self.pending += q.pending;
        self.fetched += q.fetched;
        self.processing += q.processing;
        self.archived += q.archived;
        self.dead += q.dead;
        self.cancelled += q.cancelled;
        self.archived_estimated |= q.archived_estimated;
        self.queues.push(q);
    }
}
