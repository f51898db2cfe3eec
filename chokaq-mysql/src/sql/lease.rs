//! The statements of the lease room: the guarded lease operations: start, heartbeat, complete, fail, release.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// Locks a held (Fetched or Processing) job of this lease: (id, lease, worker).
pub(super) const LOCK_HELD: &str = "SELECT status, attempt, max_attempts, cancel_requested FROM {schema}.jobs_hot \
     WHERE id = ? AND lease = ? AND worker_id = ? AND status IN (1, 2) FOR UPDATE";

/// Fetched -> Processing: (now, now, now, id, lease, worker).
pub(super) const START: &str =
    "UPDATE {schema}.jobs_hot SET status = 2, attempt = attempt + 1, started_at = ?, heartbeat_at = ?, \
     updated_at = ? WHERE id = ? AND lease = ? AND worker_id = ? AND status = 1";

/// (now, now, id): the heartbeat of a job locked by `lock_held`.
pub(super) const HEARTBEAT: &str = "UPDATE {schema}.jobs_hot SET heartbeat_at = ?, updated_at = ? WHERE id = ?";

/// The set-based statements below name held rows by lease: `{ids}`, then `{pairs}` of
/// (id, lease), then the worker. Each scans the primary key (``FORCE INDEX (`PRIMARY`)``,
/// quoted for sqlfluff; the multi-table form of `DELETE`, the one MySQL takes index hints
/// in): the `id IN` list is the range it scans and locks, in id order. Left to itself the
/// optimizer may take the `(id, lease)` pairs as a range of `jobs_hot_lease`, or
/// `status = 1` as one of `jobs_hot_status` (both seen in EXPLAIN on MariaDB 10.11), and
/// lock in that index's order. The pairs fence by lease.
///
/// Fetched -> Processing for the Fetched jobs these leases hold, in one autocommitted
/// statement: (ids, (id, lease) pairs, worker).
pub(super) const START_MANY: &str = concat!(
    "UPDATE {schema}.jobs_hot FORCE INDEX (`PRIMARY`) SET status = 2, attempt = attempt + 1, started_at = ",
    now_us!(),
    ", heartbeat_at = ",
    now_us!(),
    ", updated_at = ",
    now_us!(),
    " WHERE id IN ({ids}) AND (id, lease) IN ({pairs}) AND worker_id = ? AND status = 1"
);

/// Which of these leases have their job Processing (started now or by an earlier call with
/// the same lease): (ids, (id, lease) pairs, worker).
pub(super) const STARTED_MANY: &str =
    "SELECT id FROM {schema}.jobs_hot FORCE INDEX (`PRIMARY`) WHERE id IN ({ids}) AND (id, lease) IN ({pairs}) \
     AND worker_id = ? AND status = 2";

/// Hot -> archive for the held jobs of these leases, locking them (`FOR UPDATE`: under
/// READ COMMITTED the source of an `INSERT ... SELECT` is otherwise read without a lock)
/// in id order: (ids, (id, lease) pairs, worker). A Fetched row is archived as if started
/// now (`attempt + 1`, `started_at` now, not an earlier attempt's).
pub(super) const ARCHIVE_MANY: &str = concat!(
    "INSERT INTO {schema}.jobs_archive (",
    cols!(),
    ", finished_at, output) SELECT id, queue, kind, payload, tags, idempotency_key, priority, 2, \
     attempt + (status = 1), max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at, \
     CASE WHEN status = 1 THEN ",
    now_us!(),
    " ELSE started_at END, ",
    now_us!(),
    ", last_error, cancel_requested, created_by, concurrency_key, ",
    now_us!(),
    ", output FROM {schema}.jobs_hot FORCE INDEX (`PRIMARY`) WHERE id IN ({ids}) AND (id, lease) IN ({pairs}) \
     AND worker_id = ? AND status IN (1, 2) FOR UPDATE"
);

/// Deletes the rows `archive_many` copied and locked: (ids, (id, lease) pairs, worker).
pub(super) const DELETE_MANY: &str =
    "DELETE h FROM {schema}.jobs_hot AS h FORCE INDEX (`PRIMARY`) WHERE id IN ({ids}) \
     AND (id, lease) IN ({pairs}) AND worker_id = ? AND status IN (1, 2)";

/// Which of these leases this worker completed (now or by an earlier call with the same
/// lease): (ids, (id, lease) pairs, worker).
pub(super) const COMPLETED_MANY: &str =
    "SELECT id FROM {schema}.jobs_archive FORCE INDEX (`PRIMARY`) WHERE id IN ({ids}) AND (id, lease) IN ({pairs}) \
     AND worker_id = ?";

/// The outcome a fail with this lease already wrote: (id, lease, id, lease, worker).
pub(super) const FAIL_STANDING: &str = "SELECT scheduled_at AS at, NULL AS reason FROM {schema}.jobs_hot \
     WHERE id = ? AND lease = ? AND status IN (0, 3) AND scheduled_at IS NOT NULL \
     UNION ALL SELECT NULL AS at, reason FROM {schema}.jobs_dlq \
     WHERE id = ? AND lease = ? AND worker_id = ? AND reason <> 'zombie'";

/// Removes a moved hot row: (id).
pub(super) const DELETE_HOT: &str = "DELETE FROM {schema}.jobs_hot WHERE id = ?";

/// Back to Pending (retry, snooze): (due at, now, due at, now, error or NULL, attempts to
/// give back, id).
pub(super) const BACK_TO_PENDING: &str = "UPDATE {schema}.jobs_hot SET status = CASE WHEN ? > ? THEN 3 ELSE 0 END, \
     worker_id = NULL, scheduled_at = ?, updated_at = ?, heartbeat_at = NULL, cancel_requested = 0, \
     last_error = COALESCE(?, last_error), attempt = GREATEST(attempt - ?, 0) WHERE id = ?";

/// Hot -> dead-letter for one locked id: (now, error or NULL, now, reason, id).
pub(super) const DEAD_LETTER: &str = concat!(
    "INSERT INTO {schema}.jobs_dlq (",
    cols!(),
    ", finished_at, reason, output) SELECT id, queue, kind, payload, tags, idempotency_key, priority, status, \
     attempt, max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at, started_at, ?, \
     COALESCE(?, last_error), cancel_requested, created_by, concurrency_key, ?, ?, output FROM {schema}.jobs_hot \
     WHERE id = ?"
);

/// Fetched -> Pending for a job locked by `lock_held`: (now, id).
pub(super) const RELEASE: &str =
    "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, heartbeat_at = NULL, \
     updated_at = ? WHERE id = ?";
