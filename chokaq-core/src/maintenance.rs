//! Maintenance: rescue of expired leases and purge of finished jobs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{DeadReason, JobKind, QueueName};

/// The fetched timeout of a queue whose settings set none: a Fetched job not started within
/// it goes back to Pending.
pub const DEFAULT_FETCHED_TIMEOUT: Duration = Duration::from_secs(60);
/// The zombie timeout of a queue whose settings set none: a Processing job whose heartbeat
/// is older is a zombie.
pub const DEFAULT_ZOMBIE_TIMEOUT: Duration = Duration::from_secs(300);

/// Parameters of [`Backend::rescue`](crate::Backend::rescue). The timeouts are not among them:
/// they are each queue's settings in the database (`QueueControl::SetFetchedTimeout`,
/// `SetZombieTimeout`), else [`DEFAULT_FETCHED_TIMEOUT`] and [`DEFAULT_ZOMBIE_TIMEOUT`], so
/// whichever instance wins the maintenance lock rescues by the same rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RescueParams {
    /// At most this many jobs per kind of rescue (Fetched, zombie) per call.
    pub limit: u32,
    /// Retention purges to run after the rescue, under the same maintenance lock (one instance
    /// at a time); their count is [`RescueReport::purged`]. Nothing is purged when another
    /// instance holds the lock.
    pub purge: Vec<PurgeParams>,
}

impl Default for RescueParams {
    fn default() -> Self {
        RescueParams { limit: 1000, purge: Vec::new() }
    }
}

/// What [`Backend::rescue`](crate::Backend::rescue) did.
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
    /// Rows deleted by the purges of [`RescueParams::purge`].
    #[serde(default)]
    pub purged: u64,
}

/// Which finished-jobs table to purge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PurgeTarget {
    Archive,
    DeadLetter,
}

/// Parameters of [`Backend::purge`](crate::Backend::purge): delete finished jobs older than `older_than`, in batches
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
