//! The statements of the admin room: rescue, cancel, the queue controls, requeue and purge.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// The rescue's lock: one rescue at a time, the others return at once.
pub(super) const RESCUE_LOCK: &str = "SELECT name FROM {schema}.locks WHERE name = 'rescue' FOR UPDATE SKIP LOCKED";

/// Expired reserved Fetched jobs (no heartbeat; the queue's fetched timeout, else the
/// default): (now, default fetched timeout µs, limit).
pub(super) const FIND_EXPIRED_FETCHED: &str = "SELECT h.id FROM {schema}.jobs_hot AS h FORCE INDEX (jobs_hot_status) \
     WHERE h.status = 1 AND h.heartbeat_at IS NULL AND h.updated_at < ? - \
     COALESCE((SELECT q.fetched_timeout_us FROM {schema}.queues AS q WHERE q.name = h.queue), ?) \
     ORDER BY h.updated_at, h.id LIMIT ? FOR UPDATE SKIP LOCKED";

/// (now, id).
pub(super) const RELEASE_FETCHED: &str =
    "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, updated_at = ? \
     WHERE id = ?";

/// Held Fetched jobs whose heartbeat expired by their queue's zombie timeout:
/// (now, default zombie timeout µs, limit).
pub(super) const FIND_EXPIRED_HOLDS: &str = concat!(
    "SELECT h.id, h.cancel_requested FROM {schema}.jobs_hot AS h FORCE INDEX (jobs_hot_beat) \
     WHERE h.status = 1 AND h.heartbeat_at IS NOT NULL AND h.heartbeat_at < ? - ",
    zombie_timeout!(),
    " ORDER BY h.heartbeat_at, h.id LIMIT ? FOR UPDATE SKIP LOCKED"
);

/// An expired hold back to Pending, its attempt unspent, the expiry counted: (now, id).
pub(super) const RELEASE_EXPIRED_HOLD: &str =
    "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, \
     heartbeat_at = NULL, expired_holds = expired_holds + 1, updated_at = ? WHERE id = ?";

/// Processing jobs whose heartbeat expired, with their queue's policy:
/// (now, default zombie timeout µs, limit).
pub(super) const FIND_ZOMBIES: &str = concat!(
    "SELECT h.id, h.attempt, h.max_attempts, h.cancel_requested, \
     COALESCE((SELECT q.zombie_policy FROM {schema}.queues AS q WHERE q.name = h.queue), 'retry') AS policy \
     FROM {schema}.jobs_hot AS h FORCE INDEX (jobs_hot_beat) WHERE h.status = 2 \
     AND COALESCE(h.heartbeat_at, h.started_at, h.updated_at) < ? - ",
    zombie_timeout!(),
    " ORDER BY h.heartbeat_at, h.id LIMIT ? FOR UPDATE SKIP LOCKED"
);

/// A zombie back to Pending: (now, id).
pub(super) const RETRY_ZOMBIE: &str =
    "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, heartbeat_at = NULL, \
     cancel_requested = 0, updated_at = ? WHERE id = ?";

/// A new rate limit's starts log (issue 40, L7), under the queue's control row `FOR UPDATE`
/// (which every claim of the queue holds from its count to its commit), before the limit is
/// written, when its kind changes (queue-wide / per key, or a limit set where there was none):
/// the queue's entries numbered again in stamp order for the new buckets (the queue; or each
/// key, key-less entries 0), as the claims number them: (per key 0/1, per key 0/1, queue).
pub(super) const RENUMBER_STARTS: &str = "UPDATE {schema}.starts AS s JOIN (\
     SELECT x.id, CASE WHEN ? = 1 AND x.ckey IS NULL THEN 0 \
       ELSE ROW_NUMBER() OVER (PARTITION BY CASE WHEN ? = 1 THEN x.ckey END ORDER BY x.stamp, x.id) END AS n \
     FROM {schema}.starts AS x WHERE x.queue = ?) AS r ON r.id = s.id SET s.n = r.n";

/// The upgrade to version 3 (`crate::migrate`): every entry numbered for its queue's limit in
/// force, as [`RENUMBER_STARTS`] numbers one queue's.
pub(super) const NUMBER_ALL_STARTS: &str = "UPDATE {schema}.starts AS s JOIN (\
     SELECT x.id, CASE WHEN COALESCE(q.rate_by_key, 0) = 1 AND x.ckey IS NULL THEN 0 \
       ELSE ROW_NUMBER() OVER (PARTITION BY x.queue, CASE WHEN COALESCE(q.rate_by_key, 0) = 1 THEN x.ckey END \
                               ORDER BY x.stamp, x.id) END AS n \
     FROM {schema}.starts AS x LEFT JOIN {schema}.queues AS q ON q.name = x.queue) AS r ON r.id = s.id SET s.n = r.n";

