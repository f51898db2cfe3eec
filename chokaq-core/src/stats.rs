//! Counts per queue and state, from one consistent snapshot.

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// One queue's counts in a [`StatsSnapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    pub queue: String,
    pub pending: u64,
    pub fetched: u64,
    pub processing: u64,
    pub archived: u64,
    pub dead: u64,
    /// Due time of the oldest Pending job that is due now (the queue's lag).
    pub oldest_due_at: Option<Timestamp>,
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
    pub dead: u64,
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

    /// One queue's counts, if it has any jobs.
    pub fn queue(&self, name: &str) -> Option<&QueueStats> {
        self.queues.iter().find(|q| q.queue == name)
    }
}
