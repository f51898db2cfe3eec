//! The statements of the enqueue room: `enqueue_many`.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// The live job holding an idempotency key in a queue: (queue, key).
pub(super) const FIND_BY_KEY: &str = "SELECT id FROM {schema}.jobs_hot WHERE queue = ? AND idempotency_key = ?";

/// (id, queue, kind, payload, tags, key, priority, scheduled at, now, max attempts,
/// scheduled at, now, now, created by, concurrency key): Scheduled (3) when due later than
/// now.
pub(super) const INSERT_JOB: &str =
    "INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, idempotency_key, priority, status, \
     attempt, max_attempts, scheduled_at, created_at, updated_at, created_by, concurrency_key) \
     VALUES (?, ?, ?, ?, ?, ?, ?, CASE WHEN ? > ? THEN 3 ELSE 0 END, 0, ?, ?, ?, ?, ?, ?)";
