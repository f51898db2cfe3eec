//! The statements of the claim room: the claim.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// A queue's control row: `?1` name.
pub(super) const QUEUE_SETTINGS: &str = "SELECT max_workers, is_paused, is_active, zombie_timeout_us, zombie_policy, \
     fetched_timeout_us, key_max_workers, rate_jobs, rate_per_ms, rate_by_key, updated_at \
     FROM {schema}.queues WHERE name = ?1";

/// Fetched + Processing jobs of a queue: `?1` queue.
pub(super) const ACTIVE_COUNT: &str = "SELECT count(*) FROM {schema}.jobs_hot WHERE queue = ?1 AND status IN (1, 2)";

/// Whether a queue has a due Pending or Scheduled job: `?1` queue, `?2` now.
pub(super) const ANY_DUE: &str = "SELECT 1 FROM {schema}.jobs_hot WHERE queue = ?1 AND status = 0 \
     AND coalesce(scheduled_at, created_at) <= ?2 \
     UNION ALL SELECT 1 FROM {schema}.jobs_hot WHERE queue = ?1 AND status = 3 \
     AND coalesce(scheduled_at, created_at) <= ?2 LIMIT 1";

/// Scheduled -> Pending for the due jobs of a queue (the claim's promotion; the range of
/// `jobs_hot_scheduled`): `?1` queue, `?2` now.
pub(super) const PROMOTE_DUE: &str =
    "UPDATE {schema}.jobs_hot SET status = 0 WHERE id IN (SELECT id FROM {schema}.jobs_hot \
     WHERE queue = ?1 AND status = 3 AND coalesce(scheduled_at, created_at) <= ?2 LIMIT 1000)";

/// A queue's due Pending jobs in claim order: `?1` queue, `?2` now, `?3` limit.
pub(super) const CLAIM_CANDIDATES: &str =
    "SELECT id, priority, coalesce(scheduled_at, created_at) AS due FROM {schema}.jobs_hot \
     WHERE queue = ?1 AND status = 0 AND coalesce(scheduled_at, created_at) <= ?2 \
     ORDER BY priority DESC, coalesce(scheduled_at, created_at) ASC, id ASC LIMIT ?3";

/// Fetched + Processing jobs per key of a queue (keys with none are absent): `?1` queue. The
/// range of `jobs_hot_key_running`: as many rows as keyed jobs running.
pub(super) const KEY_RUNNING: &str = "SELECT concurrency_key AS ckey, count(*) AS n FROM {schema}.jobs_hot \
     WHERE queue = ?1 AND concurrency_key IS NOT NULL AND status IN (1, 2) GROUP BY concurrency_key";

/// A page of a keyed or rate-limited queue's due Pending jobs in claim order, after a
/// position and without the keys that may take nothing more: `?1` queue, `?2` now, `?3` 1
/// when no keyed job may be taken (a key cap of 0), `?4` the excluded keys (a JSON array),
/// `?5`/`?6`/`?7` the priority, due time and id of the last row of the previous page (NULL
/// on the first), `?8` the page size.
pub(super) const CLAIM_CANDIDATES_KEYED: &str = "SELECT id, priority, coalesce(scheduled_at, created_at) AS due, \
     concurrency_key AS ckey FROM {schema}.jobs_hot \
     WHERE queue = ?1 AND status = 0 AND coalesce(scheduled_at, created_at) <= ?2 \
     AND (concurrency_key IS NULL OR (?3 = 0 AND concurrency_key NOT IN (SELECT value FROM json_each(?4)))) \
     AND (?5 IS NULL OR priority < ?5 OR (priority = ?5 AND (coalesce(scheduled_at, created_at) > ?6 \
       OR (coalesce(scheduled_at, created_at) = ?6 AND id > ?7)))) \
     ORDER BY priority DESC, coalesce(scheduled_at, created_at) ASC, id ASC LIMIT ?8";

/// Starts of a queue stamped after `?2` (its window's start): `?1` queue.
pub(super) const RATE_COUNT_QUEUE: &str = "SELECT count(*) FROM {schema}.rate_starts WHERE queue = ?1 AND stamp > ?2";

/// Starts per key of a queue stamped after `?2`: `?1` queue (a covering range of
/// `rate_starts_window`).
pub(super) const RATE_COUNT_KEYS: &str = "SELECT ckey, count(*) AS n FROM {schema}.rate_starts \
     WHERE queue = ?1 AND stamp > ?2 AND ckey IS NOT NULL GROUP BY ckey";

/// Logs one start: `?1` queue, `?2` key, `?3` stamp (the claim's now).
pub(super) const RATE_LOG: &str = "INSERT INTO {schema}.rate_starts (queue, ckey, stamp) VALUES (?1, ?2, ?3)";

/// Reserves `?1` leases; returns the last one.
pub(super) const NEXT_LEASES: &str =
    "UPDATE {schema}.counters SET value = value + ?1 WHERE name = 'lease' RETURNING value";

/// Claims one Pending job: `?1` status, `?2` worker, `?3` lease, `?4` now, `?5` 1 when
/// starting at once (else 0), `?6` id, `?7` 1 when the claim is the job's first heartbeat
/// (start and hold), else 0: a reserved job has none (set NULL, whatever an earlier run
/// left).
pub(super) const CLAIM_ONE: &str = concat!(
    "UPDATE {schema}.jobs_hot SET status = ?1, worker_id = ?2, lease = ?3, updated_at = ?4, \
     attempt = attempt + ?5, \
     started_at = CASE WHEN ?5 = 1 THEN ?4 ELSE started_at END, \
     heartbeat_at = CASE WHEN ?7 = 1 THEN ?4 ELSE NULL END \
     WHERE id = ?6 AND status = 0 RETURNING ",
    cols!(),
    ", expired_holds"
);
