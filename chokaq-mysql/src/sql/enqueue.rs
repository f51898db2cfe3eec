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

/// A unique job's key row, written or (when another job holds the key) locked: (key, job,
/// states, settings, end of period, now). `ON DUPLICATE KEY UPDATE` waits for a racing
/// inserter's commit and then holds the existing row's exclusive lock (an `INSERT` that fails
/// on the duplicate would hold a shared lock, and two such waiters deadlock on the upgrade).
pub(super) const UNIQUE_CLAIM_KEY: &str = "INSERT INTO {schema}.uniques \
     (unique_key, job_id, states, settings, expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?) \
     ON DUPLICATE KEY UPDATE unique_key = unique_key";

/// The holder of a key (locked by [`UNIQUE_CLAIM_KEY`]) and where it stands: (now, key).
/// Returns the holder, its table (`h`, `a`, `d`, or NULL: in none), a hot row's status and
/// attempt, whether it is due later than now, a dead letter's reason.
pub(super) const UNIQUE_HOLDER: &str = "SELECT u.job_id, \
     CASE WHEN h.id IS NOT NULL THEN 'h' WHEN a.id IS NOT NULL THEN 'a' WHEN d.id IS NOT NULL THEN 'd' END AS place, \
     CAST(h.status AS SIGNED) AS status, CAST(h.attempt AS SIGNED) AS attempt, \
     CAST(COALESCE(h.scheduled_at > ?, 0) AS SIGNED) AS later, d.reason \
     FROM {schema}.uniques u \
     LEFT JOIN {schema}.jobs_hot h ON h.id = u.job_id \
     LEFT JOIN {schema}.jobs_archive a ON a.id = u.job_id \
     LEFT JOIN {schema}.jobs_dlq d ON d.id = u.job_id \
     WHERE u.unique_key = ?";

/// The take-over, under the row lock: (job, states, settings, end of period, now, key, the
/// holder seen under the lock).
pub(super) const UNIQUE_TAKE: &str = "UPDATE {schema}.uniques SET job_id = ?, states = ?, settings = ?, \
     expires_at = ?, created_at = ? WHERE unique_key = ? AND job_id = ?";

/// (job id): the key it holds, its settings and the end of its period.
pub(super) const UNIQUE_OF: &str =
    "SELECT unique_key, settings, expires_at FROM {schema}.uniques WHERE job_id = ? ORDER BY unique_key LIMIT 1";

/// Pruning, the lock: at most (limit) key rows from (a random key) on, skipping rows an
/// enqueue holds.
pub(super) const UNIQUE_PRUNE_FROM: &str = "SELECT unique_key FROM {schema}.uniques WHERE unique_key >= ? \
     ORDER BY unique_key LIMIT ? FOR UPDATE SKIP LOCKED";

/// Pruning, the wrap-around part: (a random key, limit).
pub(super) const UNIQUE_PRUNE_WRAP: &str = "SELECT unique_key FROM {schema}.uniques WHERE unique_key < ? \
     ORDER BY unique_key LIMIT ? FOR UPDATE SKIP LOCKED";

/// Pruning, the delete (a new statement after the locks: READ COMMITTED reads the latest
/// commits): of the locked keys (a JSON array), those that decide nothing any more: the job is
/// not hot, and the states count no finished state (224), or the period ended before (now),
/// or the job is in no table.
pub(super) const UNIQUE_PRUNE: &str = "DELETE FROM {schema}.uniques WHERE unique_key IN \
     (SELECT j.k FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(64) PATH '$')) AS j) \
     AND NOT EXISTS (SELECT 1 FROM {schema}.jobs_hot h WHERE h.id = uniques.job_id) \
     AND ((states & 224) = 0 OR expires_at <= ? \
     OR (NOT EXISTS (SELECT 1 FROM {schema}.jobs_archive a WHERE a.id = uniques.job_id) \
     AND NOT EXISTS (SELECT 1 FROM {schema}.jobs_dlq d WHERE d.id = uniques.job_id)))";