/// The queues with entries in the starts log (read by the prune before it takes each
/// one's control row).
pub(super) const STARTS_QUEUES: &str = "SELECT DISTINCT queue FROM {schema}.starts";

/// One queue's entries no rate window can see any more, at most a batch, under the
/// queue's control row's lock (see `admin::prune_starts`): (queue, cutoff: `now - per`
/// read after the lock, or the largest stamp when the queue has no limit, batch size).
pub(super) const PRUNE_STARTS: &str =
    "DELETE FROM {schema}.starts WHERE queue = ? AND stamp <= ? ORDER BY stamp LIMIT ?";

/// A live job's status and whether it is held, locked: (id).
pub(super) const HOT_STATUS: &str =
    "SELECT status, heartbeat_at IS NOT NULL AS held FROM {schema}.jobs_hot WHERE id = ? FOR UPDATE";

/// (now, id).
pub(super) const REQUEST_CANCEL: &str =
    "UPDATE {schema}.jobs_hot SET cancel_requested = 1, updated_at = ? WHERE id = ?";

/// A queue's control row with the defaults, inserted by a queue's first claim in autocommit,
/// outside its transaction (a duplicate key, when another claim or a control made it first,
/// is fine): a plain insert holds no gap lock, and committing at once leaves no waiter to
/// upgrade a lock after a rollback, so racing first claims of a queue cannot deadlock
/// (`ensure_queue`'s `ON DUPLICATE KEY UPDATE` inside the claim did): (name, now, now).
pub(super) const INSERT_QUEUE: &str = "INSERT INTO {schema}.queues (name, created_at, updated_at) VALUES (?, ?, ?)";

/// (name, now, now).
pub(super) const ENSURE_QUEUE: &str = "INSERT INTO {schema}.queues (name, created_at, updated_at) VALUES (?, ?, ?) \
     ON DUPLICATE KEY UPDATE name = name";

pub(super) const SET_PAUSED: &str = "UPDATE {schema}.queues SET is_paused = ?, updated_at = ? WHERE name = ?";

pub(super) const SET_ACTIVE: &str = "UPDATE {schema}.queues SET is_active = ?, updated_at = ? WHERE name = ?";

pub(super) const SET_MAX_WORKERS: &str = "UPDATE {schema}.queues SET max_workers = ?, updated_at = ? WHERE name = ?";

pub(super) const SET_ZOMBIE_TIMEOUT: &str =
    "UPDATE {schema}.queues SET zombie_timeout_us = ?, updated_at = ? WHERE name = ?";

pub(super) const SET_FETCHED_TIMEOUT: &str =
    "UPDATE {schema}.queues SET fetched_timeout_us = ?, updated_at = ? WHERE name = ?";

pub(super) const SET_ZOMBIE_POLICY: &str =
    "UPDATE {schema}.queues SET zombie_policy = ?, updated_at = ? WHERE name = ?";

pub(super) const SET_KEY_MAX_WORKERS: &str =
    "UPDATE {schema}.queues SET key_max_workers = ?, updated_at = ? WHERE name = ?";

/// (jobs or NULL, per ms or NULL, by key 0/1, now, queue): NULLs and 0 clear the limit.
pub(super) const SET_RATE_LIMIT: &str =
    "UPDATE {schema}.queues SET rate_jobs = ?, rate_per_ms = ?, rate_by_key = ?, updated_at = ? \
     WHERE name = ?";

/// (id), locked.
pub(super) const DEAD_KEY_AND_QUEUE: &str =
    "SELECT idempotency_key, queue FROM {schema}.jobs_dlq WHERE id = ? FOR UPDATE";

/// Dead-letter -> hot, Pending with attempt 0: (now, id).
pub(super) const REQUEUE: &str = concat!(
    "INSERT INTO {schema}.jobs_hot (",
    cols!(),
    ", expired_holds, output) SELECT id, queue, kind, payload, tags, idempotency_key, priority, 0, 0, \
     max_attempts, NULL, NULL, NULL, NULL, created_at, NULL, ?, last_error, 0, created_by, concurrency_key, 0, \
     output \
     FROM {schema}.jobs_dlq WHERE id = ?"
);

/// (id).
pub(super) const DELETE_DEAD: &str = "DELETE FROM {schema}.jobs_dlq WHERE id = ?";

pub(super) const PURGE_ARCHIVE: &str =
    "DELETE FROM {schema}.jobs_archive WHERE finished_at < ? AND (? IS NULL OR queue = ?) \
     AND (? IS NULL OR kind = ?) ORDER BY finished_at LIMIT ?";

pub(super) const PURGE_DEAD: &str = "DELETE FROM {schema}.jobs_dlq WHERE finished_at < ? AND (? IS NULL OR queue = ?) \
     AND (? IS NULL OR kind = ?) AND (? IS NULL OR reason = ?) ORDER BY finished_at LIMIT ?";
