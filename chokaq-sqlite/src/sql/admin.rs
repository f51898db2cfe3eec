//! The statements of the admin room: rescue, cancel, the queue controls, requeue and purge.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// Releases expired reserved Fetched jobs (no heartbeat; each queue's fetched timeout, else
/// the default): `?1` now, `?2` default fetched timeout (µs), `?3` limit.
pub(super) const RESCUE_FETCHED: &str =
    "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, updated_at = ?1 \
     WHERE id IN \
     (SELECT h.id FROM {schema}.jobs_hot h LEFT JOIN {schema}.queues q ON q.name = h.queue \
      WHERE h.status = 1 AND h.heartbeat_at IS NULL AND h.updated_at < ?1 - coalesce(q.fetched_timeout_us, ?2) \
      ORDER BY h.updated_at, h.id LIMIT ?3) \
     RETURNING queue";

/// Held Fetched jobs (a heartbeat) whose heartbeat expired by their queue's zombie timeout
/// (their handler may be running; the fetched timeout does not apply): `?1` now, `?2`
/// default zombie timeout (µs), `?3` limit.
pub(super) const FIND_EXPIRED_HOLDS: &str = "SELECT h.id, h.queue, h.cancel_requested \
     FROM {schema}.jobs_hot h LEFT JOIN {schema}.queues q ON q.name = h.queue \
     WHERE h.status = 1 AND h.heartbeat_at IS NOT NULL \
       AND h.heartbeat_at < ?1 - coalesce(q.zombie_timeout_us, ?2) \
     ORDER BY h.heartbeat_at, h.id LIMIT ?3";

/// An expired hold back to Pending, its attempt unspent, the expiry counted: `?1` now,
/// `?2` id.
pub(super) const RELEASE_EXPIRED_HOLD: &str =
    "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, \
     heartbeat_at = NULL, expired_holds = expired_holds + 1, updated_at = ?1 WHERE id = ?2 AND status = 1";

/// Processing jobs whose heartbeat expired, with their queue's policy: `?1` now, `?2`
/// default zombie timeout, `?3` limit.
pub(super) const FIND_ZOMBIES: &str = "SELECT h.id, h.queue, h.attempt, h.max_attempts, h.cancel_requested, \
     coalesce(q.zombie_policy, 'retry') AS policy \
     FROM {schema}.jobs_hot h LEFT JOIN {schema}.queues q ON q.name = h.queue \
     WHERE h.status = 2 \
       AND coalesce(h.heartbeat_at, h.started_at, h.updated_at) < ?1 - coalesce(q.zombie_timeout_us, ?2) \
     ORDER BY h.id LIMIT ?3";

/// The starts log keeps what a rate window can still see: entries of queues without a limit
/// go, and those stamped at or before their queue's window start: `?1` now.
pub(super) const RATE_PRUNE: &str =
    "DELETE FROM {schema}.rate_starts WHERE NOT EXISTS (SELECT 1 FROM {schema}.queues q \
     WHERE q.name = rate_starts.queue AND q.rate_jobs IS NOT NULL AND q.rate_per_ms IS NOT NULL \
     AND rate_starts.stamp > ?1 - q.rate_per_ms * 1000)";

/// A new rate limit's starts log (issue 40, L7), before the limit is written, in the control's
/// write transaction: when the limit's kind changes (queue-wide / per key, or a limit set where
/// there was none), the queue's entries are numbered again in stamp order for the new buckets
/// (the queue; or each key, key-less entries 0), as the claims number them; the same kind keeps
/// its numbers. `?1` queue, `?2` the new limit's jobs (NULL: cleared, nothing to do), `?3` 1 per
/// key, else 0.
pub(super) const RATE_RENUMBER: &str = "UPDATE {schema}.rate_starts SET n = r.n FROM (\
     SELECT s.rowid AS rid, CASE WHEN ?3 = 1 AND s.ckey IS NULL THEN 0 \
       ELSE row_number() OVER (PARTITION BY CASE WHEN ?3 = 1 THEN s.ckey END ORDER BY s.stamp) END AS n \
     FROM {schema}.rate_starts s WHERE s.queue = ?1 AND ?2 IS NOT NULL \
       AND NOT EXISTS (SELECT 1 FROM {schema}.queues q WHERE q.name = ?1 AND q.rate_jobs IS NOT NULL \
                       AND q.rate_by_key = ?3)) AS r \
     WHERE rate_starts.rowid = r.rid AND rate_starts.n <> r.n";

