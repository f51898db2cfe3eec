//! Test support: what the conformance suite needs beyond the production API. Backends
//! implement [`TestSupport`]; applications never call it.

use std::sync::Arc;

use async_trait::async_trait;

use crate::{Backend, JobId, JobStatus, QueueName, Result, Timestamp, WorkerId};

/// A change forced onto a hot job, bypassing every guard, to put it into a given state
/// (an old heartbeat, a past schedule). Fields left `None` are not touched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobPatch {
    pub status: Option<JobStatus>,
    pub attempt: Option<i32>,
    /// `Some(None)` clears it.
    pub scheduled_at: Option<Option<Timestamp>>,
    pub heartbeat_at: Option<Option<Timestamp>>,
    pub updated_at: Option<Timestamp>,
    pub created_at: Option<Timestamp>,
    /// The stored payload's raw JSON text, bypassing every check: to make a row that a read
    /// cannot decode (e.g. nested deeper than the reader's recursion limit). A backend that
    /// cannot store such a row (memory) returns an `Unsupported` error.
    pub raw_payload: Option<String>,
}

/// In how many rows of each table an id appears (raw, no joins): the "exactly one place"
/// check of the contract.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Presence {
    pub hot: u32,
    pub archive: u32,
    pub dead: u32,
}

impl Presence {
    /// Rows over all tables.
    pub fn total(&self) -> u32 {
        self.hot + self.archive + self.dead
    }
}

/// Test-only access to a backend's storage.
#[async_trait]
pub trait TestSupport: Backend {
    /// The database clock.
    async fn db_now(&self) -> Result<Timestamp>;

    /// Forces fields of a hot job; false when no hot row has the id.
    async fn force(&self, id: JobId, patch: &JobPatch) -> Result<bool>;

    /// Sets `last_seen_at` of a workers-table row (to age it); false when there is no row.
    async fn force_worker_seen(&self, worker: WorkerId, last_seen_at: Timestamp) -> Result<bool>;

    /// Sets `finished_at` of an archived job (to place it in a past minute); false when the
    /// archive has no row with the id.
    async fn force_finished_at(&self, id: JobId, finished_at: Timestamp) -> Result<bool>;

    /// In which tables an id appears, counted raw.
    async fn presence(&self, id: JobId) -> Result<Presence>;

    /// Per-table row counts for a set of ids in one consistent read (hot, archive, dead).
    async fn presence_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, Presence)>>;

    /// Kills the database sessions this backend's pool holds (capability `kill_connections`).
    /// Returns how many were killed.
    async fn kill_connections(&self) -> Result<u64> {
        Err(crate::Error::unsupported("kill_connections is not supported by this backend"))
    }

    /// A second handle on the same store whose sessions belong to a role (or database) whose
    /// default transaction isolation is REPEATABLE READ, as an administrator may configure it:
    /// the backend must pin the level its claims need whatever that default. `None` when the
    /// database has no such default to set (the isolation cases are then ignored). The role,
    /// if one is created, is dropped by [`TestSupport::drop_schema`].
    async fn with_repeatable_read_default(&self) -> Result<Option<Arc<dyn TestSupport>>> {
        Ok(None)
    }

    /// The isolation level a transaction of this handle's sessions runs at unless the backend
    /// sets one itself (e.g. `read committed`), as the database names it; `None` where the
    /// database has no such notion.
    async fn session_isolation(&self) -> Result<Option<String>> {
        Ok(None)
    }

    /// Appends `count` entries to the starts log of `queue`, each with the concurrency key
    /// `key` and stamped `at`: what `count` starts of those jobs at `at` would have logged,
    /// numbered in the bucket of the queue's rate limit (which must be set), in bulk. A long
    /// window (a million starts in a day) is filled without claiming a million jobs. `at` must
    /// be no earlier than the bucket's latest entry (each bucket's log is in stamp order, as
    /// claims write it), else `InvalidInput`; so must a queue without a rate limit.
    async fn add_starts(&self, queue: &QueueName, key: Option<&str>, count: u64, at: Timestamp) -> Result<()> {
        let _ = (queue, key, count, at);
        Err(crate::Error::unsupported("add_starts is not supported by this backend"))
    }

    /// Drops everything this backend created (its schema). Used by runners after a suite.
    async fn drop_schema(&self) -> Result<()>;
}
