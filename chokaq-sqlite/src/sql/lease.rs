//! The statements of the lease room: the guarded lease operations: start, heartbeat, complete, fail, release.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// Fetched -> Processing: `?1` now, `?2` id, `?3` lease, `?4` worker. Also what `fail` does
/// first to a held Fetched row (its run counts before the outcome).
pub(super) const START: &str =
    "UPDATE {schema}.jobs_hot SET status = 2, attempt = attempt + 1, started_at = ?1, heartbeat_at = ?1, \
     updated_at = ?1 WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status = 1";

/// Whether this lease already started the job (a repeated start is done again and writes
/// nothing): `?1` id, `?2` lease, `?3` worker.
pub(super) const STARTED_WITH: &str =
    "SELECT 1 FROM {schema}.jobs_hot WHERE id = ?1 AND lease = ?2 AND worker_id = ?3 AND status = 2";

/// A held Fetched or Processing job: `?1` now, `?2` id, `?3` lease, `?4` worker.
pub(super) const HEARTBEAT: &str = "UPDATE {schema}.jobs_hot SET heartbeat_at = ?1, updated_at = ?1 \
     WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status IN (1, 2) RETURNING cancel_requested";

/// Hot -> archive for one held Fetched or Processing lease: `?1` now, `?2` id, `?3` lease,
/// `?4` worker. The columns are the hot row's with `updated_at` set to the move time; a
/// Fetched row is archived as if started now (its run counts: `attempt + 1`, `started_at`
/// now, not an earlier attempt's, status Processing).
pub(super) const ARCHIVE_HELD: &str = concat!(
    "INSERT INTO {schema}.jobs_archive (",
    cols!(),
    ", finished_at, output) SELECT id, queue, kind, payload, tags, idempotency_key, priority, 2, \
     attempt + (status = 1), max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at, \
     CASE WHEN status = 1 THEN ?1 ELSE started_at END, ?1, last_error, cancel_requested, created_by, \
     concurrency_key, ?1, output \
     FROM {schema}.jobs_hot \
     WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status IN (1, 2)"
);

/// Whether this worker already completed the job with this lease (a repeated complete: the
/// outcome stands): `?1` id, `?2` lease, `?3` worker.
pub(super) const COMPLETED_WITH: &str =
    "SELECT 1 FROM {schema}.jobs_archive WHERE id = ?1 AND lease = ?2 AND worker_id = ?3";

/// The outcome a fail with this lease already wrote, if it did: a retry or snooze leaves its
/// lease on the Pending row (`at`, its due time; release, rescue and requeue clear the
/// lease); a dead letter keeps lease and worker (`reason`; not a zombie rescue filed, whose
/// lease was lost): `?1` id, `?2` lease, `?3` worker.
pub(super) const FAIL_STANDING: &str = "SELECT scheduled_at AS at, NULL AS reason FROM {schema}.jobs_hot \
     WHERE id = ?1 AND lease = ?2 AND status IN (0, 3) AND scheduled_at IS NOT NULL \
     UNION ALL SELECT NULL, reason FROM {schema}.jobs_dlq \
     WHERE id = ?1 AND lease = ?2 AND worker_id = ?3 AND reason <> 'zombie'";

/// Removes a moved hot row: `?1` id.
pub(super) const DELETE_HOT: &str = "DELETE FROM {schema}.jobs_hot WHERE id = ?1";

/// The state of a held Fetched or Processing lease: `?1` id, `?2` lease, `?3` worker.
pub(super) const HELD_ATTEMPTS: &str = "SELECT status, attempt, max_attempts, cancel_requested FROM {schema}.jobs_hot \
     WHERE id = ?1 AND lease = ?2 AND worker_id = ?3 AND status IN (1, 2)";

/// Back to Pending (retry, snooze): `?1` due at, `?2` now, `?3` error (NULL keeps the
/// last one), `?4` attempts to give back, `?5` id.
pub(super) const BACK_TO_PENDING: &str = "UPDATE {schema}.jobs_hot SET status = CASE WHEN ?1 > ?2 THEN 3 ELSE 0 END, \
     worker_id = NULL, scheduled_at = ?1, \
     updated_at = ?2, heartbeat_at = NULL, cancel_requested = 0, last_error = coalesce(?3, last_error), \
     attempt = max(attempt - ?4, 0) WHERE id = ?5";

/// Hot -> dead-letter for one id: `?1` now, `?2` id, `?3` reason, `?4` error (NULL keeps
/// `last_error`). The columns are the hot row's with `updated_at` set to the move time.
pub(super) const DEAD_LETTER: &str = concat!(
    "INSERT INTO {schema}.jobs_dlq (",
    cols!(),
    ", finished_at, reason, output) SELECT id, queue, kind, payload, tags, idempotency_key, priority, status, \
     attempt, max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at, started_at, ?1, \
     coalesce(?4, last_error), cancel_requested, created_by, concurrency_key, ?1, ?3, output FROM {schema}.jobs_hot \
     WHERE id = ?2"
);

/// Fetched -> Pending, unless a cancel was requested (see `release_cancelled`): `?1` now,
/// `?2` id, `?3` lease, `?4` worker.
pub(super) const RELEASE: &str =
    "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, heartbeat_at = NULL, \
     updated_at = ?1 \
     WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status = 1 AND cancel_requested = 0 RETURNING queue";

/// A held Fetched lease whose job has a cancel request (released: dead-lettered
/// `cancelled`, never put back): `?1` id, `?2` lease, `?3` worker.
pub(super) const RELEASE_CANCELLED: &str = "SELECT 1 FROM {schema}.jobs_hot \
     WHERE id = ?1 AND lease = ?2 AND worker_id = ?3 AND status = 1 AND cancel_requested = 1";