/// The upgrade to version 10 (`crate::migrate`): every entry numbered for its queue's limit in
/// force, as [`RATE_RENUMBER`] numbers one queue's.
pub(super) const RATE_NUMBER_ALL: &str = "UPDATE {schema}.rate_starts SET n = r.n FROM (\
     SELECT s.rowid AS rid, CASE WHEN coalesce(q.rate_by_key, 0) = 1 AND s.ckey IS NULL THEN 0 \
       ELSE row_number() OVER (PARTITION BY s.queue, CASE WHEN coalesce(q.rate_by_key, 0) = 1 THEN s.ckey END \
                               ORDER BY s.stamp) END AS n \
     FROM {schema}.rate_starts s LEFT JOIN {schema}.queues q ON q.name = s.queue) AS r \
     WHERE rate_starts.rowid = r.rid";

/// A zombie back to Pending: `?1` now, `?2` id.
pub(super) const RETRY_ZOMBIE: &str =
    "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, heartbeat_at = NULL, \
     cancel_requested = 0, updated_at = ?1 WHERE id = ?2";

/// A live job's status and whether it is held (Fetched with a heartbeat): `?1` id.
pub(super) const HOT_STATUS: &str =
    "SELECT status, heartbeat_at IS NOT NULL AS held FROM {schema}.jobs_hot WHERE id = ?1";

/// `?1` now, `?2` id.
pub(super) const REQUEST_CANCEL: &str =
    "UPDATE {schema}.jobs_hot SET cancel_requested = 1, updated_at = ?1 WHERE id = ?2";

/// `?1` name, `?2` now.
pub(super) const ENSURE_QUEUE: &str = "INSERT INTO {schema}.queues (name, created_at, updated_at) VALUES (?1, ?2, ?2) \
     ON CONFLICT (name) DO NOTHING";

pub(super) const SET_PAUSED: &str = "UPDATE {schema}.queues SET is_paused = ?1, updated_at = ?2 WHERE name = ?3";

pub(super) const SET_ACTIVE: &str = "UPDATE {schema}.queues SET is_active = ?1, updated_at = ?2 WHERE name = ?3";

pub(super) const SET_MAX_WORKERS: &str = "UPDATE {schema}.queues SET max_workers = ?1, updated_at = ?2 WHERE name = ?3";

pub(super) const SET_ZOMBIE_TIMEOUT: &str =
    "UPDATE {schema}.queues SET zombie_timeout_us = ?1, updated_at = ?2 WHERE name = ?3";

pub(super) const SET_FETCHED_TIMEOUT: &str =
    "UPDATE {schema}.queues SET fetched_timeout_us = ?1, updated_at = ?2 WHERE name = ?3";

pub(super) const SET_ZOMBIE_POLICY: &str =
    "UPDATE {schema}.queues SET zombie_policy = ?1, updated_at = ?2 WHERE name = ?3";

pub(super) const SET_KEY_MAX_WORKERS: &str =
    "UPDATE {schema}.queues SET key_max_workers = ?1, updated_at = ?2 WHERE name = ?3";

/// `?1` jobs, `?2` period (ms), `?3` by key (0/1), `?4` now, `?5` queue: all NULL clears
/// the limit (`rate_by_key` back to 0).
pub(super) const SET_RATE_LIMIT: &str =
    "UPDATE {schema}.queues SET rate_jobs = ?1, rate_per_ms = ?2, rate_by_key = coalesce(?3, 0), \
     updated_at = ?4 WHERE name = ?5";

/// `?1` id.
pub(super) const DEAD_KEY_AND_QUEUE: &str = "SELECT idempotency_key, queue FROM {schema}.jobs_dlq WHERE id = ?1";

/// Dead-letter -> hot, Pending with attempt 0 and no expired holds (a fresh row): `?1` now,
/// `?2` id.
pub(super) const REQUEUE: &str = concat!(
    "INSERT INTO {schema}.jobs_hot (",
    cols!(),
    ", expired_holds, output) SELECT id, queue, kind, payload, tags, idempotency_key, priority, 0, 0, \
     max_attempts, NULL, NULL, NULL, NULL, created_at, NULL, ?1, last_error, 0, created_by, concurrency_key, 0, \
     output \
     FROM {schema}.jobs_dlq WHERE id = ?2"
);

/// `?1` id.
pub(super) const DELETE_DEAD: &str = "DELETE FROM {schema}.jobs_dlq WHERE id = ?1";

pub(super) const PURGE_ARCHIVE: &str =
    "DELETE FROM {schema}.jobs_archive WHERE id IN (SELECT id FROM {schema}.jobs_archive \
     WHERE finished_at < ?1 AND (?2 IS NULL OR queue = ?2) AND (?3 IS NULL OR kind = ?3) \
     ORDER BY finished_at LIMIT ?4)";

/// As `purge_archive`, plus `?5` reason (NULL = any).
pub(super) const PURGE_DEAD: &str = "DELETE FROM {schema}.jobs_dlq WHERE id IN (SELECT id FROM {schema}.jobs_dlq \
     WHERE finished_at < ?1 AND (?2 IS NULL OR queue = ?2) AND (?3 IS NULL OR kind = ?3) \
     AND (?5 IS NULL OR reason = ?5) ORDER BY finished_at LIMIT ?4)";
