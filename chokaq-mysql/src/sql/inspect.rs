//! The statements of the inspect room: stats and `get_job`.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

pub(super) const STATS_HOT: &str = "SELECT queue, status, count(*) AS n FROM {schema}.jobs_hot GROUP BY queue, status";

/// The oldest due Pending job per queue: (now).
pub(super) const STATS_LAG: &str = "SELECT queue, min(due_at) AS due FROM {schema}.jobs_hot \
     WHERE status IN (0, 3) AND due_at <= ? GROUP BY queue";

pub(super) const STATS_ARCHIVE: &str = "SELECT queue, count(*) AS n FROM {schema}.jobs_archive GROUP BY queue";

/// Dead letters per queue, the cancelled ones counted apart.
pub(super) const STATS_DEAD: &str =
    "SELECT queue, count(*) AS n, CAST(sum(reason = 'cancelled') AS SIGNED) AS cancelled \
     FROM {schema}.jobs_dlq GROUP BY queue";

/// Every control row: a queue with one is listed even with no job.
pub(super) const STATS_QUEUES: &str =
    "SELECT name, max_workers, is_paused, is_active, zombie_timeout_us, zombie_policy, \
     fetched_timeout_us, updated_at, key_max_workers, rate_jobs, rate_per_ms, rate_by_key FROM {schema}.queues";

/// Fetched + Processing jobs per queue and concurrency key (the `busiest_keys`; a range of
/// `jobs_hot_key_running` per queue).
pub(super) const STATS_KEYS: &str =
    "SELECT queue, running_key AS k, count(*) AS n FROM {schema}.jobs_hot FORCE INDEX (jobs_hot_key_running) \
     WHERE running_key IS NOT NULL GROUP BY queue, running_key";

pub(super) const GET_HOT: &str = concat!(select_job!(jobs_hot), " WHERE id = ?");

pub(super) const GET_ARCHIVE: &str = concat!(select_job!(jobs_archive), " WHERE id = ?");

pub(super) const GET_DEAD: &str = concat!(select_job!(jobs_dlq), " WHERE id = ?");
