//! Maintenance: rescue of expired leases and purge of finished jobs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{DeadReason, JobKind, QueueName};

/// Parameters of [`Backend::rescue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RescueParams {
    /// A Fetched job not started within this long goes back to Pending.
    pub fetched_timeout: Duration,
    /// A Processing job whose heartbeat is older than its queue's `zombie_timeout` (this,
    /// when the queue sets none) is a zombie.
    pub default_zombie_timeout: Duration,
    /// At most this many jobs per call.
    pub limit: u32,
}

impl Default for RescueParams {
    fn default() -> Self {
        RescueParams {
            fetched_timeout: Duration::from_secs(60),
            default_zombie_timeout: Duration::from_secs(300),
            limit: 1000,
        }
    }
}

/// What [`Backend::rescue`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RescueReport {
    /// False when another instance held the maintenance lock, so this call did nothing.
    pub ran: bool,
    /// Fetched jobs put back to Pending.
    pub fetched_released: u64,
    /// Zombies put back to Pending (attempts left, queue policy allows).
    pub zombies_retried: u64,
    /// Zombies moved to the dead-letter table (reason `zombie`).
    pub zombies_dead: u64,
}

/// Which finished-jobs table to purge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PurgeTarget {
    Archive,
    DeadLetter,
}

/// Parameters of [`Backend::purge`]: delete finished jobs older than `older_than`, in batches
/// of `batch_size`, at most `max_batches` batches per call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeParams {
    pub target: PurgeTarget,
    /// Rows finished more than this long ago (database clock).
    pub older_than: Duration,
    pub queue: Option<QueueName>,
    pub kind: Option<JobKind>,
    /// Dead-letter only.
    pub reason: Option<DeadReason>,
    pub batch_size: u32,
    pub max_batches: u32,
}

impl PurgeParams {
    /// Purge `target` rows finished more than `older_than` ago, 1,000 rows a batch, at most
    /// 100 batches.
    pub fn new(target: PurgeTarget, older_than: Duration) -> Self {
        PurgeParams { target, older_than, queue: None, kind: None, reason: None, batch_size: 1000, max_batches: 100 }
    }
}
