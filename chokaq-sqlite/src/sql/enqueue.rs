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
