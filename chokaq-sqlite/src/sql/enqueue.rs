//! The statements of the enqueue room: `enqueue_many`.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// The live job holding an idempotency key in a queue (keys are scoped per queue): `?1`
/// queue, `?2` key.
pub(super) const FIND_BY_KEY: &str = "SELECT id FROM {schema}.jobs_hot WHERE queue = ?1 AND idempotency_key = ?2";

/// `?1` id, `?2` queue, `?3` kind, `?4` payload, `?5` tags, `?6` key, `?7` priority,
/// `?8` max attempts, `?9` scheduled at, `?10` now, `?11` created by, `?12` concurrency key.
pub(super) const INSERT_JOB: &str =
    "INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, idempotency_key, priority, status, \
     attempt, max_attempts, scheduled_at, created_at, updated_at, created_by, concurrency_key) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, CASE WHEN ?9 > ?10 THEN 3 ELSE 0 END, 0, ?8, ?9, ?10, ?10, ?11, ?12)";

/// The holder of a unique key and where it stands (`docs/unique.md`): `?1` key, `?2` now (µs).
/// Returns the holder, its table (`h`, `a`, `d`, or NULL: in none), a hot row's status,
/// attempt and whether it is due later, a dead letter's reason. Read inside the enqueue's
/// write transaction, so no other writer can change the answer before the insert.
pub(super) const UNIQUE_HOLDER: &str = "SELECT u.job_id, \
     CASE WHEN h.id IS NOT NULL THEN 'h' WHEN a.id IS NOT NULL THEN 'a' WHEN d.id IS NOT NULL THEN 'd' END, \
     h.status, h.attempt, coalesce(h.scheduled_at > ?2, 0), d.reason \
     FROM {schema}.uniques u \
     LEFT JOIN {schema}.jobs_hot h ON h.id = u.job_id \
     LEFT JOIN {schema}.jobs_archive a ON a.id = u.job_id \
     LEFT JOIN {schema}.jobs_dlq d ON d.id = u.job_id \
     WHERE u.unique_key = ?1";

/// A job takes a unique key (a new row, or the row of a holder that no longer counts): `?1`
/// key, `?2` job, `?3` states, `?4` settings, `?5` end of the period (µs), `?6` now.
pub(super) const UNIQUE_TAKE: &str = "INSERT INTO {schema}.uniques \
     (unique_key, job_id, states, settings, expires_at, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
     ON CONFLICT (unique_key) DO UPDATE SET job_id = excluded.job_id, states = excluded.states, \
     settings = excluded.settings, expires_at = excluded.expires_at, created_at = excluded.created_at";

/// `?1` job id: the key it holds, its settings and the end of its period.
pub(super) const UNIQUE_OF: &str =
    "SELECT unique_key, settings, expires_at FROM {schema}.uniques WHERE job_id = ?1 ORDER BY unique_key LIMIT 1";

/// Pruning (`docs/unique.md`): of at most `?1` key rows from `?2` on in key order (wrapping
/// around), deletes those that decide nothing any more: the job is not hot, and the states
/// count no finished state (224), or the period ended before `?3` (µs), or the job is in no
/// table.
pub(super) const UNIQUE_PRUNE: &str = "DELETE FROM {schema}.uniques WHERE unique_key IN (\
     SELECT unique_key FROM (SELECT unique_key FROM {schema}.uniques WHERE unique_key >= ?2 \
     ORDER BY unique_key LIMIT ?1) \
     UNION ALL SELECT unique_key FROM (SELECT unique_key FROM {schema}.uniques WHERE unique_key < ?2 \
     ORDER BY unique_key LIMIT ?1) LIMIT ?1) \
     AND NOT EXISTS (SELECT 1 FROM {schema}.jobs_hot h WHERE h.id = uniques.job_id) \
     AND ((states & 224) = 0 OR expires_at <= ?3 \
     OR (NOT EXISTS (SELECT 1 FROM {schema}.jobs_archive a WHERE a.id = uniques.job_id) \
     AND NOT EXISTS (SELECT 1 FROM {schema}.jobs_dlq d WHERE d.id = uniques.job_id)))";
