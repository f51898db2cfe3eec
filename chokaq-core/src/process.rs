//! Live worker processes (the `workers` table) and finished-jobs throughput: what an operator
//! reads to answer "which workers are alive, where, on which queues, doing how much?".

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Error, QueueName, Result, Timestamp, WorkerId};

/// The longest host name a registration may carry (bytes).
pub const MAX_HOST_LEN: usize = 255;
/// The most queues one registration may list.
pub const MAX_WORKER_QUEUES: usize = 256;
/// The longest throughput window [`Backend::throughput`](crate::Backend::throughput) accepts.
pub const MAX_THROUGHPUT_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// What a worker process writes about itself with each heartbeat
/// ([`Backend::register_worker`](crate::Backend::register_worker)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRegistration {
    pub worker: WorkerId,
    pub host: String,
    pub pid: u32,
    pub queues: Vec<QueueName>,
    /// How many jobs the process runs at once.
    pub concurrency: u32,
}

impl WorkerRegistration {
    /// Checks the host (at most [`MAX_HOST_LEN`] bytes, no control characters) and the queue
    /// list (at most [`MAX_WORKER_QUEUES`]).
    pub fn validate(&self) -> Result<()> {
        if self.host.len() > MAX_HOST_LEN {
            return Err(Error::invalid(format!(
                "worker host is {} bytes, more than the limit of {MAX_HOST_LEN}",
                self.host.len()
            )));
        }
        if self.host.chars().any(char::is_control) {
            return Err(Error::invalid("worker host holds a control character"));
        }
        if self.queues.len() > MAX_WORKER_QUEUES {
            return Err(Error::invalid(format!(
                "a worker registration lists {} queues, more than the limit of {MAX_WORKER_QUEUES}",
                self.queues.len()
            )));
        }
        Ok(())
    }
}

/// One row of the workers table, as [`Backend::list_workers`](crate::Backend::list_workers)
/// returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerProcess {
    pub worker: WorkerId,
    pub host: String,
    pub pid: u32,
    pub queues: Vec<String>,
    pub concurrency: u32,
    /// The database clock at the first registration of this worker id.
    pub started_at: Timestamp,
    /// The database clock at the latest registration.
    pub last_seen_at: Timestamp,
}

/// What [`Backend::throughput`](crate::Backend::throughput) counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThroughputParams {
    /// How far back from the database's now (at most [`MAX_THROUGHPUT_WINDOW`]).
    pub window: Duration,
    /// One queue, or every queue.
    pub queue: Option<QueueName>,
}

impl ThroughputParams {
    /// The last hour, every queue.
    pub fn last_hour() -> Self {
        ThroughputParams { window: Duration::from_secs(3600), queue: None }
    }

    /// Checks the window (more than zero, at most [`MAX_THROUGHPUT_WINDOW`]).
    pub fn validate(&self) -> Result<()> {
        if self.window.is_zero() || self.window > MAX_THROUGHPUT_WINDOW {
            return Err(Error::invalid(format!(
                "throughput window {:?} is outside 1 s ..= {:?}",
                self.window, MAX_THROUGHPUT_WINDOW
            )));
        }
        Ok(())
    }
}

/// What one queue did in one minute (UTC, times truncated to the minute).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThroughputBucket {
    pub queue: String,
    /// The start of the minute, UTC.
    pub minute: Timestamp,
    /// Jobs archived as done (their finish time).
    pub finished: u64,
    /// Jobs dead-lettered as failures (failed, timed out, zombie, expired; not cancelled),
    /// by their finish time.
    #[serde(default)]
    pub failed: u64,
    /// Failed attempts now waiting for a retry (Pending or Scheduled with attempt 1 or more
    /// and an error), by the time the attempt failed. A read of the hot table, not a log: a
    /// retry that has since been claimed again, or has finished, is no longer counted here.
    #[serde(default)]
    pub retried: u64,
}
