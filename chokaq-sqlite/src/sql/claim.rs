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

/// Starts of a queue stamped after `?2` (its window's start), under a queue-wide limit: `?1`
/// queue. The queue's last ordinal less the first one stamped after `?2`, plus one (0 with none):
/// two searches of `rate_starts_queue_n`, whatever the window holds (issue 40, L7;
/// `crate::claim`, "The count").
pub(super) const RATE_COUNT_QUEUE: &str = "SELECT coalesce(\
     (SELECT n FROM {schema}.rate_starts WHERE queue = ?1 ORDER BY stamp DESC, n DESC LIMIT 1) \
     - (SELECT n FROM {schema}.rate_starts WHERE queue = ?1 AND stamp > ?2 ORDER BY stamp, n LIMIT 1) + 1, 0)";

/// The same for one key under a limit per key: `?1` queue, `?2` key, `?3` the window's start
/// (two searches of `rate_starts_key_n`).
pub(super) const RATE_COUNT_KEY: &str = "SELECT coalesce(\
     (SELECT n FROM {schema}.rate_starts WHERE queue = ?1 AND ckey = ?2 ORDER BY stamp DESC, n DESC LIMIT 1) \
     - (SELECT n FROM {schema}.rate_starts WHERE queue = ?1 AND ckey = ?2 AND stamp > ?3 ORDER BY stamp, n LIMIT 1) \
     + 1, 0)";

/// Logs one start of a queue-wide limit, numbered after the queue's last: `?1` queue, `?2`
/// key, `?3` stamp (the claim's now).
pub(super) const RATE_LOG_QUEUE: &str = "INSERT INTO {schema}.rate_starts (queue, ckey, stamp, n) VALUES (?1, ?2, ?3, \
     coalesce((SELECT n FROM {schema}.rate_starts WHERE queue = ?1 ORDER BY stamp DESC, n DESC LIMIT 1), 0) + 1)";

/// Logs one start of a limit per key, numbered after the key's last (0 without a key: in no
/// bucket): `?1` queue, `?2` key, `?3` stamp.
pub(super) const RATE_LOG_KEY: &str = "INSERT INTO {schema}.rate_starts (queue, ckey, stamp, n) VALUES (?1, ?2, ?3, \
     CASE WHEN ?2 IS NULL THEN 0 ELSE coalesce((SELECT n FROM {schema}.rate_starts WHERE queue = ?1 AND ckey = ?2 \
     ORDER BY stamp DESC, n DESC LIMIT 1), 0) + 1 END)";

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
